//! What "the same request" means by default: the method, the path and the body's canonical
//! form; another resource, or a body that only hashes like another, is another request.

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use crate::support::{setup, Body};
use http::{Request, Response};
use http_body_util::BodyExt;
use tower::{service_fn, Layer, ServiceExt};

#[tokio::test]
async fn the_same_key_on_another_resource_is_not_the_first_resources_answer() {
    let s = setup();
    let runs = s.runs.clone();
    let service = s.layer.layer(service_fn(move |request: Request<Body>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let path = request.uri().path().to_owned();
            Ok::<_, Infallible>(Response::new(Body::from(format!(r#"{{"updated": "{path}"}}"#))))
        }
    }));
    let patch = |path: &str| {
        Request::patch(path).header("idempotency-key", "k-1").body(Body::from(r#"{"status": "shipped"}"#)).unwrap()
    };
    let first = service.clone().oneshot(patch("/orders/1")).await.unwrap();
    assert_eq!(first.status(), 200);
    let other = service.clone().oneshot(patch("/orders/2")).await.unwrap();
    let (status, replayed) = (other.status(), other.headers().contains_key("idempotent-replayed"));
    let body = other.into_body().collect().await.unwrap().to_bytes();
    assert_eq!((status.as_u16(), replayed), (422, false), "{}", String::from_utf8_lossy(&body));
    let again = service.oneshot(patch("/orders/1")).await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true", "the first resource's retry still replays");
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn a_big_integer_body_and_its_tagged_string_body_are_two_bodies() {
    let s = setup();
    s.send("warmup", "{}").await; // the handler's first run is held; later ones answer 201
    let first = s.send("big-1", r#"{"amount": 9007199254740993}"#).await;
    assert_eq!(first.0, 201);
    let other = s.send("big-1", r#"{"amount": "\u0000int:9007199254740993"}"#).await;
    assert_eq!((other.0, other.1), (422, false), "another body was answered {:?} as a replay", other.3);
}
