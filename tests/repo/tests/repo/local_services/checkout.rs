//! A throwaway checkout: a copy of one local server's script (with `lib.sh` and `tools.sh`)
//! whose server is a stand-in that takes `delay` seconds to bind its port, as moto's import or a
//! loaded machine can. Each stand-in appends its pid to `starts`, and to `overlaps` when it starts
//! while an earlier one still runs.

use super::Script;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// What every stand-in does first: note its start, and any earlier one still running, then wait.
const PROLOGUE: &str = r#"
import os, socket, sys, time
port = int(os.environ["PORT"])
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
"#;

/// moto's stand-in (`infra/local/serve.py`): answers the health route `aws.sh` asks.
const MOTO: &str = r#"
import http.server
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"#;

/// redis-server's stand-in: answers `redis.sh`'s AUTH and PING, whatever the password.
const REDIS: &str = r#"
listener = socket.create_server(("127.0.0.1", port))
while True:
    connection, _ = listener.accept()
    try:
        connection.recv(256); connection.sendall(b"+OK\r\n+PONG\r\n")
    except OSError:
        pass
    connection.close()
"#;

/// The `redis-server` found on the checkout's PATH: `--version`, else the stand-in under the
/// title a started redis-server gives itself (`BINARY HOST:PORT`), which `redis.sh` takes for
/// its server's. The program comes on stdin, so that the title is the whole command line; the
/// title is no path, so the interpreter is told its home.
const REDIS_SERVER: &str = r#"#!/usr/bin/env bash
if [[ "${1:-}" == --version ]]; then echo "Redis server v=0.0.0 (a slow stand-in)"; exit 0; fi
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [[ "${args[i]}" == --port ]] && PORT="${args[i + 1]}"; done
export PORT PYTHONHOME="@HOME@"
exec -a "$0 127.0.0.1:$PORT" "@PYTHON@" <"$(dirname "$0")/stand-in.py"
"#;

/// A copy of `script` in a folder of its own, on a port of its own. Removed, its stand-ins
/// stopped, when dropped.
pub(super) struct Checkout {
    script: Script,
    root: PathBuf,
    port: u16,
    delay_secs: u32,
    timeout_secs: u32,
}

impl Checkout {
    pub(super) fn new(script: Script, name: &str, delay_secs: u32, timeout_secs: u32) -> Checkout {
        let port = super::free_port();
        let dir = std::env::temp_dir().join(format!("local-{}-{name}-{}-{port}", script.file(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let checkout = Checkout { script, root: dir, port, delay_secs, timeout_secs };
        let (repo, root) = (repo_checks::root(), &checkout.root);
        for dir in ["infra/local", "tmp", "bin"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [script.file(), "lib.sh"] {
            std::fs::copy(repo.join("infra/local").join(file), root.join("infra/local").join(file)).unwrap();
        }
        std::fs::copy(repo.join("infra/tools.sh"), root.join("infra/tools.sh")).unwrap();
        match script {
            Script::Aws => checkout.stand_in_for_moto(&repo),
            Script::Redis => checkout.stand_in_for_redis(),
        }
        checkout
    }

    /// moto installed already, in a tool cache of the checkout's own (the stamp matches the
    /// requirements, the venv's python is the system's), and `serve.py` the stand-in.
    fn stand_in_for_moto(&self, repo: &Path) {
        let requirements = repo.join("infra/local/requirements.txt");
        std::fs::copy(&requirements, self.root.join("infra/local/requirements.txt")).unwrap();
        let venv = Command::new("bash")
            .arg(self.root.join("infra/tools.sh"))
            .args(["dir", "moto"])
            .env("EFFECTIVELY_ONCE_CACHE", self.root.join("cache"))
            .output()
            .unwrap();
        let venv = PathBuf::from(String::from_utf8(venv.stdout).unwrap().trim());
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::copy(&requirements, venv.join(".installed")).unwrap();
        let python3 = Command::new("sh").args(["-c", "command -v python3"]).output().unwrap();
        std::os::unix::fs::symlink(String::from_utf8(python3.stdout).unwrap().trim(), venv.join("bin/python")).unwrap();
        // aws.sh runs serve.py with the venv's python and the port as `--port`.
        let serve =
            format!("import os, sys\nos.environ['PORT'] = sys.argv[sys.argv.index('--port') + 1]\n{PROLOGUE}{MOTO}");
        std::fs::write(self.root.join("infra/local/serve.py"), serve).unwrap();
    }

    /// `redis-server` (and `valkey-server`, the name the script looks for first) on the
    /// checkout's PATH, ahead of any real one.
    fn stand_in_for_redis(&self) {
        let python = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable); print(sys.prefix)"])
            .output()
            .expect("python3 runs");
        let python = String::from_utf8(python.stdout).unwrap();
        let (executable, home) = python.trim().split_once('\n').expect("the interpreter and its home");
        let bin = self.root.join("bin");
        std::fs::write(bin.join("stand-in.py"), format!("{PROLOGUE}{REDIS}")).unwrap();
        let server = REDIS_SERVER.replace("@PYTHON@", executable).replace("@HOME@", home);
        std::fs::write(bin.join("redis-server"), server).unwrap();
        std::fs::set_permissions(bin.join("redis-server"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink(bin.join("redis-server"), bin.join("valkey-server")).unwrap();
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// `SCRIPT VERB` in the throwaway checkout, started.
    pub(super) fn spawn(&self, verb: &str) -> Child {
        let path = format!("{}:{}", self.root.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        // Through bash rather than exec'ing the copy: a fork by another test thread while the
        // copy was still open for writing would make that exec fail with ETXTBSY.
        Command::new("bash")
            .arg(self.root.join("infra/local").join(self.script.file()))
            .arg(verb)
            .env(self.script.port_var(), self.port.to_string())
            .env(self.script.timeout_var(), self.timeout_secs.to_string())
            .env_remove(self.script.endpoint_var())
            .env("PATH", path)
            .env("CHECKOUT", &self.root)
            .env("DELAY", self.delay_secs.to_string())
            .env("EFFECTIVELY_ONCE_CACHE", self.root.join("cache"))
            // Not the user's password file: the stand-in takes any.
            .env("LOCAL_REDIS_PASSWORD", "stand-in")
            // The port lock outside the checkout, but only this test's.
            .env("TMPDIR", self.root.join("tmp"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} runs: {e}", self.script.file()))
    }

    pub(super) fn run(&self, verb: &str) -> Output {
        self.spawn(verb).wait_with_output().unwrap()
    }

    /// The pids of the stand-ins started so far, in order.
    pub(super) fn starts(&self) -> Vec<u32> {
        let starts = std::fs::read_to_string(self.root.join("starts")).unwrap_or_default();
        starts.lines().map(|line| line.parse().unwrap()).collect()
    }

    pub(super) fn overlaps(&self) -> String {
        std::fs::read_to_string(self.root.join("overlaps")).unwrap_or_default()
    }

    pub(super) fn pid_file(&self) -> PathBuf {
        self.root.join(self.script.pid_file(self.port))
    }

    pub(super) fn serving(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        for pid in self.starts() {
            // Only a stand-in still running: the number of one the script stopped may have gone
            // to another process since (another test's script, say), which is not ours to kill.
            let ps = Command::new("ps").args(["-o", "args=", "-p", &pid.to_string()]).output().unwrap();
            if String::from_utf8_lossy(&ps.stdout).contains(&*self.root.to_string_lossy()) {
                let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
