//! The emulator's HTTP invoke reads a function error as Lambda's Invoke API reports it: status 200
//! with `X-Amz-Function-Error`. The whole batch failed; the emulator must not read the error body
//! as "no batchItemFailures" and delete every message.

use aws_lambda_events::event::sqs::SqsEvent;
use local::invoke::Http;
use local::invoke::SqsFunction;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_function_error_answered_with_200_fails_the_whole_batch() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = socket.read(&mut request).await.unwrap();
        let body = r#"{"errorType":"Unhandled","errorMessage":"x"}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\nX-Amz-Function-Error: Unhandled\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(answer.as_bytes()).await.unwrap();
    });
    let function = Http { url: format!("http://{addr}"), function: "payments-consumer".into() };
    let answer = function.invoke(SqsEvent::default()).await;
    let error = answer.expect_err("a function error is not a batch without failures").to_string();
    assert!(error.contains("function error (Unhandled)"), "{error}");
}
