//! The host's [`InvocationContext`]: what extractors read during one execution.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use aip_connector_core::model::{Action, IdempotencyKeyScope};
use futures_util::task::AtomicWaker;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::invocation::{
    CallerIdentity, CancelHandle, CheckpointRecorder, ChunkSink, CompensationTarget,
    CredentialHandle, InvocationContext, VerifiedApprovals, VerifiedTenant,
};

/// Built by the pipeline from trusted sources only.
pub(crate) struct HostInvocation {
    /// Shared with the pipeline, not copied.
    pub(crate) action: Arc<Action>,
    pub(crate) caller: CallerIdentity,
    /// The verified tenant, copied from the action's trusted identity (which the pipeline set
    /// from the same tenant) the first time a handler asks: most handlers never do, and every
    /// call would otherwise pay for a copy. Boxed, so the context stays within four cache lines
    /// with the cancel handle below.
    pub(crate) tenant: OnceLock<Option<Box<VerifiedTenant>>>,
    /// The scope the pipeline reserved the action's key in, present exactly when the handler
    /// sees that key (the pipeline checked that it is not blank). The key is read from the
    /// action rather than copied, and its scoped form is rebuilt only when a handler asks.
    pub(crate) idempotency_scope: Option<IdempotencyKeyScope>,
    pub(crate) cancellation: CancelSignal,
    pub(crate) deadline: Instant,
    pub(crate) stream: Option<Arc<dyn ChunkSink>>,
    pub(crate) checkpoint: Option<Arc<dyn CheckpointRecorder>>,
    /// Boxed, like the approvals: most calls have neither, and inline they would double the
    /// context every call builds.
    pub(crate) credential: Option<Box<CredentialHandle>>,
    pub(crate) approval: Option<Box<VerifiedApprovals>>,
    /// The target of a `compensate` or the plan of a `commit`: boxed, as few calls have either
    /// and every call builds this context.
    pub(crate) transaction_input: Option<Box<TransactionInput>>,
    /// What the handler named its provider work by, for the cancel companion: allocated only
    /// when a handler's `Cancellation` sets it.
    pub(crate) cancel_handle: OnceLock<Box<CancelHandle>>,
}

/// What a transactional handler reads besides the action, by transaction mode.
pub(crate) enum TransactionInput {
    /// The target of a `compensate`.
    Compensation(Arc<CompensationTarget>),
    /// The plan a `commit` claimed.
    Plan(Arc<aip_connector_core::model::TransactionPlan>),
}

impl TransactionInput {
    /// The context's field for a handler given `compensation` or `plan` (at most one is set).
    pub(crate) fn boxed(
        compensation: Option<Arc<CompensationTarget>>,
        plan: Option<Arc<aip_connector_core::model::TransactionPlan>>,
    ) -> Option<Box<Self>> {
        compensation
            .map(Self::Compensation)
            .or(plan.map(Self::Plan))
            .map(Box::new)
    }
}

impl InvocationContext for HostInvocation {
    fn action(&self) -> &Action {
        &self.action
    }
    fn caller(&self) -> &CallerIdentity {
        &self.caller
    }
    fn tenant(&self) -> Option<&VerifiedTenant> {
        self.tenant
            .get_or_init(|| {
                let tenant = self.action.identity.as_ref()?.tenant.as_ref()?;
                Some(Box::new(VerifiedTenant {
                    id: tenant.id.clone(),
                    system: tenant.system.clone(),
                }))
            })
            .as_deref()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.action
            .idempotency_key
            .as_deref()
            .filter(|_| self.idempotency_scope.is_some())
    }
    fn scoped_idempotency_key(&self) -> Option<Cow<'_, str>> {
        let scope = self.idempotency_scope?;
        let raw = self.action.idempotency_key.as_deref()?;
        let identity = self.action.identity.as_deref();
        // The pipeline reserved this key with the same parts (the tenant and account it wrote
        // into the action's identity, the caller's principal), so this cannot fail; were it to,
        // `None` makes the extractor fail closed rather than forward the unscoped key.
        super::idempotency::scoped_key_of(
            scope,
            raw,
            &self.action,
            self.caller.principal_id.as_str(),
            identity
                .and_then(|i| i.tenant.as_ref())
                .map(|t| t.id.as_str()),
            identity.and_then(|i| i.external_account.as_ref()),
        )
        .ok()
        .map(Cow::Owned)
    }
    fn cancellation(&self) -> &CancellationToken {
        self.cancellation.token()
    }
    fn deadline(&self) -> Instant {
        self.deadline
    }
    fn stream(&self) -> Option<Arc<dyn ChunkSink>> {
        self.stream.clone()
    }
    fn checkpoint(&self) -> Option<Arc<dyn CheckpointRecorder>> {
        self.checkpoint.clone()
    }
    fn credential(&self) -> Option<&CredentialHandle> {
        self.credential.as_deref()
    }
    fn approval(&self) -> Option<&VerifiedApprovals> {
        self.approval.as_deref()
    }
    fn compensation(&self) -> Option<Arc<CompensationTarget>> {
        match self.transaction_input.as_deref()? {
            TransactionInput::Compensation(target) => Some(Arc::clone(target)),
            TransactionInput::Plan(_) => None,
        }
    }
    fn plan(&self) -> Option<Arc<aip_connector_core::model::TransactionPlan>> {
        match self.transaction_input.as_deref()? {
            TransactionInput::Plan(plan) => Some(Arc::clone(plan)),
            TransactionInput::Compensation(_) => None,
        }
    }
    fn cancel_handle(&self) -> Option<&CancelHandle> {
        Some(self.cancel_handle.get_or_init(Box::default))
    }
}

/// The cancellation of one execution: fired by [`Host::cancel`](super::Host::cancel) and when
/// the execution ends (whatever the handler spawned must learn that the action is over).
///
/// The pipeline races the handler against [`CancelSignal::poll_fired`], a flag and a waker. The
/// [`CancellationToken`] handlers see is created only when a handler asks for it: most handlers
/// never do, and a token costs an allocation plus a lock on every clone, wait, fire and drop,
/// which together cost more than the rest of the race.
#[derive(Default)]
pub(crate) struct CancelSignal {
    fired: AtomicBool,
    /// Someone asked for the cancellation ([`Host::cancel`](super::Host::cancel), a `Cancel`
    /// message), rather than only the transport giving up on the action
    /// ([`Host::abandon_as`](super::Host::abandon_as)). A request wins over an abandonment:
    /// it decides whether the result is kept under the action's key.
    requested: AtomicBool,
    waker: AtomicWaker,
    token: OnceLock<CancellationToken>,
}

impl CancelSignal {
    /// Fires the signal because someone asked for the cancellation (see `requested`).
    pub(crate) fn fire_requested(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.fire();
    }

    /// Whether the cancellation was asked for, rather than only the transport giving up.
    pub(crate) fn was_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Fires the signal: the race ends with `Cancelled` and the handler's token, if it has one
    /// or asks for one later, is cancelled. Idempotent.
    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        // Pairs with the fence in `token`: either this load sees the token, or `token` sees the
        // flag, so a token created while the signal fires is still cancelled.
        fence(Ordering::SeqCst);
        self.waker.wake();
        if let Some(token) = self.token.get() {
            token.cancel();
        }
    }

    /// Whether the signal has fired.
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Ready once the signal has fired; otherwise registers `cx`'s waker to be woken by
    /// [`CancelSignal::fire`].
    pub(crate) fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_fired() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // Checked again after registering: a fire between the two checks woke no one.
        if self.is_fired() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Whether a handler asked for its token (someone may hold a clone of it).
    pub(crate) fn has_token(&self) -> bool {
        self.token.get().is_some()
    }

    /// The handler's token, created on first use (already cancelled if the signal fired).
    pub(crate) fn token(&self) -> &CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new);
        fence(Ordering::SeqCst);
        if self.fired.load(Ordering::Relaxed) {
            token.cancel();
        }
        token
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts its wakes.
    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn firing_wakes_the_race_and_cancels_the_handlers_token() {
        let signal = CancelSignal::default();
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        assert!(signal.poll_fired(&mut cx).is_pending());
        let token = signal.token().clone();
        assert!(!token.is_cancelled());
        signal.fire();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(token.is_cancelled());
        assert!(signal.poll_fired(&mut cx).is_ready());
        // Firing again is harmless.
        signal.fire();
        assert!(signal.is_fired());
    }

    #[test]
    fn a_token_asked_for_after_the_signal_fired_is_already_cancelled() {
        let signal = CancelSignal::default();
        signal.fire();
        assert!(signal.token().is_cancelled());
    }

    #[test]
    fn a_token_created_while_the_signal_fires_is_cancelled() {
        // The two sides race on separate threads many times; the token must end up cancelled
        // every time, whichever side wins.
        for _ in 0..2_000 {
            let signal = Arc::new(CancelSignal::default());
            let firing = std::thread::spawn({
                let signal = Arc::clone(&signal);
                move || signal.fire()
            });
            let token = signal.token().clone();
            firing.join().unwrap();
            assert!(token.is_cancelled());
        }
    }
}
