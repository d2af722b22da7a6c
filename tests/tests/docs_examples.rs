//! The code of `docs/getting-started.md`, `docs/side-by-side.md`, `docs/mcp.md`,
//! `docs/webhooks.md` and `docs/coming-from-rmcp.md`, compiled and run.
//!
//! Every region between a `// docs:<file>#<name>` marker and the next `// docs:end` is a
//! ```` ```rust ```` block of that doc, copied verbatim (after removing the indentation of the
//! module it sits in). `docs_and_tests_cannot_drift` checks that each doc's Rust blocks are
//! exactly these regions, in order, so an edit to either side without the other fails here.
//! Illustrative snippets that are not meant to compile belong in ```` ```text ```` blocks.

mod getting_started {
    // docs:getting-started.md#connector
    use aip_connector::prelude::*;

    /// Who to greet.
    #[derive(Deserialize, JsonSchema)]
    struct Greet {
        /// The name to put in the greeting.
        name: String,
    }

    /// The greeting.
    #[derive(Serialize, JsonSchema)]
    struct Greeting {
        text: String,
    }

    struct Hello;

    #[connector(id = "hello")]
    impl Hello {
        /// Greets someone by name.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        async fn greet(&self, input: Greet) -> Result<Greeting, ConnectorFailure> {
            Ok(Greeting {
                text: format!("Hello, {}!", input.name),
            })
        }
    }
    // docs:end

    // docs:getting-started.md#admission
    #[test]
    fn hello_passes_strict_admission() {
        use aip_connector::admission::{AdmissionPolicy, admit_manifest};

        let definition = Hello.definition();
        let manifest = definition.manifest();
        println!("{}", serde_json::to_string_pretty(&manifest).unwrap());
        let admitted = admit_manifest(
            &manifest,
            &AdmissionPolicy::strict(),
            &definition.implementation_support(),
        );
        assert!(admitted.is_ok(), "{}", admitted.unwrap_err());
    }
    // docs:end

    // docs:getting-started.md#invoke
    #[tokio::test]
    async fn greet_answers_and_rejects_bad_input() {
        use std::sync::Arc;

        use aip_connector::model::Action;
        use aip_connector::{CallerIdentity, StaticInvocation};
        use serde_json::json;

        let action = Action::new(Hello::GREET_ID, json!({ "name": "Ada" }));
        let caller = CallerIdentity::new("user:ada", "test");
        let context = Arc::new(StaticInvocation::new(action.clone(), caller));

        let output = Hello
            .invoke(Hello::GREET_ID, &action.input, context.clone())
            .await
            .expect("greet succeeds");
        assert_eq!(output, json!({ "text": "Hello, Ada!" }));

        let failure = Hello
            .invoke(Hello::GREET_ID, &json!({ "name": 5 }), context)
            .await
            .expect_err("a number is not a name");
        assert_eq!(failure.code, "action.invalid_input");
        assert!(!failure.retryable);
    }
    // docs:end

    /// The MCP client snippet of docs/mcp.md, against this guide's connector served over MCP.
    #[tokio::test]
    async fn the_mcp_client_snippet_calls_a_served_projection()
    -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use std::sync::Arc;

        use aip_connector::host::{Host, TrustedContext};
        use aip_connector::model::{Principal, PrincipalKind};
        use aip_connector::serve::BearerTokens;
        use aip_connector::serve::mcp::{McpProjection, StreamableHttpServerConfig};

        let projection = McpProjection::new(Host::builder().connector(Hello).build()?)?;
        let token = "docs-token";
        let ada = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "docs")
            .with_tenant(aip_connector::VerifiedTenant::new("acme"));
        let tokens = BearerTokens::new().with(token, ada);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(projection.serve_http(
            listener,
            Arc::new(tokens),
            StreamableHttpServerConfig::default(),
            async move {
                let _ = stopped.await;
            },
        ));

        // docs:mcp.md#client
        use rmcp::ServiceExt as _;
        use rmcp::model::{CallToolRequestParams, RequestMetaObject};
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        use serde_json::json;

        // `url` is the projection's endpoint (`http://…/mcp`), `token` a bearer token the server's
        // authenticator accepts.
        let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token);
        let client = ().serve(StreamableHttpClientTransport::from_config(config)).await?;

        // A call with an idempotency key of the client's own, in the request's `_meta`.
        let arguments = json!({ "name": "Ada" })
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut call = CallToolRequestParams::new("cap_hello_greet").with_arguments(arguments);
        let mut meta = RequestMetaObject::new();
        meta.insert("aip/idempotency_key".to_owned(), json!("greet-ada-1"));
        call.meta = Some(meta);

        let result = client.call_tool(call).await?;
        assert_eq!(result.is_error, Some(false));
        assert_eq!(
            result.structured_content,
            Some(json!({ "text": "Hello, Ada!" }))
        );
        // What the host did, in the result's `_meta`: the action's id and status, and
        // `aip/idempotent_replay` when the answer was the stored one.
        let status = result.meta.as_ref().and_then(|meta| meta.get("aip/status"));
        assert_eq!(status, Some(&json!("completed")));
        client.cancel().await?;
        // docs:end

        drop(stop);
        server.await??;
        Ok(())
    }

    /// The manifest JSON shown in the guide is the one the connector publishes.
    #[test]
    fn the_manifest_shown_in_the_guide_is_the_real_one() {
        let shown = super::json_block_after(
            include_str!("../../docs/getting-started.md"),
            "<!-- manifest -->",
        );
        let actual = serde_json::to_value(Hello.definition().manifest()).unwrap();
        assert_eq!(
            shown, actual,
            "update the manifest in docs/getting-started.md"
        );
    }
}

mod getting_started_streaming {
    // docs:getting-started.md#streaming
    use aip_connector::prelude::*;

    /// What to search for.
    #[derive(Deserialize, JsonSchema)]
    struct Search {
        /// Words the titles must contain.
        query: String,
    }

    /// One match: the item of every `data` chunk.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Article {
        /// The article's title.
        title: String,
    }

    /// The result that ends the stream: the manifest's `output_schema`.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct SearchSummary {
        /// How many articles were sent.
        sent: usize,
    }

    struct Feeds {
        titles: Vec<String>,
    }

    #[connector(id = "feeds")]
    impl Feeds {
        /// Streams the articles whose title contains the query: a `progress` chunk per page of
        /// ten titles (`{"page": n}`), a `data` chunk per match (`{"title": "..."}`), then the
        /// number sent.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        async fn search(
            &self,
            input: Search,
            sink: StreamSink<Article>,
        ) -> Result<SearchSummary, ConnectorFailure> {
            let mut sent = 0;
            for (page, titles) in self.titles.chunks(10).enumerate() {
                // `?`: a send fails once nobody reads the stream any more (`stream.closed`).
                sink.progress(serde_json::json!({ "page": page })).await?;
                for title in titles.iter().filter(|t| t.contains(&input.query)) {
                    sink.send(Article {
                        title: title.clone(),
                    })
                    .await?;
                    sent += 1;
                }
            }
            Ok(SearchSummary { sent })
        }
    }
    // docs:end

    // docs:getting-started.md#streaming-test
    #[tokio::test]
    async fn search_streams_its_articles_then_the_summary() {
        use aip_connector::model::{Action, ActionResultStatus};
        use aip_connector_testkit::TestHost;
        use serde_json::json;

        let titles = ["Rust 2026", "Tea", "Rust at work"]
            .map(String::from)
            .to_vec();
        let test = TestHost::builder(Feeds { titles })
            .build()
            .expect("admitted");
        let action = Action::new(Feeds::SEARCH_ID, json!({ "query": "Rust" }));
        let (articles, result) = test
            .invoke_stream("user:ada", action)
            .collect_data::<Article>()
            .await
            .expect("every data chunk is an Article");
        let titles: Vec<&str> = articles.iter().map(|a| a.title.as_str()).collect();
        assert_eq!(titles, ["Rust 2026", "Rust at work"]);
        assert_eq!(result.status, ActionResultStatus::Completed);
        assert_eq!(result.output, Some(json!({ "sent": 2 })));

        // Not streamed: the handler needs its sink, so the call is refused before it runs.
        let plain = test
            .invoke(
                "user:ada",
                Action::new(Feeds::SEARCH_ID, json!({ "query": "Tea" })),
            )
            .await;
        assert_eq!(
            plain.error.map(|e| e.code),
            Some("execution.mode_unsupported".to_owned())
        );
    }
    // docs:end
}

mod getting_started_provider {
    // docs:getting-started.md#provider
    use aip_connector::prelude::*;
    use serde_json::{Value, json};

    /// A ticket to open.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct NewTicket {
        /// What is wrong.
        title: String,
    }

    /// The ticket the provider opened.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Ticket {
        /// The provider's id of the ticket.
        id: String,
    }

    struct Tickets {
        api: ProviderClient,
    }

    impl Tickets {
        /// A connector calling its provider through `api` (its base URL is the API's root).
        fn new(api: ProviderClient) -> Self {
            Self { api }
        }
    }

    #[connector(id = "tickets")]
    impl Tickets {
        /// Opens a ticket at the provider, once per idempotency key.
        #[capability(
            risk = medium,
            side_effects = [write, external_network],
            idempotency(required, scope = tenant),
            data(sensitivity = internal),
            transaction(modes = [execute, reconcile]),
            reconcile = Self::find_ticket,
            examples = [r#"{"title": "Projector broken"}"#],
        )]
        async fn open(
            &self,
            input: NewTicket,
            key: IdempotencyKey,
            checkpoint: Checkpoint,
            deadline: Deadline,
        ) -> Result<Ticket, ConnectorFailure> {
            // Chosen before the call and recorded before it leaves: a lost answer is looked up
            // by this id (transactions.md §1).
            let operation = checkpoint.operation_for(&key, "tickets", "tk");
            checkpoint.record(operation.clone(), None).await?;
            let ticket: Ticket = self
                .api
                .post("/tickets")
                .idempotency(&key)
                .header("x-operation-id", &operation.operation_id)
                .provider_operation(operation)
                .deadline(&deadline)
                .json(&input)
                .send_json()
                .await?;
            Ok(ticket)
        }

        /// Was the ticket whose answer was lost opened? This API files a ticket under the
        /// operation id it was sent and answers 404 for an id it never filed.
        async fn find_ticket(
            &self,
            request: Reconciliation,
        ) -> Result<ReconcileOutcome, ConnectorFailure> {
            let path = format!("/tickets/{}", request.provider_operation.operation_id);
            let found = self.api.get(&path).send_json_optional::<Value>().await?;
            Ok(match found {
                Some(ticket) => ReconcileOutcome::Committed {
                    evidence: Some(json!({ "id": ticket["id"] })),
                },
                None => ReconcileOutcome::NotCommitted {
                    evidence: Some(json!({ "status": 404 })),
                },
            })
        }
    }
    // docs:end

    // docs:getting-started.md#provider-test
    use aip_connector::ids::TransactionId;
    use aip_connector::model::{Action, ActionTransaction, TransactionMode};
    use aip_connector_testkit::provider_double::{Fault, ProviderDouble, ProviderHandle};
    use aip_connector_testkit::{TestHost, assert_completed};

    /// The connector against the double (on loopback, which a client reaches without the
    /// environment's proxy).
    fn tickets(base_url: &str) -> Tickets {
        let api = ProviderClient::builder(base_url)
            .source_component("tickets")
            .build()
            .expect("the double's URL is valid");
        Tickets::new(api)
    }

    /// The double answers as the real API does: `POST /tickets` with the ticket, `GET
    /// /tickets/{id}` with it or a 404. Each route names its method: a `/tickets/*` without one
    /// would answer that 404 to a `DELETE /tickets/{id}` too.
    fn shape_tickets(provider: &ProviderHandle) {
        provider.answer(
            "POST /tickets",
            |request| json!({ "id": request.operation_id(), "title": request.body()["title"] }),
        );
        provider.answer("GET /tickets/*", |request| {
            let id = request.path().trim_start_matches("/tickets/");
            match request.effects().iter().find(|e| e.operation_id == id) {
                Some(opened) => opened.answer.clone(),
                None => request.with_status(404, json!({ "error": "ticket_not_found" })),
            }
        });
    }

    // One `#[test]` per conformance check, each against a fresh double.
    aip_connector_testkit::conformance_tests!(
        suite = ConformanceSuite::new(|env| tickets(env.provider_url()))
            .with_provider_setup(shape_tickets)
    );

    #[tokio::test]
    async fn a_lost_answer_is_reconciled_not_sent_again() {
        let (double, provider) = ProviderDouble::start().await;
        shape_tickets(&provider);
        let test = TestHost::builder(tickets(double.base_url()))
            .build()
            .expect("admitted");
        let open = || {
            Action::new(Tickets::OPEN_ID, json!({ "title": "Projector broken" }))
                .with_idempotency_key("ticket-1")
        };

        // The provider opens the ticket, and the connection drops before its answer.
        provider.inject("/tickets", Fault::drop_connection());
        let lost = test.invoke("user:ada", open()).await;
        let details = lost
            .error
            .and_then(|e| e.details)
            .expect("the answer was lost");
        assert_eq!(details["uncertain_outcome"], true);
        let named = details["transaction_id"]
            .as_str()
            .expect("it names its transaction");

        // A reconcile asks the provider, which has the ticket: the transaction is settled
        // committed and the ticket was opened once.
        let reconcile = Action::new(Tickets::OPEN_ID, json!({ "title": "Projector broken" }))
            .with_idempotency_key("ticket-1-reconcile")
            .with_transaction(
                ActionTransaction::new(TransactionMode::Reconcile)
                    .with_transaction_id(TransactionId::parse(named).expect("a transaction id")),
            );
        let settled = test.invoke("user:ada", reconcile).await;
        let answer: Value = assert_completed!(settled);
        assert_eq!(answer["reconciliation"]["committed"], true);
        assert_eq!(provider.effects_on("/tickets").len(), 1);
    }
    // docs:end
}

mod side_by_side {
    // docs:side-by-side.md#attribute
    use aip_connector::prelude::*;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct CreateBooking {
        #[schemars(extend("format" = "date-time"))]
        starts_at: String,
    }

    #[derive(Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Booking {
        booking_id: String,
    }

    struct Calendar;

    #[connector(id = "calendar")]
    impl Calendar {
        #[capability(
            id = "cap:calendar:booking:create",
            risk = medium,
            stability = stable,
            side_effects = [write, external_network],
            data(sensitivity = internal, pii),
        )]
        async fn create_booking(
            &self,
            input: CreateBooking,
            key: IdempotencyKey,
        ) -> Result<Booking, ConnectorFailure> {
            // Send `key` to the provider (e.g. as its `Idempotency-Key` header), so a retried
            // call returns the first booking instead of booking twice.
            let booking_id = format!("booking-{}-{key}", input.starts_at);
            Ok(Booking { booking_id })
        }
    }
    // docs:end

    // docs:side-by-side.md#hand-written
    use aip_connector::admission::ImplementationSupportMap;
    use aip_connector::ids::CapabilityId;
    use aip_connector::model::{
        Capability, CapabilityContract, CapabilityImplementationSupport, CapabilityKind,
        DataContract, DataSensitivity, ExecutionContract, ExpectedCompletionMode,
        IdempotencyCollisionBehavior, IdempotencyContract, IdempotencyKeyScope,
        IdempotencyRequirement, RetrySafety, RiskLevel, SideEffect, Stability,
    };
    use serde_json::json;

    fn create_booking_capability() -> Capability {
        Capability {
            id: CapabilityId::from("cap:calendar:booking:create"),
            name: "Create booking".to_owned(),
            kind: CapabilityKind::Tool,
            input_schema: json!({
                "type": "object",
                "required": ["starts_at"],
                "properties": {
                    "starts_at": { "type": "string", "format": "date-time" }
                },
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "required": ["booking_id"],
                "properties": {
                    "booking_id": { "type": "string" }
                },
                "additionalProperties": false
            })),
            description: None,
            risk: Some(RiskLevel::Medium),
            stability: Some(Stability::Stable),
            cost: None,
            auth: None,
            bindings: Vec::new(),
            requires_human_approval: None,
            contract: Some(CapabilityContract {
                side_effects: vec![SideEffect::Write, SideEffect::ExternalNetwork],
                idempotency: IdempotencyContract {
                    requirement: IdempotencyRequirement::Required,
                    collision_behavior: IdempotencyCollisionBehavior::RevalidateInputHash,
                    key_scope: IdempotencyKeyScope::Tenant,
                    ttl_ms: Some(86_400_000),
                },
                execution: ExecutionContract {
                    supports_sync: true,
                    supports_async: false,
                    supports_streaming: false,
                    supports_cancel: false,
                    supports_retry: true,
                    expected_completion: ExpectedCompletionMode::Sync,
                    retry_safety: RetrySafety::SafeWithIdempotencyKey,
                },
                data: DataContract {
                    sensitivity: DataSensitivity::Internal,
                    contains_pii: true,
                    redaction_required: true,
                    residency: None,
                    retention: None,
                },
                credentials: None,
                approval: None,
                sla: None,
                transaction: None,
                compensation: None,
            }),
        }
    }

    fn create_booking_support() -> ImplementationSupportMap {
        ImplementationSupportMap::from([(
            CapabilityId::from("cap:calendar:booking:create"),
            CapabilityImplementationSupport {
                invocation: true,
                cancellation: false,
                streaming: false,
                retry: true,
                transaction: false,
                reconciliation: false,
                compensation: false,
                approval: false,
                credentials: false,
            },
        )])
    }
    // docs:end

    use aip_connector::admission::{AdmissionPolicy, admit_manifest};
    use aip_connector::model::{Manifest, Principal, PrincipalKind};
    use aip_connector_testkit::fixtures::seed_booking_capability_json;

    const ID: &str = "cap:calendar:booking:create";

    fn generated() -> &'static Capability {
        &Calendar.definition().capability(ID).unwrap().capability
    }

    #[test]
    fn both_versions_publish_the_seed_contract() {
        let generated = generated().contract.as_ref().unwrap();
        let hand_written = create_booking_capability().contract.unwrap();
        assert_eq!(*generated, hand_written);
        assert_eq!(
            serde_json::to_value(generated).unwrap(),
            seed_booking_capability_json()["contract"]
        );
    }

    #[test]
    fn the_hand_written_literal_is_the_seed_capability() {
        assert_eq!(
            serde_json::to_value(create_booking_capability()).unwrap(),
            seed_booking_capability_json()
        );
    }

    /// Everything else matches too; the derived schemas only add schemars' `$schema` and
    /// `title` annotations.
    #[test]
    fn the_attribute_publishes_the_seed_capability_up_to_schema_annotations() {
        let mut generated = serde_json::to_value(generated()).unwrap();
        for schema in ["input_schema", "output_schema"] {
            let object = generated[schema].as_object_mut().unwrap();
            assert!(object.remove("$schema").is_some());
            assert!(object.remove("title").is_some());
        }
        assert_eq!(generated, seed_booking_capability_json());
    }

    #[test]
    fn the_derived_support_record_equals_the_hand_written_one() {
        assert_eq!(
            Calendar.definition().implementation_support(),
            create_booking_support()
        );
    }

    #[test]
    fn both_versions_pass_strict_admission() {
        let definition = Calendar.definition();
        let generated = admit_manifest(
            &definition.manifest(),
            &AdmissionPolicy::strict(),
            &definition.implementation_support(),
        );
        assert!(generated.is_ok(), "{}", generated.unwrap_err());

        let mut manifest = Manifest::new(
            Principal::new("agent:calendar", PrincipalKind::Service),
            ["aip.native.http.v1".into()],
        );
        manifest.capabilities = vec![create_booking_capability()];
        let hand_written = admit_manifest(
            &manifest,
            &AdmissionPolicy::strict(),
            &create_booking_support(),
        );
        assert!(hand_written.is_ok(), "{}", hand_written.unwrap_err());
    }

    /// The line counts stated in docs/side-by-side.md.
    #[test]
    fn the_stated_line_counts_are_true() {
        let doc = include_str!("../../docs/side-by-side.md");
        let source = include_str!("docs_examples.rs");
        let attribute = super::region(source, "side-by-side.md#attribute");
        let hand_written = super::region(source, "side-by-side.md#hand-written");
        let attribute_only = attribute
            .lines()
            .skip_while(|line| !line.trim_start().starts_with("#[capability("))
            .take_while(|line| !line.trim_start().starts_with("async fn"))
            .count();
        for (what, count) in [
            ("the attribute", attribute_only),
            ("the attribute version", non_blank(&attribute)),
            ("the hand-written version", non_blank(&hand_written)),
        ] {
            let stated = format!("{what}: **{count} lines**");
            assert!(
                doc.contains(&stated),
                "docs/side-by-side.md must say `{stated}`"
            );
        }
        assert!(
            attribute_only <= 15,
            "the attribute must stay within 15 lines"
        );
    }

    fn non_blank(code: &str) -> usize {
        code.lines().filter(|line| !line.trim().is_empty()).count()
    }
}

/// The text between `// docs:<name>` and the next `// docs:end` in `source`, with the common
/// indentation removed.
fn region(source: &str, name: &str) -> String {
    let begin = format!("// docs:{name}");
    let lines: Vec<&str> = source
        .lines()
        .skip_while(|line| line.trim() != begin)
        .skip(1)
        .take_while(|line| line.trim() != "// docs:end")
        .collect();
    assert!(!lines.is_empty(), "no region `{name}` in docs_examples.rs");
    dedent(&lines)
}

/// `lines` joined with newlines, minus the indentation they all share.
fn dedent(lines: &[&str]) -> String {
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|line| line.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names of the regions of `doc` (e.g. `side-by-side.md`) in `source`, in source order.
fn region_names<'a>(source: &'a str, doc: &str) -> Vec<&'a str> {
    let prefix = format!("// docs:{doc}#");
    source
        .lines()
        .filter_map(|line| line.trim().strip_prefix(prefix.as_str()))
        .collect()
}

/// The bodies of the ```` ```rust ```` blocks of a markdown document, in order.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_end() == "```rust" => current = Some(Vec::new()),
            None => {}
            Some(block) if line.trim_end() == "```" => {
                blocks.push(block.join("\n"));
                current = None;
            }
            Some(block) => block.push(line.trim_end()),
        }
    }
    blocks
}

/// The first ```` ```json ```` block after `marker` in `markdown`, parsed.
fn json_block_after(markdown: &str, marker: &str) -> serde_json::Value {
    let after = markdown
        .split_once(marker)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no `{marker}` in the doc"));
    let body = after
        .split_once("```json\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("no ```json block after `{marker}`"));
    serde_json::from_str(body).expect("the JSON block parses")
}

#[allow(
    unreachable_pub,
    reason = "the guide's types are `pub`, as a connector crate exports them"
)]
mod coming_from_rmcp {
    // docs:coming-from-rmcp.md#connector
    use aip_connector::prelude::*;
    use aip_connector::provider::ProviderClientError;

    /// What to search for.
    #[derive(Deserialize, JsonSchema)]
    pub struct SearchIssues {
        /// Text to look for in the titles.
        pub query: String,
    }

    /// One page of issues.
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct IssuePage {
        pub issues: Vec<Issue>,
    }

    /// An issue.
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct Issue {
        pub id: String,
        pub title: String,
    }

    /// A new issue.
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct CreateIssue {
        /// A one-line summary.
        pub title: String,
    }

    /// The issue to close.
    #[derive(Deserialize, JsonSchema)]
    pub struct CloseIssue {
        /// The issue's id.
        pub issue_id: String,
    }

    pub struct Tracker {
        api: ProviderClient,
    }

    impl Tracker {
        pub fn new(base_url: &str) -> Result<Self, ProviderClientError> {
            Ok(Self {
                api: ProviderClient::new(base_url)?,
            })
        }
    }

    #[connector(id = "tracker", profiles = [native_http, mcp])]
    impl Tracker {
        /// Searches issues by title.
        #[capability(
            risk = low,
            side_effects = [read],
            data(sensitivity = internal),
            bindings(mcp(tool_name = "search_issues")),
        )]
        async fn search_issues(&self, input: SearchIssues) -> Result<IssuePage, ConnectorFailure> {
            self.api
                .get("/issues")
                .query(&[("q", input.query.as_str())])
                .send_json()
                .await
        }

        /// Creates an issue.
        #[capability(
            risk = medium,
            side_effects = [write, external_network],
            data(sensitivity = internal),
            bindings(mcp(tool_name = "create_issue", destructive = false)),
        )]
        async fn create_issue(
            &self,
            input: CreateIssue,
            key: IdempotencyKey,
        ) -> Result<Issue, ConnectorFailure> {
            self.api
                .post("/issues")
                .idempotency(&key)
                .json(&input)
                .send_json()
                .await
        }

        /// Closes an issue. A person approves it first.
        #[capability(
            risk = high,
            side_effects = [write, external_network],
            data(sensitivity = internal),
            approval(reason = "closing hides the issue from triage", evidence = [reason]),
            bindings(mcp(tool_name = "close_issue")),
        )]
        async fn close_issue(
            &self,
            input: CloseIssue,
            key: IdempotencyKey,
            _approval: Approval,
        ) -> Result<Issue, ConnectorFailure> {
            self.api
                .post(&format!("/issues/{}/close", path_segment(&input.issue_id)))
                .idempotency(&key)
                .send_json()
                .await
        }
    }
    // docs:end

    /// The tool names and hints the guide states are the ones the projection publishes.
    #[test]
    fn the_migrated_tools_keep_their_names_and_get_their_hints() {
        use aip_connector::host::Host;
        use aip_connector::serve::mcp::McpProjection;
        use serde_json::json;

        let host = Host::builder()
            .connector(Tracker::new("http://127.0.0.1:9").expect("a valid base URL"))
            .build()
            .expect("the connector is admitted");
        let projection = McpProjection::new(host).expect("the tools project");
        let names: Vec<&str> = projection.tools().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, ["search_issues", "create_issue", "close_issue"]);

        let hints = |name: &str| {
            let tool = projection.tool(name).expect("listed");
            let a = tool.annotations.as_ref().expect("annotations");
            [
                a.read_only_hint,
                a.destructive_hint,
                a.idempotent_hint,
                a.open_world_hint,
            ]
        };
        let (t, f) = (Some(true), Some(false));
        // [readOnly, destructive, idempotent, openWorld]
        assert_eq!(hints("search_issues"), [t, f, t, f]);
        assert_eq!(hints("create_issue"), [f, f, t, t]);
        assert_eq!(hints("close_issue"), [f, t, t, t]);

        let search = projection.tool("search_issues").expect("listed");
        assert_eq!(
            search.description.as_deref(),
            Some("Searches issues by title.")
        );
        let close = projection.tool("close_issue").expect("listed");
        let meta = close.meta.as_ref().expect("tool _meta");
        assert_eq!(meta.get("aip/approval_required"), Some(&json!(true)));
        assert_eq!(meta.get("aip/risk"), Some(&json!("high")));
    }
}

mod webhooks {
    // docs:webhooks.md#receiver
    use aip_connector::model::ConnectorFailure;
    use aip_connector::store::IdempotencyStore;
    use aip_connector::webhook::{
        StandardWebhooks, WebhookDelivery, WebhookReceiver, WebhookSecret,
    };
    use std::sync::Arc;

    #[derive(serde::Deserialize)]
    struct BookingCreated {
        booking_id: String,
    }

    fn bookings_receiver(secret: &str, store: Arc<dyn IdempotencyStore>) -> WebhookReceiver {
        WebhookReceiver::builder("bookings", StandardWebhooks)
            .secret(WebhookSecret::standard(secret).expect("a whsec_ secret"))
            .store(store) // the host's store: replay protection survives restarts
            .example(r#"{"booking_id":"bk_1"}"#) // what the testkit delivers
            .handler(|delivery: WebhookDelivery| async move {
                let event: BookingCreated = delivery.json()?;
                let _ = event.booking_id; // update state, notify an agent, ...
                Ok::<_, ConnectorFailure>(())
            })
            .build()
            .expect("a complete receiver")
    }
    // docs:end

    // docs:webhooks.md#testing
    #[tokio::test]
    async fn the_receiver_takes_a_signed_delivery_once() {
        let store: Arc<dyn IdempotencyStore> = Arc::new(aip_connector::store::MemoryStore::new());
        let receiver = bookings_receiver("whsec_c2VjcmV0", store);
        // Signed as the provider signs it, with the receiver's first secret.
        let body = r#"{"booking_id":"bk_1"}"#;
        let headers = receiver.sign("msg_1", receiver.now_ms(), body.as_bytes());
        let taken = receiver.receive(&headers, body.into()).await.unwrap();
        assert_eq!(taken.delivery_id, "msg_1");
        // The provider's retry of the same delivery is refused; the handler does not run again.
        let replay = receiver.receive(&headers, body.into()).await.unwrap_err();
        assert_eq!(replay.code(), aip_connector::codes::WEBHOOK_REPLAYED);
    }
    // docs:end
}

#[test]
fn docs_and_tests_cannot_drift() {
    let source = include_str!("docs_examples.rs");
    let docs = [
        (
            "getting-started.md",
            include_str!("../../docs/getting-started.md"),
        ),
        (
            "side-by-side.md",
            include_str!("../../docs/side-by-side.md"),
        ),
        ("mcp.md", include_str!("../../docs/mcp.md")),
        ("webhooks.md", include_str!("../../docs/webhooks.md")),
        (
            "coming-from-rmcp.md",
            include_str!("../../docs/coming-from-rmcp.md"),
        ),
    ];
    for (doc, markdown) in docs {
        let expected: Vec<String> = region_names(source, doc)
            .into_iter()
            .map(|name| region(source, &format!("{doc}#{name}")))
            .collect();
        let actual = rust_blocks(markdown);
        assert!(!expected.is_empty(), "no regions for docs/{doc}");
        assert_eq!(
            actual.len(),
            expected.len(),
            "docs/{doc} has {} ```rust blocks but docs_examples.rs tests {}; untested snippets go in ```text blocks",
            actual.len(),
            expected.len()
        );
        for (position, (shown, tested)) in actual.iter().zip(&expected).enumerate() {
            assert_eq!(
                shown,
                tested,
                "```rust block {} of docs/{doc} differs from its copy in tests/tests/docs_examples.rs",
                position + 1
            );
        }
    }
}
