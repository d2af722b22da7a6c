//! A cap on the live MCP sessions of one router.
//!
//! rmcp's `LocalSessionManager` keeps each session (a task and its channels) until the client
//! deletes it or it has been idle for its keep-alive (5 minutes by default). Time alone does
//! not bound how many sessions an authenticated client can open inside that window, so the
//! router counts them: [`BoundedSessions`] wraps the session manager and admits a session only
//! while fewer than the limit are live, and [`refuse_when_full`] answers a request that would
//! open one `503 transport.overloaded` before it reaches rmcp.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::Stream;
use http::{HeaderValue, Method, StatusCode, header};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use aip_connector_core::model::ErrorCategory;

use crate::codes;

/// The header that names the session of a request; a POST without it opens a session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Seconds a client refused for a full session table is told to wait (`Retry-After`).
const RETRY_AFTER_SECONDS: &str = "1";

/// The live sessions of one router and how many it admits.
#[derive(Debug)]
pub(super) struct SessionLimit {
    max_sessions: usize,
    live: Mutex<HashSet<SessionId>>,
}

impl SessionLimit {
    pub(super) fn new(max_sessions: usize) -> Self {
        Self {
            max_sessions,
            live: Mutex::new(HashSet::new()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashSet<SessionId>> {
        // The set is consistent after every operation, so a panic elsewhere cannot leave it
        // half-written.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_full(&self) -> bool {
        self.live().len() >= self.max_sessions
    }

    /// Counts `id` as live; `false` (and nothing counted) when the limit is reached.
    fn admit(&self, id: &SessionId) -> bool {
        let mut live = self.live();
        if live.len() >= self.max_sessions {
            return false;
        }
        live.insert(id.clone());
        true
    }

    fn release(&self, id: &SessionId) {
        self.live().remove(id);
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
    /// reached meanwhile (a race [`refuse_when_full`] could not see).
    async fn admit_or_close(&self, id: &SessionId) -> Result<(), BoundedSessionsError<M::Error>> {
        if self.limit.admit(id) {
            return Ok(());
        }
        // Already refusing: a failure to close is the inner manager's to report, not ours.
        let _ = self.inner.close_session(id).await;
        Err(BoundedSessionsError::Full {
            max_sessions: self.limit.max_sessions,
        })
    }
}

impl<M: SessionManager> SessionManager for BoundedSessions<M> {
    type Error = BoundedSessionsError<M::Error>;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.limit.is_full() {
            return Err(BoundedSessionsError::Full {
                max_sessions: self.limit.max_sessions,
            });
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

/// Middleware: a POST that would open a session while the limit is reached is answered
/// `503 transport.overloaded` with `Retry-After`, as an `aip.core.v1.error` envelope. Requests
/// of open sessions pass.
pub(super) async fn refuse_when_full(
    State(limit): State<Arc<SessionLimit>>,
    request: Request,
    next: Next,
) -> Response {
    let opens_session =
        request.method() == Method::POST && !request.headers().contains_key(SESSION_HEADER);
    if !(opens_session && limit.is_full()) {
        return next.run(request).await;
    }
    let mut error = crate::serve::error(
        codes::TRANSPORT_OVERLOADED,
        format!(
            "this server already holds its limit of {} MCP sessions; retry later",
            limit.max_sessions
        ),
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
    fn the_limit_admits_up_to_its_size_and_frees_a_slot_on_release() {
        let limit = SessionLimit::new(2);
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
}
