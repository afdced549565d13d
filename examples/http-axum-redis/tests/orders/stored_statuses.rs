//! Only the handler's own answers are stored (2xx and 3xx), over the local Valkey/Redis: axum's
//! `415` for a missing `Content-Type`, answered before the handler runs, is not, so the
//! client's corrected retry (same key, same body, the header fixed) creates the order.

use std::sync::Arc;

use bytes::Bytes;
use effectively_once_redis::RedisStore;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[tokio::test]
async fn a_retry_that_fixes_its_content_type_is_not_the_stored_415() {
    let url = effectively_once_redis::testing::url();
    let namespace = format!("stored-statuses-{}", uuid::Uuid::new_v4());
    let store = RedisStore::connect(&url, &namespace).await.unwrap_or_else(|e| panic!("Redis at {url}: {e}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(http_axum_redis::serve(listener, http_axum_redis::app(store, Arc::default()), async {
        let _ = stopped.await;
    }));
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = r#"{"item": "tea", "quantity": 2}"#;
    let send = |content_type: Option<&str>| {
        let mut request = Request::post(format!("http://{addr}/orders")).header("idempotency-key", "order-415");
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        client.request(request.body(Full::from(body.to_owned())).unwrap())
    };
    let first = send(None).await.unwrap();
    assert_eq!(first.status(), 415, "axum refuses a JSON body without its Content-Type");
    let fixed = send(Some("application/json")).await.unwrap();
    let (status, replayed) = (fixed.status(), fixed.headers().contains_key("idempotent-replayed"));
    let text = fixed.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        (status.as_u16(), replayed),
        (201, false),
        "the corrected retry was answered {status} (replayed: {replayed}): {}",
        String::from_utf8_lossy(&text)
    );
    let again = send(Some("application/json")).await.unwrap();
    assert_eq!((again.status().as_u16(), again.headers().contains_key("idempotent-replayed")), (201, true));
}
