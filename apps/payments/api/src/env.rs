//! [`Env`]: the environment the function reads, each variable checked, a malformed one named.

use std::time::Duration;

use effectively_once::Config;

use crate::caller::{Producers, API_PRODUCERS};

/// How long a key's record (its body's hash and its answer) is kept, unless
/// `API_DEDUP_WINDOW_SECONDS` says otherwise: for good (100 years), because an event id is
/// unique in the ledger for good, and a record that DynamoDB's TTL has deleted can no longer
/// refuse another body under its key.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// The largest body accepted unless `API_MAX_BODY_BYTES` says otherwise: a payment's fields take
/// a few hundred bytes; anything over 8 KiB is answered `413` before it is parsed.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024;

/// The environment the function reads.
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMPOTENCY_TABLE`: the API's records, under [`PREFIX`](crate::PREFIX).
    pub idempotency_table: String,
    /// `PAYMENTS_QUEUE_URL`: where payment events go.
    pub queue_url: String,
    /// `PAYMENTS_QUEUE_FIFO` (`true`/`false`, any case), else whether the URL ends in `.fifo`.
    pub fifo: bool,
    /// The dedup window from `API_DEDUP_WINDOW_SECONDS` (default [`DEFAULT_DEDUP_WINDOW`]).
    pub config: Config,
    /// `API_MAX_BODY_BYTES` (default [`DEFAULT_MAX_BODY_BYTES`]): larger bodies get `413`.
    pub max_body_bytes: usize,
    /// `API_PRODUCERS` ([`Producers`]): who may call, under which producer, for which accounts;
    /// unset or empty, every caller, the event id the key.
    pub producers: Producers,
}

impl Env {
    /// Reads the process environment; a missing or malformed variable is named in the error.
    pub fn from_env() -> Result<Env, String> {
        Env::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset): tests pass a map.
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<Env, String> {
        let required = |name: &str| var(name).ok_or_else(|| format!("environment variable {name} is not set"));
        let queue_url = required("PAYMENTS_QUEUE_URL")?;
        let fifo = match var("PAYMENTS_QUEUE_FIFO").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") => queue_url.ends_with(".fifo"),
            Some("true" | "1" | "yes") => true,
            Some("false" | "0" | "no") => false,
            Some(other) => return Err(format!("PAYMENTS_QUEUE_FIFO must be true or false, is {other:?}")),
        };
        let window =
            match var("API_DEDUP_WINDOW_SECONDS") {
                None => DEFAULT_DEDUP_WINDOW,
                Some(s) => Duration::from_secs(s.trim().parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("API_DEDUP_WINDOW_SECONDS must be a positive number of seconds, is {s:?}")
                })?),
            };
        let max_body_bytes = match var("API_MAX_BODY_BYTES") {
            None => DEFAULT_MAX_BODY_BYTES,
            Some(s) => s
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("API_MAX_BODY_BYTES must be a positive number of bytes, is {s:?}"))?,
        };
        let producers = Producers::parse(&var(API_PRODUCERS).unwrap_or_default())?;
        Ok(Env {
            max_body_bytes,
            producers,
            idempotency_table: required("IDEMPOTENCY_TABLE")?,
            queue_url,
            fifo,
            config: Config::from_env_with(&var).with_dedup_window(window),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_reads_the_window_and_the_queue_type() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let env =
            Env::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "t"), ("PAYMENTS_QUEUE_URL", "http://q/p.fifo")])).unwrap();
        assert!(env.fifo);
        assert_eq!(env.config.dedup_window(), DEFAULT_DEDUP_WINDOW);
        let env = Env::from_env_with(vars(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("PAYMENTS_QUEUE_URL", "http://q/p"),
            ("API_DEDUP_WINDOW_SECONDS", "60"),
        ]))
        .unwrap();
        assert!(!env.fifo);
        assert_eq!(env.config.dedup_window(), Duration::from_secs(60));
        assert!(Env::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "t")])).unwrap_err().contains("PAYMENTS_QUEUE_URL"));
        for (value, fifo) in [("TRUE", true), ("True", true), (" yes ", true), ("FALSE", false), ("No", false)] {
            let env = Env::from_env_with(|name: &str| match name {
                "IDEMPOTENCY_TABLE" => Some("t".into()),
                "PAYMENTS_QUEUE_URL" => Some("http://q/p".into()),
                "PAYMENTS_QUEUE_FIFO" => Some(value.into()),
                _ => None,
            });
            assert_eq!(env.unwrap().fifo, fifo, "{value}");
        }
    }

    #[test]
    fn a_malformed_producers_variable_fails_the_function_naming_it() {
        let with = |producers: &'static str| {
            Env::from_env_with(move |name: &str| match name {
                "IDEMPOTENCY_TABLE" => Some("t".into()),
                "PAYMENTS_QUEUE_URL" => Some("http://q/p".into()),
                "API_PRODUCERS" => Some(producers.into()),
                _ => None,
            })
        };
        assert!(with("").unwrap().producers.names().next().is_none(), "empty: the template's default, no producer");
        let two = r#"{"a": {"principals": ["arn:aws:iam::111122223333:user/a"], "accounts": ["*"]},
                      "b": {"principals": ["arn:aws:iam::111122223333:user/b"], "accounts": ["*"]}}"#;
        assert!(with(two).unwrap().producers.scoped());
        let error = with(r#"{"a": {"principals": ["a-role"], "accounts": ["*"]}}"#).unwrap_err();
        assert!(error.starts_with("API_PRODUCERS: producer \"a\": principal \"a-role\""), "{error}");
    }
}
