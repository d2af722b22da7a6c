//! A call whose future is dropped while its handler runs (a `tokio::time::timeout` around
//! `Host::invoke`, a web framework dropping the request of a client that left) is settled as
//! its transport's abandonment would be (docs/host-runtime.md §7.2, "Dropping a call"). Found
//! by a hostile review: nothing was settled, so a keyed action's reservation stayed held until
//! it expired (every resend answered `idempotency.in_progress` for the action's timeout plus
//! 60 s) and its transaction stayed `prepared`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{CancelOutcome, Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    ProviderOperationRef, TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{MemoryStore, TransactionStore};
use aip_connector::{CancelRequest, VerifiedTenant};
use aip_connector_tests::DropFlag;
use aip_connector_tests::hooked_store::HookedStore;
use serde_json::json;
use tokio::sync::Notify;

#[derive(Deserialize, JsonSchema)]
struct Order {
    item: String,
}

#[derive(Serialize, JsonSchema)]
struct Placed {
    item: String,
    run: usize,
}

/// A shop whose provider hangs on the first request of each kind and answers the later ones.
#[derive(Clone, Default)]
struct Shop {
    /// Notified when a handler or companion starts waiting on the provider.
    waiting: Arc<Notify>,
    /// Handler and companion runs.
    runs: Arc<AtomicUsize>,
    /// The first run hung (later runs answer).
    hung: Arc<AtomicBool>,
    /// The hanging future was dropped.
    dropped: Arc<AtomicBool>,
    /// Notified when the cancel companion starts (it never answers).
    recalling: Arc<Notify>,
}

impl Shop {
    /// The provider's answer for `order`.
    async fn placed(&self, order: Order) -> Result<Placed, ConnectorFailure> {
        Ok(Placed {
            item: order.item,
            run: self.provider().await,
        })
    }

    /// Counts the run; the first one hangs until its future is dropped.
    async fn provider(&self) -> usize {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.hung.swap(true, Ordering::SeqCst) {
            let _flag = DropFlag(Arc::clone(&self.dropped));
            self.waiting.notify_one();
            std::future::pending::<()>().await;
        }
        run
    }
}

#[connector(id = "shop")]
impl Shop {
    /// Place an order; the key goes to the provider, so a retry is safe.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
    )]
    async fn place(&self, order: Order, _key: IdempotencyKey) -> Result<Placed, ConnectorFailure> {
        self.placed(order).await
    }

    /// Charge a card; the handler never sees the key, so a retry is not known to be safe.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
    )]
    async fn charge(&self, order: Order) -> Result<Placed, ConnectorFailure> {
        self.placed(order).await
    }

    /// Ship an order in a transaction; the provider's operation is checkpointed first.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
    )]
    async fn ship(
        &self,
        order: Order,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Placed, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "shop".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation, None).await?;
        self.placed(order).await
    }

    /// Pack an order in a transaction, with or without a key.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(optional),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
        waive(code = "contract.lint.mutating_without_idempotency", reason = "a test fixture"),
    )]
    async fn pack(&self, order: Order, checkpoint: Checkpoint) -> Result<Placed, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "shop".into(),
            operation_id: format!("pack-{}", order.item),
            request_id: None,
        };
        checkpoint.record(operation, None).await?;
        self.placed(order).await
    }

    /// Refund an order, once an operator approved it; the key goes to the provider.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(required, selector = role("ops"), evidence = [reason]),
    )]
    async fn refund(
        &self,
        order: Order,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Placed, ConnectorFailure> {
        self.placed(order).await
    }

    /// Reserve stock: plans are validated by the provider; the handler never sees the key.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [plan, commit], fidelity = downstream_validation),
        validate = Self::check,
    )]
    async fn reserve(
        &self,
        order: Order,
        _checkpoint: Checkpoint,
    ) -> Result<Placed, ConnectorFailure> {
        Ok(Placed {
            item: order.item,
            run: 0,
        })
    }

    async fn check(&self, order: Order) -> Result<Placed, ConnectorFailure> {
        self.placed(order).await
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.provider().await;
        Ok(ReconcileOutcome::Committed { evidence: None })
    }

    /// Deliver an order; the handler never sees the key, and a stop request to the courier
    /// hangs.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        cancel = Self::recall,
    )]
    async fn deliver(&self, order: Order) -> Result<Placed, ConnectorFailure> {
        self.placed(order).await
    }

    async fn recall(&self, _request: CancelRequest) -> Result<(), ConnectorFailure> {
        self.recalling.notify_one();
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(shop: &Shop, store: &Arc<MemoryStore>) -> Host {
    Host::builder()
        .connector(shop.clone())
        .store(Arc::clone(store) as _)
        .build()
        .unwrap()
}

fn order(capability: &str, key: &str) -> Action {
    Action::new(capability, json!({ "item": "teapot" })).with_idempotency_key(key)
}

/// Calls `action` and drops the call once its handler (or companion) waits on the provider, as
/// a `tokio::time::timeout` around the call would.
async fn call_and_drop(shop: &Shop, host: &Host, action: Action) {
    let caller = caller();
    tokio::select! {
        result = host.invoke(action, &caller) => panic!("the call ended: {result:?}"),
        () = shop.waiting.notified() => {}
    }
    assert!(
        shop.dropped.load(Ordering::SeqCst),
        "the handler's future was dropped with the call"
    );
}

/// Sends `action` again until its key is no longer held by the dropped call (its settlement
/// runs on a task of its own), for up to two seconds: the reservation would otherwise be held
/// for the action's timeout plus 60 s.
async fn resend(host: &Host, action: &Action) -> ActionResult {
    for _ in 0..400 {
        let result = host.invoke(action.clone(), &caller()).await;
        let in_progress = result
            .error
            .as_ref()
            .is_some_and(|e| e.code == codes::IDEMPOTENCY_IN_PROGRESS);
        if !in_progress {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the dropped call's key is still held: it was never settled");
}

#[tokio::test]
async fn a_dropped_call_whose_retry_is_safe_releases_its_key() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:place", "order-1");
    call_and_drop(&shop, &host, action.clone()).await;
    // The abandonment is retryable (the handler forwards the key), so the key was released and
    // the resend runs the action again.
    let result = resend(&host, &action).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert!(!result.is_idempotent_replay());
    assert_eq!(result.output.unwrap()["run"], 2);
    // And the completion is what the key holds now.
    let replayed = host.invoke(action, &caller()).await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_dropped_call_unsafe_to_retry_stores_its_abandonment() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:charge", "charge-1");
    call_and_drop(&shop, &host, action.clone()).await;
    // The charge may have reached the provider, and running it again could charge twice: the
    // abandonment is stored under the key and replayed.
    let result = resend(&host, &action).await;
    let error = result.error.as_ref().expect("abandoned");
    assert_eq!(error.code, codes::ACTION_ABANDONED, "{result:?}");
    assert_eq!(error.retryable, Some(false), "{result:?}");
    assert!(result.is_idempotent_replay(), "{result:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_dropped_execute_after_its_checkpoint_leaves_an_unknown_outcome() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    let action = order("cap:shop:ship", "ship-1").with_transaction(transaction);
    call_and_drop(&shop, &host, action.clone()).await;
    // Settled as an unknown outcome (the provider may hold the shipment), not left `prepared`.
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    let error = result.error.as_ref().expect("abandoned");
    assert_eq!(error.code, codes::ACTION_ABANDONED, "{result:?}");
    assert_eq!(
        error.details.as_ref().unwrap()["transaction_id"],
        json!(id),
        "the answer names the transaction to reconcile: {result:?}"
    );
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::OutcomeUnknown);
    assert!(record.provider_operation.is_some());
    // The reconciliation the answer asks for settles it.
    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(id.clone());
    let reconciled = host
        .invoke(
            order("cap:shop:ship", "ship-1-reconcile").with_transaction(reconcile),
            &caller(),
        )
        .await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    // The handler once, the lookup once.
    assert_eq!(shop.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_call_dropped_before_its_handler_started_is_retryable_whatever_its_retry_safety() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    // A plan's validation is a lookup; the handler, unsafe to retry, never started.
    let action = order("cap:shop:reserve", "reserve-1")
        .with_transaction(ActionTransaction::new(TransactionMode::Plan));
    call_and_drop(&shop, &host, action.clone()).await;
    let result = resend(&host, &action).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert!(!result.is_idempotent_replay(), "{result:?}");
    assert_eq!(
        shop.runs.load(Ordering::SeqCst),
        2,
        "the validation ran again"
    );
}

#[tokio::test]
async fn a_call_driven_to_its_end_is_settled_once() {
    // The guard is disarmed by the pipeline's own settlement: a completed call's key replays
    // its result, and no second settlement is written.
    let shop = Shop::default();
    shop.hung.store(true, Ordering::SeqCst);
    let store = Arc::new(HookedStore::default());
    let host = Host::builder()
        .connector(shop.clone())
        .store(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let action = order("cap:shop:charge", "charge-2");
    let first = host.invoke(action.clone(), &caller()).await;
    assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let replayed = host.invoke(action, &caller()).await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert_eq!(replayed.status, ActionResultStatus::Completed);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
    assert_eq!(store.settles(), 1);
    assert_eq!(store.releases(), 0);
}

/// A call dropped after its handler completed, while its transaction's settlement is written,
/// settles with the handler's answer: the shipment is `committed` and the key replays the
/// completion, rather than an abandonment that would call a committed write unknown.
#[tokio::test]
async fn a_call_dropped_while_its_transaction_settles_settles_with_the_handlers_answer() {
    let shop = Shop::default();
    shop.hung.store(true, Ordering::SeqCst);
    // The first `prepared → committed` transition never answers; later writes go through.
    let stalled = Arc::new(Notify::new());
    let stalled_once = AtomicBool::new(false);
    let store = Arc::new(HookedStore::before_transition({
        let stalled = Arc::clone(&stalled);
        move |transition| {
            (transition.to == TransactionProtocolStatus::Committed
                && !stalled_once.swap(true, Ordering::SeqCst))
            .then(|| {
                stalled.notify_one();
                Box::pin(std::future::pending()) as _
            })
        }
    }));
    let host = Host::builder()
        .connector(shop.clone())
        .store(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    let action = order("cap:shop:ship", "ship-2").with_transaction(transaction);
    let caller = caller();
    tokio::select! {
        result = host.invoke(action.clone(), &caller) => panic!("the call ended: {result:?}"),
        () = stalled.notified() => {}
    }
    let result = resend(&host, &action).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert!(result.is_idempotent_replay(), "{result:?}");
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Committed);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

/// A reconciliation is a lookup: dropped, it leaves the outcome unknown and releases its key, so
/// the same reconcile runs again (found by a hostile review: it was stored as a permanent
/// abandonment naming the transaction, as a dropped write is).
#[tokio::test]
async fn a_dropped_reconciliation_releases_its_key() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    call_and_drop(
        &shop,
        &host,
        order("cap:shop:ship", "ship-3").with_transaction(transaction),
    )
    .await;
    wait_for_status(&*store, &id, TransactionProtocolStatus::OutcomeUnknown).await;
    // The lookup hangs once too.
    shop.hung.store(false, Ordering::SeqCst);
    shop.dropped.store(false, Ordering::SeqCst);
    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(id.clone());
    let reconcile = order("cap:shop:ship", "ship-3-reconcile").with_transaction(reconcile);
    call_and_drop(&shop, &host, reconcile.clone()).await;
    let result = resend(&host, &reconcile).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert!(!result.is_idempotent_replay(), "{result:?}");
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Reconciled);
}

/// Waits (up to two seconds) for the dropped call's transaction to settle to `status`.
async fn wait_for_status(
    store: &impl TransactionStore,
    id: &TransactionId,
    status: TransactionProtocolStatus,
) {
    for _ in 0..400 {
        let record = store.transaction(id).await.unwrap().unwrap();
        if record.status == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let record = store.transaction(id).await.unwrap().unwrap();
    panic!("the transaction is {:?}, not {status:?}", record.status);
}

#[tokio::test]
async fn a_dropped_execute_without_a_key_settles_its_transaction() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let id = TransactionId::new();
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(id.clone());
    let action =
        Action::new("cap:shop:pack", json!({ "item": "teapot" })).with_transaction(transaction);
    call_and_drop(&shop, &host, action).await;
    wait_for_status(&*store, &id, TransactionProtocolStatus::OutcomeUnknown).await;
}

/// A call dropped after its deadline stopped the handler, while the cancel companion runs,
/// settles as the time-out it was (found by a hostile review: it was settled as an abandonment,
/// which a handler unsafe to retry stores as `action.abandoned`).
#[tokio::test]
async fn a_call_dropped_after_its_deadline_settles_as_timed_out() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:deliver", "deliver-1").with_timeout_ms(50);
    let caller = caller();
    tokio::select! {
        result = host.invoke(action.clone(), &caller) => panic!("the call ended: {result:?}"),
        () = shop.recalling.notified() => {}
    }
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    let error = result.error.as_ref().expect("timed out");
    assert_eq!(error.code, codes::SLA_TIMEOUT_EXCEEDED, "{result:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

/// A call dropped after a cancel stopped its handler, while the cancel companion runs, settles
/// as the cancellation the caller asked for.
#[tokio::test]
async fn a_call_dropped_after_a_cancel_settles_as_cancelled() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:deliver", "deliver-2");
    let caller = caller();
    tokio::select! {
        result = host.invoke(action.clone(), &caller) => panic!("the call ended: {result:?}"),
        () = async {
            shop.waiting.notified().await;
            assert_eq!(host.cancel(&action.id), CancelOutcome::Cancelled);
            shop.recalling.notified().await;
        } => {}
    }
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
}

/// A cancel sent right after the call was dropped is late for it (its key is being released
/// for the retry): it is not remembered to cancel the caller's retry (found by a hostile review:
/// the retry was noted only once the spawned settlement ran).
#[tokio::test]
async fn a_cancel_right_after_a_drop_does_not_cancel_the_retry() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:place", "order-2");
    call_and_drop(&shop, &host, action.clone()).await;
    assert_eq!(host.cancel(&action.id), CancelOutcome::AlreadyFinished);
    let result = resend(&host, &action).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
}

/// Polls `call` until the shop's provider waits, and hands the call back unfinished.
async fn until_waiting<F: std::future::Future<Output = ActionResult>>(
    shop: &Shop,
    mut call: std::pin::Pin<Box<F>>,
) -> std::pin::Pin<Box<F>> {
    tokio::select! {
        result = &mut call => panic!("the call ended: {result:?}"),
        () = shop.waiting.notified() => {}
    }
    call
}

/// A call dropped after its deadline passed but before the race saw it (the call was not polled
/// again) settles as the time-out it was.
#[tokio::test]
async fn a_call_dropped_after_its_deadline_unseen_settles_as_timed_out() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:charge", "charge-3").with_timeout_ms(50);
    let caller = caller();
    let call = until_waiting(&shop, Box::pin(host.invoke(action.clone(), &caller))).await;
    // The deadline passes while nothing polls the call.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(call);
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    let error = result.error.as_ref().expect("timed out");
    assert_eq!(error.code, codes::SLA_TIMEOUT_EXCEEDED, "{result:?}");
}

/// A call dropped after a cancel fired but before the race saw it settles as cancelled.
#[tokio::test]
async fn a_call_dropped_after_a_cancel_unseen_settles_as_cancelled() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:charge", "charge-4");
    let caller = caller();
    let call = until_waiting(&shop, Box::pin(host.invoke(action.clone(), &caller))).await;
    assert_eq!(host.cancel(&action.id), CancelOutcome::Cancelled);
    drop(call);
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
}

/// A shop whose refunds need `user:bob`'s approval, on `store`.
fn approving_host(shop: &Shop, store: Arc<HookedStore>) -> Host {
    use aip_connector::host::{ApproverMemberships, StaticApprovalAuthority};
    let ops = ApproverMemberships::default()
        .with_tenant("t1")
        .with_role("ops");
    Host::builder()
        .connector(shop.clone())
        .store(store as _)
        .approval_authority(StaticApprovalAuthority::new().with("user:bob", ops))
        .build()
        .unwrap()
}

/// Gates a refund and has `user:bob` approve it; answers the approval.
async fn approved_refund(host: &Host, key: &str) -> aip_connector::ids::ApprovalId {
    use aip_connector::model::{ApprovalDecision, ApprovalDecisionKind};
    let pending = host.invoke(order("cap:shop:refund", key), &caller()).await;
    assert_eq!(
        pending.status,
        ActionResultStatus::PendingApproval,
        "{pending:?}"
    );
    let approval = pending.approval_id().expect("the gate names its approval");
    let bob = TrustedContext::new(Principal::new("user:bob", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"));
    host.record_approval_decision(
        ApprovalDecision::new(
            approval.clone(),
            ApprovalDecisionKind::Approved,
            Principal::new("user:bob", PrincipalKind::Human),
        )
        .with_reason("checked the order"),
        &bob,
    )
    .await
    .unwrap();
    approval
}

/// Resumes `approval` until the dropped resume's claim is back (up to two seconds), and answers
/// the resume that ran.
async fn resume_again(host: &Host, approval: &aip_connector::ids::ApprovalId) -> ActionResult {
    for _ in 0..400 {
        let result = host.resume_approved(approval, &caller()).await;
        let taken = result.error.as_ref().is_some_and(|e| {
            e.code == codes::POLICY_APPROVAL_ALREADY_RESUMED
                || e.code == codes::IDEMPOTENCY_IN_PROGRESS
        });
        if !taken {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the dropped resume never gave its claim back");
}

/// A resumed approved action dropped while its handler runs, retryably, gives its resume back:
/// the next resume runs the action (it was answered `policy.approval_already_resumed`).
#[tokio::test]
async fn a_dropped_resume_gives_its_claim_back() {
    let shop = Shop::default();
    let host = approving_host(&shop, Arc::new(HookedStore::default()));
    let approval = approved_refund(&host, "refund-1").await;
    let caller = caller();
    let resume = until_waiting(&shop, Box::pin(host.resume_approved(&approval, &caller))).await;
    drop(resume);
    let resumed = resume_again(&host, &approval).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 2);
}

/// A resume dropped while its key is being reserved (after it claimed the resume, before the
/// guard that settles a dropped call is armed) gives its claim back too (found by a hostile
/// review: the approval read as resumed for good).
#[tokio::test]
async fn a_resume_dropped_while_reserving_its_key_gives_its_claim_back() {
    let shop = Shop::default();
    shop.hung.store(true, Ordering::SeqCst);
    // The gate's reservation goes through; the resume's first one never answers.
    let stalled = Arc::new(Notify::new());
    let reservations = AtomicUsize::new(0);
    let store = Arc::new(HookedStore::before_reserve({
        let stalled = Arc::clone(&stalled);
        move |_| {
            (reservations.fetch_add(1, Ordering::SeqCst) == 1).then(|| {
                stalled.notify_one();
                Box::pin(std::future::pending()) as _
            })
        }
    }));
    let host = approving_host(&shop, store);
    let approval = approved_refund(&host, "refund-2").await;
    let caller = caller();
    tokio::select! {
        result = host.resume_approved(&approval, &caller) => panic!("the resume ended: {result:?}"),
        () = stalled.notified() => {}
    }
    let resumed = resume_again(&host, &approval).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

/// A plan dropped after a cancel stopped its validation, before its race saw it, settles as the
/// cancellation (found by a hostile review: only a handler's race told the guard how it was
/// stopped, so the plan was answered as abandoned and its key released).
#[tokio::test]
async fn a_plan_dropped_after_a_cancel_of_its_validation_settles_as_cancelled() {
    let shop = Shop::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&shop, &store);
    let action = order("cap:shop:reserve", "reserve-2")
        .with_transaction(ActionTransaction::new(TransactionMode::Plan));
    let caller = caller();
    let call = until_waiting(&shop, Box::pin(host.invoke(action.clone(), &caller))).await;
    assert_eq!(host.cancel(&action.id), CancelOutcome::Cancelled);
    drop(call);
    let result = resend(&host, &action).await;
    assert!(result.is_idempotent_replay(), "{result:?}");
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}
