//! A takeover's two `PutItem`s: a record released between them leaves a free key, not an
//! unreadable one, as `InMemoryStore` and the Redis store answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{Claim, InMemoryStore, Record, Status, Store};
use effectively_once_dynamodb::testing::{fresh_store, sdk_config};
use effectively_once_dynamodb::{attr, DynamoDbStore};

fn record(id: &str, owner: &str, hash: &str, lease: u64) -> Record {
    Record {
        id: id.into(),
        status: Status::InProgress,
        lease_expires_at_ms: lease,
        expiration_s: 4_000_000_000,
        payload_hash: hash.into(),
        owner: owner.into(),
        response: None,
    }
}

/// Just before the takeover PutItem (the one fenced on `:old_owner`) goes on the wire, once,
/// deletes the item: the replaced attempt's owner-fenced release (not fenced by its lease)
/// landing between the claim's two PutItems.
#[derive(Debug, Clone)]
struct DeleteBeforeTakeover {
    table: String,
    id: String,
    armed: Arc<AtomicBool>,
}

impl Intercept for DeleteBeforeTakeover {
    fn name(&self) -> &'static str {
        "DeleteBeforeTakeover"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let body =
            context.request().body().bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        if body.contains(":old_owner") && self.armed.swap(false, Ordering::SeqCst) {
            let (table, id) = (self.table.clone(), self.id.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    let client = Client::new(&sdk_config().await);
                    client.delete_item().table_name(table).key(attr::ID, AttributeValue::S(id)).send().await.unwrap();
                });
            })
            .join()
            .unwrap();
        }
        Ok(())
    }
}

/// A's record is in progress past its lease; B claims (first PutItem fails, ALL_OLD = A's
/// item); A releases its record (a definite send refusal on a free key: the API's
/// `OnFailure::Release`, owner-fenced, not lease-fenced); B's takeover PutItem then fails on
/// the missing item, which returns no ALL_OLD; the read finds nothing, `unwrap_or_default()`
/// makes that an empty item, `from_item` calls it malformed, and the claim goes to
/// `claim_over_unreadable`: `AcquiredOverUnreadable` for a key that was simply free.
///
/// Every linearisation of these writes answers `Acquired { replaced: None }` (release first) or
/// `Acquired { replaced: Some(A) }` (claim first), as InMemoryStore and Redis do. The API turns
/// the spurious Unknown into `OnClaim::Hold`: `503 key_held` stored for good for a free key;
/// the keyed email (at most once) records the receipt ambiguous and never sends it.
#[tokio::test]
async fn a_release_between_the_two_puts_is_not_an_unreadable_item() {
    let (plain, _) = fresh_store().await;
    let id = "api#race_release";
    let armed = Arc::new(AtomicBool::new(false));
    let interceptor = DeleteBeforeTakeover { table: plain.table().to_owned(), id: id.to_owned(), armed: armed.clone() };
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await).interceptor(interceptor).build();
    let store = DynamoDbStore::new(Client::from_conf(config), plain.table());

    let a = record(id, "a", "ha", 1_000);
    assert_eq!(store.claim(&a, 100).await.unwrap(), Claim::Acquired { replaced: None });
    armed.store(true, Ordering::SeqCst);
    let b = record(id, "b", "hb", 9_000);
    let answer = store.claim(&b, 2_000).await.unwrap();

    // The same writes in either order on the in-memory store.
    let memory = InMemoryStore::new();
    memory.claim(&a, 100).await.unwrap();
    memory.release(id, "a").await.unwrap();
    let released_first = memory.claim(&b, 2_000).await.unwrap();
    assert!(
        answer == released_first || answer == Claim::Acquired { replaced: Some(a.clone()) },
        "DynamoDB answered {answer:?}; InMemoryStore answers {released_first:?} (or Acquired over A)"
    );
}
