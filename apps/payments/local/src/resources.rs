//! The payments application's resources on the local AWS: every table, queue and stream of
//! `apps/payments/template.json` (compiled in, so local and cloud cannot drift), created by the
//! local AWS tool's template reader ([`local::template`]), and named for the pipeline's use.

use serde_json::Value;

use local::error::{Result, ResultExt};
use local::resources::{existing_queues, mapping_settings, number};
pub use local::resources::{local_name, Clients, MappingSettings};
use local::template::{self, Own};

/// The deployment template, compiled in.
pub const TEMPLATE: &str = include_str!("../../template.json");

/// The sender identity verified in the local SES: the receipts' (the template's `ReceiptFrom`).
pub const RECEIPT_FROM: &str = "receipts@example.com";

/// The template's parameter (the MSK cluster's ARN) the Kafka mapping reads from.
pub const KAFKA_CLUSTER: &str = "KafkaClusterArn";

/// The names and addresses of one set of local resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `LEDGER_TABLE`.
    pub ledger_table: String,
    /// `OUTBOX_TABLE`.
    pub outbox_table: String,
    /// The payments queue's URL.
    pub queue_url: String,
    /// Its dead-letter queue's URL.
    pub dlq_url: String,
    /// The receipts relay's on-failure destination.
    pub failures_url: String,
    /// The payments queue's `maxReceiveCount`, from the template.
    pub max_receive_count: u32,
    /// The Kafka mapping's on-failure destination.
    pub kafka_failures_url: String,
    /// The receipts relay's park queue (`PARK_QUEUE_URL`): outbox records it failed on for good.
    pub receipts_park_url: String,
    /// The Kafka consumer's park queue.
    pub kafka_park_url: String,
}

fn template() -> Result<Value> {
    serde_json::from_str(TEMPLATE).context("apps/payments/template.json")
}

/// The settings of the template's mapping on `source` (`PaymentsQueue`, `OutboxTable`,
/// [`KAFKA_CLUSTER`]).
pub fn mapping(source: &str) -> MappingSettings {
    template()
        .and_then(|t| mapping_settings(&t, source))
        .unwrap_or_else(|e| panic!("apps/payments/template.json maps {source}: {e}"))
}

/// Creates every table, queue and stream of the template (those that exist are kept), verifies
/// the sender identity, and returns their names.
pub async fn up(clients: &Clients, prefix: &str) -> Result<Resources> {
    let own = template::up(clients, TEMPLATE, prefix).await.context("apps/payments/template.json")?;
    clients.ses.create_email_identity().email_identity(RECEIPT_FROM).send().await.ok();
    named(&template()?, prefix, &own, "template has no")
}

/// The names of what [`up`] created under `prefix`, looked up without creating anything: the
/// queues' addresses are asked of SQS, and a queue that does not exist is an error saying to run
/// `up` first.
pub async fn lookup(clients: &Clients, prefix: &str) -> Result<Resources> {
    let template = template()?;
    let queues = existing_queues(&clients.sqs, &template, prefix).await?;
    let own = Own { queues, ..Own::default() };
    named(&template, prefix, &own, "`payments-local up` has not created (or `payments-local down` deleted) the queue")
}

/// The resources' names under `prefix`, with the queues' URLs by logical id; `missing` says why
/// a queue the template names has no URL.
fn named(template: &Value, prefix: &str, own: &Own, missing: &str) -> Result<Resources> {
    let redrive = &template["Resources"]["PaymentsQueue"]["Properties"]["RedrivePolicy"];
    let max_receive_count = number(template, &redrive["maxReceiveCount"]).unwrap_or(5) as u32;
    let url = |id: &str| -> Result<String> {
        own.queues.get(id).cloned().ok_or_else(|| format!("{missing} {}", local_name(prefix, id)).into())
    };
    let on_failure = |source: &str, otherwise: &str| {
        let settings = mapping_settings(template, source)?;
        url(settings.on_failure.as_deref().unwrap_or(otherwise))
    };
    Ok(Resources {
        idempotency_table: local_name(prefix, "IdempotencyTable"),
        ledger_table: local_name(prefix, "LedgerTable"),
        outbox_table: local_name(prefix, "OutboxTable"),
        queue_url: url("PaymentsQueue")?,
        dlq_url: url("PaymentsDeadLetterQueue")?,
        // The outbox mapping's on-failure destination, as the template names it.
        failures_url: on_failure("OutboxTable", "ReceiptsFailureQueue")?,
        max_receive_count,
        kafka_failures_url: on_failure(KAFKA_CLUSTER, "KafkaFailureQueue")?,
        receipts_park_url: url("ReceiptsParkQueue")?,
        kafka_park_url: url("KafkaParkQueue")?,
    })
}

/// Deletes what [`up`] created.
pub async fn down(clients: &Clients, resources: &Resources) -> Result<()> {
    for table in [&resources.idempotency_table, &resources.ledger_table, &resources.outbox_table] {
        clients.dynamodb.delete_table().table_name(table).send().await.ok();
    }
    let queues = [&resources.queue_url, &resources.dlq_url, &resources.failures_url, &resources.kafka_failures_url];
    for url in queues.into_iter().chain([&resources.receipts_park_url, &resources.kafka_park_url]) {
        clients.sqs.delete_queue().queue_url(url).send().await.ok();
    }
    Ok(())
}

/// Deletes whatever of the template's tables, queues and streams exists under `prefix`, creating
/// nothing (what is already gone is skipped).
pub async fn down_prefix(clients: &Clients, prefix: &str) -> Result<()> {
    template::down_prefix(clients, TEMPLATE, prefix).await
}

/// The functions' environment for these resources (`cargo lambda watch --env-file`); the
/// payments API's queue (`PAYMENTS_QUEUE_URL`) included.
pub fn lambda_env(resources: &Resources, endpoint: &str) -> String {
    format!(
        "IDEMPOTENCY_TABLE={}\nLEDGER_TABLE={}\nOUTBOX_TABLE={}\nRECEIPT_FROM={RECEIPT_FROM}\nPAYMENTS_QUEUE_URL={}\n\
         AWS_ENDPOINT_URL={endpoint}\nAWS_REGION=us-east-1\nAWS_ACCESS_KEY_ID=test\nAWS_SECRET_ACCESS_KEY=test\n",
        resources.idempotency_table, resources.ledger_table, resources.outbox_table, resources.queue_url,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn mappings_are_read_from_the_template() {
        let stream = super::mapping("OutboxTable");
        assert!(stream.report_batch_item_failures && stream.bisect_batch_on_function_error);
        assert_eq!(stream.batch_size, 10);
        // -1 in the template: retried until the record age limit.
        assert_eq!(stream.maximum_retry_attempts, None);
        // Well inside the stream's 24 h retention: a discarded batch can still be replayed.
        assert_eq!(stream.maximum_record_age_seconds, Some(21_600));
        assert_eq!(stream.event_names, vec!["INSERT".to_owned()]);
        assert_eq!(stream.on_failure.as_deref(), Some("ReceiptsFailureQueue"));
        let kafka = super::mapping(super::KAFKA_CLUSTER);
        assert!(kafka.report_batch_item_failures && kafka.bisect_batch_on_function_error);
        assert_eq!((kafka.batch_size, kafka.maximum_retry_attempts), (100, Some(5)));
        assert_eq!(kafka.maximum_record_age_seconds, Some(3600));
        assert_eq!(kafka.on_failure.as_deref(), Some("KafkaFailureQueue"));
        let queue = super::mapping("PaymentsQueue");
        assert!(queue.report_batch_item_failures);
        assert_eq!((queue.batch_size, queue.maximum_retry_attempts), (10, None));
    }

    #[test]
    fn the_templates_queues_are_named_as_the_functions_read_them() {
        assert_eq!(super::local_name("", "PaymentsDeadLetterQueue"), "payments-dead-letter");
        assert_eq!(super::local_name("t1", "KafkaParkQueue"), "t1-kafka-park");
    }
}
