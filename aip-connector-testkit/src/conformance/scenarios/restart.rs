//! `restart_reconnect`: what one host settled, a restarted host — a new host and a freshly built
//! connector over the same store, as a restarted process has — knows and honours.
//!
//! The subject is one capability: the first mutating one with an example (a read when none
//! mutates) whose call completes, tried in manifest order with those the suite waives last;
//! when none completes, the first.
//!
//! - `state_recovered`: the restarted host replays a keyed call the first host settled (the
//!   handler does not run), reads the same transaction (status, provider operation, receipts)
//!   and the same approval record.
//! - `duplicate_effect_prevented`: re-sending that call to the restarted host — the same action,
//!   and the same key under a new action id — adds no provider effect. A capability that scopes
//!   its keys to the action (`idempotency(scope = action)`) makes a new action id a new key, so
//!   for it only the same action is re-sent (with a note). The call must have completed before
//!   the restart: the duplicate of a failure shows nothing about a second effect, and leaves
//!   the assertion unexercised, and failed; unless the manifest only reads, where there is no
//!   effect to duplicate (a note).
//! - `reconnect_cursor_resumed`: a transaction left with an unknown outcome before the restart
//!   (the provider committed and dropped the connection), after one reconciliation round the
//!   provider answered `pending` (when the connector's reconciliation reports it), is reconciled
//!   by the restarted host: its connector is asked about exactly the provider operation and
//!   cursor recorded before the restart, and the outcome settles. A round that settles the
//!   outcome *not committed* while the provider's lookup answered `pending` fails it: the
//!   provider holds the effect, and a retry would make it twice. Without a capability that
//!   declares `reconcile` there is nothing to resume; it holds with a note. It holds with a note
//!   too when the suite was told the connector has no provider (`without_provider`) and the
//!   capability completes without a provider request: no answer can be lost.

use std::sync::Arc;

use aip_connector::CapabilityDefinition;
use aip_connector::codes;
use aip_connector::host::{Host, HostLimits, TransactionSelector};
use aip_connector::model::{
    ActionResultStatus, ActionTransaction, IdempotencyKeyScope, TransactionMode,
    TransactionProtocolStatus as Status,
};
use serde_json::Value;

use super::streaming::Tap;
use super::{code, handler_call_or_fail, runs_handler, shown_code, transaction_modes, view};
use crate::Fault;
use crate::conformance::harness::{declares_mutation, is_mutating};
use crate::conformance::{Evidence, Harness, ProbedConnector};

fn reconcilable(capability: &CapabilityDefinition) -> bool {
    transaction_modes(capability).contains(&TransactionMode::Reconcile) && runs_handler(capability)
}

/// A restarted process: a freshly built connector (probed, tapped) and a new host over the
/// same store, opened anew.
async fn restart(h: &Harness) -> (Host, ProbedConnector, Tap) {
    let probe = ProbedConnector::new(h.fresh_connector());
    let tap = Tap::new(Arc::new(probe.clone()));
    let host = h
        .host_reopened(Arc::new(tap.clone()), HostLimits::default())
        .await;
    (host, probe, tap)
}

pub(super) async fn run(h: &Harness) -> Evidence {
    // On the heap: the suite polls every scenario from one future, and the host's pipeline
    // futures awaited here are large in debug builds.
    Box::pin(scenario(h)).await
}

async fn scenario(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let mut examples = h.examples();
    // A mutating call is the one whose duplicate would do harm; a capability the suite waives
    // comes after the others of its kind.
    examples.sort_by_key(|(c, _)| (!declares_mutation(c), h.waived(c.id().as_str())));
    let Some(mutating) = examples.first().map(|(c, _)| declares_mutation(c)) else {
        evidence.no_example("no capability declares an example input: nothing can be invoked");
        return evidence;
    };

    // Before the restart: one keyed call, settled. The candidates of the first one's kind are
    // tried in order until one completes (one that cannot complete against the double, first
    // in the manifest, would leave the assertions unexercised while another could exercise
    // them); when none does, the first is the subject.
    let mut subject = None;
    for (index, (capability, input)) in examples
        .iter()
        .filter(|(c, _)| declares_mutation(c) == mutating)
        .enumerate()
    {
        let key = match index {
            0 => "conformance-restart".to_owned(),
            n => format!("conformance-restart-{n}"),
        };
        let driven = h
            .drive(h.host(), h.action(capability, input.clone(), &key))
            .await;
        let completed = driven.result.status == ActionResultStatus::Completed;
        if completed || subject.is_none() {
            evidence.artifact(format!("action:{}", driven.action.id));
            subject = Some((*capability, driven));
        }
        if completed {
            break;
        }
    }
    let (capability, driven) = subject.expect("the first candidate was driven");
    let id = capability.id().to_string();
    let settled = driven.result.error.as_ref().and_then(|e| e.retryable) != Some(true)
        && driven.result.status != ActionResultStatus::PendingApproval;
    let selector = TransactionSelector::Action(driven.action.id.clone());
    let view_before = view(h, h.host(), selector.clone()).await;
    let approval_before = match &driven.approval_id {
        Some(approval) => h.host().approval(approval).await.ok().flatten(),
        None => None,
    };
    let effects_before = h.provider().effect_total();

    let (restarted, probe, _) = restart(h).await;

    // state_recovered
    let (replay, _) = h.run_once(&restarted, driven.action.clone()).await;
    let view_after = view(h, &restarted, selector).await;
    if let Some(view) = &view_after {
        evidence.artifact(format!("transaction:{}", view.transaction_id));
    }
    evidence.assert("state_recovered", settled, || {
        format!(
            "the example of `{id}` did not settle before the restart (`{}`, {})",
            driven.result.status,
            code(&driven.result)
        )
    });
    evidence.assert(
        "state_recovered",
        replay.is_idempotent_replay()
            && replay.status == driven.result.status
            && code(&replay) == code(&driven.result)
            && probe.calls(&id) == 0,
        || {
            format!(
                "the restarted host answered a duplicate of the settled call of `{id}` with `{}` ({}; replay: {}) and ran the handler {} time(s); before the restart it was `{}` ({})",
                replay.status,
                shown_code(&replay),
                replay.is_idempotent_replay(),
                probe.calls(&id),
                driven.result.status,
                shown_code(&driven.result)
            )
        },
    );
    let same_view = match (&view_before, &view_after) {
        (Some(before), Some(after)) => {
            before.status == after.status
                && before.provider_operation == after.provider_operation
                && before.receipts == after.receipts
        }
        (None, None) => true,
        _ => false,
    };
    evidence.assert("state_recovered", same_view, || {
        format!(
            "the restarted host reads the transaction of `{id}` as {}; the first host read {}",
            super::maybe(view_after.as_ref().map(|v| v.status)),
            super::maybe(view_before.as_ref().map(|v| v.status))
        )
    });
    if let Some(approval) = &driven.approval_id {
        evidence.artifact(format!("approval:{approval}"));
        let approval_after = restarted.approval(approval).await.ok().flatten();
        evidence.assert(
            "state_recovered",
            approval_after
                .as_ref()
                .map(|r| (r.status, r.resumed, r.decisions.len()))
                == approval_before
                    .as_ref()
                    .map(|r| (r.status, r.resumed, r.decisions.len())),
            || format!("the restarted host does not read approval `{approval}` as it was"),
        );
    }

    // duplicate_effect_prevented: the same action (above), then the same key under a new
    // action id, unless the capability scopes its keys to the action: there a new action id is
    // a new key by declaration, and running it is what the contract promises.
    let action_scoped = capability
        .capability
        .contract
        .as_ref()
        .is_some_and(|c| c.idempotency.key_scope == IdempotencyKeyScope::Action);
    let resent = if action_scoped {
        evidence.note(format!(
            "duplicate_effect_prevented: `{id}` scopes keys to the action, so only a resend of the same action was checked"
        ));
        "the same action".to_owned()
    } else {
        let mut again = driven.action.clone();
        again.id = aip_connector::ids::ActionId::new();
        let (second, _) = h.run_once(&restarted, again).await;
        evidence.artifact(format!("action:{}", second.action_id));
        format!(
            "the same key under a new action id answered `{}`, {}",
            second.status,
            code(&second)
        )
    };
    let added = h.provider().effect_total() - effects_before;
    evidence.assert(
        "duplicate_effect_prevented",
        added == 0 && probe.calls(&id) == 0,
        || {
            format!(
                "re-sent to the restarted host, the call of `{id}` ran the handler {} time(s) and added {added} provider effect(s) ({resent})",
                probe.calls(&id),
            )
        },
    );
    if driven.result.status != ActionResultStatus::Completed && !declares_mutation(capability) {
        // A read has no effect to duplicate: there is nothing its completion would have shown
        // here (`schema_enforcement` reports the call that did not complete).
        evidence.note(format!(
            "duplicate_effect_prevented: `{id}` only reads, so its re-sent call had no effect to duplicate; it did not complete before the restart: it answered {}",
            super::outcome(&driven.result)
        ));
    } else if driven.result.status != ActionResultStatus::Completed {
        super::call_unexercised(
            &mut evidence,
            h,
            "duplicate_effect_prevented",
            &id,
            &driven.result,
            format!(
                "the call of `{id}` re-sent to the restarted host had not completed before the restart, so no duplicate of a call that took effect was seen: it answered {}",
                super::outcome(&driven.result)
            ),
        );
    }
    if !declares_mutation(capability) {
        evidence.note(format!(
            "duplicate_effect_prevented: no capability with an example declares a side effect other than `read` (a network lookup whose mutating lint is waived counts as a read); `{id}` was re-sent instead"
        ));
    }

    reconnect_cursor_resumed(h, &mut evidence).await;
    evidence
}

async fn reconnect_cursor_resumed(h: &Harness, evidence: &mut Evidence) {
    let Some((capability, input)) = h.examples_where(reconcilable).first().cloned() else {
        evidence.assert("reconnect_cursor_resumed", true, String::new);
        evidence.note("reconnect_cursor_resumed: no capability declares `reconcile` together with `execute` or `commit`; there is no cursor to resume");
        return;
    };
    let id = capability.id().to_string();
    let host = h.host();
    let scouted = h
        .scout_boxed(h.action(capability, input.clone(), "conformance-restart-scout"))
        .await;
    if scouted.requests.is_empty() {
        super::no_answer_to_lose(evidence, h, &id, &scouted, "reconnect_cursor_resumed");
        return;
    }
    let route = scouted
        .requests
        .iter()
        .find(|r| is_mutating(&r.method))
        .map(|r| r.path.clone())
        .unwrap_or_else(|| "*".to_owned());

    // Up to two unknown outcomes: the first gets a reconciliation round the provider answers
    // `pending`; if the connector settles it at once instead, a second one is left for the
    // restarted host untouched.
    let mut pending_round = true;
    let mut left = None;
    for attempt in 0..2 {
        let key = format!("conformance-restart-uncertain-{attempt}");
        let Some(call) = handler_call_or_fail(
            h,
            host,
            h.action(capability, input.clone(), &key),
            evidence,
            "reconnect_cursor_resumed",
        )
        .await
        else {
            return;
        };
        h.provider().inject(&route, Fault::drop_connection());
        let uncertain = h.drive(host, call).await;
        h.provider().clear_faults();
        evidence.artifact(format!("action:{}", uncertain.action.id));
        let unknown = view(
            h,
            host,
            TransactionSelector::Action(uncertain.action.id.clone()),
        )
        .await
        .filter(|v| v.status == Status::OutcomeUnknown);
        let Some(unknown) = unknown else {
            evidence.assert("reconnect_cursor_resumed", false, || {
                format!(
                    "the provider committed `{id}` on `{route}` and dropped the connection, yet the call settled `{}` ({}) instead of an unknown outcome to reconcile",
                    uncertain.result.status,
                    shown_code(&uncertain.result)
                )
            });
            return;
        };
        let transaction_id = unknown.transaction_id.clone();
        evidence.artifact(format!("transaction:{transaction_id}"));
        if !pending_round {
            left = Some(transaction_id);
            break;
        }
        h.provider().lookups_pending(1);
        let round = reconcile(h, host, capability, &input, &transaction_id, "pending").await;
        // Whether the connector's lookup got the scripted `pending` (a lookup route of its own
        // that does not ask `lookup_pending()` never does).
        let told_pending = h.provider().pending_lookups_left() == 0;
        h.provider().lookups_pending(0);
        if code(&round) == codes::TRANSACTION_RECONCILIATION_PENDING {
            left = Some(transaction_id);
            break;
        }
        // The provider holds the effect (it committed before the connection dropped), so a
        // round that settles it "not committed" read the lookup's "still in flight" as "never
        // happened": a retry then makes the effect twice (found by an author trial, whose
        // companion's `_ => NotCommitted` passed with a note).
        let reported = |field: &str| {
            round
                .output
                .as_ref()
                .and_then(|o| o.pointer(&format!("/reconciliation/{field}")))
                .and_then(Value::as_bool)
        };
        if told_pending
            && reported("terminal") == Some(true)
            && reported("committed") == Some(false)
        {
            evidence.assert("reconnect_cursor_resumed", false, || {
                format!(
                    "the provider committed `{id}` on `{route}` before the connection dropped, and the suite scripted its operation lookups to answer `pending` (still in flight), yet the reconciliation settled transaction `{transaction_id}` as not committed: a lookup that cannot tell yet must leave the outcome unknown (`ReconcileOutcome::Pending`), and only a lookup that finds no such operation may answer `NotCommitted`"
                )
            });
            return;
        }
        evidence.note(format!(
            "the reconciliation of `{id}` answered `{}` ({}) while the suite had scripted the double's operation lookups to answer `pending` (your connector's own lookup route answers it only if its answer shape asks `AnswerRequest::lookup_pending()`): no cursor was recorded before the restart, so the restarted host's resume from a cursor was not exercised; an API with no pending state can leave it so",
            round.status,
            super::maybe_or(Some(code(&round)).filter(|c| !c.is_empty()), "no error")
        ));
        pending_round = false;
    }
    let Some(transaction_id) = left else {
        evidence.assert("reconnect_cursor_resumed", false, || {
            format!("no unknown outcome of `{id}` was left for the restarted host")
        });
        return;
    };
    let recorded = view(
        h,
        host,
        TransactionSelector::Transaction(transaction_id.clone()),
    )
    .await;
    let operation = recorded.as_ref().and_then(|v| v.provider_operation.clone());
    let cursor = recorded
        .as_ref()
        .and_then(|v| v.reconciliation_cursor.clone());

    let (restarted, _, tap) = restart(h).await;
    let result = reconcile(
        h,
        &restarted,
        capability,
        &input,
        &transaction_id,
        "restarted",
    )
    .await;
    let asked = tap
        .reconciliations()
        .into_iter()
        .filter(|(_, r)| r.transaction_id == transaction_id)
        .map(|(_, r)| r)
        .next();
    let settled = view(
        h,
        &restarted,
        TransactionSelector::Transaction(transaction_id),
    )
    .await;
    evidence.assert(
        "reconnect_cursor_resumed",
        operation.is_some()
            && asked.as_ref().is_some_and(|r| {
                Some(&r.provider_operation) == operation.as_ref() && r.cursor == cursor
            }),
        || {
            format!(
                "before the restart `{id}` recorded operation {:?} and cursor {}; the restarted host asked its connector about {:?}",
                operation.as_ref().map(|o| &o.operation_id),
                super::maybe(cursor.as_deref()),
                asked.as_ref().map(|r| (&r.provider_operation.operation_id, &r.cursor))
            )
        },
    );
    evidence.assert(
        "reconnect_cursor_resumed",
        result.status == ActionResultStatus::Completed
            && settled.as_ref().map(|v| v.status) == Some(Status::Reconciled),
        || {
            format!(
                "the restarted host's reconciliation of `{id}` answered `{}` ({}) and left the transaction {}",
                result.status,
                shown_code(&result),
                super::maybe(settled.as_ref().map(|v| v.status))
            )
        },
    );
    if pending_round {
        evidence.note(match cursor.as_deref() {
            Some(cursor) => format!(
                "reconnect_cursor_resumed: the restarted host resumed `{id}` from cursor `{cursor}`"
            ),
            None => format!(
                "reconnect_cursor_resumed was not exercised with a cursor: the pending answer before the restart carried none (`ReconcileOutcome::Pending {{ cursor: None }}`), so the restarted host asked about `{id}`'s operation afresh (the double's `/operations` lookups answer `pending` with a `cursor`: pass it on as `ReconcileOutcome::Pending {{ cursor }}`)"
            ),
        });
    }
}

/// One `reconcile` of `transaction_id` on `host`, approved if it has to be.
async fn reconcile(
    h: &Harness,
    host: &Host,
    capability: &CapabilityDefinition,
    input: &Value,
    transaction_id: &aip_connector::ids::TransactionId,
    round: &str,
) -> aip_connector::model::ActionResult {
    let mut block = ActionTransaction::new(TransactionMode::Reconcile);
    block.transaction_id = Some(transaction_id.clone());
    let action = aip_connector::model::Action::new(capability.id().as_str(), input.clone())
        .with_idempotency_key(format!(
            "conformance-restart-reconcile-{transaction_id}-{round}"
        ))
        .with_transaction(block);
    h.drive(host, action).await.result
}
