//! The host's [`InvocationContext`]: what extractors read during one execution.

use std::sync::Arc;

use aip_connector_core::model::Action;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::invocation::{
    CallerIdentity, CheckpointRecorder, ChunkSink, CompensationTarget, CredentialHandle,
    InvocationContext, VerifiedApprovals, VerifiedTenant,
};

/// Built by the pipeline from trusted sources only.
pub(crate) struct HostInvocation {
    /// Shared with the pipeline, not copied.
    pub(crate) action: Arc<Action>,
    pub(crate) caller: CallerIdentity,
    pub(crate) tenant: Option<VerifiedTenant>,
    /// Whether the handler sees the action's idempotency key (the pipeline checked that it is
    /// not blank); read from the action rather than copied.
    pub(crate) expose_idempotency_key: bool,
    pub(crate) cancellation: CancellationToken,
    pub(crate) deadline: Instant,
    pub(crate) stream: Option<Arc<dyn ChunkSink>>,
    pub(crate) checkpoint: Option<Arc<dyn CheckpointRecorder>>,
    pub(crate) credential: Option<CredentialHandle>,
    pub(crate) approval: Option<VerifiedApprovals>,
    /// The target of a `compensate`.
    pub(crate) compensation: Option<Arc<CompensationTarget>>,
}

impl InvocationContext for HostInvocation {
    fn action(&self) -> &Action {
        &self.action
    }
    fn caller(&self) -> &CallerIdentity {
        &self.caller
    }
    fn tenant(&self) -> Option<&VerifiedTenant> {
        self.tenant.as_ref()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.action
            .idempotency_key
            .as_deref()
            .filter(|_| self.expose_idempotency_key)
    }
    fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }
    fn deadline(&self) -> Instant {
        self.deadline
    }
    fn stream(&self) -> Option<Arc<dyn ChunkSink>> {
        self.stream.clone()
    }
    fn checkpoint(&self) -> Option<Arc<dyn CheckpointRecorder>> {
        self.checkpoint.clone()
    }
    fn credential(&self) -> Option<&CredentialHandle> {
        self.credential.as_ref()
    }
    fn approval(&self) -> Option<&VerifiedApprovals> {
        self.approval.as_ref()
    }
    fn compensation(&self) -> Option<Arc<CompensationTarget>> {
        self.compensation.clone()
    }
}
