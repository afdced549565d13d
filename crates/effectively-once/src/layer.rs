//! A tower `Layer` that makes any `Service` idempotent: a Lambda handler built with
//! `lambda_runtime::service_fn`, say. Feature `tower`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::{Error, ErrorKind, RunError};
use crate::idempotency::Idempotency;
use crate::key::Key;
use crate::store::Store;

type Select<Req> = Arc<dyn Fn(&Req) -> Option<(String, Value)> + Send + Sync>;

/// Wraps services so each request runs once per key. The selector returns the business key and
/// the payload to hash; a request it returns `None` for is refused with `InvalidKey` (pass it
/// through by wrapping only the services that need it).
///
/// ```
/// use effectively_once::layer::IdempotencyLayer;
/// use effectively_once::{Config, Idempotency, InMemoryStore};
///
/// // A `LambdaEvent<serde_json::Value>` in a Lambda; any request type works.
/// let layer = IdempotencyLayer::json_pointer(
///     Idempotency::new(InMemoryStore::new(), Config::default()),
///     "orders",
///     "/order_id",
///     |request: &serde_json::Value| request.clone(),
/// );
/// # let _ = layer;
/// ```
pub struct IdempotencyLayer<S, Req> {
    idempotency: Idempotency<S>,
    prefix: String,
    select: Select<Req>,
}

impl<S, Req> Clone for IdempotencyLayer<S, Req> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            idempotency: self.idempotency.clone(),
            prefix: self.prefix.clone(),
            select: self.select.clone(),
        }
    }
}

impl<S: Store, Req> IdempotencyLayer<S, Req> {
    /// Keys and payloads chosen by a closure.
    pub fn new(
        idempotency: Idempotency<S>,
        prefix: &str,
        select: impl Fn(&Req) -> Option<(String, Value)> + Send + Sync + 'static,
    ) -> Self {
        IdempotencyLayer { idempotency, prefix: prefix.to_owned(), select: Arc::new(select) }
    }

    /// The payload from `payload(&request)`, the key at a JSON pointer in it (`/order_id`): a
    /// string, or a number written out.
    pub fn json_pointer(
        idempotency: Idempotency<S>,
        prefix: &str,
        pointer: &str,
        payload: impl Fn(&Req) -> Value + Send + Sync + 'static,
    ) -> Self {
        let pointer = pointer.to_owned();
        Self::new(idempotency, prefix, move |request| {
            let value = payload(request);
            let key = match value.pointer(&pointer)? {
                Value::String(string) => string.clone(),
                Value::Number(number) => number.to_string(),
                _ => return None,
            };
            Some((key, value))
        })
    }
}

impl<S, Req, Inner> Layer<Inner> for IdempotencyLayer<S, Req> {
    type Service = IdempotentService<S, Req, Inner>;

    fn layer(&self, inner: Inner) -> Self::Service {
        IdempotentService { layer: self.clone(), inner }
    }
}

/// The service an [`IdempotencyLayer`] makes.
pub struct IdempotentService<S, Req, Inner> {
    layer: IdempotencyLayer<S, Req>,
    inner: Inner,
}

impl<S, Req, Inner: Clone> Clone for IdempotentService<S, Req, Inner> {
    fn clone(&self) -> Self {
        IdempotentService { layer: self.layer.clone(), inner: self.inner.clone() }
    }
}

impl<S, Req, Inner> Service<Req> for IdempotentService<S, Req, Inner>
where
    S: Store + 'static,
    Req: Send + 'static,
    Inner: Service<Req> + Clone + Send + 'static,
    Inner::Future: Send,
    Inner::Response: Serialize + DeserializeOwned + Send + Sync,
    Inner::Error: Send,
{
    type Response = Inner::Response;
    type Error = RunError<Inner::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(RunError::Handler)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The ready clone goes into the future; `self` keeps a fresh one (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let Some((business_key, payload)) = (layer.select)(&request) else {
                return Err(RunError::Idempotency(Error::new(
                    ErrorKind::InvalidKey,
                    "the request carries no idempotency key",
                )));
            };
            let key = Key::new(&layer.prefix, &business_key).map_err(|e| RunError::Idempotency(e.into()))?;
            let outcome = layer.idempotency.run(&key, &payload, || inner.call(request)).await?;
            Ok(outcome.into_inner())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::{Config, InMemoryStore};

    /// A service counting its calls.
    #[derive(Clone)]
    struct Orders(Arc<AtomicUsize>);

    impl Service<Value> for Orders {
        type Response = Value;
        type Error = std::io::Error;
        type Future = Pin<Box<dyn Future<Output = Result<Value, std::io::Error>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, request: Value) -> Self::Future {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { Ok(json!({"order": request["order_id"], "call": n})) })
        }
    }

    #[tokio::test]
    async fn the_layer_runs_the_service_once_per_key() {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::json_pointer(
            Idempotency::new(InMemoryStore::new(), Config::default()),
            "orders",
            "/order_id",
            |r: &Value| r.clone(),
        );
        let mut service = layer.layer(Orders(calls.clone()));
        let order = json!({"order_id": "o-7", "amount": 3});
        let first = service.call(order.clone()).await.unwrap();
        let second = service.call(order).await.unwrap();
        assert_eq!(first, second, "the duplicate gets the stored response");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let no_key = service.call(json!({"amount": 1})).await.unwrap_err();
        assert!(matches!(no_key, RunError::Idempotency(e) if e.kind() == ErrorKind::InvalidKey));
    }
}
