//! Streaming: the handler's chunks in strictly increasing sequence, then exactly one terminal
//! chunk. The channel is bounded, so a slow consumer slows the handler down (back-pressure), and
//! the sink refuses everything after the terminal chunk.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aip_connector_core::ids::{ActionId, ApprovalId};
use aip_connector_core::model::{
    Action, ActionMode, ActionResult, ActionResultStatus, ConnectorFailure, ConnectorOperation,
    ErrorCategory, StreamChunk, StreamChunkKind,
};
use futures_util::task::AtomicWaker;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Mutex, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::HostInner;
use super::context::TrustedContext;
use super::pipeline::{self, Options};
use crate::codes;
use crate::invocation::{BoxFuture, ChunkSink};
use crate::store::ApprovalRecord;

/// The consumer side of a streaming invocation.
#[derive(Debug)]
pub struct ChunkStream {
    receiver: mpsc::Receiver<StreamChunk>,
    /// Turns `true` once the action has its result (before the terminal chunk is queued,
    /// which waits for the consumer). Read by the HTTP binding only.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    settled: watch::Receiver<bool>,
    /// Ends the host's task if it still waits to queue the terminal chunk.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    give_up: CancellationToken,
    /// Told when this stream is dropped: the action is abandoned when it reaches its handler,
    /// or at once if the handler waits.
    consumer: Arc<Consumer>,
}

/// Whether a stream's consumer is still there, shared by the [`ChunkStream`] and its sink.
#[derive(Debug, Default)]
struct Consumer {
    gone: AtomicBool,
    /// The pipeline's task, while the handler waits.
    waker: AtomicWaker,
}

impl Consumer {
    /// The consumer went away (or gave up on the action): the pipeline abandons it.
    fn leave(&self) {
        self.gone.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    fn poll_gone(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.is_gone() {
            return std::task::Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // Gone between the check and the registration: its wake may have found no waker.
        if self.is_gone() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

/// Dropping the stream before its terminal chunk abandons the action (found by a hostile
/// review: a consumer that left before the handler started, or while it waited without
/// sending, was never noticed, and the handler ran for nobody). After the terminal chunk the
/// action has settled and this changes nothing.
impl Drop for ChunkStream {
    fn drop(&mut self) {
        self.consumer.leave();
    }
}

impl ChunkStream {
    /// Resolves once the action has its result, whether or not the consumer has read the
    /// chunks up to its terminal one (or when the host's task is gone).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn settled(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut settled = self.settled.clone();
        async move {
            let _ = settled.wait_for(|settled| *settled).await;
        }
    }

    /// A handle that ends the host's task when it still waits for room to queue the terminal
    /// chunk: for a consumer that will not read the rest (the HTTP binding's watchdog). The
    /// action has its result by then; only the chunks still queued are given up.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn give_up_handle(&self) -> CancellationToken {
        self.give_up.clone()
    }

    /// Abandons the action as a consumer that went away would (`action.abandoned`): at once if
    /// its handler waits, else when it reaches its handler, which then never runs. This stream
    /// still reads the chunks up to the terminal one. For the HTTP binding's drain.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn abandon(&self) {
        self.consumer.leave();
    }

    /// The next chunk, or `None` after the terminal chunk.
    pub async fn next(&mut self) -> Option<StreamChunk> {
        self.receiver.recv().await
    }

    /// Every remaining chunk, through the terminal one.
    pub async fn collect(mut self) -> Vec<StreamChunk> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await {
            chunks.push(chunk);
        }
        chunks
    }

    /// What the handler sent through its `StreamSink<T>`, decoded: the values of the `data`
    /// chunks as `T`, in order, and the action's result from the terminal chunk. Chunks of
    /// other kinds (`progress`, `tool`, ...) are skipped. Reads the stream to its end, so the
    /// action settles whatever the outcome.
    ///
    /// ```
    /// # use aip_connector::host::{Host, StreamDataError, TrustedContext};
    /// # use aip_connector::model::{Action, ActionResultStatus, Principal, PrincipalKind};
    /// # use aip_connector::prelude::*;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Query {
    /// #     text: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Hit {
    /// #     title: String,
    /// # }
    /// # #[derive(Serialize, JsonSchema)]
    /// # struct Summary {
    /// #     hits: u32,
    /// # }
    /// # struct Search;
    /// # #[connector(id = "search")]
    /// # impl Search {
    /// #     /// Streams the documents that match.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    /// #     async fn find(&self, input: Query, hits: StreamSink<Hit>) -> Result<Summary, ConnectorFailure> {
    /// #         hits.send(Hit { title: input.text }).await?;
    /// #         Ok(Summary { hits: 1 })
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), StreamDataError> {
    /// # let host = Host::builder().connector(Search).build().unwrap();
    /// # let caller = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "example");
    /// # let action = Action::new("cap:search:find", serde_json::json!({ "text": "runbook" }));
    /// let (hits, result) = host.invoke_stream(action, caller).collect_data::<Hit>().await?;
    /// assert_eq!(result.status, ActionResultStatus::Completed);
    /// # assert_eq!(hits.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn collect_data<T: DeserializeOwned>(
        mut self,
    ) -> Result<(Vec<T>, ActionResult), StreamDataError> {
        let mut items = Vec::new();
        let mut first_error = None;
        while let Some(chunk) = self.next().await {
            match chunk.kind {
                StreamChunkKind::Data => {
                    if first_error.is_some() {
                        continue;
                    }
                    match serde_json::from_value(chunk.data.unwrap_or(Value::Null)) {
                        Ok(item) => items.push(item),
                        Err(error) => {
                            first_error = Some(StreamDataError::Decode {
                                sequence: chunk.sequence,
                                error,
                            });
                        }
                    }
                }
                StreamChunkKind::Done | StreamChunkKind::Error => {
                    if let Some(error) = first_error {
                        return Err(error);
                    }
                    let result = chunk
                        .data
                        .and_then(|data| serde_json::from_value(data).ok())
                        .ok_or(StreamDataError::Unterminated)?;
                    return Ok((items, result));
                }
                _ => {}
            }
        }
        Err(first_error.unwrap_or(StreamDataError::Unterminated))
    }

    /// The action result the terminal chunk carries, reading (and dropping) the chunks before
    /// it, as `serve::ChunkReceiver::result` does over HTTP.
    /// `None` only if the stream ended without a terminal chunk (the host's task was aborted).
    pub async fn result(mut self) -> Option<ActionResult> {
        let mut last = None;
        while let Some(chunk) = self.next().await {
            last = Some(chunk);
        }
        last.filter(|chunk| matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error))
            .and_then(|chunk| chunk.data)
            .and_then(|data| serde_json::from_value(data).ok())
    }
}

/// Why [`ChunkStream::collect_data`] has no items and result to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamDataError {
    /// A `data` chunk's value is not a `T` (the stream was read to its end all the same).
    #[error(
        "the data chunk at sequence {sequence} does not decode into the requested type: {error}"
    )]
    Decode {
        /// The chunk's sequence number.
        sequence: u64,
        /// Why it does not decode.
        #[source]
        error: serde_json::Error,
    },
    /// The stream ended without a terminal chunk carrying a result (the host's task was
    /// aborted).
    #[error("the stream ended without a terminal chunk carrying the action's result")]
    Unterminated,
}

/// The producer side: numbers chunks and closes after the terminal one.
struct ChannelSink {
    host: Arc<HostInner>,
    action_id: ActionId,
    sender: Mutex<Option<mpsc::Sender<StreamChunk>>>,
    sequence: AtomicU64,
    closed: AtomicBool,
    /// The handler's run is over: data is refused, the terminal chunk still goes.
    sealed: AtomicBool,
    /// A send failed because the consumer dropped the stream.
    consumer_gone: AtomicBool,
    /// Whether the consumer dropped the stream, sent or not.
    consumer: Arc<Consumer>,
}

impl ChannelSink {
    fn closed_failure() -> ConnectorFailure {
        ConnectorFailure::new(
            codes::STREAM_CLOSED,
            "the stream is closed",
            ErrorCategory::Permanent,
            ConnectorOperation::Streaming,
            codes::SOURCE_COMPONENT,
        )
    }

    /// Whether a chunk is refused because the handler's run is over: data is, the host's
    /// terminal chunk never.
    fn refuses_data(&self, terminal: bool) -> bool {
        !terminal && self.sealed.load(Ordering::Acquire)
    }

    /// Sends one chunk; the lock keeps sequence order equal to delivery order.
    async fn push(
        &self,
        kind: StreamChunkKind,
        data: Option<Value>,
        terminal: bool,
    ) -> Result<(), ConnectorFailure> {
        let mut sender = self.sender.lock().await;
        if self.closed.load(Ordering::Acquire) || self.refuses_data(terminal) {
            return Err(Self::closed_failure());
        }
        let Some(channel) = sender.as_ref() else {
            return Err(Self::closed_failure());
        };
        // Room first, then the number: a send whose future is dropped while it waits for room
        // (a handler's `timeout` or `select!` around it) takes no number, so the sequence has
        // no gaps (found by a hostile review).
        let permit = channel.reserve().await;
        // Sealed while this send waited for room: the result is decided, the data is refused
        // (the permit goes back unused).
        if permit.is_ok() && self.refuses_data(terminal) {
            return Err(Self::closed_failure());
        }
        let sent = permit.map(|permit| {
            permit.send(StreamChunk {
                action_id: self.action_id.clone(),
                sequence: self.sequence.fetch_add(1, Ordering::AcqRel),
                kind,
                data,
                part: None,
            });
        });
        if terminal {
            self.closed.store(true, Ordering::Release);
            *sender = None;
        } else if sent.is_err() {
            self.consumer_gone.store(true, Ordering::Release);
            // The consumer went away while the handler runs: nobody reads the rest, so the
            // action is abandoned as a transport that gave up on it would abandon it
            // (`Host::abandon_as`). A handler that ignores the failure and keeps going is
            // cancelled; one that returns it is `action.abandoned` (the pipeline maps the
            // failure), so a retry-safe action's key is released for the caller's retry
            // instead of storing `stream.closed` under it.
            self.host
                .active
                .abandon_streaming_to(&self.action_id, std::ptr::from_ref(self).cast::<()>());
        }
        sent.map_err(|_| Self::closed_failure())
    }
}

impl ChunkSink for ChannelSink {
    fn send(
        &self,
        kind: StreamChunkKind,
        data: Value,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>> {
        Box::pin(async move {
            if matches!(kind, StreamChunkKind::Done | StreamChunkKind::Error) {
                // Only the host ends a stream: exactly one terminal chunk.
                return Err(ConnectorFailure::new(
                    codes::STREAM_TERMINAL_RESERVED,
                    "handlers cannot send terminal chunks; return the result instead",
                    ErrorCategory::Connector,
                    ConnectorOperation::Streaming,
                    codes::SOURCE_COMPONENT,
                ));
            }
            if let Err(exceeded) = pipeline::check_json_limits(
                &data,
                self.host.limits.max_output_bytes,
                super::MAX_STORED_DEPTH,
            ) {
                return Err(chunk_too_large(exceeded, self.host.limits.max_output_bytes));
            }
            self.push(kind, Some(data), false).await
        })
    }

    fn consumer_gone(&self) -> bool {
        self.consumer_gone.load(Ordering::Acquire) || self.consumer.is_gone()
    }

    fn seal(&self) {
        self.sealed.store(true, Ordering::Release);
    }

    fn poll_consumer_gone(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.consumer_gone.load(Ordering::Acquire) {
            return std::task::Poll::Ready(());
        }
        self.consumer.poll_gone(cx)
    }
}

/// `stream.chunk_too_large`: a chunk bounded as a result is (`max_output_bytes`, stored depth),
/// so that no consumer has to take more in one chunk than in a whole result (found by a hostile
/// probe: chunks had no bound, and `AipClient` fails the whole stream on an SSE event larger
/// than its `max_response_bytes`). Nothing is sent; the handler may send less.
fn chunk_too_large(exceeded: pipeline::JsonLimit, max_bytes: usize) -> ConnectorFailure {
    let (message, details) = match exceeded {
        pipeline::JsonLimit::Bytes => (
            format!(
                "stream chunk is larger than {max_bytes} bytes of JSON, the host's `max_output_bytes`: send it in smaller parts"
            ),
            serde_json::json!({ "max_chunk_bytes": max_bytes }),
        ),
        pipeline::JsonLimit::Depth => (
            format!(
                "stream chunk nests deeper than {} levels, more than the host sends",
                super::MAX_STORED_DEPTH
            ),
            serde_json::json!({ "max_chunk_depth": super::MAX_STORED_DEPTH }),
        ),
    };
    ConnectorFailure::new(
        codes::STREAM_CHUNK_TOO_LARGE,
        message,
        ErrorCategory::Connector,
        ConnectorOperation::Streaming,
        codes::SOURCE_COMPONENT,
    )
    .with_redacted_details(details)
}

/// Streams `action` for `caller` (`Host::invoke_stream`).
pub(crate) fn start(
    host: Arc<HostInner>,
    mut action: Action,
    caller: TrustedContext,
) -> ChunkStream {
    if action.mode.is_none() {
        action.mode = Some(ActionMode::Streaming);
    }
    spawn(host, caller, async move { Ok((Arc::new(action), None)) })
}

/// Streams the approved action of approval `id`, exactly once, as its requester `caller`
/// (`Host::resume_approved_stream`): the checks of `Host::resume_approved`, then the run with
/// the record as stage 9's resume. A refusal is the stream's one terminal chunk.
pub(crate) fn resume(host: Arc<HostInner>, id: ApprovalId, caller: TrustedContext) -> ChunkStream {
    let checks = host.clone();
    let caller_of_checks = caller.clone();
    spawn(host, caller, async move {
        let record = pipeline::resumable(&checks, &id, &caller_of_checks).await?;
        let mut action = record.action.clone();
        if action.mode.is_none() {
            action.mode = Some(ActionMode::Streaming);
        }
        Ok((Arc::new(action), Some(record)))
    })
}

/// Spawns the task that runs what `prepare` answers through the pipeline with a channel sink,
/// then queues the terminal chunk; `prepare`'s refusal is queued as the terminal chunk alone.
fn spawn(
    host: Arc<HostInner>,
    caller: TrustedContext,
    prepare: impl Future<Output = Result<(Arc<Action>, Option<Box<ApprovalRecord>>), ActionResult>>
    + Send
    + 'static,
) -> ChunkStream {
    let (sender, receiver) = mpsc::channel(host.limits.stream_buffer.max(1));
    let (settle, settled) = watch::channel(false);
    let give_up = CancellationToken::new();
    let given_up = give_up.clone();
    let consumer = Arc::new(Consumer::default());
    let consumer_of_sink = consumer.clone();
    crate::task::spawn_traced(async move {
        let sink_for = |action_id: ActionId| {
            Arc::new(ChannelSink {
                host: host.clone(),
                action_id,
                sender: Mutex::new(Some(sender)),
                sequence: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                sealed: AtomicBool::new(false),
                consumer_gone: AtomicBool::new(false),
                consumer: consumer_of_sink.clone(),
            })
        };
        let (sink, result) = match prepare.await {
            Ok((action, resume)) => {
                let sink = sink_for(action.id.clone());
                let options = Options {
                    stream: Some(sink.clone() as Arc<dyn ChunkSink>),
                    resume,
                };
                let result = pipeline::run(&host, action, &caller, options).await;
                (sink, result)
            }
            Err(refused) => (sink_for(refused.action_id.clone()), refused),
        };
        settle.send_replace(true);
        let kind = if result.status == ActionResultStatus::Failed {
            StreamChunkKind::Error
        } else {
            StreamChunkKind::Done
        };
        let data = serde_json::to_value(&result).ok();
        // A consumer that went away is not an error of the action; one that will not read the
        // rest (`give_up_handle`) does not keep this task waiting for room.
        tokio::select! {
            _ = sink.push(kind, data, true) => {}
            () = given_up.cancelled() => {}
        }
    });
    ChunkStream {
        receiver,
        settled,
        give_up,
        consumer,
    }
}
