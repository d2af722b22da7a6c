//! `transaction_lifecycle`: plans come before commits, every execute or commit checkpoints its
//! provider operation, an unknown outcome is reconciled instead of retried, and compensation is a
//! governed action that undoes a committed effect at most once.
//!
//! - `plan_before_commit` (capabilities that commit plans): a commit without a plan and a commit
//!   of a plan nobody made are refused; a plan runs no handler and leaves no provider effect; its
//!   commit runs the handler once; a second commit of the same plan is refused.
//! - `provider_operation_checkpointed`: after each capability that can `execute` or `commit` ran
//!   its example, its transaction view names the provider operation (the handler's `Checkpoint`),
//!   and the checkpoint was durable before the provider committed the call's effect (a
//!   checkpoint recorded only after the provider answered fails: the probe times each
//!   `Checkpoint::record`, the provider double each effect).
//! - `reconcile_before_retry`: the provider commits the effect and drops the connection; the
//!   call must settle `outcome_unknown`; neither an exact resend nor a retry of the transaction
//!   under a fresh key may run the handler again; a `reconcile` (when declared) settles it
//!   `reconciled`, confirming the effect the provider holds, and still nothing ran twice.
//! - `compensation_governed` (capabilities declaring compensation): a `compensate` of an action
//!   that never committed is refused; one of a committed action is routed to the compensating
//!   capability and settles `compensated`, having made a mutating request of the provider that
//!   names what the action left there (an id from its output, or the operation it checkpointed
//!   or created at the provider); a second one is refused. A compensation that answers
//!   "compensated" without undoing anything, or undoes something else, passed before an author
//!   trial. When the capability offers `reconcile`, a second compensation has its first write
//!   committed and its connection dropped; when it is left `outcome_unknown` with an operation
//!   the double committed, a reconciliation of it (the reconcile companion asked with
//!   `Reconciliation::compensation_for` set) must find the undo took effect (`committed: true`),
//!   settle it `reconciled`, and run nothing again (see [`lost_compensation`] for what holds
//!   with a note). A companion that reads the deleted resource's 404 as "not committed" passed
//!   before an author trial.
//!
//! What a manifest does not declare (no plan/commit pair, no compensation) holds with a note. So
//! do, for a connector the suite was told has no provider (`ConformanceSuite::without_provider`)
//! and whose calls make no provider request, the provider request of `compensation_governed`
//! (what a local compensation undid is not visible); its routing, settlement and once-only are
//! still checked. Such a connector's `reconcile_before_retry` is exercised on answers the probe
//! loses instead of the double (`local_lost_answers`): one of a call whose handler ran (a
//! reconciliation must say `committed`) and one of a call whose handler never ran, with an
//! operation nobody made checkpointed (it must not).

use aip_connector::CapabilityDefinition;
use aip_connector::codes;
use aip_connector::host::{Host, TransactionSelector, compensation_transaction_of};
use aip_connector::ids::{ActionId, TransactionId};
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, CompensationMode, ProviderOperationRef,
    TransactionMode, TransactionProtocolStatus as Status, TransactionResult,
};
use serde_json::Value;

use super::{
    code, handler_call_or_fail, no_plan, runs_handler, shown_code, transaction_modes, view,
};
use crate::Fault;
use crate::conformance::harness::Driven;
use crate::conformance::probe::LostAnswer;
use crate::conformance::{Evidence, Harness};

fn commits_plans(capability: &CapabilityDefinition) -> bool {
    let modes = transaction_modes(capability);
    modes.contains(&TransactionMode::Plan)
        && modes.contains(&TransactionMode::Commit)
        && capability
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.transaction.as_ref())
            .is_some_and(|t| t.requires_plan_before_commit)
}

/// The compensating capability's id, when the capability declares compensation.
pub(super) fn compensated_by(capability: &CapabilityDefinition) -> Option<String> {
    let compensation = capability
        .capability
        .contract
        .as_ref()?
        .compensation
        .as_ref()?;
    let declared = matches!(
        compensation.mode,
        CompensationMode::Supported | CompensationMode::BestEffort
    );
    (declared && transaction_modes(capability).contains(&TransactionMode::Compensate))
        .then(|| compensation.compensation_capability_id.clone())
        .flatten()
        .map(|id| id.to_string())
}

pub(super) fn transactional(
    capability_id: &str,
    input: Value,
    key: &str,
    block: ActionTransaction,
) -> Action {
    Action::new(capability_id, input)
        .with_idempotency_key(key)
        .with_transaction(block)
}

pub(super) async fn run(h: &Harness) -> Evidence {
    // On the heap: the suite polls every scenario from one future, and the host's pipeline
    // futures awaited here are large in debug builds.
    Box::pin(scenario(h)).await
}

async fn scenario(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    if h.examples_where(|c| !transaction_modes(c).is_empty())
        .is_empty()
    {
        evidence.no_example("no capability with a transaction contract declares an example input: nothing can be run");
        return evidence;
    }
    plan_before_commit(h, &mut evidence).await;
    provider_operation_checkpointed(h, &mut evidence).await;
    reconcile_before_retry(h, &mut evidence).await;
    compensation_governed(h, &mut evidence).await;
    evidence
}

async fn plan_before_commit(h: &Harness, evidence: &mut Evidence) {
    let candidates = h.examples_where(commits_plans);
    let Some((capability, input)) = candidates.first().cloned() else {
        evidence.assert("plan_before_commit", true, String::new);
        evidence.note("plan_before_commit: no capability commits plans (plan and commit with `requires_plan_before_commit`); nothing to check");
        return;
    };
    let id = capability.id().to_string();
    let host = h.host();
    let calls = || h.probe().calls(&id);
    let calls_start = calls();
    let effects_start = h.provider().effect_total();

    // A commit that names no plan, and one of a plan nobody made.
    let unplanned = transactional(
        &id,
        input.clone(),
        "conformance-txn-unplanned",
        ActionTransaction::new(TransactionMode::Commit),
    );
    let (refused, _) = h.run_once(host, unplanned).await;
    evidence.artifact(format!("action:{}", refused.action_id));
    evidence.assert(
        "plan_before_commit",
        refused.status == ActionResultStatus::Failed
            && [codes::ACTION_INVALID, codes::TRANSACTION_PLAN_REQUIRED].contains(&code(&refused)),
        || {
            format!(
                "a commit of `{id}` without a plan answered `{}` ({})",
                refused.status,
                shown_code(&refused)
            )
        },
    );
    let mut block = ActionTransaction::new(TransactionMode::Commit);
    block.plan_id = Some("plan:conformance-never-planned".to_owned());
    let unknown = h
        .drive(
            host,
            transactional(&id, input.clone(), "conformance-txn-unknown-plan", block),
        )
        .await;
    evidence.artifact(format!("action:{}", unknown.action.id));
    evidence.assert(
        "plan_before_commit",
        code(&unknown.result) == codes::TRANSACTION_PLAN_NOT_FOUND,
        || {
            format!(
                "a commit of `{id}` naming a plan nobody made answered `{}` ({}) instead of `{}`",
                unknown.result.status,
                shown_code(&unknown.result),
                codes::TRANSACTION_PLAN_NOT_FOUND
            )
        },
    );

    // The refusals ran nothing; the plan's counts start after them, so a handler run by a
    // refused commit is blamed on the refusal, not on the plan.
    let refused_calls = calls() - calls_start;
    let refused_effects = h.provider().effect_total() - effects_start;
    evidence.assert(
        "plan_before_commit",
        refused_calls == 0 && refused_effects == 0,
        || {
            format!(
                "the two refused commits of `{id}` ran its handler {refused_calls} time(s) and left {refused_effects} provider effect(s)"
            )
        },
    );
    let calls_start = calls();
    let effects_start = h.provider().effect_total();

    // The plan: no handler, no effect.
    let plan_action = transactional(
        &id,
        input.clone(),
        "conformance-txn-plan",
        ActionTransaction::new(TransactionMode::Plan),
    );
    let (planned, _) = h.run_once(host, plan_action.clone()).await;
    evidence.artifact(format!("action:{}", planned.action_id));
    let Some(commit) = h.commit_for(&plan_action, &planned) else {
        evidence.assert("plan_before_commit", false, || no_plan(&id, &planned));
        return;
    };
    let plan_id = commit
        .transaction
        .as_ref()
        .and_then(|t| t.plan_id.clone())
        .unwrap_or_default();
    evidence.artifact(format!("plan:{plan_id}"));
    let planned_view = view(h, host, TransactionSelector::Plan(plan_id.clone())).await;
    let effects_planned = h.provider().effect_total() - effects_start;
    evidence.assert(
        "plan_before_commit",
        calls() == calls_start
            && effects_planned == 0
            && planned_view.as_ref().map(|v| v.status) == Some(Status::Planned),
        || {
            format!(
                "before its commit, the plan of `{id}` is {}, the handler ran {} time(s) and the provider holds {effects_planned} new effect(s)",
                super::maybe(planned_view.as_ref().map(|v| v.status)),
                calls() - calls_start
            )
        },
    );

    // The commit runs the handler once; a second commit of the plan runs nothing.
    let committed = h.drive(host, commit.clone()).await;
    evidence.artifact(format!("action:{}", committed.action.id));
    let committed_view = view(h, host, TransactionSelector::Plan(plan_id.clone())).await;
    if let Some(view) = &committed_view {
        evidence.artifact(format!("transaction:{}", view.transaction_id));
    }
    evidence.assert(
        "plan_before_commit",
        committed.result.status == ActionResultStatus::Completed
            && calls() == calls_start + 1
            && committed_view.as_ref().map(|v| v.status) == Some(Status::Committed),
        || {
            format!(
                "committing the plan of `{id}` answered `{}` ({}), ran the handler {} time(s), left the transaction {}",
                committed.result.status,
                shown_code(&committed.result),
                calls() - calls_start,
                super::maybe(committed_view.as_ref().map(|v| v.status))
            )
        },
    );
    let mut again = commit;
    again.id = ActionId::new();
    again.idempotency_key = Some("conformance-txn-plan:commit-again".to_owned());
    let again = h.drive(host, again).await;
    evidence.artifact(format!("action:{}", again.action.id));
    evidence.assert(
        "plan_before_commit",
        code(&again.result) == codes::TRANSACTION_PLAN_ALREADY_CLAIMED
            && calls() == calls_start + 1,
        || {
            format!(
                "a second commit of the same plan of `{id}` answered `{}` ({}) instead of `{}`",
                again.result.status,
                shown_code(&again.result),
                codes::TRANSACTION_PLAN_ALREADY_CLAIMED
            )
        },
    );
    if let Some(view) = &committed_view {
        evidence.assert(
            "provider_operation_checkpointed",
            view.provider_operation.is_some(),
            || format!("the committed plan of `{id}` names no provider operation: its handler never recorded one with `Checkpoint`"),
        );
    }
}

async fn provider_operation_checkpointed(h: &Harness, evidence: &mut Evidence) {
    let candidates = h.examples_where(runs_handler);
    if candidates.is_empty() {
        evidence.assert("provider_operation_checkpointed", true, String::new);
        evidence.note("provider_operation_checkpointed: no capability can `execute` or `commit`; no handler runs in a transaction");
        return;
    }
    let host = h.host();
    for (capability, input) in candidates {
        let id = capability.id().to_string();
        let key = format!("conformance-txn-checkpoint-{id}");
        let effects_start = h.provider().effect_total();
        let driven = h.drive(host, h.action(capability, input, &key)).await;
        evidence.artifact(format!("action:{}", driven.action.id));
        checkpointed_before_effect(h, &id, driven.action.id.as_str(), effects_start, evidence);
        if driven.result.status != ActionResultStatus::Completed {
            evidence.assert("provider_operation_checkpointed", false, || {
                format!(
                    "the example of `{id}` did not complete (`{}`, {}), so no settled transaction could be read",
                    driven.result.status,
                    code(&driven.result)
                )
            });
            continue;
        }
        let view = view(
            h,
            host,
            TransactionSelector::Action(driven.action.id.clone()),
        )
        .await;
        if let Some(view) = &view {
            evidence.artifact(format!("transaction:{}", view.transaction_id));
        }
        let operation = view.as_ref().and_then(|v| v.provider_operation.clone());
        evidence.assert(
            "provider_operation_checkpointed",
            view.as_ref().map(|v| v.status) == Some(Status::Committed)
                && operation
                    .as_ref()
                    .is_some_and(|o| !o.provider.trim().is_empty() && !o.operation_id.trim().is_empty()),
            || {
                format!(
                    "after `{id}` committed, its transaction ({}) names no provider operation: its handler never recorded one with `Checkpoint`, so an unknown outcome of it could not be reconciled",
                    super::maybe(view.as_ref().map(|v| v.status))
                )
            },
        );
    }
}

/// `provider_operation_checkpointed`, in time: the first checkpoint the handler of action
/// `action_id` recorded was durable before the provider committed the first effect made while
/// that handler ran (since `effects_start`). A handler that records after the provider answered
/// leaves, if it dies in between, a transaction that names no operation, which nothing can
/// reconcile; yet its view names the operation once it settles (and an unknown outcome names
/// it too, from the failure's details), so only the order tells.
fn checkpointed_before_effect(
    h: &Harness,
    id: &str,
    action_id: &str,
    effects_start: usize,
    evidence: &mut Evidence,
) {
    let Some((started_at, checkpointed_at)) = h
        .probe()
        .records()
        .into_iter()
        .filter(|record| record.action_id == action_id)
        .find_map(|record| Some((record.started_at, record.checkpointed_at?)))
    else {
        return;
    };
    let Some(first_effect) = h
        .provider()
        .effects()
        .into_iter()
        .skip(effects_start)
        .map(|effect| effect.committed_at)
        .filter(|committed_at| *committed_at >= started_at)
        .min()
    else {
        return;
    };
    evidence.assert(
        "provider_operation_checkpointed",
        checkpointed_at <= first_effect,
        || {
            let late = checkpointed_at
                .duration_since(first_effect)
                .unwrap_or_default();
            format!(
                "`{id}` recorded its provider operation {late:?} after the provider committed the call's effect: record the `Checkpoint` before the request that changes the provider, or a crash between the two leaves a transaction that names no operation and cannot be reconciled"
            )
        },
    );
}

async fn reconcile_before_retry(h: &Harness, evidence: &mut Evidence) {
    let mut candidates = h.examples_where(runs_handler);
    candidates.sort_by_key(|(c, _)| !transaction_modes(c).contains(&TransactionMode::Reconcile));
    let Some((capability, input)) = candidates.first().cloned() else {
        evidence.assert("reconcile_before_retry", true, String::new);
        evidence.note("reconcile_before_retry: no capability can `execute` or `commit`; nothing can end in an unknown outcome");
        return;
    };
    let id = capability.id().to_string();
    let host = h.host();
    let reconcilable = transaction_modes(capability).contains(&TransactionMode::Reconcile);

    // Learn where the call changes the provider, then make that request's answer vanish after
    // the provider committed it.
    let scouted = h
        .scout_boxed(h.action(capability, input.clone(), "conformance-txn-scout"))
        .await;
    let Some(route) = scouted.route().map(str::to_owned) else {
        match h.no_provider() {
            Some(reason) if scouted.result.status == ActionResultStatus::Completed => {
                evidence.artifact(format!("action:{}", scouted.result.action_id));
                local_lost_answers(
                    h,
                    evidence,
                    "reconcile_before_retry",
                    "provider_operation_checkpointed",
                    capability,
                    &input,
                    reason,
                )
                .await;
            }
            _ => super::no_answer_to_lose(evidence, h, &id, &scouted, "reconcile_before_retry"),
        }
        return;
    };
    let names_operations = super::names_its_operations(h, host, &scouted).await;
    let Some(call) = handler_call_or_fail(
        h,
        host,
        h.action(capability, input.clone(), "conformance-txn-uncertain"),
        evidence,
        "reconcile_before_retry",
    )
    .await
    else {
        return;
    };
    let effects_start = h.provider().effect_total();
    h.provider().inject(&route, Fault::drop_connection());
    let uncertain = h.drive(host, call).await;
    h.provider().clear_faults();
    evidence.artifact(format!("action:{}", uncertain.action.id));
    let landed = h.provider().effect_total() - effects_start;
    let before = view(
        h,
        host,
        TransactionSelector::Action(uncertain.action.id.clone()),
    )
    .await;
    let status = before.as_ref().map(|v| v.status);
    let Some(before) = before.filter(|v| v.status == Status::OutcomeUnknown) else {
        evidence.assert("reconcile_before_retry", false, || {
            format!(
                "the provider committed {landed} effect(s) for `{id}` on `{route}` and dropped the connection, yet the call settled `{}` ({}) and its transaction {} instead of `outcome_unknown`: a possibly applied effect reported as a definite outcome invites a blind retry",
                uncertain.result.status,
                shown_code(&uncertain.result),
                super::maybe(status)
            )
        });
        return;
    };
    let transaction_id = before.transaction_id.clone();
    evidence.artifact(format!("transaction:{transaction_id}"));
    // A checkpoint recorded once the provider answered is there after a successful call (the
    // check above) and missing exactly when it matters: when the answer is lost.
    evidence.assert(
        "provider_operation_checkpointed",
        before.provider_operation.is_some(),
        || {
            format!(
                "the provider committed {landed} effect(s) for `{id}` on `{route}` and dropped the connection; the unknown outcome's transaction names no provider operation, so it cannot be reconciled: record the `Checkpoint` (`checkpoint.record(...)`) before sending the provider request, not after its answer"
            )
        },
    );
    let calls = || h.probe().calls(&id);
    let calls_start = calls();
    let effects_unknown = h.provider().effect_total();

    // Blind retries: the exact resend, and the same action under a fresh key naming the
    // transaction.
    let (resent, retried) = blind_retries(
        h,
        host,
        &uncertain.action,
        "conformance-txn-uncertain:retry",
        &transaction_id,
    )
    .await;
    evidence.assert(
        "reconcile_before_retry",
        calls() == calls_start
            && h.provider().effect_total() == effects_unknown
            && refused_blind(&resent, &retried.result),
        || {
            format!(
                "after an unknown outcome of `{id}`, a resend answered `{}` ({}) and a retry under a fresh key `{}` ({}); the handler ran {} more time(s) and the provider got {} more effect(s)",
                resent.status,
                shown_code(&resent),
                retried.result.status,
                shown_code(&retried.result),
                calls() - calls_start,
                h.provider().effect_total() - effects_unknown
            )
        },
    );
    if !reconcilable {
        evidence.note(waits_for_an_operator(&id));
        return;
    }

    // Reconciliation settles it, confirming what the provider holds.
    let reconciled = reconcile_transaction(
        h,
        host,
        evidence,
        (&id, &input, "conformance-txn-uncertain:reconcile"),
        &transaction_id,
    )
    .await;
    let after = view(
        h,
        host,
        TransactionSelector::Transaction(transaction_id.clone()),
    )
    .await;
    let committed = reconciled_committed(&reconciled.result);
    let answered = super::effects_answered_for(
        h,
        effects_start,
        before.provider_operation.as_ref(),
        names_operations,
    );
    evidence.assert(
        "reconcile_before_retry",
        reconciled.result.status == ActionResultStatus::Completed
            && after.as_ref().map(|v| v.status) == Some(Status::Reconciled)
            && committed == Some(answered > 0),
        || {
            let hint = if code(&reconciled.result) == codes::TRANSACTION_PROVIDER_OPERATION_REQUIRED {
                " (the handler recorded its `Checkpoint` after the provider request, or not at all: record it before sending the request)"
            } else {
                ""
            };
            // The output as a caller receives it (`{"reconciliation": {...}}`): an author trial
            // copied the inner object from here and read `committed` at the wrong level.
            let output = shown_output(&reconciled.result);
            format!(
                "reconciling the unknown outcome of `{id}` answered `{}` ({}) with {output}, leaving the transaction {}; the provider holds {answered} effect(s) of {}{hint}",
                reconciled.result.status,
                shown_code(&reconciled.result),
                super::maybe(after.as_ref().map(|v| v.status)),
                super::operation_answered_for(before.provider_operation.as_ref(), names_operations)
            )
        },
    );
    evidence.assert(
        "reconcile_before_retry",
        calls() == calls_start && h.provider().effect_total() == effects_unknown,
        || {
            format!(
                "reconciling `{id}` ran its handler {} time(s) and added {} provider effect(s)",
                calls() - calls_start,
                h.provider().effect_total() - effects_unknown
            )
        },
    );
}

/// The blind retries of a call left with an unknown outcome: `action` resent exactly, and the
/// same action under a fresh key (`retry_key`) naming its transaction.
async fn blind_retries(
    h: &Harness,
    host: &Host,
    action: &Action,
    retry_key: &str,
    transaction_id: &TransactionId,
) -> (aip_connector::model::ActionResult, Driven) {
    let (resent, _) = h.run_once(host, action.clone()).await;
    let mut retry = action.clone();
    retry.idempotency_key = Some(retry_key.to_owned());
    if let Some(block) = retry.transaction.as_mut() {
        block.transaction_id = Some(transaction_id.clone());
    }
    (resent, h.drive(host, retry).await)
}

/// Whether both [`blind_retries`] were refused: the resend did not complete, and the retry
/// under a fresh key was told to reconcile (or that its plan was claimed).
fn refused_blind(
    resent: &aip_connector::model::ActionResult,
    retried: &aip_connector::model::ActionResult,
) -> bool {
    resent.status != ActionResultStatus::Completed
        && [
            codes::TRANSACTION_RECONCILIATION_REQUIRED,
            codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
        ]
        .contains(&code(retried))
}

/// The note for a capability whose unknown outcome was refused a blind retry but that declares
/// no `reconcile` mode.
fn waits_for_an_operator(id: &str) -> String {
    format!(
        "`{id}` declares no `reconcile` mode: its unknown outcomes were refused a blind retry but wait for an operator"
    )
}

/// Sends a `reconcile` of `transaction_id` for capability `id` under `key`, and records its
/// action as an artifact.
async fn reconcile_transaction(
    h: &Harness,
    host: &Host,
    evidence: &mut Evidence,
    (id, input, key): (&str, &Value, &str),
    transaction_id: &TransactionId,
) -> Driven {
    let mut block = ActionTransaction::new(TransactionMode::Reconcile);
    block.transaction_id = Some(transaction_id.clone());
    let reconciled = h
        .drive(host, transactional(id, input.clone(), key, block))
        .await;
    evidence.artifact(format!("action:{}", reconciled.action.id));
    reconciled
}

/// Runs `capability`'s handler call under `key` with its answer lost as `how` says, and
/// returns it with its transaction when that was left `outcome_unknown`; `None` after failing
/// `assertion` (the plan made no plan, or the call settled otherwise, which `describe` says).
async fn lose_answer(
    h: &Harness,
    host: &Host,
    evidence: &mut Evidence,
    (capability, input, key): (&CapabilityDefinition, &Value, &str),
    how: LostAnswer,
    assertion: &str,
    describe: impl FnOnce(&Driven) -> String,
) -> Option<(Driven, TransactionResult)> {
    let call = handler_call_or_fail(
        h,
        host,
        h.action(capability, input.clone(), key),
        evidence,
        assertion,
    )
    .await?;
    h.probe().lose_next_answer(capability.id().as_str(), how);
    let lost = h.drive(host, call).await;
    evidence.artifact(format!("action:{}", lost.action.id));
    let unknown = view(h, host, TransactionSelector::Action(lost.action.id.clone()))
        .await
        .filter(|v| v.status == Status::OutcomeUnknown);
    match unknown {
        Some(unknown) => {
            evidence.artifact(format!("transaction:{}", unknown.transaction_id));
            Some((lost, unknown))
        }
        None => {
            evidence.assert(assertion, false, || describe(&lost));
            None
        }
    }
}

/// `assertion` for a connector with no provider (`without_provider`, `reason`), whose answers
/// no provider double can lose: the probe loses them instead (see [`LostAnswer`]). First the
/// answer of a call whose handler ran: the call must settle `outcome_unknown` with the
/// checkpointed operation, neither a resend nor a retry under a fresh key may run the handler
/// again, and a `reconcile` (when declared) must settle it `reconciled` and say `committed`.
/// Then the answer of a call whose handler never ran, with an operation nobody made
/// checkpointed: a reconciliation that says `committed` did not look. Before, a local
/// connector's reconciliation held with a note and was never called (found by a review).
///
/// `checkpoint_assertion` is the assertion a missing checkpoint fails (the transaction
/// scenario's `provider_operation_checkpointed`; the errors scenario's own).
pub(super) async fn local_lost_answers(
    h: &Harness,
    evidence: &mut Evidence,
    assertion: &str,
    checkpoint_assertion: &str,
    capability: &CapabilityDefinition,
    input: &Value,
    reason: &str,
) {
    let id = capability.id().to_string();
    let host = h.host();
    let reconcilable = transaction_modes(capability).contains(&TransactionMode::Reconcile);
    let calls = || h.probe().calls(&id);

    // The handler ran; its answer is lost.
    let key = format!("conformance-local-{assertion}-ran");
    let Some((lost, unknown)) = lose_answer(
        h,
        host,
        evidence,
        (capability, input, &key),
        LostAnswer::AfterEffect,
        assertion,
        |lost| {
            format!(
                "`{id}` is local ({reason}), so the suite lost the answer of a call its handler ran (`provider.outcome_unknown`); the call settled `{}` ({}) instead of leaving its transaction `outcome_unknown`",
                lost.result.status,
                shown_code(&lost.result)
            )
        },
    )
    .await
    else {
        return;
    };
    let transaction_id = unknown.transaction_id.clone();
    evidence.assert(
        checkpoint_assertion,
        unknown.provider_operation.is_some(),
        || {
            format!(
                "the suite lost the answer of a call of `{id}` whose handler ran; its transaction names no operation, so it cannot be reconciled: record the `Checkpoint` before the write takes effect"
            )
        },
    );
    let calls_start = calls();
    let (resent, retried) = blind_retries(
        h,
        host,
        &lost.action,
        &format!("{key}:retry"),
        &transaction_id,
    )
    .await;
    evidence.assert(
        assertion,
        calls() == calls_start && refused_blind(&resent, &retried.result),
        || {
            format!(
                "after the suite lost the answer of a call of `{id}`, a resend answered `{}` ({}) and a retry under a fresh key `{}` ({}); the handler ran {} more time(s)",
                resent.status,
                shown_code(&resent),
                retried.result.status,
                shown_code(&retried.result),
                calls() - calls_start
            )
        },
    );
    if !reconcilable {
        evidence.note(waits_for_an_operator(&id));
        return;
    }
    let reconciled = reconcile_transaction(
        h,
        host,
        evidence,
        (&id, input, &format!("{key}:reconcile")),
        &transaction_id,
    )
    .await;
    let after = view(h, host, TransactionSelector::Transaction(transaction_id)).await;
    evidence.assert(
        assertion,
        reconciled.result.status == ActionResultStatus::Completed
            && after.as_ref().map(|v| v.status) == Some(Status::Reconciled)
            && reconciled_committed(&reconciled.result) == Some(true)
            && calls() == calls_start,
        || {
            format!(
                "`{id}` is local ({reason}): the suite lost the answer of a call its handler ran, and reconciling it answered `{}` ({}) with {}, leaving the transaction {}, where the write took effect; the handler ran {} more time(s)",
                reconciled.result.status,
                shown_code(&reconciled.result),
                shown_output(&reconciled.result),
                super::maybe(after.as_ref().map(|v| v.status)),
                calls() - calls_start
            )
        },
    );

    // The handler never ran; the operation it would have checkpointed was never made.
    let key = format!("conformance-local-{assertion}-never-ran");
    let never_made = ProviderOperationRef {
        provider: "conformance".to_owned(),
        operation_id: format!("conformance-never-made-{}", ActionId::new()),
        request_id: None,
    };
    let Some((_, unknown)) = lose_answer(
        h,
        host,
        evidence,
        (capability, input, &key),
        LostAnswer::BeforeEffect(never_made.clone()),
        assertion,
        |lost| {
            format!(
                "the suite recorded operation `{}` for a call of `{id}` and lost its answer before the handler ran; the call settled `{}` ({}) instead of leaving its transaction `outcome_unknown`",
                never_made.operation_id,
                lost.result.status,
                shown_code(&lost.result)
            )
        },
    )
    .await
    else {
        return;
    };
    let reconciled = reconcile_transaction(
        h,
        host,
        evidence,
        (&id, input, &format!("{key}:reconcile")),
        &unknown.transaction_id,
    )
    .await;
    let committed = reconciled_committed(&reconciled.result);
    evidence.assert(assertion, committed != Some(true), || {
        format!(
            "`{id}` is local ({reason}): reconciling a call whose handler never ran, with operation `{}` checkpointed, answered `committed: true`: the reconciliation did not look the operation up",
            never_made.operation_id
        )
    });
    if committed != Some(false) {
        evidence.note(format!(
            "{assertion}: reconciling `{id}`'s call whose handler never ran answered `{}` ({}), not `committed: false`",
            reconciled.result.status,
            shown_code(&reconciled.result)
        ));
    }
    evidence.note(format!(
        "{assertion}: `{id}` is local ({reason}), so the suite lost the answers itself: of a call its handler ran, and of one it never ran"
    ));
}

/// What a reconciliation answered about the write: `output.reconciliation.committed`.
fn reconciled_committed(result: &aip_connector::model::ActionResult) -> Option<bool> {
    result
        .output
        .as_ref()
        .and_then(|o| o.pointer("/reconciliation/committed"))
        .and_then(Value::as_bool)
}

/// A result's output, for a message: `output {…}` or "no output".
fn shown_output(result: &aip_connector::model::ActionResult) -> String {
    result
        .output
        .as_ref()
        .map_or_else(|| "no output".to_owned(), |o| format!("output {o}"))
}

/// Why `compensation_governed` had nothing to compensate: no capability names a compensating
/// capability; the ones that declare their effects irreversible (`rollback_not_supported`,
/// `manual_only`) are named, so that a connector with a declared-irreversible delete does not
/// read "no capability declares compensation" (a warehouse trial's `drop_table`).
fn uncompensable_note(h: &Harness) -> String {
    let declared: Vec<String> = h
        .definition()
        .capabilities
        .iter()
        .filter_map(|c| {
            let mode = c.capability.contract.as_ref()?.compensation.as_ref()?.mode;
            let mode = serde_json::to_value(mode).ok()?;
            Some(format!("`{}` ({})", c.id(), mode.as_str().unwrap_or("?")))
        })
        .collect();
    if declared.is_empty() {
        "compensation_governed: no capability declares compensation; nothing to compensate"
            .to_owned()
    } else {
        format!(
            "compensation_governed: no capability with an example names a compensating capability and the `compensate` mode; {} declare(s) compensation without an undo to run, so nothing was compensated",
            declared.join(", ")
        )
    }
}

async fn compensation_governed(h: &Harness, evidence: &mut Evidence) {
    let candidates: Vec<_> = h
        .examples_where(|c| compensated_by(c).is_some())
        .into_iter()
        .filter_map(|(c, input)| compensated_by(c).map(|by| (c, input, by)))
        .collect();
    let Some((capability, input, by)) = candidates.first().cloned() else {
        evidence.assert("compensation_governed", true, String::new);
        evidence.note(uncompensable_note(h));
        return;
    };
    let id = capability.id().to_string();
    if let Some(note) = h
        .definition()
        .capability(&by)
        .and_then(|compensating| unapplied_approval(capability, compensating))
    {
        evidence.note(note);
    }
    let host = h.host();
    let Some(compensating_input) = h
        .definition()
        .capability(&by)
        .and_then(|c| c.examples.first().cloned())
    else {
        evidence.assert("compensation_governed", false, || {
            format!("the compensating capability `{by}` of `{id}` declares no example input, so no compensation can be sent")
        });
        return;
    };
    let compensate = |target: ActionId, key: &str| {
        let mut block = ActionTransaction::new(TransactionMode::Compensate);
        block.compensation_for = Some(target);
        transactional(&id, compensating_input.clone(), key, block)
    };
    let requests_before_target = h.provider().request_count();
    let Some((target, effects_before_target)) = compensation_target(
        h,
        evidence,
        (capability, &input, "conformance-txn-comp-target"),
        "there is nothing to compensate",
    )
    .await
    else {
        return;
    };
    // What the target left at the provider, by which a compensation names what it undoes.
    let target_view = view(
        h,
        host,
        TransactionSelector::Action(target.action.id.clone()),
    )
    .await;
    let marks = left_by_target(
        h,
        effects_before_target,
        target.result.output.as_ref(),
        target_view.as_ref(),
    );
    let compensations = || h.probe().calls(&by);
    let originals = || h.probe().calls(&id);
    let (compensations_start, originals_start) = (compensations(), originals());

    // A compensation needs a committed target.
    let bogus = h
        .drive(
            host,
            compensate(ActionId::new(), "conformance-txn-comp-bogus"),
        )
        .await;
    evidence.artifact(format!("action:{}", bogus.action.id));
    evidence.assert(
        "compensation_governed",
        code(&bogus.result).starts_with("transaction.compensation_target")
            && compensations() == compensations_start,
        || {
            format!(
                "a compensation of `{id}` naming an action that never ran answered `{}` ({}); `{by}` ran {} time(s)",
                bogus.result.status,
                shown_code(&bogus.result),
                compensations() - compensations_start
            )
        },
    );

    // It is routed to the compensating capability and settles `compensated`.
    let (requests_before, effects_before) =
        (h.provider().request_count(), h.provider().effect_total());
    let first = h
        .drive(
            host,
            compensate(target.action.id.clone(), "conformance-txn-comp-1"),
        )
        .await;
    let sent = h.provider().requests().split_off(requests_before);
    let undid = h.provider().effect_total() > effects_before;
    evidence.artifact(format!("action:{}", first.action.id));
    let transaction_id: TransactionId = compensation_transaction_of(&target.action.id);
    evidence.artifact(format!("transaction:{transaction_id}"));
    let compensation = view(h, host, TransactionSelector::Transaction(transaction_id)).await;
    evidence.assert(
        "compensation_governed",
        first.result.status == ActionResultStatus::Completed
            && compensations() == compensations_start + 1
            && originals() == originals_start
            && compensation.as_ref().map(|v| v.status) == Some(Status::Compensated)
            && compensation
                .as_ref()
                .and_then(|v| v.transaction.compensation_for.as_ref())
                == Some(&target.action.id),
        || {
            format!(
                "compensating `{id}` answered `{}` ({}); `{by}` ran {} time(s), `{id}` {} time(s); the compensation's transaction is {}",
                first.result.status,
                shown_code(&first.result),
                compensations() - compensations_start,
                originals() - originals_start,
                super::maybe(compensation.as_ref().map(|v| v.status))
            )
        },
    );

    // And it undid something at the provider, naming what the target left there. A local
    // connector's compensation changes nothing the suite can see: it holds with a note.
    let local = h
        .no_provider()
        .filter(|_| h.provider().request_count() == requests_before_target);
    if let (Some(reason), ActionResultStatus::Completed) = (local, first.result.status) {
        evidence.note(format!(
            "compensation_governed: what `{by}` undid holds without a provider: the suite was told the connector has none ({reason}), and neither `{id}` nor its compensation made a provider request"
        ));
    } else if first.result.status == ActionResultStatus::Completed {
        // The request that names the target must be one that changes something: a lookup of
        // the target beside an unrelated write undoes nothing (a hostile review's did).
        let naming = sent.iter().find(|request| {
            let text = request_text(request);
            !matches!(request.method.as_str(), "GET" | "HEAD" | "OPTIONS")
                && marks.iter().any(|mark| text.contains(mark.as_str()))
        });
        evidence.assert("compensation_governed", undid && naming.is_some(), || {
            let requests: Vec<String> = sent
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect();
            let requests = if requests.is_empty() {
                "none".to_owned()
            } else {
                requests.join(", ")
            };
            if undid {
                format!(
                    "compensating `{id}` through `{by}` changed the provider, but no mutating request it sent ({requests}) names what `{id}` left there ({}): it undid something else. Take the target from the `Compensation` parameter (its `output` or `provider_operation`)",
                    marks
                        .iter()
                        .take(4)
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                let hint = if sent.is_empty() && h.no_provider().is_none() {
                    " (if the connector's work really is local, say so with `ConformanceSuite::without_provider(reason)`)"
                } else {
                    ""
                };
                format!(
                    "compensating `{id}` through `{by}` settled `compensated`, but made no mutating request of the provider (requests: {requests}): nothing was undone{hint}"
                )
            }
        });
    }

    // At most once.
    let second = h
        .drive(
            host,
            compensate(target.action.id.clone(), "conformance-txn-comp-2"),
        )
        .await;
    evidence.artifact(format!("action:{}", second.action.id));
    evidence.assert(
        "compensation_governed",
        code(&second.result) == codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
            && compensations() == compensations_start + 1,
        || {
            format!(
                "a second compensation of the same action of `{id}` answered `{}` ({}) and `{by}` ran {} time(s) in all",
                second.result.status,
                shown_code(&second.result),
                compensations() - compensations_start
            )
        },
    );

    // A compensation whose answer is lost (after the once-only check, which counts the runs of
    // the compensating handler).
    if first.result.status == ActionResultStatus::Completed {
        lost_compensation(h, evidence, (capability, &input, &by), &compensate).await;
    }
}

/// Runs the example of `capability` under `key` as the target of a compensation: the completed
/// run, and the provider's effect count before it (for [`left_by_target`]). `None` after failing
/// `compensation_governed` when it did not complete (`so` says what that prevents).
async fn compensation_target(
    h: &Harness,
    evidence: &mut Evidence,
    (capability, input, key): (&CapabilityDefinition, &Value, &str),
    so: &str,
) -> Option<(Driven, usize)> {
    let id = capability.id();
    let host = h.host();
    let effects_before = h.provider().effect_total();
    let target = h
        .drive(host, h.action(capability, input.clone(), key))
        .await;
    evidence.artifact(format!("action:{}", target.action.id));
    if target.result.status != ActionResultStatus::Completed {
        evidence.assert("compensation_governed", false, || {
            format!(
                "the example of `{id}` did not complete (`{}`, {}), so {so}",
                target.result.status,
                code(&target.result)
            )
        });
        return None;
    }
    Some((target, effects_before))
}

/// `compensation_governed` for a compensation whose answer is lost: the provider double
/// commits the compensation's first write (of each method) and drops the connection. The check
/// holds the reconciliation to what the double knows: when the operation the compensation
/// recorded is one the double committed (the compensation sent its id, as the
/// `OPERATION_ID_HEADER` lets it), the undo took effect, and a `reconcile` of the compensation's
/// transaction must say `committed: true` and settle it `reconciled`, running neither handler.
/// Everything the suite cannot judge holds with a note saying why: no `reconcile` mode, no
/// provider, a compensation that did not settle `outcome_unknown` (a client that retried and
/// was answered the replay, a read sent as `POST`), one that recorded no operation or one the
/// double does not know, and a reconciliation whose lookups got the double's generic answer,
/// which says nothing of a resource's state (found by a review: an honest companion that asks
/// whether the resource still exists read the generic `200` as "not deleted").
async fn lost_compensation(
    h: &Harness,
    evidence: &mut Evidence,
    (capability, input, by): (&CapabilityDefinition, &Value, &str),
    compensate: &impl Fn(ActionId, &str) -> Action,
) {
    let id = capability.id().to_string();
    let no_check = |evidence: &mut Evidence, why: String| {
        evidence.note(format!(
            "compensation_governed: no lost compensation of `{id}` was reconciled: {why}"
        ));
    };
    if !transaction_modes(capability).contains(&TransactionMode::Reconcile) {
        return no_check(
            evidence,
            "it declares no `reconcile` mode, so a compensation whose answer is lost waits for an operator".to_owned(),
        );
    }
    if let Some(reason) = h.no_provider() {
        return no_check(
            evidence,
            format!("the connector has no provider ({reason})"),
        );
    }
    let host = h.host();
    let Some((target, _)) = compensation_target(
        h,
        evidence,
        (capability, input, "conformance-txn-comp-lost-target"),
        "no compensation's answer could be lost",
    )
    .await
    else {
        return;
    };
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        h.provider()
            .inject(&format!("{method} *"), Fault::drop_connection());
    }
    let lost = h
        .drive(
            host,
            compensate(target.action.id.clone(), "conformance-txn-comp-lost"),
        )
        .await;
    h.provider().clear_faults();
    evidence.artifact(format!("action:{}", lost.action.id));
    let transaction_id = compensation_transaction_of(&target.action.id);
    let unknown = view(
        h,
        host,
        TransactionSelector::Transaction(transaction_id.clone()),
    )
    .await
    .filter(|v| v.status == Status::OutcomeUnknown);
    let Some(unknown) = unknown else {
        return no_check(
            evidence,
            format!(
                "with its first write's connection dropped, the compensation through `{by}` settled `{}` ({}), not an unknown outcome. If that write was the undo, its failure must say `uncertain_outcome` (as `ProviderClient` reports a dropped write), or the undo may run twice",
                lost.result.status,
                shown_code(&lost.result)
            ),
        );
    };
    let Some(recorded) = unknown.provider_operation.clone() else {
        return no_check(
            evidence,
            format!(
                "the compensation through `{by}` recorded no provider operation, so its lost answer cannot be reconciled and waits for an operator; record the undo's operation with `Checkpoint`, or name it with `ProviderRequest::provider_operation`"
            ),
        );
    };
    if h.provider().operation(&recorded.operation_id).is_none() {
        return no_check(
            evidence,
            format!(
                "the operation the compensation through `{by}` recorded, `{}`, is not one the provider double committed (send its id with `provider_double::OPERATION_ID_HEADER`), so the suite cannot tell whether the undo took effect",
                recorded.operation_id
            ),
        );
    }
    let runs = || (h.probe().calls(by), h.probe().calls(&id));
    let runs_before = runs();
    let requests_before = h.provider().request_count();
    let reconciled = reconcile_transaction(
        h,
        host,
        evidence,
        (&id, input, "conformance-txn-comp-lost-reconcile"),
        &transaction_id,
    )
    .await;
    let committed = reconciled_committed(&reconciled.result);
    if committed != Some(true) {
        let generic: Vec<String> = h
            .provider()
            .requests()
            .split_off(requests_before)
            .into_iter()
            .filter(|r| matches!(r.method.as_str(), "GET" | "HEAD"))
            .filter(|r| !h.provider().answers_truthfully(&r.method, &r.path))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        if !generic.is_empty() {
            return no_check(
                evidence,
                format!(
                    "its reconciliation answered `{}` ({}), but its lookups ({}) got the double's generic answer, which says nothing of the resource's state; shape them as the real API answers (`with_provider_setup` and `ProviderHandle::answer`, a 404 once deleted) for the suite to check the answer",
                    reconciled.result.status,
                    shown_output(&reconciled.result),
                    generic.join(", ")
                ),
            );
        }
    }
    let settled = view(h, host, TransactionSelector::Transaction(transaction_id)).await;
    evidence.assert(
        "compensation_governed",
        reconciled.result.status == ActionResultStatus::Completed
            && committed == Some(true)
            && settled.as_ref().map(|v| v.status) == Some(Status::Reconciled)
            && runs() == runs_before,
        || {
            format!(
                "the provider took the compensation of `{id}` through `{by}` (operation `{}`) and its answer was lost; reconciling the compensation's transaction answered `{}` ({}, {}) and left it {}, where the undo committed. The reconcile companion is asked with `Reconciliation::compensation_for` set: it looks up the undo, and a deleted resource's 404 means the undo happened",
                recorded.operation_id,
                reconciled.result.status,
                shown_code(&reconciled.result),
                shown_output(&reconciled.result),
                super::maybe(settled.as_ref().map(|v| v.status))
            )
        },
    );
}

/// Who decides under `policy`: its selector, rule, quorum, separation of duties and
/// delegation (not its reason, which each capability words for itself).
fn deciders(policy: &aip_connector::model::ApprovalPolicy) -> Value {
    serde_json::json!({
        "approver_selector": policy.approver_selector,
        "rule": policy.rule,
        "minimum_distinct_principals": policy.minimum_distinct_principals,
        "separation_of_duties": policy.separation_of_duties,
        "delegated_authority": policy.delegated_authority,
    })
}

/// A note when the compensating capability publishes an approval policy that the host never
/// applies: a `compensate` is gated by the compensated capability's contract
/// (attribute-reference.md, "Whose approval policy applies"), and the compensating one cannot
/// be called on its own. An author trial's undo published "ops approves voids" while `legal`
/// approved them, and nothing said so. Also when it publishes none while the host gates every
/// compensation it runs: another trial's undo read as needing no approval where every run of
/// it waited for a triager.
fn unapplied_approval(
    compensated: &CapabilityDefinition,
    compensating: &CapabilityDefinition,
) -> Option<String> {
    let (by, id) = (compensating.id(), compensated.id());
    let Some(published) = compensating
        .capability
        .contract
        .as_ref()
        .and_then(|contract| contract.approval.as_ref())
        .filter(|policy| policy.required)
    else {
        if !aip_connector::rules::gates_compensations(&compensated.capability) {
            return None;
        }
        let declared = compensated
            .capability
            .contract
            .as_ref()
            .is_some_and(|contract| contract.approval.is_some());
        // Where the compensated capability declares no policy, the host applies its default
        // compensation policy, which no `approval(...)` on the undo can name: the policy goes
        // on the compensated capability first (a review: the note sent authors back and forth).
        return Some(if declared {
            format!(
                "`{by}` publishes no required approval policy, but every compensation of `{id}` it runs waits for approval under `{id}`'s policy: declare that policy on `{by}` too, and take `Approval`, so that its contract says what a host applies (attribute-reference.md, \"Whose approval policy applies\")"
            )
        } else {
            format!(
                "`{by}` publishes no required approval policy, but every compensation of `{id}` it runs waits for approval under the host's default compensation policy (`{id}` gates its compensations and declares no policy): declare the policy on `{id}`, then the same on `{by}`, and take `Approval` (attribute-reference.md, \"Whose approval policy applies\")"
            )
        });
    };
    let applied = compensated
        .capability
        .contract
        .as_ref()
        .and_then(|c| c.approval.as_ref());
    if applied.is_some_and(|applied| deciders(applied) == deciders(published)) {
        return None;
    }
    Some(match applied {
        Some(applied) => format!(
            "`{by}` publishes an approval policy ({}) that no host applies: a compensation of `{id}` is approved under `{id}`'s ({}); declare on `{by}` the policy that gates the undo (attribute-reference.md, \"Whose approval policy applies\")",
            deciders(published),
            deciders(applied)
        ),
        None => format!(
            "`{by}` publishes an approval policy ({}) that no host applies: a compensation of `{id}` is approved under `{id}`'s contract, which declares none (the host's default compensation policy applies when `compensation(requires_approval)`); declare the policy on `{id}`",
            deciders(published)
        ),
    })
}

/// The texts by which a request can name what the compensated action left at the provider: the
/// operation ids of the effects it made (from `effects_before` on), the provider operation its
/// transaction checkpointed, and the strings of its output (ids, mostly; six characters or
/// more, so that a word like `ok` names nothing).
fn left_by_target(
    h: &Harness,
    effects_before: usize,
    output: Option<&serde_json::Value>,
    view: Option<&TransactionResult>,
) -> Vec<String> {
    let mut marks: Vec<String> = h
        .provider()
        .effects()
        .into_iter()
        .skip(effects_before)
        .map(|effect| effect.operation_id)
        .collect();
    if let Some(operation) = view.and_then(|v| v.provider_operation.as_ref()) {
        marks.push(operation.operation_id.clone());
    }
    if let Some(output) = output {
        super::string_values(output, &mut marks);
    }
    marks.retain(|mark| mark.len() >= 6);
    marks.sort();
    marks.dedup();
    marks
}

/// What a request says: its path and query (decoded, as a connector encodes ids into them with
/// `path_segment`), body and header values, for a search.
fn request_text(request: &crate::provider_double::RecordedRequest) -> String {
    let decoded = |text: &str| {
        percent_encoding::percent_decode_str(&text.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut text = format!(
        "{}\n{}?{}\n{}",
        request.path,
        decoded(&request.path),
        decoded(request.query.as_deref().unwrap_or_default()),
        String::from_utf8_lossy(&request.body)
    );
    for (name, value) in &request.headers {
        if name != "authorization" {
            text.push('\n');
            text.push_str(value);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::request_text;
    use crate::provider_double::RecordedRequest;

    /// Found by a hostile review: a compensation that names its target by an id it encoded with
    /// `path_segment` (`entry%3A7`) was said to undo something else.
    #[test]
    fn a_request_names_what_its_encoded_path_and_query_name() {
        let request = RecordedRequest {
            sequence: 1,
            method: "DELETE".into(),
            path: "/entries/entry%3A7".into(),
            query: Some("reason=posted+twice&ref=ch%2F9".into()),
            headers: vec![("authorization".into(), "Bearer secret-token".into())],
            body: Vec::new(),
            idempotency_key: None,
            received_at: std::time::SystemTime::UNIX_EPOCH,
            since_start: std::time::Duration::ZERO,
        };
        let text = request_text(&request);
        assert!(text.contains("entry:7"), "{text}");
        assert!(
            text.contains("ch/9") && text.contains("posted twice"),
            "{text}"
        );
        assert!(!text.contains("secret-token"), "{text}");
    }
}
