//! The first-class transaction wrapper (`TransactionRequest` → `TransactionResult`) and the
//! durable transaction view: requester and id checks, the same pipeline underneath, the wire
//! status projection, and receipt chains.

use std::sync::Arc;

use aip_connector::VerifiedTenant;
use aip_connector::aip_connector_core::validation::validate_transaction_result;
use aip_connector::codes;
use aip_connector::host::{Host, TransactionSelector, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, Principal, PrincipalKind, ReceiptKind,
    TransactionMode, TransactionProtocolStatus, TransactionReceipt, TransactionRequest,
};
use aip_connector::prelude::*;
use aip_connector::store::MemoryStore;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Booking {
    slot: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    booking_id: String,
}

struct Calendar;

#[connector(id = "cal")]
impl Calendar {
    /// Book a slot.
    #[capability(
        id = "cap:cal:book",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit], requires_plan),
    )]
    async fn book(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        Ok(Booked {
            booking_id: format!("bk-{}", booking.slot),
        })
    }

    /// Cancel a booking; always needs a human.
    #[capability(
        id = "cap:cal:cancel",
        risk = high,
        side_effects = [delete],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        approval(required, evidence = [reason]),
        transaction(modes = [execute]),
    )]
    async fn cancel(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Booked, ConnectorFailure> {
        Ok(Booked {
            booking_id: booking.slot,
        })
    }
}

fn ada() -> Principal {
    Principal::new("user:ada", PrincipalKind::Human)
}

fn caller_in(tenant: &str) -> TrustedContext {
    TrustedContext::new(ada(), "test").with_tenant(VerifiedTenant::new(tenant))
}

fn caller() -> TrustedContext {
    caller_in("t1")
}

fn host() -> Host {
    Host::builder()
        .connector(Calendar)
        .store(Arc::new(MemoryStore::default()))
        .build()
        .unwrap()
}

fn request(capability: &str, mode: TransactionMode, key: &str) -> TransactionRequest {
    TransactionRequest {
        transaction_id: TransactionId::new(),
        action: Action::new(capability, json!({ "slot": "9am" }))
            .with_idempotency_key(key)
            .with_transaction(ActionTransaction::new(mode)),
        requested_by: ada(),
        reason: Some("weekly sync".into()),
        metadata: None,
        provider_operation: None,
        reconciliation_cursor: None,
    }
}

fn kinds(receipts: &[TransactionReceipt]) -> Vec<ReceiptKind> {
    receipts.iter().map(|r| r.kind).collect()
}

#[tokio::test]
async fn plan_then_commit_through_the_wrapper_carries_the_receipt_chain() {
    let host = host();
    let plan = request("cap:cal:book", TransactionMode::Plan, "p1");
    let transaction_id = plan.transaction_id.clone();
    let planned = host.transact(plan, &caller()).await.unwrap();
    assert_eq!(planned.status, TransactionProtocolStatus::Planned);
    assert_eq!(planned.transaction_id, transaction_id);
    assert_eq!(
        planned.transaction.transaction_id.as_ref(),
        Some(&transaction_id),
        "the wrapper's id was copied into the action"
    );
    let plan_id = planned.plan.as_ref().unwrap().plan_id.clone();
    assert_eq!(plan_id, format!("plan:{transaction_id}"));
    validate_transaction_result(&planned).unwrap();
    assert_eq!(kinds(&planned.receipts), [ReceiptKind::Planned]);

    let mut commit = request("cap:cal:book", TransactionMode::Commit, "c1");
    commit.transaction_id = transaction_id.clone();
    commit.action.transaction.as_mut().unwrap().plan_id = Some(plan_id.clone());
    let committed = host.transact(commit, &caller()).await.unwrap();
    assert_eq!(committed.status, TransactionProtocolStatus::Committed);
    assert_eq!(
        committed.result.as_ref().unwrap().output,
        Some(json!({ "booking_id": "bk-9am" }))
    );
    validate_transaction_result(&committed).unwrap();
    assert_eq!(
        kinds(&committed.receipts),
        [
            ReceiptKind::Planned,
            ReceiptKind::CommitStarted,
            ReceiptKind::Committed
        ]
    );
    assert!(TransactionReceipt::chain_is_intact(&committed.receipts));
    for receipt in &committed.receipts {
        assert_eq!(receipt.chain, format!("transaction:{transaction_id}"));
        assert_eq!(
            receipt.id.as_str(),
            format!("rcpt_{transaction_id}_{}", receipt.kind.as_str())
        );
    }

    // The durable view answers to the transaction id, the plan id and the owning action.
    for selector in [
        TransactionSelector::Transaction(transaction_id.clone()),
        TransactionSelector::Plan(plan_id),
        TransactionSelector::Action(committed.result.as_ref().unwrap().action_id.clone()),
    ] {
        let view = host
            .transaction(&selector, &caller())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{selector:?} finds the transaction"));
        assert_eq!(view.status, TransactionProtocolStatus::Committed);
        assert_eq!(view.receipts, committed.receipts);
    }
    // Another tenant does not learn that it exists.
    assert!(
        host.transaction(
            &TransactionSelector::Transaction(transaction_id),
            &caller_in("t2")
        )
        .await
        .unwrap()
        .is_none()
    );
}

#[tokio::test]
async fn a_tampered_receipt_chain_is_detected() {
    let host = host();
    let result = host
        .transact(
            request("cap:cal:book", TransactionMode::Execute, "e1"),
            &caller(),
        )
        .await
        .unwrap();
    assert_eq!(
        kinds(&result.receipts),
        [ReceiptKind::ExecutionStarted, ReceiptKind::Committed]
    );
    assert!(TransactionReceipt::chain_is_intact(&result.receipts));
    let mut tampered = result.receipts.clone();
    tampered[0].recorded_at_ms += 1;
    assert!(!TransactionReceipt::chain_is_intact(&tampered));
    let mut reordered = result.receipts;
    reordered.swap(0, 1);
    assert!(!TransactionReceipt::chain_is_intact(&reordered));
}

#[tokio::test]
async fn the_requester_must_be_the_authenticated_caller() {
    let host = host();
    let mut forged = request("cap:cal:book", TransactionMode::Plan, "p1");
    forged.requested_by = Principal::new("user:mallory", PrincipalKind::Human);
    let error = host.transact(forged, &caller()).await.unwrap_err();
    assert_eq!(error.code, codes::AUTH_NOT_AUTHORIZED);
    assert_eq!(error.retryable, Some(false));
}

#[tokio::test]
async fn the_wrapper_and_its_action_must_name_the_same_transaction() {
    let host = host();
    let mut mismatched = request("cap:cal:book", TransactionMode::Plan, "p1");
    mismatched
        .action
        .transaction
        .as_mut()
        .unwrap()
        .transaction_id = Some(TransactionId::new());
    let error = host.transact(mismatched, &caller()).await.unwrap_err();
    assert_eq!(error.code, codes::ACTION_INVALID);
    assert!(error.message.contains("must match"), "{}", error.message);

    let mut bare = request("cap:cal:book", TransactionMode::Plan, "p2");
    bare.action.transaction = None;
    let error = host.transact(bare, &caller()).await.unwrap_err();
    assert_eq!(error.code, codes::ACTION_INVALID);
}

#[tokio::test]
async fn a_pending_approval_projects_requires_human_and_a_refusal_failed() {
    let host = host();
    let pending = host
        .transact(
            request("cap:cal:cancel", TransactionMode::Execute, "x1"),
            &caller(),
        )
        .await
        .unwrap();
    assert_eq!(pending.status, TransactionProtocolStatus::RequiresHuman);
    assert_eq!(
        pending.result.as_ref().unwrap().status,
        ActionResultStatus::PendingApproval
    );
    validate_transaction_result(&pending).unwrap();

    // A commit of a plan that does not exist: refused inside the pipeline, nothing durable.
    let mut commit = request("cap:cal:book", TransactionMode::Commit, "c1");
    commit.action.transaction.as_mut().unwrap().plan_id = Some("plan:nope".into());
    let refused = host.transact(commit, &caller()).await.unwrap();
    assert_eq!(refused.status, TransactionProtocolStatus::Failed);
    assert_eq!(
        refused.error.as_ref().unwrap().code,
        codes::TRANSACTION_PLAN_NOT_FOUND
    );
    assert!(refused.receipts.is_empty());
    validate_transaction_result(&refused).unwrap();
}

/// The view `transact` answers with is the caller's tenant's: another tenant naming a planned
/// transaction's id is refused, and its answer carries nothing of the plan (it showed the plan,
/// its input snapshot and status).
#[tokio::test]
async fn another_tenants_request_does_not_see_the_transaction() {
    let host = host();
    let plan = request("cap:cal:book", TransactionMode::Plan, "p1");
    let transaction_id = plan.transaction_id.clone();
    let planned = host.transact(plan, &caller()).await.unwrap();
    let plan_id = planned.plan.as_ref().unwrap().plan_id.clone();

    let mut commit = request("cap:cal:book", TransactionMode::Commit, "c1");
    commit.transaction_id = transaction_id.clone();
    commit.action.transaction.as_mut().unwrap().plan_id = Some(plan_id);
    let elsewhere = host.transact(commit, &caller_in("t2")).await.unwrap();
    assert_eq!(elsewhere.status, TransactionProtocolStatus::Failed);
    assert_eq!(
        elsewhere.error.as_ref().map(|e| e.code.as_str()),
        Some("transaction.plan_not_found")
    );
    assert!(elsewhere.plan.is_none(), "{elsewhere:?}");
    assert!(elsewhere.receipts.is_empty());
    assert!(!format!("{elsewhere:?}").contains("9am"), "{elsewhere:?}");
    // The plan is untouched: its own tenant still sees it planned.
    let own = host
        .transaction(&TransactionSelector::Transaction(transaction_id), &caller())
        .await
        .unwrap()
        .expect("visible to its tenant");
    assert_eq!(own.status, TransactionProtocolStatus::Planned);
}

/// A connector whose capability publishes no contract: an `execute` runs as a plain call and
/// keeps no transaction record.
struct Bare(aip_connector::ConnectorDefinition);

impl aip_connector::Connector for Bare {
    fn definition(&self) -> &aip_connector::ConnectorDefinition {
        &self.0
    }

    fn invoke<'a>(
        &'a self,
        _capability_id: &'a str,
        input: &'a serde_json::Value,
        _context: Arc<dyn aip_connector::InvocationContext>,
    ) -> aip_connector::invocation::BoxFuture<'a, Result<serde_json::Value, ConnectorFailure>> {
        Box::pin(async move { Ok(json!({ "booking_id": input["slot"] })) })
    }
}

/// Without a record, the view of a completed `execute` reads `committed` (not `failed` without
/// an error, which no valid transaction result may say); a refused one reads `failed`.
#[tokio::test]
async fn an_execute_without_a_contract_reads_committed_and_is_a_valid_result() {
    let mut definition = aip_connector::Connector::definition(&Calendar).clone();
    definition
        .capabilities
        .retain(|c| c.id().as_str() == "cap:cal:book");
    let book = &mut definition.capabilities[0];
    book.capability.contract = None;
    book.facts.support = Default::default();
    book.facts.support.invocation = true;
    let host = Host::builder()
        .connector(Bare(definition))
        .store(Arc::new(MemoryStore::default()))
        .build()
        .unwrap();
    let result = host
        .transact(
            request("cap:cal:book", TransactionMode::Execute, "e1"),
            &caller(),
        )
        .await
        .unwrap();
    assert_eq!(
        result.status,
        TransactionProtocolStatus::Committed,
        "{result:?}"
    );
    assert_eq!(result.error, None);
    validate_transaction_result(&result).expect("a valid transaction result");

    let mut refused = request("cap:cal:book", TransactionMode::Execute, "e2");
    refused.action.input = json!({ "slot": 9 });
    let result = host.transact(refused, &caller()).await.unwrap();
    assert_eq!(
        result.status,
        TransactionProtocolStatus::Failed,
        "{result:?}"
    );
    validate_transaction_result(&result).expect("a valid transaction result");
}
