//! # aip-connector-testkit
//!
//! Deterministic fixtures for AIP connectors and, in later releases, the conformance suite that
//! drives a connector through the real host.
//!
//! - [`fixtures`]: principals, capabilities, contracts and manifests with fixed content.

pub mod fixtures;
