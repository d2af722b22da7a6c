//! A typed client for the native AIP HTTP binding ([`super::server`]).
//!
//! Each call sends one envelope and checks that the answer is the envelope type the binding
//! promises; an `aip.core.v1.error` answer becomes [`ClientError::Remote`] with the server's
//! [`ProtocolError`], so callers branch on codes, categories and `retryable` exactly as they
//! would in-process.

use std::collections::VecDeque;
use std::fmt;

use aip_connector_core::ids::{ActionId, ApprovalId};
use aip_connector_core::model::{
    Ack, Action, ActionResult, ApprovalDecision, ApprovalQueryRequest, ApprovalRecordView, Cancel,
    CancelTarget, Envelope, ErrorCategory, Manifest, ManifestRequest, MessageBody, ProtocolError,
    StreamChunk, StreamChunkKind, TransactionQueryRequest, TransactionRequest, TransactionResult,
};
use bytes_stream::ByteStream;
use http::header;

use super::server::{EVENT_STREAM, HEALTH_PATH, MANIFEST_PATH, MESSAGES_PATH, READY_PATH};
use crate::codes;

/// Why a call did not produce the answer it asked for.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an AIP error (authentication, validation, overload, ...).
    #[error("the server refused the message: {} ({})", .0.message, .0.code)]
    Remote(Box<ProtocolError>),
    /// The server could not be reached, or the connection broke.
    #[error("the server could not be reached: {0}")]
    Unreachable(#[source] reqwest::Error),
    /// The server answered something that is not the envelope the binding promises.
    #[error("unexpected answer from the server: {0}")]
    UnexpectedResponse(String),
}

impl ClientError {
    /// The error as an AIP [`ProtocolError`]: the server's own for [`Remote`](Self::Remote),
    /// `transport.unreachable` (retryable) or `transport.unexpected_response` (retryable)
    /// otherwise.
    pub fn to_protocol_error(&self) -> ProtocolError {
        let (code, category) = match self {
            ClientError::Remote(error) => return (**error).clone(),
            ClientError::Unreachable(_) => (codes::TRANSPORT_UNREACHABLE, ErrorCategory::Transport),
            ClientError::UnexpectedResponse(_) => (
                codes::TRANSPORT_UNEXPECTED_RESPONSE,
                ErrorCategory::Temporary,
            ),
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

/// A bearer token that never shows in `Debug` output.
#[derive(Clone)]
struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// What a cancel achieved.
#[derive(Clone, Debug, PartialEq)]
pub enum CancelReply {
    /// The action was executing and was cancelled; its `cancelled` result.
    Cancelled(Box<ActionResult>),
    /// The action is not executing there; the server remembers the cancellation for a while
    /// in case it starts, and a finished action keeps its result.
    Remembered(Ack),
}

/// The client of one AIP server. Cheap to clone (the connection pool is shared).
#[derive(Clone, Debug)]
pub struct AipClient {
    http: reqwest::Client,
    base: String,
    token: Option<Token>,
}

impl AipClient {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base_url: impl Into<String>) -> Self {
        Self::with_http_client(base_url, reqwest::Client::new())
    }

    /// Like [`new`](Self::new), on a configured reqwest client (timeouts, TLS roots, proxies).
    pub fn with_http_client(base_url: impl Into<String>, http: reqwest::Client) -> Self {
        let mut base = base_url.into();
        while base.ends_with('/') {
            base.pop();
        }
        Self {
            http,
            base,
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Token(token.into()));
        self
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(Token(token)) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The server's manifest (`GET /aip/v1/manifest`); `connector` names one of several.
    pub async fn manifest(&self, connector: Option<&str>) -> Result<Manifest, ClientError> {
        let mut request = self.request(reqwest::Method::GET, MANIFEST_PATH);
        if let Some(connector) = connector {
            request = request.query(&[("connector", connector)]);
        }
        let envelope = answer(request.send().await).await?;
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
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(ClientError::Unreachable)?;
        Ok(response.status().is_success())
    }

    /// Sends one envelope and returns the answer envelope as it came (an error envelope is
    /// [`ClientError::Remote`]).
    pub async fn send(&self, envelope: &Envelope) -> Result<Envelope, ClientError> {
        let request = self
            .request(reqwest::Method::POST, MESSAGES_PATH)
            .header(header::CONTENT_TYPE, "application/json")
            .json(envelope);
        answer(request.send().await).await
    }

    /// Runs `action` and returns its result. A failed action is `Ok` with a failed result: the
    /// server ran the pipeline and this is its answer.
    pub async fn invoke(&self, action: Action) -> Result<ActionResult, ClientError> {
        let answer = self
            .send(&Envelope::new(MessageBody::Action(Box::new(action))))
            .await?;
        match answer.body {
            MessageBody::ActionResult(result) => Ok(*result),
            other => Err(unexpected("action_result", &other)),
        }
    }

    /// Runs `action` streaming: the chunks as the server sends them, through the terminal one.
    /// Dropping the stream before the terminal chunk closes the connection, and the server
    /// abandons the action (its key is released for a retry).
    pub async fn invoke_stream(&self, action: Action) -> Result<ChunkReceiver, ClientError> {
        let response = self
            .request(reqwest::Method::POST, MESSAGES_PATH)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, EVENT_STREAM)
            .json(&Envelope::new(MessageBody::Action(Box::new(action))))
            .send()
            .await
            .map_err(ClientError::Unreachable)?;
        let is_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(EVENT_STREAM));
        if !is_stream {
            // A refusal before the stream started comes as an ordinary error envelope.
            let envelope = answer(Ok(response)).await?;
            return Err(unexpected("a stream of chunks", &envelope.body));
        }
        Ok(ChunkReceiver {
            bytes: ByteStream::new(response),
            events: sse::EventBuffer::default(),
            ready: VecDeque::new(),
            finished: false,
        })
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
            MessageBody::ActionResult(result) => Ok(CancelReply::Cancelled(result)),
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

fn unexpected(wanted: &str, got: &MessageBody) -> ClientError {
    ClientError::UnexpectedResponse(format!("wanted {wanted}, got a `{}` body", got.key()))
}

/// Reads an answer envelope; an error envelope becomes [`ClientError::Remote`].
async fn answer(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Envelope, ClientError> {
    let response = sent.map_err(ClientError::Unreachable)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(ClientError::Unreachable)?;
    let envelope: Envelope = serde_json::from_slice(&bytes).map_err(|error| {
        ClientError::UnexpectedResponse(format!(
            "HTTP {status} with a body that is not an AIP envelope: {error}"
        ))
    })?;
    match envelope.body {
        MessageBody::Error(body) => Err(ClientError::Remote(Box::new(body.error))),
        _ => Ok(envelope),
    }
}

/// The chunks of a streamed action, in order, through the terminal one.
#[derive(Debug)]
pub struct ChunkReceiver {
    bytes: ByteStream,
    events: sse::EventBuffer,
    ready: VecDeque<StreamChunk>,
    finished: bool,
}

impl ChunkReceiver {
    /// The next chunk; `Ok(None)` after the terminal one. A connection that ends before the
    /// terminal chunk is [`ClientError::UnexpectedResponse`].
    pub async fn next(&mut self) -> Result<Option<StreamChunk>, ClientError> {
        loop {
            if let Some(chunk) = self.ready.pop_front() {
                if matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error) {
                    self.finished = true;
                    self.ready.clear();
                }
                return Ok(Some(chunk));
            }
            if self.finished {
                return Ok(None);
            }
            let Some(bytes) = self.bytes.next().await.map_err(ClientError::Unreachable)? else {
                return Err(ClientError::UnexpectedResponse(
                    "the stream ended before its terminal chunk".to_owned(),
                ));
            };
            for data in self.events.push(&bytes) {
                let envelope: Envelope = serde_json::from_str(&data).map_err(|error| {
                    ClientError::UnexpectedResponse(format!(
                        "a streamed event is not an envelope: {error}"
                    ))
                })?;
                match envelope.body {
                    MessageBody::StreamChunk(chunk) => self.ready.push_back(chunk),
                    MessageBody::Error(body) => {
                        return Err(ClientError::Remote(Box::new(body.error)));
                    }
                    other => return Err(unexpected("stream_chunk", &other)),
                }
            }
        }
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
        serde_json::from_value(data).map_err(|error| {
            ClientError::UnexpectedResponse(format!("the terminal chunk is not a result: {error}"))
        })
    }
}

mod bytes_stream {
    //! The response body as a sequence of byte chunks.

    /// Reads a response body chunk by chunk.
    #[derive(Debug)]
    pub(super) struct ByteStream(reqwest::Response);

    impl ByteStream {
        pub(super) fn new(response: reqwest::Response) -> Self {
            Self(response)
        }

        pub(super) async fn next(&mut self) -> Result<Option<Vec<u8>>, reqwest::Error> {
            Ok(self.0.chunk().await?.map(|bytes| bytes.to_vec()))
        }
    }
}

mod sse {
    //! Just enough of the server-sent events format to read this binding's streams: events
    //! separated by a blank line, `data:` lines joined by newlines, comments (keep-alives) and
    //! other fields ignored.

    /// Bytes received but not yet forming a whole event.
    #[derive(Debug, Default)]
    pub(super) struct EventBuffer {
        pending: Vec<u8>,
    }

    impl EventBuffer {
        /// Adds `bytes` and returns the data of every event they complete.
        pub(super) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
            self.pending.extend_from_slice(bytes);
            let mut events = Vec::new();
            while let Some((end, separator)) = find_blank_line(&self.pending) {
                let block: Vec<u8> = self.pending.drain(..end + separator).collect();
                let text = String::from_utf8_lossy(&block[..end]);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(|value| value.strip_prefix(' ').unwrap_or(value))
                    .collect();
                if !data.is_empty() {
                    events.push(data.join("\n"));
                }
            }
            events
        }
    }

    /// Where the first blank line starts, and how long the separator is.
    fn find_blank_line(bytes: &[u8]) -> Option<(usize, usize)> {
        (0..bytes.len()).find_map(|i| {
            if bytes[i..].starts_with(b"\r\n\r\n") {
                Some((i, 4))
            } else if bytes[i..].starts_with(b"\n\n") {
                Some((i, 2))
            } else {
                None
            }
        })
    }

    #[cfg(test)]
    mod tests {
        use super::EventBuffer;

        #[test]
        fn events_split_across_reads_are_joined_and_comments_skipped() {
            let mut buffer = EventBuffer::default();
            assert!(
                buffer
                    .push(b"event: stream_chunk\ndata: {\"a\":")
                    .is_empty()
            );
            assert_eq!(
                buffer.push(b"1}\n\n: keep-alive\n\ndata: x\r\n\r\n"),
                ["{\"a\":1}", "x"]
            );
            assert_eq!(buffer.push(b"data: one\ndata: two\n\n"), ["one\ntwo"]);
        }
    }
}
