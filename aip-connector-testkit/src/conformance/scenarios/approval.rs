//! `approval_lifecycle`: an approval-governed capability waits for the approvers its policy
//! names, as many as its quorum needs, keeps the evidence of every decision, and runs exactly
//! once when resumed.
//!
//! - `authority_verified`: a principal the approval authority does not vouch for is refused
//!   (`policy.approver_unauthorized`); so is the requester approving its own request when the
//!   policy's separation of duties forbids it (`policy.separation_of_duties.requester`). Neither
//!   refused decision is stored.
//! - `quorum_enforced`: decisions are recorded one approver at a time; while the policy is one
//!   approval (or more) short the request stays `pending`, a resume is refused
//!   (`policy.approval_not_granted`), and nothing ran — no handler call, no provider effect
//!   since the call began (a connector that writes while validating a plan has acted before
//!   anyone approved).
//! - `evidence_persisted`: the approval record in the durable store holds every accepted
//!   decision with its reason, evidence artifacts, authority path, decision id and the policy
//!   hash it was checked against.
//! - `resume_once`: two concurrent resumes of an approved request run the handler once; the
//!   other, and a third resume after them, is `policy.approval_already_resumed` (or, for an
//!   exact re-submission of the action that ran, its stored result replayed, or, while that
//!   action still runs, the retryable `idempotency.in_progress`); the provider sees as many
//!   effects as one approved run makes.
//!
//! The approved request's ordinary resume must complete: when the first candidate's handler ran
//! but failed, the other capabilities that require approval are tried in order, and the first
//! whose approved call completes is resumed twice at once instead. When none completes,
//! `resume_once` is unexercised (no approved call was seen to carry through), and failed.
//!
//! When every capability that requires approval is compensation-only (its handler takes
//! `Compensation`, so no action may name it), the lifecycle runs on compensations instead: the
//! compensated capability's example is committed, and a `compensate` naming it, carrying the
//! compensating capability's example, waits at the gate of the compensated capability's contract
//! (`compensation(requires_approval)` or its own approval), which is where a host approves an
//! undo.
//!
//! A connector cannot make the host resume twice — the resume is claimed in the store before the
//! handler is dispatched — so `resume_once` is the host's promise, checked end to end; the
//! connector's part is producing the effects of one run, once.

use aip_connector::CapabilityDefinition;
use aip_connector::codes;
use aip_connector::host::Host;
use aip_connector::ids::PrincipalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecisionKind,
    ApprovalPolicy, TransactionMode,
};
use aip_connector::store::ApprovalStatus;
use serde_json::Value;

use super::transaction::{compensated_by, transactional};
use super::{code, shown_code};
use crate::conformance::harness::CALLER;
use crate::conformance::{Evidence, Harness, approval_id_of};

/// The scenario's assertions.
const ASSERTIONS: [&str; 4] = [
    "authority_verified",
    "quorum_enforced",
    "evidence_persisted",
    "resume_once",
];

fn gated(capability: &CapabilityDefinition) -> bool {
    capability
        .capability
        .contract
        .as_ref()
        .and_then(|c| c.approval.as_ref())
        .is_some_and(|a| a.required)
}

/// What the lifecycle runs on.
#[derive(Clone)]
enum Subject<'c> {
    /// Calls of a capability that requires approval, with its example.
    Call {
        capability: &'c CapabilityDefinition,
        input: Value,
    },
    /// Compensations of `compensated` (its example committed first), routed to the
    /// compensation-only `compensating` with that capability's example, and approved under the
    /// compensated capability's contract.
    Undo {
        compensated: &'c CapabilityDefinition,
        target_input: Value,
        compensating: &'c CapabilityDefinition,
        input: Value,
    },
}

impl<'c> Subject<'c> {
    /// The capability whose handler an approved run calls.
    fn handler(&self) -> &'c CapabilityDefinition {
        match self {
            Subject::Call { capability, .. } => capability,
            Subject::Undo { compensating, .. } => compensating,
        }
    }

    /// The approval policy the gate applies as the contract declares it; `None` for an undo
    /// whose compensated capability declares none (the host's default compensation policy).
    fn declared_policy(&self) -> Option<ApprovalPolicy> {
        let gated_by = match self {
            Subject::Call { capability, .. } => capability,
            Subject::Undo { compensated, .. } => compensated,
        };
        gated_by
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.approval.clone())
    }

    /// The action to send up to its gate under idempotency key `key`. An undo first commits its
    /// target (under `<key>-target`); `Err` says why there was nothing to compensate.
    async fn action(&self, h: &Harness, host: &Host, key: &str) -> Result<Action, String> {
        match self {
            Subject::Call { capability, input } => Ok(h.action(capability, input.clone(), key)),
            Subject::Undo {
                compensated,
                target_input,
                input,
                ..
            } => {
                let target_key = format!("{key}-target");
                let target = h
                    .drive(
                        host,
                        h.action(compensated, target_input.clone(), &target_key),
                    )
                    .await;
                if target.result.status != ActionResultStatus::Completed {
                    return Err(format!(
                        "the example of `{}` did not complete (`{}`, {}), so there was no action to compensate",
                        compensated.id(),
                        target.result.status,
                        shown_code(&target.result)
                    ));
                }
                let mut block = ActionTransaction::new(TransactionMode::Compensate);
                block.compensation_for = Some(target.action.id.clone());
                Ok(transactional(
                    compensated.id().as_str(),
                    input.clone(),
                    key,
                    block,
                ))
            }
        }
    }
}

/// Whether a capability that an action may name (its handler takes no `Compensation`) requires
/// approval, examples or not.
fn callable_gates(h: &Harness) -> bool {
    h.definition()
        .capabilities
        .iter()
        .any(|c| gated(c) && !c.facts.compensation_handler)
}

/// What the lifecycle can run on: the capabilities that require approval and declare an
/// example, or, when every capability that requires approval is compensation-only, the
/// compensations that reach them (both capabilities with an example, the compensated one
/// gating its compensations).
fn subjects(h: &Harness) -> Vec<Subject<'_>> {
    if callable_gates(h) {
        // The examples are of capabilities an action may name: no compensation handler.
        let mut calls = h.examples_where(gated);
        calls.sort_by_key(|(c, _)| (Harness::streams_only(c), h.waived(c.id().as_str())));
        return calls
            .into_iter()
            .map(|(capability, input)| Subject::Call { capability, input })
            .collect();
    }
    h.examples_where(|c| {
        aip_connector::rules::gates_compensations(&c.capability) && compensated_by(c).is_some()
    })
    .into_iter()
    .filter_map(|(compensated, target_input)| {
        let compensating = h
            .definition()
            .capability(&compensated_by(compensated)?)
            .filter(|c| gated(c))?;
        Some(Subject::Undo {
            compensated,
            target_input,
            compensating,
            input: compensating.examples.first()?.clone(),
        })
    })
    .collect()
}

/// Why nothing can be approved when every capability that requires approval is compensation-only
/// and no compensation of them can be sent: the compensated capability or the compensating one
/// declares no example (the lifecycle runs on compensations then, see the module docs). `None`
/// when a capability an action may name requires approval (the missing piece is its example).
fn compensation_only_gates(h: &Harness) -> Option<String> {
    if callable_gates(h) {
        return None;
    }
    let capabilities = &h.definition().capabilities;
    let gated_undos: Vec<String> = capabilities
        .iter()
        .filter(|c| gated(c))
        .map(|c| format!("`{}`", c.id()))
        .collect();
    if gated_undos.is_empty() {
        return None;
    }
    Some(format!(
        "the only capabilities that require approval ({}) are compensation-only (their handlers take `Compensation`): no action may name them, and their approval is that of the compensations that reach them, approved under the compensated capability's contract (attribute-reference.md, \"Whose approval policy applies\"); the lifecycle runs on such a compensation, which needs an example of the compensated capability and one of the compensating capability, and none could be sent",
        gated_undos.join(", ")
    ))
}

/// Runs `action` up to its approval gate: the plan first when it is a plan, then its commit.
/// Returns the gated action and what the gate answered.
async fn until_gate(h: &Harness, host: &Host, action: Action) -> (Action, ActionResult) {
    let (result, _) = h.run_once(host, action.clone()).await;
    match h.commit_for(&action, &result) {
        Some(commit) => {
            let (result, _) = h.run_once(host, commit.clone()).await;
            (commit, result)
        }
        None => (action, result),
    }
}

pub(super) async fn run(h: &Harness) -> Evidence {
    // On the heap: the suite polls every scenario from one future, and the host's pipeline
    // futures awaited here are large in debug builds.
    Box::pin(scenario(h)).await
}

async fn scenario(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let candidates = subjects(h);
    let Some(subject) = candidates.first().cloned() else {
        evidence.no_example(compensation_only_gates(h).unwrap_or_else(|| {
            "no capability that requires approval declares an example input: nothing can be approved".to_owned()
        }));
        return evidence;
    };
    let id = subject.handler().id().to_string();
    let host = h.host();
    if let Subject::Undo { compensated, .. } = &subject {
        evidence.note(format!(
            "the only capabilities that require approval are compensation-only: the lifecycle ran on compensations of `{}` routed to `{id}`, approved under the contract of `{}`",
            compensated.id(),
            compensated.id()
        ));
    }

    // Request A: authority, quorum, evidence, and one ordinary resume (the baseline of effects).
    let action = match subject.action(h, host, "conformance-approval-a").await {
        Ok(action) => action,
        Err(why) => {
            for name in ASSERTIONS {
                let why = why.clone();
                evidence.assert(name, false, move || why);
            }
            return evidence;
        }
    };
    let effects_start = h.provider().effect_total();
    let calls_start = h.probe().calls(&id);
    let (gated_action, gate) = until_gate(h, host, action).await;
    evidence.artifact(format!("action:{}", gated_action.id));
    let Some(approval) =
        approval_id_of(&gate).filter(|_| gate.status == ActionResultStatus::PendingApproval)
    else {
        let why = format!(
            "`{id}` requires approval but answered `{}` ({}) instead of `pending_approval`",
            gate.status,
            shown_code(&gate)
        );
        for name in ASSERTIONS {
            let why = why.clone();
            evidence.assert(name, false, move || why);
        }
        return evidence;
    };
    evidence.artifact(format!("approval:{approval}"));
    // The policy the gate applied: the contract's, or for an undo whose compensated capability
    // declares none, the host's default compensation policy, as the request recorded it.
    let declared = subject.declared_policy();
    if declared.is_none() {
        evidence.note(format!(
            "the compensated capability declares no approval policy: the host's default compensation policy applies, and the policy `evidence_persisted` compares is the one the request for `{id}` recorded"
        ));
    }
    let recorded = host.approval(&approval).await.ok().flatten();
    let Some(policy) = declared.or_else(|| recorded.map(|record| record.policy)) else {
        let why = format!("the approval `{approval}` that `{id}` waits for could not be read");
        for name in ASSERTIONS {
            let why = why.clone();
            evidence.assert(name, false, move || why);
        }
        return evidence;
    };

    // authority_verified
    let outsider = PrincipalId::from("user:conformance-outsider");
    let refused = h.approve_as(host, &approval, &outsider).await;
    evidence.assert(
        "authority_verified",
        refused
            .as_ref()
            .is_err_and(|e| e.code == codes::POLICY_APPROVER_UNAUTHORIZED),
        || {
            format!(
                "a decision by `{outsider}`, whom the approval authority does not vouch for, answered {} instead of `{}`",
                outcome(&refused),
                codes::POLICY_APPROVER_UNAUTHORIZED
            )
        },
    );
    let separation = &policy.separation_of_duties;
    let self_approval_allowed = separation.allow_self_approval && !separation.requester_must_differ;
    if self_approval_allowed {
        evidence.note(format!(
            "the policy of `{id}` allows the requester to approve its own request; self-approval was not tried"
        ));
    } else {
        let requester = PrincipalId::from(CALLER);
        let refused = h.approve_as(host, &approval, &requester).await;
        evidence.assert(
            "authority_verified",
            refused
                .as_ref()
                .is_err_and(|e| e.code == codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER),
            || {
                format!(
                    "the requester approving its own request of `{id}` answered {} instead of `{}`",
                    outcome(&refused),
                    codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER
                )
            },
        );
    }

    // quorum_enforced: one approver at a time; short of the quorum nothing may run.
    let mut accepted: Vec<PrincipalId> = Vec::new();
    let mut short_checks = 0_usize;
    for approver in h.approvers() {
        let status = host
            .approval(&approval)
            .await
            .ok()
            .flatten()
            .map(|r| r.status);
        if status != Some(ApprovalStatus::Pending) {
            break;
        }
        short_checks += 1;
        let early = h.resume(host, &approval, &gated_action).await;
        let effects = h.provider().effect_total() - effects_start;
        let calls = h.probe().calls(&id) - calls_start;
        evidence.assert(
            "quorum_enforced",
            code(&early) == codes::POLICY_APPROVAL_NOT_GRANTED && calls == 0 && effects == 0,
            || {
                format!(
                    "with {} of the approvals `{id}` needs, a resume answered `{}` ({}); the handler had run {calls} time(s) and the provider held {effects} effect(s)",
                    accepted.len(),
                    early.status,
                    shown_code(&early)
                )
            },
        );
        match h.approve_as(host, &approval, &approver).await {
            Ok(_) => accepted.push(approver),
            Err(error) => evidence.note(format!(
                "approver `{approver}` was refused: {} ({})",
                error.code, error.message
            )),
        }
    }
    let record = host.approval(&approval).await.ok().flatten();
    let minimum = policy.minimum_distinct_principals.max(1) as usize;
    evidence.assert(
        "quorum_enforced",
        short_checks >= 1
            && record.as_ref().map(|r| r.status) == Some(ApprovalStatus::Approved)
            && accepted.len() >= minimum,
        || {
            format!(
                "after {} accepted approval(s) the request of `{id}` is {} (the policy needs at least {minimum} distinct approvers)",
                accepted.len(),
                super::maybe(record.as_ref().map(|r| r.status))
            )
        },
    );
    evidence.note(format!(
        "`{id}` was approved after {} accepted approval(s); it stayed pending through {short_checks} check(s)",
        accepted.len()
    ));

    // evidence_persisted: read the durable record, not the host's view of it.
    let stored = h.store().approval(&approval).await.ok().flatten();
    match &stored {
        None => evidence.assert("evidence_persisted", false, || {
            format!("the store holds no approval record `{approval}`")
        }),
        Some(stored) => {
            let deciders: Vec<&str> = stored
                .decisions
                .iter()
                .map(|d| d.approver.id.as_str())
                .collect();
            evidence.assert(
                "evidence_persisted",
                !stored.policy_hash.trim().is_empty() && stored.policy == policy,
                || format!("the stored request of `{id}` lost its policy snapshot or hash"),
            );
            evidence.assert(
                "evidence_persisted",
                accepted.iter().all(|a| deciders.contains(&a.as_str()))
                    && !deciders.contains(&"user:conformance-outsider")
                    && (self_approval_allowed || !deciders.contains(&CALLER)),
                || {
                    format!(
                        "the stored decisions are by {deciders:?}; expected every accepted approver {accepted:?}, and neither the outsider nor (unless self-approval is allowed) the requester"
                    )
                },
            );
            for decision in &stored.decisions {
                let approver = decision.approver.id.to_string();
                let complete = decision.decision == ApprovalDecisionKind::Approved
                    && decision
                        .reason
                        .as_deref()
                        .is_some_and(|r| !r.trim().is_empty())
                    && !decision.evidence.is_empty()
                    && decision
                        .evidence
                        .iter()
                        .all(|e| e.id.ends_with(approver.as_str()))
                    && !decision.authority_path.is_empty()
                    && decision
                        .decision_id
                        .as_deref()
                        .is_some_and(|d| !d.is_empty())
                    && decision.policy_hash.as_deref() == Some(stored.policy_hash.as_str());
                evidence.assert("evidence_persisted", complete, || {
                    format!(
                        "the stored decision of `{approver}` lacks its reason, evidence, authority path, decision id or policy hash: {}",
                        serde_json::to_string(decision).unwrap_or_default()
                    )
                });
            }
        }
    }

    // The ordinary resume of request A: how much one approved run does at the provider.
    let effects_before = h.provider().effect_total();
    let calls_before = h.probe().calls(&id);
    let resumed = h.resume(host, &approval, &gated_action).await;
    evidence.artifact(format!("action:{}", resumed.action_id));
    let one_run_effects = h.provider().effect_total() - effects_before;
    let one_run_calls = h.probe().calls(&id) - calls_before;
    if one_run_calls != 1 {
        evidence.assert("resume_once", false, || {
            format!(
                "resuming the approved request of `{id}` ran its handler {one_run_calls} time(s) (result `{}`, {})",
                resumed.status,
                code(&resumed)
            )
        });
    } else if resumed.status != ActionResultStatus::Completed {
        // Resumed once, but to a failure: nothing showed an approved call carried through, and
        // the concurrent resumes below would count the effects of a call that did not complete
        // (an author trial's write failed every call and passed). Another gated capability
        // that completes once approved is the subject instead; without one, it is unexercised.
        let why = format!(
            "no approved call of `{id}` completed: resumed once approved, it answered {}",
            super::outcome(&resumed)
        );
        match approved_run_that_completes(h, &candidates[1..], &mut evidence).await {
            Some((other, effects)) => {
                evidence.note(format!(
                    "{why}; `resume_once` was checked on `{}` instead",
                    other.handler().id()
                ));
                resume_twice(h, &other, effects, &mut evidence).await;
            }
            None => evidence.unexercised("resume_once", &id, why),
        }
        return evidence;
    }

    // resume_once: request B, approved, resumed twice at once.
    resume_twice(h, &subject, one_run_effects, &mut evidence).await;
    evidence
}

/// The first of `candidates` whose call, approved by every approver and resumed once, ran its
/// handler once and completed: that subject, and the provider effects of that one run.
async fn approved_run_that_completes<'c>(
    h: &Harness,
    candidates: &[Subject<'c>],
    evidence: &mut Evidence,
) -> Option<(Subject<'c>, usize)> {
    let host = h.host();
    for (n, subject) in candidates.iter().enumerate() {
        let key = format!("conformance-approval-a-{}", n + 1);
        let id = subject.handler().id().to_string();
        let action = match subject.action(h, host, &key).await {
            Ok(action) => action,
            Err(why) => {
                evidence.note(format!("`{id}` was not tried for `resume_once`: {why}"));
                continue;
            }
        };
        let (gated_action, gate) = until_gate(h, host, action).await;
        let Some(approval) =
            approval_id_of(&gate).filter(|_| gate.status == ActionResultStatus::PendingApproval)
        else {
            evidence.note(format!(
                "`{id}` was not tried for `resume_once`: it answered `{}` ({}) instead of `pending_approval`",
                gate.status,
                shown_code(&gate)
            ));
            continue;
        };
        h.approve_all(host, &approval).await;
        let effects_before = h.provider().effect_total();
        let calls_before = h.probe().calls(&id);
        let resumed = h.resume(host, &approval, &gated_action).await;
        let calls = h.probe().calls(&id) - calls_before;
        evidence.artifact(format!("action:{}", resumed.action_id));
        // One approved resume runs the handler once, whoever the subject ends up being.
        evidence.assert("resume_once", calls <= 1, || {
            format!("resuming the approved request of `{id}` ran its handler {calls} time(s)")
        });
        if resumed.status == ActionResultStatus::Completed && calls == 1 {
            let effects = h.provider().effect_total() - effects_before;
            return Some((subject.clone(), effects));
        }
        evidence.note(format!(
            "`{id}` was tried for `resume_once`: resumed once approved, it answered {}",
            super::outcome(&resumed)
        ));
    }
    None
}

async fn resume_twice(
    h: &Harness,
    subject: &Subject<'_>,
    one_run_effects: usize,
    evidence: &mut Evidence,
) {
    let id = subject.handler().id().to_string();
    let host = h.host();
    let action = match subject.action(h, host, "conformance-approval-b").await {
        Ok(action) => action,
        Err(why) => {
            evidence.assert("resume_once", false, || {
                format!("a second approved call of `{id}` could not be sent: {why}")
            });
            return;
        }
    };
    let (gated_action, gate) = until_gate(h, host, action).await;
    evidence.artifact(format!("action:{}", gated_action.id));
    let Some(approval) = approval_id_of(&gate) else {
        evidence.assert("resume_once", false, || {
            format!(
                "a second call of `{id}` answered `{}` ({}) instead of waiting for approval",
                gate.status,
                shown_code(&gate)
            )
        });
        return;
    };
    evidence.artifact(format!("approval:{approval}"));
    h.approve_all(host, &approval).await;
    // A redacted request is resumed by re-submitting the gated action (the harness's `resume`).
    let resubmits = host
        .approval(&approval)
        .await
        .ok()
        .flatten()
        .is_some_and(|record| !record.input_retained);
    let effects_before = h.provider().effect_total();
    let calls_before = h.probe().calls(&id);
    let (first, second) = tokio::join!(
        h.resume(host, &approval, &gated_action),
        h.resume(host, &approval, &gated_action)
    );
    let third = h.resume(host, &approval, &gated_action).await;
    let calls = h.probe().calls(&id) - calls_before;
    let effects = h.provider().effect_total() - effects_before;
    // A resume that did not run either learns the action already ran or, when it re-sent the
    // very action that ran (a redacted request is resumed by re-submission), gets its stored
    // result replayed (host docs §5.5).
    let did_not_run = |r: &ActionResult| {
        code(r) == codes::POLICY_APPROVAL_ALREADY_RESUMED || r.is_idempotent_replay()
    };
    // A concurrent re-submission may instead be told to come back while the exact one it
    // repeats still runs (host docs §5.5); `resume_approved` never is. The third comes after
    // both ended.
    let refused = [&first, &second]
        .iter()
        .filter(|r| did_not_run(r) || (resubmits && code(r) == codes::IDEMPOTENCY_IN_PROGRESS))
        .count();
    evidence.assert(
        "resume_once",
        calls == 1 && refused == 1 && did_not_run(&third),
        || {
            format!(
                "two concurrent resumes of `{id}` ran its handler {calls} time(s) and answered {} and {}; a third answered {}",
                code_or_status(&first),
                code_or_status(&second),
                code_or_status(&third)
            )
        },
    );
    evidence.assert("resume_once", effects == one_run_effects, || {
        format!(
            "two concurrent resumes of `{id}` left {effects} provider effect(s); one approved run leaves {one_run_effects}"
        )
    });
}

fn outcome<T>(result: &Result<T, aip_connector::model::ProtocolError>) -> String {
    match result {
        Ok(_) => "an accepted decision".to_owned(),
        Err(error) => format!("`{}`", error.code),
    }
}

fn code_or_status(result: &ActionResult) -> String {
    match &result.error {
        Some(error) => format!("`{}`", error.code),
        None => format!("`{}`", result.status),
    }
}
