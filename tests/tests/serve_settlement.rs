//! What the native HTTP binding says about an action agrees with how the action settles: the
//! answer to a cancel is the action's own result (or an ack that claims nothing), a streamed
//! action whose client went away before its handler started is abandoned there and keeps its
//! request slot until it has settled, and shutdown does not leave a streamed action to run
//! after `serve` returned. Each test reproduces a finding of a hostile review.
//!
//! The handlers and the credential provider wait on gates the tests open, so no assertion
//! depends on how long anything takes; the bounds are only there to fail instead of hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aip_connector::codes;
use aip_connector::host::{CredentialProvider, Deployment, Host, TrustedContext};
use aip_connector::model::{Action, ActionResult, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::serve::server::MESSAGES_PATH;
use aip_connector::serve::{
    AipClient, AipServer, BearerTokens, BoxFuture, CancelReply, ServerConfig,
};
use aip_connector::store::MemoryStore;
use aip_connector::{CredentialHandle, Secret, VerifiedTenant};
use aip_connector_tests::raw_http::send_streamed_action;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{Semaphore, oneshot};

/// The generous bound of every wait: a test fails after it instead of hanging.
const BOUND: Duration = Duration::from_secs(20);

#[derive(Deserialize, JsonSchema)]
struct Job {
    /// `finish`: what its last poll waits for, `"cancel"` (its cancellation) or `"gate"`.
    #[serde(default)]
    until: String,
}

#[derive(Serialize, JsonSchema)]
struct Done {
    finished: bool,
}

#[derive(Clone, Default)]
struct Lab {
    /// Handlers that started (their first poll).
    started: Arc<AtomicUsize>,
    /// Handlers that ran to their end: their side effect happened.
    finished: Arc<AtomicUsize>,
    /// `finish` is in its last poll.
    in_last_poll: Arc<AtomicBool>,
    /// Opens `finish`'s last poll when it waits for `"gate"`.
    gate: Arc<AtomicBool>,
}

#[connector(id = "lab")]
impl Lab {
    /// Answers at once.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn probe(&self, _job: Job) -> Result<Done, ConnectorFailure> {
        Ok(Done { finished: true })
    }

    /// Fails at once, retryably, as a provider that is briefly down.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn flaky(&self, _job: Job) -> Result<Done, ConnectorFailure> {
        Err(ConnectorFailure::new(
            "provider.unavailable",
            "the provider is down",
            ErrorCategory::Temporary,
            ConnectorOperation::Invocation,
            "lab",
        )
        .with_retryable(true))
    }

    /// Waits once (so that a cancel can find it), then works synchronously in its last poll,
    /// as a handler that parses a large answer or writes a local file does, until its
    /// cancellation fires or the test opens the gate; then it completes.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 60_000))]
    async fn finish(&self, job: Job, cancel: Cancellation) -> Result<Done, ConnectorFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        tokio::task::block_in_place(|| {
            self.in_last_poll.store(true, Ordering::SeqCst);
            let began = Instant::now();
            let open = || match job.until.as_str() {
                "cancel" => cancel.is_cancelled(),
                _ => self.gate.load(Ordering::SeqCst),
            };
            while !open() && began.elapsed() < BOUND {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(Done { finished: true })
    }

    /// A streamed, credentialed write (its credential comes from the gated vault), which runs
    /// until cancelled. No retry is safe, so an abandonment is stored under its key.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        credentials(required, scopes = ["lab.write"]),
        sla(timeout_ms = 60_000)
    )]
    async fn export(
        &self,
        _job: Job,
        _sink: StreamSink<Done>,
        _credential: Credential,
        cancel: Cancellation,
    ) -> Result<Done, ConnectorFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(BOUND) => {}
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(Done { finished: true })
    }
}

/// A credential provider that answers only once the test lets it (a vault round trip that
/// takes as long as the test needs).
#[derive(Clone)]
struct GatedVault {
    /// Lookups begun.
    entered: Arc<AtomicUsize>,
    /// Lookups answered.
    resolved: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
}

impl Default for GatedVault {
    fn default() -> Self {
        Self {
            entered: Arc::default(),
            resolved: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl GatedVault {
    fn open(&self) {
        self.release.add_permits(1_000);
    }
}

impl CredentialProvider for GatedVault {
    fn resolve<'a>(
        &'a self,
        _capability: &'a aip_connector::model::Capability,
        _caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>> {
        Box::pin(async move {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let _permit = self.release.acquire().await;
            self.resolved.fetch_add(1, Ordering::SeqCst);
            Ok(Some(
                CredentialHandle::new("cred-1", "vault", Secret::new("lab-secret"))
                    .with_scopes(["lab.write"]),
            ))
        })
    }
}

fn ada() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "bearer")
        .with_tenant(VerifiedTenant::new("t1"))
}

struct Running {
    base: String,
    address: String,
    host: Host,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Running {
    fn client(&self) -> AipClient {
        AipClient::new(&self.base).bearer_token("tok-ada")
    }

    fn signal_shutdown(&mut self) {
        let _ = self.shutdown.take().unwrap().send(());
    }

    /// Waits for `serve` to return, bounded.
    async fn served(&mut self) {
        tokio::time::timeout(BOUND, self.task.take().unwrap())
            .await
            .expect("serve returns")
            .unwrap()
            .unwrap();
    }

    async fn stop(mut self) {
        self.signal_shutdown();
        self.served().await;
    }
}

async fn start(lab: Lab, vault: GatedVault, config: ServerConfig) -> Running {
    let host = Host::builder()
        .connector(lab)
        .store(Arc::new(MemoryStore::default()))
        .deployment(Deployment::default().with_credentials(vault))
        .build()
        .expect("host builds");
    let server = AipServer::new(
        host.clone(),
        BearerTokens::new().with("tok-ada", ada()),
        config,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async move {
        let _ = signal.await;
    }));
    Running {
        base: format!("http://{address}"),
        address,
        host,
        shutdown: Some(shutdown),
        task: Some(task),
    }
}

async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let began = Instant::now();
    while !condition() {
        assert!(began.elapsed() < BOUND, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn export(key: &str) -> Action {
    Action::new("cap:lab:export", json!({})).with_idempotency_key(key)
}

/// Opens a streamed action over a raw socket and reads the response head: the client can then
/// leave by dropping the socket.
async fn open_stream(address: &str, action: Action) -> tokio::net::TcpStream {
    let mut socket = send_streamed_action(address, "tok-ada", action).await;
    let mut head = vec![0; 4096];
    let read = tokio::time::timeout(BOUND, socket.read(&mut head))
        .await
        .expect("a response head")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..read]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    socket
}

/// Sends a cancel of `action_id` and returns the answer's body, raw (an `action_result` or an
/// `ack`).
async fn cancel(base: &str, action_id: &aip_connector::ids::ActionId) -> Value {
    let envelope = json!({
        "aip_version": "1.0",
        "message_type": "aip.core.v1.cancel",
        "message_id": "msg_cancel",
        "sent_at": "2026-12-02T10:00:01Z",
        "body": { "cancel": { "target": { "action": action_id.as_str() } } },
    });
    let response = reqwest::Client::new()
        .post(format!("{base}{MESSAGES_PATH}"))
        .header("content-type", "application/json")
        .bearer_auth("tok-ada")
        .body(envelope.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["body"].clone()
}

/// Resends `action` in process, as its caller, until its first run has settled; returns the
/// replayed result.
async fn replay_of(host: &Host, action: Action) -> ActionResult {
    let began = Instant::now();
    loop {
        let result = host
            .invoke_stream(action.clone(), ada())
            .result()
            .await
            .expect("a terminal chunk");
        let in_progress =
            result.error.as_ref().map(|e| e.code.as_str()) == Some(codes::IDEMPOTENCY_IN_PROGRESS);
        if !in_progress {
            return result;
        }
        assert!(began.elapsed() < BOUND, "the first run never settled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Found by a hostile review: a cancel that reached a handler during its last poll was
/// answered `cancelled` at once, while the handler went on to complete ("a success stands")
/// and the action's own answer, stored and replayed, was `completed`. A client that trusted
/// the cancel believed that a side effect had not happened. The cancel is now answered with
/// the result the action settled with.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_that_lands_during_the_last_poll_is_answered_with_the_result_that_stands() {
    let lab = Lab::default();
    let running = start(lab.clone(), GatedVault::default(), ServerConfig::default()).await;
    let action = Action::new("cap:lab:finish", json!({ "until": "cancel" }));
    let id = action.id.clone();
    let call = tokio::spawn({
        let client = running.client();
        async move { client.invoke(action).await }
    });
    wait_until("the handler's last poll", || {
        lab.in_last_poll.load(Ordering::SeqCst)
    })
    .await;
    let answer = cancel(&running.base, &id).await;
    let result = call.await.unwrap().unwrap();
    assert_eq!(
        lab.finished.load(Ordering::SeqCst),
        1,
        "the handler ran to its end"
    );
    assert_eq!(result.status, ActionResultStatus::Completed);
    let told: ActionResult = serde_json::from_value(answer["action_result"].clone())
        .unwrap_or_else(|_| panic!("the cancel is answered with a result: {answer}"));
    assert_eq!(told.status, ActionResultStatus::Completed, "{answer}");
    assert_eq!(told.output, result.output);
    running.stop().await;
}

/// A cancel that reached its action when the action has not settled within `cancel_grace`
/// (a handler blocking its worker here; a slow cancel companion, a slow store) is answered
/// with an `accepted` ack, which claims no outcome, rather than a `cancelled` the action may
/// not end with.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_of_an_action_that_has_not_settled_within_the_grace_claims_no_outcome() {
    let lab = Lab::default();
    let config = ServerConfig::default().cancel_grace(Duration::from_millis(200));
    let running = start(lab.clone(), GatedVault::default(), config).await;
    let action = Action::new("cap:lab:finish", json!({ "until": "gate" }));
    let id = action.id.clone();
    let call = tokio::spawn({
        let client = running.client();
        async move { client.invoke(action).await }
    });
    wait_until("the handler's last poll", || {
        lab.in_last_poll.load(Ordering::SeqCst)
    })
    .await;
    let answer = cancel(&running.base, &id).await;
    assert_eq!(answer["ack"]["status"], "accepted", "{answer}");
    assert_eq!(answer["ack"]["action_id"], id.as_str(), "{answer}");
    lab.gate.store(true, Ordering::SeqCst);
    let result = call.await.unwrap().unwrap();
    assert_eq!(result.status, ActionResultStatus::Completed);
    running.stop().await;
}

/// Found by a hostile review: a cancel sent after an action failed retryably was remembered and
/// answered `accepted`, and it then cancelled the caller's retry before its handler ran. It is
/// late for the execution that failed: answered with a `rejected` ack that says so, and the
/// retry runs.
#[tokio::test]
async fn a_cancel_after_a_retryable_failure_is_rejected_as_late() {
    let lab = Lab::default();
    let running = start(lab.clone(), GatedVault::default(), ServerConfig::default()).await;
    let action = Action::new("cap:lab:flaky", json!({}));
    let failed = running.client().invoke(action.clone()).await.unwrap();
    assert!(
        failed.error.as_ref().is_some_and(|e| e.is_retryable()),
        "{failed:?}"
    );
    let answer = cancel(&running.base, &action.id).await;
    assert_eq!(answer["ack"]["status"], "rejected", "{answer}");
    assert_eq!(answer["ack"]["action_id"], action.id.as_str(), "{answer}");
    let reason = answer["ack"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("failed with a retryable error"), "{answer}");
    // The client tells this answer apart.
    match running.client().cancel(&action.id).await.unwrap() {
        CancelReply::TooLate(ack) => assert_eq!(ack.action_id, action.id),
        other => panic!("not `TooLate`: {other:?}"),
    }
    // The retry runs (and fails the same way), rather than being answered `cancelled`.
    let retried = running.client().invoke(action).await.unwrap();
    assert_eq!(retried.status, ActionResultStatus::Failed, "{retried:?}");
    running.stop().await;
}

/// Found by a hostile review: a streamed action whose client left while the host was still
/// before the handler (a credential lookup here) was not abandoned (the server's one
/// `abandon_as` found nothing running yet), and its request slot was freed at the disconnect,
/// so its handler then ran for nobody, outside `max_in_flight`. Now the action is abandoned
/// when it reaches its handler, and its slot is held until it has settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_whose_client_left_before_its_handler_is_abandoned_there_and_holds_its_slot() {
    let lab = Lab::default();
    let vault = GatedVault::default();
    let running = start(
        lab.clone(),
        vault.clone(),
        ServerConfig::default().max_in_flight(1),
    )
    .await;
    let socket = open_stream(&running.address, export("drop-1")).await;
    wait_until("the credential lookup", || {
        vault.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    drop(socket);
    // The action still waits for its credential: its slot stays taken, however long after the
    // disconnect the server is asked.
    let client = running.client();
    let probe = || Action::new("cap:lab:probe", json!({}));
    for _ in 0..20 {
        let refused = client.invoke(probe()).await.unwrap_err();
        let aip_connector::serve::ClientError::Remote(error) = refused else {
            panic!("expected a refusal, got {refused:?}");
        };
        assert_eq!(error.code, codes::TRANSPORT_OVERLOADED);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    vault.open();
    // It reaches its handler, finds its client gone and is abandoned there; then the slot frees.
    let began = Instant::now();
    let answered = loop {
        if let Ok(result) = client.invoke(probe()).await {
            break result;
        }
        assert!(began.elapsed() < BOUND, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(answered.status, ActionResultStatus::Completed);
    assert_eq!(
        lab.started.load(Ordering::SeqCst),
        0,
        "the handler ran for nobody"
    );
    // Nothing reached the provider, so the abandonment was not stored under the key: the
    // client's resend runs the action.
    let resent = replay_of(&running.host, export("drop-1")).await;
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    assert!(!resent.is_idempotent_replay(), "{resent:?}");
    assert_eq!(lab.started.load(Ordering::SeqCst), 1);
    running.stop().await;
}

/// Found by a hostile review: at shutdown, a streamed action still before its handler (here
/// past the hard stop) was missed by the drain's one `abandon_as`, `serve` returned, and the
/// handler then ran after the server had said it was done. The drain's end now abandons the
/// action whenever it reaches its handler, which then never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_still_before_its_handler_at_the_drains_end_never_runs_it() {
    let lab = Lab::default();
    let vault = GatedVault::default();
    let config = ServerConfig::default()
        .drain_timeout(Duration::from_millis(100))
        .cancel_grace(Duration::from_millis(100))
        .purge_interval(None);
    let mut running = start(lab.clone(), vault.clone(), config).await;
    let _socket = open_stream(&running.address, export("drain-1")).await;
    wait_until("the credential lookup", || {
        vault.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    running.signal_shutdown();
    running.served().await;
    vault.open();
    wait_until("the credential", || {
        vault.resolved.load(Ordering::SeqCst) == 1
    })
    .await;
    // The action goes on from its credential to its reservation and its handler: a resend
    // that reserved the key first would run the handler itself, so it comes well after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        lab.started.load(Ordering::SeqCst),
        0,
        "the handler ran after serve returned"
    );
    // Abandoned before its handler, so nothing reached the provider: the abandonment was not
    // stored under the key, and the client's retry (to another replica, say) runs the action.
    let resent = replay_of(&running.host, export("drain-1")).await;
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    assert!(!resent.is_idempotent_replay(), "{resent:?}");
    assert_eq!(lab.started.load(Ordering::SeqCst), 1);
}

/// The drain's end abandons a streamed action whose handler starts only after it (its
/// credential lookup outlasted the drain), as it abandons a unary one: the client reads
/// `action.abandoned`, and `serve` returns once the action settled, long before the hard stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_drains_end_abandons_a_stream_whose_handler_starts_after_it() {
    let lab = Lab::default();
    let vault = GatedVault::default();
    let config = ServerConfig::default()
        .drain_timeout(Duration::from_millis(50))
        .cancel_grace(Duration::from_secs(60))
        .purge_interval(None);
    let mut running = start(lab.clone(), vault.clone(), config).await;
    let stream = tokio::spawn({
        let client = running.client();
        async move { client.invoke_stream(export("late-1")).await?.result().await }
    });
    wait_until("the credential lookup", || {
        vault.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let signalled = Instant::now();
    running.signal_shutdown();
    // Whether the drain ends before or after the handler starts, the handler is abandoned.
    tokio::time::sleep(Duration::from_millis(200)).await;
    vault.open();
    let result = tokio::time::timeout(BOUND, stream)
        .await
        .expect("the stream ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        result.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::ACTION_ABANDONED),
        "{result:?}"
    );
    running.served().await;
    assert!(
        signalled.elapsed() < Duration::from_secs(50),
        "serve waited for the hard stop"
    );
    assert_eq!(lab.finished.load(Ordering::SeqCst), 0);
}
