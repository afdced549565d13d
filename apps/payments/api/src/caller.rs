//! [`Producers`]: who may call the API (`API_PRODUCERS`), under which producer name, and for
//! which accounts; [`Caller`], what one request's IAM principal maps to; [`principal`], where
//! the principal is read.

use std::collections::BTreeMap;
use std::sync::Arc;

use lambda_http::http::StatusCode;
use lambda_http::{Request, RequestExt};
use serde::Deserialize;

use crate::{error, Answer};

/// The variable the producers are read from.
pub const API_PRODUCERS: &str = "API_PRODUCERS";
/// The longest producer name: a plain scope of the Idempotency-Key layer, so `{producer}:{key}`
/// is both the record's key and the event id.
pub const MAX_PRODUCER: usize = effectively_once_http::MAX_SCOPE;

/// The API's callers, by IAM principal (`requestContext.authorizer.iam.userArn` of a Function
/// URL or an HTTP API with IAM authorization).
///
/// - None configured ([`Producers::open`], `API_PRODUCERS` unset or empty): every
///   authenticated caller, any account; the event id is the key.
/// - One: only its principals (others `403`), only its accounts; the event id is the key.
/// - Several: each principal's keys apart from the others' (records `api#{producer}:{key}`),
///   the event id `{producer}:{key}`; an unknown principal `403`.
///
/// `API_PRODUCERS` is a JSON object, producer name to its principals and accounts:
///
/// ```
/// let producers = payments_api::Producers::parse(r#"{
///   "shop": {"principals": ["arn:aws:iam::111122223333:role/shop-producer"], "accounts": ["shop_*"]},
///   "payroll": {"principals": ["arn:aws:iam::111122223333:user/payroll"], "accounts": ["acct_payroll", "staff_*"]}
/// }"#).unwrap();
/// let caller = producers.caller(Some("arn:aws:sts::111122223333:assumed-role/shop-producer/session-7")).unwrap();
/// assert_eq!((caller.producer(), caller.scope()), (Some("shop"), Some("shop")));
/// assert!(caller.may_post_to("shop_42") && !caller.may_post_to("acct_payroll"));
/// assert_eq!(producers.caller(Some("arn:aws:iam::111122223333:user/other")).unwrap_err().status, 403);
/// ```
///
/// A name is 1 to 64 characters from `[A-Za-z0-9._-]`. A principal is an ARN: an IAM user's
/// (`arn:aws:iam::ACCOUNT:user/NAME`, matched exactly), an IAM role's
/// (`arn:aws:iam::ACCOUNT:role/PATH/NAME`, matching every session of the role,
/// `arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION`, whatever its session name), or one
/// assumed-role session's (matched exactly). A bare role name is refused: it would match a
/// role of that name in any account allowed to invoke the function. A principal belongs to one
/// producer. Accounts are account ids, `PREFIX*` for the ids that start with `PREFIX`, or `*`
/// for any.
#[derive(Debug, Clone, Default)]
pub struct Producers {
    producers: Vec<Arc<Producer>>,
}

/// One producer: its name, its principals, the accounts it may post to.
#[derive(Debug)]
struct Producer {
    name: String,
    principals: Vec<Principal>,
    accounts: Vec<Accounts>,
}

/// A configured principal, as it matches a caller's ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Principal {
    /// Matched exactly: a user, or one assumed-role session.
    Exact(String),
    /// Any session of the role: the assumed-role ARN keeps the role's name, not its path.
    Role { partition: String, account: String, name: String },
}

/// Accounts a producer may post to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Accounts {
    Any,
    Exact(String),
    Prefix(String),
}

/// A request's caller: its producer (none when no producer is configured) and whether its keys
/// are scoped by it. In the request's extensions for the layer's scope and fingerprint.
#[derive(Debug, Clone)]
pub struct Caller {
    producer: Option<Arc<Producer>>,
    scoped: bool,
}

impl Caller {
    /// The producer's name, if producers are configured.
    pub fn producer(&self) -> Option<&str> {
        self.producer.as_ref().map(|producer| producer.name.as_str())
    }

    /// The scope of the caller's keys: its producer's name when several are configured.
    pub fn scope(&self) -> Option<&str> {
        self.producer().filter(|_| self.scoped)
    }

    /// Whether the caller may post to `account`.
    pub fn may_post_to(&self, account: &str) -> bool {
        let Some(producer) = &self.producer else { return true };
        producer.accounts.iter().any(|accounts| match accounts {
            Accounts::Any => true,
            Accounts::Exact(id) => id == account,
            Accounts::Prefix(prefix) => account.starts_with(prefix.as_str()),
        })
    }
}

impl Producers {
    /// No producer configured: every caller, any account, the event id the key.
    pub fn open() -> Producers {
        Producers::default()
    }

    /// Reads `API_PRODUCERS`'s value (see [`Producers`]); blank is [`open`](Producers::open). A
    /// malformed value is an error naming the variable and what is wrong.
    pub fn parse(json: &str) -> Result<Producers, String> {
        if json.trim().is_empty() {
            return Ok(Producers::open());
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            principals: Vec<String>,
            accounts: Vec<String>,
        }
        let entries: BTreeMap<String, Entry> = serde_json::from_str(json).map_err(|e| {
            format!(
                r#"{API_PRODUCERS} must be a JSON object {{"NAME": {{"principals": [ARN, ...], "accounts": [ID or PREFIX* or *, ...]}}}}: {e}"#
            )
        })?;
        if entries.is_empty() {
            return Err(format!("{API_PRODUCERS} names no producer; leave it unset (or empty) for none"));
        }
        let mut seen: Vec<(Principal, String)> = Vec::new();
        let mut producers = Vec::new();
        for (name, entry) in entries {
            let problem = |what: String| format!("{API_PRODUCERS}: producer {name:?}: {what}");
            let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
            if name.is_empty() || name.len() > MAX_PRODUCER || !name.chars().all(plain) {
                return Err(problem(format!("the name must be 1 to {MAX_PRODUCER} characters from A-Z a-z 0-9 . _ -")));
            }
            if entry.principals.is_empty() {
                return Err(problem("names no principal".into()));
            }
            let mut principals = Vec::new();
            for arn in &entry.principals {
                let principal = Principal::parse(arn).map_err(&problem)?;
                // One principal, one producer: a session given to one and its role to another
                // would otherwise be the first producer's by name, with its scope and accounts.
                let clash = |(seen, other): &&(Principal, String)| {
                    *seen == principal || (*other != name && seen.overlaps(&principal))
                };
                if let Some((_, other)) = seen.iter().find(clash) {
                    return Err(problem(format!("principal {arn} is producer {other:?}'s too")));
                }
                seen.push((principal.clone(), name.clone()));
                principals.push(principal);
            }
            if entry.accounts.is_empty() {
                return Err(problem(r#"names no account (["*"] for any)"#.into()));
            }
            let accounts = entry.accounts.iter().map(|accounts| Accounts::parse(accounts).map_err(&problem));
            let accounts = accounts.collect::<Result<Vec<_>, _>>()?;
            producers.push(Arc::new(Producer { name, principals, accounts }));
        }
        Ok(Producers { producers })
    }

    /// The names configured, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.producers.iter().map(|producer| producer.name.as_str())
    }

    /// Whether each caller's keys are scoped by its producer: several producers configured.
    pub fn scoped(&self) -> bool {
        self.producers.len() > 1
    }

    /// The caller with IAM principal `principal` (an ARN; `None` when the request carries
    /// none), or `403 forbidden` when producers are configured and none has it.
    pub fn caller(&self, principal: Option<&str>) -> Result<Caller, Answer> {
        if self.producers.is_empty() {
            return Ok(Caller { producer: None, scoped: false });
        }
        let matches = |producer: &&Arc<Producer>| {
            principal.is_some_and(|arn| producer.principals.iter().any(|configured| configured.matches(arn)))
        };
        match self.producers.iter().find(matches) {
            Some(producer) => Ok(Caller { producer: Some(producer.clone()), scoped: self.scoped() }),
            None => {
                tracing::warn!(principal, "forbidden: the caller is no producer of this API");
                let who =
                    principal.map_or_else(|| "a caller without an IAM principal".to_owned(), |arn| arn.to_owned());
                Err(error(StatusCode::FORBIDDEN, "forbidden", format!("{who} is not a producer of this API")))
            }
        }
    }
}

impl Principal {
    fn parse(arn: &str) -> Result<Principal, String> {
        let refuse = |why: &str| format!("principal {arn:?} {why}");
        let Some(parts) = Arn::parse(arn) else {
            return Err(refuse(
                "is not an IAM ARN: write the role's ARN (arn:aws:iam::ACCOUNT:role/NAME) or the user's, so a role or user of that name in another account does not match",
            ));
        };
        match (parts.service, parts.resource.split_once('/')) {
            ("iam", Some(("user", _))) => Ok(Principal::Exact(arn.to_owned())),
            ("iam", Some(("role", path_and_name))) => Ok(Principal::Role {
                partition: parts.partition.to_owned(),
                account: parts.account.to_owned(),
                // A role's path is not in its sessions' ARNs: the name is its last segment.
                name: path_and_name.rsplit('/').next().unwrap_or_default().to_owned(),
            }),
            ("sts", Some(("assumed-role", session))) if session.split('/').count() == 2 => {
                Ok(Principal::Exact(arn.to_owned()))
            }
            _ => Err(refuse("is neither an IAM user's or role's ARN nor an assumed-role session's")),
        }
    }

    /// Whether a caller could be both: the same principal, or a role and one of its sessions.
    fn overlaps(&self, other: &Principal) -> bool {
        match (self, other) {
            (Principal::Exact(arn), role @ Principal::Role { .. })
            | (role @ Principal::Role { .. }, Principal::Exact(arn)) => role.matches(arn),
            _ => self == other,
        }
    }

    fn matches(&self, caller: &str) -> bool {
        match self {
            Principal::Exact(arn) => arn == caller,
            Principal::Role { partition, account, name } => Arn::parse(caller).is_some_and(|arn| {
                let role = match (arn.service, arn.resource.split_once('/')) {
                    ("sts", Some(("assumed-role", session))) => session.split_once('/').map(|(role, _)| role),
                    ("iam", Some(("role", path_and_name))) => path_and_name.rsplit('/').next(),
                    _ => None,
                };
                arn.partition == partition && arn.account == account && role == Some(name.as_str())
            }),
        }
    }
}

/// The parts of an IAM or STS ARN: `arn:PARTITION:SERVICE::ACCOUNT:RESOURCE` (no region).
struct Arn<'a> {
    partition: &'a str,
    service: &'a str,
    account: &'a str,
    resource: &'a str,
}

impl<'a> Arn<'a> {
    fn parse(arn: &'a str) -> Option<Arn<'a>> {
        let mut parts = arn.splitn(6, ':');
        let (Some("arn"), Some(partition), Some(service), Some(""), Some(account), Some(resource)) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        let resource_ok = resource.split('/').all(|segment| !segment.is_empty());
        (!partition.is_empty() && matches!(service, "iam" | "sts") && account_ok && resource_ok).then_some(Arn {
            partition,
            service,
            account,
            resource,
        })
    }
}

impl Accounts {
    fn parse(text: &str) -> Result<Accounts, String> {
        let id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-');
        let (id, prefix) = match text.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (text, false),
        };
        if id.len() > 200 || !id.chars().all(id_char) || (id.is_empty() && !prefix) {
            return Err(format!("account {text:?} is not an account id, PREFIX* or *"));
        }
        Ok(match (id.is_empty(), prefix) {
            (true, _) => Accounts::Any,
            (false, true) => Accounts::Prefix(id.to_owned()),
            (false, false) => Accounts::Exact(id.to_owned()),
        })
    }
}

/// The caller's IAM principal: `requestContext.authorizer.iam.userArn` of a Function URL or
/// HTTP API (payload 2.0) request with IAM authorization, as Lambda's service fills it (a
/// signed request's identity; `lambda:InvokedViaFunctionUrl` in the invoke policy keeps a
/// direct `Invoke` from forging it). `None` without IAM authorization.
pub fn principal(request: &Request) -> Option<&str> {
    use lambda_http::request::RequestContext;
    #[allow(unreachable_patterns)] // one variant or several, as the workspace's features unify
    let context = match request.request_context_ref()? {
        RequestContext::ApiGatewayV2(context) => context,
        _ => return None,
    };
    context.authorizer.as_ref()?.iam.as_ref()?.user_arn.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::111122223333:role/producers/shop";

    fn producers(json: &str) -> Producers {
        Producers::parse(json).unwrap()
    }

    fn refusal(json: &str) -> String {
        Producers::parse(json).unwrap_err()
    }

    #[test]
    fn a_role_matches_its_sessions_whatever_their_name() {
        let shop = producers(&format!(r#"{{"shop": {{"principals": ["{ROLE}"], "accounts": ["*"]}}}}"#));
        for caller in [
            "arn:aws:sts::111122223333:assumed-role/shop/i-0abc",
            "arn:aws:sts::111122223333:assumed-role/shop/botocore-session-17",
            ROLE,
        ] {
            assert_eq!(shop.caller(Some(caller)).unwrap().producer(), Some("shop"), "{caller}");
        }
        for stranger in [
            "arn:aws:sts::444455556666:assumed-role/shop/i-0abc",
            "arn:aws-cn:sts::111122223333:assumed-role/shop/i-0abc",
            "arn:aws:sts::111122223333:assumed-role/shop-admin/i-0abc",
            "arn:aws:iam::111122223333:user/shop",
            "arn:aws:sts::111122223333:federated-user/shop",
            "shop",
        ] {
            let answer = shop.caller(Some(stranger)).unwrap_err();
            assert_eq!((answer.status, answer.error_code().as_deref()), (403, Some("forbidden")), "{stranger}");
        }
        assert_eq!(shop.caller(None).unwrap_err().status, 403, "no principal at all");
    }

    #[test]
    fn users_and_sessions_match_exactly() {
        let json = r#"{"a": {"principals": ["arn:aws:iam::111122223333:user/payroll",
            "arn:aws:sts::111122223333:assumed-role/ci/deploy"], "accounts": ["*"]}}"#;
        let a = producers(json);
        assert!(a.caller(Some("arn:aws:iam::111122223333:user/payroll")).is_ok());
        assert!(a.caller(Some("arn:aws:iam::111122223333:user/payroll2")).is_err());
        assert!(a.caller(Some("arn:aws:sts::111122223333:assumed-role/ci/deploy")).is_ok());
        assert!(a.caller(Some("arn:aws:sts::111122223333:assumed-role/ci/other")).is_err());
    }

    /// "A principal belongs to one producer": a session named exactly by one producer and
    /// covered by another's role is one principal given twice. Accepted, the session's caller
    /// is silently the producer first by name (`ci-all` here), with that producer's scope and
    /// accounts, not the one that names it (`deploy`).
    #[test]
    fn a_session_given_to_one_producer_and_its_role_to_another_is_refused() {
        let json = r#"{"deploy": {"principals": ["arn:aws:sts::111122223333:assumed-role/ci/deploy"], "accounts": ["dep_*"]},
            "ci-all": {"principals": ["arn:aws:iam::111122223333:role/ci"], "accounts": ["*"]}}"#;
        let parsed = Producers::parse(json);
        if let Ok(producers) = &parsed {
            let caller = producers.caller(Some("arn:aws:sts::111122223333:assumed-role/ci/deploy")).unwrap();
            panic!(
                "accepted: the session deploy is producer {:?}, may post to acct_1: {}",
                caller.producer(),
                caller.may_post_to("acct_1")
            );
        }
        assert!(parsed.unwrap_err().contains("too"), "refused as a principal given twice");
    }

    #[test]
    fn one_producer_keeps_the_key_as_it_is_and_several_scope_it() {
        let open = Producers::open();
        let anyone = open.caller(None).unwrap();
        assert_eq!((anyone.producer(), anyone.scope(), anyone.may_post_to("x")), (None, None, true));
        let one = producers(&format!(r#"{{"shop": {{"principals": ["{ROLE}"], "accounts": ["shop_*", "acct_7"]}}}}"#));
        let shop = one.caller(Some(ROLE)).unwrap();
        assert_eq!((shop.producer(), shop.scope()), (Some("shop"), None));
        assert!(shop.may_post_to("shop_1") && shop.may_post_to("acct_7"));
        assert!(!shop.may_post_to("acct_70") && !shop.may_post_to("acct_1") && !shop.may_post_to("Shop_1"));
        let two = producers(&format!(
            r#"{{"shop": {{"principals": ["{ROLE}"], "accounts": ["*"]}},
                "payroll": {{"principals": ["arn:aws:iam::111122223333:user/payroll"], "accounts": ["acct_1"]}}}}"#
        ));
        assert_eq!(two.caller(Some(ROLE)).unwrap().scope(), Some("shop"));
        assert_eq!(two.names().collect::<Vec<_>>(), ["payroll", "shop"]);
    }

    #[test]
    fn a_malformed_configuration_names_the_variable_and_the_fault() {
        assert!(Producers::parse("").unwrap().names().next().is_none());
        assert!(Producers::parse("  ").unwrap().names().next().is_none());
        for (json, fault) in [
            ("{".to_owned(), "must be a JSON object"),
            ("{}".to_owned(), "names no producer"),
            (r#"{"a": {"principals": [], "accounts": ["*"]}}"#.to_owned(), "names no principal"),
            (format!(r#"{{"a": {{"principals": ["{ROLE}"], "accounts": []}}}}"#), "names no account"),
            (format!(r#"{{"a": {{"principals": ["{ROLE}"]}}}}"#), "missing field `accounts`"),
            (format!(r#"{{"a": {{"principals": ["{ROLE}"], "accounts": ["*"], "acounts": []}}}}"#), "unknown field"),
            (format!(r#"{{"a:b": {{"principals": ["{ROLE}"], "accounts": ["*"]}}}}"#), "the name must be"),
            (
                format!(r#"{{"{}": {{"principals": ["{ROLE}"], "accounts": ["*"]}}}}"#, "p".repeat(65)),
                "the name must be",
            ),
            (r#"{"a": {"principals": ["shop"], "accounts": ["*"]}}"#.to_owned(), "is not an IAM ARN"),
            (
                r#"{"a": {"principals": ["arn:aws:iam::111122223333:root"], "accounts": ["*"]}}"#.to_owned(),
                "is neither",
            ),
            (
                r#"{"a": {"principals": ["arn:aws:iam::1111:role/x"], "accounts": ["*"]}}"#.to_owned(),
                "is not an IAM ARN",
            ),
            (format!(r#"{{"a": {{"principals": ["{ROLE}"], "accounts": ["acct 1"]}}}}"#), "is not an account id"),
            (
                format!(
                    r#"{{"a": {{"principals": ["{ROLE}"], "accounts": ["*"]}},
                        "b": {{"principals": ["arn:aws:iam::111122223333:role/shop"], "accounts": ["*"]}}}}"#
                ),
                r#"is producer "a"'s too"#,
            ),
        ] {
            let message = refusal(&json);
            assert!(message.starts_with(API_PRODUCERS) && message.contains(fault), "{json}: {message}");
        }
    }
}
