//! A cap on the live MCP sessions of one router.
//!
//! rmcp's `LocalSessionManager` keeps each session (a task and its channels) until the client
//! deletes it or it has been idle for its keep-alive (5 minutes by default). Time alone does
//! not bound how many sessions an authenticated client can open inside that window, so the
//! router counts them: [`BoundedSessions`] wraps the session manager and admits a session only
//! while fewer than the limit are live, and [`guard_sessions`] answers a request that would
//! open one beyond the router's or its caller's limit `503 transport.overloaded` before it
//! reaches rmcp.
//!
//! The same middleware binds each session to the caller that opened it, without shared state:
//! the id a client sees is rmcp's id followed by `.` and a MAC of it and the caller under the
//! router's [`SessionKey`]. A request naming a session is let through only when the MAC holds
//! for its own caller, with rmcp's id put back; so a session id learnt by someone else is
//! useless to them, and replicas sharing the key (and an rmcp `session_store`) accept each
//! other's sessions for the right caller only.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use aip_connector_core::ids::PrincipalId;
use aip_connector_core::model::ErrorCategory;
use hmac::Mac;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use crate::codes;
use crate::host::TrustedContext;
use crate::host::canonical::hex;
use crate::invocation::Secret;

/// The header that names the session of a request; a POST without it opens a session.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// Seconds a client refused for a full session table is told to wait (`Retry-After`).
const RETRY_AFTER_SECONDS: &str = "1";

/// Bytes of the MAC a session id carries (128 bits), sent as twice as many hex digits.
const SESSION_TAG_BYTES: usize = 16;

/// What the MAC of a session id starts with: names the scheme, so a key shared with something
/// else never yields a tag valid here.
const SESSION_TAG_DOMAIN: &[u8] = b"aip-connector/mcp-session/v1";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The key that binds MCP session ids to the callers that opened them
/// ([`McpProjection::with_session_key`](super::McpProjection::with_session_key)).
///
/// Each router makes a [`random`](Self::random) one unless given one. Replicas that share an
/// rmcp `session_store`, so that a session opened on one is resumed on another, must share the
/// key too: a replica with another key answers the session's requests `404`, as for a session
/// that does not exist. The key is wiped from memory when the last copy is dropped, and never
/// printed.
#[derive(Clone)]
pub struct SessionKey(Secret);

impl SessionKey {
    /// The shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 32;

    /// A key of `bytes` (at least [`MIN_LEN`](Self::MIN_LEN) of them; a secret from the
    /// deployment's secret store, the same on every replica).
    pub fn new(bytes: impl Into<Secret>) -> Result<Self, SessionKeyTooShort> {
        let secret = bytes.into();
        let len = secret.expose_bytes().len();
        if len < Self::MIN_LEN {
            return Err(SessionKeyTooShort { len });
        }
        Ok(Self(secret))
    }

    /// A key of 32 random bytes from the operating system, for one router alone.
    ///
    /// # Panics
    ///
    /// When the operating system has no random source to read (`getrandom` fails), as nothing
    /// safe can be served without one.
    pub fn random() -> Self {
        let mut bytes = Zeroizing::new(vec![0_u8; Self::MIN_LEN]);
        if let Err(error) = getrandom::fill(&mut bytes) {
            panic!("no random source for the MCP session key: {error}");
        }
        Self(Secret::new(&*bytes))
    }

    /// The MAC of the session `id` opened by `caller`: the scheme, the caller's tenant and
    /// principal and the id, each length-prefixed so no two inputs run together.
    fn tag(&self, caller: Option<&CallerKey>, id: &str) -> [u8; SESSION_TAG_BYTES] {
        let mut mac = <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(self.0.expose_bytes())
            .expect("HMAC accepts a key of any length");
        let mut field = |bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        };
        field(SESSION_TAG_DOMAIN);
        match caller {
            Some(caller) => {
                field(b"caller");
                field(caller.tenant.as_deref().unwrap_or_default().as_bytes());
                field(&[u8::from(caller.tenant.is_some())]);
                field(caller.principal.as_str().as_bytes());
            }
            None => field(b"anonymous"),
        }
        field(id.as_bytes());
        let mut tag = [0; SESSION_TAG_BYTES];
        tag.copy_from_slice(&mac.finalize().into_bytes()[..SESSION_TAG_BYTES]);
        tag
    }

    /// The id a client sees for rmcp's session `id`: `{id}.{tag}`, the tag in hex.
    fn sign(&self, caller: Option<&CallerKey>, id: &str) -> String {
        format!("{id}.{}", hex(&self.tag(caller, id)))
    }

    /// rmcp's id in `presented` when its tag is `caller`'s (compared in constant time), else
    /// `None`: a session of another caller, of another key, or no session of ours at all.
    fn open<'a>(&self, caller: Option<&CallerKey>, presented: &'a str) -> Option<&'a str> {
        let (id, tag) = presented.rsplit_once('.')?;
        let expected = hex(&self.tag(caller, id));
        // Lengths differ only for a malformed id: that says nothing about the key.
        (tag.len() == expected.len() && bool::from(tag.as_bytes().ct_eq(expected.as_bytes())))
            .then_some(id)
    }
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// Why [`SessionKey::new`] refused a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "an MCP session key needs at least {min} bytes, this one has {len}",
    min = SessionKey::MIN_LEN
)]
#[non_exhaustive]
pub struct SessionKeyTooShort {
    /// How many bytes the refused key had.
    pub len: usize,
}

/// The live sessions of one router, who opened them, and how many it admits.
#[derive(Debug)]
pub(super) struct SessionLimit {
    max_sessions: usize,
    max_per_caller: usize,
    state: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    live: HashSet<SessionId>,
    /// Sessions each caller holds or is opening right now.
    per_caller: HashMap<CallerKey, usize>,
    /// The caller that opened each live session (sessions the middleware saw open), whose slot
    /// the session's end frees. (Who may use a session is its signed id's to say.)
    owners: HashMap<SessionId, CallerKey>,
    /// Fired when the session ends, for the tool calls still running in it
    /// ([`SessionLimit::end_signal`]); made when the first call asks.
    ends: HashMap<SessionId, CancellationToken>,
}

impl Sessions {
    fn forget_one_of(&mut self, caller: &CallerKey) {
        if let Some(count) = self.per_caller.get_mut(caller) {
            *count -= 1;
            if *count == 0 {
                self.per_caller.remove(caller);
            }
        }
    }
}

/// Whose sessions are counted together: one principal of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct CallerKey {
    tenant: Option<String>,
    principal: PrincipalId,
}

impl CallerKey {
    fn of(caller: &TrustedContext) -> Self {
        Self {
            tenant: caller.tenant.as_ref().map(|tenant| tenant.id.clone()),
            principal: caller.principal.id.clone(),
        }
    }
}

/// Why a request may not open a session now.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The router holds its limit of sessions.
    ServerFull { max_sessions: usize },
    /// This caller holds its limit of sessions.
    CallerFull { max_per_caller: usize },
}

impl SessionLimit {
    pub(super) fn new(max_sessions: usize, max_per_caller: usize) -> Self {
        Self {
            max_sessions,
            max_per_caller,
            state: Mutex::new(Sessions::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // Every operation below leaves the state consistent before it can panic, so a panic
        // elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_full(&self) -> bool {
        self.state().live.len() >= self.max_sessions
    }

    /// Counts `id` as live; `false` (and nothing counted) when the limit is reached. Opened
    /// while [`guard_sessions`] serves a request that claimed a caller's slot ([`OPENING`]),
    /// the session is that caller's at once: the slot then stays taken until the session
    /// ends, even if the request is dropped before its response (found by a review: a slot
    /// given back by a dropped `initialize` whose session lived on let one caller open more
    /// than its share, each for rmcp's idle timeout).
    fn admit(&self, id: &SessionId) -> bool {
        let claim = OPENING.try_with(Arc::clone).ok();
        let mut state = self.state();
        if state.live.len() >= self.max_sessions {
            return false;
        }
        state.live.insert(id.clone());
        if let Some(claim) = claim
            && let Some(caller) = &claim.caller
            && !claim.bound.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            state.owners.insert(id.clone(), caller.clone());
        }
        true
    }

    /// Forgets `id`, and frees its caller's slot. Releasing twice (a DELETE and the worker's
    /// own close) frees once.
    fn release(&self, id: &SessionId) {
        let mut state = self.state();
        state.live.remove(id);
        if let Some(owner) = state.owners.remove(id) {
            state.forget_one_of(&owner);
        }
        if let Some(end) = state.ends.remove(id) {
            end.cancel();
        }
    }

    /// What fires when the live session `id` ends (a DELETE, rmcp's idle timeout, a shutdown),
    /// so that a tool call still running in it is abandoned at once: rmcp itself lets such a
    /// call run on for up to 5 s while it drains the session's answers, during which its
    /// caller could open more sessions and run more calls than its limit (a hostile review
    /// ran six at once under a limit of one). `None` for a session that is not live.
    pub(super) fn end_signal(&self, id: &SessionId) -> Option<CancellationToken> {
        let mut state = self.state();
        if !state.live.contains(id) {
            return None;
        }
        Some(state.ends.entry(id.clone()).or_default().clone())
    }

    /// Takes one of `caller`'s slots for a session about to be opened, or says why not. Taken
    /// before the session exists, so a caller's concurrent requests cannot overshoot its limit.
    fn claim(&self, caller: Option<&CallerKey>) -> Result<(), Refusal> {
        let mut state = self.state();
        if state.live.len() >= self.max_sessions {
            return Err(Refusal::ServerFull {
                max_sessions: self.max_sessions,
            });
        }
        if let Some(caller) = caller {
            let count = state.per_caller.entry(caller.clone()).or_default();
            if *count >= self.max_per_caller {
                return Err(Refusal::CallerFull {
                    max_per_caller: self.max_per_caller,
                });
            }
            *count += 1;
        }
        Ok(())
    }

    /// Binds the session a claimed request opened (`opened`) to the claim's caller, or gives
    /// the slot back when none was opened or it has already ended. A claim whose session was
    /// bound at its admission has nothing left to settle.
    fn settle_claim(&self, claim: &SlotClaim, opened: Option<SessionId>) {
        let Some(caller) = claim.caller.clone() else {
            return;
        };
        let mut state = self.state();
        if claim.bound.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        match opened {
            Some(id) if state.live.contains(&id) && !state.owners.contains_key(&id) => {
                state.owners.insert(id, caller);
            }
            _ => state.forget_one_of(&caller),
        }
    }
}

/// Why [`BoundedSessions`] did not do what rmcp asked.
#[derive(Debug, thiserror::Error)]
pub(super) enum BoundedSessionsError<E> {
    /// The wrapped session manager failed.
    #[error(transparent)]
    Inner(E),
    /// The limit of live sessions is reached.
    #[error("this server already holds its limit of {max_sessions} MCP sessions")]
    Full {
        /// The limit.
        max_sessions: usize,
    },
}

/// A session manager that admits at most [`SessionLimit`]'s number of live sessions.
pub(super) struct BoundedSessions<M> {
    inner: M,
    limit: Arc<SessionLimit>,
}

impl<M: SessionManager> BoundedSessions<M> {
    pub(super) fn new(inner: M, limit: Arc<SessionLimit>) -> Self {
        Self { inner, limit }
    }

    /// Counts a session the inner manager just made, or closes it again when the limit was
    /// reached meanwhile (a race [`guard_sessions`] could not see).
    async fn admit_or_close(&self, id: &SessionId) -> Result<(), BoundedSessionsError<M::Error>> {
        if self.limit.admit(id) {
            return Ok(());
        }
        // Already refusing: a failure to close is the inner manager's to report, not ours.
        let _ = self.inner.close_session(id).await;
        Err(self.full())
    }

    fn full(&self) -> BoundedSessionsError<M::Error> {
        BoundedSessionsError::Full {
            max_sessions: self.limit.max_sessions,
        }
    }
}

impl<M: SessionManager> SessionManager for BoundedSessions<M> {
    type Error = BoundedSessionsError<M::Error>;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.limit.is_full() {
            return Err(self.full());
        }
        let (id, transport) = self
            .inner
            .create_session()
            .await
            .map_err(BoundedSessionsError::Inner)?;
        self.admit_or_close(&id).await?;
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner
            .initialize_session(id, message)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner
            .has_session(id)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // rmcp closes every session once its worker ends (deleted, idle, cancelled), so the
        // count follows the sessions that are really there.
        let closed = self.inner.close_session(id).await;
        self.limit.release(id);
        closed.map_err(BoundedSessionsError::Inner)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner
            .create_stream(id, message)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner
            .accept_message(id, message)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner
            .create_standalone_stream(id)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner
            .resume(id, last_event_id)
            .await
            .map_err(BoundedSessionsError::Inner)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let outcome = self
            .inner
            .restore_session(id.clone())
            .await
            .map_err(BoundedSessionsError::Inner)?;
        if let RestoreOutcome::Restored(_) = &outcome {
            self.admit_or_close(&id).await?;
        }
        Ok(outcome)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// What [`guard_sessions`] needs: the router's session count and its session key.
#[derive(Clone, Debug)]
pub(super) struct SessionGuard {
    pub(super) limit: Arc<SessionLimit>,
    pub(super) key: SessionKey,
}

/// Middleware: a POST that would open a session while the router, or its caller, holds its
/// limit of sessions is answered `503 transport.overloaded` with `Retry-After`, as an
/// `aip.core.v1.error` envelope. The session id in a response is signed for the request's
/// caller ([`SessionKey`]); a request naming a session passes, with rmcp's id put back, only
/// when the signature is its caller's, and is otherwise answered `404`, as rmcp answers an
/// unknown session. Runs after authentication, so the caller is the one the authenticator put
/// into the request.
pub(super) async fn guard_sessions(
    State(guard): State<SessionGuard>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = request
        .extensions()
        .get::<TrustedContext>()
        .map(CallerKey::of);
    if let Some(presented) = request.headers().get(SESSION_HEADER) {
        // Another caller's session (to call tools in, to read its stream, to DELETE it) is
        // answered as a session that does not exist, as rmcp answers an unknown one: knowing
        // a session id does not make it yours.
        let Some(id) = presented
            .to_str()
            .ok()
            .and_then(|presented| guard.key.open(caller.as_ref(), presented))
            .and_then(|id| HeaderValue::from_str(id).ok())
        else {
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        };
        request.headers_mut().insert(SESSION_HEADER, id);
        let response = next.run(request).await;
        return signed(response, &guard.key, caller.as_ref());
    }
    if request.method() != Method::POST {
        return signed(next.run(request).await, &guard.key, caller.as_ref());
    }
    let slot = match ClaimedSlot::take(&guard.limit, caller.clone()) {
        Ok(slot) => slot,
        Err(refusal) => return overloaded(&refusal),
    };
    let response = OPENING
        .scope(Arc::clone(&slot.claim), next.run(request))
        .await;
    let opened = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(SessionId::from);
    let response = match opened {
        Some(opened) => {
            slot.settle(Some(opened));
            response
        }
        // No session: the request is a call of its own (stateless mode, or a protocol version
        // rmcp serves per request), and its slot is held until its answer's body ends or is
        // dropped. rmcp sends the headers of an SSE answer before the tool call ends (at once in
        // stateless mode, at the first progress notification with JSON answers), so a slot
        // given back with the headers let one caller run any number of calls at once (found by
        // a hostile probe: six under a limit of one).
        None => response.map(|body| {
            axum::body::Body::new(body.map_frame(move |frame| {
                let _held_until_the_body_ends = &slot;
                frame
            }))
        }),
    };
    signed(response, &guard.key, caller.as_ref())
}

tokio::task_local! {
    /// The slot claimed by the request [`guard_sessions`] is serving: a session admitted while
    /// it runs is bound to the claim's caller ([`SessionLimit::admit`]).
    static OPENING: Arc<SlotClaim>;
}

/// What a claimed slot is for: the caller, and whether a session was bound to it.
struct SlotClaim {
    caller: Option<CallerKey>,
    /// Set under the limit's lock when a session is admitted for this claim.
    bound: std::sync::atomic::AtomicBool,
}

/// A caller's slot claimed for a request that may open a session, given back when the request
/// ends without [`settle`](Self::settle) (found by a review): hyper drops a request whose client
/// closed its connection, and this middleware's future with it, so a slot settled only after
/// the response would stay taken, and 64 abandoned calls would lock the caller out until a
/// restart. A session the request opened is bound to the caller when it is admitted, so its
/// slot stays taken until that session ends, whether or not the response was sent.
struct ClaimedSlot {
    limit: Arc<SessionLimit>,
    claim: Arc<SlotClaim>,
    settled: bool,
}

impl ClaimedSlot {
    fn take(limit: &Arc<SessionLimit>, caller: Option<CallerKey>) -> Result<Self, Refusal> {
        limit.claim(caller.as_ref())?;
        Ok(Self {
            limit: Arc::clone(limit),
            claim: Arc::new(SlotClaim {
                caller,
                bound: std::sync::atomic::AtomicBool::new(false),
            }),
            settled: false,
        })
    }

    /// Binds the session the request opened, if any and not bound at its admission, to the
    /// caller, or gives the slot back.
    fn settle(mut self, opened: Option<SessionId>) {
        self.settled = true;
        self.limit.settle_claim(&self.claim, opened);
    }
}

impl Drop for ClaimedSlot {
    fn drop(&mut self) {
        if !self.settled {
            self.limit.settle_claim(&self.claim, None);
        }
    }
}

/// `response` with the session id rmcp put into it, if any, signed for `caller`.
fn signed(mut response: Response, key: &SessionKey, caller: Option<&CallerKey>) -> Response {
    let signed = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(|id| key.sign(caller, id))
        .and_then(|signed| HeaderValue::from_str(&signed).ok());
    if let Some(signed) = signed {
        response.headers_mut().insert(SESSION_HEADER, signed);
    }
    response
}

fn overloaded(refusal: &Refusal) -> Response {
    let message = match refusal {
        Refusal::ServerFull { max_sessions } => {
            format!(
                "this server already holds its limit of {max_sessions} MCP sessions; retry later"
            )
        }
        Refusal::CallerFull { max_per_caller } => format!(
            "this caller already holds its limit of {max_per_caller} MCP sessions; close one \
             (HTTP DELETE) or retry later"
        ),
    };
    let mut error = crate::serve::error(
        codes::TRANSPORT_OVERLOADED,
        message,
        ErrorCategory::Temporary,
        true,
    );
    error.retry_after_ms = Some(1000);
    let mut response = super::error_response(StatusCode::SERVICE_UNAVAILABLE, error);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_opens_only_for_the_caller_it_was_signed_for() {
        let key = SessionKey::new(vec![7_u8; SessionKey::MIN_LEN]).unwrap();
        let ada = CallerKey {
            tenant: Some("t1".into()),
            principal: PrincipalId::from("user:ada"),
        };
        let namesake = CallerKey {
            tenant: Some("t2".into()),
            ..ada.clone()
        };
        let untenanted = CallerKey {
            tenant: None,
            ..ada.clone()
        };
        let signed = key.sign(Some(&ada), "s1");
        assert!(signed.starts_with("s1.") && signed.len() == 3 + 2 * SESSION_TAG_BYTES);
        assert_eq!(key.open(Some(&ada), &signed), Some("s1"));
        assert_eq!(key.open(Some(&namesake), &signed), None, "other tenant");
        assert_eq!(key.open(Some(&untenanted), &signed), None, "no tenant");
        assert_eq!(key.open(None, &signed), None, "no caller");
        assert_eq!(key.open(Some(&ada), "s1"), None, "unsigned");
        assert_eq!(
            key.open(Some(&ada), &signed.replace("s1.", "s2.")),
            None,
            "other id"
        );
        let mut flipped = signed.clone();
        let last = if flipped.ends_with('0') { "1" } else { "0" };
        flipped.replace_range(flipped.len() - 1.., last);
        assert_eq!(key.open(Some(&ada), &flipped), None, "altered tag");
        assert_eq!(
            key.open(Some(&ada), &signed[..signed.len() - 1]),
            None,
            "short tag"
        );
        assert_eq!(
            key.open(Some(&ada), &signed.to_uppercase()),
            None,
            "not our digits"
        );
        // An id with dots of its own still opens: the tag is after the last one.
        let dotted = key.sign(Some(&ada), "a.b");
        assert_eq!(key.open(Some(&ada), &dotted), Some("a.b"));
        // A tenant's id and an empty tenant are told apart.
        let blank = CallerKey {
            tenant: Some(String::new()),
            ..ada.clone()
        };
        assert_eq!(
            key.open(Some(&blank), &key.sign(Some(&untenanted), "s1")),
            None
        );
        // Another key (another deployment, or a replica not given the shared key) refuses it.
        let other = SessionKey::new(vec![8_u8; SessionKey::MIN_LEN]).unwrap();
        assert_eq!(other.open(Some(&ada), &signed), None);
        assert_ne!(SessionKey::random().sign(Some(&ada), "s1"), signed);
    }

    #[test]
    fn a_session_key_is_long_and_never_printed() {
        assert_eq!(
            SessionKey::new("short".to_owned()).unwrap_err(),
            SessionKeyTooShort { len: 5 }
        );
        assert_eq!(
            SessionKey::new("short".to_owned()).unwrap_err().to_string(),
            "an MCP session key needs at least 32 bytes, this one has 5"
        );
        let canary = "canary-session-key-0123456789abcdef";
        let key = SessionKey::new(canary.to_owned()).unwrap();
        assert_eq!(format!("{key:?}"), "SessionKey(..)");
        assert!(!format!("{key:?}").contains("canary"));
    }

    #[test]
    fn the_limit_admits_up_to_its_size_and_frees_a_slot_on_release() {
        let limit = SessionLimit::new(2, 2);
        let (a, b, c): (SessionId, SessionId, SessionId) = ("a".into(), "b".into(), "c".into());
        assert!(limit.admit(&a) && limit.admit(&b));
        assert!(limit.is_full());
        assert!(!limit.admit(&c));
        limit.release(&a);
        // Releasing twice (a DELETE and the worker's own close) frees one slot, not two.
        limit.release(&a);
        assert!(limit.admit(&c));
        assert!(!limit.admit(&a));
    }

    /// A claim of `caller`'s no session was bound to at its admission.
    fn unbound(caller: &CallerKey) -> SlotClaim {
        SlotClaim {
            caller: Some(caller.clone()),
            bound: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn caller(principal: &str) -> CallerKey {
        CallerKey {
            tenant: Some("t1".into()),
            principal: PrincipalId::from(principal),
        }
    }

    #[test]
    fn a_caller_holds_at_most_its_share_and_gets_it_back_when_a_session_ends() {
        let limit = SessionLimit::new(10, 2);
        let (ada, bob) = (caller("user:ada"), caller("user:bob"));
        // Two claims in flight at once take both of ada's slots before either session exists.
        assert_eq!(limit.claim(Some(&ada)), Ok(()));
        assert_eq!(limit.claim(Some(&ada)), Ok(()));
        assert_eq!(
            limit.claim(Some(&ada)),
            Err(Refusal::CallerFull { max_per_caller: 2 })
        );
        assert_eq!(limit.claim(Some(&bob)), Ok(()));
        // One of ada's requests opened session s1; the other opened none (a refused
        // initialize) and gives its slot back.
        let s1: SessionId = "s1".into();
        assert!(limit.admit(&s1));
        limit.settle_claim(&unbound(&ada), Some(s1.clone()));
        limit.settle_claim(&unbound(&ada), None);
        assert_eq!(limit.claim(Some(&ada)), Ok(()));
        assert_eq!(
            limit.claim(Some(&ada)),
            Err(Refusal::CallerFull { max_per_caller: 2 })
        );
        // A session that ended before its request settled frees the slot too.
        let gone: SessionId = "gone".into();
        limit.settle_claim(&unbound(&ada), Some(gone));
        // Closing s1 frees another.
        limit.release(&s1);
        limit.release(&s1);
        assert_eq!(limit.claim(Some(&ada)), Ok(()));
        assert_eq!(limit.claim(Some(&ada)), Ok(()));
        assert_eq!(
            limit.claim(Some(&ada)),
            Err(Refusal::CallerFull { max_per_caller: 2 })
        );
        // A request dropped before its response (its client went away) gives its slot back.
        let shared = Arc::new(SessionLimit::new(10, 1));
        let dropped = ClaimedSlot::take(&shared, Some(ada.clone())).expect("a free slot");
        assert!(matches!(
            ClaimedSlot::take(&shared, Some(ada.clone())),
            Err(Refusal::CallerFull { max_per_caller: 1 })
        ));
        drop(dropped);
        let settled = ClaimedSlot::take(&shared, Some(ada.clone())).expect("the slot came back");
        let s2: SessionId = "s2".into();
        assert!(shared.admit(&s2));
        settled.settle(Some(s2.clone()));
        assert!(
            ClaimedSlot::take(&shared, Some(ada.clone())).is_err(),
            "a settled slot is the session's until it ends"
        );
        shared.release(&s2);
        assert!(ClaimedSlot::take(&shared, Some(ada.clone())).is_ok());
        // The server's own limit comes first, and an unidentified request counts only there.
        let full = SessionLimit::new(1, 5);
        assert!(full.admit(&"x".into()));
        assert_eq!(
            full.claim(None),
            Err(Refusal::ServerFull { max_sessions: 1 })
        );
        assert_eq!(
            full.claim(Some(&bob)),
            Err(Refusal::ServerFull { max_sessions: 1 })
        );
    }

    /// A session admitted while its request is served is the claiming caller's at once: a
    /// request dropped before its response keeps the slot taken for as long as the session
    /// lives, and its end frees it (found by a review: the slot came back while the session
    /// lived on, so one caller could hold more than its share).
    #[tokio::test]
    async fn a_session_opened_by_a_dropped_request_keeps_its_callers_slot() {
        let ada = caller("user:ada");
        let limit = Arc::new(SessionLimit::new(10, 1));
        let slot = ClaimedSlot::take(&limit, Some(ada.clone())).expect("a free slot");
        let opened: SessionId = "s-dropped".into();
        let admitted = OPENING
            .scope(Arc::clone(&slot.claim), async { limit.admit(&opened) })
            .await;
        assert!(admitted);
        // The request is dropped before its response: the session still holds the slot.
        drop(slot);
        assert!(
            ClaimedSlot::take(&limit, Some(ada.clone())).is_err(),
            "the slot came back while the session lives"
        );
        limit.release(&opened);
        let again = ClaimedSlot::take(&limit, Some(ada.clone())).expect("freed by the end");
        // Settled normally with the same session named, nothing is counted twice.
        let second: SessionId = "s-second".into();
        OPENING
            .scope(Arc::clone(&again.claim), async { limit.admit(&second) })
            .await;
        again.settle(Some(second.clone()));
        limit.release(&second);
        assert!(ClaimedSlot::take(&limit, Some(ada.clone())).is_ok());
    }
}
