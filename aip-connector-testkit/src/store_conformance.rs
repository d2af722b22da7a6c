//! The store conformance suite: what a [`Store`](aip_connector::store::Store) must do for the
//! host to keep its promises (one owner per idempotency key, fencing of an expired owner,
//! versioned approval updates, one resume per approval, one claim per plan, hash-chained
//! receipts, purges that delete only what expired), written once against [`SharedStore`].
//!
//! The SDK's own backends (memory, SQLite, PostgreSQL) pass every check; a store of your own
//! (another database, a cache in front of one) runs the same checks with
//! [`store_conformance_tests!`](crate::store_conformance_tests), one `#[test]` per check:
//!
//! ```
//! use std::sync::Arc;
//!
//! use aip_connector::store::{MemoryStore, SharedStore};
//!
//! // Stands in for your store's constructor: each check gets a fresh, empty store.
//! async fn fresh_store() -> SharedStore {
//!     Arc::new(MemoryStore::new())
//! }
//!
//! aip_connector_testkit::store_conformance_tests! {
//!     fresh_store = fresh_store().await,
//! }
//! # fn main() {}
//! ```
//!
//! A store that several host replicas share (its state lives in a server, not in the process)
//! should also pass the races *across* stores: name `replicas`, an expression giving several
//! independently connected stores on one fresh, shared state, and four more tests race
//! reservations, take-overs, plan claims and approval resumes across them.
//!
//! Every check takes a fresh, empty store. Times are explicit milliseconds, so expiry is
//! tested without sleeping. The checks panic with a message that says what the store did
//! wrong. To run them some other way (a test that skips without a database, a runtime of your
//! own), list them with [`for_each_store_check!`](crate::for_each_store_check) and
//! [`for_each_replica_check!`](crate::for_each_replica_check) and call each `check_*` function
//! yourself.

use std::sync::Arc;

use aip_connector::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId, TransactionId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision, ApprovalPolicy,
    ErrorCategory, IdempotencyKeyScope, Principal, PrincipalKind, ProtocolError,
    ProviderOperationRef, ReceiptKind, TransactionMode, TransactionPlan, TransactionProtocolStatus,
    TransactionReceipt,
};
use aip_connector::store::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, IdempotencyRecord, IdempotencyStore, Millis,
    PLAN_TTL_MS, Reservation, ReserveOutcome, ResumeClaim, SharedStore, StoreError,
    TransactionRecord, Transition, TransitionOutcome,
};
use serde_json::json;

/// An arbitrary "now" far from zero, so `now - x` never underflows in a check.
pub const NOW: Millis = 1_000_000;

/// The input hash every fixture action has unless a check says otherwise.
pub const HASH: &str = "hash-1";

/// A reservation for `key` whose fencing token is `token` and whose action is `act_<token>`.
pub fn reservation(key: &str, token: &str, expires_at_ms: Millis) -> Reservation {
    Reservation {
        key: key.to_owned(),
        reservation_id: token.to_owned(),
        action_id: ActionId::trusted(format!("act_{token}")),
        tenant_id: None,
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

/// Leaves a completed record under `key` that expired 1 ms after the epoch, as an earlier
/// process would have: for tests of purging.
pub async fn settle_expired_record(store: &dyn IdempotencyStore, key: &str) {
    let owner = reservation(key, "expired", 1);
    assert_eq!(store.reserve(&owner, 0).await, Ok(ReserveOutcome::Acquired));
    let record = record_for(&owner, ActionResultStatus::Completed, Some(1));
    assert_eq!(store.settle(&owner, record).await, Ok(()));
    assert!(store.record(key, 0).await.unwrap().is_some());
}

/// Leaves an approval `id` denied 1 ms after the epoch, as an earlier process would have: for
/// tests of retention.
pub async fn insert_closed_approval(store: &dyn ApprovalStore, id: &str) {
    let record = ApprovalRecord {
        status: ApprovalStatus::Denied,
        created_at_ms: 1,
        ..approval(id)
    };
    assert_eq!(store.insert_approval(&record).await, Ok(()));
}

/// A completed, never-expiring record settled by `owner`.
pub fn completed(owner: &Reservation) -> IdempotencyRecord {
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
        resumed_at_ms: None,
        resume_token: None,
        version: 7,
    }
}

/// An approving decision on `id`.
fn approve(id: &str) -> ApprovalDecision {
    ApprovalDecision {
        decided_at: time::OffsetDateTime::UNIX_EPOCH,
        policy_hash: Some("policy-hash".to_owned()),
        ..ApprovalDecision::approve(
            ApprovalId::trusted(id),
            Principal::new("user:bob", PrincipalKind::Human),
        )
        .with_reason("fine")
        .with_decision_id("dec-1")
    }
}

/// `record` as the store reads it back at `version`, resumed by `claim` if any.
fn stored(record: &ApprovalRecord, version: u64, claim: Option<&ResumeClaim>) -> ApprovalRecord {
    ApprovalRecord {
        version,
        resumed: claim.is_some(),
        resumed_at_ms: claim.map(|claim| claim.at_ms),
        resume_token: claim.map(|claim| claim.token.clone()),
        ..record.clone()
    }
}

/// Runs `count` concurrent `reserve` calls on `key` at `now`, tokens `<prefix><i>`, spread
/// over `stores` in turn; returns each caller's token and outcome.
pub async fn reserve_concurrently(
    stores: &[SharedStore],
    key: &str,
    prefix: &str,
    count: usize,
    now: Millis,
) -> Vec<(String, ReserveOutcome)> {
    let tasks: Vec<_> = (0..count)
        .map(|index| {
            let store = Arc::clone(&stores[index % stores.len()]);
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
pub fn assert_single_winner(outcomes: &[(String, ReserveOutcome)]) {
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

/// Reserves `owner`'s key at `NOW`, which must be free, and settles it with `record`.
async fn reserve_and_settle(store: &SharedStore, owner: &Reservation, record: &IdempotencyRecord) {
    assert_eq!(
        store.reserve(owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(store.settle(owner, record.clone()).await, Ok(()));
}

/// A free key is claimed by the first caller.
pub async fn check_reserve_on_a_free_key_acquires(store: SharedStore) {
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
pub async fn check_second_reserve_while_live_is_in_progress(store: SharedStore) {
    // The holder comes back whole, its tenant included (the host names the holder's action
    // only to a duplicate of the same tenant).
    let owner = Reservation {
        tenant_id: Some("tenant-1".to_owned()),
        ..reservation("k", "a", NOW + 100)
    };
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

/// `reservation` reads the live owner of a key, with its renewed expiry, and nothing else: not a
/// free key, not an expired reservation, not a settled record.
pub async fn check_reservation_reads_only_the_live_owner(store: SharedStore) {
    assert_eq!(store.reservation("k", NOW).await, Ok(None));
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(store.reservation("k", NOW).await, Ok(Some(owner.clone())));
    assert_eq!(store.reservation("other", NOW).await, Ok(None));
    // Expiry is exclusive, as for `reserve`.
    assert_eq!(store.reservation("k", NOW + 100).await, Ok(None));

    assert_eq!(store.renew(&owner, NOW + 500).await, Ok(true));
    let renewed = Reservation {
        expires_at_ms: NOW + 500,
        ..owner.clone()
    };
    assert_eq!(store.reservation("k", NOW + 100).await, Ok(Some(renewed)));

    store.settle(&owner, completed(&owner)).await.unwrap();
    assert_eq!(store.reservation("k", NOW + 100).await, Ok(None));
    assert!(store.record("k", NOW + 100).await.unwrap().is_some());
}

/// A crashed owner's expired reservation is taken over, and the old owner is fenced out.
pub async fn check_expired_reservation_is_taken_over_and_old_owner_is_fenced(store: SharedStore) {
    let old = reservation("k", "old", NOW + 100);
    let new = reservation("k", "new", NOW + 10_000);
    assert_eq!(store.reserve(&old, NOW).await, Ok(ReserveOutcome::Acquired));
    // Expiry is exclusive: at `expires_at_ms` the reservation is no longer live.
    assert_eq!(
        store.reserve(&new, NOW + 100).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        store.settle(&old, completed(&old)).await,
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
    assert_eq!(store.settle(&new, completed(&new)).await, Ok(()));
    assert_eq!(
        store.record("k", NOW + 200).await,
        Ok(Some(completed(&new)))
    );
}

/// An expired reservation that nobody took over still belongs to its owner, however many keys
/// are reserved meanwhile (the memory store sweeps expired entries when its table would grow):
/// a slow handler finishing after its deadline settles its result rather than losing it.
pub async fn check_expired_reservation_not_taken_over_is_settled_by_its_owner(store: SharedStore) {
    let slow = reservation("slow", "slow-owner", NOW + 100);
    assert_eq!(
        store.reserve(&slow, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    for n in 0..2_000 {
        let other = reservation(&format!("other-{n}"), "other", NOW + 10_000);
        assert_eq!(
            store.reserve(&other, NOW + 500).await,
            Ok(ReserveOutcome::Acquired)
        );
    }
    assert_eq!(store.settle(&slow, completed(&slow)).await, Ok(()));
    assert_eq!(
        store.record("slow", NOW + 500).await,
        Ok(Some(completed(&slow)))
    );
}

/// Release frees the key for its owner only; anyone else's release is a no-op.
pub async fn check_release_frees_the_key_for_its_owner_only(store: SharedStore) {
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

/// `forget_record` deletes a settled record only while it is still the record read, live or
/// expired: never a reservation (even its own action's), never another record, and never the
/// entry of a claim made after the record went, even a resend's of the same action.
pub async fn check_forget_record_deletes_only_the_record_read(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let failed = record_for(&owner, ActionResultStatus::Failed, Some(NOW + 500));
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "nothing under the key"
    );
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "a reservation is not a settled record"
    );
    assert_eq!(store.reservation("k", NOW).await, Ok(Some(owner.clone())));
    assert_eq!(store.settle(&owner, failed.clone()).await, Ok(()));

    // Any other record deletes nothing: another action's, or another settlement of this one.
    let others = IdempotencyRecord {
        action_id: ActionId::trusted("act_other"),
        ..failed.clone()
    };
    assert_eq!(store.forget_record(&others).await, Ok(false));
    let later = IdempotencyRecord {
        created_at_ms: NOW + 1,
        ..failed.clone()
    };
    assert_eq!(store.forget_record(&later).await, Ok(false));
    assert_eq!(store.record("k", NOW).await, Ok(Some(failed.clone())));

    // The record read deletes it, once; the key is free again.
    assert_eq!(store.forget_record(&failed).await, Ok(true));
    assert_eq!(store.record("k", NOW).await, Ok(None));
    assert_eq!(store.forget_record(&failed).await, Ok(false));
    let next = reservation("k", "b", NOW + 100);
    assert_eq!(
        store.reserve(&next, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );

    // The earlier action's late forget leaves the new claim, and then its record, alone.
    assert_eq!(store.forget_record(&failed).await, Ok(false));
    assert_eq!(store.reservation("k", NOW).await, Ok(Some(next.clone())));
    let kept = completed(&next);
    assert_eq!(store.settle(&next, kept.clone()).await, Ok(()));
    assert_eq!(store.forget_record(&failed).await, Ok(false));
    assert_eq!(store.record("k", NOW).await, Ok(Some(kept.clone())));

    // A resend of the same action that claimed the key once the record read expired, and
    // settled a record of its own, keeps it: the late forget of the first record deletes
    // nothing (the action id alone could not tell them apart).
    let first = reservation("again", "first", NOW + 100);
    let first_record = record_for(&first, ActionResultStatus::Failed, Some(NOW + 10));
    reserve_and_settle(&store, &first, &first_record).await;
    let resend = Reservation {
        reservation_id: "resend".to_owned(),
        expires_at_ms: NOW + 200,
        ..first.clone()
    };
    assert_eq!(
        store.reserve(&resend, NOW + 20).await,
        Ok(ReserveOutcome::Acquired)
    );
    let resend_record = IdempotencyRecord {
        created_at_ms: NOW + 20,
        expires_at_ms: None,
        ..completed(&resend)
    };
    assert_eq!(store.settle(&resend, resend_record.clone()).await, Ok(()));
    assert_eq!(store.forget_record(&first_record).await, Ok(false));
    assert_eq!(
        store.record("again", NOW + 20).await,
        Ok(Some(resend_record))
    );

    // An expired record goes too (nothing is left for a purge), and other keys are untouched.
    settle_expired_record(store.as_ref(), "expired").await;
    let expired = store
        .record("expired", 0)
        .await
        .unwrap()
        .expect("settled above");
    assert_eq!(store.forget_record(&expired).await, Ok(true));
    assert_eq!(store.purge_expired(NOW, 10).await.map(|p| p.records), Ok(0));
    assert_eq!(store.record("k", NOW).await, Ok(Some(kept.clone())));
    // A key nothing can store (a NUL) holds nothing to forget.
    let unstorable = IdempotencyRecord {
        key: "k\0".to_owned(),
        ..kept
    };
    assert_eq!(store.forget_record(&unstorable).await, Ok(false));

    // A record that holds a NUL character anywhere (a failure quoting an input) is forgotten
    // like any other (PostgreSQL refused to read such a body's fields in SQL).
    let quoting = reservation("nul", "n", NOW + 100);
    assert_eq!(
        store.reserve(&quoting, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let mut with_nul = completed(&quoting);
    with_nul.result.output = Some(json!({ "quoted": "a\u{0}b" }));
    assert_eq!(store.settle(&quoting, with_nul.clone()).await, Ok(()));
    assert_eq!(store.record("nul", NOW).await, Ok(Some(with_nul.clone())));
    assert_eq!(store.forget_record(&with_nul).await, Ok(true));
    assert_eq!(store.record("nul", NOW).await, Ok(None));
}

/// Racing forgets of one record: exactly one of them deletes it.
pub async fn check_concurrent_forgets_delete_the_record_once(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = record_for(&owner, ActionResultStatus::Failed, None);
    reserve_and_settle(&store, &owner, &record).await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = Arc::clone(&store);
            let record = record.clone();
            tokio::spawn(async move { store.forget_record(&record).await })
        })
        .collect();
    let mut deleted = 0;
    for task in tasks {
        if task.await.expect("a forget task panicked") == Ok(true) {
            deleted += 1;
        }
    }
    assert_eq!(deleted, 1, "exactly one forget deletes the record");
    assert_eq!(store.record("k", NOW).await, Ok(None));
}

/// Once settled, every later reserve gets the stored record back.
pub async fn check_settled_record_is_replayed(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = completed(&owner);
    reserve_and_settle(&store, &owner, &record).await;
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

/// A record is stored under its reservation's key: one naming another key is found under the
/// reservation's key, names that key when read back, and leaves the key it named free.
pub async fn check_settle_stores_the_record_under_the_reservation_key(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let mut record = completed(&owner);
    record.key = "other".to_owned();
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(store.settle(&owner, record.clone()).await, Ok(()));
    let stored = IdempotencyRecord {
        key: "k".to_owned(),
        ..record
    };
    assert_eq!(store.record("k", NOW).await, Ok(Some(stored.clone())));
    assert_eq!(
        store.reserve(&reservation("k", "b", NOW + 100), NOW).await,
        Ok(ReserveOutcome::Settled(stored))
    );
    assert_eq!(store.record("other", NOW).await, Ok(None));
    assert_eq!(
        store
            .reserve(&reservation("other", "c", NOW + 100), NOW)
            .await,
        Ok(ReserveOutcome::Acquired)
    );
}

/// Settling needs the live token: no reservation, or a second settle, is fenced.
pub async fn check_settle_without_the_live_token_is_fenced(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.settle(&owner, completed(&owner)).await,
        Err(StoreError::Fenced)
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(None),
        "a fenced settle stores nothing"
    );
    let first = completed(&owner);
    reserve_and_settle(&store, &owner, &first).await;
    let second = record_for(&owner, ActionResultStatus::Failed, None);
    assert_eq!(
        store.settle(&owner, second.clone()).await,
        Err(StoreError::Fenced)
    );
    assert_eq!(store.record("k", NOW).await, Ok(Some(first)));
}

/// An expired record reads as absent, and its key can be claimed again.
pub async fn check_expired_record_is_ignored_and_reservable(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = record_for(&owner, ActionResultStatus::Completed, Some(NOW + 500));
    reserve_and_settle(&store, &owner, &record).await;
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
    assert_eq!(store.settle(&late, fresh.clone()).await, Ok(()));
    assert_eq!(store.record("k", NOW + 500).await, Ok(Some(fresh)));
}

/// A record without an expiry is replayed forever.
pub async fn check_record_without_expiry_never_expires(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = completed(&owner);
    reserve_and_settle(&store, &owner, &record).await;
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

/// A purge deletes expired records and attempt counts, at most `max_entries` of each per pass,
/// and leaves live records, records without an expiry, counts without one and reservations
/// (even expired ones) alone.
pub async fn check_purge_deletes_only_expired_records_and_counts(store: SharedStore) {
    let mut settled = Vec::new();
    for (key, expires_at_ms) in [
        ("a", Some(NOW + 100)),
        ("b", Some(NOW + 200)),
        ("c", None),
        ("d", Some(NOW + 100)),
    ] {
        let owner = reservation(key, key, NOW + 50);
        let record = record_for(&owner, ActionResultStatus::Completed, expires_at_ms);
        reserve_and_settle(&store, &owner, &record).await;
        settled.push(record);
    }
    let running = reservation("r", "r", NOW + 50);
    assert_eq!(
        store.reserve(&running, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    for (key, expires_at_ms) in [
        ("x", Some(NOW + 100)),
        ("y", None),
        ("z", Some(NOW + 1_000)),
    ] {
        assert_eq!(store.count_attempt(key, expires_at_ms, NOW).await, Ok(1));
    }

    // One of each per pass, then the rest; a third pass finds nothing.
    let first = store.purge_expired(NOW + 150, 1).await.unwrap();
    assert_eq!((first.records, first.attempt_counts), (1, 1));
    assert!(first.reached(1));
    let second = store.purge_expired(NOW + 150, 10).await.unwrap();
    assert_eq!((second.records, second.attempt_counts), (1, 0));
    assert!(!second.reached(10));
    assert_eq!(
        store.purge_expired(NOW + 150, 10).await,
        Ok(aip_connector::store::Purged::default())
    );

    // Deleted, not merely expired: read at a time when they were still live, they are gone.
    assert_eq!(store.record("a", NOW).await, Ok(None));
    assert_eq!(store.record("d", NOW).await, Ok(None));
    assert_eq!(store.record("b", NOW).await, Ok(Some(settled[1].clone())));
    assert_eq!(
        store.record("c", Millis::MAX).await,
        Ok(Some(settled[2].clone()))
    );
    assert_eq!(store.count_attempt("x", Some(NOW + 100), NOW).await, Ok(1));
    assert_eq!(store.count_attempt("y", None, NOW).await, Ok(2));
    assert_eq!(
        store.count_attempt("z", Some(NOW + 1_000), NOW).await,
        Ok(2)
    );
    // The expired reservation is still its owner's to settle.
    assert_eq!(store.settle(&running, completed(&running)).await, Ok(()));
}

/// Retry attempts count up per key, independently per key, restart after their expiry, and
/// never lose an increment when callers race.
pub async fn check_retry_attempts_count_per_key_and_restart_after_expiry(store: SharedStore) {
    assert_eq!(store.count_attempt("k", Some(NOW + 100), NOW).await, Ok(1));
    assert_eq!(
        store.count_attempt("k", Some(NOW + 100), NOW + 1).await,
        Ok(2)
    );
    assert_eq!(store.count_attempt("other", None, NOW).await, Ok(1));
    assert_eq!(
        store.count_attempt("k", Some(NOW + 300), NOW + 2).await,
        Ok(3)
    );
    // Past the stored expiry the count starts again.
    assert_eq!(
        store.count_attempt("k", Some(NOW + 900), NOW + 300).await,
        Ok(1)
    );
    // A count without expiry never restarts.
    assert_eq!(
        store.count_attempt("other", None, Millis::MAX - 1).await,
        Ok(2)
    );

    let racers: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.count_attempt("raced", None, NOW).await.unwrap() })
        })
        .collect();
    let mut counts = Vec::new();
    for racer in racers {
        counts.push(racer.await.unwrap());
    }
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=50).collect::<Vec<u32>>(),
        "every racer got its own count"
    );
}

/// Only the approved resume of the gated action itself replaces a pending-approval record.
pub async fn check_resume_pending_replaces_only_a_matching_pending_record(store: SharedStore) {
    for (key, gate) in [
        ("k-pending", ActionResultStatus::PendingApproval),
        ("k-human", ActionResultStatus::RequiresHuman),
    ] {
        let owner = reservation(key, "gate", NOW + 100);
        let pending = record_for(&owner, gate, None);
        reserve_and_settle(&store, &owner, &pending).await;
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
                tenant_id: None,
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
        assert_eq!(store.settle(&resume, done.clone()).await, Ok(()));
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
pub async fn check_resume_pending_never_replaces_a_final_record(store: SharedStore) {
    for (key, status) in [
        ("k-done", ActionResultStatus::Completed),
        ("k-failed", ActionResultStatus::Failed),
    ] {
        let owner = reservation(key, "a", NOW + 100);
        let record = record_for(&owner, status, None);
        reserve_and_settle(&store, &owner, &record).await;
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
pub async fn check_renew_works_only_for_the_live_token(store: SharedStore) {
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
    assert_eq!(store.settle(&b, completed(&b)).await, Ok(()));
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

/// A replayed result is the stored one to the byte: object keys keep their order.
pub async fn check_replayed_results_keep_their_key_order(store: SharedStore) {
    const OUTPUT: &str = r#"{"zeta":1,"alpha":{"y":2,"b":[3,{"d":4,"c":5.25}]},"mid":null}"#;
    let owner = reservation("k", "a", NOW + 100);
    let mut record = completed(&owner);
    record.result.output = Some(serde_json::from_str(OUTPUT).expect("fixture output"));
    reserve_and_settle(&store, &owner, &record).await;
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

/// `release_resume` gives a claimed resume back (bumping the version, so a writer holding the
/// claimed version loses), only the claim holding the token it names, even beside a claim made
/// in the same millisecond, and changes nothing on a record that is not approved and resumed.
pub async fn check_release_resume_gives_back_only_a_claimed_resume(store: SharedStore) {
    let id = ApprovalId::trusted("appr_release");
    let first = ResumeClaim::new(NOW);
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "no such record"
    );
    let request = approval("appr_release");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "pending"
    );
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(store.update_approval(&approved, 0).await, Ok(true));
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "not resumed"
    );
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 1, None)))
    );

    assert_eq!(store.claim_resume(&id, &first).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 2, Some(&first)))),
        "the claim's time and token are kept"
    );
    assert_eq!(
        store.release_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "another claim's token, at the same time"
    );
    assert_eq!(store.release_resume(&id, &first).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 3, None)))
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "given back once"
    );
    assert_eq!(
        store.update_approval(&approved, 2).await,
        Ok(false),
        "the claimed version is stale"
    );
    // A later claim, in the same millisecond, survives the first claim's release written again
    // (a dropped call's write finished on a task of its own after the first landed, or the
    // give-back of a claim whose answer was lost).
    let second = ResumeClaim::new(NOW);
    assert_eq!(
        store.claim_resume(&id, &second).await,
        Ok(true),
        "the resume can be claimed again"
    );
    assert_eq!(store.release_resume(&id, &first).await, Ok(false));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 4, Some(&second)))),
        "the later claim stands"
    );
    // An update keeps the claim (a decision recorded after the resume).
    assert_eq!(store.update_approval(&approved, 4).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 5, Some(&second))))
    );
    assert_eq!(store.release_resume(&id, &second).await, Ok(true));

    let denied = ApprovalRecord {
        status: ApprovalStatus::Denied,
        resumed: true,
        resumed_at_ms: Some(NOW),
        resume_token: Some(first.token.clone()),
        ..approval("appr_release_denied")
    };
    assert_eq!(store.insert_approval(&denied).await, Ok(()));
    assert_eq!(
        store.approval(&denied.approval_id).await,
        Ok(Some(ApprovalRecord {
            version: 0,
            ..denied.clone()
        })),
        "an inserted claim's time and token are read back"
    );
    assert_eq!(
        store.release_resume(&denied.approval_id, &first).await,
        Ok(false),
        "only an approved record is given back"
    );
}

/// Retention of approvals: `purge_closed_approvals` deletes exactly the records that are closed
/// at `now` and were created before the cutoff (and, once resumed, resumed before it), at most
/// `max_entries` per call; a record closed by a later update goes with the next purge. The
/// records are judged by `ApprovalRecord::is_purgeable` too, so the SQL and Rust rules agree.
pub async fn check_purge_closed_approvals_deletes_only_closed_records_created_before_the_cutoff(
    store: SharedStore,
) {
    let old = |id: &str, status: ApprovalStatus, expires_at_ms: Option<Millis>| ApprovalRecord {
        status,
        created_at_ms: NOW - 10,
        expires_at_ms,
        ..approval(id)
    };
    let ttl = Some(NOW + 60_000);
    let kept = [
        old("appr_open", ApprovalStatus::Pending, ttl),
        old("appr_no_ttl", ApprovalStatus::Pending, None),
        old("appr_approved", ApprovalStatus::Approved, ttl),
        ApprovalRecord {
            created_at_ms: NOW,
            ..old("appr_young", ApprovalStatus::Denied, ttl)
        },
    ];
    let closed = [
        old("appr_ttl_passed", ApprovalStatus::Pending, Some(NOW)),
        old("appr_resumed", ApprovalStatus::Approved, ttl),
        old("appr_denied", ApprovalStatus::Denied, ttl),
        old("appr_expired", ApprovalStatus::Expired, ttl),
        old("appr_revoked", ApprovalStatus::Revoked, None),
    ];
    // Approved long ago, resumed just now: its resume may still be running.
    let resumed_late = old("appr_resumed_late", ApprovalStatus::Approved, ttl);
    for record in kept.iter().chain(&closed).chain([&resumed_late]) {
        assert_eq!(store.insert_approval(record).await, Ok(()));
    }
    assert_eq!(
        store
            .claim_resume(&closed[1].approval_id, &ResumeClaim::new(NOW - 5))
            .await,
        Ok(true),
        "resumed through the store, as the host does"
    );
    assert_eq!(
        store
            .claim_resume(&resumed_late.approval_id, &ResumeClaim::new(NOW))
            .await,
        Ok(true)
    );
    for record in kept.iter().chain(&closed).chain([&resumed_late]) {
        let read = store.approval(&record.approval_id).await.unwrap().unwrap();
        assert_eq!(
            read.is_purgeable(NOW, NOW),
            closed.contains(record),
            "{:?}: the Rust rule",
            record.approval_id
        );
    }
    assert_eq!(
        store.purge_closed_approvals(NOW - 10, NOW, 100).await,
        Ok(0),
        "nothing was created before the cutoff"
    );
    assert_eq!(store.purge_closed_approvals(NOW, NOW, 2).await, Ok(2));
    assert_eq!(store.purge_closed_approvals(NOW, NOW, 2).await, Ok(2));
    assert_eq!(store.purge_closed_approvals(NOW, NOW, 2).await, Ok(1));
    assert_eq!(store.purge_closed_approvals(NOW, NOW, 2).await, Ok(0));
    for record in &closed {
        assert_eq!(
            store.approval(&record.approval_id).await,
            Ok(None),
            "{:?} is closed and old",
            record.approval_id
        );
    }
    for record in &kept {
        assert_eq!(
            store.approval(&record.approval_id).await,
            Ok(Some(stored(record, 0, None))),
            "{:?} is open or young",
            record.approval_id
        );
    }

    // A decision closes the open request: the next purge takes it.
    let denied = ApprovalRecord {
        status: ApprovalStatus::Denied,
        ..kept[0].clone()
    };
    assert_eq!(store.update_approval(&denied, 0).await, Ok(true));
    assert_eq!(store.purge_closed_approvals(NOW, NOW, 100).await, Ok(1));
    assert_eq!(store.approval(&denied.approval_id).await, Ok(None));

    // The late resume is kept until the cutoff passes its resume (with the young denial).
    let read = store.approval(&resumed_late.approval_id).await.unwrap();
    assert_eq!(read.map(|r| r.resumed_at_ms), Some(Some(NOW)));
    assert_eq!(store.purge_closed_approvals(NOW + 1, NOW, 100).await, Ok(2));
    assert_eq!(store.approval(&resumed_late.approval_id).await, Ok(None));
}

/// Approvals: insert at version 0, read back, compare-and-set updates.
pub async fn check_approval_insert_get_and_versioned_update(store: SharedStore) {
    let id = ApprovalId::trusted("appr_cas");
    assert_eq!(store.approval(&id).await, Ok(None));
    let request = approval("appr_cas");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&request, 0, None)))
    );

    let mut voted = request.clone();
    voted.decisions.push(approve("appr_cas"));
    voted.status = ApprovalStatus::Approved;
    assert_eq!(store.update_approval(&voted, 0).await, Ok(true));
    assert_eq!(store.approval(&id).await, Ok(Some(stored(&voted, 1, None))));

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
    assert_eq!(store.approval(&id).await, Ok(Some(stored(&voted, 1, None))));
    assert_eq!(store.update_approval(&stale, 1).await, Ok(true));
    assert_eq!(store.approval(&id).await, Ok(Some(stored(&stale, 2, None))));

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
pub async fn check_duplicate_approval_insert_fails(store: SharedStore) {
    let request = approval("appr_dup");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    let impostor = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert!(store.insert_approval(&impostor).await.is_err());
    assert_eq!(
        store.approval(&request.approval_id).await,
        Ok(Some(stored(&request, 0, None)))
    );
}

/// Duplicate inserts fail without quoting the record or its id.
pub async fn check_store_errors_quote_no_record_contents(store: SharedStore) {
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
pub async fn check_every_approval_status_is_storable(store: SharedStore) {
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
            Ok(Some(stored(&request, 0, None)))
        );
    }
}

/// An approved action is resumed exactly once, and the claim fences stale writers.
pub async fn check_claim_resume_succeeds_once_and_only_when_approved(store: SharedStore) {
    let id = ApprovalId::trusted("appr_resume");
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "no such record"
    );
    let request = approval("appr_resume");
    assert_eq!(store.insert_approval(&request).await, Ok(()));
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "still pending"
    );

    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(store.update_approval(&approved, 0).await, Ok(true));
    let claim = ResumeClaim::new(NOW);
    assert_eq!(store.claim_resume(&id, &claim).await, Ok(true));
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "a resume is claimed once"
    );
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 2, Some(&claim))))
    );

    // A writer that read the record before the claim must lose…
    assert_eq!(store.update_approval(&approved, 1).await, Ok(false));
    // …and a current writer cannot re-arm the resume by writing `resumed: false`.
    let rewritten = ApprovalRecord {
        resumed: false,
        resumed_at_ms: None,
        resume_token: Some("another claim's token".to_owned()),
        ..approved.clone()
    };
    assert_eq!(store.update_approval(&rewritten, 2).await, Ok(true));
    assert_eq!(
        store.approval(&id).await,
        Ok(Some(stored(&approved, 3, Some(&claim))))
    );
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false)
    );

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
            store
                .claim_resume(&other.approval_id, &ResumeClaim::new(NOW))
                .await,
            Ok(false),
            "{status:?}"
        );
    }
}

/// Reserves `key` on the first of `stores` until `NOW + 100`, as an owner that then crashes;
/// `count` callers spread over `stores` race to take the expired reservation over at
/// `NOW + 100`: exactly one does, and the crashed owner is fenced out (checked on the last
/// store).
pub async fn race_take_over(stores: &[SharedStore], key: &str, count: usize) {
    let crashed = reservation(key, "crashed", NOW + 100);
    assert_eq!(
        stores[0].reserve(&crashed, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let outcomes = reserve_concurrently(stores, key, "t", count, NOW + 100).await;
    assert_single_winner(&outcomes);
    assert_eq!(
        stores[stores.len() - 1]
            .settle(&crashed, completed(&crashed))
            .await,
        Err(StoreError::Fenced)
    );
}

/// 1,000 racing duplicates: one owner, everyone else told who it is.
pub async fn check_thousand_concurrent_reserves_on_one_key(store: SharedStore) {
    let outcomes = reserve_concurrently(&[store], "hot-key", "r", 1_000, NOW).await;
    assert_single_winner(&outcomes);
}

/// Many callers racing for an expired reservation: one takes it over.
pub async fn check_concurrent_take_over_has_one_winner(store: SharedStore) {
    race_take_over(&[store], "k", 100).await;
}

/// Claims, settlements and releases on one key never touch another key.
pub async fn check_different_keys_never_interfere(store: SharedStore) {
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
    assert_eq!(
        store.settle(&owner(&keys[0]), settled.clone()).await,
        Ok(())
    );
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

/// Inserts and approves one request on the first of `stores`, then races `claims` resumers
/// spread over `stores`: exactly one wins, and every store reads the claimed record.
pub async fn race_claim_resume(stores: &[SharedStore], claims: usize) {
    let request = approval("appr_race");
    assert_eq!(stores[0].insert_approval(&request).await, Ok(()));
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(stores[0].update_approval(&approved, 0).await, Ok(true));
    let tasks: Vec<_> = (0..claims)
        .map(|index| {
            let store = Arc::clone(&stores[index % stores.len()]);
            let id = request.approval_id.clone();
            tokio::spawn(async move {
                let claim = ResumeClaim::new(NOW);
                let claimed = store.claim_resume(&id, &claim).await;
                (claim, claimed)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (claim, claimed) = task.await.expect("task");
        if claimed.expect("claim_resume") {
            winners.push(claim);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins");
    for store in stores {
        assert_eq!(
            store.approval(&request.approval_id).await,
            Ok(Some(stored(&approved, 2, winners.first()))),
            "the winner's claim is the one kept"
        );
    }
}

/// 100 racing resumers of one approved request: exactly one wins.
pub async fn check_hundred_concurrent_claim_resume(store: SharedStore) {
    race_claim_resume(&[store], 100).await;
}

// ---- transactions ------------------------------------------------------------------------------

/// A transaction record `id` owned by `action` in `status`, with no plan, an empty receipt
/// chain and a non-zero revision the store must reset.
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
        checkpoint_cursor: None,
        reconcile_after_ms: None,
        error: None,
        revision: 9,
        created_at_ms: NOW,
        updated_at_ms: NOW,
        receipts: Vec::new(),
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

/// A transition from `expected` to `to` that writes every field a transition can write: a
/// failed result of `act_a`, operation `op-1`, cursor `cursor-1`, checkpoint cursor `cp-1`, a reconcile time of
/// `NOW + 5_000` and the temporary error `error_code`.
fn writing_every_field(
    expected: &[TransactionProtocolStatus],
    to: TransactionProtocolStatus,
    error_code: &str,
) -> Transition {
    Transition {
        result: Some(ActionResult::new(
            ActionId::trusted("act_a"),
            ActionResultStatus::Failed,
        )),
        provider_operation: Some(operation("op-1")),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        checkpoint_cursor: Some("cp-1".to_owned()),
        reconcile_after_ms: Some(NOW + 5_000),
        error: Some(temporary(error_code)),
        ..Transition::new(expected, to)
    }
}

/// `records` in transaction-id byte order, the order every list comes back in.
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

/// Retention of transactions: `purge_finished_transactions` deletes exactly the records that
/// finished before the cutoff (`TransactionRecord::finished_at_ms`: finished records by their
/// last update, plans nobody committed by their expiry), at most `max_entries` per call; a
/// record that finishes or reopens through a transition is judged by its new status and time,
/// and a purged plan's id is free again.
pub async fn check_purge_finished_transactions_deletes_only_finished_records_past_the_cutoff(
    store: SharedStore,
) {
    use TransactionProtocolStatus as S;
    let mut finished = Vec::new();
    let mut kept = Vec::new();
    for (index, status) in TransactionProtocolStatus::ALL.into_iter().enumerate() {
        let record = TransactionRecord {
            updated_at_ms: NOW - 10,
            ..transaction(&format!("txn_{index:02}"), "act_a", status)
        };
        insert_new(&store, &record).await;
        if record.is_finished() {
            finished.push(record);
        } else {
            kept.push(inserted(&record));
        }
    }
    assert_eq!(finished.len(), 7, "the finished statuses");
    // Made at `NOW`, the plan of the loop above expires after the cutoff: kept.
    // Finished, but at the cutoff itself: kept.
    let young = TransactionRecord {
        updated_at_ms: NOW,
        ..transaction("txn_young", "act_a", S::Committed)
    };
    insert_new(&store, &young).await;
    kept.push(inserted(&young));
    // A plan nobody committed, expired before the cutoff: purged with its input. One that
    // expires at the cutoff itself is kept.
    let expired = TransactionRecord {
        created_at_ms: NOW - PLAN_TTL_MS - 1,
        updated_at_ms: NOW - PLAN_TTL_MS - 1,
        ..planned("txn_plan_expired", "act_e", "plan:expired")
    };
    insert_new(&store, &expired).await;
    finished.push(expired);
    let expiring = TransactionRecord {
        created_at_ms: NOW - PLAN_TTL_MS,
        updated_at_ms: NOW - PLAN_TTL_MS,
        ..planned("txn_plan_expiring", "act_e", "plan:expiring")
    };
    insert_new(&store, &expiring).await;
    kept.push(inserted(&expiring));
    // A plan committed before the cutoff finishes through the transition.
    let plan = planned("txn_plan", "act_p", "plan:retention");
    insert_new(&store, &plan).await;
    let committed = Transition::new(&[S::Planned], S::Committed);
    assert!(matches!(
        store
            .transition(&plan.transaction_id, 0, &committed, NOW - 5)
            .await,
        Ok(TransitionOutcome::Applied(_))
    ));
    // A failed record reopened before the cutoff is no longer finished.
    let reopened = TransactionRecord {
        updated_at_ms: NOW - 10,
        ..transaction("txn_reopened", "act_a", S::Failed)
    };
    insert_new(&store, &reopened).await;
    let reopen = Transition::new(&[S::Failed], S::Prepared);
    let Ok(TransitionOutcome::Applied(reopened)) = store
        .transition(&reopened.transaction_id, 0, &reopen, NOW - 5)
        .await
    else {
        panic!("the failed record reopens");
    };
    kept.push(reopened);

    assert_eq!(
        store.purge_finished_transactions(NOW - 10, 100).await,
        Ok(0)
    );
    let mut purged = 0;
    loop {
        let pass = store
            .purge_finished_transactions(NOW, 3)
            .await
            .expect("purge");
        assert!(pass <= 3, "at most max_entries per call");
        purged += pass;
        if pass == 0 {
            break;
        }
    }
    assert_eq!(
        purged,
        finished.len() + 1,
        "the finished records, the expired plan and the committed one"
    );
    for record in &finished {
        assert_eq!(store.transaction(&record.transaction_id).await, Ok(None));
    }
    assert_eq!(store.transaction(&plan.transaction_id).await, Ok(None));
    assert_eq!(store.transaction_by_plan("plan:retention").await, Ok(None));
    for record in &kept {
        assert_eq!(
            store.transaction(&record.transaction_id).await,
            Ok(Some(record.clone())),
            "{:?} is not finished, or finished at the cutoff",
            record.transaction_id
        );
    }
    insert_new(
        &store,
        &planned("txn_plan_again", "act_q", "plan:retention"),
    )
    .await;
}

/// Insert is insert-if-absent: a second record with the same id is refused and changes nothing.
pub async fn check_transaction_insert_if_absent(store: SharedStore) {
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
pub async fn check_transaction_plan_id_is_unique(store: SharedStore) {
    let plan = planned("txn_plan", "act_plan", "plan:s3cr3t");
    insert_new(&store, &plan).await;
    for other in [
        naming_plan("txn_other", "act_commit", "plan:s3cr3t"),
        planned("txn_other", "act_plan_2", "plan:s3cr3t"),
    ] {
        let error = store.insert_transaction(&other).await.unwrap_err();
        assert_eq!(error, StoreError::PlanIdTaken);
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

/// Lookups by id, by plan id (from the plan or from the transaction block) and by action. A
/// list comes in byte order of the transaction ids, whatever the insert order: every backend
/// sorts it so (PostgreSQL with a `C` collation rather than the server's locale).
pub async fn check_transaction_lookups(store: SharedStore) {
    let from_plan = planned("txn_1", "act_a", "plan:one");
    let from_block = naming_plan("txn_B", "act_a", "plan:two");
    // After `txn_B` bytewise, but before it in most locales' collations.
    let lowercase = transaction("txn_a", "act_a", TransactionProtocolStatus::Prepared);
    let planless = transaction("txn_3", "act_b", TransactionProtocolStatus::Prepared);
    for record in [&lowercase, &planless, &from_block, &from_plan] {
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
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_a"))
            .await,
        Ok(vec![
            inserted(&from_plan),
            inserted(&from_block),
            inserted(&lowercase)
        ])
    );
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

/// A lookup by a key or id holding a NUL character finds nothing, on every backend: no such
/// row can exist (PostgreSQL's `text` cannot hold one), and a failure would read as a
/// retryable storage error that a caller retries for ever.
pub async fn check_lookups_by_a_selector_with_nul_find_nothing(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    store.reserve(&owner, NOW).await.unwrap();
    store.settle(&owner, completed(&owner)).await.unwrap();
    insert_closed_approval(store.as_ref(), "appr_1").await;
    insert_new(&store, &planned("txn_1", "act_a", "plan:one")).await;

    assert_eq!(store.record("k\0", NOW).await, Ok(None));
    assert_eq!(store.reservation("k\0", NOW).await, Ok(None));
    let nul_approval = ApprovalId::trusted("appr_1\0");
    assert_eq!(store.approval(&nul_approval).await, Ok(None));
    let claim = ResumeClaim::new(NOW);
    assert_eq!(store.claim_resume(&nul_approval, &claim).await, Ok(false));
    assert_eq!(store.release_resume(&nul_approval, &claim).await, Ok(false));
    assert_eq!(
        store.update_approval(&approval("appr_1\0"), 0).await,
        Ok(false)
    );
    let nul_transaction = TransactionId::trusted("txn_1\0");
    assert_eq!(store.transaction(&nul_transaction).await, Ok(None));
    assert_eq!(store.transaction_by_plan("plan:one\0").await, Ok(None));
    assert_eq!(
        store
            .transactions_by_action(&ActionId::trusted("act_a\0"))
            .await,
        Ok(Vec::new())
    );
    assert_eq!(
        store
            .transition(&nul_transaction, 0, &plan_claim("act_commit"), NOW)
            .await,
        Ok(TransitionOutcome::NotFound)
    );
}

/// A transition at the stored revision from an expected status writes every field it names,
/// bumps the revision by one, stamps the update time and appends the receipt of the status it
/// enters; the next one needs the new revision.
pub async fn check_transition_applies_and_bumps_revision(store: SharedStore) {
    let id = TransactionId::trusted("txn_apply");
    let mut record = transaction("txn_apply", "act_a", TransactionProtocolStatus::Committing);
    record.record_receipt(NOW);
    insert_new(&store, &record).await;
    let unknown = writing_every_field(
        &[
            TransactionProtocolStatus::Prepared,
            TransactionProtocolStatus::Committing,
        ],
        TransactionProtocolStatus::OutcomeUnknown,
        "sla.timeout_exceeded",
    );
    let mut after_unknown = TransactionRecord {
        status: TransactionProtocolStatus::OutcomeUnknown,
        result: unknown.result.clone(),
        provider_operation: Some(operation("op-1")),
        reconciliation_cursor: Some("cursor-1".to_owned()),
        checkpoint_cursor: Some("cp-1".to_owned()),
        reconcile_after_ms: Some(NOW + 5_000),
        error: Some(temporary("sla.timeout_exceeded")),
        revision: 1,
        updated_at_ms: NOW + 10,
        ..inserted(&record)
    };
    after_unknown.record_receipt(NOW + 10);
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
    let mut after_reconciling = TransactionRecord {
        status: TransactionProtocolStatus::Reconciling,
        result: None,
        reconcile_after_ms: None,
        error: None,
        revision: 2,
        updated_at_ms: NOW + 20,
        ..after_unknown
    };
    after_reconciling.record_receipt(NOW + 20);
    assert_eq!(
        store.transition(&id, 1, &reconciling, NOW + 20).await,
        Ok(TransitionOutcome::Applied(after_reconciling.clone()))
    );
    assert_eq!(store.transaction(&id).await, Ok(Some(after_reconciling)));
}

/// A transition at any revision but the stored one loses and reports the current record, even
/// when its status would not have matched either (the revision is checked first).
pub async fn check_stale_revision_is_a_revision_conflict(store: SharedStore) {
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
pub async fn check_unexpected_status_is_a_state_conflict(store: SharedStore) {
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
pub async fn check_transition_of_a_missing_record_is_not_found(store: SharedStore) {
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

/// `None` provider operation and cursors keep the stored ones; result, error and
/// `reconcile_after` are always overwritten (`None` clears them).
pub async fn check_transition_keeps_operation_and_cursor_but_overwrites_the_rest(
    store: SharedStore,
) {
    let id = TransactionId::trusted("txn_keep");
    insert_new(
        &store,
        &transaction("txn_keep", "act_a", TransactionProtocolStatus::Prepared),
    )
    .await;
    let checkpoint = writing_every_field(
        &[TransactionProtocolStatus::Prepared],
        TransactionProtocolStatus::Prepared,
        "provider.slow",
    );
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
    assert_eq!(after_bare.checkpoint_cursor.as_deref(), Some("cp-1"));
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
    // A pending reconciliation's cursor replaces the resume cursor, never the handler's.
    assert_eq!(after_replace.checkpoint_cursor.as_deref(), Some("cp-1"));
    assert_eq!(after_replace.revision, 3);
    assert_eq!(store.transaction(&id).await, Ok(Some(after_replace)));
}

/// A claimed plan belongs to its commit action from then on; a transition without a rebind
/// keeps the owner. The plan id stays the record's.
pub async fn check_transition_rebinds_the_action(store: SharedStore) {
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

/// Every status change appends the receipt of the status entered, hash-linked to the one
/// before, and the store keeps the whole chain: a checkpoint in the same status adds nothing,
/// and returning to a status already receipted does not receipt it again (nor restamp it).
pub async fn check_transitions_append_a_hash_chained_receipt_per_status(store: SharedStore) {
    use TransactionProtocolStatus as S;
    let id = TransactionId::trusted("txn_receipts");
    let mut record = transaction("txn_receipts", "act_a", S::Prepared);
    record.record_receipt(NOW);
    insert_new(&store, &record).await;
    let steps = [
        Transition {
            rebind_action: Some(ActionId::trusted("act_commit")),
            ..Transition::new(&[S::Prepared], S::Committing)
        },
        Transition {
            provider_operation: Some(operation("op-1")),
            ..Transition::new(&[S::Committing], S::Committing)
        },
        Transition::new(&[S::Committing], S::OutcomeUnknown),
        Transition::new(&[S::OutcomeUnknown], S::Reconciling),
        // Reconciliation could not settle the outcome: back to unknown, then another attempt.
        Transition::new(&[S::Reconciling], S::OutcomeUnknown),
        Transition::new(&[S::OutcomeUnknown], S::Reconciling),
        Transition::new(&[S::Reconciling], S::Reconciled),
    ];
    let mut last_applied = None;
    for (revision, step) in (0..).zip(&steps) {
        match store
            .transition(&id, revision, step, NOW + 1 + revision)
            .await
        {
            Ok(TransitionOutcome::Applied(applied)) => last_applied = Some(applied),
            other => panic!("step {revision} must apply: {other:?}"),
        }
    }
    let stored = store
        .transaction(&id)
        .await
        .expect("read the record")
        .expect("the record exists");
    assert_eq!(Some(&stored), last_applied.as_ref());
    let receipts = &stored.receipts;
    assert_eq!(
        receipts
            .iter()
            .map(|receipt| receipt.kind)
            .collect::<Vec<_>>(),
        [
            ReceiptKind::ExecutionStarted,
            ReceiptKind::CommitStarted,
            ReceiptKind::OutcomePending,
            ReceiptKind::ReconciliationStarted,
            ReceiptKind::Reconciled,
        ]
    );
    assert!(
        TransactionReceipt::chain_is_intact(receipts),
        "{receipts:#?}"
    );
    // Each receipt is stamped when its status was first entered, by the action owning the
    // transaction then.
    let act_a = ActionId::trusted("act_a");
    let act_commit = ActionId::trusted("act_commit");
    assert_eq!(
        receipts
            .iter()
            .map(|receipt| (receipt.recorded_at_ms, &receipt.action_id))
            .collect::<Vec<_>>(),
        [
            (NOW, &act_a),
            (NOW + 1, &act_commit),
            (NOW + 3, &act_commit),
            (NOW + 4, &act_commit),
            (NOW + 7, &act_commit),
        ]
    );
    let mut gapped = receipts.clone();
    gapped.remove(2);
    assert!(
        !TransactionReceipt::chain_is_intact(&gapped),
        "a chain with a link removed must not read as intact"
    );
}

/// `recoverable` lists exactly the planned, prepared, committing, compensating, outcome-unknown
/// and reconciling records, in transaction-id byte order, and follows them as they move in and
/// out of those states.
pub async fn check_recoverable_lists_exactly_the_recoverable_statuses(store: SharedStore) {
    use TransactionProtocolStatus as S;
    assert_eq!(store.recoverable().await, Ok(Vec::new()));
    let mut expected = Vec::new();
    for (index, status) in TransactionProtocolStatus::ALL.into_iter().enumerate() {
        let record = transaction(&format!("txn_{index:02}"), "act_a", status);
        insert_new(&store, &record).await;
        if matches!(
            status,
            S::Planned
                | S::Prepared
                | S::Committing
                | S::Compensating
                | S::OutcomeUnknown
                | S::Reconciling
        ) {
            expected.push(inserted(&record));
        }
    }
    assert_eq!(store.recoverable().await, Ok(expected.clone()));

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
    let failed = TransactionProtocolStatus::ALL
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
    assert_eq!(store.recoverable().await, Ok(by_id(expected)));
}

/// Inserts the plan `plan:<name>` (transaction `txn_<name>`) on the first of `stores`, then
/// races `claims` commit actions, spread over `stores`, to claim it: exactly one claim applies,
/// every other claimer loses on the revision and learns the winner's record, and every store
/// reads the winner.
pub async fn race_plan_claims(stores: &[SharedStore], name: &str, claims: usize) {
    let transaction_id = format!("txn_{name}");
    let id = TransactionId::trusted(transaction_id.as_str());
    let plan = planned(&transaction_id, "act_plan", &format!("plan:{name}"));
    insert_new(&stores[0], &plan).await;
    let tasks: Vec<_> = (0..claims)
        .map(|index| {
            let store = Arc::clone(&stores[index % stores.len()]);
            let id = id.clone();
            let claim = plan_claim(&format!("act_commit_{name}_{index}"));
            tokio::spawn(async move { store.transition(&id, 0, &claim, NOW + 1).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.expect("claim task").expect("transition") {
            TransitionOutcome::Applied(record) => winners.push(record),
            // Every claimer expects revision 0, and the revision is checked before the status.
            TransitionOutcome::RevisionConflict(current) => losers.push(current),
            other => panic!("{name}: a claim neither applied nor lost on the revision: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{name}: exactly one claim must apply");
    let winner = winners.remove(0);
    assert_eq!(
        (winner.status, winner.revision),
        (TransactionProtocolStatus::Committing, 1)
    );
    for loser in &losers {
        assert_eq!(
            loser, &winner,
            "{name}: a loser saw an unclaimed or re-claimed plan"
        );
    }
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
pub async fn check_two_hundred_concurrent_plan_claims(store: SharedStore) {
    race_plan_claims(&[store], "race", 200).await;
}

// ---- races across replicas ----------------------------------------------------------------------

/// How many callers each cross-replica race spreads over its stores, per store.
const CALLERS_PER_REPLICA: usize = 8;

/// Callers spread over `stores` racing to reserve one fresh key: one owner, every other caller
/// told who it is.
pub async fn check_replicas_race_reserve_of_a_fresh_key(stores: Vec<SharedStore>) {
    assert_replicas(&stores);
    let count = CALLERS_PER_REPLICA * stores.len();
    let outcomes = reserve_concurrently(&stores, "Capability:cap:replicas", "r", count, NOW).await;
    assert_single_winner(&outcomes);
}

/// Callers spread over `stores` racing to take over a reservation whose owner crashed: one
/// does, and the crashed owner is fenced out.
pub async fn check_replicas_race_take_over(stores: Vec<SharedStore>) {
    assert_replicas(&stores);
    let count = CALLERS_PER_REPLICA * stores.len();
    race_take_over(&stores, "Capability:cap:replicas-take-over", count).await;
}

/// Commits spread over `stores` racing to claim one plan: one claim applies, and every store
/// reads the winner.
pub async fn check_replicas_race_plan_claims(stores: Vec<SharedStore>) {
    assert_replicas(&stores);
    let count = CALLERS_PER_REPLICA * stores.len();
    race_plan_claims(&stores, "replicas", count).await;
}

/// Resumers spread over `stores` racing to resume one approved request: exactly one wins.
pub async fn check_replicas_race_claim_resume(stores: Vec<SharedStore>) {
    assert_replicas(&stores);
    race_claim_resume(&stores, CALLERS_PER_REPLICA * stores.len()).await;
}

/// A race across replicas needs at least two stores to mean anything, and two of them must not
/// be one store passed twice (`vec![store.clone(), store]` raced nothing across connections; a
/// review found it passing).
fn assert_replicas(stores: &[SharedStore]) {
    assert!(
        stores.len() >= 2,
        "a race across replicas needs at least two stores on one shared state, got {}",
        stores.len()
    );
    for (at, store) in stores.iter().enumerate() {
        if let Some(twin) = stores[at + 1..]
            .iter()
            .position(|other| std::ptr::addr_eq(Arc::as_ptr(store), Arc::as_ptr(other)))
        {
            panic!(
                "replicas {at} and {} are the same store: connect each replica on its own (independently connected stores on one shared state)",
                at + 1 + twin
            );
        }
    }
}

/// Runs one check on a multi-thread runtime of its own (four workers, so the races race): what
/// each test of [`store_conformance_tests!`](crate::store_conformance_tests) calls.
pub fn run_check(check: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("build the store conformance runtime")
        .block_on(check);
}

/// Calls `$callback!` with the name of every check above, once: each backend's test file
/// passes a macro that turns the list into one `#[tokio::test]` per check, so a check added
/// here runs against every backend.
///
/// [`store_conformance_tests!`](crate::store_conformance_tests) does this for you; a runner of
/// your own (one that skips without a database, say) looks like this:
///
/// ```
/// use std::sync::Arc;
///
/// use aip_connector::store::{MemoryStore, SharedStore};
///
/// fn fresh_store() -> SharedStore {
///     Arc::new(MemoryStore::new())
/// }
///
/// macro_rules! memory_tests {
///     ($($check:ident),+ $(,)?) => {
///         mod memory {
///             $(
///                 #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
///                 async fn $check() {
///                     aip_connector_testkit::store_conformance::$check(super::fresh_store())
///                         .await;
///                 }
///             )+
///         }
///     };
/// }
/// aip_connector_testkit::for_each_store_check!(memory_tests);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! for_each_store_check {
    ($callback:ident) => {
        $crate::__store_check_list!([$callback] []);
    };
}

/// The one list of single-store checks: calls `$($callback)*!` with `$($extra)*` and the
/// names. [`for_each_store_check!`] and [`store_conformance_tests!`] both read it, so a check
/// added here runs everywhere.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_check_list {
    ([$($callback:tt)*] [$($extra:tt)*]) => {
        $($callback)*!($($extra)*
            check_reserve_on_a_free_key_acquires,
            check_second_reserve_while_live_is_in_progress,
            check_reservation_reads_only_the_live_owner,
            check_expired_reservation_is_taken_over_and_old_owner_is_fenced,
            check_expired_reservation_not_taken_over_is_settled_by_its_owner,
            check_release_frees_the_key_for_its_owner_only,
            check_settled_record_is_replayed,
            check_forget_record_deletes_only_the_record_read,
            check_concurrent_forgets_delete_the_record_once,
            check_settle_stores_the_record_under_the_reservation_key,
            check_settle_without_the_live_token_is_fenced,
            check_expired_record_is_ignored_and_reservable,
            check_record_without_expiry_never_expires,
            check_resume_pending_replaces_only_a_matching_pending_record,
            check_resume_pending_never_replaces_a_final_record,
            check_renew_works_only_for_the_live_token,
            check_retry_attempts_count_per_key_and_restart_after_expiry,
            check_purge_deletes_only_expired_records_and_counts,
            check_replayed_results_keep_their_key_order,
            check_approval_insert_get_and_versioned_update,
            check_duplicate_approval_insert_fails,
            check_store_errors_quote_no_record_contents,
            check_every_approval_status_is_storable,
            check_claim_resume_succeeds_once_and_only_when_approved,
            check_purge_closed_approvals_deletes_only_closed_records_created_before_the_cutoff,
            check_release_resume_gives_back_only_a_claimed_resume,
            check_thousand_concurrent_reserves_on_one_key,
            check_concurrent_take_over_has_one_winner,
            check_different_keys_never_interfere,
            check_hundred_concurrent_claim_resume,
            check_transaction_insert_if_absent,
            check_transaction_plan_id_is_unique,
            check_transaction_lookups,
            check_lookups_by_a_selector_with_nul_find_nothing,
            check_transition_applies_and_bumps_revision,
            check_stale_revision_is_a_revision_conflict,
            check_unexpected_status_is_a_state_conflict,
            check_transition_of_a_missing_record_is_not_found,
            check_transition_keeps_operation_and_cursor_but_overwrites_the_rest,
            check_transition_rebinds_the_action,
            check_transitions_append_a_hash_chained_receipt_per_status,
            check_recoverable_lists_exactly_the_recoverable_statuses,
            check_purge_finished_transactions_deletes_only_finished_records_past_the_cutoff,
            check_two_hundred_concurrent_plan_claims,
        );
    };
}

/// Calls `$callback!` with the name of every cross-replica check (`check_replicas_*`, each
/// taking a `Vec<SharedStore>` of independently connected stores on one fresh, shared state),
/// as [`for_each_store_check!`](crate::for_each_store_check) does for the single-store checks.
#[macro_export]
macro_rules! for_each_replica_check {
    ($callback:ident) => {
        $crate::__replica_check_list!([$callback] []);
    };
}

/// The one list of cross-replica checks (see [`__store_check_list!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __replica_check_list {
    ([$($callback:tt)*] [$($extra:tt)*]) => {
        $($callback)*!(
            $($extra)*
            check_replicas_race_reserve_of_a_fresh_key,
            check_replicas_race_take_over,
            check_replicas_race_plan_claims,
            check_replicas_race_claim_resume,
        );
    };
}

/// One `#[test]` per store conformance check, in a module `store_conformance` (see the
/// [module](crate::store_conformance) for what the checks cover).
///
/// - `module = <name>` (optional, first): the generated module's name instead of
///   `store_conformance`, to run the suite twice in one module (two configurations of a store)
///   or beside a `use aip_connector_testkit::store_conformance;`.
/// - `fresh_store = <expr>`: evaluated once per test, inside an `async` block (so it may
///   `.await`), to a fresh, empty [`SharedStore`](aip_connector::store::SharedStore). It is
///   written inside the generated module, which imports everything of the module the macro is
///   invoked in (`use super::*`): name your items as you would there, but write a path that
///   starts with `super::` or `self::` one level deeper (`super::super::x`), or use a
///   `crate::` path.
/// - `replicas = <expr>` (optional): evaluated once per cross-replica test to a
///   `Vec<SharedStore>` of at least two independently connected stores on one fresh, shared
///   state, as several host replicas would hold. Give it for a store whose state lives in a
///   server; without it those four tests are not generated.
///
/// Each test runs on a multi-thread runtime of its own ([`run_check`](crate::store_conformance::run_check));
/// the crate needs no `tokio` dependency of its own.
///
/// ```
/// use std::sync::Arc;
///
/// use aip_connector::store::{MemoryStore, SharedStore};
///
/// aip_connector_testkit::store_conformance_tests! {
///     fresh_store = Arc::new(MemoryStore::new()) as SharedStore,
/// }
///
/// // A second configuration in the same module needs a module name of its own.
/// fn shared() -> SharedStore {
///     Arc::new(MemoryStore::new())
/// }
/// aip_connector_testkit::store_conformance_tests! {
///     module = second_configuration,
///     fresh_store = shared(),
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_conformance_tests {
    (fresh_store = $fresh:expr $(, replicas = $replicas:expr)? $(,)?) => {
        $crate::store_conformance_tests! {
            module = store_conformance,
            fresh_store = $fresh $(, replicas = $replicas)?
        }
    };
    (module = $module:ident, fresh_store = $fresh:expr $(, replicas = $replicas:expr)? $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $crate::__store_check_list!([$crate::__store_check_tests] [($fresh);]);
            $(
                $crate::__replica_check_list!([$crate::__store_check_tests] [($replicas);]);
            )?
        }
    };
}

/// One `#[test]` per named check, each passing a fresh `$stores` to it.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_check_tests {
    (($stores:expr); $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::store_conformance::run_check(async {
                    $crate::store_conformance::$check($stores).await;
                });
            }
        )+
    };
}
