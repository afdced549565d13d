//! The local servers' scripts (`infra/local/aws.sh`, `redis.sh`, `kafka.sh`), which share
//! `infra/local/lib.sh`: their instances are keyed by port, so two checkouts, or a user's crate
//! and this workspace, never stop each other's server; a start that times out stops its server
//! before the next start starts one; a start killed while its server starts leaves it to the
//! next; and a `down` kills only what the script started. Each behaviour is one body, run for
//! each script it applies to (`aws::`, `redis::`).
//!
//! The tests start servers of their own, each on a port of its own, or a slow stand-in in a
//! throwaway copy of the scripts (`checkout`): none needs the local AWS or the local Redis that
//! the other tests share, only the installed moto and redis-server.

mod checkout;
mod resp;

use checkout::Checkout;
use repo_checks::root;
use std::process::{Command, Output};
use std::time::Duration;

/// A local server's script, and what tells its instances apart.
#[derive(Clone, Copy, Debug)]
enum Script {
    /// `aws.sh`: moto, served by `infra/local/serve.py`.
    Aws,
    /// `redis.sh`: redis-server (or valkey-server), with a password.
    Redis,
}

impl Script {
    /// The file under `infra/local/`.
    fn file(self) -> &'static str {
        match self {
            Script::Aws => "aws.sh",
            Script::Redis => "redis.sh",
        }
    }

    /// The verb the tests' helpers start the server with.
    fn start(self) -> &'static str {
        match self {
            Script::Aws => "up",
            Script::Redis => "ensure",
        }
    }

    /// The variable that picks the port.
    fn port_var(self) -> &'static str {
        match self {
            Script::Aws => "LOCAL_AWS_PORT",
            Script::Redis => "LOCAL_REDIS_PORT",
        }
    }

    /// The variable that bounds a start's wait.
    fn timeout_var(self) -> &'static str {
        match self {
            Script::Aws => "LOCAL_AWS_START_TIMEOUT",
            Script::Redis => "LOCAL_REDIS_START_TIMEOUT",
        }
    }

    /// The variable that names a server to use instead; removed, so the script starts its own.
    fn endpoint_var(self) -> &'static str {
        match self {
            Script::Aws => "AWS_ENDPOINT_URL",
            Script::Redis => "REDIS_URL",
        }
    }

    /// The pid file of the server on `port`, relative to the checkout.
    fn pid_file(self, port: u16) -> String {
        match self {
            Script::Aws => format!(".local-aws/aws-{port}/moto.pid"),
            Script::Redis => format!(".local-aws/redis-{port}/redis.pid"),
        }
    }

    /// `infra/local/SCRIPT VERB` of this checkout, for the server on `port`.
    fn run(self, port: u16, verb: &str) -> Output {
        Command::new(root().join("infra/local").join(self.file()))
            .arg(verb)
            .env(self.port_var(), port.to_string())
            .env_remove(self.endpoint_var())
            .current_dir(root())
            .output()
            .unwrap_or_else(|e| panic!("{} runs: {e}", self.file()))
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn stderr(output: &Output) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&output.stderr)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), stderr(output))
}

/// Whether `pid` still runs (a zombie, exited but not yet reaped, does not).
fn running(pid: u32) -> bool {
    let ps = Command::new("ps").args(["-o", "stat=", "-p", &pid.to_string()]).output().unwrap();
    let stat = String::from_utf8_lossy(&ps.stdout);
    !stat.trim().is_empty() && !stat.trim().starts_with('Z')
}

/// Stops the script's server on each port when the test ends, passed or not.
struct Stop(Script, Vec<u16>);

impl Drop for Stop {
    fn drop(&mut self) {
        for port in &self.1 {
            self.0.run(*port, "down");
        }
    }
}

/// Two ports of one checkout serve at once, and stopping one leaves the other serving.
fn two_ports_serve_at_once_and_each_stops_alone(script: Script) {
    let (a, b) = (free_port(), free_port());
    let _stop = Stop(script, vec![a, b]);
    for port in [a, b] {
        let up = script.run(port, script.start());
        assert!(up.status.success(), "{} on {port}: {}", script.start(), stderr(&up));
    }
    assert!(script.run(a, "status").status.success() && script.run(b, "status").status.success(), "both serve");
    assert!(script.run(a, "down").status.success());
    let stopped = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        !script.run(a, "status").status.success()
    });
    assert!(stopped, "the instance on {a} stopped");
    assert!(script.run(b, "status").status.success(), "the instance on {b} still serves");
    if let Script::Redis = script {
        // A real client, not only the script's PING: the password the script gives is needed.
        let url = String::from_utf8(script.run(b, "url").stdout).unwrap();
        resp::serves_only_with_the_password(url.trim(), b);
    }
}

/// Two test binaries ask for the server at once and it starts slower than the start waits: the
/// first start stops the server it gave up on (and its pid file) before the second, waiting on
/// the port lock, starts its own, so one port never has two servers, nor one `down` cannot stop.
fn a_start_that_times_out_stops_its_server_before_the_next_starts_one(script: Script) {
    let checkout = Checkout::new(script, "timeout", 5, 2);
    let first = checkout.spawn(script.start());
    std::thread::sleep(Duration::from_millis(500));
    let second = checkout.spawn(script.start());
    let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    for (which, start) in [("first", &first), ("second", &second)] {
        let said = stderr(start);
        assert!(!start.status.success(), "the {which} start: {said}");
        assert!(said.contains("did not answer within 2 s; stopped it"), "the {which} start: {said}");
    }
    assert_eq!(checkout.overlaps(), "", "a server started while an earlier one still ran");
    let starts = checkout.starts();
    assert_eq!(starts.len(), 2, "each start started one server in turn");
    assert!(starts.iter().all(|pid| !running(*pid)), "a server outlived the start that gave up on it");
    assert!(!checkout.pid_file().exists(), "the pid file of a stopped server is left");
    // Past the stand-in's delay, nothing binds the port behind the script's back.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!checkout.serving(), "a server serves on {} that no pid file names", checkout.port());
}

/// A start killed while its server starts leaves the pid file naming it: the next start waits
/// for that server and reuses it instead of starting a second, and `down` stops it.
fn a_start_reuses_the_server_a_killed_start_left_starting_and_down_stops_it(script: Script) {
    let checkout = Checkout::new(script, "killed", 3, 30);
    let mut first = checkout.spawn(script.start());
    // The pid file written, not only created, and naming the server that started.
    let started = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        let named = std::fs::read_to_string(checkout.pid_file()).ok().and_then(|pid| pid.trim().parse().ok());
        named.is_some_and(|pid| checkout.starts().contains(&pid))
    });
    assert!(started, "the first start spawned its server");
    first.kill().unwrap();
    first.wait().unwrap();
    let second = checkout.run(script.start());
    assert!(second.status.success(), "{}: {}", second.status, stderr(&second));
    assert!(stderr(&second).contains("already starting"), "{}", stderr(&second));
    assert_eq!(checkout.starts().len(), 1, "a second server was started");
    assert!(checkout.serving());
    let down = checkout.run("down");
    assert!(stderr(&down).contains("stopped"), "{}", stderr(&down));
    assert!(!running(checkout.starts()[0]), "down left the server running");
    assert!(!checkout.serving(), "a server still serves after down");
}

/// A pid file outlives its server (a crash, a reboot) and its number goes to another process:
/// each local server's `down` kills the pid file's process only when its command line is the
/// one the script starts, and otherwise leaves it running and drops the stale pid file.
#[test]
fn a_local_server_down_leaves_a_process_that_took_a_stale_pid_alone() {
    for (script, state, pid_file, port_var) in [
        ("aws.sh", "aws", "moto.pid", "LOCAL_AWS_PORT"),
        ("redis.sh", "redis", "redis.pid", "LOCAL_REDIS_PORT"),
        ("kafka.sh", "kafka", "tansu.pid", "LOCAL_KAFKA_PORT"),
    ] {
        let port = free_port();
        let dir = root().join(format!(".local-aws/{state}-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        // Someone else's process, whose command line names the server and its port as a
        // server's would (a loose match, `*serve.py*--port PORT*`, would take it for ours).
        let mut other = Command::new("python3")
            .args(["-c", "import time; time.sleep(60)", "serve.py", "redis-server", "--port"])
            .arg(port.to_string())
            .spawn()
            .unwrap();
        std::fs::write(dir.join(pid_file), other.id().to_string()).unwrap();
        let down = Command::new(root().join("infra/local").join(script))
            .arg("down")
            .env(port_var, port.to_string())
            .output()
            .unwrap();
        let alive = other.try_wait().unwrap().is_none();
        let _ = other.kill();
        let _ = other.wait();
        let pid_file_left = dir.join(pid_file).exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(down.status.success(), "{script} down: {}", text(&down));
        assert!(alive, "{script} down killed a process it did not start: {}", text(&down));
        assert!(text(&down).contains("not running"), "{script} down: {}", text(&down));
        assert!(!pid_file_left, "{script} down left the stale pid file");
    }
}

/// `infra/local/aws.sh`, the local AWS.
mod aws {
    use super::Script::Aws;

    #[test]
    fn two_ports_serve_at_once_and_each_stops_alone() {
        super::two_ports_serve_at_once_and_each_stops_alone(Aws);
    }

    #[test]
    fn a_start_that_times_out_stops_its_server_before_the_next_starts_one() {
        super::a_start_that_times_out_stops_its_server_before_the_next_starts_one(Aws);
    }

    #[test]
    fn a_start_reuses_the_server_a_killed_start_left_starting_and_down_stops_it() {
        super::a_start_reuses_the_server_a_killed_start_left_starting_and_down_stops_it(Aws);
    }
}

/// `infra/local/redis.sh`, the local Redis.
mod redis {
    use super::Script::Redis;

    #[test]
    fn two_ports_serve_at_once_and_each_stops_alone() {
        super::two_ports_serve_at_once_and_each_stops_alone(Redis);
    }

    #[test]
    fn a_start_that_times_out_stops_its_server_before_the_next_starts_one() {
        super::a_start_that_times_out_stops_its_server_before_the_next_starts_one(Redis);
    }

    #[test]
    fn a_start_reuses_the_server_a_killed_start_left_starting_and_down_stops_it() {
        super::a_start_reuses_the_server_a_killed_start_left_starting_and_down_stops_it(Redis);
    }
}
