//! The store conformance suite: every check is written once against [`SharedStore`] and runs
//! against every backend (`memory::*` and `sqlite::*`), so the backends cannot drift apart.
//!
//! Times are explicit milliseconds, so expiry is tested without sleeping.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ApprovalDecision, ApprovalDecisionKind,
    ApprovalPolicy, IdempotencyKeyScope, Principal, PrincipalKind,
};
use aip_connector::store::{
    ApprovalRecord, ApprovalStatus, IdempotencyRecord, MemoryStore, Millis, Reservation,
    ReserveOutcome, SharedStore, SqliteStore, StoreError,
};
use serde_json::json;

/// An arbitrary "now" far from zero, so `now - x` never underflows in a check.
const NOW: Millis = 1_000_000;

/// The input hash every fixture action has unless a check says otherwise.
const HASH: &str = "hash-1";

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

/// A fresh in-memory store.
fn memory_store() -> SharedStore {
    Arc::new(MemoryStore::new())
}

/// A store file in the temp dir, removed (with its WAL and shared-memory files) on drop.
struct TempStoreFile(PathBuf);

impl TempStoreFile {
    fn new(check: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!(
            "aip-store-conformance-{}-{unique}-{check}.db",
            std::process::id()
        )))
    }

    fn open(&self) -> SharedStore {
        Arc::new(SqliteStore::open(&self.0).expect("open the SQLite store"))
    }
}

impl Drop for TempStoreFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs every check against every backend, one test per pair.
macro_rules! conformance {
    ($($check:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    super::$check(super::memory_store()).await;
                }
            )+
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let file = super::TempStoreFile::new(stringify!($check));
                    super::$check(file.open()).await;
                }
            )+
        }
    };
}

conformance!(
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
);
