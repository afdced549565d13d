//! `DynamoDbStore::get_records` on DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`): the records
//! of many keys, in requests of at most a hundred keys.

use effectively_once::{Record, Status, Store as _};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::{Consistency, NEVER_EXPIRES};

#[tokio::test]
async fn the_records_that_exist_come_back_by_id_in_a_request_per_hundred_keys() {
    let (store, requests) = fresh_store().await;
    let now_ms = 1_800_000_000_000;
    for i in (0..150).step_by(3) {
        let record = Record::completed(format!("p#{i}"), "v2:aa", Some(format!("{i}")), NEVER_EXPIRES);
        assert!(store.record_outcome(&record, now_ms, None).await.unwrap().is_none(), "written");
    }
    store.claim(&Record::in_progress("p#busy", "v2:bb", "owner", now_ms + 1000, 2_000_000_000), now_ms).await.unwrap();
    let ids: Vec<String> = (0..150).map(|i| format!("p#{i}")).chain(["p#busy".into(), "p#0".into()]).collect();
    requests.reset();
    let found = store.get_records(ids.iter().map(String::as_str), Consistency::Eventual).await.unwrap();
    assert_eq!(requests.by_operation().get("BatchGetItem"), Some(&2), "151 distinct keys: two requests");
    assert_eq!(found.len(), 51, "fifty completed records and one in progress; absent ids are not there");
    assert_eq!(found["p#3"].response.as_deref(), Some("3"));
    assert_eq!(found["p#3"].payload_hash, "v2:aa");
    assert_eq!(found["p#busy"].status, Status::InProgress);
    assert!(!found.contains_key("p#1"));

    requests.reset();
    let strong = store.get_records(["p#0", "p#1"], Consistency::Strong).await.unwrap();
    assert_eq!((strong.len(), requests.total()), (1, 1));
    requests.reset();
    assert!(store.get_records([], Consistency::Strong).await.unwrap().is_empty());
    assert_eq!(requests.total(), 0, "no ids, no request");
}
