//! A transactional attempt whose admission write landed with its answer lost (a PostgreSQL
//! connection that closed after the commit): the caller is told `storage.unavailable`,
//! retryable, and the retry it was told to make runs the handler once, after the first
//! attempt is certainly over; before then it is told to wait (`transaction.attempt_in_progress`,
//! retryable). Found by a store-failure probe: a commit's claim and a compensation's insert
//! left the plan `committing` and the undo `compensating` for good, refused to every retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{ManualClock, TransactionStore};
use aip_connector_tests::hooked_store::HookedStore;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Order {
    item: String,
}

#[derive(Serialize, JsonSchema)]
struct Ordered {
    item: String,
}

#[derive(Deserialize, JsonSchema)]
struct Reason {
    reason: String,
}

#[derive(Serialize, JsonSchema)]
struct Undone {
    reason: String,
}

/// Handler runs, by capability.
#[derive(Clone, Default)]
struct Shop {
    orders: Arc<AtomicUsize>,
    undos: Arc<AtomicUsize>,
}

#[connector(id = "shop")]
impl Shop {
    /// Order an item: planned and committed, or executed, and undone by `cap:shop:undo`.
    #[capability(
        id = "cap:shop:order",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit, compensate], fidelity = policy_and_schema),
        compensation(supported, capability = "cap:shop:undo", window_ms = 86_400_000),
    )]
    async fn order(
        &self,
        order: Order,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Ordered, ConnectorFailure> {
        self.orders.fetch_add(1, Ordering::SeqCst);
        Ok(Ordered { item: order.item })
    }

    /// Undo an order: the compensating capability.
    #[capability(
        id = "cap:shop:undo",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn undo(
        &self,
        reason: Reason,
        _key: IdempotencyKey,
        _compensation: Compensation,
        _checkpoint: Checkpoint,
    ) -> Result<Undone, ConnectorFailure> {
        self.undos.fetch_add(1, Ordering::SeqCst);
        Ok(Undone {
            reason: reason.reason,
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

struct Fixture {
    host: Host,
    store: Arc<HookedStore>,
    shop: Shop,
    clock: Arc<ManualClock>,
}

fn fixture() -> Fixture {
    let shop = Shop::default();
    let store = Arc::new(HookedStore::default());
    let clock = Arc::new(ManualClock::new());
    let host = Host::builder()
        .connector(shop.clone())
        .store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    Fixture {
        host,
        store,
        shop,
        clock,
    }
}

fn code(result: &ActionResult) -> &str {
    result.error.as_ref().map_or("<none>", |e| e.code.as_str())
}

/// Asserts `result` failed with `code`, retryable.
#[track_caller]
fn assert_retryable(result: &ActionResult, expected: &str) {
    assert_eq!(code(result), expected, "{result:?}");
    assert_eq!(result.error.as_ref().unwrap().retryable, Some(true));
}

/// The first attempt lost its admission's answer; the same action sent again is told to wait
/// while that attempt may still run, then runs once (past the first attempt's deadline, 60 s
/// by default, plus 5 s), and a later resend replays it.
async fn retried_after_a_lost_answer(f: &Fixture, action: &Action, runs: &AtomicUsize) {
    let first = f.host.invoke(action.clone(), &caller()).await;
    assert_retryable(&first, codes::STORAGE_UNAVAILABLE);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let soon = f.host.invoke(action.clone(), &caller()).await;
    assert_retryable(&soon, codes::TRANSACTION_ATTEMPT_IN_PROGRESS);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    f.clock.advance(65_000);
    let ran = f.host.invoke(action.clone(), &caller()).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let replayed = f.host.invoke(action.clone(), &caller()).await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Plans an order of `item` under `key`; returns the plan id.
async fn plan(f: &Fixture, item: &str, key: &str) -> String {
    let plan = f
        .host
        .invoke(
            Action::new("cap:shop:order", json!({ "item": item }))
                .with_idempotency_key(key)
                .with_transaction(ActionTransaction::new(TransactionMode::Plan)),
            &caller(),
        )
        .await;
    assert_eq!(plan.status, ActionResultStatus::Completed, "{plan:?}");
    plan.output.unwrap()["plan"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_commit_whose_claim_lost_its_answer_runs_once_when_retried() {
    let f = fixture();
    let plan_id = plan(&f, "lamp", "plan-1").await;
    let commit = Action::new("cap:shop:order", json!({ "item": "lamp" }))
        .with_idempotency_key("commit-1")
        .with_transaction(ActionTransaction::commit(plan_id.clone()));

    f.store.lose_next_transition_answer();
    retried_after_a_lost_answer(&f, &commit, &f.shop.orders).await;

    // The same commit action under another key finds its plan committed: refused.
    let resent = f
        .host
        .invoke(commit.clone().with_idempotency_key("commit-1b"), &caller())
        .await;
    assert_eq!(code(&resent), codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
    assert_eq!(f.shop.orders.load(Ordering::SeqCst), 1);

    // Another commit of the plan still learns that a commit claimed it.
    let other = Action::new("cap:shop:order", json!({ "item": "lamp" }))
        .with_idempotency_key("commit-2")
        .with_transaction(ActionTransaction::commit(plan_id));
    let refused = f.host.invoke(other, &caller()).await;
    assert_eq!(code(&refused), codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
}

#[tokio::test]
async fn a_compensation_whose_insert_lost_its_answer_runs_once_when_retried() {
    let f = fixture();
    let ordered = Action::new("cap:shop:order", json!({ "item": "chair" }))
        .with_idempotency_key("order-1")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let target = ordered.id.clone();
    let result = f.host.invoke(ordered, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let undo = Action::new("cap:shop:order", json!({ "reason": "broken" }))
        .with_idempotency_key("undo-1")
        .with_transaction(ActionTransaction::compensate(target.clone()));

    f.store.lose_next_insert_answer();
    retried_after_a_lost_answer(&f, &undo, &f.shop.undos).await;

    // The same compensate action under another key finds its compensation settled: refused,
    // not taken over (only a `compensating` attempt is).
    let resent = f
        .host
        .invoke(undo.clone().with_idempotency_key("undo-1b"), &caller())
        .await;
    assert_eq!(
        code(&resent),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
    assert_eq!(f.shop.undos.load(Ordering::SeqCst), 1);

    // Another compensation of the target is refused: it was compensated once.
    let again = Action::new("cap:shop:order", json!({ "reason": "twice" }))
        .with_idempotency_key("undo-2")
        .with_transaction(ActionTransaction::compensate(target));
    let refused = f.host.invoke(again, &caller()).await;
    assert_eq!(
        code(&refused),
        codes::TRANSACTION_COMPENSATION_ALREADY_CLAIMED
    );
}

/// A plan claimed in time, whose claim's answer was lost, is taken over after the plan's 15
/// minutes have passed: the take-over is not refused `transaction.plan_expired`, which left
/// the record `committing` for good (found by a review).
#[tokio::test]
async fn a_commit_whose_claim_lost_its_answer_is_taken_over_after_the_plan_expired() {
    let f = fixture();
    let plan_id = plan(&f, "rug", "plan-2").await;
    f.clock.advance(14 * 60_000);
    let commit = Action::new("cap:shop:order", json!({ "item": "rug" }))
        .with_idempotency_key("commit-3")
        .with_transaction(ActionTransaction::commit(plan_id));
    f.store.lose_next_transition_answer();
    let first = f.host.invoke(commit.clone(), &caller()).await;
    assert_retryable(&first, codes::STORAGE_UNAVAILABLE);

    f.clock.advance(65_000);
    let ran = f.host.invoke(commit, &caller()).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(f.shop.orders.load(Ordering::SeqCst), 1);
}

/// An `execute` whose settlement failed (a statement that did not apply) is settled on the
/// host's next read: the record reads `committed`, so the same action sent under another key
/// is answered from it (a replay) instead of taking over a `prepared` attempt and running the
/// handler again. Before (a store-failure probe), the failure was logged and the record stayed
/// `prepared`, while the caller was told `completed`.
#[tokio::test]
async fn an_execute_whose_settlement_failed_is_settled_when_read_again() {
    let f = fixture();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(TransactionId::new());
    let execute = Action::new("cap:shop:order", json!({ "item": "desk" }))
        .with_idempotency_key("execute-1")
        .with_transaction(transaction);
    f.store
        .fail_transitions_to(TransactionProtocolStatus::Committed, 2);
    let ran = f.host.invoke(execute.clone(), &caller()).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let records = f.store.transactions_by_action(&execute.id).await.unwrap();
    let [record] = records.as_slice() else {
        panic!("one transaction record: {records:?}");
    };
    assert_eq!(record.status, TransactionProtocolStatus::Committed);

    f.clock.advance(65_000);
    let resent = f
        .host
        .invoke(execute.with_idempotency_key("execute-2"), &caller())
        .await;
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    assert!(resent.is_idempotent_replay(), "{resent:?}");
    assert_eq!(f.shop.orders.load(Ordering::SeqCst), 1);
}

/// A key whose settlement the store failed, once or twice, applied or not, is settled on the
/// host's next write: the same action sent again under the key replays the result. Before (a
/// store-failure probe), the failure was logged and the key stayed reserved, so the resend was
/// told `idempotency.in_progress` until the reservation expired, and then ran the handler again.
/// (The case of a write applied with its answer lost passed before too; it keeps the second
/// write, which the first's landing fences, from being taken for a failure.)
#[tokio::test]
async fn a_key_whose_settlement_failed_is_settled_when_written_again() {
    for (times, applied) in [(1, false), (2, false), (1, true)] {
        let f = fixture();
        let execute = Action::new("cap:shop:order", json!({ "item": "lamp" }))
            .with_idempotency_key("settle-1")
            .with_transaction(ActionTransaction::new(TransactionMode::Execute));
        f.store.fail_next_settles(times, applied);
        let ran = f.host.invoke(execute.clone(), &caller()).await;
        assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
        let resent = f.host.invoke(execute, &caller()).await;
        assert!(
            resent.is_idempotent_replay(),
            "{times} failed settlements (applied: {applied}): {resent:?}"
        );
        assert_eq!(f.shop.orders.load(Ordering::SeqCst), 1);
    }
}

/// A call dropped while its failed settlement waits to be written again (its transport timed
/// out during the pause) still settles its key: the writes run on a task of their own (found by
/// a review: the pending writes went with the dropped call, and the key stayed reserved).
#[tokio::test]
async fn a_call_dropped_while_its_settlement_is_written_again_still_settles_its_key() {
    let f = fixture();
    let execute = Action::new("cap:shop:order", json!({ "item": "rug" }))
        .with_idempotency_key("settle-dropped")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    f.store.fail_next_settles(1, false);
    let call = tokio::spawn({
        let (host, execute) = (f.host.clone(), execute.clone());
        async move { host.invoke(execute, &caller()).await }
    });
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while f.store.settles() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the first settlement was written");
    call.abort();
    let _ = call.await;
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while f.store.settles() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the settlement was written again after the call was dropped");
    let resent = f.host.invoke(execute, &caller()).await;
    assert!(resent.is_idempotent_replay(), "{resent:?}");
    assert_eq!(f.shop.orders.load(Ordering::SeqCst), 1);
}
