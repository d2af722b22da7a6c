//! Compensation through the host (`aip-runtime.md` §3.7): a `compensate` action is a new
//! governed action, admitted only against a durable, committed target inside the window, routed
//! to the compensating capability with the target's outcome in hand, run at most once per
//! target, and settled `compensated` or `failed` with a receipt chain.

use std::sync::{Arc, Mutex};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{
    Host, HostLimits, TransactionSelector, TrustedContext, compensation_transaction_of,
};
use aip_connector::ids::{ActionId, TransactionId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ConnectorOperation, Principal,
    PrincipalKind, ProviderOperationRef, TransactionMode, TransactionProtocolStatus,
    TransactionReceipt,
};
use aip_connector::prelude::*;
use aip_connector::store::{ManualClock, MemoryStore};
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Charge {
    amount_cents: u64,
    /// `"partial"`: the provider took the money but a later step failed; `"fail"`: nothing
    /// happened.
    #[serde(default)]
    behaviour: String,
}

#[derive(Serialize, JsonSchema)]
struct Charged {
    /// The schema promises the provider's id format; `"bad_output"` breaks the promise.
    #[schemars(regex(pattern = "^ch-"))]
    charge_id: String,
    amount_cents: u64,
}

#[derive(Deserialize, JsonSchema)]
struct RefundRequest {
    reason: String,
}

#[derive(Serialize, JsonSchema)]
struct Refunded {
    refunded_charge: Option<String>,
    reason: String,
}

/// What the provider saw, in order.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<String>>>);

impl Ledger {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }
    fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn count(&self, prefix: &str) -> usize {
        self.entries()
            .iter()
            .filter(|e| e.starts_with(prefix))
            .count()
    }
}

#[derive(Clone, Default)]
struct Payments {
    ledger: Ledger,
}

#[connector(id = "pay")]
impl Payments {
    /// Charge a card.
    #[capability(
        id = "cap:pay:charge",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate, reconcile]),
        compensation(supported, capability = "cap:pay:refund", window_ms = 60_000),
        reconcile = Self::look_up,
    )]
    async fn charge(
        &self,
        charge: Charge,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Charged, ConnectorFailure> {
        if charge.behaviour == "cursor" || charge.behaviour == "cursor, then lost" {
            // The card the charge went to, recorded for its undo.
            checkpoint
                .record(
                    ProviderOperationRef {
                        provider: "cards".into(),
                        operation_id: format!("op-{}", key.as_str()),
                        request_id: None,
                    },
                    Some(format!("card-{}", key.as_str())),
                )
                .await?;
        }
        match charge.behaviour.as_str() {
            "uncertain" | "cursor, then lost" => Err(ConnectorFailure::new(
                "pay.reset",
                "connection reset after the request was sent",
                ErrorCategory::Temporary,
                ConnectorOperation::Invocation,
                "pay",
            )
            .with_uncertain_outcome()
            .with_provider_operation(ProviderOperationRef {
                provider: "cards".into(),
                operation_id: format!("op-{}", key.as_str()),
                request_id: None,
            })),
            "fail" => Err(ConnectorFailure::new(
                "pay.declined",
                "card declined",
                ErrorCategory::Permanent,
                ConnectorOperation::Invocation,
                "pay",
            )),
            "partial" => {
                self.ledger.push(format!("charge:{}", key.as_str()));
                Err(ConnectorFailure::new(
                    "pay.receipt_failed",
                    "charged, but the receipt could not be issued",
                    ErrorCategory::Permanent,
                    ConnectorOperation::Invocation,
                    "pay",
                )
                .with_committed_side_effects())
            }
            "long_output" => {
                self.ledger.push(format!("charge:{}", key.as_str()));
                Ok(Charged {
                    charge_id: format!("ch-{}-{}", key.as_str(), "x".repeat(200)),
                    amount_cents: charge.amount_cents,
                })
            }
            "bad_output" => {
                self.ledger.push(format!("charge:{}", key.as_str()));
                Ok(Charged {
                    charge_id: format!("charge #{}", key.as_str()),
                    amount_cents: charge.amount_cents,
                })
            }
            _ => {
                self.ledger.push(format!("charge:{}", key.as_str()));
                Ok(Charged {
                    charge_id: format!("ch-{}", key.as_str()),
                    amount_cents: charge.amount_cents,
                })
            }
        }
    }

    /// The provider never saw uncertain charges; a refund whose answer was lost is in the
    /// ledger when it landed.
    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        // A charge that recorded its card: the first lookup is still pending and names where
        // the next one resumes; the next finds the charge.
        if let Some(card) = &request.checkpoint_cursor {
            self.ledger.push(format!(
                "look-up:{card}:{}",
                request.cursor.as_deref().unwrap_or("-")
            ));
            return Ok(if request.cursor.as_ref() == Some(card) {
                ReconcileOutcome::Pending {
                    cursor: Some(format!("page-2-of-{card}")),
                }
            } else {
                self.ledger.push(format!("charge:{card}"));
                ReconcileOutcome::Committed { evidence: None }
            });
        }
        if let Some(target) = &request.compensation_for {
            // A test that scripts it gets one pending lookup first, naming where to resume.
            if self.ledger.count("script:pending-once") > self.ledger.count("pended") {
                self.ledger.push("pended".to_owned());
                return Ok(ReconcileOutcome::Pending {
                    cursor: Some("page-2".to_owned()),
                });
            }
            assert_eq!(
                request.provider_operation.operation_id,
                format!("refund-{target}"),
                "the compensation's own operation is looked up"
            );
            if self.ledger.count(&format!("refund:{target}:")) > 0 {
                return Ok(ReconcileOutcome::Committed { evidence: None });
            }
        }
        Ok(ReconcileOutcome::NotCommitted { evidence: None })
    }

    /// Refund a charge: the compensating capability.
    #[capability(
        id = "cap:pay:refund",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn refund(
        &self,
        request: RefundRequest,
        _key: IdempotencyKey,
        compensation: Compensation,
        checkpoint: Checkpoint,
    ) -> Result<Refunded, ConnectorFailure> {
        // A rerun sees what the earlier attempt recorded.
        if let Some((_, cursor)) = checkpoint.recorded() {
            self.ledger.push(format!(
                "refund-rerun-cursor:{}",
                cursor.as_deref().unwrap_or("-")
            ));
        }
        // The refund's own provider call, recorded on the compensation's transaction.
        checkpoint
            .record(
                ProviderOperationRef {
                    provider: "pay".to_owned(),
                    operation_id: format!("refund-{}", compensation.action_id),
                    request_id: None,
                },
                None,
            )
            .await?;
        let charge = compensation
            .output
            .as_ref()
            .and_then(|o| o.get("charge_id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        // `refused`: the provider answered 503, certainly nothing done.
        if request.reason == "refused" {
            return Err(ConnectorFailure::new(
                "pay.unavailable",
                "the provider is unavailable",
                ErrorCategory::Temporary,
                ConnectorOperation::Compensation,
                "pay",
            )
            .with_retryable(true));
        }
        if let Some(cursor) = &compensation.cursor {
            self.ledger.push(format!("refund-cursor:{cursor}"));
        }
        // `lost request`: the connection dropped before the provider took the refund;
        // `lost answer`: after it did. Either way the handler cannot tell.
        if request.reason != "lost request" {
            self.ledger.push(format!(
                "refund:{}:{}",
                compensation.action_id,
                charge.as_deref().unwrap_or("partial")
            ));
        }
        if request.reason.starts_with("lost ") {
            return Err(ConnectorFailure::new(
                "pay.reset",
                "connection reset after the refund was sent",
                ErrorCategory::Temporary,
                ConnectorOperation::Compensation,
                "pay",
            )
            .with_uncertain_outcome());
        }
        Ok(Refunded {
            refunded_charge: charge,
            reason: request.reason,
        })
    }
}

/// The same capability, but compensation needs a human.
#[derive(Clone, Default)]
struct GuardedPayments;

#[connector(id = "guarded")]
impl GuardedPayments {
    /// Charge a card.
    #[capability(
        id = "cap:guarded:charge",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:guarded:refund", requires_approval),
    )]
    async fn charge(
        &self,
        _charge: Charge,
        key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Charged, ConnectorFailure> {
        Ok(Charged {
            charge_id: format!("ch-{}", key.as_str()),
            amount_cents: 1,
        })
    }

    /// Refund a charge. Called by its own id it would need approval; it never gets that far.
    #[capability(
        id = "cap:guarded:refund",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        approval(required, selector = role("finance"), evidence = [reason], ttl_ms = 60_000),
    )]
    async fn refund(
        &self,
        request: RefundRequest,
        _key: IdempotencyKey,
        _approval: Approval,
        _compensation: Compensation,
    ) -> Result<Refunded, ConnectorFailure> {
        Ok(unlinked_refund(request))
    }
}

fn caller_in(tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new(tenant))
}

fn caller() -> TrustedContext {
    caller_in("t1")
}

struct Fixture {
    host: Host,
    ledger: Ledger,
    clock: Arc<ManualClock>,
}

fn fixture() -> Fixture {
    fixture_with(HostLimits::default())
}

fn fixture_with(limits: HostLimits) -> Fixture {
    let payments = Payments::default();
    let ledger = payments.ledger.clone();
    let clock = Arc::new(ManualClock::new());
    let host = Host::builder()
        .connector(payments)
        .connector(GuardedPayments)
        .store(Arc::new(MemoryStore::default()))
        .clock(clock.clone())
        .limits(limits)
        .build()
        .unwrap();
    Fixture {
        host,
        ledger,
        clock,
    }
}

/// Runs a charge in transaction mode `execute`.
async fn charge(host: &Host, key: &str, behaviour: &str) -> (ActionId, ActionResult) {
    let action = Action::new(
        "cap:pay:charge",
        json!({ "amount_cents": 1200, "behaviour": behaviour }),
    )
    .with_idempotency_key(key)
    .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let id = action.id.clone();
    (id, host.invoke(action, &caller()).await)
}

fn compensate_action(capability: &str, target: &ActionId, key: &str) -> Action {
    Action::new(capability, json!({ "reason": "customer asked" }))
        .with_idempotency_key(key)
        .with_transaction(ActionTransaction::compensate(target.clone()))
}

fn error_code(result: &ActionResult) -> &str {
    result
        .error
        .as_ref()
        .map(|e| e.code.as_str())
        .unwrap_or("<no error>")
}

#[tokio::test]
async fn compensate_routes_to_the_compensating_capability_with_the_target_outcome() {
    let f = fixture();
    let (target, charged) = charge(&f.host, "c1", "").await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");

    let action = compensate_action("cap:pay:charge", &target, "r1");
    let compensation_id = action.id.clone();
    let result = f.host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(
        result.output,
        Some(json!({ "refunded_charge": "ch-c1", "reason": "customer asked" })),
        "the refund handler read the charge's output through `Compensation`"
    );
    assert_eq!(
        f.ledger.entries(),
        vec!["charge:c1".to_owned(), format!("refund:{target}:ch-c1")]
    );

    let view = f
        .host
        .transaction(&TransactionSelector::Action(compensation_id), &caller())
        .await
        .unwrap()
        .expect("the compensation has a durable record");
    assert_eq!(view.status, TransactionProtocolStatus::Compensated);
    assert_eq!(view.transaction_id, compensation_transaction_of(&target));
    assert_eq!(
        view.provider_operation
            .as_ref()
            .map(|o| o.operation_id.as_str()),
        Some(format!("refund-{target}").as_str()),
        "the compensating handler's `Checkpoint` recorded on the compensation"
    );
    assert_eq!(view.transaction.compensation_for.as_ref(), Some(&target));
    let kinds: Vec<&str> = view.receipts.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["compensation_started", "compensated"]);
    assert!(TransactionReceipt::chain_is_intact(&view.receipts));

    // The target itself stays committed: compensation is a transaction of its own.
    let target_view = f
        .host
        .transaction(&TransactionSelector::Action(target), &caller())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(target_view.status, TransactionProtocolStatus::Committed);
}

/// The cursor the compensated handler recorded reaches the undo (`CompensationTarget::cursor`),
/// so an undo can find what the compensated action's input named (an author trial's reopen of a
/// closed issue had no way to).
#[tokio::test]
async fn the_undo_reads_the_cursor_its_target_recorded() {
    let f = fixture();
    let (target, charged) = charge(&f.host, "c9", "cursor").await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r9"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(
        f.ledger.count("refund-cursor:card-c9"),
        1,
        "{:?}",
        f.ledger.entries()
    );
}

/// Found by an author trial: a `Pending` reconciliation answer's cursor replaced the one the
/// handler recorded, so the undo of a delete whose answer was lost restored the resource the
/// pending answer named. The reconciliation resumes from the pending cursor; the undo, and the
/// next lookup's `checkpoint_cursor`, still read the handler's.
#[tokio::test]
async fn a_pending_reconciliation_does_not_replace_the_cursor_the_undo_reads() {
    let f = fixture();
    let (target, lost) = charge(&f.host, "c7", "cursor, then lost").await;
    assert_eq!(lost.status, ActionResultStatus::Failed, "{lost:?}");
    let transaction = TransactionId::trusted(
        lost.error.as_ref().unwrap().details.as_ref().unwrap()["transaction_id"]
            .as_str()
            .unwrap(),
    );
    f.clock.advance(5_000);
    let pending = reconcile(&f, &transaction, "rec-1").await;
    assert_eq!(
        error_code(&pending),
        codes::TRANSACTION_RECONCILIATION_PENDING,
        "{pending:?}"
    );
    f.clock.advance(5_000);
    reconciled_as(&f, &transaction, "rec-2", true).await;
    assert_eq!(
        f.ledger.entries(),
        [
            "look-up:card-c7:card-c7",
            "look-up:card-c7:page-2-of-card-c7",
            "charge:card-c7"
        ]
    );
    let undone = compensate(&f, &target, "r7", "customer asked").await;
    assert_eq!(undone.status, ActionResultStatus::Completed, "{undone:?}");
    assert_eq!(
        f.ledger.count("refund-cursor:"),
        f.ledger.count("refund-cursor:card-c7"),
        "{:?}",
        f.ledger.entries()
    );
    assert_eq!(f.ledger.count("refund-cursor:card-c7"), 1);
}

/// A compensating handler's `Checkpoint` claims no transaction of its own: the capability
/// declares none (it runs only inside the compensation of `cap:pay:charge`), and its support
/// record agrees, so admission has nothing to refuse.
#[test]
fn a_compensating_handler_that_checkpoints_claims_no_transaction() {
    let payments = Payments::default();
    let definition = aip_connector::Connector::definition(&payments);
    let refund = definition.capability("cap:pay:refund").unwrap();
    assert!(refund.facts.compensation_handler);
    assert!(!refund.facts.support.transaction);
    assert!(
        refund
            .capability
            .contract
            .as_ref()
            .is_some_and(|c| c.transaction.is_none())
    );
}

#[tokio::test]
async fn each_action_is_compensated_at_most_once_even_when_compensations_race() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let mut racing = Vec::new();
    for n in 0..16 {
        let host = f.host.clone();
        let action = compensate_action("cap:pay:charge", &target, &format!("race-{n}"));
        racing.push(tokio::spawn(
            async move { host.invoke(action, &caller()).await },
        ));
    }
    let mut completed = 0;
    for task in racing {
        let result = task.await.unwrap();
        match result.status {
            ActionResultStatus::Completed => completed += 1,
            _ => assert_eq!(
                error_code(&result),
                codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED,
                "{result:?}"
            ),
        }
    }
    assert_eq!(completed, 1);
    assert_eq!(
        f.ledger.count("refund:"),
        1,
        "exactly one refund reached the provider"
    );

    // A later, unrelated compensation of the same target is refused the same way.
    let again = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "late"),
            &caller(),
        )
        .await;
    assert_eq!(
        error_code(&again),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
}

#[tokio::test]
async fn a_replayed_compensation_key_returns_the_first_result_without_running_again() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let first = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    let replay = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(first.status, ActionResultStatus::Completed);
    assert_eq!(
        replay.output.as_ref().unwrap()["refunded_charge"],
        first.output.as_ref().unwrap()["refunded_charge"]
    );
    assert_eq!(
        replay.output.as_ref().unwrap()["idempotent_replay"],
        true,
        "{replay:?}"
    );
    assert_eq!(f.ledger.count("refund:"), 1);
}

#[tokio::test]
async fn a_failure_with_committed_side_effects_can_be_compensated() {
    let f = fixture();
    let (target, charged) = charge(&f.host, "c1", "partial").await;
    assert_eq!(charged.status, ActionResultStatus::Failed);
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(
        f.ledger.entries().last().unwrap(),
        &format!("refund:{target}:partial")
    );
}

/// The handler charged, then returned an output the schema refuses: the caller gets
/// `action.output_schema_invalid`, flagged as a write that committed, and the charge stays
/// compensable.
#[tokio::test]
async fn a_completed_write_whose_output_is_refused_can_be_compensated() {
    let f = fixture();
    let details =
        refused_charge_is_compensated(&f, "bad_output", codes::ACTION_OUTPUT_SCHEMA_INVALID).await;
    assert!(details["violations"].is_array(), "{details}");
}

/// Charges with `behaviour`, whose output the host refuses with `code`, asserts the refusal
/// says the charge's side effects committed and that the charge is then undone once; returns
/// the refusal's details.
async fn refused_charge_is_compensated(f: &Fixture, behaviour: &str, code: &str) -> Value {
    let (target, charged) = charge(&f.host, "c1", behaviour).await;
    let error = charged.error.as_ref().expect("the output is refused");
    assert_eq!(error.code, code, "{charged:?}");
    let details = error.details.clone().unwrap();
    assert_eq!(details["side_effects_committed"], true, "{details}");
    assert_eq!(details["compensation_required"], true, "{details}");
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(f.ledger.count("refund:"), 1);
    details
}

/// The same for an output larger than `max_output_bytes`: the charge happened, so the refusal
/// says its side effects committed and the charge can still be undone.
#[tokio::test]
async fn a_completed_write_whose_output_is_too_large_can_be_compensated() {
    let f = fixture_with(HostLimits::default().max_output_bytes(128));
    let details =
        refused_charge_is_compensated(&f, "long_output", codes::ACTION_OUTPUT_TOO_LARGE).await;
    assert_eq!(details["max_output_bytes"], 128, "{details}");
}

/// An undo whose handler completed did undo, even when the host refuses its output: its
/// compensation settles `compensated` (not `failed`, which would read as an undo that never
/// happened and could neither run again nor be reconciled), and no second undo runs (a review).
#[tokio::test]
async fn an_undo_whose_output_is_refused_still_settles_compensated() {
    let f = fixture_with(HostLimits::default().max_output_bytes(128));
    let (target, charged) = charge(&f.host, "c1", "").await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");
    // The refund echoes its reason, which makes its output larger than 128 bytes.
    let undone = compensate(&f, &target, "r1", &"too long a reason ".repeat(10)).await;
    assert_eq!(
        error_code(&undone),
        codes::ACTION_OUTPUT_TOO_LARGE,
        "{undone:?}"
    );
    assert_eq!(
        undone.error.as_ref().unwrap().details.as_ref().unwrap()["side_effects_committed"],
        true
    );
    let view = f
        .host
        .transaction(
            &TransactionSelector::Transaction(compensation_transaction_of(&target)),
            &caller(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::Compensated);
    let again = compensate(&f, &target, "r2", "again").await;
    assert_eq!(
        error_code(&again),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
    assert_eq!(f.ledger.count(&format!("refund:{target}:")), 1);
}

#[tokio::test]
async fn only_a_durably_completed_target_can_be_compensated() {
    let f = fixture();
    // Nothing happened: nothing to compensate.
    let (declined, _) = charge(&f.host, "c1", "fail").await;
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &declined, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED
    );

    // An action that never existed (or ran without a transaction block, which a `#[connector]`
    // capability with a `Checkpoint` cannot): no durable record proves what it did.
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &ActionId::new(), "r3"),
            &caller(),
        )
        .await;
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED
    );
    assert_eq!(f.ledger.count("refund:"), 0);
}

fn compensate_because(target: &ActionId, key: &str, reason: &str) -> Action {
    Action::new("cap:pay:charge", json!({ "reason": reason }))
        .with_idempotency_key(key)
        .with_transaction(ActionTransaction::compensate(target.clone()))
}

/// Reconciles `transaction` and asserts what the reconciliation found.
async fn reconciled_as(f: &Fixture, transaction: &TransactionId, key: &str, committed: bool) {
    let reconciled = reconcile(f, transaction, key).await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    assert_eq!(
        reconciled.output.as_ref().unwrap()["reconciliation"]["committed"],
        committed,
        "{reconciled:?}"
    );
}

/// Compensates `target` under `key`, giving `reason` (which the refund handler acts on).
async fn compensate(f: &Fixture, target: &ActionId, key: &str, reason: &str) -> ActionResult {
    f.host
        .invoke(compensate_because(target, key, reason), &caller())
        .await
}

async fn reconcile(f: &Fixture, transaction: &TransactionId, key: &str) -> ActionResult {
    let mut block = ActionTransaction::new(TransactionMode::Reconcile);
    block.transaction_id = Some(transaction.clone());
    f.host
        .invoke(
            Action::new("cap:pay:charge", json!({ "amount_cents": 1200 }))
                .with_idempotency_key(key)
                .with_transaction(block),
            &caller(),
        )
        .await
}

/// Found by an author trial: a compensation whose answer was lost settled `failed`, which
/// nothing could reconcile or run again, while the provider held the refund.
#[tokio::test]
async fn a_compensation_whose_answer_was_lost_is_an_unknown_outcome_to_reconcile() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let lost = compensate(&f, &target, "r1", "lost answer").await;
    assert_eq!(lost.status, ActionResultStatus::Failed, "{lost:?}");
    let details = lost.error.as_ref().unwrap().details.clone().unwrap();
    assert_eq!(details["uncertain_outcome"], true, "{details}");
    let compensation = compensation_transaction_of(&target);
    assert_eq!(details["transaction_id"], json!(compensation), "{details}");
    let view = f
        .host
        .transaction(
            &TransactionSelector::Transaction(compensation.clone()),
            &caller(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::OutcomeUnknown);

    // Not run again blindly: a new compensation says to reconcile first.
    let again = compensate(&f, &target, "r2", "again").await;
    assert_eq!(
        error_code(&again),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
    assert!(
        again.error.as_ref().unwrap().message.contains("reconcile"),
        "{again:?}"
    );

    // The reconciliation asks about the refund's operation and finds it landed.
    f.clock.advance(5_000);
    reconciled_as(&f, &compensation, "rec-1", true).await;
    let again = compensate(&f, &target, "r3", "again").await;
    assert_eq!(
        error_code(&again),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
    assert_eq!(f.ledger.count(&format!("refund:{target}:")), 1);
}

/// The other way: the refund never reached the provider, the reconciliation says so, and the
/// compensation may then run again, once.
#[tokio::test]
async fn a_compensation_reconciled_as_not_committed_runs_again() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let lost = compensate(&f, &target, "r1", "lost request").await;
    assert_eq!(lost.status, ActionResultStatus::Failed, "{lost:?}");
    let compensation = compensation_transaction_of(&target);
    f.clock.advance(5_000);
    reconciled_as(&f, &compensation, "rec-1", false).await;
    let retried = compensate(&f, &target, "r2", "customer asked").await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    let view = f
        .host
        .transaction(&TransactionSelector::Transaction(compensation), &caller())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::Compensated);
    assert_eq!(f.ledger.count(&format!("refund:{target}:")), 1);
    // And at most once from here.
    let third = compensate(&f, &target, "r3", "customer asked").await;
    assert_eq!(
        error_code(&third),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
}

#[tokio::test]
async fn a_target_reconciled_as_not_committed_cannot_be_compensated() {
    let f = fixture();
    let (target, charged) = charge(&f.host, "c1", "uncertain").await;
    assert_eq!(charged.status, ActionResultStatus::Failed);
    let view = f
        .host
        .transaction(&TransactionSelector::Action(target.clone()), &caller())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::OutcomeUnknown);

    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(view.transaction_id.clone());
    let reconciled = f
        .host
        .invoke(
            Action::new("cap:pay:charge", json!({ "amount_cents": 1200 }))
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

    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMMITTED,
        "{result:?}"
    );
    assert_eq!(f.ledger.count("refund:"), 0);
}

#[tokio::test]
async fn the_compensation_window_closes() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    f.clock.advance(60_001);
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_WINDOW_EXPIRED,
        "{result:?}"
    );
    assert_eq!(f.ledger.count("refund:"), 0);
}

#[tokio::test]
async fn another_tenant_cannot_compensate() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "r1"),
            &caller_in("t2"),
        )
        .await;
    // Another tenant's action is not there for this caller: the answer is the one for an
    // action that never ran, so it learns nothing of the other tenant's.
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED
    );
    let never_ran = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &ActionId::new(), "r2"),
            &caller_in("t2"),
        )
        .await;
    assert_eq!(
        never_ran.error.as_ref().map(|e| (&e.code, &e.message)),
        result.error.as_ref().map(|e| (&e.code, &e.message))
    );
    assert_eq!(f.ledger.count("refund:"), 0);
    // Nor read the target's transaction.
    assert!(
        f.host
            .transaction(&TransactionSelector::Action(target), &caller_in("t2"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_compensation_under_another_transaction_id_is_refused() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let mut action = compensate_action("cap:pay:charge", &target, "r1");
    action.transaction.as_mut().unwrap().transaction_id = Some(TransactionId::new());
    let result = f.host.invoke(action, &caller()).await;
    assert_eq!(
        error_code(&result),
        codes::TRANSACTION_COMPENSATION_TRANSACTION_MISMATCH
    );
    let expected = compensation_transaction_of(&target);
    assert_eq!(
        result.error.unwrap().details.unwrap()["expected_transaction_id"],
        json!(expected)
    );
}

#[tokio::test]
async fn compensation_that_requires_approval_waits_for_a_human() {
    let f = fixture();
    let charge = Action::new("cap:guarded:charge", json!({ "amount_cents": 5 }))
        .with_idempotency_key("g1")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let target = charge.id.clone();
    let charged = f.host.invoke(charge, &caller()).await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");

    let result = f
        .host
        .invoke(
            compensate_action("cap:guarded:charge", &target, "r1"),
            &caller(),
        )
        .await;
    assert_eq!(
        result.status,
        ActionResultStatus::PendingApproval,
        "{result:?}"
    );
    assert_eq!(error_code(&result), codes::POLICY_HUMAN_APPROVAL_REQUIRED);
}

/// Found by an author trial: a gated compensation naming another tenant's action asked that
/// tenant's approvers to release what admission then refused. So does one naming an action
/// that never committed.
#[tokio::test]
async fn a_gated_compensation_admission_would_refuse_asks_no_approver() {
    let f = fixture();
    let charge = Action::new("cap:guarded:charge", json!({ "amount_cents": 5 }))
        .with_idempotency_key("g1")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let target = charge.id.clone();
    assert_eq!(
        f.host.invoke(charge, &caller()).await.status,
        ActionResultStatus::Completed
    );
    for (target, caller, key) in [
        (target, caller_in("t2"), "r1"),
        (ActionId::new(), caller(), "r2"),
    ] {
        let result = f
            .host
            .invoke(
                compensate_action("cap:guarded:charge", &target, key),
                &caller,
            )
            .await;
        assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
        assert_eq!(
            error_code(&result),
            codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED
        );
        assert!(result.approval_id().is_none(), "an approver was asked");
    }
}

#[tokio::test]
async fn the_compensation_extractor_is_refused_outside_a_compensate() {
    let f = fixture();
    let result = f
        .host
        .invoke(
            Action::new("cap:pay:refund", json!({ "reason": "no target" }))
                .with_idempotency_key("direct"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Failed);
    assert_eq!(error_code(&result), codes::TRANSACTION_CONTEXT_MISSING);
    assert_eq!(f.ledger.count("refund:"), 0);
}

/// A compensating capability named directly is refused before the approval gate: no approver is
/// asked to release an action that cannot run (it would fail for want of the compensation
/// context afterwards), and nothing is stored.
#[tokio::test]
async fn a_gated_compensating_capability_named_directly_asks_no_approver() {
    let f = fixture();
    assert!(f.host.compensates_only("cap:guarded:refund"));
    assert!(!f.host.compensates_only("cap:guarded:charge"));
    let result = f
        .host
        .invoke(
            Action::new("cap:guarded:refund", json!({ "reason": "no target" }))
                .with_idempotency_key("direct"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    assert_eq!(error_code(&result), codes::TRANSACTION_CONTEXT_MISSING);
    assert!(result.approval_id().is_none());
    assert!(
        result.error.as_ref().is_some_and(|e| e.message.contains(
            "only runs as the compensation of `cap:guarded:charge`: send the `compensate` \
                 action to the capability it undoes"
        )),
        "{result:?}"
    );
}

/// Found by an author trial: a `compensate` sent to the compensating capability (the one that
/// runs) was refused "declares no transaction contract; only `execute` is allowed", true but no
/// help. The refusal keeps upstream's code and says where the compensation goes; nothing runs.
#[tokio::test]
async fn a_compensate_sent_to_the_compensating_capability_names_the_capability_it_undoes() {
    let f = fixture();
    let (target, charged) = charge(&f.host, "c-misrouted", "").await;
    assert_eq!(charged.status, ActionResultStatus::Completed, "{charged:?}");
    let result = f
        .host
        .invoke(
            compensate_action("cap:pay:refund", &target, "misrouted"),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    assert_eq!(error_code(&result), codes::TRANSACTION_UNSUPPORTED);
    let message = &result.error.as_ref().unwrap().message;
    assert!(
        message.ends_with(
            "; capability `cap:pay:refund` only runs as the compensation of `cap:pay:charge`: \
             send the `compensate` action to the capability it undoes (its transaction block \
             `compensation_for` naming the action to undo: `ActionTransaction::compensate(<its \
             action id>)`), and the host runs `cap:pay:refund` for it"
        ),
        "{message}"
    );
    assert_eq!(f.ledger.count("refund:"), 0);
    // Sent where the message says, the same compensation runs.
    let routed = f
        .host
        .invoke(
            compensate_action("cap:pay:charge", &target, "routed"),
            &caller(),
        )
        .await;
    assert_eq!(routed.status, ActionResultStatus::Completed, "{routed:?}");
    assert_eq!(f.ledger.count("refund:"), 1);
}

/// A refund that names no charge: what the test connectors' undos answer.
fn unlinked_refund(request: RefundRequest) -> Refunded {
    Refunded {
        refunded_charge: None,
        reason: request.reason,
    }
}

/// A write assembled from free capabilities, naming a compensating capability whose handler does
/// not take `Compensation`: no `#[connector]` block saw both, so the macro could not refuse it.
#[capability(
    id = "cap:loose:post",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    transaction(modes = [execute, compensate]),
    compensation(supported, capability = "cap:loose:undo"),
)]
async fn loose_post(
    request: RefundRequest,
    _key: IdempotencyKey,
    _checkpoint: Checkpoint,
) -> Result<Refunded, ConnectorFailure> {
    Ok(unlinked_refund(request))
}

/// The "compensation": it cannot tell which post it undoes.
#[capability(
    id = "cap:loose:undo",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
)]
async fn loose_undo(
    request: RefundRequest,
    _key: IdempotencyKey,
) -> Result<Refunded, ConnectorFailure> {
    Ok(unlinked_refund(request))
}

/// The host holds every connector to the rule the macro checks in a `#[connector]` block.
#[test]
fn a_host_refuses_a_compensating_capability_that_cannot_read_its_target() {
    let connector = aip_connector::ConnectorBuilder::new("loose")
        .capability::<loose_post>()
        .capability::<loose_undo>()
        .build()
        .unwrap();
    assert_refused_with(
        connector,
        "implementation.compensation_target_unsupported",
        "/capabilities/0/contract/compensation/compensation_capability_id",
    );
}

/// Asserts a host refuses `connector` at admission with the single issue `code` at `path`.
#[track_caller]
fn assert_refused_with(connector: impl aip_connector::Connector, code: &str, path: &str) {
    let error = Host::builder().connector(connector).build().unwrap_err();
    let aip_connector::host::HostBuildError::Admission { report, .. } = error else {
        panic!("expected an admission failure, got {error:?}");
    };
    assert_eq!(report.codes(), [code], "{report}");
    assert_eq!(report.issues[0].path, path);
}

/// A write assembled from free capabilities whose undo requires approval, while the write does
/// not gate its compensations: no approval could ever reach the undo's `Approval` parameter.
#[capability(
    id = "cap:loose:create",
    risk = low,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    transaction(modes = [execute, compensate]),
    compensation(supported, capability = "cap:loose:remove"),
)]
async fn loose_create(
    request: RefundRequest,
    _key: IdempotencyKey,
    _checkpoint: Checkpoint,
) -> Result<Refunded, ConnectorFailure> {
    Ok(unlinked_refund(request))
}

/// The undo, approved under a policy no host applies to it.
#[capability(
    id = "cap:loose:remove",
    risk = low,
    side_effects = [delete],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    approval(selector = role("admin"), evidence = [reason]),
)]
async fn loose_remove(
    request: RefundRequest,
    _key: IdempotencyKey,
    _approval: Approval,
    _compensation: Compensation,
) -> Result<Refunded, ConnectorFailure> {
    Ok(unlinked_refund(request))
}

/// The host refuses an undo whose approval can never reach it, as `#[connector]` does.
#[test]
fn a_host_refuses_an_undo_whose_approval_the_compensated_capability_never_asks_for() {
    let connector = aip_connector::ConnectorBuilder::new("loose")
        .capability::<loose_create>()
        .capability::<loose_remove>()
        .build()
        .unwrap();
    assert_refused_with(
        connector,
        "manifest.compensation.approval_ungated",
        "/capabilities/0/contract/compensation/requires_approval",
    );
}

/// Found by a hostile review: the rerun allowed after a "not committed" reconciliation failed
/// after its checkpoint (the provider answered 503), and the compensation was stuck for good:
/// not rerunnable (it had checkpointed), not reconcilable (it was `failed`). It can be
/// reconciled now, and rerun again when the provider confirms nothing happened.
#[tokio::test]
async fn a_compensation_that_failed_after_its_checkpoint_can_be_reconciled_and_rerun() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let compensation = compensation_transaction_of(&target);
    let lost = compensate(&f, &target, "r1", "lost request").await;
    assert_eq!(lost.status, ActionResultStatus::Failed);
    f.clock.advance(5_000);
    reconciled_as(&f, &compensation, "rec-1", false).await;
    let refused = compensate(&f, &target, "r2", "refused").await;
    assert_eq!(error_code(&refused), "pay.unavailable", "{refused:?}");
    // Checkpointed, then failed: not run again blindly...
    let blind = compensate(&f, &target, "r3", "customer asked").await;
    assert_eq!(
        error_code(&blind),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
    // ...but reconciled, and found not done, it runs.
    reconciled_as(&f, &compensation, "rec-2", false).await;
    let retried = compensate(&f, &target, "r4", "customer asked").await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(f.ledger.count(&format!("refund:{target}:")), 1);
}

/// A rerun's `Checkpoint::recorded()` reports what the earlier attempt's handler recorded, not
/// the cursor a pending reconciliation wrote in between (a review of the checkpoint-cursor fix).
#[tokio::test]
async fn a_rerun_reads_what_its_handler_recorded_not_a_pending_reconciliations_cursor() {
    let f = fixture();
    let (target, _) = charge(&f.host, "c1", "").await;
    let compensation = compensation_transaction_of(&target);
    let lost = compensate(&f, &target, "r1", "lost request").await;
    assert_eq!(lost.status, ActionResultStatus::Failed);
    f.ledger.push("script:pending-once".to_owned());
    f.clock.advance(5_000);
    let pending = reconcile(&f, &compensation, "rec-1").await;
    assert_eq!(
        error_code(&pending),
        codes::TRANSACTION_RECONCILIATION_PENDING,
        "{pending:?}"
    );
    f.clock.advance(5_000);
    reconciled_as(&f, &compensation, "rec-2", false).await;
    let rerun = compensate(&f, &target, "r2", "customer asked").await;
    assert_eq!(rerun.status, ActionResultStatus::Completed, "{rerun:?}");
    assert_eq!(
        f.ledger.count("refund-rerun-cursor:-"),
        1,
        "{:?}",
        f.ledger.entries()
    );
    assert_eq!(f.ledger.count("refund-rerun-cursor:page-2"), 0);
}
