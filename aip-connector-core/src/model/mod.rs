//! The AIP 1.0 wire model (`aip-model.md` §1–§4).
//!
//! Every type serializes with upstream's exact spellings and key order (declaration order), and
//! follows its optional/skip rules: `Option` fields are left out when `None`, `Vec` fields when
//! empty, and defaulted `bool` fields are always written. Unknown keys are ignored on input, as
//! upstream; the published JSON Schemas are stricter and are checked by admission's callers.
//!
//! # Stability
//!
//! The types mirror one frozen protocol version, AIP 1.0, field for field and value for value,
//! so they are exhaustive on purpose: a struct can be built literally and an enum matched
//! without a wildcard. An enum value AIP 1.0 does not define is refused when parsed (a peer
//! speaking a later version is told so, rather than half understood). Support for a later AIP
//! version, which may add fields and values, comes in a new major version of these crates.

mod action;
mod capability;
mod contract;
mod envelope;
mod error;
mod manifest;
mod principal;
mod result;
mod support;
mod transaction;

pub use action::{
    Action, ActionMode, ActionTransaction, ApprovalConstraint, ApprovalDecision,
    ApprovalDecisionKind, Callback, ComplianceContext, Conversation, ConversationPriority,
    ConversationStatus, CredentialRef, DelegationEntry, EvidenceArtifact, ExternalAccountRef,
    ExternalUserRef, FederationContext, IdentityContext, OAuthCredentialState,
    ObservabilityContext, TenantRef,
};
pub use capability::{Binding, Capability, CapabilityKind, RiskLevel, Stability};
pub use contract::{
    ApprovalPolicy, ApprovalRule, ApproverSelector, CapabilityContract, CompensationContract,
    CompensationMode, CredentialPolicy, DataContract, DataResidency, DataSensitivity,
    DelegatedApprovalAuthority, DryRunFidelity, EvidenceRequirement, ExecutionContract,
    ExpectedCompletionMode, IdempotencyCollisionBehavior, IdempotencyContract, IdempotencyKeyScope,
    IdempotencyRequirement, RetentionPolicy, RetrySafety, SeparationOfDuties, ServiceLevelContract,
    SideEffect, TransactionContract, TransactionMode,
};
pub use envelope::{
    AIP_VERSION, ApprovalQueryRequest, ApprovalRecordView, ApprovalState, Cancel, CancelTarget,
    Envelope, MessageBody, MessageType, TransactionQueryRequest,
};
pub use error::{
    COMPENSATION_REQUIRED, ConnectorFailure, ConnectorFailureData, ConnectorOperation, ErrorBody,
    ErrorCategory, ProtocolError, SIDE_EFFECTS_COMMITTED, codes, mark_committed_side_effects,
};
pub use manifest::{
    MANIFEST_VERSION_V1, Manifest, ManifestFilter, ManifestRequest, Resource, ResourceAccessPolicy,
};
pub use principal::{DelegatedAuthorityGrant, ExternalRef, Principal, PrincipalKind};
pub use result::{
    Ack, AckStatus, ActionLifecycleState, ActionResult, ActionResultStatus, IDEMPOTENT_REPLAY,
    MessagePart, ORIGINAL_OUTPUT, OutputError, ReceiptRef, StreamChunk, StreamChunkKind, Usage,
    unmark_idempotent_replay,
};
pub use support::CapabilityImplementationSupport;
pub use transaction::{
    ProviderOperationRef, ReceiptKind, ReconciliationRequest, ReconciliationResult,
    TransactionPlan, TransactionProtocolStatus, TransactionReceipt, TransactionRequest,
    TransactionResult,
};
