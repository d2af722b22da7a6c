//! [`HookedStore`]: the memory store with a hook before each transaction transition and counts
//! of the idempotency writes, for tests that hold a write back (to race two callers, or to drop
//! a call while its settlement is in flight) or check how often the host wrote, and switches
//! that make reservations, approval or transaction reads, approval updates, or the answer of a
//! transition, a resume claim or a transaction insert fail on demand (and transitions to a
//! status, or a resume claim, fail without being applied).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use aip_connector::ids::{ActionId, ApprovalId, TransactionId};
use aip_connector::model::TransactionProtocolStatus;
use aip_connector::store::{
    ApprovalRecord, ApprovalStore, IdempotencyRecord, IdempotencyStore, MemoryStore, Millis,
    Purged, Reservation, ReserveOutcome, StoreError, TransactionRecord, TransactionStore,
    Transition, TransitionOutcome,
};

/// What the hook answers for one transition: `None` lets it through at once, a future holds it
/// back until the future is done (one that never ends stalls the transition for good).
pub type Hold = Option<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// Holds the store writes a hook hands it until the test opens it, and tells the test when one
/// arrived: `HookedStore::before_settle({ let gate = gate.clone(); move |_| gate.hold() })`.
#[derive(Clone)]
pub struct Gate {
    entered: Arc<tokio::sync::Notify>,
    opened: Arc<tokio::sync::Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            entered: Arc::default(),
            opened: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Gate {
    /// A hold for one write: it signals [`entered`](Self::entered), then waits for
    /// [`open`](Self::open).
    pub fn hold(&self) -> Hold {
        let (entered, opened) = (self.entered.clone(), self.opened.clone());
        Some(Box::pin(async move {
            entered.notify_one();
            // Closed by `open`: every hold, held now or later, goes through.
            let _ = opened.acquire().await;
        }))
    }

    /// Waits until a write is held (or was, since the last wait).
    pub async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets every held write, and every later one, through.
    pub fn open(&self) {
        self.opened.close();
    }
}

/// Transitions to `status` that fail, `times` more times, after being applied or not.
struct FailingTransitions {
    status: TransactionProtocolStatus,
    times: usize,
    applied: bool,
}

type TransitionHook = Box<dyn Fn(&Transition) -> Hold + Send + Sync>;
type ReserveHook = Box<dyn Fn(&Reservation) -> Hold + Send + Sync>;
type ReleaseResumeHook = Box<dyn Fn(&ApprovalId) -> Hold + Send + Sync>;

/// The memory store, with [`before_transition`](Self::before_transition) called before every
/// `TransactionStore::transition` (and [`before_reserve`](Self::before_reserve) before every
/// `IdempotencyStore::reserve`, [`before_release_resume`](Self::before_release_resume) before
/// every `ApprovalStore::release_resume`), and the idempotency settlements and releases counted.
#[derive(Default)]
pub struct HookedStore {
    inner: MemoryStore,
    before_transition: Option<TransitionHook>,
    before_reserve: Option<ReserveHook>,
    before_release_resume: Option<ReleaseResumeHook>,
    after_claim_resume: Option<ReleaseResumeHook>,
    before_settle: Option<ReserveHook>,
    settles: AtomicUsize,
    /// The next `settle`s fail, this many, applied first or not.
    failing_settles: Mutex<(usize, bool)>,
    releases: AtomicUsize,
    /// `reserve` fails with this error while set.
    reservations_fail: Mutex<Option<StoreError>>,
    /// `approval` reads fail with this error while set.
    approval_reads_fail: Mutex<Option<StoreError>>,
    /// `update_approval` always loses the compare-and-set while set.
    approval_updates_lose: AtomicBool,
    /// The next `transition` is applied, then answered with an error.
    lose_next_transition_answer: AtomicBool,
    /// The next `claim_resume` is applied, then answered with an error.
    lose_next_claim_resume_answer: AtomicBool,
    /// The next `claim_resume` is not applied, and answered with an error.
    fail_next_claim_resume: AtomicBool,
    /// The next `release_resume`s, this many, are not applied, and answered with an error.
    failing_release_resumes: AtomicUsize,
    /// The next `release`s, this many, are not applied, and answered with an error.
    failing_releases: AtomicUsize,
    /// Transitions to this status are answered with an error this many times, applied first
    /// or not.
    fail_transitions_to: Mutex<Option<FailingTransitions>>,
    /// The next `insert_transaction` is applied, then answered with an error.
    lose_next_insert_answer: AtomicBool,
    /// `transaction` reads fail with this error while set.
    transaction_reads_fail: Mutex<Option<StoreError>>,
}

impl HookedStore {
    /// A memory store whose transitions wait for what `hook` answers for them.
    pub fn before_transition(hook: impl Fn(&Transition) -> Hold + Send + Sync + 'static) -> Self {
        HookedStore {
            before_transition: Some(Box::new(hook)),
            ..HookedStore::default()
        }
    }

    /// A memory store whose reservations wait for what `hook` answers for them.
    pub fn before_reserve(hook: impl Fn(&Reservation) -> Hold + Send + Sync + 'static) -> Self {
        HookedStore {
            before_reserve: Some(Box::new(hook)),
            ..HookedStore::default()
        }
    }

    /// A memory store whose `ApprovalStore::release_resume` calls wait for what `hook` answers
    /// for them.
    pub fn before_release_resume(
        hook: impl Fn(&ApprovalId) -> Hold + Send + Sync + 'static,
    ) -> Self {
        HookedStore {
            before_release_resume: Some(Box::new(hook)),
            ..HookedStore::default()
        }
    }

    /// A memory store whose `ApprovalStore::claim_resume` calls are applied, then answered
    /// once what `hook` answers for them is done: a call dropped meanwhile leaves a claim that
    /// landed, as SQLite's blocking task or a sent PostgreSQL statement would.
    pub fn after_claim_resume(hook: impl Fn(&ApprovalId) -> Hold + Send + Sync + 'static) -> Self {
        HookedStore {
            after_claim_resume: Some(Box::new(hook)),
            ..HookedStore::default()
        }
    }

    /// A memory store whose `IdempotencyStore::settle` calls (a key's settlement) wait for what
    /// `hook` answers for their reservation.
    pub fn before_settle(hook: impl Fn(&Reservation) -> Hold + Send + Sync + 'static) -> Self {
        HookedStore {
            before_settle: Some(Box::new(hook)),
            ..HookedStore::default()
        }
    }

    /// `IdempotencyStore::settle` calls so far.
    pub fn settles(&self) -> usize {
        self.settles.load(Ordering::SeqCst)
    }

    /// `IdempotencyStore::release` calls so far.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// While `fail` is set, every `IdempotencyStore::reserve` fails
    /// (`StoreError::Unavailable`).
    pub fn fail_reservations(&self, fail: bool) {
        self.fail_reservations_with(
            fail.then(|| StoreError::Unavailable("the disk is gone".into())),
        );
    }

    /// While `error` is set, every `IdempotencyStore::reserve` fails with it.
    pub fn fail_reservations_with(&self, error: Option<StoreError>) {
        *self
            .reservations_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// While `error` is set, every `ApprovalStore::approval` read fails with it.
    pub fn fail_approval_reads(&self, error: Option<StoreError>) {
        *self
            .approval_reads_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// The next `TransactionStore::transition` is applied and then answered
    /// `StoreError::Unavailable`, as a connection lost after its commit would answer.
    pub fn lose_next_transition_answer(&self) {
        self.lose_next_transition_answer
            .store(true, Ordering::SeqCst);
    }

    /// The next `ApprovalStore::claim_resume` is applied and then answered
    /// `StoreError::Unavailable`, as a connection lost after its commit would answer.
    pub fn lose_next_claim_resume_answer(&self) {
        self.lose_next_claim_resume_answer
            .store(true, Ordering::SeqCst);
    }

    /// The next `ApprovalStore::claim_resume` is not applied and is answered
    /// `StoreError::Unavailable`, as a connection lost before its commit would answer.
    pub fn fail_next_claim_resume(&self) {
        self.fail_next_claim_resume.store(true, Ordering::SeqCst);
    }

    /// The next `times` `ApprovalStore::release_resume`s are not applied and are answered
    /// `StoreError::Unavailable`.
    pub fn fail_next_release_resumes(&self, times: usize) {
        self.failing_release_resumes.store(times, Ordering::SeqCst);
    }

    /// The next `times` `IdempotencyStore::release`s are not applied and are answered
    /// `StoreError::Unavailable`.
    pub fn fail_next_releases(&self, times: usize) {
        self.failing_releases.store(times, Ordering::SeqCst);
    }

    /// The next `times` `IdempotencyStore::settle`s are not applied (`applied` false) or are
    /// applied, and each is answered `StoreError::Unavailable`.
    pub fn fail_next_settles(&self, times: usize, applied: bool) {
        *self
            .failing_settles
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = (times, applied);
    }

    /// The next `times` `TransactionStore::transition`s to `status` are not applied and are
    /// answered `StoreError::Unavailable`, as a statement that failed would be.
    pub fn fail_transitions_to(&self, status: TransactionProtocolStatus, times: usize) {
        self.set_failing_transitions(status, times, false);
    }

    /// The next `times` `TransactionStore::transition`s to `status` are applied and then
    /// answered `StoreError::Unavailable`, as a connection lost after its commit would answer.
    pub fn lose_transition_answers_to(&self, status: TransactionProtocolStatus, times: usize) {
        self.set_failing_transitions(status, times, true);
    }

    fn set_failing_transitions(
        &self,
        status: TransactionProtocolStatus,
        times: usize,
        applied: bool,
    ) {
        *self
            .fail_transitions_to
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(FailingTransitions {
            status,
            times,
            applied,
        });
    }

    /// The next `TransactionStore::insert_transaction` is applied and then answered
    /// `StoreError::Unavailable`, as a connection lost after its commit would answer.
    pub fn lose_next_insert_answer(&self) {
        self.lose_next_insert_answer.store(true, Ordering::SeqCst);
    }

    /// While `error` is set, every `TransactionStore::transaction` read fails with it.
    pub fn fail_transaction_reads(&self, error: Option<StoreError>) {
        *self
            .transaction_reads_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// While `lose` is set, every `ApprovalStore::update_approval` loses its compare-and-set.
    pub fn lose_approval_updates(&self, lose: bool) {
        self.approval_updates_lose.store(lose, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for HookedStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        let failing = self
            .reservations_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(error) = failing {
            return Err(error);
        }
        if let Some(hold) = self
            .before_reserve
            .as_ref()
            .and_then(|hook| hook(reservation))
        {
            hold.await;
        }
        self.inner.reserve(reservation, now).await
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        if let Some(hold) = self
            .before_settle
            .as_ref()
            .and_then(|hook| hook(reservation))
        {
            hold.await;
        }
        let failing = {
            let mut failing = self
                .failing_settles
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (times, applied) = &mut *failing;
            (*times > 0).then(|| {
                *times -= 1;
                *applied
            })
        };
        match failing {
            Some(false) => Err(StoreError::Unavailable("the statement failed".into())),
            Some(true) => {
                let _ = self.inner.settle(reservation, record).await;
                Err(lost_answer())
            }
            None => self.inner.settle(reservation, record).await,
        }
    }

    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError> {
        self.inner.forget_record(record).await
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.failing_releases) {
            return Err(StoreError::Unavailable("the statement failed".into()));
        }
        self.inner.release(reservation).await
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        self.inner.renew(reservation, expires_at_ms).await
    }

    async fn record(
        &self,
        key: &str,
        now: Millis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.record(key, now).await
    }

    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError> {
        self.inner.reservation(key, now).await
    }

    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError> {
        self.inner.count_attempt(key, expires_at_ms, now).await
    }

    async fn purge_expired(&self, now: Millis, max_entries: usize) -> Result<Purged, StoreError> {
        self.inner.purge_expired(now, max_entries).await
    }
}

#[async_trait::async_trait]
impl ApprovalStore for HookedStore {
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.inner.insert_approval(record).await
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
        let failing = self
            .approval_reads_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match failing {
            Some(error) => Err(error),
            None => self.inner.approval(id).await,
        }
    }

    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        if self.approval_updates_lose.load(Ordering::SeqCst) {
            return Ok(false);
        }
        self.inner.update_approval(record, expected_version).await
    }

    async fn claim_resume(
        &self,
        id: &ApprovalId,
        claim: &aip_connector::store::ResumeClaim,
    ) -> Result<bool, StoreError> {
        if self.fail_next_claim_resume.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "the connection closed before the commit".into(),
            ));
        }
        let claimed = self.inner.claim_resume(id, claim).await;
        if let Some(hold) = self.after_claim_resume.as_ref().and_then(|hook| hook(id)) {
            hold.await;
        }
        if self
            .lose_next_claim_resume_answer
            .swap(false, Ordering::SeqCst)
        {
            return Err(lost_answer());
        }
        claimed
    }

    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &aip_connector::store::ResumeClaim,
    ) -> Result<bool, StoreError> {
        if let Some(hold) = self
            .before_release_resume
            .as_ref()
            .and_then(|hook| hook(id))
        {
            hold.await;
        }
        if take_one(&self.failing_release_resumes) {
            return Err(StoreError::Unavailable("the statement failed".into()));
        }
        self.inner.release_resume(id, claim).await
    }

    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        self.inner
            .purge_closed_approvals(created_before, now, max_entries)
            .await
    }
}

#[async_trait::async_trait]
impl TransactionStore for HookedStore {
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError> {
        let inserted = self.inner.insert_transaction(record).await;
        if self.lose_next_insert_answer.swap(false, Ordering::SeqCst) {
            return Err(lost_answer());
        }
        inserted
    }

    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        let failing = self
            .transaction_reads_fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match failing {
            Some(error) => Err(error),
            None => self.inner.transaction(id).await,
        }
    }

    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        self.inner.transaction_by_plan(plan_id).await
    }

    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError> {
        self.inner.transactions_by_action(action_id).await
    }

    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError> {
        if let Some(hold) = self
            .before_transition
            .as_ref()
            .and_then(|hook| hook(transition))
        {
            hold.await;
        }
        let failing = {
            let mut failing = self
                .fail_transitions_to
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match failing.as_mut() {
                Some(failing) if failing.status == transition.to && failing.times > 0 => {
                    failing.times -= 1;
                    Some(failing.applied)
                }
                _ => None,
            }
        };
        if failing == Some(false) {
            return Err(StoreError::Unavailable("the statement failed".into()));
        }
        let outcome = self
            .inner
            .transition(id, expected_revision, transition, now)
            .await;
        if failing == Some(true) {
            return Err(lost_answer());
        }
        if self
            .lose_next_transition_answer
            .swap(false, Ordering::SeqCst)
        {
            return Err(lost_answer());
        }
        outcome
    }

    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError> {
        self.inner.recoverable().await
    }

    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        self.inner
            .purge_finished_transactions(updated_before, max_entries)
            .await
    }
}

/// Takes one from `times` (failures still to come): true when there was one.
fn take_one(times: &AtomicUsize) -> bool {
    times
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok()
}

/// What a store answers for a write that landed on a connection that closed before its answer.
fn lost_answer() -> StoreError {
    StoreError::Unavailable("the connection closed after the commit".into())
}
