//! The invocation pipeline, in upstream order (`aip-runtime.md` §1.3):
//!
//! 0. envelope checks, input limits, trusted identity;
//! 1. capability lookup; 2. input schema; 3. contract and mode checks; 4. credentials;
//! 5. authorization; 6. idempotency claim;
//! 9. provided or resumed approval, before the reservation: it claims the single resume;
//! 7. reservation (replay / conflict / in progress); 10. approval gate;
//! 14. handler with deadline and cancellation; 15. output schema; 17. settle.
//!
//! Everything before the reservation fails without writing the store (but for stage 9's claim,
//! which `run` gives back when the result is retryable), so a duplicate with bad input fails
//! validation again instead of replaying.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aip_connector_core::ids::{ApprovalId, CapabilityId};
use aip_connector_core::model::{
    Action, ActionMode, ActionResult, ActionResultStatus, Capability, CapabilityContract,
    CompensationMode, ErrorCategory, ExternalAccountRef, IdentityContext, PrincipalKind,
    ProtocolError, TenantRef, TransactionMode,
};
use aip_connector_core::schema::SchemaViolation;
use futures_util::FutureExt;
use serde_json::{Value, json};
use tracing::Instrument;

use super::context::TrustedContext;
use super::idempotency::{self, RESERVATION_GRACE_MS};
use super::invocation::{CancelSignal, HostInvocation};
use super::{HostInner, HostLimits, HostedCapability, approval, failure, transaction};
use crate::codes;
use crate::connector::approval_required;
use crate::invocation::{
    CallerIdentity, CheckpointRecorder, ChunkSink, CompensationTarget, CredentialHandle,
    VerifiedApprovals, VerifiedTenant,
};
use crate::store::{
    ApprovalRecord, ApprovalStatus, IdempotencyRecord, Reservation, ReserveOutcome,
};

mod dropped;

/// How [`run`] was entered.
#[derive(Default)]
pub(crate) struct Options {
    /// The sink of a streaming call.
    pub(crate) stream: Option<Arc<dyn ChunkSink>>,
    /// The approval record of a resumed, approved action (boxed: it is large and rare).
    pub(crate) resume: Option<Box<ApprovalRecord>>,
}

/// Runs the pipeline and returns the result; never panics on bad input.
///
/// The action arrives behind an [`Arc`]: the pipeline's futures carry a pointer instead of the
/// action, and the handler's context shares it instead of copying it.
pub(crate) async fn run(
    host: &Arc<HostInner>,
    action: Arc<Action>,
    caller: &TrustedContext,
    options: Options,
) -> ActionResult {
    // The span is entered before stage 0 bounds the ids, so it clips them itself: a served
    // request could otherwise put a megabyte-long id into every log line of its call.
    let max_id_bytes = host.limits.max_id_bytes;
    let span = tracing::info_span!(
        "aip.invoke",
        action_id = %Clipped::new(action.id.as_str(), max_id_bytes),
        capability_id = %Clipped::new(action.capability_id.as_str(), max_id_bytes),
        // Who called, as the transport authenticated them (found by an operations trial: a
        // settled action's line named neither).
        principal_id = %Clipped::new(caller.principal.id.as_str(), max_id_bytes),
        tenant_id = caller
            .tenant
            .as_ref()
            .map(|tenant| tracing::field::display(Clipped::new(tenant.id.as_str(), max_id_bytes))),
        // The transport's trace id, so the host's log lines join the request's trace.
        trace_id = caller
            .trace_id
            .as_deref()
            .map(|id| tracing::field::display(Clipped::new(id, max_id_bytes))),
    );
    async move {
        // The pipeline's state lives on the heap: the futures of `Host::invoke` and of whoever
        // awaits it stay a few words, so moving them (every caller does, at least once) copies
        // a pointer instead of the pipeline's state.
        // The approval whose resume this call claimed, if any (stage 9). When the result is
        // retryable, or the approved action did not run, the claim is given back, so the next
        // attempt may run the action too.
        let resume_claim = ClaimedResume::default();
        // For the settlement's log line: an `execute`, a `reconcile` and a `compensate` of one
        // capability look alike otherwise.
        let mode = action
            .transaction
            .as_ref()
            .map_or("none", |t| t.mode.as_str());
        // Moved, never borrowed: a borrowed local keeps its place in this future across the
        // await below, which would enlarge it by a whole result.
        let (result, retryable, unattempted, pending_replay) =
            classified(Box::pin(execute(host, action, caller, options, &resume_claim)).await);
        // Two rare results need the store once more, in one boxed step so that this future
        // stays a few words: a retryable resume gives its claim back, and a replayed
        // `pending_approval` is brought up to date with its approval.
        let give_back = resume_claim.to_give_back(retryable, unattempted);
        let result = if give_back.is_some() || pending_replay {
            Box::pin(follow_up(host, caller, give_back, result)).await
        } else {
            result
        };
        // Field values are computed only when the line is logged: nothing here runs on an
        // unlogged call but the match.
        match &result.error {
            Some(error) => tracing::info!(
                status = %result.status,
                code = %error.code,
                mode = %mode,
                replay = result.is_idempotent_replay(),
                // The approval a gated call waits for, which the decisions' lines name.
                approval_id = result.approval_id().map(tracing::field::display),
                "action settled"
            ),
            None => tracing::info!(
                status = %result.status,
                mode = %mode,
                replay = result.is_idempotent_replay(),
                "action settled"
            ),
        }
        result
    }
    .instrument(span)
    .await
}

/// The answer to a keyed call whose key holds a settled record: a resume refused, a conflict,
/// or the stored result replayed (stage 7).
fn settled_key(
    record: IdempotencyRecord,
    action: &Action,
    input_hash: &str,
    resuming: bool,
    tenant: Option<&VerifiedTenant>,
    contract: Option<&CapabilityContract>,
) -> ActionResult {
    if resuming && crate::store::is_pending_approval(&record.result) {
        return failure::failed(
            &action.id,
            failure::policy(
                codes::IDEMPOTENCY_PENDING_RESUME_DENIED,
                "the pending approval stored under this key cannot be resumed by this action",
            ),
        );
    }
    // Never replayed to another tenant: under a scope that is not partitioned by tenant
    // (`principal`, `capability`, `action`, `external_account`), the same scoped key can come
    // from two tenants, and the stored result may hold the first one's data.
    if !idempotency::of_tenant(record.tenant_id.as_deref(), tenant) {
        return failure::failed(
            &action.id,
            failure::permanent(
                codes::IDEMPOTENCY_CONFLICT,
                "the idempotency key was used by another tenant's action; use another key",
            ),
        );
    }
    let behavior = contract.map_or(
        aip_connector_core::model::IdempotencyCollisionBehavior::ReturnOriginalResult,
        |c| c.idempotency.collision_behavior,
    );
    // A replayed `pending_approval` is brought up to date in `run`.
    idempotency::collision(behavior, &record, action, input_hash)
}

/// The approval whose resume a call claimed (stage 9), if any, and whether the claim is to be
/// given back whatever the result: the key's settled record of another action answered the
/// call, so the approved action did not run.
#[derive(Default)]
struct ClaimedResume {
    /// Boxed: a call without a resume carries a word, not the claim's id and token.
    claim: OnceLock<Box<HeldResume>>,
    unspent: std::sync::atomic::AtomicBool,
    /// The key's settlement gave the claim back already, before it released the key (see
    /// [`GiveBack`]).
    given_back: std::sync::atomic::AtomicBool,
    /// The call's handler was started: a failure now may follow effects, whatever it says.
    handler_started: std::sync::atomic::AtomicBool,
}

impl ClaimedResume {
    /// The approval whose claim `run` gives back after a result that is `retryable` (or
    /// [`unattempted`] before any handler started), or that answered for another action
    /// (`unspent`); none when the key's settlement gave it back already.
    fn to_give_back(&self, retryable: bool, unattempted: bool) -> Option<&HeldResume> {
        use std::sync::atomic::Ordering::Relaxed;
        let returns = retryable
            || (unattempted && !self.handler_started.load(Relaxed))
            || self.unspent.load(Relaxed);
        self.claim
            .get()
            .map(Box::as_ref)
            .filter(|_| returns && !self.given_back.load(Relaxed))
    }
}

/// A call's claim on an approval's single resume: the approval, and the claim written (its
/// time and token, [`ApprovalRecord::resume_token`]), by whose token giving it back releases
/// this claim only.
#[derive(Clone, Debug)]
struct HeldResume {
    id: ApprovalId,
    claim: crate::store::ResumeClaim,
}

/// A claimed resume to give back in the settlement of a retryable result, before the key is
/// released: the other way round, a resend arriving between the two writes found the key free
/// and the resume still taken, and was told `policy.approval_already_resumed` (not retryable)
/// for an action that never ran (found by a hostile review).
struct GiveBack<'a> {
    claim: HeldResume,
    /// Set once given back, so `run` does not give it back a second time (which could undo a
    /// later resume's claim).
    done: Option<&'a std::sync::atomic::AtomicBool>,
}

/// What a call that ended retryably still holds and returns: its claimed resume, given back
/// first, then its key's reservation, released (see [`GiveBack`] for the order).
///
/// Returned by the settlement while its caller may give up on the call (a transport's timeout
/// drops the call's future at whichever write it waits for). Dropped before both writes
/// landed, it finishes them on a task of its own: a dropped call otherwise left the approved
/// action claimed, so no retry could resume it, and its key held until its reservation expired.
/// A failure that exhausted its key's attempts is stored instead, as its dead letter, by the
/// same task if the call is dropped while that write is made.
struct HoldReturn<'a> {
    host: &'a Arc<HostInner>,
    /// The claim to give back, until it is given back.
    give_back: Option<Box<GiveBack<'a>>>,
    /// The reservation to release (or to settle with `dead_letter`), until that is written.
    release: Option<Reservation>,
    /// The dead letter to store under the reservation instead of releasing it, while it is
    /// written: a copy, since the write takes the record.
    dead_letter: Option<Box<IdempotencyRecord>>,
}

impl<'a> HoldReturn<'a> {
    /// A hold of a claimed resume only: it gives `claim` back and holds no key.
    fn giving_back(host: &'a Arc<HostInner>, claim: &HeldResume) -> Self {
        HoldReturn {
            host,
            give_back: Some(Box::new(GiveBack {
                claim: claim.clone(),
                done: None,
            })),
            release: None,
            dead_letter: None,
        }
    }

    /// Gives the claim back, then releases the key. Each is forgotten only once written, so a
    /// drop at either write leaves it to [`Drop`].
    async fn run(mut self) {
        if let Some(give_back) = &self.give_back {
            give_back_resume(self.host, &give_back.claim).await;
            if let Some(done) = self.give_back.take().and_then(|g| g.done) {
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let Some(reservation) = &self.release {
            let store = &self.host.store;
            written(super::written_with_retries(|| store.release(reservation)).await);
            self.release = None;
        }
    }
}

impl Drop for HoldReturn<'_> {
    fn drop(&mut self) {
        if self.give_back.is_none() && self.release.is_none() {
            return;
        }
        let give_back = self.give_back.take().map(|g| g.claim);
        let release = self.release.take();
        let dead_letter = self.dead_letter.take();
        if tokio::runtime::Handle::try_current().is_err() {
            // The key waits for its reservation's expiry; the claim stays taken.
            tracing::warn!(
                claimed_resume = give_back.is_some(),
                reserved_key = release.is_some(),
                "a call dropped outside a Tokio runtime could not return what it held"
            );
            return;
        }
        // A plain future, not another guard: a task dropped unpolled (its runtime shutting
        // down) must not spawn again. It says so instead: the warning is moved into the
        // future, so it is dropped with it even when the task never ran.
        let unfinished = UnfinishedReturn {
            claimed_resume: give_back.is_some(),
            reserved_key: release.is_some(),
            dead_letter: dead_letter.is_some(),
        };
        let host = Arc::clone(self.host);
        crate::task::spawn_traced(async move {
            let unfinished = unfinished;
            if let Some(claim) = give_back {
                give_back_resume(&host, &claim).await;
            }
            match (release, dead_letter) {
                (Some(reservation), Some(dead_letter)) => {
                    let settle = || host.store.settle(&reservation, (*dead_letter).clone());
                    match super::written_with_retries(settle).await {
                        // The dropped call's own write landed before it was dropped.
                        Err(crate::store::StoreError::Fenced) => {}
                        outcome => written(outcome),
                    }
                }
                (Some(reservation), None) => {
                    let release = || host.store.release(&reservation);
                    written(super::written_with_retries(release).await);
                }
                (None, _) => {}
            }
            std::mem::forget(unfinished);
        });
    }
}

/// Logs a [`HoldReturn`] task that ended before it wrote everything (its runtime shut down
/// before it ran or while it waited, or a store call panicked), saying what was left: the key
/// then waits for its reservation's expiry, and a claim stays taken.
struct UnfinishedReturn {
    claimed_resume: bool,
    reserved_key: bool,
    dead_letter: bool,
}

impl Drop for UnfinishedReturn {
    fn drop(&mut self) {
        tracing::warn!(
            claimed_resume = self.claimed_resume,
            reserved_key = self.reserved_key,
            dead_letter = self.dead_letter,
            "what a dropped call held was not returned: the task returning it ended first"
        );
    }
}

/// Whether `result` says the action was not attempted although it is not retryable: a call
/// that met a corrupt row or a refused store configuration (a retry meets it again). Like a
/// retryable result, it is not stored under the key, and a claimed resume is given back.
/// (A call told to wait for an earlier attempt of its transaction is retryable anyway.)
///
/// Only the host's own answers count (its pipeline's and its approval service's, by their
/// `source`): a connector's failure may carry the same code after its handler ran (its own
/// database, a downstream host's error passed on), and must be stored or replayed as any. The
/// callers also require that the handler never started, which no `source` can fake.
fn unattempted(result: &ActionResult) -> bool {
    result.error.as_ref().is_some_and(|e| {
        let from_host = e
            .source
            .as_ref()
            .and_then(|source| source.get("component"))
            .and_then(Value::as_str)
            .is_some_and(|component| {
                component == failure::HOST_COMPONENT
                    || component == super::approval::APPROVAL_COMPONENT
            });
        from_host
            && (e.code == codes::TRANSACTION_ATTEMPT_IN_PROGRESS
                || (e.code == codes::STORAGE_UNAVAILABLE && e.retryable == Some(false)))
    })
}

/// `result`, whether it is retryable, whether it is [`unattempted`] (the claimed resume goes
/// back all the same, if the handler never started), and whether it replays a
/// `pending_approval`. (Read here, not in `run`: a local `run` borrowed would keep its place in
/// `run`'s future.)
fn classified(result: ActionResult) -> (ActionResult, bool, bool, bool) {
    let retryable = result.error.as_ref().is_some_and(|e| e.is_retryable());
    let unattempted = unattempted(&result);
    let pending_replay = is_pending_replay(&result);
    (result, retryable, unattempted, pending_replay)
}

/// The pipeline. Steps that only some calls take (approvals, transactions, previews) are awaited
/// through [`Box::pin`]: their state lives on the heap while they run, so the future of the common
/// call stays small and cheap to move.
async fn execute(
    host: &Arc<HostInner>,
    mut action: Arc<Action>,
    caller: &TrustedContext,
    options: Options,
    resume_claim: &ClaimedResume,
) -> ActionResult {
    let Options { stream, resume } = options;
    let Some(_slot) = host.permits.try_acquire() else {
        let mut error = failure::error(
            codes::HOST_OVERLOADED,
            "the host is at its concurrency limit",
            ErrorCategory::Temporary,
            true,
        );
        error.retry_after_ms = Some(100);
        return failure::failed(&action.id, error);
    };

    // 0. The envelope, the input limits, and the identity the host vouches for.
    if let Err(error) = aip_connector_core::validation::validate_action(&action) {
        return failure::failed(
            &action.id,
            failure::permanent(codes::ACTION_INVALID, error.to_string()),
        );
    }
    if let Some(error) = check_nul_characters(&action) {
        return failure::failed(&action.id, error);
    }
    if let Err(exceeded) = check_json_limits(
        &action.input,
        host.limits.max_input_bytes,
        host.limits.max_input_depth,
    ) {
        let message = match exceeded {
            JsonLimit::Depth => format!(
                "action input nests deeper than {} levels",
                host.limits.max_input_depth
            ),
            JsonLimit::Bytes => format!(
                "action input is larger than {} bytes",
                host.limits.max_input_bytes
            ),
        };
        return failure::failed(
            &action.id,
            failure::permanent(codes::ACTION_INPUT_TOO_LARGE, message),
        );
    }
    if let Some(error) = check_key_length(
        action.idempotency_key.as_deref(),
        host.limits.max_idempotency_key_bytes,
    ) {
        return failure::failed(&action.id, error);
    }
    if let Some(error) = check_id_lengths(&action, host.limits.max_id_bytes) {
        return failure::failed(&action.id, error);
    }
    if let Some(error) = check_context_size(&action, host.limits.max_context_bytes) {
        return failure::failed(&action.id, error);
    }
    let tenant = host.tenant_of(caller);
    if let Some(error) =
        check_identity_text(caller, tenant, host.deployment.external_account.as_ref())
    {
        return failure::failed(&action.id, error);
    }
    // The pipeline holds the only reference to the action until the handler runs, so these
    // writes never copy it.
    Arc::make_mut(&mut action).identity = Some(Box::new(trusted_identity(
        tenant,
        host.deployment.external_account.as_ref(),
        caller,
    )));
    if action.transaction.is_some() {
        let normalized = Box::pin(transaction::normalize(
            &host.store,
            Arc::make_mut(&mut action),
            caller.principal.id.as_str(),
        ))
        .await;
        if let Err(error) = normalized {
            return failure::failed(&action.id, error);
        }
    }

    // 1. Capability lookup.
    let Some(hosted) = host.capabilities.get(&action.capability_id) else {
        return failure::failed(
            &action.id,
            failure::permanent(
                codes::RESOURCE_NOT_FOUND,
                format!(
                    "capability `{}` is not hosted here",
                    Clipped::new(action.capability_id.as_str(), host.limits.max_id_bytes)
                ),
            ),
        );
    };
    let capability = hosted.capability();
    let contract = capability.contract.as_ref();
    // A plain action on a capability whose contract executes in one step is an `execute` (as
    // the MCP projection sends it): its handler's `Checkpoint` then has a transaction to record
    // into, where a plain run would fail `transaction.context_missing` and store that failure
    // under the caller's key (docs/host-runtime.md §6.1).
    if action.transaction.is_none()
        && contract
            .and_then(|c| c.transaction.as_ref())
            .is_some_and(|t| t.supports(TransactionMode::Execute))
    {
        // Stage 0's normalization of an `execute` without an id: the keyed action's own, else
        // a fresh one.
        let id = transaction::execute_transaction_id(&action, caller.principal.id.as_str())
            .unwrap_or_else(aip_connector_core::ids::TransactionId::new);
        Arc::make_mut(&mut action).transaction = Some(Box::new(
            aip_connector_core::model::ActionTransaction::new(TransactionMode::Execute)
                .with_transaction_id(id),
        ));
    }
    // A `compensate` runs the compensating capability's handler (§6.8 of docs/host-runtime.md).
    let (routed_hosted, routed) = match route_compensation(host, &action, contract) {
        Ok(Some(routed)) => routed,
        Ok(None) => (hosted, capability),
        Err(error) => return failure::failed(&action.id, error),
    };
    // A `compensate` validates and runs the compensating capability's input too: either
    // capability's data contract can require redaction.
    let requires_redaction = |contract: Option<&CapabilityContract>| {
        contract
            .is_some_and(|c| c.data.redaction_required || c.data.sensitivity.requires_redaction())
    };
    let redact = requires_redaction(contract)
        || (!std::ptr::eq(routed, capability) && requires_redaction(routed.contract.as_ref()));
    if redact {
        tracing::debug!(input_hash = %idempotency::input_hash(&action.input), "redacted input");
    }

    // 2. Input schema.
    if let Some(schema) = &routed_hosted.input_schema
        && let Err(violations) = schema.validate(&action.input, host.limits.max_violations)
    {
        let error = schema_error(
            codes::ACTION_INPUT_SCHEMA_INVALID,
            "action input does not match the capability's input schema",
            &action,
            violations,
            redact.then_some(&routed.input_schema),
        );
        return failure::failed(&action.id, error);
    }

    // 3. Contract and mode checks.
    if let Some(contract) = contract
        && let Err(mut error) = contract_checks(contract, &action)
    {
        // A `compensate` sent to the compensating capability itself: upstream's refusal
        // ("declares no transaction contract") is true but does not say where it should have gone
        // (found by an author trial, which named "the thing that runs").
        if hosted.compensation_only
            && action.transaction.as_ref().map(|t| t.mode) == Some(TransactionMode::Compensate)
        {
            error.message.push_str(&format!(
                "; {}",
                compensation_route_hint(host, &action.capability_id)
            ));
        }
        return failure::failed(&action.id, error);
    }
    // An action that asks to stream, on a capability that streams, but was not invoked
    // streamed: its handler could never get its sink, and the refusal the sink's extractor gave
    // at stage 14 was stored under the key and replayed to the streamed retry (found by a
    // hostile probe: the key was useless for its TTL).
    if action.mode == Some(ActionMode::Streaming) && stream.is_none() {
        return failure::failed(
            &action.id,
            failure::permanent(
                codes::EXECUTION_MODE_UNSUPPORTED,
                "the action asks for `streaming` execution and was not invoked streamed: invoke it with `Host::invoke_stream` (over HTTP, send it with `Accept: text/event-stream`); nothing was reserved",
            ),
        );
    }
    // A compensating handler runs only routed from a `compensate` of the capability it undoes
    // (`hosted` is the capability the action names): named directly, it would fail for want of
    // the compensation context after the approval gate asked someone to release it.
    if hosted.compensation_only {
        return failure::failed(
            &action.id,
            failure::permanent(
                codes::TRANSACTION_CONTEXT_MISSING,
                compensation_route_hint(host, &action.capability_id),
            ),
        );
    }
    // A plain action on a contract that offers no `execute` (a plain action on one that does is
    // an `execute` by now) would reach a handler that checkpoints with no transaction to record
    // into, and fail there: after an approver was asked to release it.
    if hosted.checkpoints
        && action.transaction.is_none()
        && let Some(declared) = contract.and_then(|c| c.transaction.as_ref())
    {
        let modes: Vec<&str> = declared
            .supported_modes
            .iter()
            .map(|m| m.as_str())
            .collect();
        return failure::failed(
            &action.id,
            failure::with_details(
                failure::permanent(
                    codes::TRANSACTION_CONTEXT_MISSING,
                    format!(
                        "capability `{}` runs only in a transaction and does not offer `execute`: send the action with a `transaction` block of a mode it declares ({}; a `commit` after its `plan` when it requires one)",
                        Clipped::new(action.capability_id.as_str(), 128),
                        modes.join(", ")
                    ),
                ),
                json!({ "supported_modes": modes }),
            ),
        );
    }
    // Without a contract nothing declares transactions: only plain execution is allowed.
    if contract.is_none()
        && action
            .transaction
            .as_ref()
            .is_some_and(|t| t.mode != TransactionMode::Execute)
    {
        return failure::failed(
            &action.id,
            failure::permanent(
                codes::TRANSACTION_UNSUPPORTED,
                "the capability declares no contract; only `execute` is allowed",
            ),
        );
    }

    // 4. Credentials, when the contract has a credential policy (nothing to check otherwise).
    let routed_contract = routed.contract.as_ref();
    let credential = if routed_contract.is_some_and(|c| c.credentials.is_some()) {
        match Box::pin(credential_checks(
            host,
            routed,
            routed_contract,
            caller,
            tenant,
            effective_timeout(&action, contract, &host.limits),
        ))
        .await
        {
            // Boxed while the later steps run: it is rare, and inline it would grow every
            // call's pipeline state.
            Ok(credential) => credential.map(Box::new),
            Err(error) => return failure::failed(&action.id, error),
        }
    } else {
        None
    };

    // 5. Authorization.
    if let Err(error) = authorize(caller) {
        return failure::failed(&action.id, error);
    }

    // 6. Idempotency claim.
    let has_key = action
        .idempotency_key
        .as_deref()
        .is_some_and(|k| !k.trim().is_empty());
    let scope = contract
        .map(|c| c.idempotency.key_scope)
        .unwrap_or(aip_connector_core::model::IdempotencyKeyScope::Action);
    let key = match action.idempotency_key.as_deref() {
        Some(raw) if has_key => match idempotency::scoped_key(
            scope,
            raw,
            &action,
            caller,
            tenant,
            host.deployment.external_account.as_ref(),
        ) {
            Ok(key) => Some(key),
            Err(error) => return failure::failed(&action.id, error),
        },
        _ => None,
    };

    // 7. Reservation.
    let timeout_ms = effective_timeout(&action, contract, &host.limits);
    // The host clock is read once, by the calls that write a time: a keyed call, when it
    // reserves its key (a clock read costs as much as a small step of the pipeline).
    let mut now: Option<crate::store::Millis> = None;
    // The fingerprint is computed only by the calls that need it: a provided approval (below),
    // a reservation, the approval gate.
    let mut fingerprint: Option<String> = None;
    // 9. Approvals are resolved before the reservation, so a refused re-submission touches no
    // stored state: a resumed action brings its verified record; a re-submitted one must match
    // an approved record of the same requester, action and input. The single resume is claimed
    // here, before anything else can consume it.
    // A re-submission carries its approval; `resume_approved` brings the stored record instead.
    let resubmitted = resume.is_none();
    let approved = match (resume, &action.approval) {
        (Some(record), _) => Some(record),
        (None, Some(decision)) => {
            let fingerprint = fingerprint.insert(idempotency::fingerprint(&action));
            match Box::pin(provided_approval(
                host,
                &action,
                caller,
                decision,
                fingerprint,
            ))
            .await
            {
                Ok((record, recorded)) => {
                    Arc::make_mut(&mut action).approval = Some(Box::new(recorded));
                    Some(Box::new(record))
                }
                Err(error) => return failure::failed(&action.id, error),
            }
        }
        (None, None) => None,
    };
    if let Some(record) = &approved {
        let claimed_at = *now.get_or_insert_with(|| host.clock.now_ms());
        let claimed = HeldResume {
            id: record.approval_id.clone(),
            claim: crate::store::ResumeClaim::new(claimed_at),
        };
        // Boxed: its state (a rare replay included) would otherwise grow every call's pipeline.
        let claim = Box::pin(claim_resume(ClaimResumeArgs {
            host,
            action: &action,
            held: &claimed,
            resubmitted,
            key: key.as_deref(),
            tenant,
            fingerprint: &mut fingerprint,
            now: claimed_at,
        }));
        match claim.await {
            // Told to `run`, which gives the claim back if the result is retryable.
            Ok(()) => {
                let _ = resume_claim.claim.set(Box::new(claimed));
            }
            // The claim may have landed with its answer lost (a connection that closed after
            // the commit): `run` gives it back too, since the caller is told to retry, and the
            // give-back undoes only a claim holding this claim's token (found by a hostile
            // probe: the retry was told "already resumed" for an action that never ran).
            Err(ResumeRefusal::Unanswered(failed)) => {
                let _ = resume_claim.claim.set(Box::new(claimed));
                return failed;
            }
            Err(ResumeRefusal::Refused(refused)) => return refused,
        }
    }
    let resuming = approved.is_some();
    let reservation = match key {
        None => None,
        Some(key) => {
            let now = *now.get_or_insert_with(|| host.clock.now_ms());
            let reservation = Reservation {
                key,
                reservation_id: idempotency::reservation_id(),
                action_id: action.id.clone(),
                tenant_id: tenant.map(|t| t.id.clone()),
                input_hash: fingerprint
                    .take()
                    .unwrap_or_else(|| idempotency::fingerprint(&action)),
                resume_pending: resuming,
                // Saturating: `timeout_ms` is the caller's (any u64), and a wrapped expiry
                // would be in the past, letting a duplicate take the key over mid-run.
                expires_at_ms: now.saturating_add(
                    timeout_ms
                        .saturating_add(RESERVATION_GRACE_MS)
                        .max(RESERVATION_GRACE_MS),
                ),
            };
            // A call that claimed a resume gives it back if dropped meanwhile.
            match dropped::reserve_holding_claim(host, &resume_claim.claim, &reservation, now).await
            {
                Ok(ReserveOutcome::Acquired) => Some(reservation),
                Ok(ReserveOutcome::Settled(record)) => {
                    // A record of the approved action itself (same action id and input) says it
                    // ran; any other one answers for something else.
                    let foreign = record.action_id != action.id
                        || record.input_hash != reservation.input_hash;
                    let answer = settled_key(
                        record,
                        &action,
                        &reservation.input_hash,
                        resuming,
                        tenant,
                        contract,
                    );
                    // Answered for another action, the approved one did not run: `run` gives its
                    // resume back, so the approval can still run it once the key is free (found
                    // by a hostile review: the refusal is not retryable, so the claim was kept).
                    // A replay of its own result keeps the claim: it ran, under another approval.
                    if foreign {
                        resume_claim
                            .unspent
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    return answer;
                }
                Ok(ReserveOutcome::InProgress(holder)) => {
                    return idempotency::in_progress(&action, &holder, tenant, now);
                }
                Err(error) => return failure::failed(&action.id, failure::storage(&error)),
            }
        }
    };
    // From here on every path ends in the settlement below; a call dropped before it is
    // settled by `unsettled` instead (see `dropped`).
    let unsettled = dropped::Unsettled::new(
        Settlement {
            host,
            reservation,
            scope,
            capability,
            principal: &caller.principal.id,
            tenant,
            // Read whenever a key was reserved; a settlement without a reservation writes nothing.
            now: now.unwrap_or_default(),
        },
        &action,
        resume_claim,
    );
    let mode = action.transaction.as_ref().map(|t| t.mode);
    let call = Call {
        host,
        hosted,
        routed_hosted,
        routed,
        action: &action,
        capability,
        contract,
        caller,
        tenant,
        timeout_ms,
        redact,
        unsettled: &unsettled,
    };

    // Every path ends in one settlement of the reservation.
    let result = if let (Some(TransactionMode::DryRun | TransactionMode::Plan), Some(contract)) =
        (mode, contract)
    {
        // 8. Transaction previews run before the approval gate.
        Box::pin(preview(&call, contract, credential.as_deref())).await
    } else if approved.is_none()
        // A `reconcile` asks the provider what became of an effect that already passed this
        // gate (or needed no approval): it runs the reconcile companion, never the handler, and
        // makes no effect of its own. Gating it too (upstream's order) asked approvers to
        // release lookups and kept unknown outcomes unknown while they waited (author trials).
        // Admission still checks that the transaction is the caller's tenant's, of this
        // capability, with a checkpointed operation.
        && mode != Some(TransactionMode::Reconcile)
        && (approval_required(capability)
            || (mode == Some(TransactionMode::Compensate)
                && contract
                    .and_then(|c| c.compensation.as_ref())
                    .is_some_and(|c| c.requires_approval)))
    {
        // 10. The approval gate. A keyed call's fingerprint is the one its reservation carries.
        let (key, fingerprint) = match unsettled.reservation() {
            Some(reservation) => (
                Some(reservation.key.clone()),
                reservation.input_hash.clone(),
            ),
            None => (
                None,
                fingerprint.unwrap_or_else(|| idempotency::fingerprint(&action)),
            ),
        };
        Box::pin(approval_gate(&call, key, fingerprint)).await
    } else {
        let handler = Handler {
            // The handler sees the key only when the call reserved one; its context rebuilds the
            // scoped form on demand (`ProviderRequest::idempotency` sends it).
            idempotency_scope: unsettled.reservation().is_some().then_some(scope),
            credential,
            approval: approved.as_deref().map(verified_from).map(Box::new),
            approval_wait_ms: approved.as_deref().map(approval_wait_ms),
            stream,
            compensation: None,
            plan: None,
        };
        match (mode, contract) {
            (
                Some(
                    mode @ (TransactionMode::Commit
                    | TransactionMode::Execute
                    | TransactionMode::Reconcile
                    | TransactionMode::Compensate),
                ),
                Some(contract),
            ) => Box::pin(transactional(&call, contract, mode, handler)).await,
            _ => run_handler(&call, handler, None).await.0,
        }
    };
    let result = match unsettled.settle(result) {
        // Nothing to settle: the result goes back without passing through the settlement.
        Ok(result) => result,
        // Boxed: only keyed calls settle, and inline the settlement's state (the pending write
        // and the result) would be the largest part of every call's pipeline state.
        Err(writing) => writing.await,
    };
    // A cancel that reached the handler is answered with what the action ended with (found by
    // a hostile review: the server answered `cancelled` for an action whose success stood).
    host.active.settled(&action, &result);
    result
}

/// What [`claim_resume`] needs.
struct ClaimResumeArgs<'a> {
    host: &'a Arc<HostInner>,
    action: &'a Action,
    /// The approval and the claim to write on it.
    held: &'a HeldResume,
    /// The action carried its approval (a re-submission), rather than being resumed from the
    /// stored request by `resume_approved`.
    resubmitted: bool,
    /// The scoped key, if the action has one.
    key: Option<&'a str>,
    /// The caller's tenant: a replay or an in-progress answer is only of this tenant's action.
    tenant: Option<&'a VerifiedTenant>,
    /// The action's fingerprint, computed here if no earlier step needed it.
    fingerprint: &'a mut Option<String>,
    now: crate::store::Millis,
}

/// Claims the single resume of an approved action (stage 9). When it already ran, an exact
/// resend of the re-submission that ran (same action id, fingerprint and tenant, its key's record
/// settled) is a transport retry the caller cannot tell from a lost answer: it gets the stored
/// result replayed, as any keyed resend does (§5.5); one that arrives while that re-submission
/// still holds its key gets the retryable `idempotency.in_progress`. Anything else that finds the
/// resume taken — another action carrying the approval, a second `resume_approved` — gets
/// `policy.approval_already_resumed`.
async fn claim_resume(claim: ClaimResumeArgs<'_>) -> Result<(), ResumeRefusal> {
    let ClaimResumeArgs {
        host,
        action,
        held,
        resubmitted,
        key,
        tenant,
        fingerprint,
        now,
    } = claim;
    // A store failure after the claim was refused: nothing of this call's to give back.
    let refused_by_store = |error: &crate::store::StoreError| {
        ResumeRefusal::Refused(failure::failed(&action.id, failure::storage(error)))
    };
    let approval_id = &held.id;
    match claim_on_own_task(host, held).await {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(error) => {
            return Err(ResumeRefusal::Unanswered(failure::failed(
                &action.id,
                failure::storage(&error),
            )));
        }
    }
    if let (true, Some(key)) = (resubmitted, key) {
        let fingerprint = fingerprint.get_or_insert_with(|| idempotency::fingerprint(action));
        match host.store.record(key, now).await {
            Ok(Some(record))
                if record.action_id == action.id
                    && record.input_hash == *fingerprint
                    && idempotency::of_tenant(record.tenant_id.as_deref(), tenant)
                    && !crate::store::is_pending_approval(&record.result) =>
            {
                return Err(ResumeRefusal::Refused(idempotency::replay(&record, action)));
            }
            Ok(_) => {}
            Err(error) => return Err(refused_by_store(&error)),
        }
        // Not settled yet: a resend that arrives while the re-submission it repeats still runs
        // is told to come back (retryable), as a keyed duplicate is; it then gets the replay.
        match host.store.reservation(key, now).await {
            Ok(Some(holder))
                if holder.action_id == action.id
                    && holder.input_hash == *fingerprint
                    && idempotency::of_tenant(holder.tenant_id.as_deref(), tenant) =>
            {
                return Err(ResumeRefusal::Refused(idempotency::in_progress(
                    action, &holder, tenant, now,
                )));
            }
            Ok(_) => {}
            Err(error) => return Err(refused_by_store(&error)),
        }
        // Nothing of this re-submission under the approved action's own key, yet the resume
        // was claimed moments ago (the claimer is between its claim and its reservation) or
        // has just been given back (a call that met the key busy, or failed retryably): told
        // to come back, not that the approval ran an action that may never run (found by a
        // review). A re-submission under another key is no resend of one under this key. An
        // old claim, or one without a claim time (written by a build from before claims were
        // timed), is of an action that ran and whose record lapsed, or whose host died: it
        // reads as already resumed.
        match host.store.approval(approval_id).await {
            Ok(Some(record))
                if record.status == crate::store::ApprovalStatus::Approved
                    && record.action.idempotency_key == action.idempotency_key
                    && (!record.resumed || claimed_moments_ago(&record, now)) =>
            {
                return Err(ResumeRefusal::Refused(claim_settling(&action.id)));
            }
            Ok(_) => {}
            Err(error) => return Err(refused_by_store(&error)),
        }
    }
    Err(ResumeRefusal::Refused(already_resumed(&action.id)))
}

/// `ApprovalStore::claim_resume` of `held`, written on a task of its own that gives the claim
/// back when it landed after the call that asked for it was dropped (a transport's timeout): the
/// write lands all the same (SQLite's blocking task, a sent PostgreSQL statement), and the
/// approval would read as resumed by an action that never ran. The task knows whether *its*
/// claim landed, so it never gives back another call's; and it runs the give-back after the
/// claim, on its own connection's order, where a give-back spawned by the dropped call could run
/// before the claim committed (found by a review). Outside a Tokio runtime the claim is written
/// in place.
async fn claim_on_own_task(
    host: &Arc<HostInner>,
    held: &HeldResume,
) -> Result<bool, crate::store::StoreError> {
    /// The answer's receiver: dropped with the answer unread (the call dropped between the
    /// task's send and its own next poll), it gives a landed claim back itself.
    struct Unheard {
        answer: Option<tokio::sync::oneshot::Receiver<Result<bool, crate::store::StoreError>>>,
        host: Arc<HostInner>,
        held: HeldResume,
    }
    impl Drop for Unheard {
        fn drop(&mut self) {
            if let Some(mut answer) = self.answer.take()
                && let Ok(Ok(true)) = answer.try_recv()
            {
                let (host, held) = (Arc::clone(&self.host), self.held.clone());
                crate::task::spawn_traced(async move { give_back_resume(&host, &held).await });
            }
        }
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return host.store.claim_resume(&held.id, &held.claim).await;
    }
    let (send, answer) = tokio::sync::oneshot::channel();
    let (task_host, task_held) = (Arc::clone(host), held.clone());
    crate::task::spawn_traced(async move {
        let claimed = task_host
            .store
            .claim_resume(&task_held.id, &task_held.claim)
            .await;
        if let Err(Ok(true)) = send.send(claimed) {
            give_back_resume(&task_host, &task_held).await;
        }
    });
    let mut unheard = Unheard {
        answer: Some(answer),
        host: Arc::clone(host),
        held: held.clone(),
    };
    let answer = unheard.answer.as_mut().expect("set above");
    let claimed = answer.await.unwrap_or_else(|_| {
        Err(crate::store::StoreError::Unavailable(
            "the task writing the resume claim ended without an answer".into(),
        ))
    });
    unheard.answer = None;
    claimed
}

/// Why [`claim_resume`] did not claim the resume: the answer to give the caller.
enum ResumeRefusal {
    /// The resume is not this call's to run (taken, replayed, or to be retried later).
    Refused(ActionResult),
    /// The store failed at the claim itself, which may have landed all the same.
    Unanswered(ActionResult),
}

/// How long after a resume was claimed a resend that finds nothing of it under the key (a
/// re-submission's resend at stage 9, a plain resend finding the pending record at stage 7) is
/// told to come back rather than that the approval already ran: far longer than the store
/// round trips between a claim and its reservation, or a give-back.
const CLAIM_SETTLING_MS: crate::store::Millis = 5_000;

/// Whether `record`'s resume was claimed less than [`CLAIM_SETTLING_MS`] before `now` (a claim
/// recorded without its time, by an older build, is not).
fn claimed_moments_ago(record: &ApprovalRecord, now: crate::store::Millis) -> bool {
    record
        .resumed_at_ms
        .is_some_and(|at| now.saturating_sub(at) < CLAIM_SETTLING_MS)
}

/// The answer to a resend that met a resume claimed moments ago with nothing under its key.
fn claim_settling(action_id: &aip_connector_core::ids::ActionId) -> ActionResult {
    let mut error = failure::error(
        codes::IDEMPOTENCY_IN_PROGRESS,
        "another call of this approved action claimed its resume moments ago: it has not yet reserved the key, is giving the resume back, or ran under another key; retry",
        ErrorCategory::Temporary,
        true,
    );
    error.retry_after_ms = Some(100);
    failure::failed(action_id, error)
}

/// The answer to a resume of an approved action that already ran.
fn already_resumed(action_id: &aip_connector_core::ids::ActionId) -> ActionResult {
    failure::failed(
        action_id,
        failure::policy(
            codes::POLICY_APPROVAL_ALREADY_RESUMED,
            "this approved action already ran",
        ),
    )
}

/// What every later step of one call reads.
struct Call<'a> {
    host: &'a HostInner,
    hosted: &'a HostedCapability,
    /// Where the handler runs: the compensating capability for a `compensate`, else the
    /// action's own.
    routed_hosted: &'a HostedCapability,
    routed: &'a Capability,
    action: &'a Arc<Action>,
    capability: &'a Capability,
    contract: Option<&'a CapabilityContract>,
    caller: &'a TrustedContext,
    tenant: Option<&'a VerifiedTenant>,
    timeout_ms: u64,
    redact: bool,
    /// What a dropped call still settles; told when the handler starts and what transaction
    /// the call admitted.
    unsettled: &'a dropped::Unsettled<'a>,
}

/// How long `record` waited for its decisions: from the request to the last approving
/// decision (the host stamps each with its own clock).
fn approval_wait_ms(record: &ApprovalRecord) -> crate::store::Millis {
    record
        .decisions
        .iter()
        .filter(|d| d.decision == aip_connector_core::model::ApprovalDecisionKind::Approved)
        .map(|d| u64::try_from(d.decided_at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
        .max()
        .map_or(0, |approved_at| {
            approved_at.saturating_sub(record.created_at_ms)
        })
}

/// What the handler gets besides the action, resolved by the earlier steps.
struct Handler {
    /// The key scope of the reserved key, when the handler may see the action's key.
    idempotency_scope: Option<aip_connector_core::model::IdempotencyKeyScope>,
    credential: Option<Box<CredentialHandle>>,
    approval: Option<Box<VerifiedApprovals>>,
    /// How long the approval that released this call waited for its decisions (a resumed
    /// action): time a planned commit's plan does not count.
    approval_wait_ms: Option<crate::store::Millis>,
    stream: Option<Arc<dyn ChunkSink>>,
    compensation: Option<Arc<CompensationTarget>>,
    /// The plan a `commit` claimed, for the `Plan` extractor.
    plan: Option<Arc<aip_connector_core::model::TransactionPlan>>,
}

/// Step 11 and the handler of a transactional call: plan claim or direct commit, the execute
/// replay gate, reconciliation of an unknown outcome; then the transaction settles with the
/// result (the caller settles the idempotency reservation).
async fn transactional(
    call: &Call<'_>,
    contract: &CapabilityContract,
    mode: TransactionMode,
    handler: Handler,
) -> ActionResult {
    let Call {
        host,
        action,
        caller,
        timeout_ms,
        ..
    } = *call;
    if mode == TransactionMode::Compensate {
        let (record, target) =
            match transaction::admit_compensation(host, action, contract, caller, timeout_ms).await
            {
                Ok(admitted) => admitted,
                Err(error) => return failure::failed(&action.id, error),
            };
        let handler = Handler {
            compensation: Some(Arc::new(target)),
            ..handler
        };
        let fence = open_attempt(call, &record, mode);
        let checkpoint = Arc::new(transaction::StoreCheckpoint::new(
            host,
            &record,
            fence.clone(),
        ));
        let (mut result, interruption) = run_handler(call, handler, Some(checkpoint)).await;
        // An undo whose answer was lost is named like a write's, for the caller to reconcile.
        if settle_transaction(call, &record, mode, &result, interruption, &fence).await {
            transaction::name_unknown_outcome(&mut result, &record.transaction_id);
        }
        return result;
    }
    let admitted = match transaction::admit(
        host,
        action,
        contract,
        caller,
        timeout_ms,
        handler.approval_wait_ms,
    )
    .await
    {
        Ok(admitted) => admitted,
        Err(error) => return failure::failed(&action.id, error),
    };
    if let Some(mut replay) = admitted.replay {
        // The execute gate answers the stored result of the transaction's earlier run: a
        // replay, marked as one (stored under this key as such, and marking it again when the
        // key replays it changes nothing).
        replay.mark_idempotent_replay();
        return replay;
    }
    let mut record = admitted.record;
    let fence = open_attempt(call, &record, mode);
    if mode == TransactionMode::Reconcile {
        let result = reconcile(call, &record, handler.credential.map(|c| *c)).await;
        settle_transaction(
            call,
            &record,
            TransactionMode::Reconcile,
            &result,
            transaction::Interruption::None,
            &fence,
        )
        .await;
        return result;
    }
    let checkpoint = Arc::new(transaction::StoreCheckpoint::new(
        host,
        &record,
        fence.clone(),
    ));
    // A commit's handler reads the plan it commits (what the approvers saw: the validation's
    // answer, the predicted side effects).
    let handler = Handler {
        // Moved, not copied: the settlement below reads the record's ids alone.
        plan: (mode == TransactionMode::Commit)
            .then(|| record.plan.take().map(Arc::new))
            .flatten(),
        ..handler
    };
    let (mut result, interruption) = run_handler(call, handler, Some(checkpoint)).await;
    mark_refused_output_as_committed(&mut result);
    if settle_transaction(call, &record, mode, &result, interruption, &fence).await {
        transaction::name_unknown_outcome(&mut result, &record.transaction_id);
    }
    result
}

/// The fence of the attempt admitted with `record`, told to the call's drop guard, which
/// settles the transaction should the call be dropped.
fn open_attempt(
    call: &Call<'_>,
    record: &crate::store::TransactionRecord,
    mode: TransactionMode,
) -> transaction::AttemptFence {
    let fence = transaction::AttemptFence::new(record);
    call.unsettled
        .transaction_admitted(&record.transaction_id, mode, &fence);
    fence
}

/// [`transaction::settle`], with the result kept for the call's drop guard while the store is
/// written: a call dropped meanwhile settles the transaction with it.
async fn settle_transaction(
    call: &Call<'_>,
    record: &crate::store::TransactionRecord,
    mode: TransactionMode,
    result: &ActionResult,
    interruption: transaction::Interruption,
    fence: &transaction::AttemptFence,
) -> bool {
    call.unsettled.transaction_ending(result, interruption);
    let unknown = transaction::settle(
        call.host,
        &record.transaction_id,
        mode,
        result,
        interruption,
        fence,
    )
    .await;
    call.unsettled.transaction_settled();
    // A write stopped at its deadline has an unknown outcome even when its record could not be
    // settled so (a store failure, a record another attempt took over): the caller is still
    // told which transaction to reconcile.
    unknown
        || (interruption == transaction::Interruption::TimedOut
            && mode != TransactionMode::Reconcile)
}

/// A commit or execute whose handler completed but whose output the host refused
/// (`action.output_schema_invalid`, `action.output_too_large`) did write: its failure says the
/// side effects committed and need compensation, so the transaction settles `failed` with
/// effects and stays compensable instead of reading as a write that never happened.
fn mark_refused_output_as_committed(result: &mut ActionResult) {
    let Some(error) = result
        .error
        .as_mut()
        .filter(|error| transaction::output_refused(error))
    else {
        return;
    };
    let details = error.details.get_or_insert_with(|| json!({}));
    if let Value::Object(details) = details {
        aip_connector_core::model::mark_committed_side_effects(details);
    }
}

/// Step 8: `dry_run` and `plan`, with the connector's validation when the fidelity needs it,
/// under the credential stage 4 resolved (if the contract has a credential policy).
async fn preview(
    call: &Call<'_>,
    contract: &CapabilityContract,
    credential: Option<&CredentialHandle>,
) -> ActionResult {
    let action = call.action;
    let validation = match validate_downstream(call, contract, credential).await {
        Ok(Validation::Answered(validation)) => validation,
        Ok(Validation::Interrupted { requested }) => {
            return companion_interrupted(action, requested);
        }
        Err(error) => return failure::failed(&action.id, error),
    };
    let required = approval_required(call.capability);
    transaction::preview(
        call.host,
        action,
        call.capability,
        contract,
        call.caller,
        required,
        call.redact,
        validation,
    )
    .await
}

/// Runs the connector's validation handler when the contract's dry-run fidelity needs one.
/// A downstream validation asks the provider, so it authenticates like the commit it previews:
/// its context holds the resolved credential, as a reconcile lookup's request does.
async fn validate_downstream(
    call: &Call<'_>,
    contract: &CapabilityContract,
    credential: Option<&CredentialHandle>,
) -> Result<Validation, ProtocolError> {
    let Call {
        host,
        hosted,
        action,
        timeout_ms,
        redact,
        ..
    } = *call;
    let needs_handler = contract
        .transaction
        .as_ref()
        .is_some_and(|t| t.dry_run_fidelity.needs_validation_handler());
    if !needs_handler {
        return Ok(Validation::Answered(None));
    }
    let connector = &host.connectors[hosted.connector];
    let has_handler = connector
        .definition()
        .capability(action.capability_id.as_str())
        .is_some_and(|d| d.facts.validation_handler);
    if !has_handler {
        return Err(failure::policy(
            codes::TRANSACTION_PLAN_HANDLER_UNSUPPORTED,
            "the dry-run fidelity needs a validation handler the connector does not have",
        ));
    }
    let context = companion_context(call, credential.cloned().map(Box::new));
    let secret = credential.map(|c| &c.secret);
    let start = || {
        connector.validate(
            action.capability_id.as_str(),
            &action.input,
            Arc::clone(&context) as Arc<dyn crate::invocation::InvocationContext>,
        )
    };
    let max_bytes = call.host.limits.max_output_bytes;
    match companion(call, &context, start).await? {
        CompanionEnd::Answered(Ok(mut value)) => {
            // Stored in the plan and returned like an output, so bounded like one.
            if let Err(exceeded) = check_json_limits(&value, max_bytes, super::MAX_STORED_DEPTH) {
                return Err(refused_output(
                    exceeded,
                    "the validation's answer",
                    max_bytes,
                ));
            }
            withhold_credential_in_value(&mut value, secret);
            Ok(Validation::Answered(Some(value)))
        }
        CompanionEnd::Answered(Err(failure)) => {
            let mut error = connector_error(
                &failure,
                action,
                redact.then_some(&call.routed.input_schema),
                secret,
            );
            bound_failure_details(&mut error, max_bytes);
            Err(error)
        }
        CompanionEnd::TimedOut => Err(companion_timed_out("validation", timeout_ms)),
        CompanionEnd::Interrupted { requested } => Ok(Validation::Interrupted { requested }),
    }
}

/// What the connector's validation said, when it had its say.
enum Validation {
    /// Its evidence (`None`: the fidelity needs no validation handler).
    Answered(Option<Value>),
    /// A cancel or the transport stopped it (`requested`: a cancel did).
    Interrupted { requested: bool },
}

/// Asks the connector's reconcile handler about an unknown outcome. A terminal answer completes
/// the action (`reconciled` — which never means `committed`; the output says whether it
/// committed); a pending one fails retryably and leaves the outcome unknown.
/// Step 14 of a `reconcile`: the connector's reconcile handler asked about the checkpointed
/// operation, under the tenant and credential of the `reconcile` action (the lookup
/// authenticates like the call it settles).
async fn reconcile(
    call: &Call<'_>,
    record: &crate::store::TransactionRecord,
    credential: Option<CredentialHandle>,
) -> ActionResult {
    let Call {
        host,
        hosted,
        action,
        timeout_ms,
        ..
    } = *call;
    let tenant = call.tenant.cloned();
    let Some(operation) = record.provider_operation.clone() else {
        return failure::failed(
            &action.id,
            failure::policy(
                codes::TRANSACTION_PROVIDER_OPERATION_REQUIRED,
                "reconciliation needs a provider operation",
            ),
        );
    };
    // The companion's execution, for `Host::cancel` to find (the reconcile handler itself is
    // handed only its request).
    let context = companion_context(call, None);
    let request = crate::connector::Reconciliation {
        transaction_id: record.transaction_id.clone(),
        provider_operation: operation,
        cursor: record.reconciliation_cursor.clone(),
        checkpoint_cursor: record.checkpoint_cursor.clone(),
        tenant,
        credential,
        compensation_for: record.transaction.compensation_for.clone(),
    };
    let secret = request.credential.as_ref().map(|c| c.secret.clone());
    let connector = &host.connectors[hosted.connector];
    let start = || connector.reconcile(action.capability_id.as_str(), request);
    let failed = |error| failure::failed(&action.id, error);
    let answer = match companion(call, &context, start).await {
        Ok(CompanionEnd::Answered(Ok(answer))) => answer,
        Ok(CompanionEnd::Answered(Err(failure))) => {
            let mut error = failure.to_protocol_error();
            withhold_credential(&mut error, secret.as_ref());
            bound_failure_details(&mut error, call.host.limits.max_output_bytes);
            return failed(error);
        }
        Err(panicked) => return failed(panicked),
        Ok(CompanionEnd::TimedOut) => {
            return failed(companion_timed_out("reconciliation", timeout_ms));
        }
        // The lookup stopped: the outcome stays unknown, to be reconciled again.
        Ok(CompanionEnd::Interrupted { requested }) => {
            return companion_interrupted(action, requested);
        }
    };
    let mut answer = aip_connector_core::model::ReconciliationResult::from(answer);
    // The evidence is stored with the result (and in the record's error while pending): one
    // the host could not store and send as it is gives way to why, and the outcome stands.
    let max_bytes = call.host.limits.max_output_bytes;
    if let Some(Err(exceeded)) = answer
        .evidence
        .as_ref()
        .map(|evidence| check_json_limits(evidence, max_bytes, super::MAX_STORED_DEPTH))
    {
        answer.evidence = Some(json!({
            "evidence_withheld": exceeded.why("the reconciliation's evidence", max_bytes)
        }));
    }
    // Stored and returned like a handler's output, and the companion held the credential: a
    // lookup that quotes the provider's echo of the request must not carry it out.
    let forms = credential_forms(secret.as_ref());
    if !forms.is_empty() {
        if let Some(evidence) = answer.evidence.as_mut() {
            scrub_value(evidence, &forms);
        }
        if let Some(cursor) = answer.cursor.as_mut() {
            scrub(cursor, &forms);
        }
    }
    if answer.terminal {
        let output = json!({ "reconciliation": { "terminal": true, "committed": answer.committed, "cursor": answer.cursor, "evidence": answer.evidence } });
        return ActionResult::completed(action.id.clone(), output);
    }
    let mut error = failure::error(
        codes::TRANSACTION_RECONCILIATION_PENDING,
        "provider outcome is still pending reconciliation",
        ErrorCategory::Temporary,
        true,
    );
    error.retry_after_ms = Some(transaction::DEFAULT_RECONCILE_AFTER_MS);
    failure::failed(
        &action.id,
        failure::with_details(
            error,
            json!({ "reconciliation_cursor": answer.cursor, "evidence": answer.evidence }),
        ),
    )
}

/// `connector.runtime_failure` for a handler (or a validation or reconcile handler) that
/// panicked: its outcome is unknown, so not retryable, and a commit or execute is settled as an
/// unknown outcome (§6.5). The panic hook has printed the message; it may quote data, so the
/// error and the log line here do not.
fn handler_panicked(action: &Action, capability_id: &str) -> ProtocolError {
    tracing::error!(
        action_id = %Clipped::new(action.id.as_str(), 128),
        capability_id = %Clipped::new(capability_id, 128),
        "the handler panicked; its outcome is unknown"
    );
    failure::with_details(
        failure::error(
            codes::CONNECTOR_RUNTIME_FAILURE,
            "the handler panicked; its outcome is unknown",
            ErrorCategory::Connector,
            false,
        ),
        json!({ "uncertain_outcome": true }),
    )
}

/// The context of a companion handler (validation, reconciliation) run for `call`: its
/// caller, tenant and deadline, a cancellation of its own, and `credential` (a validation's;
/// a reconcile lookup gets its credential in its request); no key, checkpoint or stream.
fn companion_context(
    call: &Call<'_>,
    credential: Option<Box<CredentialHandle>>,
) -> Arc<HostInvocation> {
    Arc::new(HostInvocation {
        action: Arc::clone(call.action),
        caller: CallerIdentity::new(call.caller.principal.id.clone(), call.caller.issuer.clone()),
        tenant: std::sync::OnceLock::from(call.tenant.cloned().map(Box::new)),
        idempotency_scope: None,
        cancellation: CancelSignal::default(),
        deadline: deadline_in(call.timeout_ms),
        stream: None,
        checkpoint: None,
        credential,
        approval: None,
        transaction_input: None,
        cancel_handle: std::sync::OnceLock::new(),
    })
}

/// How a companion handler (validation, reconciliation) ended.
enum CompanionEnd<T> {
    /// It answered (in the poll a cancel or the deadline came in too: its answer stands).
    Answered(T),
    /// Its deadline passed.
    TimedOut,
    /// A cancel ([`Host::cancel`](super::Host::cancel)) or its transport giving up stopped it
    /// (`requested`: a cancel did).
    Interrupted { requested: bool },
}

/// The result of an action whose companion was stopped: `cancelled` after a cancel, as a
/// handler's would be; `action.abandoned` after its transport gave up, always retryable (a
/// validation or a lookup has no effect at the provider, so however unsafe a retry of the
/// capability's handler is, storing the abandonment under the key would only refuse every
/// retry of a lookup that never finished; found by a hostile review).
fn companion_interrupted(action: &Action, requested: bool) -> ActionResult {
    if requested {
        cancelled_by_request(&action.id)
    } else {
        abandoned(&action.id, true)
    }
}

/// Starts a companion handler (validation, reconciliation) and runs its future under the
/// deadline of `context`, a panic of either included (generated code decodes the input while
/// starting; `Err` with the panic's error). Registered for [`Host::cancel`](super::Host::cancel)
/// like a handler, so a cancel stops it rather than being remembered for a later action with
/// the same id (found by a hostile review), and one remembered before it started stops it
/// before it runs.
async fn companion<T, F: Future<Output = T>>(
    call: &Call<'_>,
    context: &Arc<HostInvocation>,
    start: impl FnOnce() -> F,
) -> Result<CompanionEnd<T>, ProtocolError> {
    use futures_util::FutureExt as _;
    let host = call.host;
    let action = &context.action;
    // Tells the call's guard how the companion was stopped, should the call be dropped before
    // this race answers.
    let mut watch = dropped::CompanionWatch::new(call.unsettled, context);
    let interrupted = || CompanionEnd::Interrupted {
        requested: context.cancellation.was_requested(),
    };
    // Registered before it starts: registering fires a cancellation remembered for the action,
    // which then stops it before it runs.
    let _registered = ActiveGuard::register(host, context);
    if context.cancellation.is_fired() {
        return Ok(interrupted());
    }
    let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(start))
        .map_err(|_| handler_panicked(action, action.capability_id.as_str()))?;
    let mut guarded = std::pin::pin!(std::panic::AssertUnwindSafe(call).catch_unwind());
    let mut timer = std::pin::pin!(tokio::time::sleep_until(context.deadline));
    let ended = std::future::poll_fn(|cx| {
        use std::task::Poll;
        // Fired before this poll (a cancel while the companion started): it is not polled.
        if context.cancellation.is_fired() {
            return Poll::Ready(Ok(interrupted()));
        }
        if let Poll::Ready(answer) = guarded.as_mut().poll(cx) {
            return Poll::Ready(answer.map(CompanionEnd::Answered));
        }
        if context.cancellation.poll_fired(cx).is_ready() {
            return Poll::Ready(Ok(interrupted()));
        }
        timer.as_mut().poll(cx).map(|()| Ok(CompanionEnd::TimedOut))
    })
    .await;
    watch.answered();
    // Whatever the companion spawned learns that the action is over, as a handler's would.
    context.cancellation.fire();
    ended.map_err(|_| handler_panicked(action, action.capability_id.as_str()))
}

/// What the handler call ended with.
enum Outcome {
    /// With the material of the credential the handler held: an output-schema failure quotes
    /// the output, which may hold it.
    Completed(Value, Option<crate::invocation::Secret>),
    /// With the material of the credential the handler held, to withhold from the failure.
    Failed(
        aip_connector_core::model::ConnectorFailure,
        Option<crate::invocation::Secret>,
    ),
    /// With the cancel companion's refusal, if it refused.
    TimedOut(Option<Box<CompanionRefusal>>),
    /// With the cancel companion's refusal, if it refused.
    Cancelled(Option<Box<CompanionRefusal>>),
    /// The transport gave up on the action ([`Host::abandon_as`](super::Host::abandon_as)).
    Abandoned,
    /// The transport gave up before the handler was first polled (a stream's consumer that
    /// left while the key was reserved): nothing can have reached the provider, so the
    /// abandonment is retryable whatever the contract says, as a dropped call's is.
    AbandonedUnstarted,
    /// The handler panicked (while starting or while polled).
    Panicked,
}

/// A cancel companion's failure (a time-out and a panic included), with the material of the
/// credential it was handed, to withhold from the result that reports it.
struct CompanionRefusal {
    failure: aip_connector_core::model::ConnectorFailure,
    secret: Option<crate::invocation::Secret>,
}

impl CompanionRefusal {
    /// `remote_cancel_error` as upstream names it: the refusal's code and message, without the
    /// credential (and, under redaction, the input) the companion may have quoted.
    fn reported(&self, call: &Call<'_>) -> Value {
        let error = connector_error(
            &self.failure,
            call.action,
            call.redact.then_some(&call.routed.input_schema),
            self.secret.as_ref(),
        );
        json!({ "code": error.code, "message": error.message })
    }
}

/// Steps 14 and 15: the handler, then the check of its output. Also says whether the handler
/// timed out or was cancelled (a transaction settles either as an unknown outcome when the
/// handler had checkpointed).
///
/// Not an `async fn`: the handler is started (its context built, its input decoded) before the
/// future is returned, so the future holds only what the wait needs, not the [`Handler`]. Every
/// byte of it is copied whenever the pipeline's futures move.
fn run_handler<'c>(
    call: &'c Call<'c>,
    handler: Handler,
    checkpoint: Option<Arc<dyn CheckpointRecorder>>,
) -> impl Future<Output = (ActionResult, transaction::Interruption)> + Send + 'c {
    // A combinator, not an `async` block: an `async` block would keep the dispatch future twice
    // (the captured value and the awaited copy).
    dispatch(call, handler, checkpoint).map(move |outcome| {
        let interruption = match outcome {
            Outcome::TimedOut(_) => transaction::Interruption::TimedOut,
            Outcome::Cancelled(_) | Outcome::Abandoned | Outcome::AbandonedUnstarted => {
                transaction::Interruption::Cancelled
            }
            Outcome::Completed(..) | Outcome::Failed(..) | Outcome::Panicked => {
                transaction::Interruption::None
            }
        };
        let result = settle_outcome(call, outcome);
        // A retry may follow: a cancel from now on is late for this execution, not early for
        // the retry. Noted at once, in the poll the handler stopped in (it unregistered just
        // before), not after the transaction and the key are settled: a cancel in between would
        // be remembered for the retry.
        if result.error.as_ref().is_some_and(|e| e.is_retryable()) {
            call.host.active.note_retryable(
                call.action,
                &call.caller.principal.id,
                call.host.clock.now_ms(),
            );
        }
        (result, interruption)
    })
}

/// How long the host waits for a cancel companion before it gives up on it.
const CANCEL_COMPANION_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the cancel companion of `capability_id` (`Connector::cancel`) for `request`, bounded by
/// [`CANCEL_COMPANION_TIMEOUT`]. Answers its failure (a time-out and a panic included), logged;
/// `None` when it succeeded or the capability has none (`connector.operation_unsupported`).
fn cancel_companion<'c>(
    connector: &'c dyn crate::connector::Connector,
    capability_id: &'c str,
    request: crate::connector::CancelRequest,
) -> crate::invocation::BoxFuture<'c, Option<aip_connector_core::model::ConnectorFailure>> {
    use aip_connector_core::model::{ConnectorFailure, ConnectorOperation};
    let failure = move |code: &str, message: &str| {
        ConnectorFailure::new(
            code,
            message,
            ErrorCategory::Connector,
            ConnectorOperation::Cancellation,
            connector.definition().id.as_str(),
        )
    };
    let action_id = request.action_id.clone();
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        connector.cancel(capability_id, request)
    }));
    Box::pin(async move {
        let outcome = match started {
            Ok(running) => tokio::time::timeout(
                CANCEL_COMPANION_TIMEOUT,
                std::panic::AssertUnwindSafe(running).catch_unwind(),
            )
            .await
            .unwrap_or_else(|_| {
                Ok(Err(failure(
                    codes::SLA_TIMEOUT_EXCEEDED,
                    &format!(
                        "the cancel handler did not finish within {} s",
                        CANCEL_COMPANION_TIMEOUT.as_secs()
                    ),
                )))
            }),
            Err(panic) => Err(panic),
        };
        let refused = match outcome {
            Ok(Ok(())) => return None,
            Ok(Err(refused)) if refused.code == codes::CONNECTOR_OPERATION_UNSUPPORTED => {
                return None;
            }
            Ok(Err(refused)) => refused,
            Err(_) => failure(
                codes::CONNECTOR_RUNTIME_FAILURE,
                "the cancel handler panicked",
            ),
        };
        tracing::warn!(
            action_id = %Clipped::new(action_id.as_str(), usize::MAX),
            capability_id = %Clipped::new(capability_id, usize::MAX),
            code = %Clipped::new(&refused.code, usize::MAX),
            "the cancel handler failed"
        );
        Some(refused)
    })
}

/// Step 15 and the failures of step 14 as a result.
fn settle_outcome(call: &Call<'_>, outcome: Outcome) -> ActionResult {
    let Call {
        host,
        action,
        contract,
        timeout_ms,
        ..
    } = *call;
    match outcome {
        Outcome::Completed(output, secret) => {
            let mut result = check_output(
                call.routed_hosted,
                action,
                output,
                &host.limits,
                call.redact,
                secret.as_ref(),
            );
            // A violation's message quotes the output, which may hold the credential.
            if let Some(error) = result.error.as_mut() {
                withhold_credential(error, secret.as_ref());
            }
            // A handler that writes completed, so its effects happened whatever became of its
            // output: the refusal says so, transactional or not.
            if contract.is_some_and(|contract| {
                contract
                    .side_effects
                    .iter()
                    .any(|effect| effect.is_mutating())
            }) {
                mark_refused_output_as_committed(&mut result);
            }
            result
        }
        Outcome::Failed(failure, secret) => {
            let mut error = connector_error(
                &failure,
                action,
                call.redact.then_some(&call.routed.input_schema),
                secret.as_ref(),
            );
            bound_failure_details(&mut error, host.limits.max_output_bytes);
            failure::failed(&action.id, error)
        }
        Outcome::TimedOut(refused) => timed_out(
            action,
            contract,
            timeout_ms,
            refused.map(|refused| refused.reported(call)),
        ),
        Outcome::Cancelled(refused) => {
            let mut result = cancelled_by_request(&action.id);
            // The caller (and the cancel request, answered with this result) learns that the
            // provider may still be doing what the handler started (found by an author trial:
            // only a log line said so).
            if let (Some(refused), Some(Value::Object(output))) = (refused, result.output.as_mut())
            {
                output.insert("remote_cancel_error".to_owned(), refused.reported(call));
            }
            result
        }
        Outcome::Panicked => failure::failed(
            &action.id,
            handler_panicked(action, call.routed.id.as_str()),
        ),
        // Nobody asked for this cancellation: when the contract says a retry is safe (a read,
        // or a handler that takes the key and can forward it), the failure is retryable, so
        // the key is released and the caller's retry runs the action rather than replaying
        // its interruption (§7.2). Otherwise it is stored: running it again under the same key
        // could do twice what the first run may have done.
        Outcome::Abandoned => abandoned_handler(&action.id, contract),
        // Not stored under the key, and a claimed resume is given back: the approved action
        // never ran (found by a hostile review: the stored abandonment spent the approval).
        Outcome::AbandonedUnstarted => abandoned(&action.id, true),
    }
}

/// `sla.timeout_exceeded` for a handler stopped at its deadline, with what the cancel companion
/// answered when it refused to stop (`remote_cancel_error`, as upstream reports it).
///
/// Retryable as the contract's `supports_retry` says, except for a `commit`, an `execute` or a
/// `compensate`: the write (or the undo) may have landed, so its outcome is unknown whether or
/// not its transaction record could be settled so (a store failure, or a later attempt that
/// took the record over, left the timeout retryable; found by a hostile review).
fn timed_out(
    action: &Action,
    contract: Option<&CapabilityContract>,
    timeout_ms: u64,
    remote_cancel_error: Option<Value>,
) -> ActionResult {
    let writes = action.transaction.as_ref().is_some_and(|t| {
        matches!(
            t.mode,
            TransactionMode::Commit | TransactionMode::Execute | TransactionMode::Compensate
        )
    });
    let retryable = !writes && contract.is_some_and(|c| c.execution.supports_retry);
    let action_id = &action.id;
    let error = failure::error(
        codes::SLA_TIMEOUT_EXCEEDED,
        format!("the handler did not finish within {timeout_ms} ms"),
        ErrorCategory::Temporary,
        retryable,
    );
    let details = match remote_cancel_error {
        Some(refused) => json!({ "timeout_ms": timeout_ms, "remote_cancel_error": refused }),
        None => json!({ "timeout_ms": timeout_ms }),
    };
    failure::failed(action_id, failure::with_details(error, details))
}

/// Step 14: starts the handler and returns the race of its future against its deadline and
/// [`Host::cancel`](super::Host::cancel) (see [`Supervised`] for when the action is registered
/// for cancellation).
fn dispatch<'c>(
    call: &'c Call<'c>,
    handler: Handler,
    checkpoint: Option<Arc<dyn CheckpointRecorder>>,
) -> impl Future<Output = Outcome> + Send + 'c {
    let Call {
        host,
        action,
        caller,
        timeout_ms,
        ..
    } = *call;
    let deadline = deadline_in(timeout_ms);
    let context = Arc::new(HostInvocation {
        action: Arc::clone(action),
        caller: CallerIdentity::new(caller.principal.id.clone(), caller.issuer.clone()),
        tenant: std::sync::OnceLock::new(),
        idempotency_scope: handler.idempotency_scope,
        cancellation: CancelSignal::default(),
        deadline,
        stream: handler.stream,
        checkpoint,
        credential: handler.credential,
        approval: handler.approval,
        transaction_input: super::invocation::TransactionInput::boxed(
            handler.compensation,
            handler.plan,
        ),
        cancel_handle: std::sync::OnceLock::new(),
    });
    let connector = &host.connectors[call.routed_hosted.connector];
    // Every gate is behind the call now. Without this line an operator cannot tell a handler
    // that hangs on its provider from a call stuck before it: the settled line comes only at
    // the deadline. (A `compensate` names the compensating capability that runs.)
    tracing::debug!(handler = %call.routed.id, timeout_ms, "handler started");
    // Generated code decodes the input and starts the handler before returning its future: a
    // panic there is the handler's, answered like one while it runs.
    call.unsettled.handler_started();
    let running = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        connector.invoke(
            call.routed.id.as_str(),
            &action.input,
            Arc::clone(&context) as Arc<dyn crate::invocation::InvocationContext>,
        )
    }));
    let (running, panicked) = match running {
        Ok(running) => (Some(running), false),
        Err(_) => (None, true),
    };
    Supervised {
        host,
        connector: connector.as_ref(),
        capability: call.routed,
        stopping: None,
        started: false,
        panicked,
        finished: false,
        unsettled: call.unsettled,
        active: None,
        context,
        running,
        timer: None,
    }
}

/// The material of the credential a handler's context holds, if any: what the host withholds
/// from what it says about the handler's answer.
fn held_secret(context: &HostInvocation) -> Option<crate::invocation::Secret> {
    context.credential.as_ref().map(|c| c.secret.clone())
}

/// The race of a running handler against its cancellation and its deadline, in that order of
/// precedence. Fires the cancellation when it ends, however it ends (a drop included), so that
/// whatever the handler spawned learns that the action is over.
///
/// Written out rather than with `select!` and `timeout_at`, so that a handler that finishes on
/// its first poll (a cache hit, a computation) pays for none of the waiting machinery: the
/// deadline's timer and the registration that [`Host::cancel`](super::Host::cancel) scans are
/// made only when the handler first waits, and the cancellation is a flag and a waker rather
/// than a token (see [`CancelSignal`]). A cancellation that arrives before the first poll is
/// remembered by the host and found then; one that arrives during a first poll that finishes
/// the handler is remembered the same way (the handler could not have observed it anyway).
struct Supervised<'c> {
    host: &'c HostInner,
    /// The connector and capability whose handler runs, for the cancel companion.
    connector: &'c dyn crate::connector::Connector,
    capability: &'c Capability,
    /// The handler was stopped (cancelled or out of time) and the cancel companion runs: the
    /// outcome to answer once it is done. Boxed: every call carries the field, few use it.
    #[allow(clippy::type_complexity, reason = "one use")]
    stopping: Option<
        Box<(
            Outcome,
            crate::invocation::BoxFuture<'c, Option<aip_connector_core::model::ConnectorFailure>>,
        )>,
    >,
    /// Whether the first poll (and its check for a remembered cancellation) happened.
    started: bool,
    /// The handler panicked; its future (if it had one) is dropped.
    panicked: bool,
    /// The race answered: a drop from now on is the pipeline's own.
    finished: bool,
    /// Told how the handler was stopped when the call is dropped before the race answers.
    unsettled: &'c dropped::Unsettled<'c>,
    /// The registration for `Host::cancel`, from the handler's first wait; unregistered when the
    /// race ends.
    active: Option<ActiveGuard<'c>>,
    context: Arc<HostInvocation>,
    /// Taken only by `drop`, to drop the handler before the signal is looked at.
    running: Option<
        crate::invocation::BoxFuture<
            'c,
            Result<Value, aip_connector_core::model::ConnectorFailure>,
        >,
    >,
    /// Boxed and created (for the context's deadline) on the first poll that leaves the handler
    /// pending.
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Future for Supervised<'_> {
    type Output = Outcome;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Outcome> {
        let polled = self.poll_outcome(cx);
        self.finished = polled.is_ready();
        polled
    }
}

impl Supervised<'_> {
    /// The race, then the cancel companion of a handler it stopped.
    fn poll_outcome(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Outcome> {
        use std::task::Poll;
        let this = self;
        if this.stopping.is_none() {
            let outcome = std::task::ready!(this.race(cx));
            // The result is decided: a task the handler left behind sends no more data.
            if let Some(stream) = &this.context.stream {
                stream.seal();
            }
            // A handler stopped rather than finished sees its token fired before its future is
            // dropped, so a drop guard in it can tell (a cancel fired it already; the deadline
            // and an abandonment had not, until the race was dropped).
            if matches!(
                outcome,
                Outcome::TimedOut(_) | Outcome::Abandoned | Outcome::AbandonedUnstarted
            ) {
                this.context.cancellation.fire();
            }
            // A handler that ran and waited (so it may have reached its provider), stopped by a
            // cancel or its deadline: its future is dropped, then the cancel companion is asked
            // to stop what it started, as upstream calls `cancel_with_context` at both points.
            if this.active.is_none()
                || !matches!(outcome, Outcome::Cancelled(_) | Outcome::TimedOut(_))
            {
                return Poll::Ready(outcome);
            }
            this.running = None;
            this.timer = None;
            // What the handler held, so the companion acts at the provider as the handler did
            // (found by an author trial: without the credential a stop could not authenticate).
            let context: &HostInvocation = &this.context;
            let request = crate::connector::CancelRequest {
                action_id: context.action.id.clone(),
                input: context.action.input.clone(),
                idempotency_key: crate::invocation::InvocationContext::scoped_idempotency_key(
                    context,
                )
                .map(|scoped| crate::IdempotencyKey::provider_key_of(&scoped)),
                reason: match outcome {
                    Outcome::TimedOut(_) => crate::connector::CancelReason::DeadlineExceeded,
                    _ => crate::connector::CancelReason::Requested,
                },
                tenant: crate::invocation::InvocationContext::tenant(context).cloned(),
                credential: context.credential.as_deref().cloned(),
                handle: context.cancel_handle.get().and_then(|slot| slot.get()),
            };
            let companion = cancel_companion(this.connector, this.capability.id.as_str(), request);
            this.stopping = Some(Box::new((outcome, companion)));
        }
        let (_, companion) = &mut **this.stopping.as_mut().expect("set above");
        let refused = std::task::ready!(companion.as_mut().poll(cx));
        let (outcome, _) = *this.stopping.take().expect("set above");
        let refused = refused.map(|failure| {
            Box::new(CompanionRefusal {
                failure,
                secret: held_secret(&this.context),
            })
        });
        Poll::Ready(match outcome {
            Outcome::TimedOut(_) => Outcome::TimedOut(refused),
            Outcome::Cancelled(_) => Outcome::Cancelled(refused),
            other => other,
        })
    }

    /// The race itself: the handler's outcome, its cancellation, or its deadline.
    fn race(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Outcome> {
        use std::task::Poll;
        let this = self;
        let signal = &this.context.cancellation;
        let interrupted = || {
            if signal.was_requested() {
                Outcome::Cancelled(None)
            } else {
                Outcome::Abandoned
            }
        };
        if signal.is_fired() {
            return Poll::Ready(match interrupted() {
                // Abandoned before the handler was ever polled: nothing reached the provider.
                Outcome::Abandoned if !this.started => Outcome::AbandonedUnstarted,
                outcome => outcome,
            });
        }
        let first_poll = !this.started;
        if first_poll {
            this.started = true;
            // This execution is a retry, if one failed retryably before: a cancel from now on
            // is for it.
            this.host.active.forget_retried(
                &this.context.action,
                &this.context.caller.principal_id,
                this.host.clock.as_ref(),
            );
            // A cancellation that arrived before the handler started.
            if this
                .host
                .active
                .fire_pending(&this.context, this.host.clock.as_ref())
            {
                return Poll::Ready(Outcome::Cancelled(None));
            }
        }
        // After the remembered cancellation is consumed: a handler that panicked while starting
        // must not leave it behind for a later action with the same id.
        if this.panicked {
            return Poll::Ready(Outcome::Panicked);
        }
        // A stream whose consumer went away before the handler started (while a credential was
        // resolved or a key reserved, say): nobody reads what it would do, so it is abandoned
        // and the handler never runs (found by a hostile review: it ran to its end for nobody).
        // One that goes away later is seen below once the handler waits; a handler polled
        // after that (woken by the consumer's going) learns of it from its `send`.
        if first_poll && consumer_gone(&this.context) {
            return Poll::Ready(Outcome::AbandonedUnstarted);
        }
        let Some(running) = this.running.as_mut() else {
            // Only `drop` takes the handler.
            return Poll::Pending;
        };
        // A panicking handler must not take the caller's task with it (a server's request, an
        // MCP session, a stream's producer): it ends the race like any outcome. The handler's
        // state may be broken, so its future is dropped at once and never polled again.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.as_mut().poll(cx))) {
            Ok(Poll::Ready(result)) => {
                return Poll::Ready(match result {
                    Ok(output) => Outcome::Completed(output, held_secret(&this.context)),
                    // A failure that reports what reached the provider (an uncertain outcome,
                    // committed side effects) stands whatever else happened in this poll: the
                    // transaction must record it to be reconciled or compensated (found by
                    // hostile reviews: a cancel, then a dropped stream, turned an uncertain
                    // write into a plain failure released for a blind retry).
                    Err(failure) if reports_provider_state(&failure) => {
                        Outcome::Failed(failure, held_secret(&this.context))
                    }
                    // The signal fired while the handler ran its last poll (on another worker,
                    // `Host::cancel` fires it and then the handler's token): a failure now is
                    // the handler answering its token, so the action ends as the cancel
                    // answered its caller. A success stands: its work is done.
                    Err(_) if signal.is_fired() => interrupted(),
                    // The stream's consumer went away and the handler failed, with the sink's
                    // failure or one of its own making: the action was abandoned by its
                    // transport, not failed by its connector.
                    Err(_) if consumer_gone(&this.context) => Outcome::Abandoned,
                    // The deadline passed while the handler ran its last poll: a failure now is
                    // most likely the handler's own view of the same deadline (a provider call
                    // bounded by `ProviderRequest::deadline` gives up as `provider.timeout`), so
                    // the deadline wins the tie, as a cancel does: the action times out, the
                    // cancel companion is asked to stop what it started, and its retry follows
                    // `supports_retry`, whichever await the deadline hit (found by an author
                    // trial: a resize timed out as a retryable `provider.timeout` and its retry
                    // started a second resize while the first ran on).
                    Err(_) if tokio::time::Instant::now() >= this.context.deadline => {
                        Outcome::TimedOut(None)
                    }
                    Err(failure) => Outcome::Failed(failure, held_secret(&this.context)),
                });
            }
            Ok(Poll::Pending) => {}
            Err(_) => {
                this.running = None;
                this.panicked = true;
                return Poll::Ready(Outcome::Panicked);
            }
        }
        // The handler waits: from now on `Host::cancel` must find it. Registering also fires
        // the signal for a cancellation remembered since the check above.
        if this.active.is_none() {
            this.active = Some(ActiveGuard::register(this.host, &this.context));
        }
        if signal.poll_fired(cx).is_ready() {
            return Poll::Ready(interrupted());
        }
        // A handler that carries on after its stream's consumer went away (the sink's
        // cancellation reaches only a registered handler, and one that failed a send in its
        // first poll was not yet), or that waits on something else when the consumer drops the
        // stream (the sink wakes this task): abandoned here, its future dropped with the race.
        if let Some(sink) = &this.context.stream
            && sink.poll_consumer_gone(cx).is_ready()
        {
            return Poll::Ready(Outcome::Abandoned);
        }
        let deadline = this.context.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Outcome::TimedOut(None)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Whether a handler's failure reports what reached the provider (an uncertain outcome, or side
/// effects it committed): the transaction must record it to be reconciled or compensated, so
/// the failure stands even when the action was cancelled, its stream's consumer left or its
/// deadline passed in the same poll.
fn reports_provider_state(failure: &aip_connector_core::model::ConnectorFailure) -> bool {
    failure.uncertain_outcome || failure.has_committed_side_effects()
}

/// Whether the action's stream lost its consumer (a send failed for want of one).
fn consumer_gone(context: &HostInvocation) -> bool {
    context
        .stream
        .as_ref()
        .is_some_and(|sink| sink.consumer_gone())
}

impl Drop for Supervised<'_> {
    fn drop(&mut self) {
        // The handler's future first (it holds the extractors, and with them any clone of the
        // context), then the registration.
        self.running = None;
        self.active = None;
        if let Some(stream) = &self.context.stream {
            stream.seal();
        }
        // Dropped before it answered (the call was dropped): the call's guard settles it as the
        // race would have, should it have stopped the handler already (a cancel came, or its
        // deadline passed, and maybe its cancel companion runs). Read once unregistered, so no
        // cancel can reach the handler after it.
        if !self.finished {
            let stop = match self.stopping.as_deref() {
                Some((Outcome::TimedOut(_), _)) => dropped::Stop::TimedOut,
                Some((Outcome::Cancelled(_), _)) => dropped::Stop::Cancelled,
                _ => dropped::Stop::of(&self.context),
            };
            self.unsettled.handler_stopped(stop);
        }
        // Nobody else holds the context and no token was handed out: nothing can observe the
        // signal any more, so firing it would only cost a fence and a wake.
        if Arc::strong_count(&self.context) == 1 {
            // Pairs with the release of the last other holder's reference, so a token it
            // created before letting go is seen below.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if !self.context.cancellation.has_token() {
                return;
            }
        }
        self.context.cancellation.fire();
    }
}

/// Registers an executing action for [`Host::cancel`](super::Host::cancel) and unregisters it
/// on drop, whatever the outcome.
struct ActiveGuard<'a> {
    host: &'a HostInner,
    slot: super::ActiveSlot,
}

impl<'a> ActiveGuard<'a> {
    fn register(host: &'a HostInner, context: &Arc<HostInvocation>) -> Self {
        let slot = host.active.register(context, host.clock.as_ref());
        ActiveGuard { host, slot }
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.host.active.unregister(&self.slot);
    }
}

/// Stores or releases the idempotency reservation once a result exists: retryable failures
/// release the key (the next attempt executes again); everything else is stored and replayed.
/// The stored record carries the reservation's fingerprint.
struct Settlement<'a> {
    host: &'a Arc<HostInner>,
    reservation: Option<Reservation>,
    scope: aip_connector_core::model::IdempotencyKeyScope,
    capability: &'a Capability,
    principal: &'a aip_connector_core::ids::PrincipalId,
    tenant: Option<&'a VerifiedTenant>,
    now: crate::store::Millis,
}

impl<'a> Settlement<'a> {
    /// Decides what to write at once, and returns a future that writes it and gives the result
    /// back. Only the store calls wait, so the future holds just the reservation, the record
    /// and the result (not the settlement's borrows, as an `async fn` would).
    ///
    /// `give_back`: the resume this call claimed, given back before the key is released when
    /// the result is retryable (and not dead-lettered). `unattempted`: the result is
    /// [`unattempted`] and the handler never started, so the key is released without counting
    /// an attempt.
    fn settle(
        mut self,
        result: ActionResult,
        give_back: Option<Box<GiveBack<'a>>>,
        unattempted: bool,
    ) -> impl Future<Output = ActionResult> + Send + use<'a> {
        let host: &'a Arc<HostInner> = self.host;
        let reservation = self.reservation.take();
        let retryable = result.error.as_ref().is_some_and(|e| e.is_retryable());
        // Boxed, so the boxed settlement stays on the allocator's fast path (see the test).
        let record = reservation.as_ref().map(|reservation| {
            Box::new(if retryable {
                // The dead letter this failure becomes if it exhausts the key's attempts.
                self.record(
                    reservation,
                    ActionResult::new(result.action_id.clone(), ActionResultStatus::Failed),
                )
            } else {
                // The store keeps its own copy; the caller gets the result.
                self.record(reservation, result.clone())
            })
        });
        let max_attempts = self.host.limits.max_attempts_per_key;
        let now = self.now;
        // Kept (four words) so that a settlement the store failed can be written again.
        let shape = self.shape();
        // A call told to wait for an earlier attempt of its transaction did not attempt
        // anything: its key is released without counting towards the dead letter. Nor did one
        // that met a corrupt row (or a refused store configuration): not retryable, since a
        // retry meets it again, but not the action's outcome either, so it is not stored under
        // the key, where it would outlive the repair of the row (found by a review).
        async move {
            let (Some(reservation), Some(mut record)) = (reservation, record) else {
                return result;
            };
            if !(retryable || unattempted) {
                match host.store.settle(&reservation, *record).await {
                    Ok(()) => {}
                    // Taken over (the reservation expired): nothing of this call's to write.
                    Err(fenced @ crate::store::StoreError::Fenced) => written(Err(fenced)),
                    Err(error) => {
                        // Written again on a task of its own, so a call dropped during a pause
                        // (a transport's timeout) still settles its key (a review).
                        let record = shape.record(&host.limits, &reservation, result.clone(), now);
                        let again = settle_again(Arc::clone(host), reservation, record, error);
                        if tokio::runtime::Handle::try_current().is_ok() {
                            let _ = crate::task::spawn_traced(again).await;
                        } else {
                            Box::pin(again).await;
                        }
                    }
                }
                return result;
            }
            // Boxed: a rare step, kept out of every keyed call's settlement state. From here a
            // dropped call still returns its claim and its key.
            let mut hold = Box::new(HoldReturn {
                host,
                give_back,
                release: Some(reservation),
                dead_letter: None,
            });
            if retryable && !unattempted {
                let counted = host.store.count_attempt(
                    &hold.release.as_ref().expect("held until released").key,
                    record.expires_at_ms,
                    now,
                );
                match counted.await {
                    Ok(attempts) if attempts >= max_attempts => {
                        // A dead letter is the key's final result: stored, and the claim stays
                        // taken (no retry may resume the action). Dropped while it is written,
                        // the hold writes it (a released key would let another attempt run).
                        hold.give_back = None;
                        record.result = dead_lettered(&result, attempts);
                        let dead_letter = record.result.clone();
                        hold.dead_letter = Some(record.clone());
                        let reservation = hold.release.as_ref().expect("held until released");
                        let stored = hold.dead_letter.as_deref().expect("set above");
                        // Boxed with its writes again: a rare step, out of the settlement state.
                        written(
                            Box::pin(async {
                                let again = || host.store.settle(reservation, stored.clone());
                                super::written_again(
                                    host.store.settle(reservation, *record).await,
                                    again,
                                )
                                .await
                            })
                            .await,
                        );
                        hold.release = None;
                        hold.dead_letter = None;
                        return dead_letter;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(error = %error, "retry attempt could not be counted");
                    }
                }
            }
            Box::pin(hold.run()).await;
            result
        }
    }

    /// The idempotency record of `result` under `reservation`.
    fn record(&self, reservation: &Reservation, result: ActionResult) -> IdempotencyRecord {
        self.shape()
            .record(&self.host.limits, reservation, result, self.now)
    }

    fn shape(&self) -> RecordShape<'a> {
        RecordShape {
            scope: self.scope,
            capability: self.capability,
            principal: self.principal,
            tenant: self.tenant,
        }
    }
}

/// What an idempotency record holds besides its reservation's fields, its result and its time.
#[derive(Clone, Copy)]
struct RecordShape<'a> {
    scope: aip_connector_core::model::IdempotencyKeyScope,
    capability: &'a Capability,
    principal: &'a aip_connector_core::ids::PrincipalId,
    tenant: Option<&'a VerifiedTenant>,
}

impl RecordShape<'_> {
    /// The idempotency record of `result` under `reservation`, made at `now`.
    fn record(
        self,
        limits: &super::HostLimits,
        reservation: &Reservation,
        result: ActionResult,
        now: crate::store::Millis,
    ) -> IdempotencyRecord {
        // Without a published TTL the record is still bounded (`HostLimits::default_record_ttl_ms`),
        // except a pending approval's: it holds no output, its approval has a retention of its
        // own, and its requester resumes it by calling again with the key however long the
        // approvers take (a review: a day's bound would have made that call a new request).
        let waiting = result.status == ActionResultStatus::PendingApproval;
        let ttl = self
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.idempotency.ttl_ms)
            .or((!waiting).then_some(limits.default_record_ttl_ms));
        IdempotencyRecord {
            key: reservation.key.clone(),
            key_scope: self.scope,
            action_id: reservation.action_id.clone(),
            capability_id: self.capability.id.clone(),
            principal_id: self.principal.clone(),
            tenant_id: self.tenant.map(|t| t.id.clone()),
            input_hash: reservation.input_hash.clone(),
            result,
            created_at_ms: now,
            expires_at_ms: ttl.map(|ttl| now.saturating_add(ttl.max(1))),
        }
    }
}

/// Settles `reservation` with `record` again after the store failed the first write (`error`,
/// not `Fenced`), twice more at most, after a pause (50 ms, then 200 ms), while the failure is
/// one that may go away ([`worth_retrying`](super::worth_retrying)). A key whose settlement is
/// lost stays reserved until its reservation expires, and the duplicate that then arrives runs
/// the handler again, which the stored record would have answered (found by a store-failure
/// probe). `Fenced` ends it: the earlier write landed with its answer lost (the reservation is
/// gone, the record stored), or the reservation expired and another call took the key over.
async fn settle_again(
    host: Arc<HostInner>,
    reservation: Reservation,
    record: IdempotencyRecord,
    error: crate::store::StoreError,
) {
    let settle = || host.store.settle(&reservation, record.clone());
    match super::written_again(Err(error), settle).await {
        Err(crate::store::StoreError::Fenced) => tracing::info!(
            "idempotency settlement written again was fenced: the first write landed, or another call took the key over"
        ),
        outcome => written(outcome),
    }
}

/// Logs a settlement write that failed: the result stands, a lost settlement only means a
/// duplicate may execute again.
fn written(outcome: Result<(), crate::store::StoreError>) {
    if let Err(error) = outcome {
        tracing::warn!(error = %error, "idempotency settlement failed");
    }
}

/// The final result of a key whose retryable failures exhausted its attempts: `action.dead_letter`
/// (permanent, not retryable), naming the attempts and the last error. It is stored under the
/// key and replayed, so no further attempt reaches the handler.
fn dead_lettered(last: &ActionResult, attempts: u32) -> ActionResult {
    let error = failure::with_details(
        failure::permanent(
            codes::ACTION_DEAD_LETTER,
            format!(
                "the action failed {attempts} times with retryable errors and was dead-lettered"
            ),
        ),
        json!({ "attempts": attempts, "last_error": last.error }),
    );
    failure::failed(&last.action_id, error)
}

/// `action.abandoned` for a handler that ran: retryable only when `contract` makes a retry safe.
fn abandoned_handler(
    action_id: &aip_connector_core::ids::ActionId,
    contract: Option<&CapabilityContract>,
) -> ActionResult {
    abandoned(
        action_id,
        contract.is_some_and(|c| c.execution.retry_safety.allows_retry()),
    )
}

/// `sla.timeout_exceeded` for a companion (`what`: a plan's validation, a reconciliation)
/// past its deadline: retryable, since a lookup has no effect at the provider.
fn companion_timed_out(what: &str, timeout_ms: u64) -> ProtocolError {
    failure::error(
        codes::SLA_TIMEOUT_EXCEEDED,
        format!("{what} did not finish within {timeout_ms} ms"),
        ErrorCategory::Temporary,
        true,
    )
}

/// The failure `action.abandoned` of an action its transport gave up on.
fn abandoned(action_id: &aip_connector_core::ids::ActionId, retryable: bool) -> ActionResult {
    failure::failed(
        action_id,
        failure::error(
            codes::ACTION_ABANDONED,
            "the transport gave up on the action (its request timed out, its caller went away, or the server shut down), and its handler was cancelled",
            ErrorCategory::Temporary,
            retryable,
        ),
    )
}

/// The `cancelled` result of an action a cancel request stopped (no error: a cancellation is
/// not a failure), as stored, streamed, and answered to the cancel request itself.
pub(crate) fn cancelled_by_request(action_id: &aip_connector_core::ids::ActionId) -> ActionResult {
    let mut result = ActionResult::new(action_id.clone(), ActionResultStatus::Cancelled);
    result.output = Some(json!({ "cancelled": true, "reason": "action cancellation requested" }));
    result
}

/// Caller-chosen text shown in a log line or an error message before (or without) a length
/// check: at most `max_bytes` of it as shown, cut at a character, then how long it was.
/// Control characters, line and paragraph separators, bidirectional overrides and the backslash
/// are shown escaped (`\n`, `\u{1b}`, `\u{202e}`, `\\`), so an id cannot forge a log line of
/// its own, reorder what a reader sees, or send terminal escapes; the escapes count towards
/// `max_bytes`.
pub(crate) struct Clipped<'a> {
    text: &'a str,
    max_bytes: usize,
}

impl<'a> Clipped<'a> {
    pub(crate) fn new(text: &'a str, max_bytes: usize) -> Self {
        Self { text, max_bytes }
    }
}

impl std::fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        // The usual id: short and plain, written in one piece.
        if self.text.len() <= self.max_bytes && !self.text.contains(shown_escaped) {
            return f.write_str(self.text);
        }
        let mut shown = 0usize;
        let mut consumed = 0usize;
        for character in self.text.chars() {
            let escaped = shown_escaped(character).then(|| character.escape_default());
            let width = escaped
                .as_ref()
                .map_or(character.len_utf8(), ExactSizeIterator::len);
            if shown + width > self.max_bytes {
                break;
            }
            match escaped {
                Some(escaped) => write!(f, "{escaped}")?,
                None => f.write_char(character)?,
            }
            shown += width;
            consumed += character.len_utf8();
        }
        if consumed < self.text.len() {
            write!(f, "… ({} bytes)", self.text.len())?;
        }
        Ok(())
    }
}

/// Whether [`Clipped`] shows `character` escaped: controls, the separators and bidirectional
/// formatting characters that change how a line reads, and the backslash (so an escape in the
/// output always stands for an escaped character, never for the id's own text).
fn shown_escaped(character: char) -> bool {
    character == '\\' || crate::display::changes_line_layout(character)
}

/// The `action.idempotency_key_too_long` error for a key longer than `max_bytes`. The key is
/// not echoed: it may be as long as the caller liked, and the lengths say what to fix.
fn check_key_length(key: Option<&str>, max_bytes: usize) -> Option<ProtocolError> {
    let key_bytes = key.map_or(0, str::len);
    (key_bytes > max_bytes).then(|| {
        failure::with_details(
            failure::permanent(
                codes::ACTION_IDEMPOTENCY_KEY_TOO_LONG,
                format!(
                    "idempotency key is {key_bytes} bytes; this host accepts at most {max_bytes}"
                ),
            ),
            json!({ "key_bytes": key_bytes, "max_key_bytes": max_bytes }),
        )
    })
}

/// The `action.id_too_long` error for the first caller-chosen id the host would store that is
/// longer than `max_bytes`. The result still names the action by its id (the wire requires it),
/// but nothing is stored under it and the error itself gives only the field and the lengths.
fn check_id_lengths(action: &Action, max_bytes: usize) -> Option<ProtocolError> {
    let (field, id_bytes) = stored_ids(action).into_iter().find_map(|(field, id)| {
        id.map(str::len)
            .filter(|&len| len > max_bytes)
            .map(|len| (field, len))
    })?;
    Some(failure::with_details(
        failure::permanent(
            codes::ACTION_ID_TOO_LONG,
            format!("`{field}` is {id_bytes} bytes; this host accepts ids of at most {max_bytes}"),
        ),
        json!({ "field": field, "id_bytes": id_bytes, "max_id_bytes": max_bytes }),
    ))
}

/// The `action.invalid` error for the first caller-chosen id or key the host would store that
/// holds a NUL character. PostgreSQL's `text` cannot hold one (every write failed, reported as a
/// retryable outage the caller would retry for ever), so every store refuses it alike, before
/// anything is stored.
///
/// An id that is present but empty is refused the same way: upstream's parsing refuses an
/// empty id, but serde does not, and an action stored, logged and cancelled under `""` cannot
/// be told apart from any other such action.
fn check_nul_characters(action: &Action) -> Option<ProtocolError> {
    let with_nul = first_field_with_nul(
        std::iter::once(("idempotency_key", action.idempotency_key.as_deref()))
            .chain(stored_ids(action)),
    );
    if let Some(field) = with_nul {
        return Some(invalid_field(
            field,
            format!("`{field}` contains a NUL character, which ids and keys may not hold"),
        ));
    }
    let empty = stored_ids(action)
        .into_iter()
        .find_map(|(field, text)| text.filter(|text| text.is_empty()).map(|_| field))?;
    Some(invalid_field(empty, format!("`{empty}` is empty")))
}

/// `identity.invalid` when an id the host vouches for, and stores with the action, holds a NUL
/// character. The authenticator (or the deployment) supplied it, so the caller cannot fix it by
/// resending: without this check PostgreSQL would refuse the row, and the call would fail
/// `storage.unavailable`, retryable, for as long as the caller retried.
fn check_identity_text(
    caller: &TrustedContext,
    tenant: Option<&VerifiedTenant>,
    account: Option<&ExternalAccountRef>,
) -> Option<ProtocolError> {
    let fields = [
        ("principal.id", Some(caller.principal.id.as_str())),
        ("operator", caller.operator.as_ref().map(|id| id.as_str())),
        ("tenant.id", tenant.map(|t| t.id.as_str())),
        ("tenant.system", tenant.and_then(|t| t.system.as_deref())),
        (
            "external_account.system",
            account.map(|a| a.system.as_str()),
        ),
        ("external_account.id", account.map(|a| a.id.as_str())),
    ];
    let field = first_field_with_nul(fields)?;
    Some(failure::with_details(
        failure::error(
            codes::IDENTITY_INVALID,
            format!(
                "the trusted identity's `{field}` contains a NUL character, which stored ids may not hold; the authenticator must not vouch for it"
            ),
            ErrorCategory::Auth,
            false,
        ),
        json!({ "field": field }),
    ))
}

/// `action.invalid` naming the offending `field`.
fn invalid_field(field: &str, message: String) -> ProtocolError {
    failure::with_details(
        failure::permanent(codes::ACTION_INVALID, message),
        json!({ "field": field }),
    )
}

/// The caller-chosen ids the host stores, by field name.
fn stored_ids(action: &Action) -> [(&'static str, Option<&str>); 4] {
    let transaction = action.transaction.as_ref();
    [
        ("id", Some(action.id.as_str())),
        (
            "transaction.transaction_id",
            transaction
                .and_then(|t| t.transaction_id.as_ref())
                .map(|id| id.as_str()),
        ),
        (
            "transaction.plan_id",
            transaction.and_then(|t| t.plan_id.as_deref()),
        ),
        (
            "transaction.compensation_for",
            transaction
                .and_then(|t| t.compensation_for.as_ref())
                .map(|id| id.as_str()),
        ),
    ]
}

/// How deep an action's context blocks may nest, counting their own structure (as deep as an
/// input may by default, `HostLimits::max_input_depth`). Actions read from the wire are bounded
/// by serde_json's parser (127 levels for the whole envelope); actions built in process
/// (`Host::invoke` from the application's own code) are not, and serializing a block nested
/// thousands of levels deep would overflow the stack. The bound also leaves room for the
/// records that embed the action (a pending approval stores it two levels down), which the SQL
/// stores read back with that same parser.
pub(crate) const MAX_CONTEXT_DEPTH: usize = 64;

/// The `action.context_too_large` error when the action's context blocks together take more
/// than `max_bytes` of compact JSON, or one nests deeper than [`MAX_CONTEXT_DEPTH`]. An action
/// without context blocks (the usual one) costs a test per field; a present block is
/// serialized into a counter that stops at the limit, so a hostile block costs no more than
/// `max_bytes` of writing, and at most `MAX_CONTEXT_DEPTH` levels of recursion.
fn check_context_size(action: &Action, max_bytes: usize) -> Option<ProtocolError> {
    let mut budget = ContextBudget {
        remaining: max_bytes,
        exceeded: false,
        too_deep: false,
    };
    let delegation_chain =
        (!action.delegation_chain.is_empty()).then_some(&action.delegation_chain);
    let field = budget
        .spend("conversation", action.conversation.as_deref())
        .or_else(|| budget.spend("memory_context", action.memory_context.as_deref()))
        .or_else(|| budget.spend("delegation_chain", delegation_chain))
        .or_else(|| budget.spend("federation", action.federation.as_deref()))
        .or_else(|| budget.spend("callback", action.callback.as_deref()))
        .or_else(|| budget.spend("observability", action.observability.as_deref()))
        .or_else(|| budget.spend("compliance", action.compliance.as_deref()))
        .or_else(|| budget.spend("approval", action.approval.as_deref()))
        .or_else(|| budget.spend("transaction", action.transaction.as_deref()))?;
    if budget.too_deep {
        return Some(failure::with_details(
            failure::permanent(
                codes::ACTION_CONTEXT_TOO_LARGE,
                format!(
                    "the action's context block `{field}` nests deeper than \
                     {MAX_CONTEXT_DEPTH} levels"
                ),
            ),
            json!({ "field": field, "max_context_depth": MAX_CONTEXT_DEPTH }),
        ));
    }
    Some(failure::with_details(
        failure::permanent(
            codes::ACTION_CONTEXT_TOO_LARGE,
            format!(
                "the action's context blocks take more than {max_bytes} bytes of JSON \
                 (the limit was crossed at `{field}`)"
            ),
        ),
        json!({ "field": field, "max_context_bytes": max_bytes }),
    ))
}

/// The bytes the context blocks may still take, as an `io::Write` that refuses to go over.
struct ContextBudget {
    remaining: usize,
    exceeded: bool,
    /// A block nested deeper than [`MAX_CONTEXT_DEPTH`].
    too_deep: bool,
}

impl ContextBudget {
    /// Spends `block`'s compact JSON; `Some(field)` when that crosses the size or depth limit.
    fn spend<T: serde::Serialize + ?Sized>(
        &mut self,
        field: &'static str,
        block: Option<&T>,
    ) -> Option<&'static str> {
        let block = block?;
        let mut depth = DepthLimit {
            depth: 0,
            too_deep: false,
        };
        // Serializing fails on its own only for a block nothing could store either (a date out
        // of range); that is not a size problem, and the store reports it where it occurs.
        let _ = serde::Serialize::serialize(
            block,
            &mut serde_json::Serializer::with_formatter(&mut *self, &mut depth),
        );
        self.too_deep = depth.too_deep;
        (self.exceeded || self.too_deep).then_some(field)
    }
}

/// serde_json's compact output that fails as soon as an array or object opens deeper than
/// [`MAX_CONTEXT_DEPTH`]: the serializer returns at that level instead of recursing further.
struct DepthLimit {
    depth: usize,
    too_deep: bool,
}

impl DepthLimit {
    /// Opens an array or object one level down, or fails past the limit.
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        if self.depth > MAX_CONTEXT_DEPTH {
            self.too_deep = true;
            return Err(std::io::Error::other("context block nests too deep"));
        }
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        writer.write_all(bracket)
    }
}

impl serde_json::ser::Formatter for &mut DepthLimit {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }
}

impl std::io::Write for ContextBudget {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.remaining.checked_sub(bytes.len()) {
            Some(remaining) => {
                self.remaining = remaining;
                Ok(bytes.len())
            }
            None => {
                self.exceeded = true;
                Err(std::io::Error::other("context budget exceeded"))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The name of the first present text that holds a NUL character (stores refuse them).
fn first_field_with_nul<'t>(
    fields: impl IntoIterator<Item = (&'static str, Option<&'t str>)>,
) -> Option<&'static str> {
    fields
        .into_iter()
        .find_map(|(field, text)| text.filter(|text| text.contains('\0')).map(|_| field))
}

/// Withholds a connector failure's own `details` that the host could not store and send as
/// they are: too deep to read back (they would bind the key for good, see `MAX_STORED_DEPTH`),
/// or larger than an output may be. The connector's own details sit under the failure's
/// `details` key; the rest (operation, provider references) is the SDK's, shallow and small.
fn bound_failure_details(error: &mut ProtocolError, max_bytes: usize) {
    let exceeded = error.details.as_ref().and_then(|details| {
        check_json_limits(details, usize::MAX, super::MAX_STORED_DEPTH)
            .err()
            .or_else(|| {
                let own = details.get("details").unwrap_or(details);
                check_json_limits(own, max_bytes, usize::MAX).err()
            })
    });
    if let (Some(exceeded), Some(details)) = (exceeded, error.details.as_mut()) {
        let withheld = json!({
            "details_withheld": exceeded.why("the connector's details", max_bytes)
        });
        match details.get_mut("details") {
            Some(own) => *own = withheld,
            None => *details = withheld,
        }
    }
}

/// The limit a JSON value exceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JsonLimit {
    /// Its compact JSON is longer than the byte limit.
    Bytes,
    /// It nests deeper than the depth limit (a scalar is one level).
    Depth,
}

impl JsonLimit {
    /// Why `what` (plural: "the connector's details") is withheld or refused.
    fn why(self, what: &str, max_bytes: usize) -> String {
        match self {
            JsonLimit::Depth => {
                format!("{what} nest deeper than {} levels", super::MAX_STORED_DEPTH)
            }
            JsonLimit::Bytes => {
                format!("{what} are larger than {max_bytes} bytes (max_output_bytes)")
            }
        }
    }
}

/// Rejects a value (an input, an output, a failure's details) larger or deeper than the limits,
/// iteratively (no recursion on hostile input).
///
/// The size is the value's compact JSON, escapes included. Escapes are rare and costly to look
/// for, so the first pass measures strings by their bytes: an escape makes one byte at most six
/// (`\u00XX`), so only a value that the limit might refuse because of escapes is measured
/// again, escapes counted.
pub(super) fn check_json_limits(
    value: &Value,
    max_bytes: usize,
    max_depth: usize,
) -> Result<(), JsonLimit> {
    let raw = measure_input(value, max_bytes, max_depth, str::len)?;
    if raw.bytes.saturating_add(raw.string_bytes.saturating_mul(5)) > max_bytes {
        measure_input(value, max_bytes, max_depth, escaped_len)?;
    }
    Ok(())
}

/// What [`measure_input`] counted.
struct Measured {
    /// The JSON text's length, strings measured by `string_len`.
    bytes: usize,
    /// The bytes of every string and key.
    string_bytes: usize,
}

/// One pass of [`check_json_limits`]: strings and keys measured by `string_len` (without
/// their quotes), everything else exactly.
fn measure_input(
    input: &Value,
    max_bytes: usize,
    max_depth: usize,
    string_len: impl Fn(&str) -> usize,
) -> Result<Measured, JsonLimit> {
    // Containers still to visit. Scalars are counted where they are found, so a flat object
    // (the usual input) never pushes anything and the check allocates nothing.
    let mut pending: Vec<(&Value, usize)> = Vec::new();
    let mut measured = Measured {
        bytes: 0,
        string_bytes: 0,
    };
    let scalar = |value: &Value, measured: &mut Measured| -> bool {
        let len = match value {
            Value::String(text) => {
                measured.string_bytes += text.len();
                string_len(text) + 2
            }
            Value::Number(number) => number_len(number),
            Value::Bool(true) | Value::Null => 4,
            Value::Bool(false) => 5,
            Value::Array(_) | Value::Object(_) => return false,
        };
        measured.bytes += len;
        true
    };
    let mut next = Some((input, 1usize));
    while let Some((value, depth)) = next.take().or_else(|| pending.pop()) {
        if depth > max_depth {
            return Err(JsonLimit::Depth);
        }
        let children = match value {
            Value::Array(items) => {
                // Brackets and the commas between items.
                measured.bytes += 1 + items.len().max(1);
                for item in items {
                    if !scalar(item, &mut measured) {
                        pending.push((item, depth + 1));
                    }
                }
                items.len()
            }
            Value::Object(map) => {
                measured.bytes += 1 + map.len().max(1);
                for (key, item) in map {
                    measured.string_bytes += key.len();
                    measured.bytes += string_len(key) + 3;
                    if !scalar(item, &mut measured) {
                        pending.push((item, depth + 1));
                    }
                }
                map.len()
            }
            other => {
                scalar(other, &mut measured);
                0
            }
        };
        // The members counted above sit one level down.
        if children > 0 && depth + 1 > max_depth {
            return Err(JsonLimit::Depth);
        }
        if measured.bytes > max_bytes {
            return Err(JsonLimit::Bytes);
        }
    }
    Ok(measured)
}

/// The length of `text` as compact JSON writes it between its quotes: `"` and `\\` and the
/// control characters with a short escape take two bytes, other control characters six
/// (`\u00XX`).
fn escaped_len(text: &str) -> usize {
    text.len()
        + text
            .bytes()
            .map(|byte| match byte {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
                0x00..=0x1f => 5,
                _ => 0,
            })
            .sum::<usize>()
}

/// The length of `number`'s JSON text, measured without writing it anywhere: integers by their
/// digits, floats by counting what their formatting writes.
#[inline]
fn number_len(number: &serde_json::Number) -> usize {
    fn digits(value: u64) -> usize {
        value.checked_ilog10().map_or(1, |log| log as usize + 1)
    }
    if let Some(value) = number.as_u64() {
        return digits(value);
    }
    if let Some(value) = number.as_i64() {
        // Not a u64, so negative: a sign and the digits.
        return 1 + digits(value.unsigned_abs());
    }
    /// Counts the bytes written to it.
    struct Counter(usize);
    impl std::fmt::Write for Counter {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            self.0 += text.len();
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail.
    let _ = std::fmt::Write::write_fmt(&mut counter, format_args!("{number}"));
    counter.0
}

/// The identity the host vouches for; whatever the payload said is discarded. The operator
/// acting for the caller is recorded as the service account, where separation of duties
/// (`operator_must_differ`) looks for it.
fn trusted_identity(
    tenant: Option<&VerifiedTenant>,
    account: Option<&ExternalAccountRef>,
    caller: &TrustedContext,
) -> IdentityContext {
    IdentityContext {
        tenant: tenant.map(|t| TenantRef {
            id: t.id.clone(),
            system: t.system.clone(),
        }),
        external_account: account.cloned(),
        service_account: caller.operator.clone().map(|id| {
            Box::new(aip_connector_core::model::Principal::new(
                id,
                PrincipalKind::Service,
            ))
        }),
        ..IdentityContext::default()
    }
}

/// A schema failure. With redaction (`redacted_by` is the schema the value was checked
/// against), each violation's message is its value-free form (the validator's own quotes the
/// value; the value-free one names only what the schema holds: the missing property, the
/// expected type, the limit), instance paths keep only the property names the schema declares
/// (a map's keys are data, and an index can be one too: a numeric key looks the same), and the
/// input hash is reported too.
fn schema_error(
    code: &str,
    message: &str,
    action: &Action,
    violations: Vec<SchemaViolation>,
    redacted_by: Option<&Value>,
) -> ProtocolError {
    let redact = redacted_by.is_some();
    let declared = redacted_by.map(declared_property_names).unwrap_or_default();
    let violations: Vec<Value> = violations
        .into_iter()
        .map(|v| {
            if redact {
                json!({
                    "instance_path": masked_pointer(&v.instance_path, &declared),
                    "schema_path": v.schema_path,
                    "message": v.value_free_message,
                })
            } else {
                json!({ "instance_path": v.instance_path, "schema_path": v.schema_path, "message": v.message })
            }
        })
        .collect();
    let mut details = json!({ "capability_id": action.capability_id, "violations": violations });
    if redact {
        details["input_hash"] = Value::String(idempotency::input_hash(&action.input));
    }
    failure::with_details(failure::permanent(code, message), details)
}

/// Every property name `schema` declares (the keys of each `properties` object, at any depth,
/// `$defs` included).
fn declared_property_names(schema: &Value) -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    let mut pending = vec![schema];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    names.extend(properties.keys().cloned());
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    names
}

/// `pointer` (a JSON Pointer into a redacted value) with every segment that is not a declared
/// property name replaced by `*`.
fn masked_pointer(pointer: &str, declared: &std::collections::HashSet<String>) -> String {
    pointer
        .split('/')
        .enumerate()
        .map(|(index, segment)| {
            let name = segment.replace("~1", "/").replace("~0", "~");
            if index == 0 || declared.contains(&name) {
                segment
            } else {
                "*"
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A connector's failure as the wire error. With redaction, the SDK's own input-decoding
/// failure (`action.invalid_input`, raised when the input passed the schema but not the input
/// type's `Deserialize`, e.g. an integer above `u32::MAX`) loses its message and details, which
/// are serde's and may quote an input value; the input hash is reported instead.
///
/// Whatever the data policy, the resolved credential's material (`secret`) is withheld: the
/// handler holds it, a message may quote it (`"token tok_live_… was refused"`), and the failure
/// is stored, replayed, logged and returned (found by a hostile review).
///
/// `redacted_schema` is the input schema of the capability whose handler failed when the input
/// is redacted, `None` when it is not.
fn connector_error(
    failure: &crate::model::ConnectorFailure,
    action: &Action,
    redacted_schema: Option<&Value>,
    secret: Option<&crate::invocation::Secret>,
) -> ProtocolError {
    let mut error = failure.to_protocol_error();
    let mut forms = secret.map(secret_forms).unwrap_or_default();
    let Some(schema) = redacted_schema else {
        withhold(&mut error, forms);
        return error;
    };
    if error.code != aip_connector_core::model::codes::ACTION_INVALID_INPUT {
        // One pass over the failure for the credential and the input alike.
        forms.extend(input_forms(&action.input, schema));
        withhold(&mut error, forms);
        return error;
    }
    ProtocolError {
        message: "the action input does not decode into the capability's input type (the input \
                  is redacted, so the decoder's message is withheld)"
            .to_owned(),
        details: Some(json!({ "input_hash": idempotency::input_hash(&action.input) })),
        ..error
    }
}

/// The shortest input string a connector's failure is searched for: shorter ones (`"EU"`, `"1"`)
/// occur in ordinary words and codes, and would blank them out.
const MIN_WITHHELD_LEN: usize = 4;

/// The top-level detail fields of a connector failure whose values the SDK writes
/// (`ConnectorFailure::to_protocol_error`): the connector operation, the outcome flag, the
/// remote status. Never the input, so never withheld, and a client must be able to read them
/// whatever the input was. (The provider client's `phase`, `method`, ... sit inside the
/// connector's details; [`withhold`] knows their closed sets.)
///
/// `provider_operation` is the connector's, not closed, but it is the reference reconciliation
/// looks the effect up by: the transaction record takes it from the failure, and a withheld copy
/// (`[withheld]-aip1_…`) sent a reconcile companion looking for an operation that does not
/// exist, which answered "not committed" for a write the provider had (found by an author
/// trial). The transaction's status returns it as it is anyway.
const SDK_DETAIL_KEYS: &[&str] = &[
    "operation",
    "uncertain_outcome",
    "remote_status",
    "provider_operation",
];

/// Every string value of `input` (of [`MIN_WITHHELD_LEN`] bytes or more), as it is and as the
/// provider client puts it into a path or a query (percent-encoded): with redaction required,
/// errors are stored, logged and returned, and carry a hash of the input, never its values, yet a
/// handler's message may quote one (`"no patient named Ada Lovelace"`), and a provider failure
/// names its path (`GET /patients/Ada%20Lovelace`; found by an author trial and a hostile
/// review).
///
/// A map's keys are data too (`{"accounts": {"123-45-6789": …}}`): every key that `schema` does
/// not declare as a property name is searched for like a value (found by a hostile review). The
/// declared ones are the input type's field names, which a message may name freely.
fn input_forms(input: &Value, schema: &Value) -> Vec<String> {
    fn collect(value: &Value, declared: &std::collections::HashSet<String>, out: &mut Vec<String>) {
        match value {
            Value::String(text) if text.len() >= MIN_WITHHELD_LEN => encoded_forms(text, out),
            Value::Array(items) => items.iter().for_each(|item| collect(item, declared, out)),
            Value::Object(members) => {
                for (key, member) in members {
                    if key.len() >= MIN_WITHHELD_LEN && !declared.contains(key) {
                        encoded_forms(key, out);
                    }
                    collect(member, declared, out);
                }
            }
            _ => {}
        }
    }
    let declared = declared_property_names(schema);
    let mut forms = Vec::new();
    collect(input, &declared, &mut forms);
    forms
}

/// A credential's material as text, JSON-escaped, percent-encoded for a path or a query (upper
/// and lower case hex), and in base64, standard and URL-safe. Base64 is matched wherever the
/// material sits in the encoded bytes (`user:KEY` as Basic authentication sends it, `KEY:`):
/// for each of the three alignments, the characters that encode material bytes only, so at
/// most two bytes at either end stay readable (found by a hostile review). Material that is not
/// UTF-8 cannot appear in an error's text as it is, but its base64 can (a binary key a handler
/// quoted encoded; found by a hostile probe). Material with whitespace around it (read from a
/// file or an environment variable) is also withheld trimmed, as a handler must send it in a
/// header (found by the same probe). Material shorter than [`MIN_WITHHELD_LEN`] would blank out
/// ordinary words.
fn secret_forms(secret: &crate::invocation::Secret) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    /// A shorter base64 core would match unrelated text by chance.
    const MIN_BASE64_CORE: usize = 8;
    let mut forms = Vec::new();
    let bytes = secret.expose_bytes();
    if bytes.len() < MIN_WITHHELD_LEN {
        return forms;
    }
    if let Ok(text) = secret.expose_str() {
        let trimmed = (text.trim() != text).then(|| text.trim());
        for text in std::iter::once(text).chain(trimmed) {
            if text.len() < MIN_WITHHELD_LEN {
                continue;
            }
            let first = forms.len();
            encoded_forms(text, &mut forms);
            let lower: Vec<String> = forms[first + 1..]
                .iter()
                .filter(|form| form.contains('%'))
                .map(|form| lower_hex(form))
                .collect();
            forms.extend(lower);
            if let Ok(quoted) = serde_json::to_string(text) {
                forms.push(quoted[1..quoted.len() - 1].to_owned());
            }
        }
    }
    let trimmed = (bytes.trim_ascii() != bytes).then(|| bytes.trim_ascii());
    for bytes in std::iter::once(bytes).chain(trimmed) {
        for offset in 0..3 {
            let Some(rest) = bytes.get(offset..) else {
                break;
            };
            let core = &rest[..rest.len() - rest.len() % 3];
            if core.len() / 3 * 4 >= MIN_BASE64_CORE {
                forms.push(STANDARD.encode(core));
                forms.push(URL_SAFE.encode(core));
            }
        }
    }
    forms
}

/// [`withhold`] of the credential's forms, when the call resolved one.
fn withhold_credential(error: &mut ProtocolError, secret: Option<&crate::invocation::Secret>) {
    if let Some(secret) = secret {
        withhold(error, secret_forms(secret));
    }
}

/// `text` with the hex digits of its percent escapes in lower case (`%2F` → `%2f`), as some
/// encoders write them.
fn lower_hex(text: &str) -> String {
    let mut lowered = String::with_capacity(text.len());
    let mut escape = 0;
    for character in text.chars() {
        if escape > 0 {
            lowered.push(character.to_ascii_lowercase());
            escape -= 1;
        } else {
            escape = usize::from(character == '%') * 2;
            lowered.push(character);
        }
    }
    lowered
}

/// `text` as it is, as a path segment and as a query value.
fn encoded_forms(text: &str, out: &mut Vec<String>) {
    out.push(text.to_owned());
    out.push(crate::provider::path_segment(text).to_string());
    out.push(crate::provider::query_encoded(text));
}

/// `text` with every occurrence of every form replaced by `[withheld]`. Occurrences are found in
/// the text as it is, and overlapping or touching ones are withheld as one: replacing one form
/// after another let an input value that overlaps the credential (`"bad key sk_"` against
/// `"… bad key sk_live_…"`) break the credential's text up before its own turn came, so the
/// rest of it went out in clear (found by a hostile probe). Says whether anything was withheld.
fn scrub(text: &mut String, forms: &[String]) -> bool {
    let mut found: Vec<std::ops::Range<usize>> = Vec::new();
    for form in forms.iter().filter(|form| !form.is_empty()) {
        let mut from = 0;
        while let Some(at) = text.get(from..).and_then(|rest| rest.find(form.as_str())) {
            let start = from + at;
            found.push(start..start + form.len());
            // The next occurrence may overlap this one: search again from its next character.
            from = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
    }
    if found.is_empty() {
        return false;
    }
    found.sort_by_key(|range| range.start);
    let mut scrubbed = String::with_capacity(text.len());
    let mut copied = 0;
    let mut open: Option<std::ops::Range<usize>> = None;
    for range in found {
        match &mut open {
            Some(current) if range.start <= current.end => current.end = current.end.max(range.end),
            _ => {
                if let Some(done) = open.replace(range) {
                    scrubbed.push_str(&text[copied..done.start]);
                    scrubbed.push_str("[withheld]");
                    copied = done.end;
                }
            }
        }
    }
    if let Some(done) = open {
        scrubbed.push_str(&text[copied..done.start]);
        scrubbed.push_str("[withheld]");
        copied = done.end;
    }
    scrubbed.push_str(&text[copied..]);
    *text = scrubbed;
    true
}
/// Whether [`scrub`] would change `text`: some form occurs in it.
fn holds_form(text: &str, forms: &[String]) -> bool {
    forms
        .iter()
        .any(|form| !form.is_empty() && text.contains(form.as_str()))
}

/// [`scrub`] of every string and key in `value`, but the provider client's closed-valued
/// fields ([`sdk_value`]). Says whether anything was withheld.
fn scrub_value(value: &mut Value, forms: &[String]) -> bool {
    match value {
        Value::String(text) => scrub(text, forms),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, item| scrub_value(item, forms) | any),
        Value::Object(members) => {
            let mut any = false;
            // The map is rebuilt only when a key must change (a key cannot be changed in
            // place); otherwise its values are searched where they are.
            let key_hit = members
                .iter()
                .any(|(key, member)| !sdk_value(key, member) && holds_form(key, forms));
            if !key_hit {
                for (key, member) in members.iter_mut() {
                    if !sdk_value(key, member) {
                        any |= scrub_value(member, forms);
                    }
                }
                return any;
            }
            let scrubbed: serde_json::Map<String, Value> = std::mem::take(members)
                .into_iter()
                .map(|(mut key, mut member)| {
                    // The provider client's own fields (`phase`, `method`, ...) sit among
                    // the connector's details: left alone only while they hold what the
                    // SDK writes there, a word or a flag.
                    if !sdk_value(&key, &member) {
                        any |= scrub(&mut key, forms);
                        any |= scrub_value(&mut member, forms);
                    }
                    (key, member)
                })
                .collect();
            *members = scrubbed;
            any
        }
        _ => false,
    }
}
/// Whether `key: value` is one of the provider client's closed-valued fields holding a
/// value of its closed set: an HTTP method, a phase of the call, a flag.
fn sdk_value(key: &str, value: &Value) -> bool {
    const METHODS: &[&str] = &[
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
    ];
    const PHASES: &[&str] = &[
        "build",
        "connect",
        "before_send",
        "awaiting_response",
        "reading_body",
        "status",
        "decode",
    ];
    match (key, value) {
        ("method", Value::String(method)) => METHODS.contains(&method.as_str()),
        ("phase", Value::String(phase)) => PHASES.contains(&phase.as_str()),
        ("operation", operation) => {
            serde_json::from_value::<crate::model::ConnectorOperation>(operation.clone()).is_ok()
        }
        // The flags of a partial failure: a withheld word in their keys (an input
        // `required`) hid them from compensation's admission (found by a review).
        (
            "mutating"
            | "uncertain_outcome"
            | aip_connector_core::model::SIDE_EFFECTS_COMMITTED
            | aip_connector_core::model::COMPENSATION_REQUIRED,
            Value::Bool(_),
        )
        | ("remote_status", Value::Number(_)) => true,
        _ => false,
    }
}

/// The credential's material withheld from a value the host keeps as the connector's answer: a
/// validation's preview, which a plan stores and approvers read (found by a hostile review: a
/// validation may answer `Ok` with the provider's refusal, quoting the request's token), or a
/// handler's output. Says whether anything was withheld.
fn withhold_credential_in_value(
    value: &mut Value,
    secret: Option<&crate::invocation::Secret>,
) -> bool {
    let forms = credential_forms(secret);
    !forms.is_empty() && scrub_value(value, &forms)
}

/// [`secret_forms`] of the call's credential, each once; none without a credential.
fn credential_forms(secret: Option<&crate::invocation::Secret>) -> Vec<String> {
    let mut forms = secret.map(secret_forms).unwrap_or_default();
    distinct(&mut forms);
    forms
}

/// Each form once: the credential's forms and an input's often coincide (a text that needs no
/// escaping is its own path segment and query value).
fn distinct(forms: &mut Vec<String>) {
    forms.sort_unstable();
    forms.dedup();
}

/// Replaces every one of `forms` found in the connector's failure, its message and its details
/// (object keys too), with `[withheld]` ([`scrub`]: a value that contains or overlaps another is
/// withheld whole).
fn withhold(error: &mut ProtocolError, mut forms: Vec<String>) {
    if forms.is_empty() {
        return;
    }
    distinct(&mut forms);
    scrub(&mut error.message, &forms);
    // The connector names its own component there (`ConnectorFailure::source_component`); the
    // keys are the SDK's (`component`), and stay readable whatever the input was.
    match error.source.as_mut() {
        Some(Value::Object(source)) => source.values_mut().for_each(|member| {
            scrub_value(member, &forms);
        }),
        Some(source) => {
            scrub_value(source, &forms);
        }
        None => {}
    }
    // The top level of the details is the SDK's (`ConnectorFailure::to_protocol_error`): its
    // keys are never renamed (an input `provider` made `provider_request_id` unreadable), and
    // its closed-valued fields are left as they are. Below it, in the connector's own
    // `details` and anything else, every key and value is searched: a connector's own
    // `method` or `operation` may quote anything (found by a hostile review).
    if let Some(Value::Object(details)) = error.details.as_mut() {
        for (key, member) in details.iter_mut() {
            if !SDK_DETAIL_KEYS.contains(&key.as_str()) {
                scrub_value(member, &forms);
            }
        }
    } else if let Some(details) = error.details.as_mut() {
        scrub_value(details, &forms);
    }
}

/// Step 3, in upstream order.
fn contract_checks(contract: &CapabilityContract, action: &Action) -> Result<(), ProtocolError> {
    use aip_connector_core::model::IdempotencyRequirement;
    if contract.idempotency.requirement == IdempotencyRequirement::Required
        && action
            .idempotency_key
            .as_deref()
            .is_none_or(|k| k.trim().is_empty())
    {
        // Named where it goes, and for every step of a transaction: an author trial sent a
        // `plan` (a preview, no effect) without one and looked for the field to set.
        use aip_connector_core::model::TransactionMode;
        let step = action
            .transaction
            .as_ref()
            .map(|t| t.mode)
            .filter(|mode| {
                matches!(
                    mode,
                    TransactionMode::Plan
                        | TransactionMode::DryRun
                        | TransactionMode::Commit
                        | TransactionMode::Compensate
                        | TransactionMode::Reconcile
                )
            })
            .map(|mode| {
                format!(
                    "; this `{}` step needs one too: each step of a transaction takes a key of its own",
                    mode.as_str()
                )
            })
            .unwrap_or_default();
        return Err(failure::permanent(
            codes::IDEMPOTENCY_REQUIRED,
            format!(
                "this capability requires an idempotency key: set the action's `idempotency_key`{step}"
            ),
        ));
    }
    let mode = action.mode.unwrap_or(ActionMode::Sync);
    let supported = match mode {
        ActionMode::Sync => contract.execution.supports_sync,
        ActionMode::Async => contract.execution.supports_async,
        ActionMode::Streaming => contract.execution.supports_streaming,
    };
    if !supported {
        // The usual case is a streaming-only capability called the plain way: say how to call it.
        let how = if contract.execution.supports_streaming && mode != ActionMode::Streaming {
            ": it streams; invoke it streamed (`Host::invoke_stream`; over HTTP, send the action with `Accept: text/event-stream`)"
        } else if mode == ActionMode::Streaming {
            ": it answers once; invoke it plainly (`Host::invoke`; over HTTP, send the action without `Accept: text/event-stream`)"
        } else {
            ""
        };
        return Err(failure::permanent(
            codes::EXECUTION_MODE_UNSUPPORTED,
            format!(
                "the capability does not support `{}` execution{how}",
                wire(&mode)
            ),
        ));
    }
    if let Some(transaction) = &action.transaction {
        // A `compensate` of a capability that declares its effects irreversible: the refusal
        // says so, not only which contract is missing (a porting trial read "declares no
        // transaction contract" beside its `compensation(rollback_not_supported)`).
        let irreversible = if transaction.mode == TransactionMode::Compensate
            && contract.compensation.as_ref().is_some_and(|c| {
                c.mode == aip_connector_core::model::CompensationMode::RollbackNotSupported
            }) {
            "; its contract says `compensation.mode = rollback_not_supported`: its effects cannot be compensated"
        } else {
            ""
        };
        let Some(declared) = &contract.transaction else {
            if transaction.mode != TransactionMode::Execute {
                return Err(failure::permanent(
                    codes::TRANSACTION_UNSUPPORTED,
                    format!(
                        "the capability declares no transaction contract; only `execute` is allowed{irreversible}"
                    ),
                ));
            }
            return Ok(());
        };
        if !declared.supports(transaction.mode) {
            return Err(failure::permanent(
                codes::TRANSACTION_MODE_UNSUPPORTED,
                format!(
                    "the capability does not declare transaction mode `{}`{irreversible}",
                    wire(&transaction.mode)
                ),
            ));
        }
        if transaction.mode == TransactionMode::Commit
            && declared.requires_plan_before_commit
            && transaction.plan_id.is_none()
        {
            return Err(failure::permanent(
                codes::TRANSACTION_PLAN_REQUIRED,
                "this capability commits only a plan: send `transaction.plan_id`",
            ));
        }
        if transaction.mode == TransactionMode::Compensate
            && !contract.compensation.as_ref().is_some_and(|c| {
                matches!(
                    c.mode,
                    CompensationMode::Supported | CompensationMode::BestEffort
                )
            })
        {
            return Err(failure::permanent(
                codes::TRANSACTION_COMPENSATION_UNSUPPORTED,
                "the capability declares no supported compensation",
            ));
        }
        if transaction.mode == TransactionMode::RollbackNotSupported {
            return Err(failure::policy(
                codes::TRANSACTION_ROLLBACK_NOT_SUPPORTED,
                "this capability cannot roll back; nothing was run",
            ));
        }
    }
    Ok(())
}

/// The deployment's credential for the call, within `timeout_ms`: a provider that hangs (a
/// secret store that does not answer) held the call, its host slot and, over HTTP, the
/// server's in-flight slot for as long as it hung, past every deadline, and one that panicked
/// unwound into the caller (an HTTP answer then said a handler had panicked; found by a hostile
/// probe). Both are `credential.unavailable`, retryable: nothing was attempted.
async fn resolve_credential(
    provider: &dyn crate::host::CredentialProvider,
    capability: &Capability,
    caller: &TrustedContext,
    timeout_ms: u64,
) -> Result<Option<CredentialHandle>, ProtocolError> {
    use futures_util::FutureExt as _;
    let unavailable = |why: String, reason: &str| {
        failure::with_details(
            failure::error(
                codes::CREDENTIAL_UNAVAILABLE,
                why,
                ErrorCategory::Temporary,
                true,
            ),
            json!({ "reason": reason, "timeout_ms": timeout_ms }),
        )
    };
    let panicked = || {
        unavailable(
            "the deployment's credential provider panicked; nothing was attempted".to_owned(),
            "panicked",
        )
    };
    let resolving = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        provider.resolve(capability, caller)
    }))
    .map_err(|_| panicked())?;
    let resolving = std::panic::AssertUnwindSafe(resolving).catch_unwind();
    match tokio::time::timeout(std::time::Duration::from_millis(timeout_ms), resolving).await {
        Ok(Ok(resolved)) => resolved.map_err(|failure| failure.to_protocol_error()),
        Ok(Err(_)) => Err(panicked()),
        Err(_) => Err(unavailable(
            format!(
                "the deployment's credential provider did not answer within the call's deadline \
                 ({timeout_ms} ms); nothing was attempted"
            ),
            "timeout",
        )),
    }
}

fn wire(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Step 4: presence, expiry, issuer, tenant, scopes (`*` grants every scope). The credential
/// is resolved within `timeout_ms`, the call's own deadline.
async fn credential_checks(
    host: &HostInner,
    capability: &Capability,
    contract: Option<&CapabilityContract>,
    caller: &TrustedContext,
    tenant: Option<&VerifiedTenant>,
    timeout_ms: u64,
) -> Result<Option<CredentialHandle>, ProtocolError> {
    let Some(policy) = contract.and_then(|c| c.credentials.as_ref()) else {
        return Ok(None);
    };
    let resolved = match &host.deployment.credentials {
        Some(provider) => {
            resolve_credential(provider.as_ref(), capability, caller, timeout_ms).await?
        }
        None => None,
    };
    let auth =
        |code: &str, message: String| failure::error(code, message, ErrorCategory::Auth, false);
    let Some(handle) = resolved else {
        if policy.required {
            // Where the credential comes from, as the tenant's refusal names
            // `Deployment::with_tenant` (an author trial looked for it).
            let why = if host.deployment.credentials.is_some() {
                "its credential provider answered none for this call"
            } else {
                "the host's deployment has no credential provider: give it one \
                 (Deployment::with_credentials, or Deployment::with_static_credential for a \
                 single credential; in a testkit TestHost, TestHostBuilder::credential with the \
                 scopes it grants)"
            };
            return Err(auth(
                codes::CREDENTIAL_MISSING,
                format!(
                    "the capability requires a credential and the deployment resolved none: {why}"
                ),
            ));
        }
        return Ok(None);
    };
    if let Some(expired_at_ms) = handle.expires_at_ms.filter(|&at| at <= host.clock.now_ms()) {
        // Upstream's code for an expired credential is `scope_missing`; the details say which
        // it is, so a client refreshes the credential instead of asking for more scopes.
        return Err(failure::with_details(
            auth(
                codes::CREDENTIAL_SCOPE_MISSING,
                "the resolved credential is expired".to_owned(),
            ),
            json!({ "expired": true, "expired_at_ms": expired_at_ms }),
        ));
    }
    if !policy.accepted_issuers.is_empty() && !policy.accepted_issuers.contains(&handle.issuer) {
        return Err(auth(
            codes::CREDENTIAL_ISSUER_DENIED,
            format!("credential issuer `{}` is not accepted", handle.issuer),
        ));
    }
    // A tenant-bound credential serves only calls of that tenant: a call without a verified
    // tenant (neither the transport's nor the deployment's) is refused too, or it would act
    // with a tenant's secret outside every tenant.
    if let Some(bound) = &handle.tenant_id {
        match tenant {
            Some(tenant) if *bound == tenant.id => {}
            Some(_) => {
                return Err(auth(
                    codes::CREDENTIAL_TENANT_MISMATCH,
                    "the resolved credential belongs to another tenant".to_owned(),
                ));
            }
            None => {
                return Err(auth(
                    codes::CREDENTIAL_TENANT_MISMATCH,
                    "the resolved credential belongs to a tenant and the call has none (give the deployment a tenant with `Deployment::with_tenant`, or verify the caller's)".to_owned(),
                ));
            }
        }
    }
    let wildcard = handle.scopes.iter().any(|s| s == "*");
    let missing: Vec<&String> = policy
        .required_scopes
        .iter()
        .filter(|s| !wildcard && !handle.scopes.contains(s))
        .collect();
    if !missing.is_empty() {
        let error = auth(
            codes::CREDENTIAL_SCOPE_MISSING,
            "the resolved credential lacks required scopes".to_owned(),
        );
        return Err(failure::with_details(
            error,
            json!({ "missing_scopes": missing }),
        ));
    }
    Ok(Some(handle))
}

/// Step 5: principal kinds that may invoke (tenants, customers and contacts may not).
fn authorize(caller: &TrustedContext) -> Result<(), ProtocolError> {
    match caller.principal.kind {
        PrincipalKind::Human
        | PrincipalKind::Agent
        | PrincipalKind::Service
        | PrincipalKind::System => Ok(()),
        kind => Err(failure::error(
            codes::AUTH_NOT_AUTHORIZED,
            format!(
                "principal kind `{}` may not invoke capabilities",
                wire(&kind)
            ),
            ErrorCategory::Auth,
            false,
        )),
    }
}

/// Step 10: records a pending approval and answers `pending_approval` (the caller settles the
/// reservation, so a duplicate replays the pending result).
async fn approval_gate(call: &Call<'_>, key: Option<String>, fingerprint: String) -> ActionResult {
    // An execute that must first be reconciled, or a compensation whose target was already
    // compensated, cannot run: say so before an approver is asked to release it (admission
    // would refuse it after the approval).
    if call.action.transaction.is_some()
        && let Some(error) =
            transaction::refusal_before_gate(call.host, call.action, call.caller).await
    {
        return failure::failed(&call.action.id, error);
    }
    let Call {
        host,
        action,
        capability,
        contract,
        caller,
        tenant,
        redact,
        ..
    } = *call;
    let compensating = action
        .transaction
        .as_ref()
        .is_some_and(|t| t.mode == TransactionMode::Compensate);
    // A declared policy governs the request even when it is optional (`required: false`): the
    // gate opened on risk or `requires_human_approval`, and the author's approvers, rule and TTL
    // are still the ones meant to decide.
    let policy = contract
        .and_then(|c| c.approval.clone())
        .unwrap_or_else(|| {
            if compensating {
                compensation_approval_policy()
            } else {
                default_approval_policy()
            }
        });
    let record = approval::new_record(
        Action::clone(action),
        fingerprint,
        !redact,
        capability,
        policy,
        caller.principal.id.clone(),
        tenant.map(|t| t.id.clone()),
        key,
        host.clock.now_ms(),
    );
    if let Err(error) = host.store.insert_approval(&record).await {
        return failure::failed(&action.id, failure::storage(&error));
    }
    let mut result = ActionResult::new(action.id.clone(), ActionResultStatus::PendingApproval);
    result.output = Some(json!({
        "approval_id": record.approval_id,
        "expires_at_ms": record.expires_at_ms,
        "policy_hash": record.policy_hash,
    }));
    let error = failure::policy(
        codes::POLICY_HUMAN_APPROVAL_REQUIRED,
        "this action needs human approval before it runs",
    );
    result.error = Some(Box::new(failure::with_details(
        error,
        json!({ "approval_id": record.approval_id }),
    )));
    result
}

/// Whether `result` replays a `pending_approval` stored under the key (stage 7).
fn is_pending_replay(result: &ActionResult) -> bool {
    result.status == ActionResultStatus::PendingApproval && result.is_idempotent_replay()
}

/// A replayed `pending_approval` result, brought up to date with its approval.
///
/// The record under the key keeps `pending_approval` until a resume replaces it, so without
/// this a resend after a denial (or an expiry, a revocation, or retention deleting the closed
/// approval) would keep answering "pending" for an action that can no longer run. Those answer
/// the matching `policy.*` failure instead, as a resume would; an approval whose action ran
/// through a re-submission (under another key, so this key still holds the pending result)
/// answers `policy.approval_already_resumed`, once its resume was claimed [`CLAIM_SETTLING_MS`]
/// ago or more (before that, the resume may be on its way to this key: `idempotency.in_progress`,
/// see [`claim_settling`]); an approved one not yet resumed keeps its status,
/// with a message saying it was approved. A pending approval keeps the replay as it is; so does
/// an approval of another tenant (a capability-scoped key is shared across tenants; its
/// approval's fate is not theirs to learn), and a store failure (logged): it is what the key
/// holds, and the caller learns the rest from the approval.
async fn refresh_pending_replay(
    host: &HostInner,
    caller: &TrustedContext,
    replayed: ActionResult,
) -> ActionResult {
    let now = host.clock.now_ms();
    let Some(approval_id) = replayed
        .error
        .as_ref()
        .and_then(|e| e.details.as_ref())
        .and_then(|d| d.get("approval_id"))
        .and_then(Value::as_str)
        .map(ApprovalId::trusted)
    else {
        return replayed;
    };
    let error = match approval::expire_if_due(host.store.as_ref(), &approval_id, now).await {
        Ok(Some(record))
            if !idempotency::of_tenant(record.tenant_id.as_deref(), host.tenant_of(caller)) =>
        {
            return replayed;
        }
        Ok(Some(record)) => match record.status {
            // A resume claims the approval before it reserves the key: a resend in between
            // reads "resumed" beside the pending record, and "already ran" would be a permanent
            // failure for an action about to run and succeed under this key (a replica trial's
            // poller). It is told to come back, as stage 9 tells a resend.
            ApprovalStatus::Approved if record.resumed && claimed_moments_ago(&record, now) => {
                return claim_settling(&replayed.action_id);
            }
            ApprovalStatus::Approved if record.resumed => failure::policy(
                codes::POLICY_APPROVAL_ALREADY_RESUMED,
                "this approved action already ran (re-submitted under another key)",
            ),
            ApprovalStatus::Pending => return replayed,
            // Still pending for the protocol (nothing ran), but a caller polling by resending
            // read "needs human approval" after the approval was granted (a deployment trial):
            // say that it was, and how the action runs.
            ApprovalStatus::Approved => return approved_not_resumed(replayed),
            status @ (ApprovalStatus::Denied
            | ApprovalStatus::Expired
            | ApprovalStatus::Revoked) => status_error(status),
        },
        Ok(None) => failure::policy(
            codes::POLICY_APPROVAL_NOT_FOUND,
            "the approval this action waited for no longer exists (retention deleted it after it closed)",
        ),
        Err(error) => {
            tracing::warn!(error = %error, "the approval of a replayed pending result could not be read");
            return replayed;
        }
    };
    let mut result = failure::failed(
        &replayed.action_id,
        failure::with_details(error, json!({ "approval_id": approval_id })),
    );
    result.mark_idempotent_replay();
    result
}

/// A replayed `pending_approval` whose approval was granted and not yet resumed: the same
/// result, its message and `details.approval_status` saying that it was approved and how the
/// action runs.
fn approved_not_resumed(mut replayed: ActionResult) -> ActionResult {
    if let Some(error) = replayed.error.as_mut() {
        error.message = "this action was approved and has not run yet: send it again, the same \
            action, with an approving decision attached (`approval`, from the approval's record)"
            .to_owned();
        if let Some(Value::Object(details)) = error.details.as_mut() {
            details.insert("approval_status".to_owned(), json!("approved"));
        }
    }
    replayed
}

/// The policy applied when approval is forced by risk or the legacy flag rather than declared.
pub(crate) fn default_approval_policy() -> aip_connector_core::model::ApprovalPolicy {
    aip_connector_core::model::ApprovalPolicy {
        required: true,
        reason: Some(
            "risk above the host's automatic-approval ceiling requires approval".to_owned(),
        ),
        evidence_requirements: vec![aip_connector_core::model::EvidenceRequirement::Reason],
        policy_version: Some("aip.approval/v1".to_owned()),
        ..aip_connector_core::model::ApprovalPolicy::default()
    }
}

/// The policy applied when `compensation(requires_approval)` forces approval and the capability
/// declares no approval policy of its own (upstream's default for compensation).
fn compensation_approval_policy() -> aip_connector_core::model::ApprovalPolicy {
    use aip_connector_core::model::{ApprovalPolicy, EvidenceRequirement};
    ApprovalPolicy {
        required: true,
        reason: Some("compensation requires explicit approval".to_owned()),
        evidence_requirements: vec![
            EvidenceRequirement::Reason,
            EvidenceRequirement::PolicyDecision,
            EvidenceRequirement::InputSnapshot,
        ],
        policy_version: Some("aip.approval/v1".to_owned()),
        ..ApprovalPolicy::default()
    }
}

/// Where a compensation is sent, for an action that named the compensating capability
/// `compensating` itself: the capability (or capabilities) whose contract names it, which a
/// `compensate` action must name instead. A scan of the hosted capabilities, on a refusal only.
fn compensation_route_hint(host: &HostInner, compensating: &CapabilityId) -> String {
    let mut undone: Vec<&str> = host
        .capabilities
        .values()
        .map(HostedCapability::capability)
        .filter(|capability| {
            capability
                .contract
                .as_ref()
                .and_then(|c| c.compensation.as_ref())
                .and_then(|c| c.compensation_capability_id.as_ref())
                == Some(compensating)
        })
        .map(|capability| capability.id.as_str())
        .collect();
    undone.sort_unstable();
    let named = Clipped::new(compensating.as_str(), 128);
    match undone.as_slice() {
        [] => format!(
            "capability `{named}` only runs as the compensation of another capability: send a `compensate` action naming the capability it undoes"
        ),
        targets => format!(
            "capability `{named}` only runs as the compensation of {}: send the `compensate` action to the capability it undoes (its transaction block `compensation_for` naming the action to undo: `ActionTransaction::compensate(<its action id>)`), and the host runs `{named}` for it",
            targets
                .iter()
                .map(|id| format!("`{id}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// For a `compensate`, the hosted capability and capability whose handler runs: the contract's
/// `compensation_capability_id` (refused as `resource.not_found` when this host does not host
/// it). `None` for every other action, and for a compensation without a compensating capability
/// (`best_effort`), which runs the capability's own handler.
fn route_compensation<'a>(
    host: &'a HostInner,
    action: &Action,
    contract: Option<&CapabilityContract>,
) -> Result<Option<(&'a HostedCapability, &'a Capability)>, ProtocolError> {
    if action.transaction.as_ref().map(|t| t.mode) != Some(TransactionMode::Compensate) {
        return Ok(None);
    }
    let Some(target) = contract
        .and_then(|c| c.compensation.as_ref())
        .and_then(|c| c.compensation_capability_id.as_ref())
    else {
        return Ok(None);
    };
    let not_hosted = || {
        failure::permanent(
            codes::RESOURCE_NOT_FOUND,
            format!("the compensating capability `{target}` is not hosted here"),
        )
    };
    let hosted = host.capabilities.get(target).ok_or_else(not_hosted)?;
    Ok(Some((hosted, hosted.capability())))
}

/// A re-submitted action carrying an approval decision must match an approved record: same
/// requester, action, capability and input, and the decision's constraints must hold. Answers
/// the record and its decision the attached one named.
async fn provided_approval(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
    decision: &aip_connector_core::model::ApprovalDecision,
    fingerprint: &str,
) -> Result<(ApprovalRecord, aip_connector_core::model::ApprovalDecision), ProtocolError> {
    let record = approval::expire_if_due(
        host.store.as_ref(),
        &decision.approval_id,
        host.clock.now_ms(),
    )
    .await?
    .ok_or_else(unknown_approval)?;
    // The same checks as `resume_approved`: a principal of the same name in another tenant is
    // another requester. They come first, so that only the requester learns which action an
    // approval was granted for (another tenant's approval reads as unknown whatever it names).
    match resuming_party(host, &record, caller) {
        Ok(()) => {}
        // Another tenant's approval reads as unknown, as for a resume.
        Err(Mismatch::Tenant) => return Err(unknown_approval()),
        Err(Mismatch::Requester) => {
            return Err(failure::policy(
                codes::POLICY_APPROVAL_UNVERIFIED,
                "only the requester, in the tenant the approval was granted for, may run an approved action",
            ));
        }
        Err(Mismatch::Operator) => return Err(operator_changed()),
    }
    let differs = if record.action.id != action.id {
        Some("action_id")
    } else if record.capability_id != action.capability_id {
        Some("capability_id")
    } else if record.input_hash != fingerprint {
        Some("input")
    } else {
        None
    };
    if let Some(differs) = differs {
        // An author trial resent the approved action as a new `Action::new` (a new id) and had
        // no way forward: name the action the approval releases, and what differs.
        return Err(failure::with_details(
            failure::policy(
                codes::POLICY_APPROVAL_UNVERIFIED,
                "the approval was granted for another action or input: resend the action it was \
                 granted for, with its id (`details.approved_action_id`) and the same \
                 capability, input and transaction",
            ),
            json!({
                "approval_id": record.approval_id,
                "approved_action_id": record.action.id,
                "differs": differs,
            }),
        ));
    }
    if record.status != ApprovalStatus::Approved {
        return Err(status_error(record.status));
    }
    // The decision travels with the action (stored, logged, shown to the handler's caller): it
    // must be one the approval recorded, not one the requester made up (found by an approval
    // trial). Its decision id names it; without one, its approver does. The id alone, since the
    // record names the approver as the authority resolved them, which may not be the spelling
    // the approver sent (a case-insensitive directory).
    // The recorded decision then replaces the attached one, so what travels on is what the
    // approver said, whatever else the requester wrote into the decision it attached (a
    // reason, an approver: found by a hostile review).
    let recorded = (decision.decision
        == aip_connector_core::model::ApprovalDecisionKind::Approved)
        .then(|| {
            record.decisions.iter().find(|recorded| {
                recorded.decision == aip_connector_core::model::ApprovalDecisionKind::Approved
                    && match &decision.decision_id {
                        Some(id) => recorded.decision_id.as_ref() == Some(id),
                        None => recorded.approver.id == decision.approver.id,
                    }
            })
        })
        .flatten()
        .cloned()
        .ok_or_else(|| {
            failure::policy(
                codes::POLICY_APPROVAL_UNVERIFIED,
                "the attached decision is not an approving decision this approval recorded: attach one from the approval's view",
            )
        })?;
    for recorded in record
        .decisions
        .iter()
        .filter(|d| d.decision == aip_connector_core::model::ApprovalDecisionKind::Approved)
    {
        approval::check_constraints(recorded, &action.input)?;
    }
    Ok((record, recorded))
}

/// What of a caller does not match the approved action it would run.
enum Mismatch {
    /// The caller's tenant is not the record's (exactly: a record made without a tenant is no
    /// tenant's, as a key stored without one is, `idempotency::of_tenant`).
    Tenant,
    /// The caller is not the requester.
    Requester,
    /// The policy keeps the operator from approving (`operator_must_differ`), and the caller
    /// runs under another operator than the one the approvers were checked against.
    Operator,
}

/// Whether `caller` may run the action `record` approved: its requester, in its tenant, and,
/// when separation of duties names the operator, under the operator of the request. The action
/// runs under the resuming caller's identity, so a new operator would be one no approver was
/// checked against: an approver could approve, then operate the action themselves (found by a
/// hostile review).
fn resuming_party(
    host: &HostInner,
    record: &ApprovalRecord,
    caller: &TrustedContext,
) -> Result<(), Mismatch> {
    let caller_tenant = host.tenant_of(caller).map(|t| t.id.as_str());
    if record.tenant_id.as_deref() != caller_tenant {
        return Err(Mismatch::Tenant);
    }
    if record.requested_by != caller.principal.id {
        return Err(Mismatch::Requester);
    }
    if record.policy.separation_of_duties.operator_must_differ
        && approval::operator_of(record) != caller.operator.as_ref()
    {
        return Err(Mismatch::Operator);
    }
    Ok(())
}

/// The refusal of a re-submission carrying an approval the caller cannot know of.
fn unknown_approval() -> ProtocolError {
    failure::policy(
        codes::POLICY_APPROVAL_UNVERIFIED,
        "no approval with this id is known to the host",
    )
}

/// The refusal of an approved action run under another operator than its request's.
fn operator_changed() -> ProtocolError {
    failure::policy(
        codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR,
        "the approval's policy keeps the operator from approving, and its approvers were checked against the operator of the request: run the approved action under that operator",
    )
}

/// `result` brought up to date by [`refresh_pending_replay`], or, with `give_back`, `result`
/// after giving back the claim this call took on the resume of approval `id`
/// ([`ApprovalStore::release_resume`](crate::store::ApprovalStore::release_resume)) when the
/// result is retryable: its key was left free for the next attempt (or never reserved), and the
/// approval must let that attempt run too, instead of answering it "already resumed". A store
/// that fails here three times (see [`give_back_resume`]) leaves the approval reading as resumed:
/// logged, as nothing else can be done.
async fn follow_up(
    host: &Arc<HostInner>,
    caller: &TrustedContext,
    give_back: Option<&HeldResume>,
    result: ActionResult,
) -> ActionResult {
    let Some(claim) = give_back else {
        return refresh_pending_replay(host, caller, result).await;
    };
    HoldReturn::giving_back(host, claim).run().await;
    result
}

/// Gives back `claim`, the resume a call that ended retryably claimed, so a later resume runs
/// the action again. Only that claim is released (by its token): written twice (a dropped
/// call's writes are finished on a task of their own), or for a claim that never landed (its
/// answer was lost), it undoes no other call's claim, however close in time. A write the store
/// fails is made again after the settlements' pauses, as it safely can be: a give-back left
/// unwritten strands the approved action, which no resume could then run.
async fn give_back_resume(host: &HostInner, claim: &HeldResume) {
    let release = || host.store.release_resume(&claim.id, &claim.claim);
    if let Err(error) = super::written_with_retries(release).await {
        tracing::warn!(
            error = %error,
            approval_id = %claim.id,
            "the resume of an approved action that ended retryably was not given back; the approval reads as resumed"
        );
    }
}

fn verified_from(record: &ApprovalRecord) -> VerifiedApprovals {
    VerifiedApprovals {
        approval_ids: vec![record.approval_id.clone()],
        decision_ids: record
            .decisions
            .iter()
            .filter_map(|d| d.decision_id.clone())
            .collect(),
        policy_hashes: vec![record.policy_hash.clone()],
    }
}

/// The failure for an approval in `status`.
fn status_error(status: ApprovalStatus) -> ProtocolError {
    match status {
        ApprovalStatus::Denied => {
            failure::policy(codes::POLICY_APPROVAL_DENIED, "the approval was denied")
        }
        ApprovalStatus::Expired => {
            failure::policy(codes::POLICY_APPROVAL_EXPIRED, "the approval expired")
        }
        ApprovalStatus::Revoked => {
            failure::policy(codes::POLICY_APPROVAL_REVOKED, "the approval was revoked")
        }
        ApprovalStatus::Pending => failure::policy(
            codes::POLICY_APPROVAL_NOT_GRANTED,
            "the approval is still pending",
        ),
        ApprovalStatus::Approved => failure::policy(
            codes::POLICY_APPROVAL_NOT_GRANTED,
            "the approval is granted",
        ),
    }
}

/// Resumes an approved action exactly once, as its requester, answering one result: an action
/// sent for streaming is refused before anything is claimed (resume it with
/// `Host::resume_approved_stream`, which streams its chunks).
pub(crate) async fn resume(
    host: &Arc<HostInner>,
    id: &ApprovalId,
    caller: &TrustedContext,
) -> ActionResult {
    let record = match resumable(host, id, caller).await {
        Ok(record) => record,
        Err(refused) => return refused,
    };
    // A resume that already ran (a streamed one included) says so, as stage 9's claim would,
    // rather than sending the caller to `resume_approved_stream` for nothing.
    if record.resumed {
        return already_resumed(&record.action.id);
    }
    if record.action.mode == Some(aip_connector_core::model::ActionMode::Streaming) {
        return failure::failed(
            &record.action.id,
            failure::with_details(
                failure::permanent(
                    codes::EXECUTION_MODE_UNSUPPORTED,
                    "the approved action was sent for streaming and runs only with a stream: resume it with `resume_approved_stream` (or re-submit it to `invoke_stream` with the approval decision attached); nothing was claimed",
                ),
                json!({ "approval_id": record.approval_id, "mode": "streaming" }),
            ),
        );
    }
    let action = Arc::new(record.action.clone());
    run(
        host,
        action,
        caller,
        Options {
            stream: None,
            resume: Some(record),
        },
    )
    .await
}

/// The approved record `id` when `caller` may resume it now (applying expiry first), else the
/// failure to answer. Claims nothing: the resume is claimed by stage 9 of the run.
pub(crate) async fn resumable(
    host: &HostInner,
    id: &ApprovalId,
    caller: &TrustedContext,
) -> Result<Box<ApprovalRecord>, ActionResult> {
    let record = match approval::expire_if_due(host.store.as_ref(), id, host.clock.now_ms()).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            return Err(failure::failed(
                &aip_connector_core::ids::ActionId::new(),
                failure::policy(codes::POLICY_APPROVAL_NOT_FOUND, "no approval with this id"),
            ));
        }
        Err(error) => {
            return Err(failure::failed(
                &aip_connector_core::ids::ActionId::new(),
                error,
            ));
        }
    };
    let action_id = record.action.id.clone();
    match resuming_party(host, &record, caller) {
        Ok(()) => {}
        // Another tenant's approval is not there for this caller, as for every other read of
        // it (decisions, views): no oracle of its existence, and no action id of it.
        Err(Mismatch::Tenant) => {
            return Err(failure::failed(
                &aip_connector_core::ids::ActionId::new(),
                failure::policy(codes::POLICY_APPROVAL_NOT_FOUND, "no approval with this id"),
            ));
        }
        Err(Mismatch::Requester) => {
            return Err(failure::failed(
                &action_id,
                failure::error(
                    codes::AUTH_NOT_AUTHORIZED,
                    "only the requester, in the tenant the approval was granted for, resumes an approved action",
                    ErrorCategory::Auth,
                    false,
                ),
            ));
        }
        Err(Mismatch::Operator) => {
            return Err(failure::failed(&action_id, operator_changed()));
        }
    }
    if record.status != ApprovalStatus::Approved {
        return Err(failure::failed(&action_id, status_error(record.status)));
    }
    if !record.input_retained {
        return Err(failure::failed(
            &action_id,
            failure::with_details(
                failure::policy(
                    codes::POLICY_APPROVAL_RESUBMISSION_REQUIRED,
                    "the action is approved, but its input was redacted and is not stored: re-submit the same action (same action id and input) with the approval decision attached",
                ),
                json!({ "approval_id": record.approval_id }),
            ),
        ));
    }
    Ok(Box::new(record))
}

/// The refusal of an output (`what`: the handler's, a validation's answer) the host cannot store
/// and send as it is: `action.output_schema_invalid` when deeper than a store reads back,
/// `action.output_too_large` when larger than `max_output_bytes`.
fn refused_output(exceeded: JsonLimit, what: &str, max_bytes: usize) -> ProtocolError {
    match exceeded {
        JsonLimit::Depth => failure::with_details(
            failure::permanent(
                codes::ACTION_OUTPUT_SCHEMA_INVALID,
                format!(
                    "{what} nests deeper than {} levels, more than the host can store and read back",
                    super::MAX_STORED_DEPTH
                ),
            ),
            json!({ "max_output_depth": super::MAX_STORED_DEPTH }),
        ),
        JsonLimit::Bytes => failure::with_details(
            failure::permanent(
                codes::ACTION_OUTPUT_TOO_LARGE,
                format!(
                    "{what} is larger than {max_bytes} bytes of JSON, the host's `max_output_bytes`: return less per call (a page, a range) and say where the rest is"
                ),
            ),
            json!({ "max_output_bytes": max_bytes }),
        ),
    }
}

/// Step 15: only completed results are checked; a violation replaces the result.
///
/// The output is stored, replayed and returned: a provider that echoes the call's credential
/// (`"authorization": "Bearer …"`) must not carry it there (found by an author trial). The
/// credential is withheld once the output is known to be within the limits (the search is
/// recursive, and an oversized output is refused unread) and before the schema check, so what
/// goes out is what was validated.
fn check_output(
    hosted: &HostedCapability,
    action: &Action,
    mut output: Value,
    limits: &super::HostLimits,
    redact: bool,
    secret: Option<&crate::invocation::Secret>,
) -> ActionResult {
    if let Err(exceeded) =
        check_json_limits(&output, limits.max_output_bytes, super::MAX_STORED_DEPTH)
    {
        return failure::failed(
            &action.id,
            refused_output(exceeded, "the handler's output", limits.max_output_bytes),
        );
    }
    if withhold_credential_in_value(&mut output, secret) {
        tracing::warn!(
            action_id = %Clipped::new(action.id.as_str(), limits.max_id_bytes),
            capability_id = %Clipped::new(hosted.capability().id.as_str(), limits.max_id_bytes),
            "the handler's output quoted the call's credential; it was withheld from the output"
        );
    }
    if let Some(schema) = &hosted.output_schema
        && let Err(violations) = schema.validate(&output, limits.max_violations)
    {
        let error = schema_error(
            codes::ACTION_OUTPUT_SCHEMA_INVALID,
            "the handler's output does not match the capability's output schema",
            action,
            violations,
            redact
                .then(|| hosted.capability().output_schema.as_ref())
                .flatten(),
        );
        return failure::failed(&action.id, error);
    }
    ActionResult::completed(action.id.clone(), output)
}

/// The instant `timeout_ms` from now (the timeout may be the caller's, any u64).
fn deadline_in(timeout_ms: u64) -> tokio::time::Instant {
    crate::extract::instant_after(
        tokio::time::Instant::now(),
        Duration::from_millis(timeout_ms),
    )
}

/// min(action timeout, SLA timeout), else the host default. The action's timeout is the
/// caller's, so it is first clamped to the host's `max_action_timeout_ms`: it also sets how long
/// the call's idempotency reservation binds its key should the host die mid-call.
fn effective_timeout(
    action: &Action,
    contract: Option<&CapabilityContract>,
    limits: &HostLimits,
) -> u64 {
    let sla = contract
        .and_then(|c| c.sla.as_ref())
        .and_then(|s| s.timeout_ms);
    let asked = action
        .timeout_ms
        .map(|asked| asked.min(limits.max_action_timeout_ms));
    let default_ms = limits.default_timeout_ms;
    match (asked, sla) {
        (Some(a), Some(s)) => a.min(s),
        (Some(a), None) => a,
        (None, Some(s)) => s,
        (None, None) => default_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(text: &str, forms: &[&str]) -> String {
        let mut text = text.to_owned();
        let mut forms: Vec<String> = forms.iter().map(|form| (*form).to_owned()).collect();
        distinct(&mut forms);
        scrub(&mut text, &forms);
        text
    }

    #[test]
    fn a_binary_or_untrimmed_credential_is_withheld_in_the_forms_a_handler_sends() {
        use base64::Engine as _;
        let binary: Vec<u8> = (0_u8..24).map(|n| n.wrapping_mul(37) ^ 0xA5).collect();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&binary);
        let forms = secret_forms(&crate::invocation::Secret::from(binary));
        assert!(forms.contains(&encoded), "{forms:?}");
        let mut error = failure::error(
            "keys.refused",
            format!("key {encoded} refused"),
            ErrorCategory::Auth,
            false,
        );
        withhold(&mut error, forms);
        assert_eq!(error.message, "key [withheld] refused");

        let forms = secret_forms(&crate::invocation::Secret::new("tok_live_0123456789\n"));
        assert!(
            forms.iter().any(|form| form == "tok_live_0123456789"),
            "{forms:?}"
        );
        // Its base64 too, aligned on the trimmed text (`user:` + the key, as Basic sends it).
        let trimmed_core =
            base64::engine::general_purpose::STANDARD.encode(&b"tok_live_0123456789"[..18]);
        assert!(forms.contains(&trimmed_core), "{forms:?}");
    }

    #[test]
    fn a_failure_names_the_credential_nowhere_but_in_its_code() {
        let secret = crate::invocation::Secret::new("sk_live_CANARY_0123456789");
        let mut error = failure::error("vault.refused", "refused", ErrorCategory::Auth, false);
        error.source = Some(json!({ "component": "vault@sk_live_CANARY_0123456789" }));
        withhold_credential(&mut error, Some(&secret));
        assert_eq!(
            error.source,
            Some(json!({ "component": "vault@[withheld]" }))
        );
        // The SDK's own key stays readable whatever an input value was.
        let mut forms = secret_forms(&secret);
        forms.push("component".to_owned());
        withhold(&mut error, forms);
        assert_eq!(
            error.source,
            Some(json!({ "component": "vault@[withheld]" }))
        );
    }

    #[test]
    fn a_form_overlapping_another_cannot_uncover_it() {
        let secret = "sk_live_CANARY_0123456789";
        // An input value that ends where the secret starts, longer than it or not.
        let message = format!("provider said: bad key {secret}");
        assert_eq!(
            scrubbed(&message, &[secret, "provider said: bad key sk_"]),
            "[withheld]"
        );
        assert_eq!(
            scrubbed(&message, &[secret, "key sk"]),
            "provider said: bad [withheld]"
        );
        // One that starts inside it and runs on.
        assert_eq!(
            scrubbed(&format!("{secret} expired"), &[secret, "789 expired"]),
            "[withheld]"
        );
        // Touching occurrences are one; separate ones stay apart; overlapping repeats of one
        // form are all found.
        assert_eq!(scrubbed("abcdXYZW", &["abcd", "XYZW"]), "[withheld]");
        assert_eq!(scrubbed("abcd-abcd", &["abcd"]), "[withheld]-[withheld]");
        assert_eq!(scrubbed("aaaaa", &["aaaa"]), "[withheld]");
        // Text around the matches, multibyte characters included, is kept as it is.
        assert_eq!(
            scrubbed("é Ada Lovelace ü", &["Ada Lovelace"]),
            "é [withheld] ü"
        );
        assert_eq!(scrubbed("nothing here", &["secret"]), "nothing here");
    }

    #[test]
    fn redacted_paths_keep_only_declared_property_names() {
        let schema = json!({
            "type": "object",
            "properties": {
                "accounts": {
                    "type": "object",
                    "additionalProperties": { "$ref": "#/$defs/Account" }
                },
                "a/b": { "type": "string" }
            },
            "$defs": { "Account": { "properties": { "balance": { "type": "integer" } } } }
        });
        let declared = declared_property_names(&schema);
        assert_eq!(
            masked_pointer("/accounts/12345678/balance", &declared),
            "/accounts/*/balance"
        );
        assert_eq!(
            masked_pointer("/accounts/ssn~1123/x", &declared),
            "/accounts/*/*"
        );
        assert_eq!(masked_pointer("/a~1b", &declared), "/a~1b");
        assert_eq!(masked_pointer("", &declared), "");
    }

    /// A redacted schema failure says which property is missing and what a value should have
    /// been, from the schema alone: no input value reaches it.
    #[test]
    fn a_redacted_schema_failure_names_the_schemas_side_only() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": { "type": "string" },
                "age": { "type": "integer" },
                "tags": { "type": "object", "additionalProperties": { "maxLength": 4 } }
            },
            "required": ["title"]
        });
        let compiled = aip_connector_core::schema::compile_draft202012(
            &schema,
            &aip_connector_core::schema::SchemaLimits::default(),
        )
        .expect("valid schema");
        let input = json!({ "age": "canary-9c1e", "tags": { "canary-key": "canary-9c1e" } });
        let action = Action::new("cap:x:y", input.clone());
        let violations = compiled.validate(&input, 16).expect_err("invalid");
        let error = schema_error(
            codes::ACTION_INPUT_SCHEMA_INVALID,
            "action input does not match the capability's input schema",
            &action,
            violations,
            Some(&schema),
        );
        let text = serde_json::to_string(&error).unwrap();
        assert!(!text.contains("canary"), "{text}");
        let details = error.details.expect("details");
        let messages: Vec<(&str, &str)> = details["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["instance_path"].as_str().unwrap(),
                    v["message"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(
            messages.contains(&("", r#""title" is a required property"#)),
            "{messages:?}"
        );
        assert!(
            messages.contains(&("/age", r#"value is not of type "integer""#)),
            "{messages:?}"
        );
        assert!(
            messages.contains(&("/tags/*", "value is longer than 4 characters")),
            "{messages:?}"
        );
    }

    #[test]
    fn clipped_text_keeps_short_text_and_cuts_long_text_at_a_character() {
        assert_eq!(Clipped::new("act_1", 5).to_string(), "act_1");
        assert_eq!(Clipped::new("act_12", 5).to_string(), "act_1… (6 bytes)");
        // `é` is two bytes: a cut inside it falls back to the boundary before it.
        assert_eq!(Clipped::new("abcdé", 5).to_string(), "abcd… (6 bytes)");
        assert_eq!(Clipped::new("éé", 0).to_string(), "… (4 bytes)");
    }

    #[test]
    fn clipped_text_escapes_control_characters() {
        let forged = "act_evil\n2026-01-01T00:00:00Z  INFO forged\u{1b}[31m";
        let shown = Clipped::new(forged, 255).to_string();
        assert_eq!(
            shown,
            "act_evil\\n2026-01-01T00:00:00Z  INFO forged\\u{1b}[31m"
        );
        assert!(!shown.chars().any(char::is_control), "{shown}");
        // Escapes count towards the limit: what is shown never exceeds it.
        assert_eq!(Clipped::new("a\tbc", 4).to_string(), "a\\tb… (4 bytes)");
        assert_eq!(Clipped::new("a\tbc", 3).to_string(), "a\\t… (4 bytes)");
        assert_eq!(Clipped::new("a\tbc", 2).to_string(), "a… (4 bytes)");
        let hostile = "\u{1b}".repeat(100);
        let shown = Clipped::new(&hostile, 60).to_string();
        assert_eq!(shown, format!("{}… (100 bytes)", "\\u{1b}".repeat(10)));
        // Reordering and line-breaking characters, and the backslash itself.
        assert_eq!(
            Clipped::new("a\u{202e}b\u{2028}c\\n", 255).to_string(),
            "a\\u{202e}b\\u{2028}c\\\\n"
        );
        assert_eq!(Clipped::new("ééé", 255).to_string(), "ééé");
    }

    fn future_size<A, B, C, D, F: Future>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// `run` boxes the pipeline, so its own future (and the future of `Host::invoke`, which every
    /// caller moves at least once) is a few words.
    #[test]
    fn the_invoke_future_is_a_few_words() {
        let size = future_size(run);
        assert!(size <= 256, "the run future is {size} bytes");
    }

    /// Every form of a credential a failure may carry is withheld (found by a hostile review):
    /// base64 at any alignment (`api:KEY` as Basic authentication sends it), URL-safe base64,
    /// lower-case percent escapes, the JSON-escaped text, and a connector's own `method` that
    /// quotes a request; the SDK's top-level keys are never renamed.
    #[test]
    fn a_credential_is_withheld_in_every_form_a_failure_may_carry_it() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

        let material = "sk_live_\"q/7?d3e+91~x";
        let secret = crate::invocation::Secret::new(material);
        for prefix in ["", "a", "ap", "api:"] {
            let basic = STANDARD.encode(format!("{prefix}{material}"));
            let url_safe = URL_SAFE_NO_PAD.encode(format!("{prefix}{material}:"));
            let escaped = serde_json::to_string(material).unwrap();
            let lower = crate::provider::path_segment(material)
                .to_string()
                .to_ascii_lowercase();
            let mut error = ProtocolError::new(
                "x.refused",
                format!("Basic {basic} / {url_safe} / {escaped} / {lower}"),
                ErrorCategory::Auth,
            );
            error.details = Some(json!({
                "operation": "invocation",
                "provider_request_id": "req_1",
                "details": { "request": { "method": format!("GET /v1/me?api_key={material}") } },
            }));
            withhold(&mut error, secret_forms(&secret));
            assert_eq!(
                error.message.matches("[withheld]").count(),
                4,
                "{prefix:?}: {}",
                error.message
            );
            let shown = serde_json::to_string(&error).unwrap();
            for leaked in [
                material.to_owned(),
                basic.clone(),
                url_safe.clone(),
                escaped[1..escaped.len() - 1].to_owned(),
                lower.clone(),
            ] {
                assert!(!shown.contains(&leaked), "{prefix:?}: {leaked} in {shown}");
            }
            let details = error.details.unwrap();
            assert_eq!(details["operation"], "invocation");
            assert_eq!(details["provider_request_id"], "req_1");
        }
    }

    /// The flags of a partial failure keep their keys and values whatever input words are
    /// withheld: compensation's admission reads them.
    #[test]
    fn the_flags_of_a_partial_failure_are_never_withheld() {
        let failure = aip_connector_core::model::ConnectorFailure::new(
            "x.partial",
            "half the lines were posted",
            ErrorCategory::Connector,
            aip_connector_core::model::ConnectorOperation::TransactionCommit,
            "x",
        )
        .with_redacted_details(json!({ "note": "required committed" }))
        .with_committed_side_effects();
        let mut error = failure.to_protocol_error();
        withhold(
            &mut error,
            input_forms(
                &json!({ "labels": { "required": "x", "committed": "y", "side_effects": "z" } }),
                &json!({ "properties": { "labels": {} } }),
            ),
        );
        let details = &error.details.unwrap()["details"];
        assert_eq!(details["side_effects_committed"], true, "{details}");
        assert_eq!(details["compensation_required"], true, "{details}");
        assert_eq!(details["note"], "[withheld] [withheld]", "{details}");
    }

    /// A map's keys are data; the input type's field names are not.
    #[test]
    fn a_maps_keys_are_withheld_and_declared_property_names_are_not() {
        let schema = json!({
            "type": "object",
            "properties": {
                "accounts": { "type": "object", "additionalProperties": { "$ref": "#/$defs/Limit" } }
            },
            "$defs": { "Limit": { "type": "object", "properties": { "limit": { "type": "integer" } } } },
        });
        let input = json!({ "accounts": { "123-45-6789": { "limit": 5 } } });
        let mut error = ProtocolError::new(
            "x.failed",
            "no limit for 123-45-6789 in accounts",
            ErrorCategory::Connector,
        );
        error.details = Some(json!({ "details": { "123-45-6789": "limit missing" } }));
        withhold(&mut error, input_forms(&input, &schema));
        assert_eq!(error.message, "no limit for [withheld] in accounts");
        assert_eq!(
            error.details.unwrap()["details"],
            json!({ "[withheld]": "limit missing" })
        );
    }

    /// The provider client's closed-valued fields stay readable where it writes them, holding
    /// a value of their closed set; a connector's own field of the same name that holds an input
    /// value is withheld like any other.
    #[test]
    fn only_the_sdks_own_closed_values_are_left_readable() {
        let mut error = ProtocolError::new("x.failed", "POST failed", ErrorCategory::Connector);
        error.details = Some(json!({
            "operation": "invocation",
            "details": {
                "phase": "connect",
                "method": "POST",
                "mutating": true,
                "note": "connect to Lovelace",
                "request": { "method": "Lovelace", "phase": "Lovelace" },
            },
        }));
        withhold(
            &mut error,
            input_forms(
                &json!({ "a": "connect", "b": "POST", "c": "Lovelace", "d": "invocation" }),
                &json!({}),
            ),
        );
        let details = error.details.unwrap();
        assert_eq!(details["operation"], "invocation");
        assert_eq!(details["details"]["phase"], "connect");
        assert_eq!(details["details"]["method"], "POST");
        assert_eq!(details["details"]["note"], "[withheld] to [withheld]");
        assert_eq!(
            details["details"]["request"],
            json!({ "method": "[withheld]", "phase": "[withheld]" })
        );
    }

    /// The boxed pipeline state fits glibc's per-thread cache (allocations up to 1,032 bytes):
    /// larger ones take malloc's slow path on every call. It is also copied once, into its
    /// box. It was 1,672 bytes while the handler's context was built inside the awaited future,
    /// and 960 while the settlement's state was inline; the reference to the resume claim `run`
    /// gives back took it from 648 to 664, the reservation's tenant (`Reservation::tenant_id`)
    /// to 712, the guard that settles a dropped call (`dropped::Unsettled`) to 760, and the
    /// reservation that gives a claimed resume back when dropped to 816 (boxing that step only
    /// for resumes measured 904: the outcome of either branch then took its own place).
    #[test]
    fn the_pipeline_state_fits_the_allocator_fast_path() {
        fn future_size5<A, B, C, D, E, F: Future>(_: impl FnOnce(A, B, C, D, E) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let size = future_size5(execute);
        assert!(size <= 816, "the pipeline future is {size} bytes");
    }

    fn future_size4<A, B, C, D, F: Future>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A keyed call boxes its settlement's future (reservation, record and result): it must fit
    /// glibc's per-thread cache too, or every keyed call takes malloc's slow path (and a request
    /// of 1,008 bytes or more first consolidates the fast bins). It was 1,296 bytes with the
    /// record inline, 640 before the reservation carried its tenant, 688 before it carried the
    /// claimed resume it gives back ahead of releasing the key, 696 before it kept what a
    /// settlement the store failed is written again with (`RecordShape`, `settle_again`).
    #[test]
    fn the_settlement_fits_the_allocator_fast_path() {
        let size = future_size4(Settlement::settle);
        assert!(size <= 768, "the settlement future is {size} bytes");
    }

    /// Every call builds the handler's context; the rare parts are boxed. It was 416 bytes with
    /// the credential and the approvals inline, 240 with the tenant inline (copied only when a
    /// handler asks for it). The tenant and the cancel handle are boxed when first asked for:
    /// 224, so that with the `Arc`'s counts it stays within four cache lines.
    #[test]
    fn the_handlers_context_stays_small() {
        let size = std::mem::size_of::<HostInvocation>();
        assert!(size <= 224, "HostInvocation is {size} bytes");
    }

    #[test]
    fn input_limits_are_checked_iteratively() {
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!([deep]);
        }
        assert!(check_json_limits(&deep, 1 << 20, 64).unwrap_err() == JsonLimit::Depth);
        assert!(
            check_json_limits(&json!({ "a": "x".repeat(100) }), 50, 64).unwrap_err()
                == JsonLimit::Bytes
        );
        assert!(check_json_limits(&json!({ "a": [1, 2, 3] }), 1 << 20, 64).is_ok());
    }

    #[test]
    fn input_limits_are_exact_at_their_boundaries() {
        // Depth counts the root as level 1, scalars included.
        let nested = json!({ "a": [{ "b": 1 }] });
        assert!(check_json_limits(&nested, 1 << 20, 4).is_ok());
        assert!(check_json_limits(&nested, 1 << 20, 3).is_err());
        // Empty containers have nothing one level down.
        assert!(check_json_limits(&json!([[]]), 1 << 20, 2).is_ok());
        assert!(check_json_limits(&json!([[]]), 1 << 20, 1).is_err());
        assert!(check_json_limits(&json!("scalar root"), 1 << 20, 1).is_ok());
        // {"a":"xy"}: braces (2), the key with quotes and colon (4), the value (4).
        let flat = json!({ "a": "xy" });
        assert!(check_json_limits(&flat, 10, 64).is_ok());
        assert!(check_json_limits(&flat, 9, 64).is_err());
        // The same member one level down adds the array's brackets.
        let wrapped = json!([{ "a": "xy" }]);
        assert!(check_json_limits(&wrapped, 12, 64).is_ok());
        assert!(check_json_limits(&wrapped, 11, 64).is_err());
    }

    #[test]
    fn input_size_is_the_length_of_compact_json() {
        let samples = [
            json!({}),
            json!([]),
            json!([1, 2, 3]),
            json!({ "a": 1, "b": [true, false, null], "c": { "d": -1.5 } }),
            json!({ "quotes": "\"\"\"\"", "back\\slash": "\\\\" }),
            json!({ "controls": "\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}" }),
            json!(["é ü 漢字 🦀", "plain"]),
            json!("\u{1}"),
        ];
        for sample in samples {
            let text = sample.to_string();
            assert!(
                check_json_limits(&sample, text.len(), 64).is_ok(),
                "{text} fits in its own length"
            );
            assert!(
                check_json_limits(&sample, text.len() - 1, 64).is_err(),
                "{text} does not fit in one byte less"
            );
        }
    }

    #[test]
    fn number_lengths_equal_their_text() {
        let samples = [
            json!(0),
            json!(9),
            json!(10),
            json!(u64::MAX),
            json!(-1),
            json!(-10),
            json!(i64::MIN),
            json!(0.5),
            json!(-1.25e-7),
            json!(1e300),
            json!(f64::MAX),
        ];
        for sample in samples {
            let Value::Number(number) = &sample else {
                unreachable!("every sample is a number")
            };
            assert_eq!(number_len(number), sample.to_string().len(), "{sample}");
        }
    }

    #[test]
    fn scalars_count_as_their_text() {
        // `{"a":true}` is 10 bytes: braces (2), the key with quotes and colon (4), `true` (4).
        assert!(check_json_limits(&json!({ "a": true }), 10, 64).is_ok());
        assert!(check_json_limits(&json!({ "a": false }), 10, 64).is_err());
        assert!(check_json_limits(&json!({ "a": null }), 10, 64).is_ok());
        assert!(check_json_limits(&json!({ "a": -12.5 }), 11, 64).is_ok());
        assert!(check_json_limits(&json!({ "a": -12.5 }), 10, 64).is_err());
    }

    #[test]
    fn timeout_is_the_smallest_declared() {
        let limits = HostLimits::default();
        let action = Action::new("cap:x", json!({})).with_timeout_ms(500);
        assert_eq!(effective_timeout(&action, None, &limits), 500);
        assert_eq!(
            effective_timeout(&Action::new("cap:x", json!({})), None, &limits),
            60_000
        );
    }

    #[test]
    fn the_callers_timeout_is_clamped_to_the_hosts_maximum() {
        let limits = HostLimits {
            max_action_timeout_ms: 10_000,
            ..HostLimits::default()
        };
        let asked = |ms| Action::new("cap:x", json!({})).with_timeout_ms(ms);
        assert_eq!(effective_timeout(&asked(u64::MAX), None, &limits), 10_000);
        assert_eq!(effective_timeout(&asked(9_000), None, &limits), 9_000);
        assert_eq!(HostLimits::default().max_action_timeout_ms, 3_600_000);
    }
}
