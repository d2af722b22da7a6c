//! `CapabilityContract` and all its sections (`aip-model.md` §2.4–§2.12).
//!
//! Serde layout follows upstream exactly: `Option` fields are skipped when `None`, `Vec` fields
//! when empty, and `bool` fields that default are always written.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{CapabilityId, PrincipalId};
use crate::model::RiskLevel;

/// Versioned enterprise contract for a capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityContract {
    /// Every consequence a caller should assume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<SideEffect>,
    /// Idempotency decisions.
    pub idempotency: IdempotencyContract,
    /// Execution modes and retry classification.
    pub execution: ExecutionContract,
    /// Data classification.
    pub data: DataContract,
    /// External credential requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialPolicy>,
    /// Human approval policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalPolicy>,
    /// Service-level expectations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<ServiceLevelContract>,
    /// Transaction modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<TransactionContract>,
    /// How the effect can be reversed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<CompensationContract>,
}

/// A consequence of invoking a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffect {
    /// Reads data without an intended mutation.
    Read,
    /// Creates or changes state.
    Write,
    /// Deletes or destroys state.
    Delete,
    /// Produces a user-visible or external message.
    SendMessage,
    /// Moves money or changes a financial obligation.
    Financial,
    /// Changes identity, account, access or credential state.
    Identity,
    /// Touches medical records.
    Medical,
    /// Touches legal or contractual records.
    Legal,
    /// Calls an external network service.
    ExternalNetwork,
    /// Executes code supplied at runtime.
    CodeExecution,
}

impl SideEffect {
    /// Whether the effect changes state somewhere (anything but `read`).
    pub fn is_mutating(self) -> bool {
        self != SideEffect::Read
    }

    /// Whether the effect is regulated or externally visible, so approval must be required.
    pub fn needs_approval(self) -> bool {
        matches!(
            self,
            SideEffect::Financial
                | SideEffect::Legal
                | SideEffect::Medical
                | SideEffect::Identity
                | SideEffect::Delete
                | SideEffect::SendMessage
        )
    }

    /// Whether the effect may change or destroy state that existed before the call. `write`
    /// may (the contract cannot say "only creates"), unless the author says otherwise for MCP
    /// (`mcp(destructive = false)`); the others on this list always may. `read`,
    /// `send_message` and `external_network` add or reach, and overwrite nothing.
    pub fn may_overwrite(self) -> bool {
        matches!(
            self,
            SideEffect::Write
                | SideEffect::Delete
                | SideEffect::Financial
                | SideEffect::Identity
                | SideEffect::Medical
                | SideEffect::Legal
                | SideEffect::CodeExecution
        )
    }

    /// Whether the effect certainly changes or destroys what existed: `may_overwrite` except
    /// `write`, which an author may declare additive.
    pub fn destroys(self) -> bool {
        self.may_overwrite() && self != SideEffect::Write
    }
}

/// Idempotency decisions of a capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyContract {
    /// May the runtime accept an action without a key?
    pub requirement: IdempotencyRequirement,
    /// What happens when the scoped key already exists.
    pub collision_behavior: IdempotencyCollisionBehavior,
    /// Within which trusted partition the key is unique.
    pub key_scope: IdempotencyKeyScope,
    /// When the retained key may expire; `0` is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// Whether an idempotency key is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyRequirement {
    /// The runtime must reject invocations without a key.
    Required,
    /// The runtime may accept invocations without a key.
    Optional,
    /// The downstream operation cannot behave idempotently.
    Unsupported,
}

/// What a duplicate key does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyCollisionBehavior {
    /// Replay the stored result.
    ReturnOriginalResult,
    /// Reject the duplicate.
    RejectConflict,
    /// Replay the stored result only when the input hash matches.
    RevalidateInputHash,
}

/// The partition an idempotency key is unique in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyKeyScope {
    /// One action.
    Action,
    /// The capability.
    Capability,
    /// The calling principal.
    Principal,
    /// The tenant.
    Tenant,
    /// The external account.
    ExternalAccount,
}

/// Execution modes and retry classification. Every field is required on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionContract {
    /// Synchronous completion is supported.
    pub supports_sync: bool,
    /// Asynchronous completion is supported.
    pub supports_async: bool,
    /// Incremental streaming is supported.
    pub supports_streaming: bool,
    /// Runtime cancellation reaches the handler.
    pub supports_cancel: bool,
    /// Retry behaviour is implemented (not the same as "safe to retry").
    pub supports_retry: bool,
    /// The completion mode callers should expect.
    pub expected_completion: ExpectedCompletionMode,
    /// Whether a retry is safe, and under what condition.
    pub retry_safety: RetrySafety,
}

/// Expected completion mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedCompletionMode {
    /// Synchronous.
    Sync,
    /// Asynchronous.
    Async,
    /// Streaming.
    Streaming,
    /// Any of the supported modes.
    Any,
}

/// Retry-safety classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrySafety {
    /// Safe to retry.
    Safe,
    /// Safe to retry with the same idempotency key.
    SafeWithIdempotencyKey,
    /// Not safe to retry.
    Unsafe,
    /// Unknown.
    Unknown,
}

impl RetrySafety {
    /// Whether the classification allows some retry.
    pub fn allows_retry(self) -> bool {
        matches!(
            self,
            RetrySafety::Safe | RetrySafety::SafeWithIdempotencyKey
        )
    }
}

/// Data classification of a capability's inputs and outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataContract {
    /// Sensitivity class.
    pub sensitivity: DataSensitivity,
    /// Personally identifiable information may be present.
    pub contains_pii: bool,
    /// Stored records, logs and errors must carry a hash instead of values.
    pub redaction_required: bool,
    /// Region rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residency: Option<DataResidency>,
    /// Retention rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionPolicy>,
}

/// Data sensitivity class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSensitivity {
    /// Public.
    Public,
    /// Internal.
    Internal,
    /// Confidential.
    Confidential,
    /// Restricted: redaction required.
    Restricted,
    /// Regulated: redaction required.
    Regulated,
    /// Unknown.
    Unknown,
}

impl DataSensitivity {
    /// Whether this class requires redaction by itself.
    pub fn requires_redaction(self) -> bool {
        matches!(
            self,
            DataSensitivity::Restricted | DataSensitivity::Regulated
        )
    }
}

/// Region rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataResidency {
    /// Regions where data may be processed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_regions: Vec<String>,
    /// Regions where data must not be processed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prohibited_regions: Vec<String>,
}

/// Retention rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Minimum retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_for_ms: Option<u64>,
    /// Maximum time before deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_after_ms: Option<u64>,
    /// Whether legal hold may override deletion.
    pub legal_hold_allowed: bool,
}

/// External credential requirements. Never carries raw credential material.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialPolicy {
    /// A resolved credential is required.
    pub required: bool,
    /// Accepted issuers; empty means any issuer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_issuers: Vec<String>,
    /// Downstream scopes the credential must carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_scopes: Vec<String>,
    /// OAuth refresh may be used.
    pub allow_oauth_refresh: bool,
}

/// Human approval policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicy {
    /// Approval is required before execution.
    pub required: bool,
    /// Why approval is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Legacy single approver selector; read as one leaf when `rule` is absent.
    pub approver_selector: ApproverSelector,
    /// How long a request stays open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Evidence an approval must carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_requirements: Vec<EvidenceRequirement>,
    /// Authority delegated to approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_authority: Option<DelegatedApprovalAuthority>,
    /// Composed approval rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<ApprovalRule>,
    /// Distinct approvers needed; default 1, `0` is rejected.
    #[serde(default = "default_minimum_distinct_principals")]
    pub minimum_distinct_principals: u32,
    /// Separation-of-duties constraints.
    #[serde(default)]
    pub separation_of_duties: SeparationOfDuties,
    /// Stable policy version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
}

fn default_minimum_distinct_principals() -> u32 {
    1
}

fn default_true() -> bool {
    true
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            required: false,
            reason: None,
            approver_selector: ApproverSelector::TenantPolicy,
            ttl_ms: None,
            evidence_requirements: Vec::new(),
            delegated_authority: None,
            rule: None,
            minimum_distinct_principals: default_minimum_distinct_principals(),
            separation_of_duties: SeparationOfDuties::default(),
            policy_version: None,
        }
    }
}

/// Who may approve (legacy selector), tagged on `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApproverSelector {
    /// One principal.
    Principal {
        /// The principal.
        id: PrincipalId,
    },
    /// Members of a role.
    Role {
        /// Role name.
        name: String,
    },
    /// Members of a group.
    Group {
        /// Group name.
        name: String,
    },
    /// Whoever the tenant's policy names.
    TenantPolicy,
    /// An external approval system.
    ExternalSystem {
        /// System id.
        system: String,
    },
}

/// A composed approval rule, tagged on `operator`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "operator", rename_all = "snake_case")]
pub enum ApprovalRule {
    /// Every child must be satisfied.
    All {
        /// Children.
        rules: Vec<ApprovalRule>,
        /// Whether one decision may satisfy several children.
        #[serde(default)]
        allow_decision_reuse: bool,
    },
    /// At least one child must be satisfied.
    Any {
        /// Children.
        rules: Vec<ApprovalRule>,
    },
    /// `required` children must be satisfied.
    Quorum {
        /// How many children must be satisfied.
        required: u32,
        /// Children.
        rules: Vec<ApprovalRule>,
        /// Whether each child needs a different approver (default true).
        #[serde(default = "default_true")]
        distinct_principals: bool,
    },
    /// A specific principal.
    Principal {
        /// The principal.
        id: PrincipalId,
    },
    /// A member of a role.
    Role {
        /// Role name.
        name: String,
    },
    /// A member of a group.
    Group {
        /// Group name.
        name: String,
    },
    /// A tenant policy.
    TenantPolicy {
        /// Policy id.
        policy_id: String,
    },
    /// An external approval system.
    ExternalSystem {
        /// System id.
        system: String,
    },
    /// Delegated authority within a scope.
    DelegatedAuthority {
        /// Delegated scope.
        scope: String,
        /// Highest risk the delegation covers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_risk: Option<RiskLevel>,
        /// Highest value the delegation covers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_value: Option<u64>,
    },
}

/// Separation-of-duties constraints; all false by default and always written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeparationOfDuties {
    /// The approver must differ from the requester.
    #[serde(default)]
    pub requester_must_differ: bool,
    /// The approver must differ from the operator.
    #[serde(default)]
    pub operator_must_differ: bool,
    /// Self-approval is allowed.
    #[serde(default)]
    pub allow_self_approval: bool,
}

/// Evidence an approval must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceRequirement {
    /// A reason.
    Reason,
    /// A snapshot of the input.
    InputSnapshot,
    /// The policy decision.
    PolicyDecision,
    /// An external ticket.
    ExternalTicket,
    /// An attachment.
    Attachment,
}

/// Authority delegated to approve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegatedApprovalAuthority {
    /// The delegating principal.
    pub principal: PrincipalId,
    /// Delegated scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    /// When the delegation expires.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
}

/// Service-level expectations (not guarantees).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceLevelContract {
    /// Expected latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_latency_ms: Option<u64>,
    /// Runtime timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Asynchronous execution is expected.
    pub async_expected: bool,
    /// Maximum queue delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_delay_ms: Option<u64>,
    /// Human-readable availability target, e.g. `99.9%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_target: Option<String>,
}

/// Transaction modes a capability supports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionContract {
    /// Supported modes; must be non-empty and unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_modes: Vec<TransactionMode>,
    /// A commit needs a prior plan.
    pub requires_plan_before_commit: bool,
    /// How faithful a dry run is.
    pub dry_run_fidelity: DryRunFidelity,
}

impl TransactionContract {
    /// Whether `mode` is declared.
    pub fn supports(&self, mode: TransactionMode) -> bool {
        self.supported_modes.contains(&mode)
    }
}

/// A transaction mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionMode {
    /// Plain execution.
    Execute,
    /// Preview without effect.
    DryRun,
    /// Durable plan.
    Plan,
    /// Commit a plan.
    Commit,
    /// Compensate an earlier action.
    Compensate,
    /// Reconcile an unknown outcome.
    Reconcile,
    /// Declares that rollback is not supported.
    RollbackNotSupported,
}

impl TransactionMode {
    /// Every mode, in declaration order.
    pub const ALL: [Self; 7] = [
        Self::Execute,
        Self::DryRun,
        Self::Plan,
        Self::Commit,
        Self::Compensate,
        Self::Reconcile,
        Self::RollbackNotSupported,
    ];

    /// The wire spelling (`execute`, `dry_run`, ...), for messages and log fields.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Execute => "execute",
            Self::DryRun => "dry_run",
            Self::Plan => "plan",
            Self::Commit => "commit",
            Self::Compensate => "compensate",
            Self::Reconcile => "reconcile",
            Self::RollbackNotSupported => "rollback_not_supported",
        }
    }
}

/// Dry-run fidelity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DryRunFidelity {
    /// Only the schema is checked.
    SchemaOnly,
    /// Policy and schema are checked.
    PolicyAndSchema,
    /// The provider validates the request.
    DownstreamValidation,
    /// The provider simulates the operation.
    FullSimulation,
}

impl DryRunFidelity {
    /// Whether the fidelity needs the author's validation handler.
    pub fn needs_validation_handler(self) -> bool {
        matches!(
            self,
            DryRunFidelity::DownstreamValidation | DryRunFidelity::FullSimulation
        )
    }
}

/// How an effect can be reversed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationContract {
    /// Compensation classification.
    pub mode: CompensationMode,
    /// The compensating capability; required when `mode` is `supported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_capability_id: Option<CapabilityId>,
    /// Window after the original action during which compensation is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_window_ms: Option<u64>,
    /// Compensation itself needs approval.
    pub requires_approval: bool,
}

/// Compensation classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompensationMode {
    /// No compensation is needed.
    NotRequired,
    /// A compensating capability exists.
    Supported,
    /// Compensation is attempted but not guaranteed.
    BestEffort,
    /// The effect cannot be rolled back.
    RollbackNotSupported,
}
