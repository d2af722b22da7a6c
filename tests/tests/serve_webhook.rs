//! Webhook receivers over HTTP: a provider's signed deliveries posted to a route served next to
//! the AIP binding, on the host's durable store. (Copies racing through replicas that share
//! PostgreSQL: `store_postgres.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::Host;
use aip_connector::model::{ConnectorFailure, ErrorCategory, ProtocolError};
use aip_connector::prelude::*;
use aip_connector::serve::{AipServer, BearerTokens, ServerConfig, http};
use aip_connector::store::{IdempotencyStore, MemoryStore, SharedStore};
use aip_connector::webhook::{
    StandardWebhooks, WebhookDelivery, WebhookReceiver, WebhookReceiverBuilder, WebhookSecret,
};
use serde_json::Value;
use tokio::sync::oneshot;

const PATH: &str = "/webhooks/calendar";

#[derive(Deserialize)]
struct BookingCreated {
    booking_id: String,
}

/// The connector the server hosts: the webhook route shares its listener and its store.
struct Calendar;

#[connector(id = "calendar")]
impl Calendar {
    /// Answers; the host needs a capability.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn ping(&self, _input: Ping) -> Result<Ping, ConnectorFailure> {
        Ok(Ping { n: 1 })
    }
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Ping {
    n: u32,
}

struct Running {
    base: String,
    bookings: Arc<std::sync::Mutex<Vec<String>>>,
    receiver: WebhookReceiver,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn start(store: SharedStore, max_body_bytes: usize) -> Running {
    start_configured(store, |receiver| receiver.max_body_bytes(max_body_bytes)).await
}

/// Like [`start`], the receiver configured by `configure`.
async fn start_configured(
    store: SharedStore,
    configure: impl FnOnce(WebhookReceiverBuilder) -> WebhookReceiverBuilder,
) -> Running {
    let host = Host::builder()
        .connector(Calendar)
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let bookings = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&bookings);
    let store: Arc<dyn IdempotencyStore> = store;
    let receiver = WebhookReceiver::builder("calendar-bookings", StandardWebhooks)
        .secret(WebhookSecret::standard("whsec_c2VjcmV0LWNhbmFyeQ==").unwrap())
        .store(store);
    let receiver = configure(receiver)
        .handler(move |delivery: WebhookDelivery| {
            let seen = Arc::clone(&seen);
            async move {
                let event: BookingCreated = delivery.json()?;
                seen.lock().unwrap().push(event.booking_id);
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    let server = AipServer::new(host, BearerTokens::new(), ServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shutdown, signal) = oneshot::channel::<()>();
    tokio::spawn(
        server.serve_with_routes(listener, receiver.router(PATH), async move {
            let _ = signal.await;
        }),
    );
    Running {
        base,
        bookings,
        receiver,
        shutdown: Some(shutdown),
    }
}

async fn post(
    running: &Running,
    headers: http::HeaderMap,
    body: &'static str,
) -> (http::StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{PATH}", running.base))
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.json::<Value>().await.unwrap();
    (status, body)
}

fn error_of(body: &Value) -> ProtocolError {
    serde_json::from_value(body["error"].clone()).unwrap()
}

const BOOKING: &str = r#"{"booking_id":"bk_1"}"#;

#[tokio::test]
async fn a_signed_delivery_is_taken_once_over_http() {
    let running = start(Arc::new(MemoryStore::new()), 1024).await;
    let headers = running
        .receiver
        .sign("msg_1", running.receiver.now_ms(), BOOKING.as_bytes());
    let (status, body) = post(&running, headers.clone(), BOOKING).await;
    assert_eq!(status, http::StatusCode::OK, "{body}");
    assert_eq!(body["delivery_id"], "msg_1");
    // The replay is answered as delivered, so the provider stops; the handler did not run.
    let (status, body) = post(&running, headers, BOOKING).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(body["replayed"], true);
    assert_eq!(*running.bookings.lock().unwrap(), ["bk_1"]);
}

#[tokio::test]
async fn a_body_streamed_past_the_limit_is_refused_without_being_read_whole() {
    let running = start(Arc::new(MemoryStore::new()), 64).await;
    let headers = running
        .receiver
        .sign("msg_1", running.receiver.now_ms(), b"{}");
    // No Content-Length: chunks, one past the limit.
    let chunks =
        futures_util::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 16])));
    let response = reqwest::Client::new()
        .post(format!("{}{PATH}", running.base))
        .headers(headers)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_of(&body).code, codes::WEBHOOK_PAYLOAD_TOO_LARGE);
    assert!(error_of(&body).message.contains("64 bytes"), "{body}");
}

/// An upload that stalls is answered `408 webhook.body_timeout` (retryable) once the receiver's
/// body timeout passes, and nothing runs (a hostile review found the route waiting for ever:
/// it reads the body before anything else can refuse the sender).
#[tokio::test]
async fn a_body_that_stops_arriving_is_answered_408_and_nothing_runs() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let running = start_configured(Arc::new(MemoryStore::new()), |receiver| {
        receiver.body_timeout(Duration::from_millis(200))
    })
    .await;
    assert_eq!(running.receiver.body_timeout(), Duration::from_millis(200));
    let address = running.base.trim_start_matches("http://");
    let mut stalled = tokio::net::TcpStream::connect(address).await.unwrap();
    let head =
        format!("POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{{\"booking");
    stalled.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buffer = [0u8; 1024];
        while !String::from_utf8_lossy(&answer).contains(codes::WEBHOOK_BODY_TIMEOUT) {
            let n = stalled.read(&mut buffer).await.unwrap();
            assert!(n > 0, "closed without an answer");
            answer.extend_from_slice(&buffer[..n]);
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "no answer after 10 s: {}",
        String::from_utf8_lossy(&answer)
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 5"),
        "{answer}"
    );
    assert!(running.bookings.lock().unwrap().is_empty());
}

#[tokio::test]
async fn forged_stale_and_oversized_deliveries_are_refused_with_their_status() {
    let running = start(Arc::new(MemoryStore::new()), 64).await;
    let now = running.receiver.now_ms();
    let signed = running.receiver.sign("msg_1", now, b"{}");
    let (status, body) = post(&running, signed, BOOKING).await;
    assert_eq!(status, http::StatusCode::UNAUTHORIZED);
    let error = error_of(&body);
    assert_eq!(error.code, codes::WEBHOOK_AUTHENTICATION_FAILED);
    assert_eq!(error.category, ErrorCategory::Auth);
    assert_eq!(error.retryable, Some(false));

    let stale = running
        .receiver
        .sign("msg_2", now - 10 * 60 * 1000, BOOKING.as_bytes());
    let (status, body) = post(&running, stale, BOOKING).await;
    assert_eq!(status, http::StatusCode::UNAUTHORIZED);
    assert_eq!(error_of(&body).code, codes::WEBHOOK_TIMESTAMP_SKEW);

    let (status, body) = post(&running, http::HeaderMap::new(), BOOKING).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&body).code, codes::WEBHOOK_MISSING_HEADER);

    const LARGE: &str =
        r#"{"booking_id":"bk_1","padding":"0123456789012345678901234567890123456789"}"#;
    let signed = running.receiver.sign("msg_3", now, LARGE.as_bytes());
    let (status, body) = post(&running, signed, LARGE).await;
    assert_eq!(status, http::StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_of(&body).code, codes::WEBHOOK_PAYLOAD_TOO_LARGE);
    assert!(running.bookings.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_delivery_the_handler_cannot_read_is_answered_500_and_can_be_sent_again() {
    let running = start(Arc::new(MemoryStore::new()), 1024).await;
    let signed = running
        .receiver
        .sign("msg_1", running.receiver.now_ms(), b"[]");
    let (status, body) = post(&running, signed.clone(), "[]").await;
    assert_eq!(status, http::StatusCode::INTERNAL_SERVER_ERROR);
    let error = error_of(&body);
    assert_eq!(error.code, codes::WEBHOOK_HANDLER_FAILED);
    assert_eq!(
        error.details.unwrap()["failure"]["code"],
        codes::WEBHOOK_INVALID_DELIVERY
    );
    // Released, not remembered: the same delivery fails the same way rather than as a replay.
    let (_, body) = post(&running, signed, "[]").await;
    assert_eq!(error_of(&body).code, codes::WEBHOOK_HANDLER_FAILED);
}

#[tokio::test]
async fn replay_protection_holds_across_a_restart_on_the_hosts_sqlite_store() {
    let path = std::env::temp_dir().join(format!(
        "aip-webhook-http-{}-{}.db",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let headers = {
        let store: SharedStore = Arc::new(aip_connector::store::SqliteStore::open(&path).unwrap());
        let running = start(store, 1024).await;
        let headers = running
            .receiver
            .sign("msg_1", running.receiver.now_ms(), BOOKING.as_bytes());
        let (status, _) = post(&running, headers.clone(), BOOKING).await;
        assert_eq!(status, http::StatusCode::OK);
        headers
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let store: SharedStore = Arc::new(aip_connector::store::SqliteStore::open(&path).unwrap());
    let running = start(store, 1024).await;
    let (status, body) = post(&running, headers, BOOKING).await;
    assert_eq!(
        (status, &body["replayed"]),
        (http::StatusCode::OK, &Value::Bool(true))
    );
    assert!(running.bookings.lock().unwrap().is_empty());
    drop(running);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_copies_of_one_delivery_run_the_handler_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let receiver = WebhookReceiver::builder("race", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler(move |_| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    let headers = receiver.sign("msg_1", receiver.now_ms(), b"{}");
    let copies: Vec<_> = (0..100)
        .map(|_| {
            let receiver = receiver.clone();
            let headers = headers.clone();
            tokio::spawn(async move {
                receiver
                    .receive(&headers, bytes_of("{}"))
                    .await
                    .map_err(|e| e.code())
            })
        })
        .collect();
    let mut taken = 0;
    for copy in copies {
        match copy.await.unwrap() {
            Ok(_) => taken += 1,
            Err(code) => assert!(
                [codes::WEBHOOK_IN_PROGRESS, codes::WEBHOOK_REPLAYED].contains(&code),
                "{code}"
            ),
        }
    }
    assert_eq!(taken, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

fn bytes_of(text: &'static str) -> aip_connector::webhook::Bytes {
    aip_connector::webhook::Bytes::from_static(text.as_bytes())
}

/// `serve_with_routes` answers a path nothing routes, and a route asked with a method it does
/// not serve, with an AIP error envelope as `serve` does: merging the webhook receiver took
/// them away (bare `404` and `405`, found by a wire trial).
#[tokio::test]
async fn merged_routes_keep_the_envelope_for_unknown_paths_and_methods() {
    let running = start(Arc::new(MemoryStore::new()), 1024).await;
    aip_connector_tests::assert_get_refused_with_envelopes(
        &running.base,
        &[
            ("/nope", 404, codes::RESOURCE_NOT_FOUND),
            (
                "/aip/v1/messages",
                405,
                codes::TRANSPORT_UNSUPPORTED_MESSAGE,
            ),
            (PATH, 405, codes::TRANSPORT_UNSUPPORTED_MESSAGE),
        ],
    )
    .await;
}
