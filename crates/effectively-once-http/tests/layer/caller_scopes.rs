//! Each caller's keys are its own: a plain scope spelled like another's hashed one, and an
//! unscoped request spelled like a scoped key, never meet another caller's record; and a scope
//! is one route's, set on its layer alone.

use crate::support::{post, setup};
use effectively_once::InMemoryStore;
use effectively_once_http::IdempotencyKeyLayer;

fn by_caller(layer: &IdempotencyKeyLayer<InMemoryStore>) -> IdempotencyKeyLayer<InMemoryStore> {
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

/// Scopes are per route: each route's layer has its own, and a scope set on a clone of a
/// route's layer is the clone's alone (the settings are copied on write), so one service can
/// key one route by caller, refuse unknown callers there, and leave another route's keys shared.
#[tokio::test]
async fn a_scope_is_one_routes_and_leaves_the_other_routes_as_they_were() {
    use std::convert::Infallible;

    use effectively_once::{Config, Idempotency};
    use effectively_once_http::{Answer, IdempotencyKey};
    use http::{Request, Response, StatusCode};
    use tower::{service_fn, Layer, ServiceExt};

    let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
    let refunds = IdempotencyKeyLayer::new(idempotency.clone(), "refunds");
    let known_callers = |parts: &http::request::Parts| match parts.headers.get("x-caller") {
        Some(caller) => Ok(Some(caller.to_str().unwrap().to_owned())),
        None => Err(Answer::error(StatusCode::FORBIDDEN, "forbidden", "unknown caller")),
    };
    let orders = IdempotencyKeyLayer::new(idempotency.clone(), "orders").scope(known_callers);
    let audited = refunds.clone().scope(|_: &http::request::Parts| Ok(Some("audit".to_owned())));
    let send = |layer: &IdempotencyKeyLayer<InMemoryStore>, key: &str, caller: Option<&str>| {
        let service = layer.layer(service_fn(|request: Request<crate::support::Body>| async move {
            let key = request.extensions().get::<IdempotencyKey>().unwrap().record_key().to_string();
            let mut response = Response::new(crate::support::Body::from(key));
            *response.status_mut() = StatusCode::CREATED;
            Ok::<_, Infallible>(response)
        }));
        service.oneshot(post(key, BODY, caller))
    };
    assert_eq!(send(&orders, "k1", Some("shop-a")).await.unwrap().status(), 201);
    assert_eq!(send(&orders, "k1", None).await.unwrap().status(), 403, "the scoped route refuses");
    assert_eq!(send(&refunds, "k1", None).await.unwrap().status(), 201, "the other route does not");
    assert_eq!(send(&refunds, "shop-a:k1", Some("shop-a")).await.unwrap().status(), 201);
    assert_eq!(send(&audited, "k2", None).await.unwrap().status(), 201);
    assert_eq!(send(&refunds, "k3", None).await.unwrap().status(), 201, "the clone's scope is not the original's");
    let records: Vec<String> = idempotency.store().records().into_iter().map(|record| record.id).collect();
    assert_eq!(records, ["orders#shop-a:k1", "refunds#audit:k2", "refunds#k1", "refunds#k3", "refunds#shop-a:k1"]);
}
