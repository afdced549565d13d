//! Redis errors as [`StoreError`]s: one function, so callers ask "retry or give up?" by kind.

use effectively_once::{StoreError, StoreErrorKind};
use redis::RedisError;

/// The [`StoreErrorKind`] of a Redis client or server error.
///
/// - the connection (refused, dropped, timed out, I/O) and a server that cannot serve yet
///   (`LOADING`, `MASTERDOWN`, `READONLY` during a failover, `CLUSTERDOWN`): `Unavailable`;
/// - `BUSY` (another script runs past its time limit) and `TRYAGAIN`: `Throttled`;
/// - authentication and permissions (`NOAUTH`, `WRONGPASS`, `NOPERM`), a bad URL or TLS set-up,
///   and a cluster redirect (`MOVED`, `ASK`, `CROSSSLOT`: the store was pointed at a cluster
///   through a plain connection): `Misconfigured`;
/// - `WRONGTYPE` (the key holds no record hash), a reply of the wrong shape: `Malformed`;
/// - anything else: `Other`.
pub fn store_error_kind(error: &RedisError) -> StoreErrorKind {
    use redis::ErrorKind as K;
    // Before Redis 7, an error raised by a command inside a script comes back as `ERR Error
    // running script ... WRONGTYPE ...`: the command's own code is inside the message.
    let code = match (error.code(), error.detail()) {
        (Some("ERR"), Some(detail)) if detail.contains("script") => {
            KNOWN.iter().copied().find(|code| detail.contains(&format!("{code} "))).or(Some("ERR"))
        }
        (code, _) => code,
    };
    match code {
        Some("BUSY" | "TRYAGAIN") => return StoreErrorKind::Throttled,
        // OOM: maxmemory reached under `noeviction`; writes resume once keys expire or memory grows.
        Some("LOADING" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN" | "OOM") => return StoreErrorKind::Unavailable,
        Some("NOAUTH" | "WRONGPASS" | "NOPERM" | "MOVED" | "ASK" | "CROSSSLOT") => {
            return StoreErrorKind::Misconfigured
        }
        Some("WRONGTYPE") => return StoreErrorKind::Malformed,
        _ => {}
    }
    if error.is_io_error() || error.is_timeout() || error.is_connection_dropped() || error.is_connection_refusal() {
        return StoreErrorKind::Unavailable;
    }
    match error.kind() {
        K::AuthenticationFailed | K::InvalidClientConfig => StoreErrorKind::Misconfigured,
        K::Parse | K::UnexpectedReturnType => StoreErrorKind::Malformed,
        K::Io | K::ClusterConnectionNotFound => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    }
}

/// The server codes [`store_error_kind`] tells apart.
const KNOWN: [&str; 11] = [
    "BUSY",
    "TRYAGAIN",
    "LOADING",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    "OOM",
    "WRONGTYPE",
];

/// A [`StoreError`] for `error`, met while doing `what`.
pub(crate) fn store_error(what: &str, error: RedisError) -> StoreError {
    StoreError::new(store_error_kind(&error), format!("redis {what}: {error}")).with_source(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{make_extension_error, ErrorKind};

    fn server(code: &str) -> RedisError {
        make_extension_error(code.to_owned(), Some("detail".to_owned()))
    }

    #[test]
    fn server_codes() {
        for (code, kind) in [
            ("BUSY", StoreErrorKind::Throttled),
            ("TRYAGAIN", StoreErrorKind::Throttled),
            ("LOADING", StoreErrorKind::Unavailable),
            ("MASTERDOWN", StoreErrorKind::Unavailable),
            ("READONLY", StoreErrorKind::Unavailable),
            ("NOAUTH", StoreErrorKind::Misconfigured),
            ("WRONGPASS", StoreErrorKind::Misconfigured),
            ("NOPERM", StoreErrorKind::Misconfigured),
            ("MOVED", StoreErrorKind::Misconfigured),
            ("WRONGTYPE", StoreErrorKind::Malformed),
            ("OOM", StoreErrorKind::Unavailable),
            ("SOMETHINGNEW", StoreErrorKind::Other),
        ] {
            assert_eq!(store_error_kind(&server(code)), kind, "{code}");
        }
    }

    /// Redis before 7 wraps a script's command error in `ERR Error running script`.
    #[test]
    fn codes_inside_a_script_error() {
        let wrapped = |inner: &str| {
            make_extension_error(
                "ERR".to_owned(),
                Some(format!(
                    "Error running script (call to f_0123): @user_script:10: {inner} Operation against a key"
                )),
            )
        };
        assert_eq!(store_error_kind(&wrapped("WRONGTYPE")), StoreErrorKind::Malformed);
        assert_eq!(store_error_kind(&wrapped("OOM")), StoreErrorKind::Unavailable);
        assert_eq!(store_error_kind(&wrapped("@something")), StoreErrorKind::Other);
    }

    #[test]
    fn client_side() {
        let io = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        assert_eq!(store_error_kind(&io), StoreErrorKind::Unavailable);
        let refused = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        assert_eq!(store_error_kind(&refused), StoreErrorKind::Unavailable);
        let url = RedisError::from((ErrorKind::InvalidClientConfig, "bad url"));
        assert_eq!(store_error_kind(&url), StoreErrorKind::Misconfigured);
        let shape = RedisError::from((ErrorKind::UnexpectedReturnType, "not an array"));
        assert_eq!(store_error_kind(&shape), StoreErrorKind::Malformed);
        assert_eq!(store_error_kind(&io).retry(), effectively_once::Retry::Now);
        assert_eq!(store_error_kind(&shape).retry(), effectively_once::Retry::Never);
    }
}
