//! Building a commit's actions offline: DynamoDB's limits checked before sending, and the
//! record's condition the claim's under shorter names.

use effectively_once::StoreErrorKind;

use super::*;
use crate::store::CLAIM_CONDITION;

/// A store whose client never sends: building actions needs only its table's name.
fn offline_store() -> DynamoDbStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idempotency")
}

fn put(item: HashMap<String, AttributeValue>) -> TransactWriteItem {
    let put = Put::builder().table_name("ledger").set_item(Some(item)).build().unwrap();
    TransactWriteItem::builder().put(put).build()
}

/// A transaction DynamoDB would refuse is refused before it is sent, as too large (a verdict
/// on the message, never retried): 99 writes and the record fit, 100 do not, and neither does
/// an item over 400 KB, whether built by reference or by moving the writes.
#[test]
fn a_commit_over_dynamodbs_limits_is_refused_before_sending() {
    let store = offline_store();
    let writes = |n: usize| {
        (0..n).fold(Commit::new("payments#e", "v2:h", "{}"), |commit, i| {
            let item = HashMap::from([("pk".to_owned(), AttributeValue::S(format!("k{i}")))]);
            commit.write(Write::new(format!("write {i}"), put(item)))
        })
    };
    let fits = writes(99);
    assert_eq!(fits.actions(&store, 1).unwrap().len(), 100, "99 writes and the record");
    assert_eq!(fits.into_actions(&store, 1).unwrap().len(), 100);
    let too_many = writes(100);
    for error in [too_many.actions(&store, 1).unwrap_err(), too_many.into_actions(&store, 1).unwrap_err()] {
        assert_eq!(error.kind(), StoreErrorKind::TooLarge, "{error}");
        assert!(error.to_string().contains("101 actions"), "{error}");
    }
    let big = HashMap::from([
        ("pk".to_owned(), AttributeValue::S("k".into())),
        ("blob".to_owned(), AttributeValue::S("x".repeat(400 * 1024))),
    ]);
    let error = Commit::new("payments#e", "v2:h", "{}").write(Write::new("big", put(big))).into_actions(&store, 1);
    assert_eq!(error.unwrap_err().kind(), StoreErrorKind::TooLarge);
}

/// The record's condition in a transaction is the claim's, placeholder for placeholder, on
/// the same attributes: a duplicate is cancelled, and a record past its window or its lease
/// taken over, exactly as a claim would.
#[test]
fn the_record_condition_is_the_claim_condition_under_shorter_names() {
    let claim_names = [
        ("#id", attr::ID),
        ("#expiration", attr::EXPIRATION),
        ("#status", attr::STATUS),
        ("#lease", attr::LEASE_EXPIRES_AT),
    ];
    let values = [(":s", ":now_s"), (":m", ":now_ms"), (":p", ":in_progress")];
    let rename = |token: &str| -> String {
        let name = RECORD_NAMES.iter().find(|(short, _)| *short == token).map(|(_, attribute)| {
            claim_names.iter().find(|(_, a)| a == attribute).expect("an attribute the claim names").0
        });
        let value = values.iter().find(|(short, _)| *short == token).map(|(_, long)| *long);
        name.or(value).unwrap_or(token).to_owned()
    };
    let tokens = |condition: &str| -> Vec<String> {
        condition.replace('(', " ( ").replace(')', " ) ").split_whitespace().map(str::to_owned).collect()
    };
    let renamed: Vec<String> = tokens(RECORD_CONDITION).iter().map(|token| rename(token)).collect();
    assert_eq!(renamed, tokens(CLAIM_CONDITION));
    assert!(RECORD_CONDITION.len() + 30 < CLAIM_CONDITION.len(), "shorter, or why have two");
}
