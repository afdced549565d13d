//! Each caller's keys are its own: a plain scope spelled like another's hashed one, and an
//! unscoped request spelled like a scoped key, never meet another caller's record.

mod common;

use common::{post, setup};
use effectively_once::InMemoryStore;
use effectively_once_http::IdempotencyLayer;

fn by_caller(layer: &IdempotencyLayer<InMemoryStore>) -> IdempotencyLayer<InMemoryStore> {
    layer.clone().scope(|parts: &http::request::Parts| {
        Ok(parts.headers.get("x-caller").map(|caller| caller.to_str().unwrap().to_owned()))
    })
}

const BODY: &str = r#"{"amount_cents": 100}"#;

#[tokio::test]
async fn a_caller_named_like_a_hashed_scope_does_not_share_its_keys() {
    let s = setup();
    let layer = by_caller(&s.layer);
    let victim = "arn:aws:iam::123456789012:role/shop";
    let squatter = effectively_once_http::hashed(victim);
    s.send("warmup", "{}").await; // the handler's first run is held; later ones answer 201
    let victims = s.send_with(&layer, post("pay-3", BODY, Some(victim))).await;
    assert_eq!(victims.0, 201);
    let squatters = s.send_with(&layer, post("pay-3", BODY, Some(&squatter))).await;
    assert!(!squatters.1, "caller {squatter} was replayed caller {victim}'s answer {:?}", squatters.3);
    assert_eq!(squatters.0, 201, "its own request, run");
}

#[tokio::test]
async fn an_unscoped_request_cannot_read_a_scoped_callers_key() {
    let s = setup();
    let layer = by_caller(&s.layer);
    s.send("warmup", "{}").await;
    assert_eq!(s.send_with(&layer, post("pay-4", BODY, Some("shop-a"))).await.0, 201);
    let unscoped = s.send_with(&layer, post("shop-a:pay-4", BODY, None)).await;
    assert!(!unscoped.1, "an unscoped request was replayed shop-a's answer {:?}", unscoped.3);
    assert_eq!(unscoped.0, 201, "its own request, run");
    let again = s.send_with(&layer, post("shop-a:pay-4", BODY, None)).await;
    assert_eq!((again.0, again.1), (201, true), "and replayed to its own retry");
}
