//! # aip-connector
//!
//! Write connectors for AIP (the Agent Interoperability Protocol 1.0) as annotated async
//! functions.
//!
//! - [`macro@capability`] on a handler declares one capability: its contract is checked at compile
//!   time by the same rules runtime admission uses, its schemas are derived from the handler's
//!   types, and its implementation support is derived from the handler's signature.
//! - [`macro@connector`] on an `impl` block assembles the connector: manifest, support map and
//!   dispatch by capability id.
//! - Handler parameters are the input plus [extractors](crate::extract): [`IdempotencyKey`],
//!   [`Cancellation`], [`Deadline`], [`StreamSink`], [`Checkpoint`], [`Credential`], [`Tenant`],
//!   [`Caller`], [`Approval`], [`Compensation`], [`ClaimedPlan`].
//!
//! - [`webhook`] receives a provider's signed event deliveries: verified, refused when stale or
//!   replayed, handled once per delivery id.
//!
//! The wire model, the contract rules and manifest admission come from
//! [`aip_connector_core`], re-exported under its own name (not as `core`, which a glob import
//! of this crate would make shadow the language's `core::`); [`model`], [`ids`], [`admission`],
//! [`discovery`] and [`rules`] are re-exported at the top.
//!
//! Features: `sqlite` and `postgres` (on by default) add the durable stores, `http` the AIP
//! HTTP server and client, `mcp` the MCP projection (the crate README has the table).
// Every public type can be printed (secrets redacted by hand-written impls).
#![warn(missing_debug_implementations)]
// docs.rs (nightly) labels each item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
mod cache_line;
pub mod codes;
pub mod connector;
mod display;
pub mod extract;
pub mod handler;
pub mod host;
pub mod invocation;
pub mod provider;
pub mod schema;
#[cfg(feature = "http")]
pub mod serve;
pub mod store;
mod task;
pub mod webhook;

#[doc(hidden)]
pub mod __private;

/// The crate README's example, compiled and run as a doctest so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use aip_connector_core;
pub use aip_connector_core::{admission, discovery, ids, model, rules};
pub use aip_connector_macros::{capability, connector};
/// The `time` crate of the wire model's timestamps (`time::OffsetDateTime` in
/// [`model`] fields), so a connector builds them without pinning a `time` of its own.
pub use time;
/// The token behind [`Cancellation`] and [`InvocationContext::cancellation`], so a connector
/// names it without a `tokio-util` dependency of its own.
pub use tokio_util::sync::CancellationToken;

pub use builder::{
    BuildError, BuiltConnector, ConnectorBuilder, ConnectorState, FreeCapability, FromRef, State,
};
pub use connector::{
    CancelReason, CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition,
    ReconcileOutcome, Reconciliation, StaticDefinition,
};
pub use extract::{
    Approval, Caller, Cancellation, Checkpoint, ClaimedPlan, Compensation, Credential, Deadline,
    ExtractorKind, IdempotencyKey, StreamItem, StreamSink, Tenant,
};
pub use handler::{CapabilityInput, CapabilityOutput, HandlerError, HandlerResult};
pub use invocation::{
    CallerIdentity, CompensationTarget, CredentialHandle, InvocationContext, Secret,
    StaticInvocation, VerifiedApprovals, VerifiedTenant,
};
pub use provider::{ProviderClient, ProviderResponse};
pub use schema::SchemaDialect;

/// Everything a connector author usually needs, in one import.
pub mod prelude {
    pub use crate::provider::{path_segment, path_segments};
    pub use crate::{
        Approval, BuildError, BuiltConnector, Caller, CancelReason, CancelRequest, Cancellation,
        Checkpoint, ClaimedPlan, Compensation, Connector, ConnectorBuilder, Credential, Deadline,
        FromRef, IdempotencyKey, ProviderClient, ReconcileOutcome, Reconciliation, Secret, State,
        StreamSink, Tenant, capability, connector,
    };
    pub use aip_connector_core::model::{
        ConnectorFailure, ConnectorOperation, ErrorCategory, ProviderOperationRef,
    };
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
}
