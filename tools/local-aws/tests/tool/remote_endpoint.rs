//! The `local` command refuses an endpoint off this machine before its first request: `local
//! down` deletes tables and queues wherever the SDK points. A listener on loopback stands for
//! the endpoint the tool would reach first, and counts the connections it gets.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A loopback endpoint that answers every request with a DynamoDB client error (not retried),
/// and the number of connections it accepted.
fn counting_endpoint() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&connections);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no"}"#;
            let _ = stream.read(&mut [0u8; 65536]);
            let _ = write!(
                stream,
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, connections)
}

/// A template of a table and a queue, in a file of its own: `local down --template` reads it.
fn template() -> String {
    let path = std::env::temp_dir().join(effectively_once_dynamodb::testing::unique_name("remote-template"));
    let template =
        r#"{"Resources": {"Table": {"Type": "AWS::DynamoDB::Table"}, "Queue": {"Type": "AWS::SQS::Queue"}}}"#;
    std::fs::write(&path, template).unwrap();
    path.display().to_string()
}

/// `local ARGS --template PATH` with `endpoint` for every service and `sqs` for SQS alone,
/// nothing else of the test's own endpoint settings.
fn local(args: &[&str], endpoint: &str, sqs: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_local"));
    command
        .args(args)
        .args(["--template", &template()])
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ENDPOINT_URL_SQS", sqs);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if (name.starts_with("AWS_ENDPOINT_URL_") && name != "AWS_ENDPOINT_URL_SQS") || name == "LOCAL_ALLOW_REMOTE" {
            command.env_remove(name);
        }
    }
    command.env("AWS_REGION", "us-east-1").env("AWS_ACCESS_KEY_ID", "test").env("AWS_SECRET_ACCESS_KEY", "test");
    command
}

#[test]
fn local_down_refuses_a_remote_endpoint_before_any_request() {
    let (endpoint, connections) = counting_endpoint();
    let out =
        local(&["down", "--prefix", "remote"], &endpoint, "https://sqs.eu-west-1.amazonaws.com").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(stderr.contains(r#"refusing AWS_ENDPOINT_URL_SQS="https://sqs.eu-west-1.amazonaws.com""#), "{stderr}");
    assert!(
        stderr.contains("--allow-remote") && stderr.contains("LOCAL_ALLOW_REMOTE=1"),
        "names the override: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("deleted"));
    assert_eq!(connections.load(Ordering::SeqCst), 0, "no request reached any endpoint");

    let amazon = "https://dynamodb.us-east-1.amazonaws.com";
    let out = local(&["down"], amazon, &endpoint).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(&format!("refusing AWS_ENDPOINT_URL={amazon:?}")), "{stderr}");
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}

/// With the override the same command goes ahead: its first request reaches the endpoint. The
/// process is stopped there (the remote SQS endpoint does not exist).
#[test]
fn local_down_goes_ahead_with_the_override() {
    for allow in [&["--allow-remote"][..], &[]] {
        let (endpoint, connections) = counting_endpoint();
        let args = [&["down", "--prefix", "remote"][..], allow].concat();
        let mut command = local(&args, &endpoint, "https://sqs.remote.invalid");
        if allow.is_empty() {
            command.env("LOCAL_ALLOW_REMOTE", "1");
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        // A failsafe, not a measure: the first request comes at once.
        for _ in 0..600 {
            if connections.load(Ordering::SeqCst) > 0 || child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("refusing"), "{args:?}: {stderr}");
        assert!(connections.load(Ordering::SeqCst) > 0, "{args:?}: the request reached the endpoint");
    }
}
