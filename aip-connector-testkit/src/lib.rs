//! # aip-connector-testkit
//!
//! The conformance suite that drives an AIP connector through the real host, deterministic
//! fixtures, a provider double and manifest snapshots.
//!
//! - [`conformance`]: the conformance suite — upstream's checks, the twelve behaviour scenarios
//!   run through the real host and a provider double, a JSON report, and
//!   [`conformance_tests!`] for one `#[test]` per check.
//! - [`fixtures`]: principals, capabilities, contracts and manifests with fixed content.
//! - [`logs`]: [`LogCapture`](logs::LogCapture), the `tracing` log lines of one test, captured
//!   reliably while other tests of the same binary run in parallel.
//! - [`provider_double`]: a real HTTP server on loopback that plays a provider — records
//!   requests, counts effects per idempotency key, deduplicates (or not), injects faults and
//!   answers operation lookups — scripted through a [`ProviderHandle`].
//! - [`test_host`]: [`TestHost`], a host over the memory store for a connector's own tests,
//!   with callers of a test tenant, approvers, a canary credential and the store to look into;
//!   its constants ([`TEST_TENANT`], [`TEST_CREDENTIAL_SECRET`], …) are re-exported here.
//! - [`results`]: [`assert_pending_approval!`], [`assert_completed!`], [`assert_failed!`] and
//!   [`assert_cancelled!`],
//!   assertions on an `ActionResult` that say what it was instead when they fail.
//! - [`store_conformance`]: the rules every store must keep (the SDK's stores pass them), for a
//!   store of your own: [`store_conformance_tests!`] for one `#[test]` per rule.
//! - [`snapshot`]: a committed JSON snapshot of a connector's manifest and a drift check that
//!   classifies every change as breaking or compatible ([`assert_manifest_snapshot!`]).
// Every public type can be printed (secrets redacted by hand-written impls).
#![warn(missing_debug_implementations)]
// docs.rs (nightly) labels each item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod conformance;
pub mod fixtures;
pub mod logs;
pub mod provider_double;
pub mod results;
pub mod snapshot;
pub mod store_conformance;
pub mod test_host;

pub use provider_double::{AnswerRequest, Fault, ProviderDouble, ProviderHandle};
pub use snapshot::{
    ChangeClass, ChangeKind, ManifestChange, SnapshotDiff, SnapshotError, SnapshotMode,
    SnapshotOutcome, diff_manifests,
};
pub use test_host::{
    TEST_CREDENTIAL_SECRET, TEST_DECISION_REASON, TEST_ISSUER, TEST_TENANT, TestHost,
    TestHostBuilder,
};
