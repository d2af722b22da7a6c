//! Inbound webhooks (`aip.http.webhook.v1`): a provider's signed event deliveries, verified,
//! checked for staleness and replay, and handed to your handler exactly once per delivery id.
//!
//! A [`WebhookReceiver`] runs each delivery through four steps, in this order, and the handler
//! runs only if all of them pass:
//!
//! 1. **size**: a body over [`max_body_bytes`](WebhookReceiverBuilder::max_body_bytes) is
//!    refused (`webhook.payload_too_large`);
//! 2. **signature**: the [`SignatureScheme`] checks the signature against every secret
//!    (several while one rotates) and names the delivery id and the signed timestamp
//!    (`webhook.missing_header`, `webhook.invalid_delivery`, `webhook.authentication_failed`);
//! 3. **skew**: a signed timestamp further than [`tolerance`](WebhookReceiverBuilder::tolerance)
//!    from the receiver's clock is refused (`webhook.timestamp_skew`), so a captured delivery
//!    cannot be sent again later;
//! 4. **replay**: the delivery id is claimed in the store, durably on SQLite or PostgreSQL, so
//!    an id seen within the [`replay_window`](WebhookReceiverBuilder::replay_window) is refused
//!    (`webhook.replayed`), also after a restart and across replicas sharing a store. A
//!    duplicate that arrives while the first copy is being handled is told
//!    `webhook.in_progress` (retryable).
//!
//! The claim and the handler run in a task of their own, so a provider that hangs up does not
//! stop them half-way. If the handler succeeds, the id is remembered for the replay window; if
//! it fails, panics or times out, the id is released (a timed-out handler's once it has
//! stopped), so the provider's retry runs it again: a delivery is never lost to replay
//! protection. A host that dies mid-handler leaves a claim that expires twice the handler
//! timeout plus 5 s later, after which a retry runs.
//!
//! Over HTTP, `WebhookReceiver::router` (feature `http`) serves a receiver at a path. See
//! `docs/webhooks.md` for the whole picture and the testkit's `webhook_security` scenario.

mod signature;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aip_connector_core::ids::{ActionId, CapabilityId, PrincipalId};
use aip_connector_core::model::{
    ActionResult, ConnectorFailure, ConnectorOperation, ErrorCategory, IdempotencyKeyScope,
    ProtocolError,
};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The body type deliveries are read into.
pub use bytes::Bytes;
/// The header map deliveries carry (the `http` crate's).
pub use http::HeaderMap;
pub use signature::{
    InvalidSecret, SignatureScheme, SignedDelivery, StandardWebhooks, WebhookSecret, header,
};

use crate::codes;
use crate::handler::HandlerError;
use crate::invocation::BoxFuture;
use crate::store::{
    Clock, IdempotencyRecord, IdempotencyStore, MemoryStore, Millis, Reservation, ReserveOutcome,
    StoreError, SystemClock, millis,
};

/// The component named in webhook errors and failures.
const WEBHOOK_COMPONENT: &str = "aip-connector.webhook";

/// The longest delivery id a receiver accepts, in bytes.
pub const MAX_DELIVERY_ID_BYTES: usize = 256;

/// Why a delivery was refused. Each variant has its own [`code`](Self::code) (constants in
/// [`codes`]), HTTP [`status`](Self::status) and retry flag.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A header the scheme needs is absent or blank.
    #[error("the delivery has no `{0}` header")]
    MissingHeader(&'static str),
    /// The delivery does not have the scheme's shape.
    #[error("the delivery is malformed: {0}")]
    InvalidDelivery(String),
    /// No signature matches any of the receiver's secrets.
    #[error("no signature of the delivery matches the receiver's secrets")]
    AuthenticationFailed,
    /// The signed timestamp is too far from the receiver's clock.
    #[error(
        "the delivery was signed {skew_ms} ms {direction} the receiver's clock, more than its tolerance of {tolerance_ms} ms{hint}",
        direction = if *ahead { "ahead of" } else { "behind" },
        // Decades ahead: the signer wrote milliseconds, the most common signer bug (a wire
        // trial's).
        hint = if *ahead && *skew_ms > 1_000_000_000_000 {
            " (the signed timestamp is in Unix seconds, not milliseconds)"
        } else {
            ""
        }
    )]
    TimestampSkew {
        /// How far off the timestamp is.
        skew_ms: Millis,
        /// Whether it lies in the future.
        ahead: bool,
        /// The receiver's tolerance.
        tolerance_ms: Millis,
    },
    /// The body is larger than the receiver takes.
    #[error("the delivery's body is larger than the receiver's limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The delivery id was handled already. Over HTTP this is answered `200` with
    /// `"replayed": true`: the handler did not run again, and a provider whose first `200` was
    /// lost stops retrying.
    #[error("delivery `{delivery_id}` was handled already")]
    Replayed {
        /// The delivery id.
        delivery_id: String,
    },
    /// The delivery id is being handled right now.
    #[error("delivery `{delivery_id}` is being handled; retry later")]
    InProgress {
        /// The delivery id.
        delivery_id: String,
    },
    /// A handled delivery id arrived with another body.
    #[error("delivery `{delivery_id}` was handled already with another body")]
    DeliveryConflict {
        /// The delivery id.
        delivery_id: String,
    },
    /// The handler failed (or panicked).
    #[error("the webhook handler failed: {0}")]
    HandlerFailed(ConnectorFailure),
    /// The body did not arrive within the receiver's
    /// [body timeout](WebhookReceiverBuilder::body_timeout).
    #[error("the delivery's body did not arrive within {timeout:?}")]
    BodyTimeout {
        /// The receiver's body timeout.
        timeout: Duration,
    },
    /// The handler did not finish in time.
    #[error("the webhook handler did not finish within {timeout:?}")]
    HandlerTimeout {
        /// The receiver's handler timeout.
        timeout: Duration,
    },
    /// The delivery store failed. Its message does not repeat the store's error (it is the
    /// `source`, and logged): the answer goes to whoever posted the delivery.
    #[error("the webhook delivery store is unavailable")]
    StorageUnavailable(#[source] StoreError),
}

impl WebhookError {
    /// The error code (a constant of [`codes`]).
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => codes::WEBHOOK_MISSING_HEADER,
            Self::InvalidDelivery(_) => codes::WEBHOOK_INVALID_DELIVERY,
            Self::AuthenticationFailed => codes::WEBHOOK_AUTHENTICATION_FAILED,
            Self::TimestampSkew { .. } => codes::WEBHOOK_TIMESTAMP_SKEW,
            Self::PayloadTooLarge { .. } => codes::WEBHOOK_PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => codes::WEBHOOK_BODY_TIMEOUT,
            Self::Replayed { .. } => codes::WEBHOOK_REPLAYED,
            Self::InProgress { .. } => codes::WEBHOOK_IN_PROGRESS,
            Self::DeliveryConflict { .. } => codes::WEBHOOK_DELIVERY_CONFLICT,
            Self::HandlerFailed(_) => codes::WEBHOOK_HANDLER_FAILED,
            Self::HandlerTimeout { .. } => codes::WEBHOOK_HANDLER_TIMEOUT,
            Self::StorageUnavailable(_) => codes::WEBHOOK_STORAGE_UNAVAILABLE,
        }
    }

    /// The error category.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Self::MissingHeader(_) | Self::InvalidDelivery(_) | Self::PayloadTooLarge { .. } => {
                ErrorCategory::Permanent
            }
            Self::AuthenticationFailed | Self::TimestampSkew { .. } => ErrorCategory::Auth,
            Self::Replayed { .. } | Self::DeliveryConflict { .. } => ErrorCategory::Policy,
            Self::InProgress { .. }
            | Self::BodyTimeout { .. }
            | Self::HandlerTimeout { .. }
            | Self::StorageUnavailable(_) => ErrorCategory::Temporary,
            Self::HandlerFailed(failure) => failure.category,
        }
    }

    /// Whether the provider should send the delivery again.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::InProgress { .. }
            | Self::BodyTimeout { .. }
            | Self::HandlerTimeout { .. }
            | Self::StorageUnavailable(_) => true,
            Self::HandlerFailed(failure) => failure.retryable,
            _ => false,
        }
    }

    /// The HTTP status a receiver answers with.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode;
        match self {
            Self::MissingHeader(_) | Self::InvalidDelivery(_) => StatusCode::BAD_REQUEST,
            Self::AuthenticationFailed | Self::TimestampSkew { .. } => StatusCode::UNAUTHORIZED,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            // Refused, yet answered as delivered: the provider has nothing left to send.
            Self::Replayed { .. } => StatusCode::OK,
            Self::InProgress { .. } | Self::DeliveryConflict { .. } => StatusCode::CONFLICT,
            Self::HandlerFailed(failure) if !failure.retryable => StatusCode::INTERNAL_SERVER_ERROR,
            Self::HandlerFailed(_) | Self::HandlerTimeout { .. } | Self::StorageUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// The error as AIP's wire error, source `aip-connector.webhook`. A handler's failure keeps
    /// its code, message and retry flag in `details.failure`.
    pub fn to_protocol_error(&self) -> ProtocolError {
        let mut error = ProtocolError::new(self.code(), self.to_string(), self.category());
        error.retryable = Some(self.is_retryable());
        error.source = Some(json!({ "component": WEBHOOK_COMPONENT }));
        if let Self::HandlerFailed(failure) = self {
            error.details = Some(json!({ "failure": failure.to_protocol_error() }));
        }
        error
    }
}

/// A verified, first-seen delivery, as the handler gets it. Its `Debug` shows the ids, the
/// times, the header names and the body's length, never a header's value or the body: a
/// provider may send a credential beside its signature, and the body is the provider's data.
#[derive(Clone)]
pub struct WebhookDelivery {
    receiver: Arc<str>,
    id: String,
    timestamp_ms: Option<Millis>,
    received_at_ms: Millis,
    headers: HeaderMap,
    body: Bytes,
}

impl fmt::Debug for WebhookDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.keys().map(http::HeaderName::as_str).collect();
        f.debug_struct("WebhookDelivery")
            .field("receiver", &self.receiver)
            .field("id", &self.id)
            .field("timestamp_ms", &self.timestamp_ms)
            .field("received_at_ms", &self.received_at_ms)
            .field("header_names", &header_names)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl WebhookDelivery {
    /// The receiver's id.
    pub fn receiver(&self) -> &str {
        &self.receiver
    }

    /// The provider's delivery id (stable across the provider's retries).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The signed timestamp, in milliseconds since the Unix epoch, if the scheme signs one.
    pub fn timestamp_ms(&self) -> Option<Millis> {
        self.timestamp_ms
    }

    /// When the receiver took the delivery, by its clock.
    pub fn received_at_ms(&self) -> Millis {
        self.received_at_ms
    }

    /// The request's headers (event type headers and the like).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body, exactly as signed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body decoded as JSON into `T`.
    ///
    /// # Errors
    ///
    /// `webhook.invalid_delivery` (permanent), naming where the body and `T` disagree. The
    /// message goes back to whoever posted the delivery, so it does not name `T` (a type path
    /// of the connector's crate).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ConnectorFailure> {
        serde_json::from_slice(&self.body).map_err(|error| {
            ConnectorFailure::new(
                codes::WEBHOOK_INVALID_DELIVERY,
                format!(
                    "delivery `{}` does not decode into the receiver's event type: {error}",
                    self.id
                ),
                ErrorCategory::Permanent,
                ConnectorOperation::Ingestion,
                self.receiver.as_ref(),
            )
        })
    }
}

/// What the receiver does with a verified, first-seen delivery.
///
/// Implemented for every `Fn(WebhookDelivery) -> impl Future<Output = Result<(), E>>` whose
/// error converts into a [`ConnectorFailure`], like a capability handler's.
pub trait WebhookHandler: Send + Sync + 'static {
    /// Handles one delivery.
    fn handle(&self, delivery: WebhookDelivery)
    -> BoxFuture<'static, Result<(), ConnectorFailure>>;
}

impl<F, Fut, E> WebhookHandler for F
where
    F: Fn(WebhookDelivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: HandlerError + 'static,
{
    fn handle(
        &self,
        delivery: WebhookDelivery,
    ) -> BoxFuture<'static, Result<(), ConnectorFailure>> {
        let future = self(delivery);
        Box::pin(async move { future.await.map_err(HandlerError::into_failure) })
    }
}

/// A delivery the handler took.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookReceipt {
    /// The delivery id.
    pub delivery_id: String,
}

/// A receiver that is not configured to run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookConfigError {
    /// The receiver id is blank.
    #[error("a webhook receiver needs a non-blank id")]
    BlankId,
    /// No secret was given.
    #[error("webhook receiver `{0}` has no secret: add one with `secret(..)`")]
    NoSecret(String),
    /// No handler was given.
    #[error("webhook receiver `{0}` has no handler: add one with `handler(..)`")]
    NoHandler(String),
    /// The replay window is shorter than twice the tolerance: a delivery whose id was
    /// forgotten could still pass the skew check.
    #[error(
        "webhook receiver `{receiver}`: the replay window ({replay_window:?}) must be at least twice the tolerance ({tolerance:?}), or a replay arriving after its id was forgotten would still pass the skew check"
    )]
    ReplayWindowTooShort {
        /// The receiver.
        receiver: String,
        /// The configured window.
        replay_window: Duration,
        /// The configured tolerance.
        tolerance: Duration,
    },
    /// The secret's text is not a key ([`WebhookSecret::standard`] refused it): converted by `?`,
    /// so a function that builds a receiver returns one error type (found by an author trial).
    #[error(transparent)]
    InvalidSecret(#[from] InvalidSecret),
    /// A key the receiver's signature scheme does not verify with (an Ed25519 key given to a
    /// scheme of shared secrets): every delivery would fail authentication.
    #[error(
        "webhook receiver `{0}`: its signature scheme does not verify with Ed25519 keys; give it the provider's shared secret, or use a scheme that checks Ed25519 signatures (`StandardWebhooks` does: `v1a`)"
    )]
    UnsupportedKey(String),
    /// A duration under a millisecond, or a size of zero.
    #[error("webhook receiver `{receiver}`: `{setting}` must be at least 1 (ms for durations)")]
    Zero {
        /// The receiver.
        receiver: String,
        /// The setting.
        setting: &'static str,
    },
}

/// Builds a [`WebhookReceiver`]; see [`WebhookReceiver::builder`].
#[must_use = "a builder does nothing until `build()` is called"]
pub struct WebhookReceiverBuilder {
    id: String,
    scheme: Arc<dyn SignatureScheme>,
    secrets: Vec<WebhookSecret>,
    store: Option<Arc<dyn IdempotencyStore>>,
    clock: Arc<dyn Clock>,
    handler: Option<Arc<dyn WebhookHandler>>,
    tolerance: Duration,
    replay_window: Duration,
    handler_timeout: Duration,
    body_timeout: Duration,
    max_body_bytes: usize,
    examples: Vec<Bytes>,
}

impl WebhookReceiverBuilder {
    /// Adds a key: the provider's shared secret, or its Ed25519 public key (the scheme must
    /// [accept](SignatureScheme::accepts) it). Give the new one and the old one while a key
    /// rotates; a signature matching any of them is accepted.
    pub fn secret(mut self, secret: WebhookSecret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Where delivery ids are remembered: the host's store, so replay protection survives a
    /// restart (`SqliteStore`) and holds across replicas (`PostgresStore`). Without one, a
    /// [`MemoryStore`] of the receiver's own, which forgets on restart.
    ///
    /// Delivery ids are kept as idempotency records under keys `Webhook:<receiver id>:<delivery
    /// id>`, which no action's key can equal, and the store's purge removes them once the
    /// replay window has passed.
    pub fn store(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock timestamps are checked against (a `ManualClock` in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The handler of verified, first-seen deliveries.
    pub fn handler(mut self, handler: impl WebhookHandler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// How far a signed timestamp may be from the receiver's clock, either way. Default 5
    /// minutes, as the Standard Webhooks specification recommends.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// How long a handled delivery id is remembered. Default 24 hours; at least twice the
    /// tolerance.
    pub fn replay_window(mut self, window: Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// How long the claim and the handler may take; past it the handler is aborted, the delivery
    /// answered `webhook.handler_timeout` and its id released. Default 30 s. A host that stops
    /// mid-handler holds the id for twice this plus 5 s.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// How long the body may take to arrive over HTTP (`WebhookReceiver::router`, feature `http`;
    /// not a link, which would not resolve without the feature); past it the
    /// delivery is answered `408 webhook.body_timeout` (retryable) and nothing runs. Default
    /// 30 s. The route reads no header of its own before the body, so this is what stops a
    /// sender that never finishes its upload from holding the request (and its buffer).
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// The largest body taken, in bytes. Default 1 MiB.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// A body the provider sends, which the handler must accept: the testkit's
    /// `webhook_security` scenario signs and delivers it.
    pub fn example(mut self, body: impl Into<Bytes>) -> Self {
        self.examples.push(body.into());
        self
    }

    /// The receiver.
    ///
    /// # Errors
    ///
    /// A blank id, no secret, no handler, a zero setting, or a replay window shorter than twice
    /// the tolerance.
    pub fn build(self) -> Result<WebhookReceiver, WebhookConfigError> {
        let id = self.id;
        if id.trim().is_empty() {
            return Err(WebhookConfigError::BlankId);
        }
        if self.secrets.is_empty() {
            return Err(WebhookConfigError::NoSecret(id));
        }
        if !self.secrets.iter().all(|key| self.scheme.accepts(key)) {
            return Err(WebhookConfigError::UnsupportedKey(id));
        }
        let Some(handler) = self.handler else {
            return Err(WebhookConfigError::NoHandler(id));
        };
        // In whole milliseconds, the unit they are checked in: 0.5 ms is zero too.
        for (setting, zero) in [
            ("tolerance", millis(self.tolerance) == 0),
            ("handler_timeout", millis(self.handler_timeout) == 0),
            ("body_timeout", millis(self.body_timeout) == 0),
            ("max_body_bytes", self.max_body_bytes == 0),
        ] {
            if zero {
                return Err(WebhookConfigError::Zero {
                    receiver: id,
                    setting,
                });
            }
        }
        if self.replay_window < self.tolerance.saturating_mul(2) {
            return Err(WebhookConfigError::ReplayWindowTooShort {
                receiver: id,
                replay_window: self.replay_window,
                tolerance: self.tolerance,
            });
        }
        let mut key_prefix = String::from("Webhook:");
        crate::host::idempotency::push_partition(&mut key_prefix, &id);
        key_prefix.push(':');
        Ok(WebhookReceiver {
            inner: Arc::new(Inner {
                id: Arc::from(id.as_str()),
                key_prefix,
                scheme: self.scheme,
                secrets: self.secrets,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                clock: self.clock,
                handler,
                tolerance_ms: millis(self.tolerance),
                replay_window_ms: millis(self.replay_window),
                handler_timeout: self.handler_timeout,
                body_timeout: self.body_timeout,
                max_body_bytes: self.max_body_bytes,
                examples: self.examples,
            }),
        })
    }
}

impl std::fmt::Debug for WebhookReceiverBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookReceiverBuilder")
            .field("id", &self.id)
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

/// One webhook endpoint of a connector: a provider's signed deliveries, verified, deduplicated
/// and handed to a handler (see the [module docs](self)). Cheap to clone.
///
/// ```
/// use std::time::Duration;
/// use aip_connector::webhook::{StandardWebhooks, WebhookDelivery, WebhookReceiver, WebhookSecret};
/// use aip_connector::model::ConnectorFailure;
///
/// #[derive(serde::Deserialize)]
/// struct BookingEvent { booking_id: String }
///
/// async fn on_booking(delivery: WebhookDelivery) -> Result<(), ConnectorFailure> {
///     let event: BookingEvent = delivery.json()?;
///     let _ = event.booking_id; // update your state, notify an agent, ...
///     Ok(())
/// }
///
/// let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
///     .secret(WebhookSecret::standard("whsec_c2VjcmV0").expect("a whsec_ secret"))
///     .tolerance(Duration::from_secs(300))
///     .handler(on_booking)
///     .build()
///     .expect("a complete receiver");
/// assert_eq!(receiver.id(), "bookings");
/// ```
#[derive(Clone)]
pub struct WebhookReceiver {
    inner: Arc<Inner>,
}

struct Inner {
    id: Arc<str>,
    /// `Webhook:<id, percent-encoded like a key partition>:`
    key_prefix: String,
    scheme: Arc<dyn SignatureScheme>,
    secrets: Vec<WebhookSecret>,
    store: Arc<dyn IdempotencyStore>,
    clock: Arc<dyn Clock>,
    handler: Arc<dyn WebhookHandler>,
    tolerance_ms: Millis,
    replay_window_ms: Millis,
    handler_timeout: Duration,
    body_timeout: Duration,
    max_body_bytes: usize,
    examples: Vec<Bytes>,
}

impl std::fmt::Debug for WebhookReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookReceiver")
            .field("id", &self.inner.id)
            .field("secrets", &self.inner.secrets.len())
            .field("tolerance_ms", &self.inner.tolerance_ms)
            .field("replay_window_ms", &self.inner.replay_window_ms)
            .finish_non_exhaustive()
    }
}

impl WebhookReceiver {
    /// A receiver called `id` (it names the receiver in errors, logs and stored keys; keep it
    /// stable) for deliveries signed with `scheme`. Add at least a secret and a handler.
    pub fn builder(id: impl Into<String>, scheme: impl SignatureScheme) -> WebhookReceiverBuilder {
        WebhookReceiverBuilder {
            id: id.into(),
            scheme: Arc::new(scheme),
            secrets: Vec::new(),
            store: None,
            clock: Arc::new(SystemClock),
            handler: None,
            tolerance: Duration::from_secs(5 * 60),
            replay_window: Duration::from_secs(24 * 60 * 60),
            handler_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 1024 * 1024,
            examples: Vec::new(),
        }
    }

    /// The receiver's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The largest body it takes.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }

    /// How long a body may take to arrive over HTTP.
    pub fn body_timeout(&self) -> Duration {
        self.inner.body_timeout
    }

    /// How far a signed timestamp may be from the receiver's clock.
    pub fn tolerance(&self) -> Duration {
        Duration::from_millis(self.inner.tolerance_ms)
    }

    /// The example bodies declared with [`WebhookReceiverBuilder::example`].
    pub fn examples(&self) -> &[Bytes] {
        &self.inner.examples
    }

    /// The headers a provider would send with `body` as delivery `id` signed at `timestamp_ms`,
    /// signed with the receiver's first key that [can sign](WebhookSecret::can_sign): for tests
    /// and the testkit.
    ///
    /// # Panics
    ///
    /// When the receiver holds only Ed25519 public keys (as a production receiver does), which
    /// cannot sign ([`can_sign`](Self::can_sign) is false): build the receiver of your tests
    /// with the private key (`whsk_…`), which verifies too.
    pub fn sign(&self, id: &str, timestamp_ms: Millis, body: &[u8]) -> HeaderMap {
        let delivery = SignedDelivery {
            id: id.to_owned(),
            timestamp_ms: Some(timestamp_ms),
        };
        let Some(key) = self.inner.secrets.iter().find(|key| key.can_sign()) else {
            panic!(
                "webhook receiver `{}` holds only Ed25519 public keys and cannot sign deliveries: \
                 build the receiver of your tests with the private key \
                 (`WebhookSecret::standard(\"whsk_…\")`), which verifies too",
                self.inner.id
            );
        };
        self.inner.scheme.sign(key, &delivery, body)
    }

    /// Whether [`sign`](Self::sign) can sign: the receiver holds a shared secret or an Ed25519
    /// private key, not only public keys.
    pub fn can_sign(&self) -> bool {
        self.inner.secrets.iter().any(WebhookSecret::can_sign)
    }

    /// The receiver's clock, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> Millis {
        self.inner.clock.now_ms()
    }

    /// Runs one delivery through the receiver: size, signature, skew, replay, then the handler
    /// (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// The [`WebhookError`] of the first step that refused it; nothing after that step ran.
    pub async fn receive(
        &self,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<WebhookReceipt, WebhookError> {
        let result = self.receive_inner(headers, body).await;
        if let Err(error) = &result {
            self.log_refusal(error);
        }
        result
    }

    /// Logs a refused delivery: the receiver and the code, with the handler's failure code or
    /// the store's error where there is one. The delivery id may be an attacker's text and is
    /// not logged.
    pub(crate) fn log_refusal(&self, error: &WebhookError) {
        let receiver = &*self.inner.id;
        match error {
            WebhookError::HandlerFailed(failure) => tracing::warn!(
                receiver,
                code = error.code(),
                failure = %failure.code,
                message = %failure.message,
                "webhook handler failed"
            ),
            WebhookError::StorageUnavailable(store) => tracing::error!(
                receiver,
                code = error.code(),
                error = %store,
                "webhook delivery store failed"
            ),
            _ => tracing::warn!(receiver, code = error.code(), "webhook delivery refused"),
        }
    }

    async fn receive_inner(
        &self,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<WebhookReceipt, WebhookError> {
        let inner = &self.inner;
        if body.len() > inner.max_body_bytes {
            return Err(WebhookError::PayloadTooLarge {
                limit: inner.max_body_bytes,
            });
        }
        let signed = inner.scheme.verify(&inner.secrets, headers, &body)?;
        let id_is_valid = !signed.id.is_empty()
            && signed.id.len() <= MAX_DELIVERY_ID_BYTES
            && signed.id.bytes().all(|b| b.is_ascii_graphic());
        if !id_is_valid {
            return Err(WebhookError::InvalidDelivery(format!(
                "a delivery id is 1 to {MAX_DELIVERY_ID_BYTES} visible ASCII characters, without spaces"
            )));
        }
        let now = inner.clock.now_ms();
        if let Some(timestamp) = signed.timestamp_ms {
            let skew_ms = now.abs_diff(timestamp);
            if skew_ms > inner.tolerance_ms {
                return Err(WebhookError::TimestampSkew {
                    skew_ms,
                    ahead: timestamp > now,
                    tolerance_ms: inner.tolerance_ms,
                });
            }
        }
        let delivery = WebhookDelivery {
            receiver: Arc::clone(&inner.id),
            id: signed.id,
            timestamp_ms: signed.timestamp_ms,
            received_at_ms: now,
            headers: headers.clone(),
            body,
        };
        // From the claim on, everything runs in a task of its own: a provider that hangs up
        // must not leave a claim without a handler, stop the handler half-way, or leave the
        // claim unsettled.
        let inner = Arc::clone(&self.inner);
        match crate::task::spawn_traced(inner.claim_and_handle(delivery)).await {
            Ok(result) => result,
            Err(_) => Err(WebhookError::HandlerFailed(panicked(&self.inner.id))),
        }
    }
}

impl Inner {
    /// Claims the delivery id, runs the handler, then remembers the id (success) or releases it
    /// (failure, timeout, panic).
    async fn claim_and_handle(
        self: Arc<Self>,
        delivery: WebhookDelivery,
    ) -> Result<WebhookReceipt, WebhookError> {
        // The handler's deadline counts from before the claim, so a slow store eats into the
        // handler's time, never into the claim's margin.
        let deadline = tokio::time::Instant::now() + self.handler_timeout;
        let now = delivery.received_at_ms;
        let reservation = Reservation {
            key: format!("{}{}", self.key_prefix, delivery.id),
            reservation_id: crate::host::idempotency::reservation_id(),
            action_id: ActionId::new(),
            tenant_id: None,
            input_hash: crate::host::canonical::sha256_hex(&delivery.body),
            resume_pending: false,
            expires_at_ms: now.saturating_add(self.claim_ms()),
        };
        match self.store.reserve(&reservation, now).await {
            Ok(ReserveOutcome::Acquired) => {}
            Ok(ReserveOutcome::Settled(record)) if record.input_hash != reservation.input_hash => {
                return Err(WebhookError::DeliveryConflict {
                    delivery_id: delivery.id,
                });
            }
            Ok(ReserveOutcome::Settled(_)) => {
                return Err(WebhookError::Replayed {
                    delivery_id: delivery.id,
                });
            }
            Ok(ReserveOutcome::InProgress(_)) => {
                return Err(WebhookError::InProgress {
                    delivery_id: delivery.id,
                });
            }
            Err(error) => return Err(WebhookError::StorageUnavailable(error)),
        }
        let delivery_id = delivery.id.clone();
        // The record outlives every copy that can still pass the skew check: one signed at `t`
        // passes until `t + tolerance`, and the window is at least twice the tolerance.
        let remember_from = delivery.timestamp_ms.map_or(now, |t| t.max(now));
        let handler = Arc::clone(&self.handler);
        // The handler runs in a task of its own too, so a panic is caught and the claim
        // released instead of held until it expires.
        let mut run = crate::task::spawn_traced(async move { handler.handle(delivery).await });
        let finished = match tokio::time::timeout_at(deadline, &mut run).await {
            Ok(finished) => finished,
            Err(_elapsed) => {
                run.abort();
                let timed_out = WebhookError::HandlerTimeout {
                    timeout: self.handler_timeout,
                };
                // An abort lands at the handler's next `.await`; one stuck in blocking code
                // keeps running, and may yet succeed. A handler that succeeds within the grace
                // did its work: the delivery is taken (a hostile review saw it released as a
                // timeout and run again by the retry). One still running after it is answered
                // as timed out, and its claim stays held until it ends: a success then is
                // remembered, anything else released, so a retry never runs beside it nor
                // repeats its work.
                match tokio::time::timeout(ABORT_GRACE, &mut run).await {
                    Ok(Ok(Ok(()))) => Ok(Ok(())),
                    Ok(_) => {
                        self.release(&reservation).await;
                        return Err(timed_out);
                    }
                    Err(_grace_over) => {
                        tracing::error!(receiver = %self.id, "a timed-out webhook handler did not stop; its delivery id is held until it ends");
                        let late = LateHandler {
                            reservation,
                            delivery_id,
                            remember_from,
                            now,
                        };
                        crate::task::spawn_traced(Arc::clone(&self).settle_when_done(run, late));
                        return Err(timed_out);
                    }
                }
            }
        };
        let outcome = match finished {
            Ok(Ok(())) => Ok(()),
            Ok(Err(failure)) => Err(WebhookError::HandlerFailed(failure)),
            Err(_panicked) => Err(WebhookError::HandlerFailed(panicked(&self.id))),
        };
        if let Err(error) = outcome {
            self.release(&reservation).await;
            return Err(error);
        }
        Ok(self
            .remember(&reservation, delivery_id, remember_from, now)
            .await)
    }

    /// Waits for a handler that outran its timeout and its abort, then remembers its delivery
    /// if it succeeded and gives the id back otherwise.
    async fn settle_when_done(
        self: Arc<Self>,
        run: tokio::task::JoinHandle<Result<(), ConnectorFailure>>,
        late: LateHandler,
    ) {
        match run.await {
            Ok(Ok(())) => {
                self.remember(
                    &late.reservation,
                    late.delivery_id,
                    late.remember_from,
                    late.now,
                )
                .await;
            }
            _ => self.release(&late.reservation).await,
        }
    }

    /// Gives the delivery id back after a handler that did not succeed: the provider's retry
    /// runs it again.
    async fn release(&self, reservation: &Reservation) {
        if let Err(store_error) = self.store.release(reservation).await {
            // The claim then expires on its own and a retry runs.
            tracing::error!(receiver = %self.id, error = %store_error, "a failed webhook delivery's claim could not be released");
        }
    }

    /// Remembers a handled delivery id for the replay window.
    ///
    /// Stored as an idempotency record: the stores' reservations, fencing, expiry and purge
    /// are exactly what replay protection needs. The scope is nominal (the key's `Webhook:`
    /// prefix is what partitions it); the action id is the claim's own.
    async fn remember(
        &self,
        reservation: &Reservation,
        delivery_id: String,
        remember_from: Millis,
        now: Millis,
    ) -> WebhookReceipt {
        let owner = format!("webhook:{}", self.id);
        let record = IdempotencyRecord {
            key: reservation.key.clone(),
            key_scope: IdempotencyKeyScope::Capability,
            action_id: reservation.action_id.clone(),
            capability_id: CapabilityId::from(owner.as_str()),
            principal_id: PrincipalId::from(owner.as_str()),
            tenant_id: None,
            input_hash: reservation.input_hash.clone(),
            result: ActionResult::completed(
                reservation.action_id.clone(),
                json!({ "webhook": self.id.as_ref(), "delivery_id": delivery_id }),
            ),
            created_at_ms: now,
            expires_at_ms: Some(remember_from.saturating_add(self.replay_window_ms)),
        };
        if let Err(store_error) = self.store.settle(reservation, record).await {
            // The handler's work is done and must not be redone on the provider's behalf: the
            // delivery is answered as taken. Until its claim expires a resend is told
            // `webhook.in_progress`; after that a resend would run the handler again.
            tracing::error!(receiver = %self.id, error = %store_error, "a handled webhook delivery could not be remembered");
        }
        WebhookReceipt { delivery_id }
    }

    /// How long a claim holds a delivery id: twice the handler timeout plus [`CLAIM_SLACK`], so
    /// neither a slow store nor replicas' clocks a little apart let a live handler's claim be
    /// taken over. A host that dies mid-handler holds the id this long.
    fn claim_ms(&self) -> Millis {
        millis(self.handler_timeout)
            .saturating_mul(2)
            .saturating_add(millis(CLAIM_SLACK))
    }
}

/// What [`Inner::settle_when_done`] needs to remember or release a late handler's delivery.
struct LateHandler {
    reservation: Reservation,
    delivery_id: String,
    remember_from: Millis,
    now: Millis,
}

/// How long a timed-out handler is given to stop after its abort.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// Slack on top of twice the handler timeout before a claim expires (see `Inner::claim_ms`).
const CLAIM_SLACK: Duration = Duration::from_secs(5);

/// The failure of a handler that panicked (its text is not repeated: the panic hook printed it).
fn panicked(receiver: &str) -> ConnectorFailure {
    ConnectorFailure::new(
        codes::CONNECTOR_RUNTIME_FAILURE,
        "the webhook handler panicked",
        ErrorCategory::Connector,
        ConnectorOperation::Ingestion,
        receiver,
    )
}

#[cfg(test)]
mod tests;
