//! `streaming_backpressure`: a streaming capability's chunks arrive numbered 0, 1, 2, … in the
//! order its handler sent them, a slow consumer holds the handler back at the host's buffer, and
//! exactly one terminal chunk ends the stream.
//!
//! The host numbers chunks itself, so a connector cannot send a wrong `sequence`. What it can get
//! wrong is the order of its *data*: a chunk that carries its own position — an integer
//! `index`, `position`, `offset` or `sequence` field in a data object — says where it belongs,
//! and a connector that forwards pages as they arrive (fetched concurrently, or newest first)
//! sends positions out of order. `ordered_chunks` checks both: the stream equals what the
//! handler handed its sink, in the same order, and the positions chunks carry only increase.
//!
//! Back-pressure is measured on a host whose buffer holds one chunk, through a [`Tap`] that sees
//! every `send` the handler makes (when it started and when the host let it return): while
//! nobody reads, the handler must be parked in a `send` with no more chunks accepted than the
//! buffer holds, and must not keep working at the provider meanwhile (a connector that
//! prefetches every page on a task of its own buffers ahead of its consumer, unbounded); while
//! the consumer reads slowly, the handler may never be more than the buffer ahead.
//!
//! The [`Tap`] is also what the cancellation and restart scenarios use to see cancellation
//! tokens and reconciliation requests.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use aip_connector::host::HostLimits;
use aip_connector::invocation::{BoxFuture, ChunkSink, InvocationContext};
use aip_connector::model::{
    ActionResult, ActionResultStatus, ConnectorFailure, StreamChunk, StreamChunkKind,
};
use aip_connector::{
    CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition, ReconcileOutcome,
    Reconciliation,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::conformance::probe::WrappedContext;
use crate::conformance::{Evidence, Harness};

/// Chunks the back-pressure host buffers: one, so any handler that streams two data chunks has
/// to wait for its consumer.
const BUFFER: usize = 1;
/// How long the consumer reads nothing once the handler is parked.
const PAUSE: Duration = Duration::from_millis(250);
/// How long a `send` must stay parked before the pause starts (a handler finishing a provider
/// call it started before it was parked is not prefetching).
const SETTLE: Duration = Duration::from_millis(60);
/// How long the consumer waits between reads afterwards.
const SLOW_READ: Duration = Duration::from_millis(5);
/// How long anything in this scenario may take before it counts as stuck.
const PATIENCE: Duration = Duration::from_secs(10);
/// Data fields through which a chunk states its own position in the stream.
const POSITION_FIELDS: [&str; 4] = ["index", "position", "offset", "sequence"];

// ---- The tap ----------------------------------------------------------------------------------

/// Wraps a connector (usually the harness's probe) to see what the probe does not: each call's
/// cancellation token (to ask later whether it fired), every chunk the handler handed its sink
/// with when the `send` started and when the host let it return, every reconciliation
/// request the host made, and when each cancel companion ran.
#[derive(Clone)]
pub(super) struct Tap {
    inner: Arc<dyn Connector>,
    state: Arc<Mutex<TapState>>,
}

#[derive(Default)]
struct TapState {
    calls: Vec<TappedCall>,
    reconciliations: Vec<(String, Reconciliation)>,
    cancels: Vec<TappedCancel>,
}

/// One call of a cancel companion (`Connector::cancel`), timed by the wall clock so it compares
/// with the provider double's `received_at`.
#[derive(Clone, Debug)]
pub(super) struct TappedCancel {
    /// The action the host asked the companion to stop.
    pub(super) action_id: String,
    /// When the host called the companion.
    pub(super) started: SystemTime,
    /// When the companion returned, or the host dropped it (its time-out); `None` while it
    /// runs.
    pub(super) ended: Option<SystemTime>,
}

impl TappedCancel {
    /// Whether `at` falls while the companion ran. One still running covers nothing: a
    /// companion that hangs must not excuse every later request.
    pub(super) fn covers(&self, at: SystemTime) -> bool {
        self.ended
            .is_some_and(|ended| at >= self.started && at <= ended)
    }
}

/// Ends a [`TappedCancel`] when the companion's future is done or dropped.
struct CancelEnds {
    state: Arc<Mutex<TapState>>,
    index: usize,
}

impl Drop for CancelEnds {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cancel) = state.cancels.get_mut(self.index) {
            cancel.ended.get_or_insert_with(SystemTime::now);
        }
    }
}

/// One handler call as the tap saw it.
#[derive(Clone)]
pub(super) struct TappedCall {
    /// The action id in the invocation context.
    pub(super) action_id: String,
    /// When the host called the handler.
    pub(super) started: Instant,
    /// When the handler returned; `None` while it runs, or when the host dropped it.
    pub(super) ended: Option<Instant>,
    /// Every `send` to its sink, in call order.
    pub(super) sends: Vec<TappedSend>,
    token: CancellationToken,
}

impl TappedCall {
    /// Whether the call's cancellation token has fired by now.
    pub(super) fn token_fired(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// One `send` of a streaming handler.
#[derive(Clone, Debug)]
pub(super) struct TappedSend {
    /// The chunk kind.
    pub(super) kind: StreamChunkKind,
    /// The chunk data.
    pub(super) data: Value,
    /// When the handler called `send`.
    pub(super) started: Instant,
    /// When the host let the `send` return; `None` while it waits (back-pressure).
    pub(super) returned: Option<Instant>,
}

impl Tap {
    /// Wraps `inner`.
    pub(super) fn new(inner: Arc<dyn Connector>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, TapState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calls of action `action_id`, oldest first.
    pub(super) fn calls_of(&self, action_id: &str) -> Vec<TappedCall> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.action_id == action_id)
            .cloned()
            .collect()
    }

    /// The cancel companion calls for action `action_id`, oldest first.
    pub(super) fn cancels_of(&self, action_id: &str) -> Vec<TappedCancel> {
        self.state()
            .cancels
            .iter()
            .filter(|c| c.action_id == action_id)
            .cloned()
            .collect()
    }

    /// Every reconciliation request, with its capability, oldest first.
    pub(super) fn reconciliations(&self) -> Vec<(String, Reconciliation)> {
        self.state().reconciliations.clone()
    }
}

impl Connector for Tap {
    fn definition(&self) -> &ConnectorDefinition {
        self.inner.definition()
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        let token = context.cancellation().clone();
        let index = {
            let mut state = self.state();
            state.calls.push(TappedCall {
                action_id: context.action().id.to_string(),
                started: Instant::now(),
                ended: None,
                sends: Vec::new(),
                token,
            });
            state.calls.len() - 1
        };
        let sink = context.stream().map(|inner| {
            Arc::new(TapSink {
                inner,
                state: Arc::clone(&self.state),
                call: index,
            }) as Arc<dyn ChunkSink>
        });
        let tapped: Arc<dyn InvocationContext> =
            Arc::new(WrappedContext::new(context).with_sink(sink));
        Box::pin(async move {
            let result = self.inner.invoke(capability_id, input, tapped).await;
            if let Some(call) = self.state().calls.get_mut(index) {
                call.ended = Some(Instant::now());
            }
            result
        })
    }

    fn validate<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        self.inner.validate(capability_id, input, context)
    }

    fn reconcile<'a>(
        &'a self,
        capability_id: &'a str,
        request: Reconciliation,
    ) -> BoxFuture<'a, Result<ReconcileOutcome, ConnectorFailure>> {
        self.state()
            .reconciliations
            .push((capability_id.to_owned(), request.clone()));
        self.inner.reconcile(capability_id, request)
    }

    fn cancel<'a>(
        &'a self,
        capability_id: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), ConnectorFailure>> {
        let index = {
            let mut state = self.state();
            state.cancels.push(TappedCancel {
                action_id: request.action_id.to_string(),
                started: SystemTime::now(),
                ended: None,
            });
            state.cancels.len() - 1
        };
        let ends = CancelEnds {
            state: Arc::clone(&self.state),
            index,
        };
        let running = self.inner.cancel(capability_id, request);
        Box::pin(async move {
            let result = running.await;
            drop(ends);
            result
        })
    }
}

/// Records each `send`, then hands it to the host's sink.
struct TapSink {
    inner: Arc<dyn ChunkSink>,
    state: Arc<Mutex<TapState>>,
    call: usize,
}

impl TapSink {
    fn with_call(&self, f: impl FnOnce(&mut TappedCall)) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(call) = state.calls.get_mut(self.call) {
            f(call);
        }
    }
}

impl ChunkSink for TapSink {
    fn send(
        &self,
        kind: StreamChunkKind,
        data: Value,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>> {
        Box::pin(async move {
            let mut slot = 0;
            self.with_call(|call| {
                slot = call.sends.len();
                call.sends.push(TappedSend {
                    kind,
                    data: data.clone(),
                    started: Instant::now(),
                    returned: None,
                });
            });
            let sent = self.inner.send(kind, data).await;
            self.with_call(|call| {
                if let Some(send) = call.sends.get_mut(slot) {
                    send.returned = Some(Instant::now());
                }
            });
            sent
        })
    }
}

// ---- The scenario -----------------------------------------------------------------------------

fn streams(capability: &CapabilityDefinition) -> bool {
    capability
        .capability
        .contract
        .as_ref()
        .is_some_and(|c| c.execution.supports_streaming)
}

fn is_terminal(kind: StreamChunkKind) -> bool {
    matches!(kind, StreamChunkKind::Done | StreamChunkKind::Error)
}

pub(super) async fn run(h: &Harness) -> Evidence {
    // On the heap: the suite polls every scenario from one future, and the host's pipeline
    // futures awaited here are large in debug builds.
    Box::pin(scenario(h)).await
}

async fn scenario(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let mut candidates = h.examples_where(streams);
    // An approval-gated stream answers `pending_approval` first; prefer one that streams at once
    // (a gated one is approved and re-submitted).
    candidates.sort_by_key(|(c, _)| c.waits_for_approval());
    let Some((capability, input)) = candidates.first().cloned() else {
        evidence.no_example("no capability that supports streaming declares an example input: nothing can be streamed");
        return evidence;
    };
    let id = capability.id().to_string();

    let tap = Tap::new(Arc::new(h.probe().clone()));
    let host = h.host_for(
        Arc::new(tap.clone()),
        HostLimits::default().stream_buffer(BUFFER),
    );
    let mut action = h.action(capability, input, "conformance-streaming");
    action.mode = Some(aip_connector::model::ActionMode::Streaming);
    let action_id = action.id.to_string();
    evidence.artifact(format!("action:{action_id}"));
    // A gated stream answers `pending_approval` and nothing else. The suite approves the
    // request and streams the re-submission (the same action with the approving decision
    // attached, host docs §5.5), the path a remote client takes; the approval scenario resumes
    // through `resume_approved_stream`.
    let action = if capability.waits_for_approval() {
        match h.approved(&host, action).await {
            Ok(resubmission) => resubmission,
            Err(why) => {
                evidence.assert("ordered_chunks", false, || {
                    format!("`{id}` waits for approval, but {why}, so the suite had no approved call to stream")
                });
                return evidence;
            }
        }
    } else {
        action
    };
    let requests_before = h.provider().request_count();
    let mut stream = host.invoke_stream(action, h.caller());

    // Nobody reads: wait until the handler is parked in a `send` (or has ended).
    let started = Instant::now();
    let parked = loop {
        let call = tap.calls_of(&action_id).pop();
        let pending_since = call
            .as_ref()
            .and_then(|c| c.sends.iter().find(|s| s.returned.is_none()))
            .map(|s| s.started);
        if pending_since.is_some_and(|since| since.elapsed() >= SETTLE) {
            break true;
        }
        if call.as_ref().is_some_and(|c| c.ended.is_some()) || started.elapsed() > PATIENCE {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let accepted_at_pause = accepted(&tap, &action_id);
    let requests_at_pause = h.provider().request_count();
    if parked {
        tokio::time::sleep(PAUSE).await;
    }
    let accepted_after_pause = accepted(&tap, &action_id);
    let requests_after_pause = h.provider().request_count();

    // Then read slowly; the handler may never be more than the buffer ahead of the reader.
    let mut chunks: Vec<StreamChunk> = Vec::new();
    let mut data_read = 0_usize;
    let mut most_ahead = 0_usize;
    let read = async {
        while let Some(chunk) = stream.next().await {
            if !is_terminal(chunk.kind) {
                data_read += 1;
            }
            chunks.push(chunk);
            most_ahead = most_ahead.max(accepted(&tap, &action_id).saturating_sub(data_read));
            tokio::time::sleep(SLOW_READ).await;
        }
    };
    let drained = tokio::time::timeout(PATIENCE, read).await.is_ok();
    let after_terminal = if drained {
        tokio::time::timeout(Duration::from_millis(100), stream.next())
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let sends: Vec<TappedSend> = tap
        .calls_of(&action_id)
        .into_iter()
        .flat_map(|c| c.sends)
        .collect();
    for request in h.provider().requests().iter().skip(requests_before) {
        evidence.artifact(format!("req_{}", request.sequence));
    }

    let terminal: Vec<&StreamChunk> = chunks.iter().filter(|c| is_terminal(c.kind)).collect();
    let result: Option<ActionResult> = terminal
        .last()
        .and_then(|c| c.data.clone())
        .and_then(|data| serde_json::from_value(data).ok());
    if let Some(refused) = result.as_ref().filter(|r| {
        r.status == ActionResultStatus::PendingApproval || super::code(r).starts_with("policy.")
    }) {
        // The call must run: one that waits for approval, or is refused by the approval checks,
        // streamed nothing, and the chunk counts below would blame the handler for it.
        evidence.assert("ordered_chunks", false, || {
            format!(
                "the stream of `{id}` ended `{}` ({}) before its handler ran: it was not let through the approval gate",
                refused.status,
                super::shown_code(refused)
            )
        });
        return evidence;
    }
    let data_chunks: Vec<&StreamChunk> = chunks.iter().filter(|c| !is_terminal(c.kind)).collect();

    // ordered_chunks
    let sequences: Vec<u64> = chunks.iter().map(|c| c.sequence).collect();
    let expected: Vec<u64> = (0..chunks.len() as u64).collect();
    evidence.assert("ordered_chunks", drained && sequences == expected, || {
        if drained {
            format!("`{id}` streamed sequences {sequences:?}, expected {expected:?}")
        } else {
            format!("the stream of `{id}` did not end within {PATIENCE:?}")
        }
    });
    let sent: Vec<(StreamChunkKind, &Value)> = sends.iter().map(|s| (s.kind, &s.data)).collect();
    let received: Vec<(StreamChunkKind, &Value)> = data_chunks
        .iter()
        .map(|c| (c.kind, c.data.as_ref().unwrap_or(&Value::Null)))
        .collect();
    evidence.assert("ordered_chunks", sent == received, || {
        format!(
            "the chunks of `{id}` are not what its handler sent, in that order: sent {} chunk(s), received {}",
            sent.len(),
            received.len()
        )
    });
    if let Some(problem) = positions_out_of_order(&data_chunks) {
        evidence.assert("ordered_chunks", false, || {
            format!("`{id}` streamed its data out of the order it declares: {problem}")
        });
    }

    // bounded_backpressure
    let failed = result
        .as_ref()
        .filter(|r| r.status != ActionResultStatus::Completed);
    if let Some(failed) = failed.filter(|_| data_chunks.len() <= BUFFER) {
        // The stream ended early because the call failed: the failure is the problem to fix,
        // not the example's length.
        evidence.assert("bounded_backpressure", false, || {
            format!(
                "the stream of `{id}` ended `{}` ({}) after {} data chunk(s), so back-pressure could not be exercised: fix that failure first",
                failed.status,
                super::shown_code(failed),
                data_chunks.len()
            )
        });
    } else if data_chunks.len() <= BUFFER {
        evidence.assert("bounded_backpressure", false, || {
            format!(
                "the example of `{id}` streamed {} data chunk(s), no more than the buffer of {BUFFER}: the handler never had to wait, so back-pressure could not be exercised; declare an example that streams at least {} chunks",
                data_chunks.len(),
                BUFFER + 1
            )
        });
    } else {
        evidence.assert("bounded_backpressure", parked, || {
            format!(
                "with nobody reading, the handler of `{id}` was never parked in a `send` (buffer {BUFFER}, {} chunk(s) streamed)",
                data_chunks.len()
            )
        });
        evidence.assert(
            "bounded_backpressure",
            accepted_at_pause <= BUFFER && accepted_after_pause == accepted_at_pause,
            || {
                format!(
                    "with nobody reading, the host accepted {accepted_after_pause} chunk(s) of `{id}` into a buffer of {BUFFER}"
                )
            },
        );
        evidence.assert(
            "bounded_backpressure",
            requests_after_pause == requests_at_pause,
            || {
                format!(
                    "while its `send` waited for the consumer, `{id}` made {} more provider request(s): it works ahead of its consumer (e.g. prefetching on a task of its own) instead of being held back",
                    requests_after_pause - requests_at_pause
                )
            },
        );
        evidence.assert("bounded_backpressure", most_ahead <= BUFFER, || {
            format!(
                "the handler of `{id}` ran {most_ahead} chunk(s) ahead of a slow consumer, beyond the buffer of {BUFFER}"
            )
        });
        evidence.note(format!(
            "back-pressure: {} data chunk(s) through a buffer of {BUFFER}; parked with {accepted_at_pause} accepted, at most {most_ahead} ahead while reading",
            data_chunks.len()
        ));
    }

    // terminal_chunk_unique
    let last_is_terminal = chunks.last().is_some_and(|c| is_terminal(c.kind));
    evidence.assert(
        "terminal_chunk_unique",
        drained && terminal.len() == 1 && last_is_terminal && after_terminal.is_none(),
        || {
            format!(
                "the stream of `{id}` had {} terminal chunk(s) (last chunk terminal: {last_is_terminal}; a chunk after it: {})",
                terminal.len(),
                after_terminal.is_some()
            )
        },
    );
    let consistent = match (terminal.last(), &result) {
        (Some(chunk), Some(result)) => {
            result.action_id.as_str() == action_id
                && (chunk.kind == StreamChunkKind::Error)
                    == (result.status == ActionResultStatus::Failed)
        }
        _ => false,
    };
    evidence.assert("terminal_chunk_unique", consistent, || {
        format!(
            "the terminal chunk of `{id}` does not carry this action's result with a matching kind (result: {})",
            super::maybe(result.as_ref().map(|r| format!("{} of {}", r.status, r.action_id)))
        )
    });
    evidence
}

/// Chunks the host accepted from the handler of `action_id` (`send`s that returned).
fn accepted(tap: &Tap, action_id: &str) -> usize {
    tap.calls_of(action_id)
        .iter()
        .flat_map(|c| &c.sends)
        .filter(|s| s.returned.is_some())
        .count()
}

/// The first place where a position field of the data chunks does not increase.
fn positions_out_of_order(chunks: &[&StreamChunk]) -> Option<String> {
    for field in POSITION_FIELDS {
        let mut last: Option<(u64, i64)> = None;
        for chunk in chunks {
            if chunk.kind != StreamChunkKind::Data {
                continue;
            }
            let Some(position) = chunk
                .data
                .as_ref()
                .and_then(|d| d.get(field))
                .and_then(Value::as_i64)
            else {
                continue;
            };
            if let Some((sequence, previous)) = last
                && position <= previous
            {
                return Some(format!(
                    "chunk {} carries `{field}: {position}` after chunk {sequence} carried `{field}: {previous}`",
                    chunk.sequence
                ));
            }
            last = Some((chunk.sequence, position));
        }
    }
    None
}
