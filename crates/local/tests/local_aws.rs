//! The local AWS's own tests (`infra/local/test_serve.py`): serve.py's replacements of moto code
//! give moto's answers at a cost that does not grow with the queue or the table. Run with the
//! venv `infra/local/aws.sh up` installs, so `cargo test` covers the Python side too.

use std::path::Path;
use std::process::Command;

#[test]
fn serve_py_replacements_answer_as_moto_does_and_cost_what_they_touch() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".local-aws/venv/bin/python");
    assert!(python.exists(), "no {}: run infra/local/aws.sh up (make local-aws-up) first", python.display());
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
