//! The store conformance suite: every check is written once against [`SharedStore`] and runs
//! against every backend (`memory::*` and `sqlite::*`), so the backends cannot drift apart.
//!
//! Times are explicit milliseconds, so expiry is tested without sleeping. A few checks race
//! many tasks on a multi-thread runtime; the SQLite ones also run across two stores opened on
//! one file.

use std::path::PathBuf;
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
    ApprovalRecord, ApprovalStatus, IdempotencyRecord, MemoryStore, Millis, Reservation,
    ReserveOutcome, SharedStore, SqliteStore, StoreError, TransactionRecord, Transition,
    TransitionOutcome,
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

// ---- transactions ------------------------------------------------------------------------------

/// Every transaction status, in declaration order.
const ALL_TRANSACTION_STATUSES: [TransactionProtocolStatus; 14] = {
    use TransactionProtocolStatus as S;
    [
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
    ]
};

/// A transaction record `id` owned by `action` in `status`, with no plan, a non-zero revision
/// the store must reset, and a stored error and cursor a transition may clear or keep.
fn transaction(id: &str, action: &str, status: TransactionProtocolStatus) -> TransactionRecord {
    TransactionRecord {
        transaction_id: TransactionId::trusted(id),
        action_id: ActionId::trusted(action),
        capability_id: CapabilityId::from("cap:store:test"),
        transaction: ActionTransaction {
            transaction_id: Some(TransactionId::trusted(id)),
            ..ActionTransaction::new(TransactionMode::Execute)
        },
        principal_id: PrincipalId::from("user:alice"),
        identity: None,
        status,
        plan: None,
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

/// A `planned` record whose plan (not its transaction block) carries `plan_id`.
fn planned(id: &str, action: &str, plan_id: &str) -> TransactionRecord {
    let mut record = transaction(id, action, TransactionProtocolStatus::Planned);
    record.transaction.mode = TransactionMode::Plan;
    record.plan = Some(TransactionPlan {
        plan_id: plan_id.to_owned(),
        transaction_id: record.transaction_id.clone(),
        action_id: record.action_id.clone(),
        capability_id: record.capability_id.clone(),
        transaction: record.transaction.clone(),
        planned_by: Principal::new("user:alice", PrincipalKind::Human),
        input_hash: HASH.to_owned(),
        approval_required: false,
        created_at: time::OffsetDateTime::UNIX_EPOCH,
        input_snapshot: Some(json!({"redacted": true, "hash": HASH})),
        predicted_side_effects: Vec::new(),
        approval_policy: None,
        compensation: None,
        dry_run_fidelity: None,
        identity: None,
        expires_at: None,
        metadata: None,
    });
    record
}

/// A record whose transaction block (not a plan) names `plan_id`.
fn naming_plan(id: &str, action: &str, plan_id: &str) -> TransactionRecord {
    let mut record = transaction(id, action, TransactionProtocolStatus::Committing);
    record.transaction.mode = TransactionMode::Commit;
    record.transaction.plan_id = Some(plan_id.to_owned());
    record
}

/// `record` as the store holds it after `insert_transaction` (revision 0).
fn inserted(record: &TransactionRecord) -> TransactionRecord {
    TransactionRecord {
        revision: 0,
        ..record.clone()
    }
}

/// A provider operation `operation_id` at the test provider.
fn operation(operation_id: &str) -> ProviderOperationRef {
    ProviderOperationRef {
        provider: "provider".to_owned(),
        operation_id: operation_id.to_owned(),
        request_id: Some(format!("req-{operation_id}")),
    }
}

/// A temporary, retryable error with code `code`.
fn temporary(code: &str) -> ProtocolError {
    ProtocolError {
        retryable: Some(true),
        retry_after_ms: Some(5_000),
        ..ProtocolError::new(code, "provider timed out", ErrorCategory::Temporary)
    }
}

/// The plan claim of a commit action: `planned` → `committing`, rebound to `commit_action`.
fn plan_claim(commit_action: &str) -> Transition {
    Transition {
        rebind_action: Some(ActionId::trusted(commit_action)),
        ..Transition::new(
            &[TransactionProtocolStatus::Planned],
            TransactionProtocolStatus::Committing,
        )
    }
}

/// `records` in transaction-id order (the trait promises no order for lists).
fn by_id(mut records: Vec<TransactionRecord>) -> Vec<TransactionRecord> {
    records.sort_by(|a, b| a.transaction_id.cmp(&b.transaction_id));
    records
}

/// Inserts `record`, which must be new.
async fn insert_new(store: &SharedStore, record: &TransactionRecord) {
    assert_eq!(
        store.insert_transaction(record).await,
        Ok(true),
        "{:?} must be new",
        record.transaction_id
    );
}

/// Insert is insert-if-absent: a second record with the same id is refused and changes nothing.
async fn check_transaction_insert_if_absent(store: SharedStore) {
    let id = TransactionId::trusted("txn_insert");
    assert_eq!(store.transaction(&id).await, Ok(None));
    let record = transaction("txn_insert", "act_a", TransactionProtocolStatus::Committing);
    insert_new(&store, &record).await;
    assert_eq!(store.transaction(&id).await, Ok(Some(inserted(&record))));
    let impostor = TransactionRecord {
        status: TransactionProtocolStatus::Committed,
        action_id: ActionId::trusted("act_impostor"),
        ..record.clone()
    };
    assert_eq!(store.insert_transaction(&impostor).await, Ok(false));
    assert_eq!(store.transaction(&id).await, Ok(Some(inserted(&record))));
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_impostor"))
            .await,
        Ok(Vec::new())
    );
}

/// One record per plan id: a second transaction naming a taken plan id is an error that quotes
/// no value; the same transaction again is just "already there"; records without a plan id
/// never collide.
async fn check_transaction_plan_id_is_unique(store: SharedStore) {
    let plan = planned("txn_plan", "act_plan", "plan:s3cr3t");
    insert_new(&store, &plan).await;
    for other in [
        naming_plan("txn_other", "act_commit", "plan:s3cr3t"),
        planned("txn_other", "act_plan_2", "plan:s3cr3t"),
    ] {
        let error = store.insert_transaction(&other).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        let message = error.to_string();
        for value in ["s3cr3t", "txn_", "act_"] {
            assert!(!message.contains(value), "{message}");
        }
        assert_eq!(store.transaction(&other.transaction_id).await, Ok(None));
    }
    assert_eq!(
        store.insert_transaction(&plan).await,
        Ok(false),
        "an existing id is reported as such, even though its plan id is taken too"
    );
    assert_eq!(
        store.transaction_by_plan("plan:s3cr3t").await,
        Ok(Some(inserted(&plan)))
    );
    for index in 0..3 {
        let planless = transaction(
            &format!("txn_planless_{index}"),
            "act_a",
            TransactionProtocolStatus::Prepared,
        );
        insert_new(&store, &planless).await;
    }
}

/// Lookups by id, by plan id (from the plan or from the transaction block) and by action.
async fn check_transaction_lookups(store: SharedStore) {
    let from_plan = planned("txn_1", "act_a", "plan:one");
    let from_block = naming_plan("txn_2", "act_a", "plan:two");
    let planless = transaction("txn_3", "act_b", TransactionProtocolStatus::Prepared);
    for record in [&from_plan, &from_block, &planless] {
        insert_new(&store, record).await;
    }
    assert_eq!(
        store.transaction(&TransactionId::trusted("txn_3")).await,
        Ok(Some(inserted(&planless)))
    );
    assert_eq!(
        store.transaction(&TransactionId::trusted("txn_4")).await,
        Ok(None)
    );
    assert_eq!(
        store.transaction_by_plan("plan:one").await,
        Ok(Some(inserted(&from_plan)))
    );
    assert_eq!(
        store.transaction_by_plan("plan:two").await,
        Ok(Some(inserted(&from_block)))
    );
    assert_eq!(store.transaction_by_plan("plan:three").await, Ok(None));
    assert_eq!(
        store.transaction_by_plan("plan:").await,
        Ok(None),
        "a prefix of a plan id is another plan id"
    );
    let of_a = store
        .transactions_by_action(&ActionId::trusted("act_a"))
        .await
        .map(by_id);
    assert_eq!(of_a, Ok(vec![inserted(&from_plan), inserted(&from_block)]));
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_b"))
            .await,
        Ok(vec![inserted(&planless)])
    );
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_c"))
            .await,
        Ok(Vec::new())
    );
}

/// A transition at the stored revision from an expected status writes every field it names,
/// bumps the revision by one and stamps the update time; the next one needs the new revision.
async fn check_transition_applies_and_bumps_revision(store: SharedStore) {
    let id = TransactionId::trusted("txn_apply");
    let record = transaction("txn_apply", "act_a", TransactionProtocolStatus::Committing);
    insert_new(&store, &record).await;
    let unknown = Transition {
        result: Some(ActionResult::new(
            ActionId::trusted("act_a"),
            ActionResultStatus::Failed,
        )),
        provider_operation: Some(operation("op-1")),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        reconcile_after_ms: Some(NOW + 5_000),
        error: Some(temporary("sla.timeout_exceeded")),
        ..Transition::new(
            &[
                TransactionProtocolStatus::Prepared,
                TransactionProtocolStatus::Committing,
            ],
            TransactionProtocolStatus::OutcomeUnknown,
        )
    };
    let after_unknown = TransactionRecord {
        status: TransactionProtocolStatus::OutcomeUnknown,
        result: unknown.result.clone(),
        provider_operation: Some(operation("op-1")),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        reconcile_after_ms: Some(NOW + 5_000),
        error: Some(temporary("sla.timeout_exceeded")),
        revision: 1,
        updated_at_ms: NOW + 10,
        ..inserted(&record)
    };
    assert_eq!(
        store.transition(&id, 0, &unknown, NOW + 10).await,
        Ok(TransitionOutcome::Applied(after_unknown.clone()))
    );
    assert_eq!(
        store.transaction(&id).await,
        Ok(Some(after_unknown.clone()))
    );

    let reconciling = Transition::new(
        &[TransactionProtocolStatus::OutcomeUnknown],
        TransactionProtocolStatus::Reconciling,
    );
    let after_reconciling = TransactionRecord {
        status: TransactionProtocolStatus::Reconciling,
        result: None,
        reconcile_after_ms: None,
        error: None,
        revision: 2,
        updated_at_ms: NOW + 20,
        ..after_unknown
    };
    assert_eq!(
        store.transition(&id, 1, &reconciling, NOW + 20).await,
        Ok(TransitionOutcome::Applied(after_reconciling.clone()))
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(after_reconciling)));
}

/// A transition at any revision but the stored one loses and reports the current record, even
/// when its status would not have matched either (the revision is checked first).
async fn check_stale_revision_is_a_revision_conflict(store: SharedStore) {
    let id = TransactionId::trusted("txn_stale");
    insert_new(
        &store,
        &transaction("txn_stale", "act_a", TransactionProtocolStatus::Prepared),
    )
    .await;
    let commit = Transition::new(
        &[TransactionProtocolStatus::Prepared],
        TransactionProtocolStatus::Committed,
    );
    let Ok(TransitionOutcome::Applied(current)) = store.transition(&id, 0, &commit, NOW + 1).await
    else {
        panic!("the first transition at revision 0 must apply");
    };
    let reopen = Transition::new(
        &[TransactionProtocolStatus::Committed],
        TransactionProtocolStatus::Prepared,
    );
    for stale in [0, 2, u64::MAX] {
        assert_eq!(
            store.transition(&id, stale, &reopen, NOW + 2).await,
            Ok(TransitionOutcome::RevisionConflict(current.clone())),
            "revision {stale}"
        );
    }
    assert_eq!(
        store.transition(&id, 0, &commit, NOW + 2).await,
        Ok(TransitionOutcome::RevisionConflict(current.clone())),
        "stale and in the wrong state: the revision conflict wins"
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(current)));
}

/// A transition from a status it does not expect is refused with the current record, and
/// changes nothing (not even the revision).
async fn check_unexpected_status_is_a_state_conflict(store: SharedStore) {
    let id = TransactionId::trusted("txn_state");
    let record = transaction("txn_state", "act_a", TransactionProtocolStatus::Committed);
    insert_new(&store, &record).await;
    let reconcile = Transition {
        rebind_action: Some(ActionId::trusted("act_b")),
        ..Transition::new(
            &[TransactionProtocolStatus::OutcomeUnknown],
            TransactionProtocolStatus::Reconciling,
        )
    };
    assert_eq!(
        store.transition(&id, 0, &reconcile, NOW + 1).await,
        Ok(TransitionOutcome::StateConflict(inserted(&record)))
    );
    assert_eq!(
        store
            .transition(
                &id,
                0,
                &Transition::new(&[], TransactionProtocolStatus::Failed),
                NOW + 1
            )
            .await,
        Ok(TransitionOutcome::StateConflict(inserted(&record))),
        "an empty expected list matches nothing"
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(inserted(&record))));
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_b"))
            .await,
        Ok(Vec::new())
    );
}

/// A transition of an id that holds nothing is `NotFound`, and creates nothing.
async fn check_transition_of_a_missing_record_is_not_found(store: SharedStore) {
    let id = TransactionId::trusted("txn_missing");
    insert_new(
        &store,
        &transaction(
            "txn_missing_not",
            "act_a",
            TransactionProtocolStatus::Planned,
        ),
    )
    .await;
    assert_eq!(
        store
            .transition(&id, 0, &plan_claim("act_commit"), NOW)
            .await,
        Ok(TransitionOutcome::NotFound)
    );
    assert_eq!(store.transaction(&id).await, Ok(None));
}

/// `None` provider operation and cursor keep the stored ones; result, error and
/// `reconcile_after` are always overwritten (`None` clears them).
async fn check_transition_keeps_operation_and_cursor_but_overwrites_the_rest(store: SharedStore) {
    let id = TransactionId::trusted("txn_keep");
    insert_new(
        &store,
        &transaction("txn_keep", "act_a", TransactionProtocolStatus::Prepared),
    )
    .await;
    let checkpoint = Transition {
        result: Some(ActionResult::new(
            ActionId::trusted("act_a"),
            ActionResultStatus::Failed,
        )),
        provider_operation: Some(operation("op-1")),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        reconcile_after_ms: Some(NOW + 5_000),
        error: Some(temporary("provider.slow")),
        ..Transition::new(
            &[TransactionProtocolStatus::Prepared],
            TransactionProtocolStatus::Prepared,
        )
    };
    assert!(matches!(
        store.transition(&id, 0, &checkpoint, NOW + 1).await,
        Ok(TransitionOutcome::Applied(_))
    ));
    let bare = Transition::new(
        &[TransactionProtocolStatus::Prepared],
        TransactionProtocolStatus::Committing,
    );
    let Ok(TransitionOutcome::Applied(after_bare)) = store.transition(&id, 1, &bare, NOW + 2).await
    else {
        panic!("the bare transition must apply");
    };
    assert_eq!(after_bare.provider_operation, Some(operation("op-1")));
    assert_eq!(
        after_bare.reconciliation_cursor.as_deref(),
        Some("cursor-1")
    );
    assert_eq!(after_bare.result, None);
    assert_eq!(after_bare.error, None);
    assert_eq!(after_bare.reconcile_after_ms, None);
    assert_eq!(store.transaction(&id).await, Ok(Some(after_bare)));

    let replaced = Transition {
        provider_operation: Some(operation("op-2")),
        reconciliation_cursor: Some("cursor-2".to_owned()),
        ..Transition::new(
            &[TransactionProtocolStatus::Committing],
            TransactionProtocolStatus::Committing,
        )
    };
    let Ok(TransitionOutcome::Applied(after_replace)) =
        store.transition(&id, 2, &replaced, NOW + 3).await
    else {
        panic!("the checkpoint must apply");
    };
    assert_eq!(after_replace.provider_operation, Some(operation("op-2")));
    assert_eq!(
        after_replace.reconciliation_cursor.as_deref(),
        Some("cursor-2")
    );
    assert_eq!(after_replace.revision, 3);
}

/// A claimed plan belongs to its commit action from then on; a transition without a rebind
/// keeps the owner. The plan id stays the record's.
async fn check_transition_rebinds_the_action(store: SharedStore) {
    let id = TransactionId::trusted("txn_rebind");
    let plan = planned("txn_rebind", "act_plan", "plan:rebind");
    insert_new(&store, &plan).await;
    let Ok(TransitionOutcome::Applied(claimed)) = store
        .transition(&id, 0, &plan_claim("act_commit"), NOW + 1)
        .await
    else {
        panic!("the plan claim must apply");
    };
    assert_eq!(claimed.action_id, ActionId::trusted("act_commit"));
    assert_eq!(claimed.plan, plan.plan, "the plan itself is kept");
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_plan"))
            .await,
        Ok(Vec::new())
    );
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_commit"))
            .await,
        Ok(vec![claimed.clone()])
    );
    assert_eq!(
        store.transaction_by_plan("plan:rebind").await,
        Ok(Some(claimed))
    );
    let committed = Transition::new(
        &[TransactionProtocolStatus::Committing],
        TransactionProtocolStatus::Committed,
    );
    let Ok(TransitionOutcome::Applied(done)) = store.transition(&id, 1, &committed, NOW + 2).await
    else {
        panic!("the commit result must apply");
    };
    assert_eq!(done.action_id, ActionId::trusted("act_commit"));
}

/// `recoverable` lists exactly the planned, prepared, committing, outcome-unknown and
/// reconciling records, and follows them as they move in and out of those states.
async fn check_recoverable_lists_exactly_the_recoverable_statuses(store: SharedStore) {
    use TransactionProtocolStatus as S;
    assert_eq!(store.recoverable().await, Ok(Vec::new()));
    let mut expected = Vec::new();
    for (index, status) in ALL_TRANSACTION_STATUSES.into_iter().enumerate() {
        let record = transaction(&format!("txn_{index:02}"), "act_a", status);
        insert_new(&store, &record).await;
        if matches!(
            status,
            S::Planned | S::Prepared | S::Committing | S::OutcomeUnknown | S::Reconciling
        ) {
            expected.push(inserted(&record));
        }
    }
    assert_eq!(store.recoverable().await.map(by_id), Ok(expected.clone()));

    // A recoverable record that settles leaves the list; a failed one reopened joins it.
    let committing = expected
        .iter()
        .position(|record| record.status == S::Committing)
        .expect("a committing fixture");
    let settled = expected.remove(committing);
    let settle = Transition::new(&[S::Committing], S::Committed);
    assert!(matches!(
        store
            .transition(&settled.transaction_id, 0, &settle, NOW + 1)
            .await,
        Ok(TransitionOutcome::Applied(_))
    ));
    let failed = ALL_TRANSACTION_STATUSES
        .iter()
        .position(|status| *status == S::Failed)
        .expect("failed is a status");
    let reopen = Transition::new(&[S::Failed], S::Prepared);
    let Ok(TransitionOutcome::Applied(reopened)) = store
        .transition(
            &TransactionId::trusted(format!("txn_{failed:02}")),
            0,
            &reopen,
            NOW + 1,
        )
        .await
    else {
        panic!("a failed record reopens");
    };
    expected.push(reopened);
    assert_eq!(store.recoverable().await.map(by_id), Ok(by_id(expected)));
}

/// Runs one plan claim per entry of `stores` (taken in turn) concurrently on one `planned`
/// record and checks that exactly one applied and every other one lost cleanly.
async fn race_plan_claims(stores: &[SharedStore], claims: usize) {
    let id = TransactionId::trusted("txn_race");
    let plan = planned("txn_race", "act_plan", "plan:race");
    insert_new(&stores[0], &plan).await;
    let tasks: Vec<_> = (0..claims)
        .map(|index| {
            let store = Arc::clone(&stores[index % stores.len()]);
            let id = id.clone();
            let claim = plan_claim(&format!("act_commit_{index}"));
            tokio::spawn(async move { store.transition(&id, 0, &claim, NOW + 1).await })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("claim task").expect("transition") {
            TransitionOutcome::Applied(record) => winners.push(record),
            TransitionOutcome::RevisionConflict(current)
            | TransitionOutcome::StateConflict(current) => {
                assert_eq!(current.status, TransactionProtocolStatus::Committing);
                assert_eq!(
                    current.revision, 1,
                    "a loser saw an unclaimed or re-claimed plan"
                );
            }
            TransitionOutcome::NotFound => panic!("the plan vanished"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim must apply");
    let winner = winners.remove(0);
    assert_eq!(winner.revision, 1);
    for store in stores {
        assert_eq!(store.transaction(&id).await, Ok(Some(winner.clone())));
        assert_eq!(
            store
                .transactions_by_action(&winner.action_id)
                .await
                .map(|records| records.len()),
            Ok(1)
        );
    }
}

/// 200 commits racing to claim one plan: one wins, the others see a conflict.
async fn check_two_hundred_concurrent_plan_claims(store: SharedStore) {
    race_plan_claims(&[store], 200).await;
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
    check_transaction_insert_if_absent,
    check_transaction_plan_id_is_unique,
    check_transaction_lookups,
    check_transition_applies_and_bumps_revision,
    check_stale_revision_is_a_revision_conflict,
    check_unexpected_status_is_a_state_conflict,
    check_transition_of_a_missing_record_is_not_found,
    check_transition_keeps_operation_and_cursor_but_overwrites_the_rest,
    check_transition_rebinds_the_action,
    check_recoverable_lists_exactly_the_recoverable_statuses,
    check_two_hundred_concurrent_plan_claims,
);

/// The plan-claim race across two stores (two connections) on one SQLite file: the file, not
/// a connection's lock, must decide the winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_plan_claims_race_across_two_stores_on_one_file() {
    let file = TempStoreFile::new("plan_claims_two_stores");
    let stores = [file.open(), file.open()];
    race_plan_claims(&stores, 200).await;
}
