//! One producer floods the standard payments queue; another's payments still land within a
//! bound counted in polls, not time: the consumer drains the queue a full batch per poll, so
//! whatever order SQS hands messages out in, everything in the queue when the second producer
//! sent, its own messages included, is applied within ceil((N + M) / (pollers x batch)) rounds.
//! docs/operations.md (Limits on consumption) states the bound and what it costs on AWS.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use effectively_once_dynamodb::testing::unique_name;
use local::esm::{self, SqsMapping};
use local::invoke::SqsFunction;
use payments_local::{workload, Clients, Pipeline};

/// The payments function, noting in which round each payment it applied landed.
struct Landing<F> {
    inner: F,
    round: AtomicUsize,
    landed: Mutex<Vec<(usize, String)>>,
}

impl<F: SqsFunction> SqsFunction for Landing<F> {
    async fn invoke(&self, event: SqsEvent) -> local::Result<SqsBatchResponse> {
        let messages: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| (r.message_id.clone().unwrap_or_default(), r.body.clone().unwrap_or_default()))
            .collect();
        let response = self.inner.invoke(event).await?;
        let round = self.round.load(Ordering::SeqCst);
        let mut landed = self.landed.lock().unwrap();
        for (id, body) in messages {
            if !response.batch_item_failures.iter().any(|f| f.item_identifier == id) {
                let body: serde_json::Value = serde_json::from_str(&body)?;
                landed.push((round, body["event_id"].as_str().unwrap_or_default().to_owned()));
            }
        }
        Ok(response)
    }
}

/// `count` credits of producer `who`, each to an account of its own, so that no two concurrent
/// batches write the same balance (a conflict a retry resolves, in rounds this test cannot
/// bound).
fn payments(run: &str, who: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            format!(
                r#"{{"event_id": "{who}-{run}-{i}", "account_id": "acct-{who}-{run}-{i}", "amount_cents": 100, "currency": "USD"}}"#
            )
        })
        .collect()
}

#[tokio::test]
async fn a_flooding_producer_delays_another_by_at_most_the_backlog_ahead_of_it() {
    const FLOOD: usize = 200;
    const OTHER: usize = 20;
    const POLLERS: usize = 2;
    let pipeline = Pipeline::up(Clients::local().await, &unique_name("flood")).await.unwrap();
    let (clients, queue) = (&pipeline.clients, &pipeline.resources.queue_url);
    let run = unique_name("f");
    workload::send(&clients.sqs, queue, &payments(&run, "a", FLOOD)).await.unwrap();
    workload::send(&clients.sqs, queue, &payments(&run, "b", OTHER)).await.unwrap();

    // The template's batch size. The visibility timeout is long enough that no message comes
    // back while its batch runs, however slow the machine: each is received once.
    let mut mapping = SqsMapping::new(queue);
    mapping.visibility_timeout = 300;
    let batch = usize::try_from(mapping.batch_size).unwrap();
    let bound = (FLOOD + OTHER).div_ceil(POLLERS * batch);
    let function = Landing { inner: pipeline.payments(), round: AtomicUsize::new(0), landed: Mutex::new(Vec::new()) };
    for round in 1..=bound {
        function.round.store(round, Ordering::SeqCst);
        let polls = (0..POLLERS).map(|_| esm::poll_sqs(clients, &mapping, &function));
        for poll in futures_util::future::join_all(polls).await {
            let poll = poll.unwrap();
            assert_eq!((poll.received, poll.failed), (batch, 0), "round {round}: a full batch, none failed");
        }
    }
    assert_eq!(esm::queue_depth(clients, queue).await.unwrap(), 0, "drained in {bound} rounds");

    let landed = function.landed.into_inner().unwrap();
    assert_eq!(landed.len(), FLOOD + OTHER, "as many applied as sent");
    let landed: BTreeMap<String, usize> = landed.into_iter().map(|(round, id)| (id, round)).collect();
    assert_eq!(landed.len(), FLOOD + OTHER, "each payment once");
    let other: Vec<usize> = landed.iter().filter(|(id, _)| id.starts_with("b-")).map(|(_, r)| *r).collect();
    assert_eq!(other.len(), OTHER);
    let (first, last) = (other.iter().min().unwrap(), other.iter().max().unwrap());
    assert!(*last <= bound, "the other producer's last payment landed in round {last}, beyond {bound}");
    // Not a guarantee of SQS, so not asserted: where the emulator's order put them.
    println!("{OTHER} payments behind a flood of {FLOOD}: rounds {first} to {last} of at most {bound}");

    let ledger = pipeline.ledger(&clients.dynamodb);
    for i in 0..OTHER {
        let balance = ledger.balance(&format!("acct-b-{run}-{i}")).await.unwrap().expect("the payment is posted");
        assert_eq!((balance.balance_cents, balance.entry_count), (100, 1));
    }
    pipeline.down().await.unwrap();
}
