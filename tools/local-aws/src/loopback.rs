//! The local tool creates, purges and deletes tables and queues wherever the SDK points, so it
//! refuses an endpoint off this machine before its first call, unless told otherwise
//! (`--allow-remote`, or `LOCAL_ALLOW_REMOTE=1`).

use crate::error::Result;

/// The environment variable that lets the local tool use an endpoint off this machine.
pub const ALLOW_REMOTE_VAR: &str = "LOCAL_ALLOW_REMOTE";

/// Whether the environment allows a remote endpoint: `LOCAL_ALLOW_REMOTE=1`.
pub fn allowed_by_env() -> bool {
    std::env::var_os(ALLOW_REMOTE_VAR).is_some_and(|v| v == "1")
}

/// Whether `endpoint` (a URL) is on this machine: its host is `localhost`, an IPv4 loopback
/// address (`127.0.0.0/8`) or `::1`. Anything else (another host, an unparsable URL, none at
/// all, which the SDK takes to mean Amazon's endpoints) is not.
pub fn is_loopback(endpoint: &str) -> bool {
    // hyper's `Uri` (the http crate's, already in the tree) parses the authority as RFC 3986 does.
    let Ok(uri) = endpoint.parse::<hyper::Uri>() else { return false };
    let Some(host) = uri.host() else { return false };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        Err(_) => false,
    }
}

/// The endpoints the tool's SDK clients would reach, as `(variable, url)`: `endpoint` (what it
/// sets on every client: `AWS_ENDPOINT_URL`, or the local AWS) and each service's own
/// `AWS_ENDPOINT_URL_<SERVICE>` in `vars`, which the SDK prefers to the one set in code. An
/// `endpoint_url` in an AWS profile file is not read here.
pub fn configured(endpoint: &str, vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut endpoints = vec![("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned())];
    endpoints.extend(vars.into_iter().filter(|(name, _)| name.starts_with("AWS_ENDPOINT_URL_")));
    endpoints
}

/// Refuses, naming it and the way to allow it, the first of `endpoints` that is not on this
/// machine, unless `allow_remote`.
pub fn check(endpoints: &[(String, String)], allow_remote: bool) -> Result<()> {
    if allow_remote {
        return Ok(());
    }
    match endpoints.iter().find(|(_, url)| !is_loopback(url)) {
        None => Ok(()),
        Some((name, url)) => Err(format!(
            "refusing {name}={url:?}: not this machine (localhost, 127.0.0.0/8, ::1), and local creates, \
             purges and deletes tables and queues wherever it points; pass --allow-remote \
             (or set {ALLOW_REMOTE_VAR}=1) to use it anyway"
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machines_hosts_are_loopback() {
        for url in [
            "http://127.0.0.1:4566",
            "http://127.0.0.1:4603/",
            "http://127.1.2.3:8000",
            "http://localhost:4566",
            "http://LOCALHOST",
            "http://[::1]:4566",
            "http://[::ffff:127.0.0.1]:4566",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://dynamodb.us-east-1.amazonaws.com",
            "http://10.0.0.5:4566",
            "http://192.168.1.20:8000",
            "http://[2001:db8::1]:4566",
            "http://localhost.example.com:4566",
            "http://127.0.0.1.example.com",
            "http://user@evil.example:4566",
            "",
            "not a url",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn a_remote_endpoint_is_refused_by_name_unless_allowed() {
        let vars = [
            ("AWS_ENDPOINT_URL_SQS".to_owned(), "https://sqs.eu-west-1.amazonaws.com".to_owned()),
            ("AWS_REGION".to_owned(), "eu-west-1".to_owned()),
        ];
        let endpoints = configured("http://127.0.0.1:4566", vars);
        assert_eq!(endpoints.len(), 2, "the service's own endpoint is checked too: {endpoints:?}");
        let refusal = check(&endpoints, false).unwrap_err().to_string();
        assert!(refusal.contains("AWS_ENDPOINT_URL_SQS=\"https://sqs.eu-west-1.amazonaws.com\""), "{refusal}");
        assert!(refusal.contains("--allow-remote") && refusal.contains("LOCAL_ALLOW_REMOTE=1"), "{refusal}");
        assert!(check(&endpoints, true).is_ok());

        let remote = configured("http://10.0.0.5:4566", []);
        assert!(check(&remote, false).unwrap_err().to_string().contains("AWS_ENDPOINT_URL=\"http://10.0.0.5:4566\""));
        assert!(check(&configured("http://127.0.0.1:4603", []), false).is_ok());
    }
}
