//! Durable state of the host: idempotency records and reservations, approval records.
//!
//! One trait per record family, every transition an atomic compare-and-set, so several hosts
//! (or several tasks of one host) can share a store without a lost update. Backends:
//! [`MemoryStore`] (tests, demos; the host's default), `SqliteStore` (the embedded, durable
//! store; feature `sqlite`, on by default) and `PostgresStore` (several host replicas sharing
//! state; feature `postgres`). All of them pass the same conformance suite, which a
//! store of your own runs with `aip_connector_testkit::store_conformance_tests!`.
//!
//! Times are milliseconds since the Unix epoch, taken from the host's [`Clock`], so expiry is
//! testable without sleeping.
//!
//! # Time and conflict rules
//!
//! Every method and every backend keeps these; the method docs refer here rather than restate
//! them.
//!
//! **Expiry.** An entry whose expiry is `E` (a reservation's or a settled record's
//! `expires_at_ms`, a retry-attempt count's stored expiry, a pending approval's
//! `expires_at_ms`) is *live* while `now < E` and *expired* once `now >= E`: at `now == E` it
//! has already expired. An expiry of `None` never passes. So
//! [`reserve`](IdempotencyStore::reserve) takes over an expired reservation and ignores an
//! expired record; [`record`](IdempotencyStore::record) and
//! [`reservation`](IdempotencyStore::reservation) read live entries only;
//! [`count_attempt`](IdempotencyStore::count_attempt) restarts an expired count at 1;
//! [`purge_expired`](IdempotencyStore::purge_expired) deletes the expired records and counts
//! (`expires_at_ms <= now`); and a pending approval is closed once expired
//! ([`ApprovalRecord::is_closed`]). The calls that present a reservation's fencing token
//! ([`settle`](IdempotencyStore::settle), [`renew`](IdempotencyStore::renew),
//! [`release`](IdempotencyStore::release)) check the token, not the expiry: an expired
//! reservation nobody took over is still its owner's.
//!
//! **Retention cutoffs** keep what is at the cutoff `C`:
//! [`purge_closed_approvals`](ApprovalStore::purge_closed_approvals) deletes records created
//! (and, once resumed, resumed) before `C` (`< C`), and
//! [`purge_finished_transactions`](TransactionStore::purge_finished_transactions) records whose
//! [`finished_at_ms`](TransactionRecord::finished_at_ms) is before `C` (`< C`).
//!
//! **Conflicts.** Where a call could fail for more than one reason, the first check below
//! decides, and a refused call changes nothing:
//! - [`TransactionStore::transition`]: no record → `NotFound`; the stored revision is not
//!   `expected_revision` → `RevisionConflict`, even when the status is not expected either (the
//!   revision conflict wins); the status is not expected → `StateConflict`. Both conflicts carry
//!   the current record.
//! - [`TransactionStore::insert_transaction`]: an id that exists → `Ok(false)`, even when the
//!   record's plan id is taken too; then a plan id another record answers to →
//!   [`StoreError::PlanIdTaken`].
//! - [`ApprovalStore::insert_approval`] never overwrites: an id that exists fails with
//!   [`StoreError::Unavailable`] (quoting nothing of the record) and leaves the stored record
//!   as it was.
//! - [`ApprovalStore::update_approval`]: an unknown id or a version other than the stored one →
//!   `Ok(false)`. Applied, it stores the record as written except its resume, which only ever
//!   goes from not resumed to resumed: writing `resumed: true` sets it (no status is checked;
//!   the host claims a resume with [`claim_resume`](ApprovalStore::claim_resume), which needs an
//!   approved record not yet resumed), taking the written `resumed_at_ms` and `resume_token`
//!   only where the stored record has none; writing `resumed: false` leaves a claimed resume, its
//!   time and its token as stored; a record that stays not resumed keeps neither. Only
//!   [`release_resume`](ApprovalStore::release_resume) gives a claim back.

// Records the SQL stores' own unit tests share.
#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod fixtures;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod transaction;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use aip_connector_core::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId};
use aip_connector_core::model::{
    Action, ActionResult, ApprovalDecision, ApprovalPolicy, IdempotencyKeyScope,
};
use serde::{Deserialize, Serialize};

/// The attribute the store traits are written with: a store of your own implements them under
/// `#[aip_connector::store::async_trait]`, with no `async-trait` dependency of its own to keep
/// in step.
pub use ::async_trait::async_trait;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use transaction::{
    PLAN_TTL_MS, TransactionRecord, TransactionStore, Transition, TransitionOutcome,
};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// `duration` in whole milliseconds, saturating (a duration beyond `u64::MAX` ms reads as
/// `Millis::MAX`): the one conversion of settings to the stores' time unit, and a number a log
/// line can carry (`Duration::as_millis` is a `u128`, which JSON log formats write as a string).
pub(crate) fn millis(duration: std::time::Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

/// Where the host reads the time.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }
}

/// The system clock moved by a settable offset: lets tests and demos reach expiries (plans,
/// approvals, compensation windows, reservations) without waiting.
#[derive(Debug, Default)]
pub struct ManualClock {
    offset_ms: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock that reads the system time until [`advance`](Self::advance)d.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `ms` milliseconds (cumulative).
    pub fn advance(&self, ms: Millis) {
        self.offset_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        SystemClock
            .now_ms()
            .saturating_add(self.offset_ms.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// A store failure. Never carries record contents (they may be sensitive).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store was opened with a setting it refuses (a PostgreSQL schema name that is not a
    /// plain lower-case identifier, say). Opening it again with the same setting fails the same
    /// way: fix the configuration rather than retrying.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
    /// A stored row could not be decoded.
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    /// The caller's reservation is no longer the live one (its fencing token changed).
    #[error("reservation was taken over by another owner")]
    Fenced,
    /// A transaction record names a plan id another transaction already answers to (one record
    /// per plan id). A refusal, not a fault: the same insert can never succeed, so the host
    /// answers `transaction.plan_already_claimed` rather than a retryable storage failure.
    #[error("a transaction with this plan id already exists")]
    PlanIdTaken,
}

/// A settled idempotency record: the first result for a scoped key, replayed to duplicates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// Scoped key: `<Scope>:<partition>:<raw key>`.
    pub key: String,
    /// The scope the key was claimed in.
    pub key_scope: IdempotencyKeyScope,
    /// The action that produced the result.
    pub action_id: ActionId,
    /// Its capability.
    pub capability_id: CapabilityId,
    /// Its principal.
    pub principal_id: PrincipalId,
    /// Its tenant, if any.
    pub tenant_id: Option<String>,
    /// SHA-256 hex of the canonical `{capability_id, input, transaction without id}`.
    pub input_hash: String,
    /// The stored result, its output as the handler returned it (never redacted). The action's
    /// input is never stored.
    pub result: ActionResult,
    /// When the key was claimed.
    pub created_at_ms: Millis,
    /// When the record stops being replayed; `None` keeps it forever.
    pub expires_at_ms: Option<Millis>,
}

/// A live claim on a scoped key, held while the handler runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Scoped key.
    pub key: String,
    /// Fencing token, an opaque string unique per reservation (a UUIDv7 in simple form and 16
    /// hex digits of a counter): settlement and release succeed only with this token.
    pub reservation_id: String,
    /// The owning action.
    pub action_id: ActionId,
    /// The owner's tenant, if any. A duplicate from another tenant (under a scope that is not
    /// partitioned by tenant) is told the key is in use, but not which action holds it.
    /// Reservations written before this field read as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The owner's input hash.
    pub input_hash: String,
    /// Set when an approved action resumes under a key whose record is `pending_approval`.
    pub resume_pending: bool,
    /// When another caller may take the key over (crashed owner).
    pub expires_at_ms: Millis,
}

/// What [`IdempotencyStore::reserve`] found.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per reserve and matched at once; a box would burden every caller"
)]
pub enum ReserveOutcome {
    /// The caller now owns the key.
    Acquired,
    /// A settled record live at `now` exists.
    Settled(IdempotencyRecord),
    /// Another owner holds a live reservation.
    InProgress(Reservation),
}

/// What [`IdempotencyStore::purge_expired`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Settled records whose expiry had passed.
    pub records: usize,
    /// Retry-attempt counts whose expiry had passed.
    pub attempt_counts: usize,
}

impl Purged {
    /// Whether a pass deleted as many of either kind as it was allowed to, so more may be left.
    pub fn reached(&self, max_entries: usize) -> bool {
        self.records >= max_entries || self.attempt_counts >= max_entries
    }
}

/// Idempotency records and reservations.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `reservation.key` (live and expired at `now` as the
    /// [time rules](crate::store#time-and-conflict-rules) say):
    /// - a live record → `Settled` — except that a record whose result is
    ///   `pending_approval`/`requires_human` is atomically replaced by the reservation when
    ///   `reservation.resume_pending` is set and action id and input hash match;
    /// - an expired record is deleted and ignored;
    /// - a live reservation → `InProgress`; an expired one is taken over;
    /// - otherwise the reservation is stored → `Acquired`.
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError>;

    /// Replaces the reservation with `record`, stored under `reservation.key`. `Fenced` if the
    /// key no longer holds this token. Only the token is checked, not the expiry: it succeeds
    /// past `expires_at_ms` until another claim takes the key over.
    ///
    /// The record is handed over, not lent: a store that keeps records as they are (the
    /// in-memory one) keeps this one without copying it.
    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError>;

    /// Drops the reservation if the key still holds its token, expired or not (no-op
    /// otherwise).
    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError>;

    /// Deletes the settled record under `record.key` if it still equals `record` (live or
    /// expired), in one atomic step, and says whether it did. A reservation, any other record
    /// and an empty key are left as they are (`false`).
    ///
    /// The host forgets a stored result this way when it changed nothing and the key was one a
    /// projection derived, not one a caller chose
    /// ([`Host::forget_unchanged`](crate::host::Host::forget_unchanged)): it reads the record,
    /// judges it, and passes it here, and the same call then runs again instead of replaying
    /// it. Comparing the whole record makes the deletion safe however it interleaves with other
    /// calls: once the record read expired and the key was claimed again (by another action,
    /// or by a resend of the same one, which settles a record of the same action id), nothing
    /// of that claim is deleted.
    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError>;

    /// Extends the reservation; false if the key no longer holds its token. Only the token is
    /// checked: an expired reservation not yet taken over is extended too.
    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError>;

    /// The record for `key` if it is live at `now` (see the
    /// [time rules](crate::store#time-and-conflict-rules)).
    async fn record(&self, key: &str, now: Millis)
    -> Result<Option<IdempotencyRecord>, StoreError>;

    /// The reservation of `key` if it is live at `now` (see the
    /// [time rules](crate::store#time-and-conflict-rules)): who is running the call that holds
    /// the key. A settled record or an expired reservation reads as `None`.
    ///
    /// The host reads it to answer a resend of an approved re-submission that arrives while the
    /// first one still runs with the retryable `idempotency.in_progress`.
    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError>;

    /// Counts one more retryable failure under `key` and returns the count, atomically (racing
    /// callers get distinct counts). A count whose stored expiry (the one the previous call
    /// stored) has expired at `now` restarts at 1 (see the
    /// [time rules](crate::store#time-and-conflict-rules)); `expires_at_ms` is then stored with
    /// the new count (`None`: never expires). The host dead-letters the key when the count
    /// reaches `HostLimits::max_attempts_per_key`.
    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError>;

    /// Deletes up to `max_entries` settled records and up to `max_entries` retry-attempt counts
    /// expired at `now` (expiry at or before `now`: see the
    /// [time rules](crate::store#time-and-conflict-rules)), and says how many of each went.
    ///
    /// An expired record already reads as absent, and an expired count restarts at 1, so this
    /// changes no answer of the store: it only frees what nothing will read again. A store
    /// keeps such entries until the same key is used again, and a key that never is would stay
    /// forever without a purge. Entries without an expiry (a contract without an idempotency
    /// TTL) are never purged. Reservations are left alone: each is replaced by the next claim
    /// of its key, and only a host that stopped mid-call leaves one behind.
    async fn purge_expired(&self, now: Millis, max_entries: usize) -> Result<Purged, StoreError>;
}

/// The lifecycle of an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for decisions.
    Pending,
    /// Enough approvals were recorded; the action may resume (once).
    Approved,
    /// A decision denied it.
    Denied,
    /// Its TTL passed.
    Expired,
    /// A decision revoked it.
    Revoked,
}

impl ApprovalStatus {
    /// Every status, in declaration order.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Approved,
        Self::Denied,
        Self::Expired,
        Self::Revoked,
    ];

    /// The wire name (`pending`, ...), as serde spells it: for messages, logs and store columns.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
        }
    }
}

/// The wire name (see [`ApprovalStatus::as_str`]).
impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durable approval request and the decisions recorded on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Approval id (`appr_…`).
    pub approval_id: ApprovalId,
    /// The gated action. Its `input` is replaced by `null` when the data contract requires
    /// redaction; such an action is resumed by re-submitting it (matching `input_hash`).
    pub action: Action,
    /// Whether `action.input` was kept.
    pub input_retained: bool,
    /// The action's fingerprint, as [`IdempotencyRecord::input_hash`]: SHA-256 hex of the
    /// canonical `{capability_id, input, transaction without its id}`. A re-submission must
    /// match it.
    pub input_hash: String,
    /// The capability.
    pub capability_id: CapabilityId,
    /// Who asked.
    pub requested_by: PrincipalId,
    /// The tenant the request belongs to.
    pub tenant_id: Option<String>,
    /// The policy snapshot decisions are checked against.
    pub policy: ApprovalPolicy,
    /// SHA-256 of the canonical policy snapshot.
    pub policy_hash: String,
    /// The scoped idempotency key the pending result is stored under, if any.
    pub idempotency_key: Option<String>,
    /// Current status.
    pub status: ApprovalStatus,
    /// Decisions so far, in order.
    pub decisions: Vec<ApprovalDecision>,
    /// When the request was created.
    pub created_at_ms: Millis,
    /// When it expires, from the policy TTL.
    pub expires_at_ms: Option<Millis>,
    /// Set once, atomically, by the single resume of an approved action.
    pub resumed: bool,
    /// When that resume claimed it ([`ApprovalStore::claim_resume`]); `None` while not
    /// resumed, and for records resumed before the store kept the time. Retention keeps a
    /// resumed approval for its whole period after the resume, not after its creation, so that
    /// a resume still running cannot lose its approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at_ms: Option<Millis>,
    /// The token of that claim ([`ResumeClaim::token`]), by which
    /// [`ApprovalStore::release_resume`] gives back that claim and no other; `None` while not
    /// resumed, and for records resumed by a build from before claims carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_token: Option<String>,
    /// Optimistic-concurrency version, bumped by every update.
    pub version: u64,
}

/// [`ApprovalRecord::is_purgeable`] as an SQL condition on the `approval_records` columns,
/// `cutoff` and `now` being the statement's placeholders (`"?1"`, `"?2"`; `"$1"`, `"$2"`): the SQL
/// stores' retention spells the rule once, here, beside the Rust one (the conformance suite
/// holds them together).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! purgeable_approval_sql {
    ($cutoff:literal, $now:literal) => {
        concat!(
            "(created_at_ms < ",
            $cutoff,
            " AND (status IN ('denied', 'expired', 'revoked') \
              OR (status = 'approved' AND resumed = TRUE \
                  AND COALESCE(resumed_at_ms, created_at_ms) < ",
            $cutoff,
            ") OR (status = 'pending' AND expires_at_ms <= ",
            $now,
            ")))"
        )
    };
}
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use purgeable_approval_sql;

impl ApprovalRecord {
    /// The first approving decision: what a client attaches to the re-submission of an action
    /// whose record kept no input (docs/host-runtime.md §5.5).
    pub fn approving_decision(&self) -> Option<&aip_connector_core::model::ApprovalDecision> {
        aip_connector_core::model::ApprovalDecision::first_approving(&self.decisions)
    }

    /// Whether nothing can change the record any more at `now`: denied, revoked or expired;
    /// approved and resumed; or pending past its TTL (which reads as expired). An approved
    /// record not yet resumed is open: its action may still resume, or a decision revoke it.
    pub fn is_closed(&self, now: Millis) -> bool {
        match self.status {
            ApprovalStatus::Denied | ApprovalStatus::Expired | ApprovalStatus::Revoked => true,
            ApprovalStatus::Approved => self.resumed,
            ApprovalStatus::Pending => self.expires_at_ms.is_some_and(|at| !live_at(at, now)),
        }
    }

    /// Whether retention may delete the record, `cutoff` being the oldest time it keeps:
    /// closed at `now` ([`is_closed`](Self::is_closed)), created before `cutoff`, and, once
    /// resumed, resumed before `cutoff` too (a resume may still be running, and one that ends
    /// retryably gives its claim back to the record).
    pub fn is_purgeable(&self, cutoff: Millis, now: Millis) -> bool {
        self.created_at_ms < cutoff
            && self.is_closed(now)
            && (self.status != ApprovalStatus::Approved
                || self.resumed_at_ms.unwrap_or(self.created_at_ms) < cutoff)
    }

    /// The wire view: who asked for what, where it stands, the decisions. Never the input.
    pub fn view(&self) -> aip_connector_core::model::ApprovalRecordView {
        use aip_connector_core::model::{ApprovalRecordView, ApprovalState};
        let at = |ms: Millis| {
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        };
        ApprovalRecordView {
            approval_id: self.approval_id.clone(),
            status: match self.status {
                ApprovalStatus::Pending => ApprovalState::Pending,
                ApprovalStatus::Approved => ApprovalState::Approved,
                ApprovalStatus::Denied => ApprovalState::Denied,
                ApprovalStatus::Expired => ApprovalState::Expired,
                ApprovalStatus::Revoked => ApprovalState::Revoked,
            },
            action_id: self.action.id.clone(),
            capability_id: self.capability_id.clone(),
            requested_by: self.requested_by.clone(),
            decisions: self.decisions.clone(),
            created_at: at(self.created_at_ms),
            expires_at: self.expires_at_ms.map(at),
        }
    }
}

/// One claim on an approved action's single resume ([`ApprovalStore::claim_resume`]): when it
/// was made, and a token its claimer drew that no other claim shares.
///
/// The token, not the time, tells claims apart: a call whose claim failed with its answer lost
/// gives back the claim it may have made, and a call dropped while its give-back was in flight
/// has it written again on a task of its own; either write may land after another call claimed
/// the resume, in the same millisecond as easily as later, and must not release that claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeClaim {
    /// When the claim was made: the record's [`resumed_at_ms`](ApprovalRecord::resumed_at_ms).
    pub at_ms: Millis,
    /// The claim's own token: the record's [`resume_token`](ApprovalRecord::resume_token).
    pub token: String,
}

impl ResumeClaim {
    /// A claim made at `at_ms`, with a fresh token (a UUIDv7 in simple form).
    pub fn new(at_ms: Millis) -> Self {
        ResumeClaim {
            at_ms,
            token: uuid::Uuid::now_v7().simple().to_string(),
        }
    }
}

/// Approval records.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Stores a new record (`version` 0, whatever version it carries; the resume fields as
    /// written). An id that exists fails with [`StoreError::Unavailable`] and leaves the stored
    /// record as it was (see the [conflict rules](crate::store#time-and-conflict-rules)).
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError>;

    /// The record, if any.
    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError>;

    /// Replaces the record if its stored version is `expected_version`; the stored version
    /// becomes `expected_version + 1`. False when someone else updated it first (or no record
    /// has the id). The resume only goes from not resumed to resumed: writing `resumed: true`
    /// may set it, writing `resumed: false` never clears it, and a claimed resume keeps its
    /// stored `resumed_at_ms` and `resume_token`; only [`release_resume`](Self::release_resume)
    /// gives a claim back (see the [conflict rules](crate::store#time-and-conflict-rules)).
    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError>;

    /// Approved, not yet resumed → resumed by `claim` ([`ApprovalRecord::resumed_at_ms`] =
    /// `claim.at_ms`, [`ApprovalRecord::resume_token`] = `claim.token`); true for exactly one
    /// caller. The claim bumps the version, so a writer holding the pre-claim version loses.
    async fn claim_resume(&self, id: &ApprovalId, claim: &ResumeClaim) -> Result<bool, StoreError>;

    /// Approved, resumed, and claimed with `claim.token` → not resumed, `resumed_at_ms` and
    /// `resume_token` cleared (the version is bumped); true when it changed. The host calls it
    /// for its own [`claim_resume`](Self::claim_resume) with the same `claim`, which returned
    /// true or failed (the claim may have landed with its answer lost), for a resume whose
    /// result is retryable (the reservation of its idempotency key failed or found the key
    /// busy, or the run failed retryably), so the approved action can be resumed again instead
    /// of being stranded.
    ///
    /// The token is compared so that only that claim is released: a release written late (the
    /// call was dropped while the first write was in flight, and the host finished it on a task
    /// of its own; or the claim's answer was lost and the claim never landed) must not undo a
    /// claim another call made meanwhile, however close in time (found by a review and a
    /// hostile probe).
    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &ResumeClaim,
    ) -> Result<bool, StoreError>;

    /// Deletes up to `max_entries` records that retention may delete
    /// ([`ApprovalRecord::is_purgeable`] with `created_before` as the cutoff): closed at `now`,
    /// created before `created_before`, and resumed before it when resumed (strictly before: see
    /// the [time rules](crate::store#time-and-conflict-rules)). Says how many went. Open records
    /// are never deleted, however old.
    ///
    /// This is the approvals' retention (see `Retention` in the host module): after it, the
    /// approval id is unknown to every reader, as if it had never been issued.
    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError>;
}

/// Every store family a host needs.
///
/// The SDK's stores ([`MemoryStore`], and `SqliteStore` and `PostgresStore` behind their
/// features) implement all three families. A store of your own implements each trait under
/// [`#[async_trait]`](macro@async_trait); every transition must be an atomic compare-and-set, as the method docs
/// say, and the testkit's store conformance suite
/// (`aip_connector_testkit::store_conformance_tests!`, one test per rule, with races across
/// replicas for a store several hosts share) checks that it does. Before 1.0, a minor version
/// may add a method or a record field (the CHANGELOG lists each, as it does every breaking
/// change), and the suite gains a check for it.
pub trait Store: IdempotencyStore + ApprovalStore + TransactionStore {}

impl<T: IdempotencyStore + ApprovalStore + TransactionStore> Store for T {}

/// A shared store.
pub type SharedStore = Arc<dyn Store>;

/// Whether a result is a stored approval gate that an approved resume may replace.
pub fn is_pending_approval(result: &ActionResult) -> bool {
    use aip_connector_core::model::ActionResultStatus;
    matches!(
        result.status,
        ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman
    )
}

/// What a scoped key holds in a SQL store's row: a live claim or a settled record (never both).
/// (The in-memory store keeps its entries in a form of its own.)
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Clone, Debug)]
enum KeyEntry {
    /// A reservation, live or expired (boxed, like the record: the two differ much in size).
    Reserved(Box<Reservation>),
    /// A settled record, live or expired.
    Settled(Box<IdempotencyRecord>),
}

/// What [`IdempotencyStore::reserve`] does with what it found under the key.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "transient, never stored")]
enum Claim {
    /// Store the caller's reservation, replacing whatever the key held.
    Take,
    /// Leave the key as it is and answer with this outcome.
    Refuse(ReserveOutcome),
}

/// The rules of [`IdempotencyStore::reserve`], shared by every backend so they cannot drift.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn claim(existing: Option<&KeyEntry>, reservation: &Reservation, now: Millis) -> Claim {
    match existing {
        None => Claim::Take,
        Some(KeyEntry::Settled(record)) => claim_settled(record, reservation, now),
        Some(KeyEntry::Reserved(current)) if reservation_is_live(current, now) => {
            Claim::Refuse(ReserveOutcome::InProgress(current.as_ref().clone()))
        }
        Some(KeyEntry::Reserved(_)) => Claim::Take,
    }
}

/// The part of [`claim`] for a key that holds a settled record (a store that keeps
/// reservations in a form of its own applies the reservation rules itself).
fn claim_settled(record: &IdempotencyRecord, reservation: &Reservation, now: Millis) -> Claim {
    if !record_is_live(record, now) || resume_may_replace(record, reservation) {
        Claim::Take
    } else {
        Claim::Refuse(ReserveOutcome::Settled(record.clone()))
    }
}

/// `record` as [`IdempotencyStore::settle`] stores it: under the reservation's key, whatever
/// key it names. Shared by every backend, like [`claim`].
fn stored_under(mut record: IdempotencyRecord, reservation: &Reservation) -> IdempotencyRecord {
    if record.key != reservation.key {
        record.key.clone_from(&reservation.key);
    }
    record
}

/// A record is replayed until its expiry; `None` keeps it forever.
fn record_is_live(record: &IdempotencyRecord, now: Millis) -> bool {
    record
        .expires_at_ms
        .is_none_or(|expires_at_ms| live_at(expires_at_ms, now))
}

/// A reservation blocks other callers until its expiry, then it may be taken over.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn reservation_is_live(reservation: &Reservation, now: Millis) -> bool {
    live_at(reservation.expires_at_ms, now)
}

/// Whether an entry that binds its key until `until_ms` still binds it at `now`: the one expiry
/// rule of records, reservations, and a store that keeps the expiry apart from the entry.
fn live_at(until_ms: Millis, now: Millis) -> bool {
    until_ms > now
}

/// Only the approved resume of the very action that stored an approval gate may replace it.
fn resume_may_replace(record: &IdempotencyRecord, reservation: &Reservation) -> bool {
    reservation.resume_pending
        && is_pending_approval(&record.result)
        && record.action_id == reservation.action_id
        && record.input_hash == reservation.input_hash
}
