//! A cancel that comes after an execution failed retryably is late for that execution: the host
//! answers `CancelOutcome::AlreadyFinished` and remembers nothing, so the caller's retry under the
//! same id and key runs (docs/host-runtime.md §7.2). Found by a hostile review: the retry was
//! answered `cancelled` before its handler, and that was stored under the key for its TTL.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::host::{CancelOutcome, CredentialProvider, Deployment, Host, TrustedContext};
use aip_connector::invocation::BoxFuture;
use aip_connector::model::{Action, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::store::{ManualClock, MemoryStore};
use aip_connector::{CredentialHandle, Secret};
use aip_connector::{VerifiedTenant, host::PENDING_CANCEL_TTL_MS};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Message {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Sent {
    attempt: usize,
}

/// A provider that is briefly unavailable: the first `failures` sends fail retryably.
#[derive(Clone, Default)]
struct Mailer {
    sends: Arc<AtomicUsize>,
    failures: usize,
    /// When set, the next send cancels this action as its caller, from inside its first poll,
    /// before it fails (the cancel lands while the handler finishes).
    cancel_while_sending: Arc<std::sync::Mutex<Option<(Host, aip_connector::ids::ActionId)>>>,
}

#[connector(id = "mailer")]
impl Mailer {
    /// Send a message.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        execution(sync, retry),
    )]
    async fn send(&self, message: Message, _key: IdempotencyKey) -> Result<Sent, ConnectorFailure> {
        let attempt = self.sends.fetch_add(1, Ordering::SeqCst) + 1;
        let canceller = self.cancel_while_sending.lock().unwrap().take();
        if let Some((host, id)) = canceller {
            // Nothing is registered yet (this poll finishes the handler): remembered.
            assert_eq!(host.cancel_as(&id, &caller()), CancelOutcome::Pending);
        }
        if attempt <= self.failures {
            return Err(ConnectorFailure::new(
                "provider.unavailable",
                format!("the provider is down; `{}` was not sent", message.text),
                ErrorCategory::Temporary,
                ConnectorOperation::Invocation,
                "mailer",
            )
            .with_retryable(true));
        }
        Ok(Sent { attempt })
    }

    /// The same send, authenticated with the deployment's token.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        execution(sync, retry),
        credentials(required, scopes = ["mail.send"]),
    )]
    async fn send_signed(
        &self,
        message: Message,
        key: IdempotencyKey,
        _token: Credential,
    ) -> Result<Sent, ConnectorFailure> {
        self.send(message, key).await
    }
}

/// A secret store that is briefly unavailable: its `unavailable_at`-th lookup (counted from 1)
/// fails retryably.
#[derive(Clone, Default)]
struct FlakyVault {
    lookups: Arc<AtomicUsize>,
    unavailable_at: usize,
}

impl CredentialProvider for FlakyVault {
    fn resolve<'a>(
        &'a self,
        _capability: &'a aip_connector::model::Capability,
        _caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>> {
        let lookup = self.lookups.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            if lookup == self.unavailable_at {
                return Err(ConnectorFailure::temporary(
                    "vault.unavailable",
                    "the secret store did not answer",
                    "vault",
                )
                .with_retryable(true));
            }
            Ok(Some(
                CredentialHandle::new("mail-token", "vault", Secret::new("tok"))
                    .with_scopes(["mail.send"])
                    .with_tenant("t1"),
            ))
        })
    }
}

fn caller() -> TrustedContext {
    person("user:ada")
}

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(mailer: &Mailer, clock: &Arc<ManualClock>) -> Host {
    Host::builder()
        .connector(mailer.clone())
        .store(Arc::new(MemoryStore::default()))
        .clock(Arc::clone(clock) as _)
        .build()
        .unwrap()
}

fn send(key: &str) -> Action {
    Action::new("cap:mailer:send", json!({ "text": "hello" })).with_idempotency_key(key)
}

#[tokio::test]
async fn a_cancel_after_a_retryable_failure_is_late_and_the_retry_runs() {
    let mailer = Mailer {
        failures: 1,
        ..Mailer::default()
    };
    let clock = Arc::new(ManualClock::new());
    let host = host(&mailer, &clock);
    let action = send("k-1");
    let failed = host.invoke(action.clone(), &caller()).await;
    assert!(
        failed.error.as_ref().is_some_and(|e| e.is_retryable()),
        "{failed:?}"
    );
    // The caller's cancel and an operator's are both late for the execution that failed.
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::AlreadyFinished
    );
    assert_eq!(host.cancel(&action.id), CancelOutcome::AlreadyFinished);
    // So the retry, the same action under the same key, runs.
    let retried = host.invoke(action.clone(), &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(retried.output, Some(json!({ "attempt": 2 })));
    // And its success is what the key replays.
    let replayed = host.invoke(action, &caller()).await;
    assert_eq!(
        replayed.status,
        ActionResultStatus::Completed,
        "{replayed:?}"
    );
    assert_eq!(mailer.sends.load(Ordering::SeqCst), 2);
}

/// A cancel that lands while the handler's first poll finishes it with a retryable failure is
/// late for that execution too: it does not cancel the caller's retry before its handler (found
/// by a hostile review: it was remembered, and the retry was answered `cancelled`, stored under
/// the key).
#[tokio::test]
async fn a_cancel_during_the_poll_that_fails_retryably_is_late_too() {
    let mailer = Mailer {
        failures: 1,
        ..Mailer::default()
    };
    let clock = Arc::new(ManualClock::new());
    let host = host(&mailer, &clock);
    let action = send("k-during");
    *mailer.cancel_while_sending.lock().unwrap() = Some((host.clone(), action.id.clone()));
    let failed = host.invoke(action.clone(), &caller()).await;
    assert!(
        failed.error.as_ref().is_some_and(|e| e.is_retryable()),
        "{failed:?}"
    );
    let retried = host.invoke(action, &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(mailer.sends.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn once_the_retry_was_sent_a_cancel_is_remembered_for_it_again() {
    let mailer = Mailer {
        failures: 2,
        ..Mailer::default()
    };
    let clock = Arc::new(ManualClock::new());
    let host = host(&mailer, &clock);
    let action = send("k-2");
    host.invoke(action.clone(), &caller()).await;
    // The retry fails too; a cancel now is late for it in turn.
    host.invoke(action.clone(), &caller()).await;
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::AlreadyFinished
    );
    // A different action of the same caller is unaffected: remembered as before.
    let other = send("k-3");
    assert_eq!(host.cancel_as(&other.id, &caller()), CancelOutcome::Pending);
    let cancelled = host.invoke(other, &caller()).await;
    assert_eq!(
        cancelled.status,
        ActionResultStatus::Cancelled,
        "{cancelled:?}"
    );
    // The third attempt succeeds; it started, so the host forgot the failure: a cancel of the
    // id is no longer "late for a retryable failure".
    let third = host.invoke(action.clone(), &caller()).await;
    assert_eq!(third.status, ActionResultStatus::Completed, "{third:?}");
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::Pending
    );
}

#[tokio::test]
async fn a_strangers_cancel_of_the_id_learns_nothing_and_does_not_touch_the_retry() {
    let mailer = Mailer {
        failures: 1,
        ..Mailer::default()
    };
    let clock = Arc::new(ManualClock::new());
    let host = host(&mailer, &clock);
    let action = send("k-4");
    host.invoke(action.clone(), &caller()).await;
    // Another caller is answered as for any id it does not run.
    assert_eq!(
        host.cancel_as(&action.id, &person("user:eve")),
        CancelOutcome::Pending
    );
    let retried = host.invoke(action, &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
}

#[tokio::test]
async fn the_note_of_a_retryable_failure_lapses_with_the_cancellation_window() {
    let mailer = Mailer {
        failures: 1,
        ..Mailer::default()
    };
    let clock = Arc::new(ManualClock::new());
    let host = host(&mailer, &clock);
    let action = send("k-5");
    host.invoke(action.clone(), &caller()).await;
    clock.advance(PENDING_CANCEL_TTL_MS);
    // A minute on, the host no longer tells: the cancel is remembered, as for an action it has
    // not seen, and cancels the retry that comes within the next minute.
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::Pending
    );
    let retried = host.invoke(action, &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Cancelled, "{retried:?}");
}

/// Found by a hostile review: the note was forgotten when the retry merely arrived, so a retry
/// that failed before its handler (a secret store that did not answer) left nothing noted, and
/// the next cancel was remembered for the retry after it. The note now stays until a retry's
/// handler starts.
#[tokio::test]
async fn a_retry_that_fails_before_its_handler_leaves_the_cancel_late() {
    let mailer = Mailer {
        failures: 1,
        ..Mailer::default()
    };
    let vault = FlakyVault {
        unavailable_at: 2,
        ..FlakyVault::default()
    };
    let host = Host::builder()
        .connector(mailer.clone())
        .store(Arc::new(MemoryStore::default()))
        .deployment(Deployment::default().with_credentials(vault))
        .build()
        .unwrap();
    let action = Action::new("cap:mailer:send_signed", json!({ "text": "hello" }))
        .with_idempotency_key("k-6");
    let failed = host.invoke(action.clone(), &caller()).await;
    assert_eq!(failed.error.as_ref().unwrap().code, "provider.unavailable");
    // The retry fails at its credential, before its handler.
    let unauthenticated = host.invoke(action.clone(), &caller()).await;
    assert_eq!(
        unauthenticated.error.as_ref().unwrap().code,
        "vault.unavailable",
        "{unauthenticated:?}"
    );
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::AlreadyFinished
    );
    let retried = host.invoke(action, &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(mailer.sends.load(Ordering::SeqCst), 2);
}
