//! The MCP projection of a host, driven by the real rmcp client: over streamable HTTP on a
//! loopback port (tool list, annotations, schemas, structured results, schema rejection,
//! approval gate, idempotency through `_meta`, cancellation, authentication) and over a byte
//! pipe as stdio would carry it (a fixed local caller).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, Host, StaticApprovalAuthority, TrustedContext};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    ActionResultStatus, ApprovalDecision, ApprovalDecisionKind, ErrorCategory, Principal,
    PrincipalKind, ProtocolError, ProviderOperationRef,
};
use aip_connector::prelude::*;
use aip_connector::serve::mcp::{
    IDEMPOTENCY_KEY_META, McpProjection, McpProjectionError, SessionKey, meta,
};
use aip_connector::serve::{Authenticator, BearerTokens, BoxFuture, http};
use aip_connector::store::MemoryStore;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ProgressNotificationParam, RequestMetaObject, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

// ---- The connector ---------------------------------------------------------------------------

/// A postal address.
#[derive(Deserialize, JsonSchema)]
struct Address {
    /// The city.
    city: String,
    /// The postal code: five digits.
    #[schemars(length(min = 5, max = 5))]
    zip: String,
}

/// Who to look up.
#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// The person's name.
    name: String,
    /// Where they live.
    address: Address,
}

/// Where an entry lives.
#[derive(Serialize, JsonSchema)]
struct Location {
    city: String,
    zip: String,
}

/// A directory entry.
#[derive(Serialize, JsonSchema)]
struct Entry {
    id: String,
    location: Location,
    /// Who asked.
    looked_up_by: String,
}

/// An entry id.
#[derive(Deserialize, JsonSchema)]
struct EntryRef {
    id: String,
}

/// A removed entry.
#[derive(Serialize, JsonSchema)]
struct Removed {
    id: String,
}

/// A profile to push.
#[derive(Deserialize, JsonSchema)]
struct Profile {
    handle: String,
}

/// A pushed profile.
#[derive(Serialize, JsonSchema)]
struct Synced {
    handle: String,
    /// Which execution of the handler produced this result.
    run: usize,
    /// Always sent, `null` when there is nothing to say.
    note: Option<String>,
}

/// A search query.
#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

/// Search hits.
#[derive(Serialize, JsonSchema)]
struct Hits {
    hits: Vec<String>,
}

/// Money to move.
#[derive(Deserialize, JsonSchema)]
struct Transfer {
    amount_cents: u64,
}

/// A transfer made.
#[derive(Serialize, JsonSchema)]
struct Transferred {
    transfer_id: String,
}

/// A slot to book.
#[derive(Deserialize, JsonSchema)]
struct Slot {
    slot: String,
}

/// A booked slot.
#[derive(Serialize, JsonSchema)]
struct Booked {
    slot: String,
    /// The provider operation checkpointed before booking.
    operation_id: String,
}

/// Nothing.
#[derive(Deserialize, JsonSchema)]
struct Nothing {}

/// Whether the wait ran to its end.
#[derive(Serialize, JsonSchema)]
struct Waited {
    finished: bool,
}

#[derive(Deserialize, JsonSchema)]
struct Fee {
    cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    cents: u64,
    run: usize,
}

#[derive(Clone, Default)]
struct Directory {
    syncs: Arc<AtomicUsize>,
    fees: Arc<AtomicUsize>,
    transfers: Arc<AtomicUsize>,
    wait_started: Arc<Notify>,
    wait_cancelled: Arc<Notify>,
}

#[connector(id = "directory", profiles = ["aip.native.http.v1", "aip.mcp.compat.v1"])]
impl Directory {
    /// Looks up a directory entry
    /// by name and address.
    ///
    /// - Names match exactly.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"name": "Ada", "address": {"city": "London", "zip": "12345"}}"#],
    )]
    async fn lookup(&self, input: Lookup, caller: Caller) -> Result<Entry, ConnectorFailure> {
        assert_ne!(input.name, "panic", "the handler panics when asked to");
        Ok(Entry {
            id: format!("e-{}", input.name.to_lowercase()),
            location: Location {
                city: input.address.city,
                zip: input.address.zip,
            },
            looked_up_by: caller.principal_id().to_string(),
        })
    }

    /// Removes a directory entry.
    #[capability(
        risk = medium,
        side_effects = [delete],
        idempotency(required),
        data(sensitivity = internal),
        approval(required, evidence = [reason]),
    )]
    async fn remove(
        &self,
        input: EntryRef,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Removed, ConnectorFailure> {
        Ok(Removed { id: input.id })
    }

    /// Pushes a profile to the partner directory: the same push twice changes nothing.
    #[capability(
        risk = low,
        side_effects = [write, external_network],
        idempotency(required),
        execution(retry_safety = safe),
        data(sensitivity = public),
    )]
    async fn sync_profile(
        &self,
        input: Profile,
        _key: IdempotencyKey,
    ) -> Result<Synced, ConnectorFailure> {
        let run = self.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Synced {
            handle: input.handle,
            run,
            note: None,
        })
    }

    /// Posts a fee to the tenant's ledger; a key names one posting for the whole tenant.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn post_fee(&self, input: Fee, _key: IdempotencyKey) -> Result<Posted, ConnectorFailure> {
        let run = self.fees.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Posted {
            cents: input.cents,
            run,
        })
    }

    /// Streams the directory's entries: streaming only, so a `tools/call` runs it streamed.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn export(&self, sink: StreamSink<Posted>) -> Result<(), ConnectorFailure> {
        sink.send(Posted { cents: 0, run: 0 }).await
    }

    /// Searches the public web for a name.
    #[capability(
        risk = low,
        side_effects = [read, external_network],
        idempotency(required),
        execution(retry_safety = safe),
        data(sensitivity = public),
        bindings(mcp(tool_name = "web_search")),
    )]
    async fn search(&self, input: Query, _key: IdempotencyKey) -> Result<Hits, ConnectorFailure> {
        Ok(Hits {
            hits: vec![format!("https://example.com/?q={}", input.q)],
        })
    }

    /// Moves money out of the directory's account.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn transfer(
        &self,
        input: Transfer,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Transferred, ConnectorFailure> {
        self.transfers.fetch_add(1, Ordering::SeqCst);
        Ok(Transferred {
            transfer_id: format!("tr-{}-{}", input.amount_cents, key.as_str()),
        })
    }

    /// Books a slot at the provider, checkpointing the provider operation first.
    #[capability(
        risk = low,
        side_effects = [write, external_network],
        idempotency(required),
        data(sensitivity = public),
        transaction(modes = [execute]),
    )]
    async fn book(
        &self,
        input: Slot,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        let operation_id = format!("op-{}", key.as_str());
        let operation = ProviderOperationRef {
            provider: "calendar".into(),
            operation_id: operation_id.clone(),
            request_id: None,
        };
        checkpoint.record(operation, None).await?;
        Ok(Booked {
            slot: input.slot,
            operation_id,
        })
    }

    /// Waits until cancelled (or 30 s). Keyed, so a call made again gets the same derived key.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = public)
    )]
    async fn wait(
        &self,
        _input: Nothing,
        _key: IdempotencyKey,
        cancel: Cancellation,
    ) -> Result<Waited, ConnectorFailure> {
        let token = cancel.token().clone();
        let cancelled = self.wait_cancelled.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            cancelled.notify_one();
        });
        self.wait_started.notify_one();
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Waited { finished: true })
    }
}

// ---- Fixtures --------------------------------------------------------------------------------

const TOKEN: &str = "mcp-test-token";
/// A second caller of the same tenant (`user:ben`).
const OTHER_TOKEN: &str = "mcp-test-token-ben";

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(directory: Directory) -> Host {
    let finance = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance");
    Host::builder()
        .connector(directory)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:fin", finance))
        .build()
        .unwrap()
}

/// A projection served on a loopback port; the server shuts down when this is dropped.
struct Served {
    url: String,
    _shutdown: oneshot::Sender<()>,
}

async fn serve(projection: McpProjection) -> Served {
    let tokens = BearerTokens::new()
        .with(TOKEN, person("user:ana"))
        .with(OTHER_TOKEN, person("user:ben"));
    serve_with(projection, Arc::new(tokens)).await
}

/// Like [`serve`], with `authenticator` in front of the endpoint.
async fn serve_with(projection: McpProjection, authenticator: Arc<dyn Authenticator>) -> Served {
    serve_configured(
        projection,
        authenticator,
        StreamableHttpServerConfig::default(),
    )
    .await
}

/// Like [`serve_with`], with an rmcp configuration of the test's own.
async fn serve_configured(
    projection: McpProjection,
    authenticator: Arc<dyn Authenticator>,
    config: StreamableHttpServerConfig,
) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (shutdown, stop) = oneshot::channel::<()>();
    tokio::spawn(async move {
        projection
            .serve_http(listener, authenticator, config, async move {
                let _ = stop.await;
            })
            .await
            .unwrap();
    });
    Served {
        url,
        _shutdown: shutdown,
    }
}

type Client = RunningService<RoleClient, ()>;

async fn client(served: &Served) -> Client {
    client_as(served, TOKEN).await
}

/// A client authenticated by `token` (`TOKEN`: ana, `OTHER_TOKEN`: ben, both of tenant t1).
async fn client_as(served: &Served, token: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url.as_str()).auth_header(token),
    );
    ().serve(transport).await.unwrap()
}

/// Ends `session` with an HTTP DELETE sent with `token`.
async fn delete_session(served: &Served, token: &str, session: &str) -> reqwest::Response {
    reqwest::Client::new()
        .delete(&served.url)
        .bearer_auth(token)
        .header("mcp-session-id", session)
        .send()
        .await
        .unwrap()
}

/// A raw MCP `initialize` request, for tests that speak HTTP without the rmcp client.
fn initialize_request() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "raw", "version": "0" },
        },
    })
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments)
}

fn with_key(mut params: CallToolRequestParams, key: &str) -> CallToolRequestParams {
    let mut meta = RequestMetaObject::new();
    meta.insert(IDEMPOTENCY_KEY_META.to_owned(), json!(key));
    params.meta = Some(meta);
    params
}

fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .map(|block| block.as_text().expect("text content").text.clone())
        .collect()
}

fn result_meta<'r>(result: &'r CallToolResult, key: &str) -> &'r Value {
    result
        .meta
        .as_ref()
        .and_then(|m| m.get(key))
        .unwrap_or_else(|| panic!("result _meta has no {key}: {result:?}"))
}

fn tool<'t>(tools: &'t [Tool], name: &str) -> &'t Tool {
    tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

fn hints(tool: &Tool) -> [Option<bool>; 4] {
    let a = tool.annotations.as_ref().expect("annotations");
    [
        a.read_only_hint,
        a.destructive_hint,
        a.idempotent_hint,
        a.open_world_hint,
    ]
}

fn lookup_arguments() -> Value {
    json!({ "name": "Ana", "address": { "city": "Lisbon", "zip": "10001" } })
}

// ---- Streamable HTTP ---------------------------------------------------------------------------

#[tokio::test]
async fn tools_list_projects_names_annotations_and_schemas() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let client = client(&served).await;
    let tools = client.list_all_tools().await.unwrap();

    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cap_directory_book",
            "cap_directory_export",
            "cap_directory_lookup",
            "cap_directory_post_fee",
            "cap_directory_remove",
            "cap_directory_sync_profile",
            "cap_directory_transfer",
            "cap_directory_wait",
            "web_search",
        ]
    );

    let (t, f) = (Some(true), Some(false));
    // [readOnly, destructive, idempotent, openWorld]
    assert_eq!(hints(tool(&tools, "cap_directory_lookup")), [t, f, t, f]);
    assert_eq!(hints(tool(&tools, "cap_directory_remove")), [f, t, t, f]);
    assert_eq!(
        hints(tool(&tools, "cap_directory_sync_profile")),
        [f, t, t, t]
    );
    assert_eq!(hints(tool(&tools, "web_search")), [f, f, t, t]);
    assert_eq!(hints(tool(&tools, "cap_directory_transfer")), [f, t, t, f]);

    let lookup = tool(&tools, "cap_directory_lookup");
    assert_eq!(lookup.title.as_deref(), Some("Lookup"));
    assert_eq!(
        lookup.annotations.as_ref().unwrap().title.as_deref(),
        Some("Lookup")
    );
    // Rustdoc's wraps are gone (a model sees each break); paragraphs and list items stay.
    assert_eq!(
        lookup.description.as_deref(),
        Some("Looks up a directory entry by name and address.\n\n- Names match exactly.")
    );
    let meta = lookup.meta.as_ref().unwrap();
    assert_eq!(
        meta.get(meta::CAPABILITY_ID),
        Some(&json!("cap:directory:lookup"))
    );
    assert_eq!(meta.get(meta::APPROVAL_REQUIRED), Some(&json!(false)));
    let transfer = tool(&tools, "cap_directory_transfer")
        .meta
        .as_ref()
        .unwrap();
    assert_eq!(transfer.get(meta::APPROVAL_REQUIRED), Some(&json!(true)));
    assert_eq!(transfer.get(meta::IDEMPOTENCY), Some(&json!("required")));

    // The input schema is client-compatible: the nested type is inlined.
    let input = Value::Object(lookup.input_schema.as_ref().clone());
    let text = input.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
    assert!(input.get("$schema").is_none(), "{text}");
    assert_eq!(input["type"], "object");
    assert_eq!(input["required"], json!(["name", "address"]));
    assert_eq!(input["properties"]["address"]["type"], "object");
    assert_eq!(
        input["properties"]["address"]["properties"]["zip"]["minLength"],
        5
    );
    // The declared examples, where JSON Schema keeps them.
    assert_eq!(
        input["examples"],
        json!([{ "name": "Ada", "address": { "city": "London", "zip": "12345" } }])
    );

    // The output schema too, since it has no nullable field.
    let output = Value::Object(
        lookup
            .output_schema
            .as_deref()
            .expect("outputSchema")
            .clone(),
    );
    let text = output.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
    assert_eq!(output["properties"]["location"]["type"], "object");
    assert_eq!(
        output["required"],
        json!(["id", "location", "looked_up_by"])
    );

    // A nullable output field keeps `["string", "null"]`: the result really carries `null`.
    let synced = tool(&tools, "cap_directory_sync_profile");
    let output = Value::Object(synced.output_schema.as_deref().unwrap().clone());
    assert_eq!(
        output["properties"]["note"]["type"],
        json!(["string", "null"])
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_call_returns_structured_content_that_matches_the_output_schema() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let client = client(&served).await;
    let tools = client.list_all_tools().await.unwrap();

    let result = client
        .call_tool(call("cap_directory_lookup", lookup_arguments()))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(
        structured,
        json!({
            "id": "e-ana",
            "location": { "city": "Lisbon", "zip": "10001" },
            "looked_up_by": "user:ana",
        })
    );
    // The text copy is the same JSON.
    let text: Value = serde_json::from_str(&texts(&result)[0]).unwrap();
    assert_eq!(text, structured);
    assert_eq!(result_meta(&result, meta::STATUS), "completed");
    assert!(
        result_meta(&result, meta::ACTION_ID)
            .as_str()
            .unwrap()
            .starts_with("act_")
    );

    // What a strict client does: validate structuredContent against the advertised schema.
    for (name, arguments) in [
        ("cap_directory_lookup", lookup_arguments()),
        ("cap_directory_sync_profile", json!({ "handle": "ana" })),
    ] {
        let result = client.call_tool(call(name, arguments)).await.unwrap();
        let schema = Value::Object(tool(&tools, name).output_schema.as_deref().unwrap().clone());
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let structured = result.structured_content.unwrap();
        assert!(validator.is_valid(&structured), "{name}: {structured}");
    }
    client.cancel().await.unwrap();
}

/// A handler that panics is answered (a tool error saying the outcome is unknown), and the
/// session goes on serving: the panic does not take the session's task with it.
#[tokio::test]
async fn a_panicking_handler_is_a_tool_error_and_the_session_goes_on() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let client = client(&served).await;
    let mut arguments = lookup_arguments();
    arguments["name"] = json!("panic");
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        client.call_tool(call("cap_directory_lookup", arguments)),
    )
    .await
    .expect("the call is answered")
    .unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let blocks = texts(&result);
    assert!(
        blocks[0].starts_with(&format!("{}: ", codes::CONNECTOR_RUNTIME_FAILURE)),
        "{blocks:?}"
    );
    let next = client
        .call_tool(call("cap_directory_lookup", lookup_arguments()))
        .await
        .unwrap();
    assert_eq!(next.is_error, Some(false), "{next:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn schema_violations_and_unknown_tools_are_rejected_visibly() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let client = client(&served).await;

    // `zip` too short and `name` missing: the host's schema check refuses; a tool error the
    // model can read and correct.
    let result = client
        .call_tool(call(
            "cap_directory_lookup",
            json!({ "address": { "city": "Lisbon", "zip": "1" } }),
        ))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(result.structured_content.is_none());
    let blocks = texts(&result);
    assert!(
        blocks[0].starts_with(&format!("{}: ", codes::ACTION_INPUT_SCHEMA_INVALID)),
        "{blocks:?}"
    );
    let error: Value = serde_json::from_str(&blocks[1]).unwrap();
    assert_eq!(error["code"], codes::ACTION_INPUT_SCHEMA_INVALID);
    assert_eq!(error["retryable"], false);
    let violations = error["details"]["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 2, "{error}");
    assert_eq!(result_meta(&result, meta::STATUS), "failed");
    assert_eq!(
        result_meta(&result, meta::ERROR)["code"],
        codes::ACTION_INPUT_SCHEMA_INVALID
    );

    // Missing arguments are `{}`, which the schema refuses too.
    let result = client
        .call_tool(CallToolRequestParams::new("cap_directory_lookup"))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(texts(&result)[0].starts_with(codes::ACTION_INPUT_SCHEMA_INVALID));

    // An unknown tool is a JSON-RPC error (invalid params), not a tool result.
    let error = client
        .call_tool(call("no_such_tool", json!({})))
        .await
        .unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("expected a JSON-RPC error, got {error:?}");
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(error.message.contains("no_such_tool"), "{}", error.message);
    // A caller's long or multi-line name is shown clipped and escaped: rmcp logs the error.
    let long = format!("evil\nlevel=ERROR forged {}", "x".repeat(10_000));
    let error = client.call_tool(call(&long, json!({}))).await.unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("expected a JSON-RPC error, got {error:?}");
    };
    assert!(error.message.len() < 300, "{}", error.message);
    assert!(
        !error.message.contains('\n') && error.message.contains("evil\\nlevel"),
        "{}",
        error.message
    );

    // A non-string idempotency key in `_meta` is a malformed request.
    let mut params = call("cap_directory_sync_profile", json!({ "handle": "x" }));
    let mut bad = RequestMetaObject::new();
    bad.insert(IDEMPOTENCY_KEY_META.to_owned(), json!(42));
    params.meta = Some(bad);
    let error = client.call_tool(params).await.unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("expected a JSON-RPC error, got {error:?}");
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_approval_gated_call_names_the_pending_approval_and_does_not_run() {
    let directory = Directory::default();
    let host = host(directory.clone());
    let served = serve(McpProjection::new(host.clone()).unwrap()).await;
    let client = client(&served).await;

    let result = client
        .call_tool(with_key(
            call("cap_directory_transfer", json!({ "amount_cents": 1200 })),
            "transfer-1",
        ))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(result.structured_content.is_none());
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 0);
    assert_eq!(result_meta(&result, meta::STATUS), "pending_approval");
    let approval_id = result_meta(&result, meta::APPROVAL)["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(approval_id.starts_with("appr_"), "{approval_id}");
    // Who may approve travels with the request, as the capability publishes it.
    let policy = &result_meta(&result, meta::APPROVAL)["policy"];
    assert_eq!(policy["required"], true, "{policy}");
    assert!(
        policy.to_string().contains("finance"),
        "the policy names the approvers' role: {policy}"
    );
    let text = &texts(&result)[0];
    assert!(text.contains("Not executed"), "{text}");
    assert!(text.contains("nothing ran"), "{text}");
    assert!(text.contains(&approval_id), "{text}");
    assert_eq!(
        result_meta(&result, meta::ERROR)["code"],
        codes::POLICY_HUMAN_APPROVAL_REQUIRED
    );

    // The same key again replays the gate; still nothing ran.
    let again = client
        .call_tool(with_key(
            call("cap_directory_transfer", json!({ "amount_cents": 1200 })),
            "transfer-1",
        ))
        .await
        .unwrap();
    assert_eq!(
        result_meta(&again, meta::APPROVAL)["approval_id"],
        approval_id.as_str()
    );
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 0);

    // The pending request is the host's, requested by the authenticated caller; once a finance
    // approver grants it, the requester resumes it out of band and it runs once.
    let id: ApprovalId = serde_json::from_value(json!(approval_id)).unwrap();
    let decision = ApprovalDecision {
        approval_id: id.clone(),
        decision: ApprovalDecisionKind::Approved,
        approver: Principal::new("user:fin", PrincipalKind::Human),
        decided_at: time::OffsetDateTime::now_utc(),
        reason: Some("checked".into()),
        constraints: vec![],
        evidence: vec![],
        decision_id: Some("dec-1".into()),
        policy_hash: None,
        authority_path: vec![],
        target_decision_id: None,
    };
    host.record_approval_decision(decision, &person("user:fin"))
        .await
        .unwrap();
    let resumed = host.resume_approved(&id, &person("user:ana")).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

fn finance_decision(id: &ApprovalId, decision_id: &str) -> ApprovalDecision {
    ApprovalDecision::approve(id.clone(), Principal::new("user:fin", PrincipalKind::Human))
        .with_reason("checked")
        .with_decision_id(decision_id)
}

/// The MCP way back to an approved request: the same call again (same arguments, so the same
/// derived key) runs the action once the approval is granted, and replays its result after.
#[tokio::test]
async fn calling_a_gated_tool_again_after_approval_runs_it_once() {
    let directory = Directory::default();
    let host = host(directory.clone());
    let served = serve(McpProjection::new(host.clone()).unwrap()).await;
    let client = client(&served).await;
    let transfer = || call("cap_directory_transfer", json!({ "amount_cents": 900 }));

    let pending = client.call_tool(transfer()).await.unwrap();
    assert_eq!(result_meta(&pending, meta::STATUS), "pending_approval");
    let text = &texts(&pending)[0];
    assert!(
        text.contains("call this tool again with the same arguments"),
        "{text}"
    );
    let id: ApprovalId =
        serde_json::from_value(result_meta(&pending, meta::APPROVAL)["approval_id"].clone())
            .unwrap();

    // Before a decision the call again is the same pending request.
    let early = client.call_tool(transfer()).await.unwrap();
    assert_eq!(result_meta(&early, meta::STATUS), "pending_approval");
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 0);

    host.record_approval_decision(finance_decision(&id, "dec-recall"), &person("user:fin"))
        .await
        .unwrap();
    // Another caller's identical call is not the requester's request: it never runs it.
    let ben = client_as(&served, OTHER_TOKEN).await;
    let other = ben.call_tool(transfer()).await.unwrap();
    assert_ne!(result_meta(&other, meta::STATUS), "completed", "{other:?}");
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 0);

    let ran = client.call_tool(transfer()).await.unwrap();
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(result_meta(&ran, meta::STATUS), "completed");
    assert!(
        ran.structured_content.as_ref().unwrap()["transfer_id"]
            .as_str()
            .unwrap()
            .starts_with("tr-900-")
    );
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 1);

    let replayed = client.call_tool(transfer()).await.unwrap();
    assert_eq!(
        result_meta(&replayed, meta::IDEMPOTENT_REPLAY),
        &json!(true)
    );
    assert_eq!(replayed.structured_content, ran.structured_content);
    assert_eq!(directory.transfers.load(Ordering::SeqCst), 1);
    ben.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

#[derive(Deserialize, JsonSchema)]
struct Erasure {
    email: String,
}

#[derive(Serialize, JsonSchema)]
struct Erased {
    erased: bool,
}

/// A gated capability with personal data: its approval record keeps no input.
#[derive(Clone, Default)]
struct Registry {
    erasures: Arc<AtomicUsize>,
}

#[connector(id = "registry", profiles = ["aip.mcp.compat.v1"])]
impl Registry {
    /// Erases a person's entry.
    #[capability(
        risk = high,
        side_effects = [delete],
        idempotency(required),
        data(sensitivity = internal, pii),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn erase(
        &self,
        input: Erasure,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Erased, ConnectorFailure> {
        self.erasures.fetch_add(1, Ordering::SeqCst);
        Ok(Erased {
            erased: !input.email.is_empty(),
        })
    }
}

/// A redacted request is re-submitted with the call's arguments (the record kept none): the
/// same call again runs it once, and other arguments under the same key do not.
#[tokio::test]
async fn calling_a_redacted_gated_tool_again_after_approval_runs_it_once() {
    let registry = Registry::default();
    let finance = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance");
    let host = Host::builder()
        .connector(registry.clone())
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:fin", finance))
        .build()
        .unwrap();
    let served = serve(McpProjection::new(host.clone()).unwrap()).await;
    let client = client(&served).await;
    let erase = |email: &str| {
        with_key(
            call("cap_registry_erase", json!({ "email": email })),
            "erase-1",
        )
    };

    let pending = client.call_tool(erase("ana@example.com")).await.unwrap();
    let id: ApprovalId =
        serde_json::from_value(result_meta(&pending, meta::APPROVAL)["approval_id"].clone())
            .unwrap();
    let record = host
        .record_approval_decision(finance_decision(&id, "dec-erase"), &person("user:fin"))
        .await
        .unwrap();
    assert!(!record.input_retained);

    // Other arguments under the key are another input: refused, nothing runs.
    let other = client.call_tool(erase("ben@example.com")).await.unwrap();
    assert_eq!(other.is_error, Some(true), "{other:?}");
    assert_eq!(registry.erasures.load(Ordering::SeqCst), 0);

    let ran = client.call_tool(erase("ana@example.com")).await.unwrap();
    assert_eq!(result_meta(&ran, meta::STATUS), "completed", "{ran:?}");
    assert_eq!(registry.erasures.load(Ordering::SeqCst), 1);
    let again = client.call_tool(erase("ana@example.com")).await.unwrap();
    assert_eq!(result_meta(&again, meta::IDEMPOTENT_REPLAY), &json!(true));
    assert_eq!(registry.erasures.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_meta_idempotency_key_dedupes_and_without_one_the_arguments_do() {
    let directory = Directory::default();
    let served = serve(McpProjection::new(host(directory.clone())).unwrap()).await;
    let client = client(&served).await;
    let push = || call("cap_directory_sync_profile", json!({ "handle": "ana" }));

    let first = client.call_tool(with_key(push(), "k-1")).await.unwrap();
    let second = client.call_tool(with_key(push(), "k-1")).await.unwrap();
    // The replay is the stored result; the host's replay marker travels in `_meta`, so the
    // structured content still matches the output schema.
    assert_eq!(first.structured_content, second.structured_content);
    assert_eq!(first.structured_content.as_ref().unwrap()["run"], 1);
    assert_eq!(result_meta(&second, meta::IDEMPOTENT_REPLAY), &json!(true));
    assert!(
        first
            .meta
            .as_ref()
            .unwrap()
            .get(meta::IDEMPOTENT_REPLAY)
            .is_none()
    );
    assert_eq!(directory.syncs.load(Ordering::SeqCst), 1);

    // Without a key the contract's required key is derived from the arguments: a repeated
    // call with the same arguments (a client's blind retry) replays, as `idempotentHint`
    // promises; other arguments run.
    let third = client.call_tool(push()).await.unwrap();
    let fourth = client.call_tool(push()).await.unwrap();
    assert_eq!(third.structured_content.unwrap()["run"], 2);
    assert_eq!(fourth.structured_content.as_ref().unwrap()["run"], 2);
    assert_eq!(result_meta(&fourth, meta::IDEMPOTENT_REPLAY), &json!(true));
    assert_eq!(directory.syncs.load(Ordering::SeqCst), 2);
    let other = client
        .call_tool(call(
            "cap_directory_sync_profile",
            json!({ "handle": "bo" }),
        ))
        .await
        .unwrap();
    assert_eq!(other.structured_content.unwrap()["run"], 3);
    assert_eq!(directory.syncs.load(Ordering::SeqCst), 3);

    // The derived key is the caller's own: ben, of the same tenant, sending ana's arguments is
    // another push, not a replay of hers.
    let ben = client_as(&served, OTHER_TOKEN).await;
    let bens = ben.call_tool(push()).await.unwrap();
    assert_eq!(bens.structured_content.as_ref().unwrap()["run"], 4);
    assert!(
        bens.meta
            .as_ref()
            .is_none_or(|meta| meta.get(meta::IDEMPOTENT_REPLAY).is_none()),
        "{bens:?}"
    );
    assert_eq!(directory.syncs.load(Ordering::SeqCst), 4);
    ben.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

/// Under `key_scope = tenant` a derived key still belongs to its caller: two people of one
/// tenant who send the same arguments without a key each get their own charge.
#[tokio::test]
async fn a_derived_key_never_merges_two_callers_of_one_tenant() {
    let directory = Directory::default();
    let served = serve(McpProjection::new(host(directory.clone())).unwrap()).await;
    let (ana, ben) = (client(&served).await, client_as(&served, OTHER_TOKEN).await);
    let post = || call("cap_directory_post_fee", json!({ "cents": 700 }));

    let anas = ana.call_tool(post()).await.unwrap();
    let bens = ben.call_tool(post()).await.unwrap();
    assert_eq!(anas.structured_content.unwrap()["run"], 1);
    assert_eq!(bens.structured_content.unwrap()["run"], 2);
    // Ana's blind retry still replays her own.
    let retry = ana.call_tool(post()).await.unwrap();
    assert_eq!(retry.structured_content.as_ref().unwrap()["run"], 1);
    assert_eq!(result_meta(&retry, meta::IDEMPOTENT_REPLAY), &json!(true));
    assert_eq!(directory.fees.load(Ordering::SeqCst), 2);
    ana.cancel().await.unwrap();
    ben.cancel().await.unwrap();
}

// ---- What a derived key keeps -------------------------------------------------------------------

/// How the tracker's provider answers the next create.
const CREATES_SUCCEED: usize = 0;
/// The provider refuses the create (a definite 422: nothing was created).
const CREATES_REJECTED: usize = 1;
/// The create was sent and no answer came back: it may have taken effect.
const CREATES_LOST: usize = 2;

/// An issue to create.
#[derive(Deserialize, JsonSchema)]
struct NewIssue {
    title: String,
}

/// A created issue.
#[derive(Serialize, JsonSchema)]
struct Issue {
    title: String,
    /// Which execution of the handler created it.
    run: usize,
}

/// An issue to close.
#[derive(Deserialize, JsonSchema)]
struct CloseIssue {
    issue_id: String,
}

/// A closed issue.
#[derive(Serialize, JsonSchema)]
struct Closed {
    issue_id: String,
}

/// An issue tracker as a migrated rmcp server would have it (an author trial's): a create that
/// checkpoints its provider operation, and a close behind an approval that expires in a minute.
#[derive(Clone, Default)]
struct Tracker {
    /// One of `CREATES_*`.
    creates: Arc<AtomicUsize>,
    /// Handler runs of `create_issue`.
    create_runs: Arc<AtomicUsize>,
    /// Handler runs of `close_issue`.
    closes: Arc<AtomicUsize>,
}

#[connector(id = "tracker", profiles = ["aip.mcp.compat.v1"])]
impl Tracker {
    /// Creates an issue.
    #[capability(
        risk = low,
        side_effects = [write, external_network],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [execute]),
        bindings(mcp(tool_name = "create_issue")),
    )]
    async fn create_issue(
        &self,
        input: NewIssue,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Issue, ConnectorFailure> {
        let run = self.create_runs.fetch_add(1, Ordering::SeqCst) + 1;
        match self.creates.load(Ordering::SeqCst) {
            CREATES_REJECTED => {
                return Err(ConnectorFailure::permanent(
                    "tracker.project_invalid",
                    "the provider rejected the request (HTTP 422)",
                    "tracker",
                )
                .with_remote_status(422));
            }
            CREATES_LOST => {
                let operation = ProviderOperationRef {
                    provider: "tracker".into(),
                    operation_id: format!("create-{}", key.as_str()),
                    request_id: None,
                };
                checkpoint.record(operation, None).await?;
                return Err(ConnectorFailure::new(
                    "tracker.no_answer",
                    "the create was sent and no answer came back",
                    ErrorCategory::Connector,
                    aip_connector::model::ConnectorOperation::Invocation,
                    "tracker",
                )
                .with_uncertain_outcome());
            }
            _ => {}
        }
        Ok(Issue {
            title: input.title,
            run,
        })
    }

    /// Closes an issue, once a finance approver agreed.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        approval(required, selector = role("finance"), evidence = [reason], ttl_ms = 60_000),
        bindings(mcp(tool_name = "close_issue")),
    )]
    async fn close_issue(
        &self,
        input: CloseIssue,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Closed, ConnectorFailure> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        Ok(Closed {
            issue_id: input.issue_id,
        })
    }
}

/// The tracker's host (finance approvers as in [`host`]) on `clock`.
fn tracker_host(tracker: Tracker, clock: Arc<aip_connector::store::ManualClock>) -> Host {
    let finance = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance");
    Host::builder()
        .connector(tracker)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:fin", finance))
        .clock(clock)
        .build()
        .unwrap()
}

/// The replay note of a result (its last text block), and whether `_meta` marks a replay.
fn replay_note(result: &CallToolResult) -> (String, bool) {
    let replayed = result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(meta::IDEMPOTENT_REPLAY))
        == Some(&json!(true));
    (texts(result).last().cloned().unwrap_or_default(), replayed)
}

/// The approval id a `pending_approval` result names.
fn pending_approval_id(result: &CallToolResult) -> ApprovalId {
    assert_eq!(
        result_meta(result, meta::STATUS),
        "pending_approval",
        "{result:?}"
    );
    serde_json::from_value(result_meta(result, meta::APPROVAL)["approval_id"].clone()).unwrap()
}

/// Under a derived key a definite failure is not kept: the provider refused (nothing was
/// created), the cause is fixed, and the identical call runs again and succeeds. Its success
/// is kept, and a blind retry replays it. (An author trial found the refusal replayed for a day,
/// with a note telling the model to send a key its client could not send.)
#[tokio::test]
async fn a_definite_failure_under_a_derived_key_runs_again_on_the_identical_call() {
    let tracker = Tracker::default();
    let host = tracker_host(tracker.clone(), Arc::default());
    let served = serve(McpProjection::new(host).unwrap()).await;
    let client = client(&served).await;
    let create = || call("create_issue", json!({ "title": "Needs a component" }));

    tracker.creates.store(CREATES_REJECTED, Ordering::SeqCst);
    let refused = client.call_tool(create()).await.unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(
        result_meta(&refused, meta::ERROR)["code"],
        "tracker.project_invalid"
    );
    assert_eq!(tracker.create_runs.load(Ordering::SeqCst), 1);

    // The admin fixes the project; the model makes the same call.
    tracker.creates.store(CREATES_SUCCEED, Ordering::SeqCst);
    let created = client.call_tool(create()).await.unwrap();
    assert_eq!(
        result_meta(&created, meta::STATUS),
        "completed",
        "{created:?}"
    );
    assert_eq!(created.structured_content.as_ref().unwrap()["run"], 2);
    assert_eq!(tracker.create_runs.load(Ordering::SeqCst), 2);

    // The success is kept: the blind retry replays it, and says what the model can do.
    let retried = client.call_tool(create()).await.unwrap();
    assert_eq!(retried.structured_content, created.structured_content);
    assert_eq!(tracker.create_runs.load(Ordering::SeqCst), 2);
    let (note, replayed) = replay_note(&retried);
    assert!(replayed, "{retried:?}");
    assert!(note.starts_with("Replayed:"), "{note}");
    assert!(note.contains("nothing ran again"), "{note}");
    assert!(note.contains("ask the user"), "{note}");
    assert!(
        !note.contains("_meta"),
        "no key a generic client cannot send: {note}"
    );
    client.cancel().await.unwrap();
}

/// Under a derived key an uncertain outcome is kept: the create may have reached the
/// provider, so the identical call replays it rather than risk a second issue, even once the
/// provider answers again. The note does not claim the call ran, nor ask for a key.
#[tokio::test]
async fn an_uncertain_failure_under_a_derived_key_still_replays() {
    let tracker = Tracker::default();
    let host = tracker_host(tracker.clone(), Arc::default());
    let served = serve(McpProjection::new(host).unwrap()).await;
    let client = client(&served).await;
    let create = || call("create_issue", json!({ "title": "Lost in transit" }));

    tracker.creates.store(CREATES_LOST, Ordering::SeqCst);
    let lost = client.call_tool(create()).await.unwrap();
    assert_eq!(lost.is_error, Some(true), "{lost:?}");
    assert_eq!(
        result_meta(&lost, meta::ERROR)["details"]["uncertain_outcome"],
        true,
        "{lost:?}"
    );

    tracker.creates.store(CREATES_SUCCEED, Ordering::SeqCst);
    for _ in 0..2 {
        let again = client.call_tool(create()).await.unwrap();
        assert_eq!(again.is_error, Some(true), "{again:?}");
        let (note, replayed) = replay_note(&again);
        assert!(replayed, "{again:?}");
        assert!(note.contains("nothing ran again"), "{note}");
        assert!(!note.contains("already ran"), "{note}");
        assert!(!note.contains("_meta"), "{note}");
    }
    assert_eq!(tracker.create_runs.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

/// Under a derived key a denied (or expired) approval is not kept: the identical call answers
/// the denial once (the model learns of it, and is not told the call ran), then asks for a new
/// approval, which, granted, runs the action once.
#[tokio::test]
async fn after_a_denial_under_a_derived_key_the_identical_call_asks_again() {
    let tracker = Tracker::default();
    let clock = Arc::new(aip_connector::store::ManualClock::new());
    let host = tracker_host(tracker.clone(), clock.clone());
    let served = serve(McpProjection::new(host.clone()).unwrap()).await;
    let client = client(&served).await;
    let close = |issue: &str| call("close_issue", json!({ "issue_id": issue }));

    let first = pending_approval_id(&client.call_tool(close("iss_1")).await.unwrap());
    let denial = ApprovalDecision::deny(
        first.clone(),
        Principal::new("user:fin", PrincipalKind::Human),
    )
    .with_reason("ask the reporter first")
    .with_decision_id("dec-deny");
    host.record_approval_decision(denial, &person("user:fin"))
        .await
        .unwrap();

    let denied = client.call_tool(close("iss_1")).await.unwrap();
    assert_eq!(
        result_meta(&denied, meta::ERROR)["code"],
        codes::POLICY_APPROVAL_DENIED,
        "{denied:?}"
    );
    let (note, replayed) = replay_note(&denied);
    assert!(replayed, "{denied:?}");
    assert!(!note.contains("already ran"), "{note}");
    assert!(note.contains("changed nothing"), "{note}");
    assert!(note.contains("new approval"), "{note}");
    assert!(!note.contains("_meta"), "{note}");

    // The identical call is a new request, with a new approval; granted, it runs once.
    let second = pending_approval_id(&client.call_tool(close("iss_1")).await.unwrap());
    assert_ne!(second, first);
    host.record_approval_decision(finance_decision(&second, "dec-ok"), &person("user:fin"))
        .await
        .unwrap();
    let ran = client.call_tool(close("iss_1")).await.unwrap();
    assert_eq!(result_meta(&ran, meta::STATUS), "completed", "{ran:?}");
    assert_eq!(tracker.closes.load(Ordering::SeqCst), 1);
    let replayed = client.call_tool(close("iss_1")).await.unwrap();
    assert_eq!(result_meta(&replayed, meta::STATUS), "completed");
    assert_eq!(
        result_meta(&replayed, meta::IDEMPOTENT_REPLAY),
        &json!(true)
    );
    assert_eq!(tracker.closes.load(Ordering::SeqCst), 1);

    // An approval that expires undecided is let go the same way.
    let waited = pending_approval_id(&client.call_tool(close("iss_2")).await.unwrap());
    clock.advance(61_000);
    let expired = client.call_tool(close("iss_2")).await.unwrap();
    assert_eq!(
        result_meta(&expired, meta::ERROR)["code"],
        codes::POLICY_APPROVAL_EXPIRED,
        "{expired:?}"
    );
    let anew = pending_approval_id(&client.call_tool(close("iss_2")).await.unwrap());
    assert_ne!(anew, waited);
    assert_eq!(tracker.closes.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

/// A key the client sent keeps today's semantics: its definite failure and its denial are
/// replayed for the key's TTL, and the note says a new key is a new request.
#[tokio::test]
async fn a_client_sent_key_keeps_its_failures() {
    let tracker = Tracker::default();
    let host = tracker_host(tracker.clone(), Arc::default());
    let served = serve(McpProjection::new(host.clone()).unwrap()).await;
    let client = client(&served).await;
    let create = || {
        with_key(
            call("create_issue", json!({ "title": "Needs a component" })),
            "create-1",
        )
    };

    tracker.creates.store(CREATES_REJECTED, Ordering::SeqCst);
    client.call_tool(create()).await.unwrap();
    tracker.creates.store(CREATES_SUCCEED, Ordering::SeqCst);
    let again = client.call_tool(create()).await.unwrap();
    assert_eq!(
        result_meta(&again, meta::ERROR)["code"],
        "tracker.project_invalid",
        "{again:?}"
    );
    let (note, replayed) = replay_note(&again);
    assert!(replayed, "{again:?}");
    assert!(
        note.contains("new `_meta[\"aip/idempotency_key\"]`"),
        "{note}"
    );
    assert!(!note.contains("already ran"), "{note}");
    assert_eq!(tracker.create_runs.load(Ordering::SeqCst), 1);

    let close = || {
        with_key(
            call("close_issue", json!({ "issue_id": "iss_1" })),
            "close-1",
        )
    };
    let id = pending_approval_id(&client.call_tool(close()).await.unwrap());
    let denial = ApprovalDecision::deny(id, Principal::new("user:fin", PrincipalKind::Human))
        .with_reason("no")
        .with_decision_id("dec-deny");
    host.record_approval_decision(denial, &person("user:fin"))
        .await
        .unwrap();
    for _ in 0..2 {
        let denied = client.call_tool(close()).await.unwrap();
        assert_eq!(
            result_meta(&denied, meta::ERROR)["code"],
            codes::POLICY_APPROVAL_DENIED,
            "{denied:?}"
        );
    }
    assert_eq!(tracker.closes.load(Ordering::SeqCst), 0);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_transactional_capability_runs_as_a_durable_execute() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let client = client(&served).await;
    // The handler takes `Checkpoint`, which only an admitted transaction provides: the call is
    // sent as an `execute` transaction, so it completes.
    let result = client
        .call_tool(with_key(
            call("cap_directory_book", json!({ "slot": "mon-9" })),
            "book-1",
        ))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result.structured_content.unwrap(),
        json!({ "slot": "mon-9", "operation_id": "op-book-1" })
    );
    client.cancel().await.unwrap();
}

/// Dropping a call abandons its action: the handler's cancellation fires, and the key derived
/// from the arguments is released, so the same call made again runs again instead of
/// replaying an interruption for the key's TTL.
#[tokio::test]
async fn cancelling_the_mcp_request_cancels_the_action() {
    let directory = Directory::default();
    let served = serve(McpProjection::new(host(directory.clone())).unwrap()).await;
    let client = client(&served).await;

    for attempt in 1..=2 {
        // Dropping the call sends `notifications/cancelled`; the host abandons the handler.
        let started = directory.wait_started.notified();
        let cancelled = directory.wait_cancelled.notified();
        tokio::select! {
            result = client.call_tool(call("cap_directory_wait", json!({}))) => {
                panic!("attempt {attempt}: the wait returned: {result:?}")
            }
            () = started => {}
        }
        tokio::time::timeout(Duration::from_secs(10), cancelled)
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt}: the handler's cancellation fired"));
    }
    client.cancel().await.unwrap();
}

/// Deleting a session abandons a tool call still running in it at once: rmcp alone let it run
/// on for up to 5 s while it drained the session, during which the caller could open more
/// sessions and run more calls than its session limit (a hostile review ran six at once under
/// a limit of one).
#[tokio::test]
async fn deleting_a_session_abandons_its_running_call_at_once() {
    let directory = Directory::default();
    let served = serve(McpProjection::new(host(directory.clone())).unwrap()).await;
    let session = RawSession::open(&served).await;
    let started = directory.wait_started.notified();
    let cancelled = directory.wait_cancelled.notified();
    let call = tokio::spawn(
        session
            .http
            .post(&session.url)
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session.session)
            .json(&json!({
                "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": { "name": "cap_directory_wait", "arguments": {} }
            }))
            .send(),
    );
    tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .expect("the call started");
    let deleted = session
        .http
        .delete(&session.url)
        .bearer_auth(TOKEN)
        .header("mcp-session-id", &session.session)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    tokio::time::timeout(Duration::from_secs(2), cancelled)
        .await
        .expect("the handler's cancellation fired at once, not after rmcp's 5 s drain");
    call.abort();
}

#[tokio::test]
async fn unauthenticated_requests_get_401_and_reach_no_mcp_code() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let initialize = initialize_request();
    let http = reqwest::Client::new();
    for token in [None, Some("wrong-token")] {
        let mut request = http
            .post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(
            response.headers()["www-authenticate"].to_str().unwrap(),
            "Bearer"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["message_type"], "aip.core.v1.error");
        assert_eq!(
            body["body"]["error"]["error"]["code"],
            codes::AUTH_UNAUTHENTICATED,
            "{body}"
        );
    }

    // The rmcp client with a wrong token cannot even initialize.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url.as_str()).auth_header("nope"),
    );
    assert!(().serve(transport).await.is_err());

    // The right token gets through the same endpoint.
    let response = http
        .post(&served.url)
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(TOKEN)
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A tool call whose arguments repeat a key is refused before rmcp reads it (JSON-RPC parse
/// error, HTTP 400): rmcp would run the last value, where a gateway may have checked the first
/// (found by a hostile review). The same body with the key once is served.
#[tokio::test]
async fn a_body_that_repeats_a_key_is_a_parse_error() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .bearer_auth(TOKEN)
            .body(body)
            .send()
    };
    let repeated = post(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",
            "capabilities":{},"clientInfo":{"name":"t","version":"1","name":"u"}}}"#,
    )
    .await
    .unwrap();
    assert_eq!(repeated.status(), 400);
    let body: Value = repeated.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("repeats the key `name`"),
        "{body}"
    );
    let once = post(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",
            "capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await
    .unwrap();
    assert_eq!(once.status(), 200);
}

/// A body rmcp cannot read is answered by the projection with a typed JSON-RPC error (HTTP 400,
/// `application/json`) carrying the request's id when it has one; rmcp alone answered a plain
/// `415` "fail to deserialize request body" and called a `tools/call` with array `arguments`
/// "method not found" (found by a hostile-input review).
#[tokio::test]
async fn a_body_rmcp_cannot_read_gets_a_typed_json_rpc_error() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let http = reqwest::Client::new();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let cases: [(String, i64, Value); 6] = [
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/ca"#.to_owned(), -32700, Value::Null),
        ("hello".to_owned(), -32700, Value::Null),
        (deep, -32700, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"cap_directory_lookup","arguments":[1,2]}}"#.to_owned(),
            -32602,
            json!(4),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"five","method":"tools/call","params":5}"#.to_owned(),
            -32602,
            json!("five"),
        ),
        (r#"[{"jsonrpc":"2.0","id":6,"method":"tools/list"}]"#.to_owned(), -32600, Value::Null),
    ];
    for (body, code, id) in cases {
        let response = http
            .post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .bearer_auth(TOKEN)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{body}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert_eq!(answer["id"], id, "{body}: {answer}");
    }
}

/// An authenticated client that stalls its upload is answered `408` once the projection's body
/// timeout passes, and a client that never finishes its headers is disconnected by
/// `serve_http`'s connection limits (a hostile review found both held for good).
#[tokio::test]
async fn stalled_uploads_and_unfinished_headers_are_let_go() {
    use aip_connector::serve::ConnectionLimits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let projection = McpProjection::new(host(Directory::default()))
        .unwrap()
        .with_body_timeout(Duration::from_millis(200))
        .with_connection_limits(
            ConnectionLimits::default().header_read_timeout(Duration::from_millis(200)),
        );
    let served = serve(projection).await;
    let address = served
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();

    let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{\"jsonrpc\""
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let mut answer = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), stalled.read_exact(&mut answer))
        .await
        .expect("no answer to a stalled upload after 10 s")
        .unwrap();
    assert_eq!(&answer, b"HTTP/1.1 408");

    let mut unfinished = tokio::net::TcpStream::connect(&address).await.unwrap();
    unfinished
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buffer = [0u8; 256];
        while unfinished.read(&mut buffer).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    assert!(
        closed.is_ok(),
        "unfinished headers held the connection for 10 s"
    );
}

/// A connector names its server in `initialize` through the re-exported `Implementation`,
/// without an rmcp dependency of its own (an author trial found it had to pin rmcp for this).
#[tokio::test]
async fn initialize_announces_the_server_info_the_connector_gives() {
    use aip_connector::serve::mcp::Implementation;
    let projection = McpProjection::new(host(Directory::default()))
        .unwrap()
        .with_server_info(Implementation::new("tracker", "1.2.3"));
    let served = serve(projection).await;
    let client = client(&served).await;
    let info = client.peer_info().expect("the server's initialize answer");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "tracker");
    assert_eq!(server.version, "1.2.3");
    // The default instructions ask nothing of `_meta`, which desktop clients cannot set (found
    // by an author trial).
    let instructions = info.instructions.as_deref().expect("default instructions");
    assert!(!instructions.contains("_meta"), "{instructions}");
    assert!(instructions.contains("same arguments"), "{instructions}");
}

/// Refuses every request: temporarily (identity provider down) or for good, with no challenge.
struct Refusing {
    temporary: bool,
}

impl Authenticator for Refusing {
    fn authenticate<'a>(
        &'a self,
        _request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<TrustedContext, ProtocolError>> {
        let mut error = if self.temporary {
            ProtocolError::new(
                "auth.identity_provider_unavailable",
                "the key set could not be fetched",
                ErrorCategory::Temporary,
            )
        } else {
            ProtocolError::new(
                "auth.peer_unknown",
                "no client certificate",
                ErrorCategory::Auth,
            )
        };
        error.retry_after_ms = self.temporary.then_some(1_000);
        Box::pin(std::future::ready(Err(error)))
    }

    fn challenge(&self) -> Option<http::HeaderValue> {
        None
    }
}

#[tokio::test]
async fn refusals_follow_the_authenticator_as_on_the_aip_server() {
    for (temporary, status, retry_after) in [(false, 401, None), (true, 503, Some("1"))] {
        let served = serve_with(
            McpProjection::new(host(Directory::default())).unwrap(),
            Arc::new(Refusing { temporary }),
        )
        .await;
        let response = reqwest::Client::new()
            .post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize_request())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "temporary: {temporary}");
        // No challenge: this scheme cannot be answered in the request.
        assert!(response.headers().get("www-authenticate").is_none());
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|value| value.to_str().unwrap()),
            retry_after
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["message_type"], "aip.core.v1.error", "{body}");
    }
}

/// A session belongs to the caller that opened it: another caller naming it (to delete it, to
/// call a tool in it) is answered as for a session that does not exist, and the owner's
/// session goes on.
#[tokio::test]
async fn another_callers_session_is_not_found() {
    let served = serve(McpProjection::new(host(Directory::default())).unwrap()).await;
    let http = reqwest::Client::new();
    let opened = http
        .post(&served.url)
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(TOKEN)
        .json(&initialize_request())
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let as_ben = |request: reqwest::RequestBuilder| {
        request
            .bearer_auth(OTHER_TOKEN)
            .header("mcp-session-id", &session)
            .header("accept", "application/json, text/event-stream")
    };
    let deleted = delete_session(&served, OTHER_TOKEN, &session).await;
    assert_eq!(deleted.status(), 404);
    let call = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}
    });
    let listed = as_ben(http.post(&served.url))
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 404);
    // The owner's session is still there: its owner may close it.
    let closed = delete_session(&served, TOKEN, &session).await;
    assert!(closed.status().is_success(), "{}", closed.status());
}

/// rmcp's session store shared by the "replicas" of a test, in memory.
#[derive(Default)]
struct SharedSessions(std::sync::Mutex<std::collections::HashMap<String, SessionState>>);

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.0.lock().unwrap().get(id).cloned())
    }
    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.0.lock().unwrap().insert(id.to_owned(), state.clone());
        Ok(())
    }
    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        self.0.lock().unwrap().remove(id);
        Ok(())
    }
}

/// Replicas that share rmcp's session store and the session key serve a session opened on one
/// to its owner on another, and to nobody else; a replica with another key (here: the
/// default, random one) does not know the session at all. The binding travels in the signed
/// session id, so no replica needs the others' memory.
#[tokio::test]
async fn replicas_sharing_the_session_key_bind_sessions_to_their_owner() {
    let store = Arc::new(SharedSessions::default());
    let mut config = StreamableHttpServerConfig::default();
    config.session_store = Some(store.clone());
    let key = SessionKey::new(vec![9_u8; SessionKey::MIN_LEN]).unwrap();
    let tokens = || -> Arc<dyn Authenticator> {
        Arc::new(
            BearerTokens::new()
                .with(TOKEN, person("user:ana"))
                .with(OTHER_TOKEN, person("user:ben")),
        )
    };
    let replica = |key: Option<SessionKey>| {
        let projection = McpProjection::new(host(Directory::default())).unwrap();
        let projection = match key {
            Some(key) => projection.with_session_key(key),
            None => projection,
        };
        serve_configured(projection, tokens(), config.clone())
    };
    let (a, b, stranger) = (
        replica(Some(key.clone())).await,
        replica(Some(key)).await,
        replica(None).await,
    );
    let http = reqwest::Client::new();
    let post = |served: &Served, token: &str, session: Option<&str>, body: Value| {
        let request = http
            .post(&served.url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        match session {
            Some(session) => request.header("mcp-session-id", session),
            None => request,
        }
        .send()
    };
    let opened = post(&a, TOKEN, None, initialize_request()).await.unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (rmcp_id, tag) = session.rsplit_once('.').expect("a signed session id");
    assert!(
        store.0.lock().unwrap().contains_key(rmcp_id),
        "rmcp stores its own id"
    );
    assert_eq!(tag.len(), 32, "{session}");
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let acknowledged = post(&a, TOKEN, Some(&session), initialized).await.unwrap();
    assert!(
        acknowledged.status().is_success(),
        "{}",
        acknowledged.status()
    );

    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {} });
    let on_b = post(&b, TOKEN, Some(&session), list.clone()).await.unwrap();
    assert_eq!(on_b.status(), 200);
    let body = on_b.text().await.unwrap();
    assert!(body.contains("\"tools\""), "{body}");

    // The same id presented by another caller, to the same or another replica: not found.
    for replica in [&a, &b] {
        let as_ben = post(replica, OTHER_TOKEN, Some(&session), list.clone())
            .await
            .unwrap();
        assert_eq!(as_ben.status(), 404);
    }
    // rmcp's bare id is no key to the session either.
    let bare = post(&b, TOKEN, Some(rmcp_id), list.clone()).await.unwrap();
    assert_eq!(bare.status(), 404);
    // A replica with another key does not know the session, even for its owner.
    let elsewhere = post(&stranger, TOKEN, Some(&session), list).await.unwrap();
    assert_eq!(elsewhere.status(), 404);
}

#[tokio::test]
async fn sessions_beyond_the_limit_get_503_until_one_closes() {
    // A limit of 0 would refuse every session (and every stateless request): it means 1.
    let at_least_one = McpProjection::new(host(Directory::default()))
        .unwrap()
        .with_max_sessions(0);
    assert!(format!("{at_least_one:?}").contains("max_sessions: 1"));
    let served = serve(
        McpProjection::new(host(Directory::default()))
            .unwrap()
            .with_max_sessions(2),
    )
    .await;
    let initialize = initialize_request();
    let http = reqwest::Client::new();
    let open = || {
        http.post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(TOKEN)
            .json(&initialize)
            .send()
    };
    let session_of = |response: &reqwest::Response| {
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };

    let first = open().await.unwrap();
    assert_eq!(first.status(), 200);
    let first = session_of(&first);
    // The rmcp client holds the second session and keeps using it.
    let client = client(&served).await;

    let refused = open().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_OVERLOADED,
        "{body}"
    );
    assert_eq!(body["body"]["error"]["error"]["retryable"], true);
    // Authentication comes first: an unknown caller learns nothing about the server's load.
    let anonymous = http
        .post(&served.url)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // An open session is still served while the limit is reached.
    let tools = client.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());

    // Deleting a session frees its slot.
    let deleted = delete_session(&served, TOKEN, &first).await;
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let mut admitted = None;
    for _ in 0..50 {
        let response = open().await.unwrap();
        if response.status() == 200 {
            admitted = Some(session_of(&response));
            break;
        }
        // rmcp closes the session's worker on its own task.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted.is_some_and(|id| id != first));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn one_caller_cannot_take_every_session() {
    let served = serve(
        McpProjection::new(host(Directory::default()))
            .unwrap()
            .with_max_sessions(10)
            .with_max_sessions_per_caller(2),
    )
    .await;
    let initialize = initialize_request();
    let http = reqwest::Client::new();
    let open = |token: &'static str| {
        http.post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(token)
            .json(&initialize)
            .send()
    };
    // Ana opens her two sessions at once; a third is refused for her alone.
    let (first, second) = tokio::join!(open(TOKEN), open(TOKEN));
    assert_eq!(first.unwrap().status(), 200);
    assert_eq!(second.unwrap().status(), 200);
    let refused = open(TOKEN).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    let error = &body["body"]["error"]["error"];
    assert_eq!(error["code"], codes::TRANSPORT_OVERLOADED, "{body}");
    assert!(
        error["message"].as_str().unwrap().contains("this caller"),
        "{body}"
    );
    // Ben, another principal of the same tenant, still gets his.
    let other = open(OTHER_TOKEN).await.unwrap();
    assert_eq!(other.status(), 200);
}

/// A request whose client goes away before the answer (hyper then drops the request, and the
/// session guard's future with it) gives its caller's slot back. Found by a review: the slot
/// was settled only once a response came back, so with stateless JSON answers each abandoned
/// call kept one, and after `max_sessions_per_caller` of them the caller was refused every
/// request until the process restarted.
#[tokio::test]
async fn a_request_its_client_abandons_gives_its_callers_slot_back() {
    let directory = Directory::default();
    let served = serve_configured(
        McpProjection::new(host(directory.clone()))
            .unwrap()
            .with_max_sessions_per_caller(1),
        Arc::new(BearerTokens::new().with(TOKEN, person("user:ana"))),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
    )
    .await;
    let post = |body: Value| {
        reqwest::Client::new()
            .post(&served.url)
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
    };
    let lookup = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "cap_directory_lookup",
        "arguments": { "name": "Ada", "address": { "city": "London", "zip": "12345" } }
    }});
    for round in 0..3 {
        let started = directory.wait_started.notified();
        let abandoned = tokio::spawn(post(json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "cap_directory_wait", "arguments": {} }
        })));
        if tokio::time::timeout(Duration::from_secs(10), started)
            .await
            .is_err()
        {
            let answer = abandoned.await.unwrap().unwrap();
            panic!(
                "round {round}: the call never started: {} {}",
                answer.status(),
                answer.text().await.unwrap()
            );
        }
        // The client gives up: its connection closes while the call still runs.
        abandoned.abort();
        let mut answered = None;
        for _ in 0..100 {
            let response = post(lookup.clone()).await.unwrap();
            if response.status() == 200 {
                answered = Some(response.json::<Value>().await.unwrap());
                break;
            }
            assert_eq!(response.status(), 503, "round {round}");
            // The server notices the closed connection on its own time.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let answered =
            answered.unwrap_or_else(|| panic!("round {round}: the slot never came back"));
        assert_eq!(answered["result"]["isError"], false, "{answered}");
    }
}

/// In stateless mode with SSE answers, rmcp sends a tool call's response headers before the
/// call ends: a caller's slot is held until the answer's body ends, so one caller runs no more
/// calls at once than its limit. Found by a hostile probe: the slot was given back with the
/// headers, and one caller ran six calls at once under a limit of one.
#[tokio::test]
async fn a_stateless_call_holds_its_callers_slot_until_its_answer_ends() {
    let directory = Directory::default();
    let served = serve_configured(
        McpProjection::new(host(directory.clone()))
            .unwrap()
            .with_max_sessions_per_caller(1),
        Arc::new(
            BearerTokens::new()
                .with(TOKEN, person("user:ana"))
                .with(OTHER_TOKEN, person("user:ben")),
        ),
        StreamableHttpServerConfig::default().with_legacy_session_mode(false),
    )
    .await;
    let post = |token: &'static str, body: Value| {
        reqwest::Client::new()
            .post(&served.url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
    };
    let lookup = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "cap_directory_lookup",
        "arguments": { "name": "Ada", "address": { "city": "London", "zip": "12345" } }
    }});
    let started = directory.wait_started.notified();
    let running = post(
        TOKEN,
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "cap_directory_wait", "arguments": {} }
        }),
    )
    .await
    .unwrap();
    assert_eq!(running.status(), 200);
    tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .expect("the wait started");

    // Ana's one slot is her running call's, though its headers were sent.
    let refused = post(TOKEN, lookup.clone()).await.unwrap();
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["body"]["error"]["error"]["code"],
        codes::TRANSPORT_OVERLOADED,
        "{body}"
    );
    // Ben's slot is his own.
    let other = post(OTHER_TOKEN, lookup.clone()).await.unwrap();
    assert_eq!(other.status(), 200);

    // Ana goes away: her call's answer is dropped, and her slot comes back.
    drop(running);
    let mut status = 0;
    for _ in 0..100 {
        status = post(TOKEN, lookup.clone()).await.unwrap().status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status, 200,
        "the slot came back once the answer was dropped"
    );
}

#[tokio::test]
async fn serving_over_http_purges_expired_idempotency_records() {
    use aip_connector::store::IdempotencyStore;
    use aip_connector_tests::store_conformance::settle_expired_record;

    /// A projection on a fresh store holding one expired record, and the store.
    async fn projection_with_expired_record() -> (McpProjection, MemoryStore) {
        let store = MemoryStore::default();
        settle_expired_record(&store, "Tenant:t1:old").await;
        let host = Host::builder()
            .connector(Directory::default())
            .store(Arc::new(store.clone()))
            .build()
            .unwrap();
        (McpProjection::new(host).unwrap(), store)
    }

    let (projection, store) = projection_with_expired_record().await;
    assert!(format!("{projection:?}").contains("purge_interval: Some(600s)"));
    let _served = serve(projection).await;
    let mut purged = false;
    for _ in 0..500 {
        if store.record("Tenant:t1:old", 0).await.unwrap().is_none() {
            purged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(purged, "serving did not purge the expired record");
    // Turned off, nothing is purged.
    let (projection, kept) = projection_with_expired_record().await;
    let _served = serve(projection.with_purge_interval(None)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(kept.record("Tenant:t1:old", 0).await.unwrap().is_some());
}

#[test]
fn two_connectors_projecting_the_same_tool_name_are_refused() {
    #[derive(Clone, Default)]
    struct Other;

    #[connector(id = "other")]
    impl Other {
        /// Also a lookup.
        #[capability(
            id = "cap:directory:lookup_",
            risk = low,
            side_effects = [read],
            data(sensitivity = public),
        )]
        async fn lookup(&self, input: Query) -> Result<Hits, ConnectorFailure> {
            Ok(Hits {
                hits: vec![input.q],
            })
        }
    }

    let host = Host::builder()
        .connector(Directory::default())
        .connector(Other)
        .build()
        .unwrap();
    let error = McpProjection::new(host).unwrap_err();
    assert_eq!(
        error,
        McpProjectionError::NameCollision {
            name: "cap_directory_lookup".into(),
            first: "cap:directory:lookup".into(),
            second: "cap:directory:lookup_".into(),
        }
    );
}

// ---- Streamed tools ----------------------------------------------------------------------------

/// Rows to export.
#[derive(Deserialize, JsonSchema)]
struct Rows {
    rows: u32,
}

/// One exported row.
#[derive(Serialize, JsonSchema)]
struct Row {
    n: u32,
    line: String,
}

/// What an export did.
#[derive(Serialize, JsonSchema)]
struct Exported {
    rows: u32,
    /// Which execution of a handler produced this result.
    run: usize,
}

/// Streaming-only capabilities, as an rmcp server's tools that send progress notifications
/// become (an author trial's "export as a stream" tool).
#[derive(Clone, Default)]
struct Exporter {
    /// Handler runs, of every capability.
    runs: Arc<AtomicUsize>,
    rows_sent: Arc<AtomicUsize>,
    hold_started: Arc<Notify>,
    hold_cancelled: Arc<Notify>,
    /// The next export fails once its rows are streamed: its source went away (a definite
    /// failure: a read changed nothing).
    fail_once: Arc<AtomicBool>,
}

impl Exporter {
    /// Reports the export as progress, streams `rows` rows, and says how many.
    async fn stream_rows(
        &self,
        rows: u32,
        sink: &StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        sink.progress(format!("exporting {rows} rows")).await?;
        for n in 0..rows {
            sink.send(Row {
                n,
                line: format!("row {n}"),
            })
            .await?;
            self.rows_sent.fetch_add(1, Ordering::SeqCst);
        }
        if self.fail_once.swap(false, Ordering::SeqCst) {
            return Err(ConnectorFailure::permanent(
                "exporter.source_gone",
                "the export's source went away",
                "exporter",
            ));
        }
        Ok(Exported { rows, run })
    }
}

#[connector(id = "exporter", profiles = ["aip.mcp.compat.v1"])]
impl Exporter {
    /// Exports rows as a stream, each as it is read, and says how many.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = public),
        bindings(mcp(tool_name = "export_rows")),
    )]
    async fn export(
        &self,
        input: Rows,
        _key: IdempotencyKey,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        self.stream_rows(input.rows, &sink).await
    }

    /// Streams one row, then waits until cancelled (or 30 s).
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = public)
    )]
    async fn hold(
        &self,
        _input: Nothing,
        _key: IdempotencyKey,
        cancel: Cancellation,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let token = cancel.token().clone();
        let cancelled = self.hold_cancelled.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            cancelled.notify_one();
        });
        sink.send(Row {
            n: 0,
            line: "held".into(),
        })
        .await?;
        self.hold_started.notify_one();
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Exported { rows: 1, run })
    }

    /// Posts rows to the provider's ledger, checkpointing the provider operation first, and
    /// streams each row as it is posted.
    #[capability(
        risk = low,
        side_effects = [write, external_network],
        idempotency(required),
        data(sensitivity = public),
        transaction(modes = [execute]),
    )]
    async fn post_rows(
        &self,
        input: Rows,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "ledger".into(),
            operation_id: format!("post-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation, None).await?;
        self.stream_rows(input.rows, &sink).await
    }

    /// Exports the ledger, once a finance approver agreed.
    #[capability(
        risk = high,
        side_effects = [read],
        idempotency(required),
        data(sensitivity = internal),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn export_ledger(
        &self,
        input: Rows,
        _key: IdempotencyKey,
        _approval: Approval,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        self.stream_rows(input.rows, &sink).await
    }

    /// Exports people's entries, once a finance approver agreed. Personal data: the approval
    /// record keeps no input.
    #[capability(
        risk = high,
        side_effects = [read],
        idempotency(required),
        data(sensitivity = internal, pii),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn export_people(
        &self,
        input: Rows,
        _key: IdempotencyKey,
        _approval: Approval,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        self.stream_rows(input.rows, &sink).await
    }
}

/// The exporter's host, with the finance approvers of [`host`].
fn exporter_host(exporter: Exporter) -> Host {
    let finance = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("finance");
    Host::builder()
        .connector(exporter)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:fin", finance))
        .build()
        .unwrap()
}

/// An MCP client's handler that keeps the progress notifications it receives. (rmcp's client
/// sends a `progressToken` with every request.)
#[derive(Clone, Default)]
struct ProgressLog(Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>);

impl rmcp::ClientHandler for ProgressLog {
    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        // rmcp's client moves the notification's extensions, where its `_meta` is kept, into
        // the context before it reads the `_meta`: `context.meta` is always empty (rmcp 3.11).
        params.meta = context
            .extensions
            .get::<rmcp::model::NotificationMetaObject>()
            .cloned();
        self.0.lock().unwrap().push(params);
    }
}

impl ProgressLog {
    /// The notifications received, once there are at least `count` (within 10 s).
    async fn at_least(&self, count: usize) -> Vec<ProgressNotificationParam> {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let received = self.0.lock().unwrap().clone();
                if received.len() >= count {
                    return received;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "fewer than {count} progress notifications: {:?}",
                self.0.lock().unwrap()
            )
        })
    }
}

/// A client (ana's) that keeps the progress notifications of its calls.
async fn progress_client(
    served: &Served,
) -> (RunningService<RoleClient, ProgressLog>, ProgressLog) {
    let log = ProgressLog::default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url.as_str()).auth_header(TOKEN),
    );
    (log.clone().serve(transport).await.unwrap(), log)
}

/// The `(progress, message, chunk kind)` of each notification, in `progress` order (rmcp's
/// client hands each notification to a task of its own).
fn progress_seen(notifications: &[ProgressNotificationParam]) -> Vec<(f64, String, String)> {
    let mut seen: Vec<(f64, String, String)> = notifications
        .iter()
        .map(|notification| {
            let kind = notification
                .meta
                .as_ref()
                .and_then(|meta| meta.get(meta::CHUNK_KIND))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            (
                notification.progress,
                notification.message.clone().unwrap_or_default(),
                kind,
            )
        })
        .collect();
    seen.sort_by(|a, b| a.0.total_cmp(&b.0));
    seen
}

fn row_json(n: u32) -> String {
    format!(r#"{{"n":{n},"line":"row {n}"}}"#)
}

/// An author trial found its "export as a stream" tool missing over MCP: a streaming-only
/// capability is now a tool, and its result carries what it streamed before its output.
#[tokio::test]
async fn a_streaming_only_tool_is_listed_and_its_call_returns_what_it_streamed() {
    let exporter = Exporter::default();
    let served = serve(McpProjection::new(exporter_host(exporter.clone())).unwrap()).await;
    let (client, log) = progress_client(&served).await;
    let tools = client.list_all_tools().await.unwrap();
    let export = tool(&tools, "export_rows");
    assert_eq!(
        export.meta.as_ref().unwrap().get(meta::STREAMING),
        Some(&json!(true))
    );

    let result = client
        .call_tool(call("export_rows", json!({ "rows": 3 })))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let blocks = texts(&result);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    // First what was streamed, in order; then the output, as a synchronous call answers it.
    let streamed: Value = serde_json::from_str(&blocks[0]).unwrap();
    assert_eq!(
        streamed,
        json!([
            { "n": 0, "line": "row 0" },
            { "n": 1, "line": "row 1" },
            { "n": 2, "line": "row 2" },
        ])
    );
    let output = json!({ "rows": 3, "run": 1 });
    assert_eq!(serde_json::from_str::<Value>(&blocks[1]).unwrap(), output);
    // The structured content is the output alone: what the tool's outputSchema describes.
    assert_eq!(result.structured_content, Some(output.clone()));
    let schema = Value::Object(export.output_schema.as_deref().unwrap().clone());
    assert!(
        jsonschema::draft202012::new(&schema)
            .unwrap()
            .is_valid(&output)
    );
    assert_eq!(result_meta(&result, meta::STATUS), "completed");
    assert_eq!(
        result_meta(&result, meta::STREAM),
        &json!({ "data_chunks": 3, "collected_chunks": 3, "omitted_chunks": 0, "omitted_bytes": 0 })
    );

    // Each chunk was a progress notification while the action ran.
    let notifications = log.at_least(4).await;
    assert_eq!(
        progress_seen(&notifications),
        [
            (1.0, "exporting 3 rows".to_owned(), "progress".to_owned()),
            (2.0, row_json(0), "data".to_owned()),
            (3.0, row_json(1), "data".to_owned()),
            (4.0, row_json(2), "data".to_owned()),
        ]
    );
    let token = &notifications[0].progress_token;
    assert!(notifications.iter().all(|n| &n.progress_token == token));
    assert_eq!(exporter.rows_sent.load(Ordering::SeqCst), 3);
    client.cancel().await.unwrap();
}

/// An MCP session opened by hand, whose answers are read as the SSE text they are.
struct RawSession {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl RawSession {
    async fn open(served: &Served) -> Self {
        let http = reqwest::Client::new();
        let opened = http
            .post(&served.url)
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize_request())
            .send()
            .await
            .unwrap();
        assert_eq!(opened.status(), 200);
        let session = opened.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let this = Self {
            http,
            url: served.url.clone(),
            session,
        };
        this.post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        this
    }

    /// Posts `body` and answers the JSON-RPC messages of the answer, in the order sent.
    async fn post(&self, body: Value) -> Vec<Value> {
        let answer = self
            .http
            .post(&self.url)
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
        let text = answer.text().await.unwrap();
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .filter(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }
}

fn export_request(id: u64, rows: u32, progress_token: Option<&str>) -> Value {
    let mut params = json!({ "name": "export_rows", "arguments": { "rows": rows } });
    if let Some(token) = progress_token {
        params["_meta"] = json!({ "progressToken": token });
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

/// On the wire: one `notifications/progress` per chunk, in the stream's order, before the
/// answer and with increasing `progress`, when the request carries a `progressToken`; none
/// without one, and the answer carries the streamed data all the same.
#[tokio::test]
async fn progress_notifications_follow_the_stream_in_order_and_only_with_a_progress_token() {
    let served = serve(McpProjection::new(exporter_host(Exporter::default())).unwrap()).await;
    let session = RawSession::open(&served).await;

    let messages = session.post(export_request(2, 3, Some("tok-1"))).await;
    let (answer, notifications) = messages.split_last().unwrap();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(notifications.len(), 4, "{messages:?}");
    let expected = [
        ("exporting 3 rows".to_owned(), "progress"),
        (row_json(0), "data"),
        (row_json(1), "data"),
        (row_json(2), "data"),
    ];
    for (position, (notification, (message, kind))) in
        notifications.iter().zip(&expected).enumerate()
    {
        assert_eq!(notification["method"], "notifications/progress");
        let params = &notification["params"];
        assert_eq!(params["progressToken"], "tok-1");
        assert_eq!(params["progress"].as_f64(), Some((position + 1) as f64));
        assert_eq!(params["message"], message.as_str());
        assert_eq!(params["_meta"][meta::CHUNK_KIND], *kind);
    }

    let messages = session.post(export_request(3, 2, None)).await;
    assert_eq!(
        messages.len(),
        1,
        "no notification without a token: {messages:?}"
    );
    let content = &messages[0]["result"]["content"];
    assert_eq!(
        content[0]["text"],
        format!("[{},{}]", row_json(0), row_json(1))
    );
}

/// Past the projection's bound the result keeps the first chunks and says how many chunks
/// and bytes it left out, while the action streams and completes to its end.
#[tokio::test]
async fn a_result_carries_streamed_data_up_to_its_bound_and_says_what_it_left_out() {
    let exporter = Exporter::default();
    // Each row is 22 bytes of JSON: two fit.
    let projection = McpProjection::new(exporter_host(exporter.clone()))
        .unwrap()
        .with_max_streamed_data_bytes(50);
    let served = serve(projection).await;
    let (client, log) = progress_client(&served).await;

    let result = client
        .call_tool(call("export_rows", json!({ "rows": 10 })))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(exporter.rows_sent.load(Ordering::SeqCst), 10);
    assert_eq!(
        result.structured_content,
        Some(json!({ "rows": 10, "run": 1 }))
    );
    let blocks = texts(&result);
    assert_eq!(blocks[0], format!("[{},{}]", row_json(0), row_json(1)));
    let cut = &blocks[1];
    assert!(cut.starts_with("Streamed data cut:"), "{cut}");
    assert!(cut.contains("the first 2 of the 10 data chunks"), "{cut}");
    assert!(
        cut.contains("the other 8 (176 bytes as JSON) are left out"),
        "{cut}"
    );
    assert!(cut.contains("bound of 50 bytes"), "{cut}");
    assert_eq!(
        serde_json::from_str::<Value>(&blocks[2]).unwrap(),
        json!({ "rows": 10, "run": 1 })
    );
    assert_eq!(
        result_meta(&result, meta::STREAM),
        &json!({ "data_chunks": 10, "collected_chunks": 2, "omitted_chunks": 8, "omitted_bytes": 176 })
    );
    // The bound is the result's: every chunk was still a notification.
    assert_eq!(log.at_least(11).await.len(), 11);
    client.cancel().await.unwrap();
}

/// A failed streamed call answers what it streamed before the failure; under a derived key a
/// definite failure is not kept, as for a synchronous call, so the identical call runs again.
#[tokio::test]
async fn a_definite_streamed_failure_under_a_derived_key_runs_again_on_the_identical_call() {
    let exporter = Exporter::default();
    let served = serve(McpProjection::new(exporter_host(exporter.clone())).unwrap()).await;
    let client = client(&served).await;
    let export = || call("export_rows", json!({ "rows": 2 }));

    exporter.fail_once.store(true, Ordering::SeqCst);
    let failed = client.call_tool(export()).await.unwrap();
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    assert!(failed.structured_content.is_none());
    let blocks = texts(&failed);
    assert_eq!(blocks[0], format!("[{},{}]", row_json(0), row_json(1)));
    assert!(
        blocks[1].starts_with("exporter.source_gone: "),
        "{blocks:?}"
    );
    assert_eq!(result_meta(&failed, meta::STREAM)["data_chunks"], 2);

    let again = client.call_tool(export()).await.unwrap();
    assert_eq!(result_meta(&again, meta::STATUS), "completed", "{again:?}");
    assert_eq!(
        again.structured_content,
        Some(json!({ "rows": 2, "run": 2 }))
    );
    assert!(
        again
            .meta
            .as_ref()
            .is_none_or(|meta| meta.get(meta::IDEMPOTENT_REPLAY).is_none()),
        "{again:?}"
    );
    client.cancel().await.unwrap();
}

/// A streaming handler that checkpoints runs as a durable `execute` transaction, as a
/// synchronous one does, and streams all the same.
#[tokio::test]
async fn a_streamed_transactional_capability_runs_as_a_durable_execute() {
    use aip_connector::store::TransactionStore as _;

    let store = Arc::new(MemoryStore::default());
    let host = Host::builder()
        .connector(Exporter::default())
        .store(store.clone())
        .build()
        .unwrap();
    let served = serve(McpProjection::new(host).unwrap()).await;
    let client = client(&served).await;
    let result = client
        .call_tool(with_key(
            call("cap_exporter_post_rows", json!({ "rows": 2 })),
            "post-1",
        ))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        texts(&result)[0],
        format!("[{},{}]", row_json(0), row_json(1))
    );
    assert_eq!(
        result.structured_content,
        Some(json!({ "rows": 2, "run": 1 }))
    );
    let action_id = serde_json::from_value(result_meta(&result, meta::ACTION_ID).clone()).unwrap();
    let records = store.transactions_by_action(&action_id).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        records[0].transaction.mode,
        aip_connector::model::TransactionMode::Execute
    );
    assert_eq!(
        records[0].provider_operation.as_ref().unwrap().operation_id,
        "post-post-1"
    );
    client.cancel().await.unwrap();
}

/// A cancelled call (the client drops it: `notifications/cancelled`) abandons its streamed
/// action: the handler's cancellation fires, and the key derived from the arguments is
/// released, so the same call runs again.
#[tokio::test]
async fn cancelling_a_streamed_call_abandons_its_action() {
    let exporter = Exporter::default();
    let served = serve(McpProjection::new(exporter_host(exporter.clone())).unwrap()).await;
    let (client, log) = progress_client(&served).await;

    for attempt in 1..=2 {
        let cancelled = exporter.hold_cancelled.notified();
        let mut running = Box::pin(client.call_tool(call("cap_exporter_hold", json!({}))));
        // The row it streamed was relayed while the action runs.
        tokio::select! {
            result = &mut running => panic!("attempt {attempt}: the hold returned: {result:?}"),
            _ = log.at_least(attempt) => {}
        }
        drop(running);
        tokio::time::timeout(Duration::from_secs(10), cancelled)
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt}: the handler's cancellation fired"));
    }
    assert_eq!(exporter.runs.load(Ordering::SeqCst), 2);
    client.cancel().await.unwrap();
}

/// A keyed call made again replays the stored result: nothing runs, and since streamed chunks
/// are not stored, the replay says it carries none of them.
#[tokio::test]
async fn a_keyed_replay_of_a_streamed_call_carries_no_chunk_data() {
    let exporter = Exporter::default();
    let served = serve(McpProjection::new(exporter_host(exporter.clone())).unwrap()).await;
    let client = client(&served).await;
    let export = || with_key(call("export_rows", json!({ "rows": 2 })), "export-1");

    let first = client.call_tool(export()).await.unwrap();
    assert_eq!(
        texts(&first)[0],
        format!("[{},{}]", row_json(0), row_json(1))
    );
    let again = client.call_tool(export()).await.unwrap();
    assert_eq!(exporter.runs.load(Ordering::SeqCst), 1);
    assert_eq!(result_meta(&again, meta::IDEMPOTENT_REPLAY), &json!(true));
    assert_eq!(again.structured_content, first.structured_content);
    let blocks = texts(&again);
    assert!(
        blocks[0].starts_with("Streamed data is not stored"),
        "{blocks:?}"
    );
    assert!(blocks[0].contains("carries none of the data"), "{blocks:?}");
    assert!(
        blocks.last().unwrap().starts_with("Replayed:"),
        "{blocks:?}"
    );
    assert_eq!(result_meta(&again, meta::STREAM)["data_chunks"], 0);
    client.cancel().await.unwrap();
}

/// A gated streaming tool answers its pending approval; once the approval is granted, the
/// same call resumes the action streamed (`Host::resume_approved` refuses a streamed action),
/// exactly once, whether the record kept the input or was redacted (then re-submitted, which
/// must stream too).
#[tokio::test]
async fn a_gated_streaming_tool_runs_streamed_once_its_approval_is_granted() {
    for (name, retained) in [
        ("cap_exporter_export_ledger", true),
        ("cap_exporter_export_people", false),
    ] {
        let exporter = Exporter::default();
        let host = exporter_host(exporter.clone());
        let served = serve(McpProjection::new(host.clone()).unwrap()).await;
        let (client, log) = progress_client(&served).await;
        let export = || call(name, json!({ "rows": 2 }));

        let pending = client.call_tool(export()).await.unwrap();
        let id = pending_approval_id(&pending);
        assert!(
            texts(&pending)[0].starts_with("Not executed"),
            "{pending:?}"
        );
        let early = client.call_tool(export()).await.unwrap();
        assert_eq!(pending_approval_id(&early), id);
        assert_eq!(exporter.runs.load(Ordering::SeqCst), 0, "{name}");

        let record = host
            .record_approval_decision(finance_decision(&id, "dec-export"), &person("user:fin"))
            .await
            .unwrap();
        assert_eq!(record.input_retained, retained, "{name}");

        let ran = client.call_tool(export()).await.unwrap();
        assert_eq!(
            result_meta(&ran, meta::STATUS),
            "completed",
            "{name}: {ran:?}"
        );
        assert_eq!(exporter.runs.load(Ordering::SeqCst), 1, "{name}");
        assert_eq!(
            texts(&ran)[0],
            format!("[{},{}]", row_json(0), row_json(1)),
            "{name}"
        );
        assert_eq!(ran.structured_content, Some(json!({ "rows": 2, "run": 1 })));
        assert_eq!(result_meta(&ran, meta::STREAM)["data_chunks"], 2);
        // Streamed while it ran: its chunks were notifications.
        let seen = progress_seen(&log.at_least(3).await);
        assert_eq!(seen[0].1, "exporting 2 rows", "{name}: {seen:?}");

        let replayed = client.call_tool(export()).await.unwrap();
        assert_eq!(
            result_meta(&replayed, meta::IDEMPOTENT_REPLAY),
            &json!(true)
        );
        assert_eq!(replayed.structured_content, ran.structured_content);
        assert_eq!(exporter.runs.load(Ordering::SeqCst), 1, "{name}");
        client.cancel().await.unwrap();
    }
}

/// A client that stops reading its answers (so the transport cannot take another
/// notification) does not hold the streamed action: the call stops notifying, and the action
/// streams to its end.
#[tokio::test]
async fn a_client_that_stops_reading_does_not_hold_a_streamed_action() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let exporter = Exporter::default();
    let projection = McpProjection::new(exporter_host(exporter.clone())).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let server = tokio::spawn(projection.serve_io(server_read, server_write, person("user:local")));
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut send = async |message: Value| {
        let line = format!("{message}\n");
        write.write_all(line.as_bytes()).await.unwrap();
    };
    send(initialize_request()).await;
    let initialized = lines.next_line().await.unwrap().unwrap();
    assert!(initialized.contains("\"result\""), "{initialized}");
    send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    let _running = server.await.unwrap().unwrap();
    // 3,000 notifications of some 100 bytes each overflow every buffer between the projection
    // and the client (the 1 KiB pipe, and the screening pumps' 64 KiB pipe, reader and queue),
    // and nothing reads them: the relay's notify then times out (5 s) and stops notifying.
    let sent_at = std::time::Instant::now();
    send(export_request(2, 3_000, Some("tok-stalled"))).await;

    let streamed = tokio::time::timeout(Duration::from_secs(30), async {
        while exporter.rows_sent.load(Ordering::SeqCst) < 3_000 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        streamed.is_ok(),
        "the action waited on the client: {} rows sent",
        exporter.rows_sent.load(Ordering::SeqCst)
    );
    assert!(
        sent_at.elapsed() >= Duration::from_secs(5),
        "the buffers took every notification, so the notify timeout never ran: {:?}",
        sent_at.elapsed()
    );
}

/// When rmcp ends the session first (cancelled, a failed handshake), the pipe ends too: the
/// client reads the end of its input, and nothing more is answered (a review found the
/// screening pumps holding the pipe open for good).
#[tokio::test]
async fn a_session_rmcp_ends_closes_the_pipe() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let projection = McpProjection::new(host(Directory::default())).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_io);
    let server = tokio::spawn(projection.serve_io(server_read, server_write, person("user:local")));
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    write
        .write_all(format!("{}\n", initialize_request()).as_bytes())
        .await
        .unwrap();
    let initialized = lines.next_line().await.unwrap().unwrap();
    assert!(initialized.contains("\"result\""), "{initialized}");
    let running = server.await.unwrap().unwrap();
    running.cancel().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(3), lines.next_line())
        .await
        .expect("the client reads the end of the pipe");
    assert_eq!(end.unwrap(), None);
}

// ---- stdio (a byte pipe) -----------------------------------------------------------------------

#[tokio::test]
async fn over_a_byte_pipe_every_call_runs_as_the_local_user() {
    let projection = McpProjection::new(host(Directory::default())).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_io);
    let server = tokio::spawn(projection.serve_io(server_read, server_write, person("user:local")));
    let client = ().serve(client_io).await.unwrap();
    let running = server.await.unwrap().unwrap();

    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 9);
    let result = client
        .call_tool(call("cap_directory_lookup", lookup_arguments()))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result.structured_content.unwrap()["looked_up_by"],
        "user:local"
    );

    let result = client
        .call_tool(call("cap_directory_lookup", json!({ "name": 7 })))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(texts(&result)[0].starts_with(codes::ACTION_INPUT_SCHEMA_INVALID));

    client.cancel().await.unwrap();
    running.waiting().await.unwrap();
}

/// On a byte pipe each line is screened as an HTTP body is: a repeated key and non-object
/// `arguments` are refused with the request's id, without running the tool; a line that is not
/// JSON gets no answer (rmcp's rule) and the session goes on (found by a hostile-input review:
/// stdio ran the last of two repeated keys).
#[tokio::test]
async fn over_a_byte_pipe_lines_are_screened_before_rmcp_reads_them() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let directory = Directory::default();
    let projection = McpProjection::new(host(directory.clone())).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_io);
    let server = tokio::spawn(projection.serve_io(server_read, server_write, person("user:local")));
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut send = async |line: String| {
        write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    };
    send(initialize_request().to_string()).await;
    let initialized = lines.next_line().await.unwrap().unwrap();
    assert!(initialized.contains("\"result\""), "{initialized}");
    send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string()).await;
    let _running = server.await.unwrap().unwrap();

    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"cap_directory_sync_profile","arguments":{"handle":"a","handle":"b"}}}"#.to_owned()).await;
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(2), json!(-32700)),
        "{answer}"
    );
    send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"cap_directory_sync_profile","arguments":[1]}}"#.to_owned()).await;
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(3), json!(-32602)),
        "{answer}"
    );
    // Not JSON: no answer; the next request is the next line answered.
    send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list""#.to_owned()).await;
    send(json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/list" }).to_string()).await;
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 5, "{answer}");
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    assert_eq!(
        directory.syncs.load(Ordering::SeqCst),
        0,
        "no refused call ran"
    );
}

#[test]
fn the_projection_is_inspectable_without_serving_it() {
    let projection = McpProjection::new(host(Directory::default())).unwrap();
    assert_eq!(
        projection.tool_name("cap:directory:search"),
        Some("web_search")
    );
    assert!(projection.tool("web_search").is_some());
    // A streaming-only capability is a tool too: its calls run streamed.
    assert_eq!(
        projection.tool_name("cap:directory:export"),
        Some("cap_directory_export")
    );
    assert_eq!(projection.tools().count(), 9);
    let shown = format!("{projection:?}");
    assert!(shown.contains("web_search"), "{shown}");
}

/// A till whose refund only compensates a sale.
struct Till;

#[derive(Deserialize, JsonSchema)]
struct Sale {
    cents: u32,
}

#[derive(Serialize, JsonSchema)]
struct Sold {
    sale_id: String,
}

#[connector(id = "till")]
impl Till {
    /// Records a sale.
    #[capability(
        id = "cap:till:sell",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:till:refund"),
    )]
    async fn sell(
        &self,
        sale: Sale,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Sold, ConnectorFailure> {
        Ok(Sold {
            sale_id: format!("sale-{}", sale.cents),
        })
    }

    /// Closes the till: only by committing a plan.
    #[capability(
        id = "cap:till:close",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [dry_run, plan, commit]),
    )]
    async fn close(
        &self,
        sale: Sale,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Sold, ConnectorFailure> {
        Ok(Sold {
            sale_id: format!("close-{}", sale.cents),
        })
    }

    /// Refunds a sale: runs only as its compensation.
    #[capability(
        id = "cap:till:refund",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn refund(
        &self,
        sale: Sale,
        _key: IdempotencyKey,
        compensation: Compensation,
    ) -> Result<Sold, ConnectorFailure> {
        Ok(Sold {
            sale_id: format!("refund-{}-{}", sale.cents, compensation.action_id),
        })
    }
}

/// A compensating capability is not a tool: it runs only routed from a `compensate` of the
/// capability it undoes, so every `tools/call` of it would fail. Nor is one that changes state
/// only by committing a plan: a tool call has no plan step, and its plain action is refused.
#[tokio::test]
async fn compensating_and_plan_only_capabilities_are_not_projected() {
    let host = Host::builder().connector(Till).build().unwrap();
    let logs = aip_connector_testkit::logs::LogCapture::new();
    let projection = {
        let _guard = logs.set_default();
        McpProjection::new(host.clone()).unwrap()
    };
    // The till's manifest does not list the MCP profile: served anyway, with a warning.
    assert!(
        logs.contains("does not list the `aip.mcp.compat.v1` profile"),
        "{}",
        logs.text()
    );
    // Each capability left out is named in the log, with why (found by an author trial: its
    // tools were missing from tools/list and nothing said so).
    for (capability, why) in [
        (
            "cap:till:refund",
            "it runs only as the compensation of another capability",
        ),
        (
            "cap:till:close",
            "it changes state only by committing a plan",
        ),
    ] {
        assert!(
            logs.contains(&format!(
                "leaves capability `{capability}` out of tools/list: {why}"
            )),
            "{}",
            logs.text()
        );
    }
    assert_eq!(projection.tool_name("cap:till:sell"), Some("cap_till_sell"));
    assert_eq!(projection.tool_name("cap:till:refund"), None);
    assert_eq!(projection.tool_name("cap:till:close"), None);
    assert_eq!(projection.tools().count(), 1);
    // A call of a capability left out of tools/list is told which and why, not "unknown tool".
    let served = serve(projection).await;
    let client = client(&served).await;
    for (name, id, why) in [
        (
            "cap_till_close",
            "cap:till:close",
            "it changes state only by committing a plan",
        ),
        (
            "cap_till_refund",
            "cap:till:refund",
            "it runs only as the compensation of another capability",
        ),
    ] {
        let error = client.call_tool(call(name, json!({}))).await.unwrap_err();
        let rmcp::ServiceError::McpError(error) = error else {
            panic!("expected a JSON-RPC error, got {error:?}");
        };
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        let expected = format!("`{id}` is left out of tools/list because {why}");
        assert!(error.message.contains(&expected), "{}", error.message);
    }
    client.cancel().await.unwrap();
    // What the projection would send for it is refused every time.
    let plain = host
        .invoke(
            aip_connector::model::Action::new("cap:till:close", json!({ "cents": 5 }))
                .with_idempotency_key("k"),
            &person("user:ana"),
        )
        .await;
    assert_eq!(plain.status, ActionResultStatus::Failed, "{plain:?}");
}

// ---- Tagged enums as inputs --------------------------------------------------------------------

/// Internally tagged: every value is an object (`{"via": "email", "to": ...}`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "via", rename_all = "snake_case")]
enum Notice {
    Email { to: String },
    Sms { number: String },
}

/// Adjacently tagged, with a unit variant (`{"kind": "ping"}`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
enum Route {
    Forward { to: String },
    Ping,
}

/// An output whose root is a `oneOf` of objects too.
#[derive(Serialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Sent {
    Delivered { to: String },
    Pinged,
}

struct Notifier;

#[connector(id = "notifier", profiles = ["aip.mcp.compat.v1"])]
impl Notifier {
    /// Sends a notice.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn notify(&self, notice: Notice) -> Result<Sent, ConnectorFailure> {
        Ok(Sent::Delivered {
            to: match notice {
                Notice::Email { to } => to,
                Notice::Sms { number } => number,
            },
        })
    }

    /// Routes a message.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn route(&self, route: Route) -> Result<Sent, ConnectorFailure> {
        Ok(match route {
            Route::Forward { to } => Sent::Delivered { to },
            Route::Ping => Sent::Pinged,
        })
    }
}

/// An internally or adjacently tagged enum is an object input: the host admits it, validates
/// calls against its `oneOf`, and the MCP tool says `"type": "object"` at its schemas' roots.
#[tokio::test]
async fn a_tagged_enum_input_is_admitted_validated_and_projected_as_an_object() {
    let host = Host::builder().connector(Notifier).build().unwrap();
    let invoke = |id: &'static str, input: Value| {
        let host = host.clone();
        async move {
            host.invoke(
                aip_connector::model::Action::new(id, input),
                &person("user:ana"),
            )
            .await
        }
    };
    for (id, input, to) in [
        (
            "cap:notifier:notify",
            json!({ "via": "email", "to": "a@x" }),
            json!("a@x"),
        ),
        (
            "cap:notifier:notify",
            json!({ "via": "sms", "number": "+1" }),
            json!("+1"),
        ),
        (
            "cap:notifier:route",
            json!({ "kind": "forward", "body": { "to": "b@x" } }),
            json!("b@x"),
        ),
        ("cap:notifier:route", json!({ "kind": "ping" }), Value::Null),
    ] {
        let result = invoke(id, input.clone()).await;
        assert_eq!(
            result.status,
            ActionResultStatus::Completed,
            "{input}: {result:?}"
        );
        let output = result.output.unwrap();
        assert_eq!(
            output.get("to").cloned().unwrap_or(Value::Null),
            to,
            "{output}"
        );
    }
    for (id, input) in [
        ("cap:notifier:notify", json!({ "via": "fax", "to": "a@x" })),
        ("cap:notifier:notify", json!({ "via": "sms", "to": "a@x" })),
        ("cap:notifier:notify", json!({ "to": "a@x" })),
        ("cap:notifier:route", json!({ "kind": "forward" })),
    ] {
        let result = invoke(id, input.clone()).await;
        assert_eq!(result.status, ActionResultStatus::Failed, "{input}");
        assert_eq!(
            result.error.unwrap().code,
            codes::ACTION_INPUT_SCHEMA_INVALID,
            "{input}"
        );
    }

    let projection = McpProjection::new(host).unwrap();
    for name in ["cap_notifier_notify", "cap_notifier_route"] {
        let tool = projection.tool(name).unwrap();
        let input = Value::Object(tool.input_schema.as_ref().clone());
        assert_eq!(input["type"], "object", "{input}");
        assert!(input["oneOf"].is_array(), "{input}");
        let output = Value::Object(tool.output_schema.as_deref().unwrap().clone());
        assert_eq!(output["type"], "object", "{output}");
    }
    let notify = projection.tool("cap_notifier_notify").unwrap();
    let validator =
        jsonschema::draft202012::new(&Value::Object(notify.input_schema.as_ref().clone())).unwrap();
    assert!(validator.is_valid(&json!({ "via": "email", "to": "a@x" })));
    assert!(!validator.is_valid(&json!({ "via": "email" })));
}

/// A build watch that may run ten minutes (its SLA) without reporting anything.
struct Builds;

#[connector(id = "builds", profiles = [native_http, mcp])]
impl Builds {
    /// Wait for a build to finish.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        sla(timeout_ms = 600_000),
    )]
    async fn watch(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    /// Export every build log: asynchronous only, which the MCP projection leaves out, so its
    /// six hours do not keep idle sessions open.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        execution(async, sync = false, expected = async),
        sla(timeout_ms = 21_600_000),
    )]
    async fn export(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

/// rmcp closes a session after 5 minutes without traffic and abandons the calls running in it;
/// a call that reports nothing is no traffic, so a migration trial's 10-minute watch was cut at
/// 5 minutes. Sessions now outlast the longest deadline a tool call gets, plus a minute.
#[tokio::test]
async fn sessions_outlast_the_longest_tool_deadline() {
    let five_minutes = Duration::from_secs(300);
    let short = McpProjection::new(host(Directory::default())).unwrap();
    assert_eq!(short.session_keep_alive(), five_minutes, "rmcp's default");
    let long = McpProjection::new(
        Host::builder()
            .connector(Builds)
            .store(Arc::new(MemoryStore::default()))
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(long.session_keep_alive(), Duration::from_secs(600 + 60));
}
