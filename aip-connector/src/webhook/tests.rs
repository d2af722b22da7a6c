use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::store::ManualClock;

const SECRET: &str = "whsec_c2VjcmV0LWNhbmFyeQ==";

/// A receiver over `store` whose handler counts its runs and answers with `answer(n)` for the
/// n-th run (from 1).
fn receiver_with(
    id: &str,
    store: Arc<dyn IdempotencyStore>,
    answer: impl Fn(usize) -> Result<(), ConnectorFailure> + Send + Sync + 'static,
) -> (WebhookReceiver, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let answer = Arc::new(answer);
    let receiver = WebhookReceiver::builder(id, StandardWebhooks)
        .secret(WebhookSecret::standard(SECRET).unwrap())
        .store(store)
        .handler(move |_delivery: WebhookDelivery| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let answer = Arc::clone(&answer);
            async move { answer(n) }
        })
        .build()
        .unwrap();
    (receiver, runs)
}

fn receiver() -> (WebhookReceiver, Arc<AtomicUsize>) {
    receiver_with("bookings", Arc::new(MemoryStore::new()), |_| Ok(()))
}

async fn deliver(
    receiver: &WebhookReceiver,
    id: &str,
    body: &'static [u8],
) -> Result<WebhookReceipt, WebhookError> {
    let headers = receiver.sign(id, receiver.now_ms(), body);
    receiver.receive(&headers, Bytes::from_static(body)).await
}

fn retryable_failure() -> ConnectorFailure {
    ConnectorFailure::new(
        "acme.unavailable",
        "down",
        ErrorCategory::Temporary,
        ConnectorOperation::Ingestion,
        "acme",
    )
    .with_retryable(true)
}

#[tokio::test]
async fn a_signed_delivery_runs_the_handler_once_and_its_replay_is_refused() {
    let (receiver, runs) = receiver();
    let receipt = deliver(&receiver, "msg_1", b"{\"a\":1}").await.unwrap();
    assert_eq!(receipt.delivery_id, "msg_1");
    let replay = deliver(&receiver, "msg_1", b"{\"a\":1}").await.unwrap_err();
    assert!(matches!(&replay, WebhookError::Replayed { delivery_id } if delivery_id == "msg_1"));
    assert_eq!(replay.code(), codes::WEBHOOK_REPLAYED);
    // Over HTTP a replay is answered as delivered (the handler did not run again).
    assert_eq!(replay.status(), http::StatusCode::OK);
    assert!(!replay.is_retryable());
    // The same id with another (validly signed) body is a conflict, not a replay.
    let conflict = deliver(&receiver, "msg_1", b"{\"a\":2}").await.unwrap_err();
    assert_eq!(conflict.code(), codes::WEBHOOK_DELIVERY_CONFLICT);
    deliver(&receiver, "msg_2", b"{\"a\":1}").await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_forged_or_unsigned_delivery_never_reaches_the_handler() {
    let (receiver, runs) = receiver();
    let mut headers = receiver.sign("msg_1", receiver.now_ms(), b"{}");
    let forged = receiver
        .receive(&headers, Bytes::from_static(b"{\"admin\":true}"))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), codes::WEBHOOK_AUTHENTICATION_FAILED);
    assert_eq!(forged.status(), http::StatusCode::UNAUTHORIZED);
    headers.remove(StandardWebhooks::SIGNATURE_HEADER);
    let unsigned = receiver
        .receive(&headers, Bytes::from_static(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(unsigned.code(), codes::WEBHOOK_MISSING_HEADER);
    assert_eq!(unsigned.status(), http::StatusCode::BAD_REQUEST);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // A refused delivery claimed nothing: the genuine one still goes through.
    deliver(&receiver, "msg_1", b"{}").await.unwrap();
}

#[tokio::test]
async fn stale_and_future_timestamps_are_refused_either_side_of_the_tolerance() {
    let clock = Arc::new(ManualClock::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .clock(clock.clone())
        .tolerance(Duration::from_secs(60))
        .handler(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, ConnectorFailure>(()) }
        })
        .build()
        .unwrap();
    let signed_at = receiver.now_ms();
    let headers = receiver.sign("msg_1", signed_at, b"{}");
    // Captured and sent again two minutes later: stale.
    clock.advance(120_000);
    let stale = receiver
        .receive(&headers, Bytes::from_static(b"{}"))
        .await
        .unwrap_err();
    assert!(matches!(
        stale,
        WebhookError::TimestampSkew {
            ahead: false,
            tolerance_ms: 60_000,
            ..
        }
    ));
    assert_eq!(stale.code(), codes::WEBHOOK_TIMESTAMP_SKEW);
    assert_eq!(stale.status(), http::StatusCode::UNAUTHORIZED);
    // Signed in the future (a provider clock far ahead, or a pre-signed delivery).
    let ahead = receiver.sign("msg_2", receiver.now_ms() + 61_000, b"{}");
    let future = receiver
        .receive(&ahead, Bytes::from_static(b"{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(future, WebhookError::TimestampSkew { ahead: true, .. }),
        "{future}"
    );
    assert!(future.to_string().contains("ahead of"), "{future}");
    assert!(!future.to_string().contains("Unix seconds"), "{future}");
    // A timestamp written in milliseconds reads as decades ahead: the message says the unit.
    let in_millis = WebhookError::TimestampSkew {
        skew_ms: 1_794_830_285_086_380,
        ahead: true,
        tolerance_ms: 300_000,
    };
    assert!(
        in_millis
            .to_string()
            .ends_with("(the signed timestamp is in Unix seconds, not milliseconds)"),
        "{in_millis}"
    );
    // Within the tolerance, either way: taken (timestamps are signed in whole seconds).
    for (id, offset) in [("msg_3", -59_000_i64), ("msg_4", 59_000)] {
        let at = receiver.now_ms().saturating_add_signed(offset);
        let headers = receiver.sign(id, at, b"{}");
        receiver
            .receive(&headers, Bytes::from_static(b"{}"))
            .await
            .unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_anything_else() {
    let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .max_body_bytes(8)
        .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
        .build()
        .unwrap();
    let error = receiver
        .receive(&HeaderMap::new(), Bytes::from_static(b"123456789"))
        .await
        .unwrap_err();
    assert!(matches!(error, WebhookError::PayloadTooLarge { limit: 8 }));
    assert_eq!(error.code(), codes::WEBHOOK_PAYLOAD_TOO_LARGE);
    assert_eq!(error.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
}

/// Vouches for whatever id the `x-id` header names: lets the receiver's own id check be
/// reached with ids a real scheme's header parsing would already refuse.
struct IdFromHeader;

impl SignatureScheme for IdFromHeader {
    fn verify(
        &self,
        _secrets: &[WebhookSecret],
        headers: &HeaderMap,
        _body: &[u8],
    ) -> Result<SignedDelivery, WebhookError> {
        let id = headers
            .get("x-id")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        Ok(SignedDelivery {
            id,
            timestamp_ms: None,
        })
    }

    fn sign(&self, _secret: &WebhookSecret, delivery: &SignedDelivery, _body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-id",
            http::HeaderValue::from_bytes(delivery.id.as_bytes()).unwrap(),
        );
        headers
    }
}

#[tokio::test]
async fn a_blank_spaced_or_overlong_delivery_id_is_malformed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let receiver = WebhookReceiver::builder("ids", IdFromHeader)
        .secret(WebhookSecret::new("s"))
        .handler(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, ConnectorFailure>(()) }
        })
        .build()
        .unwrap();
    let long = "m".repeat(MAX_DELIVERY_ID_BYTES + 1);
    // " x" and "x" would be two keys for one delivery; a tab or a non-ASCII byte is no id.
    for id in ["", " x", "x ", "a b", "a\tb", "caf\u{e9}", long.as_str()] {
        let headers = receiver.sign(id, 0, b"{}");
        let error = receiver
            .receive(&headers, Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert_eq!(error.code(), codes::WEBHOOK_INVALID_DELIVERY, "{id:?}");
    }
    let longest = "m".repeat(MAX_DELIVERY_ID_BYTES);
    receiver
        .receive(
            &receiver.sign(&longest, 0, b"{}"),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failed_handler_releases_the_id_so_the_providers_retry_runs() {
    let (receiver, runs) = receiver_with("bookings", Arc::new(MemoryStore::new()), |n| {
        if n == 1 {
            Err(retryable_failure())
        } else {
            Ok(())
        }
    });
    let failed = deliver(&receiver, "msg_1", b"{}").await.unwrap_err();
    assert_eq!(failed.code(), codes::WEBHOOK_HANDLER_FAILED);
    assert!(failed.is_retryable());
    assert_eq!(failed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    let wire = failed.to_protocol_error();
    assert_eq!(
        wire.details.as_ref().unwrap()["failure"]["code"],
        "acme.unavailable"
    );
    assert_eq!(
        wire.source.as_ref().unwrap()["component"],
        "aip-connector.webhook"
    );
    deliver(&receiver, "msg_1", b"{}").await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        deliver(&receiver, "msg_1", b"{}").await.unwrap_err().code(),
        codes::WEBHOOK_REPLAYED
    );
    // A permanent failure is released too (the retry fails the same way) and answers 500.
    let (permanent, _) = receiver_with("other", Arc::new(MemoryStore::new()), |_| {
        Err(ConnectorFailure::permanent("acme.bad_event", "no", "acme"))
    });
    let failed = deliver(&permanent, "msg_1", b"{}").await.unwrap_err();
    assert!(!failed.is_retryable());
    assert_eq!(failed.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        deliver(&permanent, "msg_1", b"{}")
            .await
            .unwrap_err()
            .code(),
        codes::WEBHOOK_HANDLER_FAILED
    );
}

#[tokio::test]
async fn a_handler_past_its_timeout_or_panicking_releases_the_id() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let finished = Arc::new(AtomicUsize::new(0));
    let finishes = Arc::clone(&finished);
    let receiver = WebhookReceiver::builder("slow", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler_timeout(Duration::from_millis(50))
        .handler(move |_| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let finishes = Arc::clone(&finishes);
            async move {
                match n {
                    1 => tokio::time::sleep(Duration::from_millis(300)).await,
                    2 => panic!("handler bug"),
                    _ => {}
                }
                finishes.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    let timed_out = deliver(&receiver, "msg_1", b"{}").await.unwrap_err();
    assert_eq!(timed_out.code(), codes::WEBHOOK_HANDLER_TIMEOUT);
    assert!(timed_out.is_retryable());
    let panicked = deliver(&receiver, "msg_1", b"{}").await.unwrap_err();
    assert!(
        matches!(&panicked, WebhookError::HandlerFailed(f) if f.code == codes::CONNECTOR_RUNTIME_FAILURE),
        "{panicked}"
    );
    deliver(&receiver, "msg_1", b"{}").await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    // The timed-out handler was stopped, not left running beside its retry.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

/// A receiver whose handler blocks its thread for `blocked` (no `.await` an abort could land
/// at), then succeeds, counting its runs, with a handler timeout of 100 ms.
fn blocking_receiver(blocked: Duration) -> (WebhookReceiver, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let receiver = WebhookReceiver::builder("blocking", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler_timeout(Duration::from_millis(100))
        .handler(move |_| {
            let counted = Arc::clone(&counted);
            async move {
                std::thread::sleep(blocked);
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    (receiver, runs)
}

/// A handler that blocks past its timeout and then succeeds did its work: within the abort's
/// grace the delivery is answered as taken, and after it the success is still remembered once
/// the handler ends, so no retry runs it again (a hostile review saw both run twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_succeeds_after_its_timeout_is_not_run_again() {
    // Within the grace (1 s): the answer is the success.
    let (receiver, runs) = blocking_receiver(Duration::from_millis(300));
    deliver(&receiver, "msg_1", b"{}").await.unwrap();
    let replay = deliver(&receiver, "msg_1", b"{}").await.unwrap_err();
    assert_eq!(replay.code(), codes::WEBHOOK_REPLAYED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // After the grace: answered as timed out, the id held while it runs, then remembered.
    let (receiver, runs) = blocking_receiver(Duration::from_millis(1_600));
    let timed_out = deliver(&receiver, "msg_2", b"{}").await.unwrap_err();
    assert_eq!(timed_out.code(), codes::WEBHOOK_HANDLER_TIMEOUT);
    let meanwhile = deliver(&receiver, "msg_2", b"{}").await.unwrap_err();
    assert_eq!(meanwhile.code(), codes::WEBHOOK_IN_PROGRESS);
    tokio::time::timeout(Duration::from_secs(10), async {
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the blocked handler ends");
    // The success is written just after the handler returns.
    let mut answer = deliver(&receiver, "msg_2", b"{}").await;
    for _ in 0..50 {
        if !matches!(&answer, Err(e) if e.code() == codes::WEBHOOK_IN_PROGRESS) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer = deliver(&receiver, "msg_2", b"{}").await;
    }
    assert_eq!(answer.unwrap_err().code(), codes::WEBHOOK_REPLAYED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_duplicate_arriving_while_the_first_runs_is_told_to_retry() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let (g, s) = (Arc::clone(&gate), Arc::clone(&started));
    let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler(move |_| {
            let (g, s) = (Arc::clone(&g), Arc::clone(&s));
            async move {
                s.notify_one();
                g.notified().await;
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    let first = tokio::spawn({
        let receiver = receiver.clone();
        async move { deliver(&receiver, "msg_1", b"{}").await }
    });
    started.notified().await;
    let duplicate = deliver(&receiver, "msg_1", b"{}").await.unwrap_err();
    assert_eq!(duplicate.code(), codes::WEBHOOK_IN_PROGRESS);
    assert!(duplicate.is_retryable());
    gate.notify_one();
    first.await.unwrap().unwrap();
}

#[tokio::test]
async fn receivers_sharing_a_store_keep_their_ids_apart() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());
    let (a, _) = receiver_with("a", Arc::clone(&store), |_| Ok(()));
    // An id with the separator cannot make one receiver's key another's.
    let (a_colon, _) = receiver_with("a:b", Arc::clone(&store), |_| Ok(()));
    deliver(&a, "b:msg_1", b"{}").await.unwrap();
    deliver(&a_colon, "msg_1", b"{}").await.unwrap();
    deliver(&a_colon, "b:msg_1", b"{}").await.unwrap();
}

#[tokio::test]
async fn the_handler_sees_the_delivery_as_signed() {
    #[derive(serde::Deserialize)]
    struct Event {
        booking_id: String,
    }
    let seen = Arc::new(std::sync::Mutex::new(None));
    let keep = Arc::clone(&seen);
    let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler(move |delivery: WebhookDelivery| {
            let keep = Arc::clone(&keep);
            async move {
                let event: Event = delivery.json()?;
                let wrong = delivery.json::<Vec<u8>>().unwrap_err();
                assert_eq!(wrong.code, codes::WEBHOOK_INVALID_DELIVERY);
                *keep.lock().unwrap() = Some((
                    event.booking_id,
                    delivery.id().to_owned(),
                    delivery.receiver().to_owned(),
                    delivery.timestamp_ms().is_some(),
                    delivery.headers().contains_key("webhook-id"),
                ));
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    deliver(&receiver, "msg_1", b"{\"booking_id\":\"b1\"}")
        .await
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().clone().unwrap(),
        ("b1".into(), "msg_1".into(), "bookings".into(), true, true)
    );
}

/// A handler that logs `?delivery` prints no header value and no body: a provider may send a
/// credential beside its signature (found by a review).
#[tokio::test]
async fn a_deliverys_debug_shows_no_header_value_and_no_body() {
    let shown = Arc::new(std::sync::Mutex::new(String::new()));
    let keep = Arc::clone(&shown);
    let receiver = WebhookReceiver::builder("bookings", StandardWebhooks)
        .secret(WebhookSecret::new("s"))
        .handler(move |delivery: WebhookDelivery| {
            let keep = Arc::clone(&keep);
            async move {
                *keep.lock().unwrap() = format!("{delivery:?}");
                Ok::<_, ConnectorFailure>(())
            }
        })
        .build()
        .unwrap();
    let body: &[u8] = b"{\"card\":\"body-canary\"}";
    let mut headers = receiver.sign("msg_1", receiver.now_ms(), body);
    headers.insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_static("Bearer header-canary"),
    );
    receiver
        .receive(&headers, Bytes::from_static(body))
        .await
        .unwrap();
    let shown = shown.lock().unwrap().clone();
    assert!(
        shown.contains("msg_1") && shown.contains("authorization"),
        "{shown}"
    );
    for secret in ["header-canary", "body-canary", "v1,"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
}

/// Found by an author trial: a function building a receiver from a configured key needed a
/// boxed error, as the key's parse and the build failed with two types.
#[test]
fn a_receiver_built_from_a_key_text_returns_one_error_type() {
    fn receiver_from(key: &str) -> Result<WebhookReceiver, WebhookConfigError> {
        WebhookReceiver::builder("push", StandardWebhooks)
            .secret(WebhookSecret::standard(key)?)
            .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
            .build()
    }
    assert!(receiver_from("whsec_c2VjcmV0LWJ5dGVz").is_ok());
    let refused = receiver_from("not-a-key").unwrap_err();
    assert_eq!(refused, WebhookConfigError::InvalidSecret(InvalidSecret));
    assert_eq!(refused.to_string(), InvalidSecret.to_string());
}

#[test]
fn an_incomplete_or_inconsistent_receiver_does_not_build() {
    let builder = || {
        WebhookReceiver::builder("r", StandardWebhooks)
            .secret(WebhookSecret::new("s"))
            .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
    };
    assert!(builder().build().is_ok());
    assert_eq!(
        WebhookReceiver::builder(" ", StandardWebhooks)
            .secret(WebhookSecret::new("s"))
            .build()
            .unwrap_err(),
        WebhookConfigError::BlankId
    );
    assert_eq!(
        WebhookReceiver::builder("r", StandardWebhooks)
            .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
            .build()
            .unwrap_err(),
        WebhookConfigError::NoSecret("r".into())
    );
    assert_eq!(
        WebhookReceiver::builder("r", StandardWebhooks)
            .secret(WebhookSecret::new("s"))
            .build()
            .unwrap_err(),
        WebhookConfigError::NoHandler("r".into())
    );
    let short = builder()
        .tolerance(Duration::from_secs(600))
        .replay_window(Duration::from_secs(900))
        .build()
        .unwrap_err();
    assert!(matches!(
        short,
        WebhookConfigError::ReplayWindowTooShort { .. }
    ));
    assert!(short.to_string().contains("twice the tolerance"), "{short}");
    for (setting, built) in [
        ("tolerance", builder().tolerance(Duration::ZERO).build()),
        // Checked in the unit it is used in: half a millisecond is none.
        (
            "tolerance",
            builder().tolerance(Duration::from_micros(500)).build(),
        ),
        (
            "handler_timeout",
            builder().handler_timeout(Duration::ZERO).build(),
        ),
        (
            "body_timeout",
            builder().body_timeout(Duration::ZERO).build(),
        ),
        ("max_body_bytes", builder().max_body_bytes(0).build()),
    ] {
        assert_eq!(
            built.unwrap_err(),
            WebhookConfigError::Zero {
                receiver: "r".into(),
                setting
            }
        );
    }
}

/// A receiver holding the provider's Ed25519 public key takes what its private key signed, and
/// cannot sign itself; a scheme of shared secrets refuses an Ed25519 key when it is built.
#[tokio::test]
async fn an_ed25519_public_key_verifies_and_an_hmac_scheme_refuses_it() {
    const PRIVATE: &str = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
    const PUBLIC: &str = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
    let runs = Arc::new(AtomicUsize::new(0));
    let build = |key: &str| {
        let counted = Arc::clone(&runs);
        WebhookReceiver::builder("payments", StandardWebhooks)
            .secret(WebhookSecret::standard(key).unwrap())
            .handler(move |_delivery: WebhookDelivery| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, ConnectorFailure>(()) }
            })
            .build()
            .unwrap()
    };
    let provider = build(PRIVATE);
    let production = build(PUBLIC);
    assert!(provider.can_sign() && !production.can_sign());
    let body: &'static [u8] = b"{\"charge\":\"ch_1\"}";
    let headers = provider.sign("msg_1", production.now_ms(), body);
    production
        .receive(&headers, Bytes::from_static(body))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let forged = production
        .receive(&headers, Bytes::from_static(b"{\"charge\":\"ch_2\"}"))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), codes::WEBHOOK_AUTHENTICATION_FAILED);
    // A public key cannot sign: `sign` says how to build a receiver that can.
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        production.sign("msg_2", production.now_ms(), body)
    }))
    .unwrap_err();
    let message = refused.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("holds only Ed25519 public keys") && message.contains("whsk_"),
        "{message}"
    );

    let refused = WebhookReceiver::builder("payments", IdFromHeader)
        .secret(WebhookSecret::standard(PUBLIC).unwrap())
        .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        WebhookConfigError::UnsupportedKey("payments".into())
    );
    assert!(refused.to_string().contains("v1a"), "{refused}");
}

#[test]
fn no_debug_output_shows_the_secret() {
    let receiver = WebhookReceiver::builder("r", StandardWebhooks)
        .secret(WebhookSecret::standard(SECRET).unwrap())
        .handler(|_| async { Ok::<_, ConnectorFailure>(()) });
    let builder = format!("{receiver:?}");
    let built = format!("{:?}", receiver.build().unwrap());
    for text in [builder, built] {
        assert!(!text.contains("canary") && !text.contains("c2Vj"), "{text}");
    }
}

#[test]
fn every_error_has_its_code_category_and_retry_flag() {
    let cases: Vec<(WebhookError, &str, ErrorCategory, bool)> = vec![
        (
            WebhookError::MissingHeader("x"),
            codes::WEBHOOK_MISSING_HEADER,
            ErrorCategory::Permanent,
            false,
        ),
        (
            WebhookError::InvalidDelivery("x".into()),
            codes::WEBHOOK_INVALID_DELIVERY,
            ErrorCategory::Permanent,
            false,
        ),
        (
            WebhookError::AuthenticationFailed,
            codes::WEBHOOK_AUTHENTICATION_FAILED,
            ErrorCategory::Auth,
            false,
        ),
        (
            WebhookError::TimestampSkew {
                skew_ms: 1,
                ahead: false,
                tolerance_ms: 0,
            },
            codes::WEBHOOK_TIMESTAMP_SKEW,
            ErrorCategory::Auth,
            false,
        ),
        (
            WebhookError::PayloadTooLarge { limit: 1 },
            codes::WEBHOOK_PAYLOAD_TOO_LARGE,
            ErrorCategory::Permanent,
            false,
        ),
        (
            WebhookError::Replayed {
                delivery_id: "m".into(),
            },
            codes::WEBHOOK_REPLAYED,
            ErrorCategory::Policy,
            false,
        ),
        (
            WebhookError::InProgress {
                delivery_id: "m".into(),
            },
            codes::WEBHOOK_IN_PROGRESS,
            ErrorCategory::Temporary,
            true,
        ),
        (
            WebhookError::DeliveryConflict {
                delivery_id: "m".into(),
            },
            codes::WEBHOOK_DELIVERY_CONFLICT,
            ErrorCategory::Policy,
            false,
        ),
        (
            WebhookError::HandlerFailed(retryable_failure()),
            codes::WEBHOOK_HANDLER_FAILED,
            ErrorCategory::Temporary,
            true,
        ),
        (
            WebhookError::HandlerTimeout {
                timeout: Duration::from_secs(1),
            },
            codes::WEBHOOK_HANDLER_TIMEOUT,
            ErrorCategory::Temporary,
            true,
        ),
        (
            WebhookError::StorageUnavailable(StoreError::Unavailable("down".into())),
            codes::WEBHOOK_STORAGE_UNAVAILABLE,
            ErrorCategory::Temporary,
            true,
        ),
    ];
    for (error, code, category, retryable) in cases {
        assert_eq!(error.code(), code);
        assert_eq!(error.category(), category, "{code}");
        assert_eq!(error.is_retryable(), retryable, "{code}");
        let wire = error.to_protocol_error();
        assert_eq!(
            (wire.code.as_str(), wire.retryable),
            (code, Some(retryable))
        );
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn replay_protection_survives_a_restart_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("aip-webhook-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let body = b"{\"a\":1}";
    let headers = {
        let store = Arc::new(crate::store::SqliteStore::open(&path).unwrap());
        let (receiver, runs) = receiver_with("bookings", store, |_| Ok(()));
        let headers = receiver.sign("msg_1", receiver.now_ms(), body);
        receiver
            .receive(&headers, Bytes::from_static(body))
            .await
            .unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        headers
    };
    // A new process: the store reopened from its file.
    let store = Arc::new(crate::store::SqliteStore::open(&path).unwrap());
    let (receiver, runs) = receiver_with("bookings", store, |_| Ok(()));
    let replay = receiver
        .receive(&headers, Bytes::from_static(body))
        .await
        .unwrap_err();
    assert_eq!(replay.code(), codes::WEBHOOK_REPLAYED);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(receiver);
    let _ = std::fs::remove_dir_all(&dir);
}
