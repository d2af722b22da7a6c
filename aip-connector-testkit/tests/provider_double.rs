//! The provider double, observed with a plain HTTP client: request recording, effects and
//! deduplication, every fault, operation lookups, credential requirements, shutdown, and state
//! that outlives a killed client process.

use std::time::Duration;

use aip_connector_testkit::provider_double::{
    Fault, INVALID_BODY, OPERATION_ID_HEADER, ProviderDouble, REPLAYED_HEADER,
};
use serde_json::{Value, json};

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post(
    double: &ProviderDouble,
    path: &str,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = http().post(double.url(path)).json(body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap()
}

async fn get_json(double: &ProviderDouble, path: &str) -> Value {
    http()
        .get(double.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn records_every_request_with_method_path_query_headers_body_and_time() {
    let (double, handle) = ProviderDouble::start().await;
    assert!(double.base_url().starts_with("http://127.0.0.1:"));
    let response = http()
        .put(double.url("/things/7?verbose=1"))
        .header("x-custom", "yes")
        .body("raw body")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["x-request-id"], "req_1");
    get_json(&double, "/things").await;

    let requests = handle.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.sequence, 1);
    assert_eq!(first.method, "PUT");
    assert_eq!(first.path, "/things/7");
    assert_eq!(first.query.as_deref(), Some("verbose=1"));
    assert_eq!(first.header("X-Custom"), Some("yes"));
    assert_eq!(first.body, b"raw body");
    assert_eq!(first.text(), "raw body");
    assert_eq!(first.json(), None);
    assert!(first.received_at <= std::time::SystemTime::now());
    assert!(requests[1].since_start >= first.since_start);
    assert_eq!(requests[1].method, "GET");
    assert_eq!(handle.request_count(), 2);
}

/// A provider whose API carries the key in a header of its own: told the header, the double
/// deduplicates on it and records the key from it; `Idempotency-Key` is then an ordinary
/// header (found by an author trial).
#[tokio::test]
async fn deduplicates_on_the_idempotency_header_it_is_told() {
    let (double, handle) = ProviderDouble::start().await;
    assert_eq!(handle.idempotency_header(), "idempotency-key");
    handle.set_idempotency_header("Postbox-Idempotency-Key");
    assert_eq!(handle.idempotency_header(), "postbox-idempotency-key");
    let send = |header: &'static str| {
        http()
            .post(double.url("/messages"))
            .header(header, "k-1")
            .json(&json!({ "to": "ada" }))
            .send()
    };
    let first = send("Postbox-Idempotency-Key").await.unwrap();
    let again = send("postbox-idempotency-key").await.unwrap();
    assert_eq!(first.status(), again.status());
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(handle.effect_total(), 1);
    assert_eq!(handle.requests()[1].idempotency_key(), Some("k-1"));
    // The default header no longer names a key.
    send("Idempotency-Key").await.unwrap();
    send("Idempotency-Key").await.unwrap();
    assert_eq!(handle.effect_total(), 3);
    assert_eq!(handle.requests()[2].idempotency_key(), None);
}

/// A recorded request's `Debug` (what a failing assertion prints) hides credential headers;
/// `header` still reads them.
#[tokio::test]
async fn debug_of_a_recorded_request_hides_credential_headers() {
    let (double, handle) = ProviderDouble::start().await;
    http()
        .post(double.url("/things"))
        .header("authorization", "Bearer canary-bearer")
        .header("x-api-key", "canary-api-key")
        .header("x-custom", "shown")
        .send()
        .await
        .unwrap();
    let request = &handle.requests()[0];
    let debug = format!("{request:?}");
    assert!(
        !debug.contains("canary-bearer") && !debug.contains("canary-api-key"),
        "{debug}"
    );
    assert!(
        debug.contains("[REDACTED]") && debug.contains("shown"),
        "{debug}"
    );
    assert_eq!(
        request.header("authorization"),
        Some("Bearer canary-bearer")
    );
}

#[tokio::test]
async fn an_effect_answers_its_operation_and_reads_list_the_route() {
    let (double, handle) = ProviderDouble::start().await;
    let response = post(&double, "/bookings", Some("k1"), &json!({"slot": "9am"})).await;
    assert_eq!(response.status(), 201);
    assert!(response.headers().get(REPLAYED_HEADER).is_none());
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer,
        json!({
            "operation_id": "op_1",
            "route": "/bookings",
            "idempotency_key": "k1",
            "effect_sequence": 1,
            "request": {"slot": "9am"},
        })
    );
    let effects = handle.effects();
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].operation_id, "op_1");
    assert_eq!(effects[0].method, "POST");
    assert_eq!(effects[0].route, "/bookings");
    assert_eq!(effects[0].answer, answer);
    assert_eq!(handle.operation("op_1").unwrap().sequence, 1);
    assert_eq!(handle.effects_on("/bookings").len(), 1);
    assert!(handle.effects_on("/other").is_empty());

    let read = get_json(&double, "/bookings").await;
    assert_eq!(
        read,
        json!({"route": "/bookings", "operation_ids": ["op_1"]})
    );
    assert_eq!(handle.effect_total(), 1, "a read commits nothing");
}

/// Answer shapes: a write stores its shaped answer (replays and lookups return it), a read is
/// shaped from the effects so far, the most specific route wins, and clearing restores the
/// generic answers.
#[tokio::test]
async fn answers_take_the_shape_of_the_real_api() {
    let (double, handle) = ProviderDouble::start().await;
    handle.answer("/tickets", |request| {
        assert_eq!(request.generic_answer()["route"], "/tickets");
        match request.operation_id() {
            Some(id) => json!({ "id": id, "title": request.body()["title"], "method": request.method() }),
            None => json!({ "tickets": request.effects().iter().map(|e| e.answer.clone()).collect::<Vec<_>>() }),
        }
    });
    handle.answer("/tickets/*", |request| {
        let id = request.path().trim_start_matches("/tickets/");
        json!({
            "found": request.effects().iter().any(|e| e.operation_id == id),
            "query": request.query(),
            "who": request.query_param("who"),
        })
    });
    handle.answer("*", |_| json!({ "everything": "else" }));

    let response = post(
        &double,
        "/tickets",
        Some("k1"),
        &json!({"title": "Printer"}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(
        created,
        json!({"id": "op_1", "title": "Printer", "method": "POST"})
    );
    assert_eq!(handle.effects()[0].answer, created);

    // A replay of the key returns the shaped answer and commits nothing.
    let replay = post(
        &double,
        "/tickets",
        Some("k1"),
        &json!({"title": "Printer"}),
    )
    .await;
    assert!(replay.headers().get(REPLAYED_HEADER).is_some());
    assert_eq!(replay.json::<Value>().await.unwrap(), created);
    assert_eq!(handle.effect_total(), 1);

    // Reads: the exact route lists, the pattern finds, `*` catches the rest.
    assert_eq!(
        get_json(&double, "/tickets").await,
        json!({"tickets": [created]})
    );
    assert_eq!(
        get_json(
            &double,
            "/tickets/op_1?full=1&who=ada+l%C3%B8velace&who=grace"
        )
        .await,
        json!({"found": true, "query": "full=1&who=ada+l%C3%B8velace&who=grace", "who": "ada løvelace"})
    );
    assert_eq!(
        get_json(&double, "/tickets/op_9").await,
        json!({"found": false, "query": null, "who": null})
    );
    assert_eq!(
        get_json(&double, "/elsewhere").await,
        json!({"everything": "else"})
    );

    // Operation lookups keep the double's own shape, with the shaped answer as `result`.
    let lookup = get_json(&double, "/operations/op_1").await;
    assert_eq!(lookup["state"], "committed");
    assert_eq!(lookup["result"], created);

    handle.clear_answers();
    assert_eq!(
        get_json(&double, "/tickets").await,
        json!({"route": "/tickets", "operation_ids": ["op_1"]})
    );
}

/// A shape reads the request's headers and answers a read with raw bytes of its own content
/// type: a download API's `GET` of a file, whole or the `Range` asked for (found by an author
/// trial whose file-storage connector could only be tested against a JSON content API).
#[tokio::test]
async fn a_shape_answers_a_read_with_raw_bytes_and_reads_its_headers() {
    let (double, handle) = ProviderDouble::start().await;
    handle.answer("GET /files/*", |request| {
        let content = b"hello, world".to_vec();
        match request.header("Range") {
            Some("bytes=0-4") => request.with_bytes(206, "application/octet-stream", &content[..5]),
            _ => request.with_bytes(200, "text/plain; charset=utf-8", content),
        }
    });
    let whole = http()
        .get(double.url("/files/f_1/content"))
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(whole.bytes().await.unwrap().as_ref(), b"hello, world");
    let range = http()
        .get(double.url("/files/f_1/content"))
        .header("range", "bytes=0-4")
        .send()
        .await
        .unwrap();
    assert_eq!(range.status(), 206);
    assert_eq!(range.headers()["content-type"], "application/octet-stream");
    assert_eq!(range.bytes().await.unwrap().as_ref(), b"hello");
    assert_eq!(handle.effect_total(), 0, "reads commit nothing");
}

/// A shape answers the status the real API would: a read `404` for what no write created, a
/// refused write (outside `2xx`) commits nothing and leaves its key unused, a `2xx` write
/// commits and its replay repeats the status.
#[tokio::test]
async fn shaped_answers_choose_their_status() {
    let (double, handle) = ProviderDouble::start().await;
    handle.answer("/tickets/*", |request| {
        let id = request.path().trim_start_matches("/tickets/");
        match request.effects().iter().find(|e| e.operation_id == id) {
            Some(created) => created.answer.clone(),
            None => request.with_status(404, json!({ "error": "ticket_not_found" })),
        }
    });
    handle.answer("/tickets", |request| {
        if request.body()["title"] == "" {
            return request.with_status(422, json!({ "error": "title_required" }));
        }
        request.with_status(
            200,
            json!({ "id": request.operation_id(), "title": request.body()["title"] }),
        )
    });

    let missing = http()
        .get(double.url("/tickets/op_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        json!({"error": "ticket_not_found"})
    );

    let refused = post(&double, "/tickets", Some("k1"), &json!({"title": ""})).await;
    assert_eq!(refused.status(), 422);
    assert_eq!(
        refused.json::<Value>().await.unwrap(),
        json!({"error": "title_required"})
    );
    assert_eq!(handle.effect_total(), 0, "a refused write commits nothing");
    // Its key stays unused: another body under it is a new write, not a reused key.
    let created = post(
        &double,
        "/tickets",
        Some("k1"),
        &json!({"title": "Printer"}),
    )
    .await;
    assert_eq!(created.status(), 200);
    assert!(created.headers().get(REPLAYED_HEADER).is_none());
    let created: Value = created.json().await.unwrap();
    assert_eq!(created, json!({"id": "op_1", "title": "Printer"}));
    assert_eq!(handle.effect_count("k1"), 1);

    let replay = post(
        &double,
        "/tickets",
        Some("k1"),
        &json!({"title": "Printer"}),
    )
    .await;
    assert_eq!(
        replay.status(),
        200,
        "a replay repeats the first answer's status"
    );
    assert!(replay.headers().get(REPLAYED_HEADER).is_some());
    assert_eq!(handle.effect_total(), 1);

    let found = http()
        .get(double.url("/tickets/op_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(found.status(), 200);
    assert_eq!(found.json::<Value>().await.unwrap(), created);
}

/// A route that names a method shapes (or faults) only that method's requests; of two routes
/// naming the path alike, the one with the method wins, and a more specific path still beats
/// a method on a pattern.
#[tokio::test]
async fn routes_may_name_a_method() {
    let (double, handle) = ProviderDouble::start().await;
    handle.answer(
        "POST /tickets",
        |request| json!({ "created": request.operation_id() }),
    );
    handle.answer("get /tickets", |_| json!({ "tickets": [] }));
    handle.answer("/tickets", |_| json!({ "any": "method" }));
    handle.answer("GET /tickets/*", |_| json!({ "pattern": true }));
    handle.answer("/tickets/exact", |_| json!({ "exact": true }));

    let created: Value = post(&double, "/tickets", Some("k1"), &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(created, json!({"created": "op_1"}));
    assert_eq!(get_json(&double, "/tickets").await, json!({"tickets": []}));
    let put: Value = http()
        .put(double.url("/tickets"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(put, json!({"any": "method"}));
    assert_eq!(
        get_json(&double, "/tickets/7").await,
        json!({"pattern": true})
    );
    assert_eq!(
        get_json(&double, "/tickets/exact").await,
        json!({"exact": true})
    );

    // Faults take the same routes: a fault on `POST` leaves reads alone.
    handle.inject("POST /tickets", Fault::status(503));
    assert_eq!(get_json(&double, "/tickets").await, json!({"tickets": []}));
    let refused = post(&double, "/tickets", Some("k2"), &json!({})).await;
    assert_eq!(refused.status(), 503);
    let again = post(&double, "/tickets", Some("k2"), &json!({})).await;
    assert_eq!(again.status(), 201, "the fault applied once");
}

/// A status that is not a final HTTP status is the test's mistake, said as such.
#[tokio::test]
#[should_panic(expected = "an answer's status is a final HTTP status, 200 to 599")]
async fn a_shaped_status_must_be_a_final_http_status() {
    let (double, handle) = ProviderDouble::start().await;
    let (sent, received) = std::sync::mpsc::channel();
    handle.answer("/tickets", move |request| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            request.with_status(102, json!({}))
        }));
        let message = match outcome {
            Ok(_) => String::new(),
            Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        sent.send(message).unwrap();
        json!({})
    });
    let _ = http().get(double.url("/tickets")).send().await;
    panic!("{}", received.recv().unwrap());
}

#[tokio::test]
async fn deduplication_replays_the_first_answer_and_commits_once() {
    let (double, handle) = ProviderDouble::start().await;
    assert!(handle.deduplicates());
    let first: Value = post(&double, "/bookings", Some("k1"), &json!({"a": 1, "b": 2}))
        .await
        .json()
        .await
        .unwrap();
    // Same key, same JSON in another key order: a replay.
    let response = http()
        .post(double.url("/bookings"))
        .header("idempotency-key", "k1")
        .header("content-type", "application/json")
        .body(r#"{ "b": 2, "a": 1 }"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()[REPLAYED_HEADER], "true");
    assert_eq!(response.json::<Value>().await.unwrap(), first);
    assert_eq!(handle.effect_count("k1"), 1);

    // Same key, other body or other route: refused, nothing committed.
    let reused = post(&double, "/bookings", Some("k1"), &json!({"a": 9})).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(
        reused.json::<Value>().await.unwrap(),
        json!({"error": "idempotency_key_reused"})
    );
    let elsewhere = post(&double, "/refunds", Some("k1"), &json!({"a": 1, "b": 2})).await;
    assert_eq!(elsewhere.status(), 422);

    // Requests without a key always commit.
    post(&double, "/bookings", None, &json!({})).await;
    post(&double, "/bookings", None, &json!({})).await;
    assert_eq!(handle.effect_total(), 3);
    assert_eq!(handle.effect_count("k1"), 1);
    assert_eq!(handle.request_count(), 6);
}

#[tokio::test]
async fn without_deduplication_every_request_commits() {
    let (double, handle) = ProviderDouble::start().await;
    handle.set_deduplication(false);
    let first: Value = post(&double, "/bookings", Some("k1"), &json!({}))
        .await
        .json()
        .await
        .unwrap();
    let second = post(&double, "/bookings", Some("k1"), &json!({})).await;
    assert!(second.headers().get(REPLAYED_HEADER).is_none());
    let second: Value = second.json().await.unwrap();
    assert_ne!(first["operation_id"], second["operation_id"]);
    assert_eq!(handle.effect_count("k1"), 2);
    assert_eq!(handle.effect_total(), 2);
}

#[tokio::test]
async fn a_client_chosen_operation_id_names_the_effect() {
    let (double, handle) = ProviderDouble::start().await;
    let answer: Value = http()
        .post(double.url("/bookings"))
        .header(OPERATION_ID_HEADER, "bk-k1")
        .header("idempotency-key", "k1")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["operation_id"], "bk-k1");
    assert_eq!(
        handle
            .operation("bk-k1")
            .unwrap()
            .idempotency_key
            .as_deref(),
        Some("k1")
    );
}

#[tokio::test]
async fn lookups_answer_committed_unknown_and_scripted_pending() {
    let (double, handle) = ProviderDouble::start().await;
    let answer: Value = post(&double, "/bookings", Some("k1"), &json!({"slot": 1}))
        .await
        .json()
        .await
        .unwrap();

    let committed = get_json(&double, "/operations/op_1").await;
    assert_eq!(
        committed,
        json!({"operation_id": "op_1", "state": "committed", "result": answer, "effect_count": 1})
    );
    let by_key = get_json(&double, "/operations?idempotency_key=k1").await;
    assert_eq!(by_key["state"], "committed");
    assert_eq!(by_key["operation_id"], "op_1");
    assert_eq!(by_key["idempotency_key"], "k1");

    let unknown = get_json(&double, "/operations/op_404").await;
    assert_eq!(
        unknown,
        json!({"operation_id": "op_404", "state": "unknown"})
    );
    let unknown_key = get_json(&double, "/operations?idempotency_key=nope").await;
    assert_eq!(unknown_key["state"], "unknown");

    handle.lookups_pending(2);
    assert_eq!(handle.pending_lookups_left(), 2);
    let mut cursors = Vec::new();
    for _ in 0..2 {
        let mut pending = get_json(&double, "/operations/op_1").await;
        let cursor = pending["cursor"].take();
        assert!(
            cursor.as_str().is_some_and(|c| c.starts_with("cursor_")),
            "{cursor}"
        );
        cursors.push(cursor);
        assert_eq!(
            pending,
            json!({"operation_id": "op_1", "state": "pending", "cursor": null})
        );
    }
    assert_ne!(
        cursors[0], cursors[1],
        "each pending answer has a cursor of its own"
    );
    assert_eq!(handle.pending_lookups_left(), 0);
    assert_eq!(
        get_json(&double, "/operations/op_1").await["state"],
        "committed"
    );

    // Percent-encoded ids are decoded.
    http()
        .post(double.url("/x"))
        .header(OPERATION_ID_HEADER, "a b/c")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        get_json(&double, "/operations/a%20b%2Fc").await["state"],
        "committed"
    );

    let missing = http().get(double.url("/operations")).send().await.unwrap();
    assert_eq!(missing.status(), 400);
    let wrong_method = http()
        .post(double.url("/operations/op_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(handle.effect_total(), 2, "lookups commit nothing");
}

/// A shaped lookup route that asks `lookup_pending()` shares the scripted count with
/// `/operations`: each `true` uses one, a shape that does not ask uses none, writes never do.
#[tokio::test]
async fn shaped_lookups_that_ask_use_the_scripted_pending_lookups() {
    let (double, handle) = ProviderDouble::start().await;
    handle.answer(
        "/tickets/*",
        |request| json!({ "pending": request.lookup_pending() }),
    );
    handle.answer("/plain", |_| json!({ "plain": true }));
    handle.answer(
        "/tickets",
        |request| json!({ "pending": request.lookup_pending() }),
    );
    post(&double, "/tickets", None, &json!({})).await;

    handle.lookups_pending(3);
    // A write asks and is told no, using nothing; a shape that does not ask uses nothing.
    let write: Value = post(&double, "/tickets", None, &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(write, json!({ "pending": false }));
    assert_eq!(get_json(&double, "/plain").await, json!({ "plain": true }));
    // Three pending answers in all, shared by the shaped route and `/operations`.
    assert_eq!(
        get_json(&double, "/tickets/1").await,
        json!({ "pending": true })
    );
    assert_eq!(
        get_json(&double, "/operations/op_1").await["state"],
        "pending"
    );
    assert_eq!(
        get_json(&double, "/tickets/1").await,
        json!({ "pending": true })
    );
    assert_eq!(
        get_json(&double, "/tickets/1").await,
        json!({ "pending": false })
    );
    assert_eq!(
        get_json(&double, "/operations/op_1").await["state"],
        "committed"
    );

    // `lookups_pending(0)` takes back what is left.
    handle.lookups_pending(5);
    handle.lookups_pending(0);
    assert_eq!(
        get_json(&double, "/tickets/1").await,
        json!({ "pending": false })
    );
}

#[tokio::test]
async fn status_faults_answer_without_effect_unless_asked_and_honour_counts() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::status(503).retry_after_secs(3).times(2));
    for _ in 0..2 {
        let response = post(&double, "/bookings", Some("k1"), &json!({})).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "3");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "injected_fault");
    }
    assert_eq!(handle.effect_total(), 0);
    let third = post(&double, "/bookings", Some("k1"), &json!({})).await;
    assert_eq!(third.status(), 201, "the fault applied twice only");
    assert_eq!(handle.effect_count("k1"), 1);

    handle.inject("/bookings", Fault::status(500).with_effect());
    let response = post(&double, "/bookings", Some("k2"), &json!({})).await;
    assert_eq!(response.status(), 500);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(handle.effect_count("k2"), 1, "committed, then failed");
    // The retry with the same key finds the committed effect.
    let retry = post(&double, "/bookings", Some("k2"), &json!({})).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(handle.effect_count("k2"), 1);
}

#[tokio::test]
async fn always_faults_last_until_cleared_and_routes_match_exact_then_pattern_then_star() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("*", Fault::status(502).always());
    handle.inject("/operations/*", Fault::status(429).always());
    handle.inject("/operations/op_9", Fault::status(404));
    let status = |path: &'static str| {
        let url = double.url(path);
        async move { http().get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("/operations/op_9").await, 404, "exact route first");
    assert_eq!(status("/operations/op_9").await, 429, "then the pattern");
    assert_eq!(status("/operations/op_1").await, 429);
    assert_eq!(
        status("/operations").await,
        429,
        "the prefix itself matches"
    );
    assert_eq!(status("/operationsx").await, 502, "a longer name does not");
    assert_eq!(status("/bookings").await, 502);
    assert_eq!(status("/bookings").await, 502, "always stays");
    handle.clear_faults();
    assert_eq!(status("/bookings").await, 200);
    assert_eq!(status("/operations/op_1").await, 200);
}

#[tokio::test]
async fn an_http_date_retry_after_is_sent_verbatim() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject(
        "/x",
        Fault::status(429).retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    let response = http().get(double.url("/x")).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(
        response.headers()["retry-after"],
        "Wed, 21 Oct 2015 07:28:00 GMT"
    );
}

#[tokio::test]
async fn a_delay_commits_first_so_a_client_that_gives_up_leaves_an_effect() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::delay(Duration::from_secs(5)));
    let started = std::time::Instant::now();
    let error = http()
        .post(double.url("/bookings"))
        .header("idempotency-key", "k1")
        .json(&json!({}))
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    assert!(started.elapsed() < Duration::from_secs(3));
    // Committed before the delay, not after it: the effect is there well before the 5 s
    // (the wait only covers a loaded machine that had not scheduled the double's thread yet).
    assert!(handle.wait_for_effects(1, Duration::from_secs(3)).await);
    assert_eq!(handle.effect_count("k1"), 1);

    // A delay that the client waits out answers normally.
    handle.inject("/slow", Fault::delay(Duration::from_millis(200)));
    let started = std::time::Instant::now();
    let response = http().get(double.url("/slow")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn a_delay_before_effect_commits_after_the_client_left() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject(
        "/bookings",
        Fault::delay_before_effect(Duration::from_millis(400)),
    );
    let error = http()
        .post(double.url("/bookings"))
        .header("idempotency-key", "k1")
        .json(&json!({}))
        .timeout(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    assert_eq!(handle.effect_total(), 0, "not yet");
    assert!(handle.wait_for_effects(1, Duration::from_secs(5)).await);
    assert_eq!(handle.effect_count("k1"), 1);
}

#[tokio::test]
async fn a_dropped_connection_gives_no_response_and_keeps_or_skips_the_effect() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::drop_connection());
    let error = http()
        .post(double.url("/bookings"))
        .header("idempotency-key", "k1")
        .json(&json!({}))
        .send()
        .await
        .unwrap_err();
    assert!(!error.is_connect() && !error.is_timeout(), "{error:?}");
    assert_eq!(handle.effect_count("k1"), 1, "committed before the drop");

    handle.inject("/bookings", Fault::drop_connection().without_effect());
    http()
        .post(double.url("/bookings"))
        .header("idempotency-key", "k2")
        .json(&json!({}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(handle.effect_count("k2"), 0);

    // The double keeps serving new connections.
    let replay = post(&double, "/bookings", Some("k1"), &json!({})).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(handle.effect_count("k1"), 1);
}

#[tokio::test]
async fn a_truncated_body_sends_the_status_then_breaks_off() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::truncated_body());
    let response = post(&double, "/bookings", Some("k1"), &json!({"slot": 1})).await;
    assert_eq!(response.status(), 201);
    let error = response.bytes().await.unwrap_err();
    assert!(
        error.is_body() || error.is_decode() || error.is_request(),
        "{error:?}"
    );
    assert_eq!(handle.effect_count("k1"), 1);
}

#[tokio::test]
async fn invalid_and_custom_bodies() {
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::invalid_body());
    let response = post(&double, "/bookings", Some("k1"), &json!({})).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.bytes().await.unwrap(), INVALID_BODY);
    assert_eq!(handle.effect_count("k1"), 1);

    handle.inject("/bookings", Fault::respond(200, r#"{"unexpected":true}"#));
    let response = post(&double, "/bookings", Some("k2"), &json!({})).await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"unexpected": true})
    );
    assert_eq!(handle.effect_count("k2"), 1, "a 2xx answer commits");

    handle.inject("/bookings", Fault::respond(418, "teapot"));
    let response = post(&double, "/bookings", Some("k3"), &json!({})).await;
    assert_eq!(response.status(), 418);
    assert_eq!(response.text().await.unwrap(), "teapot");
    assert_eq!(handle.effect_count("k3"), 0, "a non-2xx answer does not");

    handle.inject("/bookings", Fault::invalid_body().without_effect());
    post(&double, "/bookings", Some("k4"), &json!({})).await;
    assert_eq!(handle.effect_count("k4"), 0);
}

/// A `POST` with the given `authorization` header, if any.
async fn post_with(
    double: &ProviderDouble,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = http().post(double.url(path)).json(&json!({"slot": "9am"}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// `require_bearer`: a write without the token, or with another, is recorded, answered `401`
/// with `WWW-Authenticate: Bearer` and commits nothing; with the token it commits. Reads and
/// the double's own lookups are gated too.
#[tokio::test]
async fn a_required_bearer_token_gates_every_request() {
    let (double, handle) = ProviderDouble::start().await;
    handle.require_bearer("tok-right-1f2e");

    let without = post_with(&double, "/bookings", &[]).await;
    assert_eq!(without.status(), 401);
    assert_eq!(without.headers()["www-authenticate"], "Bearer");
    assert_eq!(without.headers()["x-request-id"], "req_1");
    assert_eq!(
        without.json::<Value>().await.unwrap(),
        json!({"error": "unauthorized"})
    );
    let wrong = post_with(
        &double,
        "/bookings",
        &[("authorization", "Bearer tok-right-1f2")],
    )
    .await;
    assert_eq!(wrong.status(), 401);
    let other_scheme = post_with(
        &double,
        "/bookings",
        &[("authorization", "Basic tok-right-1f2e")],
    )
    .await;
    assert_eq!(other_scheme.status(), 401);
    assert_eq!(handle.effect_total(), 0, "a refused write commits nothing");
    assert_eq!(handle.request_count(), 3, "refused requests are recorded");
    assert_eq!(
        handle
            .unauthorized_requests()
            .iter()
            .map(|r| r.sequence)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(handle.requests()[0].header("authorization"), None);

    let right = post_with(
        &double,
        "/bookings",
        &[("authorization", "Bearer tok-right-1f2e")],
    )
    .await;
    assert_eq!(right.status(), 201);
    assert!(right.headers().get("www-authenticate").is_none());
    assert_eq!(handle.effect_total(), 1);
    // The scheme's name in another case is the same scheme.
    let lower = post_with(
        &double,
        "/bookings",
        &[("authorization", "bearer tok-right-1f2e")],
    )
    .await;
    assert_eq!(lower.status(), 201);
    assert_eq!(handle.effect_total(), 2);
    assert_eq!(handle.unauthorized_requests().len(), 3);

    // Reads and operation lookups need the token as well.
    for path in ["/bookings", "/operations/op_1"] {
        let read = http().get(double.url(path)).send().await.unwrap();
        assert_eq!(read.status(), 401, "{path}");
        let read = http()
            .get(double.url(path))
            .bearer_auth("tok-right-1f2e")
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200, "{path}");
    }
}

/// `require_bearer_on`: only the route's requests need the token (a search that sends the
/// caller's credential beside writes that use none); the rest are answered as before, and a
/// requirement on every request still applies on top of it.
#[tokio::test]
async fn a_bearer_token_required_on_a_route_gates_that_route_only() {
    let (double, handle) = ProviderDouble::start().await;
    handle.require_bearer_on("GET /items", "tok-items");
    handle.require_bearer_on("GET /items", "tok-items-2");

    assert_eq!(post_with(&double, "/items", &[]).await.status(), 201);
    assert_eq!(post_with(&double, "/bookings", &[]).await.status(), 201);
    let get = |path: &'static str, token: Option<&'static str>| {
        let mut request = http().get(double.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(get("/items", None).await, 401);
    assert_eq!(
        get("/items", Some("tok-items")).await,
        401,
        "replaced by the later requirement on the route"
    );
    assert_eq!(get("/items", Some("tok-items-2")).await, 200);
    assert_eq!(get("/items/7", None).await, 200, "another path");
    assert_eq!(
        handle
            .unauthorized_requests()
            .iter()
            .map(|r| r.path.as_str())
            .collect::<Vec<_>>(),
        ["/items", "/items"]
    );

    handle.require_header("x-api-key", "key-all");
    assert_eq!(get("/items/7", None).await, 401, "the global one applies");
    let both = http()
        .get(double.url("/items"))
        .bearer_auth("tok-items-2")
        .header("x-api-key", "key-all")
        .send()
        .await
        .unwrap();
    assert_eq!(both.status(), 200);
    handle.clear_auth();
    assert_eq!(get("/items", None).await, 200);

    // On one header, the route's requirement overrides the one on every request for its
    // requests (a second `Authorization` could not be sent).
    handle.require_bearer("tok-all");
    handle.require_bearer_on("get /items", "tok-items");
    assert_eq!(get("/items", Some("tok-items")).await, 200);
    assert_eq!(get("/items", Some("tok-all")).await, 401);
    assert_eq!(get("/items/7", Some("tok-all")).await, 200);
    assert_eq!(get("/items/7", Some("tok-items")).await, 401);
}

/// A refused request takes no fault and no shaped answer: the fault waits for the next
/// authorized call. `clear_faults` keeps the requirement; `clear_auth` lifts it.
#[tokio::test]
async fn a_refused_request_uses_up_no_fault_and_survives_clear_faults() {
    let (double, handle) = ProviderDouble::start().await;
    handle.require_bearer("tok-9");
    handle.answer("*", |_| json!({"shaped": true}));
    handle.inject("POST /bookings", Fault::status(503));

    let refused = post_with(&double, "/bookings", &[]).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(
        refused.json::<Value>().await.unwrap(),
        json!({"error": "unauthorized"})
    );
    let faulted = post_with(&double, "/bookings", &[("authorization", "Bearer tok-9")]).await;
    assert_eq!(
        faulted.status(),
        503,
        "the fault waited for an authorized call"
    );
    assert_eq!(handle.effect_total(), 0);

    handle.inject("*", Fault::status(500).always());
    handle.clear_faults();
    assert_eq!(post_with(&double, "/bookings", &[]).await.status(), 401);
    let shaped = post_with(&double, "/bookings", &[("authorization", "Bearer tok-9")]).await;
    assert_eq!(shaped.status(), 201);
    assert_eq!(
        shaped.json::<Value>().await.unwrap(),
        json!({"shaped": true})
    );

    handle.clear_auth();
    assert_eq!(post_with(&double, "/bookings", &[]).await.status(), 201);
    assert_eq!(handle.effect_total(), 2);
    assert_eq!(
        handle.unauthorized_requests().len(),
        2,
        "lifting the requirement keeps the record"
    );
}

/// `require_header`, API-key style: the name is matched in any case, the value exactly, sent
/// once; it adds to a bearer requirement, and a later one on the same header replaces it.
#[tokio::test]
async fn a_required_header_gates_requests_alongside_the_bearer_token() {
    let (double, handle) = ProviderDouble::start().await;
    handle.require_header("X-Api-Key", "key-old");
    handle.require_header("x-api-key", "key-right");

    let without = post_with(&double, "/bookings", &[]).await;
    assert_eq!(without.status(), 401);
    assert!(
        without.headers().get("www-authenticate").is_none(),
        "no bearer requirement, no bearer challenge"
    );
    assert_eq!(
        post_with(&double, "/bookings", &[("x-api-key", "key-old")])
            .await
            .status(),
        401,
        "the later requirement replaced the earlier"
    );
    assert_eq!(
        post_with(&double, "/bookings", &[("x-api-key", "KEY-RIGHT")])
            .await
            .status(),
        401
    );
    let repeated = http()
        .post(double.url("/bookings"))
        .header("x-api-key", "key-right")
        .header("x-api-key", "key-right")
        .send()
        .await
        .unwrap();
    assert_eq!(repeated.status(), 401, "a repeated header is refused");
    assert_eq!(
        post_with(&double, "/bookings", &[("X-API-KEY", "key-right")])
            .await
            .status(),
        201
    );

    // Both requirements apply: the key alone now fails the bearer one.
    handle.require_bearer("tok-both");
    let key_only = post_with(&double, "/bookings", &[("x-api-key", "key-right")]).await;
    assert_eq!(key_only.status(), 401);
    assert_eq!(key_only.headers()["www-authenticate"], "Bearer");
    let token_only = post_with(
        &double,
        "/bookings",
        &[("authorization", "Bearer tok-both")],
    )
    .await;
    assert_eq!(token_only.status(), 401);
    assert!(token_only.headers().get("www-authenticate").is_none());
    assert_eq!(
        post_with(
            &double,
            "/bookings",
            &[
                ("x-api-key", "key-right"),
                ("authorization", "Bearer tok-both")
            ]
        )
        .await
        .status(),
        201
    );
    // A header requirement on `authorization` replaces the bearer one (Basic auth, say).
    handle.require_header("authorization", "Basic dXNlcjpwdw==");
    assert_eq!(
        post_with(
            &double,
            "/bookings",
            &[
                ("x-api-key", "key-right"),
                ("authorization", "Bearer tok-both")
            ]
        )
        .await
        .status(),
        401
    );
    assert_eq!(
        post_with(
            &double,
            "/bookings",
            &[
                ("x-api-key", "key-right"),
                ("authorization", "Basic dXNlcjpwdw==")
            ]
        )
        .await
        .status(),
        201
    );
    assert_eq!(handle.effect_total(), 3);

    handle.clear_auth();
    assert_eq!(post_with(&double, "/bookings", &[]).await.status(), 201);
    assert_eq!(handle.effect_total(), 4);
}

/// The required secrets show in no `Debug` of the handle, no `401` and no panic message; the
/// recorded request keeps the raw header for `header()` and redacts it in its own `Debug`.
#[tokio::test]
async fn required_secrets_never_show() {
    let (double, handle) = ProviderDouble::start().await;
    handle.require_bearer("canary-bearer-5a1c");
    handle.require_header("x-api-key", "canary-key-77d0");
    let debug = format!("{handle:?} {handle:#?} {double:?}");
    assert!(
        !debug.contains("canary-bearer") && !debug.contains("canary-key"),
        "{debug}"
    );
    assert!(
        debug.contains("authorization") && debug.contains("x-api-key"),
        "the handle names the required headers: {debug}"
    );

    let refused = post_with(
        &double,
        "/bookings",
        &[
            ("authorization", "Bearer canary-bearer-5a1c"),
            ("x-api-key", "canary-key-77d"),
        ],
    )
    .await;
    assert_eq!(refused.status(), 401);
    let headers = format!("{:?}", refused.headers());
    let body = refused.text().await.unwrap();
    for text in [&headers, &body] {
        assert!(
            !text.contains("canary-bearer") && !text.contains("canary-key"),
            "{text}"
        );
    }
    let recorded = &handle.unauthorized_requests()[0];
    assert_eq!(
        recorded.header("authorization"),
        Some("Bearer canary-bearer-5a1c")
    );
    assert!(!format!("{recorded:?}").contains("canary-"));

    // An invalid requirement panics without quoting the value.
    let panic_of = |require: &dyn Fn()| -> String {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(require))
            .expect_err("an invalid requirement panics");
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap()
    };
    for message in [
        panic_of(&|| handle.require_header("x-api-key", "canary-bad\nvalue")),
        panic_of(&|| handle.require_bearer("canary-bad\r\nvalue")),
        panic_of(&|| handle.require_bearer("")),
        panic_of(&|| handle.require_bearer(" canary-bad")),
        panic_of(&|| handle.require_header("x-api-key", "canary-bad ")),
    ] {
        assert!(message.contains("ProviderHandle::require_"), "{message}");
        assert!(!message.contains("canary-bad"), "{message}");
    }
    // The valid requirements still hold after the refused ones.
    assert_eq!(
        post_with(
            &double,
            "/bookings",
            &[
                ("authorization", "Bearer canary-bearer-5a1c"),
                ("x-api-key", "canary-key-77d0")
            ],
        )
        .await
        .status(),
        201
    );
}

#[tokio::test]
async fn wait_helpers_time_out_when_nothing_happens() {
    let (_double, handle) = ProviderDouble::start().await;
    assert!(!handle.wait_for_requests(1, Duration::from_millis(50)).await);
    assert!(!handle.wait_for_effects(1, Duration::from_millis(50)).await);
    assert!(handle.wait_for_effects(0, Duration::from_millis(50)).await);
}

#[tokio::test]
async fn dropping_the_double_stops_the_server_and_keeps_the_record() {
    let (double, handle) = ProviderDouble::start().await;
    post(&double, "/bookings", Some("k1"), &json!({})).await;
    let url = double.url("/bookings");
    assert!(handle.is_serving());
    drop(double);
    assert!(!handle.is_serving());
    let error = http().post(url).json(&json!({})).send().await.unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(handle.effect_count("k1"), 1);
    assert_eq!(handle.request_count(), 1);
}

#[tokio::test]
#[should_panic(expected = "the ProviderDouble was dropped, which stopped its server")]
async fn a_handle_whose_double_was_dropped_refuses_to_give_its_url() {
    // The mistake this catches: `_` drops the double at once, and every request of the test
    // would be refused far from here.
    let (_, provider) = ProviderDouble::start().await;
    let _ = provider.base_url();
}

#[test]
fn works_from_synchronous_code_while_the_caller_blocks() {
    let (double, handle) = ProviderDouble::start_blocking();
    let url = double.url("/bookings");
    // A blocking client on another thread, while this thread blocks on it.
    let status = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            http()
                .post(url)
                .json(&json!({}))
                .send()
                .await
                .unwrap()
                .status()
        })
    })
    .join()
    .unwrap();
    assert_eq!(status, 201);
    assert_eq!(handle.effect_total(), 1);
}

/// Set in the child process of [`state_survives_a_killed_client_process`]: the double's URL.
const CHILD_URL: &str = "PROVIDER_DOUBLE_CHILD_URL";

/// The child's role: post one booking and wait for an answer that the parent's double delays
/// until the parent kills this process.
async fn run_as_child(url: &str) -> ! {
    let result = http()
        .post(format!("{url}/bookings"))
        .header("idempotency-key", "crash-k1")
        .json(&json!({"slot": "9am"}))
        .send()
        .await;
    panic!("the parent kills this process before an answer arrives, got {result:?}");
}

/// A client process that dies mid-request leaves the effect and the record in the parent's
/// double. The test runs itself again as the child (this test binary, this test only, with
/// [`CHILD_URL`] set).
#[tokio::test]
async fn state_survives_a_killed_client_process() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        run_as_child(&url).await;
    }
    let (double, handle) = ProviderDouble::start().await;
    handle.inject("/bookings", Fault::delay(Duration::from_secs(60)));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "state_survives_a_killed_client_process",
            "--nocapture",
        ])
        .env(CHILD_URL, double.base_url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let committed = handle.wait_for_effects(1, Duration::from_secs(30)).await;
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(committed, "the child's request reached the double");
    assert!(!status.success(), "the child was killed, not finished");

    assert_eq!(handle.effect_count("crash-k1"), 1);
    let recorded = handle.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].json(), Some(json!({"slot": "9am"})));
    // The double still serves, and a retry under the same key finds the effect.
    let retry = post(
        &double,
        "/bookings",
        Some("crash-k1"),
        &json!({"slot": "9am"}),
    )
    .await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(handle.effect_count("crash-k1"), 1);
    assert_eq!(
        get_json(&double, "/operations/op_1").await["state"],
        "committed"
    );
}
