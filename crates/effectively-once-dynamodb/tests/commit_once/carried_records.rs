//! Records carried on a business item (`Tx::carry_record`): which key they answer, what a put
//! that carries one does when the item is already there, and how a recorded answer and a
//! duplicate's effect exclude each other. Against the local AWS, or `AWS_ENDPOINT_URL`.

/// A carried record found on the carrier answers only its own key: a carrier keyed by
/// something coarser than the business key (a customer's latest order) never answers another
/// event's record, so an event that never took effect is not acked as a duplicate.
mod another_key {
    use effectively_once::{Config, Idempotency, Key, Outcome};
    use effectively_once_dynamodb::testing::fresh_store_and_table;
    use effectively_once_dynamodb::{CommitOnce, Tx};
    use serde::Serialize;

    /// A customer's latest-order item: keyed by the customer, not by the order (the mistake
    /// `carry_record`'s docs warn of, which nothing refuses).
    #[derive(Serialize)]
    struct Latest<'a> {
        id: &'a str,
        total_cents: i64,
    }

    /// Orders o-1 and o-2 of customer c-1, with the same total (the payload hashed is the total):
    /// the second commit meets the first's carried record, `__once_key` = `orders#o-1`, and
    /// answers `Replayed`. Nothing of o-2 was written; the caller acks it as a duplicate.
    #[tokio::test]
    async fn a_carried_record_of_another_key_is_not_a_replay() {
        let (store, latest) = fresh_store_and_table("review-latest").await;
        let idempotency = Idempotency::new(store.clone(), Config::default());
        let build = |tx: &mut Tx<String>| {
            let put = tx.put(&latest, &Latest { id: "customer#c-1", total_cents: 500 })?;
            tx.carry_record(put)?;
            Ok("stored".to_owned())
        };
        let first = idempotency.commit_once(&Key::new("orders", "o-1").unwrap(), &500, build).await.unwrap();
        assert_eq!(first, Outcome::Fresh("stored".to_owned()));
        let second = idempotency.commit_once(&Key::new("orders", "o-2").unwrap(), &500, build).await;
        assert!(
            !matches!(second, Ok(Outcome::Replayed(_))),
            "orders#o-2 answered as a duplicate of orders#o-1's record: {second:?}"
        );
    }
}

/// `Tx::otherwise` on the put that carries the record answers an item already there without a
/// record (written by a backfill or an earlier build), rather than reading it as a malformed
/// record that a driver would retry until the DLQ, or that would stall a shard.
mod carrier_otherwise {
    use aws_sdk_dynamodb::types::AttributeValue;
    use effectively_once::{Config, Idempotency, Key, Outcome};
    use effectively_once_dynamodb::testing::fresh_store_and_table;
    use effectively_once_dynamodb::{CommitOnce, Otherwise, Tx};
    use serde::Serialize;

    #[derive(Serialize)]
    struct Order<'a> {
        id: &'a str,
        total_cents: i64,
    }

    #[tokio::test]
    async fn the_carrier_puts_otherwise_answers_an_item_without_a_record() {
        let (store, orders) = fresh_store_and_table("review-orders").await;
        // The order is there already, written before the consumer kept records.
        store
            .client()
            .put_item()
            .table_name(orders.name())
            .item("id", AttributeValue::S("order#o-1".into()))
            .item("total_cents", AttributeValue::N("500".into()))
            .send()
            .await
            .unwrap();
        let idempotency = Idempotency::new(store.clone(), Config::default());
        let build = |tx: &mut Tx<String>| {
            let put = tx.put(&orders, &Order { id: "order#o-1", total_cents: 500 })?;
            tx.carry_record(put)?;
            tx.otherwise(put, |_| Otherwise::AlreadyApplied { response: "stored".into(), same_payload: true });
            Ok("stored".to_owned())
        };
        let outcome = idempotency.commit_once(&Key::new("orders", "o-1").unwrap(), &500, build).await;
        assert!(matches!(outcome, Ok(Outcome::Replayed(ref r)) if r == "stored"), "{outcome:?}");
    }
}

/// `Otherwise::Answer` with a carried record: a refusal recorded while a duplicate applies the
/// effect is never both, and a recorded refusal holds without the guard.
mod recorded_answers {
    use aws_sdk_dynamodb::types::AttributeValue;
    use effectively_once::{Config, Idempotency, Key, Outcome};
    use effectively_once_dynamodb::testing::fresh_store_and_table;
    use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Otherwise, Table, Tx};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Answer {
        Taken,
        Refused,
    }

    #[derive(Serialize)]
    struct Id<'a> {
        id: &'a str,
    }

    async fn setup() -> (DynamoDbStore, Table) {
        fresh_store_and_table("review-accounts").await
    }

    /// The entry (keyed by the event id, carrying the record) and a debit of the counter, refused
    /// through `Otherwise::Answer` when the counter is below 1. `before_answer` runs in the
    /// `otherwise` closure: between the cancelled transaction and the recording of the answer.
    fn take(
        table: Table,
        guard: bool,
        before_answer: impl FnOnce() + Send + 'static,
    ) -> impl FnOnce(&mut Tx<Answer>) -> Result<Answer, effectively_once::Error> + Send {
        move |tx| {
            let entry = tx.put(&table, &Id { id: "entry#e1" })?;
            tx.carry_record(entry)?;
            if guard {
                tx.guard_recorded_answers();
            }
            let debit = tx.update(&table, &Id { id: "counter" }, |u| {
                u.update_expression("ADD #n :minus")
                    .condition_expression("#n >= :one")
                    .expression_attribute_names("#n", "n")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
            })?;
            tx.otherwise(debit, move |_| {
                before_answer();
                Otherwise::Answer(Answer::Refused)
            });
            Ok(Answer::Taken)
        }
    }

    async fn fund(store: &DynamoDbStore, table: &Table) {
        store
            .client()
            .update_item()
            .table_name(table.name())
            .key("id", AttributeValue::S("counter".into()))
            .update_expression("ADD #n :five")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":five", AttributeValue::N("5".into()))
            .send()
            .await
            .unwrap();
    }

    async fn entry_written(store: &DynamoDbStore, table: &Table) -> bool {
        let out = store
            .client()
            .get_item()
            .table_name(table.name())
            .key("id", AttributeValue::S("entry#e1".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item().is_some()
    }

    /// Delivery A is refused (no funds); before A records its answer, funds arrive and duplicate B
    /// commits (the guard passes: nothing recorded yet). A then records "refused" anyway (its
    /// `record_outcome` checks only the idempotency table, not the carrier), so A acks the event as
    /// refused while its entry is applied, and a refusal record is left behind for the key.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_recorded_while_a_duplicate_applies_is_never_both() {
        let (store, table) = setup().await;
        let idempotency = Idempotency::new(store.clone(), Config::default());
        let key = Key::new("take", "e1").unwrap();
        let concurrent = {
            let (idempotency, store, table, key) = (idempotency.clone(), store.clone(), table.clone(), key.clone());
            move || {
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(async {
                        fund(&store, &table).await;
                        let b = idempotency.commit_once(&key, "e1", take(table.clone(), true, || {})).await.unwrap();
                        assert_eq!(b, Outcome::Fresh(Answer::Taken), "the duplicate applied");
                    })
                })
            }
        };
        let a = idempotency.commit_once(&key, "e1", take(table.clone(), true, concurrent)).await.unwrap();
        assert!(entry_written(&store, &table).await, "B applied the entry");
        let c = idempotency.commit_once(&key, "e1", take(table.clone(), true, || {})).await.unwrap();
        // Once per event id: the event was applied, so no delivery may answer "refused".
        // Once per event id: the event was applied, so no delivery (A, nor a later C) may answer
        // "refused".
        let taken = Outcome::Replayed(Answer::Taken);
        assert_eq!((a, c), (taken.clone(), taken), "(A, C): a refusal of an applied event");
    }

    /// `Otherwise::Answer` promises "every duplicate gets it too, even after the condition would
    /// pass". With a carried record and no `guard_recorded_answers` (nothing refuses the mix), the
    /// recorded refusal is never consulted: the duplicate after funds arrive applies the event.
    #[tokio::test]
    async fn a_recorded_refusal_holds_for_a_carried_record_without_the_guard() {
        let (store, table) = setup().await;
        let idempotency = Idempotency::new(store.clone(), Config::default());
        let key = Key::new("take", "e1").unwrap();
        let first = idempotency.commit_once(&key, "e1", take(table.clone(), false, || {})).await.unwrap();
        assert_eq!(first, Outcome::Fresh(Answer::Refused));
        fund(&store, &table).await;
        let duplicate = idempotency.commit_once(&key, "e1", take(table.clone(), false, || {})).await;
        assert!(!entry_written(&store, &table).await, "a refused event was applied by its duplicate");
        assert!(matches!(duplicate, Ok(Outcome::Replayed(Answer::Refused)) | Err(_)), "{duplicate:?}");
    }
}
