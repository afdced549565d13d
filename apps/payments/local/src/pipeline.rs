//! The payments pipeline on the local AWS as one value: the SDK clients and the resources they
//! reach (tables, queues), and the payments functions, in process, and the emulator built on
//! them.

use std::time::Duration;

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{EmailSender, Policy, SesSender};
use effectively_once_lambda::metrics::Emf;
use local::error::Result;
use local::esm::{Emulator, SqsMapping, StreamMapping};
use local::invoke::{InProcess, Ordered, SqsFunction, StreamFunction};
use payments::Ledger;
use payments_consumer::Payments;
use receipts_relay::{Alerts, Receipts, Sweep, Sweeper};

use crate::resources::{self, Clients, Resources, RECEIPT_FROM};

/// One set of local resources and the clients that reach them.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The local AWS's clients.
    pub clients: Clients,
    /// The tables' names and the queues' addresses.
    pub resources: Resources,
}

impl Pipeline {
    /// Creates the template's resources, named `prefix-...` when a prefix is given (those that
    /// exist are kept).
    pub async fn up(clients: Clients, prefix: &str) -> Result<Pipeline> {
        let resources = resources::up(&clients, prefix).await?;
        Ok(Pipeline { clients, resources })
    }

    /// The resources [`Pipeline::up`] created under `prefix`, looked up without creating any:
    /// an error when they do not exist.
    pub async fn find(clients: Clients, prefix: &str) -> Result<Pipeline> {
        let resources = resources::lookup(&clients, prefix).await?;
        Ok(Pipeline { clients, resources })
    }

    /// Deletes the resources.
    pub async fn down(&self) -> Result<()> {
        resources::down(&self.clients, &self.resources).await
    }

    /// Empties the payments queue and its DLQ.
    pub async fn purge_queues(&self) {
        for url in [&self.resources.queue_url, &self.resources.dlq_url] {
            self.clients.sqs.purge_queue().queue_url(url).send().await.ok();
        }
    }

    /// The ledger on these tables (entries, balances, outbox rows), writing through `dynamodb`:
    /// the local AWS's client, or one behind a fault proxy.
    pub fn ledger(&self, dynamodb: &aws_sdk_dynamodb::Client) -> Ledger {
        let store = DynamoDbStore::new(dynamodb.clone(), &self.resources.idempotency_table);
        Ledger::new(store, &self.resources.ledger_table, Some(self.resources.outbox_table.clone()))
    }

    /// The relay's email markers, with leases of `lease`, through `dynamodb`.
    pub fn markers(&self, dynamodb: &aws_sdk_dynamodb::Client, lease: Duration) -> Idempotency<DynamoDbStore> {
        let store = DynamoDbStore::new(dynamodb.clone(), &self.resources.idempotency_table);
        Idempotency::new(store, Config::default().with_lease(lease))
    }

    /// The in-process payments function, on the ordered path as its `main` serves it.
    pub fn payments(&self) -> Ordered<Payments> {
        Ordered::new(Payments::new(self.ledger(&self.clients.dynamodb)), payments_consumer::FUNCTION)
    }

    /// The in-process Kafka payments consumer (`apps/payments/kafka-consumer`), on the ordered path as
    /// its `main` serves it: the same ledger as the SQS consumer.
    pub fn kafka(&self) -> Ordered<kafka_consumer::Payments> {
        Ordered::new(kafka_consumer::Payments::new(self.ledger(&self.clients.dynamodb)), kafka_consumer::FUNCTION)
            .park_in(&self.clients.sqs, &self.resources.kafka_park_url)
    }

    /// The in-process receipts relay, at most once, sending through the local SES.
    pub fn relay(&self) -> InProcess<Receipts<SesSender>> {
        self.relay_with(SesSender::new(self.clients.ses.clone(), RECEIPT_FROM), Policy::default())
    }

    /// The in-process receipts relay, sending with `sender` under `policy`, with 60 s marker
    /// leases.
    pub fn relay_with<E: EmailSender>(&self, sender: E, policy: Policy) -> InProcess<Receipts<E>> {
        InProcess::new(self.receipts(sender, policy), receipts_relay::FUNCTION)
            .park_in(&self.clients.sqs, &self.resources.receipts_park_url)
    }

    /// The outbox sweeper, as `sweep` says, sending through the local SES with the relay's
    /// default policy and leases; its alerts counted, not printed.
    pub fn sweeper(&self, sweep: Sweep) -> Sweeper<SesSender> {
        let receipts = self.receipts(SesSender::new(self.clients.ses.clone(), RECEIPT_FROM), Policy::default());
        let alerts = Alerts::new(Emf::named(receipts_relay::sweep::SWEEPER)).published(false);
        Sweeper::new(receipts.with_alerts(alerts), sweep)
    }

    /// The receipts relay's handler on these tables, sending with `sender` under `policy`, with
    /// 60 s marker leases.
    fn receipts<E: EmailSender>(&self, sender: E, policy: Policy) -> Receipts<E> {
        let markers = self.markers(&self.clients.dynamodb, Duration::from_secs(60));
        Receipts::new(markers, sender, &self.resources.outbox_table, policy)
    }

    /// The emulator's two mappings on these resources, invoking `payments` and `relay`.
    /// The template's mappings: the queue's, its DLQ after `maxReceiveCount` receives; the
    /// outbox stream's, discarding to its on-failure queue.
    pub fn emulator<P: SqsFunction, R: StreamFunction>(&self, payments: P, relay: R) -> Emulator<P, R> {
        let r = &self.resources;
        let sqs = SqsMapping::with(&r.queue_url, &resources::mapping("PaymentsQueue"));
        let stream = self.outbox_mapping();
        Emulator::new(sqs, stream, payments, relay).dead_letter(&r.dlq_url, r.max_receive_count)
    }

    /// The template's outbox stream mapping (batch size, retries, record age, bisection,
    /// response types, filter), discarding to its on-failure queue.
    pub fn outbox_mapping(&self) -> StreamMapping {
        let r = &self.resources;
        StreamMapping::with(&r.outbox_table, &resources::mapping("OutboxTable"), Some(r.failures_url.clone()))
    }
}
