//! `AipClient` against servers that misbehave (found by a hostile audit): what it reads is
//! bounded, what it is answered must be about what it asked, streams are in order, and nothing
//! waits for ever unless asked to.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::ids::ActionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, Envelope, MessageBody, StreamChunk, StreamChunkKind,
};
use aip_connector::serve::server::MESSAGES_PATH;
use aip_connector::serve::{AipClient, ClientError};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Serves `answer` (given the posted envelope) at the messages path; returns the base URL.
async fn impostor<F>(answer: F) -> String
where
    F: Fn(Value) -> Response + Clone + Send + Sync + 'static,
{
    let router = axum::Router::new().route(
        MESSAGES_PATH,
        axum::routing::post(move |body: String| {
            let answer = answer.clone();
            async move { answer(serde_json::from_str(&body).unwrap_or(Value::Null)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

/// The action id of a posted action envelope.
fn posted_id(envelope: &Value) -> ActionId {
    serde_json::from_value(envelope["body"]["action"]["id"].clone()).unwrap()
}

/// A server that accepts connections and never answers; its base URL.
async fn silent_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    base
}

fn json_response(status: StatusCode, body: &Envelope) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(body).unwrap(),
    )
        .into_response()
}

fn completed(id: ActionId) -> Envelope {
    Envelope::new(MessageBody::ActionResult(Box::new(
        ActionResult::completed(id, json!({ "ok": true })),
    )))
}

/// An SSE body of `chunks` as `data:` events, then `tail` as it is.
fn sse(chunks: &[StreamChunk], tail: &str) -> Response {
    let mut body = String::new();
    for chunk in chunks {
        let envelope = Envelope::new(MessageBody::StreamChunk(chunk.clone()));
        body.push_str(&format!(
            "event: stream_chunk\ndata: {}\n\n",
            serde_json::to_string(&envelope).unwrap()
        ));
    }
    body.push_str(tail);
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn chunk(id: &ActionId, sequence: u64, kind: StreamChunkKind, data: Value) -> StreamChunk {
    StreamChunk {
        action_id: id.clone(),
        sequence,
        kind,
        data: Some(data),
        part: None,
    }
}

fn done(id: &ActionId, sequence: u64) -> StreamChunk {
    let result = ActionResult::completed(id.clone(), json!({ "ok": true }));
    chunk(
        id,
        sequence,
        StreamChunkKind::Done,
        serde_json::to_value(result).unwrap(),
    )
}

fn action() -> Action {
    Action::new("cap:desk:echo", json!({ "text": "x" }))
}

fn unexpected(error: &ClientError) -> &str {
    match error {
        ClientError::UnexpectedResponse(what) => what,
        other => panic!("wanted an unexpected response, got {other:?}"),
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_without_reading_it_all() {
    let base = impostor(|_| " ".repeat(64 * 1024).into_response()).await;
    let error = AipClient::new(base)
        .max_response_bytes(1024)
        .invoke(action())
        .await
        .unwrap_err();
    assert!(
        unexpected(&error).contains("limit of 1024 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let elsewhere_hits = Arc::new(AtomicUsize::new(0));
    let hits = elsewhere_hits.clone();
    let elsewhere = impostor(move |envelope| {
        hits.fetch_add(1, Ordering::SeqCst);
        json_response(StatusCode::OK, &completed(posted_id(&envelope)))
    })
    .await;
    let base = impostor(move |_| {
        (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, format!("{elsewhere}{MESSAGES_PATH}"))],
        )
            .into_response()
    })
    .await;
    let error = AipClient::new(base).invoke(action()).await.unwrap_err();
    assert!(unexpected(&error).contains("307"), "{error}");
    assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_result_about_another_action_is_refused() {
    let base = impostor(|_| json_response(StatusCode::OK, &completed(ActionId::new()))).await;
    let error = AipClient::new(base).invoke(action()).await.unwrap_err();
    assert!(
        unexpected(&error).contains("answered about action"),
        "{error}"
    );
}

#[tokio::test]
async fn a_result_with_an_error_status_is_refused() {
    let base = impostor(|envelope| {
        json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &completed(posted_id(&envelope)),
        )
    })
    .await;
    let error = AipClient::new(base).invoke(action()).await.unwrap_err();
    assert!(unexpected(&error).contains("500"), "{error}");
}

#[tokio::test]
async fn stream_chunks_out_of_sequence_or_of_another_action_are_refused() {
    let base = impostor(|envelope| {
        let id = posted_id(&envelope);
        sse(
            &[
                chunk(&id, 5, StreamChunkKind::Data, json!(1)),
                chunk(&id, 5, StreamChunkKind::Data, json!(2)),
            ],
            "",
        )
    })
    .await;
    let mut stream = AipClient::new(base).invoke_stream(action()).await.unwrap();
    let error = stream.next().await.unwrap_err();
    assert!(
        unexpected(&error).contains("chunk 5 after chunk 5"),
        "{error}"
    );

    let base = impostor(|_| {
        let other = ActionId::new();
        sse(&[chunk(&other, 0, StreamChunkKind::Data, json!(1))], "")
    })
    .await;
    let mut stream = AipClient::new(base).invoke_stream(action()).await.unwrap();
    let error = stream.next().await.unwrap_err();
    assert!(
        unexpected(&error).contains("in the stream of action"),
        "{error}"
    );
}

#[tokio::test]
async fn what_follows_the_terminal_chunk_cannot_lose_the_result() {
    let base = impostor(|envelope| {
        let id = posted_id(&envelope);
        sse(
            &[chunk(&id, 0, StreamChunkKind::Data, json!(1)), done(&id, 1)],
            "data: not an envelope\n\n",
        )
    })
    .await;
    let stream = AipClient::new(base).invoke_stream(action()).await.unwrap();
    let result = stream.result().await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Completed);
}

#[tokio::test]
async fn a_stream_request_answered_with_the_result_itself_yields_it() {
    let base =
        impostor(|envelope| json_response(StatusCode::OK, &completed(posted_id(&envelope)))).await;
    let mut stream = AipClient::new(base).invoke_stream(action()).await.unwrap();
    let terminal = stream.next().await.unwrap().expect("one terminal chunk");
    assert_eq!(terminal.kind, StreamChunkKind::Done);
    assert!(stream.next().await.unwrap().is_none());
}

#[tokio::test]
async fn an_event_without_an_end_is_bounded() {
    let base = impostor(|_| sse(&[], &format!("data: {}", "x".repeat(64 * 1024)))).await;
    let mut stream = AipClient::new(base)
        .max_response_bytes(4096)
        .invoke_stream(action())
        .await
        .unwrap();
    let error = stream.next().await.unwrap_err();
    assert!(
        unexpected(&error).contains("limit of 4096 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn a_stream_of_keep_alives_ends_at_the_stream_timeout() {
    let router = axum::Router::new().route(
        MESSAGES_PATH,
        axum::routing::post(|| async {
            let beats = futures_util::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok::<_, std::io::Error>(": keep-alive\n\n"), ()))
            });
            let mut response = axum::body::Body::from_stream(beats).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let mut stream = AipClient::new(base)
        .stream_timeout(Some(Duration::from_millis(300)))
        .invoke_stream(action())
        .await
        .unwrap();
    let error = stream.next().await.unwrap_err();
    assert!(matches!(error, ClientError::TimedOut(_)), "{error:?}");
    assert_eq!(error.to_protocol_error().code, codes::TRANSPORT_TIMEOUT);
}

#[tokio::test]
async fn a_unary_call_ends_at_the_call_timeout() {
    let error = AipClient::new(silent_server().await)
        .call_timeout(Some(Duration::from_millis(200)))
        .invoke(action())
        .await
        .unwrap_err();
    match &error {
        ClientError::Unreachable(source) => assert!(source.is_timeout(), "{source:?}"),
        other => panic!("wanted a timeout, got {other:?}"),
    }
    // The same code and category as the server's own timeout, and the stream's.
    let protocol = error.to_protocol_error();
    assert_eq!(protocol.code, codes::TRANSPORT_TIMEOUT);
    assert_eq!(
        protocol.category,
        aip_connector::model::ErrorCategory::Temporary
    );
}

#[test]
fn the_client_never_shows_a_password_in_its_url() {
    let client = AipClient::new("http://ada:pw-canary@127.0.0.1:1");
    let shown = format!("{client:?}");
    assert!(!shown.contains("pw-canary"), "{shown}");
    assert!(shown.contains("127.0.0.1:1"), "{shown}");
}

/// Found by a review: the stream timeout did not cover the wait for the response's headers.
#[tokio::test]
async fn the_stream_timeout_covers_a_server_that_never_answers() {
    let error = AipClient::new(silent_server().await)
        .stream_timeout(Some(Duration::from_millis(200)))
        .invoke_stream(action())
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::TimedOut(_)), "{error:?}");
}
