//! The local AWS's own tests (`infra/local/test_serve.py`): serve.py's replacements of moto code
//! give moto's answers at a cost that does not grow with the queue or the table. Run with the
//! venv `infra/local/aws.sh install` makes (once per machine, in the per-user cache of
//! `infra/tools.sh`, under its lock), so `cargo test` covers the Python side too. And the
//! script's instances, keyed by port, and its slow starts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[test]
fn serve_py_replacements_answer_as_moto_does_and_cost_what_they_touch() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The pinned moto's venv, whichever checkout's server runs.
    let install = aws_sh(0, "install");
    assert!(install.status.success(), "infra/local/aws.sh install: {}", String::from_utf8_lossy(&install.stderr));
    let python = Command::new(root.join("infra/tools.sh")).args(["cached", "moto"]).output().expect("tools.sh runs");
    assert!(python.status.success(), "infra/tools.sh cached moto: {}", String::from_utf8_lossy(&python.stderr));
    let python = String::from_utf8(python.stdout).unwrap().trim().to_owned();
    let out = Command::new(&python)
        .args(["-m", "unittest", "discover", "-s", "infra/local", "-p", "test_*.py"])
        .current_dir(&root)
        // The tests run under moto's in-process mock; an endpoint would send them to a server.
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .expect("python runs");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("OK"), "{report}");
}

/// `infra/local/aws.sh VERB` for the local AWS on `port`.
fn aws_sh(port: u16, verb: &str) -> std::process::Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(root.join("infra/local/aws.sh"))
        .arg(verb)
        .env("LOCAL_AWS_PORT", port.to_string())
        .env_remove("AWS_ENDPOINT_URL")
        .current_dir(&root)
        .output()
        .expect("aws.sh runs")
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Stops the local AWS on each port when the test ends, passed or not.
struct Stop(Vec<u16>);

impl Drop for Stop {
    fn drop(&mut self) {
        for port in &self.0 {
            aws_sh(*port, "down");
        }
    }
}

#[test]
fn two_local_aws_ports_serve_at_once_and_each_stops_alone() {
    let (a, b) = (free_port(), free_port());
    let _stop = Stop(vec![a, b]);
    for port in [a, b] {
        let up = aws_sh(port, "up");
        assert!(up.status.success(), "up on {port}: {}", String::from_utf8_lossy(&up.stderr));
    }
    assert!(aws_sh(a, "status").status.success() && aws_sh(b, "status").status.success(), "both serve");
    assert!(aws_sh(a, "down").status.success());
    let stopped = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !aws_sh(a, "status").status.success()
    });
    assert!(stopped, "the instance on {a} stopped");
    assert!(aws_sh(b, "status").status.success(), "the instance on {b} still serves");
}

/// A throwaway checkout holding a copy of `infra/local/aws.sh` whose "moto" is a stand-in
/// `serve.py` that takes `delay` seconds to bind its port (as moto's import can on a loaded
/// machine). Each stand-in appends its pid to `starts`, and to `overlaps` when it starts while
/// an earlier one still runs. Removed, its stand-ins stopped, when dropped.
struct SlowCheckout {
    root: PathBuf,
    port: u16,
    timeout_secs: u32,
}

const STAND_IN: &str = r#"
import http.server, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
starts = os.path.join(os.environ["CHECKOUT"], "starts")
if os.path.exists(starts):
    for line in open(starts):
        try:
            os.kill(int(line), 0)
        except OSError:
            continue
        with open(os.path.join(os.environ["CHECKOUT"], "overlaps"), "a") as f:
            f.write(f"{line.strip()} {os.getpid()}\n")
with open(starts, "a") as f:
    f.write(f"{os.getpid()}\n")
time.sleep(float(os.environ["DELAY"]))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"#;

impl SlowCheckout {
    fn new(name: &str, delay_secs: u32, timeout_secs: u32) -> SlowCheckout {
        let port = free_port();
        let root = std::env::temp_dir().join(format!("local-aws-{name}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::create_dir_all(root.join("infra/local")).unwrap();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        for file in ["aws.sh", "lib.sh", "requirements.txt"] {
            std::fs::copy(repo.join("infra/local").join(file), root.join("infra/local").join(file)).unwrap();
        }
        std::fs::copy(repo.join("infra/tools.sh"), root.join("infra/tools.sh")).unwrap();
        // Installed already, in a tool cache of the checkout's own: the stamp matches the
        // requirements, the venv's python is the system's.
        let venv = Command::new("bash")
            .arg(root.join("infra/tools.sh"))
            .args(["dir", "moto"])
            .env("EFFECTIVELY_ONCE_CACHE", root.join("cache"))
            .output()
            .unwrap();
        let venv = PathBuf::from(String::from_utf8(venv.stdout).unwrap().trim());
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::copy(repo.join("infra/local/requirements.txt"), venv.join(".installed")).unwrap();
        let python3 = Command::new("sh").args(["-c", "command -v python3"]).output().unwrap();
        let python3 = String::from_utf8(python3.stdout).unwrap();
        std::os::unix::fs::symlink(python3.trim(), venv.join("bin/python")).unwrap();
        std::fs::write(root.join("infra/local/serve.py"), STAND_IN).unwrap();
        std::fs::write(root.join("delay"), delay_secs.to_string()).unwrap();
        SlowCheckout { root, port, timeout_secs }
    }

    /// `aws.sh VERB` in the throwaway checkout, started.
    fn spawn(&self, verb: &str) -> Child {
        // Through bash rather than exec'ing the copy: a fork by another test thread while the
        // copy was still open for writing would make that exec fail with ETXTBSY.
        Command::new("bash")
            .arg(self.root.join("infra/local/aws.sh"))
            .arg(verb)
            .env("LOCAL_AWS_PORT", self.port.to_string())
            .env("LOCAL_AWS_START_TIMEOUT", self.timeout_secs.to_string())
            .env("CHECKOUT", &self.root)
            .env("EFFECTIVELY_ONCE_CACHE", self.root.join("cache"))
            .env("DELAY", std::fs::read_to_string(self.root.join("delay")).unwrap())
            // The port lock outside the checkout, but only this test's.
            .env("TMPDIR", self.root.join("tmp"))
            .env_remove("AWS_ENDPOINT_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("aws.sh runs")
    }

    fn run(&self, verb: &str) -> std::process::Output {
        self.spawn(verb).wait_with_output().unwrap()
    }

    /// The pids of the stand-ins started so far, in order.
    fn starts(&self) -> Vec<u32> {
        let starts = std::fs::read_to_string(self.root.join("starts")).unwrap_or_default();
        starts.lines().map(|line| line.parse().unwrap()).collect()
    }

    fn overlaps(&self) -> String {
        std::fs::read_to_string(self.root.join("overlaps")).unwrap_or_default()
    }

    fn pid_file(&self) -> PathBuf {
        self.root.join(format!(".local-aws/aws-{}/moto.pid", self.port))
    }

    fn serving(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }
}

impl Drop for SlowCheckout {
    fn drop(&mut self) {
        for pid in self.starts() {
            let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether `pid` still runs (a zombie, exited but not yet reaped, does not).
fn running(pid: u32) -> bool {
    let ps = Command::new("ps").args(["-o", "stat=", "-p", &pid.to_string()]).output().unwrap();
    let stat = String::from_utf8_lossy(&ps.stdout);
    !stat.trim().is_empty() && !stat.trim().starts_with('Z')
}

/// Two test binaries ask for the local AWS at once and it starts slower than `up` waits: the
/// first `up` stops the server it gave up on (and its pid file) before the second, waiting on
/// the port lock, starts its own, so one port never has two servers, nor one `down` cannot stop.
#[test]
fn an_up_that_times_out_stops_its_server_before_the_next_up_starts_one() {
    let checkout = SlowCheckout::new("timeout", 5, 2);
    let first = checkout.spawn("up");
    std::thread::sleep(Duration::from_millis(500));
    let second = checkout.spawn("up");
    let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    for (which, up) in [("first", &first), ("second", &second)] {
        let stderr = String::from_utf8_lossy(&up.stderr);
        assert!(!up.status.success(), "the {which} up: {stderr}");
        assert!(stderr.contains("did not answer within 2 s; stopped it"), "the {which} up: {stderr}");
    }
    assert_eq!(checkout.overlaps(), "", "a server started while an earlier one still ran");
    let starts = checkout.starts();
    assert_eq!(starts.len(), 2, "each up started one server in turn");
    assert!(starts.iter().all(|pid| !running(*pid)), "a server outlived the up that gave up on it");
    assert!(!checkout.pid_file().exists(), "the pid file of a stopped server is left");
    // Past the stand-in's delay, nothing binds the port behind the script's back.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!checkout.serving(), "a server serves on {} that no pid file names", checkout.port);
}

/// An `up` killed while its server starts leaves the pid file naming it: the next `up` waits
/// for that server and reuses it instead of starting a second, and `down` stops it.
#[test]
fn an_up_reuses_the_server_a_killed_up_left_starting_and_down_stops_it() {
    let checkout = SlowCheckout::new("killed", 3, 30);
    let mut first = checkout.spawn("up");
    let started = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        checkout.pid_file().exists() && !checkout.starts().is_empty()
    });
    assert!(started, "the first up spawned its server");
    first.kill().unwrap();
    first.wait().unwrap();
    let second = checkout.run("up");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("waiting for the local AWS already starting"), "{stderr}");
    assert_eq!(checkout.starts().len(), 1, "a second server was started");
    assert!(checkout.serving());
    let down = checkout.run("down");
    assert!(String::from_utf8_lossy(&down.stderr).contains("stopped"), "{}", String::from_utf8_lossy(&down.stderr));
    assert!(!running(checkout.starts()[0]), "down left the server running");
    assert!(!checkout.serving(), "a server still serves after down");
}
