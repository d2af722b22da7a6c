//! `webhook_security`: signature verification, clock-skew and replay rejection of inbound
//! webhooks (`aip.http.webhook.v1`), on the receivers given to
//! [`ConformanceSuite::with_webhook`](crate::conformance::ConformanceSuite::with_webhook).
//!
//! For each receiver, with its first example body, signed as the provider signs it:
//! - `signature_verified`: the genuine delivery is taken; the same headers over a changed body,
//!   and the body without any headers, are refused, and neither claimed the delivery id (the
//!   genuine delivery under that id is taken afterwards);
//! - `skew_rejected`: copies signed further in the past and in the future than the receiver's
//!   tolerance are refused `webhook.timestamp_skew`;
//! - `replay_rejected`: the genuine delivery sent again is refused `webhook.replayed`, by the
//!   same receiver and by one built anew on the store reopened from its file (a restart).
//!
//! Beyond upstream's assertions, `receivers_declared`: the receivers given to the suite are
//! exactly those the manifest publishes as webhook channels (`#[connector(webhooks = [...])]`),
//! so a gateway's view and the deployment agree.

use aip_connector::codes;
use aip_connector::ids::ActionId;
use aip_connector::webhook::{Bytes, HeaderMap, WebhookError, WebhookReceiver};

use crate::conformance::{Evidence, Harness};

const SIGNATURE: &str = "signature_verified";
const SKEW: &str = "skew_rejected";
const REPLAY: &str = "replay_rejected";
const DECLARED: &str = "receivers_declared";

/// A tolerance past which the scenario notes that old deliveries are taken.
const LONG_TOLERANCE_MS: u64 = 3_600_000;

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let receivers = h.webhook_receivers(false).await;
    if receivers.is_empty() {
        evidence.artifact(format!("manifest:{}", h.definition().id));
        let why = || {
            "the manifest lists `aip.http.webhook.v1` but the suite has no webhook receiver: give the connector's receivers to `ConformanceSuite::with_webhook` (or `conformance_tests!(suite = …)`)".to_owned()
        };
        for assertion in [SIGNATURE, SKEW, REPLAY] {
            evidence.assert(assertion, false, why);
        }
        return evidence;
    }
    declared(h, &receivers, &mut evidence);
    let restarted = h.webhook_receivers(true).await;
    for (receiver, after_restart) in receivers.iter().zip(&restarted) {
        check(receiver, after_restart, &mut evidence).await;
    }
    evidence
}

/// `receivers_declared`: the suite's receivers and the manifest's webhook channels are the same
/// set of ids.
fn declared(h: &Harness, receivers: &[WebhookReceiver], evidence: &mut Evidence) {
    let manifest = h.definition().manifest();
    let channels = aip_connector::discovery::webhook_receiver_ids(&manifest);
    let undeclared: Vec<&str> = receivers
        .iter()
        .map(WebhookReceiver::id)
        .filter(|id| !channels.contains(id))
        .collect();
    let unserved: Vec<&str> = channels
        .iter()
        .copied()
        .filter(|id| !receivers.iter().any(|r| r.id() == *id))
        .collect();
    evidence.assert(DECLARED, undeclared.is_empty() && unserved.is_empty(), || {
        let mut problems = Vec::new();
        if !undeclared.is_empty() {
            problems.push(format!(
                "receiver(s) {} are not published by the manifest: add them to `#[connector(webhooks = [...])]` (or `ConnectorBuilder::webhook`)",
                quoted(&undeclared)
            ));
        }
        if !unserved.is_empty() {
            problems.push(format!(
                "the manifest publishes webhook channel(s) {} that no receiver given to `ConformanceSuite::with_webhook` serves",
                quoted(&unserved)
            ));
        }
        problems.join("; ")
    });
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The outcome of a delivery in words, for the report.
fn outcome(result: &Result<impl std::fmt::Debug, WebhookError>) -> String {
    match result {
        Ok(_) => "it was taken".to_owned(),
        Err(error) => format!("it was refused `{}`: {error}", error.code()),
    }
}

async fn check(
    receiver: &WebhookReceiver,
    after_restart: &WebhookReceiver,
    evidence: &mut Evidence,
) {
    let name = receiver.id().to_owned();
    let Some(body) = receiver.examples().first().cloned() else {
        evidence.artifact(format!("webhook:{name}"));
        // A note, not `no_example`: that one's hint is about capability examples.
        evidence.note(format!(
            "webhook receiver `{name}` declares no example body: add one with `WebhookReceiverBuilder::example`"
        ));
        for assertion in [SIGNATURE, SKEW, REPLAY] {
            evidence.assert(assertion, false, || {
                format!("receiver `{name}` has no example body to deliver")
            });
        }
        return;
    };
    if !receiver.can_sign() {
        evidence.artifact(format!("webhook:{name}"));
        for assertion in [SIGNATURE, SKEW, REPLAY] {
            evidence.assert(assertion, false, || {
                format!(
                    "receiver `{name}` holds only Ed25519 public keys, so the suite cannot sign deliveries for it: build the receiver you give the suite with the provider's private key (`WebhookSecret::standard(\"whsk_…\")` or `WebhookSecret::ed25519_secret_key`), which verifies too"
                )
            });
        }
        return;
    }
    // An action id's UUIDv7: unique per run, and visible ASCII as a delivery id must be.
    let id = format!("conformance-{}", ActionId::new());
    let now = receiver.now_ms();
    // The suite signs by the receiver's clock, so the checks below hold for any clock; a
    // provider signs by the real one. A receiver whose clock is off by more than its tolerance
    // refuses every genuine delivery (a billing trial's frozen clock passed otherwise).
    let real_now = aip_connector::store::Clock::now_ms(&aip_connector::store::SystemClock);
    let tolerance_ms = u64::try_from(receiver.tolerance().as_millis()).unwrap_or(u64::MAX);
    let off_by = now.abs_diff(real_now);
    // Replays stay refused (the replay window is at least twice the tolerance), but a delivery
    // signed that long ago is still taken: a note, not a failure (a billing trial's one-year
    // tolerance passed silently).
    if tolerance_ms > LONG_TOLERANCE_MS {
        evidence.note(format!(
            "`{name}`: its tolerance of {tolerance_ms} ms takes deliveries signed that long ago; Standard Webhooks suggests 5 minutes"
        ));
    }
    evidence.assert(SKEW, off_by <= tolerance_ms, || {
        format!(
            "`{name}`: the receiver's clock reads {now} ms since the epoch, {off_by} ms off the system clock ({real_now}), more than its tolerance of {tolerance_ms} ms, so it would refuse every delivery a provider signs now: give the receiver the system clock (the default), as the deployment does"
        )
    });
    let genuine = receiver.sign(&id, now, &body);
    evidence.artifact(format!("webhook:{name}:{id}"));

    // Forgeries first, under the genuine delivery's id: a refusal must claim nothing.
    let mut changed = body.to_vec();
    changed.extend_from_slice(b" ");
    let tampered = receiver.receive(&genuine, Bytes::from(changed)).await;
    evidence.assert(
        SIGNATURE,
        matches!(tampered, Err(WebhookError::AuthenticationFailed)),
        || {
            format!(
                "`{name}`: the genuine headers over a changed body should be refused `{}`, but {}",
                codes::WEBHOOK_AUTHENTICATION_FAILED,
                outcome(&tampered)
            )
        },
    );
    let unsigned = receiver.receive(&HeaderMap::new(), body.clone()).await;
    evidence.assert(SIGNATURE, unsigned.is_err(), || {
        format!(
            "`{name}`: the example body without headers should be refused, but {}",
            outcome(&unsigned)
        )
    });
    // A minute past the tolerance either way: clear of rounding to whole seconds.
    let margin = tolerance_ms.saturating_add(60_000);
    for (label, at) in [
        ("stale", now.saturating_sub(margin)),
        ("future-dated", now.saturating_add(margin)),
    ] {
        // Ids of their own: a receiver that takes a skewed copy must not also spoil the
        // genuine delivery's checks.
        let skewed_id = format!("{id}-{label}");
        let skewed = receiver
            .receive(&receiver.sign(&skewed_id, at, &body), body.clone())
            .await;
        evidence.assert(
            SKEW,
            matches!(skewed, Err(WebhookError::TimestampSkew { .. })),
            || {
                format!(
                    "`{name}`: a copy signed {margin} ms {} should be refused `{}`, but {}",
                    if label == "stale" {
                        "in the past"
                    } else {
                        "in the future"
                    },
                    codes::WEBHOOK_TIMESTAMP_SKEW,
                    outcome(&skewed)
                )
            },
        );
    }

    let first = receiver.receive(&genuine, body.clone()).await;
    let taken = first.is_ok();
    evidence.assert(SIGNATURE, taken, || {
        format!(
            "`{name}`: the genuine delivery of the example body should be taken after the refused copies, but {}",
            outcome(&first)
        )
    });
    if !taken {
        evidence.assert(REPLAY, false, || {
            format!("`{name}`: nothing was taken, so no replay could be tried")
        });
        return;
    }
    let replay = receiver.receive(&genuine, body.clone()).await;
    evidence.assert(
        REPLAY,
        matches!(replay, Err(WebhookError::Replayed { .. })),
        || {
            format!(
                "`{name}`: the delivery sent again should be refused `{}`, but {}",
                codes::WEBHOOK_REPLAYED,
                outcome(&replay)
            )
        },
    );
    let restarted = after_restart.receive(&genuine, body).await;
    evidence.assert(REPLAY, matches!(restarted, Err(WebhookError::Replayed { .. })), || {
        format!(
            "`{name}`: after a restart (the receiver built anew on the store reopened from its file), the delivery sent again should be refused `{}`, but {}; build the receiver on the store `with_webhook` passes it",
            codes::WEBHOOK_REPLAYED,
            outcome(&restarted)
        )
    });
}
