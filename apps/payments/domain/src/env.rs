//! The environment of a function that posts payments to the ledger, whatever triggers it (the
//! SQS payments consumer, the Kafka example): its tables and idempotency settings, and the
//! ledger built on them.

use effectively_once::Config;
use effectively_once_dynamodb::DynamoDbStore;

use crate::Ledger;

/// The environment contract of a ledger-posting function: table names, and the idempotency
/// settings.
#[derive(Debug, Clone)]
pub struct LedgerEnv {
    /// `IDEMPOTENCY_TABLE`: the payments' records (applied and rejected).
    pub idempotency_table: String,
    /// `LEDGER_TABLE`: entries and balances.
    pub ledger_table: String,
    /// `OUTBOX_TABLE`: receipt rows; optional (no receipts without it).
    pub outbox_table: Option<String>,
    /// [`Config::from_env_with`]: the disable switch (`POWERTOOLS_IDEMPOTENCY_DISABLED`) is read,
    /// and the ledger ignores it: a post keeps its once-only condition whatever the environment
    /// says ([`crate::warn_if_disabled`], which `main` calls at cold start).
    pub config: Config,
}

impl LedgerEnv {
    /// Reads the environment; a missing variable is named in the error.
    pub fn from_env() -> Result<LedgerEnv, String> {
        LedgerEnv::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset): tests pass a map.
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<LedgerEnv, String> {
        let required = |name: &str| var(name).ok_or_else(|| format!("environment variable {name} is not set"));
        Ok(LedgerEnv {
            idempotency_table: required("IDEMPOTENCY_TABLE")?,
            ledger_table: required("LEDGER_TABLE")?,
            outbox_table: var("OUTBOX_TABLE").filter(|t| !t.is_empty()),
            config: Config::from_env_with(&var),
        })
    }
}

impl Ledger {
    /// A ledger on the tables `env` names, with its config. The disable switch in it does not
    /// reach the ledger: [`Ledger::post`] never drops its once-only condition.
    pub fn from_env(client: aws_sdk_dynamodb::Client, env: &LedgerEnv) -> Self {
        let store = DynamoDbStore::new(client, &env.idempotency_table);
        Ledger::new(store, &env.ledger_table, env.outbox_table.clone()).with_config(env.config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_tables_are_read_and_a_missing_one_is_named() {
        let env = LedgerEnv::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "idem"), ("LEDGER_TABLE", "ledger")])).unwrap();
        assert_eq!((env.idempotency_table.as_str(), env.ledger_table.as_str()), ("idem", "ledger"));
        assert_eq!(env.outbox_table, None, "no outbox: no receipts");
        let empty = vars(&[("IDEMPOTENCY_TABLE", "i"), ("LEDGER_TABLE", "l"), ("OUTBOX_TABLE", "")]);
        assert_eq!(LedgerEnv::from_env_with(empty).unwrap().outbox_table, None, "set but empty is unset");
        let missing = LedgerEnv::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "idem")])).unwrap_err();
        assert!(missing.contains("LEDGER_TABLE"), "{missing}");
    }
}
