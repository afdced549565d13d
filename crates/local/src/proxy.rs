//! A fault-injecting HTTP proxy on loopback, between the AWS SDK and the local AWS: for each
//! request a rule decides to pass it, delay it, forward it and then drop the answer (the write
//! committed, the caller saw a broken connection), or answer a 500 or a throttling error without
//! forwarding it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded, answered.
    Pass,
    /// Forwarded after a delay.
    Delay(Duration),
    /// Forwarded (its effect happens), then the connection is closed without the answer.
    DropResponse,
    /// Not forwarded: a 500 internal error.
    ServerError,
    /// Not forwarded: the service's throttling error.
    Throttle,
    /// Not forwarded: the provider refuses the message for good (SES's `MessageRejected`, as
    /// for a recipient its sandbox has not verified).
    Refuse,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Pass => "pass",
            Fault::Delay(_) => "delay",
            Fault::DropResponse => "lost response",
            Fault::ServerError => "500",
            Fault::Throttle => "throttled",
            Fault::Refuse => "refused",
        }
    }
}

/// Decides each request's fate from its operation (`dynamodb:TransactWriteItems`, `ses:SendEmail`).
pub trait Rules: Send + Sync + 'static {
    /// The fault for this request.
    fn decide(&self, operation: &str) -> Fault;

    /// The fault for this request, seeing its body too; by default, by its operation alone.
    fn decide_request(&self, operation: &str, _body: &[u8]) -> Fault {
        self.decide(operation)
    }
}

/// No faults: every request passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFaults;

impl Rules for NoFaults {
    fn decide(&self, _operation: &str) -> Fault {
        Fault::Pass
    }
}

/// SES refuses recipients whose address starts with a prefix, as its sandbox refuses
/// unverified ones; every other request is left to the inner rules. The local SES (moto) checks
/// only the sender's identity and that an address has a domain, so it cannot refuse a
/// recipient itself.
#[derive(Debug)]
pub struct RefuseRecipients<R> {
    prefix: String,
    inner: R,
}

impl<R: Rules> RefuseRecipients<R> {
    /// Refuses sends to addresses starting with `prefix`, then asks `inner`.
    pub fn new(prefix: impl Into<String>, inner: R) -> Self {
        RefuseRecipients { prefix: prefix.into(), inner }
    }
}

impl<R: Rules> Rules for RefuseRecipients<R> {
    fn decide(&self, operation: &str) -> Fault {
        self.inner.decide(operation)
    }

    fn decide_request(&self, operation: &str, body: &[u8]) -> Fault {
        if operation == "ses:SendEmail" && recipients(body).iter().any(|to| to.starts_with(&self.prefix)) {
            return Fault::Refuse;
        }
        self.inner.decide_request(operation, body)
    }
}

/// The `To` addresses of an SES v2 `SendEmail` body.
fn recipients(body: &[u8]) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    value["Destination"]["ToAddresses"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Faults at random, per operation prefix, from a seed.
#[derive(Debug)]
pub struct RandomFaults {
    rules: Vec<(String, Vec<(Fault, u32)>)>,
    state: Mutex<u64>,
}

impl RandomFaults {
    /// No faults yet; `seed` makes runs repeatable.
    pub fn new(seed: u64) -> Self {
        RandomFaults { rules: Vec::new(), state: Mutex::new(seed.max(1)) }
    }

    /// For operations starting with `prefix`, each fault with its rate in per mille.
    pub fn on(mut self, prefix: &str, faults: &[(Fault, u32)]) -> Self {
        self.rules.push((prefix.into(), faults.to_vec()));
        self
    }
}

impl Rules for RandomFaults {
    fn decide(&self, operation: &str) -> Fault {
        let Some((_, faults)) = self.rules.iter().find(|(p, _)| operation.starts_with(p.as_str())) else {
            return Fault::Pass;
        };
        let roll = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            *s ^= *s << 13;
            *s ^= *s >> 7;
            *s ^= *s << 17;
            (*s % 1000) as u32
        };
        let mut acc = 0;
        for (fault, rate) in faults {
            acc += rate;
            if roll < acc {
                return *fault;
            }
        }
        Fault::Pass
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    injected: Arc<Mutex<BTreeMap<String, u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` (`127.0.0.1:4566`).
    pub async fn start(upstream: &str, rules: Arc<dyn Rules>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let upstream: SocketAddr = upstream.parse().map_err(std::io::Error::other)?;
        let injected = Arc::new(Mutex::new(BTreeMap::new()));
        let counts = injected.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (rules, counts) = (rules.clone(), counts.clone());
                tokio::spawn(async move {
                    let _ = serve(client, upstream, rules, counts).await;
                });
            }
        });
        Ok(Proxy { addr, injected, task })
    }

    /// The endpoint to give the SDK (`AWS_ENDPOINT_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Faults injected so far, by `fault operation`.
    pub fn injected(&self) -> BTreeMap<String, u64> {
        self.injected.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The operation a request names: the `X-Amz-Target` of JSON protocols, or SES v2's path.
fn operation(head: &str) -> String {
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("x-amz-target") {
                let (service, op) = value.trim().split_once('.').unwrap_or(("", value.trim()));
                return format!("{}:{op}", service.split('_').next().unwrap_or("").to_lowercase());
            }
        }
    }
    let path = head.lines().next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or("");
    if path.starts_with("/v2/email/outbound-emails") {
        return "ses:SendEmail".into();
    }
    format!("http:{path}")
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn read_message(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<(String, Vec<u8>)>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len: usize = header(&head, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 16384];
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..end + 4 + len].to_vec();
            buf.drain(..end + 4 + len);
            return Ok(Some((head, body)));
        }
        let mut chunk = [0u8; 16384];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    rules: Arc<dyn Rules>,
    injected: Arc<Mutex<BTreeMap<String, u64>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some((head, body)) = read_message(&mut client, &mut buf).await? {
        let op = operation(&head);
        let fault = rules.decide_request(&op, &body);
        if fault != Fault::Pass {
            *injected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(format!("{} {op}", fault.label()))
                .or_default() += 1;
        }
        let response = match fault {
            Fault::ServerError => error(500, "InternalServerError", &op),
            // SES's own wording, address included, as a provider's message would carry it.
            Fault::Refuse => error_with(
                400,
                "MessageRejected",
                &op,
                &format!(
                    "Email address is not verified. The following identities failed the check in region US-EAST-1: {}",
                    recipients(&body).join(", ")
                ),
            ),
            Fault::Throttle if op.starts_with("ses:") => error(429, "TooManyRequestsException", &op),
            Fault::Throttle => error(400, "ThrottlingException", &op),
            Fault::Pass | Fault::Delay(_) | Fault::DropResponse => {
                if let Fault::Delay(d) = fault {
                    tokio::time::sleep(d).await;
                }
                let answer = forward(upstream, &head, &body).await?;
                if fault == Fault::DropResponse {
                    // The upstream applied it; the caller never hears so.
                    return Ok(());
                }
                answer
            }
        };
        client.write_all(&response).await?;
    }
    Ok(())
}

/// Sends one request upstream on its own connection and returns the answer, re-framed with a
/// `Content-Length` so the client's connection can be kept alive.
async fn forward(upstream: SocketAddr, head: &str, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).await?;
    let mut request = String::new();
    for (i, line) in head.lines().enumerate() {
        if i > 0 && line.split_once(':').is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("connection")) {
            continue;
        }
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    up.write_all(request.as_bytes()).await?;
    up.write_all(body).await?;
    let mut raw = Vec::new();
    up.read_to_end(&mut raw).await?;
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut payload = raw[end + 4..].to_vec();
    if header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        payload = crate::invoke::dechunk_bytes(&payload);
    }
    let mut out = String::new();
    for (i, line) in head.lines().enumerate() {
        let skip = i > 0
            && line.split_once(':').is_some_and(|(n, _)| {
                let n = n.trim();
                ["connection", "content-length", "transfer-encoding", "keep-alive"]
                    .iter()
                    .any(|h| n.eq_ignore_ascii_case(h))
            });
        if !skip {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!("Content-Length: {}\r\nConnection: keep-alive\r\n\r\n", payload.len()));
    let mut response = out.into_bytes();
    response.extend_from_slice(&payload);
    Ok(response)
}

fn error(status: u16, code: &str, op: &str) -> Vec<u8> {
    error_with(status, code, op, "injected by the fault proxy")
}

fn error_with(status: u16, code: &str, op: &str, message: &str) -> Vec<u8> {
    let reason = match status {
        500 => "Internal Server Error",
        429 => "Too Many Requests",
        _ => "Bad Request",
    };
    let prefix = if op.starts_with("dynamodb") { "com.amazonaws.dynamodb.v20120810#" } else { "" };
    let body = serde_json::json!({"__type": format!("{prefix}{code}"), "message": message}).to_string();
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-ErrorType: {code}\r\nx-amzn-RequestId: fault-proxy\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Faults in order: each entry applies once, to the next request whose operation starts with
/// its prefix; everything else passes.
#[derive(Debug, Default)]
pub struct ScriptedFaults {
    script: Mutex<std::collections::VecDeque<(String, Fault)>>,
}

impl ScriptedFaults {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a fault for the next request matching `prefix`.
    pub fn then(self, prefix: &str, fault: Fault) -> Self {
        self.script.lock().unwrap_or_else(|p| p.into_inner()).push_back((prefix.into(), fault));
        self
    }
}

impl Rules for ScriptedFaults {
    fn decide(&self, operation: &str) -> Fault {
        let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        match script.iter().position(|(p, _)| operation.starts_with(p.as_str())) {
            Some(i) => script.remove(i).map(|(_, f)| f).unwrap_or(Fault::Pass),
            None => Fault::Pass,
        }
    }
}
