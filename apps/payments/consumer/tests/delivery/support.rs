//! Shared by the delivery tests: the consumer on tables of its own on the local AWS, and the same
//! consumer counting its calls on whichever trigger's path drives it.

use std::sync::atomic::{AtomicUsize, Ordering};

use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_dynamodb::{DynamoDbStore, RequestCounter};
use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler, RecordResult};
use lambda_runtime::Context;
use payments::Ledger;
use payments_consumer::Payments;

/// A store on the local AWS, with a ledger table and an outbox table no other test uses.
pub struct Tables {
    pub store: DynamoDbStore,
    /// The store's requests, from the tables' creation on.
    pub requests: RequestCounter,
    pub ledger: String,
    pub outbox: String,
}

pub async fn tables() -> Tables {
    let (store, requests) = fresh_store().await;
    let (ledger, outbox) = (unique_name("ledger"), unique_name("outbox"));
    payments::tables::create_ledger_table(store.client(), &ledger).await.unwrap();
    payments::tables::create_outbox_table(store.client(), &outbox).await.unwrap();
    Tables { store, requests, ledger, outbox }
}

/// The consumer on tables of its own, as deployed (with its outbox).
pub async fn payments() -> Payments {
    let Tables { store, ledger, outbox, .. } = tables().await;
    Payments::new(Ledger::new(store, ledger, Some(outbox)))
}

/// The consumer, counting its calls (`handle`, `handle_batch` and `handle_ordered` alike).
pub struct Counted {
    pub inner: Payments,
    calls: AtomicUsize,
}

impl Counted {
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// The consumer on tables of its own, counted, and the counter of its requests from here on.
pub async fn counted() -> (Counted, RequestCounter) {
    let Tables { store, requests, ledger, outbox } = tables().await;
    requests.reset();
    (Counted { inner: Payments::new(Ledger::new(store, ledger, Some(outbox))), calls: AtomicUsize::new(0) }, requests)
}

impl<R: Sync> Handler<R> for Counted
where
    Payments: Handler<R>,
{
    async fn handle(&self, record: &R, context: &Context) -> RecordResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.handle(record, context).await
    }

    fn key(&self, record: &R) -> Option<String> {
        self.inner.key(record)
    }
}

impl<R: Sync> BatchHandler<R> for Counted
where
    Payments: BatchHandler<R>,
{
    async fn handle_batch(&self, records: &[&R], context: &Context) -> Vec<RecordResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.handle_batch(records, context).await
    }
}

impl<R: Sync> OrderedBatchHandler<R> for Counted
where
    Payments: OrderedBatchHandler<R>,
{
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, R>, context: &Context) -> Vec<RecordResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.handle_ordered(batch, context).await
    }
}
