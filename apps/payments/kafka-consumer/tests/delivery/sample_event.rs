//! The sample MSK event `events/kafka-payments.json` (what `cargo lambda invoke --data-file`
//! sends) through the consumer on the local AWS.

use crate::support::{balance, entries, Tables};
use effectively_once_lambda::events::{Context, KafkaEvent, LambdaEvent};
use effectively_once_lambda::kafka::{self, Options};

fn sample() -> KafkaEvent {
    serde_json::from_slice(include_bytes!("../../../../../events/kafka-payments.json"))
        .expect("the sample is a Kafka event")
}

/// Every payment of the sample posts once, in offset order within its partition (the debit
/// after its credit); the same event delivered again, to another sandbox, posts nothing more.
#[tokio::test]
async fn the_sample_event_posts_each_payment_once_and_again_nothing() {
    let tables = Tables::fresh().await;
    let options = Options { emit_metrics: false, ..Options::new(kafka_consumer::FUNCTION) };
    for _ in 0..2 {
        let payments = tables.payments();
        let response = kafka::process_batch(&payments, LambdaEvent::new(sample(), Context::default()), &options).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }
    let payments = tables.payments();
    assert_eq!(entries(&payments, "acct_42").await, [("pay_0101".to_owned(), 5000), ("pay_0102".to_owned(), -1250)]);
    assert_eq!(balance(&payments, "acct_42").await, Some((3750, 2)));
    assert_eq!(balance(&payments, "acct_7").await, Some((999, 1)));
}
