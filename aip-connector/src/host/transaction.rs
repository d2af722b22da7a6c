//! Transactions in the pipeline (`aip-runtime.md` §3): previews (`dry_run`, `plan`) before the
//! approval gate; admission of `commit` (plan claim or direct), `execute` (replay gate) and
//! `reconcile` after it; the durable provider-operation checkpoint; and settlement, where a
//! timeout or an uncertain failure of `commit`/`execute` becomes `outcome_unknown` — never
//! retried blindly, never turned into `committed` by reconciliation.

use std::fmt::Write as _;
use std::sync::Arc;

use aip_connector_core::ids::{ActionId, PrincipalId, TransactionId};
use aip_connector_core::model::{
    Action, ActionResult, ActionResultStatus, Capability, CapabilityContract, ErrorCategory,
    ProtocolError, ProviderOperationRef, TransactionMode, TransactionPlan,
    TransactionProtocolStatus as Status, TransactionRequest, TransactionResult,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::canonical::{canonical_json, sha256_hex};
use super::context::TrustedContext;
use super::pipeline::Clipped;
use super::{HostInner, failure};
use crate::codes;
use crate::invocation::{BoxFuture, CheckpointRecorder, CompensationTarget};
pub(crate) use crate::store::PLAN_TTL_MS;
use crate::store::{Millis, SharedStore, TransactionRecord, Transition, TransitionOutcome};

/// Reconcile no earlier than this after an unknown outcome, unless the failure says otherwise.
pub(crate) const DEFAULT_RECONCILE_AFTER_MS: Millis = 5_000;

fn policy(code: &str, message: impl Into<String>) -> ProtocolError {
    failure::policy(code, message)
}

/// SHA-256 of the canonical `{capability_id, input}`: what a commit must match of its plan.
pub(crate) fn plan_input_hash(action: &Action) -> String {
    sha256_hex(
        canonical_json(&json!({ "capability_id": action.capability_id, "input": action.input }))
            .as_bytes(),
    )
}

/// Step 0: commits of a plan inherit the plan's transaction id; a keyed `execute` gets the one
/// its action always gets ([`execute_transaction_id`]); every other transactional mode but
/// `rollback_not_supported` gets a fresh one when it has none.
pub(crate) async fn normalize(
    store: &SharedStore,
    action: &mut Action,
    principal: &str,
) -> Result<(), ProtocolError> {
    let derived = match action.transaction.as_deref() {
        Some(t) if t.mode == TransactionMode::Execute && t.transaction_id.is_none() => {
            execute_transaction_id(action, principal)
        }
        _ => None,
    };
    let Some(transaction) = action.transaction.as_mut() else {
        return Ok(());
    };
    if transaction.mode == TransactionMode::Commit
        && transaction.transaction_id.is_none()
        && let Some(plan_id) = transaction.plan_id.clone()
        && let Some(record) = store
            .transaction_by_plan(&plan_id)
            .await
            .map_err(|e| failure::storage(&e))?
    {
        transaction.transaction_id = Some(record.transaction_id);
    }
    if transaction.transaction_id.is_none()
        && transaction.mode == TransactionMode::Compensate
        && let Some(target) = &transaction.compensation_for
    {
        transaction.transaction_id = Some(compensation_transaction_id(target));
    }
    if transaction.transaction_id.is_none() && transaction.mode == TransactionMode::Execute {
        transaction.transaction_id = derived;
    }
    if transaction.transaction_id.is_none()
        && transaction.mode != TransactionMode::RollbackNotSupported
    {
        transaction.transaction_id = Some(TransactionId::new());
    }
    Ok(())
}

/// The transaction id of a keyed `execute` that names none: derived from the action id, its
/// idempotency key, capability, caller and tenant, so that the same action delivered again
/// finds the transaction of its first delivery. That matters when the first delivery's host
/// died mid-call: its key's reservation expires, the redelivery takes the key over, and with a
/// fresh id it would run the handler again beside a transaction that may have reached the
/// provider; with this one the execute gate sees that transaction and asks for a
/// reconciliation (or replays its result). `None` without a key: an unkeyed action promises no
/// deduplication, and each delivery runs as its own transaction.
pub(crate) fn execute_transaction_id(action: &Action, principal: &str) -> Option<TransactionId> {
    let key = action.idempotency_key.as_deref()?;
    let tenant = tenant_id_of(action.identity.as_deref()).unwrap_or("");
    // Each part is length-prefixed, so no two different tuples frame to the same text.
    let mut framed = String::from("aip-connector/execute");
    for part in [
        tenant,
        principal,
        action.capability_id.as_str(),
        action.id.as_str(),
        key,
    ] {
        let _ = write!(framed, "\n{}:{part}", part.len());
    }
    let digest = sha256_hex(framed.as_bytes());
    Some(TransactionId::trusted(format!(
        "{}{}",
        TransactionId::PREFIX,
        &digest[..32]
    )))
}

/// The tenant an identity names, for comparing a stored record's tenant with an action's.
pub(crate) fn tenant_id_of(
    identity: Option<&aip_connector_core::model::IdentityContext>,
) -> Option<&str> {
    identity
        .and_then(|i| i.tenant.as_ref())
        .map(|t| t.id.as_str())
}

/// Whether the existing compensation of a target may run again: one that failed retryably
/// before anything reached the provider, or one whose lost answer a reconciliation found never
/// took effect.
fn compensation_may_run_again(existing: &TransactionRecord) -> bool {
    match existing.status {
        Status::Failed => {
            existing.provider_operation.is_none()
                && existing.reconcile_after_ms.is_none()
                && existing.error.as_ref().is_some_and(|e| e.is_retryable())
        }
        Status::Reconciled => reconciled_committed(existing) == Some(false),
        _ => false,
    }
}

/// What the reconciliation that settled `record` found: whether the provider holds its effect.
fn reconciled_committed(record: &TransactionRecord) -> Option<bool> {
    record
        .result
        .as_ref()?
        .output
        .as_ref()?
        .pointer("/reconciliation/committed")?
        .as_bool()
}

/// Whether `existing` is this very compensate action's own attempt, still `compensating`:
/// admission takes it over once it is certainly over ([`retake_own_attempt`]). A settled one
/// (compensated, failed, unknown) is judged as any other compensation of the target.
fn own_unsettled_compensation(
    existing: &TransactionRecord,
    action: &Action,
    caller: &TrustedContext,
) -> bool {
    existing.status == Status::Compensating && own_attempt(existing, action, &caller.principal.id)
}

/// `transaction.compensation_already_claimed` for the target of `existing`.
fn compensation_claimed(existing: &TransactionRecord) -> ProtocolError {
    let message = if existing.status == Status::OutcomeUnknown {
        "this action's compensation lost its answer and may have taken effect: reconcile its transaction (`details.transaction_id`, mode `reconcile` on the compensated capability); a compensation the reconciliation finds never took effect may then run again"
    } else {
        "this action was already compensated, or its compensation is running or ended in a way that is not safe to repeat"
    };
    failure::with_details(
        policy(codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED, message),
        json!({ "transaction_id": existing.transaction_id, "status": existing.status }),
    )
}

/// Before the approval gate: the refusal admission would give, whatever an approver decides, to
/// a transactional action whose stored state already rules it out, so no approver is asked to
/// release an action that cannot run.
///
/// - an `execute` of a transaction bound to another execution (`auth.not_authorized`) or whose
///   outcome must first be reconciled (`transaction.reconciliation_required`);
/// - a `compensate` of a target this caller cannot compensate (not of its tenant, never run in
///   a transaction, not committed: `transaction.compensation_target_not_completed`,
///   `transaction.compensation_target_not_committed`), or whose one compensation already ran,
///   or runs (`transaction.compensation_already_claimed`).
///
/// These are exactly admission's refusals for the stored state as it is now (an `execute` of
/// a `prepared` attempt with a checkpointed operation is refused whether or not that attempt
/// still runs, here as there). Only for stored state of the caller's own tenant: another
/// tenant's learns nothing here, and admission refuses it after the gate. A store failure
/// defers to admission, as do the commit checks (a plan's expiry depends on when it runs).
pub(crate) async fn refusal_before_gate(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
) -> Option<ProtocolError> {
    let transaction = action.transaction.as_ref()?;
    match transaction.mode {
        TransactionMode::Execute => {
            let id = transaction.transaction_id.as_ref()?;
            let record = host.store.transaction(id).await.ok()??;
            if !of_actions_tenant(&record, action) {
                return None;
            }
            if bound_elsewhere(&record, action, &caller.principal.id) {
                return Some(bound_elsewhere_error());
            }
            needs_reconciliation_to_execute(&record).then(|| reconciliation_required(&record))
        }
        TransactionMode::Compensate => compensation_claimed_before_gate(host, action, caller).await,
        // A commit whose plan it could never claim (missing, another tenant's, claimed, expired,
        // of other input or another planner, ...) would be refused after the approval: say so
        // now (found by an approval trial).
        TransactionMode::Commit => {
            let plan_id = transaction.plan_id.as_deref()?;
            let stored = match &transaction.transaction_id {
                Some(id) => host.store.transaction(id).await.ok()?,
                None => None,
            };
            let record = match load_plan(host, plan_id, stored).await {
                Ok(record) => record,
                // A store failure is not the commit's fault: the gate goes ahead, and the
                // commit's own admission answers after the approval.
                Err(error) if error.code == codes::STORAGE_UNAVAILABLE => return None,
                Err(error) => return Some(error),
            };
            check_plan_commit(&record, action, caller, host.clock.now_ms()).err()
        }
        _ => None,
    }
}

/// The record a `reconcile` action may reconcile, whatever its status: one of the caller's
/// tenant (another tenant's is not there for this caller, as for `Host::transaction`: its
/// provider operation would otherwise be looked up with this caller's tenant and credential),
/// of the action's capability (only the connector that checkpointed the operation knows it),
/// with a checkpointed provider operation. Checked at admission (a `reconcile` never waits at
/// the approval gate: it makes no effect to approve).
fn reconcile_target(
    stored: Option<TransactionRecord>,
    action: &Action,
) -> Result<TransactionRecord, ProtocolError> {
    let record = stored
        .filter(|record| of_actions_tenant(record, action))
        .ok_or_else(|| policy(codes::TRANSACTION_NOT_FOUND, "no transaction with this id"))?;
    if record.capability_id != action.capability_id {
        return Err(failure::with_details(
            policy(
                codes::TRANSACTION_NOT_RECONCILABLE,
                "the transaction belongs to another capability; reconcile it with that capability",
            ),
            json!({ "capability_id": record.capability_id }),
        ));
    }
    if record.provider_operation.is_none() {
        return Err(policy(
            codes::TRANSACTION_PROVIDER_OPERATION_REQUIRED,
            "reconciliation needs the provider operation the handler checkpointed",
        ));
    }
    Ok(record)
}

/// The `compensate` part of [`refusal_before_gate`]: a target this caller cannot compensate
/// (none of its tenant, not committed), or one whose compensation was claimed.
async fn compensation_claimed_before_gate(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
) -> Option<ProtocolError> {
    let target = action.transaction.as_ref()?.compensation_for.as_ref()?;
    let records = host.store.transactions_by_action(target).await.ok()?;
    if let Err(refusal) = compensation_target(&records, action) {
        return Some(refusal);
    }
    let existing = host
        .store
        .transaction(&compensation_transaction_id(target))
        .await
        .ok()??;
    if !of_actions_tenant(&existing, action)
        || compensation_may_run_again(&existing)
        || own_unsettled_compensation(&existing, action, caller)
    {
        return None;
    }
    Some(compensation_claimed(&existing))
}

/// The transaction id of the one compensation of action `target`: `txn_` and the first 32 hex
/// digits of SHA-256 over `aip-connector/compensation:<target>`. Deriving it (instead of
/// drawing a fresh one) is what makes "each action is compensated at most once" a single
/// insert-if-absent in the store, across racing callers and host replicas.
pub(crate) fn compensation_transaction_id(target: &ActionId) -> TransactionId {
    let digest = sha256_hex(format!("aip-connector/compensation:{target}").as_bytes());
    TransactionId::trusted(format!("{}{}", TransactionId::PREFIX, &digest[..32]))
}

fn new_record(
    action: &Action,
    caller: &TrustedContext,
    status: Status,
    now: Millis,
) -> TransactionRecord {
    let transaction = action
        .transaction
        .as_deref()
        .cloned()
        .expect("transactional action");
    let mut record = TransactionRecord {
        transaction_id: transaction
            .transaction_id
            .clone()
            .expect("normalized transaction id"),
        action_id: action.id.clone(),
        capability_id: action.capability_id.clone(),
        transaction,
        principal_id: caller.principal.id.clone(),
        identity: action.identity.as_deref().cloned(),
        status,
        plan: None,
        result: None,
        provider_operation: None,
        reconciliation_cursor: None,
        checkpoint_cursor: None,
        reconcile_after_ms: None,
        error: None,
        revision: 0,
        created_at_ms: now,
        updated_at_ms: now,
        receipts: Vec::new(),
    };
    record.record_receipt(now);
    record
}

/// `dry_run` and `plan`, which run before the approval gate. `validation` is the connector's
/// validation result when the contract's fidelity needs one.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn preview(
    host: &HostInner,
    action: &Action,
    capability: &Capability,
    contract: &CapabilityContract,
    caller: &TrustedContext,
    approval_required: bool,
    redact: bool,
    validation: Option<Value>,
) -> ActionResult {
    let transaction = action.transaction.as_ref().expect("transactional action");
    let now = host.clock.now_ms();
    let fidelity = contract.transaction.as_ref().map(|t| t.dry_run_fidelity);
    let input_hash = plan_input_hash(action);
    // A plan id names one plan for good: reusing it is a policy refusal, not a storage fault.
    let requested_plan = match transaction.mode {
        TransactionMode::Plan => Some(transaction.plan_id.clone().unwrap_or_else(|| {
            let id = transaction
                .transaction_id
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            format!("plan:{id}")
        })),
        _ => transaction.plan_id.clone(),
    };
    if let Some(plan_id) = requested_plan {
        match host.store.transaction_by_plan(&plan_id).await {
            Ok(Some(_)) => {
                return failure::failed(
                    &action.id,
                    policy(
                        codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
                        "this plan id is already taken",
                    ),
                );
            }
            Ok(None) => {}
            Err(error) => return failure::failed(&action.id, failure::storage(&error)),
        }
    }
    match transaction.mode {
        TransactionMode::DryRun => {
            let mut output = json!({
                "transaction": "dry_run",
                "transaction_id": transaction.transaction_id,
                "action_id": action.id,
                "capability_id": action.capability_id,
                "input_hash": input_hash,
                "requires_human_approval": approval_required,
                "approval_policy": contract.approval,
                "side_effects": contract.side_effects,
                "idempotency": contract.idempotency,
                "dry_run_fidelity": fidelity,
                "compensation": contract.compensation,
            });
            if let Some(validation) = validation {
                output["handler_result"] = validation;
            }
            let result = ActionResult::completed(action.id.clone(), output);
            let mut record = new_record(action, caller, Status::DryRunCompleted, now);
            record.result = Some(result.clone());
            if let Err(error) = host.store.insert_transaction(&record).await {
                return failure::failed(&action.id, failure::storage(&error));
            }
            result
        }
        _ => {
            let transaction_id = transaction
                .transaction_id
                .clone()
                .expect("normalized transaction id");
            let plan_id = transaction
                .plan_id
                .clone()
                .unwrap_or_else(|| format!("plan:{transaction_id}"));
            let snapshot = if redact {
                json!({ "redacted": true, "hash": input_hash })
            } else {
                json!({ "redacted": false, "hash": input_hash, "value": action.input })
            };
            let mut planned_transaction =
                aip_connector_core::model::ActionTransaction::clone(transaction);
            planned_transaction.plan_id = Some(plan_id.clone());
            let created_at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(now) * 1_000_000)
                .unwrap_or(OffsetDateTime::UNIX_EPOCH);
            let plan = TransactionPlan {
                plan_id,
                transaction_id,
                action_id: action.id.clone(),
                capability_id: capability.id.clone(),
                transaction: planned_transaction.clone(),
                planned_by: caller.principal.clone(),
                input_hash: input_hash.clone(),
                approval_required,
                created_at,
                input_snapshot: Some(snapshot),
                predicted_side_effects: contract.side_effects.clone(),
                approval_policy: contract.approval.clone(),
                compensation: contract.compensation.clone(),
                dry_run_fidelity: fidelity,
                identity: action.identity.as_deref().cloned(),
                expires_at: Some(created_at + time::Duration::milliseconds(PLAN_TTL_MS as i64)),
                metadata: Some(json!({
                    "commit_requirements": { "matching_input_hash": input_hash, "matching_capability": capability.id, "planned_status": "planned" },
                    "connector_validation": validation,
                })),
            };
            let result = ActionResult::completed(
                action.id.clone(),
                json!({ "transaction": "plan", "plan": plan }),
            );
            let mut record = new_record(action, caller, Status::Planned, now);
            record.transaction = planned_transaction;
            record.plan = Some(plan);
            record.result = Some(result.clone());
            match host.store.insert_transaction(&record).await {
                Ok(true) => result,
                Ok(false) => failure::failed(
                    &action.id,
                    policy(
                        codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
                        "a transaction with this id or plan id already exists",
                    ),
                ),
                Err(error) => failure::failed(&action.id, failure::storage(&error)),
            }
        }
    }
}

/// What an admitted commit/execute/reconcile runs against.
pub(crate) struct Admitted {
    pub(crate) record: TransactionRecord,
    /// A stored result to return instead of running (a committed execute replayed).
    pub(crate) replay: Option<ActionResult>,
}

/// When an attempt admitted at `now` with deadline `timeout_ms` is certainly over: a host that
/// is still alive settles it by then. A `prepared` or `committing` record older than this was
/// abandoned by a crashed host, and may be reconciled (§6.6 of docs/host-runtime.md).
fn attempt_over_at(now: Millis, timeout_ms: u64) -> Millis {
    now.saturating_add(timeout_ms)
        .saturating_add(DEFAULT_RECONCILE_AFTER_MS)
}

/// When the attempt or reconciliation that a `prepared`, `committing` or `reconciling` record
/// stands for is certainly over: its stored deadline. A record written without one (by a build
/// from before deadlines were stored) is given the longest deadline this host allows a handler,
/// counted from its last update; without this rule such a record could never be reconciled.
fn certainly_over_at(record: &TransactionRecord, max_action_timeout_ms: u64) -> Millis {
    record
        .reconcile_after_ms
        .unwrap_or_else(|| attempt_over_at(record.updated_at_ms, max_action_timeout_ms))
}

/// Commit, execute and reconcile admission (after the approval gate). `timeout_ms` is the
/// deadline the handler will run under.
///
/// `approval_wait`: how long the approval that released this action waited for its decisions,
/// for a resumed action (a planned commit's plan does not count it).
pub(crate) async fn admit(
    host: &HostInner,
    action: &Action,
    contract: &CapabilityContract,
    caller: &TrustedContext,
    timeout_ms: u64,
    approval_wait: Option<Millis>,
) -> Result<Admitted, ProtocolError> {
    let transaction = action.transaction.as_ref().expect("transactional action");
    let now = host.clock.now_ms();
    let over_at = attempt_over_at(now, timeout_ms);
    let id = transaction.transaction_id.clone().ok_or_else(|| {
        policy(
            codes::TRANSACTION_RECONCILIATION_ID_REQUIRED,
            "the action carries no transaction id",
        )
    })?;
    let stored = host
        .store
        .transaction(&id)
        .await
        .map_err(|e| failure::storage(&e))?;
    match transaction.mode {
        TransactionMode::Commit => match &transaction.plan_id {
            Some(plan_id) => {
                // The approval's wait does not count against the plan (see `commit_plan`).
                let plan_valid_at = now.saturating_sub(approval_wait.unwrap_or(0));
                commit_plan(
                    host,
                    action,
                    caller,
                    plan_id,
                    stored,
                    plan_valid_at,
                    over_at,
                )
                .await
            }
            None => {
                if contract
                    .transaction
                    .as_ref()
                    .is_some_and(|t| t.requires_plan_before_commit)
                {
                    return Err(policy(
                        codes::TRANSACTION_PLAN_REQUIRED,
                        "this capability commits only a plan: send `transaction.plan_id`",
                    ));
                }
                let mut record = new_record(action, caller, Status::Committing, now);
                record.reconcile_after_ms = Some(over_at);
                match host
                    .store
                    .insert_transaction(&record)
                    .await
                    .map_err(|e| failure::storage(&e))?
                {
                    true => Ok(Admitted {
                        record,
                        replay: None,
                    }),
                    false => Err(policy(
                        codes::TRANSACTION_COMMIT_ALREADY_CLAIMED,
                        "this transaction was already committed",
                    )),
                }
            }
        },
        TransactionMode::Execute => execute_gate(host, action, caller, stored, now, over_at).await,
        TransactionMode::Reconcile => {
            let record = reconcile_target(stored, action)?;
            // An attempt whose host died before settling (`prepared`/`committing` past its
            // deadline, or a compensation still `compensating`), or a reconciliation that never
            // settled (`reconciling` past its deadline: the lookup is safe to repeat), is
            // reconciled like an unknown outcome; one that may still be running is not.
            let unsettled = matches!(
                record.status,
                Status::Prepared | Status::Committing | Status::Compensating | Status::Reconciling
            );
            let over_at_latest = certainly_over_at(&record, host.limits.max_action_timeout_ms);
            let abandoned = unsettled && now >= over_at_latest;
            // A compensation that failed after its checkpoint (a rerun the provider refused, a
            // checkpoint conflict) cannot run again blindly, so without a reconciliation it
            // would be stuck with the provider's state unknown to the host (a hostile review).
            let failed_compensation = record.status == Status::Failed
                && record.transaction.compensation_for.is_some()
                && record.provider_operation.is_some();
            if unsettled && !abandoned {
                // "Not yet", not "never": retryable, so the refusal is not stored under the
                // reconcile's key and the same key reconciles once the attempt is certainly
                // over (an author trial kept getting this refusal replayed).
                let mut error = failure::with_details(
                    failure::error(
                        codes::TRANSACTION_ATTEMPT_IN_PROGRESS,
                        "the transaction's attempt or reconciliation may still be running; reconcile it again after `retry_after_ms`",
                        ErrorCategory::Temporary,
                        true,
                    ),
                    json!({ "status": record.status, "reconcile_after_ms": over_at_latest }),
                );
                error.retry_after_ms = Some(over_at_latest.saturating_sub(now).max(1));
                return Err(error);
            }
            let from: &[Status] = if abandoned {
                &[
                    Status::Prepared,
                    Status::Committing,
                    Status::Compensating,
                    Status::Reconciling,
                ]
            } else if failed_compensation {
                &[Status::Failed]
            } else {
                &[Status::OutcomeUnknown]
            };
            let mut transition = Transition::new(from, Status::Reconciling);
            // When this reconciliation is certainly over, should its host die before settling.
            transition.reconcile_after_ms = Some(over_at);
            let record = apply(
                host,
                &record,
                &transition,
                codes::TRANSACTION_NOT_RECONCILABLE,
                "only a transaction whose outcome is unknown can be reconciled",
            )
            .await?;
            Ok(Admitted {
                record,
                replay: None,
            })
        }
        _ => Err(policy(
            codes::TRANSACTION_MODE_UNSUPPORTED,
            "this transaction mode is not admitted here",
        )),
    }
}

/// Compensation admission (`aip-runtime.md` §3.7, after the approval gate): the target must
/// have a durable transaction of this capability that committed — `committed`, `reconciled`
/// with the provider confirming the commit, or `failed` with evidence that side effects were
/// committed and need compensating — inside the compensation window, for the same tenant.
/// Then the compensation's own record is inserted as `compensating` under the id derived from
/// the target, so exactly one of any number of racing compensations is admitted.
///
/// Unlike upstream, an action run without a transaction block cannot be compensated: nothing
/// durable proves what it did.
pub(crate) async fn admit_compensation(
    host: &HostInner,
    action: &Action,
    contract: &CapabilityContract,
    caller: &TrustedContext,
    timeout_ms: u64,
) -> Result<(TransactionRecord, CompensationTarget), ProtocolError> {
    let transaction = action.transaction.as_ref().expect("transactional action");
    let now = host.clock.now_ms();
    let Some(target_action) = transaction.compensation_for.as_ref() else {
        // Envelope validation (stage 0) refuses a `compensate` without a target first.
        return Err(failure::permanent(
            codes::ACTION_INVALID,
            "a `compensate` action must name `transaction.compensation_for`",
        ));
    };
    let expected_id = compensation_transaction_id(target_action);
    if transaction.transaction_id.as_ref() != Some(&expected_id) {
        return Err(failure::with_details(
            policy(
                codes::TRANSACTION_COMPENSATION_TRANSACTION_MISMATCH,
                "a compensation's transaction id is derived from the action it compensates; leave `transaction.transaction_id` out",
            ),
            json!({ "expected_transaction_id": expected_id }),
        ));
    }
    let records = host
        .store
        .transactions_by_action(target_action)
        .await
        .map_err(|e| failure::storage(&e))?;
    let target = compensation_target(&records, action)?;
    if let Some(window) = contract
        .compensation
        .as_ref()
        .and_then(|c| c.compensation_window_ms)
        && now > target.updated_at_ms.saturating_add(window)
    {
        return Err(failure::with_details(
            policy(
                codes::TRANSACTION_COMPENSATION_WINDOW_EXPIRED,
                "the compensation window of the target action has closed",
            ),
            json!({ "compensation_window_ms": window, "settled_at_ms": target.updated_at_ms }),
        ));
    }
    let compensation_target = CompensationTarget {
        action_id: target_action.clone(),
        transaction_id: target.transaction_id.clone(),
        capability_id: target.capability_id.clone(),
        status: target.status,
        output: target.result.as_ref().and_then(|r| r.output.clone()),
        error: target.error.clone(),
        provider_operation: target.provider_operation.clone(),
        cursor: target.checkpoint_cursor.clone(),
    };
    let over_at = attempt_over_at(now, timeout_ms);
    let mut record = new_record(action, caller, Status::Compensating, now);
    record.reconcile_after_ms = Some(over_at);
    if host
        .store
        .insert_transaction(&record)
        .await
        .map_err(|e| failure::storage(&e))?
    {
        return Ok((record, compensation_target));
    }
    // A compensation of this target exists. Only one that failed retryably, before anything
    // reached the provider, may run again.
    let existing = host
        .store
        .transaction(&expected_id)
        .await
        .map_err(|e| failure::storage(&e))?
        .ok_or_else(|| {
            policy(
                codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED,
                "a compensation of this action changed concurrently",
            )
        })?;
    // This very compensation's earlier attempt, unsettled: its insert's answer was lost, or its
    // host died before the undo checkpointed anything.
    if own_unsettled_compensation(&existing, action, caller) {
        let record = take_over_own_attempt(
            host,
            &existing,
            now,
            over_at,
            codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED,
            "another attempt of this compensation started concurrently; retry",
        )
        .await?;
        return Ok((record, compensation_target));
    }
    if !compensation_may_run_again(&existing) {
        return Err(compensation_claimed(&existing));
    }
    let mut reopen = Transition::new(&[Status::Failed, Status::Reconciled], Status::Compensating);
    reopen.rebind_action = Some(action.id.clone());
    reopen.reconcile_after_ms = Some(over_at);
    let record = apply(
        host,
        &existing,
        &reopen,
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED,
        "another compensation of this action started first",
    )
    .await?;
    Ok((record, compensation_target))
}

/// The committed transaction of `records` (the target action's) that `action` may compensate:
/// one of the caller's tenant and the action's capability, run as `execute`, `commit` or `plan`,
/// that settled with effects. Another tenant's records are not there for this caller, as for
/// `reconcile`: the answer is the one for an action that never ran, so it learns nothing.
fn compensation_target<'r>(
    records: &'r [TransactionRecord],
    action: &Action,
) -> Result<&'r TransactionRecord, ProtocolError> {
    let candidates: Vec<&TransactionRecord> = records
        .iter()
        .filter(|r| {
            of_actions_tenant(r, action)
                && r.capability_id == action.capability_id
                && matches!(
                    r.transaction.mode,
                    TransactionMode::Execute | TransactionMode::Commit | TransactionMode::Plan
                )
        })
        .collect();
    if candidates.is_empty() {
        return Err(policy(
            codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED,
            "the target action has no durable transaction of this capability: only actions run in transaction mode `execute` or `commit` can be compensated",
        ));
    }
    if !candidates.iter().any(|r| settled_with_effects(r)) {
        return Err(policy(
            codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED,
            "the target action did not complete, and nothing records side effects to compensate",
        ));
    }
    candidates
        .into_iter()
        .find(|r| committed_effects(r))
        .ok_or_else(|| {
            policy(
                codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMMITTED,
                "the target action's transaction did not commit",
            )
        })
}

/// Whether `error` says side effects were committed and need compensating (a partial failure):
/// both flags in `details` (upstream's place) or in `details.details` (where a connector's
/// [`with_committed_side_effects`](aip_connector_core::model::ConnectorFailure::with_committed_side_effects)
/// puts them).
fn partial_side_effects(error: Option<&ProtocolError>) -> bool {
    let flag = |name: &str| {
        let details = error.and_then(|e| e.details.as_ref());
        [details, details.and_then(|d| d.get("details"))]
            .into_iter()
            .flatten()
            .any(|d| d.get(name).and_then(Value::as_bool) == Some(true))
    };
    error.is_some_and(|e| !e.is_retryable())
        && flag(aip_connector_core::model::SIDE_EFFECTS_COMMITTED)
        && flag(aip_connector_core::model::COMPENSATION_REQUIRED)
}

/// The target's lifecycle result completed, or durably records partial side effects.
fn settled_with_effects(record: &TransactionRecord) -> bool {
    let completed = record
        .result
        .as_ref()
        .is_some_and(|r| r.status == ActionResultStatus::Completed);
    completed || partial_side_effects(record.error.as_ref())
}

/// The target's transaction committed: `committed`, `reconciled` with the provider confirming
/// the commit, or `failed` with partial side effects.
fn committed_effects(record: &TransactionRecord) -> bool {
    match record.status {
        Status::Committed => true,
        Status::Reconciled => {
            record
                .result
                .as_ref()
                .and_then(|r| r.output.as_ref())
                .and_then(|o| o.pointer("/reconciliation/committed"))
                .and_then(Value::as_bool)
                == Some(true)
        }
        Status::Failed => partial_side_effects(record.error.as_ref()),
        _ => false,
    }
}

async fn apply(
    host: &HostInner,
    record: &TransactionRecord,
    transition: &Transition,
    state_code: &str,
    state_message: &str,
) -> Result<TransactionRecord, ProtocolError> {
    match host
        .store
        .transition(
            &record.transaction_id,
            record.revision,
            transition,
            host.clock.now_ms(),
        )
        .await
        .map_err(|e| failure::storage(&e))?
    {
        TransitionOutcome::Applied(record) => Ok(record),
        TransitionOutcome::NotFound => Err(policy(
            codes::TRANSACTION_NOT_FOUND,
            "no transaction with this id",
        )),
        TransitionOutcome::RevisionConflict(_) | TransitionOutcome::StateConflict(_) => {
            Err(policy(state_code, state_message))
        }
    }
}

/// Whether `caller` is the principal (id and kind) that made `plan`.
fn planned_by(plan: &TransactionPlan, caller: &TrustedContext) -> bool {
    plan.planned_by.id == caller.principal.id && plan.planned_by.kind == caller.principal.kind
}

/// Every check of "what a planned commit rechecks", then the atomic claim; the plan's expiry is
/// measured at `plan_valid_at`. For a commit released by an approval, that is now less the time
/// the approval waited for its decisions, which does not count against the plan: a 20-minute decision burnt the approval on a 15-minute plan
/// (found by an approval trial). The time before the gate and after the decision does, so an
/// approved commit resumed days later finds its plan expired (found by a hostile review).
async fn commit_plan(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
    plan_id: &str,
    stored: Option<TransactionRecord>,
    plan_valid_at: Millis,
    over_at: Millis,
) -> Result<Admitted, ProtocolError> {
    let record = load_plan(host, plan_id, stored).await?;
    check_plan_commit(&record, action, caller, plan_valid_at)?;
    let claim = if record.status == Status::Committing {
        // This commit's own claim (`check_plan_commit` let no other through): its answer was
        // lost, or its host died before the handler checkpointed anything.
        retake_own_attempt(
            &record,
            host.clock.now_ms(),
            over_at,
            host.limits.max_action_timeout_ms,
        )?
    } else {
        let mut claim = Transition::new(&[Status::Planned], Status::Committing);
        claim.rebind_action = Some(action.id.clone());
        claim.reconcile_after_ms = Some(over_at);
        claim
    };
    let record = apply(
        host,
        &record,
        &claim,
        codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
        "another commit claimed this plan first",
    )
    .await?;
    Ok(Admitted {
        record,
        replay: None,
    })
}

/// The record of plan `plan_id`: `stored` (the record of the commit's transaction id) when it
/// is that plan's, else looked up by plan id.
async fn load_plan(
    host: &HostInner,
    plan_id: &str,
    stored: Option<TransactionRecord>,
) -> Result<TransactionRecord, ProtocolError> {
    match stored {
        Some(record) if record.plan_id() == Some(plan_id) => Ok(record),
        _ => host
            .store
            .transaction_by_plan(plan_id)
            .await
            .map_err(|e| failure::storage(&e))?
            .ok_or_else(|| policy(codes::TRANSACTION_PLAN_NOT_FOUND, "no plan with this id")),
    }
}

/// What a planned commit rechecks against its plan, in order, the claim aside; the plan's
/// expiry is measured at `valid_at`. Also run before the approval gate, so that no approver is
/// asked to release a commit these checks would refuse.
fn check_plan_commit(
    record: &TransactionRecord,
    action: &Action,
    caller: &TrustedContext,
    valid_at: Millis,
) -> Result<(), ProtocolError> {
    // A plan of another tenant is not there for this caller: the checks below would tell that
    // it exists (and whose it is).
    if !of_actions_tenant(record, action) {
        return Err(policy(
            codes::TRANSACTION_PLAN_NOT_FOUND,
            "no plan with this id",
        ));
    }
    if record.capability_id != action.capability_id {
        return Err(policy(
            codes::TRANSACTION_PLAN_CAPABILITY_MISMATCH,
            "the plan is for another capability",
        ));
    }
    match record.status {
        Status::Planned => {}
        // This commit's own claim, sent again: `commit_plan` tells it to wait, to reconcile, or
        // lets it take the claim over, once the rest is rechecked.
        Status::Committing if own_attempt(record, action, &caller.principal.id) => {}
        // The planner's own commit whose outcome is unknown (or being reconciled), sent again:
        // what it needs is a `reconcile`, as an `execute` retried in that state is told. Anyone
        // else learns only that the plan was claimed.
        Status::OutcomeUnknown | Status::Reconciling
            if record
                .plan
                .as_ref()
                .is_some_and(|plan| planned_by(plan, caller)) =>
        {
            return Err(reconciliation_required(record));
        }
        // A commit got there first: every other racing commit learns exactly that.
        Status::Committing
        | Status::Committed
        | Status::OutcomeUnknown
        | Status::Reconciling
        | Status::Reconciled => {
            return Err(policy(
                codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
                "another commit claimed this plan first",
            ));
        }
        _ => {
            return Err(policy(
                codes::TRANSACTION_PLAN_NOT_COMMITTABLE,
                "the plan is not in the `planned` state",
            ));
        }
    }
    let plan = record.plan.as_ref().ok_or_else(|| {
        policy(
            codes::TRANSACTION_PLAN_MISSING_PAYLOAD,
            "the plan record has no plan",
        )
    })?;
    if !planned_by(plan, caller) {
        return Err(policy(
            codes::TRANSACTION_PLAN_PRINCIPAL_MISMATCH,
            "only the principal that planned may commit",
        ));
    }
    // A plan this commit already claimed was claimed in time: its take-over is not refused for
    // the time the lost answer or the dead host cost (found by a review: a claim near the end
    // of the plan's 15 minutes left the record `committing` for good).
    if record.status == Status::Planned
        && record.created_at_ms.saturating_add(PLAN_TTL_MS) <= valid_at
    {
        return Err(policy(codes::TRANSACTION_PLAN_EXPIRED, "the plan expired"));
    }
    if action
        .transaction
        .as_ref()
        .and_then(|t| t.transaction_id.as_ref())
        != Some(&record.transaction_id)
    {
        return Err(policy(
            codes::TRANSACTION_PLAN_TRANSACTION_MISMATCH,
            "the commit names another transaction than the plan",
        ));
    }
    let actual = plan_input_hash(action);
    if actual != plan.input_hash {
        let error = policy(
            codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH,
            "the commit input differs from the planned input",
        );
        return Err(failure::with_details(
            error,
            json!({ "expected_hash": plan.input_hash, "actual_hash": actual }),
        ));
    }
    let (planned, current) = (plan.identity.as_ref(), action.identity.as_ref());
    if planned.is_some() != current.is_some() {
        return Err(policy(
            codes::TRANSACTION_PLAN_IDENTITY_MISSING,
            "the plan and the commit differ in whether they carry an identity",
        ));
    }
    if let (Some(planned), Some(current)) = (planned, current) {
        if planned.tenant.as_ref().map(|t| &t.id) != current.tenant.as_ref().map(|t| &t.id) {
            return Err(policy(
                codes::TRANSACTION_PLAN_TENANT_MISMATCH,
                "the commit comes from another tenant than the plan",
            ));
        }
        if planned.external_account != current.external_account {
            return Err(policy(
                codes::TRANSACTION_PLAN_EXTERNAL_ACCOUNT_MISMATCH,
                "the commit acts for another external account than the plan",
            ));
        }
    }
    Ok(())
}

/// The execute replay gate.
async fn execute_gate(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
    stored: Option<TransactionRecord>,
    now: Millis,
    over_at: Millis,
) -> Result<Admitted, ProtocolError> {
    let Some(record) = stored else {
        let mut record = new_record(action, caller, Status::Prepared, now);
        record.reconcile_after_ms = Some(over_at);
        return match host
            .store
            .insert_transaction(&record)
            .await
            .map_err(|e| failure::storage(&e))?
        {
            true => Ok(Admitted {
                record,
                replay: None,
            }),
            // Someone created it between our read and insert: run the gate on theirs.
            false => Err(policy(
                codes::TRANSACTION_EXECUTE_STATE_INVALID,
                "the transaction was created concurrently; retry",
            )),
        };
    };
    if bound_elsewhere(&record, action, &caller.principal.id) {
        return Err(bound_elsewhere_error());
    }
    if needs_reconciliation_to_execute(&record) {
        return Err(reconciliation_required(&record));
    }
    match record.status {
        // An earlier attempt that never reached its checkpoint: told to wait while it may still
        // run, taken over once it is certainly over (its host died, or its answer was lost).
        Status::Prepared => {
            let record = take_over_own_attempt(
                host,
                &record,
                now,
                over_at,
                codes::TRANSACTION_EXECUTE_STATE_INVALID,
                "another attempt of this transaction started concurrently; retry",
            )
            .await?;
            Ok(Admitted {
                record,
                replay: None,
            })
        }
        Status::Committed => Ok(Admitted {
            replay: record.result.clone(),
            record,
        }),
        Status::Failed => {
            let retryable = record.error.as_ref().is_some_and(|e| e.is_retryable());
            // A transaction the host named after the keyed action (no id from the caller) is
            // retried as the key's retry semantics say: its retryable failure released the key,
            // and before the id was derived every retry ran in a fresh transaction. One the
            // caller named keeps the stricter rule: nothing may have reached the provider.
            let host_named = execute_transaction_id(action, caller.principal.id.as_str())
                .is_some_and(|derived| derived == record.transaction_id);
            let safely_retryable = action.idempotency_key.is_some()
                && retryable
                && (host_named
                    || (record.provider_operation.is_none()
                        && record.reconciliation_cursor.is_none()
                        && record.reconcile_after_ms.is_none()));
            if safely_retryable {
                let mut reopen = Transition::new(&[Status::Failed], Status::Prepared);
                reopen.reconcile_after_ms = Some(over_at);
                let record = apply(
                    host,
                    &record,
                    &reopen,
                    codes::TRANSACTION_RETRY_DENIED,
                    "the failed transaction changed concurrently",
                )
                .await?;
                return Ok(Admitted {
                    record,
                    replay: None,
                });
            }
            match record.result.clone() {
                Some(result) => Ok(Admitted {
                    replay: Some(result),
                    record,
                }),
                None => Err(policy(
                    codes::TRANSACTION_RETRY_DENIED,
                    "the failed transaction is not safe to execute again",
                )),
            }
        }
        // Reconciled, compensated, planned...: settled another way than by this execute, whose
        // caller learns which from the details (a redelivery after a crash whose transaction
        // was reconciled since, say).
        status => Err(failure::with_details(
            policy(
                codes::TRANSACTION_EXECUTE_STATE_INVALID,
                format!(
                    "the transaction is `{}`, a state that cannot execute: read its outcome from the transaction (`Host::transaction`) instead of executing it again",
                    status.as_str()
                ),
            ),
            json!({ "transaction_id": record.transaction_id, "status": status }),
        )),
    }
}

/// Whether `record` belongs to another execution than `action` run by `principal`: another
/// action, capability, principal or tenant. An `execute` may only retry its own transaction.
fn bound_elsewhere(record: &TransactionRecord, action: &Action, principal: &PrincipalId) -> bool {
    record.action_id != action.id
        || record.capability_id != action.capability_id
        || record.principal_id != *principal
        || !of_actions_tenant(record, action)
}

/// Whether `record` is an attempt of this very action, run by `principal`: the same action id,
/// capability, principal and tenant (a commit's claim rebinds its plan's record to the commit).
fn own_attempt(record: &TransactionRecord, action: &Action, principal: &PrincipalId) -> bool {
    !bound_elsewhere(record, action, principal)
}

/// The take-over of an earlier attempt of this very action that never settled (`prepared`,
/// `committing`, `compensating`): a host that died, or a write whose answer was lost, so the
/// caller was told to retry. Refused while the attempt may still run
/// (`transaction.attempt_in_progress`, retryable once its deadline has passed: running this one
/// too would run the handler twice), and when it checkpointed a provider operation
/// (`transaction.reconciliation_required`: it may have reached the provider). Otherwise the
/// same-state transition that restarts the attempt's deadline; applied as a compare-and-set, it
/// lets exactly one of racing attempts take the record over.
fn retake_own_attempt(
    record: &TransactionRecord,
    now: Millis,
    over_at: Millis,
    max_action_timeout_ms: u64,
) -> Result<Transition, ProtocolError> {
    if record.provider_operation.is_some() {
        return Err(reconciliation_required(record));
    }
    let earlier_attempt_over_at = certainly_over_at(record, max_action_timeout_ms);
    if now < earlier_attempt_over_at {
        return Err(attempt_in_progress(record, earlier_attempt_over_at, now));
    }
    let mut retake = Transition::new(&[record.status], record.status);
    retake.reconcile_after_ms = Some(over_at);
    Ok(retake)
}

/// [`retake_own_attempt`] of `record` at `now`, applied; a racing attempt that took it over
/// first is refused with `lost_code`.
async fn take_over_own_attempt(
    host: &HostInner,
    record: &TransactionRecord,
    now: Millis,
    over_at: Millis,
    lost_code: &str,
    lost_message: &str,
) -> Result<TransactionRecord, ProtocolError> {
    let retake = retake_own_attempt(record, now, over_at, host.limits.max_action_timeout_ms)?;
    apply(host, record, &retake, lost_code, lost_message).await
}

/// `transaction.attempt_in_progress`: an earlier attempt of this execution may still be running;
/// retryable once its deadline (`reconcile_after_ms`) has passed.
fn attempt_in_progress(record: &TransactionRecord, at: Millis, now: Millis) -> ProtocolError {
    let mut error = failure::with_details(
        failure::error(
            codes::TRANSACTION_ATTEMPT_IN_PROGRESS,
            "an earlier attempt of this transaction may still be running; retry after `retry_after_ms`",
            ErrorCategory::Temporary,
            true,
        ),
        json!({ "transaction_id": record.transaction_id, "reconcile_after_ms": at }),
    );
    error.retry_after_ms = Some(at.saturating_sub(now).max(1));
    error
}

/// Upstream's code and category (an authorization refusal: the execution may be another
/// caller's). The message says what a caller who retried its own call got wrong, since the
/// category points at credentials (a warehouse trial retried under a fresh action id).
fn bound_elsewhere_error() -> ProtocolError {
    failure::error(
        codes::AUTH_NOT_AUTHORIZED,
        "the transaction is already bound to a different execution (another action id, capability, caller or tenant): a retry of the same call resends its action id",
        ErrorCategory::Auth,
        false,
    )
}

/// Whether an `execute` of `record` must wait for a reconciliation: an earlier attempt may have
/// reached the provider and nobody knows whether it took effect — its outcome is unknown, it is
/// being reconciled, or it checkpointed a provider operation and never settled (its host died,
/// or it is still running). Only reconciliation can tell, so running again could repeat the
/// effect.
fn needs_reconciliation_to_execute(record: &TransactionRecord) -> bool {
    match record.status {
        Status::Prepared => record.provider_operation.is_some(),
        Status::OutcomeUnknown | Status::Reconciling | Status::Committing => true,
        _ => false,
    }
}

/// A caller-chosen id as a log field: its control characters escaped (see [`Clipped`]).
fn escaped(id: &str) -> Clipped<'_> {
    Clipped::new(id, usize::MAX)
}

fn reconciliation_required(record: &TransactionRecord) -> ProtocolError {
    let error = policy(
        codes::TRANSACTION_RECONCILIATION_REQUIRED,
        "the outcome of this transaction is unknown: it is not safe to execute again and must be reconciled",
    );
    failure::with_details(
        error,
        json!({ "transaction_id": record.transaction_id, "status": record.status, "provider_operation": record.provider_operation, "cursor": record.reconciliation_cursor, "reconcile_after_ms": record.reconcile_after_ms }),
    )
}

/// The revision of a transaction record that its attempt (a commit, execute, reconcile or
/// compensation admitted by this call) last wrote: at admission, then at each of its own
/// checkpoints. Another writer that moves the revision has taken the record over (a later
/// attempt of the transaction, a reconciliation of an attempt it judged over), and from then on
/// this attempt's checkpoints and settlement write nothing: a timed-out attempt whose cancel
/// companion ran long settled onto the attempt that had taken over, overwriting its result
/// (found by a hostile review of the stores).
///
/// A checkpoint whose answer was lost (the store failed after committing, or the handler was
/// dropped at its deadline while the write was in flight, which SQLite's blocking task and a
/// sent PostgreSQL statement still finish) may have landed: the fence remembers the write it
/// tried, and a record that shows exactly that write is still this attempt's.
#[derive(Clone, Debug)]
pub(crate) struct AttemptFence(Arc<std::sync::Mutex<FenceState>>);

/// A checkpoint's write as it would land.
#[derive(Debug)]
struct TriedWrite {
    revision: u64,
    operation: ProviderOperationRef,
    cursor: Option<String>,
    status: Status,
}

#[derive(Debug)]
struct FenceState {
    /// The revision this attempt last knew it wrote.
    revision: u64,
    /// A checkpoint in flight or whose answer was lost: the revision it would write, the
    /// operation it records and the status it keeps. (A take-over changes the status, or
    /// finds no operation recorded: neither looks like this write.)
    tried: Option<TriedWrite>,
}

impl AttemptFence {
    /// The fence of the attempt admitted with `record`.
    pub(crate) fn new(record: &TransactionRecord) -> Self {
        AttemptFence(Arc::new(std::sync::Mutex::new(FenceState {
            revision: record.revision,
            tried: None,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A checkpoint of `operation` and `cursor` is about to write `record` (read at the
    /// fence's revision).
    fn trying(
        &self,
        record: &TransactionRecord,
        operation: &ProviderOperationRef,
        cursor: Option<&String>,
    ) {
        self.state().tried = Some(TriedWrite {
            revision: record.revision.saturating_add(1),
            operation: operation.clone(),
            cursor: cursor.cloned(),
            status: record.status,
        });
    }

    /// The tried write certainly did not land (the store refused it).
    fn not_written(&self) {
        self.state().tried = None;
    }

    /// The attempt wrote the record, which is now at `revision`.
    fn advance(&self, revision: u64) {
        let mut state = self.state();
        state.revision = revision;
        state.tried = None;
    }

    /// Whether `record` is still as this attempt last wrote it, or as its last checkpoint would
    /// have written it (then adopted as the attempt's own).
    fn holds(&self, record: &TransactionRecord) -> bool {
        let mut state = self.state();
        if record.revision == state.revision {
            return true;
        }
        let landed = state.tried.as_ref().is_some_and(|tried| {
            record.revision == tried.revision
                && record.status == tried.status
                && record.provider_operation.as_ref() == Some(&tried.operation)
                && record.reconciliation_cursor == tried.cursor
        });
        if landed {
            state.revision = record.revision;
            state.tried = None;
        }
        landed
    }
}

/// How a handler's run ended, besides its result: settling a transaction reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interruption {
    /// The handler answered (or panicked).
    None,
    /// Its deadline passed.
    TimedOut,
    /// It was cancelled, or abandoned by its transport.
    Cancelled,
}

/// Settles the record of an admitted commit/execute/reconcile with the action's result. Says
/// whether the transaction now has an unknown outcome (the caller names it in the result, see
/// [`name_unknown_outcome`]).
///
/// Only the attempt that still holds the record (`fence`) settles it: one taken over by another
/// attempt or a reconciliation is theirs to settle.
pub(crate) async fn settle(
    host: &HostInner,
    transaction_id: &TransactionId,
    mode: TransactionMode,
    result: &ActionResult,
    interruption: Interruption,
    fence: &AttemptFence,
) -> bool {
    // A lost compare-and-set is read again: the write that beat it may be this attempt's own
    // late checkpoint (its handler was dropped at its deadline while the write was in flight),
    // which the fence adopts; another writer's is refused by the fence on the next read. A store
    // failure is read again too, after a pause: the settlement may have landed with its answer
    // lost, or not at all, and a record left `prepared` after a completed handler would let the
    // same action sent without its key (or with another) take it over and run the handler again
    // (found by a store-failure probe).
    let mut unanswered = None;
    let mut pauses = super::SETTLE_RETRY_PAUSES.into_iter();
    for attempt in 1..=SETTLE_ATTEMPTS {
        match settle_once(
            host,
            transaction_id,
            mode,
            result,
            interruption,
            fence,
            &mut unanswered,
        )
        .await
        {
            SettleStep::Settled(unknown) => return unknown,
            SettleStep::Raced => {}
            SettleStep::StoreFailed(retry) => match pauses.next() {
                Some(pause)
                    if retry
                        && attempt < SETTLE_ATTEMPTS
                        && super::pause_before_retry(pause).await => {}
                _ => break,
            },
        }
    }
    tracing::warn!(transaction_id = %escaped(transaction_id.as_str()), "transaction settlement was not written; the record keeps its earlier status");
    false
}

/// Reads of the record [`settle`] makes before it gives up (after a store failure, one more
/// than the pauses of [`SETTLE_RETRY_PAUSES`](super::SETTLE_RETRY_PAUSES)).
const SETTLE_ATTEMPTS: u32 = 3;

/// How one step of [`settle`] ended.
enum SettleStep {
    /// The record is settled (or nothing is for this attempt to settle); whether its outcome is
    /// unknown.
    Settled(bool),
    /// The compare-and-set lost to a revision this read did not see.
    Raced,
    /// The store failed, at the read or at the write; whether the failure may go away
    /// ([`worth_retrying`](super::worth_retrying)).
    StoreFailed(bool),
}

/// A settlement written without an answer: the revision, status and time it would leave, by
/// which the next read tells that it landed.
struct UnansweredSettlement {
    revision: u64,
    status: Status,
    at_ms: crate::store::Millis,
}

/// Whether `error` is the host's refusal of a completed handler's output.
pub(crate) fn output_refused(error: &ProtocolError) -> bool {
    error.code == codes::ACTION_OUTPUT_SCHEMA_INVALID
        || error.code == codes::ACTION_OUTPUT_TOO_LARGE
}

/// One read and compare-and-set of [`settle`]. `unanswered` is the settlement an earlier step
/// wrote without an answer, if any.
async fn settle_once(
    host: &HostInner,
    transaction_id: &TransactionId,
    mode: TransactionMode,
    result: &ActionResult,
    interruption: Interruption,
    fence: &AttemptFence,
    unanswered: &mut Option<UnansweredSettlement>,
) -> SettleStep {
    // Reread: this attempt's checkpoints carry what the handler recorded.
    let record = match host.store.transaction(transaction_id).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            tracing::warn!(transaction_id = %escaped(transaction_id.as_str()), "transaction record missing at settlement");
            return SettleStep::Settled(false);
        }
        Err(error) => {
            tracing::warn!(transaction_id = %escaped(transaction_id.as_str()), error = %error, "transaction record could not be read at settlement");
            return SettleStep::StoreFailed(super::worth_retrying(&error));
        }
    };
    // This attempt's own settlement, landed with its answer lost: settled, not taken over. No
    // other writer reaches a settled status one revision past this attempt's (a take-over
    // rewrites the same status first, a reconciliation passes through `reconciling`), and the
    // write's time is compared too, should one ever do.
    if let Some(written) = unanswered.as_ref()
        && record.revision == written.revision
        && record.status == written.status
        && record.updated_at_ms == written.at_ms
    {
        return SettleStep::Settled(written.status == Status::OutcomeUnknown);
    }
    if !fence.holds(&record) {
        tracing::warn!(
            transaction_id = %escaped(transaction_id.as_str()),
            status = %record.status,
            "transaction taken over by a later attempt or a reconciliation; this attempt's result is not recorded"
        );
        return SettleStep::Settled(false);
    }
    let now = host.clock.now_ms();
    let error = result.error.clone();
    // A commit, execute or compensation cancelled (or abandoned by its transport) after its
    // handler checkpointed a provider operation may have reached the provider: that is an
    // unknown outcome too, to be reconciled.
    let cancelled_after_checkpoint = interruption == Interruption::Cancelled
        && record.provider_operation.is_some()
        && matches!(
            mode,
            TransactionMode::Commit | TransactionMode::Execute | TransactionMode::Compensate
        );
    let uncertain = interruption == Interruption::TimedOut
        || cancelled_after_checkpoint
        || error
            .as_ref()
            .and_then(|e| e.details.as_ref())
            .and_then(|d| d.get("uncertain_outcome"))
            .and_then(Value::as_bool)
            == Some(true);
    let mut transition = match (mode, result.status) {
        (TransactionMode::Compensate, ActionResultStatus::Completed) => {
            Transition::new(&[Status::Compensating], Status::Compensated)
        }
        // An undo whose answer was lost may have taken effect: an unknown outcome to reconcile,
        // like a write's. As a plain `failed` it could neither be reconciled nor run again,
        // while the provider might hold the undo (found by an author trial).
        (TransactionMode::Compensate, _) if uncertain => {
            Transition::new(&[Status::Compensating], Status::OutcomeUnknown)
        }
        // An undo whose handler completed did undo, even when the host then refused its output
        // (too large, too deep, off its schema): settled `failed`, it would read as an undo
        // that never happened and could neither run again nor be reconciled (a review).
        (TransactionMode::Compensate, _) if error.as_deref().is_some_and(output_refused) => {
            Transition::new(&[Status::Compensating], Status::Compensated)
        }
        (TransactionMode::Compensate, _) => {
            Transition::new(&[Status::Compensating], Status::Failed)
        }
        (TransactionMode::Reconcile, ActionResultStatus::Completed) => {
            Transition::new(&[Status::Reconciling], Status::Reconciled)
        }
        (TransactionMode::Reconcile, _) => {
            let mut transition = Transition::new(&[Status::Reconciling], Status::OutcomeUnknown);
            // The next reconciliation resumes where the provider's pending answer left off.
            transition.reconciliation_cursor = error
                .as_ref()
                .and_then(|e| e.details.as_ref())
                .and_then(|d| d.get("reconciliation_cursor"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            transition
        }
        (_, ActionResultStatus::Completed) => {
            Transition::new(&[Status::Prepared, Status::Committing], Status::Committed)
        }
        (_, _) if uncertain => Transition::new(
            &[Status::Prepared, Status::Committing],
            Status::OutcomeUnknown,
        ),
        (_, _) => Transition::new(&[Status::Prepared, Status::Committing], Status::Failed),
    };
    transition.result = Some(result.clone());
    transition.error = error.as_deref().cloned();
    if transition.to == Status::OutcomeUnknown {
        let after = error
            .as_ref()
            .and_then(|e| e.retry_after_ms)
            .unwrap_or(DEFAULT_RECONCILE_AFTER_MS);
        transition.reconcile_after_ms = Some(now.saturating_add(after));
        // What the handler checkpointed stands; a failure's reference only fills a record
        // that has none.
        if record.provider_operation.is_none() {
            transition.provider_operation = error
                .as_ref()
                .and_then(|e| e.details.as_ref())
                .and_then(|d| d.get("provider_operation"))
                .and_then(|op| serde_json::from_value::<ProviderOperationRef>(op.clone()).ok());
        }
    }
    match host
        .store
        .transition(&record.transaction_id, record.revision, &transition, now)
        .await
    {
        Ok(TransitionOutcome::Applied(_)) => {
            SettleStep::Settled(transition.to == Status::OutcomeUnknown)
        }
        Ok(TransitionOutcome::RevisionConflict(_)) => SettleStep::Raced,
        Ok(other) => {
            tracing::warn!(transaction_id = %escaped(record.transaction_id.as_str()), outcome = ?std::mem::discriminant(&other), "transaction settlement lost a race");
            SettleStep::Settled(false)
        }
        Err(error) => {
            tracing::warn!(transaction_id = %escaped(record.transaction_id.as_str()), error = %error, "transaction settlement failed; the record is read again");
            *unanswered = Some(UnansweredSettlement {
                revision: record.revision.saturating_add(1),
                status: transition.to,
                at_ms: now,
            });
            SettleStep::StoreFailed(super::worth_retrying(&error))
        }
    }
}

/// Names the transaction of a result whose outcome is unknown, so the caller can send
/// `reconcile` without looking it up: in the error's `details.transaction_id`, or, for a
/// cancellation (which carries no error), in its output, with `outcome_unknown: true`, since
/// `cancelled` alone would say that nothing happened.
pub(crate) fn name_unknown_outcome(result: &mut ActionResult, transaction_id: &TransactionId) {
    let Some(error) = result.error.as_mut() else {
        if let Some(output) = result.output.as_mut().and_then(Value::as_object_mut) {
            output.insert("outcome_unknown".to_owned(), Value::Bool(true));
            output.insert("transaction_id".to_owned(), json!(transaction_id));
        }
        return;
    };
    // Whatever the handler said, sending the same request again is not the next step: the
    // transaction must be reconciled first. Not retryable, so the key keeps this answer and a
    // resend under it replays it (naming the transaction) instead of starting a new
    // transaction that could do the same thing twice.
    error.retryable = Some(false);
    error.retry_after_ms = None;
    let details = error.details.get_or_insert_with(|| json!({}));
    if let Some(details) = details.as_object_mut() {
        details
            .entry("transaction_id")
            .or_insert_with(|| json!(transaction_id));
        // What §6.5 tells clients to read, whichever code the interruption had (an
        // `action.abandoned` by a server shutting down carried none).
        details.insert("uncertain_outcome".to_owned(), Value::Bool(true));
    }
}

/// The durable checkpoint of one admitted transaction.
pub(crate) struct StoreCheckpoint {
    store: SharedStore,
    clock: Arc<dyn crate::store::Clock>,
    transaction_id: TransactionId,
    /// What is recorded, as of admission and this handler's own checkpoints.
    last: std::sync::Mutex<Option<(ProviderOperationRef, Option<String>)>>,
    /// The attempt's hold on the record: a checkpoint writes only while it holds.
    fence: AttemptFence,
    /// One checkpoint at a time: a handler recording from two tasks at once would otherwise
    /// see its own other write as a take-over.
    writing: tokio::sync::Mutex<()>,
}

impl StoreCheckpoint {
    pub(crate) fn new(host: &HostInner, record: &TransactionRecord, fence: AttemptFence) -> Self {
        // What the handler recorded: its own cursor, never one a pending reconciliation wrote.
        let last = record
            .provider_operation
            .clone()
            .map(|op| (op, record.checkpoint_cursor.clone()));
        Self {
            store: host.store.clone(),
            clock: host.clock.clone(),
            transaction_id: record.transaction_id.clone(),
            last: std::sync::Mutex::new(last),
            fence,
            writing: tokio::sync::Mutex::new(()),
        }
    }
}

impl CheckpointRecorder for StoreCheckpoint {
    fn record(
        &self,
        operation: ProviderOperationRef,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<(), aip_connector_core::model::ConnectorFailure>> {
        Box::pin(async move {
            let failure = |code: &str, message: &str| {
                aip_connector_core::model::ConnectorFailure::new(
                    code,
                    message,
                    ErrorCategory::Temporary,
                    aip_connector_core::model::ConnectorOperation::TransactionCommit,
                    codes::SOURCE_COMPONENT,
                )
            };
            let _writing = self.writing.lock().await;
            for _ in 0..8 {
                let record = match self.store.transaction(&self.transaction_id).await {
                    Ok(Some(record)) => record,
                    Ok(None) => {
                        return Err(failure(
                            codes::TRANSACTION_NOT_FOUND,
                            "the transaction disappeared",
                        ));
                    }
                    Err(_) => {
                        return Err(failure(
                            codes::STORAGE_UNAVAILABLE,
                            "the checkpoint could not be stored",
                        )
                        .with_retryable(true));
                    }
                };
                if !self.fence.holds(&record) {
                    return Err(failure(
                        codes::TRANSACTION_NOT_FOUND,
                        "the transaction was taken over by a later attempt or a reconciliation",
                    ));
                }
                if record
                    .provider_operation
                    .as_ref()
                    .is_some_and(|existing| *existing != operation)
                {
                    return Err(crate::invocation::checkpoint_conflict());
                }
                let kept = cursor
                    .clone()
                    .or_else(|| record.reconciliation_cursor.clone());
                self.fence.trying(&record, &operation, kept.as_ref());
                let mut transition = Transition::new(&[record.status], record.status);
                transition.result = record.result.clone();
                transition.error = record.error.clone();
                transition.reconcile_after_ms = record.reconcile_after_ms;
                transition.provider_operation = Some(operation.clone());
                // Recording again without a cursor keeps the stored ones (the store only ever
                // replaces a cursor), and `recorded()` must report what the store holds.
                transition.reconciliation_cursor = kept;
                // The handler's own cursor, apart from the one reconciliation answers replace.
                transition.checkpoint_cursor = cursor.clone();
                let recorded = cursor.clone().or_else(|| record.checkpoint_cursor.clone());
                match self
                    .store
                    .transition(
                        &record.transaction_id,
                        record.revision,
                        &transition,
                        self.clock.now_ms(),
                    )
                    .await
                {
                    Ok(TransitionOutcome::Applied(written)) => {
                        self.fence.advance(written.revision);
                        *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((operation, recorded));
                        return Ok(());
                    }
                    Ok(TransitionOutcome::RevisionConflict(_)) => {
                        self.fence.not_written();
                        continue;
                    }
                    Ok(_) => {
                        self.fence.not_written();
                        return Err(failure(
                            codes::TRANSACTION_NOT_FOUND,
                            "the transaction changed state",
                        ));
                    }
                    Err(_) => {
                        return Err(failure(
                            codes::STORAGE_UNAVAILABLE,
                            "the checkpoint could not be stored",
                        )
                        .with_retryable(true));
                    }
                }
            }
            Err(failure(
                codes::STORAGE_UNAVAILABLE,
                "the checkpoint lost too many races",
            )
            .with_retryable(true))
        })
    }

    fn recorded(&self) -> Option<(ProviderOperationRef, Option<String>)> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which transaction [`Host::transaction`](super::Host::transaction) reads: exactly one of
/// transaction id, plan id or action id, as the seed's transaction view is selected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionSelector {
    /// By transaction id.
    Transaction(TransactionId),
    /// By plan id.
    Plan(String),
    /// By the action that owns it (for a claimed plan, the commit action).
    Action(ActionId),
}

/// The transaction id a `compensate` of action `target` runs under. Callers of
/// [`Host::transact`](super::Host::transact) need it for the request's `transaction_id`; plain
/// actions may leave the id out and the host derives it.
pub fn compensation_transaction_of(target: &ActionId) -> TransactionId {
    compensation_transaction_id(target)
}

/// The wire view of a durable record; `result` is the action result to report (the record's
/// own when `None`).
fn view(record: TransactionRecord, result: Option<ActionResult>) -> TransactionResult {
    let result = result.or(record.result);
    let status = TransactionResult::project_status(record.status, result.as_ref());
    let mut transaction = record.transaction;
    transaction.transaction_id = Some(record.transaction_id.clone());
    TransactionResult {
        transaction_id: record.transaction_id,
        transaction,
        status,
        result,
        plan: record.plan,
        provider_operation: record.provider_operation,
        reconciliation_cursor: record.reconciliation_cursor,
        reconcile_after: record.reconcile_after_ms.and_then(|ms| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
        }),
        error: record.error,
        receipts: record.receipts,
    }
}

/// The tenant a caller acts for on this host.
fn caller_tenant(host: &HostInner, caller: &TrustedContext) -> Option<String> {
    host.tenant_of(caller).map(|t| t.id.clone())
}

/// Whether `record` belongs to `tenant` (both without one included): the one rule by which a
/// transaction record is visible to, or acted on by, a caller.
fn belongs_to(record: &TransactionRecord, tenant: Option<&str>) -> bool {
    tenant_id_of(record.identity.as_ref()) == tenant
}

/// [`belongs_to`] the tenant `action` runs for (its trusted identity's).
fn of_actions_tenant(record: &TransactionRecord, action: &Action) -> bool {
    belongs_to(record, tenant_id_of(action.identity.as_deref()))
}

impl super::Host {
    /// Runs a first-class transaction request (`aip.transaction.v1.request`).
    ///
    /// The request is checked as upstream's core validator does (the action has a transaction
    /// block whose id, when present, is the request's), and `requested_by` must be the
    /// authenticated caller (`auth.not_authorized` otherwise; a payload never names its own
    /// identity); on those refusals nothing ran. Otherwise the request's transaction id is
    /// copied into the action when absent, the action runs through the ordinary pipeline of
    /// [`invoke`](Self::invoke) — every check, the approval gate, idempotency and transaction
    /// admission included — and the answer is the durable view of the transaction with this
    /// action's result and the receipt chain. Its status projects `requires_human` (approval
    /// pending) and `cancelled` from the action result.
    ///
    /// # Errors
    ///
    /// The refusals above, before anything ran; and `storage.unavailable` after the action
    /// ran, when its transaction could not be read back.
    pub async fn transact(
        &self,
        request: TransactionRequest,
        caller: &TrustedContext,
    ) -> Result<TransactionResult, ProtocolError> {
        aip_connector_core::validation::validate_transaction_request(&request)
            .map_err(|error| failure::permanent(codes::ACTION_INVALID, error.to_string()))?;
        if request.requested_by.id != caller.principal.id
            || request.requested_by.kind != caller.principal.kind
        {
            return Err(failure::error(
                codes::AUTH_NOT_AUTHORIZED,
                "transaction_request.requested_by is not the authenticated caller",
                ErrorCategory::Auth,
                false,
            ));
        }
        let TransactionRequest {
            transaction_id,
            mut action,
            ..
        } = request;
        let block = action.transaction.as_mut().expect("validated above");
        block.transaction_id = Some(transaction_id.clone());
        let mut block = aip_connector_core::model::ActionTransaction::clone(block);
        let result = self.invoke(action, caller).await;
        let tenant = caller_tenant(&self.inner, caller);
        // Another tenant's record under this id is not this caller's to see (as for
        // `Host::transaction`): the refused action is answered as if nothing were stored.
        let stored = self
            .inner
            .store
            .transaction(&transaction_id)
            .await
            .map_err(|e| failure::storage(&e))?
            .filter(|record| belongs_to(record, tenant.as_deref()));
        Ok(match stored {
            Some(record) => view(record, Some(result)),
            // Nothing durable: refused before admission, waiting for approval, or an `execute`
            // of a capability without a contract, which runs as a plain call and keeps no
            // record (completed, it committed).
            None => {
                block.transaction_id = Some(transaction_id.clone());
                let durable = if result.status == ActionResultStatus::Completed {
                    Status::Committed
                } else {
                    Status::Failed
                };
                TransactionResult {
                    status: TransactionResult::project_status(durable, Some(&result)),
                    transaction_id,
                    transaction: block,
                    error: result.error.as_deref().cloned(),
                    result: Some(result),
                    plan: None,
                    provider_operation: None,
                    reconciliation_cursor: None,
                    reconcile_after: None,
                    receipts: Vec::new(),
                }
            }
        })
    }

    /// The durable view of one transaction: status (projected as in
    /// [`transact`](Self::transact)), plan, provider operation, cursor, result and receipt
    /// chain. `None` when there is no such transaction *for the caller's tenant*: a record of
    /// another tenant is not revealed.
    pub async fn transaction(
        &self,
        selector: &TransactionSelector,
        caller: &TrustedContext,
    ) -> Result<Option<TransactionResult>, ProtocolError> {
        let store = &self.inner.store;
        let record = match selector {
            TransactionSelector::Transaction(id) => store.transaction(id).await,
            TransactionSelector::Plan(plan_id) => store.transaction_by_plan(plan_id).await,
            TransactionSelector::Action(action_id) => store
                .transactions_by_action(action_id)
                .await
                .map(|records| records.into_iter().max_by_key(|r| r.updated_at_ms)),
        }
        .map_err(|e| failure::storage(&e))?;
        let tenant = caller_tenant(&self.inner, caller);
        Ok(record
            .filter(|record| belongs_to(record, tenant.as_deref()))
            .map(|record| view(record, None)))
    }
}
