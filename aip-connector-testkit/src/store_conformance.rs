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
    assert_eq!(
        store.reserve(&owner, 0).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    let record = record_for(&owner, ActionResultStatus::Completed, Some(1));
    assert_eq!(
        store.settle(&owner, record).await,
        Ok(()),
        "settle with the live reservation's token must store the record"
    );
    assert!(
        store.record(key, 0).await.expect("record").is_some(),
        "record must read a settled record before its expiry"
    );
}

/// Leaves an approval `id` denied 1 ms after the epoch, as an earlier process would have: for
/// tests of retention.
pub async fn insert_closed_approval(store: &dyn ApprovalStore, id: &str) {
    let record = ApprovalRecord {
        status: ApprovalStatus::Denied,
        created_at_ms: 1,
        ..approval(id)
    };
    assert_eq!(
        store.insert_approval(&record).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
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

/// Asserts that `read` (what [`ApprovalStore::approval`] returned) is `Ok(Some(expected))`,
/// comparing field by field, the version and the resume first: a failure names `rule` and the
/// field that differs, instead of dumping two whole records (several kilobytes of `Debug`).
/// Exactly as strict as comparing the records whole.
#[track_caller]
fn assert_approval_read(
    read: Result<Option<ApprovalRecord>, StoreError>,
    expected: &ApprovalRecord,
    rule: &str,
) {
    match read {
        Ok(Some(read)) => assert_approval_is(&read, expected, rule),
        Ok(None) => panic!(
            "{rule}: approval({:?}) found no record",
            expected.approval_id
        ),
        Err(error) => panic!(
            "{rule}: approval({:?}) failed: {error:?}",
            expected.approval_id
        ),
    }
}

/// Asserts that `read` equals `expected`, field by field (see [`assert_approval_read`]).
#[track_caller]
fn assert_approval_is(read: &ApprovalRecord, expected: &ApprovalRecord, rule: &str) {
    // Destructured, so a field added to the record is compared here too.
    let ApprovalRecord {
        approval_id,
        action,
        input_retained,
        input_hash,
        capability_id,
        requested_by,
        tenant_id,
        policy,
        policy_hash,
        idempotency_key,
        status,
        decisions,
        created_at_ms,
        expires_at_ms,
        resumed,
        resumed_at_ms,
        resume_token,
        version,
    } = expected;
    let id = approval_id;
    assert_eq!(
        &read.approval_id, approval_id,
        "{rule} ({id:?}: `approval_id`)"
    );
    assert_eq!(&read.version, version, "{rule} ({id:?}: `version`)");
    assert_eq!(&read.resumed, resumed, "{rule} ({id:?}: `resumed`)");
    assert_eq!(
        &read.resumed_at_ms, resumed_at_ms,
        "{rule} ({id:?}: `resumed_at_ms`)"
    );
    assert_eq!(
        &read.resume_token, resume_token,
        "{rule} ({id:?}: `resume_token`)"
    );
    assert_eq!(&read.status, status, "{rule} ({id:?}: `status`)");
    assert_eq!(&read.decisions, decisions, "{rule} ({id:?}: `decisions`)");
    assert_eq!(
        &read.created_at_ms, created_at_ms,
        "{rule} ({id:?}: `created_at_ms`)"
    );
    assert_eq!(
        &read.expires_at_ms, expires_at_ms,
        "{rule} ({id:?}: `expires_at_ms`)"
    );
    assert_eq!(&read.action, action, "{rule} ({id:?}: `action`)");
    assert_eq!(
        &read.input_retained, input_retained,
        "{rule} ({id:?}: `input_retained`)"
    );
    assert_eq!(
        &read.input_hash, input_hash,
        "{rule} ({id:?}: `input_hash`)"
    );
    assert_eq!(
        &read.capability_id, capability_id,
        "{rule} ({id:?}: `capability_id`)"
    );
    assert_eq!(
        &read.requested_by, requested_by,
        "{rule} ({id:?}: `requested_by`)"
    );
    assert_eq!(&read.tenant_id, tenant_id, "{rule} ({id:?}: `tenant_id`)");
    assert_eq!(&read.policy, policy, "{rule} ({id:?}: `policy`)");
    assert_eq!(
        &read.policy_hash, policy_hash,
        "{rule} ({id:?}: `policy_hash`)"
    );
    assert_eq!(
        &read.idempotency_key, idempotency_key,
        "{rule} ({id:?}: `idempotency_key`)"
    );
}

/// The approval `id`, which must exist.
async fn read_approval(store: &SharedStore, id: &ApprovalId) -> ApprovalRecord {
    match store.approval(id).await {
        Ok(Some(record)) => record,
        Ok(None) => panic!("approval({id:?}) found no record"),
        Err(error) => panic!("approval({id:?}) failed: {error:?}"),
    }
}

/// `record`'s resume: whether it is resumed, when, and by which claim's token.
fn resume_of(record: &ApprovalRecord) -> (bool, Option<Millis>, Option<&str>) {
    (
        record.resumed,
        record.resumed_at_ms,
        record.resume_token.as_deref(),
    )
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
                assert_eq!(
                    &live.reservation_id, winners[0],
                    "reserve: {token} got InProgress naming a reservation other than the winner's"
                );
            }
            ReserveOutcome::Settled(_) => {
                panic!("reserve: {token} saw a settled record, but nothing was settled")
            }
        }
    }
}

/// Reserves `owner`'s key at `NOW`, which must be free, and settles it with `record`.
async fn reserve_and_settle(store: &SharedStore, owner: &Reservation, record: &IdempotencyRecord) {
    assert_eq!(
        store.reserve(owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.settle(owner, record.clone()).await,
        Ok(()),
        "settle with the live reservation's token must store the record"
    );
}

/// A free key is claimed by the first caller.
pub async fn check_reserve_on_a_free_key_acquires(store: SharedStore) {
    let owner = reservation("Action:act_a:k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a key that holds nothing must acquire it"
    );
    assert_eq!(
        store.record(&owner.key, NOW).await,
        Ok(None),
        "record must not read a reservation as a record"
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
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    let duplicate = reservation("k", "b", NOW + 200);
    assert_eq!(
        store.reserve(&duplicate, NOW + 99).await,
        Ok(ReserveOutcome::InProgress(owner.clone())),
        "reserve of a key whose reservation is live (now < its expiry) must answer InProgress \
         with the owner's reservation, whole (token, action, tenant, expiry)"
    );
    // The owner asking again is a duplicate too: reserve is not re-entrant.
    assert_eq!(
        store.reserve(&owner, NOW + 1).await,
        Ok(ReserveOutcome::InProgress(owner)),
        "reserve is not re-entrant: the owner reserving its live key again must get InProgress"
    );
}

/// `reservation` reads the live owner of a key, with its renewed expiry, and nothing else: not a
/// free key, not an expired reservation, not a settled record.
pub async fn check_reservation_reads_only_the_live_owner(store: SharedStore) {
    assert_eq!(
        store.reservation("k", NOW).await,
        Ok(None),
        "reservation of a free key must be None"
    );
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.reservation("k", NOW).await,
        Ok(Some(owner.clone())),
        "reservation must read the live owner's reservation, whole"
    );
    assert_eq!(
        store.reservation("other", NOW).await,
        Ok(None),
        "reservation of another key must be None"
    );
    // Expiry is exclusive, as for `reserve`.
    assert_eq!(
        store.reservation("k", NOW + 100).await,
        Ok(None),
        "reservation at the reservation's expiry must be None (expired when now >= expires_at_ms)"
    );

    assert_eq!(
        store.renew(&owner, NOW + 500).await,
        Ok(true),
        "renew with the key's token must succeed, even past the expiry"
    );
    let renewed = Reservation {
        expires_at_ms: NOW + 500,
        ..owner.clone()
    };
    assert_eq!(
        store.reservation("k", NOW + 100).await,
        Ok(Some(renewed)),
        "reservation must read the renewed expiry"
    );

    store
        .settle(&owner, completed(&owner))
        .await
        .expect("settle with the live token");
    assert_eq!(
        store.reservation("k", NOW + 100).await,
        Ok(None),
        "reservation of a settled key must be None: a record is not a reservation"
    );
    assert!(
        store
            .record("k", NOW + 100)
            .await
            .expect("record")
            .is_some(),
        "record must read the settled record"
    );
}

/// A crashed owner's expired reservation is taken over, and the old owner is fenced out.
pub async fn check_expired_reservation_is_taken_over_and_old_owner_is_fenced(store: SharedStore) {
    let old = reservation("k", "old", NOW + 100);
    let new = reservation("k", "new", NOW + 10_000);
    assert_eq!(
        store.reserve(&old, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    // Expiry is exclusive: at `expires_at_ms` the reservation is no longer live.
    assert_eq!(
        store.reserve(&new, NOW + 100).await,
        Ok(ReserveOutcome::Acquired),
        "reserve at the old reservation's expiry must take it over (expired when now >= \
         expires_at_ms)"
    );
    assert_eq!(
        store.settle(&old, completed(&old)).await,
        Err(StoreError::Fenced),
        "settle by the owner whose reservation was taken over must be Fenced (the key holds \
         another token)"
    );
    assert_eq!(
        store.release(&old).await,
        Ok(()),
        "release by a fenced owner must be a no-op, not an error"
    );
    assert_eq!(
        store.renew(&old, NOW + 50_000).await,
        Ok(false),
        "renew by the owner whose reservation was taken over must be false"
    );
    let third = reservation("k", "third", NOW + 20_000);
    assert_eq!(
        store.reserve(&third, NOW + 200).await,
        Ok(ReserveOutcome::InProgress(new.clone())),
        "the old owner's release must not free the new owner's key"
    );
    assert_eq!(
        store.settle(&new, completed(&new)).await,
        Ok(()),
        "settle by the owner that took the key over must succeed"
    );
    assert_eq!(
        store.record("k", NOW + 200).await,
        Ok(Some(completed(&new))),
        "record must read the new owner's record"
    );
}

/// An expired reservation that nobody took over still belongs to its owner, however many keys
/// are reserved meanwhile (the memory store sweeps expired entries when its table would grow):
/// a slow handler finishing after its deadline settles its result rather than losing it.
pub async fn check_expired_reservation_not_taken_over_is_settled_by_its_owner(store: SharedStore) {
    let slow = reservation("slow", "slow-owner", NOW + 100);
    assert_eq!(
        store.reserve(&slow, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    for n in 0..2_000 {
        let other = reservation(&format!("other-{n}"), "other", NOW + 10_000);
        assert_eq!(
            store.reserve(&other, NOW + 500).await,
            Ok(ReserveOutcome::Acquired),
            "reserve of the free key other-{n} must acquire it"
        );
    }
    assert_eq!(
        store.settle(&slow, completed(&slow)).await,
        Ok(()),
        "settle checks the token, not the expiry: an expired reservation nobody took over must \
         still settle, however many other keys were reserved meanwhile"
    );
    assert_eq!(
        store.record("slow", NOW + 500).await,
        Ok(Some(completed(&slow))),
        "record must read the slow owner's settled record"
    );
}

/// Release frees the key for its owner only; anyone else's release is a no-op.
pub async fn check_release_frees_the_key_for_its_owner_only(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let stranger = reservation("k", "stranger", NOW + 100);
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.release(&stranger).await,
        Ok(()),
        "release with another token must be a no-op, not an error"
    );
    assert_eq!(
        store.reserve(&stranger, NOW).await,
        Ok(ReserveOutcome::InProgress(owner.clone())),
        "release with another token must not free the owner's key"
    );
    assert_eq!(
        store.release(&owner).await,
        Ok(()),
        "release by the owner must succeed"
    );
    assert_eq!(
        store.reserve(&stranger, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "release by the owner must free the key"
    );
    // Releasing a key that holds nothing of ours is a no-op as well.
    assert_eq!(
        store
            .release(&reservation("never-reserved", "a", NOW))
            .await,
        Ok(()),
        "release of a key that holds nothing must be a no-op, not an error"
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
        "forget_record of a key that holds nothing must be false"
    );
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "forget_record must not delete a reservation (a reservation is not a settled record)"
    );
    assert_eq!(
        store.reservation("k", NOW).await,
        Ok(Some(owner.clone())),
        "forget_record must leave a reservation in place"
    );
    assert_eq!(
        store.settle(&owner, failed.clone()).await,
        Ok(()),
        "settle with the live reservation's token must store the record"
    );

    // Any other record deletes nothing: another action's, or another settlement of this one.
    let others = IdempotencyRecord {
        action_id: ActionId::trusted("act_other"),
        ..failed.clone()
    };
    assert_eq!(
        store.forget_record(&others).await,
        Ok(false),
        "forget_record of a record of another action must not delete the stored one"
    );
    let later = IdempotencyRecord {
        created_at_ms: NOW + 1,
        ..failed.clone()
    };
    assert_eq!(
        store.forget_record(&later).await,
        Ok(false),
        "forget_record must compare the whole record: one that differs in created_at_ms must \
         not delete the stored one"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(failed.clone())),
        "a forget_record of another record must leave the stored record in place"
    );

    // The record read deletes it, once; the key is free again.
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(true),
        "forget_record of the stored record, equal field for field, must delete it"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(None),
        "record after forget_record deleted it must be None"
    );
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "forget_record deletes once: the second call must be false"
    );
    let next = reservation("k", "b", NOW + 100);
    assert_eq!(
        store.reserve(&next, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a key whose record was forgotten must acquire it"
    );

    // The earlier action's late forget leaves the new claim, and then its record, alone.
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "a late forget_record of a forgotten record must not delete the new claim"
    );
    assert_eq!(
        store.reservation("k", NOW).await,
        Ok(Some(next.clone())),
        "a late forget_record must leave the new reservation in place"
    );
    let kept = completed(&next);
    assert_eq!(
        store.settle(&next, kept.clone()).await,
        Ok(()),
        "settle with the live reservation's token must store the record"
    );
    assert_eq!(
        store.forget_record(&failed).await,
        Ok(false),
        "a late forget_record of a forgotten record must not delete the new claim's record"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(kept.clone())),
        "a late forget_record must leave the new claim's record in place"
    );

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
        Ok(ReserveOutcome::Acquired),
        "reserve after the record expired must acquire the key"
    );
    let resend_record = IdempotencyRecord {
        created_at_ms: NOW + 20,
        expires_at_ms: None,
        ..completed(&resend)
    };
    assert_eq!(
        store.settle(&resend, resend_record.clone()).await,
        Ok(()),
        "settle with the live reservation's token must store the record"
    );
    assert_eq!(
        store.forget_record(&first_record).await,
        Ok(false),
        "forget_record of the first record must not delete the record a resend of the same \
         action settled since (the action id alone does not tell them apart)"
    );
    assert_eq!(
        store.record("again", NOW + 20).await,
        Ok(Some(resend_record)),
        "the resend's record must stay after a late forget_record of the first one"
    );

    // An expired record goes too (nothing is left for a purge), and other keys are untouched.
    settle_expired_record(store.as_ref(), "expired").await;
    let expired = store
        .record("expired", 0)
        .await
        .expect("record")
        .expect("settled above");
    assert_eq!(
        store.forget_record(&expired).await,
        Ok(true),
        "forget_record must delete the record read even once it expired"
    );
    assert_eq!(
        store.purge_expired(NOW, 10).await.map(|p| p.records),
        Ok(0),
        "purge_expired after forget_record deleted the only expired record must delete nothing"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(kept.clone())),
        "forget_record of another key must leave this key's record in place"
    );
    // A key nothing can store (a NUL) holds nothing to forget.
    let unstorable = IdempotencyRecord {
        key: "k\0".to_owned(),
        ..kept
    };
    assert_eq!(
        store.forget_record(&unstorable).await,
        Ok(false),
        "forget_record of a key holding a NUL must be false, not an error"
    );

    // A record that holds a NUL character anywhere (a failure quoting an input) is forgotten
    // like any other (PostgreSQL refused to read such a body's fields in SQL).
    let quoting = reservation("nul", "n", NOW + 100);
    assert_eq!(
        store.reserve(&quoting, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    let mut with_nul = completed(&quoting);
    with_nul.result.output = Some(json!({ "quoted": "a\u{0}b" }));
    assert_eq!(
        store.settle(&quoting, with_nul.clone()).await,
        Ok(()),
        "settle must store a record whose output holds a NUL character"
    );
    assert_eq!(
        store.record("nul", NOW).await,
        Ok(Some(with_nul.clone())),
        "record must read back an output holding a NUL character unchanged"
    );
    assert_eq!(
        store.forget_record(&with_nul).await,
        Ok(true),
        "forget_record must delete a record whose output holds a NUL character"
    );
    assert_eq!(
        store.record("nul", NOW).await,
        Ok(None),
        "record after forget_record deleted it must be None"
    );
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
    assert_eq!(
        deleted, 1,
        "forget_record must be true for exactly one of the racing calls"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(None),
        "record after the racing forget_record calls must be None"
    );
}

/// Once settled, every later reserve gets the stored record back.
pub async fn check_settled_record_is_replayed(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = completed(&owner);
    reserve_and_settle(&store, &owner, &record).await;
    let duplicate = reservation("k", "b", NOW + 10_000);
    assert_eq!(
        store.reserve(&duplicate, NOW + 5_000).await,
        Ok(ReserveOutcome::Settled(record.clone())),
        "reserve of a key holding a live record must answer Settled with the record, whole"
    );
    assert_eq!(
        store.record("k", NOW + 5_000).await,
        Ok(Some(record.clone())),
        "record must read the settled record, whole"
    );
    // The settled owner's late release must not drop the record.
    assert_eq!(
        store.release(&owner).await,
        Ok(()),
        "release after settle must be a no-op, not an error"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(record)),
        "release checks for a reservation: the settled owner's late release must not drop the \
         record"
    );
}

/// A record is stored under its reservation's key: one naming another key is found under the
/// reservation's key, names that key when read back, and leaves the key it named free.
pub async fn check_settle_stores_the_record_under_the_reservation_key(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let mut record = completed(&owner);
    record.key = "other".to_owned();
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.settle(&owner, record.clone()).await,
        Ok(()),
        "settle with the live token must succeed whatever key the record names"
    );
    let stored = IdempotencyRecord {
        key: "k".to_owned(),
        ..record
    };
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(stored.clone())),
        "settle must store the record under the reservation's key, naming that key"
    );
    assert_eq!(
        store.reserve(&reservation("k", "b", NOW + 100), NOW).await,
        Ok(ReserveOutcome::Settled(stored)),
        "reserve must replay the record stored under the reservation's key, naming that key"
    );
    assert_eq!(
        store.record("other", NOW).await,
        Ok(None),
        "settle must not store anything under the key the record names"
    );
    assert_eq!(
        store
            .reserve(&reservation("other", "c", NOW + 100), NOW)
            .await,
        Ok(ReserveOutcome::Acquired),
        "the key the record named must stay free"
    );
}

/// Settling needs the live token: no reservation, or a second settle, is fenced.
pub async fn check_settle_without_the_live_token_is_fenced(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.settle(&owner, completed(&owner)).await,
        Err(StoreError::Fenced),
        "settle of a key that holds no reservation must be Fenced: settle needs the key to hold \
         the caller's fencing token (reservation_id)"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(None),
        "a fenced settle must store nothing"
    );
    let first = completed(&owner);
    reserve_and_settle(&store, &owner, &first).await;
    let second = record_for(&owner, ActionResultStatus::Failed, None);
    assert_eq!(
        store.settle(&owner, second.clone()).await,
        Err(StoreError::Fenced),
        "settle of a key already settled must be Fenced, even with the same token: settle must \
         check that the key still holds the caller's live reservation, and a settled record is \
         not one"
    );
    assert_eq!(
        store.record("k", NOW).await,
        Ok(Some(first)),
        "a fenced settle must leave the first record in place"
    );
}

/// An expired record reads as absent, and its key can be claimed again.
pub async fn check_expired_record_is_ignored_and_reservable(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = record_for(&owner, ActionResultStatus::Completed, Some(NOW + 500));
    reserve_and_settle(&store, &owner, &record).await;
    assert_eq!(
        store.record("k", NOW + 499).await,
        Ok(Some(record.clone())),
        "record 1 ms before the record's expiry must read it (live while now < expires_at_ms)"
    );
    let early = reservation("k", "early", NOW + 1_000);
    assert_eq!(
        store.reserve(&early, NOW + 499).await,
        Ok(ReserveOutcome::Settled(record)),
        "reserve 1 ms before the record's expiry must replay it (live while now < expires_at_ms)"
    );
    assert_eq!(
        store.record("k", NOW + 500).await,
        Ok(None),
        "record at the record's expiry must be None (expired when now >= expires_at_ms)"
    );
    let late = reservation("k", "late", NOW + 1_000);
    assert_eq!(
        store.reserve(&late, NOW + 500).await,
        Ok(ReserveOutcome::Acquired),
        "reserve at the record's expiry must acquire the key (expired when now >= expires_at_ms)"
    );
    let fresh = completed(&late);
    assert_eq!(
        store.settle(&late, fresh.clone()).await,
        Ok(()),
        "settle by the owner that reserved the expired key must succeed"
    );
    assert_eq!(
        store.record("k", NOW + 500).await,
        Ok(Some(fresh)),
        "record must read the new owner's record"
    );
}

/// A record without an expiry is replayed forever.
pub async fn check_record_without_expiry_never_expires(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    let record = completed(&owner);
    reserve_and_settle(&store, &owner, &record).await;
    assert_eq!(
        store.record("k", Millis::MAX).await,
        Ok(Some(record.clone())),
        "record must read a record without an expiry at any time, Millis::MAX included"
    );
    let much_later = reservation("k", "b", Millis::MAX);
    assert_eq!(
        store.reserve(&much_later, Millis::MAX - 1).await,
        Ok(ReserveOutcome::Settled(record)),
        "reserve must replay a record without an expiry at any time"
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
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    for (key, expires_at_ms) in [
        ("x", Some(NOW + 100)),
        ("y", None),
        ("z", Some(NOW + 1_000)),
    ] {
        assert_eq!(
            store.count_attempt(key, expires_at_ms, NOW).await,
            Ok(1),
            "count_attempt of a new key {key:?} must count 1"
        );
    }

    // One of each per pass, then the rest; a third pass finds nothing.
    let first = store
        .purge_expired(NOW + 150, 1)
        .await
        .expect("purge_expired");
    assert_eq!(
        (first.records, first.attempt_counts),
        (1, 1),
        "purge_expired(max_entries = 1) must delete one expired record and one expired count \
         (records, attempt_counts)"
    );
    assert!(
        first.reached(1),
        "Purged::reached(1) after a pass that deleted one of each"
    );
    let second = store
        .purge_expired(NOW + 150, 10)
        .await
        .expect("purge_expired");
    assert_eq!(
        (second.records, second.attempt_counts),
        (1, 0),
        "the second purge_expired must delete the one expired record left and no count \
         (records, attempt_counts): records without an expiry, live ones and reservations stay"
    );
    assert!(
        !second.reached(10),
        "Purged::reached(10) after a pass that deleted fewer than 10 of each"
    );
    assert_eq!(
        store.purge_expired(NOW + 150, 10).await,
        Ok(aip_connector::store::Purged::default()),
        "a third purge_expired must find nothing left to delete"
    );

    // Deleted, not merely expired: read at a time when they were still live, they are gone.
    assert_eq!(
        store.record("a", NOW).await,
        Ok(None),
        "purge_expired must delete the expired record, not merely hide it"
    );
    assert_eq!(
        store.record("d", NOW).await,
        Ok(None),
        "purge_expired must delete the expired record, not merely hide it"
    );
    assert_eq!(
        store.record("b", NOW).await,
        Ok(Some(settled[1].clone())),
        "purge_expired must keep a record that expires after now"
    );
    assert_eq!(
        store.record("c", Millis::MAX).await,
        Ok(Some(settled[2].clone())),
        "purge_expired must keep a record without an expiry"
    );
    assert_eq!(
        store.count_attempt("x", Some(NOW + 100), NOW).await,
        Ok(1),
        "purge_expired must delete the expired count: the key counts from 1 again"
    );
    assert_eq!(
        store.count_attempt("y", None, NOW).await,
        Ok(2),
        "purge_expired must keep a count without an expiry"
    );
    assert_eq!(
        store.count_attempt("z", Some(NOW + 1_000), NOW).await,
        Ok(2),
        "purge_expired must keep a count that expires after now"
    );
    // The expired reservation is still its owner's to settle.
    assert_eq!(
        store.settle(&running, completed(&running)).await,
        Ok(()),
        "purge_expired must leave reservations alone, even expired ones: the owner must still \
         settle"
    );
}

/// `purge_expired` at `now` deletes a record and an attempt count whose expiry is `now` itself
/// (an entry expiring at `E` is expired once `now >= E`), and keeps the ones expiring 1 ms
/// later.
pub async fn check_purge_expired_deletes_entries_expiring_at_now(store: SharedStore) {
    let expiry = NOW + 100;
    let mut settled = Vec::new();
    for (key, expires_at_ms) in [("at-now", expiry), ("after-now", expiry + 1)] {
        let owner = reservation(key, key, NOW + 50);
        let record = record_for(&owner, ActionResultStatus::Completed, Some(expires_at_ms));
        reserve_and_settle(&store, &owner, &record).await;
        settled.push(record);
        assert_eq!(
            store.count_attempt(key, Some(expires_at_ms), NOW).await,
            Ok(1),
            "count_attempt of a new key {key:?} must count 1"
        );
    }

    let purged = store
        .purge_expired(expiry, 10)
        .await
        .expect("purge_expired");
    assert_eq!(
        (purged.records, purged.attempt_counts),
        (1, 1),
        "purge_expired(now) must delete the record and the count whose expiry is now (an entry \
         expiring at E is expired when now >= E: `expires_at_ms <= now`, not `<`), and nothing \
         expiring at now + 1 (records, attempt_counts)"
    );

    // Which ones went: read at a time when all of them were live.
    assert_eq!(
        store.record("at-now", NOW).await,
        Ok(None),
        "purge_expired(now) must delete the record whose expiry is now"
    );
    assert_eq!(
        store.record("after-now", NOW).await,
        Ok(Some(settled[1].clone())),
        "purge_expired(now) must keep the record expiring at now + 1"
    );
    assert_eq!(
        store.count_attempt("at-now", Some(expiry), NOW).await,
        Ok(1),
        "purge_expired(now) must delete the count whose expiry is now: the key counts from 1 again"
    );
    assert_eq!(
        store
            .count_attempt("after-now", Some(expiry + 1), NOW)
            .await,
        Ok(2),
        "purge_expired(now) must keep the count expiring at now + 1"
    );
}

/// Retry attempts count up per key, independently per key, restart after their expiry, and
/// never lose an increment when callers race.
pub async fn check_retry_attempts_count_per_key_and_restart_after_expiry(store: SharedStore) {
    assert_eq!(
        store.count_attempt("k", Some(NOW + 100), NOW).await,
        Ok(1),
        "count_attempt of a new key must count 1"
    );
    assert_eq!(
        store.count_attempt("k", Some(NOW + 100), NOW + 1).await,
        Ok(2),
        "count_attempt of a key whose count is live must add 1"
    );
    assert_eq!(
        store.count_attempt("other", None, NOW).await,
        Ok(1),
        "count_attempt counts per key: a new key must count 1"
    );
    assert_eq!(
        store.count_attempt("k", Some(NOW + 300), NOW + 2).await,
        Ok(3),
        "count_attempt of a key whose count is live must add 1, and store the new expiry"
    );
    // Past the stored expiry the count starts again.
    assert_eq!(
        store.count_attempt("k", Some(NOW + 900), NOW + 300).await,
        Ok(1),
        "count_attempt at the stored expiry must restart the count at 1: a count expiring at E \
         is expired when now >= E (here now = E = the expiry stored by the last call)"
    );
    // A count without expiry never restarts.
    assert_eq!(
        store.count_attempt("other", None, Millis::MAX - 1).await,
        Ok(2),
        "count_attempt of a key whose count has no expiry must never restart it"
    );

    let racers: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .count_attempt("raced", None, NOW)
                    .await
                    .expect("count_attempt")
            })
        })
        .collect();
    let mut counts = Vec::new();
    for racer in racers {
        counts.push(racer.await.expect("a count_attempt task panicked"));
    }
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=50).collect::<Vec<u32>>(),
        "count_attempt must count atomically: every racer got its own count"
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
            Ok(ReserveOutcome::Acquired),
            "{key}: reserve with resume_pending, the gate's action id and input hash must \
             replace the {gate:?} record and acquire the key"
        );
        assert_eq!(
            store.record(key, NOW + 10).await,
            Ok(None),
            "{key}: gate replaced (record must be None once the resume holds the key)"
        );
        assert_eq!(
            store.reserve(&refused[0], NOW + 20).await,
            Ok(ReserveOutcome::InProgress(resume.clone())),
            "{key}: reserve while the resume runs must answer InProgress with the resume's \
             reservation"
        );
        let done = completed(&resume);
        assert_eq!(
            store.settle(&resume, done.clone()).await,
            Ok(()),
            "{key}: settle by the resume must store its record"
        );
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
            Ok(ReserveOutcome::Settled(record)),
            "{key}: reserve with resume_pending must replay a {status:?} record, never replace \
             it (only a pending_approval or requires_human record is replaced)"
        );
    }
}

/// Renewal extends the live reservation only; a stale or foreign token gets false.
pub async fn check_renew_works_only_for_the_live_token(store: SharedStore) {
    let a = reservation("k", "a", NOW + 100);
    assert_eq!(
        store.reserve(&a, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    assert_eq!(
        store.renew(&a, NOW + 1_000).await,
        Ok(true),
        "renew with the key's live token must succeed"
    );
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
        "renew by a caller that never held the key must be false"
    );
    assert_eq!(
        store.reserve(&b, NOW + 1_000).await,
        Ok(ReserveOutcome::Acquired),
        "reserve at the renewed expiry must take the key over (expired when now >= \
         expires_at_ms)"
    );
    assert_eq!(
        store.renew(&a, NOW + 9_000).await,
        Ok(false),
        "renew by an owner whose reservation was taken over must be false"
    );
    let c = reservation("k", "c", NOW + 9_000);
    assert_eq!(
        store.reserve(&c, NOW + 1_001).await,
        Ok(ReserveOutcome::InProgress(b.clone())),
        "a's failed renew must not extend or restore its reservation: b must still hold the key"
    );
    assert_eq!(
        store.settle(&b, completed(&b)).await,
        Ok(()),
        "settle with the live token must succeed"
    );
    assert_eq!(
        store.renew(&b, NOW + 9_000).await,
        Ok(false),
        "renew of a settled key must be false: a settled key has no reservation"
    );
    assert_eq!(
        store.renew(&reservation("unknown", "a", 0), NOW).await,
        Ok(false),
        "renew of a key that holds nothing must be false"
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
        Ok(ReserveOutcome::Settled(replayed)) => assert_eq!(
            output_text(&replayed),
            OUTPUT,
            "reserve must replay the output as stored, its object keys in their order"
        ),
        other => panic!("expected the settled record, got {other:?}"),
    }
    let read = store
        .record("k", NOW + 1)
        .await
        .expect("record")
        .expect("a live record");
    assert_eq!(
        output_text(&read),
        OUTPUT,
        "record must read the output as stored, its object keys in their order"
    );
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
        "release_resume of an unknown id must be false"
    );
    let request = approval("appr_release");
    assert_eq!(
        store.insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "release_resume of a pending record must be false"
    );
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(
        store.update_approval(&approved, 0).await,
        Ok(true),
        "update_approval at the stored version (0 after insert) must apply"
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "release_resume of an approved record not resumed must be false"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&approved, 1, None),
        "release_resume of a record not resumed must change nothing, not even the version",
    );

    assert_eq!(
        store.claim_resume(&id, &first).await,
        Ok(true),
        "claim_resume of an approved record not resumed must succeed"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&approved, 2, Some(&first)),
        "claim_resume must set resumed, keep the claim's time and token, and bump the version",
    );
    assert_eq!(
        store.release_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "release_resume with another claim's token, made at the same time, must be false"
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(true),
        "release_resume with the claim's own token must give the resume back"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&approved, 3, None),
        "release_resume must clear resumed, resumed_at_ms and resume_token, and bump the version",
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "release_resume gives a claim back once: the second call must be false"
    );
    assert_eq!(
        store.update_approval(&approved, 2).await,
        Ok(false),
        "update_approval at the pre-claim version must lose: the claimed version is stale"
    );
    // A later claim, in the same millisecond, survives the first claim's release written again
    // (a dropped call's write finished on a task of its own after the first landed, or the
    // give-back of a claim whose answer was lost).
    let second = ResumeClaim::new(NOW);
    assert_eq!(
        store.claim_resume(&id, &second).await,
        Ok(true),
        "claim_resume after release_resume must succeed: the resume can be claimed again"
    );
    assert_eq!(
        store.release_resume(&id, &first).await,
        Ok(false),
        "release_resume with the first claim's token must not release the second claim, made \
         in the same millisecond"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&approved, 4, Some(&second)),
        "release_resume with the first claim's token must leave the later claim standing",
    );
    // An update keeps the claim (a decision recorded after the resume).
    assert_eq!(
        store.update_approval(&approved, 4).await,
        Ok(true),
        "update_approval at the stored version must apply"
    );
    let updated = read_approval(&store, &id).await;
    assert_eq!(
        resume_of(&updated),
        (true, Some(second.at_ms), Some(second.token.as_str())),
        "update_approval never clears a claimed resume: writing `resumed: false` keeps resumed, \
         resumed_at_ms and resume_token as stored (resumed, resumed_at_ms, resume_token)"
    );
    assert_approval_is(
        &updated,
        &stored(&approved, 5, Some(&second)),
        "update_approval must store the rest of the record as written, at version \
         expected_version + 1",
    );
    assert_eq!(
        store.release_resume(&id, &second).await,
        Ok(true),
        "release_resume with the standing claim's token must give the resume back"
    );

    let denied = ApprovalRecord {
        status: ApprovalStatus::Denied,
        resumed: true,
        resumed_at_ms: Some(NOW),
        resume_token: Some(first.token.clone()),
        ..approval("appr_release_denied")
    };
    assert_eq!(
        store.insert_approval(&denied).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    assert_approval_read(
        store.approval(&denied.approval_id).await,
        &ApprovalRecord {
            version: 0,
            ..denied.clone()
        },
        "insert_approval must store the record as given, at version 0, a claim's time and \
         token included",
    );
    assert_eq!(
        store.release_resume(&denied.approval_id, &first).await,
        Ok(false),
        "release_resume of a denied record must be false: only an approved record is given back"
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
        assert_eq!(
            store.insert_approval(record).await,
            Ok(()),
            "insert_approval of the new id {:?} must succeed",
            record.approval_id
        );
    }
    assert_eq!(
        store
            .claim_resume(&closed[1].approval_id, &ResumeClaim::new(NOW - 5))
            .await,
        Ok(true),
        "claim_resume of an approved record not resumed must succeed"
    );
    assert_eq!(
        store
            .claim_resume(&resumed_late.approval_id, &ResumeClaim::new(NOW))
            .await,
        Ok(true),
        "claim_resume of an approved record not resumed must succeed"
    );
    for record in kept.iter().chain(&closed).chain([&resumed_late]) {
        let read = store
            .approval(&record.approval_id)
            .await
            .expect("approval")
            .unwrap_or_else(|| panic!("approval({:?}) must find the record", record.approval_id));
        assert_eq!(
            read.is_purgeable(NOW, NOW),
            closed.contains(record),
            "{:?}: ApprovalRecord::is_purgeable of the record read back (the Rust rule) must \
             hold exactly for the closed, old records",
            record.approval_id
        );
    }
    assert_eq!(
        store.purge_closed_approvals(NOW - 10, NOW, 100).await,
        Ok(0),
        "purge_closed_approvals must delete nothing created at or after the cutoff"
    );
    for (call, left) in [2, 2, 1, 0].into_iter().enumerate() {
        assert_eq!(
            store.purge_closed_approvals(NOW, NOW, 2).await,
            Ok(left),
            "purge_closed_approvals(max_entries = 2), call {call}: must delete at most 2 of the 5 \
             closed, old records per call until none is left (2, 2, 1, 0), and no open or young \
             one"
        );
    }
    for record in &closed {
        assert_eq!(
            store.approval(&record.approval_id).await,
            Ok(None),
            "purge_closed_approvals must delete {:?}: closed at now and created before the cutoff",
            record.approval_id
        );
    }
    for record in &kept {
        assert_approval_read(
            store.approval(&record.approval_id).await,
            &stored(record, 0, None),
            "purge_closed_approvals must keep (unchanged) a record that is open or created at the \
             cutoff",
        );
    }

    // A decision closes the open request: the next purge takes it.
    let denied = ApprovalRecord {
        status: ApprovalStatus::Denied,
        ..kept[0].clone()
    };
    assert_eq!(
        store.update_approval(&denied, 0).await,
        Ok(true),
        "update_approval at the stored version must apply"
    );
    assert_eq!(
        store.purge_closed_approvals(NOW, NOW, 100).await,
        Ok(1),
        "purge_closed_approvals must delete a record closed by an update since the last purge"
    );
    assert_eq!(
        store.approval(&denied.approval_id).await,
        Ok(None),
        "purge_closed_approvals must delete the record denied by an update"
    );

    // The late resume is kept until the cutoff passes its resume (with the young denial).
    let read = store
        .approval(&resumed_late.approval_id)
        .await
        .expect("approval");
    assert_eq!(
        read.map(|r| r.resumed_at_ms),
        Some(Some(NOW)),
        "purge_closed_approvals must keep an approved record resumed at the cutoff, with its \
         resumed_at_ms"
    );
    assert_eq!(
        store.purge_closed_approvals(NOW + 1, NOW, 100).await,
        Ok(2),
        "purge_closed_approvals with the cutoff past the resume must delete the late resume and \
         the young denial"
    );
    assert_eq!(
        store.approval(&resumed_late.approval_id).await,
        Ok(None),
        "purge_closed_approvals must delete the resume once resumed_at_ms < cutoff"
    );
}

/// Approvals: insert at version 0, read back, compare-and-set updates.
pub async fn check_approval_insert_get_and_versioned_update(store: SharedStore) {
    let id = ApprovalId::trusted("appr_cas");
    assert_eq!(
        store.approval(&id).await,
        Ok(None),
        "approval of an unknown id must be None"
    );
    let request = approval("appr_cas");
    assert_eq!(
        store.insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&request, 0, None),
        "insert_approval must store the record as given, at version 0 (whatever version it \
         carries)",
    );

    let mut voted = request.clone();
    voted.decisions.push(approve("appr_cas"));
    voted.status = ApprovalStatus::Approved;
    assert_eq!(
        store.update_approval(&voted, 0).await,
        Ok(true),
        "update_approval at the stored version (0 after insert) must apply"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&voted, 1, None),
        "update_approval must store the record as written, at version expected_version + 1",
    );

    let mut stale = request.clone();
    stale.status = ApprovalStatus::Denied;
    assert_eq!(
        store.update_approval(&stale, 0).await,
        Ok(false),
        "update_approval at a stale version (0, stored 1) must be false"
    );
    assert_eq!(
        store.update_approval(&stale, 2).await,
        Ok(false),
        "update_approval at a version not reached yet (2, stored 1) must be false"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&voted, 1, None),
        "an update_approval at a version other than the stored one must change nothing",
    );
    assert_eq!(
        store.update_approval(&stale, 1).await,
        Ok(true),
        "update_approval at the stored version must apply"
    );
    assert_approval_read(
        store.approval(&id).await,
        &stored(&stale, 2, None),
        "update_approval must store the record as written, at version expected_version + 1",
    );

    assert_eq!(
        store.update_approval(&approval("appr_missing"), 0).await,
        Ok(false),
        "update_approval of an unknown id must be false"
    );
    assert_eq!(
        store.approval(&ApprovalId::trusted("appr_missing")).await,
        Ok(None),
        "update_approval of an unknown id must not create it"
    );
}

/// Inserting an id that exists fails and leaves the stored record alone.
pub async fn check_duplicate_approval_insert_fails(store: SharedStore) {
    let request = approval("appr_dup");
    assert_eq!(
        store.insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    let impostor = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    let duplicate = store.insert_approval(&impostor).await;
    assert!(
        duplicate.is_err(),
        "insert_approval of an id that exists must fail, got {duplicate:?}"
    );
    assert_approval_read(
        store.approval(&request.approval_id).await,
        &stored(&request, 0, None),
        "a failed insert_approval of an id that exists must leave the stored record alone",
    );
}

/// Duplicate inserts fail without quoting the record or its id.
pub async fn check_store_errors_quote_no_record_contents(store: SharedStore) {
    let request = approval("appr_s3cr3t");
    assert_eq!(
        store.insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    let error = store
        .insert_approval(&request)
        .await
        .expect_err("insert_approval of an id that exists must fail");
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Unavailable(_)),
        "insert_approval of an id that exists must fail with StoreError::Unavailable, got \
         {error:?}"
    );
    for secret in ["s3cr3t", "tenant-1", "policy-hash", "cap:store:test"] {
        assert!(
            !message.contains(secret),
            "a store error must quote no record contents, but the duplicate insert_approval's \
             error quotes {secret:?}: {message}"
        );
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
        assert_eq!(
            store.insert_approval(&request).await,
            Ok(()),
            "insert_approval of a {status:?} record must succeed"
        );
        assert_approval_read(
            store.approval(&request.approval_id).await,
            &stored(&request, 0, None),
            "insert_approval must store a record in every status, read back as given at version 0",
        );
    }
}

/// An approved action is resumed exactly once, and the claim fences stale writers.
pub async fn check_claim_resume_succeeds_once_and_only_when_approved(store: SharedStore) {
    let id = ApprovalId::trusted("appr_resume");
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "claim_resume of an unknown id must be false"
    );
    let request = approval("appr_resume");
    assert_eq!(
        store.insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "claim_resume of a pending record must be false"
    );

    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(
        store.update_approval(&approved, 0).await,
        Ok(true),
        "update_approval at the stored version (0 after insert) must apply"
    );
    let claim = ResumeClaim::new(NOW);
    assert_eq!(
        store.claim_resume(&id, &claim).await,
        Ok(true),
        "claim_resume of an approved record not resumed must succeed"
    );
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "claim_resume succeeds once: a second claim must be false"
    );
    let claimed = read_approval(&store, &id).await;
    assert_eq!(
        resume_of(&claimed),
        (true, Some(claim.at_ms), Some(claim.token.as_str())),
        "claim_resume must store resumed = true with the claim's time and token (resumed, \
         resumed_at_ms, resume_token)"
    );
    assert_eq!(
        claimed.version, 2,
        "claim_resume must bump the version (1 after one update → 2), so that a writer holding \
         the pre-claim version loses"
    );
    assert_approval_is(
        &claimed,
        &stored(&approved, 2, Some(&claim)),
        "claim_resume must change nothing but the resume and the version",
    );

    // A writer that read the record before the claim must lose…
    assert_eq!(
        store.update_approval(&approved, 1).await,
        Ok(false),
        "update_approval at the pre-claim version must lose: claim_resume bumps the version"
    );
    // …and a current writer cannot re-arm the resume by writing `resumed: false`.
    let rewritten = ApprovalRecord {
        resumed: false,
        resumed_at_ms: None,
        resume_token: Some("another claim's token".to_owned()),
        ..approved.clone()
    };
    assert_eq!(
        store.update_approval(&rewritten, 2).await,
        Ok(true),
        "update_approval at the stored version must apply"
    );
    let rewritten_read = read_approval(&store, &id).await;
    assert_eq!(
        resume_of(&rewritten_read),
        (true, Some(claim.at_ms), Some(claim.token.as_str())),
        "update_approval never clears a claimed resume: a current writer cannot re-arm the \
         resume by writing `resumed: false`, nor replace the claim's time or token (only \
         release_resume gives a claim back) (resumed, resumed_at_ms, resume_token)"
    );
    assert_eq!(
        rewritten_read.version, 3,
        "update_approval must store version expected_version + 1"
    );
    assert_approval_is(
        &rewritten_read,
        &stored(&approved, 3, Some(&claim)),
        "update_approval must store the rest of the record as written",
    );
    assert_eq!(
        store.claim_resume(&id, &ResumeClaim::new(NOW)).await,
        Ok(false),
        "claim_resume after an update that wrote `resumed: false` must still fail: the resume \
         was claimed once"
    );

    for status in [
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Revoked,
    ] {
        let other = approval(&format!("appr_{status:?}"));
        assert_eq!(
            store.insert_approval(&other).await,
            Ok(()),
            "insert_approval of a new id must succeed"
        );
        let decided = ApprovalRecord {
            status,
            ..other.clone()
        };
        assert_eq!(
            store.update_approval(&decided, 0).await,
            Ok(true),
            "update_approval at the stored version (0 after insert) must apply"
        );
        assert_eq!(
            store
                .claim_resume(&other.approval_id, &ResumeClaim::new(NOW))
                .await,
            Ok(false),
            "claim_resume of a {status:?} record must fail: only an approved record resumes"
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
        Ok(ReserveOutcome::Acquired),
        "reserve of a free key must acquire it"
    );
    let outcomes = reserve_concurrently(stores, key, "t", count, NOW + 100).await;
    assert_single_winner(&outcomes);
    assert_eq!(
        stores[stores.len() - 1]
            .settle(&crashed, completed(&crashed))
            .await,
        Err(StoreError::Fenced),
        "settle by the crashed owner after the take-over must be Fenced"
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
    for (key, task) in keys.iter().zip(tasks) {
        assert_eq!(
            task.await.expect("a reserve task panicked"),
            Ok(ReserveOutcome::Acquired),
            "{key}: concurrent reserves of different free keys must each acquire their own key"
        );
    }
    let owner = |key: &str| reservation(key, &format!("owner-{key}"), NOW + 100);
    let settled = completed(&owner(&keys[0]));
    assert_eq!(
        store.settle(&owner(&keys[0]), settled.clone()).await,
        Ok(()),
        "settle with the live token must succeed"
    );
    assert_eq!(
        store.release(&owner(&keys[1])).await,
        Ok(()),
        "release by the owner must succeed"
    );
    // A key that is a prefix of another is still another key.
    let prefix = reservation("Action:act_1", "prefix", NOW + 100);
    assert_eq!(
        store.reserve(&prefix, NOW).await,
        Ok(ReserveOutcome::Acquired),
        "reserve of a key that is a prefix of a reserved key must acquire it: it is another key"
    );

    let late = |key: &str| reservation(key, "late", NOW + 1_000);
    assert_eq!(
        store.reserve(&late(&keys[0]), NOW + 1).await,
        Ok(ReserveOutcome::Settled(settled)),
        "{}: reserve must replay the record settled under this key",
        keys[0]
    );
    assert_eq!(
        store.reserve(&late(&keys[1]), NOW + 1).await,
        Ok(ReserveOutcome::Acquired),
        "{}: reserve of the key its owner released must acquire it",
        keys[1]
    );
    for key in &keys[2..] {
        assert_eq!(
            store.reserve(&late(key), NOW + 1).await,
            Ok(ReserveOutcome::InProgress(owner(key))),
            "{key}: a settle or release on other keys must leave this key's reservation alone"
        );
        assert_eq!(
            store.record(key, NOW + 1).await,
            Ok(None),
            "{key}: a settle on another key must store no record under this one"
        );
    }
}

/// Inserts and approves one request on the first of `stores`, then races `claims` resumers
/// spread over `stores`: exactly one wins, and every store reads the claimed record.
pub async fn race_claim_resume(stores: &[SharedStore], claims: usize) {
    let request = approval("appr_race");
    assert_eq!(
        stores[0].insert_approval(&request).await,
        Ok(()),
        "insert_approval of a new id must succeed"
    );
    let approved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        ..request.clone()
    };
    assert_eq!(
        stores[0].update_approval(&approved, 0).await,
        Ok(true),
        "update_approval at the stored version (0 after insert) must apply"
    );
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
    assert_eq!(
        winners.len(),
        1,
        "claim_resume must succeed for exactly one of the racing claims"
    );
    for (index, store) in stores.iter().enumerate() {
        assert_approval_read(
            store.approval(&request.approval_id).await,
            &stored(&approved, 2, winners.first()),
            &format!("the winner's claim is the one kept (read on store {index})"),
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

/// Why a transition at revision 0 of a record just inserted must apply, for the messages of
/// the checks that make one.
const AT_REVISION_0: &str = "insert_transaction must store revision 0, whatever revision the \
                             record carries (the fixtures carry 9)";

/// A transaction record in a line: its id, status and revision.
fn summary(record: &TransactionRecord) -> String {
    format!(
        "{:?}: {:?} at revision {}",
        record.transaction_id, record.status, record.revision
    )
}

/// A transition's outcome in a line (its record summarized).
fn describe(outcome: &Result<TransitionOutcome, StoreError>) -> String {
    match outcome {
        Ok(TransitionOutcome::Applied(record)) => format!("Applied({})", summary(record)),
        Ok(TransitionOutcome::NotFound) => "NotFound".to_owned(),
        Ok(TransitionOutcome::RevisionConflict(record)) => {
            format!("RevisionConflict({})", summary(record))
        }
        Ok(TransitionOutcome::StateConflict(record)) => {
            format!("StateConflict({})", summary(record))
        }
        Err(error) => format!("Err({error:?})"),
    }
}

/// The record a transition applied, or a panic naming `rule` and what happened instead.
#[track_caller]
fn applied(outcome: Result<TransitionOutcome, StoreError>, rule: &str) -> TransactionRecord {
    match outcome {
        Ok(TransitionOutcome::Applied(record)) => record,
        other => panic!("{rule}: expected Applied, got {}", describe(&other)),
    }
}

/// Asserts that `outcome` is `Ok(expected)`: the same outcome, its record equal field by field
/// ([`assert_transaction_is`]). Exactly as strict as comparing the outcomes whole.
#[track_caller]
fn assert_outcome(
    outcome: Result<TransitionOutcome, StoreError>,
    expected: &TransitionOutcome,
    rule: &str,
) {
    use TransitionOutcome as O;
    match (&outcome, expected) {
        (Ok(O::Applied(read)), O::Applied(expected))
        | (Ok(O::RevisionConflict(read)), O::RevisionConflict(expected))
        | (Ok(O::StateConflict(read)), O::StateConflict(expected)) => {
            assert_transaction_is(read, expected, rule);
        }
        (Ok(O::NotFound), O::NotFound) => {}
        _ => panic!(
            "{rule}: expected {}, got {}",
            describe(&Ok(expected.clone())),
            describe(&outcome)
        ),
    }
}

/// Asserts that `read` (what a lookup of one transaction returned) is `Ok(expected)`, a
/// record compared field by field ([`assert_transaction_is`]).
#[track_caller]
fn assert_transaction_read(
    read: Result<Option<TransactionRecord>, StoreError>,
    expected: Option<&TransactionRecord>,
    rule: &str,
) {
    match (read, expected) {
        (Ok(Some(read)), Some(expected)) => assert_transaction_is(&read, expected, rule),
        (Ok(None), None) => {}
        (Ok(Some(read)), None) => panic!("{rule}: expected no record, got {}", summary(&read)),
        (Ok(None), Some(expected)) => {
            panic!("{rule}: expected {}, got no record", summary(expected))
        }
        (Err(error), _) => panic!("{rule}: the lookup failed: {error:?}"),
    }
}

/// Asserts that `read` (what a list of transactions returned) is `Ok(expected)`: the same
/// transaction ids in the same order, then each record equal field by field.
#[track_caller]
fn assert_transaction_list(
    read: Result<Vec<TransactionRecord>, StoreError>,
    expected: &[TransactionRecord],
    rule: &str,
) {
    let read = read.unwrap_or_else(|error| panic!("{rule}: the lookup failed: {error:?}"));
    assert_eq!(
        read.iter()
            .map(|record| &record.transaction_id)
            .collect::<Vec<_>>(),
        expected
            .iter()
            .map(|record| &record.transaction_id)
            .collect::<Vec<_>>(),
        "{rule} (the transaction ids listed, in order)"
    );
    for (read, expected) in read.iter().zip(expected) {
        assert_transaction_is(read, expected, rule);
    }
}

/// Asserts that `read` equals `expected`, field by field, the revision and status first: a
/// failure names `rule` and the field that differs, instead of dumping two whole records.
#[track_caller]
fn assert_transaction_is(read: &TransactionRecord, expected: &TransactionRecord, rule: &str) {
    // Destructured, so a field added to the record is compared here too.
    let TransactionRecord {
        transaction_id,
        action_id,
        capability_id,
        transaction,
        principal_id,
        identity,
        status,
        plan,
        result,
        provider_operation,
        reconciliation_cursor,
        checkpoint_cursor,
        reconcile_after_ms,
        error,
        revision,
        created_at_ms,
        updated_at_ms,
        receipts,
    } = expected;
    let id = transaction_id;
    assert_eq!(
        &read.transaction_id, transaction_id,
        "{rule} ({id:?}: `transaction_id`)"
    );
    assert_eq!(&read.revision, revision, "{rule} ({id:?}: `revision`)");
    assert_eq!(&read.status, status, "{rule} ({id:?}: `status`)");
    assert_eq!(&read.action_id, action_id, "{rule} ({id:?}: `action_id`)");
    assert_eq!(&read.result, result, "{rule} ({id:?}: `result`)");
    assert_eq!(
        &read.provider_operation, provider_operation,
        "{rule} ({id:?}: `provider_operation`)"
    );
    assert_eq!(
        &read.reconciliation_cursor, reconciliation_cursor,
        "{rule} ({id:?}: `reconciliation_cursor`)"
    );
    assert_eq!(
        &read.checkpoint_cursor, checkpoint_cursor,
        "{rule} ({id:?}: `checkpoint_cursor`)"
    );
    assert_eq!(
        &read.reconcile_after_ms, reconcile_after_ms,
        "{rule} ({id:?}: `reconcile_after_ms`)"
    );
    assert_eq!(&read.error, error, "{rule} ({id:?}: `error`)");
    assert_eq!(
        &read.created_at_ms, created_at_ms,
        "{rule} ({id:?}: `created_at_ms`)"
    );
    assert_eq!(
        &read.updated_at_ms, updated_at_ms,
        "{rule} ({id:?}: `updated_at_ms`)"
    );
    assert_eq!(
        &read.capability_id, capability_id,
        "{rule} ({id:?}: `capability_id`)"
    );
    assert_eq!(
        &read.principal_id, principal_id,
        "{rule} ({id:?}: `principal_id`)"
    );
    assert_eq!(&read.identity, identity, "{rule} ({id:?}: `identity`)");
    assert_eq!(
        &read.transaction, transaction,
        "{rule} ({id:?}: `transaction`)"
    );
    assert_eq!(&read.plan, plan, "{rule} ({id:?}: `plan`)");
    assert_eq!(&read.receipts, receipts, "{rule} ({id:?}: `receipts`)");
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
        "insert_transaction of the new id {:?} must be true",
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
    assert_eq!(
        finished.len(),
        7,
        "the fixture covers the 7 finished statuses"
    );
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
    applied(
        store
            .transition(&plan.transaction_id, 0, &committed, NOW - 5)
            .await,
        &format!("transition planned → committed at revision 0 must apply: {AT_REVISION_0}"),
    );
    // A failed record reopened before the cutoff is no longer finished.
    let reopened = TransactionRecord {
        updated_at_ms: NOW - 10,
        ..transaction("txn_reopened", "act_a", S::Failed)
    };
    insert_new(&store, &reopened).await;
    let reopen = Transition::new(&[S::Failed], S::Prepared);
    let reopened = applied(
        store
            .transition(&reopened.transaction_id, 0, &reopen, NOW - 5)
            .await,
        &format!("the failed record reopens (failed → prepared at revision 0): {AT_REVISION_0}"),
    );
    kept.push(reopened);

    assert_eq!(
        store.purge_finished_transactions(NOW - 10, 100).await,
        Ok(0),
        "purge_finished_transactions must delete nothing that finished at or after the cutoff \
         (finished_at_ms < cutoff only)"
    );
    let mut purged = 0;
    loop {
        let pass = store
            .purge_finished_transactions(NOW, 3)
            .await
            .expect("purge");
        assert!(
            pass <= 3,
            "purge_finished_transactions must delete at most max_entries (3) per call"
        );
        purged += pass;
        if pass == 0 {
            break;
        }
    }
    assert_eq!(
        purged,
        finished.len() + 1,
        "purge_finished_transactions must delete the finished records, the expired plan and \
         the committed one, and nothing else"
    );
    for record in &finished {
        assert_transaction_read(
            store.transaction(&record.transaction_id).await,
            None,
            "purge_finished_transactions must delete a record that finished before the cutoff \
             (a plan nobody committed finishes when it expires)",
        );
    }
    assert_transaction_read(
        store.transaction(&plan.transaction_id).await,
        None,
        "purge_finished_transactions must delete a plan committed before the cutoff",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:retention").await,
        None,
        "a purged record's plan id must be unknown to transaction_by_plan",
    );
    for record in &kept {
        assert_transaction_read(
            store.transaction(&record.transaction_id).await,
            Some(record),
            "purge_finished_transactions must keep (unchanged) a record that is not finished, \
             or finished at the cutoff",
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
    assert_transaction_read(
        store.transaction(&id).await,
        None,
        "transaction of an unknown id must be None",
    );
    let record = transaction("txn_insert", "act_a", TransactionProtocolStatus::Committing);
    insert_new(&store, &record).await;
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&inserted(&record)),
        "insert_transaction must store the record as given, but at revision 0, whatever revision \
         it carries (the fixture carries 9)",
    );
    let impostor = TransactionRecord {
        status: TransactionProtocolStatus::Committed,
        action_id: ActionId::trusted("act_impostor"),
        ..record.clone()
    };
    assert_eq!(
        store.insert_transaction(&impostor).await,
        Ok(false),
        "insert_transaction of an id that exists must be false"
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&inserted(&record)),
        "insert_transaction of an id that exists must leave the stored record alone",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_impostor"))
            .await,
        &[],
        "a refused insert_transaction must not list the record under its action",
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
        let error = store
            .insert_transaction(&other)
            .await
            .expect_err("insert_transaction of a new id whose plan id is taken must fail");
        assert_eq!(
            error,
            StoreError::PlanIdTaken,
            "insert_transaction of a new id whose plan id another record answers to must fail \
             with PlanIdTaken"
        );
        let message = error.to_string();
        for value in ["s3cr3t", "txn_", "act_"] {
            assert!(
                !message.contains(value),
                "the PlanIdTaken error must quote no value, but quotes {value:?}: {message}"
            );
        }
        assert_transaction_read(
            store.transaction(&other.transaction_id).await,
            None,
            "an insert_transaction refused with PlanIdTaken must store nothing",
        );
    }
    assert_eq!(
        store.insert_transaction(&plan).await,
        Ok(false),
        "insert_transaction of an existing id must be false, even though its plan id is taken \
         too (the id is checked first)"
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:s3cr3t").await,
        Some(&inserted(&plan)),
        "transaction_by_plan must find the first record that took the plan id",
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
    assert_transaction_read(
        store.transaction(&TransactionId::trusted("txn_3")).await,
        Some(&inserted(&planless)),
        "transaction must read the record with that id, as inserted (at revision 0)",
    );
    assert_transaction_read(
        store.transaction(&TransactionId::trusted("txn_4")).await,
        None,
        "transaction of an unknown id must be None",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:one").await,
        Some(&inserted(&from_plan)),
        "transaction_by_plan must find a record by its plan's plan id",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:two").await,
        Some(&inserted(&from_block)),
        "transaction_by_plan must find a record by the plan id of its transaction block",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:three").await,
        None,
        "transaction_by_plan of an unknown plan id must be None",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:").await,
        None,
        "transaction_by_plan of a prefix of a plan id must be None: it is another plan id",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_a"))
            .await,
        &[
            inserted(&from_plan),
            inserted(&from_block),
            inserted(&lowercase),
        ],
        "transactions_by_action must list every record of the action, in byte order of \
         transaction id (`txn_1`, `txn_B`, `txn_a`), whatever the insert order or the locale",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_b"))
            .await,
        &[inserted(&planless)],
        "transactions_by_action must list only the action's records",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_c"))
            .await,
        &[],
        "transactions_by_action of an action without records must be empty",
    );
}

/// A lookup by a key or id holding a NUL character finds nothing, on every backend: no such
/// row can exist (PostgreSQL's `text` cannot hold one), and a failure would read as a
/// retryable storage error that a caller retries for ever.
pub async fn check_lookups_by_a_selector_with_nul_find_nothing(store: SharedStore) {
    let owner = reservation("k", "a", NOW + 100);
    store.reserve(&owner, NOW).await.expect("reserve");
    store
        .settle(&owner, completed(&owner))
        .await
        .expect("settle with the live token");
    insert_closed_approval(store.as_ref(), "appr_1").await;
    insert_new(&store, &planned("txn_1", "act_a", "plan:one")).await;

    assert_eq!(
        store.record("k\0", NOW).await,
        Ok(None),
        "record of a key holding a NUL must be None, not an error"
    );
    assert_eq!(
        store.reservation("k\0", NOW).await,
        Ok(None),
        "reservation of a key holding a NUL must be None, not an error"
    );
    let nul_approval = ApprovalId::trusted("appr_1\0");
    assert_eq!(
        store.approval(&nul_approval).await,
        Ok(None),
        "approval of an id holding a NUL must be None, not an error"
    );
    let claim = ResumeClaim::new(NOW);
    assert_eq!(
        store.claim_resume(&nul_approval, &claim).await,
        Ok(false),
        "claim_resume of an id holding a NUL must be false, not an error"
    );
    assert_eq!(
        store.release_resume(&nul_approval, &claim).await,
        Ok(false),
        "release_resume of an id holding a NUL must be false, not an error"
    );
    assert_eq!(
        store.update_approval(&approval("appr_1\0"), 0).await,
        Ok(false),
        "update_approval of an id holding a NUL must be false, not an error"
    );
    let nul_transaction = TransactionId::trusted("txn_1\0");
    assert_transaction_read(
        store.transaction(&nul_transaction).await,
        None,
        "transaction of an id holding a NUL must be None, not an error",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:one\0").await,
        None,
        "transaction_by_plan of a plan id holding a NUL must be None, not an error",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_a\0"))
            .await,
        &[],
        "transactions_by_action of an action id holding a NUL must be empty, not an error",
    );
    assert_outcome(
        store
            .transition(&nul_transaction, 0, &plan_claim("act_commit"), NOW)
            .await,
        &TransitionOutcome::NotFound,
        "transition of an id holding a NUL must be NotFound, not an error",
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
    assert_outcome(
        store.transition(&id, 0, &unknown, NOW + 10).await,
        &TransitionOutcome::Applied(after_unknown.clone()),
        &format!(
            "transition at the stored revision from an expected status must apply as \
             Transition::apply does: write every field it names, bump the revision by 1, stamp \
             updated_at_ms and append the receipt of the status entered; {AT_REVISION_0}"
        ),
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&after_unknown),
        "transaction must read the record the transition applied",
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
    assert_outcome(
        store.transition(&id, 1, &reconciling, NOW + 20).await,
        &TransitionOutcome::Applied(after_reconciling.clone()),
        "a second transition at the new revision (1) must apply: result, error and \
         reconcile_after_ms cleared, operation and cursors kept, revision 2",
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&after_reconciling),
        "transaction must read the record the transition applied",
    );
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
    let current = applied(
        store.transition(&id, 0, &commit, NOW + 1).await,
        &format!("the first transition at revision 0 must apply: {AT_REVISION_0}"),
    );
    let reopen = Transition::new(
        &[TransactionProtocolStatus::Committed],
        TransactionProtocolStatus::Prepared,
    );
    for stale in [0, 2, u64::MAX] {
        assert_outcome(
            store.transition(&id, stale, &reopen, NOW + 2).await,
            &TransitionOutcome::RevisionConflict(current.clone()),
            &format!(
                "transition at revision {stale}, not the stored 1, must be a RevisionConflict \
                 carrying the current record"
            ),
        );
    }
    assert_outcome(
        store.transition(&id, 0, &commit, NOW + 2).await,
        &TransitionOutcome::RevisionConflict(current.clone()),
        "stale and in the wrong state: the revision conflict wins",
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&current),
        "a transition that lost on the revision must change nothing",
    );
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
    assert_outcome(
        store.transition(&id, 0, &reconcile, NOW + 1).await,
        &TransitionOutcome::StateConflict(inserted(&record)),
        &format!(
            "transition at the stored revision from a status it does not expect must be a \
             StateConflict carrying the unchanged record; {AT_REVISION_0}"
        ),
    );
    assert_outcome(
        store
            .transition(
                &id,
                0,
                &Transition::new(&[], TransactionProtocolStatus::Failed),
                NOW + 1,
            )
            .await,
        &TransitionOutcome::StateConflict(inserted(&record)),
        "transition with an empty expected list must be a StateConflict: it matches nothing",
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&inserted(&record)),
        "a transition refused with StateConflict must change nothing, not even the revision",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_b"))
            .await,
        &[],
        "a transition refused with StateConflict must not rebind the record",
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
    assert_outcome(
        store
            .transition(&id, 0, &plan_claim("act_commit"), NOW)
            .await,
        &TransitionOutcome::NotFound,
        "transition of an id that holds nothing must be NotFound (another id that extends it \
         does not count)",
    );
    assert_transaction_read(
        store.transaction(&id).await,
        None,
        "a transition that was NotFound must create nothing",
    );
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
    applied(
        store.transition(&id, 0, &checkpoint, NOW + 1).await,
        &format!("a checkpoint (prepared → prepared) at revision 0 must apply: {AT_REVISION_0}"),
    );
    let bare = Transition::new(
        &[TransactionProtocolStatus::Prepared],
        TransactionProtocolStatus::Committing,
    );
    let after_bare = applied(
        store.transition(&id, 1, &bare, NOW + 2).await,
        "transition at the stored revision (1) from an expected status must apply",
    );
    assert_eq!(
        after_bare.provider_operation,
        Some(operation("op-1")),
        "a transition without a provider operation must keep the stored one"
    );
    assert_eq!(
        after_bare.reconciliation_cursor.as_deref(),
        Some("cursor-1"),
        "a transition without a reconciliation cursor must keep the stored one"
    );
    assert_eq!(
        after_bare.checkpoint_cursor.as_deref(),
        Some("cp-1"),
        "a transition without a checkpoint cursor must keep the stored one"
    );
    assert_eq!(
        after_bare.result, None,
        "a transition without a result must clear the stored one (result is always overwritten)"
    );
    assert_eq!(
        after_bare.error, None,
        "a transition without an error must clear the stored one (error is always overwritten)"
    );
    assert_eq!(
        after_bare.reconcile_after_ms, None,
        "a transition without reconcile_after_ms must clear the stored one (always overwritten)"
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&after_bare),
        "transaction must read the record the transition applied",
    );

    let replaced = Transition {
        provider_operation: Some(operation("op-2")),
        reconciliation_cursor: Some("cursor-2".to_owned()),
        ..Transition::new(
            &[TransactionProtocolStatus::Committing],
            TransactionProtocolStatus::Committing,
        )
    };
    let after_replace = applied(
        store.transition(&id, 2, &replaced, NOW + 3).await,
        "transition at the stored revision (2) from an expected status must apply",
    );
    assert_eq!(
        after_replace.provider_operation,
        Some(operation("op-2")),
        "a transition naming a provider operation must replace the stored one"
    );
    assert_eq!(
        after_replace.reconciliation_cursor.as_deref(),
        Some("cursor-2"),
        "a transition naming a reconciliation cursor must replace the stored one"
    );
    // A pending reconciliation's cursor replaces the resume cursor, never the handler's.
    assert_eq!(
        after_replace.checkpoint_cursor.as_deref(),
        Some("cp-1"),
        "a reconciliation cursor must not replace the checkpoint cursor"
    );
    assert_eq!(
        after_replace.revision, 3,
        "every applied transition must bump the revision by 1"
    );
    assert_transaction_read(
        store.transaction(&id).await,
        Some(&after_replace),
        "transaction must read the record the transition applied",
    );
}

/// A claimed plan belongs to its commit action from then on; a transition without a rebind
/// keeps the owner. The plan id stays the record's.
pub async fn check_transition_rebinds_the_action(store: SharedStore) {
    let id = TransactionId::trusted("txn_rebind");
    let plan = planned("txn_rebind", "act_plan", "plan:rebind");
    insert_new(&store, &plan).await;
    let claimed = applied(
        store
            .transition(&id, 0, &plan_claim("act_commit"), NOW + 1)
            .await,
        &format!("the plan claim must apply (planned → committing at revision 0): {AT_REVISION_0}"),
    );
    assert_eq!(
        claimed.action_id,
        ActionId::trusted("act_commit"),
        "a transition with rebind_action must rebind the record to that action"
    );
    assert_eq!(
        claimed.plan, plan.plan,
        "a transition must keep the record's plan"
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_plan"))
            .await,
        &[],
        "a rebound record must no longer be listed under its former action",
    );
    assert_transaction_list(
        store
            .transactions_by_action(&ActionId::trusted("act_commit"))
            .await,
        std::slice::from_ref(&claimed),
        "a rebound record must be listed under its new action",
    );
    assert_transaction_read(
        store.transaction_by_plan("plan:rebind").await,
        Some(&claimed),
        "a rebound record must keep its plan id",
    );
    let committed = Transition::new(
        &[TransactionProtocolStatus::Committing],
        TransactionProtocolStatus::Committed,
    );
    let done = applied(
        store.transition(&id, 1, &committed, NOW + 2).await,
        "transition at the stored revision (1) from an expected status must apply",
    );
    assert_eq!(
        done.action_id,
        ActionId::trusted("act_commit"),
        "a transition without rebind_action must keep the record's action"
    );
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
            other => panic!(
                "step {revision} must apply (at revision {revision}; {AT_REVISION_0}), got {}",
                describe(&other)
            ),
        }
    }
    let stored = store
        .transaction(&id)
        .await
        .expect("read the record")
        .expect("the record exists");
    assert_transaction_is(
        &stored,
        last_applied.as_ref().expect("the steps applied"),
        "transaction must read the record the last transition applied",
    );
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
        ],
        "every transition into a new status must append that status's receipt, once: a \
         checkpoint in the same status, or a return to a status already receipted, appends none"
    );
    assert!(
        TransactionReceipt::chain_is_intact(receipts),
        "the stored receipts must form an intact hash chain, each linked to the one before: \
         {receipts:#?}"
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
        ],
        "each receipt must be stamped when its status was first entered, by the action owning \
         the transaction then, and never restamped (recorded_at_ms, action_id)"
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
    assert_transaction_list(
        store.recoverable().await,
        &[],
        "recoverable of an empty store must be empty",
    );
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
    assert_transaction_list(
        store.recoverable().await,
        &expected,
        "recoverable must list exactly the planned, prepared, committing, compensating, \
         outcome-unknown and reconciling records, in byte order of transaction id",
    );

    // A recoverable record that settles leaves the list; a failed one reopened joins it.
    let committing = expected
        .iter()
        .position(|record| record.status == S::Committing)
        .expect("a committing fixture");
    let settled = expected.remove(committing);
    let settle = Transition::new(&[S::Committing], S::Committed);
    applied(
        store
            .transition(&settled.transaction_id, 0, &settle, NOW + 1)
            .await,
        &format!("transition committing → committed at revision 0 must apply: {AT_REVISION_0}"),
    );
    let failed = TransactionProtocolStatus::ALL
        .iter()
        .position(|status| *status == S::Failed)
        .expect("failed is a status");
    let reopen = Transition::new(&[S::Failed], S::Prepared);
    let reopened = applied(
        store
            .transition(
                &TransactionId::trusted(format!("txn_{failed:02}")),
                0,
                &reopen,
                NOW + 1,
            )
            .await,
        &format!("a failed record reopens (failed → prepared at revision 0): {AT_REVISION_0}"),
    );
    expected.push(reopened);
    assert_transaction_list(
        store.recoverable().await,
        &by_id(expected),
        "recoverable must follow the records' statuses: a record committed leaves the list, a \
         failed record reopened joins it",
    );
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
            other => panic!(
                "{name}: a claim neither applied nor lost on the revision: {} ({AT_REVISION_0}, \
                 and the revision is checked before the status)",
                describe(&Ok(other))
            ),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "{name}: exactly one claim must apply ({AT_REVISION_0})"
    );
    let winner = winners.remove(0);
    assert_eq!(
        (winner.status, winner.revision),
        (TransactionProtocolStatus::Committing, 1),
        "{name}: the winning claim must leave the plan committing at revision 1 (status, revision)"
    );
    for loser in &losers {
        assert_transaction_is(
            loser,
            &winner,
            &format!("{name}: a loser saw an unclaimed or re-claimed plan"),
        );
    }
    for (index, store) in stores.iter().enumerate() {
        assert_transaction_read(
            store.transaction(&id).await,
            Some(&winner),
            &format!("{name}: store {index} must read the winner's record"),
        );
        assert_eq!(
            store
                .transactions_by_action(&winner.action_id)
                .await
                .map(|records| records.len()),
            Ok(1),
            "{name}: store {index} must list the claimed plan once under the winner's action"
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
            check_purge_expired_deletes_entries_expiring_at_now,
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
