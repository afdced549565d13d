//! The records of many keys in one round trip: `BatchGetItem`, for a caller that wants to know
//! which keys of a batch are duplicates before it writes ([`DynamoDbStore::get_records`]).

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use effectively_once::{Record, StoreError, StoreErrorKind};

use crate::error::store_error;
use crate::item::{attr, from_item};
use crate::store::DynamoDbStore;
use crate::transaction::backoff;

/// The keys one `BatchGetItem` may ask for (DynamoDB's limit).
pub const MAX_BATCH_GET_KEYS: usize = 100;

/// How often the keys DynamoDB left unprocessed (throttling, the 16 MB answer limit) are asked
/// for again, with a backoff, before [`DynamoDbStore::get_records`] gives up.
const UNPROCESSED_TRIES: u32 = 5;

/// How a read sees the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// Strongly consistent: every write acknowledged before the read is seen. Twice the read
    /// units of an eventually consistent read.
    Strong,
    /// Eventually consistent: a write of the last second or so may not be seen yet (an item
    /// shows as absent, or as it was before). Half the read units.
    Eventual,
}

impl DynamoDbStore {
    /// The records of `ids` (`{prefix}#{business key}`, as [`Key::as_str`]) that exist, by id:
    /// one `BatchGetItem` per [`MAX_BATCH_GET_KEYS`] distinct ids (a repeated id is asked for
    /// once), unprocessed keys asked for again with a backoff. Costs a request per 100 ids and,
    /// per record under 4 KB, one read unit (half one with [`Consistency::Eventual`]).
    ///
    /// A record returned is what the table held when it was read, decoded as every other read
    /// decodes it; it is not an answer by itself. Judge it as a failed claim would, at the time
    /// of use: only a record that [blocks a claim](Record::blocks_claim_at) is a duplicate
    /// (replayed, or key reuse for another payload, [`Record::replay`]); one past its window or
    /// its lease is not, and the write's own condition decides. What each consistency may show:
    ///
    /// - an id absent from the answer says nothing: with [`Consistency::Eventual`] its record
    ///   may have been written a moment ago. Never skip a write's condition on absence;
    /// - a completed record that blocks a claim is final while it blocks one (nothing replaces a
    ///   live record; only TTL removes it after its window), so even a stale copy answers right;
    /// - an in-progress record may since have been completed or released: answer it as in
    ///   progress (retryable), never remember it.
    ///
    /// An error (throttling, the network, keys still unprocessed after a few tries, an item that
    /// does not decode) returns nothing read: a caller falls back to what it does without the
    /// read, with nothing lost.
    ///
    /// ```no_run
    /// use effectively_once_dynamodb::{Consistency, DynamoDbStore};
    ///
    /// # async fn example(store: DynamoDbStore) -> Result<(), effectively_once::StoreError> {
    /// let found = store.get_records(["payments#pay_1", "payments#pay_2"], Consistency::Eventual).await?;
    /// for (id, record) in &found {
    ///     println!("{id}: {:?}", record.status);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`Key::as_str`]: effectively_once::Key::as_str
    pub async fn get_records<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
        consistency: Consistency,
    ) -> Result<HashMap<String, Record>, StoreError> {
        let mut found = HashMap::new();
        for chunk in distinct_chunks(ids) {
            for item in self.batch_get(chunk, consistency).await? {
                let record = from_item(&item)?;
                found.insert(record.id.clone(), record);
            }
        }
        Ok(found)
    }

    /// One `BatchGetItem` of at most [`MAX_BATCH_GET_KEYS`] ids, with its unprocessed keys asked
    /// for again: the items found.
    async fn batch_get(
        &self,
        ids: Vec<&str>,
        consistency: Consistency,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
        let keys = ids.into_iter().map(|id| HashMap::from([(attr::ID.to_owned(), AttributeValue::S(id.to_owned()))]));
        let mut request = KeysAndAttributes::builder()
            .set_keys(Some(keys.collect()))
            .consistent_read(consistency == Consistency::Strong)
            .build()
            .map_err(|e| StoreError::new(StoreErrorKind::Other, format!("BatchGetItem not built: {e}")))?;
        let mut items = Vec::new();
        for attempt in 0..UNPROCESSED_TRIES {
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let out = self
                .client()
                .batch_get_item()
                .request_items(self.table(), request)
                .send()
                .await
                .map_err(|e| store_error("BatchGetItem", e))?;
            items.extend(out.responses.and_then(|mut tables| tables.remove(self.table())).unwrap_or_default());
            match out.unprocessed_keys.and_then(|mut tables| tables.remove(self.table())) {
                Some(left) if !left.keys.is_empty() => request = left,
                _ => return Ok(items),
            }
        }
        Err(StoreError::new(
            StoreErrorKind::Throttled,
            format!("BatchGetItem left keys of {} unprocessed after {UNPROCESSED_TRIES} tries", self.table()),
        ))
    }
}

/// `ids` without repeats (DynamoDB refuses a request naming a key twice), in first-seen order,
/// in chunks of at most [`MAX_BATCH_GET_KEYS`].
fn distinct_chunks<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<Vec<&'a str>> {
    let mut seen = HashSet::new();
    let mut chunks: Vec<Vec<&str>> = Vec::new();
    for id in ids.into_iter().filter(|id| seen.insert(*id)) {
        match chunks.last_mut() {
            Some(chunk) if chunk.len() < MAX_BATCH_GET_KEYS => chunk.push(id),
            _ => chunks.push(vec![id]),
        }
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_asked_for_once_in_chunks_of_a_hundred() {
        let ids: Vec<String> = (0..250).map(|i| format!("p#{}", i % 201)).collect();
        let chunks = distinct_chunks(ids.iter().map(String::as_str));
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [100, 100, 1]);
        assert_eq!((chunks[0][0], chunks[2][0]), ("p#0", "p#200"), "first-seen order");
        assert!(distinct_chunks(std::iter::empty()).is_empty(), "no ids, no request");
        assert_eq!(distinct_chunks(["a", "a"]), [vec!["a"]]);
    }
}
