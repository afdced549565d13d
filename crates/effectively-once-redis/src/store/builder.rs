//! How a [`RedisStore`] is made: the [`Builder`] and its options, the constructors from a URL or
//! the environment, and the rule a key prefix must follow. The builder's `Debug` hides the URL's
//! password.

use std::sync::Arc;
use std::time::Duration;

use effectively_once::{StoreError, StoreErrorKind};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{RedisStore, DEFAULT_EXPIRY_GRACE, DEFAULT_KEY_PREFIX, PREFIX_ENV, URL_ENV};
use crate::error::store_error;

/// Options for [`RedisStore`], from [`RedisStore::builder`]. Its `Debug` hides the URL's password.
#[derive(Clone)]
pub struct Builder {
    url: String,
    key_prefix: String,
    connection_timeout: Duration,
    response_timeout: Duration,
    reconnect_tries: usize,
    expiry_grace: Duration,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("url", &redacted(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("reconnect_tries", &self.reconnect_tries)
            .field("expiry_grace", &self.expiry_grace)
            .finish()
    }
}

/// `url` with its password hidden, for `Debug`: the password in the userinfo
/// (`redis://user:password@host`) and a `pass` or `password` query parameter (`redis+unix://`
/// URLs carry it there). The user name stays, as it names an identity, not a secret, and helps
/// to read a `WRONGPASS`. A URL that does not parse is hidden whole: where its password sits is
/// not known.
fn redacted(url: &str) -> String {
    const HIDDEN: &str = "REDACTED";
    let Some(mut parsed) = redis::parse_redis_url(url) else {
        return "<unparseable URL, hidden>".to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
        return "<URL hidden>".to_owned();
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let secret = matches!(name.as_ref(), "pass" | "password");
                (name.into_owned(), if secret { HIDDEN.to_owned() } else { value.into_owned() })
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.into()
}

/// `Ok` if `prefix` may prefix keys: one or more characters from `[A-Za-z0-9._-]`. Without `:`
/// (the delimiter the store adds), a key names one prefix and one id; see [`DEFAULT_KEY_PREFIX`].
pub(super) fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !prefix.is_empty() && prefix.chars().all(allowed) {
        return Ok(());
    }
    let hint = match prefix.strip_suffix(':') {
        Some(bare) if !bare.is_empty() && bare.chars().all(allowed) => {
            format!(" (write it `{bare}`: the store adds the `:` itself, so its keys stay the same)")
        }
        _ => String::new(),
    };
    Err(StoreError::new(
        StoreErrorKind::Misconfigured,
        format!(
            "key prefix {prefix:?}: expected one or more characters from [A-Za-z0-9._-]{hint}; keys are \
             `{{prefix}}:{{id}}`, so a prefix without `:` keeps every store's keys apart"
        ),
    ))
}

impl Builder {
    /// The prefix of every key (default [`DEFAULT_KEY_PREFIX`]): one per application sharing a
    /// server; one or more characters from `[A-Za-z0-9._-]`, else [`Builder::connect`] fails
    /// with `Misconfigured`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The longest a connection attempt waits (default 1 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// The longest a call waits for its answer (default 1 s). A call that times out may have
    /// been carried out: the core treats it as a lost answer (a retried claim finds its own
    /// record, a retried completion its own completed record).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Reconnection attempts after the connection drops (default 3, backing off from 100 ms).
    pub fn reconnect_tries(mut self, tries: usize) -> Self {
        self.reconnect_tries = tries;
        self
    }

    /// How long a key outlives the end of its record's window, by the writer's clock and by
    /// the server's (default [`DEFAULT_EXPIRY_GRACE`]); covers the clock differences between
    /// callers and the server (see [`RedisStore`] on expiry).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// Connects (eagerly: a wrong host, password or TLS set-up fails here, at start-up). An
    /// invalid key prefix is `Misconfigured`, before any connection.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        check_prefix(&self.key_prefix)?;
        #[cfg(feature = "tls")]
        if self.url.starts_with("rediss://") {
            // The process-wide crypto provider for rustls; an error means one is installed.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let client = redis::Client::open(self.url.as_str()).map_err(|e| store_error("url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.reconnect_tries);
        let connection =
            ConnectionManager::new_with_config(client, config).await.map_err(|e| store_error("connect", e))?;
        Ok(RedisStore {
            connection,
            key_prefix: self.key_prefix.into(),
            expiry_grace: self.expiry_grace,
            requests: Arc::default(),
        })
    }
}

impl RedisStore {
    /// Options for a store at `url`: `redis://[user:password@]host:port[/db]`, or `rediss://`
    /// for TLS (feature `tls`, on by default).
    pub fn builder(url: impl Into<String>) -> Builder {
        Builder {
            url: url.into(),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            reconnect_tries: 3,
            expiry_grace: DEFAULT_EXPIRY_GRACE,
        }
    }

    /// Connects to `url` with keys under `key_prefix` and the default options.
    pub async fn connect(url: &str, key_prefix: &str) -> Result<RedisStore, StoreError> {
        Self::builder(url).key_prefix(key_prefix).connect().await
    }

    /// Connects with the URL from [`URL_ENV`] (required) and the prefix from [`PREFIX_ENV`]
    /// (default [`DEFAULT_KEY_PREFIX`]). A missing URL, a value that is not UTF-8, or an invalid
    /// prefix is `Misconfigured`.
    pub async fn from_env() -> Result<RedisStore, StoreError> {
        let url = std::env::var(URL_ENV).map_err(|_| {
            StoreError::new(StoreErrorKind::Misconfigured, format!("{URL_ENV} is not set, or not UTF-8"))
        })?;
        let prefix = match std::env::var(PREFIX_ENV) {
            Ok(prefix) => prefix,
            Err(std::env::VarError::NotPresent) => DEFAULT_KEY_PREFIX.to_owned(),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(StoreError::new(StoreErrorKind::Misconfigured, format!("{PREFIX_ENV} is not UTF-8")))
            }
        };
        Self::builder(url).key_prefix(prefix).connect().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_hides_passwords_only() {
        for (url, shown) in [
            ("rediss://user:hunter2@cache.example:6379", "rediss://user:REDACTED@cache.example:6379"),
            ("redis://:hunter2@127.0.0.1:6380/2", "redis://:REDACTED@127.0.0.1:6380/2"),
            ("redis://user@127.0.0.1:6380", "redis://user@127.0.0.1:6380"),
            ("redis://127.0.0.1:6380?protocol=resp3", "redis://127.0.0.1:6380?protocol=resp3"),
            ("redis+unix:///tmp/r.sock?user=u&pass=hunter2", "redis+unix:///tmp/r.sock?user=u&pass=REDACTED"),
            ("redis://u:hunter2@host:notaport", "<unparseable URL, hidden>"),
            ("hunter2", "<unparseable URL, hidden>"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }

    #[test]
    fn prefixes_without_the_delimiter_only() {
        for good in ["idempotency", "a", "App-2_v1.x", "0"] {
            check_prefix(good).unwrap();
        }
        for bad in ["", ":", "idempotency:", "a:b", "a#b", "{tag}", "a b", "caf\u{e9}"] {
            assert_eq!(check_prefix(bad).unwrap_err().kind(), StoreErrorKind::Misconfigured, "{bad:?}");
        }
    }
}
