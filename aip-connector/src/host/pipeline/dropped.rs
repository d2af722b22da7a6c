//! A call whose future is dropped before it ends (docs/host-runtime.md §7.2, "Dropping a
//! call"): what it holds is settled on a task of its own, as if its transport had given up on
//! it ([`Host::abandon_as`](crate::host::Host::abandon_as)).
//!
//! `Host::invoke` borrows the host and the caller, so once its future is dropped (a
//! `tokio::time::timeout` around the call, a web framework dropping a request whose client
//! left) nothing polls the pipeline again. Before this, a keyed action's reservation stayed
//! held until it expired (a resend was answered `idempotency.in_progress` meanwhile), its
//! transaction stayed `prepared` until a reconciliation, and a claimed resume stayed claimed.
//! [`Unsettled`] rides in the pipeline's state from the reservation to the settlement; the
//! pipeline disarms it when it settles the call itself. Dropped while armed, it copies what the
//! settlement needs and spawns it on the current runtime.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use aip_connector_core::ids::{PrincipalId, TransactionId};
use aip_connector_core::model::{
    Action, ActionResult, IdempotencyKeyScope, TransactionMode, TransactionProtocolStatus,
};

use super::{
    ClaimedResume, GiveBack, HeldResume, HoldReturn, HostInner, HostInvocation, Settlement,
    abandoned, abandoned_handler, cancelled_by_request, companion_timed_out, effective_timeout,
    failure, give_back_resume, timed_out, transaction,
};
use crate::invocation::VerifiedTenant;
use crate::store::{Millis, Reservation};

/// What a call still has to settle should its future be dropped: its key's reservation, the
/// transaction it admitted, the resume it claimed, and any cancel waiting for its result.
pub(super) struct Unsettled<'a> {
    /// The key's settlement; `None` once the pipeline took it to settle the call itself.
    settlement: Option<Settlement<'a>>,
    action: &'a Arc<Action>,
    /// The approval whose resume this call claimed (stage 9), if any.
    claimed: &'a ClaimedResume,
    /// Whether the handler was started. Before that nothing can have reached the provider, so
    /// a dropped call is retryable whatever its contract says.
    handler_started: AtomicBool,
    /// How the handler's race had stopped it when the call was dropped ([`Stop`] as a byte).
    stop: AtomicU8,
    /// The transaction a transactional call admitted, until it is settled. Locked by
    /// transactional calls only, a few times each.
    transaction: Mutex<Option<Box<OpenTransaction>>>,
}

/// How a dropped call's handler had been stopped: the result it settles with is the one the
/// race would have answered.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Nothing stopped it before the drop: the call is abandoned (`action.abandoned`).
    Abandoned = 0,
    /// Its deadline had passed (`sla.timeout_exceeded`; an unknown outcome after a checkpoint).
    TimedOut = 1,
    /// A cancel had been requested (`cancelled`).
    Cancelled = 2,
    /// A companion's (validation, reconcile) deadline had passed: `sla.timeout_exceeded`,
    /// retryable, since a lookup has no effect at the provider.
    CompanionTimedOut = 3,
}

impl Stop {
    /// The stop `cell` holds (written by [`Unsettled::handler_stopped`]).
    fn load(cell: &AtomicU8) -> Stop {
        match cell.load(Ordering::Relaxed) {
            1 => Stop::TimedOut,
            2 => Stop::Cancelled,
            3 => Stop::CompanionTimedOut,
            _ => Stop::Abandoned,
        }
    }

    /// How the race over `context`'s signal and deadline would have ended, had it been polled
    /// once more: in the race's order, a requested cancel, then an abandonment (the signal fired
    /// by the transport), then the deadline.
    pub(super) fn of(context: &HostInvocation) -> Stop {
        if context.cancellation.was_requested() {
            Stop::Cancelled
        } else if context.cancellation.is_fired() {
            Stop::Abandoned
        } else if tokio::time::Instant::now() >= context.deadline {
            Stop::TimedOut
        } else {
            Stop::Abandoned
        }
    }
}

/// Watches a companion's race (a plan's validation, a reconciliation's lookup) for the call's
/// guard: dropped before the race answered, it tells the guard how the companion was stopped.
pub(super) struct CompanionWatch<'g> {
    unsettled: &'g Unsettled<'g>,
    context: &'g HostInvocation,
    answered: bool,
}

impl<'g> CompanionWatch<'g> {
    pub(super) fn new(unsettled: &'g Unsettled<'g>, context: &'g HostInvocation) -> Self {
        CompanionWatch {
            unsettled,
            context,
            answered: false,
        }
    }

    /// The race answered: a drop from now on is the pipeline's own.
    pub(super) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for CompanionWatch<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let stop = match Stop::of(self.context) {
            Stop::TimedOut => Stop::CompanionTimedOut,
            stop => stop,
        };
        self.unsettled.handler_stopped(stop);
    }
}

/// Stage 7's reservation, for a call that may have claimed a resume (stage 9) before it: a call
/// dropped while the reservation is written gives the claim back, since nothing else will (the
/// guard is armed only once the key is reserved). The claim is all it gives back: whether the
/// reservation landed is unknown, and one that did expires.
pub(super) async fn reserve_holding_claim(
    host: &Arc<HostInner>,
    claimed: &OnceLock<Box<HeldResume>>,
    reservation: &Reservation,
    now: Millis,
) -> Result<crate::store::ReserveOutcome, crate::store::StoreError> {
    // Armed for a resume only (boxed, so a call without one carries a word): the hold that
    // gives a claim back when the call is dropped mid-write, as the settlement's does.
    let mut held = claimed
        .get()
        .map(|claim| Box::new(HoldReturn::giving_back(host, claim)));
    let reserved = host.store.reserve(reservation, now).await;
    if let Some(held) = held.as_mut() {
        held.give_back = None;
    }
    reserved
}

/// A transaction admitted and not yet settled.
struct OpenTransaction {
    transaction_id: TransactionId,
    mode: TransactionMode,
    /// The attempt's hold on the record: a dropped call settles only what it still holds.
    fence: transaction::AttemptFence,
    /// The result it is being settled with, once the handler (or the reconcile companion)
    /// answered: a call dropped while that settlement is written settles with it, not with an
    /// abandonment (a completed commit is committed).
    ended: Option<(ActionResult, transaction::Interruption)>,
}

impl<'a> Unsettled<'a> {
    /// Armed with the call's key settlement (with or without a reservation).
    pub(super) fn new(
        settlement: Settlement<'a>,
        action: &'a Arc<Action>,
        claimed: &'a ClaimedResume,
    ) -> Self {
        Unsettled {
            settlement: Some(settlement),
            action,
            claimed,
            handler_started: AtomicBool::new(false),
            stop: AtomicU8::new(Stop::Abandoned as u8),
            transaction: Mutex::new(None),
        }
    }

    /// The key reserved for the call, if any.
    pub(super) fn reservation(&self) -> Option<&Reservation> {
        self.settlement.as_ref()?.reservation.as_ref()
    }

    /// The handler is about to start: from now on its effects may reach the provider.
    pub(super) fn handler_started(&self) {
        self.handler_started.store(true, Ordering::Relaxed);
        self.claimed.handler_started.store(true, Ordering::Relaxed);
    }

    /// The handler's race was dropped before it answered, having stopped the handler as `stop`
    /// says.
    pub(super) fn handler_stopped(&self, stop: Stop) {
        self.stop.store(stop as u8, Ordering::Relaxed);
    }

    /// The call admitted `transaction_id` in `mode` and will settle it.
    pub(super) fn transaction_admitted(
        &self,
        transaction_id: &TransactionId,
        mode: TransactionMode,
        fence: &transaction::AttemptFence,
    ) {
        *self.open_transaction() = Some(Box::new(OpenTransaction {
            transaction_id: transaction_id.clone(),
            mode,
            fence: fence.clone(),
            ended: None,
        }));
    }

    /// The transaction is being settled with `result`.
    pub(super) fn transaction_ending(
        &self,
        result: &ActionResult,
        interruption: transaction::Interruption,
    ) {
        if let Some(open) = self.open_transaction().as_mut() {
            open.ended = Some((result.clone(), interruption));
        }
    }

    /// The transaction is settled.
    pub(super) fn transaction_settled(&self) {
        *self.open_transaction() = None;
    }

    fn open_transaction(&self) -> std::sync::MutexGuard<'_, Option<Box<OpenTransaction>>> {
        self.transaction
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Disarms the guard: the pipeline settles the call itself. Answers `result` when the call
    /// reserved no key, else the boxed write of the key's settlement that answers it.
    #[allow(clippy::type_complexity, reason = "one use")]
    pub(super) fn settle(
        mut self,
        result: ActionResult,
    ) -> Result<ActionResult, std::pin::Pin<Box<impl Future<Output = ActionResult> + Send + 'a>>>
    {
        let settlement = self.settlement.take().expect("armed until settled");
        if settlement.reservation.is_none() {
            return Ok(result);
        }
        let claimed: &'a ClaimedResume = self.claimed;
        let give_back = claimed.claim.get().map(|claim| {
            Box::new(GiveBack {
                claim: HeldResume::clone(claim),
                done: Some(&claimed.given_back),
            })
        });
        let unattempted =
            !self.handler_started.load(Ordering::Relaxed) && super::unattempted(&result);
        Err(Box::pin(settlement.settle(result, give_back, unattempted)))
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        let Some(settlement) = self.settlement.take() else {
            return;
        };
        let mut transaction = self
            .transaction
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let claimed = self
            .claimed
            .claim
            .get()
            .map(|claim| HeldResume::clone(claim));
        let host = settlement.host;
        let action = self.action;
        let handler_started = *self.handler_started.get_mut();
        // The handler's answer, when the call was dropped while its transaction's settlement
        // was written; else what the race would have answered.
        let (result, interruption) = transaction
            .as_mut()
            .and_then(|open| open.ended.take())
            .unwrap_or_else(|| {
                let contract = settlement.capability.contract.as_ref();
                let timeout_ms = || effective_timeout(action, contract, &host.limits);
                match Stop::load(&self.stop) {
                    Stop::TimedOut => (
                        timed_out(action, contract, timeout_ms(), None),
                        transaction::Interruption::TimedOut,
                    ),
                    Stop::Cancelled => (
                        cancelled_by_request(&action.id),
                        transaction::Interruption::Cancelled,
                    ),
                    Stop::CompanionTimedOut => {
                        let reconciling = action.transaction.as_ref().map(|t| t.mode)
                            == Some(TransactionMode::Reconcile);
                        let what = if reconciling {
                            "reconciliation"
                        } else {
                            "validation"
                        };
                        (
                            failure::failed(&action.id, companion_timed_out(what, timeout_ms())),
                            transaction::Interruption::None,
                        )
                    }
                    // Nothing reached the provider before the handler started.
                    Stop::Abandoned if !handler_started => (
                        abandoned(&action.id, true),
                        transaction::Interruption::Cancelled,
                    ),
                    Stop::Abandoned => (
                        abandoned_handler(&action.id, contract),
                        transaction::Interruption::Cancelled,
                    ),
                }
            });
        // At once, as the race notes it: a cancel of this execution from now on is late, not
        // early for the caller's retry (found by a hostile review).
        if handler_started
            && interruption != transaction::Interruption::None
            && result.error.as_ref().is_some_and(|e| e.is_retryable())
        {
            host.active
                .note_retryable(action, settlement.principal, host.clock.now_ms());
        }
        if settlement.reservation.is_none() && transaction.is_none() && claimed.is_none() {
            // Nothing held: only a cancel waiting for the result is told (one atomic read when
            // none waits).
            host.active.settled(action, &result);
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime to settle on: what the call holds waits for its expiry (a key), the
            // next attempt or a reconciliation (a transaction); a cancel waiting for its result
            // is told at once.
            tracing::warn!(
                action_id = %super::Clipped::new(action.id.as_str(), 128),
                reserved_key = settlement.reservation.is_some(),
                open_transaction = transaction.is_some(),
                claimed_resume = claimed.is_some(),
                "a call dropped outside a Tokio runtime could not be settled"
            );
            host.active.settled(action, &result);
            return;
        }
        let dropped = DroppedCall {
            host: Arc::clone(host),
            action: Arc::clone(action),
            result,
            interruption,
            reservation: settlement.reservation,
            scope: settlement.scope,
            principal: settlement.principal.clone(),
            tenant: settlement.tenant.cloned(),
            now: settlement.now,
            transaction,
            claimed,
        };
        // In the call's span (`aip.invoke`, entered while its future drops) and with the
        // caller's subscriber, so the settlement's lines join the call's.
        crate::task::spawn_traced(dropped.settle());
    }
}

/// What [`Unsettled`] copies out of a dropped call to settle it on a task of its own.
struct DroppedCall {
    host: Arc<HostInner>,
    action: Arc<Action>,
    /// What the call settles with, before the transaction's settlement names an unknown
    /// outcome in it.
    result: ActionResult,
    interruption: transaction::Interruption,
    reservation: Option<Reservation>,
    scope: IdempotencyKeyScope,
    principal: PrincipalId,
    tenant: Option<VerifiedTenant>,
    now: Millis,
    transaction: Option<Box<OpenTransaction>>,
    claimed: Option<HeldResume>,
}

impl DroppedCall {
    /// Settles the call as the pipeline would have had its transport abandoned it: the
    /// transaction with the result (an unknown outcome when the handler had checkpointed), then
    /// the key (released when the result is retryable, else stored), then the claimed resume
    /// (given back when retryable).
    async fn settle(mut self) {
        let host = &self.host;
        let mut result = self.result;
        if let Some(open) = &self.transaction {
            use TransactionProtocolStatus as Status;
            // The dropped call's own settlement may have landed after all (a write in flight):
            // then it stands, and is read rather than raced (which would log a lost race).
            let status = |record: Result<Option<crate::store::TransactionRecord>, _>| {
                record.ok().flatten().map(|record| record.status)
            };
            let unsettled =
                status(host.store.transaction(&open.transaction_id).await).is_none_or(|status| {
                    matches!(
                        status,
                        Status::Prepared
                            | Status::Committing
                            | Status::Compensating
                            | Status::Reconciling
                    )
                });
            let unknown = unsettled
                && transaction::settle(
                    host,
                    &open.transaction_id,
                    open.mode,
                    &result,
                    self.interruption,
                    &open.fence,
                )
                .await;
            let unknown = unknown
                || status(host.store.transaction(&open.transaction_id).await)
                    == Some(Status::OutcomeUnknown);
            // A reconciliation leaves the outcome as unknown as it found it; its own result
            // stays retryable, as the pipeline answers it.
            if unknown && open.mode != TransactionMode::Reconcile {
                transaction::name_unknown_outcome(&mut result, &open.transaction_id);
            }
        }
        if let Some(reservation) = self.reservation.take() {
            match host.capabilities.get(&self.action.capability_id) {
                Some(hosted) => {
                    let settlement = Settlement {
                        host,
                        reservation: Some(reservation),
                        scope: self.scope,
                        capability: hosted.capability(),
                        principal: &self.principal,
                        tenant: self.tenant.as_ref(),
                        now: self.now,
                    };
                    // The claim goes back (when the result is retryable) before the key is
                    // released, as the pipeline's settlement does it.
                    let give_back = self
                        .claimed
                        .take()
                        .map(|claim| Box::new(GiveBack { claim, done: None }));
                    // What a dropped call settles with is an interruption or what its handler
                    // answered, never a refusal before the handler.
                    result = settlement.settle(result, give_back, false).await;
                }
                // Unreachable: the call reserved its key after finding its capability, and a
                // host's capabilities never change.
                None => tracing::warn!("the capability of a dropped call is gone"),
            }
        }
        // Read from the settled result: a failure that exhausted its key's attempts is a dead
        // letter, and its claim stays taken, as `run` decides. (A call that reserved its key
        // gave its claim to the settlement above.)
        let retryable = result.error.as_ref().is_some_and(|e| e.is_retryable());
        if let Some(claim) = self.claimed.as_ref().filter(|_| retryable) {
            give_back_resume(host, claim).await;
        }
        host.active.settled(&self.action, &result);
        match &result.error {
            Some(error) => tracing::info!(
                status = %result.status,
                code = %error.code,
                "action settled after its call was dropped"
            ),
            None => tracing::info!(
                status = %result.status,
                "action settled after its call was dropped"
            ),
        }
    }
}
