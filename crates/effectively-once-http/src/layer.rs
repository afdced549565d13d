//! [`IdempotencyKeyLayer`]: a route's settings, and the tower `Layer` that applies them.

use std::sync::Arc;

use effectively_once::{Idempotency, Store};
use http::request::Parts;
use http::{header, HeaderName, Method, StatusCode};
use tower_layer::Layer;

use crate::fingerprint::{Canonical, Fingerprint};
use crate::key::{Scope, Unscoped};
use crate::service::IdempotencyKeyService;

/// The largest request body read unless [`IdempotencyKeyLayer::max_body_bytes`] says otherwise.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

type Deadline = Arc<dyn Fn(&Parts) -> Option<u64> + Send + Sync>;
type Stored = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;

/// Gives the services it wraps `Idempotency-Key` semantics: one layer per route, each with its
/// own settings, over any [`Store`].
///
/// ```
/// use effectively_once::{Config, Idempotency, InMemoryStore};
/// use effectively_once_http::IdempotencyKeyLayer;
/// use http::{Method, StatusCode};
///
/// let layer = IdempotencyKeyLayer::new(Idempotency::new(InMemoryStore::new(), Config::default()), "orders")
///     .methods([Method::POST])
///     .store_status(|status: StatusCode| status.is_success())
///     .max_body_bytes(16 * 1024);
/// # let _ = layer;
/// ```
pub struct IdempotencyKeyLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

pub(crate) struct Shared<S> {
    pub(crate) idempotency: Idempotency<S>,
    pub(crate) prefix: String,
    pub(crate) methods: Vec<Method>,
    pub(crate) stored: Stored,
    pub(crate) scope: Arc<dyn Scope>,
    /// Whether a [`Scope`] was set: unscoped requests' records then go apart (`:{key}`).
    pub(crate) scoped: bool,
    pub(crate) fingerprint: Arc<dyn Fingerprint>,
    pub(crate) max_body_bytes: usize,
    pub(crate) headers: Vec<HeaderName>,
    pub(crate) deadline: Option<Deadline>,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared {
            idempotency: self.idempotency.clone(),
            prefix: self.prefix.clone(),
            methods: self.methods.clone(),
            stored: self.stored.clone(),
            scope: self.scope.clone(),
            scoped: self.scoped,
            fingerprint: self.fingerprint.clone(),
            max_body_bytes: self.max_body_bytes,
            headers: self.headers.clone(),
            deadline: self.deadline.clone(),
        }
    }
}

impl<S> Clone for IdempotencyKeyLayer<S> {
    fn clone(&self) -> Self {
        IdempotencyKeyLayer { shared: self.shared.clone() }
    }
}

impl<S> std::fmt::Debug for IdempotencyKeyLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyKeyLayer")
            .field("prefix", &self.shared.prefix)
            .field("methods", &self.shared.methods)
            .field("max_body_bytes", &self.shared.max_body_bytes)
            .field("headers", &self.shared.headers)
            .finish_non_exhaustive()
    }
}

impl<S: Store> IdempotencyKeyLayer<S> {
    /// Records under `prefix` (`{prefix}#{scope}:{key}`) in `idempotency`'s store, with its
    /// dedup window and lease. The defaults: `POST` and `PATCH` only; 2xx and 3xx answers
    /// stored (the handler did its work; a 4xx a framework's extractor answers before the
    /// handler runs must not outlive the client's corrected retry; a 5xx holds the key); no scope;
    /// the method, the path with its query and the body's canonical JSON (or its bytes) fingerprinted; bodies up to [`DEFAULT_MAX_BODY_BYTES`];
    /// `content-type` and `location` kept with an answer.
    ///
    /// # Panics
    ///
    /// When `prefix` is not 1 to 64 characters from `[A-Za-z0-9._-]` (a record key's prefix).
    pub fn new(idempotency: Idempotency<S>, prefix: &str) -> Self {
        effectively_once::Key::new(prefix, "k").expect("the prefix is 1 to 64 characters from [A-Za-z0-9._-]");
        IdempotencyKeyLayer {
            shared: Arc::new(Shared {
                idempotency,
                prefix: prefix.to_owned(),
                methods: vec![Method::POST, Method::PATCH],
                stored: Arc::new(default_stored),
                scope: Arc::new(Unscoped),
                scoped: false,
                fingerprint: Arc::new(Canonical),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                headers: vec![header::CONTENT_TYPE, header::LOCATION],
                deadline: None,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        change(Arc::make_mut(&mut self.shared));
        self
    }

    /// The methods keyed; other requests pass through untouched.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|shared| shared.methods = methods)
    }

    /// Which of the handler's statuses are stored and replayed (default 2xx and 3xx). Of the
    /// others, a 5xx holds the key as a crash does (the handler may have done its work: no
    /// other body runs under it, and this body's retry takes over after the lease) and a 4xx
    /// releases it (refused before any effect: the corrected retry runs), unless the handler
    /// says otherwise ([`OnAnswer`](crate::OnAnswer)).
    pub fn store_status(self, stored: impl Fn(StatusCode) -> bool + Send + Sync + 'static) -> Self {
        self.with(|shared| shared.stored = Arc::new(stored))
    }

    /// Each caller's scope ([`Scope`]): keys are stored under it (`{scope}:{key}`). A request
    /// the scope answers `Ok(None)` is stored apart from every scoped one (`:{key}`), so it
    /// never meets a caller's record whatever its key spells.
    pub fn scope(self, scope: impl Scope) -> Self {
        self.with(|shared| {
            shared.scope = Arc::new(scope);
            shared.scoped = true;
        })
    }

    /// What the payload hash covers, and the body's validation before the claim ([`Fingerprint`]).
    pub fn fingerprint(self, fingerprint: impl Fingerprint) -> Self {
        self.with(|shared| shared.fingerprint = Arc::new(fingerprint))
    }

    /// The largest body read: a larger one is answered `413` as soon as its length is known
    /// (its `Content-Length`, or its size hint), else once that many bytes have been read,
    /// and never buffered whole.
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.with(|shared| shared.max_body_bytes = bytes)
    }

    /// The response headers kept with a stored answer and replayed (default `content-type` and
    /// `location`). Never keep a header carrying a secret of one response (`set-cookie`).
    pub fn store_headers(self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        let headers = headers.into_iter().collect();
        self.with(|shared| shared.headers = headers)
    }

    /// The request's deadline, in milliseconds since the Unix epoch: leases end no later, so a
    /// request cut off at its deadline frees its key by then.
    pub fn deadline(self, deadline: impl Fn(&Parts) -> Option<u64> + Send + Sync + 'static) -> Self {
        self.with(|shared| shared.deadline = Some(Arc::new(deadline)))
    }

    /// Under `lambda_http`: leases end at the invocation's deadline (its `Context`).
    #[cfg(feature = "lambda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
    pub fn lambda_deadline(self) -> Self {
        self.deadline(|parts| parts.extensions.get::<lambda_http::Context>().map(|context| context.deadline))
    }

    /// The records' [`Idempotency`].
    pub fn idempotency(&self) -> &Idempotency<S> {
        &self.shared.idempotency
    }
}

/// Stored when the handler did its work: 2xx and 3xx (Stripe's rule: a result is stored only
/// when the endpoint executed). A route whose handler answers a 4xx of its own that must
/// replay (a declined card) opts in with [`IdempotencyKeyLayer::store_status`].
fn default_stored(status: StatusCode) -> bool {
    status.is_success() || status.is_redirection()
}

impl<S, Svc> Layer<Svc> for IdempotencyKeyLayer<S> {
    type Service = IdempotencyKeyService<Svc, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        IdempotencyKeyService { inner, shared: self.shared.clone() }
    }
}
