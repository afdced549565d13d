//! The ledger's pre-read (`Ledger::post_batch_as`) on the local AWS: a batch of duplicates that
//! reaches a sandbox which never saw them is answered from one `BatchGetItem`, with no write,
//! when it reads ahead (the trigger says the records may be redeliveries, or duplicates from
//! elsewhere are frequent); and a pre-read never changes an answer, a balance or an entry,
//! whatever it finds or fails to read.

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use effectively_once::{Clock as _, Config, Outcome, Record, Store as _};
use effectively_once_dynamodb::testing::sdk_config;
use effectively_once_dynamodb::{DynamoDbStore, RequestCounter};
use end_to_end::{summary, LedgerHarness};
use payments::{Deliveries, Delivery, Ledger, PaymentEvent, Posting};

fn events(prefix: &str, n: usize) -> Vec<PaymentEvent> {
    (0..n).map(|i| LedgerHarness::event(&format!("{prefix}-{i}"), &format!("acct-{}", i % 3), 100, "USD")).collect()
}

/// `(BatchGetItem, TransactWriteItems)` requests since the last reset.
fn reads_and_transactions(requests: &RequestCounter) -> (u64, u64) {
    let by = requests.by_operation();
    (by.get("BatchGetItem").copied().unwrap_or(0), by.get("TransactWriteItems").copied().unwrap_or(0))
}

/// Posts `batch` at `ledger` and says what each event got, with the requests it took.
async fn post(
    h: &LedgerHarness,
    ledger: &Ledger,
    batch: &[PaymentEvent],
    delivery: impl Into<Deliveries>,
) -> (Vec<String>, (u64, u64)) {
    h.requests.reset();
    let answers = ledger.post_batch_as(batch, delivery).await.iter().map(summary).collect();
    (answers, reads_and_transactions(&h.requests))
}

/// Ten events posted at the harness's own ledger (the sandbox that saw them).
async fn posted(h: &LedgerHarness, prefix: &str) -> Vec<PaymentEvent> {
    let batch = events(prefix, 10);
    assert!(h.ledger.post_batch(&batch).await.iter().all(|r| matches!(r, Ok(Outcome::Fresh(_)))));
    batch
}

fn all(answer: &str, n: usize) -> Vec<String> {
    vec![answer.to_owned(); n]
}

#[tokio::test]
async fn duplicates_at_another_sandbox_write_nothing_when_the_batch_reads_ahead() {
    let h = LedgerHarness::new().await;
    let sandbox = || h.ledger.clone_forgetting();
    let replayed = all("replayed Applied", 10);
    // Read ahead: one BatchGetItem, no transaction, so no write unit at all.
    let batch = posted(&h, "auto-hint").await;
    assert_eq!(post(&h, &sandbox(), &batch, Delivery::MayBeRedelivery).await, (replayed.clone(), (1, 0)));

    // A sandbox that met no duplicate yet, without the hint: the transaction's path, once;
    // that batch raises its estimate, so the next batch of duplicates is read ahead.
    let auto = sandbox();
    let batch = posted(&h, "auto-first").await;
    assert_eq!(post(&h, &auto, &batch, Delivery::Unknown).await, (replayed.clone(), (0, 1)));
    assert!(auto.outside_duplicate_estimate() >= payments::ledger::BREAK_EVEN, "{}", auto.outside_duplicate_estimate());
    assert_eq!(auto.outside_duplicate_estimate(), 1.0 / 8.0, "one batch of eight weighs");
    let batch = posted(&h, "auto-next").await;
    assert_eq!(post(&h, &auto, &batch, Delivery::Unknown).await, (replayed.clone(), (1, 0)));
    // Duplicates the read answered count too: 1/8 kept at 7/8, plus 1/8.
    assert_eq!(auto.outside_duplicate_estimate(), 1.0 / 8.0 * 7.0 / 8.0 + 1.0 / 8.0);

    // Found records are remembered: the same batch again costs nothing.
    assert_eq!(post(&h, &auto, &batch, Delivery::Unknown).await, (replayed, (0, 0)));
}

/// The hint is per record: a batch reads the records of the events said to be redeliveries that
/// this sandbox does not remember, not the whole batch, and nothing when it remembers them all
/// (a redelivery to the sandbox that posted the first copy, the common case).
#[tokio::test]
async fn a_redelivery_hint_reads_only_the_redelivered_records_this_sandbox_does_not_remember() {
    use Delivery::{MayBeRedelivery as Again, Unknown as First};
    let h = LedgerHarness::new().await;
    let batch = posted(&h, "hinted").await;
    let fresh = events("hinted-fresh", 5);
    let mixed: Vec<PaymentEvent> = batch[..5].iter().cloned().chain(fresh.iter().cloned()).collect();
    let hints = [vec![Again; 5], vec![First; 5]].concat();
    let answers = [all("replayed Applied", 5), all("fresh Applied", 5)].concat();
    // The sandbox that posted them remembers every redelivered id: no read, one transaction for
    // the new events.
    assert_eq!(post(&h, &h.ledger, &mixed, hints.clone()).await, (answers, (0, 1)));

    // Another sandbox, nothing met from elsewhere yet: five producer retries (received once)
    // and five redeliveries of events it never saw. Only the redeliveries are read; the
    // retries cancel the transaction, as without a read, and are answered from it.
    let other = h.ledger.clone_forgetting();
    let hints = [vec![First; 5], vec![Again; 5]].concat();
    assert_eq!(post(&h, &other, &batch, hints).await, (all("replayed Applied", 10), (1, 1)));
}

#[tokio::test]
async fn a_first_delivery_read_ahead_costs_one_read_and_its_transaction_and_posts_the_same() {
    let h = LedgerHarness::new().await;
    let fresh = all("fresh Applied", 10);
    let hinted = h.ledger.clone_forgetting();
    assert_eq!(
        post(&h, &hinted, &events("first-always", 10), Delivery::MayBeRedelivery).await,
        (fresh.clone(), (1, 1))
    );
    // With nothing met from elsewhere and no hint: no read.
    let auto = h.ledger.clone_forgetting();
    assert_eq!(post(&h, &auto, &events("first-auto", 10), Delivery::Unknown).await, (fresh, (0, 1)));
    for account in ["acct-0", "acct-1", "acct-2"] {
        let balance = h.ledger.balance(account).await.unwrap().unwrap();
        let entries = h.ledger.entries(account).await.unwrap();
        assert_eq!(balance.entry_count, entries.len() as u64);
        assert_eq!(balance.balance_cents, 100 * entries.len() as i64);
    }
    assert_eq!(h.ledger.entries("acct-0").await.unwrap().len(), 8, "4 of each batch");
}

#[tokio::test]
async fn a_record_of_another_payload_found_ahead_is_key_reuse_never_a_replay() {
    let h = LedgerHarness::new().await;
    let first = LedgerHarness::event("reuse-1", "acct-1", 100, "USD");
    assert!(matches!(h.ledger.post(&first).await, Ok(Outcome::Fresh(Posting::Applied))));
    let other = h.ledger.clone_forgetting();
    let other_amount = LedgerHarness::event("reuse-1", "acct-1", 250, "USD");
    let (answers, requests) = post(&h, &other, &[other_amount.clone(), first.clone()], Delivery::MayBeRedelivery).await;
    assert_eq!(answers, ["error KeyReused", "replayed Applied"]);
    assert_eq!(requests, (1, 0), "answered from the read");
    // Remembered as the record, not as an answer: the same two again, with no request.
    let (again, requests) = post(&h, &other, &[other_amount, first], Delivery::Unknown).await;
    assert_eq!((again, requests), (answers, (0, 0)));
    // Key reuse found by a transaction at a sandbox that did not read ahead is a duplicate from
    // elsewhere too, for the estimate.
    let auto = h.ledger.clone_forgetting();
    let (answers, requests) =
        post(&h, &auto, &[LedgerHarness::event("reuse-1", "acct-1", 7, "USD")], Delivery::Unknown).await;
    assert_eq!((answers, requests), (vec!["error KeyReused".to_owned()], (0, 1)));
    assert_eq!(auto.outside_duplicate_estimate(), 1.0 / 8.0);
    let balance = h.ledger.balance("acct-1").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (100, 1), "nothing posted twice");
}

#[tokio::test]
async fn an_event_id_recorded_under_another_account_is_key_reuse_and_posts_nothing() {
    let h = LedgerHarness::new().await;
    let taken = LedgerHarness::event("acct-move-1", "acct-a", 100, "USD");
    assert!(matches!(h.ledger.post(&taken).await, Ok(Outcome::Fresh(Posting::Applied))));
    let other = h.ledger.clone_forgetting();
    let moved = LedgerHarness::event("acct-move-1", "acct-b", 100, "USD");
    let new = LedgerHarness::event("acct-move-2", "acct-b", 40, "USD");
    let (answers, requests) = post(&h, &other, &[moved, new], Delivery::MayBeRedelivery).await;
    assert_eq!(answers, ["error KeyReused", "fresh Applied"]);
    assert_eq!(requests, (1, 1), "the read, and one transaction for the new event only");
    assert_eq!(h.ledger.entries("acct-b").await.unwrap(), [("acct-move-2".to_owned(), 40)]);
    let b = h.ledger.balance("acct-b").await.unwrap().unwrap();
    assert_eq!((b.balance_cents, b.entry_count), (40, 1));
    assert_eq!(h.ledger.entries("acct-a").await.unwrap(), [("acct-move-1".to_owned(), 100)]);
}

#[tokio::test]
async fn a_duplicate_within_the_batch_read_ahead_gets_the_first_copys_answer() {
    let h = LedgerHarness::new().await;
    let known = LedgerHarness::event("inbatch-1", "acct-1", 100, "USD");
    assert!(matches!(h.ledger.post(&known).await, Ok(Outcome::Fresh(Posting::Applied))));
    let other = h.ledger.clone_forgetting();
    let reused = LedgerHarness::event("inbatch-1", "acct-1", 999, "USD");
    let new = LedgerHarness::event("inbatch-2", "acct-1", 30, "USD");
    let batch = [known.clone(), known, reused, new.clone(), new];
    let (answers, requests) = post(&h, &other, &batch, Delivery::MayBeRedelivery).await;
    assert_eq!(
        answers,
        ["replayed Applied", "replayed Applied", "error KeyReused", "fresh Applied", "replayed Applied"]
    );
    // The repeated id is asked for once (DynamoDB refuses a key twice in one request, which
    // would have fallen back to a cancelled transaction: two of them here).
    assert_eq!(requests, (1, 1));
    let balance = h.ledger.balance("acct-1").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (130, 2));
    // A batch whose only repeat is its own in-batch copy met no duplicate from elsewhere.
    let fresh = h.ledger.clone_forgetting();
    let twice = LedgerHarness::event("inbatch-3", "acct-1", 5, "USD");
    let (answers, _) = post(&h, &fresh, &[twice.clone(), twice], Delivery::Unknown).await;
    assert_eq!(answers, ["fresh Applied", "replayed Applied"]);
    assert_eq!(fresh.outside_duplicate_estimate(), 0.0, "an in-batch copy is not from elsewhere");
}

/// Fails every `BatchGetItem` before it is sent, as throttling or the network would.
#[derive(Debug)]
struct FailingReads;

impl Intercept for FailingReads {
    fn name(&self) -> &'static str {
        "FailingReads"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match context.request().headers().get("x-amz-target") {
            Some(target) if target.ends_with("BatchGetItem") => Err("throttled (test)".into()),
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_failed_preread_falls_back_to_the_transaction_and_loses_or_doubles_nothing() {
    let h = LedgerHarness::new().await;
    let counter = RequestCounter::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .interceptor(counter.clone())
        .interceptor(FailingReads)
        .build();
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), h.ledger.store().table());
    let failing = Ledger::new(store, h.ledger.table(), None);
    let earlier = events("fail", 4);
    assert!(h.ledger.post_batch(&earlier).await.iter().all(|r| matches!(r, Ok(Outcome::Fresh(_)))));
    let mut batch = earlier.clone();
    batch.extend(events("fail-new", 6));
    let answers: Vec<String> =
        failing.post_batch_as(&batch, Delivery::MayBeRedelivery).await.iter().map(summary).collect();
    let mut expected = all("replayed Applied", 4);
    expected.extend(all("fresh Applied", 6));
    assert_eq!(answers, expected);
    let by = counter.by_operation();
    assert_eq!(by.get("BatchGetItem"), Some(&1), "tried once: {by:?}");
    assert_eq!(by.get("TransactWriteItems"), Some(&2), "cancelled by the duplicates, then the rest: {by:?}");
    // Each event once: the four earlier and the six new, on three accounts.
    let mut entries = 0;
    for account in ["acct-0", "acct-1", "acct-2"] {
        let balance = h.ledger.balance(account).await.unwrap().unwrap();
        let listed = h.ledger.entries(account).await.unwrap();
        assert_eq!((balance.entry_count, balance.balance_cents), (listed.len() as u64, 100 * listed.len() as i64));
        entries += listed.len();
    }
    assert_eq!(entries, 10);
    // And again: all duplicates now, answered from what the failing ledger remembers.
    let again: Vec<String> = failing.post_batch(&batch).await.iter().map(summary).collect();
    assert_eq!(again, all("replayed Applied", 10));
}

/// A batch mixing duplicates, a rejection's duplicate, key reuse, a new rejection and a first,
/// read ahead at a sandbox that remembers nothing, is answered as posting one by one answers it
/// (each on its own tables, seeded alike), and leaves the same balances.
#[tokio::test]
async fn reading_ahead_answers_a_mixed_batch_as_posting_one_by_one_does() {
    let seed = [
        LedgerHarness::event("mix-1", "acct-m", 500, "USD"),
        LedgerHarness::event("mix-2", "acct-m", -9000, "USD"),
        LedgerHarness::event("mix-3", "acct-n", 100, "EUR"),
    ];
    let batch = vec![
        seed[0].clone(),
        LedgerHarness::event("mix-4", "acct-m", -200, "USD"),
        seed[1].clone(),
        LedgerHarness::event("mix-3", "acct-m", 100, "EUR"),
        LedgerHarness::event("mix-5", "acct-n", 7, "USD"),
        seed[2].clone(),
    ];
    let mut runs = Vec::new();
    for read_ahead in [true, false] {
        let h = LedgerHarness::new().await;
        for event in &seed {
            h.ledger.post(event).await.unwrap();
        }
        let answers: Vec<String> = if read_ahead {
            let ledger = h.ledger.clone_forgetting();
            ledger.post_batch_as(&batch, Delivery::MayBeRedelivery).await.iter().map(summary).collect()
        } else {
            let ledger = h.ledger.clone_forgetting();
            let mut answers = Vec::new();
            for event in &batch {
                answers.push(summary(&ledger.post(event).await));
            }
            answers
        };
        let (m, n) = (h.ledger.balance("acct-m").await.unwrap(), h.ledger.balance("acct-n").await.unwrap());
        runs.push((answers, format!("{m:?} {n:?}")));
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(
        runs[0].0,
        [
            "replayed Applied",
            "fresh Applied",
            "replayed Rejected { reason: InsufficientFunds { balance_cents: 500 } }",
            "error KeyReused",
            "fresh Rejected { reason: CurrencyMismatch { account_currency: \"EUR\" } }",
            "replayed Applied",
        ]
    );
}

/// Claims `event`'s record in progress (another attempt holding it, lease far ahead).
async fn hold_in_progress(h: &LedgerHarness, event: &PaymentEvent) {
    let hash = Config::default().payload_hash(event).unwrap();
    let now_ms = h.clock.now_ms();
    let record = Record::in_progress(
        format!("payments#{}", event.event_id),
        hash.as_str(),
        "elsewhere",
        now_ms + 3_600_000,
        now_ms / 1000 + 86_400,
    );
    h.ledger.store().claim(&record, now_ms).await.expect("claimed");
}

/// An account's credit whose record is held in progress elsewhere, then a debit it would
/// cover: the transaction path answers the credit in progress (in progress elsewhere) and holds
/// the debit back behind it (kept), so SQS redelivers both in order. A pre-read that finds the
/// credit's record in progress answers the same: the debit is held back, never rejected and
/// recorded for good for want of the credit it overtook.
#[tokio::test]
async fn a_record_found_in_progress_ahead_holds_back_its_accounts_later_events() {
    let mut answers = Vec::new();
    // Not said to be redeliveries at a sandbox that met no duplicate: not read; said to be: read.
    for delivery in [Delivery::Unknown, Delivery::MayBeRedelivery] {
        let h = LedgerHarness::new().await;
        let credit = LedgerHarness::event("ip-credit", "ip-acct", 10, "USD");
        let debit = LedgerHarness::event("ip-debit", "ip-acct", -10, "USD");
        hold_in_progress(&h, &credit).await;
        let ledger = h.ledger.clone_forgetting();
        let posted = ledger.post_batch_as(&[credit, debit], delivery).await;
        // The debit held back: kept, whichever layer said so.
        let held = posted[1].as_ref().is_err_and(|error| error.retry() != effectively_once::Retry::Never);
        answers.push((summary(&posted[0]), held, summary(&posted[1])));
    }
    assert_eq!(answers[0].0, "error InProgress");
    assert!(answers[0].1, "the transaction path holds the debit back: {:?}", answers[0]);
    assert_eq!((&answers[1].0, answers[1].1), (&answers[0].0, true), "the pre-read changed the answers: {answers:?}");
}
