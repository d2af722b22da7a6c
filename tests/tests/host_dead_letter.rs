//! Retry exhaustion: a keyed action that keeps failing retryably is dead-lettered after
//! `HostLimits::max_attempts_per_key` attempts — its last failure is stored as
//! `action.dead_letter` and replayed, so no further attempt reaches the handler — on the memory
//! and SQLite stores alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::codes;
use aip_connector::host::{Host, HostLimits, TrustedContext};
use aip_connector::model::{Action, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::store::{MemoryStore, SharedStore, SqliteStore};
use aip_connector_tests::hooked_store::{Gate, HookedStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Send {
    to: String,
}

#[derive(Serialize, JsonSchema)]
struct Sent {
    id: String,
}

#[derive(Clone, Default)]
struct Mailer {
    attempts: Arc<AtomicUsize>,
    /// Attempts that fail retryably before one succeeds.
    failures: usize,
}

#[connector(id = "mailer")]
impl Mailer {
    /// Send a message.
    #[capability(
        id = "cap:mailer:send",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn send(&self, send: Send, _key: IdempotencyKey) -> Result<Sent, ConnectorFailure> {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if attempt <= self.failures {
            return Err(ConnectorFailure::new(
                "mailer.unavailable",
                "the mail provider answered 503",
                ErrorCategory::Temporary,
                aip_connector::model::ConnectorOperation::Invocation,
                "mailer",
            )
            .with_retryable(true)
            .with_retry_after_ms(50));
        }
        Ok(Sent {
            id: format!("msg-{}-{attempt}", send.to),
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
}

fn host(mailer: Mailer, store: SharedStore, max_attempts: u32) -> Host {
    Host::builder()
        .connector(mailer)
        .store(store)
        .limits(HostLimits::default().max_attempts_per_key(max_attempts))
        .build()
        .unwrap()
}

fn send(key: &str) -> Action {
    Action::new("cap:mailer:send", json!({ "to": "ada" })).with_idempotency_key(key)
}

async fn exhaust_then_replay(store: SharedStore) {
    let mailer = Mailer {
        failures: usize::MAX,
        ..Mailer::default()
    };
    let host = host(mailer.clone(), store, 3);
    for attempt in 1..=2 {
        let result = host.invoke(send("k1"), &caller()).await;
        let error = result.error.as_ref().unwrap();
        assert_eq!(error.code, "mailer.unavailable", "attempt {attempt}");
        assert_eq!(
            error.retryable,
            Some(true),
            "the key is released for a retry"
        );
    }
    let third = host.invoke(send("k1"), &caller()).await;
    assert_eq!(third.status, ActionResultStatus::Failed);
    let error = third.error.as_ref().unwrap();
    assert_eq!(error.code, codes::ACTION_DEAD_LETTER);
    assert_eq!(error.retryable, Some(false));
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["attempts"], 3);
    assert_eq!(details["last_error"]["code"], "mailer.unavailable");
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 3);

    // Every later attempt gets the dead letter back; the handler does not run again.
    let fourth = host.invoke(send("k1"), &caller()).await;
    assert_eq!(
        fourth.error.as_ref().unwrap().code,
        codes::ACTION_DEAD_LETTER
    );
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 3);

    // Another key starts its own count.
    let other = host.invoke(send("k2"), &caller()).await;
    assert_eq!(other.error.as_ref().unwrap().code, "mailer.unavailable");
}

#[tokio::test]
async fn retryable_failures_exhaust_the_key_into_a_dead_letter_on_memory() {
    exhaust_then_replay(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn retryable_failures_exhaust_the_key_into_a_dead_letter_on_sqlite() {
    exhaust_then_replay(Arc::new(SqliteStore::open_in_memory().unwrap())).await;
}

#[tokio::test]
async fn a_success_before_exhaustion_is_stored_as_usual() {
    let mailer = Mailer {
        failures: 2,
        ..Mailer::default()
    };
    let host = host(mailer.clone(), Arc::new(MemoryStore::new()), 3);
    for _ in 0..2 {
        let failed = host.invoke(send("k1"), &caller()).await;
        assert_eq!(failed.error.as_ref().unwrap().retryable, Some(true));
    }
    let sent = host.invoke(send("k1"), &caller()).await;
    assert_eq!(sent.status, ActionResultStatus::Completed, "{sent:?}");
    let replay = host.invoke(send("k1"), &caller()).await;
    assert_eq!(replay.output.as_ref().unwrap()["id"], "msg-ada-3");
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 3);
}

/// A store whose every settlement waits at `gate` until it opens.
fn settlements_held_at(gate: &Gate) -> Arc<HookedStore> {
    let gate = gate.clone();
    Arc::new(HookedStore::before_settle(move |_| gate.hold()))
}

/// A call dropped while its dead letter is written (its transport gave up) still stores it, on
/// a task of its own: the key's next attempt is answered the dead letter and the handler does
/// not run again. Releasing the key instead let one more attempt past the limit run.
#[tokio::test]
async fn a_call_dropped_while_its_dead_letter_is_written_still_stores_it() {
    let gate = Gate::default();
    let store = settlements_held_at(&gate);
    let mailer = Mailer {
        failures: usize::MAX,
        ..Mailer::default()
    };
    let host = host(mailer.clone(), store.clone(), 1);
    let call = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(send("k1"), &caller()).await }
    });
    gate.entered().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    gate.open();

    // Until the dead letter lands, the key is still held: a resend is told to come back.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let resend = host.invoke(send("k1"), &caller()).await;
            if resend.error.as_ref().map(|e| e.code.as_str())
                != Some(codes::IDEMPOTENCY_IN_PROGRESS)
            {
                return resend;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the key was settled");
    assert_eq!(
        answer.error.as_ref().unwrap().code,
        codes::ACTION_DEAD_LETTER,
        "{answer:?}"
    );
    assert!(answer.is_idempotent_replay(), "{answer:?}");
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 1);
}

/// A return task that its runtime drops (the runtime shut down right after the call was
/// dropped) writes nothing, and says what it left unwritten.
#[test]
fn a_return_task_its_runtime_drops_says_what_it_left() {
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let _default = logs.set_default();
    let gate = Gate::default();
    let store = settlements_held_at(&gate);
    let mailer = Mailer {
        failures: usize::MAX,
        ..Mailer::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let host = host(mailer.clone(), store.clone(), 1);
        let call = tokio::spawn(async move { host.invoke(send("k1"), &caller()).await });
        gate.entered().await;
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
    });
    // The return task is queued, or held at the gate again; the runtime drops it either way.
    drop(runtime);
    assert!(
        logs.contains("what a dropped call held was not returned")
            && logs.contains("dead_letter=true")
            && logs.contains("reserved_key=true"),
        "{}",
        logs.text()
    );
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 1);
}

/// A retryable failure's key release, and a dead letter's storing, that the store fails as
/// unavailable are written again: the next attempt runs at once (the key is free), and the
/// attempt after the dead letter gets it replayed. Before, each was written once, and the key
/// stayed reserved until its reservation expired (`idempotency.in_progress` meanwhile).
#[tokio::test]
async fn a_release_or_dead_letter_the_store_failed_is_written_again() {
    let store = Arc::new(HookedStore::default());
    let mailer = Mailer {
        failures: usize::MAX,
        ..Mailer::default()
    };
    let host = host(mailer.clone(), store.clone(), 2);

    store.fail_next_releases(2);
    let first = host.invoke(send("k1"), &caller()).await;
    assert_eq!(first.error.as_ref().unwrap().code, "mailer.unavailable");
    assert_eq!(store.releases(), 3, "released on the third write");

    store.fail_next_settles(2, false);
    let second = host.invoke(send("k1"), &caller()).await;
    assert_eq!(
        second.error.as_ref().unwrap().code,
        codes::ACTION_DEAD_LETTER,
        "the key was free: {second:?}"
    );
    let third = host.invoke(send("k1"), &caller()).await;
    assert_eq!(
        third.error.as_ref().unwrap().code,
        codes::ACTION_DEAD_LETTER,
        "the dead letter was stored: {third:?}"
    );
    assert_eq!(mailer.attempts.load(Ordering::SeqCst), 2);
}
