//! What the deployment template's policies and settings mean, checked against the keys and
//! requests the code sends. cfn-lint proves the template is well formed; it cannot tell that the
//! relay's role may delete a recorded payment rejection, or that a FIFO payments queue got a
//! standard dead-letter queue. This reads `apps/payments/template.json` with a small evaluator
//! of the IAM forms the template uses (`iam`) and a resolver of its intrinsic functions (`cfn`).
//!
//! One test binary, the tests grouped by what they pin: which keys each role may touch
//! (`table_keys`), the role's other grants (`grants`), every request the functions send allowed
//! by their role (`requests`, on the local AWS), alarms and dashboards (`monitoring`), event
//! sources and their queues (`event_sources`), and the functions' and data's settings
//! (`configuration`). This file holds the template and the logical ids the tests share.

mod cfn;
mod iam;

mod configuration;
mod event_sources;
mod grants;
mod monitoring;
mod requests;
mod table_keys;

use payments::ledger;
use serde_json::Value;

const TEMPLATE: &str = include_str!("../../../template.json");

fn template() -> Value {
    serde_json::from_str(TEMPLATE).expect("apps/payments/template.json is JSON")
}

/// A string or an array of strings as a list.
fn list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

/// The roles, by logical id.
pub(crate) const CONSUMER: &str = "PaymentsConsumerRole";
pub(crate) const RELAY: &str = "ReceiptsRelayRole";
pub(crate) const SWEEPER: &str = "OutboxSweeperRole";
pub(crate) const KAFKA: &str = "KafkaConsumerRole";
pub(crate) const WRITES: [&str; 4] =
    ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"];

/// The payments API's role.
pub(crate) const API: &str = "PaymentsApiRole";

/// The payments consumer and the receipts relay: logical id of the function, of its role, of its event source mapping, and
/// the binary (the `BuildProperties.Binary` SAM builds).
pub(crate) const FUNCTIONS: [(&str, &str, &str, &str); 2] = [
    ("PaymentsConsumerFunction", CONSUMER, "PaymentsEventSourceMapping", "payments-consumer"),
    ("ReceiptsRelayFunction", RELAY, "ReceiptsEventSourceMapping", "receipts-relay"),
];

/// The Kafka payments consumer, in the same form: it exists only when the stack is given an MSK
/// cluster ([`KAFKA_CONDITION`]), and its role also reaches the cluster and its VPC.
pub(crate) const KAFKA_FUNCTION: (&str, &str, &str, &str) =
    ("KafkaConsumerFunction", KAFKA, "KafkaEventSourceMapping", "kafka-consumer");

/// The outbox sweeper: a scheduled function (no event source mapping) of the relay's package.
pub(crate) const SWEEPER_FUNCTION: &str = "OutboxSweeperFunction";

/// The condition the Kafka consumer's resources are created under.
pub(crate) const KAFKA_CONDITION: &str = "HasKafkaCluster";

/// The functions that report each record's disposition in EMF metrics, and are alarmed and
/// configured alike: the two above and the Kafka consumer.
pub(crate) fn record_functions() -> impl Iterator<Item = (&'static str, &'static str, &'static str, &'static str)> {
    FUNCTIONS.into_iter().chain([KAFKA_FUNCTION])
}
pub(crate) const TABLES: [&str; 3] = ["IdempotencyTable", "LedgerTable", "OutboxTable"];

/// The key of a payment's record in the idempotency table, as the ledger writes it.
pub(crate) fn payment_record() -> String {
    format!("{}#pay_0001", ledger::PREFIX)
}

pub(crate) fn email_marker() -> String {
    payments::receipt_key("pay_0001").expect("a valid key").as_str().to_owned()
}

/// The key of an API request's record in the idempotency table, as the API writes it.
pub(crate) fn api_record() -> String {
    format!("{}#pay_0001", payments_api::PREFIX)
}
