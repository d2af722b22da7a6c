//! [`MemoryStore`]: every family in a process-local map, for tests and demos.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aip_connector_core::ids::{ActionId, ApprovalId, TransactionId};
use async_trait::async_trait;
use hashbrown::{HashTable, hash_table};

use crate::cache_line::CacheAligned;

use super::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, Claim, IdempotencyRecord, IdempotencyStore,
    Millis, Purged, Reservation, ReserveOutcome, ResumeClaim, StoreError, TransactionRecord,
    TransactionStore, Transition, TransitionOutcome, claim_settled, live_at, record_is_live,
    stored_under,
};

/// A store that lives in this process's memory and is lost with it.
///
/// Expired idempotency records, and reservations expired for over 10 minutes, are dropped when
/// their table would otherwise grow, so a store whose contracts set an idempotency TTL stays
/// bounded by its live keys; [`IdempotencyStore::purge_expired`] drops expired records (and
/// retry-attempt counts) at once. Records without a TTL are kept for the life of the store;
/// retry-attempt counts, approvals and transactions stay until purged.
///
/// Clones share the same state. Each record family sits behind its own [`Mutex`], held only for
/// the duration of one synchronous map operation (never across an `.await`), so every trait
/// method is one atomic step. Idempotency keys, touched twice by every keyed call, are spread
/// over several maps by a hash of the key, each behind its own lock, so concurrent calls rarely
/// wait for each other; every operation on one key still takes exactly one lock.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    families: Arc<Families>,
}

/// Scoped idempotency keys and their entries, in one shard.
type KeyTable = HashTable<Slot>;

/// How long past its expiry a reservation nobody took over survives the sweep of a growing
/// table (the host's reservations already outlive their call's deadline by a minute).
const EXPIRED_RESERVATION_KEPT_MS: Millis = 10 * 60_000;

/// A table entry, with what the table reads without following the entry's pointer. The entry
/// carries its own key (a reservation's or a record's `key`), so the table stores no second copy
/// of it; a lookup reuses the hash [`KeyShards::locate`] computed to pick the shard, a growing
/// table moves entries by their stored hash, and the sweep of expired entries reads the expiry
/// kept here.
#[derive(Debug)]
struct Slot {
    /// The key's hash.
    hash: u64,
    /// The entry's expiry ([`Millis::MAX`] for a record kept forever): it binds its key while
    /// this is after `now`. A reservation's expiry is kept here only.
    live_until_ms: Millis,
    entry: Held,
}

impl Slot {
    /// A slot for a reservation, held until `expires_at_ms`.
    fn reserved(hash: u64, expires_at_ms: Millis, held: HeldReservation) -> Self {
        Slot {
            hash,
            live_until_ms: expires_at_ms,
            entry: Held::Reserved(held),
        }
    }

    /// Whether the entry still binds its key at `now`.
    fn is_live(&self, now: Millis) -> bool {
        live_at(self.live_until_ms, now)
    }

    /// A slot for a settled record.
    fn settled(hash: u64, record: Box<IdempotencyRecord>) -> Self {
        Slot {
            hash,
            live_until_ms: record.expires_at_ms.unwrap_or(Millis::MAX),
            entry: Held::Settled(record),
        }
    }
}

/// What a key holds in this store: a live claim or a settled record (never both).
#[derive(Debug)]
enum Held {
    Reserved(HeldReservation),
    Settled(Box<IdempotencyRecord>),
}

impl Held {
    /// The key the entry is stored under.
    fn key(&self) -> &[u8] {
        match self {
            Held::Reserved(reservation) => reservation.part(KEY),
            Held::Settled(record) => record.key.as_bytes(),
        }
    }
}

/// A reservation as this store keeps it while its owner runs: its strings in one allocation,
/// behind a header of their lengths (its expiry is the slot's).
///
/// Every keyed call stores one and frees it when the call settles. As a [`Reservation`] that
/// was up to six allocations and six frees (the box and five strings), interleaved with the
/// records that stay; as one block it is one of each.
struct HeldReservation(Box<[u8]>);

/// The parts of a [`HeldReservation`], in order.
const KEY: usize = 0;
const TOKEN: usize = 1;
const ACTION_ID: usize = 2;
const TENANT_ID: usize = 3;
const INPUT_HASH: usize = 4;

/// Bytes before the parts: `resume_pending`, whether a tenant is present, then the lengths of
/// the parts before the last as little-endian `u32`s (the last part runs to the end).
const HELD_HEADER: usize = 2 + INPUT_HASH * 4;

impl HeldReservation {
    fn new(reservation: &Reservation) -> Self {
        let parts = [
            reservation.key.as_bytes(),
            reservation.reservation_id.as_bytes(),
            reservation.action_id.as_str().as_bytes(),
            reservation
                .tenant_id
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
            reservation.input_hash.as_bytes(),
        ];
        let mut block =
            Vec::with_capacity(HELD_HEADER + parts.iter().map(|p| p.len()).sum::<usize>());
        block.push(u8::from(reservation.resume_pending));
        block.push(u8::from(reservation.tenant_id.is_some()));
        for part in &parts[..INPUT_HASH] {
            // No part comes near 4 GiB: the host refuses raw keys above
            // `HostLimits::max_idempotency_key_bytes` and ids above `HostLimits::max_id_bytes`,
            // and tokens and hashes are short. A longer part from another caller of the store
            // would wrap its length and read back garbled rather than overflow.
            block.extend_from_slice(&(part.len() as u32).to_le_bytes());
        }
        for part in parts {
            block.extend_from_slice(part);
        }
        HeldReservation(block.into_boxed_slice())
    }

    /// The length of part `index` (< [`INPUT_HASH`]) from the header.
    fn len_of(&self, index: usize) -> usize {
        let at = 2 + index * 4;
        let mut bytes = [0; 4];
        bytes.copy_from_slice(&self.0[at..at + 4]);
        u32::from_le_bytes(bytes) as usize
    }

    /// Part `index` of the block.
    fn part(&self, index: usize) -> &[u8] {
        let start = HELD_HEADER + (0..index).map(|i| self.len_of(i)).sum::<usize>();
        let end = if index == INPUT_HASH {
            self.0.len()
        } else {
            start + self.len_of(index)
        };
        &self.0[start..end]
    }

    /// Part `index` as text (every part was a `str`).
    fn text(&self, index: usize) -> String {
        String::from_utf8_lossy(self.part(index)).into_owned()
    }

    /// The reservation again, with the slot's expiry (for an `InProgress` answer, which is rare).
    fn to_reservation(&self, expires_at_ms: Millis) -> Reservation {
        Reservation {
            key: self.text(KEY),
            reservation_id: self.text(TOKEN),
            action_id: aip_connector_core::ids::ActionId::trusted(self.text(ACTION_ID)),
            tenant_id: (self.0[1] != 0).then(|| self.text(TENANT_ID)),
            input_hash: self.text(INPUT_HASH),
            resume_pending: self.0[0] != 0,
            expires_at_ms,
        }
    }
}

impl std::fmt::Debug for HeldReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldReservation")
            .field("key", &self.text(KEY))
            .field("reservation_id", &self.text(TOKEN))
            .field("action_id", &self.text(ACTION_ID))
            .finish_non_exhaustive()
    }
}

/// How many tables the idempotency keys are spread over.
const KEY_SHARDS: usize = 16;

/// The idempotency keys, spread over [`KEY_SHARDS`] tables by their hash, each behind its own
/// lock: every keyed call touches its key twice, and concurrent calls rarely share a shard.
///
/// One hash per operation picks the shard and finds the entry. foldhash (randomly seeded per
/// store) costs a fraction of SipHash on keys of this length, and the seed keeps callers from
/// predicting collisions.
#[derive(Debug, Default)]
struct KeyShards {
    hasher: foldhash::quality::RandomState,
    shards: [CacheAligned<Mutex<KeyTable>>; KEY_SHARDS],
}

/// Bits of a key's hash that pick its shard: bits 50 to 53. hashbrown indexes buckets with the
/// low bits and tags them with the top 7, so a shard's keys still differ in both.
const SHARD_SHIFT: u32 = 50;

impl KeyShards {
    /// The hash of `key` and its shard, locked; a poisoned lock is recovered because every
    /// mutation below is a single table operation that cannot leave an entry half-written.
    fn locate(&self, key: &str) -> (u64, MutexGuard<'_, KeyTable>) {
        let hash = self.hasher.hash_one(key);
        let shard = shard_of(hash);
        let table = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (hash, table)
    }
}

/// The hash a table entry is stored under (what a table asks for when it grows).
fn stored_hash(slot: &Slot) -> u64 {
    slot.hash
}

/// Whether a table entry is the one stored under `key` (whose hash is `hash`).
fn is_key<'k>(hash: u64, key: &'k str) -> impl Fn(&Slot) -> bool + 'k {
    move |slot| slot.hash == hash && slot.entry.key() == key.as_bytes()
}

/// The shard of a key hash (see [`SHARD_SHIFT`]).
fn shard_of(hash: u64) -> usize {
    // Masked to four bits, so the narrowing cannot truncate.
    ((hash >> SHARD_SHIFT) as usize) & (KEY_SHARDS - 1)
}

/// The record families, each behind its own lock.
#[derive(Debug, Default)]
struct Families {
    /// Scoped idempotency key → reservation or settled record.
    idempotency: KeyShards,
    /// Approval id → approval record.
    approvals: Mutex<HashMap<ApprovalId, ApprovalRecord>>,
    /// Scoped idempotency key → retryable failures counted, and when the count expires.
    attempts: Mutex<HashMap<String, (u32, Option<Millis>)>>,
    /// Transaction records and their plan-id index.
    transactions: Mutex<Transactions>,
}

/// Transaction records, with the plan-id index that keeps plan ids unique.
#[derive(Debug, Default)]
struct Transactions {
    /// Transaction id → record.
    by_id: HashMap<TransactionId, TransactionRecord>,
    /// Plan id → the transaction that answers to it. A record's plan id never changes (no
    /// transition touches the plan or the transaction block), so the index is written once.
    by_plan: HashMap<String, TransactionId>,
}

impl Transactions {
    /// The records matching `keep`, in transaction-id order (as the SQL backends list them).
    fn matching(&self, keep: impl Fn(&TransactionRecord) -> bool) -> Vec<TransactionRecord> {
        let mut records: Vec<TransactionRecord> = self
            .by_id
            .values()
            .filter(|record| keep(record))
            .cloned()
            .collect();
        records.sort_by(|a, b| a.transaction_id.cmp(&b.transaction_id));
        records
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The approval family, locked (poison recovered: every mutation below is a single map
    /// operation that cannot leave a record half-written).
    fn approvals(&self) -> MutexGuard<'_, HashMap<ApprovalId, ApprovalRecord>> {
        self.families
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The transaction family, locked (poison recovered: every mutation below completes its
    /// checks before it writes, and writes the record and its index without a fallible step).
    fn transactions(&self) -> MutexGuard<'_, Transactions> {
        self.families
            .transactions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `entry` is a reservation carrying the caller's fencing token.
fn holds_token(entry: &Held, reservation: &Reservation) -> bool {
    matches!(entry, Held::Reserved(live) if live.part(TOKEN) == reservation.reservation_id.as_bytes())
}

/// What [`IdempotencyStore::reserve`] does with the slot found under the key: the rules of
/// `claim` in the parent module, applied to this store's form of a reservation.
fn claim_slot(slot: Option<&Slot>, reservation: &Reservation, now: Millis) -> Claim {
    match slot {
        None => Claim::Take,
        Some(Slot {
            entry: Held::Settled(record),
            ..
        }) => claim_settled(record, reservation, now),
        Some(
            slot @ Slot {
                entry: Held::Reserved(current),
                ..
            },
        ) if slot.is_live(now) => Claim::Refuse(ReserveOutcome::InProgress(
            current.to_reservation(slot.live_until_ms),
        )),
        Some(_) => Claim::Take,
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        // Allocated before the lock is taken (and wasted on the rare refusal): another worker
        // waiting for this shard should not wait for the allocator too.
        let held = HeldReservation::new(reservation);
        let (hash, mut table) = self.families.idempotency.locate(&reservation.key);
        if table.len() == table.capacity() {
            // The table would grow: drop what has expired first, so a long-running store holds
            // its live keys and a bounded share of expired ones, not every key it ever saw. An
            // expired reservation nobody took over is kept a while longer: its owner may still
            // settle it (as on the SQL stores, which keep it until taken over), and dropping it
            // would fence that settle and lose the owner's result.
            table.retain(|slot| match slot.entry {
                Held::Reserved(_) => live_at(
                    slot.live_until_ms
                        .saturating_add(EXPIRED_RESERVATION_KEPT_MS),
                    now,
                ),
                Held::Settled(_) => slot.is_live(now),
            });
            // If that freed less than a quarter, grow now: a sweep then comes at most once per
            // quarter of the capacity inserted, which keeps it O(1) per insert amortized.
            let capacity = table.capacity();
            if table.len() > capacity - capacity / 4 {
                table.reserve(capacity / 4 + 1, stored_hash);
            }
        }
        // One probe for the check and the write (a reservation usually takes a new key).
        let entry = table.entry(hash, is_key(hash, &reservation.key), stored_hash);
        let current = match &entry {
            hash_table::Entry::Occupied(occupied) => Some(occupied.get()),
            hash_table::Entry::Vacant(_) => None,
        };
        let claimed = Slot::reserved(hash, reservation.expires_at_ms, held);
        let replaced = match claim_slot(current, reservation, now) {
            Claim::Take => match entry {
                hash_table::Entry::Occupied(mut occupied) => {
                    Some(std::mem::replace(occupied.get_mut(), claimed))
                }
                hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(claimed);
                    None
                }
            },
            Claim::Refuse(outcome) => return Ok(outcome),
        };
        // An expired entry taken over is freed once the shard is unlocked.
        drop(table);
        drop(replaced);
        Ok(ReserveOutcome::Acquired)
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let record = stored_under(record, reservation);
        let settled = Box::new(record);
        let (hash, mut table) = self.families.idempotency.locate(&reservation.key);
        let reserved = match table.find_mut(hash, is_key(hash, &reservation.key)) {
            Some(slot) if holds_token(&slot.entry, reservation) => {
                std::mem::replace(slot, Slot::settled(hash, settled))
            }
            _ => return Err(StoreError::Fenced),
        };
        // The reservation is freed once the shard is unlocked (as is a fenced record, above).
        drop(table);
        drop(reserved);
        Ok(())
    }

    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError> {
        let mut attempts = self
            .families
            .attempts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = attempts.entry(key.to_owned()).or_insert((0, expires_at_ms));
        if entry.1.is_some_and(|at| !live_at(at, now)) {
            entry.0 = 0;
        }
        entry.0 = entry.0.saturating_add(1);
        entry.1 = expires_at_ms;
        Ok(entry.0)
    }

    async fn purge_expired(&self, now: Millis, max_entries: usize) -> Result<Purged, StoreError> {
        let mut purged = Purged::default();
        for shard in &self.families.idempotency.shards {
            if purged.records >= max_entries {
                break;
            }
            // Taken out under the lock, freed after it (as everywhere in this store).
            let mut expired = Vec::new();
            let mut table = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let mut entries = table
                .extract_if(|slot| matches!(slot.entry, Held::Settled(_)) && !slot.is_live(now));
            while purged.records + expired.len() < max_entries {
                let Some(slot) = entries.next() else { break };
                expired.push(slot);
            }
            drop(entries);
            drop(table);
            purged.records += expired.len();
        }
        let mut attempts = self
            .families
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        attempts.retain(|_, (_, expires_at_ms)| {
            let expired = purged.attempt_counts < max_entries
                && expires_at_ms.is_some_and(|at| !live_at(at, now));
            purged.attempt_counts += usize::from(expired);
            !expired
        });
        Ok(purged)
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        let (hash, mut table) = self.families.idempotency.locate(&reservation.key);
        if let Ok(entry) = table.find_entry(hash, is_key(hash, &reservation.key))
            && holds_token(&entry.get().entry, reservation)
        {
            entry.remove();
        }
        Ok(())
    }

    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError> {
        let key = record.key.as_str();
        let (hash, mut table) = self.families.idempotency.locate(key);
        let Ok(entry) = table.find_entry(hash, is_key(hash, key)) else {
            return Ok(false);
        };
        if !matches!(&entry.get().entry, Held::Settled(stored) if **stored == *record) {
            return Ok(false);
        }
        let forgotten = entry.remove().0;
        // Freed once the shard is unlocked.
        drop(table);
        drop(forgotten);
        Ok(true)
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        let (hash, mut table) = self.families.idempotency.locate(&reservation.key);
        match table.find_mut(hash, is_key(hash, &reservation.key)) {
            Some(slot) if holds_token(&slot.entry, reservation) => {
                slot.live_until_ms = expires_at_ms;
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
        let (hash, table) = self.families.idempotency.locate(key);
        Ok(match table.find(hash, is_key(hash, key)) {
            Some(Slot {
                entry: Held::Settled(record),
                ..
            }) if record_is_live(record, now) => Some(record.as_ref().clone()),
            _ => None,
        })
    }

    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError> {
        let (hash, table) = self.families.idempotency.locate(key);
        Ok(match table.find(hash, is_key(hash, key)) {
            Some(
                slot @ Slot {
                    entry: Held::Reserved(held),
                    ..
                },
            ) if slot.is_live(now) => Some(held.to_reservation(slot.live_until_ms)),
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
        // `resumed` only ever goes from false to true: an update cannot re-arm a resume (nor
        // forget when it was claimed).
        let resumed = stored.resumed || record.resumed;
        let resumed_at_ms = stored
            .resumed_at_ms
            .or(record.resumed_at_ms)
            .filter(|_| resumed);
        let resume_token = stored
            .resume_token
            .take()
            .or_else(|| record.resume_token.clone())
            .filter(|_| resumed);
        *stored = ApprovalRecord {
            version: next_version,
            resumed,
            resumed_at_ms,
            resume_token,
            ..record.clone()
        };
        Ok(true)
    }

    async fn claim_resume(&self, id: &ApprovalId, claim: &ResumeClaim) -> Result<bool, StoreError> {
        let mut approvals = self.approvals();
        match approvals.get_mut(id) {
            Some(stored) if stored.status == ApprovalStatus::Approved && !stored.resumed => {
                stored.resumed = true;
                stored.resumed_at_ms = Some(claim.at_ms);
                stored.resume_token = Some(claim.token.clone());
                // The claim is an update: a writer holding the pre-claim version must lose.
                stored.version = stored.version.saturating_add(1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &ResumeClaim,
    ) -> Result<bool, StoreError> {
        let mut approvals = self.approvals();
        match approvals.get_mut(id) {
            Some(stored)
                if stored.status == ApprovalStatus::Approved
                    && stored.resumed
                    && stored.resume_token.as_deref() == Some(claim.token.as_str()) =>
            {
                stored.resumed = false;
                stored.resumed_at_ms = None;
                stored.resume_token = None;
                stored.version = stored.version.saturating_add(1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let mut left = max_entries;
        // Taken out under the lock, freed after it.
        let purged: Vec<ApprovalRecord> = self
            .approvals()
            .extract_if(|_, record| {
                let purge = left > 0 && record.is_purgeable(created_before, now);
                left -= usize::from(purge);
                purge
            })
            .map(|(_, record)| record)
            .collect();
        Ok(purged.len())
    }
}

#[async_trait]
impl TransactionStore for MemoryStore {
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError> {
        let mut transactions = self.transactions();
        if transactions.by_id.contains_key(&record.transaction_id) {
            return Ok(false);
        }
        let plan_id = record.plan_id().map(str::to_owned);
        if let Some(plan_id) = &plan_id
            && transactions.by_plan.contains_key(plan_id)
        {
            return Err(StoreError::PlanIdTaken);
        }
        if let Some(plan_id) = plan_id {
            transactions
                .by_plan
                .insert(plan_id, record.transaction_id.clone());
        }
        transactions.by_id.insert(
            record.transaction_id.clone(),
            TransactionRecord {
                revision: 0,
                ..record.clone()
            },
        );
        Ok(true)
    }

    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        Ok(self.transactions().by_id.get(id).cloned())
    }

    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        let transactions = self.transactions();
        Ok(transactions
            .by_plan
            .get(plan_id)
            .and_then(|id| transactions.by_id.get(id))
            .cloned())
    }

    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError> {
        Ok(self
            .transactions()
            .matching(|record| record.action_id == *action_id))
    }

    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError> {
        let mut transactions = self.transactions();
        let Some(stored) = transactions.by_id.get_mut(id) else {
            return Ok(TransitionOutcome::NotFound);
        };
        if stored.revision != expected_revision {
            return Ok(TransitionOutcome::RevisionConflict(stored.clone()));
        }
        let Some(next) = transition.apply(stored, now) else {
            return Ok(TransitionOutcome::StateConflict(stored.clone()));
        };
        *stored = next.clone();
        Ok(TransitionOutcome::Applied(next))
    }

    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError> {
        Ok(self
            .transactions()
            .matching(TransactionRecord::is_recoverable))
    }

    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let mut left = max_entries;
        let mut transactions = self.transactions();
        // Taken out under the lock, freed after it.
        let purged: Vec<TransactionRecord> = transactions
            .by_id
            .extract_if(|_, record| {
                let purge = left > 0
                    && record
                        .finished_at_ms()
                        .is_some_and(|at| at < updated_before);
                left -= usize::from(purge);
                purge
            })
            .map(|(_, record)| record)
            .collect();
        for record in &purged {
            if let Some(plan_id) = record.plan_id() {
                transactions.by_plan.remove(plan_id);
            }
        }
        drop(transactions);
        Ok(purged.len())
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
            tenant_id: None,
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

    /// A reservation kept as one block reads back whole: empty parts, multi-byte text, the
    /// resume flag, the tenant (absent or empty), and the expiry the slot keeps.
    #[test]
    fn a_held_reservation_reads_back_whole() {
        let cases = [
            reservation("Action:act_1:k", "r1"),
            Reservation {
                key: "Tenant:t:clé:ключ".to_owned(),
                reservation_id: String::new(),
                action_id: ActionId::trusted(""),
                tenant_id: Some("tenant_é".to_owned()),
                input_hash: "ü".repeat(40),
                resume_pending: true,
                expires_at_ms: 7,
            },
            Reservation {
                input_hash: String::new(),
                ..reservation("", "token")
            },
            // An empty tenant id is still a tenant.
            Reservation {
                tenant_id: Some(String::new()),
                ..reservation("k", "token")
            },
        ];
        for original in cases {
            let held = HeldReservation::new(&original);
            assert_eq!(held.part(KEY), original.key.as_bytes());
            assert_eq!(held.part(TOKEN), original.reservation_id.as_bytes());
            assert_eq!(held.to_reservation(original.expires_at_ms), original);
        }
    }

    /// Keys spread over every shard (the bench's keys differ only in their last digits).
    #[test]
    fn keys_spread_over_the_shards() {
        let shards = KeyShards::default();
        let mut used = [false; KEY_SHARDS];
        for index in 0..256 {
            used[shard_of(
                shards
                    .hasher
                    .hash_one(format!("Tenant:tenant_1:key-{index}")),
            )] = true;
        }
        assert!(used.iter().all(|&u| u), "{used:?}");
    }

    /// Keys survive the tables' growth: every entry is found again, under its own key, after
    /// thousands of inserts regrew every shard.
    #[tokio::test]
    async fn entries_are_found_after_the_tables_grow() {
        let store = MemoryStore::new();
        let keys: Vec<String> = (0..5_000)
            .map(|index| format!("Action:act_1:{index}"))
            .collect();
        for key in &keys {
            assert_eq!(
                store.reserve(&reservation(key, "r1"), 0).await,
                Ok(ReserveOutcome::Acquired)
            );
        }
        for key in &keys {
            assert!(
                matches!(
                    store.reserve(&reservation(key, "r2"), 0).await,
                    Ok(ReserveOutcome::InProgress(holder)) if holder.key == *key
                ),
                "{key} lost its reservation"
            );
        }
    }

    /// Expired records, and reservations expired for longer than `EXPIRED_RESERVATION_KEPT_MS`,
    /// are dropped when a shard would grow, so a store whose keys expire stays bounded; live
    /// entries survive the sweep.
    #[tokio::test]
    async fn expired_entries_are_dropped_instead_of_growing_the_tables() {
        let store = MemoryStore::new();
        let held = |store: &MemoryStore| -> usize {
            store
                .families
                .idempotency
                .shards
                .iter()
                .map(|shard| shard.lock().unwrap().len())
                .sum()
        };
        // 200 live reservations that never expire within the test.
        for index in 0..200 {
            let claim = Reservation {
                expires_at_ms: Millis::MAX,
                ..reservation(&format!("live-{index}"), "r")
            };
            assert_eq!(store.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        }
        // One reservation that would expire with the first wave, renewed to outlive them all:
        // the sweep must read the renewed expiry.
        let renewed = Reservation {
            expires_at_ms: 5_000,
            ..reservation("renewed", "r")
        };
        assert_eq!(
            store.reserve(&renewed, 0).await,
            Ok(ReserveOutcome::Acquired)
        );
        assert_eq!(store.renew(&renewed, Millis::MAX).await, Ok(true));
        // 20 waves of 1,000 keys, each wave expired (and past the kept window) by the time the
        // next one arrives.
        const WAVE_MS: Millis = EXPIRED_RESERVATION_KEPT_MS + 10_000;
        for wave in 0..20u64 {
            let now = wave * WAVE_MS;
            for index in 0..1_000 {
                let claim = Reservation {
                    expires_at_ms: now + 5_000,
                    ..reservation(&format!("wave-{wave}-{index}"), "r")
                };
                assert_eq!(
                    store.reserve(&claim, now).await,
                    Ok(ReserveOutcome::Acquired)
                );
            }
        }
        let held = held(&store);
        assert!(
            held < 3_000,
            "the store holds {held} entries of 20,201 reserved"
        );
        assert!(
            matches!(
                store.reserve(&reservation("renewed", "other"), 19 * WAVE_MS).await,
                Ok(ReserveOutcome::InProgress(holder)) if holder.expires_at_ms == Millis::MAX
            ),
            "the renewed reservation was dropped"
        );
        for index in 0..200 {
            assert!(
                matches!(
                    store
                        .reserve(
                            &reservation(&format!("live-{index}"), "other"),
                            19 * WAVE_MS
                        )
                        .await,
                    Ok(ReserveOutcome::InProgress(_))
                ),
                "live-{index} was dropped"
            );
        }
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
