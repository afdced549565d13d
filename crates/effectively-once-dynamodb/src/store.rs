//! `DynamoDbStore`: the claim / complete / release protocol as DynamoDB conditional writes.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValuesOnConditionCheckFailure,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use effectively_once::{protocol, Claim, Completion, ErrorChain, Record, Status, Store, StoreError, StoreErrorKind};

use crate::batch::CutCommits;
use crate::error::store_error;
use crate::item::{
    attr, claim_answer, claim_item, claim_item_over_unreadable, claim_item_unknown_first, copies, from_item,
};

/// The claim condition. The write succeeds when no record exists, when the record's dedup
/// window has ended, or when it is in progress and its lease has ended (its attempt died or
/// timed out). Anything else is a live record: DynamoDB evaluates the condition and the write
/// as one step, so of many concurrent claims exactly one succeeds, and each loser gets the
/// winner's item back (ALL_OLD) to classify without a second read. Expiration is in seconds
/// and the lease in milliseconds; each is compared with `now` in its own unit (Java #1281 mixed
/// them and records stuck).
pub(crate) const CLAIM_CONDITION: &str =
    "attribute_not_exists(#id) OR #expiration < :now_s OR (#status = :in_progress AND #lease < :now_ms)";
/// How often a claim tries to take over a record that other claims keep changing under it.
const CLAIM_TRIES: usize = 3;
/// A takeover overwrites only the item it read (same owner token, same status) and only while
/// the claim condition still holds for it: a record completed, released or claimed by another
/// attempt since the read fails it, and the claim judges what it then finds.
const TAKEOVER_CONDITION: &str = "#owner = :old_owner AND #status = :old_status AND \
     (#expiration < :now_s OR (#status = :in_progress AND #lease < :now_ms))";

/// Completion is fenced by the owner token and the lease: an attempt whose key another attempt
/// took over must not overwrite the newer record, and an attempt whose lease has ended must
/// not complete, taken over yet or not, so a record past its lease stays as it is until a new
/// claim (see `Store::complete`). A retried request whose first answer was lost fails this
/// condition on its own completed record; the ALL_OLD item tells that apart, and it counts as
/// success.
const COMPLETE_CONDITION: &str = "#owner = :owner AND #status = :in_progress AND #lease >= :now_ms";
/// Release deletes only an in-progress record of its owner: deleting a completed one, its
/// owner's included, would make the next delivery run the effect again. A missing record
/// passes: a retried release finds its first attempt's delete done.
const RELEASE_CONDITION: &str = "attribute_not_exists(#id) OR (#owner = :owner AND #status = :in_progress)";

/// Idempotency records in a DynamoDB table keyed by `id` (S), with TTL on `expiration`.
///
/// Cost: a first delivery takes one `PutItem` and one `UpdateItem`; a duplicate one `PutItem`
/// (its condition fails and returns the record); taking over a record past its lease or window
/// one `PutItem` more (the second overwrites the item the first returned).
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
    /// Keys of batch commits dropped before they answered, read first when they come again.
    cut: CutCommits,
}

impl DynamoDbStore {
    /// A store on `table` (see [`create_table`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbStore { client, table: table.into(), cut: CutCommits::default() }
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Keys of this store's batch commits dropped before they answered.
    pub(crate) fn cut_commits(&self) -> &CutCommits {
        &self.cut
    }

    fn id(id: &str) -> AttributeValue {
        AttributeValue::S(id.to_owned())
    }

    /// The record, read strongly consistent.
    async fn read(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.read_item(id).await?.as_ref().map(from_item).transpose()
    }

    /// The record's item, read strongly consistent.
    async fn read_item(&self, id: &str) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::ID, Self::id(id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", e))?;
        Ok(out.item)
    }

    /// Puts a claim's item: on a free key (`over` is `None`), or over the item `over` as it was
    /// read (its owner and status, and still claimable at `now_ms`). When the condition fails,
    /// the item that blocked it (`ALL_OLD`, or read at the price of a second request from a
    /// server that does not return it), or none.
    async fn put_claim(&self, id: &str, item: Item, over: Option<&Record>, now_ms: u64) -> Result<Put, StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        request = match over {
            None => {
                request.condition_expression("attribute_not_exists(#id)").expression_attribute_names("#id", attr::ID)
            }
            Some(old) => request
                .condition_expression(TAKEOVER_CONDITION)
                .expression_attribute_names("#owner", attr::OWNER)
                .expression_attribute_names("#expiration", attr::EXPIRATION)
                .expression_attribute_names("#status", attr::STATUS)
                .expression_attribute_names("#lease", attr::LEASE_EXPIRES_AT)
                .expression_attribute_values(":old_owner", AttributeValue::S(old.owner.clone()))
                .expression_attribute_values(":old_status", AttributeValue::S(old.status.as_str().into()))
                .expression_attribute_values(":now_s", AttributeValue::N((now_ms / 1000).to_string()))
                .expression_attribute_values(":now_ms", AttributeValue::N(now_ms.to_string()))
                .expression_attribute_values(":in_progress", AttributeValue::S(Status::InProgress.as_str().into())),
        };
        match request.send().await {
            Ok(_) => Ok(Put::Written),
            Err(SdkError::ServiceError(error))
                if matches!(error.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                let PutItemError::ConditionalCheckFailedException(failed) = error.into_err() else { unreachable!() };
                let blocking = match failed.item {
                    Some(item) => Some(item),
                    // No item came back: none is there (a takeover's item that was released or
                    // expired since it was read), or the server does not return it.
                    None => self.read_item(id).await?,
                };
                Ok(blocking.map_or(Put::Gone, Put::Blocked))
            }
            Err(error) => Err(store_error("PutItem", error)),
        }
    }

    /// A claim over an item that does not decode: overwritten if the claim condition passes
    /// (without knowing what it replaced, so the item keeps the unreadable copy and every claim
    /// that continues its run answers `AcquiredOverUnreadable` too), else the decoding error,
    /// as the item blocks.
    async fn claim_over_unreadable(
        &self,
        record: &Record,
        now_ms: u64,
        error: StoreError,
        unreadable: &Item,
    ) -> Result<Claim, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(claim_item_over_unreadable(record, unreadable)))
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#id", attr::ID)
            .expression_attribute_names("#expiration", attr::EXPIRATION)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#lease", attr::LEASE_EXPIRES_AT)
            .expression_attribute_values(":now_s", AttributeValue::N((now_ms / 1000).to_string()))
            .expression_attribute_values(":now_ms", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":in_progress", AttributeValue::S(Status::InProgress.as_str().into()))
            .send()
            .await;
        match result {
            Ok(_) => {
                tracing::warn!(id = %record.id, error = %ErrorChain(&error), "claimed over an unreadable item");
                Ok(Claim::AcquiredOverUnreadable)
            }
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Err(error)
            }
            Err(e) => Err(store_error("PutItem", e)),
        }
    }
}

/// A DynamoDB item.
type Item = HashMap<String, AttributeValue>;

/// What a claim's `PutItem` found.
enum Put {
    /// Written.
    Written,
    /// The condition failed on this item.
    Blocked(Item),
    /// The condition failed, and no item is there.
    Gone,
}

/// What a claim does next about the item that blocked its `PutItem`.
enum Next {
    /// Answer this.
    Answer(Claim),
    /// The item does not decode.
    Unreadable(StoreError, Item),
    /// Take it over: put `item` over `over`; if written, answer `answer`.
    Put {
        /// The claim's item.
        item: Item,
        /// The record read.
        over: Record,
        /// The answer once written.
        answer: Claim,
    },
}

/// Judges the item that blocked a claim of `record` at `now_ms`, as
/// `effectively_once::protocol::claim` does: the claim's own record (its answer lost) is
/// answered with what it replaced; a live record is answered as it stands; a record past its
/// window or lease is taken over, keeping it as `replaced_*` and its run's first record as
/// `first_*` (unknown, and so answered `AcquiredOverUnreadable`, when its copy does not decode).
fn takeover(record: &Record, now_ms: u64, seen: Item) -> Next {
    let existing = match from_item(&seen) {
        Ok(existing) => existing,
        Err(error) => return Next::Unreadable(error, seen),
    };
    if existing.owner == record.owner {
        return Next::Answer(match (existing.status, claim_answer(&seen)) {
            (Status::InProgress, Some(answer)) => answer,
            _ => Claim::Exists(existing),
        });
    }
    if existing.blocks_claim_at(now_ms) {
        return Next::Answer(Claim::Exists(existing));
    }
    // A record in progress that had taken the key over itself passes on its run's first record
    // (`effectively_once::protocol::Stored::first_for_successor`).
    let in_progress = existing.status == Status::InProgress;
    let (item, answer) = match claim_answer(&seen) {
        Some(Claim::AcquiredOverUnreadable) if in_progress => {
            (claim_item_unknown_first(record, &existing, &seen), Claim::AcquiredOverUnreadable)
        }
        Some(Claim::AcquiredInRun { first, .. } | Claim::Acquired { replaced: Some(first) }) if in_progress => {
            let answer = protocol::acquired(Some(existing.clone()), Some(first.clone()));
            (claim_item(record, Some(&existing), Some(&first)), answer)
        }
        _ => (claim_item(record, Some(&existing), None), Claim::Acquired { replaced: Some(existing.clone()) }),
    };
    Next::Put { item, over: existing, answer }
}

/// The `replaced_*` and `first_*` attributes, for a completion's `REMOVE`: only a claim's
/// retry reads them, and a completed record would otherwise carry more responses toward the
/// item limit.
fn drop_replaced() -> &'static str {
    // Built once: every first delivery's completion names them.
    static NAMES: LazyLock<String> = LazyLock::new(|| copies().collect::<Vec<_>>().join(", "));
    &NAMES
}

impl Store for DynamoDbStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        // A free key, the common case, is one request; a takeover two (the first fails and
        // returns the item, the second overwrites that very item).
        let mut seen = None;
        for _ in 0..CLAIM_TRIES {
            let put = match seen.take() {
                None => match self.put_claim(&record.id, claim_item(record, None, None), None, now_ms).await? {
                    Put::Written => return Ok(Claim::Acquired { replaced: None }),
                    other => other,
                },
                Some(item) => match takeover(record, now_ms, item) {
                    Next::Answer(claim) => return Ok(claim),
                    Next::Unreadable(error, item) => {
                        return self.claim_over_unreadable(record, now_ms, error, &item).await
                    }
                    Next::Put { item, over, answer } => {
                        match self.put_claim(&record.id, item, Some(&over), now_ms).await? {
                            Put::Written => return Ok(answer),
                            other => other,
                        }
                    }
                },
            };
            // Blocked: judge what blocked it. Gone (released, or deleted by TTL, since it was
            // read): the key is free again.
            seen = match put {
                Put::Blocked(item) => Some(item),
                Put::Gone | Put::Written => None,
            };
        }
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            format!("record {}: changed by others {CLAIM_TRIES} times while this claim took it", record.id),
        ))
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::ID, Self::id(id))
            .condition_expression(COMPLETE_CONDITION)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#lease", attr::LEASE_EXPIRES_AT)
            .expression_attribute_names("#expiration", attr::EXPIRATION)
            .expression_attribute_names("#response", attr::RESPONSE)
            .expression_attribute_values(":owner", AttributeValue::S(owner.to_owned()))
            .expression_attribute_values(":in_progress", AttributeValue::S(Status::InProgress.as_str().into()))
            .expression_attribute_values(":now_ms", AttributeValue::N(completion.now_ms.to_string()))
            .expression_attribute_values(":completed", AttributeValue::S(Status::Completed.as_str().into()))
            .expression_attribute_values(":exp", AttributeValue::N(completion.expiration_s.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        update = match completion.response {
            Some(response) => update
                .update_expression(format!(
                    "SET #status = :completed, #expiration = :exp, #response = :response REMOVE {}",
                    drop_replaced()
                ))
                .expression_attribute_values(":response", AttributeValue::S(response.to_owned())),
            None => update.update_expression(format!(
                "SET #status = :completed, #expiration = :exp REMOVE #response, {}",
                drop_replaced()
            )),
        };
        let failed = match update.send().await {
            Ok(_) => return Ok(()),
            Err(SdkError::ServiceError(error))
                if matches!(error.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = error.into_err() else { unreachable!() };
                failed
            }
            Err(error) => return Err(store_error("UpdateItem", error)),
        };
        // Why the condition failed, from the item as it stood (or a read, from a server that
        // does not return it; a missing record returns none either way).
        let current = match failed.item() {
            Some(item) => from_item(item).ok(),
            None => self.read(id).await?,
        };
        match current {
            Some(record) if record.owner == owner && record.status == Status::Completed => Ok(()),
            Some(record) if record.owner == owner => Err(StoreError::new(
                StoreErrorKind::Fenced,
                format!("{id}: the lease ended at {} ms; not completed", record.lease_expires_at_ms),
            )),
            _ => Err(StoreError::new(StoreErrorKind::Fenced, format!("{id} is gone or owned by another attempt"))),
        }
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(attr::ID, Self::id(id))
            .condition_expression(RELEASE_CONDITION)
            .expression_attribute_names("#id", attr::ID)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_values(":owner", AttributeValue::S(owner.to_owned()))
            .expression_attribute_values(":in_progress", AttributeValue::S(Status::InProgress.as_str().into()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(error))
                if matches!(error.err(), DeleteItemError::ConditionalCheckFailedException(_)) =>
            {
                Err(StoreError::new(StoreErrorKind::Fenced, format!("{id} is completed or owned by another attempt")))
            }
            Err(error) => Err(store_error("DeleteItem", error)),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.read(id).await
    }
}

/// How long [`wait_until_active`] waits for a table to become active.
pub const TABLE_ACTIVE_WAIT: Duration = Duration::from_secs(300);

/// Waits, with the SDK's `TableExists` waiter, until `table` is `ACTIVE` (a new table takes
/// seconds on DynamoDB; the local AWS's at once, answered by the first poll), at most
/// [`TABLE_ACTIVE_WAIT`].
pub async fn wait_until_active(client: &Client, table: &str) -> Result<(), StoreError> {
    use aws_sdk_dynamodb::client::Waiters as _;
    use aws_sdk_dynamodb::waiters::table_exists::WaitUntilTableExistsError as WaitError;
    match client.wait_until_table_exists().table_name(table).wait(TABLE_ACTIVE_WAIT).await {
        Ok(_) => Ok(()),
        Err(WaitError::OperationFailed(failed)) => Err(store_error("DescribeTable", failed.into_error())),
        Err(WaitError::ExceededMaxWait(waited)) => Err(StoreError::new(
            StoreErrorKind::Unavailable,
            format!("table {table} is not ACTIVE after {:?} ({} polls)", waited.elapsed(), waited.poll_count()),
        )),
        Err(other) => Err(StoreError::new(StoreErrorKind::Other, format!("waiting for table {table}: {other}"))),
    }
}

/// Creates an idempotency table (partition key `id`, on-demand billing, TTL on `expiration`)
/// and waits until it is active. For tests and the local AWS; production tables come from the
/// deployment template.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let invalid = |e: aws_sdk_dynamodb::error::BuildError| StoreError::new(StoreErrorKind::Other, e.to_string());
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(attr::ID)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(invalid)?,
        )
        .key_schema(
            KeySchemaElement::builder().attribute_name(attr::ID).key_type(KeyType::Hash).build().map_err(invalid)?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| store_error("CreateTable", e))?;
    wait_until_active(client, table).await?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(attr::EXPIRATION)
                .build()
                .map_err(invalid)?,
        )
        .send()
        .await
        .map_err(|e| store_error("UpdateTimeToLive", e))?;
    Ok(())
}
