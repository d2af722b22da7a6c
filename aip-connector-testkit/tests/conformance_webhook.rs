//! The `webhook_security` scenario on webhook receivers given to `ConformanceSuite::with_webhook`:
//! a receiver wired as the SDK intends passes; each broken wiring fails by the assertion that
//! states the broken promise.
//!
//! | Receiver | The flaw | Caught by |
//! |---|---|---|
//! | `bookings` on the given store | none | — (passes) |
//! | on a `MemoryStore` of its own | forgets delivery ids on restart | `replay_rejected` |
//! | `TrustingScheme` | accepts any delivery, signed or not | `signature_verified` |
//! | `UntimedScheme` | signs no timestamp | `skew_rejected` |
//! | no example body | nothing to deliver | every assertion, with the fix |
//! | Ed25519 private key (`whsk_`) | none | — (passes) |
//! | Ed25519 public key only (`whpk_`) | the suite cannot sign | every assertion, with the fix |

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::prelude::*;
use aip_connector::store::{IdempotencyStore, MemoryStore};
use aip_connector::webhook::{
    HeaderMap, SignatureScheme, SignedDelivery, StandardWebhooks, WebhookDelivery, WebhookError,
    WebhookReceiver, WebhookReceiverBuilder, WebhookSecret, header,
};
use aip_connector_testkit::conformance::{CheckStatus, ConformanceSuite, Scenario};

#[derive(Deserialize, JsonSchema)]
struct Ping {
    note: String,
}

#[derive(Serialize, JsonSchema)]
struct Pong {
    note: String,
}

/// A connector with a webhook endpoint for booking events.
struct Bookings;

#[connector(id = "bookings", webhooks = ["bookings"])]
impl Bookings {
    /// Echo a note.
    #[capability(
        id = "cap:bookings:ping",
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"note": "hello"}"#],
    )]
    async fn ping(&self, ping: Ping) -> Result<Pong, ConnectorFailure> {
        Ok(Pong { note: ping.note })
    }
}

#[derive(Deserialize)]
struct BookingCreated {
    booking_id: String,
}

/// The receiver as the connector's deployment builds it, on the store it is given.
fn bookings_receiver(
    scheme: impl SignatureScheme,
    handled: Arc<AtomicUsize>,
) -> WebhookReceiverBuilder {
    bookings_receiver_keyed(scheme, handled, "whsec_c2VjcmV0LWNhbmFyeQ==")
}

/// [`bookings_receiver`] with the key `key` (a Standard Webhooks key text).
fn bookings_receiver_keyed(
    scheme: impl SignatureScheme,
    handled: Arc<AtomicUsize>,
    key: &str,
) -> WebhookReceiverBuilder {
    WebhookReceiver::builder("bookings", scheme)
        .secret(WebhookSecret::standard(key).unwrap())
        .example(r#"{"booking_id":"bk_1"}"#)
        .handler(move |delivery: WebhookDelivery| {
            let handled = Arc::clone(&handled);
            async move {
                let event: BookingCreated = delivery.json()?;
                assert!(!event.booking_id.is_empty());
                handled.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ConnectorFailure>(())
            }
        })
}

fn webhook_check(suite: ConformanceSuite) -> aip_connector_testkit::conformance::CheckResult {
    let report = suite.run();
    eprintln!("{report}");
    report
        .check(&Scenario::WebhookSecurity.check_name())
        .unwrap()
        .clone()
}

#[test]
fn a_receiver_on_the_given_store_passes_webhook_security() {
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handled);
    let report = ConformanceSuite::new(|_env| Bookings)
        .with_webhook(move |_env, store| {
            bookings_receiver(StandardWebhooks, Arc::clone(&counted))
                .store(store)
                .build()
                .unwrap()
        })
        .run();
    eprintln!("{report}");
    // (`errors_uncertain_outcomes` fails: `ping` calls no provider. Not this file's subject.)
    for name in [
        "discovery.manifest",
        "discovery.profile_set",
        "discovery.profile_bindings",
        "connector.manifest",
        "connector.atomic_manifest_admission",
        "enterprise.capability_contract",
    ] {
        assert!(report.check(name).unwrap().passed(), "{name}: {report}");
    }
    let check = report
        .check(&Scenario::WebhookSecurity.check_name())
        .unwrap();
    assert_eq!(check.status, CheckStatus::Passed);
    assert_eq!(check.assertions.get("receivers_declared"), Some(&true));
    // The count covers `receivers_declared` too, not only the three required assertions.
    assert!(
        check.detail.starts_with("4 assertions held"),
        "{}",
        check.detail
    );
    assert!(
        check
            .artifacts
            .iter()
            .any(|a| a.starts_with("webhook:bookings:conformance-")),
        "{:?}",
        check.artifacts
    );
    // The genuine delivery, once: every forgery, skewed copy and replay was refused before it.
    assert_eq!(handled.load(Ordering::SeqCst), 1);
}

/// An Ed25519 private key, RFC 8032's first test vector's seed, and its public key.
const ED25519_PRIVATE: &str = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
const ED25519_PUBLIC: &str = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

#[test]
fn an_ed25519_receiver_built_with_the_private_key_passes_webhook_security() {
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handled);
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        move |_env, store| {
            bookings_receiver_keyed(StandardWebhooks, Arc::clone(&counted), ED25519_PRIVATE)
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_eq!(check.status, CheckStatus::Passed, "{}", check.detail);
    assert_eq!(handled.load(Ordering::SeqCst), 1);
}

#[test]
fn a_receiver_with_only_the_public_key_is_told_to_use_the_private_one() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            bookings_receiver_keyed(StandardWebhooks, Arc::default(), ED25519_PUBLIC)
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_only(
        &check,
        &["signature_verified", "skew_rejected", "replay_rejected"],
    );
    assert!(
        check.detail.contains("whsk_") && check.detail.contains("only Ed25519 public keys"),
        "{}",
        check.detail
    );
}

fn assert_only(check: &aip_connector_testkit::conformance::CheckResult, broken: &[&str]) {
    assert_eq!(check.status, CheckStatus::Failed, "{}", check.detail);
    for name in Scenario::WebhookSecurity.required_assertions() {
        assert_eq!(
            check.assertions.get(*name),
            Some(&!broken.contains(name)),
            "{name}: {}",
            check.detail
        );
    }
}

#[test]
fn a_receiver_that_forgets_on_restart_fails_replay_rejected() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, _store| {
            let own: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());
            bookings_receiver(StandardWebhooks, Arc::default())
                .store(own)
                .build()
                .unwrap()
        },
    ));
    assert_only(&check, &["replay_rejected"]);
    assert!(check.detail.contains("after a restart"), "{}", check.detail);
}

/// Accepts every delivery: the id from a header, no signature check at all.
struct TrustingScheme;

impl SignatureScheme for TrustingScheme {
    fn verify(
        &self,
        _secrets: &[WebhookSecret],
        headers: &HeaderMap,
        _body: &[u8],
    ) -> Result<SignedDelivery, WebhookError> {
        let id = headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("anonymous");
        let timestamp_ms = header(headers, "webhook-timestamp")
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .map(|s| s * 1000);
        let delivery = SignedDelivery::new(id);
        Ok(match timestamp_ms {
            Some(at) => delivery.with_timestamp_ms(at),
            None => delivery,
        })
    }

    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap {
        StandardWebhooks.sign(secret, delivery, body)
    }
}

#[test]
fn a_scheme_that_trusts_every_delivery_fails_signature_verified() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            bookings_receiver(TrustingScheme, Arc::default())
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_eq!(
        check.assertions.get("signature_verified"),
        Some(&false),
        "{}",
        check.detail
    );
    assert!(check.detail.contains("changed body"), "{}", check.detail);
}

/// Verifies a signature over the id and the body, with no timestamp: a captured delivery stays
/// valid forever.
struct UntimedScheme;

impl SignatureScheme for UntimedScheme {
    fn verify(
        &self,
        secrets: &[WebhookSecret],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<SignedDelivery, WebhookError> {
        let id = header(headers, "x-delivery")?;
        let signature = header(headers, "x-signature")?;
        let signature: Vec<u8> = (0..signature.len() / 2)
            .filter_map(|i| u8::from_str_radix(&signature[2 * i..2 * i + 2], 16).ok())
            .collect();
        if !secrets
            .iter()
            .any(|s| s.verify_hmac_sha256(&[id.as_bytes(), b".", body], &signature))
        {
            return Err(WebhookError::AuthenticationFailed);
        }
        Ok(SignedDelivery::new(id))
    }

    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap {
        let mac = secret
            .hmac_sha256(&[delivery.id.as_bytes(), b".", body])
            .expect("the receiver accepts shared secrets only");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        let mut headers = HeaderMap::new();
        headers.insert("x-delivery", delivery.id.parse().unwrap());
        headers.insert("x-signature", hex.parse().unwrap());
        headers
    }
}

#[test]
fn a_scheme_without_timestamps_fails_skew_rejected() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            bookings_receiver(UntimedScheme, Arc::default())
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_only(&check, &["skew_rejected"]);
    assert!(check.detail.contains("in the past"), "{}", check.detail);
}

#[test]
fn a_receiver_without_an_example_fails_with_the_fix() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            WebhookReceiver::builder("bookings", StandardWebhooks)
                .secret(WebhookSecret::new("s"))
                .store(store)
                .handler(|_| async { Ok::<_, ConnectorFailure>(()) })
                .build()
                .unwrap()
        },
    ));
    assert_only(
        &check,
        &["signature_verified", "skew_rejected", "replay_rejected"],
    );
    assert!(
        check.detail.contains("WebhookReceiverBuilder::example"),
        "{}",
        check.detail
    );
    // Not the hint about capability examples, which says nothing about receivers.
    assert!(!check.detail.contains("#[capability("), "{}", check.detail);
}

#[test]
fn a_receiver_the_manifest_does_not_publish_fails_receivers_declared() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            WebhookReceiver::builder("payments", StandardWebhooks)
                .secret(WebhookSecret::standard("whsec_c2VjcmV0LWNhbmFyeQ==").unwrap())
                .example(r#"{"booking_id":"bk_1"}"#)
                .handler(|_delivery: WebhookDelivery| async { Ok::<_, ConnectorFailure>(()) })
                .store(store)
                .build()
                .unwrap()
        },
    ));
    // The receiver itself is sound: only the declaration is wrong.
    assert_only(&check, &[]);
    assert_eq!(check.assertions.get("receivers_declared"), Some(&false));
    for expected in [
        "receiver(s) `payments` are not published by the manifest: add them to `#[connector(webhooks = [...])]`",
        "the manifest publishes webhook channel(s) `bookings` that no receiver given to `ConformanceSuite::with_webhook` serves",
    ] {
        assert!(check.detail.contains(expected), "{}", check.detail);
    }
}

/// The same connector with its receiver left out of the manifest.
struct Unpublished;

#[connector(id = "bookings")]
impl Unpublished {
    /// Echo a note.
    #[capability(
        id = "cap:bookings:ping",
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"note": "hello"}"#],
    )]
    async fn ping(&self, ping: Ping) -> Result<Pong, ConnectorFailure> {
        Ok(Pong { note: ping.note })
    }
}

/// A receiver given to the suite but not published by the manifest is checked, and
/// `receivers_declared` says it is missing from the manifest (before, the scenario did not
/// apply and the receiver went unmentioned).
#[test]
fn a_receiver_given_to_a_manifest_without_the_webhook_profile_is_still_checked() {
    let check = webhook_check(ConformanceSuite::new(|_env| Unpublished).with_webhook(
        |_env, store| {
            bookings_receiver(StandardWebhooks, Arc::default())
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_eq!(check.status, CheckStatus::Failed, "{}", check.detail);
    assert_eq!(check.assertions.get("receivers_declared"), Some(&false));
    assert!(
        check
            .detail
            .contains("receiver(s) `bookings` are not published by the manifest"),
        "{}",
        check.detail
    );
}

/// Found by a billing trial: the suite signed by the receiver's own clock, so a receiver whose
/// clock was years off passed, and would have refused every genuine delivery.
#[test]
fn a_receiver_whose_clock_is_off_fails_skew_rejected() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            // A year ahead: far outside any tolerance of the system clock.
            let clock = aip_connector::store::ManualClock::new();
            clock.advance(365 * 24 * 3_600_000);
            bookings_receiver(StandardWebhooks, Arc::default())
                .clock(Arc::new(clock))
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_only(&check, &["skew_rejected"]);
    assert!(
        check.detail.contains("off the system clock"),
        "{}",
        check.detail
    );
}

/// A long tolerance is secure against replays (the builder keeps the replay window at least
/// twice as long) but takes old deliveries: the check passes with a note.
#[test]
fn a_long_tolerance_passes_with_a_note() {
    let check = webhook_check(ConformanceSuite::new(|_env| Bookings).with_webhook(
        |_env, store| {
            bookings_receiver(StandardWebhooks, Arc::default())
                .tolerance(std::time::Duration::from_secs(2 * 3_600))
                .replay_window(std::time::Duration::from_secs(4 * 3_600))
                .store(store)
                .build()
                .unwrap()
        },
    ));
    assert_eq!(check.status, CheckStatus::Passed, "{}", check.detail);
    assert!(
        check
            .notes
            .iter()
            .any(|note| note.contains("Standard Webhooks suggests 5 minutes")),
        "{:?}",
        check.notes
    );
}
