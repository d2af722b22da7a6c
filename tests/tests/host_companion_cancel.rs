//! The companions the host runs instead of a handler (a plan's validation handler, a reconcile
//! handler) are cancelled like handlers: `Host::cancel` finds them and the action ends
//! `cancelled`, and a cancel remembered before they start stops them before they run. Found by
//! a hostile review: `Host::cancel` answered `Pending` while they ran, the companion ran on, and
//! the remembered cancel lay in wait for a later action with the same id.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::host::{CancelOutcome, Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    ProviderOperationRef, TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{MemoryStore, TransactionStore};
use aip_connector_tests::DropFlag;
use serde_json::json;
use tokio::sync::Notify;

#[derive(Deserialize, JsonSchema)]
struct Survey {
    site: String,
}

#[derive(Serialize, JsonSchema)]
struct Surveyed {
    report: String,
}

/// A survey provider whose validation and status lookups hang until the test says otherwise.
#[derive(Clone, Default)]
struct Surveys {
    /// Notified when a companion starts waiting on the provider.
    waiting: Arc<Notify>,
    /// Companion runs (their first poll).
    companion_runs: Arc<AtomicUsize>,
    /// A hanging companion's future was dropped.
    dropped: Arc<AtomicBool>,
    /// The reconcile lookup answers instead of hanging.
    answer_lookups: Arc<AtomicBool>,
}

impl Surveys {
    async fn hang(&self) {
        self.companion_runs.fetch_add(1, Ordering::SeqCst);
        let _flag = DropFlag(Arc::clone(&self.dropped));
        self.waiting.notify_one();
        std::future::pending::<()>().await;
    }
}

#[connector(id = "surveys")]
impl Surveys {
    /// Order a site survey; plans are validated by the provider.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [plan, commit, execute, reconcile], fidelity = downstream_validation),
        validate = Self::check,
        reconcile = Self::look_up,
    )]
    async fn order(
        &self,
        survey: Survey,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Surveyed, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "surveys".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        // The provider's answer is lost.
        Err(ConnectorFailure::temporary(
            "surveys.reset",
            format!(
                "connection reset while ordering a survey of {}",
                survey.site
            ),
            "surveys",
        )
        .with_provider_operation(operation)
        .with_uncertain_outcome())
    }

    /// The same order from a handler that never sees the key: its retry safety is `unknown`,
    /// so a handler abandoned by its transport is not retried under the key.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [plan, commit], fidelity = downstream_validation),
        validate = Self::check,
    )]
    async fn order_once(
        &self,
        _survey: Survey,
        _checkpoint: Checkpoint,
    ) -> Result<Surveyed, ConnectorFailure> {
        Ok(Surveyed {
            report: "ordered".into(),
        })
    }

    async fn check(&self, _survey: Survey) -> Result<Surveyed, ConnectorFailure> {
        self.hang().await;
        unreachable!("the validation never answers")
    }

    async fn look_up(
        &self,
        _request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        if self.answer_lookups.load(Ordering::SeqCst) {
            return Ok(ReconcileOutcome::Committed { evidence: None });
        }
        self.hang().await;
        unreachable!("the lookup never answers")
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(surveys: &Surveys, store: &Arc<MemoryStore>) -> Host {
    Host::builder()
        .connector(surveys.clone())
        .store(Arc::clone(store) as _)
        .build()
        .unwrap()
}

fn order(mode: TransactionMode, key: &str, transaction_id: Option<&TransactionId>) -> Action {
    let mut transaction = ActionTransaction::new(mode);
    transaction.transaction_id = transaction_id.cloned();
    Action::new("cap:surveys:order", json!({ "site": "north field" }))
        .with_idempotency_key(key)
        .with_transaction(transaction)
}

/// Runs `action`, and cancels it once a companion waits on the provider.
async fn run_and_cancel(surveys: &Surveys, host: &Host, action: Action) -> ActionResult {
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    surveys.waiting.notified().await;
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    running.await.unwrap()
}

#[tokio::test]
async fn a_plan_whose_validation_waits_is_cancelled() {
    let surveys = Surveys::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&surveys, &store);
    let plan = order(TransactionMode::Plan, "plan-1", None);
    let resend = plan.clone();
    let result = run_and_cancel(&surveys, &host, plan).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert!(
        surveys.dropped.load(Ordering::SeqCst),
        "the validation was dropped"
    );
    // Stored under the key like any cancellation; nothing was planned.
    let replayed = host.invoke(resend, &caller()).await;
    assert_eq!(
        replayed.status,
        ActionResultStatus::Cancelled,
        "{replayed:?}"
    );
    assert!(replayed.is_idempotent_replay());
    assert_eq!(surveys.companion_runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cancel_remembered_before_a_plan_stops_its_validation_before_it_runs() {
    let surveys = Surveys::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&surveys, &store);
    let plan = order(TransactionMode::Plan, "plan-2", None);
    assert_eq!(host.cancel(&plan.id), CancelOutcome::Pending);
    let result = host.invoke(plan, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert_eq!(surveys.companion_runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_reconcile_whose_lookup_waits_is_cancelled_and_the_outcome_stays_unknown() {
    let surveys = Surveys::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&surveys, &store);
    let id = TransactionId::new();
    let lost = host
        .invoke(
            order(TransactionMode::Execute, "exec-1", Some(&id)),
            &caller(),
        )
        .await;
    assert_eq!(
        lost.error.as_ref().unwrap().code,
        "surveys.reset",
        "{lost:?}"
    );
    let reconcile = order(TransactionMode::Reconcile, "rec-1", Some(&id));
    let result = run_and_cancel(&surveys, &host, reconcile).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert!(
        surveys.dropped.load(Ordering::SeqCst),
        "the lookup was dropped"
    );
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::OutcomeUnknown);
    // The next reconciliation, whose lookup answers, settles it.
    surveys.answer_lookups.store(true, Ordering::SeqCst);
    let settled = host
        .invoke(
            order(TransactionMode::Reconcile, "rec-2", Some(&id)),
            &caller(),
        )
        .await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
    let record = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(record.status, TransactionProtocolStatus::Reconciled);
}

/// Found by a hostile review: a plan whose validation was abandoned by its transport was answered
/// as an abandoned handler is, so on a capability whose handler is unsafe to retry the
/// abandonment was stored under the key and every retry replayed it. A validation has no effect
/// at the provider: its abandonment is always retryable, and the key is released.
#[tokio::test]
async fn a_plan_abandoned_by_its_transport_is_retryable_whatever_the_handlers_retry_safety() {
    let surveys = Surveys::default();
    let store = Arc::new(MemoryStore::default());
    let host = host(&surveys, &store);
    let mut transaction = ActionTransaction::new(TransactionMode::Plan);
    transaction.transaction_id = None;
    let plan = Action::new("cap:surveys:order_once", json!({ "site": "north field" }))
        .with_idempotency_key("plan-3")
        .with_transaction(transaction);
    let id = plan.id.clone();
    let running = tokio::spawn({
        let (host, plan) = (host.clone(), plan.clone());
        async move { host.invoke(plan, &caller()).await }
    });
    surveys.waiting.notified().await;
    assert_eq!(host.abandon_as(&id, &caller()), CancelOutcome::Cancelled);
    let result = running.await.unwrap();
    let error = result.error.as_ref().expect("abandoned");
    assert_eq!(
        error.code,
        aip_connector::codes::ACTION_ABANDONED,
        "{result:?}"
    );
    assert_eq!(error.retryable, Some(true), "{result:?}");
    // The key was released: the retry runs the validation again rather than replaying.
    let retried = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(plan, &caller()).await }
    });
    surveys.waiting.notified().await;
    assert_eq!(surveys.companion_runs.load(Ordering::SeqCst), 2);
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    assert_eq!(retried.await.unwrap().status, ActionResultStatus::Cancelled);
}
