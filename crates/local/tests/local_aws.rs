//! The local AWS's own tests (`infra/local/test_serve.py`): serve.py's replacements of moto code
//! give moto's answers at a cost that does not grow with the queue or the table. Run with the
//! venv `infra/local/aws.sh install` makes (once, under its lock), so `cargo test` covers the
//! Python side too. And the script's instances, keyed by port.

use std::path::Path;
use std::process::Command;

#[test]
fn serve_py_replacements_answer_as_moto_does_and_cost_what_they_touch() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // This checkout's venv, whichever checkout's server runs.
    let install = aws_sh(0, "install");
    assert!(install.status.success(), "infra/local/aws.sh install: {}", String::from_utf8_lossy(&install.stderr));
    let python = root.join(".local-aws/venv/bin/python");
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
