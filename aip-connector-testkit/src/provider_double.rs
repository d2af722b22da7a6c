//! A provider double: a real HTTP server on loopback that behaves like a well-kept provider API
//! until a test scripts it to misbehave.
//!
//! [`ProviderDouble::start`] binds `127.0.0.1` on an ephemeral port and returns the server (its
//! base URL; it shuts down on drop) and a [`ProviderHandle`] that scripts and observes it, in the
//! style of `tower-test`'s mock and handle. The server runs on its own thread and runtime, so it
//! keeps serving while the test blocks, and it keeps its state while a client process that
//! talks to it is killed: a crash test passes [`ProviderDouble::base_url`] to a child process and
//! reads the effects from the handle afterwards.
//!
//! # Routes
//!
//! - **Effects** — any `POST`, `PUT`, `PATCH` or `DELETE` outside `/operations` commits one
//!   effect on its path (the *route*) and answers `201` with
//!   `{operation_id, route, idempotency_key, effect_sequence, request}` (`request` is the JSON
//!   body, or `null`). The operation id is the request's [`OPERATION_ID_HEADER`] when present
//!   (a client-chosen id, so a handler can checkpoint it before calling), else `op_<n>`.
//!   With deduplication on (the default), a request carrying an `Idempotency-Key` that was
//!   seen before gets the first answer again, with [`REPLAYED_HEADER`]` : true`, and commits
//!   nothing; the same key with another method, route or body gets `422
//!   {"error": "idempotency_key_reused"}`. With deduplication off every request commits.
//! - **Reads** — `GET`/`HEAD` on any other path answers `200 {route, operation_ids}`: the
//!   operations committed on that route.
//! - **Operation lookups** — `GET /operations/{id}` and `GET /operations?idempotency_key=K`
//!   answer `200 {operation_id, state, ...}` with `state` `committed` (plus `result`, the
//!   effect's answer, and `effect_count`), `pending` (with a `cursor`, `cursor_<n>`, to resume
//!   the lookup from; scripted with
//!   [`ProviderHandle::lookups_pending`], which an answer shape of the connector's own lookup
//!   route reads with [`AnswerRequest::lookup_pending`]) or `unknown`.
//!
//! Every response carries `x-request-id: req_<n>`, `n` being the request's sequence number.
//!
//! # Answers in the provider's own shape
//!
//! A connector that decodes the real API's responses strictly (`{"id": …}` for a created
//! ticket) cannot read the generic answers above. [`ProviderHandle::answer`] shapes the answers
//! of a route (same route patterns as faults) with a function of the request, the committed
//! effect and the effects so far; an effect stores its shaped answer, so a replay of its key and
//! an operation lookup's `result` return that shape too.
//!
//! # Faults
//!
//! [`ProviderHandle::inject`] queues a [`Fault`] on a route: an exact path, a prefix pattern
//! ending in `/*` (the prefix itself and every path below it), or `*` for every route; a `*`
//! segment inside a path stands for any one segment (`POST /holds/*/confirm`). A fault applies
//! to the next call (or the next `n`, or always), after the request is recorded; see [`Fault`]
//! for whether the effect commits.
//!
//! # Authentication
//!
//! By default the double answers every request, with credentials or without. A real provider
//! answers `401` to a request without valid credentials, so a connector that forgets to send
//! its credential (or sends another) passes every test against a double that does not check.
//! [`ProviderHandle::require_bearer`] (`Authorization: Bearer <token>`) and
//! [`ProviderHandle::require_header`] (an API-key header such as `x-api-key: <key>`) make the
//! double check; [`ProviderHandle::clear_auth`] lifts every requirement.
//!
//! - A requirement applies to **every request**, on every route and method, reads and the
//!   double's own `/operations` lookups included: there is no exempt route.
//!   [`ProviderHandle::require_bearer_on`] and [`ProviderHandle::require_header_on`] scope one
//!   to a route instead (`GET /items`, `/reports/*`), for a connector whose capabilities do not
//!   all authenticate. On each header, the most specific requirement whose route applies to a
//!   request governs it: a route's over the one on every request, an exact path over a pattern.
//! - Requirements on different headers all apply; one on a header and route already required
//!   replaces it (`require_bearer` requires the `authorization` header). The header must be sent once: a
//!   repeated one is refused.
//! - A refused request is recorded ([`ProviderHandle::requests`], and
//!   [`ProviderHandle::unauthorized_requests`] lists the refused ones) but goes no further: it
//!   commits no effect, uses up no [`Fault`] (queued faults wait for the next authorized call)
//!   and gets no shaped answer. It is answered `401` with the JSON body
//!   `{"error": "unauthorized"}`, plus `WWW-Authenticate: Bearer` when the bearer requirement is
//!   one it failed.
//! - The bearer scheme's name is matched without regard to case (`bearer tok` passes), the token
//!   and a header's value exactly. The comparison looks at every byte of the expected value
//!   whatever the first difference.
//! - The required values are kept out of the handle's `Debug` (which names the required
//!   headers and shows their values as `[REDACTED]`), of the `401` and of the panic of an
//!   invalid requirement.
//! - Requirements are separate from faults: [`ProviderHandle::clear_faults`] keeps them, so a
//!   requirement set in `ConformanceSuite::with_provider_setup` holds for every call the
//!   scenarios make. Require [`CANARY_SECRET`](crate::conformance::CANARY_SECRET) there, the
//!   secret of the credential the conformance hosts hand out; a [`TestHost`](crate::TestHost)'s
//!   is [`TEST_CREDENTIAL_SECRET`](crate::TEST_CREDENTIAL_SECRET).
//!
//! The double records headers as they arrive, credentials included: a test reads what the
//! connector sent with [`RecordedRequest::header`] (`header("authorization")` is the raw
//! `Bearer …` value), while [`RecordedRequest`]'s `Debug` shows credential headers as
//! `[REDACTED]`. The secrets a test requires are the test's own; do not require a real one.
//!
//! ```no_run
//! # use aip_connector_testkit::ProviderDouble;
//! # async fn demo() {
//! let (_double, provider) = ProviderDouble::start().await;
//! provider.require_bearer("tok_test");
//! // ... run the connector: a call without `Authorization: Bearer tok_test` gets a 401 ...
//! assert!(provider.unauthorized_requests().is_empty(), "every call authenticated");
//! # }
//! ```

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER,
    WWW_AUTHENTICATE,
};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot, watch};

/// Request header carrying a client-chosen operation id for the effect.
pub const OPERATION_ID_HEADER: &str = "x-operation-id";
/// Response header set to `true` on an idempotent replay.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Request header the double reads the idempotency key from, unless
/// [`ProviderHandle::set_idempotency_header`] names another.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// Response header carrying the double's request id (`req_<sequence>`).
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The body [`Fault::invalid_body`] answers with: not JSON.
pub const INVALID_BODY: &[u8] = b"<html><body>provider maintenance page</body></html>";

type ResponseBody = BoxBody<Bytes, std::io::Error>;

/// A running provider double. Dropping it stops the server (the [`ProviderHandle`] keeps the
/// recorded state readable, and [`ProviderHandle::is_serving`] turns false). Keep it bound for
/// as long as the test sends requests: `let (_double, provider) = ProviderDouble::start().await`,
/// not `let (_, provider) = …`, which drops it at once.
pub struct ProviderDouble {
    addr: SocketAddr,
    base_url: String,
    handle: ProviderHandle,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for ProviderDouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderDouble")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl ProviderDouble {
    /// Starts a double on `127.0.0.1` with an ephemeral port, ready to accept connections when
    /// this returns. Works from any runtime (the server has its own thread).
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the server thread cannot start.
    pub async fn start() -> (ProviderDouble, ProviderHandle) {
        Self::start_blocking()
    }

    /// [`start`](Self::start) for synchronous code.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the server thread cannot start.
    pub fn start_blocking() -> (ProviderDouble, ProviderHandle) {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .expect("the provider double binds an ephemeral loopback port");
        listener
            .set_nonblocking(true)
            .expect("the provider double's listener becomes non-blocking");
        let addr = listener
            .local_addr()
            .expect("the provider double's listener has an address");
        let handle = ProviderHandle {
            shared: Arc::new(Shared::new(format!("http://{addr}"))),
        };
        let (shutdown, stop) = oneshot::channel();
        let shared = Arc::clone(&handle.shared);
        let thread = std::thread::Builder::new()
            .name(format!("provider-double-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the provider double's runtime starts");
                runtime.block_on(serve(listener, shared, stop));
            })
            .expect("the provider double's thread starts");
        let double = ProviderDouble {
            addr,
            base_url: format!("http://{addr}"),
            handle: handle.clone(),
            shutdown: Some(shutdown),
            thread: Some(thread),
        };
        (double, handle)
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash: pass it to a `ProviderClient` or to
    /// another process.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The base URL joined with `path` (which should start with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Another handle to script and observe this double.
    pub fn handle(&self) -> ProviderHandle {
        self.handle.clone()
    }
}

impl Drop for ProviderDouble {
    fn drop(&mut self) {
        self.handle
            .shared
            .serving
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // The server thread only drops its runtime after the signal; this returns promptly.
            let _ = thread.join();
        }
    }
}

/// Scripts and observes a [`ProviderDouble`]. Cheap to clone; every clone sees the same state.
#[derive(Clone)]
pub struct ProviderHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("ProviderHandle")
            .field("requests", &state.requests.len())
            .field("effects", &state.effects.len())
            .field("deduplicate", &state.deduplicate)
            .field("auth", &state.auth)
            .finish_non_exhaustive()
    }
}

impl ProviderHandle {
    /// The double's base URL, as [`ProviderDouble::base_url`] gives it: a test that keeps only
    /// the handle can still build a client.
    ///
    /// # Panics
    ///
    /// When the [`ProviderDouble`] was dropped: its server is gone, and a client built on this
    /// URL would only meet refused connections, far from the mistake (usually
    /// `let (_, provider) = ProviderDouble::start().await`, which drops the double at once).
    pub fn base_url(&self) -> &str {
        assert!(
            self.is_serving(),
            "ProviderHandle::base_url: the ProviderDouble was dropped, which stopped its server; \
             keep it bound while the test runs (`let (_double, provider) = \
             ProviderDouble::start().await`, not `let (_, provider) = …`)"
        );
        &self.shared.base_url
    }

    /// Whether the double's server still runs: false once its [`ProviderDouble`] was dropped
    /// (what it recorded stays readable through this handle).
    pub fn is_serving(&self) -> bool {
        self.shared
            .serving
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every request received so far, in arrival order (faulted ones included).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Every committed effect, in commit order.
    pub fn effects(&self) -> Vec<Effect> {
        self.shared.lock().effects.clone()
    }

    /// How many effects were committed in total.
    pub fn effect_total(&self) -> usize {
        self.shared.lock().effects.len()
    }

    /// How many effects were committed under idempotency key `key`.
    pub fn effect_count(&self, key: &str) -> usize {
        self.shared
            .lock()
            .effects
            .iter()
            .filter(|e| e.idempotency_key.as_deref() == Some(key))
            .count()
    }

    /// The effects committed on `route`.
    pub fn effects_on(&self, route: &str) -> Vec<Effect> {
        self.shared
            .lock()
            .effects
            .iter()
            .filter(|e| e.route == route)
            .cloned()
            .collect()
    }

    /// The first effect committed with operation id `operation_id`.
    pub fn operation(&self, operation_id: &str) -> Option<Effect> {
        self.shared
            .lock()
            .effects
            .iter()
            .find(|e| e.operation_id == operation_id)
            .cloned()
    }

    /// Turns idempotency-key deduplication on (the default) or off. Off, every request commits
    /// an effect: what a provider that ignores the key does.
    pub fn set_deduplication(&self, deduplicate: bool) {
        self.shared.lock().deduplicate = deduplicate;
    }

    /// Whether the double deduplicates by idempotency key.
    pub fn deduplicates(&self) -> bool {
        self.shared.lock().deduplicate
    }

    /// Reads idempotency keys from header `name` (case-insensitive) instead of
    /// [`IDEMPOTENCY_HEADER`], for a connector whose provider names it otherwise
    /// (`ProviderClient::builder(..).idempotency_header("Postbox-Idempotency-Key")`): the
    /// double deduplicates on it, [`RecordedRequest::idempotency_key`] reads it, and the
    /// conformance suite's key checks follow it when a provider setup sets it
    /// (`ConformanceSuite::with_provider_setup`). Applies to requests received from then on.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name: a typo in a test.
    pub fn set_idempotency_header(&self, name: &str) {
        let name = HeaderName::from_bytes(name.as_bytes())
            .unwrap_or_else(|_| panic!("`{name}` is not a valid header name"));
        self.shared.lock().idempotency_header = name;
    }

    /// The header the double reads idempotency keys from (lower case).
    pub fn idempotency_header(&self) -> String {
        self.shared.lock().idempotency_header.as_str().to_owned()
    }

    /// Queues `fault` on `route`: an exact path (`/bookings`), a prefix pattern
    /// (`/operations/*`: `/operations` and every path below it) or `*`, optionally after a
    /// method (`POST /bookings`: only that method's requests); a `*` segment inside a path
    /// stands for any one segment (`POST /holds/*/confirm`). Faults on one route apply in the
    /// order they were queued; a more specific path wins over a pattern, and of two routes that
    /// name the path alike, the one that names the method wins.
    pub fn inject(&self, route: &str, fault: Fault) {
        self.shared
            .lock()
            .faults
            .entry(route.to_owned())
            .or_default()
            .push_back(fault);
    }

    /// Removes every queued fault. Credential requirements stay
    /// ([`clear_auth`](Self::clear_auth) lifts them).
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Requires `Authorization: Bearer <token>` on every request from now on: one without it,
    /// or with another token, is recorded and answered `401 {"error": "unauthorized"}` with
    /// `WWW-Authenticate: Bearer`, and commits nothing (see the module's
    /// [Authentication](crate::provider_double#authentication)). Replaces an earlier
    /// requirement on `authorization`; other required headers still apply. The token never
    /// shows in `Debug` or in an answer.
    ///
    /// ```no_run
    /// # use aip_connector_testkit::{ProviderDouble, TEST_CREDENTIAL_SECRET};
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// // The secret of the credential a `TestHost` hands to the handler.
    /// provider.require_bearer(TEST_CREDENTIAL_SECRET);
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When `token` is empty, starts or ends with whitespace (which no request could carry), or
    /// `Bearer <token>` is not a valid header value (the message does not quote it).
    pub fn require_bearer(&self, token: impl AsRef<str>) {
        self.require(bearer_requirement(token.as_ref(), None));
    }

    /// Requires `Authorization: Bearer <token>` on the requests of `route` only (an exact
    /// path, a `/prefix/*` pattern or `*`, optionally after a method: `GET /items`, matched
    /// like [`inject`](Self::inject)'s routes), as [`require_bearer`](Self::require_bearer)
    /// does on every request. For a connector whose capabilities do not all authenticate (a
    /// search that sends the caller's credential beside writes that use none): requiring the
    /// credential everywhere would refuse those, and requiring it nowhere would not notice the
    /// search forgetting it. Replaces an earlier requirement on `authorization` for the same
    /// route (methods compare without regard to case). On each header the most specific
    /// requirement that applies to a request governs it, so a route's requirement overrides
    /// the one [`require_bearer`](Self::require_bearer) set, for that route's requests.
    ///
    /// ```no_run
    /// # use aip_connector_testkit::ProviderDouble;
    /// # use aip_connector_testkit::conformance::CANARY_SECRET;
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// provider.require_bearer_on("GET /items", CANARY_SECRET);
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// As [`require_bearer`](Self::require_bearer)'s, and when `route` names no path (neither
    /// `*` nor `/…`): a mistyped route would match no request and check nothing.
    pub fn require_bearer_on(&self, route: &str, token: impl AsRef<str>) {
        self.require(bearer_requirement(token.as_ref(), Some(route)));
    }

    /// Requires header `name` with exactly `value` on every request from now on (API-key style
    /// authentication: `require_header("x-api-key", "key_test")`): one without it, or with
    /// another value, is recorded and answered `401 {"error": "unauthorized"}`, and commits
    /// nothing (see the module's [Authentication](crate::provider_double#authentication)). The
    /// name is matched without regard to case. Replaces an earlier requirement on the same
    /// header (on
    /// `authorization`, the one [`require_bearer`](Self::require_bearer) set); others still
    /// apply. The value never shows in `Debug` or in an answer.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name, or `value` is empty, starts or ends with
    /// whitespace (which no request could carry) or is not a valid header value (the message
    /// names the header, never the value).
    pub fn require_header(&self, name: &str, value: impl AsRef<str>) {
        self.require(header_requirement(name, value.as_ref(), None));
    }

    /// Requires header `name` with exactly `value` on the requests of `route` only, as
    /// [`require_header`](Self::require_header) does on every request (routes as
    /// [`require_bearer_on`](Self::require_bearer_on)'s).
    ///
    /// # Panics
    ///
    /// As [`require_header`](Self::require_header)'s, and when `route` names no path.
    pub fn require_header_on(&self, route: &str, name: &str, value: impl AsRef<str>) {
        self.require(header_requirement(name, value.as_ref(), Some(route)));
    }

    fn require(&self, mut requirement: Requirement) {
        requirement.route = requirement.route.as_deref().map(normalized_route);
        let mut state = self.shared.lock();
        state
            .auth
            .retain(|r| r.name != requirement.name || r.route != requirement.route);
        state.auth.push(requirement);
    }

    /// Lifts every credential requirement: requests are answered without credentials again.
    /// The requests already refused stay recorded.
    pub fn clear_auth(&self) {
        self.shared.lock().auth.clear();
    }

    /// The requests refused for their credentials (answered `401`), in arrival order: empty
    /// when every request carried what [`require_bearer`](Self::require_bearer) and
    /// [`require_header`](Self::require_header) ask for. They are in
    /// [`requests`](Self::requests) too.
    pub fn unauthorized_requests(&self) -> Vec<RecordedRequest> {
        let state = self.shared.lock();
        state
            .requests
            .iter()
            .filter(|r| state.unauthorized.contains(&r.sequence))
            .cloned()
            .collect()
    }

    /// Answers the well-behaved requests on `route` (an exact path, a `/prefix/*` pattern or
    /// `*`, matched like [`inject`](Self::inject)'s) with `shape`'s JSON instead of the generic
    /// answer, so a connector that decodes the real API's responses can run against the double.
    ///
    /// Writes still commit one effect each (status `201`) and store the shaped answer: a replay
    /// of the key and the operation lookup's `result` return it. Reads answer `200` with it.
    /// A shape chooses another status with [`AnswerRequest::with_status`] (a `404` for a missing
    /// resource; a write answered outside `2xx` commits nothing). A route that names a method
    /// (`GET /tickets`, `POST /tickets`) shapes only that method's requests, so a path that is
    /// read and written takes one shape each. Operation lookups
    /// (`/operations`) and faulted answers are not shaped. A later call for the same route
    /// replaces the shape.
    ///
    /// ```no_run
    /// # use aip_connector_testkit::ProviderDouble;
    /// # use serde_json::json;
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// // POST /tickets answers {"id": …, "title": …} like the real API.
    /// provider.answer("/tickets", |request| match request.operation_id() {
    ///     Some(id) => json!({ "id": id, "title": request.body()["title"] }),
    ///     // GET /tickets lists what was created.
    ///     None => json!({ "tickets": request.effects().iter()
    ///         .filter(|e| e.route == "/tickets")
    ///         .map(|e| e.answer.clone())
    ///         .collect::<Vec<_>>() }),
    /// });
    /// # }
    /// ```
    pub fn answer(
        &self,
        route: &str,
        shape: impl Fn(&AnswerRequest<'_>) -> Value + Send + Sync + 'static,
    ) {
        self.shared
            .lock()
            .answers
            .insert(route.to_owned(), Arc::new(shape));
    }

    /// Removes every answer shape: the routes answer generically again.
    pub fn clear_answers(&self) {
        self.shared.lock().answers.clear();
    }

    /// Whether a `method` request on `path` answers as the provider's API does: an answer
    /// shape covers it, or it is one of the double's own operation lookups (`/operations`).
    /// Anything else gets the generic answer, which says nothing of the resource's state (a
    /// `GET` answers `200` after a `DELETE` of the same path).
    pub(crate) fn answers_truthfully(&self, method: &str, path: &str) -> bool {
        let operations = path == "/operations" || path.starts_with("/operations/");
        operations
            || best_route(
                self.shared.lock().answers.keys().map(String::as_str),
                method,
                path,
            )
            .is_some()
    }

    /// The next `lookups` operation lookups answer `pending`, whatever the operation's state
    /// (a provider that has not finished, or whose read side lags). The double's own
    /// `/operations` lookups use them, and so does an answer shape that asks
    /// [`AnswerRequest::lookup_pending`] (a connector's own lookup route); `0` takes back what
    /// is left.
    pub fn lookups_pending(&self, lookups: usize) {
        self.shared.lock().pending_lookups = lookups;
    }

    /// How many of the `pending` answers [`lookups_pending`](Self::lookups_pending) scripted
    /// are still to be given: `0` once every one was served.
    pub fn pending_lookups_left(&self) -> usize {
        self.shared.lock().pending_lookups
    }

    /// Waits until at least `count` requests arrived in total since the double started (the
    /// [`request_count`](Self::request_count), not `count` more than now); false if `within`
    /// passed first.
    pub async fn wait_for_requests(&self, count: usize, within: Duration) -> bool {
        self.wait_until(within, |state| state.requests.len() >= count)
            .await
    }

    /// Waits until at least `count` effects were committed in total since the double started
    /// (the [`effect_total`](Self::effect_total), not `count` more than now); false if `within`
    /// passed first.
    pub async fn wait_for_effects(&self, count: usize, within: Duration) -> bool {
        self.wait_until(within, |state| state.effects.len() >= count)
            .await
    }

    async fn wait_until(&self, within: Duration, done: impl Fn(&State) -> bool) -> bool {
        let mut changes = self.shared.changed.subscribe();
        let wait = async {
            loop {
                if done(&self.shared.lock()) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(within, wait).await.is_ok() && done(&self.shared.lock())
    }
}

/// One request as the double received it. Its `Debug` shows the values of credential headers
/// (`authorization`, `proxy-authorization`, `cookie`, and names containing `key`, `token`,
/// `secret`, `auth`, `pass`, `credential`, `session` or `signature`) as `[REDACTED]`, so a
/// failing assertion does not print them into a CI log;
/// [`header`](Self::header) reads them.
#[derive(Clone)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// 1-based arrival order (also in the response's `x-request-id: req_<n>`).
    pub sequence: u64,
    /// The HTTP method.
    pub method: String,
    /// The URL path, as sent (percent-encoded).
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// Every header, lower-case names, values decoded lossily as UTF-8, in arrival order of
    /// each name, the values of a repeated header grouped together (`HeaderMap` order).
    pub headers: Vec<(String, String)>,
    /// The body bytes ([`json`](Self::json) and [`text`](Self::text) read them).
    pub body: Vec<u8>,
    /// The idempotency key the double read, from [`IDEMPOTENCY_HEADER`] or the header
    /// [`ProviderHandle::set_idempotency_header`] named when the request arrived.
    pub idempotency_key: Option<String>,
    /// Wall-clock arrival time.
    pub received_at: SystemTime,
    /// Arrival time since the double started.
    pub since_start: Duration,
}

/// Whether a header's value is a credential, kept out of `Debug`.
pub(crate) fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || [
        "key",
        "token",
        "secret",
        "auth",
        "pass",
        "credential",
        "session",
        "signature",
    ]
    .iter()
    .any(|part| name.contains(part))
}

impl std::fmt::Debug for RecordedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if is_credential_header(name) {
                    "[REDACTED]"
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("RecordedRequest")
            .field("sequence", &self.sequence)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("headers", &headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("since_start", &self.since_start)
            .finish_non_exhaustive()
    }
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The idempotency key the request carried in the double's idempotency header
    /// (`Idempotency-Key` unless [`ProviderHandle::set_idempotency_header`] named another).
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body as text (invalid UTF-8 replaced), for `contains` checks.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }
}

/// One committed effect.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Effect {
    /// 1-based commit order.
    pub sequence: u64,
    /// The operation id the effect answers to.
    pub operation_id: String,
    /// The method of the committing request.
    pub method: String,
    /// The route (path) it was committed on.
    pub route: String,
    /// The idempotency key of the committing request.
    pub idempotency_key: Option<String>,
    /// The request's JSON body (`null` when absent or not JSON).
    pub request: Value,
    /// The answer the double gives for it (and replays for its key).
    pub answer: Value,
    /// Wall-clock commit time.
    pub committed_at: SystemTime,
}

/// What an answer shape (see [`ProviderHandle::answer`]) is computed from.
#[derive(Debug)]
pub struct AnswerRequest<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    headers: &'a HeaderMap,
    body: &'a Value,
    idempotency_key: Option<&'a str>,
    operation_id: Option<&'a str>,
    effects: &'a [Effect],
    generic: &'a Value,
    /// The pending lookups [`ProviderHandle::lookups_pending`] scripted and not yet used.
    pending_lookups: &'a Cell<usize>,
    /// The status [`with_status`](Self::with_status) chose for this answer, if it did.
    status: &'a Cell<Option<u16>>,
    /// The raw body [`with_bytes`](Self::with_bytes) chose for this answer, if it did.
    raw: &'a std::cell::RefCell<Option<RawAnswer>>,
}

/// A read's answer that is not JSON: its content type and bytes.
#[derive(Debug)]
struct RawAnswer {
    content_type: HeaderValue,
    bytes: Bytes,
}

impl<'a> AnswerRequest<'a> {
    /// The request's method (`POST`, `GET`, …).
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request's path (the route).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The request's query string, without the `?`.
    pub fn query(&self) -> Option<&'a str> {
        self.query
    }

    /// The first value of the query parameter `name`, decoded as a form does (`%20` and `+`
    /// are spaces): `page` of `/articles?q=rust%20news&page=2` is `Some("2")`. `None` when the
    /// query has no such parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        query_param(self.query?, name)
    }

    /// The first value of the request header `name` (any case), when it is text: a download
    /// shape reads `Range`, a conditional one `If-None-Match`.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// The request's JSON body (`null` when absent or not JSON).
    pub fn body(&self) -> &'a Value {
        self.body
    }

    /// The request's idempotency key.
    pub fn idempotency_key(&self) -> Option<&'a str> {
        self.idempotency_key
    }

    /// For a write, the operation id of the effect it commits; `None` for a read.
    pub fn operation_id(&self) -> Option<&'a str> {
        self.operation_id
    }

    /// Whether the request is a write (it commits an effect).
    pub fn is_write(&self) -> bool {
        self.operation_id.is_some()
    }

    /// The effects committed before this request, in commit order (a read lists or finds what
    /// earlier writes created; `effect.answer` is their shaped answer).
    pub fn effects(&self) -> &'a [Effect] {
        self.effects
    }

    /// The answer the double would give unshaped.
    pub fn generic_answer(&self) -> &'a Value {
        self.generic
    }

    /// Whether this read should answer "not finished yet", as the real API does for an
    /// operation still in flight: true while [`ProviderHandle::lookups_pending`] has pending
    /// lookups left, each `true` using one up (the double's `/operations` lookups use them
    /// too). Always `false` for a write. A shape for the route a connector reconciles through
    /// asks it, so that conformance's restart check sees a pending answer there:
    ///
    /// ```no_run
    /// # use aip_connector_testkit::ProviderDouble;
    /// # use serde_json::json;
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// // GET /invoices?reference=… finds the invoice a write created, or says it is in flight.
    /// provider.answer("/invoices", |request| {
    ///     if request.lookup_pending() {
    ///         return json!({ "status": "processing" });
    ///     }
    ///     json!({ "invoices": request.effects().iter().map(|e| &e.answer).collect::<Vec<_>>() })
    /// });
    /// # }
    /// ```
    pub fn lookup_pending(&self) -> bool {
        let left = self.pending_lookups.get();
        if self.is_write() || left == 0 {
            return false;
        }
        self.pending_lookups.set(left - 1);
        true
    }

    /// Answers `body` with HTTP `status` instead of the double's `200` (read) or `201` (write):
    /// returns `body`, so a shape ends with it. A real API answers a missing resource `404`, a
    /// refused write `409` or `422`; a connector's reconcile companion maps that "not found" to
    /// `NotCommitted`, and conformance's lost-write check needs the double to say it.
    ///
    /// A write answered with a status outside `2xx` commits nothing: no effect, and its
    /// idempotency key stays unused, so a retry asks the shape again. One answered `2xx` commits
    /// as usual, and a replay of its key answers the same status.
    ///
    /// ```no_run
    /// # use aip_connector_testkit::ProviderDouble;
    /// # use serde_json::json;
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// // GET /tickets/{id}: the ticket a write created, else 404 like the real API.
    /// provider.answer("/tickets/*", |request| {
    ///     let id = request.path().trim_start_matches("/tickets/");
    ///     match request.effects().iter().find(|e| e.operation_id == id) {
    ///         Some(created) => created.answer.clone(),
    ///         None => request.with_status(404, json!({ "error": "ticket_not_found" })),
    ///     }
    /// });
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When `status` is not a final HTTP status (`200..=599`): the double could not send it.
    pub fn with_status(&self, status: u16, body: Value) -> Value {
        assert!(
            (200..=599).contains(&status),
            "AnswerRequest::with_status({status}): an answer's status is a final HTTP status, 200 to 599"
        );
        self.status.set(Some(status));
        body
    }

    /// Answers a read with raw `bytes` of `content_type` and HTTP `status` instead of JSON (a
    /// file's content, a `206` range of it): returns `Value::Null`, so a shape ends with it.
    ///
    /// ```no_run
    /// # use aip_connector_testkit::ProviderDouble;
    /// # async fn demo() {
    /// let (_double, provider) = ProviderDouble::start().await;
    /// // GET /files/{id}/content: the whole file, or the range `Range: bytes=0-3` asks for.
    /// provider.answer("GET /files/*", |request| {
    ///     let content = b"hello, world".to_vec();
    ///     match request.header("range") {
    ///         Some("bytes=0-3") => request.with_bytes(206, "application/octet-stream", &content[..4]),
    ///         _ => request.with_bytes(200, "application/octet-stream", content),
    ///     }
    /// });
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When `status` is not a final HTTP status (`200..=599`), when `content_type` is not a
    /// valid header value, or when the request is a write: the double stores a write's answer
    /// as its effect, in JSON, to replay and list it. The panic happens in the double's server
    /// task and is printed there; the connector under test sees its connection closed without
    /// an answer, and nothing is committed.
    pub fn with_bytes(&self, status: u16, content_type: &str, bytes: impl Into<Vec<u8>>) -> Value {
        assert!(
            !self.is_write(),
            "AnswerRequest::with_bytes: only a read may be answered with raw bytes; a write's answer is stored as JSON (`with_status` for its status)"
        );
        let content_type = HeaderValue::from_str(content_type).unwrap_or_else(|_| {
            panic!("AnswerRequest::with_bytes: `{content_type}` is not a valid content type")
        });
        self.with_status(status, Value::Null);
        *self.raw.borrow_mut() = Some(RawAnswer {
            content_type,
            bytes: Bytes::from(bytes.into()),
        });
        Value::Null
    }
}

/// A shaped answer: the body, the status [`AnswerRequest::with_status`] chose, if any, and the
/// raw body of [`AnswerRequest::with_bytes`], which replaces the JSON one.
struct Shaped {
    body: Value,
    status: Option<StatusCode>,
    raw: Option<RawAnswer>,
}

/// An answer shape, shared by the handle and the server.
type AnswerShape = Arc<dyn Fn(&AnswerRequest<'_>) -> Value + Send + Sync>;

/// The most specific of `routes` that applies to a request of `method` on `path`: the exact
/// path, else the most specific pattern it falls under (see [`PathRank`]), else `*`; of two that name the
/// path alike, the one that names the method (`GET /tickets`) (the rule of faults and answer
/// shapes).
fn best_route<'r>(
    routes: impl Iterator<Item = &'r str>,
    method: &str,
    path: &str,
) -> Option<&'r str> {
    routes
        .filter_map(|route| route_specificity(route, method, path).map(|rank| (rank, route)))
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, route)| route)
}

/// How specifically a route names a path: the exact path most, `*` least, a pattern by how
/// many literal segments it names, then by how many of them lead before its first `*`. Not by
/// the length of its text, which made `/accounts/*/refunds` beat `/accounts/acct_1/*` or lose
/// to it depending on how long the account id was (found by a review).
type PathRank = (usize, usize);

/// How specifically `route` names a request of `method` on `path`, if it applies at all: by
/// path ([`PathRank`]), then whether it names the method. A route is a path pattern, optionally
/// after a method and a space (`POST /tickets`, `GET /tickets/*`); methods compare without
/// regard to case. In a pattern a `*` segment stands for any one segment (`/holds/*/confirm`),
/// and a trailing `/*` for the path before it and everything below it (`/holds/*`: `/holds`,
/// `/holds/h_1`, `/holds/h_1/confirm`).
fn route_specificity(route: &str, method: &str, path: &str) -> Option<(PathRank, bool)> {
    let (named_method, pattern) = match route.split_once(' ') {
        Some((named, pattern)) => (Some(named), pattern.trim_start()),
        None => (None, route),
    };
    if named_method.is_some_and(|named| !named.eq_ignore_ascii_case(method)) {
        return None;
    }
    let by_path = if pattern == path {
        (usize::MAX, usize::MAX)
    } else if pattern == "*" {
        (0, 0)
    } else {
        // A trailing `/*` matches the path before it and everything below; otherwise the
        // pattern's segments (wildcards included) match the path's one for one.
        let (segments_of, subtree) = match pattern.strip_suffix("/*") {
            Some(prefix) => (prefix, true),
            None => (pattern, false),
        };
        let mut segments = path.split('/');
        let matched = segments_of.split('/').all(|wanted| {
            segments
                .next()
                .is_some_and(|seg| segment_matches(wanted, seg))
        }) && (subtree || segments.next().is_none());
        if !matched {
            return None;
        }
        let literal = |wanted: &&str| !wanted.is_empty() && *wanted != "*";
        (
            segments_of.split('/').filter(literal).count(),
            segments_of
                .split('/')
                .filter(|wanted| !wanted.is_empty())
                .take_while(|wanted| *wanted != "*")
                .count(),
        )
    };
    Some((by_path, named_method.is_some()))
}

/// Whether one segment of a route pattern matches one segment of a path: `*` matches any
/// segment but an empty one, anything else only itself.
fn segment_matches(wanted: &str, segment: &str) -> bool {
    if wanted == "*" {
        !segment.is_empty()
    } else {
        wanted == segment
    }
}

/// A scripted misbehaviour for one route. Built with a constructor, then optionally
/// [`times`](Self::times) / [`always`](Self::always) (default: once) and
/// [`with_effect`](Self::with_effect) / [`without_effect`](Self::without_effect).
///
/// | Constructor | Effect committed? | What the client sees |
/// |---|---|---|
/// | [`status`](Self::status) | no (`with_effect` commits first) | the status, JSON error body, optional `Retry-After` |
/// | [`delay`](Self::delay) | yes, before the wait | the normal answer after the delay |
/// | [`delay_before_effect`](Self::delay_before_effect) | yes, after the wait (even if the client left) | the normal answer after the delay |
/// | [`drop_connection`](Self::drop_connection) | yes (`without_effect` skips it) | the connection closes, no response |
/// | [`truncated_body`](Self::truncated_body) | yes | the normal status and headers, half the body, then the connection closes |
/// | [`invalid_body`](Self::invalid_body) | yes (`without_effect` skips it) | `201`, `content-type: application/json`, a body that is not JSON |
/// | [`respond`](Self::respond) | for a 2xx status (either way with `with_effect`/`without_effect`) | exactly the given status and body |
///
/// On reads and lookups there is no effect; the flag decides nothing there.
#[derive(Clone, Debug)]
pub struct Fault {
    kind: FaultKind,
    effect: bool,
    remaining: Remaining,
}

#[derive(Clone, Debug)]
enum FaultKind {
    Status {
        status: u16,
        retry_after: Option<String>,
    },
    Delay {
        delay: Duration,
        effect_first: bool,
    },
    DropConnection,
    TruncatedBody,
    Respond {
        status: u16,
        body: Vec<u8>,
    },
}

#[derive(Clone, Copy, Debug)]
enum Remaining {
    Times(usize),
    Always,
}

impl Fault {
    fn new(kind: FaultKind, effect: bool) -> Self {
        Fault {
            kind,
            effect,
            remaining: Remaining::Times(1),
        }
    }

    /// Answers `status` with a JSON error body; no effect unless [`with_effect`](Self::with_effect).
    pub fn status(status: u16) -> Self {
        Self::new(
            FaultKind::Status {
                status,
                retry_after: None,
            },
            false,
        )
    }

    /// Adds `Retry-After: <seconds>` to a [`status`](Self::status) fault.
    pub fn retry_after_secs(self, seconds: u64) -> Self {
        self.retry_after(&seconds.to_string())
    }

    /// Adds `Retry-After: <value>` (seconds or an HTTP date) to a [`status`](Self::status) fault.
    pub fn retry_after(mut self, value: &str) -> Self {
        if let FaultKind::Status { retry_after, .. } = &mut self.kind {
            *retry_after = Some(value.to_owned());
        }
        self
    }

    /// Commits the effect, waits `delay`, then answers normally: a client that gives up in
    /// between leaves an effect behind.
    pub fn delay(delay: Duration) -> Self {
        Self::new(
            FaultKind::Delay {
                delay,
                effect_first: true,
            },
            true,
        )
    }

    /// Waits `delay`, then commits the effect and answers: the provider keeps working after a
    /// client that gave up has left.
    pub fn delay_before_effect(delay: Duration) -> Self {
        Self::new(
            FaultKind::Delay {
                delay,
                effect_first: false,
            },
            true,
        )
    }

    /// Commits the effect, then closes the connection without answering.
    pub fn drop_connection() -> Self {
        Self::new(FaultKind::DropConnection, true)
    }

    /// Commits the effect, sends the status line, headers and half the body, then closes the
    /// connection.
    pub fn truncated_body() -> Self {
        Self::new(FaultKind::TruncatedBody, true)
    }

    /// Commits the effect and answers `201` with [`INVALID_BODY`], declared as JSON.
    pub fn invalid_body() -> Self {
        Self::new(
            FaultKind::Respond {
                status: 201,
                body: INVALID_BODY.to_vec(),
            },
            true,
        )
    }

    /// Answers exactly `status` with `body`, raw bytes (a `&str`, `String` or byte slice; pass
    /// JSON as text) declared as `application/json`; commits the effect when `status` is 2xx.
    /// Use it for JSON of the wrong shape, or an error body to check it is never quoted.
    pub fn respond(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self::new(
            FaultKind::Respond {
                status,
                body: body.into(),
            },
            (200..300).contains(&status),
        )
    }

    /// Commits the effect before misbehaving.
    pub fn with_effect(mut self) -> Self {
        self.effect = true;
        self
    }

    /// Misbehaves without committing the effect (for faults that commit by default). Honoured
    /// by [`drop_connection`](Self::drop_connection), [`invalid_body`](Self::invalid_body),
    /// [`respond`](Self::respond) and [`status`](Self::status); ignored by
    /// [`delay`](Self::delay), [`delay_before_effect`](Self::delay_before_effect) and
    /// [`truncated_body`](Self::truncated_body), which always commit.
    pub fn without_effect(mut self) -> Self {
        self.effect = false;
        self
    }

    /// Applies to the next `calls` calls of the route.
    pub fn times(mut self, calls: usize) -> Self {
        self.remaining = Remaining::Times(calls);
        self
    }

    /// Applies to every call of the route until [`ProviderHandle::clear_faults`].
    pub fn always(mut self) -> Self {
        self.remaining = Remaining::Always;
        self
    }
}

// ---- State ----------------------------------------------------------------------------------

struct Shared {
    /// The double's `http://127.0.0.1:<port>`, for [`ProviderHandle::base_url`].
    base_url: String,
    /// True until the [`ProviderDouble`] is dropped, which stops the server.
    serving: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// Bumped after every recorded request and committed effect, for the `wait_for_*` helpers.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn new(base_url: String) -> Self {
        Shared {
            base_url,
            serving: std::sync::atomic::AtomicBool::new(true),
            state: Mutex::new(State {
                started: Instant::now(),
                deduplicate: true,
                idempotency_header: HeaderName::from_static(IDEMPOTENCY_HEADER),
                requests: Vec::new(),
                effects: Vec::new(),
                keys: HashMap::new(),
                faults: HashMap::new(),
                answers: HashMap::new(),
                pending_lookups: 0,
                auth: Vec::new(),
                unauthorized: Vec::new(),
            }),
            changed: watch::Sender::new(0),
        }
    }

    /// The state; a test that panicked while holding the lock must not hide later assertions.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self) {
        self.changed.send_modify(|version| *version += 1);
    }
}

struct State {
    started: Instant,
    deduplicate: bool,
    /// Where requests carry their idempotency key.
    idempotency_header: HeaderName,
    requests: Vec<RecordedRequest>,
    effects: Vec<Effect>,
    /// The first effect of each idempotency key, for deduplication.
    keys: HashMap<String, FirstUse>,
    faults: HashMap<String, VecDeque<Fault>>,
    answers: HashMap<String, AnswerShape>,
    pending_lookups: usize,
    /// The credentials every request must carry, one per header.
    auth: Vec<Requirement>,
    /// The sequence numbers of the requests refused for their credentials.
    unauthorized: Vec<u64>,
}

/// A header every request must carry ([`ProviderHandle::require_bearer`],
/// [`ProviderHandle::require_header`]), or every request of one route (`require_*_on`).
#[derive(Debug)]
struct Requirement {
    name: HeaderName,
    expected: Expected,
    /// `Authorization: Bearer <expected>`, the scheme's name matched without regard to case.
    bearer: bool,
    /// The route whose requests it applies to (see [`route_specificity`]); `None`: every one.
    route: Option<String>,
}

/// `route` with its method, if it names one, in upper case, so that `get /items` and
/// `GET /items` are one route.
///
/// # Panics
///
/// When the path pattern is neither `*` nor a path (`/…`): a mistyped route would match no
/// request, and the requirement would check nothing.
fn normalized_route(route: &str) -> String {
    let route = route.trim();
    let (method, pattern) = match route.split_once(' ') {
        Some((method, pattern)) => (Some(method), pattern.trim_start()),
        None => (None, route),
    };
    assert!(
        pattern == "*" || pattern.starts_with('/'),
        "ProviderHandle::require_*_on: the route `{route}` names no path: give a path \
         (`/items`), a `/prefix/*` pattern or `*`, optionally after a method (`GET /items`)"
    );
    match method {
        Some(method) => format!("{} {pattern}", method.to_ascii_uppercase()),
        None => pattern.to_owned(),
    }
}

/// The requirement on each header that governs a `method` request on `path`: of those whose
/// route applies to it, the most specific (a route's over the one on every request, an exact
/// path over a pattern, as for faults).
fn governing<'a>(auth: &'a [Requirement], method: &str, path: &str) -> Vec<&'a Requirement> {
    let mut chosen: Vec<(&Requirement, Option<(PathRank, bool)>)> = Vec::new();
    for requirement in auth {
        let rank = match &requirement.route {
            None => None,
            Some(route) => match route_specificity(route, method, path) {
                Some(rank) => Some(rank),
                None => continue,
            },
        };
        match chosen.iter_mut().find(|(c, _)| c.name == requirement.name) {
            Some(slot) if rank > slot.1 => *slot = (requirement, rank),
            Some(_) => {}
            None => chosen.push((requirement, rank)),
        }
    }
    chosen
        .into_iter()
        .map(|(requirement, _)| requirement)
        .collect()
}

/// `Authorization: Bearer <token>`, on `route`'s requests or every one.
fn bearer_requirement(token: &str, route: Option<&str>) -> Requirement {
    let valid = !token.is_empty()
        && token.trim() == token
        && HeaderValue::from_bytes(format!("Bearer {token}").as_bytes()).is_ok();
    let function = if route.is_some() {
        "require_bearer_on"
    } else {
        "require_bearer"
    };
    assert!(
        valid,
        "ProviderHandle::{function}: the token is empty, padded with whitespace or not valid \
         in a header value"
    );
    Requirement {
        name: AUTHORIZATION,
        expected: Expected(token.as_bytes().to_vec()),
        bearer: true,
        route: route.map(str::to_owned),
    }
}

/// Header `name: value`, on `route`'s requests or every one.
fn header_requirement(name: &str, value: &str, route: Option<&str>) -> Requirement {
    let function = if route.is_some() {
        "require_header_on"
    } else {
        "require_header"
    };
    let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
        // Not quoted: a name pasted with its value (`Authorization: Bearer …`) holds a secret.
        panic!("ProviderHandle::{function}: the name is not a valid header name");
    };
    assert!(
        !value.is_empty() && value.trim() == value && HeaderValue::from_str(value).is_ok(),
        "ProviderHandle::{function}({name:?}, …): the value is empty, padded with whitespace \
         or not valid in a header"
    );
    Requirement {
        name: header,
        expected: Expected(value.as_bytes().to_vec()),
        bearer: false,
        route: route.map(str::to_owned),
    }
}

/// A required value: its `Debug` never shows it.
struct Expected(Vec<u8>);

impl fmt::Debug for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl Requirement {
    /// Whether `headers` carry the required value, once.
    fn met_by(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(&self.name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let sent = value.as_bytes();
        let sent = if self.bearer {
            match bearer_token(sent) {
                Some(token) => token,
                None => return false,
            }
        } else {
            sent
        };
        same_secret(sent, &self.expected.0)
    }
}

/// The token of an `Authorization: Bearer <token>` value (the scheme's name in any case).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

/// Whether `sent` is `expected`, looking at every byte of `expected` whatever the first
/// difference, so the time taken does not say how much of a guess was right (its length may).
fn same_secret(sent: &[u8], expected: &[u8]) -> bool {
    let mut difference = u8::from(sent.len() != expected.len());
    for (at, byte) in expected.iter().enumerate() {
        difference |= byte ^ sent.get(at).copied().unwrap_or(!byte);
    }
    std::hint::black_box(difference) == 0
}

/// What a key was first used for; a later request with the key must match it to be replayed.
struct FirstUse {
    method: String,
    route: String,
    body: BodyIdentity,
    effect: usize,
    /// The status the first answer had (`201`, or a shape's `2xx`), which a replay repeats.
    status: StatusCode,
}

/// Request bodies compare as JSON values when they are JSON (key order and spacing do not
/// matter), else byte for byte.
#[derive(PartialEq)]
enum BodyIdentity {
    Json(Value),
    Bytes(Vec<u8>),
}

impl BodyIdentity {
    fn of(body: &[u8]) -> Self {
        match serde_json::from_slice(body) {
            Ok(value) => BodyIdentity::Json(value),
            Err(_) => BodyIdentity::Bytes(body.to_vec()),
        }
    }
}

impl State {
    /// The answer the shape of `incoming`'s route gives, if the route has one.
    /// `body` is the request's JSON body (`null` when absent or not JSON), parsed once by the
    /// caller.
    fn shaped(
        &mut self,
        incoming: &Received,
        body: &Value,
        operation_id: Option<&str>,
        generic: &Value,
    ) -> Option<Shaped> {
        let route = best_route(
            self.answers.keys().map(String::as_str),
            incoming.method.as_str(),
            &incoming.path,
        )?;
        let shape = &self.answers[route];
        let pending_lookups = Cell::new(self.pending_lookups);
        let status = Cell::new(None);
        let raw = std::cell::RefCell::new(None);
        let answer = shape(&AnswerRequest {
            method: incoming.method.as_str(),
            path: &incoming.path,
            query: incoming.query.as_deref(),
            headers: &incoming.headers,
            body,
            idempotency_key: incoming.idempotency_key.as_deref(),
            operation_id,
            effects: &self.effects,
            generic,
            pending_lookups: &pending_lookups,
            status: &status,
            raw: &raw,
        });
        self.pending_lookups = pending_lookups.get();
        Some(Shaped {
            body: answer,
            status: status.get().map(status_code),
            raw: raw.into_inner(),
        })
    }

    /// The `401` for a `method` request on `path` whose `headers` fail a credential
    /// requirement that applies to it, if one does.
    fn refusal(
        &self,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        sequence: u64,
    ) -> Option<Response<ResponseBody>> {
        let failed: Vec<&Requirement> = governing(&self.auth, method, path)
            .into_iter()
            .filter(|r| !r.met_by(headers))
            .collect();
        if failed.is_empty() {
            return None;
        }
        let mut response = json_response(
            StatusCode::UNAUTHORIZED,
            &json!({ "error": "unauthorized" }),
            sequence,
        );
        if failed.iter().any(|r| r.bearer) {
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        Some(response)
    }

    /// Takes the fault that applies to a `method` request on `path`, if any (see
    /// [`best_route`]).
    fn take_fault(&mut self, method: &str, path: &str) -> Option<Fault> {
        let queued = self
            .faults
            .iter()
            .filter(|(_, queue)| !queue.is_empty())
            .map(|(route, _)| route.as_str());
        let route = best_route(queued, method, path)?.to_owned();
        let queue = self.faults.get_mut(&route)?;
        let front = queue.front_mut()?;
        let fault = front.clone();
        match &mut front.remaining {
            Remaining::Always => {}
            Remaining::Times(left) if *left > 1 => *left -= 1,
            Remaining::Times(_) => {
                queue.pop_front();
            }
        }
        match fault.remaining {
            Remaining::Times(0) => None,
            _ => Some(fault),
        }
    }
}

// ---- Server ---------------------------------------------------------------------------------

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener)
        .expect("the provider double's listener joins the runtime");
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, Arc::clone(&shared)));
                }
                // Out of descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Serves one connection until the client closes it or a fault kills it.
async fn connection(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let kill = Arc::new(Notify::new());
    let service = {
        let kill = Arc::clone(&kill);
        hyper::service::service_fn(move |request| {
            handle(Arc::clone(&shared), Arc::clone(&kill), request)
        })
    };
    let served =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        // Dropping the connection closes the socket with no response written.
        () = kill.notified() => {}
    }
}

/// What the double does with one request.
enum Reply {
    Respond(Response<ResponseBody>),
    DropConnection,
}

/// The parts of a request the responders need.
struct Received {
    sequence: u64,
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    idempotency_key: Option<String>,
    operation_id: Option<String>,
    body: Bytes,
}

async fn handle(
    shared: Arc<Shared>,
    kill: Arc<Notify>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        // The client went away mid-body: nothing to record or answer.
        Err(_) => return Ok(json_response(StatusCode::BAD_REQUEST, &json!({}), 0)),
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let (incoming, fault) = {
        let mut state = shared.lock();
        let idempotency_key = header(state.idempotency_header.as_str());
        let sequence = state.requests.len() as u64 + 1;
        let since_start = state.started.elapsed();
        state.requests.push(RecordedRequest {
            sequence,
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
            idempotency_key: idempotency_key.clone(),
            received_at: SystemTime::now(),
            since_start,
        });
        // A request without the required credentials goes no further: no fault, no effect.
        if let Some(refused) = state.refusal(
            parts.method.as_str(),
            parts.uri.path(),
            &parts.headers,
            sequence,
        ) {
            state.unauthorized.push(sequence);
            drop(state);
            shared.notify();
            return Ok(refused);
        }
        let fault = state.take_fault(parts.method.as_str(), parts.uri.path());
        let incoming = Received {
            sequence,
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers.clone(),
            idempotency_key,
            operation_id: header(OPERATION_ID_HEADER),
            body,
        };
        (incoming, fault)
    };
    shared.notify();
    // The reply is computed on its own task, so a client that disconnects cannot stop an effect
    // halfway (a real provider does not notice either).
    let reply = tokio::spawn(respond(shared, incoming, fault)).await;
    match reply {
        Ok(Reply::Respond(response)) => Ok(response),
        Ok(Reply::DropConnection) | Err(_) => {
            kill.notify_one();
            std::future::pending().await
        }
    }
}

async fn respond(shared: Arc<Shared>, incoming: Received, fault: Option<Fault>) -> Reply {
    let Some(fault) = fault else {
        return Reply::Respond(normal(&shared, &incoming));
    };
    let sequence = incoming.sequence;
    match fault.kind {
        FaultKind::Status {
            status,
            retry_after,
        } => {
            if fault.effect {
                normal(&shared, &incoming);
            }
            let mut response = json_response(
                status_code(status),
                &json!({ "error": { "type": "injected_fault", "status": status } }),
                sequence,
            );
            if let Some(value) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
                response.headers_mut().insert(RETRY_AFTER, value);
            }
            Reply::Respond(response)
        }
        FaultKind::Delay {
            delay,
            effect_first: true,
        } => {
            let response = normal(&shared, &incoming);
            tokio::time::sleep(delay).await;
            Reply::Respond(response)
        }
        FaultKind::Delay {
            delay,
            effect_first: false,
        } => {
            tokio::time::sleep(delay).await;
            Reply::Respond(normal(&shared, &incoming))
        }
        FaultKind::DropConnection => {
            if fault.effect {
                normal(&shared, &incoming);
            }
            Reply::DropConnection
        }
        FaultKind::TruncatedBody => {
            let (parts, body) = normal(&shared, &incoming).into_parts();
            let full = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => Bytes::new(),
            };
            let mut response = Response::from_parts(
                parts,
                Truncated {
                    sent: Some(full.slice(..full.len() / 2)),
                    full_len: full.len() as u64,
                    pause: Box::pin(tokio::time::sleep(TRUNCATION_PAUSE)),
                }
                .boxed(),
            );
            response
                .headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(full.len()));
            Reply::Respond(response)
        }
        FaultKind::Respond { status, body } => {
            if fault.effect {
                normal(&shared, &incoming);
            }
            Reply::Respond(bytes_response(
                status_code(status),
                Bytes::from(body),
                sequence,
            ))
        }
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The well-behaved answer: an operation lookup, a read, or an effect (committed or replayed).
fn normal(shared: &Shared, incoming: &Received) -> Response<ResponseBody> {
    let sequence = incoming.sequence;
    let path = incoming.path.as_str();
    if path == "/operations" || path.starts_with("/operations/") {
        return lookup(shared, incoming);
    }
    if matches!(incoming.method, Method::GET | Method::HEAD) {
        let mut state = shared.lock();
        let operation_ids: Vec<&str> = state
            .effects
            .iter()
            .filter(|e| e.route == path)
            .map(|e| e.operation_id.as_str())
            .collect();
        let generic = json!({ "route": path, "operation_ids": operation_ids });
        let body = serde_json::from_slice(&incoming.body).unwrap_or(Value::Null);
        let shaped = state.shaped(incoming, &body, None, &generic);
        drop(state);
        return match shaped {
            Some(Shaped {
                status,
                raw: Some(raw),
                ..
            }) => {
                let mut response =
                    bytes_response(status.unwrap_or(StatusCode::OK), raw.bytes, sequence);
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, raw.content_type);
                response
            }
            Some(shaped) => json_response(
                shaped.status.unwrap_or(StatusCode::OK),
                &shaped.body,
                sequence,
            ),
            None => json_response(StatusCode::OK, &generic, sequence),
        };
    }
    let committed = {
        let mut state = shared.lock();
        commit(&mut state, incoming)
    };
    match committed {
        Committed::New(status, answer) => {
            shared.notify();
            json_response(status, &answer, sequence)
        }
        Committed::Refused(status, answer) => json_response(status, &answer, sequence),
        Committed::Replayed(status, answer) => {
            let mut response = json_response(status, &answer, sequence);
            response
                .headers_mut()
                .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
            response
        }
        Committed::KeyReused => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "idempotency_key_reused" }),
            sequence,
        ),
    }
}

enum Committed {
    New(StatusCode, Value),
    /// A shape answered the write with a status outside `2xx`: nothing was committed.
    Refused(StatusCode, Value),
    Replayed(StatusCode, Value),
    KeyReused,
}

fn commit(state: &mut State, incoming: &Received) -> Committed {
    let method = incoming.method.as_str();
    let route = incoming.path.as_str();
    let identity = BodyIdentity::of(&incoming.body);
    if let (true, Some(key)) = (state.deduplicate, &incoming.idempotency_key)
        && let Some(first) = state.keys.get(key)
    {
        return if first.method == method && first.route == route && first.body == identity {
            Committed::Replayed(first.status, state.effects[first.effect].answer.clone())
        } else {
            Committed::KeyReused
        };
    }
    let sequence = state.effects.len() as u64 + 1;
    let operation_id = incoming
        .operation_id
        .clone()
        .unwrap_or_else(|| format!("op_{sequence}"));
    let request = match &identity {
        BodyIdentity::Json(value) => value.clone(),
        BodyIdentity::Bytes(_) => Value::Null,
    };
    let generic = json!({
        "operation_id": operation_id,
        "route": route,
        "idempotency_key": incoming.idempotency_key,
        "effect_sequence": sequence,
        "request": request,
    });
    let (status, answer) = match state.shaped(incoming, &request, Some(&operation_id), &generic) {
        Some(shaped) => (shaped.status.unwrap_or(StatusCode::CREATED), shaped.body),
        None => (StatusCode::CREATED, generic),
    };
    if !status.is_success() {
        return Committed::Refused(status, answer);
    }
    if let Some(key) = &incoming.idempotency_key {
        state.keys.entry(key.clone()).or_insert(FirstUse {
            method: method.to_owned(),
            route: route.to_owned(),
            body: identity,
            effect: state.effects.len(),
            status,
        });
    }
    state.effects.push(Effect {
        sequence,
        operation_id,
        method: method.to_owned(),
        route: route.to_owned(),
        idempotency_key: incoming.idempotency_key.clone(),
        request,
        answer: answer.clone(),
        committed_at: SystemTime::now(),
    });
    Committed::New(status, answer)
}

/// `GET /operations/{id}` or `GET /operations?idempotency_key=K`.
fn lookup(shared: &Shared, incoming: &Received) -> Response<ResponseBody> {
    let sequence = incoming.sequence;
    if incoming.method != Method::GET {
        return json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({ "error": "method_not_allowed" }),
            sequence,
        );
    }
    enum By {
        Operation(String),
        Key(String),
    }
    let by = match incoming.path.strip_prefix("/operations/") {
        Some(id) if !id.is_empty() => By::Operation(
            percent_encoding::percent_decode_str(id)
                .decode_utf8_lossy()
                .into_owned(),
        ),
        _ => {
            let key = incoming
                .query
                .as_deref()
                .and_then(|query| query_param(query, "idempotency_key"));
            match key {
                Some(key) => By::Key(key),
                None => {
                    return json_response(
                        StatusCode::BAD_REQUEST,
                        &json!({ "error": "operation_id_or_idempotency_key_required" }),
                        sequence,
                    );
                }
            }
        }
    };
    let mut state = shared.lock();
    let matching: Vec<&Effect> = state
        .effects
        .iter()
        .filter(|e| match &by {
            By::Operation(id) => &e.operation_id == id,
            By::Key(key) => e.idempotency_key.as_ref() == Some(key),
        })
        .collect();
    let mut answer = match matching.first() {
        Some(first) => json!({
            "operation_id": first.operation_id,
            "state": "committed",
            "result": first.answer,
            "effect_count": matching.len(),
        }),
        None => json!({
            "operation_id": match &by { By::Operation(id) => Some(id.as_str()), By::Key(_) => None },
            "state": "unknown",
        }),
    };
    if state.pending_lookups > 0 {
        state.pending_lookups -= 1;
        // A cursor to resume the lookup from, as a provider's long-running operations hand
        // out: a reconcile companion that passes it on (`ReconcileOutcome::Pending { cursor }`)
        // lets a restarted host resume from it.
        answer = json!({
            "operation_id": answer["operation_id"],
            "state": "pending",
            "cursor": format!("cursor_{sequence}"),
        });
    }
    if let By::Key(key) = &by {
        answer["idempotency_key"] = json!(key);
    }
    drop(state);
    json_response(StatusCode::OK, &answer, sequence)
}

fn json_response(status: StatusCode, body: &Value, sequence: u64) -> Response<ResponseBody> {
    bytes_response(status, Bytes::from(body.to_string()), sequence)
}

fn bytes_response(status: StatusCode, body: Bytes, sequence: u64) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(id) = HeaderValue::from_str(&format!("req_{sequence}")) {
        headers.insert(REQUEST_ID_HEADER, id);
    }
    response
}

/// A body that sends its first part, waits until it has surely been flushed, then fails: hyper
/// closes the connection mid-body, after the status line and headers went out.
struct Truncated {
    sent: Option<Bytes>,
    full_len: u64,
    pause: Pin<Box<tokio::time::Sleep>>,
}

/// How long a truncated body waits between its first part and the break.
const TRUNCATION_PAUSE: Duration = Duration::from_millis(50);

impl Body for Truncated {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(part) = self.sent.take() {
            return Poll::Ready(Some(Ok(Frame::data(part))));
        }
        match self.pause.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::other(
                "truncated by the provider double",
            )))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.full_len)
    }
}

/// The first value of the parameter `name` in `query` (without the `?`), decoded as a form
/// does.
fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_told_by_name() {
        for name in [
            "Authorization",
            "cookie",
            "x-api-key",
            "x-auth",
            "x-password",
            "x-session-id",
            "x-signature",
            "x-client-credential",
        ] {
            assert!(is_credential_header(name), "{name}");
        }
        for name in ["content-type", "idempotency-id", "x-request-id"] {
            assert!(!is_credential_header(name), "{name}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"tok-1", b"tok-1"));
        for sent in [
            &b""[..],
            b"tok-",
            b"tok-12",
            b"tok-2",
            b"TOK-1",
            b"\0\0\0\0\0",
        ] {
            assert!(!same_secret(sent, b"tok-1"), "{sent:?}");
        }
        // A byte that differs only in being the complement of the expected one still differs.
        assert!(!same_secret(&[!b't'], b"t"));
    }

    #[test]
    fn the_bearer_token_follows_the_scheme_in_any_case() {
        assert_eq!(bearer_token(b"Bearer tok"), Some(&b"tok"[..]));
        assert_eq!(bearer_token(b"bEARER   tok"), Some(&b"tok"[..]));
        assert_eq!(bearer_token(b"Bearer tok "), Some(&b"tok "[..]));
        for value in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Basic tok",
            b"Bearertok",
            b"tok",
            b"",
        ] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_requirement_is_met_by_one_matching_header() {
        let bearer = bearer_requirement("tok", None);
        let mut headers = HeaderMap::new();
        assert!(!bearer.met_by(&headers));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer tok"));
        assert!(bearer.met_by(&headers));
        headers.append(AUTHORIZATION, HeaderValue::from_static("Bearer tok"));
        assert!(!bearer.met_by(&headers), "a repeated header is refused");
        assert_eq!(
            format!("{bearer:?}"),
            r#"Requirement { name: "authorization", expected: [REDACTED], bearer: true, route: None }"#
        );
    }

    #[test]
    fn the_most_specific_requirement_on_each_header_governs() {
        let auth = [
            bearer_requirement("everywhere", None),
            bearer_requirement("items", Some("GET /items")),
            header_requirement("x-api-key", "reports", Some("/reports/*")),
            header_requirement("x-api-key", "report-7", Some("/reports/7")),
        ];
        let governing = |method: &str, path: &str| -> Vec<String> {
            governing(&auth, method, path)
                .iter()
                .map(|r| format!("{}={}", r.name, String::from_utf8_lossy(&r.expected.0)))
                .collect()
        };
        assert_eq!(governing("POST", "/items"), ["authorization=everywhere"]);
        assert_eq!(governing("GET", "/items"), ["authorization=items"]);
        assert_eq!(governing("get", "/items"), ["authorization=items"]);
        assert_eq!(governing("GET", "/items/1"), ["authorization=everywhere"]);
        assert_eq!(
            governing("GET", "/reports"),
            ["authorization=everywhere", "x-api-key=reports"]
        );
        assert_eq!(
            governing("DELETE", "/reports/7"),
            ["authorization=everywhere", "x-api-key=report-7"]
        );
        assert_eq!(governing("GET", "/reportsx"), ["authorization=everywhere"]);
        assert_eq!(normalized_route(" get  /items "), "GET /items");
        assert_eq!(normalized_route("/reports/*"), "/reports/*");
    }

    #[test]
    fn a_star_segment_stands_for_one_segment_and_a_trailing_star_for_a_subtree() {
        let routes = ["/holds/*", "POST /holds/*/confirm", "/holds/*/lines/*", "*"];
        let best = |method, path| best_route(routes.iter().copied(), method, path);
        // A booking trial could not fault only the confirmation of a hold.
        assert_eq!(
            best("POST", "/holds/h_1/confirm"),
            Some("POST /holds/*/confirm")
        );
        assert_eq!(best("GET", "/holds/h_1/confirm"), Some("/holds/*"));
        assert_eq!(best("POST", "/holds"), Some("/holds/*"));
        assert_eq!(best("POST", "/holds/h_1"), Some("/holds/*"));
        assert_eq!(best("POST", "/holds/h_1/confirm/x"), Some("/holds/*"));
        assert_eq!(best("PUT", "/holds/h_1/lines"), Some("/holds/*/lines/*"));
        assert_eq!(best("PUT", "/holds/h_1/lines/2"), Some("/holds/*/lines/*"));
        // More literal segments win, then leading ones, whatever the length of an id.
        for id in ["acct_1", "acct_1234567890"] {
            let specific = format!("/accounts/{id}/*");
            let routes = ["/accounts/*/refunds", specific.as_str()];
            assert_eq!(
                best_route(
                    routes.into_iter(),
                    "POST",
                    &format!("/accounts/{id}/refunds")
                ),
                Some(specific.as_str())
            );
        }
        // `*` stands for one segment, never an empty one, never two.
        assert_eq!(best("POST", "/holds//confirm"), Some("/holds/*"));
        assert_eq!(best("POST", "/holdsx/h_1/confirm"), Some("*"));
        assert_eq!(
            route_specificity("/holds/*/confirm", "POST", "/holds/a/b/confirm"),
            None
        );
        // An exact path still wins over every pattern.
        assert_eq!(
            best_route(
                ["/holds/*/confirm", "/holds/h_1/confirm"].into_iter(),
                "POST",
                "/holds/h_1/confirm"
            ),
            Some("/holds/h_1/confirm")
        );
    }

    #[test]
    #[should_panic(expected = "the route `GET items` names no path")]
    fn a_route_that_names_no_path_is_refused() {
        normalized_route("GET items");
    }

    #[test]
    #[should_panic(expected = "ProviderHandle::require_bearer_on: the token is empty")]
    fn a_route_requirement_s_panic_names_its_own_function() {
        bearer_requirement("", Some("GET /items"));
    }

    #[test]
    #[should_panic(expected = "ProviderHandle::require_header_on(\"x-api-key\", …): the value")]
    fn a_route_header_requirement_s_panic_names_its_own_function() {
        header_requirement("x-api-key", " padded", Some("/items"));
    }

    #[test]
    #[should_panic(expected = "ProviderHandle::require_header: the name is not a valid")]
    fn a_header_requirement_s_panic_names_its_function() {
        header_requirement("Authorization: Bearer x", "x", None);
    }
}
