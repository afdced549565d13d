//! Shared set-up for the workspace's end-to-end tests against the local AWS.

pub mod other_writer;
pub mod scripted;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use effectively_once::{Config, Idempotency, ManualClock};
use effectively_once_dynamodb::testing::{fresh_store, sdk_config, unique_name};
use effectively_once_dynamodb::{DynamoDbStore, RequestCounter};

/// An idempotency layer on a fresh table, and a separate effects table a handler writes to.
pub struct Harness {
    /// Idempotency over DynamoDB, on a manual clock.
    pub idem: Idempotency<DynamoDbStore>,
    /// Requests sent by the idempotency store's client (not the effects client).
    pub requests: RequestCounter,
    /// The clock the layer reads.
    pub clock: Arc<ManualClock>,
    /// A client for the effects table, uncounted.
    pub effects: Client,
    /// The effects table: `pk` (S) to an `applied` counter (N).
    pub effects_table: String,
}

impl Harness {
    /// Lease 30 s, dedup window 1 h, on a manual clock.
    pub async fn new() -> Harness {
        let (store, requests) = fresh_store().await;
        let clock = Arc::new(ManualClock::new());
        let config = Config::default()
            .with_lease(Duration::from_secs(30))
            .with_dedup_window(Duration::from_secs(3600))
            .with_clock(clock.clone());
        let effects = Client::new(&sdk_config().await);
        let effects_table = unique_name("effects");
        effects
            .create_table()
            .table_name(&effects_table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("pk")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build().unwrap())
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .expect("create effects table");
        Harness { idem: Idempotency::new(store, config), requests, clock, effects, effects_table }
    }

    /// The side effect: adds one to the event's `applied` counter (deliberately not idempotent
    /// itself, so a second run shows).
    pub async fn apply(&self, event_id: &str) -> u64 {
        let out = self
            .effects
            .update_item()
            .table_name(&self.effects_table)
            .key("pk", AttributeValue::S(event_id.to_owned()))
            .update_expression("ADD applied :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .expect("apply effect");
        match out.attributes().and_then(|a| a.get("applied")) {
            Some(AttributeValue::N(n)) => n.parse().unwrap(),
            other => panic!("unexpected applied attribute {other:?}"),
        }
    }

    /// How many times the effect was applied for an event, read back from the table.
    pub async fn applied(&self, event_id: &str) -> u64 {
        let out = self
            .effects
            .get_item()
            .table_name(&self.effects_table)
            .key("pk", AttributeValue::S(event_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .expect("read effect");
        match out.item().and_then(|i| i.get("applied")) {
            Some(AttributeValue::N(n)) => n.parse().unwrap(),
            None => 0,
            other => panic!("unexpected applied attribute {other:?}"),
        }
    }
}

/// A ledger on fresh tables (idempotency, ledger, outbox), with counted requests.
pub struct LedgerHarness {
    /// The ledger under test.
    pub ledger: payments::Ledger,
    /// Requests sent by the ledger's client.
    pub requests: RequestCounter,
    /// The clock.
    pub clock: Arc<ManualClock>,
    /// The outbox table.
    pub outbox_table: String,
}

impl LedgerHarness {
    /// Fresh tables; a 1-hour dedup window for recorded rejections.
    pub async fn new() -> LedgerHarness {
        let (store, requests) = fresh_store().await;
        let ledger_table = unique_name("ledger");
        let outbox_table = unique_name("outbox");
        payments::tables::create_ledger_table(store.client(), &ledger_table).await.expect("ledger table");
        payments::tables::create_outbox_table(store.client(), &outbox_table).await.expect("outbox table");
        requests.reset();
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_dedup_window(Duration::from_secs(3600)).with_clock(clock.clone());
        let ledger = payments::Ledger::new(store, ledger_table, Some(outbox_table.clone())).with_config(config);
        LedgerHarness { ledger, requests, clock, outbox_table }
    }

    /// A valid payment event.
    pub fn event(event_id: &str, account_id: &str, amount_cents: i64, currency: &str) -> payments::PaymentEvent {
        payments::PaymentEvent {
            event_id: event_id.into(),
            account_id: account_id.into(),
            amount_cents,
            currency: currency.into(),
            receipt_email: None,
        }
    }

    /// The outbox table.
    pub fn outbox(&self) -> payments::Outbox {
        payments::Outbox::beside(self.ledger.store(), &self.outbox_table)
    }

    /// The outbox row of an event, if any.
    pub async fn outbox_row(&self, event_id: &str) -> Option<payments::OutboxRow> {
        self.outbox().row(event_id).await.expect("read outbox")
    }
}

pub use effectively_once_effects::testing::{emails_to, ses_sender};

/// A ledger post's answer as tests compare two paths' answers: fresh or replayed with its
/// posting, the idempotency error's kind, or another error's retry class.
pub fn summary(result: &Result<effectively_once::Outcome<payments::Posting>, payments::Error>) -> String {
    use effectively_once::Outcome;
    match result {
        Ok(Outcome::Fresh(posting)) => format!("fresh {posting:?}"),
        Ok(Outcome::Replayed(posting)) => format!("replayed {posting:?}"),
        Err(payments::Error::Idempotency(error)) => format!("error {:?}", error.kind()),
        Err(error) => format!("error {:?}", error.retry()),
    }
}

/// A small deterministic generator (xorshift), seeded by a test so its batches and schedules are
/// the same on every run. By hand: six lines, and the seeds the tests name rely on its sequence.
pub struct Rng(pub u64);

impl Rng {
    /// The next number of the sequence.
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
