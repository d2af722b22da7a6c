//! `webhook_security`: signature verification, clock-skew and replay rejection of inbound
//! webhooks (`aip.http.webhook.v1`).
//!
//! This version of the SDK has no webhook profile: nothing in it receives, verifies or
//! deduplicates webhook deliveries, so there is nothing a connector declaring the profile could
//! be checked against. The scenario is required only when a manifest declares
//! `aip.http.webhook.v1`; then each required assertion is reported as not holding, with this
//! reason, rather than passed without evidence.

use crate::conformance::{Evidence, Harness};

/// Why nothing can be shown.
const UNSUPPORTED: &str = "webhook profiles (`aip.http.webhook.v1`) are not supported by this version of aip-connector: it cannot receive, verify or deduplicate webhook deliveries, so a connector declaring the profile cannot be checked";

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    evidence.artifact(format!("manifest:{}", h.definition().id));
    for assertion in ["signature_verified", "skew_rejected", "replay_rejected"] {
        evidence.assert(assertion, false, || UNSUPPORTED.to_owned());
    }
    evidence
}
