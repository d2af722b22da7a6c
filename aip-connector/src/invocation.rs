//! What a host hands a handler for one call.
//!
//! [`InvocationContext`] is the seam between the host runtime and the code that
//! `#[capability]` generates: the host implements it (from the transport-authenticated request,
//! never from payload fields), extractors read from it. [`StaticInvocation`] is a plain
//! implementation for tests and for driving handlers without a host.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aip_connector_core::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId, TransactionId};
use aip_connector_core::model::{
    Action, ConnectorFailure, ConnectorOperation, ErrorCategory, ExternalAccountRef,
    IdempotencyKeyScope, ProtocolError, ProviderOperationRef, StreamChunkKind,
    TransactionProtocolStatus,
};
use serde_json::Value;
use subtle::ConstantTimeEq as _;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

/// A boxed, sendable future, as returned by the object-safe traits of this module.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything a handler may learn about the call it serves. Implemented by the host, and by
/// [`StaticInvocation`] for unit tests of a handler.
///
/// A context of your own (a wrapper that records or alters what a handler sees, as the
/// conformance suite's does) implements every method and forwards the ones it does not change.
/// Methods are required, not defaulted, so a wrapper cannot silently answer `None` for
/// something the host knows; before 1.0, a minor version may add one (the CHANGELOG says so).
pub trait InvocationContext: Send + Sync {
    /// The action being executed (its `input` is decoded separately).
    fn action(&self) -> &Action;
    /// The transport-authenticated caller.
    fn caller(&self) -> &CallerIdentity;
    /// The verified tenant, if the deployment resolved one.
    fn tenant(&self) -> Option<&VerifiedTenant>;
    /// The idempotency key of the action, as the caller sent it, after scoping checks.
    fn idempotency_key(&self) -> Option<&str>;
    /// The same key as the host deduplicates it, `<Scope>:<partition>:<key>` for the contract's
    /// key scope (e.g. `Tenant:acme:invoice-42`): what a provider must deduplicate on, so that
    /// two actions the host keeps apart (two tenants' `invoice-42`) stay apart there too.
    /// `None` exactly when [`idempotency_key`](Self::idempotency_key) is `None`; contexts that
    /// scope nothing answer the caller's key ([`StaticInvocation`] does, unless
    /// [`StaticInvocation::with_idempotency_scope`] names the contract's scope). Required, so a
    /// wrapper context cannot forget to forward it and send the unscoped key.
    fn scoped_idempotency_key(&self) -> Option<Cow<'_, str>>;
    /// Fires when the action is cancelled or (under a host) its deadline passes.
    fn cancellation(&self) -> &CancellationToken;
    /// When the handler must have finished.
    fn deadline(&self) -> Instant;
    /// The sink for streamed chunks, for streaming calls.
    fn stream(&self) -> Option<Arc<dyn ChunkSink>>;
    /// The durable provider-operation checkpoint, for transactional calls.
    fn checkpoint(&self) -> Option<Arc<dyn CheckpointRecorder>>;
    /// The resolved credential, whenever the contract declares a credential policy and the
    /// deployment resolved one.
    fn credential(&self) -> Option<&CredentialHandle>;
    /// The verified approvals that released this action, if it needed approval.
    fn approval(&self) -> Option<&VerifiedApprovals>;
    /// The action being compensated, for an action in transaction mode `compensate`.
    fn compensation(&self) -> Option<Arc<CompensationTarget>> {
        None
    }
    /// The plan a `commit` claimed, for an action in transaction mode `commit`. Required, so a
    /// wrapper context cannot forget to forward it (the conformance suite's did, found by a
    /// review: every `ClaimedPlan` handler failed under it).
    fn plan(&self) -> Option<Arc<aip_connector_core::model::TransactionPlan>>;
    /// Where the handler leaves what its cancel companion needs to stop the provider's work
    /// ([`Cancellation::set_handle`](crate::Cancellation::set_handle)); the host hands it to
    /// the companion as [`CancelRequest::handle`](crate::CancelRequest::handle). `None` for a
    /// context that calls no companion.
    fn cancel_handle(&self) -> Option<&CancelHandle>;
}

/// What a handler names its provider's work by, for its cancel companion: a query or job id the
/// provider assigned, which neither the input nor the idempotency key can name (found by a
/// warehouse trial, whose companion could not find the query to stop). Set through
/// [`Cancellation::set_handle`](crate::Cancellation::set_handle), read once the handler is
/// stopped as [`CancelRequest::handle`](crate::CancelRequest::handle). Kept in memory for the
/// call only: the host never stores, logs or sends it anywhere else, and its `Debug` says only
/// whether one is set.
#[derive(Default)]
pub struct CancelHandle(Mutex<Option<String>>);

impl std::fmt::Debug for CancelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelHandle")
            .field("set", &self.get().is_some())
            .finish()
    }
}

impl CancelHandle {
    /// An empty handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the handle, replacing the one set before (a job the provider restarted under a new
    /// id).
    pub fn set(&self, handle: impl Into<String>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(handle.into());
    }

    /// The handle set last, if any.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Receives the chunks a streaming handler emits. `send` waits while the buffer is full
/// (back-pressure) and fails once the stream is closed.
pub trait ChunkSink: Send + Sync {
    /// Sends one chunk.
    fn send(
        &self,
        kind: StreamChunkKind,
        data: Value,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>>;

    /// Whether the consumer went away before the stream ended (it dropped the stream, or a send
    /// failed for want of it). The host abandons an action whose consumer is gone instead of
    /// starting its handler, and a handler that waits or fails once it is; a handler that
    /// returns `Ok` in the poll that noticed completes normally. `false` unless a sink knows
    /// better.
    fn consumer_gone(&self) -> bool {
        false
    }

    /// Ready once the consumer went away ([`consumer_gone`](Self::consumer_gone)); otherwise
    /// registers `cx`'s waker to be woken when it goes, so the host abandons a handler that is
    /// waiting on something else (its provider) and sends nothing. The default wakes no one: a
    /// sink that cannot tell is noticed only when the handler is polled.
    fn poll_consumer_gone(&self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.consumer_gone() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// The handler's run is over (it returned, or the host stopped it): the result is decided,
    /// so a sink refuses data sent from now on (`stream.closed`), such as what a task the
    /// handler spawned with a clone of its `StreamSink` still sends while the host settles the
    /// action. The host's own terminal chunk is not data. The default refuses nothing.
    fn seal(&self) {}
}

/// Durably records the provider operation of a transactional call before the handler awaits the
/// provider, so a later attempt (or reconciliation) can find it.
pub trait CheckpointRecorder: Send + Sync {
    /// Records `operation` and an opaque `cursor`. Recording a different operation after one was
    /// recorded is refused.
    fn record(
        &self,
        operation: ProviderOperationRef,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>>;
    /// What an earlier attempt recorded, if anything.
    fn recorded(&self) -> Option<(ProviderOperationRef, Option<String>)>;
}

/// The caller as the transport authenticated it. Built with [`CallerIdentity::new`] (fields
/// may be added in minor versions).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallerIdentity {
    /// Principal id.
    pub principal_id: PrincipalId,
    /// Who vouched for the identity.
    pub issuer: String,
}

impl CallerIdentity {
    /// The principal `principal_id`, vouched for by `issuer`.
    pub fn new(principal_id: impl Into<PrincipalId>, issuer: impl Into<String>) -> Self {
        Self {
            principal_id: principal_id.into(),
            issuer: issuer.into(),
        }
    }
}

/// A tenant the deployment verified. Built with [`VerifiedTenant::new`] (fields may be added
/// in minor versions).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedTenant {
    /// Tenant id.
    pub id: String,
    /// The system that owns the tenant id, if any.
    pub system: Option<String>,
}

impl VerifiedTenant {
    /// The tenant `id`, owned by no named system.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            system: None,
        }
    }

    /// Names the system that owns the tenant id.
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }
}

/// The approvals that released an action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedApprovals {
    /// Approval request ids.
    pub approval_ids: Vec<ApprovalId>,
    /// Decision ids.
    pub decision_ids: Vec<String>,
    /// Hashes of the policy snapshots the decisions were checked against.
    pub policy_hashes: Vec<String>,
}

/// Raw credential material. Never printed, serialized or compared in variable time, and wiped
/// from memory when the last clone is dropped.
///
/// Clones share one buffer. [`Secret::new`] copies the bytes it is given, so the caller's copy
/// is the caller's to wipe; the `From<String>` and `From<Vec<u8>>` conversions take the buffer
/// over instead, so the SDK makes no other copy until a request is built (where the provider
/// client wipes its own buffers, but not the `HeaderValue` it hands to reqwest). Copies the
/// caller made before, such as those a growing `String` left behind, stay the caller's.
#[derive(Clone)]
pub struct Secret(Arc<Zeroizing<Vec<u8>>>);

impl Secret {
    /// Wraps credential bytes (a copy of them: see [`Secret`] for the conversions that take a
    /// buffer over).
    pub fn new(bytes: impl AsRef<[u8]>) -> Self {
        Self::from(bytes.as_ref().to_vec())
    }

    /// The raw bytes. Call this only where the provider request is built.
    pub fn expose_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The raw bytes as UTF-8, for bearer tokens and API keys.
    pub fn expose_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.0)
    }
}

impl From<Vec<u8>> for Secret {
    /// Takes the buffer over; it is wiped (its whole capacity) when the last clone is dropped.
    fn from(bytes: Vec<u8>) -> Self {
        Secret(Arc::new(Zeroizing::new(bytes)))
    }
}

impl From<String> for Secret {
    /// Takes the string's buffer over, as `From<Vec<u8>>` does.
    fn from(text: String) -> Self {
        Self::from(text.into_bytes())
    }
}

impl From<&str> for Secret {
    /// Copies the text, as [`Secret::new`] does (for a literal in a test, say).
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl PartialEq for Secret {
    /// Constant-time comparison (`subtle`), so equality checks do not leak the secret through
    /// timing; only the lengths are compared in variable time.
    fn eq(&self, other: &Self) -> bool {
        self.expose_bytes().ct_eq(other.expose_bytes()).into()
    }
}

impl Eq for Secret {}

/// A credential resolved by the deployment's credential provider.
///
/// Build one with [`CredentialHandle::new`] and the `with_*` methods (new fields may come in
/// minor versions); the fields stay public to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CredentialHandle {
    /// Credential reference id (not secret).
    pub id: String,
    /// Issuer.
    pub issuer: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// Expiry in milliseconds since the Unix epoch, if known.
    pub expires_at_ms: Option<u64>,
    /// The tenant the credential belongs to, if it is tenant-bound.
    pub tenant_id: Option<String>,
    /// The material itself; redacted in `Debug`.
    pub secret: Secret,
}

impl CredentialHandle {
    /// The material, as the `Credential` extractor's `secret()` gives it (the same as the
    /// `secret` field): `call.bearer_auth(credential.secret())`.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// The credential `id` from `issuer`, carrying `secret`; no scopes, no expiry, bound to no
    /// tenant until the `with_*` methods say otherwise.
    pub fn new(id: impl Into<String>, issuer: impl Into<String>, secret: Secret) -> Self {
        Self {
            id: id.into(),
            issuer: issuer.into(),
            scopes: Vec::new(),
            expires_at_ms: None,
            tenant_id: None,
            secret,
        }
    }

    /// Sets the granted scopes.
    pub fn with_scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the expiry, in milliseconds since the Unix epoch.
    pub fn with_expiry_ms(mut self, expires_at_ms: u64) -> Self {
        self.expires_at_ms = Some(expires_at_ms);
        self
    }

    /// Binds the credential to a tenant.
    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }
}

/// The settled action a `compensate` undoes, as the host read it from the target's durable
/// transaction record (see [`Compensation`](crate::extract::Compensation)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompensationTarget {
    /// The compensated action (`transaction.compensation_for`).
    pub action_id: ActionId,
    /// Its transaction.
    pub transaction_id: TransactionId,
    /// The capability it ran.
    pub capability_id: CapabilityId,
    /// Its durable status: `committed`, `reconciled` (the provider confirmed the commit), or
    /// `failed` with side effects committed.
    pub status: TransactionProtocolStatus,
    /// Its output, when it completed (for `reconciled`, the reconciliation answer).
    pub output: Option<Value>,
    /// Its error, when it failed after committing side effects.
    pub error: Option<ProtocolError>,
    /// The provider operation it checkpointed.
    pub provider_operation: Option<ProviderOperationRef>,
    /// The cursor its handler recorded (`checkpoint.record(operation, Some(cursor))`). Where an
    /// undo must find a resource the compensated action's *input* named (a close undone by a
    /// reopen, a delete undone by a restore), the compensated handler records that resource
    /// here: the undo never sees the input, and a target settled by reconciliation has no
    /// handler output. A `Pending` reconciliation answer's cursor never replaces it (that one
    /// reaches only the next reconciliation, as [`Reconciliation::cursor`](crate::Reconciliation::cursor)).
    pub cursor: Option<String>,
}

impl CompensationTarget {
    /// The compensated action `action_id`, of `capability_id`, whose transaction
    /// `transaction_id` is durably `status`; no output, error, provider operation or cursor
    /// (for a unit test of an undo handler; the host fills in what it has).
    pub fn new(
        action_id: ActionId,
        transaction_id: TransactionId,
        capability_id: impl Into<CapabilityId>,
        status: TransactionProtocolStatus,
    ) -> Self {
        Self {
            action_id,
            transaction_id,
            capability_id: capability_id.into(),
            status,
            output: None,
            error: None,
            provider_operation: None,
            cursor: None,
        }
    }

    /// With the compensated action's output.
    pub fn with_output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }

    /// With the error it failed with after committing side effects.
    pub fn with_error(mut self, error: ProtocolError) -> Self {
        self.error = Some(error);
        self
    }

    /// With the provider operation its handler checkpointed.
    pub fn with_provider_operation(mut self, operation: ProviderOperationRef) -> Self {
        self.provider_operation = Some(operation);
        self
    }

    /// With the cursor its handler checkpointed.
    pub fn with_cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// The compensated action's output decoded as `T`, its capability's output type (what its
    /// handler returned: the id of the booking to cancel, say). `Ok(None)` when there is no
    /// such output: the action failed after committing side effects, or its unknown outcome
    /// was `reconciled`, whose `output` is the reconciliation's answer rather than the
    /// handler's. Fall back to [`provider_operation`](Self::provider_operation) then, which
    /// every status that can be compensated may carry.
    ///
    /// # Errors
    ///
    /// When the output of a `committed` action is not a `T`.
    ///
    /// ```
    /// use aip_connector::CompensationTarget;
    /// use aip_connector::ids::{ActionId, TransactionId};
    /// use aip_connector::model::TransactionProtocolStatus;
    /// use serde::Deserialize;
    /// use serde_json::json;
    ///
    /// #[derive(Deserialize)]
    /// struct Reserved {
    ///     reservation_id: String,
    /// }
    ///
    /// let target = CompensationTarget::new(
    ///     ActionId::new(),
    ///     TransactionId::new(),
    ///     "cap:inventory:reserve_stock",
    ///     TransactionProtocolStatus::Committed,
    /// )
    /// .with_output(json!({ "reservation_id": "res_42" }));
    /// let reserved: Option<Reserved> = target.output_as()?;
    /// assert_eq!(reserved.map(|r| r.reservation_id).as_deref(), Some("res_42"));
    ///
    /// let reconciled = CompensationTarget::new(
    ///     target.action_id.clone(),
    ///     target.transaction_id.clone(),
    ///     "cap:inventory:reserve_stock",
    ///     TransactionProtocolStatus::Reconciled,
    /// )
    /// .with_output(json!({ "reconciliation": { "committed": true } }));
    /// assert!(reconciled.output_as::<Reserved>()?.is_none());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn output_as<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Option<T>, serde_json::Error> {
        match (self.status, &self.output) {
            (TransactionProtocolStatus::Committed, Some(output)) => {
                T::deserialize(output).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// A plain [`InvocationContext`] for tests and for running handlers outside a host.
///
/// Built with [`StaticInvocation::new`] and the `with_*` methods; it records streamed chunks and
/// checkpoints in memory so a test can look at them afterwards.
///
/// Its [`scoped_idempotency_key`](InvocationContext::scoped_idempotency_key) is the caller's
/// key as it is, unless [`with_idempotency_scope`](Self::with_idempotency_scope) names the
/// contract's key scope: then it is the key the host would hand the handler
/// (`Tenant:acme:invoice-42`), so a handler driven directly sends its provider the same key it
/// sends under a host.
pub struct StaticInvocation {
    action: Action,
    caller: CallerIdentity,
    tenant: Option<VerifiedTenant>,
    idempotency_scope: Option<IdempotencyKeyScope>,
    external_account: Option<ExternalAccountRef>,
    cancellation: CancellationToken,
    deadline: Instant,
    stream: Option<Arc<RecordingSink>>,
    checkpoint: Option<Arc<MemoryCheckpoint>>,
    credential: Option<CredentialHandle>,
    approval: Option<VerifiedApprovals>,
    compensation: Option<Arc<CompensationTarget>>,
    plan: Option<Arc<aip_connector_core::model::TransactionPlan>>,
    cancel_handle: CancelHandle,
}

/// Names the action and says which of the context's parts are set; never the input, the
/// credential or the approvals.
impl std::fmt::Debug for StaticInvocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticInvocation")
            .field("action_id", &self.action.id)
            .field("capability_id", &self.action.capability_id)
            .field("caller", &self.caller)
            .field("tenant", &self.tenant)
            .field("idempotency_scope", &self.idempotency_scope)
            .field("external_account", &self.external_account)
            .field("deadline", &self.deadline)
            .field("streams", &self.stream.is_some())
            .field("checkpoints", &self.checkpoint.is_some())
            .field("credential_set", &self.credential.is_some())
            .field("approval_set", &self.approval.is_some())
            .field("compensation_set", &self.compensation.is_some())
            .field("plan_set", &self.plan.is_some())
            .field("cancel_handle", &self.cancel_handle)
            .finish_non_exhaustive()
    }
}

impl StaticInvocation {
    /// An invocation of `action` by `caller`, with a 60-second deadline and nothing else.
    ///
    /// The deadline is only reported, not enforced, and the
    /// [`cancellation`](InvocationContext::cancellation) token fires only when the test cancels
    /// it. Under a host, the deadline passing fires it.
    pub fn new(action: Action, caller: CallerIdentity) -> Self {
        Self {
            action,
            caller,
            tenant: None,
            idempotency_scope: None,
            external_account: None,
            cancellation: CancellationToken::new(),
            deadline: Instant::now() + Duration::from_secs(60),
            stream: None,
            checkpoint: None,
            credential: None,
            approval: None,
            compensation: None,
            plan: None,
            cancel_handle: CancelHandle::new(),
        }
    }

    /// Sets the verified tenant, and writes it into the action's identity
    /// (`action().identity.tenant`), as a host writes the tenant it verified.
    pub fn with_tenant(mut self, tenant: VerifiedTenant) -> Self {
        self.identity_mut().tenant = Some(aip_connector_core::model::TenantRef {
            id: tenant.id.clone(),
            system: tenant.system.clone(),
        });
        self.tenant = Some(tenant);
        self
    }

    /// The action's identity block, created empty if the action has none.
    fn identity_mut(&mut self) -> &mut aip_connector_core::model::IdentityContext {
        self.action.identity.get_or_insert_default()
    }

    /// Scopes the action's idempotency key as the host does for a contract with this
    /// `idempotency(scope = ...)`, so [`scoped_idempotency_key`] is the key the host would hand
    /// the handler. The scope's partition must be set: the tenant
    /// ([`with_tenant`](Self::with_tenant)) for `tenant`, the account
    /// ([`with_external_account`](Self::with_external_account)) for `external_account`.
    ///
    /// [`scoped_idempotency_key`]: InvocationContext::scoped_idempotency_key
    pub fn with_idempotency_scope(mut self, scope: IdempotencyKeyScope) -> Self {
        self.idempotency_scope = Some(scope);
        self
    }

    /// Sets the deployment's external account (the partition of `external_account`-scoped
    /// keys, see [`with_idempotency_scope`](Self::with_idempotency_scope)), and writes it into
    /// the action's identity (`action().identity.external_account`), as a host does.
    pub fn with_external_account(mut self, account: ExternalAccountRef) -> Self {
        self.identity_mut().external_account = Some(account.clone());
        self.external_account = Some(account);
        self
    }

    /// Sets the deadline.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = deadline;
        self
    }

    /// Enables streaming into an in-memory sink.
    pub fn with_stream(mut self) -> Self {
        self.stream = Some(Arc::new(RecordingSink::default()));
        self
    }

    /// Enables an in-memory checkpoint.
    pub fn with_checkpoint(mut self) -> Self {
        self.checkpoint = Some(Arc::new(MemoryCheckpoint::default()));
        self
    }

    /// Sets the resolved credential.
    pub fn with_credential(mut self, credential: CredentialHandle) -> Self {
        self.credential = Some(credential);
        self
    }

    /// Sets the verified approvals.
    pub fn with_approval(mut self, approval: VerifiedApprovals) -> Self {
        self.approval = Some(approval);
        self
    }

    /// Sets the action being compensated.
    pub fn with_compensation(mut self, target: CompensationTarget) -> Self {
        self.compensation = Some(Arc::new(target));
        self
    }

    /// Sets the plan the action commits, as a host hands it to a `commit` (the
    /// [`ClaimedPlan`](crate::ClaimedPlan) extractor reads it).
    pub fn with_plan(mut self, plan: aip_connector_core::model::TransactionPlan) -> Self {
        self.plan = Some(Arc::new(plan));
        self
    }

    /// The chunks streamed so far.
    pub fn streamed(&self) -> Vec<(StreamChunkKind, Value)> {
        self.stream
            .as_ref()
            .map(|s| s.chunks.lock().expect("sink lock").clone())
            .unwrap_or_default()
    }

    /// What the handler checkpointed.
    pub fn checkpointed(&self) -> Option<(ProviderOperationRef, Option<String>)> {
        self.checkpoint.as_ref().and_then(|c| c.recorded())
    }
}

impl InvocationContext for StaticInvocation {
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
        self.action.idempotency_key.as_deref()
    }
    /// # Panics
    ///
    /// When [`StaticInvocation::with_idempotency_scope`] named a scope whose partition was not
    /// set (a tenant scope without a tenant, an account scope without an account): under a host
    /// that action is refused with `idempotency.scope_missing` before its handler runs.
    fn scoped_idempotency_key(&self) -> Option<Cow<'_, str>> {
        let raw = self.idempotency_key()?;
        let Some(scope) = self.idempotency_scope else {
            return Some(Cow::Borrowed(raw));
        };
        match crate::host::idempotency::scoped_key_of(
            scope,
            raw,
            &self.action,
            self.caller.principal_id.as_str(),
            self.tenant.as_ref().map(|t| t.id.as_str()),
            self.external_account.as_ref(),
        ) {
            Ok(scoped) => Some(Cow::Owned(scoped)),
            Err(error) => panic!(
                "StaticInvocation: {} (set it with `with_tenant` or `with_external_account`)",
                error.message
            ),
        }
    }
    fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }
    fn deadline(&self) -> Instant {
        self.deadline
    }
    fn stream(&self) -> Option<Arc<dyn ChunkSink>> {
        self.stream.clone().map(|s| s as Arc<dyn ChunkSink>)
    }
    fn checkpoint(&self) -> Option<Arc<dyn CheckpointRecorder>> {
        self.checkpoint
            .clone()
            .map(|c| c as Arc<dyn CheckpointRecorder>)
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
    fn plan(&self) -> Option<Arc<aip_connector_core::model::TransactionPlan>> {
        self.plan.clone()
    }
    /// Kept, so a unit test reads what the handler set: `invocation.cancel_handle()`.
    fn cancel_handle(&self) -> Option<&CancelHandle> {
        Some(&self.cancel_handle)
    }
}

#[derive(Default)]
struct RecordingSink {
    chunks: Mutex<Vec<(StreamChunkKind, Value)>>,
}

impl ChunkSink for RecordingSink {
    fn send(
        &self,
        kind: StreamChunkKind,
        data: Value,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>> {
        self.chunks.lock().expect("sink lock").push((kind, data));
        Box::pin(std::future::ready(Ok(())))
    }
}

#[derive(Default)]
struct MemoryCheckpoint {
    recorded: Mutex<Option<(ProviderOperationRef, Option<String>)>>,
}

impl CheckpointRecorder for MemoryCheckpoint {
    fn record(
        &self,
        operation: ProviderOperationRef,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<(), ConnectorFailure>> {
        let mut slot = self.recorded.lock().expect("checkpoint lock");
        let result = match slot.as_ref() {
            Some((existing, _)) if *existing != operation => Err(checkpoint_conflict()),
            _ => {
                // As the host's store does: recording again without a cursor keeps the cursor.
                let cursor = cursor.or_else(|| slot.take().and_then(|(_, kept)| kept));
                *slot = Some((operation, cursor));
                Ok(())
            }
        };
        Box::pin(std::future::ready(result))
    }

    fn recorded(&self) -> Option<(ProviderOperationRef, Option<String>)> {
        self.recorded.lock().expect("checkpoint lock").clone()
    }
}

/// The failure for replacing a recorded provider operation with a different one.
pub(crate) fn checkpoint_conflict() -> ConnectorFailure {
    ConnectorFailure::new(
        crate::codes::TRANSACTION_CHECKPOINT_CONFLICT,
        "a different provider operation is already checkpointed for this transaction",
        ErrorCategory::Permanent,
        ConnectorOperation::TransactionCommit,
        crate::codes::SOURCE_COMPONENT,
    )
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn secrets_compare_by_content_whatever_built_them() {
        let copied = Secret::new("tok_live_123");
        let taken = Secret::from(String::from("tok_live_123"));
        assert_eq!(copied, taken);
        assert_eq!(copied, Secret::from(b"tok_live_123".to_vec()));
        assert_eq!(copied, Secret::from("tok_live_123"));
        assert_ne!(
            copied,
            Secret::new("tok_live_124"),
            "same length, other bytes"
        );
        assert_ne!(copied, Secret::new("tok_live_1234"), "other length");
        assert_eq!(taken.expose_str(), Ok("tok_live_123"));
        assert_eq!(format!("{taken:?}"), "Secret([REDACTED])");
    }

    #[test]
    fn a_static_invocations_debug_shows_neither_input_nor_credential() {
        let caller = super::CallerIdentity::new("user:ada", "test");
        let action = aip_connector_core::model::Action::new(
            "cap:x:y",
            serde_json::json!({ "note": "input-canary" }),
        );
        let invocation = super::StaticInvocation::new(action, caller).with_credential(
            super::CredentialHandle::new("cred-1", "vault", Secret::new("secret-canary")),
        );
        let shown = format!("{invocation:?}");
        assert!(shown.contains("cap:x:y") && shown.contains("credential_set: true"));
        assert!(!shown.contains("input-canary") && !shown.contains("secret-canary"));
    }

    #[test]
    fn clones_share_one_buffer_that_outlives_the_first_drop() {
        let secret = Secret::from(String::from("s3cr3t"));
        let clone = secret.clone();
        assert!(std::ptr::eq(secret.expose_bytes(), clone.expose_bytes()));
        drop(secret);
        // Wiping happens on the last clone's drop only: this one still reads the secret.
        assert_eq!(clone.expose_bytes(), b"s3cr3t");
    }
}
