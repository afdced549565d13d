//! `DynamoDbStore`: the claim / complete / release protocol as DynamoDB conditional writes.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use effectively_once::{Claim, Completion, ErrorChain, Record, Status, Store, StoreError, StoreErrorKind};

use crate::error::classify;
use crate::item::{attr, from_item, replaced_from_item, REPLACED};

/// The claim condition. The write succeeds when no record exists, when the record's dedup
/// window has ended, or when it is in progress and its lease has ended (its attempt died or
/// timed out). Anything else is a live record: DynamoDB evaluates the condition and the write
/// as one step, so of many concurrent claims exactly one succeeds, and each loser gets the
/// winner's item back (ALL_OLD) to classify without a second read. Expiration is in seconds
/// and the lease in milliseconds; each is compared with `now` in its own unit (Java #1281 mixed
/// them and records stuck).
pub(crate) const CLAIM_CONDITION: &str =
    "attribute_not_exists(#id) OR #expiration < :now_s OR (#status = :in_progress AND #lease < :now_ms)";
/// The store's claim condition: [`CLAIM_CONDITION`], and never over a record of the claimant's
/// own owner token. A claim whose answer was lost is sent again and must meet its own record
/// (and what it replaced), not overwrite it once its lease has ended: that would replace the
/// record of what the first write replaced with the first write itself. The same rule as
/// `effectively_once::protocol::claim`.
const OWN_CLAIM_CONDITION: &str = "(attribute_not_exists(#id) OR #expiration < :now_s OR \
     (#status = :in_progress AND #lease < :now_ms)) AND (attribute_not_exists(#owner) OR #owner <> :owner)";

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
/// Cost: a first delivery takes two `UpdateItem`s (claim, complete); a duplicate one (its
/// condition fails and returns the record).
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
}

impl DynamoDbStore {
    /// A store on `table` (see [`create_table`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbStore { client, table: table.into() }
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn id(id: &str) -> AttributeValue {
        AttributeValue::S(id.to_owned())
    }

    /// The record, read strongly consistent.
    async fn read(&self, id: &str) -> Result<Option<Record>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::ID, Self::id(id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        out.item().map(from_item).transpose()
    }

    /// The claim: an `UpdateItem` that writes the record in progress and keeps the replaced
    /// record's attributes as `replaced_*` (NULL where it had none; all NULL for a free key),
    /// on [`OWN_CLAIM_CONDITION`].
    fn claim_request(
        &self,
        record: &Record,
        now_ms: u64,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let names = [
            ("#id", attr::ID),
            ("#status", attr::STATUS),
            ("#lease", attr::LEASE_EXPIRES_AT),
            ("#expiration", attr::EXPIRATION),
            ("#payload_hash", attr::PAYLOAD_HASH),
            ("#owner", attr::OWNER),
            ("#response", attr::RESPONSE),
        ];
        // DynamoDB reads every right-hand side from the item as it was before the update.
        let kept: Vec<String> =
            REPLACED.iter().map(|(name, kept)| format!("{kept} = if_not_exists(#{}, :null)", short(name))).collect();
        let expression = format!(
            "SET {}, #status = :in_progress, #lease = :lease, #expiration = :exp, #payload_hash = :hash, \
             #owner = :owner REMOVE #response",
            kept.join(", ")
        );
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::ID, Self::id(&record.id))
            .update_expression(expression)
            .condition_expression(OWN_CLAIM_CONDITION)
            .expression_attribute_values(":null", AttributeValue::Null(true))
            .expression_attribute_values(":in_progress", AttributeValue::S(Status::InProgress.as_str().into()))
            .expression_attribute_values(":lease", AttributeValue::N(record.lease_expires_at_ms.to_string()))
            .expression_attribute_values(":exp", AttributeValue::N(record.expiration_s.to_string()))
            .expression_attribute_values(":hash", AttributeValue::S(record.payload_hash.clone()))
            .expression_attribute_values(":owner", AttributeValue::S(record.owner.clone()))
            .expression_attribute_values(":now_s", AttributeValue::N((now_ms / 1000).to_string()))
            .expression_attribute_values(":now_ms", AttributeValue::N(now_ms.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            // On success, the overwritten item (expired, or a dead attempt's) comes back at no
            // extra cost: effects that must not repeat check it.
            .return_values(ReturnValue::AllOld);
        for (placeholder, name) in names {
            request = request.expression_attribute_names(placeholder, name);
        }
        request
    }
}

/// The `replaced_*` attributes, for a completion's `REMOVE`: only a claim's retry reads them,
/// and a completed record would otherwise carry a second response toward the item limit.
fn drop_replaced() -> String {
    REPLACED.iter().map(|(_, kept)| *kept).collect::<Vec<_>>().join(", ")
}

/// The placeholder of a record attribute in the claim's expression (`#status`, ...).
fn short(name: &str) -> &str {
    match name {
        attr::LEASE_EXPIRES_AT => "lease",
        other => other,
    }
}

/// What a failed claim answers, from the record that blocked it: the claimant's own record in
/// progress (its earlier write landed, the answer was lost) is acquired, with what that write
/// replaced from its `replaced_*` attributes, as `effectively_once::protocol::claim` answers; a record without
/// them (written before they were kept) is left to the core, which assumes a takeover.
fn own_claim(record: &Record, (existing, item): (Record, Option<&HashMap<String, AttributeValue>>)) -> Claim {
    if existing.owner != record.owner || existing.status != Status::InProgress {
        return Claim::Exists(existing);
    }
    match item.and_then(replaced_from_item) {
        Some(Ok(replaced)) => Claim::Acquired { replaced },
        Some(Err(error)) => {
            tracing::warn!(id = %record.id, error = %ErrorChain(&error), "claimed over an unreadable item");
            Claim::AcquiredOverUnreadable
        }
        None => Claim::Exists(existing),
    }
}

impl Store for DynamoDbStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        let result = self.claim_request(record, now_ms).send().await;
        match result {
            Ok(out) => match out.attributes.as_ref().map(from_item).transpose() {
                Ok(replaced) => Ok(Claim::Acquired { replaced }),
                // The write landed: this attempt holds the record whatever the old item was.
                // Failing here would leave it believing it failed while its record blocks
                // every retry until the lease ends (and a malformed item is permanent).
                Err(error) => {
                    tracing::warn!(id = %record.id, error = %ErrorChain(&error), "claimed over an unreadable item");
                    Ok(Claim::AcquiredOverUnreadable)
                }
            },
            Err(SdkError::ServiceError(error))
                if matches!(error.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = error.err() else { unreachable!() };
                let existing = match failed.item() {
                    Some(item) => (from_item(item)?, Some(item)),
                    // A DynamoDB-compatible server without ALL_OLD on condition failure: read
                    // it, at the price of a second request (and without what it replaced).
                    None => match self.read(&record.id).await? {
                        Some(existing) => (existing, None),
                        None => {
                            return Err(StoreError::new(
                                StoreErrorKind::Unavailable,
                                format!("record {} was released between the claim and the read", record.id),
                            ))
                        }
                    },
                };
                Ok(own_claim(record, existing))
            }
            Err(error) => Err(classify("UpdateItem", error)),
        }
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
            Err(error) => return Err(classify("UpdateItem", error)),
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
            Err(error) => Err(classify("DeleteItem", error)),
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
        Err(WaitError::OperationFailed(failed)) => Err(classify("DescribeTable", failed.into_error())),
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
        .map_err(|e| classify("CreateTable", e))?;
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
        .map_err(|e| classify("UpdateTimeToLive", e))?;
    Ok(())
}
