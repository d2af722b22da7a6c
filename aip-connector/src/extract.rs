//! Extractors: typed handler parameters that are also evidence of what a handler supports.
//!
//! A handler asks for what it uses, axum style. Each extractor type carries an
//! [`ExtractorKind`] as an associated constant; `#[capability]` recognises extractors by name to
//! compute the `CapabilityImplementationSupport` record at compile time, and the code it
//! generates asserts `<T as Extractor>::KIND` for every parameter, so a renamed or aliased import
//! cannot make the macro's view and the compiler's view of the signature disagree.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aip_connector_core::ids::PrincipalId;
use aip_connector_core::model::{
    ConnectorFailure, ConnectorOperation, ErrorCategory, ProviderOperationRef, StreamChunkKind,
};
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codes;
use crate::invocation::{
    CheckpointRecorder, ChunkSink, CompensationTarget, CredentialHandle, InvocationContext, Secret,
    VerifiedApprovals, VerifiedTenant,
};

/// What an extractor proves about a handler. The discriminants are stable: generated code
/// compares them in constant evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum ExtractorKind {
    /// [`IdempotencyKey`]: the handler forwards the key downstream → `retry` support.
    IdempotencyKey = 1,
    /// [`Cancellation`]: the handler observes cancellation → `cancellation` support.
    Cancellation = 2,
    /// [`Deadline`]: the handler knows its deadline (proves nothing by itself).
    Deadline = 3,
    /// [`StreamSink`]: the handler emits chunks → `streaming` support.
    StreamSink = 4,
    /// [`Checkpoint`]: the handler records the provider operation → `transaction` support.
    Checkpoint = 5,
    /// [`Credential`]: the handler uses a resolved credential → `credentials` support.
    Credential = 6,
    /// [`Tenant`]: the handler reads the verified tenant (proves nothing by itself).
    Tenant = 7,
    /// [`Caller`]: the handler reads the authenticated caller (proves nothing by itself).
    Caller = 8,
    /// [`Approval`]: the handler reads the verified approvals → `approval` support.
    Approval = 9,
    /// [`Compensation`]: the handler compensates another action and reads its settled outcome
    /// (proves nothing by itself; compensation support comes from the contract).
    Compensation = 10,
    /// [`ClaimedPlan`]: the handler commits a plan and reads it (proves nothing by itself; plan
    /// support comes from the contract).
    ClaimedPlan = 11,
}

/// A handler parameter the host fills from the invocation, not from the input.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an aip-connector extractor",
    label = "taken for an extractor because of its type name",
    note = "extractors are `IdempotencyKey`, `Cancellation`, `Deadline`, `StreamSink<T>`, `Checkpoint`, `Credential`, `Tenant`, `Caller`, `Approval`, `Compensation` and `ClaimedPlan` from `aip_connector`; rename your own type if it shadows one of these names"
)]
pub trait Extractor: sealed::Sealed + Sized + Send + 'static {
    /// What this extractor proves about the handler.
    const KIND: ExtractorKind;

    /// Reads the value out of the invocation.
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure>;
}

/// Extractors are evidence of support, so only this crate defines them: a user type that shares
/// an extractor's name cannot implement the trait and slip past the type-level check.
mod sealed {
    pub trait Sealed {}
    impl Sealed for super::IdempotencyKey {}
    impl Sealed for super::Cancellation {}
    impl Sealed for super::Deadline {}
    impl<T> Sealed for super::StreamSink<T> {}
    impl Sealed for super::Checkpoint {}
    impl Sealed for super::Credential {}
    impl Sealed for super::Tenant {}
    impl Sealed for super::Caller {}
    impl Sealed for super::Approval {}
    impl Sealed for super::Compensation {}
    impl Sealed for super::ClaimedPlan {}
}

fn missing(what: &str, code: &str, category: ErrorCategory) -> ConnectorFailure {
    ConnectorFailure::new(
        code,
        format!("the invocation carries no {what}"),
        category,
        ConnectorOperation::Invocation,
        codes::SOURCE_COMPONENT,
    )
}

/// The action's idempotency key. Forward it to the provider with
/// [`ProviderRequest::idempotency`](crate::provider::ProviderRequest::idempotency) so that a
/// retried call does not repeat the effect: that sends [`for_provider`](Self::for_provider), a
/// digest of the key as the host deduplicates it, so two tenants (or principals, per the
/// contract's key scope) that both send `invoice-42` reach the provider as two operations.
///
/// An action without a key fails the handler with `idempotency.required` (permanent); a key the
/// context cannot scope, with `idempotency.scope_missing` (policy).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    key: String,
    scoped: Option<String>,
    provider: String,
}

impl IdempotencyKey {
    /// Prefix of [`for_provider`](Self::for_provider) keys; the `1` names the derivation, so a
    /// later one can be told apart.
    pub const PROVIDER_KEY_PREFIX: &'static str = "aip1_";

    /// The key as sent by the caller. Two tenants may send the same one for different intents:
    /// to name an operation at a provider, use [`for_provider`](Self::for_provider).
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// The key as the host deduplicates it, `<Scope>:<partition>:<key>` for the contract's key
    /// scope (`Tenant:acme:invoice-42` under `key_scope = tenant`). It is unique wherever the
    /// host's idempotency records are. Outside a host (a
    /// [`StaticInvocation`](crate::StaticInvocation)) it is the caller's key, unless
    /// [`StaticInvocation::with_idempotency_scope`](crate::StaticInvocation::with_idempotency_scope)
    /// names the scope.
    pub fn scoped(&self) -> &str {
        self.scoped.as_deref().unwrap_or(&self.key)
    }

    /// The key to give a provider: `aip1_` and the SHA-256 (lowercase hex) of
    /// [`scoped`](Self::scoped), 69 ASCII characters whatever the key and ids. A provider that
    /// deduplicates on it merges exactly the calls the host would replay, and it learns neither
    /// the tenant nor the principal, fits the usual 255-character limits and is always a valid
    /// header value. Keys derived per provider call (`format!("{}-refund", key.for_provider())`)
    /// go through [`ProviderRequest::idempotency_key`](crate::provider::ProviderRequest::idempotency_key).
    pub fn for_provider(&self) -> &str {
        &self.provider
    }

    /// [`for_provider`](Self::for_provider) of a scoped key: what a provider receives for it,
    /// for tests and tools that check the provider's side.
    pub fn provider_key_of(scoped: &str) -> String {
        let digest = crate::host::canonical::sha256_hex(scoped.as_bytes());
        let mut key = String::with_capacity(Self::PROVIDER_KEY_PREFIX.len() + digest.len());
        key.push_str(Self::PROVIDER_KEY_PREFIX);
        key.push_str(&digest);
        key
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&self.key).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

impl Extractor for IdempotencyKey {
    const KIND: ExtractorKind = ExtractorKind::IdempotencyKey;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context
            .idempotency_key()
            .ok_or_else(|| {
                missing(
                    "idempotency key",
                    codes::IDEMPOTENCY_REQUIRED,
                    ErrorCategory::Permanent,
                )
            })
            .and_then(|key| {
                // Fail closed: a key the context cannot scope would reach the provider unscoped
                // and merge with another tenant's equal key.
                let scoped = context.scoped_idempotency_key().ok_or_else(|| {
                    missing(
                        "scoped idempotency key",
                        codes::IDEMPOTENCY_SCOPE_MISSING,
                        ErrorCategory::Policy,
                    )
                })?;
                Ok(IdempotencyKey {
                    key: key.to_owned(),
                    provider: IdempotencyKey::provider_key_of(&scoped),
                    scoped: (scoped != key).then(|| scoped.into_owned()),
                })
            })
    }
}

/// Fires when the action is cancelled (or its deadline passes), and when it ends.
///
/// Under a host, a cancel or the deadline also drops the handler's future (docs/host-runtime.md
/// §7.2): code after the point where the handler waited does not run, whatever it checks. The
/// token serves what outlives that future: work the handler spawned (give it
/// [`token`](Self::token)`.clone()`), or a library that takes a token. Work the handler started
/// *at the provider* is stopped by the capability's cancel companion, with the name the
/// handler gave it through [`set_handle`](Self::set_handle): not by a drop guard, since a
/// handler may also *return* at its deadline (a provider call bounded by the deadline gives up
/// with its own failure) and leave that work running (a warehouse trial's guard leaked a
/// query so). A handler
/// driven without a host (a test calling `Connector::invoke`) is not dropped, and can await
/// [`cancelled`](Self::cancelled) alongside its provider calls or check `is_cancelled` between
/// steps.
///
/// Taking it declares `execution.supports_cancel`: that the connector makes a cancellation
/// reach its provider. For work the provider already accepted, that is a `cancel = ...`
/// companion, which the host calls after it stopped the handler; when the provider named that
/// work itself (a query id in its answer), hand the name on with
/// [`set_handle`](Self::set_handle), and the companion reads it as
/// [`CancelRequest::handle`](crate::CancelRequest::handle).
#[derive(Clone)]
pub struct Cancellation {
    token: CancellationToken,
    /// The call's context, for its [`CancelHandle`](crate::invocation::CancelHandle). Weak: a
    /// task the handler spawned with a clone keeps the token, not the call's credential, input
    /// and approvals (a review's finding); a handle set after the call ended goes nowhere.
    context: std::sync::Weak<dyn InvocationContext>,
}

impl std::fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancellation")
            .field("cancelled", &self.token.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Cancellation {
    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes when cancellation is requested.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// The underlying token, to hand to libraries that accept one.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Names the provider work this call started, for the capability's cancel companion: once
    /// a cancel or the deadline stops the handler, the companion gets it as
    /// [`CancelRequest::handle`](crate::CancelRequest::handle) (the handle set last). Set it
    /// as soon as the provider answers with the work's id, before waiting on the work:
    ///
    /// ```
    /// # use aip_connector::prelude::*;
    /// # async fn run(api: ProviderClient, cancellation: Cancellation) -> Result<(), ConnectorFailure> {
    /// let started: serde_json::Value = api.post("/queries").send_json().await?;
    /// cancellation.set_handle(started["id"].as_str().unwrap_or_default());
    /// // ... poll the query; a cancel drops this future, and the companion sends
    /// // `DELETE /queries/{handle}`.
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Kept in memory for this call only, never stored or logged. Without a companion (or under
    /// a context that calls none) it goes nowhere.
    pub fn set_handle(&self, handle: impl Into<String>) {
        if let Some(context) = self.context.upgrade()
            && let Some(slot) = context.cancel_handle()
        {
            slot.set(handle);
        }
    }
}

impl Extractor for Cancellation {
    const KIND: ExtractorKind = ExtractorKind::Cancellation;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        Ok(Cancellation {
            token: context.cancellation().clone(),
            context: Arc::downgrade(context),
        })
    }
}

/// The instant `after` past `now`. A duration past what the clock can represent (a caller's
/// `timeout_ms` of `u64::MAX`, a `Duration::MAX` timeout) is a deadline that never comes (about
/// 30 years, as tokio's own timers), not a panic.
pub(crate) fn instant_after(now: Instant, after: std::time::Duration) -> Instant {
    const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);
    now.checked_add(after).unwrap_or_else(|| now + FAR_FUTURE)
}

/// When the handler must be done: the smaller of the action's `timeout_ms` (clamped to
/// [`HostLimits::max_action_timeout_ms`](crate::host::HostLimits::max_action_timeout_ms)) and
/// the SLA timeout, or whichever of them is set; the host's
/// [`default_timeout_ms`](crate::host::HostLimits::default_timeout_ms) only when neither is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Instant);

impl Deadline {
    /// The instant the host gives up.
    pub fn at(&self) -> Instant {
        self.0
    }

    /// Time left (zero once passed), e.g. as a per-request timeout for the provider.
    pub fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

impl Extractor for Deadline {
    const KIND: ExtractorKind = ExtractorKind::Deadline;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        Ok(Deadline(context.deadline()))
    }
}

/// Emits stream chunks of type `T`. `send` waits while the host's buffer is full
/// (back-pressure); it fails once the stream is closed (cancelled or finished), and for an item
/// larger than the host's `max_output_bytes` (`stream.chunk_too_large`: nothing is sent, and the
/// stream goes on).
///
/// A call not invoked in streaming mode fails the handler with `execution.mode_unsupported`.
pub struct StreamSink<T> {
    sink: Arc<dyn ChunkSink>,
    /// How an item becomes a chunk's data, fixed where the sink is extracted (which requires
    /// `T: StreamItem`). `send` needs no bound of its own, so an item type that cannot be
    /// serialized is reported once, at the handler's `StreamSink<T>` parameter, and not again
    /// at every `send`.
    encode: fn(&T) -> serde_json::Result<serde_json::Value>,
}

impl<T> fmt::Debug for StreamSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamSink").finish_non_exhaustive()
    }
}

impl<T> StreamSink<T> {
    /// Sends one data chunk.
    pub async fn send(&self, item: T) -> Result<(), ConnectorFailure> {
        let data = (self.encode)(&item).map_err(unserializable)?;
        self.sink.send(StreamChunkKind::Data, data).await
    }

    /// Sends one progress chunk (any serializable progress report).
    pub async fn progress(&self, progress: impl Serialize) -> Result<(), ConnectorFailure> {
        let data = serde_json::to_value(&progress).map_err(unserializable)?;
        self.sink.send(StreamChunkKind::Progress, data).await
    }
}

/// `stream.chunk_unserializable`: an item or progress report that serde could not encode.
fn unserializable(error: serde_json::Error) -> ConnectorFailure {
    ConnectorFailure::new(
        codes::STREAM_CHUNK_UNSERIALIZABLE,
        format!("stream chunk could not be serialized: {error}"),
        ErrorCategory::Connector,
        ConnectorOperation::Streaming,
        codes::SOURCE_COMPONENT,
    )
}

/// A type a [`StreamSink`] can send: each item is serialized into a data chunk.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the item of a `StreamSink`",
    label = "each item of this stream is serialized into a data chunk",
    note = "derive `serde::Serialize` for `{Self}`: `#[derive(Serialize)]`"
)]
pub trait StreamItem: Serialize + Send + 'static {}

// `do_not_recommend`: a missing bound is reported with the fix above, instead of rustc's list
// of every type that implements `Serialize`.
#[diagnostic::do_not_recommend]
impl<T: Serialize + Send + 'static> StreamItem for T {}

// The one `StreamItem` bound of a sink: a handler whose items cannot be serialized is refused
// at its `StreamSink<T>` parameter, where the macro's extractor check is spanned, and its
// `send` calls (which carry no bound) add no errors of their own.
impl<T: StreamItem> Extractor for StreamSink<T> {
    const KIND: ExtractorKind = ExtractorKind::StreamSink;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        let sink = context.stream().ok_or_else(|| {
            missing(
                "stream (the action was not invoked in streaming mode)",
                codes::EXECUTION_MODE_UNSUPPORTED,
                ErrorCategory::Permanent,
            )
        })?;
        Ok(StreamSink {
            sink,
            encode: |item| serde_json::to_value(item),
        })
    }
}

/// Records the provider operation of a transactional call, durably, before the handler awaits
/// the provider; a later attempt (or reconciliation) sees what was recorded.
///
/// An action without an admitted transaction fails the handler with
/// `transaction.context_missing`.
#[derive(Clone)]
pub struct Checkpoint(Arc<dyn CheckpointRecorder>);

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Checkpoint")
            .field(&self.0.recorded())
            .finish()
    }
}

impl Checkpoint {
    /// Records the provider operation (and an opaque cursor). A different operation than one
    /// already recorded is refused; recording the same one again without a cursor keeps the
    /// cursor recorded before.
    ///
    /// # Errors
    ///
    /// - `transaction.checkpoint_invalid`: an empty provider or operation id.
    /// - `transaction.checkpoint_conflict`: a different operation is already recorded.
    /// - `storage.unavailable` (temporary, retryable): the store failed.
    /// - `transaction.not_found`: the transaction record is gone or changed state.
    pub async fn record(
        &self,
        operation: ProviderOperationRef,
        cursor: Option<String>,
    ) -> Result<(), ConnectorFailure> {
        if operation.provider.trim().is_empty() || operation.operation_id.trim().is_empty() {
            return Err(ConnectorFailure::new(
                codes::TRANSACTION_CHECKPOINT_INVALID,
                "a checkpoint needs a non-empty provider and operation id",
                ErrorCategory::Connector,
                ConnectorOperation::TransactionCommit,
                codes::SOURCE_COMPONENT,
            ));
        }
        self.0.record(operation, cursor).await
    }

    /// What an earlier attempt of this transaction recorded, or what this handler recorded
    /// since.
    pub fn recorded(&self) -> Option<(ProviderOperationRef, Option<String>)> {
        self.0.recorded()
    }

    /// The provider operation this attempt works on, for an API that lets the client name its
    /// writes (an operation id header): the one an earlier attempt of this transaction recorded,
    /// so a re-run asks the provider about the same operation, else `<prefix>_<key>` named after
    /// the action's provider key ([`IdempotencyKey::for_provider`]). Record it
    /// ([`record`](Self::record)) before the request leaves, and send its id with the request.
    ///
    /// Derived from the key, never from the clock or a random source: a host that lost its
    /// records delivers the action again without the checkpoint, and the provider answers the
    /// redelivery with the first delivery's effect, filed under the first id. A fresh id would
    /// checkpoint an operation no lookup finds, and a reconciliation would read it as never
    /// made (conformance's `delivery_id_stable` compares the two deliveries' ids).
    ///
    /// ```
    /// # use aip_connector::prelude::*;
    /// # async fn book(key: IdempotencyKey, checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
    /// let operation = checkpoint.operation_for(&key, "calendar-api", "bk");
    /// checkpoint.record(operation.clone(), None).await?;
    /// // ... send the request with `x-operation-id: <operation.operation_id>` ...
    /// # Ok(())
    /// # }
    /// ```
    pub fn operation_for(
        &self,
        key: &IdempotencyKey,
        provider: &str,
        prefix: &str,
    ) -> ProviderOperationRef {
        if let Some((operation, _cursor)) = self.recorded() {
            return operation;
        }
        ProviderOperationRef {
            provider: provider.to_owned(),
            operation_id: format!("{prefix}_{}", key.for_provider()),
            request_id: None,
        }
    }
}

impl Extractor for Checkpoint {
    const KIND: ExtractorKind = ExtractorKind::Checkpoint;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context.checkpoint().map(Checkpoint).ok_or_else(|| {
            missing(
                "transaction checkpoint (the action has no admitted transaction: send it with a `transaction` block whose mode is `execute`, or `commit` after a `plan`)",
                codes::TRANSACTION_CONTEXT_MISSING,
                ErrorCategory::Permanent,
            )
        })
    }
}

/// The credential the deployment resolved for this call. Its secret is redacted in `Debug` and
/// the type is not serializable.
///
/// A call without a resolved credential fails the handler with `credential.required` (auth).
#[derive(Clone, Debug)]
pub struct Credential(CredentialHandle);

impl Credential {
    /// Credential reference id (not secret).
    pub fn id(&self) -> &str {
        &self.0.id
    }
    /// Issuer.
    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }
    /// Granted scopes.
    pub fn scopes(&self) -> &[String] {
        &self.0.scopes
    }
    /// When the credential expires (Unix milliseconds), if the provider said. The host checks
    /// expiry once, before the handler starts; a handler that runs long (a stream, a paged
    /// export) compares this with the time before each provider call and fails with
    /// `ErrorCategory::Auth` (`retryable`: the next attempt resolves a fresh credential) rather
    /// than send an expired token.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use aip_connector::extract::Extractor;
    /// use aip_connector::model::Action;
    /// use aip_connector::{
    ///     CallerIdentity, Credential, CredentialHandle, InvocationContext, Secret, StaticInvocation,
    /// };
    ///
    /// let handle = CredentialHandle::new("cred-1", "vault", Secret::new("tok"))
    ///     .with_expiry_ms(1_700_000_000_000);
    /// let caller = CallerIdentity::new("user:ada", "test");
    /// let context: Arc<dyn InvocationContext> = Arc::new(
    ///     StaticInvocation::new(Action::new("cap:x:y", serde_json::json!({})), caller)
    ///         .with_credential(handle),
    /// );
    /// let credential = Credential::extract(&context).unwrap();
    /// assert_eq!(credential.expires_at_ms(), Some(1_700_000_000_000));
    /// ```
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.0.expires_at_ms
    }
    /// The secret material, to put into the provider request.
    pub fn secret(&self) -> &Secret {
        &self.0.secret
    }
}

/// The deployment's handle the extractor wraps. A reconcile companion receives that handle
/// (`Reconciliation::credential`), so a lookup helper shared by a handler and its companion takes
/// `&CredentialHandle`, and the handler passes `credential.as_ref()` (an author trial had to
/// pass the `Secret` instead).
///
/// ```
/// use aip_connector::{Credential, CredentialHandle, ProviderClient, Reconciliation};
///
/// /// Shared by the handler and the reconcile companion.
/// fn lookup(client: &ProviderClient, id: &str, credential: Option<&CredentialHandle>) {
///     let mut request = client.get(&format!("/envelopes/{id}"));
///     if let Some(credential) = credential {
///         request = request.bearer_auth(&credential.secret);
///     }
///     # let _ = request;
/// }
///
/// fn in_the_handler(client: &ProviderClient, credential: &Credential) {
///     lookup(client, "env_1", Some(credential.as_ref()));
/// }
///
/// fn in_the_companion(client: &ProviderClient, request: &Reconciliation) {
///     lookup(client, "env_1", request.credential.as_ref());
/// }
/// ```
impl AsRef<CredentialHandle> for Credential {
    fn as_ref(&self) -> &CredentialHandle {
        &self.0
    }
}

impl Extractor for Credential {
    const KIND: ExtractorKind = ExtractorKind::Credential;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context
            .credential()
            .cloned()
            .map(Credential)
            .ok_or_else(|| {
                missing(
                    "resolved credential",
                    codes::CREDENTIAL_MISSING,
                    ErrorCategory::Auth,
                )
            })
    }
}

/// The verified tenant of the call.
///
/// A call without a verified tenant fails the handler with `identity.tenant_missing` (auth).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(VerifiedTenant);

impl Tenant {
    /// Tenant id.
    pub fn id(&self) -> &str {
        &self.0.id
    }
    /// The system that owns the tenant id.
    pub fn system(&self) -> Option<&str> {
        self.0.system.as_deref()
    }
}

impl Extractor for Tenant {
    const KIND: ExtractorKind = ExtractorKind::Tenant;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context.tenant().cloned().map(Tenant).ok_or_else(|| {
            missing(
                "verified tenant",
                codes::TENANT_MISSING,
                ErrorCategory::Auth,
            )
        })
    }
}

/// The transport-authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    principal_id: PrincipalId,
    issuer: String,
}

impl Caller {
    /// Principal id.
    pub fn principal_id(&self) -> &PrincipalId {
        &self.principal_id
    }
    /// Who vouched for the identity.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }
}

impl Extractor for Caller {
    const KIND: ExtractorKind = ExtractorKind::Caller;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        let caller = context.caller();
        Ok(Caller {
            principal_id: caller.principal_id.clone(),
            issuer: caller.issuer.clone(),
        })
    }
}

/// The verified approvals that released this action.
///
/// An action that was not approved fails the handler with `approval.required` (policy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval(VerifiedApprovals);

impl Approval {
    /// The verified approval set.
    pub fn approvals(&self) -> &VerifiedApprovals {
        &self.0
    }
}

impl Extractor for Approval {
    const KIND: ExtractorKind = ExtractorKind::Approval;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context.approval().cloned().map(Approval).ok_or_else(|| {
            missing(
                "verified approval",
                codes::APPROVAL_MISSING,
                ErrorCategory::Policy,
            )
        })
    }
}

/// The settled action a compensating handler undoes: its ids, its output (or, for a partial
/// side effect, its error) and the provider operation it checkpointed.
///
/// The host fills it only for an action in transaction mode `compensate`, after it checked
/// that the target committed and is inside the compensation window; a handler that takes it is
/// refused (`transaction.context_missing`) when called any other way.
#[derive(Clone, Debug)]
pub struct Compensation(Arc<CompensationTarget>);

impl Compensation {
    /// What is being compensated.
    pub fn target(&self) -> &CompensationTarget {
        &self.0
    }
}

impl std::ops::Deref for Compensation {
    type Target = CompensationTarget;

    fn deref(&self) -> &CompensationTarget {
        &self.0
    }
}

impl Extractor for Compensation {
    const KIND: ExtractorKind = ExtractorKind::Compensation;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context.compensation().map(Compensation).ok_or_else(|| {
            missing(
                "compensation target (the action is not a `compensate`)",
                codes::TRANSACTION_CONTEXT_MISSING,
                ErrorCategory::Permanent,
            )
        })
    }
}

/// The plan a `commit` claims: what the `plan` action previewed and the approvers saw. A
/// commit's handler reads it to do what was approved rather than what the provider would
/// answer now: the validation's answer (a quoted price, an availability flag) is
/// [`validation_as`](Self::validation_as).
///
/// The host fills it only for an action in transaction mode `commit`, after it claimed the plan
/// (the same principal, tenant, capability and input, not expired); a handler that takes it is
/// refused (`transaction.context_missing`) when called any other way, so `#[capability]`
/// requires of a handler that takes it a `commit` mode and no `execute` (a commit always names
/// a plan).
///
/// ```
/// use std::sync::Arc;
/// use aip_connector::extract::Extractor;
/// use aip_connector::model::{Action, TransactionPlan};
/// use aip_connector::{CallerIdentity, ClaimedPlan, InvocationContext, StaticInvocation};
/// use serde::Deserialize;
/// use serde_json::json;
///
/// #[derive(Deserialize)]
/// struct Quote {
///     fee_cents: u64,
/// }
///
/// // A plan as the host stores it, read back from its JSON.
/// let plan: TransactionPlan = serde_json::from_value(json!({
///     "plan_id": "plan:txn_1", "transaction_id": "txn_1", "action_id": "act_1",
///     "capability_id": "cap:bank:send", "transaction": {"mode": "plan"},
///     "planned_by": {"id": "user:ada", "kind": "human"}, "input_hash": "00",
///     "approval_required": true, "created_at": "2026-12-06T08:00:00Z",
///     "metadata": {"connector_validation": {"fee_cents": 250}}
/// }))
/// .unwrap();
/// let caller = CallerIdentity::new("user:ada", "test");
/// let context: Arc<dyn InvocationContext> = Arc::new(
///     StaticInvocation::new(Action::new("cap:bank:send", json!({})), caller).with_plan(plan),
/// );
/// let plan = ClaimedPlan::extract(&context).unwrap();
/// assert_eq!(plan.id(), "plan:txn_1");
/// let quote: Quote = plan.validation_as().unwrap().expect("the plan was validated");
/// assert_eq!(quote.fee_cents, 250);
/// ```
#[derive(Clone, Debug)]
pub struct ClaimedPlan(Arc<aip_connector_core::model::TransactionPlan>);

impl ClaimedPlan {
    /// The plan's id (`transaction.plan_id` of the commit).
    pub fn id(&self) -> &str {
        &self.0.plan_id
    }

    /// The whole plan, as the host stored it.
    pub fn plan(&self) -> &aip_connector_core::model::TransactionPlan {
        &self.0
    }

    /// The answer of the capability's validation (`validate = ...`), which the plan carries as
    /// `metadata.connector_validation`; `None` when the plan was made without one (its
    /// dry-run fidelity calls none).
    pub fn validation(&self) -> Option<&serde_json::Value> {
        self.0
            .metadata
            .as_ref()?
            .get("connector_validation")
            .filter(|value| !value.is_null())
    }

    /// [`validation`](Self::validation) decoded as the validation's output type `T`.
    ///
    /// # Errors
    ///
    /// `connector.runtime_failure` (connector, not retryable) when the stored answer is not a
    /// `T`: the handler and its validation disagree on the type, a bug of the connector. The
    /// failure names neither the value (serde's message may quote it) nor the Rust type.
    pub fn validation_as<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Option<T>, ConnectorFailure> {
        self.validation()
            .map(|value| {
                T::deserialize(value).map_err(|_| {
                    ConnectorFailure::new(
                        codes::CONNECTOR_RUNTIME_FAILURE,
                        "the plan's validation answer does not decode as the type the commit \
                         handler reads it as: the handler and its validate companion disagree",
                        ErrorCategory::Connector,
                        ConnectorOperation::Invocation,
                        codes::SOURCE_COMPONENT,
                    )
                })
            })
            .transpose()
    }
}

impl Extractor for ClaimedPlan {
    const KIND: ExtractorKind = ExtractorKind::ClaimedPlan;
    fn extract(context: &Arc<dyn InvocationContext>) -> Result<Self, ConnectorFailure> {
        context.plan().map(ClaimedPlan).ok_or_else(|| {
            missing(
                "claimed plan (the action is not a `commit`)",
                codes::TRANSACTION_CONTEXT_MISSING,
                ErrorCategory::Permanent,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aip_connector_core::model::TransactionPlan;
    use serde_json::{Value, json};

    fn claimed(metadata: Value) -> ClaimedPlan {
        let plan: TransactionPlan = serde_json::from_value(json!({
            "plan_id": "plan:txn_1", "transaction_id": "txn_1", "action_id": "act_1",
            "capability_id": "cap:bank:send", "transaction": {"mode": "plan"},
            "planned_by": {"id": "user:ada", "kind": "human"}, "input_hash": "00",
            "approval_required": true, "created_at": "2026-12-06T08:00:00Z",
            "metadata": metadata
        }))
        .expect("a plan");
        ClaimedPlan(Arc::new(plan))
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code, reason = "only decoded")]
    struct SecretQuote {
        fee_cents: u64,
    }

    /// What a handler sets with `Cancellation::set_handle` is kept by the context (the last
    /// one), so a unit test under `StaticInvocation` reads it as the host's companion would.
    #[test]
    fn a_handle_set_through_cancellation_is_kept_by_the_context() {
        let invocation = crate::StaticInvocation::new(
            aip_connector_core::model::Action::new("cap:warehouse:query", json!({})),
            crate::CallerIdentity::new("user:ada", "test"),
        );
        let context: Arc<dyn InvocationContext> = Arc::new(invocation);
        assert_eq!(context.cancel_handle().and_then(|h| h.get()), None);
        let cancellation = Cancellation::extract(&context).expect("always extracts");
        cancellation.set_handle("q-1");
        cancellation.clone().set_handle("q-2");
        assert_eq!(
            context.cancel_handle().and_then(|h| h.get()).as_deref(),
            Some("q-2")
        );
        assert!(!format!("{cancellation:?}").contains("q-2"));
        let slot = context.cancel_handle().expect("kept");
        assert_eq!(format!("{slot:?}"), "CancelHandle { set: true }");
        // A clone held past the call (a spawned task's) does not keep the call's context, with
        // its credential and input, alive; its handle then goes nowhere.
        let kept = Arc::downgrade(&context);
        drop(context);
        assert!(kept.upgrade().is_none());
        cancellation.set_handle("q-3");
    }

    /// A validation answer the commit's type cannot read is the connector's bug: a typed,
    /// non-retryable failure that quotes neither the stored value (which approvers saw, and may
    /// be personal) nor the Rust type (no crate layout in errors sent to callers).
    #[test]
    fn a_validation_answer_of_another_type_fails_without_quoting_it() {
        let plan = claimed(json!({"connector_validation": {"fee_cents": "iban-DE89-canary"}}));
        let failure = plan.validation_as::<SecretQuote>().expect_err("a mismatch");
        let error = failure.to_protocol_error();
        assert_eq!(error.code, codes::CONNECTOR_RUNTIME_FAILURE);
        assert_eq!(error.retryable, Some(false));
        let shown = format!("{failure:?} {}", serde_json::to_string(&error).unwrap());
        assert!(!shown.contains("canary"), "{shown}");
        assert!(!shown.contains("SecretQuote"), "{shown}");
    }

    /// A plan made without a validation (or whose validation answered `null`) has nothing to
    /// decode: `None`, not a failure.
    #[test]
    fn a_plan_without_a_validation_answer_decodes_to_none() {
        for metadata in [
            json!({}),
            json!({"connector_validation": null}),
            Value::Null,
        ] {
            let plan = claimed(metadata.clone());
            assert!(plan.validation().is_none(), "{metadata}");
            assert!(
                plan.validation_as::<SecretQuote>()
                    .expect("no answer is not an error")
                    .is_none(),
                "{metadata}"
            );
        }
        let quoted = claimed(json!({"connector_validation": {"fee_cents": 250}}));
        let quote = quoted
            .validation_as::<SecretQuote>()
            .unwrap()
            .expect("an answer");
        assert_eq!(quote.fee_cents, 250);
    }
}
