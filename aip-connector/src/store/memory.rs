//! [`MemoryStore`]: every family in a process-local map, for tests and demos.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aip_connector_core::ids::ApprovalId;
use async_trait::async_trait;

use super::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, Claim, IdempotencyRecord, IdempotencyStore,
    KeyEntry, Millis, Reservation, ReserveOutcome, StoreError, claim, record_is_live,
};

/// A store that lives in this process's memory and is lost with it.
///
/// Clones share the same state. Each record family sits behind its own [`Mutex`], held only for
/// the duration of one synchronous map operation (never across an `.await`), so every trait
/// method is one atomic step.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    families: Arc<Families>,
}

/// The record families, each behind its own lock.
#[derive(Debug, Default)]
struct Families {
    /// Scoped idempotency key → reservation or settled record.
    idempotency: Mutex<HashMap<String, KeyEntry>>,
    /// Approval id → approval record.
    approvals: Mutex<HashMap<ApprovalId, ApprovalRecord>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The idempotency family, locked; a poisoned lock is recovered because every mutation
    /// below is a single map operation that cannot leave an entry half-written.
    fn idempotency(&self) -> MutexGuard<'_, HashMap<String, KeyEntry>> {
        self.families
            .idempotency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The approval family, locked (poison recovered for the same reason).
    fn approvals(&self) -> MutexGuard<'_, HashMap<ApprovalId, ApprovalRecord>> {
        self.families
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `entry` is a reservation carrying the caller's fencing token.
fn holds_token(entry: &KeyEntry, reservation: &Reservation) -> bool {
    matches!(entry, KeyEntry::Reserved(live) if live.reservation_id == reservation.reservation_id)
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        let mut entries = self.idempotency();
        match claim(entries.get(&reservation.key), reservation, now) {
            Claim::Take => {
                entries.insert(
                    reservation.key.clone(),
                    KeyEntry::Reserved(reservation.clone()),
                );
                Ok(ReserveOutcome::Acquired)
            }
            Claim::Refuse(outcome) => Ok(outcome),
        }
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: &IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let mut entries = self.idempotency();
        match entries.get_mut(&reservation.key) {
            Some(entry) if holds_token(entry, reservation) => {
                *entry = KeyEntry::Settled(Box::new(record.clone()));
                Ok(())
            }
            _ => Err(StoreError::Fenced),
        }
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        let mut entries = self.idempotency();
        if let Entry::Occupied(entry) = entries.entry(reservation.key.clone())
            && holds_token(entry.get(), reservation)
        {
            entry.remove();
        }
        Ok(())
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        let mut entries = self.idempotency();
        match entries.get_mut(&reservation.key) {
            Some(KeyEntry::Reserved(live)) if live.reservation_id == reservation.reservation_id => {
                live.expires_at_ms = expires_at_ms;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn record(
        &self,
        key: &str,
        now: Millis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let entries = self.idempotency();
        Ok(match entries.get(key) {
            Some(KeyEntry::Settled(record)) if record_is_live(record, now) => {
                Some(record.as_ref().clone())
            }
            _ => None,
        })
    }
}

#[async_trait]
impl ApprovalStore for MemoryStore {
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        let mut approvals = self.approvals();
        match approvals.entry(record.approval_id.clone()) {
            Entry::Occupied(_) => Err(StoreError::Unavailable(
                "an approval record with this id already exists".to_owned(),
            )),
            Entry::Vacant(slot) => {
                slot.insert(ApprovalRecord {
                    version: 0,
                    ..record.clone()
                });
                Ok(())
            }
        }
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self.approvals().get(id).cloned())
    }

    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let mut approvals = self.approvals();
        let Some(stored) = approvals.get_mut(&record.approval_id) else {
            return Ok(false);
        };
        let Some(next_version) = expected_version.checked_add(1) else {
            return Ok(false);
        };
        if stored.version != expected_version {
            return Ok(false);
        }
        // `resumed` only ever goes from false to true: an update cannot re-arm a resume.
        let resumed = stored.resumed || record.resumed;
        *stored = ApprovalRecord {
            version: next_version,
            resumed,
            ..record.clone()
        };
        Ok(true)
    }

    async fn claim_resume(&self, id: &ApprovalId) -> Result<bool, StoreError> {
        let mut approvals = self.approvals();
        match approvals.get_mut(id) {
            Some(stored) if stored.status == ApprovalStatus::Approved && !stored.resumed => {
                stored.resumed = true;
                // The claim is an update: a writer holding the pre-claim version must lose.
                stored.version = stored.version.saturating_add(1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use aip_connector_core::ids::ActionId;

    use super::*;

    fn reservation(key: &str, token: &str) -> Reservation {
        Reservation {
            key: key.to_owned(),
            reservation_id: token.to_owned(),
            action_id: ActionId::trusted("act_1"),
            input_hash: "h".to_owned(),
            resume_pending: false,
            expires_at_ms: 1_000,
        }
    }

    /// The host hands clones of one store to several tasks; they must see one state.
    #[tokio::test]
    async fn clones_share_state() {
        let store = MemoryStore::new();
        let clone = store.clone();
        let first = reservation("Action:act_1:k", "r1");
        assert_eq!(clone.reserve(&first, 0).await, Ok(ReserveOutcome::Acquired));
        assert_eq!(
            store.reserve(&reservation("Action:act_1:k", "r2"), 0).await,
            Ok(ReserveOutcome::InProgress(first))
        );
    }

    /// Separate stores must not share state (a default store starts empty).
    #[tokio::test]
    async fn separate_stores_are_independent() {
        let one = MemoryStore::default();
        let other = MemoryStore::default();
        let claim = reservation("Action:act_1:k", "r1");
        assert_eq!(one.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        assert_eq!(other.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
    }
}
