//! A connector wrapper that records what each handler call saw and returned, and can replace a
//! handler's output (to show the host rejects an invalid one).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use aip_connector::connector::{CancelRequest, Reconciliation};
use aip_connector::invocation::{
    BoxFuture, CallerIdentity, CheckpointRecorder, ChunkSink, CompensationTarget,
    InvocationContext, VerifiedApprovals,
};
use aip_connector::model::{Action, ConnectorFailure, ProviderOperationRef};
use aip_connector::{
    Connector, ConnectorDefinition, CredentialHandle, ReconcileOutcome, VerifiedTenant,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One handler call as the probe saw it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProbeRecord {
    /// The capability invoked.
    pub capability_id: String,
    /// The action id in the invocation context.
    pub action_id: String,
    /// The authenticated caller the context carried.
    pub principal_id: String,
    /// The verified tenant the context carried.
    pub tenant_id: Option<String>,
    /// The idempotency key the context exposed.
    pub idempotency_key: Option<String>,
    /// The same key as the host scoped it (`InvocationContext::scoped_idempotency_key`): what
    /// the provider should receive, digested (`IdempotencyKey::for_provider`).
    pub scoped_idempotency_key: Option<String>,
    /// `Debug` of the credential handle the context carried, if any (must not show the secret).
    pub credential_debug: Option<String>,
    /// When the host called the handler.
    pub started_at: SystemTime,
    /// Whether the handler's cancellation token had fired when the call ended.
    pub cancelled_at_end: bool,
    /// When the handler's first `Checkpoint::record` returned `Ok` (the provider operation was
    /// durable from then on), if it recorded one. The transaction scenario compares it with the
    /// provider's commit of the call's effect: a checkpoint recorded after the provider
    /// answered cannot help reconcile a call that died in between.
    pub checkpointed_at: Option<SystemTime>,
    /// The output, or the failure as JSON, once the call ended (`None` while running or when the
    /// call was dropped).
    pub outcome: Option<Result<Value, Value>>,
}

#[derive(Default)]
struct ProbeState {
    records: Vec<ProbeRecord>,
    output_override: Option<Value>,
    /// The capability whose next call loses its answer, and how.
    lose_next: Option<(String, LostAnswer)>,
}

/// How the probe loses the answer of a call, for a connector with no provider whose answers
/// no provider double can lose: the call fails with an unknown outcome
/// (`provider.outcome_unknown`, `uncertain_outcome: true`), as a write whose connection dropped
/// does.
#[derive(Clone, Debug)]
pub(crate) enum LostAnswer {
    /// The handler runs and takes effect; its answer is replaced by the failure.
    AfterEffect,
    /// The handler never runs: the probe records `operation` (one nobody made) through the
    /// call's `Checkpoint`, as a handler does before its request, and fails.
    BeforeEffect(ProviderOperationRef),
}

/// Wraps a connector; every `invoke` is recorded (see [`ProbeRecord`]).
#[derive(Clone)]
pub struct ProbedConnector {
    inner: Arc<dyn Connector>,
    state: Arc<Mutex<ProbeState>>,
}

/// Names the wrapped connector and counts the calls recorded so far.
impl std::fmt::Debug for ProbedConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let recorded = self.state.lock().map_or(0, |state| state.records.len());
        f.debug_struct("ProbedConnector")
            .field("connector", &self.inner.definition().id)
            .field("recorded", &recorded)
            .finish_non_exhaustive()
    }
}

impl ProbedConnector {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Connector>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, ProbeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every call so far.
    pub fn records(&self) -> Vec<ProbeRecord> {
        self.state().records.clone()
    }

    /// How many handler calls capability `capability_id` received.
    pub fn calls(&self, capability_id: &str) -> usize {
        self.state()
            .records
            .iter()
            .filter(|r| r.capability_id == capability_id)
            .count()
    }

    /// From now on, a successful handler output is replaced by `output` (`None` stops it).
    pub fn override_output(&self, output: Option<Value>) {
        self.state().output_override = output;
    }

    /// The next handler call of `capability_id` loses its answer as `how` says.
    pub(crate) fn lose_next_answer(&self, capability_id: &str, how: LostAnswer) {
        self.state().lose_next = Some((capability_id.to_owned(), how));
    }
}

/// The failure of a call whose answer the probe lost.
fn lost_answer(source: &str) -> ConnectorFailure {
    ConnectorFailure::new(
        aip_connector::codes::PROVIDER_OUTCOME_UNKNOWN,
        "the conformance suite lost this call's answer (the connector has no provider whose connection it could drop)",
        aip_connector::model::ErrorCategory::Temporary,
        aip_connector::model::ConnectorOperation::Invocation,
        source,
    )
    .with_uncertain_outcome()
}

impl Connector for ProbedConnector {
    fn definition(&self) -> &ConnectorDefinition {
        self.inner.definition()
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        let (index, lost) = {
            let mut state = self.state();
            let lost = state
                .lose_next
                .take_if(|(capability, _)| capability == capability_id)
                .map(|(_, how)| how);
            state.records.push(ProbeRecord {
                capability_id: capability_id.to_owned(),
                action_id: context.action().id.to_string(),
                principal_id: context.caller().principal_id.to_string(),
                tenant_id: context.tenant().map(|t| t.id.clone()),
                idempotency_key: context.idempotency_key().map(str::to_owned),
                scoped_idempotency_key: context
                    .scoped_idempotency_key()
                    .map(std::borrow::Cow::into_owned),
                credential_debug: context.credential().map(|c| format!("{c:?}")),
                started_at: SystemTime::now(),
                cancelled_at_end: false,
                checkpointed_at: None,
                outcome: None,
            });
            (state.records.len() - 1, lost)
        };
        let checkpoint = context.checkpoint().map(|inner| {
            Arc::new(TimedCheckpoint {
                inner,
                state: Arc::clone(&self.state),
                record: index,
            }) as Arc<dyn CheckpointRecorder>
        });
        let context: Arc<dyn InvocationContext> =
            Arc::new(WrappedContext::new(context).with_checkpoint(checkpoint));
        Box::pin(async move {
            let source = self.inner.definition().id.as_str();
            let result = match &lost {
                Some(LostAnswer::BeforeEffect(operation)) => match context.checkpoint() {
                    Some(checkpoint) => match checkpoint.record(operation.clone(), None).await {
                        Ok(()) => Err(lost_answer(source)),
                        Err(refused) => Err(refused),
                    },
                    None => Err(lost_answer(source)),
                },
                _ => {
                    self.inner
                        .invoke(capability_id, input, Arc::clone(&context))
                        .await
                }
            };
            let result = match (lost, result) {
                (Some(LostAnswer::AfterEffect), Ok(_)) => Err(lost_answer(source)),
                (_, result) => result,
            };
            let mut state = self.state();
            let result = match (result, state.output_override.clone()) {
                (Ok(_), Some(replacement)) => Ok(replacement),
                (other, _) => other,
            };
            if let Some(record) = state.records.get_mut(index) {
                record.cancelled_at_end = context.cancellation().is_cancelled();
                record.outcome =
                    Some(match &result {
                        Ok(output) => Ok(output.clone()),
                        Err(failure) => Err(serde_json::to_value(failure.to_protocol_error())
                            .unwrap_or(Value::Null)),
                    });
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
        self.inner.reconcile(capability_id, request)
    }

    fn cancel<'a>(
        &'a self,
        capability_id: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), ConnectorFailure>> {
        self.inner.cancel(capability_id, request)
    }
}

/// Notes in the probe's record when the handler's checkpoint first became durable.
struct TimedCheckpoint {
    inner: Arc<dyn CheckpointRecorder>,
    state: Arc<Mutex<ProbeState>>,
    record: usize,
}

impl CheckpointRecorder for TimedCheckpoint {
    fn record(
        &self,
        operation: ProviderOperationRef,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>> {
        Box::pin(async move {
            let recorded = self.inner.record(operation, cursor).await;
            if recorded.is_ok() {
                let now = SystemTime::now();
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(record) = state.records.get_mut(self.record) {
                    record.checkpointed_at.get_or_insert(now);
                }
            }
            recorded
        })
    }

    fn recorded(&self) -> Option<(ProviderOperationRef, Option<String>)> {
        self.inner.recorded()
    }
}

/// The host's invocation context with the chunk sink or the checkpoint recorder replaced by a
/// recording one (the probe's, the streaming tap's); everything else is the host's.
pub(crate) struct WrappedContext {
    inner: Arc<dyn InvocationContext>,
    sink: Option<Arc<dyn ChunkSink>>,
    checkpoint: Option<Arc<dyn CheckpointRecorder>>,
}

impl WrappedContext {
    /// `inner`, unchanged so far.
    pub(crate) fn new(inner: Arc<dyn InvocationContext>) -> Self {
        Self {
            sink: inner.stream(),
            checkpoint: inner.checkpoint(),
            inner,
        }
    }

    /// With `sink` as the stream.
    pub(crate) fn with_sink(self, sink: Option<Arc<dyn ChunkSink>>) -> Self {
        Self { sink, ..self }
    }

    /// With `checkpoint` as the checkpoint recorder.
    pub(crate) fn with_checkpoint(self, checkpoint: Option<Arc<dyn CheckpointRecorder>>) -> Self {
        Self { checkpoint, ..self }
    }
}

impl InvocationContext for WrappedContext {
    fn action(&self) -> &Action {
        self.inner.action()
    }
    fn caller(&self) -> &CallerIdentity {
        self.inner.caller()
    }
    fn tenant(&self) -> Option<&VerifiedTenant> {
        self.inner.tenant()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.inner.idempotency_key()
    }
    fn scoped_idempotency_key(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.inner.scoped_idempotency_key()
    }
    fn cancellation(&self) -> &CancellationToken {
        self.inner.cancellation()
    }
    fn deadline(&self) -> tokio::time::Instant {
        self.inner.deadline()
    }
    fn stream(&self) -> Option<Arc<dyn ChunkSink>> {
        self.sink.clone()
    }
    fn checkpoint(&self) -> Option<Arc<dyn CheckpointRecorder>> {
        self.checkpoint.clone()
    }
    fn credential(&self) -> Option<&CredentialHandle> {
        self.inner.credential()
    }
    fn approval(&self) -> Option<&VerifiedApprovals> {
        self.inner.approval()
    }
    fn compensation(&self) -> Option<Arc<CompensationTarget>> {
        self.inner.compensation()
    }
    fn plan(&self) -> Option<Arc<aip_connector::model::TransactionPlan>> {
        self.inner.plan()
    }
    fn cancel_handle(&self) -> Option<&aip_connector::invocation::CancelHandle> {
        self.inner.cancel_handle()
    }
}
