//! Redaction and secrets: with `redaction_required` (or restricted/regulated data) the host's
//! errors, stored records and logs carry a hash of the input, never its values; credential
//! material never appears in any Debug output, record, log line or error.

use std::sync::Arc;

use aip_connector::codes;
use aip_connector::host::{Deployment, Host, TrustedContext};
use aip_connector::model::{Action, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::store::{IdempotencyStore, MemoryStore};
use aip_connector::{CredentialHandle, Secret, VerifiedTenant};
use aip_connector_testkit::logs::LogCapture;
use serde_json::json;

const CANARY: &str = "canary-secret-7d3e91";
const PII: &str = "SSN-123-45-6789";

#[derive(Deserialize, JsonSchema)]
struct Patient {
    name: String,
    age: u32,
}

#[derive(Serialize, JsonSchema)]
struct Chart {
    chart_id: String,
}

struct Clinic;

#[connector(id = "clinic")]
impl Clinic {
    /// Opens a chart.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = regulated, pii, redaction),
        credentials(required, scopes = ["charts.write"]),
    )]
    async fn open_chart(
        &self,
        patient: Patient,
        key: IdempotencyKey,
        credential: Credential,
    ) -> Result<Chart, ConnectorFailure> {
        // The handler uses the secret; nothing it returns contains it.
        let _material = credential.secret().expose_str().map_err(|_| {
            ConnectorFailure::new(
                "clinic.bad_secret",
                "credential is not UTF-8",
                ErrorCategory::Auth,
                aip_connector::model::ConnectorOperation::Invocation,
                "clinic",
            )
        })?;
        Ok(Chart {
            chart_id: format!(
                "chart-{}-{}-{}",
                patient.age,
                patient.name.len(),
                key.as_str().len()
            ),
        })
    }

    /// Looks a chart up, and fails the careless way: quoting the input.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = regulated, pii, redaction)
    )]
    async fn find_chart(&self, patient: Patient) -> Result<Chart, ConnectorFailure> {
        // As a provider failure names its path: the value percent-encoded.
        let path = format!(
            "/charts/{}",
            aip_connector::provider::path_segment(&patient.name)
        );
        let mut details = serde_json::Map::new();
        details.insert("searched".into(), json!([patient.name]));
        details.insert("field".into(), json!("name"));
        details.insert("path".into(), json!(path));
        details.insert(patient.name.clone(), json!("keyed by the value"));
        Err(ConnectorFailure::new(
            "clinic.not_found",
            format!(
                "no chart for {} aged {} (GET {path})",
                patient.name, patient.age
            ),
            ErrorCategory::Permanent,
            aip_connector::model::ConnectorOperation::Invocation,
            "clinic",
        )
        .with_redacted_details(serde_json::Value::Object(details)))
    }
}

/// Fails the careless way with the credential: quoting it, as it is, percent-encoded and in
/// base64 (a `user:password` pair as Basic authentication sends it). The data is internal, so
/// no redaction applies: the secret must be withheld anyway.
struct Tokens;

#[connector(id = "tokens")]
impl Tokens {
    /// Refreshes the caller's token.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        credentials(required, scopes = ["charts.write"]),
    )]
    async fn refresh(
        &self,
        patient: Patient,
        _key: IdempotencyKey,
        credential: Credential,
    ) -> Result<Chart, ConnectorFailure> {
        use base64::Engine as _;
        let secret = credential
            .secret()
            .expose_str()
            .unwrap_or_default()
            .to_owned();
        let path = format!("/tokens/{}", aip_connector::provider::path_segment(&secret));
        let mut details = serde_json::Map::new();
        details.insert(
            "sent".into(),
            json!({ "authorization": format!("Bearer {secret}") }),
        );
        details.insert(
            "basic".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(&secret)),
        );
        details.insert("path".into(), json!(path));
        details.insert(secret.clone(), json!("keyed by the secret"));
        Err(ConnectorFailure::temporary(
            "tokens.refused",
            format!("token {secret} refused for {} (POST {path})", patient.name),
            "tokens",
        )
        .with_redacted_details(serde_json::Value::Object(details)))
    }
}

/// A token whose schema allows at most eight characters.
#[derive(Serialize, JsonSchema)]
struct ShortToken {
    #[schemars(length(max = 8))]
    token: String,
}

/// Answers the credential itself, which its output schema refuses: the refusal quotes it.
struct Echoes;

#[connector(id = "echoes")]
impl Echoes {
    /// Shows the caller's token (a bug: the schema allows eight characters).
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["charts.write"]),
    )]
    async fn show(&self, credential: Credential) -> Result<ShortToken, ConnectorFailure> {
        Ok(ShortToken {
            token: credential
                .secret()
                .expose_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }
}

#[derive(Serialize, JsonSchema)]
struct EchoedStatus {
    status: String,
    headers: Vec<String>,
}

/// A provider that echoes the request's `Authorization` header in its answer, which the handler
/// passes on as its output (an author trial's provider did).
struct EchoingProvider;

#[connector(id = "echoing")]
impl EchoingProvider {
    /// Reads a status; the provider's answer quotes the request's headers.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        credentials(required, scopes = ["charts.write"]),
    )]
    async fn status(
        &self,
        _key: IdempotencyKey,
        credential: Credential,
    ) -> Result<EchoedStatus, ConnectorFailure> {
        let secret = credential.secret().expose_str().unwrap_or_default();
        Ok(EchoedStatus {
            status: format!("Bearer {secret}"),
            headers: vec![
                format!("authorization: Bearer {secret}"),
                "accept: */*".into(),
            ],
        })
    }
}

/// Every log line of this thread's tasks (the tests run on the current-thread runtime), at every
/// level, until the guard drops. [`LogCapture`] keeps a parallel test's thread from switching
/// a callsite off for this one.
fn capture_logs() -> (LogCapture, tracing::dispatcher::DefaultGuard) {
    let logs = LogCapture::new();
    let guard = logs.set_default();
    (logs, guard)
}

fn host(store: Arc<MemoryStore>) -> Host {
    host_of(Clinic, store)
}

/// A host of `connector` on `store` whose deployment serves the canary credential.
fn host_of(connector: impl aip_connector::Connector, store: Arc<MemoryStore>) -> Host {
    let credential =
        CredentialHandle::new("cred-7", "vault", Secret::new(CANARY)).with_scopes(["charts.write"]);
    Host::builder()
        .connector(connector)
        .store(store)
        .deployment(Deployment::new().with_static_credential(credential))
        .build()
        .unwrap()
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:doc", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

#[tokio::test]
async fn no_input_value_or_secret_reaches_errors_records_or_logs() {
    let (logs, _guard) = capture_logs();

    let store = Arc::new(MemoryStore::default());
    let host = host(store.clone());

    // A schema violation on a redacted capability: the error names paths and the input hash.
    let invalid = host
        .invoke(
            Action::new(
                "cap:clinic:open_chart",
                json!({ "name": PII, "age": "forty" }),
            )
            .with_idempotency_key("k-1"),
            &caller(),
        )
        .await;
    let error = invalid.error.clone().unwrap();
    assert_eq!(error.code, codes::ACTION_INPUT_SCHEMA_INVALID);
    let error_text = serde_json::to_string(&error).unwrap();
    assert!(
        !error_text.contains(PII) && !error_text.contains("forty"),
        "{error_text}"
    );
    let details = error.details.unwrap();
    assert!(
        details["input_hash"]
            .as_str()
            .is_some_and(|h| h.len() == 64)
    );
    // Each violation still says what is wrong, from the schema's side.
    assert_eq!(
        details["violations"][0]["message"], r#"value is not of type "integer""#,
        "{details}"
    );

    // A missing field is named (property names come from the schema), the values sent are not.
    let missing = host
        .invoke(
            Action::new("cap:clinic:open_chart", json!({ "age": PII }))
                .with_idempotency_key("k-missing"),
            &caller(),
        )
        .await;
    let error = missing.error.clone().unwrap();
    assert_eq!(error.code, codes::ACTION_INPUT_SCHEMA_INVALID);
    let error_text = serde_json::to_string(&error).unwrap();
    assert!(!error_text.contains(PII), "{error_text}");
    let violations = error.details.unwrap()["violations"].clone();
    assert!(
        violations
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["instance_path"] == ""
                && v["schema_path"] == "/required"
                && v["message"] == r#""name" is a required property"#),
        "{violations}"
    );

    // An input the schema accepts but the input type does not (schemars publishes `u32` as an
    // unbounded non-negative integer): serde's decode error quotes the value, so with redaction
    // neither the answer nor the stored record nor the logs carry it.
    const TOO_OLD: u64 = 4_294_967_296;
    let undecodable = host
        .invoke(
            Action::new(
                "cap:clinic:open_chart",
                json!({ "name": PII, "age": TOO_OLD }),
            )
            .with_idempotency_key("k-decode"),
            &caller(),
        )
        .await;
    let error = undecodable.error.clone().unwrap();
    assert_eq!(error.code, "action.invalid_input", "{error:?}");
    assert!(
        error.details.as_ref().unwrap()["input_hash"]
            .as_str()
            .is_some_and(|h| h.len() == 64),
        "{error:?}"
    );
    let stored = store
        .record("Tenant:t1:k-decode", 0)
        .await
        .unwrap()
        .expect("a permanent failure is stored");
    let decode_text = format!(
        "{} {}",
        serde_json::to_string(&error).unwrap(),
        serde_json::to_string(&stored).unwrap()
    );
    assert!(
        !decode_text.contains(&TOO_OLD.to_string()) && !decode_text.contains(PII),
        "{decode_text}"
    );

    // A successful call: the stored record holds the result, not the input or the secret.
    let ok = host
        .invoke(
            Action::new("cap:clinic:open_chart", json!({ "name": PII, "age": 40 }))
                .with_idempotency_key("k-2"),
            &caller(),
        )
        .await;
    assert!(ok.error.is_none(), "{:?}", ok.error);
    let record = store
        .record("Tenant:t1:k-2", 0)
        .await
        .unwrap()
        .expect("settled");
    let record_text = format!("{record:?} {}", serde_json::to_string(&record).unwrap());
    assert!(
        !record_text.contains(PII) && !record_text.contains(CANARY),
        "{record_text}"
    );

    // Debug output of the host's configuration and of handles redacts the secret.
    let handle = CredentialHandle::new("c", "i", Secret::new(CANARY));
    assert!(!format!("{handle:?}").contains(CANARY));
    assert!(!format!("{:?} {:?}", ok, invalid).contains(CANARY));

    // The transport's trace id joins the host's log lines to the request's trace.
    let traced = caller().with_trace_id("trace-7f3a");
    host.invoke(
        Action::new("cap:clinic:open_chart", json!({ "name": PII, "age": 40 }))
            .with_idempotency_key("k-3"),
        &traced,
    )
    .await;

    let log_text = logs.text();
    assert!(
        log_text.contains("aip.invoke"),
        "the pipeline logs its spans: {log_text}"
    );
    assert!(
        log_text.contains("trace_id=trace-7f3a"),
        "the span carries the trace id: {log_text}"
    );
    assert!(
        !log_text.contains(PII)
            && !log_text.contains(CANARY)
            && !log_text.contains(&TOO_OLD.to_string()),
        "{log_text}"
    );
}

#[tokio::test]
async fn oversized_ids_reach_logs_and_errors_cut_to_the_id_limit() {
    let (logs, _guard) = capture_logs();
    let host = host(Arc::new(MemoryStore::default()));

    // An unknown capability id of 100 KB (the served path accepts bodies up to 1 MiB): the
    // error and the logs show its first `max_id_bytes` (255) and its length.
    let long_capability = format!("cap:{}", "c".repeat(100_000));
    let unknown = host
        .invoke(Action::new(long_capability.as_str(), json!({})), &caller())
        .await;
    let error = unknown.error.expect("an unknown capability is an error");
    assert_eq!(error.code, codes::RESOURCE_NOT_FOUND);
    // The settlement line: the wire status, the transaction mode, and whether it replayed.
    let settled = logs
        .lines()
        .into_iter()
        .find(|line| line.contains("action settled"))
        .unwrap_or_else(|| panic!("{}", logs.text()));
    for field in [
        "status=failed",
        "code=resource.not_found",
        "mode=none",
        "replay=false",
    ] {
        assert!(settled.contains(field), "{field}: {settled}");
    }
    assert!(
        error.message.contains("(100004 bytes)"),
        "{}",
        error.message
    );
    assert!(error.message.len() < 400, "{}", error.message);

    // An action id over the limit is refused at stage 0, and the span that logged the call
    // before the check carries a clipped copy too.
    let mut long_id = Action::new("cap:clinic:open_chart", json!({ "name": "n", "age": 4 }));
    long_id.id =
        aip_connector::ids::ActionId::parse(format!("act_{}", "a".repeat(100_000))).unwrap();
    let refused = host.invoke(long_id, &caller()).await;
    assert_eq!(refused.error.unwrap().code, codes::ACTION_ID_TOO_LONG);

    let log_text = logs.text();
    assert!(log_text.contains("(100004 bytes)"), "{log_text}");
    assert!(
        !log_text.contains(&"c".repeat(300)) && !log_text.contains(&"a".repeat(300)),
        "a log line carries an unclipped id"
    );
    assert!(
        log_text.len() < 8 * 1024,
        "{} bytes of logs",
        log_text.len()
    );
}

/// Ids are the caller's text: in a log line or an error message their control characters are
/// escaped, so an id cannot forge a log line of its own or carry terminal escapes.
#[tokio::test]
async fn control_characters_of_ids_reach_logs_and_errors_escaped() {
    let (logs, _guard) = capture_logs();
    let host = host(Arc::new(MemoryStore::default()));
    let forged = "\n2026-01-01T00:00:00Z  INFO forged: admin logged in\u{1b}[31m";

    let mut action = Action::new("cap:clinic:open_chart", json!({ "name": "n", "age": 4 }));
    action.id = aip_connector::ids::ActionId::parse(format!("act_evil{forged}")).unwrap();
    host.invoke(action, &caller()).await;
    let unknown = host
        .invoke(
            Action::new(format!("cap:nowhere{forged}").as_str(), json!({})),
            &caller(),
        )
        .await;
    let message = unknown
        .error
        .expect("an unknown capability is an error")
        .message;
    assert!(!message.chars().any(char::is_control), "{message:?}");
    assert!(message.contains("cap:nowhere\\n2026"), "{message:?}");

    let log_text = logs.text();
    assert!(log_text.contains("act_evil\\n2026"), "{log_text}");
    assert!(log_text.contains("\\u{1b}[31m"), "{log_text}");
    assert!(!log_text.contains('\u{1b}'), "{log_text:?}");
    assert!(
        !log_text.lines().any(|line| line.starts_with("2026-01-01")),
        "an id forged a log line: {log_text}"
    );
}

/// Between `handler started` and `action settled` the call is the connector's: an operator reads
/// a hung provider from a call that never got past a gate. A refused call logs no start.
#[tokio::test]
async fn only_a_call_that_reaches_its_handler_logs_its_start() {
    let (logs, _guard) = capture_logs();
    let host = host(Arc::new(MemoryStore::default()));

    let refused = host
        .invoke(
            Action::new("cap:clinic:open_chart", json!({ "name": "n" }))
                .with_idempotency_key("k-1"),
            &caller(),
        )
        .await;
    assert_eq!(
        refused.error.unwrap().code,
        codes::ACTION_INPUT_SCHEMA_INVALID
    );
    assert!(
        !logs.text().contains("handler started"),
        "a call refused at the input schema logged a start: {}",
        logs.text()
    );

    let ok = host
        .invoke(
            Action::new("cap:clinic:open_chart", json!({ "name": "n", "age": 4 }))
                .with_idempotency_key("k-2"),
            &caller(),
        )
        .await;
    assert!(ok.error.is_none(), "{:?}", ok.error);
    let lines = logs.lines();
    let started = lines
        .iter()
        .position(|line| line.contains("handler started"))
        .unwrap_or_else(|| panic!("no start line: {lines:#?}"));
    let settled = lines
        .iter()
        .rposition(|line| line.contains("action settled"))
        .unwrap_or_else(|| panic!("no settled line: {lines:#?}"));
    assert!(started < settled, "{lines:#?}");
    for field in ["DEBUG", "handler=cap:clinic:open_chart", "timeout_ms=60000"] {
        assert!(
            lines[started].contains(field),
            "{field}: {}",
            lines[started]
        );
    }

    // Its replay never reaches the handler either.
    let before = logs.lines().len();
    host.invoke(
        Action::new("cap:clinic:open_chart", json!({ "name": "n", "age": 4 }))
            .with_idempotency_key("k-2"),
        &caller(),
    )
    .await;
    assert!(
        !logs.lines()[before..]
            .iter()
            .any(|line| line.contains("handler started")),
        "a replay logged a start"
    );
}

/// Found by an author trial: with redaction required, a handler's failure that quoted the input
/// was returned, stored and logged as it was.
#[tokio::test]
async fn input_values_a_failure_quotes_are_withheld_when_redaction_is_required() {
    let (logs, _guard) = capture_logs();
    let store = Arc::new(MemoryStore::default());
    let host = host(store.clone());
    let action = Action::new("cap:clinic:find_chart", json!({ "name": PII, "age": 40 }))
        .with_idempotency_key("find-1");
    let result = host.invoke(action, &caller()).await;
    let error = result.error.as_ref().expect("the handler failed");
    assert_eq!(error.code, "clinic.not_found");
    // The connector's words stay; the input's values do not, raw or percent-encoded.
    assert_eq!(
        error.message,
        "no chart for [withheld] aged 40 (GET /charts/[withheld])"
    );
    let shown = serde_json::to_string(&result).unwrap();
    assert!(!shown.contains(PII), "{shown}");
    assert!(shown.contains("\"field\":\"name\""), "{shown}");
    assert!(
        shown.contains("\"[withheld]\":\"keyed by the value\""),
        "{shown}"
    );

    // A value that is also a word the SDK writes leaves the SDK's fields readable.
    let spaced = "Ada Lovelace";
    let result = host
        .invoke(
            Action::new(
                "cap:clinic:find_chart",
                json!({ "name": spaced, "age": 36 }),
            )
            .with_idempotency_key("find-2"),
            &caller(),
        )
        .await;
    let shown = serde_json::to_string(&result).unwrap();
    assert!(
        !shown.contains("Ada%20Lovelace") && !shown.contains(spaced),
        "{shown}"
    );
    let result = host
        .invoke(
            Action::new(
                "cap:clinic:find_chart",
                json!({ "name": "invocation", "age": 1 }),
            )
            .with_idempotency_key("find-3"),
            &caller(),
        )
        .await;
    assert_eq!(
        result.error.unwrap().details.unwrap()["operation"],
        "invocation"
    );
    let stored = store
        .record("Tenant:t1:find-1", 0)
        .await
        .unwrap()
        .expect("a permanent failure is stored");
    let stored = serde_json::to_string(&stored).unwrap();
    assert!(stored.contains("[withheld]"), "{stored}");
    assert!(!stored.contains(PII), "{stored}");
    assert!(logs.contains(result.action_id.as_str()), "{}", logs.text());
    assert!(!logs.text().contains(PII), "{}", logs.text());
}

/// A connector failure that quotes the resolved credential (raw, percent-encoded, base64; in
/// its message, details and keys) reaches no result, record, dead letter or log line, whatever
/// the data policy: the host holds the material and withholds it (found by a hostile review).
/// The rest of the failure, input values included (no redaction here), stays readable.
#[tokio::test]
async fn a_failure_quoting_the_credential_is_withheld_everywhere() {
    let (logs, _guard) = capture_logs();
    let store = Arc::new(MemoryStore::default());
    let credential = CredentialHandle::new(
        "cred-8",
        "vault",
        Secret::new("svc-user:canary pass/7d3e91"),
    )
    .with_scopes(["charts.write"]);
    let host = Host::builder()
        .connector(Tokens)
        .store(store.clone())
        .deployment(Deployment::new().with_static_credential(credential))
        .build()
        .unwrap();
    let forms = [
        "svc-user:canary pass/7d3e91",
        "svc-user%3Acanary%20pass%2F7d3e91",
        "svc-user%3Acanary+pass%2F7d3e91",
        "c3ZjLXVzZXI6Y2FuYXJ5IHBhc3MvN2QzZTkx",
    ];
    let mut last = None;
    for _ in 0..5 {
        let action = Action::new("cap:tokens:refresh", json!({ "name": "Grace", "age": 40 }))
            .with_idempotency_key("refresh-1");
        last = Some(host.invoke(action, &caller()).await);
    }
    let first_failure = store.record("Tenant:t1:refresh-1", 0).await.unwrap();
    let dead = last.expect("five attempts");
    let error = dead.error.as_ref().expect("the attempts failed");
    assert_eq!(error.code, codes::ACTION_DEAD_LETTER, "{dead:?}");
    let shown = serde_json::to_string(&dead).unwrap();
    assert!(
        shown.contains("token [withheld] refused for Grace"),
        "{shown}"
    );
    assert!(shown.contains("POST /tokens/[withheld]"), "{shown}");
    assert!(shown.contains("Bearer [withheld]"), "{shown}");
    assert!(
        shown.contains("\"[withheld]\":\"keyed by the secret\""),
        "{shown}"
    );
    let stored = serde_json::to_string(&first_failure.expect("the dead letter is stored")).unwrap();
    for form in forms {
        assert!(!shown.contains(form), "{form} in {shown}");
        assert!(!stored.contains(form), "{form} in {stored}");
        assert!(!logs.text().contains(form), "{form} in {}", logs.text());
    }
}

/// Saves a favourite under a provider operation id built from the input (the pattern
/// transactions.md §1 shows, with an input value in it), checkpointed or not.
struct Favourites {
    api: ProviderClient,
    checkpoints: bool,
}

#[derive(Deserialize, JsonSchema)]
struct Favourite {
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct FavouriteSaved {
    saved: bool,
}

#[connector(id = "favourites")]
impl Favourites {
    /// Saves a favourite place.
    #[capability(
        risk = low,
        side_effects = [write],
        data(sensitivity = internal, pii, redaction),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
    )]
    async fn save(
        &self,
        input: Favourite,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<FavouriteSaved, ConnectorFailure> {
        let operation = aip_connector::model::ProviderOperationRef {
            provider: "favourites".into(),
            operation_id: format!("{}-{}", input.name, key.for_provider()),
            request_id: None,
        };
        if self.checkpoints {
            checkpoint.record(operation.clone(), None).await?;
        }
        let _: serde_json::Value = self
            .api
            .put(&format!(
                "/favourites/{}",
                aip_connector::provider::path_segment(&input.name)
            ))
            .idempotency(&key)
            .header("x-operation-id", &operation.operation_id)
            .provider_operation(operation)
            .json(&json!({}))
            .send_json()
            .await?;
        Ok(FavouriteSaved { saved: true })
    }

    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let found: serde_json::Value = self
            .api
            .get(&format!(
                "/operations/{}",
                aip_connector::provider::path_segment(&request.provider_operation.operation_id)
            ))
            .send_json()
            .await?;
        Ok(match found["state"].as_str() {
            Some("committed") => ReconcileOutcome::Committed { evidence: None },
            _ => ReconcileOutcome::NotCommitted { evidence: None },
        })
    }
}

/// With redaction, a lost answer's failure names its provider operation, whose id holds an input
/// value. Reconciliation must look up the operation the provider knows, not a withheld copy of
/// it (`[withheld]-aip1_…`, which answered "not committed" for a write the provider had; found
/// by an author trial), whether the handler checkpointed it or only named it in its request.
#[tokio::test]
async fn a_redacted_failure_keeps_the_operation_reconciliation_looks_up() {
    use aip_connector::ids::TransactionId;
    use aip_connector::model::{ActionTransaction, TransactionMode};
    use aip_connector_testkit::provider_double::{Fault, ProviderDouble};

    for checkpoints in [true, false] {
        let (double, provider) = ProviderDouble::start().await;
        let api = ProviderClient::builder(double.base_url())
            .proxy_from_environment(false)
            .build()
            .unwrap();
        let host = Host::builder()
            .connector(Favourites { api, checkpoints })
            .store(Arc::new(MemoryStore::default()))
            .build()
            .unwrap();
        // The effect commits; its answer is lost.
        provider.inject("/favourites/Greenwich", Fault::drop_connection());
        let input = json!({ "name": "Greenwich" });
        let lost = host
            .invoke(
                Action::new("cap:favourites:save", input.clone()).with_idempotency_key("k1"),
                &caller(),
            )
            .await;
        let error = lost.error.as_ref().expect("the answer was lost");
        assert_eq!(error.code, codes::PROVIDER_OUTCOME_UNKNOWN, "{lost:?}");
        assert!(!error.message.contains("Greenwich"), "{}", error.message);
        let sent = provider.requests()[0]
            .header("x-operation-id")
            .expect("the operation id was sent")
            .to_owned();
        let transaction = error.details.as_ref().unwrap()["transaction_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let reconcile = Action::new("cap:favourites:save", input)
            .with_idempotency_key("k1-reconcile")
            .with_transaction(
                ActionTransaction::new(TransactionMode::Reconcile)
                    .with_transaction_id(TransactionId::parse(&transaction).unwrap()),
            );
        let settled = host.invoke(reconcile, &caller()).await;
        let looked_up = provider
            .requests()
            .into_iter()
            .find(|r| r.path.starts_with("/operations/"))
            .map(|r| r.path["/operations/".len()..].to_owned())
            .expect("the reconcile companion looked the operation up");
        assert_eq!(looked_up, sent, "checkpoints: {checkpoints}");
        assert_eq!(
            settled.output.expect("reconciled")["reconciliation"]["committed"],
            true,
            "checkpoints: {checkpoints}"
        );
    }
}

/// An output-schema failure quotes the output; an output holding the credential must not take
/// it into the result or the logs (found by a hostile review).
#[tokio::test]
async fn an_output_schema_failure_does_not_quote_the_credential() {
    let (logs, _guard) = capture_logs();
    let host = host_of(Echoes, Arc::new(MemoryStore::default()));
    let result = host
        .invoke(Action::new("cap:echoes:show", json!({})), &caller())
        .await;
    let error = result.error.as_ref().expect("the output is refused");
    assert_eq!(error.code, codes::ACTION_OUTPUT_SCHEMA_INVALID);
    let shown = serde_json::to_string(&result).unwrap();
    assert!(shown.contains("[withheld]"), "{shown}");
    assert!(!shown.contains(CANARY), "{shown}");
    assert!(!logs.text().contains(CANARY), "{}", logs.text());
}

/// A completed output that quotes the call's credential is stored, replayed and returned with
/// the material withheld, and the host warns that it did so (an author trial's provider echoed
/// `Authorization` in its answer, and the token went back to the caller and into the store).
#[tokio::test]
async fn an_output_quoting_the_credential_is_withheld_before_it_is_stored() {
    let (logs, _guard) = capture_logs();
    let store = Arc::new(MemoryStore::default());
    let host = host_of(EchoingProvider, store.clone());
    let action = Action::new("cap:echoing:status", json!({})).with_idempotency_key("status-1");
    let result = host.invoke(action.clone(), &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let output = result.output.as_ref().expect("an output");
    assert_eq!(output["status"], json!("Bearer [withheld]"));
    assert_eq!(
        output["headers"],
        json!(["authorization: Bearer [withheld]", "accept: */*"])
    );
    let replayed = host.invoke(action, &caller()).await;
    assert!(replayed.is_idempotent_replay());
    let record = store
        .record("Tenant:t1:status-1", 0)
        .await
        .unwrap()
        .expect("the key's record");
    for shown in [
        serde_json::to_string(&result).unwrap(),
        serde_json::to_string(&replayed).unwrap(),
        serde_json::to_string(&record).unwrap(),
        format!("{record:?}"),
        logs.text(),
    ] {
        assert!(!shown.contains(CANARY), "{shown}");
    }
    assert!(
        logs.text()
            .contains("the handler's output quoted the call's credential"),
        "{}",
        logs.text()
    );
}

/// An input value that is also a word of the SDK's own field names (`provider`, `details`)
/// does not rename those fields in a redacted failure (found by a hostile review).
#[tokio::test]
async fn an_input_value_does_not_rename_the_sdks_fields() {
    let host = host(Arc::new(MemoryStore::default()));
    for name in ["provider", "details", "operation"] {
        let result = host
            .invoke(
                Action::new("cap:clinic:find_chart", json!({ "name": name, "age": 3 })),
                &caller(),
            )
            .await;
        let details = result.error.unwrap().details.unwrap();
        let keys: Vec<&str> = details
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in [
            "operation",
            "provider_request_id",
            "provider_operation",
            "details",
        ] {
            assert!(keys.contains(&key), "{name}: {key} missing from {details}");
        }
        assert_eq!(details["operation"], "invocation", "{name}");
        // The connector's own details still lose the value.
        assert!(
            !details["details"]
                .to_string()
                .contains(&format!("\"{name}\"")),
            "{details}"
        );
    }
}

/// Quotes the provider's refusal, which names the credential, from a capability whose input is
/// redacted: the caller's input is withheld from the failure as well as the credential.
struct Keys;

#[connector(id = "keys")]
impl Keys {
    /// Checks the caller's key against a patient's record.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = regulated, pii, redaction),
        credentials(required, scopes = ["charts.write"]),
    )]
    async fn check(
        &self,
        _patient: Patient,
        credential: Credential,
    ) -> Result<Chart, ConnectorFailure> {
        let secret = credential.secret().expose_str().unwrap_or_default();
        Err(ConnectorFailure::temporary(
            "keys.refused",
            format!("provider said: bad key {secret}"),
            "keys",
        ))
    }
}

/// An input value that overlaps the credential in the failure's text (here it ends with the
/// credential's first characters) cannot uncover the rest of it: both are withheld as one.
/// Found by a hostile probe: the longer input value was withheld first, which broke the
/// credential's text up, and `[withheld]ary-secret-7d3e91` went out in the result, the stored
/// record and the logs.
#[tokio::test]
async fn an_input_value_overlapping_the_credential_cannot_uncover_it() {
    let (logs, _guard) = capture_logs();
    let store = Arc::new(MemoryStore::default());
    let host = host_of(Keys, store.clone());
    for name in [
        "provider said: bad key can",
        "key canary-",
        "secret-7d3e91 and more",
    ] {
        let action = Action::new("cap:keys:check", json!({ "name": name, "age": 40 }));
        let failed = host.invoke(action, &caller()).await;
        let shown = serde_json::to_string(&failed).unwrap();
        assert_eq!(
            failed.error.as_ref().unwrap().code,
            "keys.refused",
            "{shown}"
        );
        for tail in ["7d3e91", "ary-secret", "canary"] {
            assert!(!shown.contains(tail), "{tail} of the credential in {shown}");
            assert!(!logs.text().contains(tail), "{tail} in {}", logs.text());
        }
    }
}
