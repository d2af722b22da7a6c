//! One behaviour test per approval error code: each is triggered through `Host::invoke`,
//! `record_approval_decision` or `resume_approved`, and its category and retryability checked
//! (every approval refusal is `policy`, not retryable; `docs/host-runtime.md` §3.1, §3.2).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, Host, StaticApprovalAuthority, TrustedContext};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ApprovalConstraint, ApprovalDecision,
    ApprovalDecisionKind, Principal, PrincipalKind, ProtocolError,
};
use aip_connector::prelude::*;
use aip_connector::store::{ApprovalStatus, ManualClock, MemoryStore};
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Payment {
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Paid {
    payment_id: String,
}

/// A re-submission must attach a decision the approval recorded: one made up after the approval
/// (an approver who never decided) is refused, since the action carries it into the store and
/// the logs (found by an approval trial). The recorded decision runs the action.
#[tokio::test]
async fn a_resubmission_with_a_made_up_decision_is_unverified() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let requester = person("user:req");
    let (gated, id, approval) = approved_person_payment(&host, &requester, 800, "person-2").await;
    for made_up in [
        decision(&id, "user:nobody", ApprovalDecisionKind::Approved),
        approval.clone().with_decision_id("dec-made-up"),
    ] {
        let refused = host
            .invoke(gated.clone().with_approval(made_up), &requester)
            .await;
        assert_policy(failure(&refused), codes::POLICY_APPROVAL_UNVERIFIED);
    }
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
    let ran = host.invoke(gated.with_approval(approval), &requester).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 1);
}

/// Counts executions so "the handler did not run" can be asserted.
#[derive(Clone, Default)]
struct Treasury {
    executions: Arc<AtomicUsize>,
}

#[connector(id = "treasury")]
impl Treasury {
    /// Pays out after one finance approval, by neither the requester nor the operator. The
    /// settled key is replayed for one second, the approval lives ten minutes.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant, ttl_ms = 1_000),
        data(sensitivity = confidential),
        approval(
            required,
            selector = role("finance"),
            evidence = [reason],
            separation(requester_must_differ, operator_must_differ),
            ttl_ms = 600_000,
        ),
    )]
    async fn pay(
        &self,
        payment: Payment,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("pay-{}-{}", payment.amount_cents, key.as_str()),
        })
    }

    /// Pays a vendor: keyed per principal, so a caller without a tenant can send it.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = principal),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn pay_vendor(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("vendor-{}", payment.amount_cents),
        })
    }

    /// Pays a person: personal data, so the approval record keeps no input.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential, pii),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn pay_person(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("person-{}", payment.amount_cents),
        })
    }
}

fn finance(tenant: &str) -> ApproverMemberships {
    ApproverMemberships::new()
        .with_tenant(tenant)
        .with_role("finance")
}

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

/// Alice, Bob and the operator are finance approvers of tenant `t1`; Eve is one of `t2`.
fn host_with_clock(treasury: Treasury, clock: Arc<ManualClock>) -> Host {
    let authority = StaticApprovalAuthority::new()
        .with("user:alice", finance("t1"))
        .with("user:bob", finance("t1"))
        .with("user:op", finance("t1"))
        .with("user:eve", finance("t2"));
    Host::builder()
        .connector(treasury)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(authority)
        .clock(clock)
        .build()
        .unwrap()
}

fn host() -> Host {
    host_with_clock(Treasury::default(), Arc::default())
}

fn payment() -> Action {
    Action::new("cap:treasury:pay", json!({ "amount_cents": 1200 })).with_idempotency_key("pay-1")
}

/// Submits `action` as `requester` and returns the pending approval's id.
async fn gate(host: &Host, action: Action, requester: &TrustedContext) -> ApprovalId {
    let pending = host.invoke(action, requester).await;
    assert_eq!(
        pending.status,
        ActionResultStatus::PendingApproval,
        "{pending:?}"
    );
    pending.approval_id().expect("the gate names its approval")
}

fn decision(id: &ApprovalId, approver: &str, kind: ApprovalDecisionKind) -> ApprovalDecision {
    ApprovalDecision::new(
        id.clone(),
        kind,
        Principal::new(approver, PrincipalKind::Human),
    )
    .with_reason("checked the invoice")
    .with_decision_id(format!("dec-{approver}"))
}

/// Records `decision` by its own approver and returns the refusal.
async fn refused(host: &Host, decision: ApprovalDecision) -> ProtocolError {
    let approver = person(decision.approver.id.as_str());
    host.record_approval_decision(decision, &approver)
        .await
        .expect_err("the decision is refused")
}

/// Records `decision` by its own approver and returns the record's status.
async fn accepted(host: &Host, decision: ApprovalDecision) -> ApprovalStatus {
    let approver = person(decision.approver.id.as_str());
    host.record_approval_decision(decision, &approver)
        .await
        .expect("the decision is accepted")
        .status
}

/// Asserts `error` is the not-retryable policy refusal `code`.
fn assert_policy(error: &ProtocolError, code: &str) {
    assert_eq!(error.code, code, "{error:?}");
    assert_eq!(error.category, ErrorCategory::Policy, "{error:?}");
    assert_eq!(error.retryable, Some(false), "{error:?}");
    assert_eq!(error.retry_after_ms, None, "{error:?}");
}

/// Asserts `error` is an approval-service refusal `code` naming approval `id`.
fn assert_refusal(error: &ProtocolError, code: &str, id: &ApprovalId) {
    assert_policy(error, code);
    assert_eq!(error.details.as_ref().unwrap()["approval_id"], json!(id));
    assert_eq!(
        error.source,
        Some(json!({ "component": "aip-connector.approval" }))
    );
}

/// The error of a failed result.
fn failure(result: &ActionResult) -> &ProtocolError {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    result.error.as_ref().expect("a failed result has an error")
}

async fn status(host: &Host, id: &ApprovalId) -> ApprovalStatus {
    host.approval(id)
        .await
        .unwrap()
        .expect("known approval")
        .status
}

// ---- Approval decisions -----------------------------------------------------------------------

#[tokio::test]
async fn a_decision_or_resume_of_an_unknown_approval_is_not_found() {
    let host = host();
    let unknown = ApprovalId::new();
    let error = refused(
        &host,
        decision(&unknown, "user:alice", ApprovalDecisionKind::Approved),
    )
    .await;
    assert_refusal(&error, codes::POLICY_APPROVAL_NOT_FOUND, &unknown);

    // From a resume it is the pipeline's refusal (no action is known, so no details).
    let resumed = host.resume_approved(&unknown, &person("user:req")).await;
    let error = failure(&resumed);
    assert_policy(error, codes::POLICY_APPROVAL_NOT_FOUND);
    assert_eq!(
        error.source,
        Some(json!({ "component": "aip-connector.host" }))
    );
}

#[tokio::test]
async fn reusing_a_recorded_decision_id_for_another_approver_is_a_mismatch() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let mut first = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    first.decision_id = Some("dec-shared".into());
    assert_eq!(
        accepted(&host, first.clone()).await,
        ApprovalStatus::Approved
    );
    // The same approver's same decision under the same id is a replay, not a refusal.
    assert_eq!(accepted(&host, first).await, ApprovalStatus::Approved);

    let mut reuse = decision(&id, "user:bob", ApprovalDecisionKind::Denied);
    reuse.decision_id = Some("dec-shared".into());
    let error = refused(&host, reuse).await;
    assert_refusal(&error, codes::POLICY_APPROVAL_MISMATCH, &id);
    assert_eq!(status(&host, &id).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_malformed_decision_is_decision_invalid_and_changes_nothing() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let mut blank_reason = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    blank_reason.reason = Some("  ".into());
    let mut blank_id = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    blank_id.decision_id = Some(" ".into());
    let mut blank_constraint = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    blank_constraint.constraints = vec![ApprovalConstraint {
        field: "amount_cents".into(),
        operator: "".into(),
        value: json!(1),
    }];
    let expired = decision(&id, "user:alice", ApprovalDecisionKind::Expired);
    for malformed in [blank_reason, blank_id, blank_constraint, expired] {
        let error = refused(&host, malformed).await;
        assert_refusal(&error, codes::POLICY_APPROVAL_DECISION_INVALID, &id);
    }
    let record = host.approval(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert!(record.decisions.is_empty());
}

#[tokio::test]
async fn a_decision_larger_than_the_limit_is_too_large_and_changes_nothing() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let max = aip_connector::host::HostLimits::default().max_decision_bytes;
    assert_eq!(max, 64 * 1024);
    let mut bloated = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    bloated.reason = Some("x".repeat(max));
    let error = refused(&host, bloated.clone()).await;
    assert_refusal(&error, codes::POLICY_APPROVAL_DECISION_TOO_LARGE, &id);
    let details = error.details.expect("details");
    let bytes = serde_json::to_vec(&bloated).unwrap().len();
    assert_eq!(details["decision_bytes"], json!(bytes));
    assert_eq!(details["max_decision_bytes"], json!(max));
    assert!(!error.message.contains("xxxx"), "{}", error.message);
    let record = host.approval(&id).await.unwrap().unwrap();
    assert!(record.decisions.is_empty());

    // Under the limit the same approver's decision is recorded as usual.
    let mut fitting = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    fitting.reason = Some("x".repeat(max / 2));
    assert_eq!(accepted(&host, fitting).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_decision_on_a_closed_request_is_not_pending() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let denied = decision(&id, "user:alice", ApprovalDecisionKind::Denied);
    assert_eq!(accepted(&host, denied).await, ApprovalStatus::Denied);
    let late = refused(
        &host,
        decision(&id, "user:bob", ApprovalDecisionKind::Approved),
    )
    .await;
    assert_refusal(&late, codes::POLICY_APPROVAL_NOT_PENDING, &id);
    assert_eq!(status(&host, &id).await, ApprovalStatus::Denied);
}

#[tokio::test]
async fn a_decision_against_another_policy_is_a_hash_mismatch() {
    let host = host();
    let pending = host.invoke(payment(), &person("user:req")).await;
    let output = pending.output.unwrap();
    let id: ApprovalId = serde_json::from_value(output["approval_id"].clone()).unwrap();
    let mut stale = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    stale.policy_hash = Some("0".repeat(64));
    let error = refused(&host, stale).await;
    assert_refusal(&error, codes::POLICY_APPROVAL_HASH_MISMATCH, &id);

    // The hash the gate published is the one that is accepted.
    let mut current = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    current.policy_hash = output["policy_hash"].as_str().map(str::to_owned);
    assert_eq!(accepted(&host, current).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn an_approver_of_another_tenant_is_a_tenant_mismatch() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    // Eve's authority places her in `t2`, whatever tenant her transport claims.
    let error = refused(
        &host,
        decision(&id, "user:eve", ApprovalDecisionKind::Approved),
    )
    .await;
    assert_refusal(&error, codes::POLICY_APPROVER_TENANT_MISMATCH, &id);
    assert_eq!(status(&host, &id).await, ApprovalStatus::Pending);
}

/// The authority looks approvers up by principal id alone, so `user:alice` of tenant `t2` gets
/// the memberships of `t1`'s Alice. The transport's tenant decides first: she is told the
/// approval does not exist, and cannot approve it.
#[tokio::test]
async fn a_namesake_in_another_tenant_cannot_decide_the_request() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let namesake = TrustedContext::new(Principal::new("user:alice", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    let error = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &namesake,
        )
        .await
        .expect_err("another tenant's namesake is refused");
    assert_refusal(&error, codes::POLICY_APPROVAL_NOT_FOUND, &id);
    assert_eq!(status(&host, &id).await, ApprovalStatus::Pending);
    // Nor does a decision another tenant's caller could only get wrong on a real request
    // (naming someone else as approver, or malformed) tell that the request exists.
    let mallory = TrustedContext::new(Principal::new("user:mallory", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    for probe in [
        decision(&id, "user:alice", ApprovalDecisionKind::Approved),
        decision(&id, "user:mallory", ApprovalDecisionKind::Expired),
    ] {
        let error = host
            .record_approval_decision(probe, &mallory)
            .await
            .expect_err("refused");
        assert_refusal(&error, codes::POLICY_APPROVAL_NOT_FOUND, &id);
    }
    // The real Alice, in `t1`, may.
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn the_operator_of_the_action_may_not_approve_it() {
    let host = host();
    let operated = person("user:req").with_operator("user:op".into());
    let id = gate(&host, payment(), &operated).await;
    let error = refused(
        &host,
        decision(&id, "user:op", ApprovalDecisionKind::Approved),
    )
    .await;
    assert_refusal(&error, codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR, &id);
    // Another approver of the same standing may.
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_revocation_without_a_target_is_revocation_target_required() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    let error = refused(
        &host,
        decision(&id, "user:bob", ApprovalDecisionKind::Revoked),
    )
    .await;
    assert_refusal(
        &error,
        codes::POLICY_APPROVAL_REVOCATION_TARGET_REQUIRED,
        &id,
    );
    assert_eq!(status(&host, &id).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_revocation_of_no_recorded_approval_is_revocation_target_missing() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    let mut revoke = decision(&id, "user:bob", ApprovalDecisionKind::Revoked);
    revoke.target_decision_id = Some("dec-nobody".into());
    let error = refused(&host, revoke).await;
    assert_refusal(
        &error,
        codes::POLICY_APPROVAL_REVOCATION_TARGET_MISSING,
        &id,
    );
    assert_eq!(status(&host, &id).await, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_constraint_on_a_field_the_input_lacks_is_constraint_missing_field() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let mut approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    approved.constraints = vec![ApprovalConstraint {
        field: "/currency".into(),
        operator: "eq".into(),
        value: json!("EUR"),
    }];
    let error = refused(&host, approved).await;
    assert_refusal(&error, codes::POLICY_APPROVAL_CONSTRAINT_MISSING_FIELD, &id);
    assert_eq!(status(&host, &id).await, ApprovalStatus::Pending);
}

#[tokio::test]
async fn a_constraint_the_input_does_not_satisfy_is_constraint_failed() {
    let host = host();
    let id = gate(&host, payment(), &person("user:req")).await;
    let with_limit = |limit: u64| {
        let mut approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
        approved.constraints = vec![ApprovalConstraint {
            field: "amount_cents".into(),
            operator: "lte".into(),
            value: json!(limit),
        }];
        approved
    };
    let error = refused(&host, with_limit(1_000)).await;
    assert_refusal(&error, codes::POLICY_APPROVAL_CONSTRAINT_FAILED, &id);
    // The input (1200) satisfies a higher limit.
    assert_eq!(
        accepted(&host, with_limit(5_000)).await,
        ApprovalStatus::Approved
    );
}

// ---- Approvals through the pipeline -----------------------------------------------------------

#[tokio::test]
async fn a_revoked_approval_is_neither_resumed_nor_accepted_on_resubmission() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let action = payment();
    let requester = person("user:req");
    let id = gate(&host, action.clone(), &requester).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(
        accepted(&host, approved.clone()).await,
        ApprovalStatus::Approved
    );
    let mut revoke = decision(&id, "user:bob", ApprovalDecisionKind::Revoked);
    revoke.target_decision_id = Some("dec-user:alice".into());
    assert_eq!(accepted(&host, revoke).await, ApprovalStatus::Revoked);

    let resumed = host.resume_approved(&id, &requester).await;
    assert_policy(failure(&resumed), codes::POLICY_APPROVAL_REVOKED);
    let mut resubmitted = action;
    resubmitted.approval = Some(Box::new(approved));
    let carried = host.invoke(resubmitted, &requester).await;
    assert_policy(failure(&carried), codes::POLICY_APPROVAL_REVOKED);
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_approval_the_host_cannot_match_is_unverified() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let requester = person("user:req");

    let mut unknown = payment();
    unknown.approval = Some(Box::new(decision(
        &ApprovalId::new(),
        "user:alice",
        ApprovalDecisionKind::Approved,
    )));
    let error = host.invoke(unknown, &requester).await;
    assert_policy(failure(&error), codes::POLICY_APPROVAL_UNVERIFIED);

    // A granted approval does not release another action with the same input.
    let id = gate(&host, payment(), &requester).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(
        accepted(&host, approved.clone()).await,
        ApprovalStatus::Approved
    );
    let mut other = payment();
    other.approval = Some(Box::new(approved));
    let error = host.invoke(other, &requester).await;
    assert_policy(failure(&error), codes::POLICY_APPROVAL_UNVERIFIED);
    // The requester is told which action the approval releases (an author trial resent a fresh
    // `Action::new` and had no way forward).
    let refusal = error.error.as_ref().unwrap();
    assert!(
        refusal.message.contains("`details.approved_action_id`"),
        "{}",
        refusal.message
    );
    let details = refusal.details.as_ref().expect("details");
    assert_eq!(details["approval_id"], serde_json::json!(id));
    assert_eq!(details["differs"], "action_id");
    let approved_action_id = details["approved_action_id"]
        .as_str()
        .expect("an action id");
    let stored = host
        .approval(&id)
        .await
        .expect("readable")
        .expect("the record");
    assert_eq!(approved_action_id, stored.action.id.as_str());
    // Another tenant learns nothing of it: the approval reads as unknown, with no details.
    let elsewhere = TrustedContext::new(Principal::new("user:req", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    let mut foreign = payment();
    foreign.approval = Some(Box::new(decision(
        &id,
        "user:alice",
        ApprovalDecisionKind::Approved,
    )));
    let error = host.invoke(foreign, &elsewhere).await;
    let refusal = failure(&error);
    assert_policy(refusal, codes::POLICY_APPROVAL_UNVERIFIED);
    assert_eq!(
        refusal.message,
        "no approval with this id is known to the host"
    );
    assert!(refusal.details.is_none(), "{refusal:?}");
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn resuming_onto_a_key_now_gating_another_action_is_pending_resume_denied() {
    let treasury = Treasury::default();
    let clock = Arc::new(ManualClock::default());
    let host = host_with_clock(treasury.clone(), clock.clone());
    let requester = person("user:req");
    let first = gate(&host, payment(), &requester).await;

    // The key's record (TTL 1 s) lapses while the approval (TTL 10 min) is still open, and a
    // second action is gated under the same key.
    clock.advance(2_000);
    let second = gate(&host, payment(), &requester).await;
    assert_ne!(first, second);

    let approved = decision(&first, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    let resumed = host.resume_approved(&first, &requester).await;
    assert_policy(failure(&resumed), codes::IDEMPOTENCY_PENDING_RESUME_DENIED);
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
    // Nothing ran, so the resume was given back (found by a hostile review): the approval is
    // not spent, and a second resume meets the same refusal, not "already resumed".
    let record = host.approval(&first).await.unwrap().expect("known");
    assert!(!record.resumed, "{record:?}");
    let again = host.resume_approved(&first, &requester).await;
    assert_policy(failure(&again), codes::IDEMPOTENCY_PENDING_RESUME_DENIED);

    // The second action's gate is untouched: a duplicate still replays it.
    let duplicate = host.invoke(payment(), &requester).await;
    assert_eq!(duplicate.status, ActionResultStatus::PendingApproval);
    let output: &Value = duplicate.output.as_ref().unwrap();
    assert_eq!(output["approval_id"], json!(second));
}

/// A payment to a person (redacted input) gated for `requester` and approved by Alice: the
/// gated action, its approval id and Alice's decision.
async fn approved_person_payment(
    host: &Host,
    requester: &TrustedContext,
    amount_cents: u64,
    key: &str,
) -> (Action, ApprovalId, ApprovalDecision) {
    let gated = Action::new(
        "cap:treasury:pay_person",
        json!({ "amount_cents": amount_cents }),
    )
    .with_idempotency_key(key);
    let id = gate(host, gated.clone(), requester).await;
    let approval = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(
        accepted(host, approval.clone()).await,
        ApprovalStatus::Approved
    );
    (gated, id, approval)
}

/// An approved action whose input was redacted cannot run from the store: `resume_approved`
/// answers `policy.approval_resubmission_required` (naming the approval) and claims nothing, so
/// the re-submission with the decision attached still runs, once.
#[tokio::test]
async fn resuming_a_redacted_action_from_the_store_requires_a_resubmission() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let requester = person("user:req");
    let (gated, id, approval) = approved_person_payment(&host, &requester, 700, "person-1").await;

    let resumed = host.resume_approved(&id, &requester).await;
    let error = failure(&resumed);
    assert_policy(error, codes::POLICY_APPROVAL_RESUBMISSION_REQUIRED);
    assert_eq!(error.details.as_ref().unwrap()["approval_id"], id.as_str());
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);

    let resubmitted = host.invoke(gated.with_approval(approval), &requester).await;
    assert_eq!(
        resubmitted.status,
        ActionResultStatus::Completed,
        "{resubmitted:?}"
    );
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 1);
}

/// The operator of the action may not approve it under another spelling of its id, nor under
/// its own when the directory resolves it (found by a hostile review).
#[tokio::test]
async fn the_operator_may_not_approve_under_any_spelling() {
    let host = Host::builder()
        .connector(Treasury::default())
        .store(Arc::new(MemoryStore::default()))
        // A directory that matches ids ignoring case and says which id it resolved.
        .approval_authority(aip_connector_tests::Directory::new(finance("t1"), |id| {
            let canonical = id.to_ascii_lowercase();
            ["user:op", "user:alice", "user:req"]
                .contains(&canonical.as_str())
                .then_some(canonical)
        }))
        .build()
        .unwrap();
    let operated = person("user:req").with_operator("User:Op".into());
    let id = gate(&host, payment(), &operated).await;
    for spelling in ["User:Op", "USER:OP", "user:op"] {
        let error = host
            .record_approval_decision(
                decision(&id, spelling, ApprovalDecisionKind::Approved),
                &person(spelling),
            )
            .await
            .unwrap_err();
        assert_refusal(&error, codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR, &id);
    }
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
}

// ---- Who runs an approved action (a hostile review) -------------------------------------------

/// With `operator_must_differ`, the approvers were checked against the operator of the request,
/// so the approved action runs under that operator only: an approver who resumes or re-submits
/// it as its operator (or under no operator) is refused, and nothing runs.
#[tokio::test]
async fn an_approver_may_not_run_the_approved_action_as_its_operator() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let requester = person("user:req").with_operator("user:op".into());
    let action = payment();
    let id = gate(&host, action.clone(), &requester).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(
        accepted(&host, approved.clone()).await,
        ApprovalStatus::Approved
    );
    let as_approver = person("user:req").with_operator("user:alice".into());
    for caller in [&as_approver, &person("user:req")] {
        let resumed = host.resume_approved(&id, caller).await;
        assert_policy(
            failure(&resumed),
            codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR,
        );
        let resubmitted = host
            .invoke(action.clone().with_approval(approved.clone()), caller)
            .await;
        assert_policy(
            failure(&resubmitted),
            codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR,
        );
    }
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
    let ran = host.resume_approved(&id, &requester).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 1);
}

/// A requester in another tenant is told the approval does not exist, under an action id of
/// its own: as a decision or a view from that tenant, it learns nothing of the request.
#[tokio::test]
async fn a_resume_from_another_tenant_is_not_found() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let requester = person("user:req");
    let action = payment();
    let id = gate(&host, action.clone(), &requester).await;
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    let elsewhere = TrustedContext::new(Principal::new("user:req", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    let resumed = host.resume_approved(&id, &elsewhere).await;
    assert_policy(failure(&resumed), codes::POLICY_APPROVAL_NOT_FOUND);
    assert_ne!(
        resumed.action_id, action.id,
        "the record's action id stays hidden"
    );
    // A re-submission from there is told the same as one carrying an unknown approval.
    let resubmitted = host
        .invoke(
            action.clone().with_approval(decision(
                &id,
                "user:alice",
                ApprovalDecisionKind::Approved,
            )),
            &elsewhere,
        )
        .await;
    let error = failure(&resubmitted);
    assert_policy(error, codes::POLICY_APPROVAL_UNVERIFIED);
    assert_eq!(
        error.message,
        "no approval with this id is known to the host"
    );
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
    // Another principal of the request's tenant is told who may resume it.
    let resumed = host.resume_approved(&id, &person("user:bob")).await;
    let error = failure(&resumed);
    assert_eq!(error.code, codes::AUTH_NOT_AUTHORIZED, "{error:?}");
    assert_eq!(resumed.action_id, action.id);
}

/// A request made without a tenant is no tenant's: the same principal id in a tenant neither
/// resumes nor re-submits it, and an approver whose transport verified a tenant is told it does
/// not exist.
#[tokio::test]
async fn an_approval_requested_without_a_tenant_is_no_tenants() {
    let treasury = Treasury::default();
    let host = host_with_clock(treasury.clone(), Arc::default());
    let untenanted = TrustedContext::new(Principal::new("user:req", PrincipalKind::Human), "test");
    let action = Action::new("cap:treasury:pay_vendor", json!({ "amount_cents": 300 }))
        .with_idempotency_key("vendor-1");
    let id = gate(&host, action.clone(), &untenanted).await;
    let error = refused(
        &host,
        decision(&id, "user:alice", ApprovalDecisionKind::Approved),
    )
    .await;
    assert_refusal(&error, codes::POLICY_APPROVAL_NOT_FOUND, &id);
    // An approver without a transport tenant decides it.
    let approved = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    let alice = TrustedContext::new(Principal::new("user:alice", PrincipalKind::Human), "test");
    let record = host
        .record_approval_decision(approved.clone(), &alice)
        .await
        .expect("decided");
    assert_eq!(record.status, ApprovalStatus::Approved);
    let in_a_tenant = person("user:req");
    let resumed = host.resume_approved(&id, &in_a_tenant).await;
    assert_policy(failure(&resumed), codes::POLICY_APPROVAL_NOT_FOUND);
    let resubmitted = host
        .invoke(action.clone().with_approval(approved), &in_a_tenant)
        .await;
    assert_policy(failure(&resubmitted), codes::POLICY_APPROVAL_UNVERIFIED);
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 0);
    let ran = host.resume_approved(&id, &untenanted).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
}

/// Records the approval decision each call's action carries, around a connector.
struct Witness<C> {
    inner: C,
    carried: Arc<std::sync::Mutex<Vec<Option<ApprovalDecision>>>>,
}

impl<C: aip_connector::Connector> aip_connector::Connector for Witness<C> {
    fn definition(&self) -> &aip_connector::ConnectorDefinition {
        self.inner.definition()
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn aip_connector::InvocationContext>,
    ) -> aip_connector::invocation::BoxFuture<'a, Result<Value, ConnectorFailure>> {
        self.carried
            .lock()
            .unwrap()
            .push(context.action().approval.as_deref().cloned());
        self.inner.invoke(capability_id, input, context)
    }
}

/// A re-submission names its decision by id, and the action runs with the decision the
/// approval recorded, not with what the requester wrote around that id (another approver,
/// another reason).
#[tokio::test]
async fn a_resubmission_runs_with_the_recorded_decision() {
    let carried = Arc::default();
    let host = Host::builder()
        .connector(Witness {
            inner: Treasury::default(),
            carried: Arc::clone(&carried),
        })
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:alice", finance("t1")))
        .build()
        .unwrap();
    let requester = person("user:req");
    let (gated, id, approval) = approved_person_payment(&host, &requester, 900, "person-3").await;
    let forged = ApprovalDecision::new(
        id.clone(),
        ApprovalDecisionKind::Approved,
        Principal::new("user:cfo", PrincipalKind::Human),
    )
    .with_reason("the CFO signed off")
    .with_decision_id(approval.decision_id.clone().unwrap());
    let ran = host.invoke(gated.with_approval(forged), &requester).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let carried = carried.lock().unwrap();
    let [Some(seen)] = carried.as_slice() else {
        panic!("one call, carrying a decision: {carried:?}");
    };
    assert_eq!(seen.approver.id.as_str(), "user:alice");
    assert_eq!(seen.reason.as_deref(), Some("checked the invoice"));
}

/// A connector whose payout the payments delegation approves, whatever its bounds.
#[derive(Clone, Default)]
struct Payouts;

#[connector(id = "payouts")]
impl Payouts {
    /// Pays out; a critical risk, approved by a holder of the payments delegation.
    #[capability(
        risk = critical,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        approval(required, rule = delegated_authority("payments"), evidence = [reason]),
    )]
    async fn pay_out(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        Ok(Paid {
            payment_id: format!("out-{}", payment.amount_cents),
        })
    }
}

/// The authority bounds a delegation by risk: one that covers up to `low` does not reach a
/// `critical` capability, although the policy's leaf asks nothing of the bound; one that covers
/// `critical`, or is unbounded, does.
#[tokio::test]
async fn a_delegation_bounded_below_the_capabilitys_risk_approves_nothing() {
    let delegated = |max_risk: Option<aip_connector::model::RiskLevel>| {
        let scope = aip_connector::host::DelegatedScope::new("payments");
        finance("t1").with_delegated(match max_risk {
            Some(risk) => scope.with_max_risk(risk),
            None => scope,
        })
    };
    let host = Host::builder()
        .connector(Payouts)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(
            StaticApprovalAuthority::new()
                .with(
                    "user:low",
                    delegated(Some(aip_connector::model::RiskLevel::Low)),
                )
                .with(
                    "user:critical",
                    delegated(Some(aip_connector::model::RiskLevel::Critical)),
                )
                .with("user:unbounded", delegated(None)),
        )
        .build()
        .unwrap();
    let requester = person("user:req");
    for (n, approver) in ["user:critical", "user:unbounded"].into_iter().enumerate() {
        let action = Action::new("cap:payouts:pay_out", json!({ "amount_cents": 5 }))
            .with_idempotency_key(format!("out-{n}"));
        let id = gate(&host, action, &requester).await;
        let error = refused(
            &host,
            decision(&id, "user:low", ApprovalDecisionKind::Approved),
        )
        .await;
        assert_refusal(&error, codes::POLICY_APPROVER_UNAUTHORIZED, &id);
        let approved = decision(&id, approver, ApprovalDecisionKind::Approved);
        assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    }
}

/// Two approvals of one action (its key lapsed between two sends of it, so the gate opened a
/// second request): once one ran it, the other's resume replays its result and keeps its claim,
/// so the action never runs twice, even after the key lapses again (found by a hostile review
/// of the give-back of a claim answered by the key's record).
#[tokio::test]
async fn a_second_approval_of_an_action_that_ran_never_runs_it_again() {
    let treasury = Treasury::default();
    let clock = Arc::new(ManualClock::default());
    let host = host_with_clock(treasury.clone(), clock.clone());
    let requester = person("user:req");
    let action = payment();
    let first = gate(&host, action.clone(), &requester).await;
    clock.advance(2_000);
    let second = gate(&host, action, &requester).await;
    assert_ne!(first, second);
    for id in [&first, &second] {
        let approved = decision(id, "user:alice", ApprovalDecisionKind::Approved);
        assert_eq!(accepted(&host, approved).await, ApprovalStatus::Approved);
    }
    let ran = host.resume_approved(&first, &requester).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let replayed = host.resume_approved(&second, &requester).await;
    assert_eq!(
        replayed.status,
        ActionResultStatus::Completed,
        "{replayed:?}"
    );
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert!(host.approval(&second).await.unwrap().unwrap().resumed);
    clock.advance(2_000);
    let again = host.resume_approved(&second, &requester).await;
    assert_policy(failure(&again), codes::POLICY_APPROVAL_ALREADY_RESUMED);
    assert_eq!(treasury.executions.load(Ordering::SeqCst), 1);
}
