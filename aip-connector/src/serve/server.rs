//! The native AIP HTTP binding: an axum server around a [`Host`].
//!
//! | Route | What |
//! |---|---|
//! | `GET /aip/v1/manifest` | the admitted manifest as an `aip.discovery.v1.manifest_response` envelope (`?connector=<agent id>` picks one of several) |
//! | `POST /aip/v1/messages` | one envelope in, the matching envelope out; an action with `Accept: text/event-stream` streams `aip.core.v1.stream_chunk` envelopes as server-sent events |
//! | `GET /health` | the process is up (no authentication) |
//! | `GET /ready` | the server takes new work: `503` from the shutdown signal on, through the [shutdown delay](ServerConfig::shutdown_delay) and the drain (no authentication) |
//!
//! Every request is authenticated by the [`Authenticator`] before its body is read; identity in
//! the payload is never trusted. Bodies over [`ServerConfig::max_body_bytes`] are refused
//! (`413`), a request over [`ServerConfig::request_timeout`] is answered `504` after its action
//! is abandoned (`Host::abandon_as`: cancelled, its key released for the retry when its
//! contract says a retry is safe), and when [`ServerConfig::max_in_flight`] requests run, the
//! next one gets a retryable `503` at once rather than a queue. An action runs on its own task: a client that
//! disconnects does not abort it halfway, so its result is stored and a retry with the same
//! idempotency key replays it. A streamed action is the exception: when its client disconnects
//! before the terminal chunk, it is abandoned (at once if its handler waits, else when it reaches
//! its handler), and its request keeps its slot until it has settled.

// A refusal is built once per request and answered at once; boxing it would buy nothing.
#![allow(clippy::result_large_err)]

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aip_connector_core::ids::ActionId;
use aip_connector_core::model::{
    Ack, AckStatus, ActionResult, Cancel, CancelTarget, Envelope, ErrorCategory, Manifest,
    ManifestRequest, MessageBody, ProtocolError, StreamChunk, StreamChunkKind,
    TransactionQueryRequest,
};
use aip_connector_core::validation::validate_envelope;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::auth::Authenticator;
use super::listen::ConnectionLimits;
use crate::codes;
use crate::host::{CancelOutcome, ChunkStream, Host, TransactionSelector, TrustedContext};

/// `GET` the manifest (the path a manifest's `compatibility.native_http.manifest` names unless
/// the connector declares another).
pub const MANIFEST_PATH: &str = crate::discovery::NATIVE_HTTP_MANIFEST_PATH;
/// `POST` envelopes (the path a manifest's `compatibility.native_http.messages` names unless the
/// connector declares another).
pub const MESSAGES_PATH: &str = crate::discovery::NATIVE_HTTP_MESSAGES_PATH;
/// `GET` liveness.
pub const HEALTH_PATH: &str = "/health";
/// `GET` readiness.
pub const READY_PATH: &str = "/ready";
/// The media type that asks for a streamed action.
pub const EVENT_STREAM: &str = "text/event-stream";
/// The server-sent event name of each streamed chunk.
pub const STREAM_CHUNK_EVENT: &str = "stream_chunk";

/// Limits and timings of an [`AipServer`]. Every field has a production default.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Largest request body read, in bytes (default 1 MiB). The host's own input limits apply
    /// after it.
    pub max_body_bytes: usize,
    /// How long the request body may take to arrive, and then how long its action may run,
    /// before the request is answered `transport.timeout` (an action is abandoned first:
    /// [`Host::abandon_as`](crate::host::Host::abandon_as)).
    /// Default 90 s: above the host's 60 s default deadline, so the host's own
    /// `sla.timeout_exceeded` normally answers first. Streams are bounded by the host's
    /// deadline instead.
    pub request_timeout: Duration,
    /// Requests served at once (default 256); the next one is refused `transport.overloaded`.
    pub max_in_flight: usize,
    /// The `retry_after_ms` advertised when overloaded or draining (default 1 s).
    pub retry_after: Duration,
    /// After the shutdown signal, how long the server goes on serving as usual while `GET /ready`
    /// answers `503`, before it drains (default zero: it drains at once). Give it the time your
    /// load balancer takes to notice (its probe interval times its failure threshold, or the
    /// time Kubernetes takes to remove the pod's endpoint): once draining, the server accepts
    /// no connection, so a probe could never read the `503`, and requests routed to it in the
    /// meantime would find the port closed.
    pub shutdown_delay: Duration,
    /// After the shutdown delay, how long in-flight actions may run before they are abandoned
    /// (default 30 s; each is answered `action.abandoned`).
    pub drain_timeout: Duration,
    /// After a timeout or a drain abandons an action, how long to wait for it to settle
    /// (default 2 s).
    pub cancel_grace: Duration,
    /// Serve `GET /aip/v1/manifest` without authentication (default `false`).
    pub public_manifest: bool,
    /// How often [`AipServer::serve`] purges the host store's expired idempotency records and
    /// retry-attempt counts ([`Host::purge_expired`]) and the approval and transaction records
    /// the host's retention no longer keeps ([`Host::purge_closed`]), first when serving
    /// starts; `None` leaves purging to the application (default 10 minutes).
    pub purge_interval: Option<Duration>,
    /// The deadline on each request's headers and the cap on open connections, enforced before
    /// a request reaches any route (defaults: 30 s, 1,024 connections).
    pub connections: ConnectionLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            request_timeout: Duration::from_secs(90),
            max_in_flight: 256,
            retry_after: Duration::from_secs(1),
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(2),
            public_manifest: false,
            purge_interval: Some(DEFAULT_PURGE_INTERVAL),
            connections: ConnectionLimits::default(),
        }
    }
}

impl ServerConfig {
    /// Sets [`max_body_bytes`](Self::max_body_bytes).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`request_timeout`](Self::request_timeout).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight) (at least 1).
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests.max(1);
        self
    }

    /// Sets [`retry_after`](Self::retry_after).
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = delay;
        self
    }

    /// Sets [`shutdown_delay`](Self::shutdown_delay).
    pub fn shutdown_delay(mut self, delay: Duration) -> Self {
        self.shutdown_delay = delay;
        self
    }

    /// Sets [`drain_timeout`](Self::drain_timeout).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets [`cancel_grace`](Self::cancel_grace).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Sets [`public_manifest`](Self::public_manifest).
    pub fn public_manifest(mut self, public: bool) -> Self {
        self.public_manifest = public;
        self
    }

    /// Sets [`purge_interval`](Self::purge_interval).
    pub fn purge_interval(mut self, interval: Option<Duration>) -> Self {
        self.purge_interval = interval;
        self
    }

    /// Sets [`connections`](Self::connections).
    pub fn connections(mut self, limits: ConnectionLimits) -> Self {
        self.connections = limits;
        self
    }
}

/// How often a server purges its host's expired idempotency entries unless told otherwise.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(600);

/// Entries of each kind one purge pass deletes: small enough that a pass holds SQLite's write
/// lock briefly, large enough that a backlog clears in few passes.
const PURGE_BATCH: usize = 1_000;

/// What every request handler shares.
struct Shared {
    host: Host,
    authenticator: Arc<dyn Authenticator>,
    config: ServerConfig,
    permits: Arc<Semaphore>,
    /// Set by the shutdown signal: `/ready` answers `503` while everything else is served.
    stopping: AtomicBool,
    /// Set when the drain begins (after the shutdown delay): new messages are refused.
    draining: AtomicBool,
    /// Fired when the drain timeout passes: in-flight actions are abandoned.
    drain_expired: CancellationToken,
}

impl Shared {
    /// How many requests hold a slot of `max_in_flight` now (streams until they settle).
    fn in_flight(&self) -> usize {
        self.config
            .max_in_flight
            .saturating_sub(self.permits.available_permits())
    }
}

/// The native AIP HTTP server around a [`Host`]. Cheap to clone.
#[derive(Clone)]
pub struct AipServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AipServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AipServer")
            .field("config", &self.shared.config)
            .field("stopping", &self.shared.stopping.load(Ordering::Relaxed))
            .field("draining", &self.shared.draining.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl AipServer {
    /// A server for `host` whose callers `authenticator` identifies.
    pub fn new(host: Host, authenticator: impl Authenticator, config: ServerConfig) -> Self {
        Self::with_shared_authenticator(host, Arc::new(authenticator), config)
    }

    /// Like [`new`](Self::new), with an authenticator shared with other servers (the MCP
    /// projection, say).
    pub fn with_shared_authenticator(
        host: Host,
        authenticator: Arc<dyn Authenticator>,
        config: ServerConfig,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                host,
                authenticator,
                permits: Arc::new(Semaphore::new(config.max_in_flight)),
                config,
                stopping: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                drain_expired: CancellationToken::new(),
            }),
        }
    }

    /// The routes, to serve as they are or to merge into an application's router.
    pub fn router(&self) -> Router {
        Router::new()
            .route(MANIFEST_PATH, get(manifest))
            .route(MESSAGES_PATH, post(messages))
            .route(HEALTH_PATH, get(health))
            .route(READY_PATH, get(ready))
            .with_state(Arc::clone(&self.shared))
    }

    /// Whether `GET /ready` answers `200`: false from the shutdown signal on (through the
    /// [shutdown delay](ServerConfig::shutdown_delay) and the drain).
    pub fn is_ready(&self) -> bool {
        !self.shared.stopping.load(Ordering::Acquire)
    }

    /// Turns readiness `503` while the server goes on serving: the start of the
    /// [shutdown delay](ServerConfig::shutdown_delay). [`serve`](Self::serve) calls it when its
    /// shutdown signal fires.
    pub fn begin_stopping(&self) {
        self.shared.stopping.store(true, Ordering::Release);
    }

    /// Starts draining: readiness turns `503` and new messages are refused
    /// `transport.shutting_down`, while in-flight ones finish. [`serve`](Self::serve) calls it
    /// when its shutdown delay has passed.
    pub fn begin_drain(&self) {
        self.begin_stopping();
        self.shared.draining.store(true, Ordering::Release);
    }

    /// Serves on `listener` until `shutdown` completes; then `/ready` answers `503` while the
    /// server goes on serving for [`ServerConfig::shutdown_delay`], and then it drains: no new
    /// connections or messages; in-flight requests and streams finish, and any still running
    /// after [`ServerConfig::drain_timeout`] have their actions abandoned and answered
    /// `action.abandoned`.
    /// Returns once every in-flight action has settled, and at the latest
    /// `shutdown_delay + drain_timeout + cancel_grace` after the signal (connections still open then, such as a
    /// stalled upload, are dropped).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // Served alone, the AIP routes answer every other path and method with an envelope
        // too (found by an operations trial: axum's were empty). Not in `router()`: an
        // application's router with a fallback of its own could not merge it.
        let router = self
            .router()
            .fallback(unknown_route)
            .method_not_allowed_fallback(method_not_allowed);
        self.serve_router(listener, router, shutdown).await
    }

    /// Like [`serve`](Self::serve), with `extra` routes merged into the AIP ones on the same
    /// listener (the MCP projection's `/mcp`, an application's own), under the same drain.
    /// As under `serve`, a path no route serves is answered `404 resource.not_found` and a
    /// method a route does not serve `405 transport.unsupported_message`, in an error envelope
    /// (merging a webhook receiver took them away, found by a wire trial); they replace a
    /// fallback `extra` has of its own: serve such a router with
    /// [`serve_router`](Self::serve_router).
    ///
    /// # Panics
    ///
    /// If `extra` routes a method and path the AIP routes already serve (axum's
    /// `Router::merge`).
    pub async fn serve_with_routes(
        self,
        listener: TcpListener,
        extra: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = self
            .router()
            .merge(extra)
            .fallback(unknown_route)
            .method_not_allowed_fallback(method_not_allowed);
        self.serve_router(listener, router, shutdown).await
    }

    /// Like [`serve`](Self::serve), serving `router` as given: build it from
    /// [`router`](Self::router), with routes merged in and layers around it (an access log,
    /// request ids, a tracing layer), and it is served with the connection limits, the
    /// periodic purge, the shutdown delay, the drain and the hard stop of `serve`, which
    /// `axum::serve` does not have. The AIP routes are served only if `router` holds them.
    ///
    /// ```no_run
    /// # async fn run(server: aip_connector::serve::AipServer, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    /// use aip_connector::serve::axum::extract::Request;
    /// use aip_connector::serve::axum::middleware::{self, Next};
    ///
    /// // One access-log line per request, whatever its route.
    /// let router = server.router().layer(middleware::from_fn(|request: Request, next: Next| async move {
    ///     let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    ///     let started = std::time::Instant::now();
    ///     let response = next.run(request).await;
    ///     tracing::info!(%method, %path, status = response.status().as_u16(),
    ///         elapsed_ms = started.elapsed().as_millis() as u64, "request");
    ///     response
    /// }));
    /// server.serve_router(listener, router, std::future::pending()).await
    /// # }
    /// ```
    pub async fn serve_router(
        self,
        listener: TcpListener,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let drained = CancellationToken::new();
        let signal = {
            let server = self.clone();
            let drained = drained.clone();
            async move {
                shutdown.await;
                server.begin_stopping();
                let delay = server.shared.config.shutdown_delay;
                if !delay.is_zero() {
                    tracing::info!(
                        delay_ms = crate::store::millis(delay),
                        "shutting down: /ready answers 503; serving until the delay has passed"
                    );
                    tokio::time::sleep(delay).await;
                }
                server.begin_drain();
                tracing::info!(
                    in_flight = server.shared.in_flight(),
                    drain_timeout_ms = crate::store::millis(server.shared.config.drain_timeout),
                    "draining: new connections and messages are refused; in-flight actions may finish"
                );
                drained.cancel();
            }
        };
        // The drain clock starts with the signal and cancels what is still running when it ends.
        let expiry = {
            let shared = Arc::clone(&self.shared);
            let drained = drained.clone();
            tokio::spawn(async move {
                drained.cancelled().await;
                tokio::time::sleep(shared.config.drain_timeout).await;
                let in_flight = shared.in_flight();
                if in_flight > 0 {
                    tracing::warn!(
                        in_flight,
                        "the drain timeout has passed: abandoning the actions still running"
                    );
                }
                shared.drain_expired.cancel();
            })
        };
        // A connection that never finishes its request (a stalled upload, a stream nobody reads)
        // must not hold shutdown forever: once the drain has expired and cancelled what ran,
        // the cancel grace is the last wait, then the remaining connections are dropped.
        let hard_stop = {
            let expired = self.shared.drain_expired.clone();
            let grace = self.shared.config.cancel_grace;
            async move {
                expired.cancelled().await;
                tokio::time::sleep(grace).await;
            }
        };
        tokio::pin!(hard_stop);
        let _purger = PeriodicPurge::start(&self.shared.host, self.shared.config.purge_interval);
        let serving = super::listen::serve_connections(
            listener,
            router,
            &self.shared.config.connections,
            signal,
        );
        let (outcome, stopped_hard) = tokio::select! {
            outcome = serving => (outcome, false),
            () = &mut hard_stop => (Ok(()), true),
        };
        // Actions run on their own tasks; each holds a permit until it settles.
        if !stopped_hard {
            let all = u32::try_from(self.shared.config.max_in_flight).unwrap_or(u32::MAX);
            tokio::select! {
                _ = self.shared.permits.acquire_many(all) => {}
                () = &mut hard_stop => {}
            }
        }
        expiry.abort();
        outcome
    }
}

/// The task that purges a served host's expired idempotency entries and the records its
/// retention no longer keeps ([`purge_periodically`]), stopped when this is dropped: with the
/// serving call, however it ends.
pub(crate) struct PeriodicPurge(Option<tokio::task::JoinHandle<()>>);

impl PeriodicPurge {
    /// Starts purging `host` every `interval`; `None` starts nothing.
    pub(crate) fn start(host: &Host, interval: Option<Duration>) -> Self {
        Self(interval.map(|interval| tokio::spawn(purge_periodically(host.clone(), interval))))
    }
}

impl Drop for PeriodicPurge {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Purges `host`'s expired idempotency entries ([`Host::purge_expired`]) and the records its
/// retention no longer keeps ([`Host::purge_closed`]) every `interval`, the first time at once.
/// A failed purge is logged and tried again at the next tick: nothing depends on it but space.
async fn purge_periodically(host: Host, interval: Duration) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match host.purge_expired(PURGE_BATCH).await {
            Ok(purged) => tracing::debug!(
                records = purged.records,
                attempt_counts = purged.attempt_counts,
                "purged expired idempotency entries"
            ),
            Err(error) => tracing::warn!(%error, "purging expired idempotency entries failed"),
        }
        match host.purge_closed(PURGE_BATCH).await {
            Ok(purged) => tracing::debug!(
                approvals = purged.approvals,
                transactions = purged.transactions,
                "purged records past their retention"
            ),
            Err(error) => tracing::warn!(%error, "purging records past their retention failed"),
        }
    }
}

// ---- Routes ---------------------------------------------------------------------------------

async fn health() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "status": "draining" }),
        )
    } else if shared.stopping.load(Ordering::Acquire) {
        // Still serving: only new traffic should go elsewhere.
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "status": "stopping" }),
        )
    } else {
        json_response(StatusCode::OK, &json!({ "status": "ready" }))
    }
}

#[derive(Deserialize)]
struct ManifestQuery {
    connector: Option<String>,
}

async fn manifest(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<ManifestQuery>, QueryRejection>,
    request: Request,
) -> Response {
    if !shared.config.public_manifest {
        let (parts, _) = request.into_parts();
        if let Err(error) = shared.authenticator.authenticate(&parts).await {
            return refused(&shared, &error);
        }
    }
    // Read after authentication, and refused as an envelope: axum's own rejection of a
    // malformed query (`?connector=a&connector=b`) was plain text, sent before the
    // authenticator ran (found by a review).
    let Query(query) = match query {
        Ok(query) => query,
        Err(rejection) => {
            return error_response(
                &refusal(
                    codes::TRANSPORT_INVALID_ENVELOPE,
                    format!("the manifest query is malformed: {}", rejection.body_text()),
                ),
                None,
            );
        }
    };
    match pick_manifest(&shared.host, query.connector.as_deref(), None) {
        Ok(manifest) => json_response(
            StatusCode::OK,
            &Envelope::new(MessageBody::Manifest(Box::new(manifest))),
        ),
        Err(error) => error_response(&error, None),
    }
}

/// The manifest named by agent id, or holding every requested capability, or the only one.
fn pick_manifest(
    host: &Host,
    agent: Option<&str>,
    request: Option<&ManifestRequest>,
) -> Result<Manifest, ProtocolError> {
    let wanted = request
        .and_then(|r| r.filter.as_ref())
        .map(|f| f.capability_ids.as_slice())
        .unwrap_or_default();
    let candidates: Vec<&Manifest> = host
        .manifests()
        .map(|admitted| admitted.manifest())
        .filter(|m| agent.is_none_or(|agent| m.agent.id.as_str() == agent))
        .filter(|m| wanted.iter().all(|id| m.capability(id.as_str()).is_some()))
        .collect();
    match candidates.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(refusal(
            codes::RESOURCE_NOT_FOUND,
            // A caller that named the connector by the manifest's connector name (`notes`)
            // rather than its agent id (`agent:notes`) is told which ids there are (a wire
            // trial); the caller passed authentication, and the manifests are theirs to read.
            match agent {
                Some(_) => format!(
                    "no admitted manifest matches the request; `?connector=` takes an agent id: {}",
                    host.manifests()
                        .map(|admitted| format!("`{}`", admitted.manifest().agent.id.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "no admitted manifest matches the request".to_owned(),
            },
        )),
        several => Err(refusal(
            codes::TRANSPORT_UNSUPPORTED_MESSAGE,
            format!(
                "this server hosts {} connectors; name one with `?connector=<agent id>` ({})",
                several.len(),
                several
                    .iter()
                    .map(|m| m.agent.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

async fn messages(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(
            &temporary(
                &shared,
                codes::TRANSPORT_SHUTTING_DOWN,
                "the server is shutting down",
            ),
            None,
        );
    }
    let (parts, body) = request.into_parts();
    let caller = match shared.authenticator.authenticate(&parts).await {
        Ok(caller) => caller,
        Err(error) => return refused(&shared, &error),
    };
    let Ok(permit) = Arc::clone(&shared.permits).try_acquire_owned() else {
        return error_response(
            &temporary(
                &shared,
                codes::TRANSPORT_OVERLOADED,
                "every request slot is taken; retry later",
            ),
            None,
        );
    };
    if !declares_json(&parts.headers) {
        return error_response(
            &refusal(
                codes::TRANSPORT_UNSUPPORTED_MEDIA_TYPE,
                "send the envelope with one `Content-Type: application/json`, in UTF-8 (a \
                 `charset` parameter other than `utf-8` is refused)",
            ),
            None,
        );
    }
    if !is_unencoded(&parts.headers) {
        return error_response(
            &refusal(
                codes::TRANSPORT_UNSUPPORTED_MEDIA_TYPE,
                "send the envelope without a `Content-Encoding` (the server decodes none)",
            ),
            None,
        );
    }
    // A body that trickles in (or stops) must not hold a slot forever.
    let bytes = match read_body(&shared, &parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(error) => return error_response(&error, None),
    };
    let envelope: Envelope = match serde_json::from_slice(&bytes) {
        Ok(envelope) => envelope,
        Err(error) => {
            return error_response(
                &refusal(
                    codes::TRANSPORT_INVALID_ENVELOPE,
                    format!("the body is not an AIP envelope: {error}"),
                ),
                None,
            );
        }
    };
    // After the parse, so that a body that is not JSON keeps serde's message for the envelope;
    // a repeated key anywhere (the input's included) is refused like a malformed envelope.
    if let Err(error) = super::unique_keys::check(&bytes) {
        return error_response(
            &refusal(
                codes::TRANSPORT_INVALID_ENVELOPE,
                format!("the body is not an AIP envelope: {error}"),
            ),
            None,
        );
    }
    if let Err(error) = validate_envelope(&envelope) {
        return error_response(
            &refusal(codes::TRANSPORT_INVALID_ENVELOPE, error.to_string()),
            Some(&envelope),
        );
    }
    let wants_stream = accepts_event_stream(&parts.headers);
    dispatch(shared, caller, envelope, wants_stream, permit).await
}

/// Reads at most `limit` bytes; a declared or actual larger body is `413`.
async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ProtocolError> {
    let limit = shared.config.max_body_bytes;
    read_limited(headers, body, limit, shared.config.request_timeout)
        .await
        .map_err(|error| match error {
            BodyError::TooLarge => refusal(
                codes::TRANSPORT_PAYLOAD_TOO_LARGE,
                format!("the request body exceeds {limit} bytes"),
            ),
            BodyError::Unreadable(why) => refusal(
                codes::TRANSPORT_INVALID_ENVELOPE,
                format!("the request body could not be read: {why}"),
            ),
            BodyError::TimedOut => timed_out(shared, "the request body did not arrive"),
        })
}

/// Why [`read_limited`] could not read a body.
pub(super) enum BodyError {
    /// Declared or streamed past the limit.
    TooLarge,
    /// The connection failed mid-body.
    Unreadable(String),
    /// Not all of it arrived within the deadline.
    TimedOut,
}

/// Reads a body of at most `limit` bytes within `deadline`: one declared larger is refused
/// before a byte is read, one that streams past the limit as soon as it does, and one that
/// trickles in (or stops) when the deadline passes, so no route that reads a body can be held
/// by a sender that never finishes.
pub(super) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let Ok(read) = tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await else {
        return Err(BodyError::TimedOut);
    };
    read.map_err(|error| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(cause) = source {
            if cause.is::<http_body_util::LengthLimitError>() {
                return BodyError::TooLarge;
            }
            source = cause.source();
        }
        BodyError::Unreadable(error.to_string())
    })
}

/// Whether the body is declared as JSON: `application/json` or `application/<type>+json`, with
/// any parameters, in any case, except a `charset` other than UTF-8 (JSON between systems is
/// UTF-8, RFC 8259 §8.1, and the server reads nothing else: a body declared `utf-16` would be
/// read as other text than its sender meant).
///
/// Required, not just tolerated, because a browser sends a cross-site `POST` without asking the
/// server first (no CORS preflight) only when its type is `text/plain`, a form type, or absent.
/// Refusing those keeps a page on another origin from making a signed-in browser send an
/// envelope, should an `Authenticator` accept cookies.
fn declares_json(headers: &HeaderMap) -> bool {
    // Two `Content-Type`s say two things; a gateway may have read the other.
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (types.next(), types.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    let utf8 = parts.all(|parameter| match parameter.split_once('=') {
        Some((name, charset)) if name.trim().eq_ignore_ascii_case("charset") => {
            // US-ASCII is UTF-8's first 128 characters: its bytes read the same.
            let charset = charset.trim().trim_matches('"');
            ["utf-8", "utf8", "us-ascii"]
                .iter()
                .any(|utf8| charset.eq_ignore_ascii_case(utf8))
        }
        _ => true,
    });
    utf8 && kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5
                && subtype.is_char_boundary(subtype.len() - 5)
                && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// Whether the body carries no content coding (`Content-Encoding` absent, or only
/// `identity`). The server decodes none, and reading an encoded body as JSON would see other
/// bytes than a gateway in front that decodes it: a parser disagreement, refused like a
/// repeated key.
pub(super) fn is_unencoded(headers: &HeaderMap) -> bool {
    let only = |name, allowed: &[&str]| {
        headers.get_all(name).iter().all(|value| {
            value.to_str().is_ok_and(|value| {
                value.split(',').map(str::trim).all(|coding| {
                    coding.is_empty() || allowed.iter().any(|a| coding.eq_ignore_ascii_case(a))
                })
            })
        })
    };
    // A transfer coding other than chunked (`gzip, chunked`) is one too: hyper undoes the
    // chunking only.
    only(header::CONTENT_ENCODING, &["identity"])
        && only(header::TRANSFER_ENCODING, &["chunked", "identity"])
}

fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.trim().starts_with(EVENT_STREAM)))
}

async fn dispatch(
    shared: Arc<Shared>,
    caller: TrustedContext,
    mut envelope: Envelope,
    wants_stream: bool,
    permit: OwnedSemaphorePermit,
) -> Response {
    let host = &shared.host;
    // The body moves out (an action is never copied); what stays is what a reply needs.
    let placeholder = MessageBody::Other {
        key: String::new(),
        value: serde_json::Value::Null,
    };
    let message_type = envelope.message_type;
    let body = match std::mem::replace(&mut envelope.body, placeholder) {
        MessageBody::Action(action) if wants_stream => {
            return stream_action(&shared, &envelope, *action, caller, permit);
        }
        // Each awaited branch is boxed, so the request future stays small: it is moved a few
        // times on its way into the connection task, and a large one costs a copy each time.
        MessageBody::Action(action) => {
            match Box::pin(run_action(Arc::clone(&shared), caller, *action, permit)).await {
                Ok(result) => MessageBody::ActionResult(Box::new(result)),
                Err(error) => return error_response(&error, Some(&envelope)),
            }
        }
        MessageBody::TransactionRequest(request) => {
            match Box::pin(run_transaction(
                Arc::clone(&shared),
                caller,
                *request,
                permit,
            ))
            .await
            {
                Ok(result) => MessageBody::TransactionResult(Box::new(result)),
                Err(error) => return error_response(&error, Some(&envelope)),
            }
        }
        MessageBody::Cancel(Cancel {
            target: CancelTarget::Action(id),
            ..
        }) => match host.cancel_as_watched(&id, &caller) {
            // The result the action itself ends with (and a resend replays), once it has
            // settled: usually `cancelled`, but a handler that finished in the poll that saw
            // the cancellation keeps its success (found by a hostile review: the answer was
            // `cancelled` whatever the action ended with).
            (CancelOutcome::Cancelled, settling) => {
                match Box::pin(tokio::time::timeout(
                    shared.config.cancel_grace,
                    settling.result(),
                ))
                .await
                {
                    Ok(Some(result)) => MessageBody::ActionResult(Box::new(result)),
                    _ => MessageBody::Ack(Ack {
                        action_id: id,
                        status: AckStatus::Accepted,
                        reason: Some(
                            "the cancellation reached the executing action, which has not \
                             settled yet; its result is the answer to its own request (a resend \
                             under its idempotency key replays it)"
                                .to_owned(),
                        ),
                        retry_after_ms: None,
                        queue: None,
                    }),
                }
            }
            (CancelOutcome::Pending, _) => MessageBody::Ack(Ack {
                action_id: id,
                status: AckStatus::Accepted,
                reason: Some(
                    "the action is not executing here; the cancellation is remembered for 60 s \
                     and cancels the action if it starts meanwhile, a resend of a finished \
                     action without an idempotency key included (a keyed one replays its \
                     stored result)"
                        .to_owned(),
                ),
                retry_after_ms: None,
                queue: None,
            }),
            (CancelOutcome::AlreadyFinished, _) => MessageBody::Ack(Ack {
                action_id: id,
                status: AckStatus::Rejected,
                reason: Some(
                    "the action is not executing here: its last execution failed with a \
                     retryable error, and a retry of it is not cancelled by this request; cancel \
                     the retry once it has been sent"
                        .to_owned(),
                ),
                retry_after_ms: None,
                queue: None,
            }),
            (CancelOutcome::NotActive, _) => {
                let error = temporary(
                    &shared,
                    codes::TRANSPORT_OVERLOADED,
                    "too many cancellations are pending, on this server or for this caller; \
                     retry later",
                );
                return error_response(&error, Some(&envelope));
            }
            (CancelOutcome::IdTooLong { max_id_bytes }, _) => {
                let mut error = refusal(
                    codes::ACTION_ID_TOO_LONG,
                    format!(
                        "no action with an id of {} bytes can run here (at most \
                             {max_id_bytes}); there is nothing to cancel",
                        id.as_str().len()
                    ),
                );
                error.details = Some(json!({
                    "field": "id",
                    "id_bytes": id.as_str().len(),
                    "max_id_bytes": max_id_bytes,
                }));
                return error_response(&error, Some(&envelope));
            }
            (CancelOutcome::IdInvalid, _) => {
                let why = if id.as_str().is_empty() {
                    "is empty"
                } else {
                    "contains a NUL character"
                };
                let mut error = refusal(
                    codes::ACTION_INVALID,
                    format!(
                        "the action id {why}: no such action can run here; there is nothing to cancel"
                    ),
                );
                error.details = Some(json!({ "field": "id" }));
                return error_response(&error, Some(&envelope));
            }
        },
        MessageBody::Cancel(Cancel {
            target: CancelTarget::Session(_),
            ..
        }) => {
            let error = refusal(
                codes::TRANSPORT_UNSUPPORTED_MESSAGE,
                "this server has no sessions; cancel an action instead",
            );
            return error_response(&error, Some(&envelope));
        }
        MessageBody::ApprovalDecision(decision) => {
            match Box::pin(host.record_approval_decision(*decision, &caller)).await {
                Ok(record) => MessageBody::ApprovalRecordView(Box::new(record.view())),
                Err(error) => return error_response(&error, Some(&envelope)),
            }
        }
        MessageBody::ApprovalQueryRequest(query) => {
            match Box::pin(host.approval_view(&query.approval_id, &caller)).await {
                Ok(Some(view)) => MessageBody::ApprovalRecordView(Box::new(view)),
                Ok(None) => {
                    // The category the host's own `approval_not_found` has; the id is not
                    // echoed (the caller has it, and it may be any length).
                    let error = super::error(
                        codes::POLICY_APPROVAL_NOT_FOUND,
                        "no approval with this id for this caller",
                        ErrorCategory::Policy,
                        false,
                    );
                    return error_response(&error, Some(&envelope));
                }
                Err(error) => return error_response(&error, Some(&envelope)),
            }
        }
        MessageBody::TransactionQueryRequest(query) => {
            match Box::pin(host.transaction(&selector(&query), &caller)).await {
                Ok(Some(view)) => MessageBody::TransactionView(Box::new(view)),
                Ok(None) => {
                    let error = super::error(
                        codes::TRANSACTION_NOT_FOUND,
                        "no such transaction for this caller",
                        ErrorCategory::Policy,
                        false,
                    );
                    return error_response(&error, Some(&envelope));
                }
                Err(error) => return error_response(&error, Some(&envelope)),
            }
        }
        MessageBody::ManifestRequest(request) => match pick_manifest(host, None, Some(&request)) {
            Ok(manifest) => MessageBody::Manifest(Box::new(manifest)),
            Err(error) => return error_response(&error, Some(&envelope)),
        },
        _ => {
            let error = refusal(
                codes::TRANSPORT_UNSUPPORTED_MESSAGE,
                format!(
                    "`{}` is not accepted here; send an action, transaction request, cancel, \
                     approval decision or query, or manifest request",
                    message_type
                ),
            );
            return error_response(&error, Some(&envelope));
        }
    };
    json_response(StatusCode::OK, &Envelope::reply_to(&envelope, body))
}

async fn run_action(
    shared: Arc<Shared>,
    caller: TrustedContext,
    action: aip_connector_core::model::Action,
    permit: OwnedSemaphorePermit,
) -> Result<ActionResult, ProtocolError> {
    let id = action.id.clone();
    let host = shared.host.clone();
    let task = {
        let caller = caller.clone();
        async move { host.invoke(action, &caller).await }
    };
    run_bounded(&shared, &caller, &id, task, permit).await
}

async fn run_transaction(
    shared: Arc<Shared>,
    caller: TrustedContext,
    request: aip_connector_core::model::TransactionRequest,
    permit: OwnedSemaphorePermit,
) -> Result<aip_connector_core::model::TransactionResult, ProtocolError> {
    let id = request.action.id.clone();
    let host = shared.host.clone();
    let task = {
        let caller = caller.clone();
        async move { host.transact(request, &caller).await }
    };
    run_bounded(&shared, &caller, &id, task, permit).await?
}

fn selector(query: &TransactionQueryRequest) -> TransactionSelector {
    // Validation admitted exactly one selector.
    if let Some(id) = &query.transaction_id {
        TransactionSelector::Transaction(id.clone())
    } else if let Some(id) = &query.action_id {
        TransactionSelector::Action(id.clone())
    } else {
        TransactionSelector::Plan(query.plan_id.clone().unwrap_or_default())
    }
}

/// Runs `task` on its own task, so a client that disconnects does not abort it halfway. Past
/// the request timeout, or once the drain expires, the action is abandoned (`Host::abandon_as`:
/// its handler is cancelled and its key released, so a retry runs it again); a timeout is then
/// answered `transport.timeout` after at most the cancel grace, a drain with the action's
/// result (`action.abandoned`, retryable, when it was abandoned).
async fn run_bounded<T: Send + 'static>(
    shared: &Arc<Shared>,
    caller: &TrustedContext,
    action_id: &ActionId,
    task: impl Future<Output = T> + Send + 'static,
    permit: OwnedSemaphorePermit,
) -> Result<T, ProtocolError> {
    let handle = crate::task::spawn_traced(async move {
        let outcome = task.await;
        drop(permit);
        outcome
    });
    let mut watch = DetachedWatch {
        handle: Some(handle),
        shared: Arc::clone(shared),
        caller: caller.clone(),
        action_id: action_id.clone(),
        deadline: tokio::time::Instant::now() + shared.config.request_timeout,
    };
    let joined = |outcome: Result<T, tokio::task::JoinError>| {
        outcome.map_err(|_| {
            super::error(
                codes::CONNECTOR_RUNTIME_FAILURE,
                "the action's task ended abnormally (its handler panicked); its outcome is unknown",
                ErrorCategory::Connector,
                false,
            )
        })
    };
    let handle = watch
        .handle
        .as_mut()
        .expect("the watch holds the task until it returns");
    let answer = tokio::select! {
        outcome = &mut *handle => joined(outcome),
        () = tokio::time::sleep_until(watch.deadline) => {
            let abandoned = super::abandon_once_running(&shared.host, action_id, caller, handle);
            let _ = tokio::time::timeout(shared.config.cancel_grace, abandoned).await;
            Err(timed_out(shared, "the action did not finish; it was abandoned"))
        }
        () = shared.drain_expired.cancelled() => {
            joined(super::abandon_once_running(&shared.host, action_id, caller, handle).await)
        }
    };
    // Answered: the action was seen through, or abandoned already.
    watch.handle = None;
    answer
}

/// Keeps the request timeout (and the drain) bounding an action whose client went away. The
/// timer lives in the request's future, which hyper drops with the connection, while the
/// action's task, spawned so that a disconnect does not abort it halfway, would run on to the
/// host's own deadline, holding its slot (found by an author trial: a call polling a provider
/// ran for minutes after `curl --max-time 1`). Dropped before the request was answered, the
/// watch hands the task to a watchdog that abandons it at the request's deadline.
struct DetachedWatch<T: Send + 'static> {
    /// The action's task, until the request is answered.
    handle: Option<tokio::task::JoinHandle<T>>,
    shared: Arc<Shared>,
    caller: TrustedContext,
    action_id: ActionId,
    /// When the request times out.
    deadline: tokio::time::Instant,
}

impl<T: Send + 'static> Drop for DetachedWatch<T> {
    fn drop(&mut self) {
        let Some(mut handle) = self.handle.take() else {
            return;
        };
        if handle.is_finished() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, caller, action_id, deadline) = (
            Arc::clone(&self.shared),
            self.caller.clone(),
            self.action_id.clone(),
            self.deadline,
        );
        runtime.spawn(async move {
            tokio::select! {
                _ = &mut handle => {}
                () = tokio::time::sleep_until(deadline) => {
                    let _ = super::abandon_once_running(&shared.host, &action_id, &caller, &mut handle).await;
                }
                () = shared.drain_expired.cancelled() => {
                    let _ = super::abandon_once_running(&shared.host, &action_id, &caller, &mut handle).await;
                }
            }
        });
    }
}

// ---- Streaming ------------------------------------------------------------------------------

/// Holds the request's concurrency slot until the stream ends with its terminal chunk, or until
/// the client has had the request timeout to read the rest after the action settled
/// ([`slot_watchdog`]). A stream dropped before its terminal chunk (the client went away)
/// abandons its action through the [`ChunkStream`]'s drop, which the host acts on whenever the
/// action reaches its handler; the slot is then held until the action has settled, so that an
/// action whose client left still counts against `max_in_flight` and `serve` waits for it
/// (found by a hostile review: freed at the disconnect, it let a client start any number of
/// actions by connecting and hanging up).
struct StreamGuard {
    finished: bool,
    /// The request's slot; taken by whichever comes first, this guard's drop or the watchdog.
    slot: Arc<std::sync::Mutex<Option<OwnedSemaphorePermit>>>,
    watchdog: tokio::task::JoinHandle<()>,
    /// Resolves once the action has its result.
    settled: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.watchdog.abort();
        let slot = self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let (Some(slot), false, Some(settled)) = (slot, self.finished, self.settled.take()) {
            // No runtime (it is shutting down): nothing runs any more, the action included.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    settled.await;
                    drop(slot);
                });
            }
        }
    }
}

struct StreamState {
    chunks: ChunkStream,
    guard: StreamGuard,
    drain_expired: CancellationToken,
    /// The drain's expiry was seen and the action abandoned.
    drained: bool,
    /// Fired by the watchdog: the client did not read the stream to its end within the request
    /// timeout after the action settled; the stream ends when next polled.
    overdue: CancellationToken,
    request: Envelope,
}

/// Frees a stream's slot once its action has settled and the client has had the request
/// timeout to read what is left, and ends the host's task if it still waits to queue the
/// terminal chunk. A client that asks for a stream and never reads stops the server from
/// polling the stream's body (the socket is full), so nothing the body does can free the slot:
/// without this, each such connection held one of `max_in_flight` for good. The connection
/// itself, and the chunks already queued for it, stay until the client closes it or reads
/// again (the body then ends at once).
fn slot_watchdog(
    settled: impl std::future::Future<Output = ()> + Send + 'static,
    read_time: Duration,
    slot: Arc<std::sync::Mutex<Option<OwnedSemaphorePermit>>>,
    overdue: CancellationToken,
    give_up: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    crate::task::spawn_traced(async move {
        settled.await;
        tokio::time::sleep(read_time).await;
        let freed = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if freed.is_some() {
            tracing::warn!(
                read_time_ms = read_time.as_millis() as u64,
                "a streamed action settled and its client did not read the rest within the request timeout; its slot is freed and the stream ends"
            );
            overdue.cancel();
            give_up.cancel();
        }
    })
}

fn stream_action(
    shared: &Arc<Shared>,
    request: &Envelope,
    action: aip_connector_core::model::Action,
    caller: TrustedContext,
    permit: OwnedSemaphorePermit,
) -> Response {
    let chunks = shared.host.invoke_stream(action, caller);
    let settled = Box::pin(chunks.settled());
    let slot = Arc::new(std::sync::Mutex::new(Some(permit)));
    let overdue = CancellationToken::new();
    let watchdog = slot_watchdog(
        chunks.settled(),
        shared.config.request_timeout,
        slot.clone(),
        overdue.clone(),
        chunks.give_up_handle(),
    );
    let state = StreamState {
        chunks,
        guard: StreamGuard {
            finished: false,
            slot,
            watchdog,
            settled: Some(settled),
        },
        drain_expired: shared.drain_expired.clone(),
        drained: false,
        overdue,
        request: request.clone(),
    };
    Sse::new(chunk_events(state))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn chunk_events(state: StreamState) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    futures_util::stream::unfold(state, |mut state| async move {
        if state.guard.finished || state.overdue.is_cancelled() {
            return None;
        }
        let chunk: StreamChunk = loop {
            tokio::select! {
                chunk = state.chunks.next() => break chunk?,
                () = state.overdue.cancelled() => return None,
                // The drain expired: the action is abandoned, at once if its handler waits,
                // else when it reaches its handler, and the client reads `action.abandoned` as
                // its terminal chunk (found by a hostile review: one `abandon_as` missed an
                // action still resolving its credential, which then ran after `serve` returned).
                () = state.drain_expired.cancelled(), if !state.drained => {
                    state.drained = true;
                    state.chunks.abandon();
                }
            }
        };
        if matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error) {
            state.guard.finished = true;
        }
        let envelope = Envelope::reply_to(&state.request, MessageBody::StreamChunk(chunk));
        let event = Event::default()
            .event(STREAM_CHUNK_EVENT)
            .data(serde_json::to_string(&envelope).unwrap_or_default());
        Some((Ok(event), state))
    })
}

// ---- Responses ------------------------------------------------------------------------------

fn refusal(code: &str, message: impl Into<String>) -> ProtocolError {
    super::error(code, message, ErrorCategory::Permanent, false)
}

/// `transport.timeout`: `what` did not happen within the request timeout.
fn timed_out(shared: &Shared, what: &str) -> ProtocolError {
    let limit = shared.config.request_timeout.as_millis();
    super::error(
        codes::TRANSPORT_TIMEOUT,
        format!("{what} within the request timeout of {limit} ms"),
        ErrorCategory::Temporary,
        true,
    )
}

fn temporary(shared: &Shared, code: &str, message: impl Into<String>) -> ProtocolError {
    let mut error = super::error(code, message, ErrorCategory::Temporary, true);
    error.retry_after_ms = Some(crate::store::millis(shared.config.retry_after));
    error
}

/// The HTTP status an error envelope travels with.
pub fn status_for(error: &ProtocolError) -> StatusCode {
    match error.code.as_str() {
        codes::AUTH_UNAUTHENTICATED => StatusCode::UNAUTHORIZED,
        // A decision over `HostLimits::max_decision_bytes` is refused for its size, not for
        // who sent it: 413 tells the client what to change where the category's 403 would not.
        codes::TRANSPORT_PAYLOAD_TOO_LARGE | codes::POLICY_APPROVAL_DECISION_TOO_LARGE => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        codes::TRANSPORT_UNSUPPORTED_MEDIA_TYPE => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        // A decision malformed in itself (a blank reason or field) is the client's request to
        // fix, not a refusal of who sent it (found by an operations trial).
        codes::POLICY_APPROVAL_DECISION_INVALID => StatusCode::BAD_REQUEST,
        codes::TRANSPORT_OVERLOADED | codes::TRANSPORT_SHUTTING_DOWN => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        codes::TRANSPORT_TIMEOUT => StatusCode::GATEWAY_TIMEOUT,
        codes::RESOURCE_NOT_FOUND
        | codes::POLICY_APPROVAL_NOT_FOUND
        | codes::TRANSACTION_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => match error.category {
            ErrorCategory::Auth | ErrorCategory::Policy => StatusCode::FORBIDDEN,
            ErrorCategory::Temporary => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCategory::Economic => StatusCode::PAYMENT_REQUIRED,
            ErrorCategory::Connector | ErrorCategory::Transport => StatusCode::BAD_GATEWAY,
            _ => StatusCode::BAD_REQUEST,
        },
    }
}

fn error_response(error: &ProtocolError, request: Option<&Envelope>) -> Response {
    let body = MessageBody::Error(aip_connector_core::model::ErrorBody {
        error: error.clone(),
    });
    let envelope = match request {
        Some(request) => Envelope::reply_to(request, body),
        None => Envelope::new(body),
    };
    let mut response = json_response(status_for(error), &envelope);
    if let Some(seconds) = super::auth::retry_after(error) {
        response.headers_mut().insert(header::RETRY_AFTER, seconds);
    }
    response
}

/// `404 resource.not_found` for a path no route serves (`serve` and `serve_with_routes`).
async fn unknown_route() -> Response {
    error_response(
        &refusal(codes::RESOURCE_NOT_FOUND, "no route serves this path"),
        None,
    )
}

/// `405 transport.unsupported_message` for a route asked with a method it does not serve
/// (`serve` and `serve_with_routes`).
async fn method_not_allowed() -> Response {
    let mut response = error_response(
        &refusal(
            codes::TRANSPORT_UNSUPPORTED_MESSAGE,
            "this route does not serve this method",
        ),
        None,
    );
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}

/// A request the authenticator refused: `401` with its challenge, or `503` for a temporary
/// refusal (see [`Authenticator`]), whatever code the authenticator chose.
fn refused(shared: &Shared, error: &ProtocolError) -> Response {
    let (status, headers) = super::auth::refusal_head(shared.authenticator.as_ref(), error);
    let mut response = error_response(error, None);
    *response.status_mut() = status;
    response.headers_mut().extend(headers);
    response
}

pub(super) fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<A, B, C, D, E, F: Future>(_: impl FnOnce(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request moves its future a few times on the way into its connection task; the
    /// rare, large branches (approvals, transactions) are boxed so a plain action does not pay
    /// for them. It was 26 KiB before they were.
    #[test]
    fn the_request_future_stays_small() {
        let size = future_size(dispatch);
        assert!(size <= 8 * 1024, "dispatch future is {size} bytes");
    }

    #[test]
    fn only_json_content_types_are_declared_json() {
        let declared = |value: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            }
            declares_json(&headers)
        };
        for json in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/aip+json",
            "application/vnd.aip.envelope+JSON ; v=1",
            "application/json; charset=\"UTF-8\"",
            "application/json;charset=utf8",
            "application/json; charset=US-ASCII",
        ] {
            assert!(declared(Some(json)), "{json}");
        }
        for other in [
            "application/json; charset=utf-16",
            "application/json; charset=iso-8859-1",
            "text/plain",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/+json",
            "text/json",
            "json",
            "",
        ] {
            assert!(!declared(Some(other)), "{other}");
        }
        assert!(!declared(None));
        let mut two = HeaderMap::new();
        two.append(header::CONTENT_TYPE, "application/json".parse().unwrap());
        two.append(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(!declares_json(&two));
    }

    #[test]
    fn only_bodies_without_a_content_coding_are_read() {
        let unencoded = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::CONTENT_ENCODING, value.parse().unwrap());
            }
            is_unencoded(&headers)
        };
        assert!(unencoded(&[]));
        assert!(unencoded(&["identity"]));
        let transfer = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::TRANSFER_ENCODING, value.parse().unwrap());
            }
            is_unencoded(&headers)
        };
        assert!(transfer(&["chunked"]));
        assert!(!transfer(&["gzip, chunked"]));
        assert!(!transfer(&["gzip", "chunked"]));
        assert!(unencoded(&["Identity, identity"]));
        for encoded in [
            &["gzip"][..],
            &["identity", "br"],
            &["deflate, identity"],
            &["x"],
        ] {
            assert!(!unencoded(encoded), "{encoded:?}");
        }
    }
}
