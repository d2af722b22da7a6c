//! Example connectors for `aip-connector`, kept as library code so that their conformance
//! tests, their focused tests and the demo all run the same connectors.
//!
//! - [`calendar`]: the seed's `cap:calendar:booking:create` with plan/commit, a provider
//!   operation checkpointed before the provider is called, reconciliation of unknown outcomes,
//!   and a booking lookup (`cap:calendar:booking:get`).
//! - [`payments`]: a financial side effect (`cap:payments:charge`) with a required, scoped
//!   credential, quorum approval, plan before commit, compensation through a separate
//!   capability (`cap:payments:refund`) inside a window, and PII that is redacted.
//! - [`search`]: a streaming, cancellable read with back-pressure (`cap:search:documents`) and a
//!   document fetch (`cap:search:document:get`).
//! - [`notes`]: a connector of free `#[capability]` functions split across modules, sharing a
//!   provider client as the connector's state (`ConnectorBuilder::with_state`, `State<S>`),
//!   with a reconcilable write whose companion takes the state too.
//! - [`demo`]: the README's main demo, on the embedded SQLite store, as a function a test can
//!   run twice.
//!
//! `examples/README.md` describes each one; `cargo run -p aip-connector-examples --example demo`
//! runs the demo.

pub mod calendar;
pub mod demo;
pub mod notes;
pub mod payments;
pub mod search;
pub mod serving;

mod provider_api;

use aip_connector::ProviderClient;
use aip_connector::provider::ProviderClientError;

/// A provider client for a provider on this machine (the testkit's provider double, or any
/// loopback server): failures name `source` as their component. Proxies configured in the
/// environment are not used for a loopback URL (the builder's default there).
///
/// # Errors
///
/// When `base_url` is not an absolute `http(s)` URL without user info, query or fragment.
pub fn loopback_client(
    base_url: &str,
    source: &str,
) -> Result<ProviderClient, ProviderClientError> {
    ProviderClient::builder(base_url)
        .source_component(source)
        .build()
}
