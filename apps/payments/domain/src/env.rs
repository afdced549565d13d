//! The environment of a function that posts payments to the ledger, whatever triggers it (the
//! SQS payments consumer, the Kafka example): its tables and idempotency settings, and the
//! ledger built on them.

use effectively_once::Config;
use effectively_once_dynamodb::DynamoDbStore;

use crate::{Ledger, Preread};

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
    /// `LEDGER_PREREAD` ([`crate::ledger::PREREAD_VAR`]): when a batch reads its records before
    /// its transaction, `off`, `redelivered`, `auto` or `always`; unset or empty is `auto`.
    pub preread: Preread,
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
            preread: Preread::from_env_value(var(crate::ledger::PREREAD_VAR).as_deref())?,
        })
    }
}

impl Ledger {
    /// A ledger on the tables `env` names, with its config. The disable switch in it does not
    /// reach the ledger: [`Ledger::post`] never drops its once-only condition.
    pub fn from_env(client: aws_sdk_dynamodb::Client, env: &LedgerEnv) -> Self {
        let store = DynamoDbStore::new(client, &env.idempotency_table);
        Ledger::new(store, &env.ledger_table, env.outbox_table.clone())
            .with_config(env.config.clone())
            .with_preread(env.preread)
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

    #[test]
    fn the_preread_strategy_is_read_defaults_to_auto_and_a_typo_is_named() {
        assert_eq!(
            LedgerEnv::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "i"), ("LEDGER_TABLE", "l")])).unwrap().preread,
            Preread::Auto
        );
        let off = vars(&[("IDEMPOTENCY_TABLE", "i"), ("LEDGER_TABLE", "l"), ("LEDGER_PREREAD", "off")]);
        let env = LedgerEnv::from_env_with(off).unwrap();
        assert_eq!(env.preread, Preread::Off);
        let client =
            aws_sdk_dynamodb::Client::from_conf(aws_sdk_dynamodb::Config::builder().behavior_version_latest().build());
        assert_eq!(Ledger::from_env(client, &env).preread_strategy(), Preread::Off, "the ledger takes it");
        let typo = vars(&[("IDEMPOTENCY_TABLE", "i"), ("LEDGER_TABLE", "l"), ("LEDGER_PREREAD", "sometimes")]);
        let refused = LedgerEnv::from_env_with(typo).unwrap_err();
        assert!(refused.contains("LEDGER_PREREAD") && refused.contains("sometimes"), "{refused}");
    }
}
