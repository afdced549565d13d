//! Any async function made idempotent: the equivalent of Powertools' `idempotent_function`.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RunError;
use crate::idempotency::{Idempotency, Outcome};
use crate::key::Key;
use crate::store::Store;

/// An async function that runs once per key, the key taken from its argument.
///
/// ```
/// use effectively_once::{Config, Idempotency, InMemoryStore, Outcome};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
/// let charge = idempotency.wrap(
///     "charge",
///     |order: &serde_json::Value| order["order_id"].as_str().unwrap_or_default().to_owned(),
///     |order: serde_json::Value| async move { Ok::<_, std::io::Error>(order["amount"].as_i64().unwrap_or(0)) },
/// );
/// let order = serde_json::json!({"order_id": "o-1", "amount": 30});
/// assert_eq!(charge.call(order.clone()).await.unwrap(), Outcome::Fresh(30));
/// assert_eq!(charge.call(order).await.unwrap(), Outcome::Replayed(30));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct IdempotentFn<S, K, F> {
    idempotency: Idempotency<S>,
    prefix: String,
    key: K,
    function: F,
}

impl<S: Store> Idempotency<S> {
    /// Wraps `function`: each call is keyed `{prefix}#{key(&argument)}` and its argument is the
    /// payload (hashed as configured, so [`Config::with_payload_fields`](crate::Config::with_payload_fields)
    /// applies).
    pub fn wrap<A, K, F>(&self, prefix: &str, key: K, function: F) -> IdempotentFn<S, K, F>
    where
        K: Fn(&A) -> String,
    {
        IdempotentFn { idempotency: self.clone(), prefix: prefix.to_owned(), key, function }
    }
}

impl<S, K, F> IdempotentFn<S, K, F> {
    /// Calls the function once per key: a duplicate returns the stored result.
    pub async fn call<A, R, E, Fut>(&self, argument: A) -> Result<Outcome<R>, RunError<E>>
    where
        S: Store,
        A: Serialize,
        K: Fn(&A) -> String,
        F: Fn(A) -> Fut,
        Fut: Future<Output = Result<R, E>>,
        R: Serialize + DeserializeOwned,
    {
        let key = Key::new(&self.prefix, &(self.key)(&argument)).map_err(|e| RunError::Idempotency(e.into()))?;
        let payload = serde_json::to_value(&argument).map_err(|e| {
            RunError::Idempotency(
                crate::Error::new(crate::ErrorKind::Serialization, "argument is not serialisable").with_source(e),
            )
        })?;
        self.idempotency.run(&key, &payload, || (self.function)(argument)).await
    }
}
