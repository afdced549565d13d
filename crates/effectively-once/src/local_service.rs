//! Starting a checkout's local service on first use, for tests and tools: the one shape the
//! DynamoDB, Redis and Kafka helpers share (`effectively_once_dynamodb::testing::endpoint`,
//! `effectively_once_redis::testing::url`, `local::esm::kafka::bootstrap`). Behind the
//! `test-util` feature; it starts processes, nothing of AWS.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A service that a script of the checkout starts on `127.0.0.1`.
#[derive(Debug, Clone, Copy)]
pub struct LocalService<'a> {
    /// What it is, for the error line: `"local Redis"`.
    pub name: &'a str,
    /// Put before `127.0.0.1:port` to make its address: `"redis://"`, or `""` for a bare
    /// `host:port`.
    pub scheme: &'a str,
    /// The variable that moves its port (`LOCAL_REDIS_PORT`), and the port it has without it.
    pub port_var: &'a str,
    /// The port without `port_var`.
    pub default_port: u16,
    /// The script that starts it (`infra/local/redis.sh` of the checkout), and its argument.
    pub script: &'a Path,
    /// The script's argument that starts the service, or reuses the running one: `"ensure"`.
    pub verb: &'a str,
    /// What the error line tells a person to run: `"make local-redis-up"`, and the variable that
    /// names another instance instead, when there is one (`"REDIS_URL"`).
    pub hint: &'a str,
}

impl LocalService<'_> {
    /// Its address once something answers on its port, starting it with the script when nothing
    /// does. The script's progress (a one-time install, the log's path) goes to the caller's
    /// stderr. The error is one line naming the command to run.
    pub fn ensure(&self) -> Result<String, String> {
        let port: u16 = match std::env::var(self.port_var) {
            Ok(port) => port.parse().map_err(|_| format!("{}={port} is not a port", self.port_var))?,
            Err(_) => self.default_port,
        };
        let address = format!("{}127.0.0.1:{port}", self.scheme);
        let socket: SocketAddr = ([127, 0, 0, 1], port).into();
        let answers = || TcpStream::connect_timeout(&socket, Duration::from_secs(2)).is_ok();
        if answers() {
            return Ok(address);
        }
        // Absent when the caller was built from a registry, not from a checkout.
        if !self.script.is_file() {
            return Err(format!("no {} at {address}: {}", self.name, self.hint));
        }
        let status = Command::new(self.script)
            .arg(self.verb)
            .env(self.port_var, port.to_string())
            .stdout(Stdio::null())
            .status();
        let failed = match status {
            Ok(status) if status.success() && answers() => return Ok(address),
            Ok(status) => format!("`{} {}` failed ({status})", self.script.display(), self.verb),
            Err(error) => format!("{} did not run ({error})", self.script.display()),
        };
        Err(format!("no {} at {address} and {failed}: {} ({}={port})", self.name, self.hint, self.port_var))
    }
}
