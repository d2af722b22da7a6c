//! `aip_connector::ProviderClient` against the provider double: what is sent, and every branch of
//! the failure classification (`docs/provider-client.md`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aip_connector::codes;
use aip_connector::extract::Extractor;
use aip_connector::model::{
    Action, ConnectorFailure, ConnectorOperation, ErrorCategory, ProviderOperationRef,
};
use aip_connector::provider::{ProviderClient, ProviderClientError};
use aip_connector::{
    CallerIdentity, Cancellation, Deadline, IdempotencyKey, InvocationContext, Secret,
    StaticInvocation,
};
use aip_connector_testkit::provider_double::{Fault, ProviderDouble, ProviderHandle};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize, PartialEq)]
struct Created {
    operation_id: String,
    route: String,
    idempotency_key: Option<String>,
}

async fn setup() -> (ProviderDouble, ProviderHandle, ProviderClient) {
    let (double, handle) = ProviderDouble::start().await;
    let client = ProviderClient::builder(double.base_url())
        .proxy_from_environment(false)
        .build()
        .unwrap();
    (double, handle, client)
}

/// The classification fields of a failure, for one-line assertions.
fn class(failure: &ConnectorFailure) -> (&str, ErrorCategory, bool, bool) {
    (
        failure.code.as_str(),
        failure.category,
        failure.retryable,
        failure.uncertain_outcome,
    )
}

fn detail<'a>(failure: &'a ConnectorFailure, key: &str) -> &'a Value {
    &failure.redacted_details.as_ref().expect("details")[key]
}

const UNCERTAIN: bool = true;
const RETRYABLE: bool = true;

#[tokio::test]
async fn a_call_sends_key_json_and_credentials_and_decodes_the_answer() {
    let (double, handle) = ProviderDouble::start().await;
    // A test that keeps only the handle can still build a client.
    assert_eq!(handle.base_url(), double.base_url());
    let client = ProviderClient::builder(format!("{}/v1/", double.base_url()))
        .bearer_auth(Secret::new("tok_live"))
        .header("x-api-version", "2026-01")
        .proxy_from_environment(false)
        .build()
        .unwrap();
    let created: Created = client
        .post("/bookings")
        .idempotency_key("k1")
        .timeout(Duration::from_secs(5))
        .json(&json!({"slot": "9am"}))
        .send_json()
        .await
        .unwrap();
    assert_eq!(
        created,
        Created {
            operation_id: "op_1".into(),
            route: "/v1/bookings".into(),
            idempotency_key: Some("k1".into()),
        }
    );
    let request = &handle.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/bookings", "the base path is kept");
    assert_eq!(request.idempotency_key(), Some("k1"));
    assert_eq!(request.header("authorization"), Some("Bearer tok_live"));
    assert_eq!(request.header("x-api-version"), Some("2026-01"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("accept"), Some("application/json"));
    assert!(
        request
            .header("user-agent")
            .unwrap()
            .starts_with("aip-connector/")
    );
    assert_eq!(request.json(), Some(json!({"slot": "9am"})));
}

#[tokio::test]
async fn per_call_credentials_query_and_basic_auth() {
    let (double, handle) = ProviderDouble::start().await;
    let client = ProviderClient::builder(double.base_url())
        .basic_auth("acct", Secret::new("pw"))
        .secret_header("x-api-key", Secret::new("key_1"))
        .proxy_from_environment(false)
        .build()
        .unwrap();
    let response = client
        .get("/search?fixed=1")
        .query(&[("q", "a b"), ("page", "2")])
        .secret_header("x-api-key", &Secret::new("key_call"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.request_id(), Some("req_1"));
    assert_eq!(response.header("content-type"), Some("application/json"));
    let request = &handle.requests()[0];
    assert_eq!(request.query.as_deref(), Some("fixed=1&q=a+b&page=2"));
    // base64("acct:pw")
    assert_eq!(request.header("authorization"), Some("Basic YWNjdDpwdw=="));
    assert_eq!(
        request.header("x-api-key"),
        Some("key_call"),
        "the call's replaces the client's"
    );
    assert_eq!(
        request
            .headers
            .iter()
            .filter(|(n, _)| n == "x-api-key")
            .count(),
        1
    );

    client
        .delete("/bookings/1")
        .bearer_auth(&Secret::new("tok_call"))
        .send_empty()
        .await
        .unwrap();
    assert_eq!(
        handle.requests()[1].header("authorization"),
        Some("Bearer tok_call")
    );
    assert_eq!(handle.effect_total(), 1, "DELETE is an effect");
}

#[tokio::test]
async fn the_handler_extractors_drive_key_deadline_and_cancellation() {
    let (_double, handle, client) = setup().await;
    let invocation = StaticInvocation::new(
        Action::new("cap:test:book", json!({})).with_idempotency_key("action-key"),
        CallerIdentity::new("user:ada", "test"),
    )
    // Long enough for the first call on a loaded machine, short against the 10 s delay below.
    .with_deadline(tokio::time::Instant::now() + Duration::from_millis(1500));
    let context: Arc<dyn InvocationContext> = Arc::new(invocation);
    let key = IdempotencyKey::extract(&context).unwrap();
    let deadline = Deadline::extract(&context).unwrap();
    let cancel = Cancellation::extract(&context).unwrap();

    let created: Created = client
        .post("/bookings")
        .idempotency(&key)
        .deadline(&deadline)
        .cancellation(&cancel)
        .json(&json!({}))
        .send_json()
        .await
        .unwrap();
    // A static invocation scopes nothing: the provider gets the digest of the caller's key.
    let sent = IdempotencyKey::provider_key_of("action-key");
    assert_eq!(key.for_provider(), sent);
    assert!(sent.starts_with(IdempotencyKey::PROVIDER_KEY_PREFIX) && sent.len() == 69);
    assert_eq!(created.idempotency_key.as_deref(), Some(sent.as_str()));
    assert_eq!(handle.requests()[0].idempotency_key(), Some(sent.as_str()));

    // The action's deadline bounds the call.
    handle.inject("/bookings", Fault::delay(Duration::from_secs(10)));
    let started = std::time::Instant::now();
    let failure = client
        .post("/bookings")
        .idempotency_key("k2")
        .deadline(&deadline)
        .send()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(failure.code, codes::PROVIDER_OUTCOME_UNKNOWN);

    // The action's cancellation stops it.
    context.cancellation().cancel();
    let failure = client
        .get("/bookings")
        .cancellation(&cancel)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_CANCELLED);
}

#[tokio::test]
async fn an_unbuildable_request_is_refused_before_anything_is_sent() {
    let (_double, handle, client) = setup().await;
    let mut not_json = HashMap::new();
    not_json.insert((1, 2), "tuple keys are not JSON object keys");
    let failure = client
        .post("/bookings")
        .json(&not_json)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_REQUEST_INVALID,
            ErrorCategory::Connector,
            false,
            false
        )
    );
    assert_eq!(detail(&failure, "phase"), "build");
    let failure = client
        .post("/bookings")
        .header("x-bad", "line\nbreak")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_REQUEST_INVALID);
    let failure = client
        .post("/bookings")
        .idempotency_key("bad\u{7f}key")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_REQUEST_INVALID);
    assert_eq!(handle.request_count(), 0);
}

/// Found by an author trial: `format!("/repos/{}", input.repo)` with `repo = "../.."` sent a
/// credentialed request outside the base URL's path, and a `?` in an input started a query.
#[tokio::test]
async fn input_cannot_take_a_call_out_of_the_base_path_or_into_the_query() {
    let (double, handle) = ProviderDouble::start().await;
    let client = ProviderClient::builder(format!("{}/v2", double.base_url()))
        .proxy_from_environment(false)
        .bearer_auth(Secret::new("tok_live"))
        .build()
        .unwrap();
    for path in [
        "/repos/../../admin/users",
        "/repos/acme/..",
        "/repos/./acme",
        "/repos/%2e%2E/admin",
        "/repos/.%2e/admin",
        "/repos/..\\admin",
        "..",
        // URL parsing drops tabs and line breaks before it resolves segments (a hostile
        // review got out of the base path with these).
        "/repos/.\t./.\t./admin",
        "/repos/.\n./admin",
        "/repos/%2\te%2e/admin",
        "/repos/..\r/admin",
    ] {
        let failure = client.delete(path).send().await.unwrap_err();
        assert_eq!(failure.code, codes::PROVIDER_REQUEST_INVALID, "{path}");
        assert!(
            failure.message.contains("path_segment"),
            "{path}: {}",
            failure.message
        );
    }
    assert_eq!(handle.request_count(), 0, "a request was sent");

    // Encoded, the same text stays one segment: no traversal, no query.
    use aip_connector::provider::path_segment;
    let branch = "x?force=true#frag/../../admin";
    client
        .delete(&format!("/repos/acme/refs/{}", path_segment(branch)))
        .send_empty()
        .await
        .unwrap();
    let sent = handle.requests().pop().unwrap();
    assert_eq!(
        sent.path,
        "/v2/repos/acme/refs/x%3Fforce%3Dtrue%23frag%2F..%2F..%2Fadmin"
    );
    assert_eq!(sent.query, None);
    // Dots inside a segment are ordinary text.
    client
        .get(&format!("/files/{}", path_segment("v1.2..final.tar.gz")))
        .send_empty()
        .await
        .unwrap();
    assert_eq!(
        handle.requests().pop().unwrap().path,
        "/v2/files/v1.2..final.tar.gz"
    );
}

/// Found by an author trial: a file path of several segments needed a hand-written loop of
/// `path_segment`s; `path_segments` keeps its `/`s, encodes each piece, and gets a path that
/// would leave its place refused.
#[tokio::test]
async fn a_path_of_several_segments_keeps_its_slashes_and_nothing_else() {
    use aip_connector::provider::path_segments;
    let (double, handle) = ProviderDouble::start().await;
    let client = ProviderClient::builder(format!("{}/v2", double.base_url()))
        .proxy_from_environment(false)
        .build()
        .unwrap();
    client
        .get(&format!(
            "/repos/acme/contents/{}",
            path_segments("docs/read me?.md")
        ))
        .send_empty()
        .await
        .unwrap();
    let sent = handle.requests().pop().unwrap();
    assert_eq!(sent.path, "/v2/repos/acme/contents/docs/read%20me%3F.md");
    assert_eq!(sent.query, None);
    for file in [
        "../../admin",
        "docs/./x",
        "docs//x",
        "/etc/passwd",
        "docs/",
        "x/..",
    ] {
        let failure = client
            .get(&format!("/repos/acme/contents/{}", path_segments(file)))
            .send()
            .await
            .unwrap_err();
        assert_eq!(failure.code, codes::PROVIDER_REQUEST_INVALID, "{file}");
    }
    assert_eq!(handle.request_count(), 1, "a refused path was sent");
}

#[tokio::test]
async fn a_connect_failure_is_retryable_and_certain_even_for_a_mutating_call() {
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = ProviderClient::builder(format!("http://127.0.0.1:{port}"))
        .proxy_from_environment(false)
        .build()
        .unwrap();
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_UNAVAILABLE,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(detail(&failure, "phase"), "connect");
    assert_eq!(detail(&failure, "io_error"), "ConnectionRefused");
    assert_eq!(failure.remote_status, None);
}

#[tokio::test]
async fn a_passed_deadline_or_a_fired_token_sends_nothing() {
    let (_double, handle, client) = setup().await;
    let failure = client
        .post("/bookings")
        .timeout(Duration::ZERO)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_TIMEOUT,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(detail(&failure, "phase"), "before_send");

    let token = CancellationToken::new();
    token.cancel();
    let failure = client
        .post("/bookings")
        .cancellation_token(token)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_CANCELLED,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(handle.request_count(), 0);
}

#[tokio::test]
async fn a_deadline_in_flight_is_uncertain_for_a_mutating_call_only() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::delay(Duration::from_secs(10)).times(2));
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_OUTCOME_UNKNOWN,
            ErrorCategory::Temporary,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(detail(&failure, "cause"), "deadline");
    assert_eq!(detail(&failure, "phase"), "awaiting_response");
    assert!(
        failure.message.contains("may have applied"),
        "{}",
        failure.message
    );
    // The double counts the effect on its own thread; give a loaded machine time to get there.
    assert!(handle.wait_for_effects(1, Duration::from_secs(5)).await);
    assert_eq!(handle.effect_count("k1"), 1, "it did happen");

    let failure = client
        .get("/bookings")
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_TIMEOUT,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
}

#[tokio::test]
async fn a_lost_connection_is_uncertain_for_a_mutating_call_only() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::drop_connection().times(2));
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_OUTCOME_UNKNOWN,
            ErrorCategory::Temporary,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(detail(&failure, "cause"), "connection_lost");
    assert_eq!(handle.effect_count("k1"), 1);

    let failure = client.get("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_UNAVAILABLE,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(detail(&failure, "cause"), "connection_lost");
}

#[tokio::test]
async fn the_per_call_mutating_flag_overrides_the_method() {
    let (_double, handle, client) = setup().await;
    handle.inject("/search", Fault::drop_connection().without_effect());
    let failure = client
        .post("/search")
        .mutating(false)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_UNAVAILABLE);
    assert!(!failure.uncertain_outcome);
    assert_eq!(detail(&failure, "mutating"), false);

    handle.inject("/trigger", Fault::drop_connection());
    let failure = client
        .get("/trigger")
        .mutating(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_OUTCOME_UNKNOWN);
    assert!(failure.uncertain_outcome);
}

#[tokio::test]
async fn a_truncated_success_body_is_uncertain_and_names_the_status() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::truncated_body());
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .json(&json!({"slot": 1}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_OUTCOME_UNKNOWN,
            ErrorCategory::Temporary,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(failure.remote_status, Some(201));
    assert_eq!(failure.provider_request_id.as_deref(), Some("req_1"));
    assert_eq!(detail(&failure, "phase"), "reading_body");
    assert_eq!(handle.effect_count("k1"), 1);
}

#[tokio::test]
async fn cancellation_in_flight_is_uncertain_for_a_mutating_call_only() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::delay(Duration::from_secs(10)).times(2));
    for (mutating, expect_uncertain) in [(true, true), (false, false)] {
        let token = CancellationToken::new();
        let canceller = {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                token.cancel();
            })
        };
        let started = std::time::Instant::now();
        let failure = client
            .post("/bookings")
            .mutating(mutating)
            .cancellation_token(token)
            .send()
            .await
            .unwrap_err();
        canceller.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(failure.code, codes::PROVIDER_CANCELLED);
        assert_eq!(failure.uncertain_outcome, expect_uncertain);
        assert_eq!(failure.retryable, !expect_uncertain);
        assert_eq!(detail(&failure, "cause"), "cancelled");
    }
}

#[tokio::test]
async fn rate_limits_and_unavailability_carry_retry_after() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::status(429).retry_after_secs(3));
    let failure = client.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_RATE_LIMITED,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(failure.retry_after_ms, Some(3_000));
    assert_eq!(failure.remote_status, Some(429));
    assert_eq!(failure.provider_request_id.as_deref(), Some("req_1"));
    assert_eq!(detail(&failure, "status"), 429);

    let later = time::OffsetDateTime::now_utc() + time::Duration::seconds(60);
    let date = later
        .format(time::macros::format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        ))
        .unwrap();
    handle.inject("/bookings", Fault::status(503).retry_after(&date));
    let failure = client.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_UNAVAILABLE,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    let wait = failure.retry_after_ms.unwrap();
    assert!((50_000..=60_000).contains(&wait), "{wait}");
    assert_eq!(failure.remote_status, Some(503));

    handle.inject("/bookings", Fault::status(503));
    let failure = client.post("/bookings").send().await.unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_UNAVAILABLE);
    assert_eq!(failure.retry_after_ms, None);
    assert_eq!(handle.effect_total(), 0);
}

#[tokio::test]
async fn server_errors_are_temporary_unless_the_client_treats_them_as_uncertain() {
    let (double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::status(500).with_effect());
    let failure = client.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_SERVER_ERROR,
            ErrorCategory::Temporary,
            RETRYABLE,
            false
        )
    );
    assert_eq!(failure.remote_status, Some(500));

    let cautious = ProviderClient::builder(double.base_url())
        .server_errors_uncertain(true)
        .proxy_from_environment(false)
        .build()
        .unwrap();
    handle.inject("/bookings", Fault::status(502).with_effect().times(2));
    let failure = cautious.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_OUTCOME_UNKNOWN,
            ErrorCategory::Temporary,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(failure.remote_status, Some(502));
    let failure = cautious.get("/bookings").send().await.unwrap_err();
    assert_eq!(
        failure.code,
        codes::PROVIDER_SERVER_ERROR,
        "reads stay certain"
    );
    handle.inject("/bookings", Fault::status(503));
    let failure = cautious.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        failure.code,
        codes::PROVIDER_UNAVAILABLE,
        "503 means not processed"
    );
}

/// `send_json_optional` reads `404 Not Found`, and only that, as "not there".
#[tokio::test]
async fn an_optional_lookup_reads_only_not_found_as_absent() {
    let (_double, handle, client) = setup().await;
    let found: Option<Value> = client
        .get("/bookings/b1")
        .send_json_optional()
        .await
        .unwrap();
    assert_eq!(found.expect("answered 200")["route"], "/bookings/b1");

    handle.inject("/bookings/b1", Fault::status(404));
    let absent = client
        .get("/bookings/b1")
        .send_json_optional::<Value>()
        .await
        .unwrap();
    assert_eq!(absent, None);

    // Gone, failing, or refusing is not "not there": the caller could not tell.
    for status in [410, 401, 500, 503] {
        handle.inject("/bookings/b1", Fault::status(status));
        let failure = client
            .get("/bookings/b1")
            .send_json_optional::<Value>()
            .await
            .unwrap_err();
        assert_eq!(failure.remote_status, Some(status));
    }
}

#[tokio::test]
async fn client_errors_are_permanent_and_auth_errors_are_auth() {
    let (_double, handle, client) = setup().await;
    for status in [401, 403] {
        handle.inject("/bookings", Fault::status(status));
        let failure = client.post("/bookings").send().await.unwrap_err();
        assert_eq!(
            class(&failure),
            (
                codes::PROVIDER_UNAUTHORIZED,
                ErrorCategory::Auth,
                false,
                false
            )
        );
        assert_eq!(failure.remote_status, Some(status));
    }
    for status in [400, 404, 409, 422] {
        handle.inject("/bookings", Fault::status(status));
        let failure = client.post("/bookings").send().await.unwrap_err();
        assert_eq!(
            class(&failure),
            (
                codes::PROVIDER_REJECTED,
                ErrorCategory::Permanent,
                false,
                false
            )
        );
        assert_eq!(failure.remote_status, Some(status));
        assert_eq!(detail(&failure, "status"), status);
        assert!(failure.message.contains(&format!("HTTP {status}")));
    }
    // The double's own refusal of a reused key arrives the same way.
    client
        .post("/bookings")
        .idempotency_key("k1")
        .json(&json!({"a": 1}))
        .send_empty()
        .await
        .unwrap();
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .json(&json!({"a": 2}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_REJECTED);
    assert_eq!(failure.remote_status, Some(422));
}

/// With `error_message`, the provider's explanation of an error answer reaches the failure's
/// message and `details.provider_message` as the reader returned it; one longer than its limit
/// is left out whole (a cut could split a secret the host withholds; found by a hostile
/// review); without a reader, or when it finds nothing, the error body is not quoted (an author
/// trial found a model told only "HTTP 422", where its rmcp tool passed the provider's reason
/// on).
#[tokio::test]
async fn the_providers_explanation_of_an_error_is_read_only_when_asked() {
    use aip_connector::provider::{MAX_ERROR_BODY_BYTES, MAX_ERROR_MESSAGE_CHARS};
    let (double, handle, plain) = setup().await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let explaining = explaining_client(double.base_url(), Arc::clone(&seen));
    let body = br#"{"message": "title is\nrequired", "token": "not quoted"}"#;

    handle.inject("/issues", Fault::respond(422, body.to_vec()));
    let failure = explaining.post("/issues").send().await.unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_REJECTED);
    assert!(
        failure.message.ends_with("(HTTP 422): title is\nrequired"),
        "{}",
        failure.message
    );
    assert_eq!(detail(&failure, "provider_message"), "title is\nrequired");
    assert!(!format!("{failure:?}").contains("not quoted"));

    handle.inject("/issues", Fault::respond(422, body.to_vec()));
    let failure = plain.post("/issues").send().await.unwrap_err();
    assert!(
        failure.message.ends_with("(HTTP 422)"),
        "{}",
        failure.message
    );
    assert_eq!(detail(&failure, "provider_message"), &Value::Null);

    // Not the reader's shape: the failure is as without a reader.
    handle.inject("/issues", Fault::respond(400, b"<html>bad</html>".to_vec()));
    let failure = explaining.post("/issues").send().await.unwrap_err();
    assert!(
        failure.message.ends_with("(HTTP 400)"),
        "{}",
        failure.message
    );

    // At the limit it is kept; past it, left out whole; a huge body is read only so far.
    for (length, kept) in [
        (MAX_ERROR_MESSAGE_CHARS, true),
        (MAX_ERROR_MESSAGE_CHARS + 1, false),
    ] {
        let long = json!({ "message": "é".repeat(length) }).to_string();
        handle.inject("/issues", Fault::respond(422, long.into_bytes()));
        let failure = explaining.post("/issues").send().await.unwrap_err();
        assert_eq!(failure.code, codes::PROVIDER_REJECTED);
        assert_eq!(
            detail(&failure, "provider_message").is_string(),
            kept,
            "{length}"
        );
        assert_eq!(failure.message.contains('é'), kept, "{length}");
    }
    handle.inject(
        "/issues",
        Fault::respond(500, vec![b' '; 3 * MAX_ERROR_BODY_BYTES]),
    );
    let failure = explaining.post("/issues").send().await.unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_SERVER_ERROR);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.last(), Some(&(500, MAX_ERROR_BODY_BYTES)));
    assert_eq!(seen[0], (422, body.len()));
}

/// A client whose `error_message` reads `{"message": ...}` and records what it was given.
fn explaining_client(
    base_url: &str,
    seen: Arc<std::sync::Mutex<Vec<(u16, usize)>>>,
) -> ProviderClient {
    #[derive(Deserialize)]
    struct Explained {
        message: String,
    }
    ProviderClient::builder(base_url)
        .proxy_from_environment(false)
        .error_message(move |answer| {
            seen.lock()
                .unwrap()
                .push((answer.status(), answer.body().len()));
            answer.json::<Explained>().map(|error| error.message)
        })
        .build()
        .unwrap()
}

/// A provider that answers `422` with a body it never finishes (`stall`) or breaks off: the
/// status decided the failure, so with a reader it stays a certain `provider.rejected`,
/// without an explanation, and is not held past `ERROR_BODY_TIMEOUT` (a hostile review found a
/// rejection turned into an uncertain outcome, and the call held to its deadline).
#[tokio::test]
async fn an_error_body_that_stalls_or_breaks_off_leaves_the_rejection_certain() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for stall in [true, false] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            socket
                .write_all(b"HTTP/1.1 422 Unprocessable\r\ncontent-length: 100\r\n\r\n{\"mess")
                .await
                .unwrap();
            if stall {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        });
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client = explaining_client(&base, Arc::clone(&seen));
        let started = std::time::Instant::now();
        let failure = client
            .post("/issues")
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            class(&failure),
            (
                codes::PROVIDER_REJECTED,
                ErrorCategory::Permanent,
                false,
                false
            ),
            "stall: {stall}"
        );
        assert_eq!(detail(&failure, "provider_message"), &Value::Null);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "stall: {stall}"
        );
        assert_eq!(seen.lock().unwrap()[0].0, 422);
    }
}

#[tokio::test]
async fn a_success_body_that_is_not_the_expected_json_is_an_invalid_response() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::invalid_body());
    let failure = client
        .post("/bookings")
        .idempotency_key("k1")
        .send_json::<Created>()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_INVALID_RESPONSE,
            ErrorCategory::Connector,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(failure.remote_status, Some(201));
    assert_eq!(detail(&failure, "cause"), "syntax");
    assert_eq!(detail(&failure, "line"), 1);
    // The type's name without the test crate's module path.
    assert_eq!(detail(&failure, "expected"), "Created");
    assert_eq!(handle.effect_count("k1"), 1);

    handle.inject(
        "/bookings",
        Fault::respond(200, r#"{"unexpected": "value-9"}"#),
    );
    let failure = client
        .get("/bookings")
        .send_json::<Created>()
        .await
        .unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_INVALID_RESPONSE,
            ErrorCategory::Connector,
            false,
            false
        )
    );
    assert_eq!(detail(&failure, "cause"), "shape");

    handle.inject("/bookings", Fault::respond(200, r#"{"operation_id": "#));
    let failure = client
        .get("/bookings")
        .send_json::<Created>()
        .await
        .unwrap_err();
    assert_eq!(detail(&failure, "cause"), "eof");
}

#[tokio::test]
async fn a_body_over_the_limit_and_an_unexpected_status_are_invalid_responses() {
    let (double, handle) = ProviderDouble::start().await;
    let client = ProviderClient::builder(double.base_url())
        .max_response_bytes(64)
        .proxy_from_environment(false)
        .build()
        .unwrap();
    handle.inject("/big", Fault::respond(200, vec![b' '; 65]));
    let failure = client.get("/big").send().await.unwrap_err();
    assert_eq!(failure.code, codes::PROVIDER_INVALID_RESPONSE);
    assert_eq!(detail(&failure, "cause"), "too_large");
    assert!(!failure.uncertain_outcome);

    // Redirects are not followed: a 3xx is not an answer the client can use.
    handle.inject("/bookings", Fault::respond(302, "{}"));
    let failure = client.post("/bookings").send().await.unwrap_err();
    assert_eq!(
        class(&failure),
        (
            codes::PROVIDER_INVALID_RESPONSE,
            ErrorCategory::Connector,
            false,
            UNCERTAIN
        )
    );
    assert_eq!(failure.remote_status, Some(302));
    assert_eq!(handle.request_count(), 2);
}

#[tokio::test]
async fn failures_name_the_operation_and_the_provider_operation() {
    let (_double, handle, client) = setup().await;
    handle.inject("/bookings", Fault::drop_connection());
    let operation = ProviderOperationRef {
        provider: "double".into(),
        operation_id: "bk-1".into(),
        request_id: None,
    };
    let failure = client
        .post("/bookings")
        .operation(ConnectorOperation::TransactionCommit)
        .provider_operation(operation.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure.operation, ConnectorOperation::TransactionCommit);
    assert_eq!(failure.provider_operation, Some(operation));
    assert_eq!(failure.source_component, codes::SOURCE_COMPONENT);
    // On the wire, the host's conversion keeps the fields the transaction settlement reads.
    let wire = failure.to_protocol_error();
    let details = wire.details.unwrap();
    assert_eq!(details["uncertain_outcome"], true);
    assert_eq!(details["provider_operation"]["operation_id"], "bk-1");
}

#[tokio::test]
async fn a_retry_with_the_same_key_finds_the_effect_only_at_a_deduplicating_provider() {
    let (_double, handle, client) = setup().await;
    let attempt = |key: &'static str| {
        client
            .post("/bookings")
            .idempotency_key(key)
            .json(&json!({"slot": 1}))
            .send_json::<Created>()
    };
    handle.inject("/bookings", Fault::drop_connection());
    assert!(attempt("k1").await.unwrap_err().uncertain_outcome);
    let retried = attempt("k1").await.unwrap();
    assert_eq!(retried.operation_id, "op_1", "the first effect, replayed");
    assert_eq!(handle.effect_count("k1"), 1);

    handle.set_deduplication(false);
    handle.inject("/bookings", Fault::drop_connection());
    assert!(attempt("k2").await.unwrap_err().uncertain_outcome);
    attempt("k2").await.unwrap();
    assert_eq!(
        handle.effect_count("k2"),
        2,
        "a provider that ignores keys repeats"
    );
}

#[tokio::test]
async fn no_failure_or_debug_output_carries_bodies_credentials_or_queries() {
    const CANARIES: [&str; 7] = [
        "canary-base-path",
        "canary-bearer",
        "canary-api-key",
        "canary-query",
        "canary-request-body",
        "canary-response-body",
        "canary-basic",
    ];
    let (double, handle) = ProviderDouble::start().await;
    // A base path holding a credential, as a webhook URL does.
    let client = ProviderClient::builder(format!("{}/hooks/canary-base-path", double.base_url()))
        .secret_header("x-api-key", Secret::new("canary-api-key"))
        .basic_auth("user", Secret::new("canary-basic"))
        .proxy_from_environment(false)
        .build()
        .unwrap();
    let call = || {
        client
            .post("/bookings?token=canary-query")
            .bearer_auth(&Secret::new("canary-bearer"))
            .json(&json!({"card": "canary-request-body"}))
    };
    let error_body = r#"{"error": "canary-response-body"}"#;
    let mut failures = Vec::new();
    for fault in [
        Fault::respond(400, error_body),
        Fault::respond(500, error_body),
        Fault::respond(429, error_body),
        Fault::respond(201, r#"{"operation_id": 7, "x": "canary-response-body"}"#),
        Fault::respond(201, "canary-response-body"),
        Fault::drop_connection(),
        Fault::truncated_body(),
    ] {
        handle.inject("/hooks/canary-base-path/bookings", fault);
        failures.push(call().send_json::<Created>().await.unwrap_err());
    }
    handle.inject(
        "/hooks/canary-base-path/bookings",
        Fault::delay(Duration::from_secs(5)),
    );
    failures.push(
        call()
            .timeout(Duration::from_millis(100))
            .send()
            .await
            .unwrap_err(),
    );
    let mut bad = HashMap::new();
    bad.insert((1, 1), "canary-request-body");
    failures.push(
        client
            .post("/x?k=canary-query")
            .json(&bad)
            .send()
            .await
            .unwrap_err(),
    );

    let sent = handle.requests();
    assert_eq!(
        sent[0].header("authorization"),
        Some("Bearer canary-bearer")
    );
    assert_eq!(sent[0].header("x-api-key"), Some("canary-api-key"));
    for failure in &failures {
        let text = format!(
            "{failure} {failure:?} {} {}",
            serde_json::to_string(failure).unwrap(),
            serde_json::to_string(&failure.to_protocol_error()).unwrap(),
        );
        for canary in CANARIES {
            assert!(!text.contains(canary), "{canary} leaked: {text}");
        }
        assert!(!text.contains("token="), "{text}");
        assert!(text.contains("/bookings") || text.contains("/x"), "{text}");
    }
    let debug = format!("{client:?} {:?}", call());
    for canary in CANARIES {
        assert!(!debug.contains(canary), "{canary} leaked: {debug}");
    }
}

/// Handler futures must be `Send`; so must every send future of the client.
#[test]
fn calls_are_send_and_clients_are_shareable() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<ProviderClient>();
    let client = ProviderClient::new("http://127.0.0.1:1").unwrap();
    assert_send(&client.post("/x").send());
    assert_send(&client.post("/x").send_json::<Value>());
    assert_send(&client.post("/x").send_empty());
}

#[test]
fn the_builder_refuses_bad_configuration_without_quoting_values() {
    let error = ProviderClient::builder("http://127.0.0.1:1")
        .header("bad header", "v")
        .build()
        .unwrap_err();
    assert!(matches!(
        error,
        ProviderClientError::InvalidHeaderName { .. }
    ));
    let error = ProviderClient::builder("http://127.0.0.1:1")
        .header("x-ok", "canary\r\n")
        .build()
        .unwrap_err();
    assert!(matches!(
        error,
        ProviderClientError::InvalidHeaderValue { .. }
    ));
    assert!(!error.to_string().contains("canary"));
    let error = ProviderClient::builder("http://127.0.0.1:1")
        .bearer_auth(Secret::new("canary\n"))
        .build()
        .unwrap_err();
    assert!(!error.to_string().contains("canary"));
    assert!(ProviderClient::new("https://user:canary@example.com").is_err());
    assert_eq!(
        ProviderClient::new("https://api.example.com/v2")
            .unwrap()
            .base_url(),
        "https://api.example.com/v2"
    );
}
