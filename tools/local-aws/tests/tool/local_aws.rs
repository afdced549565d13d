//! The local AWS's own tests (`infra/local/test_serve.py`): serve.py's replacements of moto code
//! give moto's answers at a cost that does not grow with the queue or the table. Run with the
//! venv `infra/local/aws.sh install` makes (once per machine, in the per-user cache of
//! `infra/tools.sh`, under its lock), so `cargo test` covers the Python side too. The script's
//! instances, keyed by port, and its slow starts are the repository's tests (`tests/repo`,
//! `local_services`).

use std::path::Path;
use std::process::Command;

#[test]
fn serve_py_replacements_answer_as_moto_does_and_cost_what_they_touch() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The pinned moto's venv, whichever checkout's server runs.
    let install = Command::new(root.join("infra/local/aws.sh")).arg("install").output().expect("aws.sh runs");
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
