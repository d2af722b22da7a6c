//! # aip-connector-core
//!
//! The AIP 1.0 wire model, the capability-contract rules and manifest admission, shared by the
//! `#[capability]` macros (at compile time) and the host runtime (at run time) so that every rule
//! is written once.
//!
//! - [`ids`]: identifier newtypes.
//! - [`model`]: every wire type (capabilities, contracts, manifests, actions, results, errors).
//! - [`discovery`]: upstream's discovery and connector checks on a published manifest (profile
//!   bindings, connector boundary).
//!
//! No async and no I/O live here. Schema compilation (and therefore full admission) sits behind
//! the default `schema-compiler` feature, which the macro crate turns off.
// Every public type can be printed (secrets redacted by hand-written impls).
#![warn(missing_debug_implementations)]

pub mod ids;
pub mod model;

pub use ids::{
    ActionId, ApprovalId, CapabilityId, ConversationId, CorrelationId, DelegationId, EventId,
    IdParseError, MessageId, PrincipalId, ProfileId, ReceiptId, SessionId, TransactionId,
};
pub mod discovery;
pub mod issue;
pub mod naming;
pub mod parse;
pub mod rules;
pub mod schema;
pub mod validation;

#[cfg(feature = "schema-compiler")]
pub mod admission;

pub use issue::Issue;
