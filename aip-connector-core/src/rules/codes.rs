//! Every rule code, as a named constant.
//!
//! Codes that upstream admission (`admit_manifest`) already defines keep upstream's exact
//! spelling, so a manifest rejected here and upstream reports the same code. Our own rules use
//! the same dotted style. Each constant is listed in [`super::RULES`] with its summary and fix.

// --- Contract invariants: upstream admission C1–C15 and the approval-rule recursion ---

/// C1: the execution contract supports none of sync, async and streaming.
pub const CONTRACT_EXECUTION_NO_COMPLETION_MODE: &str = "contract.execution.no_completion_mode";
/// C2: a side effect is listed twice.
pub const CONTRACT_SIDE_EFFECT_DUPLICATE: &str = "contract.side_effect.duplicate";
/// C3: the idempotency TTL is zero.
pub const CONTRACT_IDEMPOTENCY_INVALID_TTL: &str = "contract.idempotency.invalid_ttl";
/// C4: the approval policy asks for zero distinct approvers.
pub const CONTRACT_APPROVAL_INVALID_DISTINCT_PRINCIPALS: &str =
    "contract.approval.invalid_distinct_principals";
/// C5: an `all` or `any` approval rule has no children.
pub const CONTRACT_APPROVAL_RULE_EMPTY: &str = "contract.approval.rule_empty";
/// C6: a `quorum` approval rule needs zero children or more children than it has.
pub const CONTRACT_APPROVAL_QUORUM_INVALID: &str = "contract.approval.quorum_invalid";
/// C7: a `role` approval rule has a blank role name.
pub const CONTRACT_APPROVAL_ROLE_EMPTY: &str = "contract.approval.role_empty";
/// C8: a `group` approval rule has a blank group name.
pub const CONTRACT_APPROVAL_GROUP_EMPTY: &str = "contract.approval.group_empty";
/// C9: a `tenant_policy` approval rule has a blank policy id.
pub const CONTRACT_APPROVAL_TENANT_POLICY_EMPTY: &str = "contract.approval.tenant_policy_empty";
/// C10: an `external_system` approval rule has a blank system id.
pub const CONTRACT_APPROVAL_EXTERNAL_SYSTEM_EMPTY: &str = "contract.approval.external_system_empty";
/// C11: a `delegated_authority` approval rule has a blank scope.
pub const CONTRACT_APPROVAL_DELEGATED_SCOPE_EMPTY: &str = "contract.approval.delegated_scope_empty";
/// C12: the transaction contract declares no mode.
pub const CONTRACT_TRANSACTION_MODES_EMPTY: &str = "contract.transaction.modes_empty";
/// C13: a transaction mode is listed twice.
pub const CONTRACT_TRANSACTION_MODE_DUPLICATE: &str = "contract.transaction.mode_duplicate";
/// C14: compensation is `supported` without a compensation capability id.
pub const CONTRACT_COMPENSATION_CAPABILITY_MISSING: &str =
    "contract.compensation.capability_missing";
/// C15: the compensation window is zero.
pub const CONTRACT_COMPENSATION_INVALID_WINDOW: &str = "contract.compensation.invalid_window";

// --- Core validation (aip-core `validate_capability`) not covered by C1–C15 ---

/// The input schema is not a JSON object (core validation rejects booleans too).
pub const CAPABILITY_INPUT_SCHEMA_NOT_OBJECT: &str = "capability.input_schema.not_object";
/// The contract lists no side effect.
pub const CONTRACT_SIDE_EFFECT_EMPTY: &str = "contract.side_effect.empty";
/// An SLA duration (latency, timeout, queue delay) is zero.
pub const CONTRACT_SLA_INVALID_DURATION: &str = "contract.sla.invalid_duration";
/// An accepted credential issuer is blank.
pub const CONTRACT_CREDENTIALS_ISSUER_EMPTY: &str = "contract.credentials.issuer_empty";
/// A required credential scope is blank.
pub const CONTRACT_CREDENTIALS_SCOPE_EMPTY: &str = "contract.credentials.scope_empty";
/// The legacy approver selector names a blank role.
pub const CONTRACT_APPROVAL_SELECTOR_ROLE_EMPTY: &str = "contract.approval.selector_role_empty";
/// The legacy approver selector names a blank group.
pub const CONTRACT_APPROVAL_SELECTOR_GROUP_EMPTY: &str = "contract.approval.selector_group_empty";
/// The legacy approver selector names a blank external system.
pub const CONTRACT_APPROVAL_SELECTOR_EXTERNAL_SYSTEM_EMPTY: &str =
    "contract.approval.selector_external_system_empty";

// --- Consistency between contract sections (not waivable) ---

/// `expected_completion` names a mode whose support flag is false.
pub const CONTRACT_EXECUTION_EXPECTED_COMPLETION_UNSUPPORTED: &str =
    "contract.execution.expected_completion_unsupported";
/// `retry_safety = safe_with_idempotency_key` while idempotency is `unsupported`.
pub const CONTRACT_EXECUTION_KEY_RETRY_WITHOUT_IDEMPOTENCY: &str =
    "contract.execution.key_retry_without_idempotency";
/// `supports_retry` while `retry_safety` is `unsafe` or `unknown`.
pub const CONTRACT_EXECUTION_RETRY_UNSAFE: &str = "contract.execution.retry_unsafe";
/// Required idempotency and a retry-safe classification, but no retry support (conformance rule).
pub const CONTRACT_EXECUTION_RETRY_SAFETY_WITHOUT_RETRY: &str =
    "contract.execution.retry_safety_without_retry";
/// `requires_plan_before_commit` without both the `plan` and `commit` modes.
pub const CONTRACT_TRANSACTION_PLAN_REQUIREMENT_WITHOUT_MODES: &str =
    "contract.transaction.plan_requirement_without_modes";
/// The `commit` mode without the `plan` mode.
pub const CONTRACT_TRANSACTION_COMMIT_WITHOUT_PLAN: &str =
    "contract.transaction.commit_without_plan";
/// The `compensate` mode without compensation `supported` or `best_effort`.
pub const CONTRACT_TRANSACTION_COMPENSATE_WITHOUT_COMPENSATION: &str =
    "contract.transaction.compensate_without_compensation";
/// Compensation `supported` or `best_effort` without the `compensate` mode.
pub const CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE: &str =
    "contract.compensation.compensate_mode_missing";
/// The compensation capability id names the capability itself.
pub const CONTRACT_COMPENSATION_SELF_REFERENCE: &str = "contract.compensation.self_reference";
/// Dry-run fidelity `downstream_validation`/`full_simulation` for dry runs or plans, without a
/// validation handler.
pub const CONTRACT_TRANSACTION_FIDELITY_WITHOUT_VALIDATION: &str =
    "contract.transaction.fidelity_without_validation";
/// A validation handler (`validate = ...`) that no dry run or plan would call: the capability
/// offers neither, or its dry-run fidelity (`schema_only`, `policy_and_schema`) does not ask it.
pub const CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY: &str =
    "contract.transaction.validation_without_fidelity";

// --- Lints (waivable with a published, reasoned waiver) ---

/// A mutating side effect without required idempotency.
pub const CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY: &str =
    "contract.lint.mutating_without_idempotency";
/// A regulated or externally visible side effect without required approval.
pub const CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL: &str =
    "contract.lint.side_effect_without_approval";
/// `high` or `critical` risk without an approval policy that requires approval.
pub const CONTRACT_LINT_RISK_WITHOUT_APPROVAL: &str = "contract.lint.risk_without_approval";
/// `high`/`critical` risk or `requires_human_approval` on a capability with no contract.
pub const CONTRACT_LINT_POLICY_WITHOUT_CONTRACT: &str = "contract.lint.policy_without_contract";
/// PII or `restricted`/`regulated` data without `redaction_required`.
pub const CONTRACT_LINT_DATA_WITHOUT_REDACTION: &str = "contract.lint.data_without_redaction";
/// Required credentials without required scopes.
pub const CONTRACT_LINT_CREDENTIALS_WITHOUT_SCOPES: &str =
    "contract.lint.credentials_without_scopes";
/// Required approval without evidence requirements.
pub const CONTRACT_LINT_APPROVAL_WITHOUT_EVIDENCE: &str = "contract.lint.approval_without_evidence";

// --- Implementation agreement: upstream admission checks 18–27 ---

/// Check 18: a callable capability has no implementation claim (admission with
/// `require_implementation_claims`).
pub const IMPLEMENTATION_MISSING: &str = "implementation.missing";
/// Checks 19–27: the contract claims behaviour the implementation does not support.
pub const IMPLEMENTATION_CLAIM_UNSUPPORTED: &str = "implementation.claim_unsupported";

// --- Implementation contradictions: the implementation does more than the contract says ---

/// The handler observes cancellation but the contract says `supports_cancel = false`.
pub const IMPLEMENTATION_CANCELLATION_UNDECLARED: &str = "implementation.cancellation_undeclared";
/// The handler streams but the contract says `supports_streaming = false`.
pub const IMPLEMENTATION_STREAMING_UNDECLARED: &str = "implementation.streaming_undeclared";
/// The handler takes an idempotency key but the contract says `supports_retry = false`.
pub const IMPLEMENTATION_RETRY_UNDECLARED: &str = "implementation.retry_undeclared";
/// The handler checkpoints a transaction but the contract has no transaction section.
pub const IMPLEMENTATION_TRANSACTION_UNDECLARED: &str = "implementation.transaction_undeclared";
/// A reconciliation handler exists but the transaction modes lack `reconcile`.
pub const IMPLEMENTATION_RECONCILIATION_UNDECLARED: &str =
    "implementation.reconciliation_undeclared";
/// The handler takes a credential handle but the contract does not require credentials.
pub const IMPLEMENTATION_CREDENTIALS_UNDECLARED: &str = "implementation.credentials_undeclared";
/// The handler takes a verified approval but the contract does not require approval.
pub const IMPLEMENTATION_APPROVAL_UNDECLARED: &str = "implementation.approval_undeclared";
/// The contract declares `sync` or `async` execution but the handler takes a `StreamSink` and
/// runs only when the action is streamed.
pub const IMPLEMENTATION_MODE_UNSUPPORTED: &str = "implementation.mode_unsupported";
/// The compensating capability's handler does not take `Compensation` (connector level; raised
/// by the `#[connector]` macro and by `Host::build`, which see handlers, not by manifest
/// admission).
pub const IMPLEMENTATION_COMPENSATION_TARGET_UNSUPPORTED: &str =
    "implementation.compensation_target_unsupported";

// --- Connector level ---

/// A compensation capability id names no capability of the manifest.
pub const MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN: &str =
    "manifest.compensation.capability_unknown";
/// The compensating capability requires approval, but the compensated capability's contract does
/// not gate its compensations: the host approves an undo under the compensated capability's
/// contract only, so the compensating handler would never receive an approval.
pub const MANIFEST_COMPENSATION_APPROVAL_UNGATED: &str = "manifest.compensation.approval_ungated";

// --- Published waivers (`/governance/contract_waivers`) ---

/// `contract_waivers` or one of its entries is not a waiver object.
pub const MANIFEST_WAIVER_MALFORMED: &str = "manifest.waiver.malformed";
/// A waiver's reason is blank.
pub const MANIFEST_WAIVER_REASON_EMPTY: &str = "manifest.waiver.reason_empty";
/// A waiver names a code that is not a rule code.
pub const MANIFEST_WAIVER_CODE_UNKNOWN: &str = "manifest.waiver.code_unknown";
/// A waiver names a rule that cannot be waived.
pub const MANIFEST_WAIVER_NOT_WAIVABLE: &str = "manifest.waiver.not_waivable";
/// A waiver names a capability the manifest does not declare.
pub const MANIFEST_WAIVER_CAPABILITY_UNKNOWN: &str = "manifest.waiver.capability_unknown";
