//! [`PostgresStore`] against the store conformance checks (the same behaviours
//! `store_conformance.rs` checks on the memory and SQLite backends, plus the transaction family)
//! and against races between independently connected stores, as several host replicas would be.
//!
//! Needs a PostgreSQL server: `AIP_TEST_POSTGRES_URL` names it (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in a fresh schema of its own,
//! dropped when it ends. Without the variable every test says it was skipped and passes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId, TransactionId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision,
    ApprovalDecisionKind, ApprovalPolicy, ErrorCategory, IdempotencyKeyScope, Principal,
    PrincipalKind, ProtocolError, ProviderOperationRef, TransactionMode, TransactionPlan,
    TransactionProtocolStatus,
};
use aip_connector::store::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, IdempotencyRecord, IdempotencyStore, Millis,
    PostgresStore, Reservation, ReserveOutcome, SharedStore, StoreError, TransactionRecord,
    TransactionStore, Transition, TransitionOutcome,
};
use serde_json::json;

/// The variable that names the test server.
const URL_VARIABLE: &str = "AIP_TEST_POSTGRES_URL";

/// An arbitrary "now" far from zero, so `now - x` never underflows in a check.
const NOW: Millis = 1_000_000;

/// The input hash every fixture action has unless a check says otherwise.
const HASH: &str = "hash-1";

/// How many independently connected stores the race tests use, as separate host replicas.
const REPLICAS: usize = 4;

/// A schema of its own for one test, dropped (with everything in it) when the test ends, even
/// when it fails.
struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// A fresh schema name on the test server, or `None` (after saying so) without one.
    fn new() -> Option<Self> {
        let Some(url) = std::env::var(URL_VARIABLE)
            .ok()
            .filter(|url| !url.is_empty())
        else {
            println!("skipped: {URL_VARIABLE} is not set (CI sets it; see .ci/run)");
            return None;
        };
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "aip_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Some(Self { url, name })
    }

    /// A new store (with a pool of its own) on this schema, creating the schema if needed.
    async fn connect(&self) -> PostgresStore {
        PostgresStore::connect_with_schema(&self.url, &self.name)
            .await
            .expect("connect to the test schema")
    }

    /// `count` independently connected stores on this schema.
    async fn replicas(&self, count: usize) -> Vec<PostgresStore> {
        let mut stores = Vec::with_capacity(count);
        for _ in 0..count {
            stores.push(self.connect().await);
        }
        stores
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let url = self.url.clone();
        let name = self.name.clone();
        // Drop cannot await, and may run inside the test's runtime: a runtime of its own, on a
        // thread of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime
                .block_on(PostgresStore::drop_schema(&url, &name))
                .map_err(|error| error.to_string())
        })
        .join();
        let outcome = dropped.unwrap_or_else(|_| Err("the drop thread panicked".to_owned()));
        if let Err(error) = outcome
            && !std::thread::panicking()
        {
            panic!("could not drop test schema {}: {error}", self.name);
        }
    }
}

/// Runs `check` on a fresh schema, or says the test was skipped.
async fn on_fresh_schema<F, Fut>(check: F)
where
    F: FnOnce(PostgresStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(schema) = TestSchema::new() else {
        return;
    };
    check(schema.connect().await).await;
}

/// A reservation for `key` whose fencing token is `token` and whose action is `act_<token>`.
fn reservation(key: &str, token: &str, expires_at_ms: Millis) -> Reservation {
    Reservation {
        key: key.to_owned(),
        reservation_id: token.to_owned(),
        action_id: ActionId::trusted(format!("act_{token}")),
        input_hash: HASH.to_owned(),
        resume_pending: false,
        expires_at_ms,
    }
}

/// A record settled by `owner` with `status`, expiring at `expires_at_ms`.
fn record_for(
    owner: &Reservation,
    status: ActionResultStatus,
    expires_at_ms: Option<Millis>,
) -> IdempotencyRecord {
    let mut result = ActionResult::new(owner.action_id.clone(), status);
    if status == ActionResultStatus::Completed {
        result.output = Some(json!({"owner": owner.reservation_id, "amount": 12.5}));
    }
    IdempotencyRecord {
        key: owner.key.clone(),
        key_scope: IdempotencyKeyScope::Capability,
        action_id: owner.action_id.clone(),
        capability_id: CapabilityId::from("cap:store:test"),
        principal_id: PrincipalId::from("user:alice"),
        tenant_id: Some("tenant-1".to_owned()),
        input_hash: owner.input_hash.clone(),
        result,
        created_at_ms: NOW,
        expires_at_ms,
    }
}

/// A completed, never-expiring record settled by `owner`.
fn completed(owner: &Reservation) -> IdempotencyRecord {
    record_for(owner, ActionResultStatus::Completed, None)
}

/// A pending approval request for `id`, with a non-zero version the store must reset.
fn approval(id: &str) -> ApprovalRecord {
    let mut action = Action::new("cap:store:test", json!({"amount": 12}));
    action.idempotency_key = Some("k1".to_owned());
    ApprovalRecord {
        approval_id: ApprovalId::trusted(id),
        action,
        input_retained: true,
        input_hash: HASH.to_owned(),
        capability_id: CapabilityId::from("cap:store:test"),
        requested_by: PrincipalId::from("user:alice"),
        tenant_id: Some("tenant-1".to_owned()),
        policy: ApprovalPolicy::default(),
        policy_hash: "policy-hash".to_owned(),
        idempotency_key: Some("Capability:cap:store:test:k1".to_owned()),
        status: ApprovalStatus::Pending,
        decisions: Vec::new(),
        created_at_ms: NOW,
        expires_at_ms: Some(NOW + 60_000),
        resumed: false,
        version: 7,
    }
}

/// An approving decision on `id`.
fn approve(id: &str) -> ApprovalDecision {
    ApprovalDecision {
        approval_id: ApprovalId::trusted(id),
        decision: ApprovalDecisionKind::Approved,
        approver: Principal::new("user:bob", PrincipalKind::Human),
        decided_at: time::OffsetDateTime::UNIX_EPOCH,
        reason: Some("fine".to_owned()),
        constraints: Vec::new(),
        evidence: Vec::new(),
        decision_id: Some("dec-1".to_owned()),
        policy_hash: Some("policy-hash".to_owned()),
        authority_path: Vec::new(),
        target_decision_id: None,
    }
}

/// `record` with the version and resume flag the store is expected to report.
fn stored(record: &ApprovalRecord, version: u64, resumed: bool) -> ApprovalRecord {
    ApprovalRecord {
        version,
        resumed,
        ..record.clone()
    }
}

/// Runs `count` concurrent `reserve` calls on `key` at `now`, tokens `<prefix><i>`.
async fn reserve_concurrently(
    store: &SharedStore,
    key: &str,
    prefix: &str,
    count: usize,
    now: Millis,
) -> Vec<(String, ReserveOutcome)> {
    let tasks: Vec<_> = (0..count)
        .map(|index| {
            let store = Arc::clone(store);
            let claim = reservation(key, &format!("{prefix}{index}"), now + 60_000);
            tokio::spawn(async move {
                let outcome = store.reserve(&claim, now).await.expect("reserve");
                (claim.reservation_id, outcome)
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(count);
    for task in tasks {
        outcomes.push(task.await.expect("reserve task"));
    }
    outcomes
}

/// Asserts that exactly one caller acquired and every other one saw the winner's reservation.
fn assert_single_winner(outcomes: &[(String, ReserveOutcome)]) {
    let winners: Vec<&String> = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == ReserveOutcome::Acquired)
        .map(|(token, _)| token)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one reserve must acquire: {winners:?}"
    );
    for (token, outcome) in outcomes {
        match outcome {
            ReserveOutcome::Acquired => {}
            ReserveOutcome::InProgress(live) => {
                assert_eq!(&live.reservation_id, winners[0], "{token} saw a non-winner");
            }
            ReserveOutcome::Settled(_) => panic!("{token} saw a settled record"),
        }
    }
}

/// A free key is claimed by the first caller.
async fn check_reserve_on_a_free_key_acquires(store: SharedStore) {
    let owner = reservation("Action:act_a:k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        store.record(&owner.key, NOW).await,
        Ok(None),
        "a reservation is not a record"
    );
}

/// A duplicate while the owner runs learns who owns the key and until when.
async fn check_second_reserve_while_live_is_in_progress(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let duplicate = reservation("k", "b", NOW + 200);
    assert_eq!(
        store.reserve(&duplicate, NOW + 99).await,
        Ok(ReserveOutcome::InProgress(owner.clone()))
    );
    // The owner asking again is a duplicate too: reserve is not re-entrant.
    assert_eq!(
        store.reserve(&owner, NOW + 1).await,
        Ok(ReserveOutcome::InProgress(owner))
    );
}

/// A crashed owner's expired reservation is taken over, and the old owner is fenced out.
async fn check_expired_reservation_is_taken_over_and_old_owner_is_fenced(store: SharedStore) {
    let old = reservation("k", "old", NOW + 100);
    let new = reservation("k", "new", NOW + 10_000);
    assert_eq!(store.reserve(&old, NOW).await, Ok(ReserveOutcome::Acquired));
    // Expiry is exclusive: at `expires_at_ms` the reservation is no longer live.
    assert_eq!(
        store.reserve(&new, NOW + 100).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        store.settle(&old, &completed(&old)).await,
        Err(StoreError::Fenced)
    );
    assert_eq!(store.release(&old).await, Ok(()));
    assert_eq!(store.renew(&old, NOW + 50_000).await, Ok(false));
    let third = reservation("k", "third", NOW + 20_000);
    assert_eq!(
        store.reserve(&third, NOW + 200).await,
        Ok(ReserveOutcome::InProgress(new.clone())),
        "the old owner's release must not free the new owner's key"
    );
    assert_eq!(store.settle(&new, &completed(&new)).await, Ok(()));
    assert_eq!(
        store.record("k", NOW + 200).await,
        Ok(Some(completed(&new)))
    );
}

/// Release frees the key for its owner only; anyone else's release is a no-op.
async fn check_release_frees_the_key_for_its_owner_only(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let stranger = reservation("k", "stranger", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(store.release(&stranger).await, Ok(()));
    assert_eq!(
        store.reserve(&stranger, NOW).await,
        Ok(ReserveOutcome::InProgress(owner.clone()))
    );
    assert_eq!(store.release(&owner).await, Ok(()));
    assert_eq!(
        store.reserve(&stranger, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    // Releasing a key that holds nothing of ours is a no-op as well.
    assert_eq!(
        store
            .release(&reservation("never-reserved", "a", NOW))
            .await,
        Ok(())
    );
}

/// Once settled, every later reserve gets the stored record back.
async fn check_settled_record_is_replayed(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let record = completed(&owner);
    assert_eq!(store.settle(&owner, &record).await, Ok(()));
    let duplicate = reservation("k", "b", NOW + 10_000);
    assert_eq!(
        store.reserve(&duplicate, NOW + 5_000).await,
        Ok(ReserveOutcome::Settled(record.clone()))
    );
    assert_eq!(
        store.record("k", NOW + 5_000).await,
        Ok(Some(record.clone()))
    );
    // The settled owner's late release must not drop the record.
    assert_eq!(store.release(&owner).await, Ok(()));
    assert_eq!(store.record("k", NOW).await, Ok(Some(record)));
}

/// Settling needs the live token: no reservation, or a second settle, is fenced.
async fn check_settle_without_the_live_token_is_fenced(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.settle(&owner, &completed(&owner)).await,
        Err(StoreError::Fenced)
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(None),
        "a fenced settle stores nothing"
    );
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let first = completed(&owner);
    assert_eq!(store.settle(&owner, &first).await, Ok(()));
    let second = record_for(&owner, ActionResultStatus::Failed, None);
    assert_eq!(store.settle(&owner, &second).await, Err(StoreError::Fenced));
    assert_eq!(store.record("k", NOW).await, Ok(Some(first)));
}

/// An expired record reads as absent, and its key can be claimed again.
async fn check_expired_record_is_ignored_and_reservable(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let record = record_for(&owner, ActionResultStatus::Completed, Some(NOW + 500));
    assert_eq!(store.settle(&owner, &record).await, Ok(()));
    assert_eq!(store.record("k", NOW + 499).await, Ok(Some(record.clone())));
    let early = reservation("k", "early", NOW + 1_000);
    assert_eq!(
        store.reserve(&early, NOW + 499).await,
        Ok(ReserveOutcome::Settled(record))
    );
    assert_eq!(store.record("k", NOW + 500).await, Ok(None));
    let late = reservation("k", "late", NOW + 1_000);
    assert_eq!(
        store.reserve(&late, NOW + 500).await,
        Ok(ReserveOutcome::Acquired)
    );
    let fresh = completed(&late);
    assert_eq!(store.settle(&late, &fresh).await, Ok(()));
    assert_eq!(store.record("k", NOW + 500).await, Ok(Some(fresh)));
}

/// A record without an expiry is replayed forever.
async fn check_record_without_expiry_never_expires(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let record = completed(&owner);
    assert_eq!(store.settle(&owner, &record).await, Ok(()));
    assert_eq!(
        store.record("k", Millis::MAX).await,
        Ok(Some(record.clone()))
    );
    let much_later = reservation("k", "b", Millis::MAX);
    assert_eq!(
        store.reserve(&much_later, Millis::MAX - 1).await,
        Ok(ReserveOutcome::Settled(record))
    );
}

/// Only the approved resume of the gated action itself replaces a pending-approval record.
async fn check_resume_pending_replaces_only_a_matching_pending_record(store: SharedStore) {
    for (key, gate) in [
        ("k-pending", ActionResultStatus::PendingApproval),
        ("k-human", ActionResultStatus::RequiresHuman),
    ] {
        let owner = reservation(key, "gate", NOW + 100);
        assert_eq!(
            store.reserve(&owner, NOW).await,
            Ok(ReserveOutcome::Acquired)
        );
        let pending = record_for(&owner, gate, None);
        assert_eq!(store.settle(&owner, &pending).await, Ok(()));
        let resume = Reservation {
            reservation_id: "resume".to_owned(),
            resume_pending: true,
            expires_at_ms: NOW + 1_000,
            ..owner.clone()
        };
        let refused = [
            Reservation {
                resume_pending: false,
                ..resume.clone()
            },
            Reservation {
                action_id: ActionId::trusted("act_other"),
                ..resume.clone()
            },
            Reservation {
                input_hash: "hash-2".to_owned(),
                ..resume.clone()
            },
        ];
        for attempt in &refused {
            assert_eq!(
                store.reserve(attempt, NOW + 10).await,
                Ok(ReserveOutcome::Settled(pending.clone())),
                "{key}: {attempt:?} must not replace the gate"
            );
        }
        assert_eq!(
            store.reserve(&resume, NOW + 10).await,
            Ok(ReserveOutcome::Acquired)
        );
        assert_eq!(
            store.record(key, NOW + 10).await,
            Ok(None),
            "{key}: gate replaced"
        );
        assert_eq!(
            store.reserve(&refused[0], NOW + 20).await,
            Ok(ReserveOutcome::InProgress(resume.clone()))
        );
        let done = completed(&resume);
        assert_eq!(store.settle(&resume, &done).await, Ok(()));
        let again = Reservation {
            reservation_id: "resume-again".to_owned(),
            ..resume.clone()
        };
        assert_eq!(
            store.reserve(&again, NOW + 30).await,
            Ok(ReserveOutcome::Settled(done)),
            "{key}: a completed record is never replaced, even by a matching resume"
        );
    }
}

/// A completed (or failed) record is never replaced by a resume.
async fn check_resume_pending_never_replaces_a_final_record(store: SharedStore) {
    for (key, status) in [
        ("k-done", ActionResultStatus::Completed),
        ("k-failed", ActionResultStatus::Failed),
    ] {
        let owner = reservation(key, "a", NOW + 100);
        assert_eq!(
            store.reserve(&owner, NOW).await,
            Ok(ReserveOutcome::Acquired)
        );
        let record = record_for(&owner, status, None);
        assert_eq!(store.settle(&owner, &record).await, Ok(()));
        let resume = Reservation {
            reservation_id: "resume".to_owned(),
            resume_pending: true,
            ..owner.clone()
        };
        assert_eq!(
            store.reserve(&resume, NOW + 10).await,
            Ok(ReserveOutcome::Settled(record))
        );
    }
}

/// Renewal extends the live reservation only; a stale or foreign token gets false.
async fn check_renew_works_only_for_the_live_token(store: SharedStore) {
    let a = reservation("k", "a", NOW + 100);
    assert_eq!(store.reserve(&a, NOW).await, Ok(ReserveOutcome::Acquired));
    assert_eq!(store.renew(&a, NOW + 1_000).await, Ok(true));
    let b = reservation("k", "b", NOW + 5_000);
    assert_eq!(
        store.reserve(&b, NOW + 500).await,
        Ok(ReserveOutcome::InProgress(Reservation {
            expires_at_ms: NOW + 1_000,
            ..a.clone()
        })),
        "renewal must keep the key live past the original expiry"
    );
    assert_eq!(
        store.renew(&b, NOW + 9_000).await,
        Ok(false),
        "b never held the key"
    );
    assert_eq!(
        store.reserve(&b, NOW + 1_000).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        store.renew(&a, NOW + 9_000).await,
        Ok(false),
        "a was taken over"
    );
    let c = reservation("k", "c", NOW + 9_000);
    assert_eq!(
        store.reserve(&c, NOW + 1_001).await,
        Ok(ReserveOutcome::InProgress(b.clone()))
    );
    assert_eq!(store.settle(&b, &completed(&b)).await, Ok(()));
    assert_eq!(
        store.renew(&b, NOW + 9_000).await,
        Ok(false),
        "a settled key has no reservation"
    );
    assert_eq!(
        store.renew(&reservation("unknown", "a", 0), NOW).await,
        Ok(false)
    );
}

/// Approvals: insert at version 0, read back, compare-and-set updates.
async fn check_approval_insert_get_and_versioned_update(store: SharedStore) {
    let id = ApprovalId::trusted("appr_cas");
    assert_eq!(store.approval(&id).await, Ok(None));
    let request = approval("appr_cas");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&request, 0, false)))
    );

    let mut voted = request.clone();
    voted.decisions.push(approve("appr_cas"));
    voted.status = ApprovalStatus::Approved;
    assert_eq!(store.update_approval(&voted, 0).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&voted, 1, false)))
    );

    let mut stale = request.clone();
    stale.status = ApprovalStatus::Denied;
    assert_eq!(
        store.update_approval(&stale, 0).await,
        Ok(false),
        "version 0 is stale"
    );
    assert_eq!(
        store.update_approval(&stale, 2).await,
        Ok(false),
        "version 2 does not exist yet"
    );
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&voted, 1, false)))
    );
    assert_eq!(store.update_approval(&stale, 1).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&stale, 2, false)))
    );

    assert_eq!(
        store.update_approval(&approval("appr_missing"), 0).await,
        Ok(false)
    );
    assert_eq!(
        store.approval(&ApprovalId::trusted("appr_missing")).await,
        Ok(None)
    );
}

/// Inserting an id that exists fails and leaves the stored record alone.
async fn check_duplicate_approval_insert_fails(store: SharedStore) {
    let request = approval("appr_dup");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    let impostor = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert!(store.insert_approval(&impostor).await.is_err());
    assert_eq!(
        store.approval(&request.approval_id).await,
        Ok(Some(stored(&request, 0, false)))
    );
}

/// An approved action is resumed exactly once, and the claim fences stale writers.
async fn check_claim_resume_succeeds_once_and_only_when_approved(store: SharedStore) {
    let id = ApprovalId::trusted("appr_resume");
    assert_eq!(store.claim_resume(&id).await, Ok(false), "no such record");
    let request = approval("appr_resume");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    assert_eq!(store.claim_resume(&id).await, Ok(false), "still pending");

    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(store.update_approval(&approved, 0).await, Ok(true));
    assert_eq!(store.claim_resume(&id).await, Ok(true));
    assert_eq!(
        store.claim_resume(&id).await,
        Ok(false),
        "a resume is claimed once"
    );
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 2, true)))
    );

    // A writer that read the record before the claim must lose…
    assert_eq!(store.update_approval(&approved, 1).await, Ok(false));
    // …and a current writer cannot re-arm the resume by writing `resumed: false`.
    let rewritten = ApprovalRecord {
        resumed: false,
        ..approved.clone()
    };
    assert_eq!(store.update_approval(&rewritten, 2).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 3, true)))
    );
    assert_eq!(store.claim_resume(&id).await, Ok(false));

    for status in [
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Revoked,
    ] {
        let other = approval(&format!("appr_{status:?}"));
        assert_eq!(store.insert_approval(&other).await, Ok(()));
        let decided = ApprovalRecord {
            status,
            ..other.clone()
        };
        assert_eq!(store.update_approval(&decided, 0).await, Ok(true));
        assert_eq!(
            store.claim_resume(&other.approval_id).await,
            Ok(false),
            "{status:?}"
        );
    }
}

/// 1,000 racing duplicates: one owner, everyone else told who it is.
async fn check_thousand_concurrent_reserves_on_one_key(store: SharedStore) {
    let outcomes = reserve_concurrently(&store, "hot-key", "r", 1_000, NOW).await;
    assert_single_winner(&outcomes);
}

/// Many callers racing for an expired reservation: one takes it over.
async fn check_concurrent_take_over_has_one_winner(store: SharedStore) {
    let crashed = reservation("k", "crashed", NOW + 100);
    assert_eq!(
        store.reserve(&crashed, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let outcomes = reserve_concurrently(&store, "k", "t", 100, NOW + 100).await;
    assert_single_winner(&outcomes);
    assert_eq!(
        store.settle(&crashed, &completed(&crashed)).await,
        Err(StoreError::Fenced)
    );
}

/// Claims, settlements and releases on one key never touch another key.
async fn check_different_keys_never_interfere(store: SharedStore) {
    let keys: Vec<String> = (0..50)
        .map(|index| format!("Action:act_{index}:k"))
        .collect();
    let mut tasks = Vec::new();
    for key in &keys {
        let store = Arc::clone(&store);
        let owner = reservation(key, &format!("owner-{key}"), NOW + 100);
        tasks.push(tokio::spawn(
            async move { store.reserve(&owner, NOW).await },
        ));
    }
    for task in tasks {
        assert_eq!(task.await.expect("task"), Ok(ReserveOutcome::Acquired));
    }
    let owner = |key: &str| reservation(key, &format!("owner-{key}"), NOW + 100);
    let settled = completed(&owner(&keys[0]));
    assert_eq!(store.settle(&owner(&keys[0]), &settled).await, Ok(()));
    assert_eq!(store.release(&owner(&keys[1])).await, Ok(()));
    // A key that is a prefix of another is still another key.
    let prefix = reservation("Action:act_1", "prefix", NOW + 100);
    assert_eq!(
        store.reserve(&prefix, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );

    let late = |key: &str| reservation(key, "late", NOW + 1_000);
    assert_eq!(
        store.reserve(&late(&keys[0]), NOW + 1).await,
        Ok(ReserveOutcome::Settled(settled))
    );
    assert_eq!(
        store.reserve(&late(&keys[1]), NOW + 1).await,
        Ok(ReserveOutcome::Acquired)
    );
    for key in &keys[2..] {
        assert_eq!(
            store.reserve(&late(key), NOW + 1).await,
            Ok(ReserveOutcome::InProgress(owner(key))),
            "{key}"
        );
        assert_eq!(store.record(key, NOW + 1).await, Ok(None), "{key}");
    }
}

/// 100 racing resumers of one approved request: exactly one wins.
async fn check_hundred_concurrent_claim_resume(store: SharedStore) {
    let request = approval("appr_race");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(store.update_approval(&approved, 0).await, Ok(true));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let store = Arc::clone(&store);
            let id = request.approval_id.clone();
            tokio::spawn(async move { store.claim_resume(&id).await })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        if task.await.expect("task").expect("claim_resume") {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

/// Duplicate inserts fail without quoting the record or its id.
async fn check_store_errors_quote_no_record_contents(store: SharedStore) {
    let request = approval("appr_s3cr3t");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    let error = store
        .insert_approval(&request)
        .await
        .expect_err("duplicate");
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    for secret in ["s3cr3t", "tenant-1", "policy-hash", "cap:store:test"] {
        assert!(!message.contains(secret), "{message}");
    }
}

/// Every approval status is stored under its JSON spelling (the column's CHECK lists them).
async fn check_every_approval_status_is_storable(store: SharedStore) {
    for status in [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Revoked,
    ] {
        let request = ApprovalRecord {
            status,
            ..approval(&format!("appr_status_{status:?}"))
        };
        assert_eq!(store.insert_approval(&request).await, Ok(()), "{status:?}");
        assert_eq!(
            store.approval(&request.approval_id).await,
            Ok(Some(stored(&request, 0, false)))
        );
    }
}

/// A replayed result is the stored one to the byte: object keys keep their order.
async fn check_replayed_results_keep_their_key_order(store: SharedStore) {
    const OUTPUT: &str = r#"{"zeta":1,"alpha":{"y":2,"b":[3,{"d":4,"c":5.25}]},"mid":null}"#;
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let mut record = completed(&owner);
    record.result.output = Some(serde_json::from_str(OUTPUT).expect("fixture output"));
    assert_eq!(store.settle(&owner, &record).await, Ok(()));
    let output_text = |record: &IdempotencyRecord| {
        serde_json::to_string(record.result.output.as_ref().expect("an output")).expect("json")
    };
    match store
        .reserve(&reservation("k", "b", NOW + 200), NOW + 1)
        .await
    {
        Ok(ReserveOutcome::Settled(replayed)) => assert_eq!(output_text(&replayed), OUTPUT),
        other => panic!("expected the settled record, got {other:?}"),
    }
    let read = store
        .record("k", NOW + 1)
        .await
        .expect("record")
        .expect("a live record");
    assert_eq!(output_text(&read), OUTPUT);
}

/// The transaction block every fixture transaction carries.
fn transaction_block(id: &TransactionId, mode: TransactionMode) -> ActionTransaction {
    ActionTransaction {
        mode,
        transaction_id: Some(id.clone()),
        plan_id: None,
        compensation_for: None,
    }
}

/// A planned transaction `id` with the plan `plan:<id>`, owned by `act_plan_<id>`, with a
/// revision the store must reset.
fn planned(id: &str) -> TransactionRecord {
    let transaction_id = TransactionId::trusted(id);
    let action_id = ActionId::trusted(format!("act_plan_{id}"));
    let block = transaction_block(&transaction_id, TransactionMode::Plan);
    let plan = TransactionPlan {
        plan_id: format!("plan:{id}"),
        transaction_id: transaction_id.clone(),
        action_id: action_id.clone(),
        capability_id: CapabilityId::from("cap:store:test"),
        transaction: block.clone(),
        planned_by: Principal::new("user:alice", PrincipalKind::Human),
        input_hash: HASH.to_owned(),
        approval_required: false,
        created_at: time::OffsetDateTime::UNIX_EPOCH,
        input_snapshot: Some(json!({"amount": 12, "currency": "EUR"})),
        predicted_side_effects: Vec::new(),
        approval_policy: None,
        compensation: None,
        dry_run_fidelity: None,
        identity: None,
        expires_at: None,
        metadata: None,
    };
    TransactionRecord {
        transaction_id,
        action_id,
        capability_id: CapabilityId::from("cap:store:test"),
        transaction: block,
        principal_id: PrincipalId::from("user:alice"),
        identity: None,
        status: TransactionProtocolStatus::Planned,
        plan: Some(plan),
        result: None,
        provider_operation: None,
        reconciliation_cursor: None,
        reconcile_after_ms: None,
        error: None,
        revision: 9,
        created_at_ms: NOW,
        updated_at_ms: NOW,
    }
}

/// An execute-mode transaction `id` in `status`, without a plan, owned by `act_exec_<id>`.
fn executing(id: &str, status: TransactionProtocolStatus) -> TransactionRecord {
    let transaction_id = TransactionId::trusted(id);
    TransactionRecord {
        action_id: ActionId::trusted(format!("act_exec_{id}")),
        transaction: transaction_block(&transaction_id, TransactionMode::Execute),
        status,
        plan: None,
        transaction_id,
        ..planned(id)
    }
}

/// `record` as the store keeps it after the insert: at revision 0.
fn inserted(record: &TransactionRecord) -> TransactionRecord {
    TransactionRecord {
        revision: 0,
        ..record.clone()
    }
}

/// The claim a commit action makes on a plan: planned → committing, rebound to `action`.
fn claim_plan(action: &str) -> Transition {
    Transition {
        rebind_action: Some(ActionId::trusted(action)),
        ..Transition::new(
            &[TransactionProtocolStatus::Planned],
            TransactionProtocolStatus::Committing,
        )
    }
}

/// Inserts store the record at revision 0, once; lookups by id, plan and action find it.
async fn check_transaction_insert_and_lookups(store: PostgresStore) {
    let record = planned("txn_B_plan");
    let id = record.transaction_id.clone();
    assert_eq!(store.transaction(&id).await, Ok(None));
    assert_eq!(store.insert_transaction(&record).await, Ok(true));
    assert_eq!(store.transaction(&id).await, Ok(Some(inserted(&record))));
    let impostor = TransactionRecord {
        status: TransactionProtocolStatus::Committed,
        ..record.clone()
    };
    assert_eq!(store.insert_transaction(&impostor).await, Ok(false));
    assert_eq!(
        store.transaction(&id).await,
        Ok(Some(inserted(&record))),
        "a second insert changes nothing"
    );
    assert_eq!(
        store.transaction_by_plan("plan:txn_B_plan").await,
        Ok(Some(inserted(&record)))
    );
    assert_eq!(
        store.transaction_by_plan("plan:txn_unknown").await,
        Ok(None)
    );

    // A second record of the same action whose id sorts after it bytewise (but first in most
    // locales): the list is in byte order, as every backend sorts it.
    let sibling = TransactionRecord {
        action_id: record.action_id.clone(),
        ..executing("txn_a_exec", TransactionProtocolStatus::Prepared)
    };
    assert_eq!(store.insert_transaction(&sibling).await, Ok(true));
    assert_eq!(
        store.transactions_by_action(&record.action_id).await,
        Ok(vec![inserted(&record), inserted(&sibling)])
    );
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_nobody"))
            .await,
        Ok(Vec::new())
    );
}

/// One record answers to a plan id, whether the id comes from a plan or a commit block.
async fn check_plan_id_answers_to_one_record(store: PostgresStore) {
    let record = planned("txn_p1");
    assert_eq!(store.insert_transaction(&record).await, Ok(true));
    let rival = TransactionRecord {
        transaction_id: TransactionId::trusted("txn_p2"),
        ..planned("txn_p1")
    };
    let error = store
        .insert_transaction(&rival)
        .await
        .expect_err("a second record for one plan id");
    assert!(
        matches!(&error, StoreError::Unavailable(message) if !message.contains("txn_p1")),
        "{error:?}"
    );
    assert_eq!(store.transaction(&rival.transaction_id).await, Ok(None));

    let mut commit = executing("txn_c1", TransactionProtocolStatus::Committing);
    commit.transaction.mode = TransactionMode::Commit;
    commit.transaction.plan_id = Some("plan:elsewhere".to_owned());
    assert_eq!(store.insert_transaction(&commit).await, Ok(true));
    assert_eq!(
        store.transaction_by_plan("plan:elsewhere").await,
        Ok(Some(inserted(&commit)))
    );
}

/// A transition needs the record, its revision and an expected state, and stores exactly what
/// `Transition::apply` computes.
async fn check_transition_outcomes(store: PostgresStore) {
    use TransactionProtocolStatus as S;
    let record = planned("txn_t");
    let id = record.transaction_id.clone();
    assert_eq!(store.insert_transaction(&record).await, Ok(true));
    let at_zero = inserted(&record);
    let claim = claim_plan("act_commit");

    assert_eq!(
        store
            .transition(&TransactionId::trusted("txn_missing"), 0, &claim, NOW)
            .await,
        Ok(TransitionOutcome::NotFound)
    );
    assert_eq!(
        store.transition(&id, 1, &claim, NOW).await,
        Ok(TransitionOutcome::RevisionConflict(at_zero.clone()))
    );
    let wrong_state = Transition::new(&[S::Prepared, S::Committing], S::Committed);
    assert_eq!(
        store.transition(&id, 0, &wrong_state, NOW).await,
        Ok(TransitionOutcome::StateConflict(at_zero.clone()))
    );
    assert_eq!(
        store.transaction(&id).await,
        Ok(Some(at_zero.clone())),
        "refused transitions change nothing"
    );

    let claimed = claim
        .apply(&at_zero, NOW + 5)
        .expect("a plan may be claimed");
    assert_eq!(
        (claimed.revision, claimed.updated_at_ms),
        (1, NOW + 5),
        "fixture sanity"
    );
    assert_eq!(
        store.transition(&id, 0, &claim, NOW + 5).await,
        Ok(TransitionOutcome::Applied(claimed.clone()))
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(claimed.clone())));
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_commit"))
            .await,
        Ok(vec![claimed.clone()])
    );
    assert_eq!(
        store.transactions_by_action(&record.action_id).await,
        Ok(Vec::new()),
        "the planning action no longer owns it"
    );
    assert_eq!(
        store.transaction_by_plan("plan:txn_t").await,
        Ok(Some(claimed.clone()))
    );
    assert_eq!(
        store.transition(&id, 0, &claim, NOW + 6).await,
        Ok(TransitionOutcome::RevisionConflict(claimed.clone())),
        "a late claimer learns the current record"
    );

    let checkpoint = Transition {
        provider_operation: Some(ProviderOperationRef {
            provider: "provider-double".to_owned(),
            operation_id: "op-1".to_owned(),
            request_id: Some("req-1".to_owned()),
        }),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        ..Transition::new(&[S::Committing], S::Committing)
    };
    let checkpointed = checkpoint.apply(&claimed, NOW + 7).expect("checkpoint");
    assert_eq!(
        store.transition(&id, 1, &checkpoint, NOW + 7).await,
        Ok(TransitionOutcome::Applied(checkpointed.clone()))
    );

    let mut timeout = ProtocolError::new(
        "sla.timeout_exceeded",
        "the provider did not answer",
        ErrorCategory::Temporary,
    );
    timeout.retry_after_ms = Some(5_000);
    let uncertain = Transition {
        result: Some(ActionResult::new(
            ActionId::trusted("act_commit"),
            ActionResultStatus::Failed,
        )),
        reconcile_after_ms: Some(NOW + 5_008),
        error: Some(timeout),
        ..Transition::new(&[S::Committing], S::OutcomeUnknown)
    };
    let unknown = uncertain.apply(&checkpointed, NOW + 8).expect("uncertain");
    assert_eq!(
        unknown.provider_operation, checkpointed.provider_operation,
        "fixture sanity: a transition without an operation keeps the stored one"
    );
    assert_eq!(
        store.transition(&id, 2, &uncertain, NOW + 8).await,
        Ok(TransitionOutcome::Applied(unknown.clone()))
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(unknown)));
}

/// The recovery scan lists exactly the recoverable records, in id order, as they move.
async fn check_recoverable_lists_exactly_the_recoverable_records(store: PostgresStore) {
    use TransactionProtocolStatus as S;
    let statuses = [
        S::DryRunCompleted,
        S::Planned,
        S::Prepared,
        S::Committing,
        S::Committed,
        S::Compensating,
        S::Compensated,
        S::RequiresHuman,
        S::Cancelled,
        S::RollbackNotSupported,
        S::Failed,
        S::OutcomeUnknown,
        S::Reconciling,
        S::Reconciled,
    ];
    let mut records = Vec::new();
    for (index, status) in statuses.into_iter().enumerate() {
        let record = executing(&format!("txn_{index:02}"), status);
        assert_eq!(store.insert_transaction(&record).await, Ok(true));
        records.push(inserted(&record));
    }
    let expected: Vec<TransactionRecord> = records
        .iter()
        .filter(|record| record.is_recoverable())
        .cloned()
        .collect();
    assert_eq!(expected.len(), 5, "fixture sanity");
    assert_eq!(store.recoverable().await, Ok(expected.clone()));

    // Committing → committed leaves the list; failed → prepared (a retry) joins it.
    let committing = &records[3];
    let commit = Transition::new(&[S::Committing], S::Committed);
    let committed = commit.apply(committing, NOW).expect("commit");
    assert_eq!(
        store
            .transition(&committing.transaction_id, 0, &commit, NOW)
            .await,
        Ok(TransitionOutcome::Applied(committed))
    );
    let failed = &records[10];
    let retry = Transition::new(&[S::Failed], S::Prepared);
    let retried = retry.apply(failed, NOW).expect("retry");
    assert_eq!(
        store
            .transition(&failed.transaction_id, 0, &retry, NOW)
            .await,
        Ok(TransitionOutcome::Applied(retried.clone()))
    );
    let mut now_expected: Vec<TransactionRecord> = expected
        .into_iter()
        .filter(|record| record.transaction_id != committing.transaction_id)
        .collect();
    now_expected.push(retried);
    now_expected.sort_by(|a, b| a.transaction_id.cmp(&b.transaction_id));
    assert_eq!(store.recoverable().await, Ok(now_expected));
}

/// Hands a check the store in the form its signature asks for.
trait FromStore {
    /// Wraps `store`.
    fn from_store(store: PostgresStore) -> Self;
}

impl FromStore for SharedStore {
    fn from_store(store: PostgresStore) -> Self {
        Arc::new(store)
    }
}

impl FromStore for PostgresStore {
    fn from_store(store: PostgresStore) -> Self {
        store
    }
}

/// Runs every check on a fresh schema, one test per check.
macro_rules! postgres_checks {
    ($($check:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    super::on_fresh_schema(|store| {
                        super::$check(super::FromStore::from_store(store))
                    })
                    .await;
                }
            )+
        }
    };
}

postgres_checks!(
    check_reserve_on_a_free_key_acquires,
    check_second_reserve_while_live_is_in_progress,
    check_expired_reservation_is_taken_over_and_old_owner_is_fenced,
    check_release_frees_the_key_for_its_owner_only,
    check_settled_record_is_replayed,
    check_settle_without_the_live_token_is_fenced,
    check_expired_record_is_ignored_and_reservable,
    check_record_without_expiry_never_expires,
    check_resume_pending_replaces_only_a_matching_pending_record,
    check_resume_pending_never_replaces_a_final_record,
    check_renew_works_only_for_the_live_token,
    check_approval_insert_get_and_versioned_update,
    check_duplicate_approval_insert_fails,
    check_claim_resume_succeeds_once_and_only_when_approved,
    check_thousand_concurrent_reserves_on_one_key,
    check_concurrent_take_over_has_one_winner,
    check_different_keys_never_interfere,
    check_hundred_concurrent_claim_resume,
    check_store_errors_quote_no_record_contents,
    check_every_approval_status_is_storable,
    check_replayed_results_keep_their_key_order,
    check_transaction_insert_and_lookups,
    check_plan_id_answers_to_one_record,
    check_transition_outcomes,
    check_recoverable_lists_exactly_the_recoverable_records,
);

/// 200 rounds of 8 replicas' callers racing to reserve one fresh key: one owner each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_reserve_of_a_fresh_key_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        let key = format!("Capability:cap:race:{round}");
        let tasks: Vec<_> = (0..8)
            .map(|index| {
                let store = replicas[index % REPLICAS].clone();
                let claim = reservation(&key, &format!("r{round}-{index}"), NOW + 60_000);
                tokio::spawn(async move {
                    let outcome = store.reserve(&claim, NOW).await.expect("reserve");
                    (claim.reservation_id, outcome)
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.expect("reserve task"));
        }
        assert_single_winner(&outcomes);
    }
}

/// 200 rounds of 8 replicas' callers racing to take over one crashed owner's expired
/// reservation: one new owner each round. Unlike a fresh key (decided by the insert alone), this
/// path is decided under the row lock; the pools are warm after the first round, so the callers
/// really overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_take_over_of_an_expired_reservation_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        let key = format!("Capability:cap:take-over:{round}");
        let crashed = reservation(&key, &format!("crashed{round}"), NOW + 100);
        assert_eq!(
            replicas[round % REPLICAS].reserve(&crashed, NOW).await,
            Ok(ReserveOutcome::Acquired)
        );
        let tasks: Vec<_> = (0..8)
            .map(|index| {
                let store = replicas[index % REPLICAS].clone();
                let claim = reservation(&key, &format!("t{round}-{index}"), NOW + 60_000);
                tokio::spawn(async move {
                    let outcome = store.reserve(&claim, NOW + 100).await.expect("reserve");
                    (claim.reservation_id, outcome)
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.expect("reserve task"));
        }
        assert_single_winner(&outcomes);
        assert_eq!(
            replicas[(round + 1) % REPLICAS]
                .settle(&crashed, &completed(&crashed))
                .await,
            Err(StoreError::Fenced)
        );
    }
}

/// 200 rounds of 8 commit actions on 4 replicas claiming one fresh plan: one claim applies, every
/// other claimer learns the winner's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_plan_claim_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        let record = planned(&format!("txn_race_{round}"));
        let id = record.transaction_id.clone();
        assert_eq!(
            replicas[round % REPLICAS].insert_transaction(&record).await,
            Ok(true)
        );
        let tasks: Vec<_> = (0..8)
            .map(|index| {
                let store = replicas[index % REPLICAS].clone();
                let id = id.clone();
                let claim = claim_plan(&format!("act_commit_{round}_{index}"));
                tokio::spawn(async move { store.transition(&id, 0, &claim, NOW).await })
            })
            .collect();
        let mut applied = Vec::new();
        let mut conflicts = Vec::new();
        for task in tasks {
            match task.await.expect("claim task").expect("transition") {
                TransitionOutcome::Applied(record) => applied.push(record),
                TransitionOutcome::RevisionConflict(record) => conflicts.push(record),
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!(applied.len(), 1, "round {round}: exactly one claim applies");
        let winner = &applied[0];
        assert_eq!(
            (winner.status, winner.revision),
            (TransactionProtocolStatus::Committing, 1)
        );
        for conflict in &conflicts {
            assert_eq!(
                conflict, winner,
                "round {round}: a loser saw another record"
            );
        }
        assert_eq!(
            replicas[(round + 1) % REPLICAS].transaction(&id).await,
            Ok(Some(winner.clone()))
        );
    }
}

/// 100 resumers on 4 replicas racing for one approved request: exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_claim_resume_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let replicas = schema.replicas(REPLICAS).await;
    let request = approval("appr_race");
    assert_eq!(replicas[0].insert_approval(&request).await, Ok(()));
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(replicas[1].update_approval(&approved, 0).await, Ok(true));
    let tasks: Vec<_> = (0..100)
        .map(|index| {
            let store = replicas[index % REPLICAS].clone();
            let id = request.approval_id.clone();
            tokio::spawn(async move { store.claim_resume(&id).await })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        if task.await.expect("task").expect("claim_resume") {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(
        replicas[2].approval(&request.approval_id).await,
        Ok(Some(stored(&approved, 2, true)))
    );
}

/// Replicas starting at once on a new schema all come up, and share one state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_at_once_share_one_schema() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let url = schema.url.clone();
            let name = schema.name.clone();
            tokio::spawn(async move { PostgresStore::connect_with_schema(&url, &name).await })
        })
        .collect();
    let mut replicas = Vec::new();
    for task in tasks {
        replicas.push(task.await.expect("connect task").expect("connect"));
    }
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        replicas[0].reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        replicas[7]
            .reserve(&reservation("k", "b", NOW + 100), NOW)
            .await,
        Ok(ReserveOutcome::InProgress(owner.clone()))
    );
    assert_eq!(replicas[3].settle(&owner, &completed(&owner)).await, Ok(()));
    assert_eq!(
        replicas[5].record("k", NOW).await,
        Ok(Some(completed(&owner)))
    );
}

/// A schema name that is not a plain identifier is refused before anything is sent.
#[tokio::test]
async fn schema_names_must_be_plain_identifiers() {
    // Refused before the URL is even parsed, so this runs without a server too.
    for name in [
        "",
        "Upper",
        "1st",
        "semi;colon",
        "quo\"te",
        "space d",
        &"x".repeat(64),
    ] {
        assert!(
            matches!(
                PostgresStore::connect_with_schema("postgres://nowhere.invalid/db", name).await,
                Err(StoreError::Unavailable(_))
            ),
            "{name:?}"
        );
    }
}
