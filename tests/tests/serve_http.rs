//! The native AIP HTTP binding end to end: the typed client against the axum server over
//! loopback, through the real host pipeline.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, Host, StaticApprovalAuthority, TrustedContext};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, ApprovalDecision, ApprovalDecisionKind,
    ApprovalState, Envelope, ErrorCategory, ManifestFilter, ManifestRequest, MessageBody,
    Principal, PrincipalKind, ProtocolError, StreamChunkKind, TransactionMode,
    TransactionProtocolStatus, TransactionQueryRequest, TransactionRequest,
};
use aip_connector::prelude::*;
use aip_connector::serve::server::{MESSAGES_PATH, READY_PATH};
use aip_connector::serve::{
    AipClient, AipServer, Authenticator, BearerTokens, BoxFuture, CancelReply, ClientError,
    ConnectionLimits, ServerConfig, http,
};
use aip_connector::store::MemoryStore;
use aip_connector_tests::raw_http::send_streamed_action;
use serde_json::{Value, json};
use tokio::sync::oneshot;

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Serialize, JsonSchema)]
struct Echo {
    text: String,
    caller: String,
    tenant: String,
}

#[derive(Serialize, JsonSchema)]
struct Tick {
    n: u32,
}

#[derive(Deserialize, JsonSchema)]
struct Refund {
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Refunded {
    refund_id: String,
}

#[derive(Clone, Default)]
struct Desk {
    cancelled: Arc<AtomicUsize>,
    echoes: Arc<AtomicUsize>,
    /// Handlers of `echo` and `wait` that started.
    started: Arc<AtomicUsize>,
    refunds: Arc<AtomicUsize>,
}

#[connector(id = "desk")]
impl Desk {
    /// Echoes the text with who asked, after an optional delay.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn echo(
        &self,
        note: Note,
        caller: Caller,
        tenant: Tenant,
    ) -> Result<Echo, ConnectorFailure> {
        assert_ne!(note.text, "panic", "the handler panics when asked to");
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(note.delay_ms)).await;
        self.echoes.fetch_add(1, Ordering::SeqCst);
        Ok(Echo {
            text: note.text,
            caller: caller.principal_id().to_string(),
            tenant: tenant.id().to_owned(),
        })
    }

    /// Waits until cancelled, and counts the cancellation.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 20_000))]
    async fn wait(&self, _note: Note, cancel: Cancellation) -> Result<Echo, ConnectorFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _dropped = CountOnDrop(Arc::clone(&self.cancelled));
        cancel.cancelled().await;
        Err(ConnectorFailure::new(
            "desk.cancelled",
            "cancelled",
            ErrorCategory::Temporary,
            aip_connector::model::ConnectorOperation::Invocation,
            "desk",
        ))
    }

    /// Streams three ticks, then waits for cancellation when the text says so.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 20_000))]
    async fn ticks(
        &self,
        note: Note,
        sink: StreamSink<Tick>,
        cancel: Cancellation,
    ) -> Result<Tick, ConnectorFailure> {
        for n in 0..3 {
            sink.send(Tick { n }).await?;
        }
        if note.text == "hang" {
            let _dropped = CountOnDrop(Arc::clone(&self.cancelled));
            cancel.cancelled().await;
        }
        Ok(Tick { n: 3 })
    }

    /// Streams `delay_ms` chunks of 64 KiB each (the field's name is borrowed), as fast as the
    /// client reads.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn flood(&self, note: Note, sink: StreamSink<Echo>) -> Result<Tick, ConnectorFailure> {
        for _ in 0..note.delay_ms {
            sink.send(Echo {
                text: "x".repeat(64 * 1024),
                caller: String::new(),
                tenant: String::new(),
            })
            .await?;
        }
        Ok(Tick { n: 0 })
    }

    /// Refunds, with a finance approval.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), evidence = [reason], separation(requester_must_differ)),
    )]
    async fn refund(
        &self,
        refund: Refund,
        _approval: Approval,
    ) -> Result<Refunded, ConnectorFailure> {
        self.refunds.fetch_add(1, Ordering::SeqCst);
        Ok(Refunded {
            refund_id: format!("rf-{}", refund.amount_cents),
        })
    }

    /// Books in two steps.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute]),
    )]
    async fn book(
        &self,
        note: Note,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Echo, ConnectorFailure> {
        Ok(Echo {
            text: note.text,
            caller: String::new(),
            tenant: String::new(),
        })
    }
}

/// Counts the handlers that were stopped while waiting for cancellation: the host drops a
/// cancelled handler's future, so the count moves when the wait ends either way.
struct CountOnDrop(Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn person(id: &str, tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "bearer")
        .with_tenant(VerifiedTenant::new(tenant))
}

fn tokens() -> BearerTokens {
    BearerTokens::new()
        .with("tok-ada", person("user:ada", "t1"))
        .with("tok-eve", person("user:eve", "t1"))
        .with("tok-alice", person("user:alice", "t1"))
        .with("tok-mallory", person("user:mallory", "t2"))
}

fn host(desk: Desk) -> Host {
    let finance = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance");
    Host::builder()
        .connector(desk)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:alice", finance))
        .build()
        .expect("host builds")
}

/// A running server: its base URL, the shutdown trigger, and the task serving it.
struct Running {
    base: String,
    host: Host,
    server: AipServer,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    fn server_host(&self) -> &Host {
        &self.host
    }

    fn client(&self, token: &str) -> AipClient {
        AipClient::new(&self.base).bearer_token(token)
    }

    async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn start(desk: Desk, config: ServerConfig) -> Running {
    start_with(desk, tokens(), config).await
}

/// Like [`start`], with `authenticator` in front of the server.
async fn start_with(
    desk: Desk,
    authenticator: impl Authenticator,
    config: ServerConfig,
) -> Running {
    let host = host(desk);
    let server = AipServer::new(host.clone(), authenticator, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(server.clone().serve(listener, async move {
        let _ = signal.await;
    }));
    Running {
        base,
        host,
        server,
        shutdown: Some(shutdown),
        task,
    }
}

/// A connection whose request never finishes: its headers promise 100 bytes of body, 10 arrive,
/// then nothing.
async fn stall(address: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stalled = tokio::net::TcpStream::connect(address).await.unwrap();
    stalled
        .write_all(
            b"POST /aip/v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-ada\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"aip_vers",
        )
        .await
        .unwrap();
    stalled
}

fn remote(error: ClientError) -> aip_connector::model::ProtocolError {
    match error {
        ClientError::Remote(error) => *error,
        other => panic!("expected a remote AIP error, got {other:?}"),
    }
}

async fn raw_post(base: &str, token: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{MESSAGES_PATH}"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn the_manifest_is_served_as_an_envelope_and_by_request() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let client = running.client("tok-ada");
    let manifest = client.manifest(None).await.unwrap();
    assert_eq!(manifest.agent.id.as_str(), "agent:desk");
    assert_eq!(client.manifest(Some("agent:desk")).await.unwrap(), manifest);
    assert!(manifest.capability("cap:desk:echo").is_some());
    let by_request = client
        .manifest_request(ManifestRequest {
            profiles: vec![],
            filter: Some(ManifestFilter {
                capability_ids: vec!["cap:desk:refund".into()],
                ..ManifestFilter::default()
            }),
        })
        .await
        .unwrap();
    assert_eq!(by_request, manifest);
    // Named by the connector's name rather than its agent id: told which ids there are.
    let missing = remote(client.manifest(Some("desk")).await.unwrap_err());
    assert_eq!(missing.code, codes::RESOURCE_NOT_FOUND);
    assert!(
        missing
            .message
            .ends_with("`?connector=` takes an agent id: `agent:desk`"),
        "{}",
        missing.message
    );
    // The manifest is not public unless configured so, and the refusal is logged (its code,
    // nothing the caller sent).
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let anonymous = {
        let _guard = logs.set_default();
        AipClient::new(&running.base)
            .manifest(None)
            .await
            .unwrap_err()
    };
    assert_eq!(remote(anonymous).code, codes::AUTH_UNAUTHENTICATED);
    assert!(
        logs.contains("request refused by the authenticator code=auth.unauthenticated"),
        "{}",
        logs.text()
    );
    running.stop().await;
}

/// `serve` answers a path it does not route, and a route asked with a method it does not
/// serve, with an AIP error envelope like every other refusal (found by an operations trial:
/// axum's were empty).
#[tokio::test]
async fn unknown_routes_and_methods_get_an_envelope() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    aip_connector_tests::assert_get_refused_with_envelopes(
        &running.base,
        &[
            ("/nope", 404, codes::RESOURCE_NOT_FOUND),
            (MESSAGES_PATH, 405, codes::TRANSPORT_UNSUPPORTED_MESSAGE),
        ],
    )
    .await;
    running.stop().await;
}

/// A malformed manifest query is refused after authentication, as an envelope. Found by a
/// review: axum's own rejection (plain text, `400`) was sent before the authenticator ran.
#[tokio::test]
async fn a_malformed_manifest_query_is_refused_after_authentication_as_an_envelope() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let url = format!("{}/aip/v1/manifest?connector=a&connector=b", running.base);
    let http = reqwest::Client::new();
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::AUTH_UNAUTHENTICATED,
        "{body}"
    );
    let known = http.get(&url).bearer_auth("tok-ada").send().await.unwrap();
    assert_eq!(known.status(), 400);
    let body: Value = known.json().await.unwrap();
    assert_eq!(body["message_type"], "aip.core.v1.error", "{body}");
    let error = &body["body"]["error"]["error"];
    assert_eq!(error["code"], codes::TRANSPORT_INVALID_ENVELOPE, "{body}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("duplicate field `connector`"),
        "{body}"
    );
    running.stop().await;
}

#[tokio::test]
async fn an_action_runs_as_the_authenticated_caller_never_the_payload() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let mut action = Action::new("cap:desk:echo", json!({ "text": "hi" }));
    // The payload claims another tenant; the host overwrites it.
    action.identity = serde_json::from_value(json!({ "tenant": { "id": "t2" } })).unwrap();
    let mut envelope = Envelope::new(MessageBody::Action(Box::new(action.clone())));
    envelope.from = Some(Principal::new("user:mallory", PrincipalKind::Human));
    let answer = running.client("tok-ada").send(&envelope).await.unwrap();
    assert_eq!(
        answer.in_response_to.as_deref(),
        Some(envelope.message_id.as_str())
    );
    let MessageBody::ActionResult(result) = answer.body else {
        panic!("not a result: {answer:?}");
    };
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(
        result.output.unwrap(),
        json!({ "text": "hi", "caller": "user:ada", "tenant": "t1" })
    );
    running.stop().await;
}

#[tokio::test]
async fn schema_violations_and_unknown_capabilities_are_failed_results() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let client = running.client("tok-ada");
    let invalid = client
        .invoke(Action::new("cap:desk:echo", json!({ "text": 5 })))
        .await
        .unwrap();
    assert_eq!(invalid.status, ActionResultStatus::Failed);
    assert_eq!(
        invalid.error.unwrap().code,
        codes::ACTION_INPUT_SCHEMA_INVALID
    );
    let unknown = client
        .invoke(Action::new("cap:desk:nothing", json!({})))
        .await
        .unwrap();
    assert_eq!(unknown.error.unwrap().code, codes::RESOURCE_NOT_FOUND);
    running.stop().await;
}

#[tokio::test]
async fn bad_requests_get_typed_errors_with_the_right_status() {
    let running = start(
        Desk::default(),
        ServerConfig::default().max_body_bytes(4 * 1024),
    )
    .await;
    let base = &running.base;

    let (status, body) = raw_post(base, None, "{}").await;
    assert_eq!(status, 401);
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::AUTH_UNAUTHENTICATED
    );
    let (status, _) = raw_post(base, Some("tok-wrong"), "{}").await;
    assert_eq!(status, 401);

    let (status, body) = raw_post(base, Some("tok-ada"), "{not json").await;
    assert_eq!(status, 400);
    assert_eq!(body["message_type"], "aip.core.v1.error");
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_INVALID_ENVELOPE
    );

    let action = Envelope::new(MessageBody::Action(Box::new(Action::new(
        "cap:desk:echo",
        json!({ "text": "x" }),
    ))));
    let mut mismatched = serde_json::to_value(&action).unwrap();
    mismatched["message_type"] = json!("aip.core.v1.cancel");
    let (status, body) = raw_post(base, Some("tok-ada"), mismatched.to_string()).await;
    assert_eq!(status, 400);
    let error = &body["body"]["error"]["error"];
    assert_eq!(error["code"], codes::TRANSPORT_INVALID_ENVELOPE);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("does not match"),
        "{error}"
    );
    assert_eq!(body["in_response_to"], mismatched["message_id"]);

    let mut old = serde_json::to_value(&action).unwrap();
    old["aip_version"] = json!("0.9");
    let (status, body) = raw_post(base, Some("tok-ada"), old.to_string()).await;
    assert_eq!(status, 400);
    assert!(
        body["body"]["error"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unsupported AIP version")
    );

    let heartbeat = json!({
        "aip_version": "1.0", "message_type": "aip.core.v1.heartbeat", "message_id": "msg_h",
        "sent_at": "2026-11-30T00:00:00Z", "body": { "heartbeat": {} }
    });
    let (status, body) = raw_post(base, Some("tok-ada"), heartbeat.to_string()).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_UNSUPPORTED_MESSAGE
    );

    // Over the body limit, declared or streamed.
    let big = json!({ "text": "x".repeat(8 * 1024) });
    let oversized = Envelope::new(MessageBody::Action(Box::new(Action::new(
        "cap:desk:echo",
        big,
    ))));
    let (status, body) = raw_post(
        base,
        Some("tok-ada"),
        serde_json::to_vec(&oversized).unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_PAYLOAD_TOO_LARGE
    );
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(serde_json::to_vec(&oversized).unwrap())];
    let streamed = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let (status, _) = raw_post(base, Some("tok-ada"), streamed).await;
    assert_eq!(status, 413);

    // Nesting deeper than the parser allows is refused, not a crash.
    let deep = format!(
        "{{\"aip_version\":\"1.0\",\"message_type\":\"aip.core.v1.action\",\"message_id\":\"msg_d\",\
         \"sent_at\":\"2026-11-30T00:00:00Z\",\"body\":{{\"action\":{{\"id\":\"act_d\",\
         \"capability_id\":\"cap:desk:echo\",\"input\":{}x{}}}}}}}",
        "[".repeat(600),
        "]".repeat(600)
    );
    let (status, body) = raw_post(base, Some("tok-ada"), deep).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_INVALID_ENVELOPE
    );
    running.stop().await;
}

/// A repeated key inside the input is refused, not resolved: serde_json keeps the last value,
/// a gateway's first-wins parser would have checked the first (found by a hostile review).
#[tokio::test]
async fn a_key_repeated_inside_the_input_is_refused_before_any_handler_runs() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let body = r#"{"aip_version":"1.0","message_type":"aip.core.v1.action","message_id":"msg_dup",
        "sent_at":"2026-11-30T00:00:00Z","body":{"action":{"id":"act_dup",
        "capability_id":"cap:desk:echo","input":{"text":"checked","text":"run"}}}}"#;
    let (status, body) = raw_post(&running.base, Some("tok-ada"), body).await;
    assert_eq!(status, 400);
    let error = &body["body"]["error"]["error"];
    assert_eq!(error["code"], codes::TRANSPORT_INVALID_ENVELOPE);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("the object repeats the key `text`"),
        "{error}"
    );
    assert_eq!(desk.started.load(Ordering::SeqCst), 0);
    // The same action with the key once runs.
    let once = running
        .client("tok-ada")
        .invoke(Action::new("cap:desk:echo", json!({ "text": "run" })))
        .await
        .unwrap();
    assert_eq!(once.status, ActionResultStatus::Completed, "{once:?}");
    running.stop().await;
}

#[tokio::test]
async fn a_stream_arrives_in_order_with_one_terminal_chunk() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let chunks = running
        .client("tok-ada")
        .invoke_stream(Action::new("cap:desk:ticks", json!({ "text": "go" })))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(chunks.len(), 4, "{chunks:?}");
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.sequence, i as u64);
    }
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c.kind == StreamChunkKind::Done)
            .count(),
        1
    );
    assert_eq!(chunks[1].data, Some(json!({ "n": 1 })));
    let result: aip_connector::model::ActionResult =
        serde_json::from_value(chunks[3].data.clone().unwrap()).unwrap();
    assert_eq!(result.output, Some(json!({ "n": 3 })));
    running.stop().await;
}

#[tokio::test]
async fn a_client_that_drops_a_stream_cancels_its_action() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let mut stream = running
        .client("tok-ada")
        .invoke_stream(Action::new("cap:desk:ticks", json!({ "text": "hang" })))
        .await
        .unwrap();
    for _ in 0..3 {
        assert!(stream.next().await.unwrap().is_some());
    }
    drop(stream);
    wait_until(|| desk.cancelled.load(Ordering::SeqCst) == 1).await;
    running.stop().await;
}

async fn wait_until(condition: impl Fn() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the condition never held");
}

#[tokio::test]
async fn cancel_over_http_reaches_only_the_callers_own_action() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let action = Action::new("cap:desk:wait", json!({ "text": "x" }));
    let id = action.id.clone();
    let client = running.client("tok-ada");
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.invoke(action).await }
    });
    wait_until(|| desk.started.load(Ordering::SeqCst) == 1).await;
    // Another principal of the same tenant cannot cancel it.
    let stranger = running.client("tok-eve").cancel(&id).await.unwrap();
    assert!(
        matches!(stranger, CancelReply::Remembered(_)),
        "{stranger:?}"
    );
    assert!(!call.is_finished());
    let own = client.cancel(&id).await.unwrap();
    let CancelReply::Cancelled(reply) = own else {
        panic!("expected a cancelled result, got {own:?}");
    };
    let result = call.await.unwrap().unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled);
    // The cancel request is answered with the very result the action ends with.
    assert_eq!(
        reply.output,
        Some(json!({ "cancelled": true, "reason": "action cancellation requested" }))
    );
    assert_eq!(reply.output, result.output);
    assert_eq!(desk.cancelled.load(Ordering::SeqCst), 1);
    running.stop().await;
}

/// An envelope must be declared as JSON. A body sent as `text/plain`, a form, or without a type
/// (what a page on another origin can make a browser send without a CORS preflight) is refused
/// with `415 transport.unsupported_media_type`, and the action does not run.
#[tokio::test]
async fn a_body_not_declared_as_json_is_refused_and_nothing_runs() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let envelope = Envelope::new(MessageBody::Action(Box::new(Action::new(
        "cap:desk:echo",
        json!({ "text": "x" }),
    ))));
    let body = serde_json::to_vec(&envelope).unwrap();
    let post = |content_type: Option<&'static str>| {
        let mut request = reqwest::Client::new()
            .post(format!("{}{MESSAGES_PATH}", running.base))
            .bearer_auth("tok-ada")
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request.send()
    };
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        // JSON between systems is UTF-8; the server would read these bytes as other text.
        Some("application/json; charset=utf-16"),
    ] {
        let response = post(content_type).await.unwrap();
        assert_eq!(response.status().as_u16(), 415, "{content_type:?}");
        let answer: Value = response.json().await.unwrap();
        let error = &answer["body"]["error"]["error"];
        assert_eq!(
            error["code"],
            codes::TRANSPORT_UNSUPPORTED_MEDIA_TYPE,
            "{answer}"
        );
        assert_eq!(error["retryable"], false);
    }
    // A content coding the server does not decode: a gateway that decodes it would check other
    // bytes than the server reads.
    for coding in ["gzip", "identity, br"] {
        let response = reqwest::Client::new()
            .post(format!("{}{MESSAGES_PATH}", running.base))
            .bearer_auth("tok-ada")
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 415, "{coding}");
        let answer: Value = response.json().await.unwrap();
        let error = &answer["body"]["error"]["error"];
        assert_eq!(
            error["code"],
            codes::TRANSPORT_UNSUPPORTED_MEDIA_TYPE,
            "{answer}"
        );
    }
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 0);

    let accepted = post(Some("application/json; charset=utf-8")).await.unwrap();
    assert_eq!(accepted.status().as_u16(), 200);
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 1);
    running.stop().await;
}

/// Reads from `connection` until the server closes it (end of stream or a reset), and returns
/// what it sent; `None` if it is still open after `patience`.
async fn read_until_closed(
    connection: &mut tokio::net::TcpStream,
    patience: Duration,
) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let reading = async {
        let mut buffer = [0u8; 4096];
        loop {
            match connection.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => received.extend_from_slice(&buffer[..read]),
            }
        }
    };
    tokio::time::timeout(patience, reading).await.ok()?;
    Some(received)
}

/// A client that never finishes its request's headers is disconnected once the header deadline
/// passes, before any route sees it (a hostile review held such a connection open for good:
/// `axum::serve` gives hyper no timer, so hyper never enforced one); so is a keep-alive
/// connection that sends no next request.
#[tokio::test]
async fn connections_that_never_finish_their_headers_are_closed() {
    use tokio::io::AsyncWriteExt;
    let desk = Desk::default();
    let limits = ConnectionLimits::default().header_read_timeout(Duration::from_millis(200));
    let running = start(desk.clone(), ServerConfig::default().connections(limits)).await;
    let address = running.base.trim_start_matches("http://").to_owned();

    let mut unfinished = tokio::net::TcpStream::connect(&address).await.unwrap();
    unfinished
        .write_all(b"POST /aip/v1/messages HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut unfinished, Duration::from_secs(10)).await;
    assert!(answer.is_some(), "the connection is still open after 10 s");

    // One request answered, then silence: the idle connection is closed too.
    let mut idle = tokio::net::TcpStream::connect(&address).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answered = read_until_closed(&mut idle, Duration::from_secs(10))
        .await
        .expect("the idle keep-alive connection is still open after 10 s");
    assert!(
        answered.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answered)
    );
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 0);
    running.stop().await;
}

/// At the connection cap the server stops accepting: the next client waits (in the listen
/// backlog) until a connection closes, then is served.
#[tokio::test]
async fn at_the_connection_cap_the_next_client_waits_for_a_free_one() {
    use tokio::io::AsyncWriteExt;
    let desk = Desk::default();
    let limits = ConnectionLimits::default()
        .max_connections(1)
        .header_read_timeout(Duration::from_secs(60));
    let running = start(desk.clone(), ServerConfig::default().connections(limits)).await;
    let address = running.base.trim_start_matches("http://").to_owned();
    let mut holder = tokio::net::TcpStream::connect(&address).await.unwrap();
    holder
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The holder's connection is being served (its answer arrives) and stays open.
    let mut first = [0u8; 12];
    tokio::io::AsyncReadExt::read_exact(&mut holder, &mut first)
        .await
        .unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");

    let client = reqwest::Client::new();
    let health = format!("{}/health", running.base);
    let waiting = tokio::spawn({
        let client = client.clone();
        let health = health.clone();
        async move { client.get(health).send().await.map(|r| r.status().as_u16()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second connection was served past the cap of 1"
    );
    drop(holder);
    let status = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting client was not served after the first connection closed")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    running.stop().await;
}

/// A client that sends requests and reads no answer fills its receive window; the server's
/// write then waits, and without a deadline it waited for good, holding the connection (and,
/// at the cap, every other client's; found by a hostile review). It is disconnected after
/// `write_timeout`, and the next client is served.
#[tokio::test]
async fn a_client_that_reads_nothing_is_disconnected_after_the_write_timeout() {
    use tokio::io::AsyncWriteExt;
    let limits = ConnectionLimits::default()
        .max_connections(1)
        .write_timeout(Duration::from_millis(300));
    let running = start(Desk::default(), ServerConfig::default().connections(limits)).await;
    let address: std::net::SocketAddr = running.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut greedy = socket.connect(address).await.unwrap();
    let request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let flooding = async {
        // At most 64 MiB: far more than the loopback's buffers hold, so the server stops
        // reading long before, and the write can only end by the server closing.
        for _ in 0..(64 << 20) / request.len() {
            greedy.write_all(&request).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let flooded = tokio::time::timeout(Duration::from_secs(30), flooding).await;
    assert!(
        matches!(flooded, Ok(Err(_))),
        "the server kept a client that reads nothing: {flooded:?}"
    );
    let served = tokio::time::timeout(
        Duration::from_secs(10),
        reqwest::get(format!("{}/health", running.base)),
    )
    .await
    .expect("the next client was not served")
    .unwrap();
    assert_eq!(served.status().as_u16(), 200);
    running.stop().await;
}

/// A route merged into the server can switch protocols (a WebSocket does), as under
/// `axum::serve` (a hostile review found the first version of the accept loop answering `101`
/// and then nothing).
#[tokio::test]
async fn a_merged_route_can_upgrade_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn upgrade(mut request: axum::extract::Request) -> axum::response::Response {
        let upgraded = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            let mut io = hyper_util::rt::TokioIo::new(upgraded.await.unwrap());
            let mut buffer = [0u8; 5];
            io.read_exact(&mut buffer).await.unwrap();
            io.write_all(&buffer).await.unwrap();
        });
        axum::response::Response::builder()
            .status(101)
            .header("connection", "upgrade")
            .header("upgrade", "echo")
            .body(axum::body::Body::empty())
            .unwrap()
    }
    let server = AipServer::new(host(Desk::default()), tokens(), ServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve_with_routes(
        listener,
        axum::Router::new().route("/echo", axum::routing::get(upgrade)),
        async move {
            let _ = signal.await;
        },
    ));
    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    client
        .write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        client.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    client.write_all(b"hello").await.unwrap();
    let mut echoed = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut echoed))
        .await
        .expect("nothing came back over the upgraded connection")
        .unwrap();
    assert_eq!(&echoed, b"hello");
    drop(client);
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// A cancel naming an id no action can have on this host (longer than `max_id_bytes`) is a
/// permanent `action.id_too_long`, not a retryable overload: retrying it can never succeed.
#[tokio::test]
async fn a_cancel_of_an_id_too_long_for_any_action_is_refused_for_good() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let id = aip_connector::ids::ActionId::parse(format!("act_{}", "x".repeat(300))).unwrap();
    let error = remote(running.client("tok-ada").cancel(&id).await.unwrap_err());
    assert_eq!(error.code, codes::ACTION_ID_TOO_LONG, "{error:?}");
    assert_eq!(error.retryable, Some(false));
    assert_eq!(
        error.details,
        Some(json!({ "field": "id", "id_bytes": 304, "max_id_bytes": 255 }))
    );
    running.stop().await;
}

/// So is a cancel naming an id stage 0 refuses (empty, or with a NUL character): a permanent
/// `action.invalid`, and nothing is remembered (a hostile-input review saw each answered
/// `accepted` and held for a minute).
#[tokio::test]
async fn a_cancel_of_an_empty_or_nul_id_is_refused_for_good() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    for (invalid, why) in [("", "is empty"), ("act_\0x", "contains a NUL character")] {
        let id: aip_connector::ids::ActionId = serde_json::from_value(json!(invalid)).unwrap();
        let error = remote(running.client("tok-ada").cancel(&id).await.unwrap_err());
        assert_eq!(error.code, codes::ACTION_INVALID, "{error:?}");
        assert_eq!(error.retryable, Some(false));
        assert!(error.message.contains(why), "{error:?}");
        assert_eq!(error.details, Some(json!({ "field": "id" })));
    }
    running.stop().await;
}

#[tokio::test]
async fn a_full_server_refuses_at_once_with_a_retryable_error() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default().max_in_flight(1)).await;
    let client = running.client("tok-ada");
    let busy_action = Action::new("cap:desk:wait", json!({ "text": "a" }));
    let busy_id = busy_action.id.clone();
    let busy = tokio::spawn({
        let client = client.clone();
        async move { client.invoke(busy_action).await }
    });
    wait_until(|| desk.started.load(Ordering::SeqCst) == 1).await;
    let refused = remote(
        client
            .invoke(Action::new("cap:desk:echo", json!({ "text": "b" })))
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, codes::TRANSPORT_OVERLOADED);
    assert_eq!(refused.category, ErrorCategory::Temporary);
    assert_eq!(refused.retryable, Some(true));
    assert!(refused.retry_after_ms.is_some());
    let response = reqwest::Client::new()
        .post(format!("{}{MESSAGES_PATH}", running.base))
        .bearer_auth("tok-ada")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    // A cancel is a message too: with the only slot taken it is refused the same way, so the
    // operator's cancel frees the slot here.
    running.server_host().cancel(&busy_id);
    assert_eq!(
        busy.await.unwrap().unwrap().status,
        ActionResultStatus::Cancelled
    );
    // The slot is free again.
    let again = client
        .invoke(Action::new("cap:desk:echo", json!({ "text": "c" })))
        .await
        .unwrap();
    assert_eq!(again.status, ActionResultStatus::Completed);
    running.stop().await;
}

/// A request over the timeout is answered `transport.timeout` (retryable) and its action is
/// abandoned: the handler is cancelled and the key released, so the retry the answer invites,
/// with the same key, runs the action again rather than replaying an interruption.
#[tokio::test]
async fn a_request_over_the_timeout_is_answered_and_its_action_cancelled() {
    let desk = Desk::default();
    let running = start(
        desk.clone(),
        ServerConfig::default().request_timeout(Duration::from_millis(200)),
    )
    .await;
    let action = Action::new("cap:desk:wait", json!({ "text": "x" })).with_idempotency_key("k");
    for attempt in 1..=2 {
        let error = remote(
            running
                .client("tok-ada")
                .invoke(action.clone())
                .await
                .unwrap_err(),
        );
        assert_eq!(error.code, codes::TRANSPORT_TIMEOUT, "attempt {attempt}");
        assert_eq!(error.retryable, Some(true));
        wait_until(|| desk.cancelled.load(Ordering::SeqCst) == attempt).await;
    }
    assert_eq!(
        desk.started.load(Ordering::SeqCst),
        2,
        "the retry ran again"
    );
    running.stop().await;
}

/// A client that hangs up does not take the request timeout with it: hyper drops the request's
/// future, which held the timer, yet the action is still abandoned at the request's deadline
/// rather than running on to the host's own (found by an author trial: a polling call ran for
/// minutes after `curl --max-time 1`).
#[tokio::test]
async fn an_action_whose_client_hung_up_is_abandoned_at_the_request_timeout() {
    let desk = Desk::default();
    let running = start(
        desk.clone(),
        ServerConfig::default().request_timeout(Duration::from_millis(300)),
    )
    .await;
    let action = Action::new("cap:desk:wait", json!({ "text": "x" }));
    let client = running.client("tok-ada");
    let call = tokio::spawn(async move { client.invoke(action).await });
    wait_until(|| desk.started.load(Ordering::SeqCst) == 1).await;
    // The client goes away: its connection closes with the aborted call.
    call.abort();
    let _ = call.await;
    // Its handler waits for cancellation, which the host deadline (60 s) would bring only
    // much later than `wait_until`'s 5 s.
    wait_until(|| desk.cancelled.load(Ordering::SeqCst) == 1).await;
    running.stop().await;
}

#[tokio::test]
async fn shutdown_drains_in_flight_actions_then_abandons_stragglers() {
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let _guard = logs.set_default();
    let desk = Desk::default();
    let running = start(
        desk.clone(),
        ServerConfig::default().drain_timeout(Duration::from_millis(300)),
    )
    .await;
    let client = running.client("tok-ada");
    let finishing = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke(Action::new(
                    "cap:desk:echo",
                    json!({ "text": "a", "delay_ms": 150 }),
                ))
                .await
        }
    });
    let straggler = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke(Action::new("cap:desk:wait", json!({ "text": "b" })))
                .await
        }
    });
    wait_until(|| desk.started.load(Ordering::SeqCst) == 2).await;
    assert!(client.ready().await.unwrap());
    running.server.begin_drain();
    assert!(!running.server.is_ready());
    let response = reqwest::get(format!("{}{READY_PATH}", running.base))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let refused = remote(
        client
            .invoke(Action::new("cap:desk:echo", json!({ "text": "late" })))
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, codes::TRANSPORT_SHUTTING_DOWN);
    running.stop().await;
    assert_eq!(
        finishing.await.unwrap().unwrap().status,
        ActionResultStatus::Completed
    );
    // The straggler is abandoned: a retryable failure, for the client to retry elsewhere.
    let straggler = straggler.await.unwrap().unwrap();
    assert_eq!(straggler.status, ActionResultStatus::Failed);
    let error = straggler.error.expect("an abandoned action's error");
    assert_eq!(error.code, codes::ACTION_ABANDONED);
    assert_eq!(error.retryable, Some(true));
    assert_eq!(desk.cancelled.load(Ordering::SeqCst), 1);
    // The drain and its end are logged, with what was still running (found by an operations
    // trial: only the abandoned action's own line told).
    let line = |message: &str| {
        logs.lines()
            .into_iter()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no `{message}` in:\n{}", logs.text()))
    };
    let draining = line("draining: new connections and messages are refused");
    assert!(draining.contains("drain_timeout_ms=300"), "{draining}");
    let expired = line("the drain timeout has passed");
    assert!(
        expired.contains("WARN") && expired.contains("in_flight=1"),
        "{expired}"
    );
}

/// An application's layers around the AIP routes, served with everything `serve` adds: here an
/// access log and a response header; the server drains and stops as `serve` does (found by an
/// operations trial: layers meant giving up `serve`).
#[tokio::test]
async fn a_router_with_layers_is_served_with_the_servers_lifecycle() {
    use aip_connector::serve::axum::extract::Request;
    use aip_connector::serve::axum::middleware::{self, Next};

    let logs = aip_connector_testkit::logs::LogCapture::new();
    let _guard = logs.set_default();
    let host = host(Desk::default());
    let server = AipServer::new(host, tokens(), ServerConfig::default());
    let router = server.router().layer(middleware::from_fn(
        |request: Request, next: Next| async move {
            let path = request.uri().path().to_owned();
            let mut response = next.run(request).await;
            tracing::info!(%path, status = response.status().as_u16(), "access");
            response
                .headers_mut()
                .insert("x-served-by", http::HeaderValue::from_static("layer"));
            response
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(server.clone().serve_router(listener, router, async move {
        let _ = signal.await;
    }));
    let result = AipClient::new(&base)
        .bearer_token("tok-ada")
        .invoke(Action::new("cap:desk:echo", json!({ "text": "hi" })))
        .await
        .unwrap();
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let ready = reqwest::get(format!("{base}{READY_PATH}")).await.unwrap();
    assert_eq!(ready.headers()["x-served-by"], "layer");
    assert!(
        logs.lines()
            .iter()
            .any(|line| line.contains("access") && line.contains("path=/aip/v1/messages")),
        "{}",
        logs.text()
    );
    let _ = shutdown.send(());
    task.await.unwrap().unwrap();
    assert!(!server.is_ready(), "the signal stopped the server");
}

/// With a shutdown delay the signal turns `/ready` 503 on a server that still serves, so a load
/// balancer's probe can read it; the drain (new messages refused, listener closed) follows.
#[tokio::test]
async fn a_shutdown_delay_serves_on_while_ready_answers_503() {
    let desk = Desk::default();
    let mut running = start(
        desk.clone(),
        ServerConfig::default().shutdown_delay(Duration::from_millis(600)),
    )
    .await;
    let client = running.client("tok-ada");
    assert!(client.ready().await.unwrap());
    let _ = running.shutdown.take().unwrap().send(());
    wait_until(|| !running.server.is_ready()).await;

    // A new connection, as a probe makes: it is accepted and reads the 503.
    let response = reqwest::Client::new()
        .get(format!("{}{READY_PATH}", running.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response.json::<serde_json::Value>().await.unwrap(),
        json!({ "status": "stopping" })
    );
    // Work routed here before the balancer noticed is still served.
    let served = AipClient::new(&running.base)
        .bearer_token("tok-ada")
        .invoke(Action::new("cap:desk:echo", json!({ "text": "late" })))
        .await
        .unwrap();
    assert_eq!(served.status, ActionResultStatus::Completed);

    // Then the drain: the server stops within the delay and the drain of nothing in flight.
    tokio::time::timeout(Duration::from_secs(5), &mut running.task)
        .await
        .expect("the server stopped after its delay")
        .unwrap()
        .unwrap();
    assert!(
        reqwest::get(format!("{}{READY_PATH}", running.base))
            .await
            .is_err(),
        "the listener is closed once drained"
    );
}

fn approve(id: &ApprovalId) -> ApprovalDecision {
    ApprovalDecision {
        approval_id: id.clone(),
        decision: ApprovalDecisionKind::Approved,
        approver: Principal::new("user:alice", PrincipalKind::Human),
        decided_at: time::OffsetDateTime::now_utc(),
        reason: Some("checked".into()),
        constraints: vec![],
        evidence: vec![],
        decision_id: Some("dec-alice".into()),
        policy_hash: None,
        authority_path: vec![],
        target_decision_id: None,
    }
}

#[tokio::test]
async fn approvals_are_decided_and_read_over_http_within_the_tenant() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let requester = running.client("tok-ada");
    let refund =
        Action::new("cap:desk:refund", json!({ "amount_cents": 900 })).with_idempotency_key("r-1");
    let pending = requester.invoke(refund.clone()).await.unwrap();
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let id: ApprovalId =
        serde_json::from_value(pending.output.unwrap()["approval_id"].clone()).unwrap();

    let view = requester.approval(&id).await.unwrap();
    assert_eq!(view.status, ApprovalState::Pending);
    assert_eq!(view.capability_id.as_str(), "cap:desk:refund");
    // Another tenant does not see it.
    let hidden = remote(
        running
            .client("tok-mallory")
            .approval(&id)
            .await
            .unwrap_err(),
    );
    assert_eq!(hidden.code, codes::POLICY_APPROVAL_NOT_FOUND);
    // The category the host gives the same code (docs/host-runtime.md §3).
    assert_eq!(hidden.category, ErrorCategory::Policy);
    assert!(!hidden.message.contains(id.as_str()), "{}", hidden.message);
    // The requester cannot approve their own refund.
    let mut own = approve(&id);
    own.approver = Principal::new("user:ada", PrincipalKind::Human);
    let refused = remote(requester.decide(own).await.unwrap_err());
    assert_eq!(refused.category, ErrorCategory::Policy);

    let approved = running
        .client("tok-alice")
        .decide(approve(&id))
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalState::Approved);
    assert_eq!(desk.refunds.load(Ordering::SeqCst), 0);

    // A decision over the host's `max_decision_bytes` (64 KiB) but under the body limit is
    // refused for its size: 413, not the policy category's 403.
    let mut bloated = approve(&id);
    bloated.decision_id = Some("dec-bloated".into());
    bloated.reason = Some("x".repeat(100 * 1024));
    let envelope = Envelope::new(MessageBody::ApprovalDecision(Box::new(bloated)));
    let (status, body) = raw_post(
        &running.base,
        Some("tok-alice"),
        serde_json::to_string(&envelope).unwrap(),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::POLICY_APPROVAL_DECISION_TOO_LARGE
    );
    // A decision malformed in itself (a blank reason) is the client's to fix: 400, not the
    // policy category's 403 (found by an operations trial).
    let mut blank = approve(&id);
    blank.decision_id = Some("dec-blank".into());
    blank.reason = Some("  ".into());
    let envelope = Envelope::new(MessageBody::ApprovalDecision(Box::new(blank)));
    let (status, body) = raw_post(
        &running.base,
        Some("tok-alice"),
        serde_json::to_string(&envelope).unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::POLICY_APPROVAL_DECISION_INVALID
    );

    // The requester re-sends the action with the approval; it runs once.
    let mut resumed = refund.clone();
    resumed.approval = Some(Box::new(approve(&id)));
    let done = requester.invoke(resumed).await.unwrap();
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    assert_eq!(desk.refunds.load(Ordering::SeqCst), 1);
    running.stop().await;
}

#[tokio::test]
async fn transactions_run_and_are_read_back_over_http() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let client = running.client("tok-ada");
    let transaction_id = aip_connector::ids::TransactionId::new();
    let action = Action::new("cap:desk:book", json!({ "text": "room" }))
        .with_idempotency_key("book-1")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    let result = client
        .transact(TransactionRequest {
            transaction_id: transaction_id.clone(),
            action,
            requested_by: Principal::new("user:ada", PrincipalKind::Human),
            reason: None,
            metadata: None,
            provider_operation: None,
            reconciliation_cursor: None,
        })
        .await
        .unwrap();
    assert_eq!(
        result.status,
        TransactionProtocolStatus::Committed,
        "{result:?}"
    );
    let view = client
        .transaction(TransactionQueryRequest {
            transaction_id: Some(transaction_id.clone()),
            ..TransactionQueryRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(view.transaction_id, transaction_id);
    assert!(!view.receipts.is_empty());
    let hidden = remote(
        running
            .client("tok-mallory")
            .transaction(TransactionQueryRequest {
                transaction_id: Some(transaction_id),
                ..TransactionQueryRequest::default()
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(hidden.code, codes::TRANSACTION_NOT_FOUND);
    assert_eq!(hidden.category, ErrorCategory::Policy);
    // Identity in the request is checked against the authenticated caller.
    let forged = remote(
        client
            .transact(TransactionRequest {
                transaction_id: aip_connector::ids::TransactionId::new(),
                action: Action::new("cap:desk:book", json!({ "text": "x" }))
                    .with_idempotency_key("book-2")
                    .with_transaction(ActionTransaction::new(TransactionMode::Execute)),
                requested_by: Principal::new("user:eve", PrincipalKind::Human),
                reason: None,
                metadata: None,
                provider_operation: None,
                reconciliation_cursor: None,
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(forged.code, codes::AUTH_NOT_AUTHORIZED);
    running.stop().await;
}

#[tokio::test]
async fn health_answers_without_credentials() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let anonymous = AipClient::new(&running.base);
    assert!(anonymous.health().await.unwrap());
    assert!(anonymous.ready().await.unwrap());
    running.stop().await;
}

#[test]
fn the_client_never_shows_its_token() {
    let client = AipClient::new("http://127.0.0.1:1").bearer_token("tok-canary-secret");
    let shown = format!("{client:?}");
    assert!(!shown.contains("canary"), "{shown}");
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_transport_error() {
    let error = AipClient::new("http://127.0.0.1:9")
        .invoke(Action::new("cap:desk:echo", json!({ "text": "x" })))
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Unreachable(_)));
    let protocol = error.to_protocol_error();
    assert_eq!(protocol.code, codes::TRANSPORT_UNREACHABLE);
    assert_eq!(protocol.retryable, Some(true));
}

#[tokio::test]
async fn an_answer_that_is_not_an_envelope_is_an_unexpected_response() {
    let impostor = axum::Router::new().route(
        MESSAGES_PATH,
        axum::routing::post(|| async { "hello, not AIP" }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, impostor).await });
    let error = AipClient::new(base)
        .invoke(Action::new("cap:desk:echo", json!({ "text": "x" })))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::UnexpectedResponse(_)),
        "{error:?}"
    );
    let protocol = error.to_protocol_error();
    assert_eq!(protocol.code, codes::TRANSPORT_UNEXPECTED_RESPONSE);
    assert_eq!(protocol.retryable, Some(true));
}

#[tokio::test]
async fn a_panicking_handler_is_a_connector_runtime_failure_and_the_server_lives_on() {
    let running = start(Desk::default(), ServerConfig::default()).await;
    let client = running.client("tok-ada");
    let failed = client
        .invoke(Action::new("cap:desk:echo", json!({ "text": "panic" })))
        .await
        .unwrap();
    assert_eq!(failed.status, ActionResultStatus::Failed);
    let error = failed.error.expect("the panic's error");
    assert_eq!(error.code, codes::CONNECTOR_RUNTIME_FAILURE);
    assert_eq!(error.category, ErrorCategory::Connector);
    assert_eq!(error.retryable, Some(false));
    assert_eq!(error.details, Some(json!({ "uncertain_outcome": true })));
    let next = client
        .invoke(Action::new("cap:desk:echo", json!({ "text": "fine" })))
        .await
        .unwrap();
    assert_eq!(next.status, ActionResultStatus::Completed);
    running.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_abort_its_action_halfway() {
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let client = running.client("tok-ada");
    let call = tokio::spawn(async move {
        client
            .invoke(Action::new(
                "cap:desk:echo",
                json!({ "text": "x", "delay_ms": 300 }),
            ))
            .await
    });
    wait_until(|| desk.started.load(Ordering::SeqCst) == 1).await;
    // The client goes away mid-call: its connection closes.
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 0);
    // The action runs to its end on the server, so its result is settled (and, with a key,
    // stored for the retry).
    wait_until(|| desk.echoes.load(Ordering::SeqCst) == 1).await;
    running.stop().await;
}

#[tokio::test]
async fn what_crosses_the_wire_validates_against_upstreams_schemas() {
    let Some(manifest_schema) = aip_connector_tests::upstream_schema("manifest.schema.json") else {
        return;
    };
    let action_schema = aip_connector_tests::upstream_schema("action.schema.json")
        .expect("the folder holds every upstream schema");
    let running = start(Desk::default(), ServerConfig::default()).await;
    let response = reqwest::Client::new()
        .get(format!("{}/aip/v1/manifest", running.base))
        .bearer_auth("tok-ada")
        .send()
        .await
        .unwrap();
    let envelope: Value = response.json().await.unwrap();
    assert_eq!(
        envelope["message_type"],
        "aip.discovery.v1.manifest_response"
    );
    aip_connector_tests::assert_valid_against(&manifest_schema, &envelope["body"]["manifest"]);
    let action = Action::new("cap:desk:echo", json!({ "text": "hi" }));
    let sent = serde_json::to_value(Envelope::new(MessageBody::Action(Box::new(action)))).unwrap();
    aip_connector_tests::assert_valid_against(&action_schema, &sent["body"]["action"]);
    running.stop().await;
}

#[tokio::test]
async fn a_stalled_request_cannot_hold_shutdown_past_the_drain_and_grace() {
    let running = start(
        Desk::default(),
        ServerConfig::default()
            .drain_timeout(Duration::from_millis(200))
            .cancel_grace(Duration::from_millis(200))
            .max_in_flight(1),
    )
    .await;
    let address = running.base.trim_start_matches("http://").to_owned();
    let mut stalled = stall(&address).await;
    // Shut down only once the stalled request holds the server's only slot (a fixed sleep
    // could end before a loaded machine accepted it, and the test would prove nothing): a probe
    // refused as overloaded proves it.
    let client = running.client("tok-ada");
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match client
                .invoke(Action::new("cap:desk:echo", json!({ "text": "probe" })))
                .await
            {
                Err(ClientError::Remote(error)) if error.code == codes::TRANSPORT_OVERLOADED => {
                    break;
                }
                _ => {
                    // A probe the server took first gets the stalled request refused instead:
                    // answered (or closed), it holds nothing, so stall again.
                    if stalled.try_read(&mut [0; 1]).is_ok() {
                        stalled = stall(&address).await;
                    }
                }
            }
        }
    })
    .await
    .expect("the stalled request takes the only slot");
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), running.stop())
        .await
        .expect("serve returns after drain_timeout + cancel_grace");
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
    drop(stalled);
}

#[tokio::test]
async fn a_body_that_never_arrives_times_out_and_frees_its_slot() {
    use tokio::io::AsyncReadExt;
    let running = start(
        Desk::default(),
        ServerConfig::default()
            .request_timeout(Duration::from_millis(200))
            .max_in_flight(1),
    )
    .await;
    let address = running.base.trim_start_matches("http://").to_owned();
    let mut stalled = stall(&address).await;
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(answer.contains(codes::TRANSPORT_TIMEOUT), "{answer}");
    // The only slot is free again.
    let next = running
        .client("tok-ada")
        .invoke(Action::new("cap:desk:echo", json!({ "text": "x" })))
        .await
        .unwrap();
    assert_eq!(next.status, ActionResultStatus::Completed);
    running.stop().await;
}

/// The periodic purge deletes expired idempotency records and, with the host's retention,
/// closed approval records past it.
#[tokio::test]
async fn serving_purges_expired_idempotency_records_periodically() {
    use aip_connector::host::Retention;
    use aip_connector::ids::ApprovalId;
    use aip_connector::store::{ApprovalStore, IdempotencyStore};
    use aip_connector_tests::store_conformance::{insert_closed_approval, settle_expired_record};

    async fn store_with_expired_record() -> MemoryStore {
        let store = MemoryStore::default();
        settle_expired_record(&store, "Tenant:t1:old").await;
        insert_closed_approval(&store, "appr_old").await;
        store
    }

    async fn serve_for(store: &MemoryStore, config: ServerConfig, wait: Duration) -> bool {
        let host = Host::builder()
            .connector(Desk::default())
            .store(Arc::new(store.clone()))
            .retention(Retention::KEEP_FOREVER.approvals_for(Duration::from_millis(1)))
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, signal) = oneshot::channel::<()>();
        let serving = tokio::spawn(
            AipServer::new(host, tokens(), config).serve(listener, async {
                let _ = signal.await;
            }),
        );
        let deadline = tokio::time::Instant::now() + wait;
        let mut purged = false;
        let approval = ApprovalId::trusted("appr_old");
        while tokio::time::Instant::now() < deadline {
            if store.record("Tenant:t1:old", 0).await.unwrap().is_none()
                && store.approval(&approval).await.unwrap().is_none()
            {
                purged = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
        purged
    }

    // The default purges when serving starts.
    let store = store_with_expired_record().await;
    assert_eq!(
        ServerConfig::default().purge_interval,
        Some(Duration::from_secs(600))
    );
    assert!(serve_for(&store, ServerConfig::default(), Duration::from_secs(5)).await);

    // Without an interval, the application purges: the record stays.
    let store = store_with_expired_record().await;
    let config = ServerConfig::default().purge_interval(None);
    assert!(!serve_for(&store, config, Duration::from_millis(200)).await);
}

/// The `X-Api-Key` authenticator of docs/serving.md ("Identity"), written only against what
/// `aip_connector::serve` re-exports.
mod api_keys {
    use std::collections::HashMap;

    use aip_connector::host::TrustedContext;
    use aip_connector::model::ProtocolError;
    use aip_connector::serve::auth::unauthenticated;
    use aip_connector::serve::{Authenticator, BoxFuture, http};

    /// `X-Api-Key: <key>` → the principal and tenant the key was issued to.
    pub(super) struct ApiKeys(pub(super) HashMap<String, TrustedContext>);

    impl Authenticator for ApiKeys {
        fn authenticate<'a>(
            &'a self,
            request: &'a http::request::Parts,
        ) -> BoxFuture<'a, Result<TrustedContext, ProtocolError>> {
            let caller = request
                .headers
                .get("x-api-key")
                .and_then(|key| key.to_str().ok())
                .and_then(|key| self.0.get(key))
                .cloned()
                .ok_or_else(|| unauthenticated("missing or unknown X-Api-Key"));
            Box::pin(std::future::ready(caller))
        }

        /// Sent as `WWW-Authenticate` with every `401` (the default is `Bearer`).
        fn challenge(&self) -> Option<http::HeaderValue> {
            Some(http::HeaderValue::from_static(
                r#"ApiKey header="X-Api-Key""#,
            ))
        }
    }
}

/// An authenticator that refuses every request with `refusal`, challenging with `challenge`.
struct Refusing {
    refusal: ProtocolError,
    challenge: Option<&'static str>,
}

impl Authenticator for Refusing {
    fn authenticate<'a>(
        &'a self,
        _request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<TrustedContext, ProtocolError>> {
        Box::pin(std::future::ready(Err(self.refusal.clone())))
    }

    fn challenge(&self) -> Option<http::HeaderValue> {
        self.challenge.map(http::HeaderValue::from_static)
    }
}

/// Status, `WWW-Authenticate`, `Retry-After` and error code of a refused envelope post and of a
/// refused manifest read.
async fn refusals_of(authenticator: Refusing) -> Vec<(u16, Option<String>, Option<String>, Value)> {
    let running = start_with(Desk::default(), authenticator, ServerConfig::default()).await;
    let base = &running.base;
    let envelope = Envelope::new(MessageBody::Action(Box::new(Action::new(
        "cap:desk:echo",
        json!({ "text": "hi" }),
    ))));
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    for request in [
        http.post(format!("{base}{MESSAGES_PATH}")).json(&envelope),
        http.get(format!("{base}/aip/v1/manifest")),
    ] {
        let response = request.send().await.unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        let (authenticate, retry_after) = (header("www-authenticate"), header("retry-after"));
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["message_type"], "aip.core.v1.error", "{body}");
        seen.push((
            status,
            authenticate,
            retry_after,
            body["body"]["error"]["error"]["code"].clone(),
        ));
    }
    running.stop().await;
    seen
}

#[tokio::test]
async fn an_authenticator_refusal_is_401_with_its_challenge_whatever_its_code() {
    // A code of the authenticator's own, category `auth`: still 401 (not the 403 of an
    // authorization refusal), with the authenticator's challenge.
    let expired = ProtocolError::new(
        "auth.token_expired",
        "the token expired",
        ErrorCategory::Auth,
    );
    let seen = refusals_of(Refusing {
        refusal: expired.clone(),
        challenge: Some(r#"Bearer error="invalid_token""#),
    })
    .await;
    for (status, authenticate, retry_after, code) in seen {
        assert_eq!(status, 401);
        assert_eq!(
            authenticate.as_deref(),
            Some(r#"Bearer error="invalid_token""#)
        );
        assert_eq!(retry_after, None);
        assert_eq!(code, "auth.token_expired");
    }
    // No challenge: no header.
    for (status, authenticate, _, _) in refusals_of(Refusing {
        refusal: expired,
        challenge: None,
    })
    .await
    {
        assert_eq!(status, 401);
        assert_eq!(authenticate, None);
    }
}

#[tokio::test]
async fn a_temporary_authenticator_refusal_is_503_with_retry_after_and_no_challenge() {
    let mut unreachable = ProtocolError::new(
        "auth.identity_provider_unavailable",
        "the key set could not be fetched",
        ErrorCategory::Temporary,
    );
    unreachable.retryable = Some(true);
    unreachable.retry_after_ms = Some(2_500);
    for (status, authenticate, retry_after, code) in refusals_of(Refusing {
        refusal: unreachable,
        challenge: Some("Bearer"),
    })
    .await
    {
        assert_eq!(status, 503);
        assert_eq!(authenticate, None);
        assert_eq!(retry_after.as_deref(), Some("3"));
        assert_eq!(code, "auth.identity_provider_unavailable");
    }
}

#[tokio::test]
async fn a_custom_authenticator_maps_a_header_to_the_caller() {
    let desk = Desk::default();
    let keys = api_keys::ApiKeys(std::collections::HashMap::from([(
        "key-ada".to_owned(),
        person("user:ada", "t1"),
    )]));
    let running = start_with(desk.clone(), keys, ServerConfig::default()).await;
    let base = &running.base;
    let envelope = Envelope::new(MessageBody::Action(Box::new(Action::new(
        "cap:desk:echo",
        json!({ "text": "hi" }),
    ))));
    let post = |key: Option<&'static str>| {
        let mut request = reqwest::Client::new()
            .post(format!("{base}{MESSAGES_PATH}"))
            .json(&envelope);
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.send()
    };
    let accepted: Value = post(Some("key-ada")).await.unwrap().json().await.unwrap();
    let result = &accepted["body"]["action_result"];
    assert_eq!(result["status"], "completed", "{accepted}");
    assert_eq!(result["output"]["caller"], "user:ada");
    assert_eq!(result["output"]["tenant"], "t1");
    for key in [None, Some("key-nobody")] {
        let refused = post(key).await.unwrap();
        assert_eq!(refused.status().as_u16(), 401, "{key:?}");
        assert_eq!(
            refused.headers()["www-authenticate"],
            r#"ApiKey header="X-Api-Key""#
        );
    }
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 1);
    running.stop().await;
}

/// The ```` ```json ```` block that follows `marker` in docs/serving.md.
fn serving_doc_json(marker: &str) -> String {
    include_str!("../../docs/serving.md")
        .split_once(marker)
        .and_then(|(_, after)| after.split_once("```json\n"))
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(body, _)| body.to_owned())
        .unwrap_or_else(|| panic!("docs/serving.md has a json block after {marker}"))
}

/// The action and cancel envelopes of docs/serving.md ("Messages"), posted as they stand in the
/// doc.
#[tokio::test]
async fn the_documented_wire_envelope_runs() {
    let body = serving_doc_json("<!-- wire-example: action envelope -->");
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let (status, answer) = raw_post(&running.base, Some("tok-ada"), body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["message_type"], "aip.core.v1.action_result");
    assert_eq!(answer["in_response_to"], "msg_01");
    let result = &answer["body"]["action_result"];
    assert_eq!(result["status"], "completed", "{answer}");
    assert_eq!(result["output"]["text"], "hello");
    assert_eq!(desk.echoes.load(Ordering::SeqCst), 1);

    // The cancel envelope: `act_01` has finished, so the cancel is only remembered.
    let body = serving_doc_json("<!-- wire-example: cancel envelope -->");
    let (status, answer) = raw_post(&running.base, Some("tok-ada"), body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["message_type"], "aip.core.v1.ack", "{answer}");
    assert_eq!(answer["in_response_to"], "msg_02");
    assert_eq!(answer["body"]["ack"]["status"], "accepted", "{answer}");
    assert_eq!(answer["body"]["ack"]["action_id"], "act_01", "{answer}");
    running.stop().await;
}

/// The approval decision and query envelopes of docs/serving.md ("Messages"), posted as they
/// stand in the doc, with a real approval id in place of `apr_01`.
#[tokio::test]
async fn the_documented_approval_envelopes_decide_and_read_an_approval() {
    let decision = serving_doc_json("<!-- wire-example: approval decision envelope -->");
    let query = serving_doc_json("<!-- wire-example: approval query envelope -->");
    let desk = Desk::default();
    let running = start(desk.clone(), ServerConfig::default()).await;
    let pending = running
        .client("tok-ada")
        .invoke(
            Action::new("cap:desk:refund", json!({ "amount_cents": 4411 }))
                .with_idempotency_key("refund-doc"),
        )
        .await
        .unwrap();
    let approval = pending
        .approval_id()
        .expect("the refund waits for approval");

    // The requester may not approve their own refund: 403 with the policy code.
    let own = decision
        .replace("apr_01", approval.as_str())
        .replace("user:alice", "user:ada")
        .replace("dec_alice_01", "dec_ada_01");
    let (status, refused) = raw_post(&running.base, Some("tok-ada"), own).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(
        refused["body"]["error"]["error"]["code"],
        codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER
    );

    let (status, answer) = raw_post(
        &running.base,
        Some("tok-alice"),
        decision.replace("apr_01", approval.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["message_type"], "aip.policy.v1.approval_record_view");
    assert_eq!(answer["in_response_to"], "msg_03");
    let view = &answer["body"]["approval_record_view"];
    assert_eq!(view["status"], "approved", "{answer}");
    assert_eq!(view["requested_by"], "user:ada");
    assert_eq!(view["decisions"][0]["decision_id"], "dec_alice_01");
    // The host's time, not the one sent.
    assert_ne!(view["decisions"][0]["decided_at"], "2026-12-02T10:05:00Z");

    let (status, answer) = raw_post(
        &running.base,
        Some("tok-eve"),
        query.replace("apr_01", approval.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["in_response_to"], "msg_04");
    assert_eq!(answer["body"]["approval_record_view"]["status"], "approved");
    running.stop().await;
}

/// Found by a hostile audit: a client that asks for a stream and never reads stops the server
/// from polling the stream (the socket is full), so its slot was held for as long as the
/// connection stayed open, and `max_in_flight` such connections refused every other request.
/// The slot is freed once the action settled and the client had the request timeout to read.
#[tokio::test]
async fn a_stream_nobody_reads_frees_its_slot_after_the_request_timeout() {
    let config = ServerConfig::default()
        .max_in_flight(1)
        .request_timeout(Duration::from_millis(300));
    let running = start(Desk::default(), config).await;
    let address = running.base.trim_start_matches("http://").to_owned();
    let action = Action::new("cap:desk:flood", json!({ "text": "x", "delay_ms": 1_000 }))
        .with_timeout_ms(500);
    let reader_that_never_reads = send_streamed_action(&address, "tok-ada", action).await;
    let client = running.client("tok-ada");
    let echo = || Action::new("cap:desk:echo", json!({ "text": "hi" }));
    // While the flood runs, its request holds the only slot.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = remote(client.invoke(echo()).await.unwrap_err());
    assert_eq!(refused.code, codes::TRANSPORT_OVERLOADED);
    // Its action ends at its deadline (500 ms); 300 ms later the slot is free again, though the
    // connection is still open and unread.
    let mut answered = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match client.invoke(echo()).await {
            Ok(result) => {
                answered = Some(result);
                break;
            }
            Err(error) => assert_eq!(remote(error).code, codes::TRANSPORT_OVERLOADED),
        }
    }
    let answered = answered.expect("the slot was freed");
    assert_eq!(answered.status, ActionResultStatus::Completed);
    drop(reader_that_never_reads);
    running.stop().await;
}
