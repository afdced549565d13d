//! Refusals against DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`): an answer that carries a
//! write of its own (`Otherwise::AnswerWith`), recorded with it in one transaction and never
//! twice, and a refused write with no answer reported as that, naming the write and its table.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, ErrorChain, ErrorKind, Idempotency, Key, Outcome, Retry};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::{
    create_table, CommitOnce, DynamoDbStore, Fallback, Item, Otherwise, RequestCounter, Table, Tx,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Reserved {
    Reserved,
    Backordered { short_by: i64 },
}

#[derive(Serialize)]
struct Id<'a> {
    id: &'a str,
}

#[derive(Serialize)]
struct Reservation<'a> {
    id: &'a str,
    sku: &'a str,
    quantity: i64,
}

#[derive(Serialize)]
struct Backorder<'a> {
    id: &'a str,
    sku: &'a str,
    wanted: i64,
}

/// A store with its request counter, and a table of the caller's own (stock, reservations,
/// backorders) holding `available` units of `stock#sku-1`.
async fn setup(available: i64) -> (DynamoDbStore, RequestCounter, Table) {
    let (store, counter) = fresh_store().await;
    let name = effectively_once_dynamodb::testing::unique_name("stock");
    create_table(store.client(), &name).await.expect("the caller's table");
    let table = Table::new(name, "id");
    put_raw(&store, &table, [("id", AttributeValue::S("stock#sku-1".into())), ("available", n(available))]).await;
    counter.reset();
    (store, counter, table)
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

async fn put_raw<const N: usize>(store: &DynamoDbStore, table: &Table, attributes: [(&str, AttributeValue); N]) {
    let item: Item = attributes.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    store.client().put_item().table_name(table.name()).set_item(Some(item)).send().await.unwrap();
}

async fn get(store: &DynamoDbStore, table: &str, id: &str) -> Option<Item> {
    let out = store
        .client()
        .get_item()
        .table_name(table)
        .key("id", AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item
}

fn number(item: &Item, name: &str) -> i64 {
    item[name].as_n().unwrap().parse().unwrap()
}

/// Every item of the idempotency table.
async fn records(store: &DynamoDbStore) -> Vec<Item> {
    let out = store.client().scan().table_name(store.table()).consistent_read(true).send().await.unwrap();
    out.items.unwrap_or_default()
}

/// Reserves `quantity` of `sku-1` for order `order`: takes the units and writes the
/// reservation, or, short of stock, records `Backordered` with a backorder row and a bump of
/// the backorder count (which shows a second write of the fallback).
fn reserve(
    table: Table,
    order: &'static str,
    quantity: i64,
    before_answer: impl FnOnce() + Send + 'static,
) -> impl FnOnce(&mut Tx<Reserved>) -> Result<Reserved, effectively_once::Error> + Send {
    move |tx| {
        let take = tx.update(&table, &Id { id: "stock#sku-1" }, |u| {
            u.update_expression("SET #available = #available - :q")
                .condition_expression("#available >= :q")
                .expression_attribute_names("#available", "available")
                .expression_attribute_values(":q", n(quantity))
        })?;
        let reservation = format!("reservation#{order}");
        tx.put(&table, &Reservation { id: &reservation, sku: "sku-1", quantity })?;
        let fallback_table = table.clone();
        tx.otherwise(take, move |stock| {
            before_answer();
            let available = stock.map_or(0, |item| number(item, "available"));
            let backorder = format!("backorder#{order}");
            let fallback = Fallback::new()
                .put(&fallback_table, &Backorder { id: &backorder, sku: "sku-1", wanted: quantity })
                .update(&fallback_table, &Id { id: "backorders#sku-1" }, |u| {
                    u.update_expression("ADD #count :one")
                        .expression_attribute_names("#count", "count")
                        .expression_attribute_values(":one", n(1))
                });
            Otherwise::AnswerWith { answer: Reserved::Backordered { short_by: quantity - available }, fallback }
        });
        Ok(Reserved::Reserved)
    }
}

/// Short of stock, one `commit_once` refuses the reservation and records the refusal with its
/// backorder: the backorder is there, the reservation and the take are not, the answer is
/// stored once, and neither a redelivery nor one after stock arrives writes the fallback again
/// or reserves.
#[tokio::test]
async fn a_refusal_records_its_fallback_with_the_answer_once() {
    let (store, counter, table) = setup(1).await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("reserve", "o-1").unwrap();
    let backordered = Reserved::Backordered { short_by: 2 };

    let first = idempotency.commit_once(&key, "o-1", reserve(table.clone(), "o-1", 3, || {})).await.unwrap();
    assert_eq!(first, Outcome::Fresh(backordered.clone()));
    assert_eq!(counter.total(), 2, "the cancelled transaction, and the one recording the answer with its fallback");
    let backorder = get(&store, table.name(), "backorder#o-1").await.expect("the fallback's backorder row");
    assert_eq!((backorder["sku"].as_s().unwrap().as_str(), number(&backorder, "wanted")), ("sku-1", 3));
    let count = |store: DynamoDbStore, table: Table| async move {
        number(&get(&store, table.name(), "backorders#sku-1").await.expect("the backorder count"), "count")
    };
    assert_eq!(count(store.clone(), table.clone()).await, 1);
    assert!(get(&store, table.name(), "reservation#o-1").await.is_none(), "the primary write did not happen");
    let stock = get(&store, table.name(), "stock#sku-1").await.unwrap();
    assert_eq!(number(&stock, "available"), 1, "nothing taken");
    let stored = records(&store).await;
    assert_eq!(stored.len(), 1, "one record: {stored:?}");
    assert_eq!(stored[0]["id"].as_s().unwrap(), key.as_str());
    assert_eq!(stored[0]["response"].as_s().unwrap(), r#"{"Backordered":{"short_by":2}}"#);

    // A redelivery is answered from the record, in one request, and writes nothing.
    counter.reset();
    let again = idempotency.commit_once(&key, "o-1", reserve(table.clone(), "o-1", 3, || {})).await.unwrap();
    assert_eq!(again, Outcome::Replayed(backordered.clone()));
    assert_eq!(counter.total(), 1);
    // So is one after stock arrives, when the take would pass: the refusal stands.
    put_raw(&store, &table, [("id", AttributeValue::S("stock#sku-1".into())), ("available", n(10))]).await;
    let later = idempotency.commit_once(&key, "o-1", reserve(table.clone(), "o-1", 3, || {})).await.unwrap();
    assert_eq!(later, Outcome::Replayed(backordered));
    assert_eq!(count(store.clone(), table.clone()).await, 1, "the fallback was written once");
    assert!(get(&store, table.name(), "reservation#o-1").await.is_none());
    assert_eq!(records(&store).await.len(), 1);
}

/// Two deliveries refused at once: the second records its answer and fallback while the first
/// is between its cancelled transaction and its own recording. The first then meets that
/// record (its fallback's put would fail too: the record answers first) and replays it; the
/// fallback is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refusals_write_one_fallback_and_replay_it() {
    let (store, _, table) = setup(0).await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("reserve", "o-2").unwrap();
    let concurrent = {
        let (idempotency, table, key) = (idempotency.clone(), table.clone(), key.clone());
        move || {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    let b = idempotency.commit_once(&key, "o-2", reserve(table, "o-2", 1, || {})).await.unwrap();
                    assert_eq!(b, Outcome::Fresh(Reserved::Backordered { short_by: 1 }));
                })
            })
        }
    };
    let a = idempotency.commit_once(&key, "o-2", reserve(table.clone(), "o-2", 1, concurrent)).await.unwrap();
    assert_eq!(a, Outcome::Replayed(Reserved::Backordered { short_by: 1 }));
    let count = get(&store, table.name(), "backorders#sku-1").await.unwrap();
    assert_eq!(number(&count, "count"), 1, "one fallback");
    assert_eq!(records(&store).await.len(), 1);
}

/// A fallback whose own condition fails (its backorder row is there already, another order's)
/// records nothing, the answer included, and says which fallback write and table refused it.
/// With a carried record the transaction also checks the carrier first; the fallback's writes
/// are still numbered from 0.
#[tokio::test]
async fn a_refused_fallback_records_nothing_and_names_itself() {
    let (store, _, table) = setup(0).await;
    put_raw(
        &store,
        &table,
        [("id", AttributeValue::S("backorder#o-3".into())), ("sku", AttributeValue::S("x".into()))],
    )
    .await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    for carried in [false, true] {
        let key = Key::new("reserve", "o-3").unwrap();
        let build = {
            let table = table.clone();
            move |tx: &mut Tx<Reserved>| {
                if carried {
                    let entry = tx.put(&table, &Id { id: "entry#o-3" })?;
                    tx.carry_record(entry)?;
                }
                reserve(table, "o-3", 1, || {})(tx)
            }
        };
        let error = idempotency.commit_once(&key, "o-3", build).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConditionFailed, "{error:?}");
        assert_eq!(
            ErrorChain(&error).to_string(),
            format!(
                "the condition of fallback write 0 (a Put into table {}) failed for reserve#o-3: \
                 the answer and its fallback were not recorded",
                table.name()
            ),
            "carried: {carried}"
        );
        assert_eq!(error.retry(), Retry::AfterFix);
        assert!(records(&store).await.is_empty(), "no answer recorded");
        assert!(get(&store, table.name(), "backorders#sku-1").await.is_none(), "no fallback write");
        assert!(get(&store, table.name(), "entry#o-3").await.is_none());
        let theirs = get(&store, table.name(), "backorder#o-3").await.unwrap();
        assert_eq!(theirs["sku"].as_s().unwrap(), "x", "the other order's row is untouched");
    }
}

/// A fallback write that does not build is returned before anything is recorded.
#[tokio::test]
async fn a_fallback_that_does_not_build_records_nothing() {
    let (store, _, table) = setup(0).await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("reserve", "o-4").unwrap();
    let build = {
        let table = table.clone();
        move |tx: &mut Tx<Reserved>| {
            let take = tx.check(&table, &Id { id: "stock#sku-1" }, |c| {
                c.condition_expression("#a > :zero")
                    .expression_attribute_names("#a", "available")
                    .expression_attribute_values(":zero", n(0))
            })?;
            tx.otherwise(take, move |_| Otherwise::AnswerWith {
                answer: Reserved::Backordered { short_by: 1 },
                fallback: Fallback::new().put(&table, &serde_json::json!({"no_id": 1})),
            });
            Ok(Reserved::Reserved)
        }
    };
    let error = idempotency.commit_once(&key, "o-4", build).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misuse);
    let chain = ErrorChain(&error).to_string();
    assert!(chain.contains("reserve#o-4: fallback write 0: the put into") && chain.contains("has no id"), "{chain}");
    assert!(records(&store).await.is_empty());
}

/// A failed condition with no `otherwise` is reported as that: its own kind, and a message
/// naming the write (by its place among the writes), what it is, its table and the key, not
/// "idempotency store failed". Nothing is written, nothing recorded, and a batch member meets
/// the same answer.
#[tokio::test]
async fn a_condition_failed_with_no_answer_names_the_write_and_table() {
    let (store, _, table) = setup(0).await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    struct Bare(Table);
    impl effectively_once_dynamodb::BatchWrites<Reserved> for Bare {
        fn writes(&self, _: usize, tx: &mut Tx<Reserved>) -> Result<Reserved, effectively_once::Error> {
            tx.put(&self.0, &Id { id: "reservation#o-5" })?;
            tx.update(&self.0, &Id { id: "stock#sku-1" }, |u| {
                u.update_expression("SET #a = #a - :one")
                    .condition_expression("#a >= :one")
                    .expression_attribute_names("#a", "available")
                    .expression_attribute_values(":one", n(1))
            })?;
            Ok(Reserved::Reserved)
        }
    }
    let bare = Bare(table.clone());
    let key = Key::new("reserve", "o-5").unwrap();
    let expected = format!(
        "the condition of write 1 (an Update of table {}) failed for reserve#o-5: \
         no Tx::otherwise answers it; nothing was written",
        table.name()
    );
    let error = idempotency
        .commit_once(&key, "o-5", |tx| effectively_once_dynamodb::BatchWrites::writes(&bare, 0, tx))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConditionFailed);
    assert_eq!(error.to_string(), expected);
    assert_eq!(ErrorChain(&error).to_string(), expected, "no store failure behind it");
    assert_eq!(error.retry(), Retry::AfterFix);

    let members = [effectively_once_dynamodb::Member::new(key.clone(), "o-5")];
    let results = idempotency.commit_batch(&members, &bare).await;
    let batch_error = results.into_iter().next().unwrap().unwrap_err();
    assert_eq!((batch_error.kind(), batch_error.to_string()), (ErrorKind::ConditionFailed, expected));
    assert!(get(&store, table.name(), "reservation#o-5").await.is_none());
    assert!(records(&store).await.is_empty());
}

/// The answer recorded apart from any transaction (`record_outcome`, as the payments ledger's
/// rejections are): written once, and a second recording is answered with the record there,
/// not written over; with a carrier named, one that is there (the effect applied meanwhile)
/// answers with its carried record and nothing is written.
#[tokio::test]
async fn an_outcome_is_recorded_once_and_answers_with_what_is_there() {
    let (store, _, table) = setup(0).await;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let record = |id: &str, response: &str| effectively_once::Record {
        id: id.to_owned(),
        status: effectively_once::Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: now_ms / 1000 + 3600,
        payload_hash: "v2:first".to_owned(),
        owner: String::new(),
        response: Some(response.to_owned()),
    };
    let first = record("reject#e-1", r#""no funds""#);
    assert_eq!(store.record_outcome(&first, now_ms, None).await.unwrap(), None);
    let stored = effectively_once::Store::get(&store, "reject#e-1").await.unwrap().expect("the record");
    assert_eq!(stored.response.as_deref(), Some(r#""no funds""#));

    let second = effectively_once::Record { payload_hash: "v2:second".to_owned(), ..record("reject#e-1", "2") };
    match store.record_outcome(&second, now_ms, None).await.unwrap() {
        Some(effectively_once_dynamodb::raw::Committed::Exists(existing)) => {
            assert_eq!(
                (existing.payload_hash.as_str(), existing.response.as_deref()),
                ("v2:first", Some(r#""no funds""#))
            )
        }
        other => panic!("the first record answers: {other:?}"),
    }
    assert_eq!(records(&store).await.len(), 1);

    // The carrier is there, holding the record of the delivery that applied the effect.
    put_raw(
        &store,
        &table,
        [
            ("id", AttributeValue::S("entry#e-2".into())),
            (effectively_once_dynamodb::carried::KEY, AttributeValue::S("reject#e-2".into())),
            (effectively_once_dynamodb::carried::PAYLOAD_HASH, AttributeValue::S("v2:applied".into())),
            (effectively_once_dynamodb::carried::RESPONSE, AttributeValue::S(r#""posted""#.into())),
        ],
    )
    .await;
    let carrier: Item = [("id".to_owned(), AttributeValue::S("entry#e-2".into()))].into();
    let unless = Some((table.name().to_owned(), carrier, "id".to_owned()));
    match store.record_outcome(&record("reject#e-2", "3"), now_ms, unless).await.unwrap() {
        Some(effectively_once_dynamodb::raw::Committed::Exists(applied)) => {
            assert_eq!((applied.id.as_str(), applied.response.as_deref()), ("reject#e-2", Some(r#""posted""#)))
        }
        other => panic!("the carrier answers: {other:?}"),
    }
    assert!(effectively_once::Store::get(&store, "reject#e-2").await.unwrap().is_none(), "nothing recorded");
}
