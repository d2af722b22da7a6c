//! Transactions through the host: dry run and plan previews, plan claim by exactly one commit,
//! direct commit, the execute replay gate, unknown outcomes refused until reconciled, and
//! reconciliation that never turns `reconciled` into `committed`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{Host, HostLimits, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, ConnectorOperation, Principal, PrincipalKind,
    ProviderOperationRef, TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{MemoryStore, TransactionStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Booking {
    slot: String,
    /// `"timeout"` makes the provider call uncertain.
    #[serde(default)]
    behaviour: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    booking_id: String,
}

#[derive(Clone, Default)]
struct Calendar {
    effects: Arc<AtomicUsize>,
    /// Set by the first `"hang_once"` booking, which hangs; later ones go through.
    hung: Arc<std::sync::atomic::AtomicBool>,
    /// Handler runs of `book`.
    runs: Arc<AtomicUsize>,
}

#[connector(id = "cal")]
impl Calendar {
    /// Book a slot.
    #[capability(
        id = "cap:cal:book",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, dry_run, plan, commit, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
    )]
    async fn book(
        &self,
        booking: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "calendar".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        self.runs.fetch_add(1, Ordering::SeqCst);
        checkpoint
            .record(operation.clone(), Some("cursor-1".into()))
            .await?;
        if booking.behaviour == "hang_once" && !self.hung.swap(true, Ordering::SeqCst) {
            // The first delivery's host "dies" here: it never settles.
            std::future::pending::<()>().await;
        }
        if booking.behaviour == "hang" {
            // Checkpointed, then the provider never answers.
            std::future::pending::<()>().await;
        }
        self.effects.fetch_add(1, Ordering::SeqCst);
        if booking.behaviour == "uncertain" {
            return Err(ConnectorFailure::new(
                "cal.reset",
                "connection reset after send",
                ErrorCategory::Temporary,
                ConnectorOperation::TransactionCommit,
                "cal",
            )
            .with_retryable(true)
            .with_uncertain_outcome()
            .with_provider_operation(operation));
        }
        Ok(Booked {
            booking_id: format!("bk-{}", booking.slot),
        })
    }

    /// Book the board room: the same booking, released by an approver.
    #[capability(
        id = "cap:cal:book_board_room",
        risk = high,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        approval(required, evidence = [reason]),
        transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
    )]
    async fn book_board_room(
        &self,
        booking: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Booked, ConnectorFailure> {
        self.book(booking, key, checkpoint).await
    }

    /// The same booking, under a key whose reuse replays the first answer.
    #[capability(
        id = "cap:cal:book_replaying",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal, collision = return_original_result),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
    )]
    async fn book_replaying(
        &self,
        booking: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        self.book(booking, key, checkpoint).await
    }

    /// The same booking, under a key whose reuse is refused.
    #[capability(
        id = "cap:cal:book_rejecting",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal, collision = reject_conflict),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
    )]
    async fn book_rejecting(
        &self,
        booking: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        self.book(booking, key, checkpoint).await
    }

    /// The same booking, planned and committed only, under a key whose reuse replays.
    #[capability(
        id = "cap:cal:book_planned",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal, collision = return_original_result),
        data(sensitivity = internal),
        transaction(modes = [plan, commit], fidelity = policy_and_schema),
    )]
    async fn book_planned(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        self.effects.fetch_add(1, Ordering::SeqCst);
        Ok(Booked {
            booking_id: format!("bk-{}", booking.slot),
        })
    }

    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Committed {
            evidence: Some(json!({ "found": request.provider_operation.operation_id })),
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(calendar: Calendar, store: Arc<MemoryStore>) -> Host {
    Host::builder()
        .connector(calendar)
        .store(store)
        .build()
        .unwrap()
}

/// The transaction record of `action`'s running handler once it has checkpointed its provider
/// operation (waiting up to a second for it).
async fn checkpointed(
    store: &MemoryStore,
    action: &aip_connector::ids::ActionId,
) -> aip_connector::store::TransactionRecord {
    for _ in 0..200 {
        let records = store.transactions_by_action(action).await.unwrap();
        if let Some(record) = records.into_iter().find(|r| r.provider_operation.is_some()) {
            return record;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the handler of {action} never checkpointed");
}

fn action(mode: TransactionMode, key: &str, input: serde_json::Value) -> Action {
    Action::new("cap:cal:book", input)
        .with_idempotency_key(key)
        .with_transaction(ActionTransaction::new(mode))
}

#[tokio::test]
async fn plan_then_exactly_one_of_many_racing_commits_wins() {
    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(calendar.clone(), store.clone());
    let planned = host
        .invoke(
            action(TransactionMode::Plan, "plan-1", json!({ "slot": "9am" })),
            &caller(),
        )
        .await;
    assert_eq!(planned.status, ActionResultStatus::Completed, "{planned:?}");
    let plan = &planned.output.as_ref().unwrap()["plan"];
    let plan_id = plan["plan_id"].as_str().unwrap().to_owned();
    assert!(plan_id.starts_with("plan:txn_"), "{plan_id}");
    assert_eq!(
        calendar.effects.load(Ordering::SeqCst),
        0,
        "planning has no effect"
    );

    let mut commits = Vec::new();
    for n in 0..20 {
        let host = host.clone();
        let commit = Action::new("cap:cal:book", json!({ "slot": "9am" }))
            .with_idempotency_key(format!("commit-{n}"))
            .with_transaction(ActionTransaction::commit(plan_id.clone()));
        commits.push(tokio::spawn(
            async move { host.invoke(commit, &caller()).await },
        ));
    }
    let mut won = 0;
    for commit in commits {
        let result = commit.await.unwrap();
        match result.status {
            ActionResultStatus::Completed => won += 1,
            _ => assert_eq!(
                result.error.unwrap().code,
                codes::TRANSACTION_PLAN_ALREADY_CLAIMED
            ),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 1);
    let record = store.transaction_by_plan(&plan_id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Committed);
}

/// An author trial sent the commit under the key of its plan: the refusal says that the key
/// answered the plan and that a commit takes a key of its own, not only that "the input"
/// differs (it was the same; the transaction is part of the fingerprint). A plan sent without a
/// key is told that it needs one too.
#[tokio::test]
async fn a_commit_under_its_plans_key_is_told_to_take_a_key_of_its_own() {
    let calendar = Calendar::default();
    let host = host(calendar.clone(), Arc::new(MemoryStore::default()));
    // A plan without a key is told that a preview needs one too.
    let keyless = host
        .invoke(
            Action::new("cap:cal:book", json!({ "slot": "9am" }))
                .with_transaction(ActionTransaction::new(TransactionMode::Plan)),
            &caller(),
        )
        .await;
    let error = keyless.error.expect("refused");
    assert_eq!(error.code, codes::IDEMPOTENCY_REQUIRED);
    assert!(
        error.message.ends_with(
            "set the action's `idempotency_key`; this `plan` step needs one too: each step of a \
             transaction takes a key of its own"
        ),
        "{}",
        error.message
    );
    let planned = host
        .invoke(
            action(TransactionMode::Plan, "booking-1", json!({ "slot": "9am" })),
            &caller(),
        )
        .await;
    let plan_id = planned.plan_id().expect("a plan").to_owned();
    let commit = Action::new("cap:cal:book", json!({ "slot": "9am" }))
        .with_idempotency_key("booking-1")
        .with_transaction(ActionTransaction::commit(plan_id.clone()));
    let refused = host.invoke(commit, &caller()).await;
    let error = refused.error.as_ref().expect("refused");
    assert_eq!(error.code, codes::IDEMPOTENCY_INPUT_HASH_MISMATCH);
    assert!(
        error
            .message
            .starts_with("idempotency key was reused with different input: ")
            && error.message.contains(&format!("plan `{plan_id}`"))
            && error.message.contains("a `commit` is a request of its own"),
        "{}",
        error.message
    );
    let details = error.details.as_ref().expect("details");
    assert_eq!(details["original_plan_id"], json!(plan_id));
    assert_eq!(details["original_action_id"], json!(planned.action_id));
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 0, "nothing ran");

    // Another input under a plain key keeps upstream's message as it is.
    host.invoke(
        action(
            TransactionMode::Execute,
            "booking-2",
            json!({ "slot": "9am" }),
        ),
        &caller(),
    )
    .await;
    let other = host
        .invoke(
            action(
                TransactionMode::Execute,
                "booking-2",
                json!({ "slot": "10am" }),
            ),
            &caller(),
        )
        .await;
    let error = other.error.expect("refused");
    assert_eq!(error.code, codes::IDEMPOTENCY_INPUT_HASH_MISMATCH);
    assert_eq!(
        error.message,
        "idempotency key was reused with different input"
    );
    assert!(error.details.unwrap().get("original_plan_id").is_none());
}

/// Under `return_original_result` upstream replays the plan's stored result to a commit sent
/// under the plan's key: a completed answer, marked as a replay, for a commit that never ran.
/// Whatever the collision behaviour, another step under a plan's key is refused.
#[tokio::test]
async fn a_commit_under_its_plans_key_is_refused_under_every_collision_behaviour() {
    for capability in ["cap:cal:book_replaying", "cap:cal:book_rejecting"] {
        let calendar = Calendar::default();
        let host = host(calendar.clone(), Arc::new(MemoryStore::default()));
        let input = json!({ "slot": "9am" });
        let plan = Action::new(capability, input.clone())
            .with_idempotency_key("booking-1")
            .with_transaction(ActionTransaction::new(TransactionMode::Plan));
        let planned = host.invoke(plan.clone(), &caller()).await;
        let plan_id = planned.plan_id().expect("a plan").to_owned();
        // A resend of the plan itself is still its duplicate (another action id under
        // `return_original_result`, the same one under `reject_conflict`).
        let resent = if capability == "cap:cal:book_replaying" {
            Action::new(capability, input.clone())
                .with_idempotency_key("booking-1")
                .with_transaction(ActionTransaction::new(TransactionMode::Plan))
        } else {
            plan
        };
        let replayed = host.invoke(resent, &caller()).await;
        assert_eq!(replayed.plan_id(), Some(plan_id.as_str()), "{capability}");

        let commit = Action::new(capability, input)
            .with_idempotency_key("booking-1")
            .with_transaction(ActionTransaction::commit(plan_id.clone()));
        let refused = host.invoke(commit, &caller()).await;
        let error = refused
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{capability}: the commit was answered {refused:?}"));
        assert_eq!(error.code, codes::IDEMPOTENCY_CONFLICT, "{capability}");
        assert!(
            error.message.contains(&format!("plan `{plan_id}`"))
                && error.message.contains("a `commit` is a request of its own"),
            "{capability}: {}",
            error.message
        );
        let details = error.details.as_ref().expect("details");
        assert_eq!(details["original_plan_id"], json!(plan_id), "{capability}");
        assert_eq!(calendar.effects.load(Ordering::SeqCst), 0, "{capability}");
    }

    // A plain call (no transaction block) of a capability that only plans and commits never
    // meets the plan's key: it is refused before its reservation.
    let calendar = Calendar::default();
    let host = host(calendar.clone(), Arc::new(MemoryStore::default()));
    let input = json!({ "slot": "9am" });
    let planned = host
        .invoke(
            Action::new("cap:cal:book_planned", input.clone())
                .with_idempotency_key("booking-1")
                .with_transaction(ActionTransaction::new(TransactionMode::Plan)),
            &caller(),
        )
        .await;
    assert!(planned.plan_id().is_some(), "{planned:?}");
    let plain = host
        .invoke(
            Action::new("cap:cal:book_planned", input).with_idempotency_key("booking-1"),
            &caller(),
        )
        .await;
    assert_eq!(
        plain.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::TRANSACTION_CONTEXT_MISSING),
        "{plain:?}"
    );
    assert!(!plain.is_idempotent_replay());
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_commit_must_match_its_plan() {
    let host = host(Calendar::default(), Arc::new(MemoryStore::default()));
    let planned = host
        .invoke(
            action(TransactionMode::Plan, "plan-2", json!({ "slot": "9am" })),
            &caller(),
        )
        .await;
    let plan_id = planned.output.unwrap()["plan"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let commit = |input: serde_json::Value, who: TrustedContext, key: &str| {
        let mut transaction = ActionTransaction::new(TransactionMode::Commit);
        transaction.plan_id = Some(plan_id.clone());
        (
            Action::new("cap:cal:book", input)
                .with_idempotency_key(key)
                .with_transaction(transaction),
            who,
        )
    };
    let (changed, who) = commit(json!({ "slot": "10am" }), caller(), "c-a");
    assert_eq!(
        host.invoke(changed, &who).await.error.unwrap().code,
        codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH
    );
    let (other, who) = commit(
        json!({ "slot": "9am" }),
        TrustedContext::new(Principal::new("user:eve", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new("t1")),
        "c-b",
    );
    assert_eq!(
        host.invoke(other, &who).await.error.unwrap().code,
        codes::TRANSACTION_PLAN_PRINCIPAL_MISMATCH
    );
    let mut missing = ActionTransaction::new(TransactionMode::Commit);
    missing.plan_id = Some("plan:nope".into());
    let result = host
        .invoke(
            Action::new("cap:cal:book", json!({ "slot": "9am" }))
                .with_idempotency_key("c-c")
                .with_transaction(missing),
            &caller(),
        )
        .await;
    assert_eq!(
        result.error.unwrap().code,
        codes::TRANSACTION_PLAN_NOT_FOUND
    );
}

#[tokio::test]
async fn dry_run_previews_without_effect() {
    let calendar = Calendar::default();
    let host = host(calendar.clone(), Arc::new(MemoryStore::default()));
    let preview = host
        .invoke(
            action(TransactionMode::DryRun, "dry-1", json!({ "slot": "9am" })),
            &caller(),
        )
        .await;
    assert_eq!(preview.status, ActionResultStatus::Completed);
    assert_eq!(preview.output.unwrap()["transaction"], "dry_run");
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unknown_outcome_is_refused_until_reconciled_and_never_becomes_committed() {
    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(calendar.clone(), store.clone());
    let id = TransactionId::new();
    let execute = |key: &str| {
        let mut transaction = ActionTransaction::new(TransactionMode::Execute);
        transaction.transaction_id = Some(id.clone());
        Action::new(
            "cap:cal:book",
            json!({ "slot": "9am", "behaviour": "uncertain" }),
        )
        .with_idempotency_key(key)
        .with_transaction(transaction)
    };
    let first = execute("exec-1");
    let first_id = first.id.clone();
    let uncertain = host.invoke(first, &caller()).await;
    assert_eq!(uncertain.error.as_ref().unwrap().code, "cal.reset");
    // The failure names the transaction to reconcile.
    assert_eq!(
        uncertain.error.as_ref().unwrap().details.as_ref().unwrap()["transaction_id"],
        json!(id)
    );
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::OutcomeUnknown);
    assert_eq!(
        record.provider_operation.as_ref().unwrap().operation_id,
        "op-exec-1",
        "the checkpoint was durable before the provider call"
    );

    // Resent under its key, the unknown outcome is replayed (not retryable, so it was kept).
    let mut resent = execute("exec-1");
    resent.id = first_id.clone();
    let replayed = host.invoke(resent, &caller()).await;
    assert_eq!(replayed.error.as_ref().unwrap().code, "cal.reset");
    assert_eq!(replayed.output.unwrap()["idempotent_replay"], true);
    // A blind re-execution of the same action under another key is refused.
    let mut again = execute("exec-2");
    again.id = first_id;
    let refused = host.invoke(again, &caller()).await;
    let refusal = refused.error.unwrap();
    assert_eq!(refusal.code, codes::TRANSACTION_RECONCILIATION_REQUIRED);
    assert_eq!(refusal.details.unwrap()["transaction_id"], json!(id));
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 1);

    // Reconciliation asks the provider and settles `reconciled`, not `committed`.
    let mut transaction = ActionTransaction::new(TransactionMode::Reconcile);
    transaction.transaction_id = Some(id.clone());
    let reconcile = Action::new("cap:cal:book", json!({ "slot": "9am" }))
        .with_idempotency_key("rec-1")
        .with_transaction(transaction);
    let reconciled = host.invoke(reconcile, &caller()).await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    let answer = reconciled.reconciliation().expect("a reconcile's answer");
    assert!(answer.terminal);
    assert_eq!(answer.committed, Some(true));
    assert_eq!(
        reconciled.output.unwrap()["reconciliation"]["committed"],
        true
    );
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Reconciled);
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 1);
}

/// A reconciliation's evidence is stored with its result, so it is bounded like an output:
/// evidence larger than `max_output_bytes` gives way to why, and the outcome stands (found by a
/// review of the output limit).
#[tokio::test]
async fn evidence_larger_than_the_output_limit_is_withheld_and_the_outcome_stands() {
    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let host = Host::builder()
        .connector(calendar)
        .store(store.clone())
        .limits(HostLimits::default().max_output_bytes(48))
        .build()
        .unwrap();
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    // The evidence, `{"found": "op-<key>"}`, is larger than 48 bytes with this key.
    let key = "a-key-long-enough-to-make-the-evidence-too-large";
    let uncertain = host
        .invoke(
            Action::new(
                "cap:cal:book",
                json!({ "slot": "9am", "behaviour": "uncertain" }),
            )
            .with_idempotency_key(key)
            .with_transaction(transaction),
            &caller(),
        )
        .await;
    assert_eq!(uncertain.error.as_ref().unwrap().code, "cal.reset");
    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(id.clone());
    let reconciled = host
        .invoke(
            Action::new("cap:cal:book", json!({ "slot": "9am" }))
                .with_idempotency_key("rec-1")
                .with_transaction(reconcile),
            &caller(),
        )
        .await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    let evidence = &reconciled.output.as_ref().unwrap()["reconciliation"]["evidence"];
    assert!(
        evidence["evidence_withheld"]
            .as_str()
            .is_some_and(|why| why.contains("larger than 48 bytes")),
        "{reconciled:?}"
    );
    assert_eq!(reconciled.reconciliation().unwrap().committed, Some(true));
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Reconciled);
}

/// A retry of an approval-gated `execute` whose outcome is unknown is refused at once, before
/// its approval gate: no approver is asked to release an action that admission then refuses.
/// So is an `execute` of that transaction by another action.
#[tokio::test]
async fn a_gated_execute_that_must_be_reconciled_is_refused_before_its_gate() {
    use aip_connector::host::{ApproverMemberships, StaticApprovalAuthority};
    use aip_connector::model::ApprovalDecision;

    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let host = Host::builder()
        .connector(calendar.clone())
        .store(store.clone())
        .approval_authority(
            StaticApprovalAuthority::new()
                .with("user:boss", ApproverMemberships::new().with_tenant("t1")),
        )
        .build()
        .unwrap();
    let boss = TrustedContext::new(Principal::new("user:boss", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"));
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    let booking = Action::new(
        "cap:cal:book_board_room",
        json!({ "slot": "9am", "behaviour": "uncertain" }),
    )
    .with_idempotency_key("board-1")
    .with_transaction(transaction);

    let pending = host.invoke(booking.clone(), &caller()).await;
    let approval = pending
        .approval_id()
        .expect("the booking waits for approval");
    host.record_approval_decision(
        ApprovalDecision::approve(approval.clone(), boss.principal.clone())
            .with_reason("the board room is free"),
        &boss,
    )
    .await
    .unwrap();
    let uncertain = host.resume_approved(&approval, &caller()).await;
    assert_eq!(uncertain.error.unwrap().code, "cal.reset");
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::OutcomeUnknown);

    // The same action retried under a new key: reconcile first, no new approval request.
    let retry = host
        .invoke(booking.clone().with_idempotency_key("board-2"), &caller())
        .await;
    assert_eq!(retry.status, ActionResultStatus::Failed, "{retry:?}");
    let refusal = retry.error.unwrap();
    assert_eq!(refusal.code, codes::TRANSACTION_RECONCILIATION_REQUIRED);
    assert_eq!(refusal.details.unwrap()["transaction_id"], json!(id));

    // Another action naming the transaction: not its execution, also before any approval.
    let mut other = booking.clone().with_idempotency_key("board-3");
    other.id = aip_connector::ids::ActionId::new();
    let refused = host.invoke(other, &caller()).await;
    let error = refused.error.unwrap();
    assert_eq!(error.code, codes::AUTH_NOT_AUTHORIZED);
    // The category points at credentials; the message says what a retry got wrong.
    assert!(error.message.contains("resends its action id"), "{error:?}");
    // So is another principal of the tenant sending the very action.
    let colleague = TrustedContext::new(Principal::new("user:bo", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"));
    let refused = host
        .invoke(booking.clone().with_idempotency_key("board-4"), &colleague)
        .await;
    assert_eq!(refused.error.unwrap().code, codes::AUTH_NOT_AUTHORIZED);
    // Another tenant learns nothing before the gate: its call waits for approval like any
    // other (admission refuses it after, should an approver release it).
    let elsewhere = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    let gated = host
        .invoke(booking.with_idempotency_key("board-5"), &elsewhere)
        .await;
    assert_eq!(
        gated.status,
        ActionResultStatus::PendingApproval,
        "{gated:?}"
    );
    assert_eq!(calendar.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn rollback_not_supported_and_reconcile_without_record_are_refused() {
    let host = host(Calendar::default(), Arc::new(MemoryStore::default()));
    let mut transaction = ActionTransaction::new(TransactionMode::Reconcile);
    transaction.transaction_id = Some(TransactionId::new());
    let result = host
        .invoke(
            Action::new("cap:cal:book", json!({ "slot": "x" }))
                .with_idempotency_key("r-0")
                .with_transaction(transaction),
            &caller(),
        )
        .await;
    assert_eq!(result.error.unwrap().code, codes::TRANSACTION_NOT_FOUND);
}

#[tokio::test]
async fn a_cancel_after_the_checkpoint_leaves_an_unknown_outcome_to_reconcile() {
    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(calendar.clone(), store.clone());
    let action = action(
        TransactionMode::Execute,
        "hang-1",
        json!({ "slot": "9am", "behaviour": "hang" }),
    );
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    // Cancel until the handler has started (a cancel before that is remembered and fires when it
    // starts; either way the checkpoint may or may not have been written yet, so wait for it).
    let record = checkpointed(&store, &id).await;
    host.cancel(&id);
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled);
    // `cancelled` alone would say nothing happened: the output says the outcome is unknown and
    // names the transaction to reconcile.
    let output = result.output.unwrap();
    assert_eq!(output["cancelled"], true);
    assert_eq!(output["outcome_unknown"], true);
    assert_eq!(output["transaction_id"], json!(record.transaction_id));
    let settled = store
        .transaction(&record.transaction_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        settled.status,
        TransactionProtocolStatus::OutcomeUnknown,
        "a checkpointed attempt that was cancelled may have reached the provider"
    );
    // The view reads the durable status, not the cancelled result's.
    let view = host
        .transaction(
            &aip_connector::host::TransactionSelector::Action(id.clone()),
            &caller(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::OutcomeUnknown);
    // A resend under the key replays the same answer.
    let mut again = self::action(
        TransactionMode::Execute,
        "hang-1",
        json!({ "slot": "9am", "behaviour": "hang" }),
    );
    again.id = id;
    let replayed = host.invoke(again, &caller()).await;
    let output = replayed.output.unwrap();
    assert_eq!(output["outcome_unknown"], true);
    assert_eq!(output["idempotent_replay"], true);
}

/// A host dies after its handler checkpointed (the call never settles, its key's reservation
/// stays). Once the reservation has expired, another replica takes the same action's
/// redelivery: it must find the first delivery's transaction and ask for a reconciliation, not
/// run the handler again in a transaction of its own (an author trial found it did, twice).
#[tokio::test]
async fn a_redelivery_after_a_crash_finds_the_first_transaction_and_is_not_run_again() {
    use aip_connector::store::ManualClock;

    let calendar = Calendar::default();
    let store = Arc::new(MemoryStore::default());
    let dead = host(calendar.clone(), store.clone());
    // Executed as a plain action (the MCP projection's kind) and as an explicit `execute`
    // without a transaction id: the host names the transaction either way. In the third
    // round the other replica reconciles the transaction before the redelivery arrives.
    for (round, explicit, reconciled_first) in
        [(0, false, false), (1, true, false), (2, false, true)]
    {
        calendar.hung.store(false, Ordering::SeqCst);
        let key = format!("crash-{round}");
        let input = json!({ "slot": format!("{round}pm"), "behaviour": "hang_once" });
        let delivery = || {
            let action = Action::new("cap:cal:book", input.clone()).with_idempotency_key(&key);
            if explicit {
                action.with_transaction(ActionTransaction::new(TransactionMode::Execute))
            } else {
                action
            }
        };
        let first = delivery();
        let id = first.id.clone();
        let runs_before = calendar.runs.load(Ordering::SeqCst);
        let _dying = tokio::spawn({
            let dead = dead.clone();
            async move { dead.invoke(first, &caller()).await }
        });
        let record = checkpointed(&store, &id).await;

        // A replica whose clock is past the reservation's expiry (deadline plus grace).
        let clock = Arc::new(ManualClock::new());
        clock.advance(10 * 60 * 1000);
        let replica = Host::builder()
            .connector(calendar.clone())
            .store(store.clone())
            .clock(clock)
            .build()
            .unwrap();
        if reconciled_first {
            let mut transaction = ActionTransaction::new(TransactionMode::Reconcile);
            transaction.transaction_id = Some(record.transaction_id.clone());
            let reconcile = Action::new("cap:cal:book", input.clone())
                .with_idempotency_key(format!("{key}-reconcile"))
                .with_transaction(transaction);
            let reconciled = replica.invoke(reconcile, &caller()).await;
            assert_eq!(
                reconciled.status,
                ActionResultStatus::Completed,
                "{reconciled:?}"
            );
        }
        let mut again = delivery();
        again.id = id.clone();
        let refused = replica.invoke(again, &caller()).await;
        let error = refused.error.expect("refused");
        let details = error.details.clone().unwrap();
        assert_eq!(details["transaction_id"], json!(record.transaction_id));
        if reconciled_first {
            // Settled by the reconciliation: the redelivery is told so, with the status.
            assert_eq!(
                error.code,
                codes::TRANSACTION_EXECUTE_STATE_INVALID,
                "{error:?}"
            );
            assert_eq!(details["status"], "reconciled");
            assert!(error.message.contains("`reconciled`"), "{}", error.message);
        } else {
            assert_eq!(
                error.code,
                codes::TRANSACTION_RECONCILIATION_REQUIRED,
                "{error:?}"
            );
        }
        assert_eq!(
            calendar.runs.load(Ordering::SeqCst),
            runs_before + 1,
            "the handler ran only for the first delivery"
        );
        assert_eq!(store.transactions_by_action(&id).await.unwrap().len(), 1);
    }
}

/// Retention deletes a finished transaction once it was last updated longer ago than the
/// period, never one that still waits for reconciliation, and only when the host has one.
#[tokio::test]
async fn retention_deletes_finished_transactions_once_old_and_keeps_unfinished_ones() {
    use aip_connector::host::Retention;
    use aip_connector::store::ManualClock;

    const DAY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryStore::default());
    let host = Host::builder()
        .connector(Calendar::default())
        .store(store.clone())
        .clock(clock.clone())
        .retention(Retention::KEEP_FOREVER.transactions_for(DAY))
        .build()
        .unwrap();
    let execute = |key: &str, behaviour: &str| {
        let id = TransactionId::new();
        let mut transaction = ActionTransaction::new(TransactionMode::Execute);
        transaction.transaction_id = Some(id.clone());
        let action = Action::new(
            "cap:cal:book",
            json!({ "slot": "9am", "behaviour": behaviour }),
        )
        .with_idempotency_key(key)
        .with_transaction(transaction);
        (id, action)
    };
    let (committed, action) = execute("exec-ok", "");
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let (unknown, action) = execute("exec-uncertain", "uncertain");
    host.invoke(action, &caller()).await;
    let status = |id: &TransactionId| {
        let store = store.clone();
        let id = id.clone();
        async move { store.transaction(&id).await.unwrap().map(|r| r.status) }
    };
    assert_eq!(
        status(&committed).await,
        Some(TransactionProtocolStatus::Committed)
    );
    assert_eq!(
        status(&unknown).await,
        Some(TransactionProtocolStatus::OutcomeUnknown)
    );

    // A second short of a day is within the period (the clock also runs in real time).
    clock.advance(DAY.as_millis() as u64 - 1_000);
    assert_eq!(host.purge_closed(10).await.unwrap().transactions, 0);
    clock.advance(2_000);
    let purged = host.purge_closed(10).await.unwrap();
    assert_eq!((purged.approvals, purged.transactions), (0, 1));
    assert_eq!(status(&committed).await, None);
    assert_eq!(
        status(&unknown).await,
        Some(TransactionProtocolStatus::OutcomeUnknown),
        "an unknown outcome waits for reconciliation, however old"
    );
}

/// What one reconciliation was given: the tenant id and the credential's secret.
type Given = (Option<String>, Option<String>);

/// A provider account per tenant, reached with a bearer credential: the reconcile companion
/// must authenticate like the write it settles (and its evidence, which quotes the provider's
/// echo of the request, must not carry the credential out).
#[derive(Clone, Default)]
struct Vault {
    reconciled_with: Arc<std::sync::Mutex<Vec<Given>>>,
}

#[connector(id = "vault")]
impl Vault {
    /// Store a slot; the provider's answer is always lost.
    #[capability(
        id = "cap:vault:store",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        credentials(required, scopes = ["vault.write"]),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
    )]
    async fn store(
        &self,
        _booking: Booking,
        key: IdempotencyKey,
        _credential: Credential,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "vault".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        Err(
            ConnectorFailure::temporary("vault.reset", "connection reset", "vault")
                .with_provider_operation(operation)
                .with_uncertain_outcome(),
        )
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let secret = request
            .credential
            .as_ref()
            .and_then(|c| c.secret.expose_str().ok().map(str::to_owned));
        // The provider's answer echoes the request's authentication, as some do.
        let evidence = json!({ "request": { "authorization": format!("Bearer {}", secret.clone().unwrap_or_default()) } });
        self.reconciled_with
            .lock()
            .unwrap()
            .push((request.tenant.map(|t| t.id), secret));
        Ok(ReconcileOutcome::Committed {
            evidence: Some(evidence),
        })
    }
}

#[tokio::test]
async fn the_reconcile_companion_gets_the_tenant_and_credential_of_the_reconcile_action() {
    let vault = Vault::default();
    let host = Host::builder()
        .connector(vault.clone())
        .store(Arc::new(MemoryStore::default()))
        .deployment(
            aip_connector::host::Deployment::default().with_static_credential(
                aip_connector::CredentialHandle::new(
                    "cred-1",
                    "vault",
                    aip_connector::Secret::new("tok_reconcile"),
                )
                .with_scopes(["vault.write"])
                .with_tenant("t1"),
            ),
        )
        .build()
        .unwrap();
    let id = TransactionId::new();
    let mut execute = ActionTransaction::new(TransactionMode::Execute);
    execute.transaction_id = Some(id.clone());
    let lost = host
        .invoke(
            Action::new("cap:vault:store", json!({ "slot": "9am" }))
                .with_idempotency_key("s-1")
                .with_transaction(execute),
            &caller(),
        )
        .await;
    assert_eq!(lost.error.as_ref().unwrap().code, "vault.reset", "{lost:?}");

    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(id);
    let settled = host
        .invoke(
            Action::new("cap:vault:store", json!({ "slot": "9am" }))
                .with_idempotency_key("r-1")
                .with_transaction(reconcile),
            &caller(),
        )
        .await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
    assert_eq!(
        *vault.reconciled_with.lock().unwrap(),
        vec![(Some("t1".to_owned()), Some("tok_reconcile".to_owned()))]
    );
    // The evidence is stored and returned like an output: the credential it quoted is withheld.
    let output = settled.output.as_ref().expect("the reconciliation");
    assert_eq!(
        output["reconciliation"]["evidence"]["request"]["authorization"],
        json!("Bearer [withheld]")
    );
    assert!(
        !serde_json::to_string(&settled)
            .unwrap()
            .contains("tok_reconcile")
    );
}

/// How the first run of [`Ledger::post`] ends once released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FirstRun {
    /// A definite provider refusal.
    Refused,
    /// It never answers: its deadline ends it.
    Hangs,
}

/// A ledger whose first run of `post` waits for the test, so that a later attempt can take its
/// transaction over meanwhile; later runs wait for their own release, then post.
#[derive(Clone)]
struct Ledger {
    first_run: FirstRun,
    runs: Arc<AtomicUsize>,
    release_first: Arc<tokio::sync::Semaphore>,
    release_later: Arc<tokio::sync::Semaphore>,
}

impl Ledger {
    fn new(first_run: FirstRun) -> Self {
        Ledger {
            first_run,
            runs: Arc::default(),
            release_first: Arc::new(tokio::sync::Semaphore::new(0)),
            release_later: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }

    async fn runs_reach(&self, runs: usize) {
        for _ in 0..400 {
            if self.runs.load(Ordering::SeqCst) >= runs {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the handler never ran {runs} times");
    }
}

#[derive(Deserialize, JsonSchema)]
struct Entry {
    amount: u64,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    entry_id: String,
}

#[connector(id = "ledger")]
impl Ledger {
    /// Post an entry.
    #[capability(
        id = "cap:ledger:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::look_up,
    )]
    async fn post(
        &self,
        entry: Entry,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            let _released = self.release_first.acquire().await;
            if self.first_run == FirstRun::Hangs {
                std::future::pending::<()>().await;
            }
            return Err(ConnectorFailure::new(
                "ledger.refused",
                "the ledger refused the entry",
                ErrorCategory::Permanent,
                ConnectorOperation::TransactionCommit,
                "ledger",
            ));
        }
        let _released = self.release_later.acquire().await;
        Ok(Posted {
            entry_id: format!("entry-{}", entry.amount),
        })
    }

    async fn look_up(
        &self,
        _request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::NotCommitted { evidence: None })
    }
}

/// An attempt that ends after a later attempt took its transaction over writes nothing into
/// it: the record is the later attempt's to settle (found by a hostile review: the first
/// attempt's late failure or timeout overwrote the record while the later attempt ran, whose
/// own success then lost the race, so the record read `failed` or `outcome_unknown` for a
/// write that had committed). And a timed-out `execute` is never retryable, even when its
/// record could not be settled as an unknown outcome.
///
/// The clock is paused: the first attempt's deadline (3 s) passes only once every task waits,
/// that is after the second attempt has taken the transaction over, however loaded the machine
/// (on the real clock a slow machine could let it pass first).
#[tokio::test(start_paused = true)]
async fn an_attempt_whose_transaction_was_taken_over_settles_nothing_into_it() {
    use aip_connector::store::ManualClock;

    for first_run in [FirstRun::Refused, FirstRun::Hangs] {
        let ledger = Ledger::new(first_run);
        let store = Arc::new(MemoryStore::default());
        let first_host = Host::builder()
            .connector(ledger.clone())
            .store(store.clone())
            .build()
            .unwrap();
        let transaction_id = TransactionId::new();
        let mut transaction = ActionTransaction::new(TransactionMode::Execute);
        transaction.transaction_id = Some(transaction_id.clone());
        let mut first = Action::new("cap:ledger:post", json!({ "amount": 42 }))
            .with_idempotency_key("post-42")
            .with_transaction(transaction);
        if first_run == FirstRun::Hangs {
            // Passes once the second attempt has taken over and waits (the clock is paused).
            first.timeout_ms = Some(3_000);
        }
        let second = first.clone();
        let first_attempt = tokio::spawn({
            let host = first_host.clone();
            async move { host.invoke(first, &caller()).await }
        });
        ledger.runs_reach(1).await;

        // A replica whose clock is past the first attempt's deadline (and its key's
        // reservation): it takes the `prepared` record over and runs the handler again.
        let clock = Arc::new(ManualClock::new());
        clock.advance(10 * 60 * 1000);
        let replica = Host::builder()
            .connector(ledger.clone())
            .store(store.clone())
            .clock(clock)
            .build()
            .unwrap();
        let second_attempt = tokio::spawn({
            let replica = replica.clone();
            async move { replica.invoke(second, &caller()).await }
        });
        ledger.runs_reach(2).await;
        let taken_over = store.transaction(&transaction_id).await.unwrap().unwrap();

        // The first attempt ends while the second still runs.
        ledger.release_first.add_permits(1);
        let first_result = first_attempt.await.unwrap();
        assert_eq!(first_result.status, ActionResultStatus::Failed);
        let first_error = first_result.error.expect("the first attempt failed");
        if first_run == FirstRun::Hangs {
            assert_eq!(first_error.code, codes::SLA_TIMEOUT_EXCEEDED);
            assert_eq!(
                first_error.retryable,
                Some(false),
                "a timed-out execute may have written: {first_error:?}"
            );
            // It still names the transaction to reconcile.
            let details = first_error.details.as_ref().expect("details");
            assert_eq!(details["transaction_id"], json!(transaction_id));
            assert_eq!(details["uncertain_outcome"], true);
        }
        assert_eq!(
            store.transaction(&transaction_id).await.unwrap().unwrap(),
            taken_over,
            "the first attempt wrote into the record the second attempt holds"
        );

        ledger.release_later.add_permits(1);
        let second_result = second_attempt.await.unwrap();
        assert_eq!(
            second_result.status,
            ActionResultStatus::Completed,
            "{second_result:?}"
        );
        let settled = store.transaction(&transaction_id).await.unwrap().unwrap();
        assert_eq!(settled.status, TransactionProtocolStatus::Committed);
        assert_eq!(
            settled.result.and_then(|r| r.output),
            Some(json!({ "entry_id": "entry-42" }))
        );
    }
}

/// A courier whose handler loses the answer to its checkpoint (the write landed), ignores the
/// failure and delivers.
#[derive(Clone)]
struct Courier {
    store: Arc<aip_connector_tests::hooked_store::HookedStore>,
}

#[derive(Deserialize, JsonSchema)]
struct Parcel {
    to: String,
}

#[derive(Serialize, JsonSchema)]
struct Delivered {
    tracking: String,
}

#[connector(id = "courier")]
impl Courier {
    /// Deliver a parcel.
    #[capability(
        id = "cap:courier:deliver",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::look_up,
    )]
    async fn deliver(
        &self,
        parcel: Parcel,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Delivered, ConnectorFailure> {
        self.store.lose_next_transition_answer();
        let recorded = checkpoint
            .record(
                ProviderOperationRef {
                    provider: "courier".into(),
                    operation_id: format!("op-{}", key.as_str()),
                    request_id: None,
                },
                None,
            )
            .await;
        assert!(recorded.is_err(), "the checkpoint's answer was lost");
        Ok(Delivered {
            tracking: format!("trk-{}", parcel.to),
        })
    }

    async fn look_up(
        &self,
        _request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::NotCommitted { evidence: None })
    }
}

/// A checkpoint whose write landed but whose answer was lost is still the attempt's own: the
/// attempt's settlement is not refused as if another attempt had taken the record over (found
/// by the review of the fence: the record stayed `prepared` with the operation recorded).
#[tokio::test]
async fn a_checkpoint_whose_answer_was_lost_is_still_the_attempts_own() {
    let store = Arc::new(aip_connector_tests::hooked_store::HookedStore::default());
    let host = Host::builder()
        .connector(Courier {
            store: store.clone(),
        })
        .store(store.clone())
        .build()
        .unwrap();
    let action = Action::new("cap:courier:deliver", json!({ "to": "ada" }))
        .with_idempotency_key("parcel-1")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let delivered = host.invoke(action.clone(), &caller()).await;
    assert_eq!(
        delivered.status,
        ActionResultStatus::Completed,
        "{delivered:?}"
    );
    let records = store.transactions_by_action(&action.id).await.unwrap();
    let [record] = records.as_slice() else {
        panic!("one transaction, not {records:?}");
    };
    assert_eq!(
        record.status,
        TransactionProtocolStatus::Committed,
        "{record:?}"
    );
    // The checkpoint the handler was told had failed is the one the record keeps.
    let operation = record
        .provider_operation
        .as_ref()
        .expect("the checkpoint landed");
    assert_eq!(operation.provider, "courier");
    assert!(operation.operation_id.starts_with("op-"), "{operation:?}");
}

/// A settlement that landed with its answer lost is the attempt's own: the uncertain `execute`
/// is `outcome_unknown`, and its failure still names the transaction for the `reconcile` that
/// follows. Before (a store-failure probe), the lost answer was only logged, and the failure did
/// not name the transaction.
#[tokio::test]
async fn an_unknown_outcome_whose_settlement_answer_was_lost_still_names_its_transaction() {
    let calendar = Calendar::default();
    let store = Arc::new(aip_connector_tests::hooked_store::HookedStore::default());
    let host = Host::builder()
        .connector(calendar.clone())
        .store(store.clone())
        .build()
        .unwrap();
    store.lose_transition_answers_to(TransactionProtocolStatus::OutcomeUnknown, 1);
    let uncertain = host
        .invoke(
            action(
                TransactionMode::Execute,
                "exec-lost",
                json!({ "slot": "10am", "behaviour": "uncertain" }),
            ),
            &caller(),
        )
        .await;
    let error = uncertain
        .error
        .as_ref()
        .expect("the provider call was uncertain");
    assert_eq!(error.code, "cal.reset");
    let id = error.details.as_ref().expect("details")["transaction_id"]
        .as_str()
        .expect("the failure names the transaction")
        .to_owned();
    assert_eq!(
        error.retryable,
        Some(false),
        "to be reconciled, not retried"
    );
    let record = store
        .transaction(&TransactionId::trusted(id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::OutcomeUnknown);
}
