//! Error codes the facade raises itself, as named constants.
//!
//! Codes shared with the wire model (`action.invalid_input`, `connector.*`, ...) live in
//! [`aip_connector_core::model::codes`] and are re-exported here, so every code the SDK can
//! produce is reachable from this one module.

pub use aip_connector_core::model::codes::*;

/// The `source` component written on failures raised by the SDK itself.
pub const SOURCE_COMPONENT: &str = "aip-connector";

/// The action needs an idempotency key and carries none (upstream code).
pub const IDEMPOTENCY_REQUIRED: &str = "idempotency.required";
/// The action asks for a completion mode the capability does not support (upstream code).
pub const EXECUTION_MODE_UNSUPPORTED: &str = "execution.mode_unsupported";
/// A handler asked for a credential and none was resolved (upstream code).
pub const CREDENTIAL_MISSING: &str = "credential.required";
/// A handler asked for the verified tenant and none was resolved.
pub const TENANT_MISSING: &str = "identity.tenant_missing";
/// A handler asked for verified approvals and the action was not approved.
pub const APPROVAL_MISSING: &str = "approval.required";
/// A handler asked for a checkpoint outside a transactional action.
pub const TRANSACTION_CONTEXT_MISSING: &str = "transaction.context_missing";
/// A checkpoint named an empty provider or operation id.
pub const TRANSACTION_CHECKPOINT_INVALID: &str = "transaction.checkpoint_invalid";
/// A checkpoint tried to replace the recorded provider operation with a different one.
pub const TRANSACTION_CHECKPOINT_CONFLICT: &str = "transaction.checkpoint_conflict";
/// A streamed chunk could not be serialized.
pub const STREAM_CHUNK_UNSERIALIZABLE: &str = "stream.chunk_unserializable";
/// A handler's output could not be serialized.
pub const OUTPUT_UNSERIALIZABLE: &str = "connector.output_unserializable";
/// The connector has no capability with the requested id.
pub const CAPABILITY_UNKNOWN: &str = "capability.not_found";
