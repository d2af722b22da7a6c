//! Streaming back-pressure and retry release: a slow consumer holds a fast handler back at the
//! buffer size, nothing is accepted after the terminal chunk, and a retryable failure releases
//! the idempotency key so the next attempt executes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{Host, HostLimits, TrustedContext};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ConnectorOperation, Principal, PrincipalKind,
    StreamChunkKind,
};
use aip_connector::prelude::*;
use aip_connector_tests::hooked_store::{Gate, HookedStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Query {
    count: u32,
}

#[derive(Serialize, JsonSchema)]
struct Summary {
    sent: u32,
}

#[derive(Serialize, JsonSchema)]
struct Hit {
    n: u32,
}

#[derive(Clone, Default)]
struct Feed {
    sent: Arc<AtomicUsize>,
    attempts: Arc<AtomicUsize>,
    /// Runs of `export` begun.
    exports: Arc<AtomicUsize>,
    /// Runs of `hold` whose future the host dropped before it finished.
    holds_dropped: Arc<AtomicUsize>,
    /// What `lossy_post` waits on after its first chunk (its provider's answer).
    provider_answer: Arc<tokio::sync::Notify>,
    /// Whether `export_watching`'s token had fired when its send was refused.
    fired_when_refused: Arc<std::sync::Mutex<Option<bool>>>,
}

/// Counts a drop.
struct CountOnDrop(Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[connector(id = "feed")]
impl Feed {
    /// Streams `count` hits as fast as the consumer allows.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn firehose(
        &self,
        query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        for n in 0..query.count {
            sink.send(Hit { n }).await?;
            self.sent.fetch_add(1, Ordering::SeqCst);
        }
        Ok(Summary { sent: query.count })
    }

    /// A keyed export: each run writes an export job, then streams its rows.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal))]
    async fn export(
        &self,
        query: Query,
        _key: IdempotencyKey,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        self.exports.fetch_add(1, Ordering::SeqCst);
        for n in 0..query.count {
            sink.send(Hit { n }).await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Summary { sent: query.count })
    }

    /// The export, turning a refused send into a failure of its own.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal))]
    async fn export_mapped(
        &self,
        query: Query,
        _key: IdempotencyKey,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        self.exports.fetch_add(1, Ordering::SeqCst);
        for n in 0..query.count {
            sink.send(Hit { n }).await.map_err(|_| {
                ConnectorFailure::new(
                    "feed.export_failed",
                    "the export could not be delivered",
                    ErrorCategory::Permanent,
                    ConnectorOperation::Streaming,
                    "feed",
                )
            })?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Summary { sent: query.count })
    }

    /// The export, ignoring refused sends and never finishing on its own.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal))]
    async fn export_forever(
        &self,
        _query: Query,
        _key: IdempotencyKey,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        self.exports.fetch_add(1, Ordering::SeqCst);
        let mut n = 0;
        loop {
            let _ignored = sink.send(Hit { n }).await;
            n += 1;
            self.sent.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    }

    /// The export, noting whether its cancellation had fired when a send was refused (so that
    /// what it spawned would already know), then giving up.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal))]
    async fn export_watching(
        &self,
        _query: Query,
        _key: IdempotencyKey,
        sink: StreamSink<Hit>,
        cancel: Cancellation,
    ) -> Result<Summary, ConnectorFailure> {
        let mut n = 0;
        loop {
            if let Err(refused) = sink.send(Hit { n }).await {
                *self.fired_when_refused.lock().unwrap() = Some(cancel.is_cancelled());
                return Err(refused);
            }
            n += 1;
        }
    }

    /// Streams one hit, then waits a long time (on its provider, say) without sending again.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 60_000))]
    async fn hold(
        &self,
        _query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        sink.send(Hit { n: 0 }).await?;
        let _dropped = CountOnDrop(Arc::clone(&self.holds_dropped));
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Summary { sent: 1 })
    }

    /// The same export without the key: its retry safety is `unknown`.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal))]
    async fn export_once(
        &self,
        query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        self.exports.fetch_add(1, Ordering::SeqCst);
        for n in 0..query.count {
            sink.send(Hit { n }).await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Summary { sent: query.count })
    }

    /// A bulk post that streams its progress inside a transaction: it checkpoints the provider
    /// operation, then streams a row per entry.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute])
    )]
    async fn bulk_post(
        &self,
        query: Query,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        checkpoint
            .record(
                aip_connector::model::ProviderOperationRef {
                    provider: "feed".to_owned(),
                    operation_id: format!("bulk-{}", key.as_str()),
                    request_id: None,
                },
                None,
            )
            .await?;
        for n in 0..query.count {
            sink.send(Hit { n }).await?;
        }
        Ok(Summary { sent: query.count })
    }

    /// A streamed post inside a transaction whose provider answer is lost: after its first
    /// chunk it waits for the provider, then reports that the write may have reached it.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute])
    )]
    async fn lossy_post(
        &self,
        _query: Query,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        sink.send(Hit { n: 0 }).await?;
        self.provider_answer.notified().await;
        Err(ConnectorFailure::new(
            "feed.answer_lost",
            "the provider's answer was lost",
            ErrorCategory::Temporary,
            ConnectorOperation::Invocation,
            "feed",
        )
        .with_uncertain_outcome())
    }

    /// Gives each send 20 ms to find room and goes on without the chunk when it does not.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn impatient(
        &self,
        query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        let mut sent = 0;
        for n in 0..query.count {
            if let Ok(delivered) =
                tokio::time::timeout(Duration::from_millis(20), sink.send(Hit { n })).await
            {
                delivered?;
                sent += 1;
            }
        }
        Ok(Summary { sent })
    }

    /// Streams one hit, then stays quiet past its 200 ms SLA.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 200))]
    async fn stalls(
        &self,
        _query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        sink.send(Hit { n: 0 }).await?;
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Summary { sent: 1 })
    }

    /// Streams as fast as it may, past its 200 ms SLA when nobody reads.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 200))]
    async fn floods(
        &self,
        query: Query,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        for n in 0..query.count {
            sink.send(Hit { n }).await?;
        }
        Ok(Summary { sent: query.count })
    }

    /// Fails retryably on the first attempt, then succeeds.
    #[capability(risk = low, side_effects = [write], idempotency(required, scope = principal), data(sensitivity = internal), execution(sync, retry))]
    async fn flaky(
        &self,
        _query: Query,
        _key: IdempotencyKey,
    ) -> Result<Summary, ConnectorFailure> {
        if self.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(ConnectorFailure::new(
                "feed.busy",
                "provider busy",
                ErrorCategory::Temporary,
                ConnectorOperation::Invocation,
                "feed",
            )
            .with_retryable(true)
            .with_retry_after_ms(10));
        }
        Ok(Summary { sent: 1 })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("agent:reader", PrincipalKind::Agent), "test")
}

#[tokio::test]
async fn a_slow_consumer_holds_the_handler_at_the_buffer_size() {
    let feed = Feed::default();
    let host = Host::builder()
        .connector(feed.clone())
        .limits(HostLimits::default().stream_buffer(2))
        .build()
        .unwrap();
    let mut stream = host.invoke_stream(
        Action::new("cap:feed:firehose", json!({ "count": 50 })),
        caller(),
    );

    // Nobody reads: the handler fills the buffer, then waits.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent_while_blocked = feed.sent.load(Ordering::SeqCst);
    assert!(
        sent_while_blocked <= 3,
        "the handler ran ahead of the consumer: {sent_while_blocked} chunks"
    );

    // Reading drains everything, in order, ending with exactly one terminal chunk.
    let mut sequences = Vec::new();
    let mut terminal = Vec::new();
    while let Some(chunk) = stream.next().await {
        sequences.push(chunk.sequence);
        if matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error) {
            terminal.push(chunk);
        }
    }
    assert_eq!(sequences, (0..51).collect::<Vec<u64>>());
    assert_eq!(terminal.len(), 1);
    assert_eq!(terminal[0].kind, StreamChunkKind::Done);
    assert_eq!(terminal[0].data.as_ref().unwrap()["output"]["sent"], 50);
    // The stream is closed after its terminal chunk.
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn a_retryable_failure_releases_the_key_and_the_next_attempt_executes() {
    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let action =
        || Action::new("cap:feed:flaky", json!({ "count": 1 })).with_idempotency_key("retry-1");
    let first = host.invoke(action(), &caller()).await;
    assert_eq!(first.error.as_ref().unwrap().code, "feed.busy");
    assert_eq!(first.error.as_ref().unwrap().retryable, Some(true));
    let second = host.invoke(action(), &caller()).await;
    assert_eq!(second.status, ActionResultStatus::Completed, "{second:?}");
    assert_eq!(feed.attempts.load(Ordering::SeqCst), 2);
    // The success is stored: a third call replays it.
    let third = host.invoke(action(), &caller()).await;
    assert_eq!(third.output.unwrap()["idempotent_replay"], true);
    assert_eq!(feed.attempts.load(Ordering::SeqCst), 2);
}

/// `ChunkStream::result` reads to the terminal chunk and decodes the result it carries, for a
/// completed stream and for one refused before its handler.
#[tokio::test]
async fn the_result_of_a_stream_is_its_terminal_chunk_decoded() {
    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let completed = host
        .invoke_stream(
            Action::new("cap:feed:firehose", json!({ "count": 3 })),
            caller(),
        )
        .result()
        .await
        .expect("a terminal chunk");
    assert_eq!(completed.status, ActionResultStatus::Completed);
    assert_eq!(completed.output.unwrap()["sent"], 3);

    let refused = host
        .invoke_stream(
            Action::new("cap:feed:firehose", json!({ "count": "many" })),
            caller(),
        )
        .result()
        .await
        .expect("a terminal chunk");
    assert_eq!(refused.status, ActionResultStatus::Failed);
    assert_eq!(refused.error.unwrap().code, "action.input_schema_invalid");
    assert_eq!(feed.sent.load(Ordering::SeqCst), 3);
}

/// A streaming handler may run in a transaction: `invoke_stream` of an `execute` streams its rows
/// and settles the transaction, checkpoint included, as a plain `execute` does.
#[tokio::test]
async fn a_streaming_execute_streams_and_settles_its_transaction() {
    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let action = Action::new("cap:feed:bulk_post", json!({ "count": 2 }))
        .with_idempotency_key("bulk-1")
        .with_transaction(aip_connector::model::ActionTransaction::new(
            aip_connector::model::TransactionMode::Execute,
        ));
    let action_id = action.id.clone();
    let chunks = host.invoke_stream(action, caller()).collect().await;
    let kinds: Vec<_> = chunks.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            StreamChunkKind::Data,
            StreamChunkKind::Data,
            StreamChunkKind::Done
        ]
    );
    let view = host
        .transaction(
            &aip_connector::host::TransactionSelector::Action(action_id),
            &caller(),
        )
        .await
        .unwrap()
        .expect("the execute's transaction");
    assert_eq!(
        view.status,
        aip_connector::model::TransactionProtocolStatus::Committed
    );
    assert_eq!(view.provider_operation.unwrap().operation_id, "bulk-bulk-1");
}

/// Found by a hostile audit: a consumer that dropped the stream left `stream.closed` (permanent)
/// stored under the key, replayed for the key's lifetime, where a transport's give-up releases a
/// retry-safe action's key. The sink now abandons the action: the resend runs it again.
#[tokio::test]
async fn a_consumer_that_goes_away_abandons_the_action_and_releases_a_retry_safe_key() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let resent = resend_after_dropping(&host, "cap:feed:export", "export-1").await;
    assert_eq!(resent.output, Some(json!("ran again")), "{resent:?}");
    assert_eq!(feed.exports.load(Ordering::SeqCst), 2);
}

/// Without a safe retry the abandonment is stored under the key and replayed: `action.abandoned`
/// (not retryable), not the sink's `stream.closed`, and the export does not run again.
#[tokio::test]
async fn an_abandoned_stream_that_is_unsafe_to_retry_is_replayed_as_abandoned() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let replayed = resend_after_dropping(&host, "cap:feed:export_once", "export-2").await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    let error = replayed.error.as_deref().unwrap();
    assert_eq!(error.code, codes::ACTION_ABANDONED, "{replayed:?}");
    assert_eq!(error.retryable, Some(false));
    assert_eq!(feed.exports.load(Ordering::SeqCst), 1);
}

/// A host of `feed` whose streams buffer one chunk, so a handler soon waits for its consumer.
fn one_chunk_buffer_host(feed: &Feed) -> Host {
    Host::builder()
        .connector(feed.clone())
        .limits(HostLimits::default().stream_buffer(1))
        .build()
        .unwrap()
}

/// Drops the stream of `capability` after its first chunk, then resends under the same key
/// until the first run has settled; returns the resend's result.
async fn resend_after_dropping(host: &Host, capability: &str, key: &str) -> ActionResult {
    let action = || Action::new(capability, json!({ "count": 20 })).with_idempotency_key(key);
    let mut stream = host.invoke_stream(action(), caller());
    assert_eq!(stream.next().await.unwrap().kind, StreamChunkKind::Data);
    drop(stream);
    for _ in 0..200 {
        let mut resent = host.invoke_stream(action(), caller());
        let first = resent.next().await.unwrap();
        if first.kind == StreamChunkKind::Data {
            // It runs again: the first run's key was released.
            drop(resent);
            return ActionResult::completed(first.action_id, json!("ran again"));
        }
        let result: ActionResult = serde_json::from_value(first.data.unwrap()).unwrap();
        if result.error.as_ref().map(|e| e.code.as_str()) != Some(codes::IDEMPOTENCY_IN_PROGRESS) {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the first run never settled");
}

/// Found by a hostile review: a consumer that dropped its stream before the handler started
/// (while the host resolved a credential, reserved a key, or, here, before the stream's task ran
/// at all) was noticed only by a handler that sent a chunk: one that did its work first ran
/// for nobody. The action is now abandoned when it reaches its handler, which never runs.
///
/// And since nothing reached the provider, the abandonment is retryable whatever the contract
/// says (here retry safety `unknown`), as a dropped call's is: it is not stored under the key,
/// and the resend runs the action (a second hostile review: it was stored, so the resend got the
/// abandonment replayed for good, and a resumed approval was spent on an action that never ran).
#[tokio::test]
async fn a_stream_dropped_before_its_handler_starts_is_abandoned_without_running_it() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let action = || {
        Action::new("cap:feed:export_once", json!({ "count": 1 })).with_idempotency_key("early-1")
    };
    drop(host.invoke_stream(action(), caller()));
    let resent = loop {
        let result = host
            .invoke_stream(action(), caller())
            .result()
            .await
            .expect("a terminal chunk");
        if result.error.as_ref().map(|e| e.code.as_str()) != Some(codes::IDEMPOTENCY_IN_PROGRESS) {
            break result;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    assert!(!resent.is_idempotent_replay(), "{resent:?}");
    assert_eq!(
        feed.exports.load(Ordering::SeqCst),
        1,
        "the dropped stream's handler ran, or the resend's did not"
    );
}

/// Found by a hostile review: a handler that sent nothing more after its consumer went away
/// was never told, and ran to its end for nobody. The host now abandons it when the consumer
/// drops the stream, whatever the handler is waiting for.
#[tokio::test]
async fn a_quiet_handler_is_abandoned_when_its_consumer_goes_away() {
    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let mut stream = host.invoke_stream(
        Action::new("cap:feed:hold", json!({ "count": 1 })),
        caller(),
    );
    assert_eq!(stream.next().await.unwrap().kind, StreamChunkKind::Data);
    drop(stream);
    for _ in 0..1_000 {
        if feed.holds_dropped.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the handler was not abandoned within 10 s of its consumer leaving");
}

/// Found by a review: a handler that turns the refused send into a failure of its own had that
/// failure stored under the key; the consumer's going away is what ended the action.
#[tokio::test]
async fn a_handler_that_maps_the_refused_send_is_abandoned_too() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let resent = resend_after_dropping(&host, "cap:feed:export_mapped", "mapped-1").await;
    assert_eq!(resent.output, Some(json!("ran again")), "{resent:?}");
    assert_eq!(feed.exports.load(Ordering::SeqCst), 2);
}

/// Found by a review: a handler that ignores refused sends kept running; it is stopped, and its
/// key released.
#[tokio::test]
async fn a_handler_that_ignores_the_refused_send_is_stopped() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let resent = resend_after_dropping(&host, "cap:feed:export_forever", "forever-1").await;
    assert_eq!(resent.output, Some(json!("ran again")), "{resent:?}");
    // Both runs have ended (the resend's consumer went away too): nothing sends any more.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let settled = feed.sent.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        feed.sent.load(Ordering::SeqCst),
        settled,
        "a run kept sending"
    );
}

/// The streamed pipeline runs on a task of its own, which keeps the subscriber and span current
/// where the stream was started: a capture attached to the consumer's future sees the action's
/// lines, and they sit inside the caller's span (an author trial's capture saw none).
#[tokio::test]
async fn a_streamed_actions_log_lines_reach_the_subscriber_and_span_it_was_started_under() {
    use tracing::Instrument as _;
    let host = Host::builder().connector(Feed::default()).build().unwrap();
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let action = Action::new("cap:feed:firehose", json!({ "count": 2 }));
    let id = action.id.clone();
    let result = logs
        .capture(
            // Started inside the captured future: `invoke_stream` spawns at once, under the
            // subscriber and span current at the call (the span is made there too, so that
            // the capture's subscriber knows it).
            async {
                let request = tracing::info_span!("request", request_id = "req-7");
                async { host.invoke_stream(action, caller()).result().await }
                    .instrument(request)
                    .await
            },
        )
        .await
        .expect("a terminal chunk");
    assert_eq!(result.status, ActionResultStatus::Completed);
    let settled = logs
        .lines()
        .into_iter()
        .find(|line| line.contains("action settled"))
        .unwrap_or_else(|| {
            panic!(
                "the stream's settled line was not captured: {}",
                logs.text()
            )
        });
    assert!(settled.contains(id.as_str()), "{settled}");
    assert!(
        settled.contains("request{request_id=\"req-7\"}:aip.invoke"),
        "{settled}"
    );
}

/// A streaming-only capability called the plain way says how to call it (an author trial's
/// HTTP client got only "does not support `sync` execution").
#[tokio::test]
async fn a_plain_call_of_a_streaming_capability_says_how_to_stream_it() {
    let host = Host::builder().connector(Feed::default()).build().unwrap();
    let result = host
        .invoke(
            Action::new("cap:feed:firehose", json!({ "count": 1 })),
            &caller(),
        )
        .await;
    let error = result.error.expect("refused");
    assert_eq!(error.code, codes::EXECUTION_MODE_UNSUPPORTED);
    assert!(
        error.message.contains("Host::invoke_stream")
            && error.message.contains("Accept: text/event-stream"),
        "{}",
        error.message
    );
}

/// A connector whose item type is the connector type itself, named `Self` in the handler's
/// parameters (`StreamSink<Self>`): the generated extractor checks resolve it.
#[derive(Clone, Deserialize, Serialize, JsonSchema)]
struct Echo {
    text: String,
}

#[connector(id = "selfecho")]
impl Echo {
    /// Streams the input back twice, then returns it.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn twice(&self, input: Self, sink: StreamSink<Self>) -> Result<Self, ConnectorFailure> {
        sink.send(input.clone()).await?;
        sink.send(Echo {
            text: format!("{}!", input.text),
        })
        .await?;
        Ok(input)
    }
}

#[tokio::test]
async fn a_stream_sink_of_self_streams_the_connector_type() {
    let host = Host::builder()
        .connector(Echo {
            text: String::new(),
        })
        .build()
        .unwrap();
    let mut stream = host.invoke_stream(
        Action::new("cap:selfecho:twice", json!({ "text": "hi" })),
        caller(),
    );
    let mut data = Vec::new();
    let mut terminal = None;
    while let Some(chunk) = stream.next().await {
        match chunk.kind {
            StreamChunkKind::Data => data.push(chunk.data.unwrap()),
            _ => terminal = Some(chunk),
        }
    }
    assert_eq!(data, [json!({ "text": "hi" }), json!({ "text": "hi!" })]);
    let terminal = terminal.expect("a terminal chunk");
    assert_eq!(terminal.kind, StreamChunkKind::Done);
    assert_eq!(terminal.data.unwrap()["output"]["text"], "hi");
}

/// Found by a hostile review: a consumer that left while a streamed transactional write failed
/// with an uncertain outcome turned the failure into `action.abandoned`, so the transaction was
/// recorded `failed` and a retry-safe key released for a blind retry of a write that may have
/// reached the provider. The failure stands: the transaction's outcome is unknown.
#[tokio::test]
async fn a_consumer_leaving_does_not_hide_an_uncertain_outcome() {
    use aip_connector::host::TransactionSelector;
    use aip_connector::model::{ActionTransaction, TransactionMode, TransactionProtocolStatus};

    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let action = || {
        Action::new("cap:feed:lossy_post", json!({ "count": 1 }))
            .with_idempotency_key("lossy-1")
            .with_transaction(ActionTransaction::new(TransactionMode::Execute))
    };
    let sent = action();
    let action_id = sent.id.clone();
    let mut stream = host.invoke_stream(sent, caller());
    assert_eq!(stream.next().await.unwrap().kind, StreamChunkKind::Data);
    // The provider's (lost) answer and the consumer's going away, in one scheduling window.
    feed.provider_answer.notify_one();
    drop(stream);
    let mut status = None;
    for _ in 0..500 {
        status = host
            .transaction(&TransactionSelector::Action(action_id.clone()), &caller())
            .await
            .unwrap()
            .map(|view| view.status);
        if !matches!(
            status,
            None | Some(
                TransactionProtocolStatus::Prepared | TransactionProtocolStatus::Committing
            )
        ) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, Some(TransactionProtocolStatus::OutcomeUnknown));
    // Not released for a blind retry: the resend replays the uncertain failure.
    let resent = host.invoke(action(), &caller()).await;
    let error = resent.error.as_deref().expect("a failure");
    assert_ne!(error.code, codes::ACTION_ABANDONED, "{resent:?}");
    assert_eq!(error.retryable, Some(false), "{resent:?}");
}

/// Found by a hostile review: a send whose future the handler dropped while it waited for room
/// (`timeout` around it) had taken a sequence number, so the chunks that followed skipped it.
#[tokio::test]
async fn a_send_given_up_while_waiting_for_room_leaves_no_gap_in_the_sequence() {
    let host = one_chunk_buffer_host(&Feed::default());
    let mut stream = host.invoke_stream(
        Action::new("cap:feed:impatient", json!({ "count": 4 })),
        caller(),
    );
    // Nobody reads for a while: the sends after the first give up.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut sequences = Vec::new();
    let mut terminal = None;
    while let Some(chunk) = stream.next().await {
        sequences.push(chunk.sequence);
        if chunk.kind != StreamChunkKind::Data {
            terminal = Some(chunk);
        }
    }
    let expected: Vec<u64> = (0..sequences.len() as u64).collect();
    assert_eq!(sequences, expected);
    let terminal = terminal.expect("a terminal chunk");
    assert_eq!(terminal.kind, StreamChunkKind::Done);
    // The data chunks are exactly the sends that were delivered.
    let sent = terminal.data.unwrap()["output"]["sent"].as_u64().unwrap();
    assert_eq!(sequences.len() as u64, sent + 1);
    assert!(sent < 4, "every send found room: the test proves nothing");
}

/// A streaming handler past its deadline ends with one terminal `error` chunk,
/// `sla.timeout_exceeded`, whether it is quiet between chunks or waiting for room in the buffer
/// (found missing by a hostile review).
#[tokio::test]
async fn a_stream_past_its_deadline_ends_with_a_timeout_chunk() {
    let host = one_chunk_buffer_host(&Feed::default());
    for capability in ["cap:feed:stalls", "cap:feed:floods"] {
        let mut stream =
            host.invoke_stream(Action::new(capability, json!({ "count": 50 })), caller());
        // Nobody reads until well past the 200 ms deadline.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.next().await {
            chunks.push(chunk);
        }
        let sequences: Vec<u64> = chunks.iter().map(|c| c.sequence).collect();
        assert_eq!(
            sequences,
            (0..chunks.len() as u64).collect::<Vec<_>>(),
            "{capability}"
        );
        let terminal = chunks.last().expect("chunks");
        assert_eq!(
            terminal.kind,
            StreamChunkKind::Error,
            "{capability}: {terminal:?}"
        );
        assert_eq!(
            terminal.data.as_ref().unwrap()["error"]["code"],
            codes::SLA_TIMEOUT_EXCEEDED,
            "{capability}: {terminal:?}"
        );
        assert_eq!(
            chunks
                .iter()
                .filter(|c| c.kind != StreamChunkKind::Data)
                .count(),
            1,
            "{capability}"
        );
    }
}

/// Found by a hostile review: a refused send abandoned every execution of the action id by the
/// same caller, not the one whose consumer went away. Two executions of one id (under two keys
/// here) run at once; the consumer of one leaves while its handler is parked in `send`: its
/// cancellation fires with the refused send, and the other runs to its end.
#[tokio::test]
async fn a_consumer_leaving_abandons_its_own_execution_only() {
    let feed = Feed::default();
    let host = one_chunk_buffer_host(&feed);
    let reading = Action::new("cap:feed:export", json!({ "count": 20 })).with_idempotency_key("b");
    let mut leaving =
        Action::new("cap:feed:export_watching", json!({ "count": 1 })).with_idempotency_key("a");
    leaving.id = reading.id.clone();
    let mut kept = host.invoke_stream(reading, caller());
    assert_eq!(kept.next().await.unwrap().kind, StreamChunkKind::Data);
    let mut dropped = host.invoke_stream(leaving, caller());
    assert_eq!(dropped.next().await.unwrap().kind, StreamChunkKind::Data);
    // Its handler fills the one-chunk buffer and waits in `send` for room.
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(dropped);
    let (hits, result) = kept.collect_data::<serde_json::Value>().await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(hits.len(), 19, "every hit after the first");
    // The leaving execution's own cancellation fired with the refused send.
    assert_eq!(*feed.fired_when_refused.lock().unwrap(), Some(true));
}

/// A handler that leaves a task behind, holding its sink, and returns at once.
#[derive(Clone, Default)]
struct Spawner {
    /// Holds the call's key settlement, and says when it began: the handler has long returned.
    settling: Gate,
    /// What the task's send after the handler returned was answered.
    late_send: Arc<std::sync::Mutex<Option<Result<(), String>>>>,
    sent_late: Arc<tokio::sync::Notify>,
}

#[connector(id = "spawner")]
impl Spawner {
    /// Streams from a task of its own.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = principal),
        data(sensitivity = public),
        execution(retry_safety = safe)
    )]
    async fn export_in_background(
        &self,
        _query: Query,
        _key: IdempotencyKey,
        sink: StreamSink<Hit>,
    ) -> Result<Summary, ConnectorFailure> {
        sink.send(Hit { n: 0 }).await?;
        let (settling, late_send, sent_late) = (
            self.settling.clone(),
            self.late_send.clone(),
            self.sent_late.clone(),
        );
        tokio::spawn(async move {
            settling.entered().await;
            let sent = sink.send(Hit { n: 1 }).await.map_err(|f| f.code.clone());
            *late_send.lock().unwrap() = Some(sent);
            sent_late.notify_one();
        });
        Ok(Summary { sent: 1 })
    }
}

/// Found by a hostile review: a handler that spawned a task with its sink and returned had that
/// task's chunks accepted while the host settled the action, after its result was decided. The
/// sink is sealed when the handler's run ends: data sent from then on is refused
/// (`stream.closed`), and the consumer sees only what the handler sent while it ran.
#[tokio::test]
async fn data_sent_after_the_handler_returned_is_refused() {
    let spawner = Spawner::default();
    let store = Arc::new(HookedStore::before_settle({
        let settling = spawner.settling.clone();
        move |_| settling.hold()
    }));
    let host = Host::builder()
        .connector(spawner.clone())
        .store(store)
        .build()
        .unwrap();
    let stream = host.invoke_stream(
        Action::new("cap:spawner:export_in_background", json!({ "count": 1 }))
            .with_idempotency_key("background-1"),
        caller(),
    );
    let collecting = tokio::spawn(stream.collect());
    spawner.sent_late.notified().await;
    spawner.settling.open();
    let chunks = collecting.await.unwrap();
    assert_eq!(
        *spawner.late_send.lock().unwrap(),
        Some(Err(codes::STREAM_CLOSED.to_owned()))
    );
    let data: Vec<_> = chunks
        .iter()
        .filter(|c| c.kind == StreamChunkKind::Data)
        .map(|c| c.data.clone().unwrap())
        .collect();
    assert_eq!(data, [json!({ "n": 0 })], "{chunks:?}");
    assert_eq!(
        chunks.last().unwrap().kind,
        StreamChunkKind::Done,
        "{chunks:?}"
    );
}

/// A keyed action that asks to stream but is sent the plain way (`Host::invoke`, or an HTTP
/// POST without `Accept: text/event-stream`) is refused before its key is reserved, so the
/// streamed retry under the same key runs. Found by a hostile probe: the refusal came from the
/// sink's extractor at stage 14, was stored under the key, and was replayed to the streamed
/// retry for the key's whole TTL.
#[tokio::test]
async fn a_plain_call_that_asks_to_stream_leaves_its_key_free() {
    let feed = Feed::default();
    let host = Host::builder().connector(feed.clone()).build().unwrap();
    let mut action =
        Action::new("cap:feed:export", json!({ "count": 2 })).with_idempotency_key("plain-1");
    action.mode = Some(aip_connector::model::ActionMode::Streaming);

    let refused = host.invoke(action.clone(), &caller()).await;
    let error = refused.error.expect("refused");
    assert_eq!(error.code, codes::EXECUTION_MODE_UNSUPPORTED, "{error:?}");
    assert!(error.message.contains("invoke_stream"), "{error:?}");
    assert_eq!(feed.exports.load(Ordering::SeqCst), 0);

    let mut stream = host.invoke_stream(action, caller());
    let mut last = None;
    while let Some(chunk) = stream.next().await {
        last = Some(chunk);
    }
    let last = last.expect("a terminal chunk");
    assert_eq!(last.kind, StreamChunkKind::Done, "{last:?}");
    assert_eq!(feed.exports.load(Ordering::SeqCst), 1);
}
