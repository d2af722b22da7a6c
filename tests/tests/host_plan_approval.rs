//! A planned commit released by an approver: the approvers' time does not count against the
//! plan, and a commit the plan would refuse whatever they decide is refused before they are
//! asked (found by an approval trial: a 20-minute decision burnt the approval of a 15-minute
//! plan, and approvers were asked to release commits that could never run).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, Host, StaticApprovalAuthority, TrustedContext};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision,
    ApprovalDecisionKind, Principal, PrincipalKind, TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::store::{ManualClock, MemoryStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Run {
    period: String,
}

#[derive(Serialize, JsonSchema)]
struct Paid {
    run_id: String,
}

#[derive(Clone, Default)]
struct Payroll {
    runs: Arc<AtomicUsize>,
}

#[connector(id = "payroll")]
impl Payroll {
    /// Pays a period's salaries, once planned and released by finance.
    #[capability(
        id = "cap:payroll:run",
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        transaction(modes = [plan, commit], requires_plan),
        approval(required, selector = role("finance"), evidence = [reason], ttl_ms = 86_400_000),
    )]
    async fn run(
        &self,
        run: Run,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            run_id: format!("run-{}", run.period),
        })
    }
}

const MINUTE: u64 = 60_000;

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(payroll: Payroll, clock: Arc<ManualClock>) -> Host {
    Host::builder()
        .connector(payroll)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(
            StaticApprovalAuthority::new().with(
                "user:fin",
                ApproverMemberships::new()
                    .with_tenant("t1")
                    .with_role("finance"),
            ),
        )
        .clock(clock)
        .build()
        .unwrap()
}

/// Plans `period` as Ada and returns the plan id.
async fn plan(host: &Host, period: &str) -> String {
    let planned = host
        .invoke(
            Action::new("cap:payroll:run", json!({ "period": period }))
                .with_idempotency_key(format!("plan-{period}"))
                .with_transaction(ActionTransaction::new(TransactionMode::Plan)),
            &person("user:ada"),
        )
        .await;
    assert_eq!(planned.status, ActionResultStatus::Completed, "{planned:?}");
    planned.output.unwrap()["plan"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn commit(host: &Host, plan_id: &str, period: &str, key: &str) -> ActionResult {
    host.invoke(
        Action::new("cap:payroll:run", json!({ "period": period }))
            .with_idempotency_key(key)
            .with_transaction(ActionTransaction::commit(plan_id.to_owned())),
        &person("user:ada"),
    )
    .await
}

async fn approve(host: &Host, id: &ApprovalId) {
    let decision = ApprovalDecision::new(
        id.clone(),
        ApprovalDecisionKind::Approved,
        Principal::new("user:fin", PrincipalKind::Human),
    )
    .with_reason("checked the run");
    host.record_approval_decision(decision, &person("user:fin"))
        .await
        .unwrap();
}

/// A payroll connector on a host reading a clock the test advances.
fn payroll_host() -> (Payroll, Arc<ManualClock>, Host) {
    let payroll = Payroll::default();
    let clock = Arc::new(ManualClock::new());
    let host = host(payroll.clone(), Arc::clone(&clock));
    (payroll, clock, host)
}

/// Ada resumes the approved commit of `approval`.
async fn resume(host: &Host, approval: &ApprovalId) -> ActionResult {
    host.resume_approved(approval, &person("user:ada")).await
}

fn refused_before_the_gate(result: &ActionResult, code: &str) {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    assert_eq!(result.error.as_ref().unwrap().code, code, "{result:?}");
    assert!(result.approval_id().is_none(), "{result:?}");
}

#[tokio::test]
async fn an_approver_may_take_longer_than_the_plan_lives() {
    let (payroll, clock, host) = payroll_host();
    let plan_id = plan(&host, "2026-11").await;
    clock.advance(10 * MINUTE);
    let pending = commit(&host, &plan_id, "2026-11", "commit-1").await;
    assert_eq!(
        pending.status,
        ActionResultStatus::PendingApproval,
        "{pending:?}"
    );
    let approval = pending.approval_id().unwrap();
    // The plan (15 minutes) would have expired twice over by the decision.
    clock.advance(20 * MINUTE);
    approve(&host, &approval).await;
    let done = resume(&host, &approval).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    assert_eq!(payroll.runs.load(Ordering::SeqCst), 1);
}

/// Only the approvers' time is left out: a commit resumed long after its approval finds its
/// plan expired (found by a hostile review: an approved commit ran on a 400-day-old plan).
#[tokio::test]
async fn the_time_after_the_decision_counts_against_the_plan() {
    let (payroll, clock, host) = payroll_host();
    let plan_id = plan(&host, "2026-11").await;
    clock.advance(10 * MINUTE);
    let pending = commit(&host, &plan_id, "2026-11", "commit-1").await;
    let approval = pending.approval_id().unwrap();
    clock.advance(60 * MINUTE);
    approve(&host, &approval).await;
    // Ten minutes before the gate, six after the decision: sixteen of the plan's fifteen.
    clock.advance(6 * MINUTE);
    let late = resume(&host, &approval).await;
    assert_eq!(
        late.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::TRANSACTION_PLAN_EXPIRED),
        "{late:?}"
    );
    assert_eq!(payroll.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_commit_its_plan_refuses_is_refused_before_anyone_is_asked() {
    let (payroll, clock, host) = payroll_host();
    let plan_id = plan(&host, "2026-11").await;

    let changed = commit(&host, &plan_id, "2026-12", "commit-changed").await;
    refused_before_the_gate(&changed, codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH);
    let unknown = commit(&host, "plan:txn_nope", "2026-11", "commit-unknown").await;
    refused_before_the_gate(&unknown, codes::TRANSACTION_PLAN_NOT_FOUND);

    // The plan's own commit goes through the gate and runs.
    let pending = commit(&host, &plan_id, "2026-11", "commit-1").await;
    let approval = pending
        .approval_id()
        .expect("the commit waits for approval");
    approve(&host, &approval).await;
    let done = resume(&host, &approval).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    // A second commit of the claimed plan is refused at once, not after an approval.
    let again = commit(&host, &plan_id, "2026-11", "commit-2").await;
    refused_before_the_gate(&again, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);

    // A plan that expired before its commit arrived is refused at the gate too.
    let late = plan(&host, "2026-12").await;
    clock.advance(16 * MINUTE);
    let expired = commit(&host, &late, "2026-12", "commit-late").await;
    refused_before_the_gate(&expired, codes::TRANSACTION_PLAN_EXPIRED);
    assert_eq!(payroll.runs.load(Ordering::SeqCst), 1);
}
