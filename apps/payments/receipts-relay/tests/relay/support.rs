//! The relay tests' shared setup on the local AWS: an outbox table with a payment's PENDING row,
//! the stream record of its insert, the markers, a relay, the row as the table has it and a park
//! queue. Each module of the binary uses part of it.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::{Event, StreamViewType};
use effectively_once::{Config, Idempotency, ManualClock};
use effectively_once_dynamodb::testing::{fresh_store, sdk_config, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{EmailSender, Policy, SesSender};
use effectively_once_lambda::park::{Parcel, SqsQueue};
use effectively_once_lambda::streams::Options;
use effectively_once_lambda::testing::streams;
use payments::outbox::row_item;
use payments::{Outbox, OutboxRow, PaymentEvent, ReceiptRow};
use receipts_relay::{Alerts, Receipts, MARKER_LEASE};

/// When the ledger wrote the row, as the sample stream record shows it.
const WRITTEN_AT: &str = "2026-11-18T11:06:40.123Z";

/// A fresh store, an outbox table on it, a new payment's receipt row and the stream record of
/// that row's insert.
pub struct Pending {
    pub store: DynamoDbStore,
    pub client: aws_sdk_dynamodb::Client,
    pub outbox_table: String,
    pub event_id: String,
    pub to: String,
    /// The row as the ledger's transaction writes it (in the stream's form, which converts to the
    /// SDK's for a `PutItem`).
    pub item: serde_dynamo::Item,
    pub event: Event,
}

impl Pending {
    /// The row written PENDING, for a recipient named after `who`.
    pub async fn new(who: &str) -> Pending {
        let pending = Pending::erased(who).await;
        let item = pending.item.clone();
        pending.client.put_item().table_name(&pending.outbox_table).set_item(Some(item.into())).send().await.unwrap();
        pending
    }

    /// The stream captured the row's insert, but the row is gone (erased) from the table.
    pub async fn erased(who: &str) -> Pending {
        let (store, _) = fresh_store().await;
        let client = store.client().clone();
        let outbox_table = unique_name("outbox");
        payments::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
        let event_id = unique_name("pay");
        let to = format!("{}@example.com", unique_name(who));
        let mut payment = PaymentEvent::parse(&format!(
            r#"{{"event_id": "{event_id}", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}}"#
        ))
        .unwrap();
        payment.receipt_email = Some(to.clone());
        let item = serde_dynamo::Item::from(row_item(&payment, &to, WRITTEN_AT));
        // The stream as the sample event shows it (events/dynamodb-stream-outbox.json): the row's
        // insert, then its update to SENT, new images only.
        let mut sent = item.clone();
        sent.insert("status".into(), serde_dynamo::AttributeValue::S("SENT".into()));
        sent.insert("message_id".into(), serde_dynamo::AttributeValue::S("example-message-id".into()));
        let event = streams::Batch::new(&outbox_table, &["pk"])
            .view(StreamViewType::NewImage)
            .change("INSERT", None, Some(item.clone()))
            .change("MODIFY", Some(item.clone()), Some(sent))
            .build();
        Pending { store, client, outbox_table, event_id, to, item, event }
    }

    /// The email markers on this store, with the relay's lease.
    pub fn markers(&self) -> Idempotency<DynamoDbStore> {
        Idempotency::new(self.store.clone(), Config::default().with_lease(MARKER_LEASE))
    }

    /// The email markers on this store, with the relay's lease, timed by `clock`.
    pub fn markers_on(&self, clock: Arc<ManualClock>) -> Idempotency<DynamoDbStore> {
        Idempotency::new(self.store.clone(), Config::default().with_lease(MARKER_LEASE).with_clock(clock))
    }

    /// The row, read consistently; `None` once it is deleted.
    pub async fn row(&self) -> Option<OutboxRow> {
        row(&self.client, &self.outbox_table, &self.event_id).await
    }

    /// The row's status.
    pub async fn status(&self) -> String {
        self.row().await.expect("the outbox row").status.as_str().to_owned()
    }

    /// The receipt in the stream record, as the relay reads it.
    pub fn receipt(&self) -> ReceiptRow {
        ReceiptRow::from_stream_record(&self.event.records[0]).unwrap().expect("a receipt row")
    }
}

/// An event's outbox row in `table`, read consistently; `None` if there is none.
pub async fn row(client: &aws_sdk_dynamodb::Client, table: &str, event_id: &str) -> Option<OutboxRow> {
    Outbox::new(client.clone(), table).row(event_id).await.unwrap()
}

/// A relay whose alerts are counted, not printed.
pub fn relay<E: EmailSender>(
    markers: Idempotency<DynamoDbStore>,
    sender: E,
    outbox_table: &str,
    policy: Policy,
) -> Receipts<E> {
    Receipts::new(markers, sender, outbox_table, policy)
        .with_alerts(Alerts::new(effectively_once_lambda::metrics::Emf::named("test")).published(false))
}

/// A park queue of the test's own on the local AWS, where the relay parks a receipt that fails
/// for good, as deployed with `PARK_QUEUE_URL`.
pub struct Park {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl Park {
    /// A new queue.
    pub async fn fresh() -> Park {
        let client = aws_sdk_sqs::Client::new(&sdk_config().await);
        let created = client.create_queue().queue_name(unique_name("relay-park")).send().await.unwrap();
        Park { url: created.queue_url().unwrap().to_owned(), client }
    }

    /// The Streams driver's options, no metrics, parking in this queue.
    pub fn options(&self) -> Options {
        Options { emit_metrics: false, ..Options::new("test") }.park_in(SqsQueue::new(self.client.clone(), &self.url))
    }

    /// Every parcel parked so far (each received once and left invisible).
    pub async fn parcels(&self) -> Vec<Parcel> {
        let mut parcels = Vec::new();
        loop {
            let out = self.client.receive_message().queue_url(&self.url).max_number_of_messages(10).send().await;
            let messages = out.unwrap().messages.unwrap_or_default();
            if messages.is_empty() {
                return parcels;
            }
            parcels.extend(messages.iter().map(|m| serde_json::from_str(m.body().unwrap()).unwrap()));
        }
    }
}

/// A sender on the local SES with `from` verified.
pub async fn verified_ses(from: &str) -> SesSender {
    effectively_once_effects::testing::ses_sender(from).await
}

/// A DynamoDB client whose requests go to `127.0.0.1:port` (a fake or a proxy).
pub async fn client_at(port: u16) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// DynamoDB refusing a request as invalid (a bug or a schema drift, fixed by a deploy), which
/// the store itself calls permanent.
pub fn refused_as_invalid() -> &'static [u8] {
    let body = r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"One or more parameter values were invalid"}"#;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    Box::leak(answer.into_bytes().into_boxed_slice())
}

/// An empty-bodied 503, as a load balancer answers.
pub const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
