//! A typed client for the native AIP HTTP binding ([`super::server`]).
//!
//! Each call sends one envelope and checks that the answer is the envelope type the binding
//! promises; an `aip.core.v1.error` answer becomes [`ClientError::Remote`] with the server's
//! [`ProtocolError`], so callers branch on codes, categories and `retryable` exactly as they
//! would in-process.
//!
//! The client trusts nothing about the answer beyond what it checks: bodies and streamed events
//! are read up to [`AipClient::max_response_bytes`], calls end after
//! [`AipClient::call_timeout`] (streams after [`AipClient::stream_timeout`], if set), redirects
//! are not followed (the default HTTP client), the answer of an invoke, a streamed invoke or a
//! cancel must carry the action id it was asked for (a transaction request's is not compared),
//! and streamed chunks must come in increasing sequence.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use aip_connector_core::ids::{ActionId, ApprovalId};
use aip_connector_core::model::{
    Ack, AckStatus, Action, ActionResult, ActionResultStatus, ApprovalDecision,
    ApprovalQueryRequest, ApprovalRecordView, Cancel, CancelTarget, Envelope, ErrorCategory,
    Manifest, ManifestRequest, MessageBody, ProtocolError, StreamChunk, StreamChunkKind,
    TransactionQueryRequest, TransactionRequest, TransactionResult,
};
use bytes_stream::ByteStream;
use http::header::{self, AUTHORIZATION, HeaderValue};

use super::server::{EVENT_STREAM, HEALTH_PATH, MANIFEST_PATH, MESSAGES_PATH, READY_PATH};
use crate::codes;

/// Why a call did not produce the answer it asked for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an AIP error (authentication, validation, overload, ...).
    #[error("the server refused the message: {} ({})", .0.message, .0.code)]
    Remote(Box<ProtocolError>),
    /// The server could not be reached, or the connection broke.
    #[error("the server could not be reached: {0}")]
    Unreachable(#[source] reqwest::Error),
    /// The server answered something that is not the envelope the binding promises: not an
    /// envelope, the wrong one, an answer about another action, chunks out of sequence, a body
    /// or event over [`AipClient::max_response_bytes`].
    #[error("unexpected answer from the server: {0}")]
    UnexpectedResponse(String),
    /// A stream did not end within [`AipClient::stream_timeout`]. (A unary call over
    /// [`AipClient::call_timeout`] is [`Unreachable`](Self::Unreachable) with a timeout error,
    /// as reqwest reports it.) The action may still run on the server.
    #[error("the stream did not end within {0:?}")]
    TimedOut(Duration),
}

impl ClientError {
    /// The error as an AIP [`ProtocolError`]: the server's own for [`Remote`](Self::Remote);
    /// otherwise retryable `transport.timeout` (category `temporary`, as the server sends it)
    /// for a call or stream over its timeout, `transport.unreachable` for a connection that
    /// failed or broke, `transport.unexpected_response` for an answer that is not the one the
    /// binding promises.
    pub fn to_protocol_error(&self) -> ProtocolError {
        let (code, category) = match self {
            ClientError::Remote(error) => return (**error).clone(),
            ClientError::Unreachable(error) if error.is_timeout() => {
                (codes::TRANSPORT_TIMEOUT, ErrorCategory::Temporary)
            }
            ClientError::Unreachable(_) => (codes::TRANSPORT_UNREACHABLE, ErrorCategory::Transport),
            ClientError::UnexpectedResponse(_) => (
                codes::TRANSPORT_UNEXPECTED_RESPONSE,
                ErrorCategory::Temporary,
            ),
            ClientError::TimedOut(_) => (codes::TRANSPORT_TIMEOUT, ErrorCategory::Temporary),
        };
        super::error(code, self.to_string(), category, true)
    }

    /// The server's error code, for a [`Remote`](Self::Remote) error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Remote(error) => Some(&error.code),
            _ => None,
        }
    }
}

/// A bearer token that never shows in `Debug` output: the `Authorization` value, built once
/// from a buffer that is wiped, marked sensitive and shared by every request. Not wiped: the
/// `HeaderValue` itself, which `http` owns for the client's lifetime, and the copies reqwest and
/// hyper make of it while sending.
#[derive(Clone)]
enum Token {
    Header(HeaderValue),
    /// Not a valid header value; kept, wiped on drop, for reqwest to refuse at send.
    Unusable(zeroize::Zeroizing<String>),
}

impl Token {
    fn new(token: String) -> Self {
        let token = zeroize::Zeroizing::new(token);
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(7 + token.len()));
        bytes.extend_from_slice(b"Bearer ");
        bytes.extend_from_slice(token.as_bytes());
        match HeaderValue::from_bytes(&bytes) {
            Ok(mut value) => {
                value.set_sensitive(true);
                Token::Header(value)
            }
            Err(_) => Token::Unusable(token),
        }
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// What a cancel achieved.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CancelReply {
    /// The action was executing there and the cancellation reached it: the result it settled
    /// with. Normally `cancelled`, but a handler that finished in the poll that saw the
    /// cancellation keeps its success, so read the result's `status`.
    Cancelled(Box<ActionResult>),
    /// An `accepted` ack, which says nothing of the outcome: the action is not executing there
    /// (the server remembers the cancellation for a while in case it starts, and a finished
    /// action keeps its result), or the cancellation reached it and it had not settled within
    /// the server's `cancel_grace` (the ack's `reason` says which). The action's own request,
    /// or a resend under its idempotency key, tells how it ended.
    Remembered(Ack),
    /// A `rejected` ack (this SDK's servers send one only for this): the action is not
    /// executing there, and an execution of it ended (within the last minute) with a retryable
    /// failure. The cancellation came too late for it and was not remembered, so it does not
    /// cancel a retry: cancel the retry once it runs (docs/host-runtime.md §7.2).
    TooLate(Ack),
}

/// The client of one AIP server. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct AipClient {
    http: reqwest::Client,
    base: String,
    token: Option<Token>,
    call_timeout: Option<Duration>,
    stream_timeout: Option<Duration>,
    max_response_bytes: usize,
}

/// `AipClient::call_timeout` unless set: longer than the server's default request timeout
/// (90 s), so the server's own `transport.timeout` answer arrives first.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the default HTTP client waits for a connection.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// `AipClient::max_response_bytes` unless set.
const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

impl fmt::Debug for AipClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AipClient")
            .field("base", &redacted_url(&self.base))
            .field("token", &self.token)
            .field("call_timeout", &self.call_timeout)
            .field("stream_timeout", &self.stream_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

/// `url` without the password (and user name) it may carry: reqwest sends them as Basic
/// credentials, so they are secrets like the bearer token.
fn redacted_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("redacted");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "<not a URL>".to_owned(),
    }
}

impl AipClient {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:8080`), on an HTTP client
    /// that follows no redirect (an action envelope re-posted to wherever a server points would
    /// leave with everything in it) and gives up connecting after 10 s.
    pub fn new(base_url: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(DEFAULT_CONNECT_TIMEOUT)
            .build()
            // Building fails only where the TLS backend cannot start, as `Client::new` would.
            .unwrap_or_else(|_| reqwest::Client::new());
        Self::with_http_client(base_url, http)
    }

    /// Like [`new`](Self::new), on a configured reqwest client (TLS roots, proxies, timeouts).
    /// Its redirect policy is used as it is: configure `redirect::Policy::none()` unless the
    /// server is known to redirect.
    pub fn with_http_client(base_url: impl Into<String>, http: reqwest::Client) -> Self {
        let mut base = base_url.into();
        while base.ends_with('/') {
            base.pop();
        }
        Self {
            http,
            base,
            token: None,
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
            stream_timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Token::new(token.into()));
        self
    }

    /// How long a call that is not a stream may take, answer read included (default 120 s;
    /// `None` waits as long as the server takes). Over it, the call is
    /// [`ClientError::Unreachable`] with reqwest's timeout error; the action may still run.
    pub fn call_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long a stream may take from its request to its terminal chunk (default `None`: the
    /// server's action deadline ends it). Over it, [`ChunkReceiver::next`] is
    /// [`ClientError::TimedOut`]; the connection stays open until the receiver is dropped
    /// (which makes the server abandon the action), and a later `next` may still return chunks
    /// already received.
    pub fn stream_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stream_timeout = timeout;
        self
    }

    /// The largest answer body, and the largest streamed event, the client reads (default
    /// 16 MiB); a larger one is [`ClientError::UnexpectedResponse`].
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(Token::Header(value)) => request.header(AUTHORIZATION, value.clone()),
            Some(Token::Unusable(token)) => request.bearer_auth(token.as_str()),
            None => request,
        }
    }

    /// A request of a unary call: [`call_timeout`](Self::call_timeout) applies.
    fn call(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.request(method, path);
        match self.call_timeout {
            Some(timeout) => request.timeout(timeout),
            None => request,
        }
    }

    /// The server's manifest (`GET /aip/v1/manifest`); `connector` names one of several.
    pub async fn manifest(&self, connector: Option<&str>) -> Result<Manifest, ClientError> {
        let mut request = self.call(reqwest::Method::GET, MANIFEST_PATH);
        if let Some(connector) = connector {
            request = request.query(&[("connector", connector)]);
        }
        let envelope = self.answer(request.send().await).await?;
        match envelope.body {
            MessageBody::Manifest(manifest) => Ok(*manifest),
            other => Err(unexpected("manifest", &other)),
        }
    }

    /// Whether `GET /health` answers `200`.
    pub async fn health(&self) -> Result<bool, ClientError> {
        self.probe(HEALTH_PATH).await
    }

    /// Whether `GET /ready` answers `200` (false while the server drains).
    pub async fn ready(&self) -> Result<bool, ClientError> {
        self.probe(READY_PATH).await
    }

    async fn probe(&self, path: &str) -> Result<bool, ClientError> {
        let response = self
            .call(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(ClientError::Unreachable)?;
        Ok(response.status().is_success())
    }

    /// Sends one envelope and returns the answer envelope as it came (an error envelope is
    /// [`ClientError::Remote`]).
    pub async fn send(&self, envelope: &Envelope) -> Result<Envelope, ClientError> {
        let request = self
            .call(reqwest::Method::POST, MESSAGES_PATH)
            .header(header::CONTENT_TYPE, "application/json")
            .json(envelope);
        self.answer(request.send().await).await
    }

    /// Runs `action` and returns its result. A failed action is `Ok` with a failed result: the
    /// server ran the pipeline and this is its answer.
    pub async fn invoke(&self, action: Action) -> Result<ActionResult, ClientError> {
        let id = action.id.clone();
        let answer = self
            .send(&Envelope::new(MessageBody::Action(Box::new(action))))
            .await?;
        match answer.body {
            MessageBody::ActionResult(result) => of_action(*result, &id),
            other => Err(unexpected("action_result", &other)),
        }
    }

    /// Runs `action` streaming: the chunks as the server sends them, through the terminal one.
    /// Dropping the stream before the terminal chunk closes the connection, and the server
    /// abandons the action (its key is released for a retry when the contract's `retry_safety`
    /// allows one).
    pub async fn invoke_stream(&self, action: Action) -> Result<ChunkReceiver, ClientError> {
        let id = action.id.clone();
        let deadline = self
            .stream_timeout
            .map(|timeout| (tokio::time::Instant::now() + timeout, timeout));
        let sent = self
            .request(reqwest::Method::POST, MESSAGES_PATH)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, EVENT_STREAM)
            .json(&Envelope::new(MessageBody::Action(Box::new(action))))
            .send();
        let response = within(deadline, sent)
            .await?
            .map_err(ClientError::Unreachable)?;
        let is_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(EVENT_STREAM));
        let mut receiver = ChunkReceiver {
            bytes: ByteStream::new(response),
            events: sse::EventBuffer::new(self.max_response_bytes),
            ready: VecDeque::new(),
            finished: false,
            action_id: id,
            last_sequence: None,
            deadline,
        };
        if !is_stream {
            // A refusal before the stream started comes as an ordinary error envelope. A server
            // that answered with the result itself ran the action: that answer is not lost,
            // it becomes the stream's one terminal chunk.
            let response = std::mem::replace(&mut receiver.bytes, ByteStream::empty())
                .into_response()
                .expect("the receiver was just built on the response");
            let envelope = within(deadline, self.answer(Ok(response))).await??;
            let result = match envelope.body {
                MessageBody::ActionResult(result) => of_action(*result, &receiver.action_id)?,
                other => return Err(unexpected("a stream of chunks", &other)),
            };
            let kind = if result.status == ActionResultStatus::Failed {
                StreamChunkKind::Error
            } else {
                StreamChunkKind::Done
            };
            let data = serde_json::to_value(&result).map_err(|error| {
                ClientError::UnexpectedResponse(format!("the result does not serialize: {error}"))
            })?;
            receiver.queue(StreamChunk {
                action_id: result.action_id,
                sequence: 0,
                kind,
                data: Some(data),
                part: None,
            })?;
        }
        Ok(receiver)
    }

    /// Cancels an action this caller runs.
    pub async fn cancel(&self, action_id: &ActionId) -> Result<CancelReply, ClientError> {
        let cancel = Cancel {
            target: CancelTarget::Action(action_id.clone()),
            reason: None,
        };
        let answer = self
            .send(&Envelope::new(MessageBody::Cancel(cancel)))
            .await?;
        match answer.body {
            MessageBody::ActionResult(result) => Ok(CancelReply::Cancelled(Box::new(of_action(
                *result, action_id,
            )?))),
            MessageBody::Ack(ack) if ack.status == AckStatus::Rejected => {
                Ok(CancelReply::TooLate(ack))
            }
            MessageBody::Ack(ack) => Ok(CancelReply::Remembered(ack)),
            other => Err(unexpected("action_result or ack", &other)),
        }
    }

    /// Records an approval decision as the authenticated caller.
    pub async fn decide(
        &self,
        decision: ApprovalDecision,
    ) -> Result<ApprovalRecordView, ClientError> {
        let body = MessageBody::ApprovalDecision(Box::new(decision));
        self.approval_answer(self.send(&Envelope::new(body)).await?)
    }

    /// Reads an approval of the caller's tenant.
    pub async fn approval(&self, id: &ApprovalId) -> Result<ApprovalRecordView, ClientError> {
        let body = MessageBody::ApprovalQueryRequest(ApprovalQueryRequest {
            approval_id: id.clone(),
        });
        self.approval_answer(self.send(&Envelope::new(body)).await?)
    }

    fn approval_answer(&self, answer: Envelope) -> Result<ApprovalRecordView, ClientError> {
        match answer.body {
            MessageBody::ApprovalRecordView(view) => Ok(*view),
            other => Err(unexpected("approval_record_view", &other)),
        }
    }

    /// Runs a transaction step (`aip.transaction.v1.request`).
    pub async fn transact(
        &self,
        request: TransactionRequest,
    ) -> Result<TransactionResult, ClientError> {
        let body = MessageBody::TransactionRequest(Box::new(request));
        match self.send(&Envelope::new(body)).await?.body {
            MessageBody::TransactionResult(result) => Ok(*result),
            other => Err(unexpected("transaction_result", &other)),
        }
    }

    /// Reads a transaction of the caller's tenant.
    pub async fn transaction(
        &self,
        query: TransactionQueryRequest,
    ) -> Result<TransactionResult, ClientError> {
        let body = MessageBody::TransactionQueryRequest(query);
        match self.send(&Envelope::new(body)).await?.body {
            MessageBody::TransactionView(view) => Ok(*view),
            other => Err(unexpected("transaction_view", &other)),
        }
    }

    /// Asks for the manifest with a `manifest_request` envelope (a filter on capability ids
    /// picks the connector holding them).
    pub async fn manifest_request(
        &self,
        request: ManifestRequest,
    ) -> Result<Manifest, ClientError> {
        let body = MessageBody::ManifestRequest(request);
        match self.send(&Envelope::new(body)).await?.body {
            MessageBody::Manifest(manifest) => Ok(*manifest),
            other => Err(unexpected("manifest", &other)),
        }
    }
}

impl AipClient {
    /// Reads an answer envelope, at most [`max_response_bytes`](Self::max_response_bytes) of
    /// it; an error envelope becomes [`ClientError::Remote`], and any other envelope must come
    /// with a success status.
    async fn answer(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<Envelope, ClientError> {
        let mut response = sent.map_err(ClientError::Unreachable)?;
        let status = response.status();
        let limit = self.max_response_bytes;
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(too_large(status, limit));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(ClientError::Unreachable)? {
            if bytes.len() + chunk.len() > limit {
                return Err(too_large(status, limit));
            }
            bytes.extend_from_slice(&chunk);
        }
        let envelope: Envelope = serde_json::from_slice(&bytes).map_err(|error| {
            ClientError::UnexpectedResponse(format!(
                "HTTP {status} with a body that is not an AIP envelope: {error}"
            ))
        })?;
        match envelope.body {
            MessageBody::Error(body) => Err(ClientError::Remote(Box::new(body.error))),
            // The binding answers every non-error envelope with a success status; anything else
            // is a proxy or another server speaking, whatever its body says.
            ref body if !status.is_success() => Err(ClientError::UnexpectedResponse(format!(
                "HTTP {status} with a `{}` body (the binding sends those with a success status)",
                body.key()
            ))),
            _ => Ok(envelope),
        }
    }
}

/// `future`, unless `deadline` (and its timeout) passes first: [`ClientError::TimedOut`].
async fn within<T>(
    deadline: Option<(tokio::time::Instant, Duration)>,
    future: impl std::future::Future<Output = T>,
) -> Result<T, ClientError> {
    match deadline {
        Some((deadline, timeout)) => tokio::time::timeout_at(deadline, future)
            .await
            .map_err(|_| ClientError::TimedOut(timeout)),
        None => Ok(future.await),
    }
}

fn too_large(status: http::StatusCode, limit: usize) -> ClientError {
    ClientError::UnexpectedResponse(format!(
        "HTTP {status} with a body over the client's limit of {limit} bytes"
    ))
}

fn unexpected(wanted: &str, got: &MessageBody) -> ClientError {
    ClientError::UnexpectedResponse(format!("wanted {wanted}, got a `{}` body", got.key()))
}

/// `result`, if it is the result of action `id`: a server answering about another action is not
/// answering this call.
fn of_action(result: ActionResult, id: &ActionId) -> Result<ActionResult, ClientError> {
    if result.action_id == *id {
        Ok(result)
    } else {
        Err(ClientError::UnexpectedResponse(format!(
            "asked about action `{id}`, answered about action `{}`",
            result.action_id
        )))
    }
}

/// The chunks of a streamed action, in order, through the terminal one.
#[derive(Debug)]
pub struct ChunkReceiver {
    bytes: ByteStream,
    events: sse::EventBuffer,
    ready: VecDeque<StreamChunk>,
    /// A terminal chunk is queued or was handed out: nothing after it is read.
    finished: bool,
    /// The streamed action: every chunk must be about it.
    action_id: ActionId,
    /// The sequence of the last chunk queued; the next must be greater.
    last_sequence: Option<u64>,
    /// When the stream must have ended ([`AipClient::stream_timeout`]), and that timeout.
    deadline: Option<(tokio::time::Instant, Duration)>,
}

impl ChunkReceiver {
    /// The next chunk; `Ok(None)` after the terminal one. A connection that ends before the
    /// terminal chunk, a chunk about another action or out of sequence, and an event over
    /// [`AipClient::max_response_bytes`] are [`ClientError::UnexpectedResponse`]; a stream
    /// still running at [`AipClient::stream_timeout`] is [`ClientError::TimedOut`].
    pub async fn next(&mut self) -> Result<Option<StreamChunk>, ClientError> {
        loop {
            if let Some(chunk) = self.ready.pop_front() {
                return Ok(Some(chunk));
            }
            if self.finished {
                return Ok(None);
            }
            let read = within(self.deadline, self.bytes.next()).await?;
            let Some(bytes) = read.map_err(ClientError::Unreachable)? else {
                return Err(ClientError::UnexpectedResponse(
                    "the stream ended before its terminal chunk".to_owned(),
                ));
            };
            let events = self.events.push(&bytes).map_err(|limit| {
                ClientError::UnexpectedResponse(format!(
                    "a streamed event is over the client's limit of {limit} bytes"
                ))
            })?;
            for data in events {
                let envelope: Envelope = serde_json::from_str(&data).map_err(|error| {
                    ClientError::UnexpectedResponse(format!(
                        "a streamed event is not an envelope: {error}"
                    ))
                })?;
                match envelope.body {
                    MessageBody::StreamChunk(chunk) => self.queue(chunk)?,
                    MessageBody::Error(body) => {
                        return Err(ClientError::Remote(Box::new(body.error)));
                    }
                    other => return Err(unexpected("stream_chunk", &other)),
                }
                // Whatever follows the terminal chunk is not read: the result is in hand.
                if self.finished {
                    break;
                }
            }
        }
    }

    /// Queues `chunk` after checking that it belongs to this stream, in order.
    fn queue(&mut self, chunk: StreamChunk) -> Result<(), ClientError> {
        if chunk.action_id != self.action_id {
            return Err(ClientError::UnexpectedResponse(format!(
                "a chunk of action `{}` in the stream of action `{}`",
                chunk.action_id, self.action_id
            )));
        }
        if self
            .last_sequence
            .is_some_and(|last| chunk.sequence <= last)
        {
            return Err(ClientError::UnexpectedResponse(format!(
                "chunk {} after chunk {}: a stream's sequence only increases",
                chunk.sequence,
                self.last_sequence.unwrap_or_default()
            )));
        }
        self.last_sequence = Some(chunk.sequence);
        if matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error) {
            self.finished = true;
        }
        self.ready.push_back(chunk);
        Ok(())
    }

    /// Every remaining chunk, through the terminal one.
    pub async fn collect(mut self) -> Result<Vec<StreamChunk>, ClientError> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await? {
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    /// The action result the terminal chunk carries, reading the stream to its end.
    pub async fn result(mut self) -> Result<ActionResult, ClientError> {
        let mut last = None;
        while let Some(chunk) = self.next().await? {
            last = Some(chunk);
        }
        let data = last.and_then(|chunk| chunk.data).ok_or_else(|| {
            ClientError::UnexpectedResponse("the terminal chunk carries no result".to_owned())
        })?;
        let result = serde_json::from_value(data).map_err(|error| {
            ClientError::UnexpectedResponse(format!("the terminal chunk is not a result: {error}"))
        })?;
        of_action(result, &self.action_id)
    }
}

mod bytes_stream {
    //! The response body as a sequence of byte chunks.

    /// Reads a response body chunk by chunk; an empty one has no response behind it.
    #[derive(Debug)]
    pub(super) struct ByteStream(Option<reqwest::Response>);

    impl ByteStream {
        pub(super) fn new(response: reqwest::Response) -> Self {
            Self(Some(response))
        }

        /// A stream that has ended.
        pub(super) fn empty() -> Self {
            Self(None)
        }

        pub(super) fn into_response(self) -> Option<reqwest::Response> {
            self.0
        }

        pub(super) async fn next(&mut self) -> Result<Option<axum::body::Bytes>, reqwest::Error> {
            match &mut self.0 {
                Some(response) => response.chunk().await,
                None => Ok(None),
            }
        }
    }
}

mod sse {
    //! Just enough of the server-sent events format to read this binding's streams: lines end
    //! with LF, CRLF or CR; a blank line ends an event; `data:` lines are joined by newlines;
    //! comments (keep-alives) and other fields are ignored. Each byte is looked at once, and an
    //! event is bounded, so a server cannot make the client rescan or hold without limit.

    /// The part of the stream not yet forming a whole event.
    #[derive(Debug)]
    pub(super) struct EventBuffer {
        /// The line being read.
        line: Vec<u8>,
        /// The `data:` lines of the event being read, joined by newlines.
        data: Vec<u8>,
        /// The event being read has a `data:` line (possibly empty).
        has_data: bool,
        /// The last byte was a CR, so an LF right after it ends nothing more.
        after_cr: bool,
        /// The most bytes one event (its lines, fields and comments included) may take.
        max_event_bytes: usize,
        /// Bytes of the event being read so far.
        event_bytes: usize,
    }

    impl EventBuffer {
        pub(super) fn new(max_event_bytes: usize) -> Self {
            Self {
                line: Vec::new(),
                data: Vec::new(),
                has_data: false,
                after_cr: false,
                max_event_bytes,
                event_bytes: 0,
            }
        }

        /// Adds `bytes` and returns the data of every event they complete; `Err(limit)` once an
        /// event grows past the limit.
        pub(super) fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, usize> {
            let mut events = Vec::new();
            for &byte in bytes {
                let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
                match byte {
                    b'\n' if after_cr => {}
                    b'\n' | b'\r' => {
                        if let Some(event) = self.end_line() {
                            events.push(event);
                        }
                    }
                    _ => {
                        self.event_bytes += 1;
                        if self.event_bytes > self.max_event_bytes {
                            return Err(self.max_event_bytes);
                        }
                        self.line.push(byte);
                    }
                }
            }
            Ok(events)
        }

        /// Ends the current line; a blank one ends the event, whose data it returns.
        fn end_line(&mut self) -> Option<String> {
            if self.line.is_empty() {
                self.event_bytes = 0;
                if !std::mem::take(&mut self.has_data) {
                    return None;
                }
                let data = std::mem::take(&mut self.data);
                return Some(String::from_utf8_lossy(&data).into_owned());
            }
            if let Some(value) = self.line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            self.line.clear();
            None
        }
    }

    #[cfg(test)]
    mod tests {
        use super::EventBuffer;

        #[test]
        fn events_split_across_reads_are_joined_and_comments_skipped() {
            let mut buffer = EventBuffer::new(1024);
            assert!(
                buffer
                    .push(b"event: stream_chunk\ndata: {\"a\":")
                    .unwrap()
                    .is_empty()
            );
            assert_eq!(
                buffer
                    .push(b"1}\n\n: keep-alive\n\ndata: x\r\n\r\n")
                    .unwrap(),
                ["{\"a\":1}", "x"]
            );
            assert_eq!(
                buffer.push(b"data: one\ndata: two\n\n").unwrap(),
                ["one\ntwo"]
            );
        }

        /// The format allows CR alone as a line end, and a CRLF split across two reads.
        #[test]
        fn every_line_ending_ends_lines() {
            let mut buffer = EventBuffer::new(1024);
            assert_eq!(
                buffer.push(b"data: a\r\rdata: b\n\r\n").unwrap(),
                ["a", "b"]
            );
            assert!(buffer.push(b"data: c\r").unwrap().is_empty());
            assert_eq!(buffer.push(b"\n\r\n").unwrap(), ["c"]);
        }

        /// Found by a hostile audit: an event without an end was kept and rescanned without
        /// limit (quadratic in its size).
        #[test]
        fn an_event_over_the_limit_is_refused() {
            let mut buffer = EventBuffer::new(16);
            assert!(buffer.push(b"data: 0123456789").unwrap().is_empty());
            assert_eq!(buffer.push(b"abcdef"), Err(16));
            // Keep-alives between events do not add up: the count starts again per event.
            let mut buffer = EventBuffer::new(16);
            for _ in 0..100 {
                assert!(buffer.push(b": keep-alive\n\n").unwrap().is_empty());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Token;

    #[test]
    fn a_token_is_one_sensitive_authorization_value_and_never_shown() {
        let Token::Header(value) = Token::new("tok_123".to_owned()) else {
            panic!("a valid token is a header value");
        };
        assert_eq!(value, "Bearer tok_123");
        assert!(value.is_sensitive());
        // A token that cannot be a header value is kept for reqwest to refuse at send.
        let unusable = Token::new("bad\nvalue".to_owned());
        assert!(matches!(unusable, Token::Unusable(_)));
        assert_eq!(format!("{unusable:?}"), "Token(<redacted>)");
    }
}
