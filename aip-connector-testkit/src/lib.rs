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
//! - [`prelude`]: one `use` for a connector's tests.
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

/// What a connector's tests use, in one `use`: the SDK's
/// [prelude](aip_connector::prelude) (handler types, `ProviderClient`, the derives), the action
/// and its result, the test host, the provider double, the conformance suite, the result
/// assertions and `json!`.
///
/// ```no_run
/// use aip_connector_testkit::prelude::*;
/// # struct Tickets;
/// # #[connector(id = "tickets")]
/// # impl Tickets {
/// #     #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
/// #     async fn look(&self) -> Result<(), ConnectorFailure> { Ok(()) }
/// # }
///
/// # async fn run() {
/// let test = TestHost::builder(Tickets).build().expect("admitted");
/// let looked = test.invoke("user:ada", Action::new(Tickets::LOOK_ID, json!({}))).await;
/// let output: Value = assert_completed!(looked);
/// assert_eq!(output, Value::Null);
/// # }
/// ```
///
/// An author trial's tests imported from six paths (`model`, `provider_double`, the testkit's
/// root, `serde_json`, ...); this is those names, and nothing a test rarely needs.
pub mod prelude {
    pub use aip_connector::model::{Action, ActionResult, ActionResultStatus};
    pub use aip_connector::prelude::*;
    pub use serde_json::{Value, json};

    pub use crate::conformance::ConformanceSuite;
    pub use crate::provider_double::{AnswerRequest, Fault, ProviderDouble, ProviderHandle};
    pub use crate::test_host::{TEST_CREDENTIAL_SECRET, TEST_TENANT, TestHost, TestHostBuilder};
    pub use crate::{
        assert_cancelled, assert_completed, assert_failed, assert_manifest_snapshot,
        assert_pending_approval, conformance_tests,
    };
}
