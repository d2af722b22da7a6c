//! The payments example through a real host and the provider double: plan, a commit held for
//! quorum approval, the credential sent as a bearer token, the charge compensated by the
//! refund capability exactly once, and the customer's e-mail address kept out of everything
//! the host stores.

use std::sync::Arc;

use aip_connector::codes;
use aip_connector::host::{
    ApproverMemberships, Deployment, Host, StaticApprovalAuthority, TrustedContext,
};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision,
    EvidenceArtifact, Principal, PrincipalKind, TransactionMode,
};
use aip_connector::store::{ApprovalStatus, MemoryStore};
use aip_connector::{CredentialHandle, IdempotencyKey, Secret, VerifiedTenant};
use aip_connector_examples::loopback_client;
use aip_connector_examples::payments::{self, Payments};
use aip_connector_testkit::provider_double::{ProviderDouble, ProviderHandle};
use serde_json::{Value, json};

const TENANT: &str = "acme";
const TOKEN: &str = "tok-payments-live-4f1c";
const EMAIL: &str = "grace.hopper@example.com";

fn principal(id: &str) -> Principal {
    Principal::new(id, PrincipalKind::Human)
}

fn as_user(id: &str) -> TrustedContext {
    TrustedContext::new(principal(id), "test").with_tenant(VerifiedTenant::new(TENANT))
}

fn member(roles: &[&str]) -> ApproverMemberships {
    roles
        .iter()
        .fold(ApproverMemberships::new().with_tenant(TENANT), |m, role| {
            m.with_role(*role)
        })
}

struct World {
    host: Host,
    provider: ProviderHandle,
    store: Arc<MemoryStore>,
    _double: ProviderDouble,
}

async fn world(scopes: &[&str]) -> World {
    let (double, provider) = ProviderDouble::start().await;
    let store = Arc::new(MemoryStore::new());
    let credential = CredentialHandle::new("cred-payments", payments::ISSUER, Secret::new(TOKEN))
        .with_scopes(scopes.iter().copied())
        .with_tenant(TENANT);
    let authority = StaticApprovalAuthority::new()
        .with("user:fin", member(&["finance"]))
        .with("user:lead", member(&["finance-lead"]))
        .with("user:treasurer", member(&["treasury"]))
        .with("user:clerk", member(&[]));
    let host = Host::builder()
        .connector(Payments::new(
            loopback_client(double.base_url(), "payments").unwrap(),
        ))
        .store(store.clone())
        .deployment(
            Deployment::new()
                .with_tenant(VerifiedTenant::new(TENANT))
                .with_static_credential(credential),
        )
        .approval_authority(authority)
        .build()
        .unwrap();
    World {
        host,
        provider,
        store,
        _double: double,
    }
}

fn charge_input() -> Value {
    json!({ "amount_cents": 4200, "currency": "EUR", "customer_email": EMAIL, "description": "Conference ticket" })
}

fn action(input: Value, key: &str, block: ActionTransaction) -> Action {
    Action::new(payments::CHARGE, input)
        .with_idempotency_key(key)
        .with_transaction(block)
}

fn approval_id(result: &ActionResult) -> ApprovalId {
    assert_eq!(
        result.status,
        ActionResultStatus::PendingApproval,
        "{result:?}"
    );
    result
        .approval_id()
        .expect("a pending result names its approval")
}

fn decision(id: &ApprovalId, approver: &str) -> ApprovalDecision {
    ApprovalDecision {
        evidence: vec![EvidenceArtifact {
            id: format!("snapshot-{approver}"),
            kind: "input_snapshot".into(),
            uri: None,
            hash: None,
            redacted: true,
        }],
        ..ApprovalDecision::approve(id.clone(), principal(approver))
            .with_reason("invoice checked against the order")
    }
}

/// Records an approval of `id` by each of `approvers`, then re-submits `gated` with the last
/// decision attached. A capability with PII keeps its input out of the approval record, so the
/// host cannot resume the action from the store (`resume_approved`); the requester sends the
/// same action again, carrying the approval (docs/host-runtime.md §5.5).
async fn approve_and_resubmit(
    w: &World,
    gated: Action,
    pending: &ActionResult,
    approvers: &[&str],
) -> (ActionResult, ApprovalId) {
    let id = approval_id(pending);
    let mut last = None;
    for approver in approvers {
        let decision = decision(&id, approver);
        w.host
            .record_approval_decision(decision.clone(), &as_user(approver))
            .await
            .unwrap_or_else(|e| panic!("{approver}'s decision: {e:?}"));
        last = Some(decision);
    }
    let resumed = w.host.resume_approved(&id, &as_user("user:ada")).await;
    let approved = w.host.approval(&id).await.unwrap().unwrap().status == ApprovalStatus::Approved;
    assert_eq!(
        resumed.error.as_ref().map(|e| e.code.as_str()),
        Some(if approved {
            codes::POLICY_APPROVAL_RESUBMISSION_REQUIRED
        } else {
            codes::POLICY_APPROVAL_NOT_GRANTED
        }),
        "a redacted action is never resumed from the store: {resumed:?}"
    );
    if approved {
        let details = resumed.error.as_ref().and_then(|e| e.details.as_ref());
        assert_eq!(details.unwrap()["approval_id"], id.as_str(), "{resumed:?}");
    }
    let resubmitted = Action {
        approval: last.map(Box::new),
        ..gated
    };
    (w.host.invoke(resubmitted, &as_user("user:ada")).await, id)
}

/// Plans and commits a charge, approved by `approvers`; returns the commit's final result.
async fn charge(w: &World, key: &str, approvers: &[&str]) -> (ActionResult, ApprovalId) {
    let requester = as_user("user:ada");
    let planned = w
        .host
        .invoke(
            action(
                charge_input(),
                &format!("{key}-plan"),
                ActionTransaction::new(TransactionMode::Plan),
            ),
            &requester,
        )
        .await;
    assert_eq!(planned.status, ActionResultStatus::Completed, "{planned:?}");
    let plan = &planned.output.as_ref().unwrap()["plan"];
    assert_eq!(plan["approval_required"], true);
    assert_eq!(
        plan["input_snapshot"]["redacted"], true,
        "PII: the plan keeps a hash, not the input"
    );
    assert!(!planned.output.as_ref().unwrap().to_string().contains(EMAIL));

    let mut commit = ActionTransaction::new(TransactionMode::Commit);
    commit.plan_id = Some(plan["plan_id"].as_str().unwrap().to_owned());
    let gated = action(charge_input(), &format!("{key}-commit"), commit);
    let pending = w.host.invoke(gated.clone(), &requester).await;
    approve_and_resubmit(w, gated, &pending, approvers).await
}

#[tokio::test]
async fn a_charge_needs_two_finance_approvers_and_sends_the_credential_as_a_bearer_token() {
    let w = world(&[payments::CHARGE_SCOPE, payments::REFUND_SCOPE]).await;
    let (result, approval) = charge(&w, "order-17", &["user:fin", "user:treasurer"]).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let output = result.output.as_ref().unwrap();
    assert_eq!(output["amount_cents"], 4200);
    assert_eq!(output["receipt_sent_to"], "g***@example.com");

    let effects = w.provider.effects_on(payments::CHARGES_ROUTE);
    assert_eq!(effects.len(), 1);
    assert_eq!(output["charge_id"], effects[0].operation_id.as_str());
    assert_eq!(effects[0].request["account"], TENANT);
    assert_eq!(effects[0].request["customer_email"], EMAIL);
    // The body is the charge alone, the same on every delivery; the approvals travel in a
    // header for the provider's audit trail.
    assert!(effects[0].request.get("approval_ids").is_none());
    let request = w
        .provider
        .requests()
        .into_iter()
        .find(|r| r.path == payments::CHARGES_ROUTE)
        .unwrap();
    assert_eq!(
        request.header(payments::APPROVAL_IDS_HEADER),
        Some(approval.as_str()),
        "the provider's audit trail names the approval"
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(
        request.idempotency_key(),
        Some(IdempotencyKey::provider_key_of(&format!("Tenant:{TENANT}:order-17-commit")).as_str())
    );

    // The approval record holds neither the input nor the address.
    let record = w.host.approval(&approval).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert!(!serde_json::to_string(&record).unwrap().contains(EMAIL));
}

#[tokio::test]
async fn one_approver_is_not_a_quorum() {
    let w = world(&[payments::CHARGE_SCOPE]).await;
    let (result, approval) = charge(&w, "order-18", &["user:fin"]).await;
    assert_eq!(result.status, ActionResultStatus::Failed);
    assert_eq!(
        result.error.as_ref().unwrap().code,
        codes::POLICY_APPROVAL_NOT_GRANTED
    );
    assert_eq!(
        w.host.approval(&approval).await.unwrap().unwrap().status,
        ApprovalStatus::Pending
    );
    assert_eq!(w.provider.effect_total(), 0);

    // Someone without a finance role does not count either.
    let refused = w
        .host
        .record_approval_decision(decision(&approval, "user:clerk"), &as_user("user:clerk"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, codes::POLICY_APPROVER_UNAUTHORIZED);
}

#[tokio::test]
async fn a_credential_without_the_charge_scope_is_refused_before_anything_runs() {
    let w = world(&[payments::REFUND_SCOPE]).await;
    let result = w
        .host
        .invoke(
            action(
                charge_input(),
                "order-19-plan",
                ActionTransaction::new(TransactionMode::Plan),
            ),
            &as_user("user:ada"),
        )
        .await;
    assert_eq!(
        result.error.as_ref().unwrap().code,
        codes::CREDENTIAL_SCOPE_MISSING
    );
    assert_eq!(w.provider.request_count(), 0);
}

#[tokio::test]
async fn a_charge_cannot_be_executed_without_a_plan() {
    let w = world(&[payments::CHARGE_SCOPE]).await;
    let result = w
        .host
        .invoke(
            action(
                charge_input(),
                "order-20",
                ActionTransaction::new(TransactionMode::Execute),
            ),
            &as_user("user:ada"),
        )
        .await;
    assert_eq!(
        result.error.as_ref().unwrap().code,
        codes::TRANSACTION_MODE_UNSUPPORTED
    );
}

/// Found by an author trial: a charge sent without a `transaction` block asked two approvers to
/// release it, then failed at its handler for want of a transaction.
#[tokio::test]
async fn a_charge_without_a_transaction_block_is_refused_before_anyone_is_asked() {
    let w = world(&[payments::CHARGE_SCOPE]).await;
    let mut plain = action(
        charge_input(),
        "order-21",
        ActionTransaction::new(TransactionMode::Plan),
    );
    plain.transaction = None;
    let result = w.host.invoke(plain, &as_user("user:ada")).await;
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    let error = result.error.as_ref().unwrap();
    assert_eq!(error.code, codes::TRANSACTION_CONTEXT_MISSING);
    assert!(result.approval_id().is_none(), "an approver was asked");
    assert_eq!(
        error.details.as_ref().unwrap()["supported_modes"],
        json!(["plan", "commit", "compensate", "reconcile"])
    );
    assert!(
        error
            .message
            .contains("(plan, commit, compensate, reconcile;"),
        "{}",
        error.message
    );
    assert_eq!(w.provider.request_count(), 0);
}

#[tokio::test]
async fn the_refund_compensates_the_charge_once_after_approval() {
    let w = world(&[payments::CHARGE_SCOPE, payments::REFUND_SCOPE]).await;
    let (charged, _) = charge(&w, "order-21", &["user:fin", "user:lead"]).await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");
    let charge_id = charged.output.as_ref().unwrap()["charge_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let compensate = |key: &str| {
        let mut block = ActionTransaction::new(TransactionMode::Compensate);
        block.compensation_for = Some(charged.action_id.clone());
        action(
            json!({ "reason": "the conference was cancelled" }),
            key,
            block,
        )
    };
    let requester = as_user("user:ada");
    let gated = compensate("order-21-refund");
    let pending = w.host.invoke(gated.clone(), &requester).await;
    let (refunded, _) =
        approve_and_resubmit(&w, gated, &pending, &["user:lead", "user:treasurer"]).await;
    assert_eq!(
        refunded.status,
        ActionResultStatus::Completed,
        "{refunded:?}"
    );
    let output = refunded.output.as_ref().unwrap();
    assert_eq!(output["charge_id"], charge_id.as_str());
    assert_eq!(output["compensated_action_id"], charged.action_id.as_str());

    let refunds = w.provider.effects_on(payments::REFUNDS_ROUTE);
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].request["charge_id"], charge_id.as_str());
    assert_eq!(
        refunds[0].idempotency_key.as_deref(),
        Some(format!("refund:{charge_id}").as_str()),
        "the provider keys the refund by the charge it undoes"
    );

    // A second compensation of the same charge is refused before its approval gate: each
    // action is compensated at most once, so no approver is asked to release it. The provider
    // refunded once.
    let again = w
        .host
        .invoke(compensate("order-21-refund-again"), &requester)
        .await;
    assert_eq!(again.status, ActionResultStatus::Failed, "{again:?}");
    assert_eq!(
        again.error.as_ref().unwrap().code,
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED,
        "{again:?}"
    );
    assert_eq!(w.provider.effects_on(payments::REFUNDS_ROUTE).len(), 1);
    drop(w.store);
}

#[tokio::test]
async fn the_refund_runs_only_as_a_compensation() {
    let w = world(&[payments::REFUND_SCOPE]).await;
    let direct = Action::new(payments::REFUND, json!({ "reason": "goodwill" }))
        .with_idempotency_key("goodwill-1");
    // Refused at once: no approver is asked to release a refund of nothing.
    let result = w.host.invoke(direct, &as_user("user:ada")).await;
    assert_eq!(
        result.error.as_ref().unwrap().code,
        codes::TRANSACTION_CONTEXT_MISSING
    );
    assert!(result.approval_id().is_none());
    assert_eq!(w.provider.effect_total(), 0);
}

/// A reconciliation asks the provider what became of a charge two approvers already released:
/// it needs no third approval (the payments trial needed six decisions for one lost answer).
#[tokio::test]
async fn reconciling_a_lost_charge_asks_no_approver() {
    use aip_connector_testkit::provider_double::Fault;
    let w = world(&[payments::CHARGE_SCOPE]).await;
    w.provider
        .inject(payments::CHARGES_ROUTE, Fault::drop_connection());
    let (lost, _) = charge(&w, "order-30", &["user:fin", "user:treasurer"]).await;
    w.provider.clear_faults();
    assert_eq!(lost.status, ActionResultStatus::Failed, "{lost:?}");
    let details = lost.error.as_ref().unwrap().details.clone().unwrap();
    assert_eq!(details["uncertain_outcome"], true, "{details}");
    let transaction: aip_connector::ids::TransactionId =
        serde_json::from_value(details["transaction_id"].clone()).unwrap();

    let mut block = ActionTransaction::new(TransactionMode::Reconcile);
    block.transaction_id = Some(transaction);
    let reconciled = w
        .host
        .invoke(
            action(charge_input(), "order-30-reconcile", block),
            &as_user("user:ada"),
        )
        .await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    assert!(reconciled.approval_id().is_none());
    assert_eq!(
        reconciled.output.as_ref().unwrap()["reconciliation"]["committed"],
        true
    );
    assert_eq!(w.provider.effects_on(payments::CHARGES_ROUTE).len(), 1);
}
