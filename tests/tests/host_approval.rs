//! The approval lifecycle through the host: gate, decisions with authority resolution, distinct
//! principals, separation of duties, expiry, denial, and resume exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{
    ApproverMemberships, Deployment, Host, StaticApprovalAuthority, TrustedContext,
};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ApprovalDecision, ApprovalDecisionKind, Principal,
    PrincipalKind,
};
use aip_connector::prelude::*;
use aip_connector::store::{
    ApprovalStatus, ApprovalStore, Clock, ManualClock, MemoryStore, ResumeClaim, SharedStore,
};
use aip_connector_tests::hooked_store::{Gate, HookedStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Refund {
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Refunded {
    refund_id: String,
}

#[derive(Clone, Default)]
struct Payments {
    executions: Arc<AtomicUsize>,
    /// When set, the refund waits inside the handler until the test releases it.
    hold: Option<Arc<Hold>>,
    /// While set, a run fails retryably (the provider was unreachable) and clears it.
    fail_once: Arc<std::sync::atomic::AtomicBool>,
}

/// Keeps a refund running: `entered` fires when the handler starts, `release` lets it finish.
#[derive(Default)]
struct Hold {
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[connector(id = "payments")]
impl Payments {
    /// Refund a payment; two distinct finance approvers, never the requester.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), distinct_principals = 2, evidence = [reason], separation(requester_must_differ), ttl_ms = 60_000),
    )]
    async fn refund(
        &self,
        refund: Refund,
        key: IdempotencyKey,
        approval: Approval,
    ) -> Result<Refunded, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        if self.fail_once.swap(false, Ordering::SeqCst) {
            return Err(ConnectorFailure::new(
                "payments.unreachable",
                "the payment provider did not answer",
                ErrorCategory::Temporary,
                ConnectorOperation::Invocation,
                "payments",
            )
            .with_retryable(true));
        }
        if let Some(hold) = &self.hold {
            hold.entered.notify_one();
            hold.release.notified().await;
        }
        Ok(Refunded {
            refund_id: format!(
                "rf-{}-{}-{}",
                refund.amount_cents,
                key.as_str(),
                approval.approvals().approval_ids.len()
            ),
        })
    }
}

fn finance() -> ApproverMemberships {
    ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance")
}

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(payments: Payments, clock: Arc<ManualClock>) -> Host {
    host_on(payments, clock, Arc::new(MemoryStore::default()))
}

fn host_on(payments: Payments, clock: Arc<ManualClock>, store: SharedStore) -> Host {
    let authority = StaticApprovalAuthority::new()
        .with("user:alice", finance())
        .with("user:bob", finance())
        .with("user:req", finance())
        .with(
            "user:sales",
            ApproverMemberships::default()
                .with_tenant("t1")
                .with_role("sales"),
        );
    Host::builder()
        .connector(payments)
        .store(store)
        .approval_authority(authority)
        .clock(clock)
        .build()
        .unwrap()
}

fn decision(id: &ApprovalId, approver: &str, kind: ApprovalDecisionKind) -> ApprovalDecision {
    ApprovalDecision::new(
        id.clone(),
        kind,
        Principal::new(approver, PrincipalKind::Human),
    )
    .with_reason("checked the order")
    .with_decision_id(format!("dec-{approver}"))
}

fn refund_action() -> Action {
    Action::new("cap:payments:refund", json!({ "amount_cents": 1200 }))
        .with_idempotency_key("refund-1")
}

async fn gate(host: &Host) -> ApprovalId {
    let pending = host.invoke(refund_action(), &person("user:req")).await;
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    assert_eq!(
        pending.error.as_ref().unwrap().code,
        codes::POLICY_HUMAN_APPROVAL_REQUIRED
    );
    pending.approval_id().expect("the gate names its approval")
}

/// Two distinct finance approvers: the refund's quorum.
const QUORUM: [&str; 2] = ["user:alice", "user:bob"];

/// Records the same decision by each of `approvers`, each authenticated as themselves.
async fn decide(host: &Host, id: &ApprovalId, approvers: &[&str], kind: ApprovalDecisionKind) {
    for approver in approvers {
        host.record_approval_decision(decision(id, approver, kind), &person(approver))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn quorum_of_two_distinct_approvers_then_resume_exactly_once() {
    let payments = Payments::default();
    let host = host(payments.clone(), Arc::default());
    let id = gate(&host).await;

    // A duplicate while pending replays the gate; the handler has not run.
    let duplicate = host.invoke(refund_action(), &person("user:req")).await;
    assert_eq!(duplicate.status, ActionResultStatus::PendingApproval);
    assert_eq!(payments.executions.load(Ordering::SeqCst), 0);

    // The requester may not approve their own refund.
    let own = host
        .record_approval_decision(
            decision(&id, "user:req", ApprovalDecisionKind::Approved),
            &person("user:req"),
        )
        .await
        .unwrap_err();
    assert_eq!(own.code, codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER);

    // One approver voting twice is still one distinct principal.
    let first = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &person("user:alice"),
        )
        .await
        .unwrap();
    assert_eq!(first.status, ApprovalStatus::Pending);
    let again = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &person("user:alice"),
        )
        .await
        .unwrap();
    assert_eq!(again.status, ApprovalStatus::Pending);

    // Nobody can resume a pending approval.
    assert_eq!(
        host.resume_approved(&id, &person("user:req"))
            .await
            .error
            .unwrap()
            .code,
        codes::POLICY_APPROVAL_NOT_GRANTED
    );

    let second = host
        .record_approval_decision(
            decision(&id, "user:bob", ApprovalDecisionKind::Approved),
            &person("user:bob"),
        )
        .await
        .unwrap();
    assert_eq!(second.status, ApprovalStatus::Approved);

    // Only the requester resumes, and two racing resumes run the handler once.
    assert_eq!(
        host.resume_approved(&id, &person("user:alice"))
            .await
            .error
            .unwrap()
            .code,
        codes::AUTH_NOT_AUTHORIZED
    );
    let requester = person("user:req");
    let (a, b) = tokio::join!(
        host.resume_approved(&id, &requester),
        host.resume_approved(&id, &requester)
    );
    let statuses = [a.status, b.status];
    assert!(
        statuses.contains(&ActionResultStatus::Completed),
        "{a:?} {b:?}"
    );
    let loser = if a.status == ActionResultStatus::Completed {
        b
    } else {
        a
    };
    assert_eq!(
        loser.error.unwrap().code,
        codes::POLICY_APPROVAL_ALREADY_RESUMED
    );
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    // The key now replays the completed refund.
    let replay = host.invoke(refund_action(), &person("user:req")).await;
    assert_eq!(replay.status, ActionResultStatus::Completed);
    assert_eq!(replay.output.unwrap()["idempotent_replay"], true);
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unvouched_approvers_and_missing_evidence_are_refused() {
    let host = host(Payments::default(), Arc::default());
    let id = gate(&host).await;
    let stranger = host
        .record_approval_decision(
            decision(&id, "user:mallory", ApprovalDecisionKind::Approved),
            &person("user:mallory"),
        )
        .await
        .unwrap_err();
    assert_eq!(stranger.code, codes::POLICY_APPROVER_UNAUTHORIZED);
    assert_eq!(
        stranger.message,
        "the approval authority does not vouch for this approver: it knows no membership of \
         theirs (an approver registered with empty ApproverMemberships counts as unknown), and the \
         policy asks for one of role:finance"
    );
    // Known to the authority under another role: the refusal names what the policy asks for.
    let outsider = host
        .record_approval_decision(
            decision(&id, "user:sales", ApprovalDecisionKind::Approved),
            &person("user:sales"),
        )
        .await
        .unwrap_err();
    assert_eq!(outsider.code, codes::POLICY_APPROVER_UNAUTHORIZED);
    assert!(
        outsider.message.ends_with("satisfy none of role:finance"),
        "{}",
        outsider.message
    );
    let impostor = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &person("user:bob"),
        )
        .await
        .unwrap_err();
    assert_eq!(impostor.code, codes::POLICY_APPROVER_IDENTITY_MISMATCH);
    let mut silent = decision(&id, "user:alice", ApprovalDecisionKind::Approved);
    silent.reason = None;
    let no_reason = host
        .record_approval_decision(silent, &person("user:alice"))
        .await
        .unwrap_err();
    assert_eq!(no_reason.code, codes::POLICY_APPROVAL_EVIDENCE_MISSING);
}

#[tokio::test]
async fn denial_and_expiry_end_the_request() {
    let clock = Arc::new(ManualClock::default());
    let host = host(Payments::default(), clock.clone());
    let id = gate(&host).await;
    let denied = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Denied),
            &person("user:alice"),
        )
        .await
        .unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    assert_eq!(
        host.resume_approved(&id, &person("user:req"))
            .await
            .error
            .unwrap()
            .code,
        codes::POLICY_APPROVAL_DENIED
    );

    let host = self::host(Payments::default(), clock.clone());
    let id = gate(&host).await;
    clock.advance(120_000);
    let late = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &person("user:alice"),
        )
        .await
        .unwrap_err();
    assert_eq!(late.code, codes::POLICY_APPROVAL_EXPIRED);
    assert_eq!(
        host.resume_approved(&id, &person("user:req"))
            .await
            .error
            .unwrap()
            .code,
        codes::POLICY_APPROVAL_EXPIRED
    );
}

/// A resend under the key of an action whose approval closed without a resume answers how it
/// closed (the stored record still says `pending_approval`); an open approval, pending or
/// approved but not yet resumed, keeps the pending replay.
#[tokio::test]
async fn a_resend_after_the_approval_closed_answers_how_it_closed() {
    use aip_connector::host::Retention;

    let resend =
        |host: Host| async move { host.invoke(refund_action(), &person("user:req")).await };
    let assert_closed = |result: ActionResult, code: &str, id: &ApprovalId| {
        assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
        let error = result.error.as_ref().unwrap();
        assert_eq!(error.code, code, "{result:?}");
        assert_eq!(error.retryable, Some(false));
        assert_eq!(error.details.as_ref().unwrap()["approval_id"], json!(id));
        assert_eq!(result.output, Some(json!({ "idempotent_replay": true })));
    };

    // Open: pending, then approved but not resumed.
    let clock = Arc::new(ManualClock::default());
    let payments = Payments::default();
    let host = host(payments.clone(), clock.clone());
    let id = gate(&host).await;
    let replay = resend(host.clone()).await;
    assert_eq!(replay.status, ActionResultStatus::PendingApproval);
    assert_eq!(replay.output.as_ref().unwrap()["idempotent_replay"], true);
    let pending_error = replay.error.clone().unwrap();
    decide(&host, &id, &QUORUM, ApprovalDecisionKind::Approved).await;
    // Approved, not resumed: still pending (nothing ran), and saying that it was approved and
    // how it runs (a deployment trial polled by resending and read "needs human approval").
    let approved = resend(host.clone()).await;
    assert_eq!(approved.status, ActionResultStatus::PendingApproval);
    assert_eq!(approved.output.as_ref().unwrap()["idempotent_replay"], true);
    let error = approved.error.as_ref().unwrap();
    assert_eq!(error.code, pending_error.code);
    assert!(
        error
            .message
            .starts_with("this action was approved and has not run yet"),
        "{}",
        error.message
    );
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["approval_status"], "approved");
    assert_eq!(details["approval_id"], json!(id));
    assert!(
        pending_error
            .details
            .unwrap()
            .get("approval_status")
            .is_none()
    );
    // Resumed, the key holds the real result.
    let resumed = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed);
    let replay = resend(host.clone()).await;
    assert_eq!(replay.status, ActionResultStatus::Completed);
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    // Denied.
    let host = self::host(Payments::default(), clock.clone());
    let id = gate(&host).await;
    decide(&host, &id, &["user:alice"], ApprovalDecisionKind::Denied).await;
    assert_closed(
        resend(host.clone()).await,
        codes::POLICY_APPROVAL_DENIED,
        &id,
    );

    // Expired: nobody decided within the approval's TTL (60 s; the key lives a day).
    let host = self::host(Payments::default(), clock.clone());
    let id = gate(&host).await;
    clock.advance(60_001);
    assert_closed(
        resend(host.clone()).await,
        codes::POLICY_APPROVAL_EXPIRED,
        &id,
    );

    // Denied, then deleted by retention while the key still lives.
    let payments = Payments::default();
    let host = Host::builder()
        .connector(payments.clone())
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:alice", finance()))
        .clock(clock.clone())
        .retention(Retention::KEEP_FOREVER.approvals_for(std::time::Duration::from_secs(60)))
        .build()
        .unwrap();
    let id = gate(&host).await;
    decide(&host, &id, &["user:alice"], ApprovalDecisionKind::Denied).await;
    clock.advance(60_001);
    assert_eq!(host.purge_closed(10).await.unwrap().approvals, 1);
    assert_closed(
        resend(host.clone()).await,
        codes::POLICY_APPROVAL_NOT_FOUND,
        &id,
    );
    assert_eq!(payments.executions.load(Ordering::SeqCst), 0);
}

/// The refund action, gated and then approved by the quorum; not yet resumed.
async fn approved_refund(host: &Host) -> (Action, ApprovalId) {
    let original = refund_action();
    let pending = host.invoke(original.clone(), &person("user:req")).await;
    let id: ApprovalId = pending.approval_id().expect("the gate names its approval");
    decide(host, &id, &QUORUM, ApprovalDecisionKind::Approved).await;
    (original, id)
}

/// A client that lost the answer to its re-submission sends the very same action again (same
/// id, input, key and approval): it gets the stored result, replayed, and nothing runs twice.
#[tokio::test]
async fn an_exact_resend_of_a_resubmission_that_ran_replays_its_result() {
    let payments = Payments::default();
    let host = host(payments.clone(), Arc::default());
    let (original, id) = approved_refund(&host).await;
    let resubmitted =
        original.with_approval(decision(&id, "user:alice", ApprovalDecisionKind::Approved));
    let ran = host.invoke(resubmitted.clone(), &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");

    let resent = host.invoke(resubmitted.clone(), &person("user:req")).await;
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    let output = resent.output.unwrap();
    assert_eq!(output["idempotent_replay"], true);
    assert_eq!(output["refund_id"], ran.output.unwrap()["refund_id"]);
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    // The same principal id in another tenant is another requester: no replay, no run.
    let elsewhere = TrustedContext::new(Principal::new("user:req", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    let foreign = host.invoke(resubmitted.clone(), &elsewhere).await;
    assert_eq!(foreign.status, ActionResultStatus::Failed, "{foreign:?}");
    assert_eq!(
        foreign.error.unwrap().code,
        codes::POLICY_APPROVAL_UNVERIFIED
    );
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    // Another action reusing the approval is still refused: the approval ran its action once.
    let mut other = resubmitted;
    other.id = aip_connector::ids::ActionId::new();
    let refused = host.invoke(other, &person("user:req")).await;
    assert_eq!(refused.status, ActionResultStatus::Failed, "{refused:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// Sends `resubmitted` as its requester on a task of its own.
fn spawn_resubmission(host: &Host, resubmitted: &Action) -> tokio::task::JoinHandle<ActionResult> {
    let (host, resubmitted) = (host.clone(), resubmitted.clone());
    tokio::spawn(async move { host.invoke(resubmitted, &person("user:req")).await })
}

/// Asserts `resend` was told to come back (`idempotency.in_progress`, retryable).
fn assert_told_to_come_back(resend: ActionResult) {
    let error = resend.error.expect("told to come back");
    assert_eq!(error.code, codes::IDEMPOTENCY_IN_PROGRESS, "{error:?}");
    assert_eq!(error.retryable, Some(true));
}

/// An approved refund re-submitted once the provider fails once, its call held as it gives its
/// claim on the resume back (`release_resume` waits at `gate`).
struct HeldGiveBack {
    gate: Gate,
    store: Arc<HookedStore>,
    payments: Payments,
    host: Host,
    resubmitted: Action,
    first: tokio::task::JoinHandle<ActionResult>,
}

impl HeldGiveBack {
    async fn start() -> Self {
        let gate = Gate::default();
        let store = Arc::new(HookedStore::before_release_resume({
            let gate = gate.clone();
            move |_| gate.hold()
        }));
        let payments = Payments::default();
        let host = host_on(payments.clone(), Arc::default(), store.clone());
        let (original, id) = approved_refund(&host).await;
        let resubmitted =
            original.with_approval(decision(&id, "user:alice", ApprovalDecisionKind::Approved));
        payments.fail_once.store(true, Ordering::SeqCst);
        let first = spawn_resubmission(&host, &resubmitted);
        gate.entered().await;
        HeldGiveBack {
            gate,
            store,
            payments,
            host,
            resubmitted,
            first,
        }
    }
}

/// A re-submission that failed retryably gives its claim on the resume back before it frees
/// its key: a resend arriving between the two writes meets the key still held and is told to
/// come back (`idempotency.in_progress`), and coming back runs the action. The other way round
/// (found by a hostile review), the resend found the key free and the resume still taken, and
/// was told for good that the approval had already run an action that never completed.
#[tokio::test]
async fn a_resend_while_a_retryable_resubmission_settles_is_told_to_retry() {
    let held = HeldGiveBack::start().await;
    let (host, payments, resubmitted, first, gate) = (
        &held.host,
        &held.payments,
        held.resubmitted.clone(),
        held.first,
        held.gate,
    );

    // The claim is being given back; the key is still held.
    assert_told_to_come_back(host.invoke(resubmitted.clone(), &person("user:req")).await);

    gate.open();
    let failed = first.await.unwrap();
    let error = failed.error.expect("the provider was unreachable");
    assert_eq!(error.code, "payments.unreachable");
    assert_eq!(error.retryable, Some(true));
    let ran = host.invoke(resubmitted, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 2);
}

/// A re-submission that failed retryably, whose call is dropped while it gives its claim back
/// (its transport timed out), still gives the claim back and frees its key, on a task of its
/// own: a retry runs the action. The dropped call used to leave the approval claimed and the key
/// held until its reservation expired, after which the approval read as already resumed.
#[tokio::test]
async fn a_retryable_resubmission_dropped_while_returning_its_claim_still_returns_it() {
    let held = HeldGiveBack::start().await;
    let (host, payments, resubmitted, first, gate, store) = (
        &held.host,
        &held.payments,
        held.resubmitted.clone(),
        held.first,
        held.gate,
        held.store,
    );

    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    gate.open();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while store.releases() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the dropped call's key was released");

    let ran = host.invoke(resubmitted, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 2);
}

/// A resend that lands between the first re-submission's claim on the resume and its
/// reservation of the key (nothing under the key is the re-submission's yet) is told to come
/// back, not that the approval already ran: it used to read as already resumed, for good.
#[tokio::test]
async fn a_resend_between_the_claim_and_the_reservation_is_told_to_retry() {
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = Gate::default();
    let store = Arc::new(HookedStore::before_reserve({
        let (armed, gate) = (armed.clone(), gate.clone());
        move |_| {
            if armed.swap(false, Ordering::SeqCst) {
                gate.hold()
            } else {
                None
            }
        }
    }));
    let payments = Payments::default();
    let host = host_on(payments.clone(), Arc::default(), store);
    let (original, id) = approved_refund(&host).await;
    let resubmitted =
        original.with_approval(decision(&id, "user:alice", ApprovalDecisionKind::Approved));
    armed.store(true, Ordering::SeqCst);
    let first = spawn_resubmission(&host, &resubmitted);
    gate.entered().await;

    assert_told_to_come_back(host.invoke(resubmitted.clone(), &person("user:req")).await);

    gate.open();
    let ran = first.await.unwrap();
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let replayed = host.invoke(resubmitted, &person("user:req")).await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A claim on the resume that landed with its answer lost (a connection that closed after the
/// commit) is given back: the caller is told `storage.unavailable`, retryable, and the retry runs
/// the approved action once, by `resume_approved` as by a re-submission. The claim used to stay
/// taken, and every retry was told the approval had already run an action that never ran (found
/// by a hostile probe). A give-back the store fails is written again (it was only logged).
#[tokio::test]
async fn a_resume_claim_whose_answer_was_lost_is_given_back() {
    let store = Arc::new(HookedStore::default());
    let payments = Payments::default();
    let host = host_on(payments.clone(), Arc::default(), store.clone());

    let (_, id) = approved_refund(&host).await;
    store.lose_next_claim_resume_answer();
    let lost = host.resume_approved(&id, &person("user:req")).await;
    let error = lost.error.expect("the store failed");
    assert_eq!(error.code, codes::STORAGE_UNAVAILABLE, "{error:?}");
    assert_eq!(error.retryable, Some(true));
    let ran = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    // The give-back itself failing twice is written again.
    store.lose_next_claim_resume_answer();
    store.fail_next_release_resumes(2);
    let other = refund_action().with_idempotency_key("refund-lost-give-back");
    let pending = host.invoke(other.clone(), &person("user:req")).await;
    let id = pending.approval_id().expect("the gate names its approval");
    decide(&host, &id, &QUORUM, ApprovalDecisionKind::Approved).await;
    let lost = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(lost.error.unwrap().code, codes::STORAGE_UNAVAILABLE);
    let ran = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 2);

    let other = refund_action().with_idempotency_key("refund-lost-claim");
    let pending = host.invoke(other.clone(), &person("user:req")).await;
    let id = pending.approval_id().expect("the gate names its approval");
    decide(&host, &id, &QUORUM, ApprovalDecisionKind::Approved).await;
    let resubmitted =
        other.with_approval(decision(&id, "user:alice", ApprovalDecisionKind::Approved));
    store.lose_next_claim_resume_answer();
    let lost = host.invoke(resubmitted.clone(), &person("user:req")).await;
    assert_eq!(lost.error.unwrap().code, codes::STORAGE_UNAVAILABLE);
    let ran = host.invoke(resubmitted, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 3);
}

/// A claim that failed without landing is given back all the same (its answer was lost, so it
/// might have landed); that give-back, held until another call has claimed the resume in the
/// same millisecond and run the action, must not release the other call's claim. It did while
/// claims were told apart by their time: the approval read as not resumed, and a third resume
/// claimed it again.
#[tokio::test]
async fn a_failed_claims_give_back_leaves_another_claim_of_the_same_millisecond() {
    let gate = Gate::default();
    let store = Arc::new(HookedStore::before_release_resume({
        let gate = gate.clone();
        move |_| gate.hold()
    }));
    let payments = Payments::default();
    // The manual clock stands still: every claim below is made in the same millisecond.
    let host = host_on(payments.clone(), Arc::default(), store.clone());
    let (_, id) = approved_refund(&host).await;

    store.fail_next_claim_resume();
    let failed = tokio::spawn({
        let (host, id) = (host.clone(), id.clone());
        async move { host.resume_approved(&id, &person("user:req")).await }
    });
    gate.entered().await;
    let ran = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let claimed = host.approval(&id).await.unwrap().unwrap();
    assert!(claimed.resumed, "{claimed:?}");

    gate.open();
    let failed = failed.await.unwrap();
    assert_eq!(
        failed.error.expect("the claim failed").code,
        codes::STORAGE_UNAVAILABLE
    );
    let after = host.approval(&id).await.unwrap().unwrap();
    assert!(after.resumed, "the other call's claim stands: {after:?}");
    assert_eq!(after.resume_token, claimed.resume_token);
    let again = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(
        again.error.expect("resumed once").code,
        codes::POLICY_APPROVAL_ALREADY_RESUMED
    );
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A call dropped while its claim on the resume is written (a transport's timeout), after the
/// claim landed, gives the claim back on a task of its own: a retry runs the approved action.
/// Nothing did before: the approval read as resumed by an action that never ran.
#[tokio::test]
async fn a_call_dropped_while_its_resume_claim_is_written_gives_it_back() {
    let gate = Gate::default();
    let store = Arc::new(HookedStore::after_claim_resume({
        let gate = gate.clone();
        move |_| gate.hold()
    }));
    let payments = Payments::default();
    let host = host_on(payments.clone(), Arc::default(), store.clone());
    let (_, id) = approved_refund(&host).await;

    let first = tokio::spawn({
        let (host, id) = (host.clone(), id.clone());
        async move { host.resume_approved(&id, &person("user:req")).await }
    });
    gate.entered().await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    gate.open();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while host.approval(&id).await.unwrap().unwrap().resumed {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the dropped call's claim was given back");

    let ran = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A client that resends its re-submission while the first one still runs (its answer is late,
/// not lost) is told to come back (`idempotency.in_progress`, retryable), not that the approval
/// already ran; coming back once the first finished replays its result. Another action carrying
/// the approval meanwhile is refused for good.
#[tokio::test]
async fn a_resend_while_the_resubmission_runs_is_told_to_retry() {
    let hold = Arc::new(Hold::default());
    let payments = Payments {
        hold: Some(hold.clone()),
        ..Payments::default()
    };
    let host = host(payments.clone(), Arc::default());
    let (original, id) = approved_refund(&host).await;
    let resubmitted =
        original.with_approval(decision(&id, "user:alice", ApprovalDecisionKind::Approved));
    let first = tokio::spawn({
        let host = host.clone();
        let resubmitted = resubmitted.clone();
        async move { host.invoke(resubmitted, &person("user:req")).await }
    });
    hold.entered.notified().await;

    let resend = host.invoke(resubmitted.clone(), &person("user:req")).await;
    assert_eq!(resend.status, ActionResultStatus::Failed, "{resend:?}");
    let error = resend.error.unwrap();
    assert_eq!(error.code, codes::IDEMPOTENCY_IN_PROGRESS, "{error:?}");
    assert_eq!(error.retryable, Some(true));
    assert_eq!(
        error.details.unwrap()["owner_action_id"],
        json!(resubmitted.id)
    );

    let mut other = resubmitted.clone();
    other.id = aip_connector::ids::ActionId::new();
    let refused = host.invoke(other, &person("user:req")).await;
    // The approval names the first action: another one carrying it is not the requester's.
    assert_eq!(
        refused.error.unwrap().code,
        codes::POLICY_APPROVAL_UNVERIFIED
    );
    // The same re-submission under another key is not a resend of the one that runs.
    let elsewhere = host
        .invoke(
            resubmitted.clone().with_idempotency_key("refund-1-other"),
            &person("user:req"),
        )
        .await;
    assert_eq!(
        elsewhere.error.unwrap().code,
        codes::POLICY_APPROVAL_ALREADY_RESUMED
    );

    hold.release.notify_one();
    let ran = first.await.unwrap();
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let again = host.invoke(resubmitted, &person("user:req")).await;
    assert_eq!(again.status, ActionResultStatus::Completed, "{again:?}");
    assert_eq!(again.output.unwrap()["idempotent_replay"], true);
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// An approved action that ran through a re-submission under another key: a resend under the
/// key that still holds its pending result says it already ran, not that it waits. Within five
/// seconds of the resume's claim it is told to come back instead: so soon, the resume may still
/// be on its way to this key (see the next test).
#[tokio::test]
async fn a_resend_after_a_resubmission_under_another_key_says_it_already_ran() {
    let payments = Payments::default();
    let clock = Arc::new(ManualClock::default());
    let host = host(payments.clone(), clock.clone());
    let (original, id) = approved_refund(&host).await;
    let mut resubmitted = original.clone().with_idempotency_key("refund-1-again");
    resubmitted.approval = Some(Box::new(decision(
        &id,
        "user:alice",
        ApprovalDecisionKind::Approved,
    )));
    let ran = host.invoke(resubmitted, &person("user:req")).await;
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);

    let soon = host.invoke(original.clone(), &person("user:req")).await;
    let error = soon.error.expect("told to come back");
    assert_eq!(error.code, codes::IDEMPOTENCY_IN_PROGRESS);
    assert_eq!(error.retryable, Some(true));

    clock.advance(5_000);
    let resend = host.invoke(original, &person("user:req")).await;
    assert_eq!(resend.status, ActionResultStatus::Failed, "{resend:?}");
    let error = resend.error.unwrap();
    assert_eq!(error.code, codes::POLICY_APPROVAL_ALREADY_RESUMED);
    assert_eq!(error.details.unwrap()["approval_id"], json!(id));
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A resume claims the approval, then reserves the key that holds the pending result. A plain
/// resend of the gated action in between (a client polling for the result, racing the
/// approver's resume on another replica) read "resumed" beside the pending record and was told,
/// for good, that the action "already ran (re-submitted under another key)"; the resume then
/// ran and succeeded under this very key (a deployment trial, 9 runs in 15). The resend is told
/// to come back, and then gets the result.
#[tokio::test]
async fn a_resend_racing_the_resume_between_its_claim_and_its_reservation_is_told_to_retry() {
    let payments = Payments::default();
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryStore::default());
    let host = host_on(payments.clone(), clock.clone(), store.clone());
    let (original, id) = approved_refund(&host).await;
    // The resumer's claim, made as `resume_approved` makes it, before its reservation.
    let claim = ResumeClaim::new(clock.now_ms());
    assert!(store.claim_resume(&id, &claim).await.unwrap());

    let polled = host.invoke(original.clone(), &person("user:req")).await;
    assert_eq!(polled.status, ActionResultStatus::Failed, "{polled:?}");
    let error = polled.error.expect("told to come back");
    assert_eq!(
        error.code,
        codes::IDEMPOTENCY_IN_PROGRESS,
        "{}",
        error.message
    );
    assert_eq!(error.retryable, Some(true));
    assert!(error.retry_after_ms.is_some_and(|ms| ms <= 1_000));
    assert_eq!(payments.executions.load(Ordering::SeqCst), 0);

    // The resumer carries on (here: gives its claim back and resumes through the host).
    store.release_resume(&id, &claim).await.unwrap();
    let resumed = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    let polled = host.invoke(original, &person("user:req")).await;
    assert_eq!(polled.status, ActionResultStatus::Completed, "{polled:?}");
    assert!(polled.is_idempotent_replay());
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

#[derive(Clone, Default)]
struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    /// Post an entry; one key space for every tenant.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required, scope = capability),
        data(sensitivity = internal),
        approval(required, selector = role("finance"), evidence = [reason], ttl_ms = 60_000),
    )]
    async fn post(
        &self,
        refund: Refund,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Refunded, ConnectorFailure> {
        Ok(Refunded {
            refund_id: format!("{}-{}", refund.amount_cents, key.as_str()),
        })
    }
}

/// A capability-scoped key is shared across tenants: another tenant's resend is refused, and
/// learns neither the pending request nor how the approval ended.
#[tokio::test]
async fn another_tenants_resend_does_not_learn_how_the_approval_ended() {
    let host = Host::builder()
        .connector(Ledger)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:alice", finance()))
        .build()
        .unwrap();
    let post = || {
        Action::new("cap:ledger:post", json!({ "amount_cents": 5 })).with_idempotency_key("entry-1")
    };
    let pending = host.invoke(post(), &person("user:req")).await;
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let id: ApprovalId = pending.approval_id().expect("the gate names its approval");
    decide(&host, &id, &["user:alice"], ApprovalDecisionKind::Denied).await;

    let elsewhere = TrustedContext::new(Principal::new("user:eve", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t2"));
    // Another tenant's record is never replayed (not even as the stale pending request): the
    // refusal names nothing of it.
    let replay = host.invoke(post(), &elsewhere).await;
    let error = replay.error.as_ref().expect("refused");
    assert_eq!(error.code, codes::IDEMPOTENCY_CONFLICT, "{replay:?}");
    assert_eq!(error.details, None);
    assert!(!format!("{replay:?}").contains(id.as_str()), "{replay:?}");
    let own = host.invoke(post(), &person("user:req")).await;
    assert_eq!(
        own.error.unwrap().code,
        codes::POLICY_APPROVAL_DENIED,
        "the requester's tenant learns it"
    );
}

#[derive(Clone, Default)]
struct Desk;

#[connector(id = "desk")]
impl Desk {
    /// High risk, so the host gates it; the optional policy names who decides.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(optional, selector = role("finance"), evidence = [reason], ttl_ms = 60_000),
        waive(code = "contract.lint.risk_without_approval", reason = "the host gates high risk with the declared policy"),
    )]
    async fn adjust(
        &self,
        refund: Refund,
        key: IdempotencyKey,
    ) -> Result<Refunded, ConnectorFailure> {
        Ok(Refunded {
            refund_id: format!("{}-{}", refund.amount_cents, key.as_str()),
        })
    }
}

/// A gate opened by risk applies the capability's declared policy even when it is optional:
/// its selector, evidence and TTL decide, not the host's default (any tenant approver).
#[tokio::test]
async fn a_risk_gate_applies_the_declared_optional_policy() {
    let host = Host::builder()
        .connector(Desk)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(
            StaticApprovalAuthority::new()
                .with("user:alice", finance())
                .with(
                    "user:sales",
                    ApproverMemberships::default()
                        .with_tenant("t1")
                        .with_role("sales"),
                ),
        )
        .build()
        .unwrap();
    let adjust =
        || Action::new("cap:desk:adjust", json!({ "amount_cents": 5 })).with_idempotency_key("a-1");
    let pending = host.invoke(adjust(), &person("user:req")).await;
    assert_eq!(
        pending.status,
        ActionResultStatus::PendingApproval,
        "{pending:?}"
    );
    let id = pending.approval_id().expect("the gate names its approval");
    let record = host.approval(&id).await.unwrap().expect("recorded");
    assert_eq!(record.policy.ttl_ms, Some(60_000));
    assert!(!record.policy.required, "the declared policy, as published");

    let sales = host
        .record_approval_decision(
            decision(&id, "user:sales", ApprovalDecisionKind::Approved),
            &person("user:sales"),
        )
        .await
        .unwrap_err();
    assert_eq!(sales.code, codes::POLICY_APPROVER_UNAUTHORIZED, "{sales:?}");
    decide(&host, &id, &["user:alice"], ApprovalDecisionKind::Approved).await;
    let resumed = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
}

/// Retention deletes a closed approval once it is older than the period, never an open one
/// (an approved request not yet resumed), and the deleted id is unknown afterwards.
#[tokio::test]
async fn retention_deletes_closed_approvals_once_old_and_keeps_open_ones() {
    use aip_connector::host::{PurgedRecords, Retention};

    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);
    let clock = Arc::new(ManualClock::default());
    let authority = StaticApprovalAuthority::new()
        .with("user:alice", finance())
        .with("user:bob", finance());
    let payments = Payments::default();
    let host = Host::builder()
        .connector(payments.clone())
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(authority)
        .clock(clock.clone())
        .retention(Retention::KEEP_FOREVER.approvals_for(HOUR))
        .build()
        .unwrap();
    let gate_with_key = |key: &'static str| {
        let host = host.clone();
        async move {
            let action = Action::new("cap:payments:refund", json!({ "amount_cents": 1200 }))
                .with_idempotency_key(key);
            let pending = host.invoke(action, &person("user:req")).await;
            assert_eq!(pending.status, ActionResultStatus::PendingApproval);
            serde_json::from_value::<ApprovalId>(pending.output.unwrap()["approval_id"].clone())
                .unwrap()
        }
    };
    let denied = gate_with_key("refund-denied").await;
    decide(
        &host,
        &denied,
        &["user:alice"],
        ApprovalDecisionKind::Denied,
    )
    .await;
    let approved = gate_with_key("refund-approved").await;
    decide(&host, &approved, &QUORUM, ApprovalDecisionKind::Approved).await;

    // Within the period nothing goes, closed or not.
    assert_eq!(host.purge_closed(10).await, Ok(PurgedRecords::default()));
    assert!(host.approval(&denied).await.unwrap().is_some());

    clock.advance(HOUR.as_millis() as u64 + 1);
    let purged = host.purge_closed(10).await.unwrap();
    assert_eq!((purged.approvals, purged.transactions), (1, 0));
    assert_eq!(host.approval(&denied).await.unwrap(), None);
    let refused = host.resume_approved(&denied, &person("user:req")).await;
    assert_eq!(refused.status, ActionResultStatus::Failed, "{refused:?}");

    // The approved request stayed open, so it still resumes; resumed, it is closed, and goes
    // once the period has passed since the resume (not since its creation: a resume still
    // running keeps its approval).
    let resumed = host.resume_approved(&approved, &person("user:req")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
    assert_eq!(host.purge_closed(10).await.unwrap().approvals, 0);
    assert!(host.approval(&approved).await.unwrap().is_some());
    clock.advance(HOUR.as_millis() as u64 + 1);
    assert_eq!(host.purge_closed(10).await.unwrap().approvals, 1);
    assert_eq!(host.approval(&approved).await.unwrap(), None);
}

/// By default the host keeps every approval record: a purge deletes nothing.
#[tokio::test]
async fn without_retention_closed_approvals_are_kept() {
    let clock = Arc::new(ManualClock::default());
    let host = host(Payments::default(), clock.clone());
    let id = gate(&host).await;
    decide(&host, &id, &["user:alice"], ApprovalDecisionKind::Denied).await;
    clock.advance(10 * 365 * 24 * 3600 * 1000);
    let purged = host.purge_closed(10).await.unwrap();
    assert_eq!((purged.approvals, purged.transactions), (0, 0));
    assert!(host.approval(&id).await.unwrap().is_some());
}

/// A single-tenant deployment: the transport verifies no tenant, the deployment vouches for one,
/// and the authority names roles only. Approvers belong to the deployment's tenant, as the
/// requester does, so their decisions count; an approver whose transport verified another
/// tenant is still refused.
#[tokio::test]
async fn approvers_of_a_single_tenant_deployment_belong_to_its_tenant() {
    let payments = Payments::default();
    let roles_only = ApproverMemberships::new().with_role("finance");
    let authority = StaticApprovalAuthority::new()
        .with("user:alice", roles_only.clone())
        .with("user:bob", roles_only.clone())
        .with("user:mallory", roles_only);
    let host = Host::builder()
        .connector(payments.clone())
        .deployment(Deployment::default().with_tenant(VerifiedTenant::new("t1")))
        .approval_authority(authority)
        .build()
        .unwrap();
    let untenanted =
        |id: &str| TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test");

    let pending = host.invoke(refund_action(), &untenanted("user:req")).await;
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let id = pending.approval_id().expect("the gate names its approval");
    assert_eq!(
        host.approval(&id)
            .await
            .unwrap()
            .unwrap()
            .tenant_id
            .as_deref(),
        Some("t1")
    );

    let elsewhere =
        TrustedContext::new(Principal::new("user:mallory", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new("t2"));
    let refused = host
        .record_approval_decision(
            decision(&id, "user:mallory", ApprovalDecisionKind::Approved),
            &elsewhere,
        )
        .await
        .unwrap_err();
    // Another tenant's approver is told nothing about the request, as any reader of it is.
    assert_eq!(refused.code, codes::POLICY_APPROVAL_NOT_FOUND);

    for approver in QUORUM {
        let approval =
            ApprovalDecision::approve(id.clone(), Principal::new(approver, PrincipalKind::Human))
                .with_reason("checked the order")
                .with_decision_id(format!("dec-{approver}"));
        host.record_approval_decision(approval, &untenanted(approver))
            .await
            .unwrap();
    }
    let resumed = host.resume_approved(&id, &untenanted("user:req")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A directory that matches principal ids ignoring case, as many do, and says which id it
/// resolved each one to.
fn case_insensitive_directory() -> impl aip_connector::host::ApprovalAuthority {
    aip_connector_tests::Directory::new(finance(), |id| {
        let canonical = id.to_ascii_lowercase();
        ["user:alice", "user:bob", "user:req"]
            .contains(&canonical.as_str())
            .then_some(canonical)
    })
}

/// One person under two spellings of their id is one approver: `USER:ALICE` does not make a
/// quorum with `user:alice`, and the requester approving as `User:Req` is the requester
/// (found by an approval trial). Decisions are recorded under the id the directory resolved.
#[tokio::test]
async fn an_approver_is_counted_and_checked_as_the_authority_knows_them() {
    let payments = Payments::default();
    let host = Host::builder()
        .connector(payments.clone())
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(case_insensitive_directory())
        .build()
        .unwrap();
    let id = gate(&host).await;
    // Each spelling authenticated as itself, with a decision id of its own.
    let approve_as = async |approver: &str| {
        host.record_approval_decision(
            decision(&id, approver, ApprovalDecisionKind::Approved),
            &person(approver),
        )
        .await
    };

    let own = approve_as("User:Req").await.unwrap_err();
    assert_eq!(own.code, codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER);
    let first = approve_as("user:alice").await.unwrap();
    assert_eq!(first.status, ApprovalStatus::Pending);
    let shouted = approve_as("USER:ALICE").await.unwrap();
    assert_eq!(shouted.status, ApprovalStatus::Pending, "{shouted:?}");
    let bob = approve_as("User:Bob").await.unwrap();
    assert_eq!(bob.status, ApprovalStatus::Approved);
    let approvers: Vec<&str> = bob
        .decisions
        .iter()
        .map(|d| d.approver.id.as_str())
        .collect();
    assert_eq!(approvers, ["user:alice", "user:bob"]);
    let done = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// A directory that knows people by employee number, whatever alias they sign in with.
fn alias_directory() -> impl aip_connector::host::ApprovalAuthority {
    aip_connector_tests::Directory::new(finance(), |id| {
        let employee = match id {
            "user:req" | "user:req@corp.example" => "employee:7",
            "user:alice" | "alice@corp.example" => "employee:1",
            "user:bob" => "employee:2",
            _ => return None,
        };
        Some(employee.to_owned())
    })
}

/// Separation of duties holds whatever id the directory resolves: the requester approving under
/// the very id it requested with (which the directory resolves to its employee number) or under
/// an alias is the requester (found by a hostile review). A decision re-sent under the alias it
/// was first sent with is a replay, and the approved action runs once.
#[tokio::test]
async fn separation_of_duties_holds_under_any_resolved_id() {
    let payments = Payments::default();
    let host = Host::builder()
        .connector(payments.clone())
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(alias_directory())
        .build()
        .unwrap();
    let id = gate(&host).await;
    for requester in ["user:req", "user:req@corp.example"] {
        let own = host
            .record_approval_decision(
                decision(&id, requester, ApprovalDecisionKind::Approved),
                &person(requester),
            )
            .await
            .unwrap_err();
        assert_eq!(
            own.code,
            codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER,
            "{requester}"
        );
    }
    let alice = decision(&id, "alice@corp.example", ApprovalDecisionKind::Approved);
    let first = host
        .record_approval_decision(alice.clone(), &person("alice@corp.example"))
        .await
        .unwrap();
    assert_eq!(first.decisions[0].approver.id.as_str(), "employee:1");
    // The same decision sent again (a lost answer) is a replay, not a mismatch.
    let again = host
        .record_approval_decision(alice, &person("alice@corp.example"))
        .await
        .unwrap();
    assert_eq!(again.version, first.version);
    let approved = host
        .record_approval_decision(
            decision(&id, "user:bob", ApprovalDecisionKind::Approved),
            &person("user:bob"),
        )
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    let done = host.resume_approved(&id, &person("user:req")).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    assert_eq!(payments.executions.load(Ordering::SeqCst), 1);
}

/// Every decision is logged for the audit trail, with who decided what, and never its reason
/// (found by an operations trial: refusals and grants left no line at all).
#[tokio::test]
async fn every_approval_decision_is_logged_without_its_reason() {
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let _guard = logs.set_default();
    let host = host(Payments::default(), Arc::new(ManualClock::default()));
    let id = gate(&host).await;
    // The requester approving its own request is refused; alice's approval is recorded.
    let refused = host
        .record_approval_decision(
            decision(&id, "user:req", ApprovalDecisionKind::Approved),
            &person("user:req"),
        )
        .await
        .unwrap_err();
    let record = host
        .record_approval_decision(
            decision(&id, "user:alice", ApprovalDecisionKind::Approved),
            &person("user:alice"),
        )
        .await
        .unwrap();
    let line = |message: &str| {
        logs.lines()
            .into_iter()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no `{message}` in:\n{}", logs.text()))
    };
    let recorded = line("approval decision recorded");
    for field in [
        format!("approval_id={id}"),
        format!("action_id={}", record.action.id),
        "capability_id=cap:payments:refund".to_owned(),
        "approver=user:alice".to_owned(),
        "decision=\"approved\"".to_owned(),
        // A quorum of two: one approval leaves it pending.
        "status=pending".to_owned(),
    ] {
        assert!(recorded.contains(&field), "{field} not in {recorded}");
    }
    // The gated call's own line names the approval its decisions' lines name.
    let gated = line("action settled");
    assert!(
        gated.contains("status=pending_approval") && gated.contains(&format!("approval_id={id}")),
        "{gated}"
    );
    let refusal = line("approval decision refused");
    assert!(refusal.contains("WARN"), "{refusal}");
    for field in [
        format!("approval_id={id}"),
        "approver=user:req".to_owned(),
        format!("code={}", refused.code),
    ] {
        assert!(refusal.contains(&field), "{field} not in {refusal}");
    }
    assert!(!logs.contains("checked the order"), "{}", logs.text());
}

/// A host built without an approval authority can run no capability that needs approval: every
/// call would wait for a decision the default `DenyAllApprovalAuthority` refuses. `build` says
/// so, naming the capability (an author trial found every call pending for good with nothing
/// saying why); with an authority it says nothing.
#[test]
fn a_host_without_an_approval_authority_warns_about_what_needs_approval() {
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let _guard = logs.set_default();
    Host::builder()
        .connector(Payments::default())
        .build()
        .unwrap();
    let warning = logs
        .lines()
        .into_iter()
        .find(|line| line.contains("has no approval authority"))
        .unwrap_or_else(|| panic!("no warning in:\n{}", logs.text()));
    assert!(warning.contains("cap:payments:refund"), "{warning}");
    assert!(
        warning.contains("HostBuilder::approval_authority"),
        "{warning}"
    );

    let configured = aip_connector_testkit::logs::LogCapture::new();
    let _guard = configured.set_default();
    host(Payments::default(), Arc::new(ManualClock::default()));
    assert!(
        !configured.contains("has no approval authority"),
        "{}",
        configured.text()
    );
}

#[derive(Clone, Default)]
struct Notes;

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    text: String,
}

#[connector(id = "notes")]
impl Notes {
    /// Post a note; any approver of the request's tenant may release it (no selector named).
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        approval(required, evidence = [reason]),
    )]
    async fn post(&self, note: Note, _approval: Approval) -> Result<Posted, ConnectorFailure> {
        Ok(Posted { text: note.text })
    }
}

/// A host of the notes connector under `authority`, and the approval id of a gated post.
async fn gated_note(authority: StaticApprovalAuthority) -> (Host, ApprovalId) {
    let host = Host::builder()
        .connector(Notes)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(authority)
        .build()
        .unwrap();
    let pending = host
        .invoke(
            Action::new("cap:notes:post", json!({ "text": "hi" })).with_idempotency_key("note-1"),
            &person("user:req"),
        )
        .await;
    let id = pending
        .approval_id()
        .expect("the post waits for an approver");
    (host, id)
}

/// Found by an author trial: an approver registered with `ApproverMemberships::new()` was refused
/// "does not vouch for this approver", which reads as "unknown id", while what the default policy
/// (`tenant_policy`) wanted was a membership of the request's tenant. The refusal says so.
#[tokio::test]
async fn an_approver_without_the_tenant_membership_is_told_how_to_register_them() {
    let (host, id) = gated_note(
        StaticApprovalAuthority::new()
            .with("user:cfo", ApproverMemberships::new())
            .with("user:ops", ApproverMemberships::new().with_role("ops")),
    )
    .await;
    let hint = "`tenant_policy` is met by a member of the request's tenant `t1`: give the \
                approver ApproverMemberships::with_tenant(\"t1\")";
    for (approver, says) in [
        ("user:cfo", "it knows no membership of theirs"),
        ("user:ops", "its memberships satisfy none of tenant_policy"),
    ] {
        let refused = host
            .record_approval_decision(
                decision(&id, approver, ApprovalDecisionKind::Approved),
                &person(approver),
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code, codes::POLICY_APPROVER_UNAUTHORIZED);
        assert!(refused.message.contains(says), "{}", refused.message);
        assert!(refused.message.ends_with(hint), "{}", refused.message);
    }
    // With the membership, the same approver releases the note.
    let (host, id) = gated_note(
        StaticApprovalAuthority::new()
            .with("user:cfo", ApproverMemberships::new().with_tenant("t1")),
    )
    .await;
    let record = host
        .record_approval_decision(
            decision(&id, "user:cfo", ApprovalDecisionKind::Approved),
            &person("user:cfo"),
        )
        .await
        .unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
}
