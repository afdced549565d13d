//! Review finding (issue 11, fixed): `outbound::key` documents Stripe's header as its target, yet
//! every valid (kind, event id) pair is accepted, up to 64 + 1 + 200 = 265 characters; Stripe
//! takes idempotency keys "up to 255 characters long" (https://docs.stripe.com/idempotency).
//! A long event id with a long kind gets a key the downstream refuses (or, for APIs that
//! truncate, a key shared with another event).

use effectively_once::outbound::key;

#[test]
fn every_valid_pair_gets_a_key_stripe_accepts() {
    let kind = "k".repeat(64);
    let event_id = "p".repeat(200);
    let k = key(&kind, &event_id).expect("a valid kind and a valid event id");
    assert!(k.len() <= 255, "{} characters", k.len());
}
