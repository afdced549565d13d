//! Passes over whole tables that an operator runs once, in a migration: the records carried on
//! business items, a record written apart unless one holds its key, and completed records made
//! never to expire. Each scans its table (read units: the table's size).

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Record, Status, StoreError, StoreErrorKind};

use crate::error::store_error;
use crate::item::{attr, carried, record_carried_by, NEVER_EXPIRES};
use crate::raw::Committed;
use crate::store::DynamoDbStore;

impl DynamoDbStore {
    /// Hands `each` the record carried on every item of `table` that carries one
    /// ([`Tx::carry_record`](crate::Tx::carry_record), or the names of an earlier build,
    /// [`carried::legacy`]), in scan order, strongly consistent; stops at `each`'s first error.
    /// The number of records handed over.
    pub async fn for_each_carried_record<E>(
        &self,
        table: &str,
        mut each: impl AsyncFnMut(Record) -> Result<(), E>,
    ) -> Result<u64, E>
    where
        E: From<StoreError>,
    {
        let mut items = self
            .client()
            .scan()
            .table_name(table)
            .filter_expression("attribute_exists(#key) OR attribute_exists(#legacy)")
            .expression_attribute_names("#key", carried::KEY)
            .expression_attribute_names("#legacy", carried::legacy::KEY)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut count = 0;
        while let Some(item) = items.next().await {
            let item = item.map_err(|e| store_error("Scan", e))?;
            each(record_carried_by(&item)?).await?;
            count += 1;
        }
        Ok(count)
    }

    /// Writes `record` (completed) apart, unless a live record holds its key: `None` when it
    /// was written, else the record that was there (compare its payload hash: the same event,
    /// or its key used twice). One conditional write.
    pub async fn record_if_absent(&self, record: &Record, now_ms: u64) -> Result<Option<Record>, StoreError> {
        match self.record_outcome(record, now_ms, None).await? {
            None => Ok(None),
            Some(Committed::Exists(existing)) => Ok(Some(existing)),
            Some(other) => {
                let message = format!("{}: recording it answered {other:?}", record.id);
                Err(StoreError::new(StoreErrorKind::Other, message))
            }
        }
    }

    /// Makes every completed record whose id starts with `prefix` and whose expiration is finite
    /// never expire ([`NEVER_EXPIRES`]), one conditional update each (still completed); a lapsed
    /// record still in the table (TTL deletes within days, not at once) too: while it is there,
    /// nothing else can have claimed its key, so its answer is still the only one the key got.
    /// The number of records changed; again, it changes none.
    pub async fn make_completed_permanent(&self, prefix: &str) -> Result<u64, StoreError> {
        let never = AttributeValue::N(NEVER_EXPIRES.to_string());
        let completed = AttributeValue::S(Status::Completed.as_str().into());
        let mut lapsing = self
            .client()
            .scan()
            .table_name(self.table())
            .filter_expression("begins_with(#id, :prefix) AND #status = :completed AND #expiration < :never")
            .expression_attribute_names("#id", attr::ID)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#expiration", attr::EXPIRATION)
            .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
            .expression_attribute_values(":completed", completed.clone())
            .expression_attribute_values(":never", never.clone())
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut changed = 0;
        while let Some(item) = lapsing.next().await {
            let item = item.map_err(|e| store_error("Scan", e))?;
            let Some(id) = item.get(attr::ID).cloned() else { continue };
            let updated = self
                .client()
                .update_item()
                .table_name(self.table())
                .key(attr::ID, id)
                .update_expression("SET #expiration = :never")
                .condition_expression("#status = :completed")
                .expression_attribute_names("#status", attr::STATUS)
                .expression_attribute_names("#expiration", attr::EXPIRATION)
                .expression_attribute_values(":completed", completed.clone())
                .expression_attribute_values(":never", never.clone())
                .send()
                .await;
            match updated {
                Ok(_) => changed += 1,
                // Taken over or deleted since the scan: not a completed record any more.
                Err(error) if error.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => {}
                Err(error) => return Err(store_error("UpdateItem", error)),
            }
        }
        Ok(changed)
    }
}
