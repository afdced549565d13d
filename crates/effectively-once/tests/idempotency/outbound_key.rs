//! `outbound::key` fits Stripe's header, its documented target, for every valid (kind, event id)
//! pair: Stripe takes idempotency keys "up to 255 characters long"
//! (https://docs.stripe.com/idempotency), while a kind and an event id may reach
//! 64 + 1 + 200 = 265 characters. A longer key would be refused downstream (or, for APIs that
//! truncate, shared with another event).

use effectively_once::outbound::key;

#[test]
fn every_valid_pair_gets_a_key_stripe_accepts() {
    let kind = "k".repeat(64);
    let event_id = "p".repeat(200);
    let k = key(&kind, &event_id).expect("a valid kind and a valid event id");
    assert!(k.len() <= 255, "{} characters", k.len());
}
