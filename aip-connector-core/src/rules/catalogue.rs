//! The rule catalogue: every code with a one-line summary, whether it may be waived, and how to
//! fix it. Docs (`docs/diagnostics.md`) and the macros read it; our own rules append `fix` to
//! their messages so a diagnostic always says what to do.

use super::codes::*;

/// One rule of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleInfo {
    /// Stable issue code.
    pub code: &'static str,
    /// What the rule rejects, in one line.
    pub summary: &'static str,
    /// Whether a published, reasoned waiver may suppress it.
    pub waivable: bool,
    /// How to fix a violation, as one sentence.
    pub fix: &'static str,
}

const fn rule(
    code: &'static str,
    summary: &'static str,
    waivable: bool,
    fix: &'static str,
) -> RuleInfo {
    RuleInfo {
        code,
        summary,
        waivable,
        fix,
    }
}

/// Every rule, grouped as the checker runs them.
pub const RULES: &[RuleInfo] = &[
    // Contract invariants (upstream C1–C15).
    rule(
        CONTRACT_EXECUTION_NO_COMPLETION_MODE,
        "execution supports none of sync, async and streaming",
        false,
        "Set at least one of `supports_sync`, `supports_async` and `supports_streaming`.",
    ),
    rule(
        CONTRACT_SIDE_EFFECT_DUPLICATE,
        "a side effect is listed more than once",
        false,
        "List each side effect once.",
    ),
    rule(
        CONTRACT_IDEMPOTENCY_INVALID_TTL,
        "idempotency `ttl_ms` is zero",
        false,
        "Give `ttl_ms` a positive value, or leave it out (`#[capability]` then publishes one day; a contract without one keeps keys without expiry).",
    ),
    rule(
        CONTRACT_APPROVAL_INVALID_DISTINCT_PRINCIPALS,
        "approval `minimum_distinct_principals` is zero",
        false,
        "Require at least one distinct approver (the default is 1).",
    ),
    rule(
        CONTRACT_APPROVAL_RULE_EMPTY,
        "an `all` or `any` approval rule has no child rules",
        false,
        "Give the rule at least one child rule, or remove it.",
    ),
    rule(
        CONTRACT_APPROVAL_QUORUM_INVALID,
        "a `quorum` approval rule requires zero or more children than it has",
        false,
        "Set the quorum's count (`quorum(N, ...)`, `required` in JSON) between 1 and the number of child rules: a quorum counts rules, not people. For N different people of one role, write `selector = role(\"<role>\"), distinct_principals = N` instead (`minimum_distinct_principals: N` beside the `role` selector in JSON).",
    ),
    rule(
        CONTRACT_APPROVAL_ROLE_EMPTY,
        "a `role` approval rule has a blank role name",
        false,
        "Name the role whose members may approve.",
    ),
    rule(
        CONTRACT_APPROVAL_GROUP_EMPTY,
        "a `group` approval rule has a blank group name",
        false,
        "Name the group whose members may approve.",
    ),
    rule(
        CONTRACT_APPROVAL_TENANT_POLICY_EMPTY,
        "a `tenant_policy` approval rule has a blank policy id",
        false,
        "Name the tenant policy that selects the approvers.",
    ),
    rule(
        CONTRACT_APPROVAL_EXTERNAL_SYSTEM_EMPTY,
        "an `external_system` approval rule has a blank system id",
        false,
        "Name the external approval system.",
    ),
    rule(
        CONTRACT_APPROVAL_DELEGATED_SCOPE_EMPTY,
        "a `delegated_authority` approval rule has a blank scope",
        false,
        "Name the delegated scope the approver must hold.",
    ),
    rule(
        CONTRACT_TRANSACTION_MODES_EMPTY,
        "the transaction contract declares no mode",
        false,
        "Declare the supported transaction modes, or remove the transaction section.",
    ),
    rule(
        CONTRACT_TRANSACTION_MODE_DUPLICATE,
        "a transaction mode is listed more than once",
        false,
        "List each transaction mode once.",
    ),
    rule(
        CONTRACT_COMPENSATION_CAPABILITY_MISSING,
        "compensation `supported` without a compensation capability id",
        false,
        "Name the capability that compensates this one, or use `best_effort`/`not_required`.",
    ),
    rule(
        CONTRACT_COMPENSATION_INVALID_WINDOW,
        "the compensation window is zero",
        false,
        "Give the compensation window (`window_ms` in `compensation(...)`, `compensation_window_ms` in JSON) a positive value, or leave it out.",
    ),
    // Core validation.
    rule(
        CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
        "the input schema is not a JSON object",
        false,
        "Describe the input with an object schema (a boolean schema is not accepted by core validation).",
    ),
    rule(
        CONTRACT_SIDE_EFFECT_EMPTY,
        "the contract lists no side effect",
        false,
        "List every consequence a caller should assume, e.g. `side_effects = [read]`.",
    ),
    rule(
        CONTRACT_SLA_INVALID_DURATION,
        "an SLA duration is zero",
        false,
        "Give the duration a positive number of milliseconds, or leave it out.",
    ),
    rule(
        CONTRACT_CREDENTIALS_ISSUER_EMPTY,
        "an accepted credential issuer is blank",
        false,
        "Remove the blank issuer (an empty list accepts any issuer).",
    ),
    rule(
        CONTRACT_CREDENTIALS_SCOPE_EMPTY,
        "a required credential scope is blank",
        false,
        "Remove the blank scope or name the scope.",
    ),
    rule(
        CONTRACT_APPROVAL_SELECTOR_ROLE_EMPTY,
        "the approver selector names a blank role",
        false,
        "Name the role whose members may approve.",
    ),
    rule(
        CONTRACT_APPROVAL_SELECTOR_GROUP_EMPTY,
        "the approver selector names a blank group",
        false,
        "Name the group whose members may approve.",
    ),
    rule(
        CONTRACT_APPROVAL_SELECTOR_EXTERNAL_SYSTEM_EMPTY,
        "the approver selector names a blank external system",
        false,
        "Name the external approval system.",
    ),
    // Consistency.
    rule(
        CONTRACT_EXECUTION_EXPECTED_COMPLETION_UNSUPPORTED,
        "`expected_completion` names a mode the execution contract does not support",
        false,
        "Set `expected_completion` to a supported mode (or `any`), or support that mode.",
    ),
    rule(
        CONTRACT_EXECUTION_KEY_RETRY_WITHOUT_IDEMPOTENCY,
        "`retry_safety = safe_with_idempotency_key` while idempotency is `unsupported`",
        false,
        "Support idempotency keys (`idempotency(required, ...)`), or classify retries as `unsafe` or `unknown`.",
    ),
    rule(
        CONTRACT_EXECUTION_RETRY_UNSAFE,
        "`supports_retry` while `retry_safety` is `unsafe` or `unknown`",
        false,
        "Classify retries as `safe` or `safe_with_idempotency_key`, or drop retry support.",
    ),
    rule(
        CONTRACT_EXECUTION_RETRY_SAFETY_WITHOUT_RETRY,
        "required idempotency and a retry-safe classification without retry support",
        false,
        "Support retries (take an `IdempotencyKey` and forward it downstream), or classify retries as `unsafe` or `unknown`.",
    ),
    rule(
        CONTRACT_TRANSACTION_PLAN_REQUIREMENT_WITHOUT_MODES,
        "`requires_plan_before_commit` without both the `plan` and `commit` modes",
        false,
        "Declare both `plan` and `commit` in the transaction modes, or drop `requires_plan`.",
    ),
    rule(
        CONTRACT_TRANSACTION_COMMIT_WITHOUT_PLAN,
        "the `commit` mode without the `plan` mode",
        false,
        "Add `plan` to the transaction modes, or remove `commit`.",
    ),
    rule(
        CONTRACT_TRANSACTION_COMPENSATE_WITHOUT_COMPENSATION,
        "the `compensate` mode without compensation `supported` or `best_effort`",
        false,
        "Declare compensation `supported` (with its compensation capability) or `best_effort`, or remove the `compensate` mode.",
    ),
    rule(
        CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE,
        "compensation `supported` or `best_effort` without the `compensate` transaction mode",
        false,
        "Add `compensate` to the transaction modes, or declare compensation `not_required`/`rollback_not_supported`.",
    ),
    rule(
        CONTRACT_COMPENSATION_SELF_REFERENCE,
        "the compensation capability id names the capability itself",
        false,
        "Name a separate capability that undoes this one's effect, one whose handler takes `Compensation`, or declare compensation `not_required` and remove the `compensate` mode.",
    ),
    rule(
        CONTRACT_TRANSACTION_FIDELITY_WITHOUT_VALIDATION,
        "downstream or simulated dry-run fidelity without a validation handler",
        false,
        "Add a validation handler (`validate = ...`) that asks the provider, or lower the fidelity to `policy_and_schema`.",
    ),
    rule(
        CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY,
        "a validation handler that no dry run or plan calls",
        false,
        "Declare `fidelity = downstream_validation` (or `full_simulation`) in `transaction(...)`, with `dry_run` or `plan` among its modes, so previews ask the handler; or remove `validate = ...`.",
    ),
    // Lints.
    rule(
        CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
        "a mutating side effect without required idempotency",
        true,
        "Require the key: take an `IdempotencyKey` parameter and forward it to the provider (the key is then required), and remove `optional` from an `idempotency(...)` you declared; if the call changes nothing (a lookup over the network is a read), declare `side_effects = [read]` instead; or waive `contract.lint.mutating_without_idempotency` with a reason.",
    ),
    rule(
        CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL,
        "a financial, legal, medical, identity, delete or send_message effect without required approval",
        true,
        "Require approval (`approval(required, selector = ..., evidence = [reason])` and an `Approval` parameter), or waive `contract.lint.side_effect_without_approval` with a reason.",
    ),
    rule(
        CONTRACT_LINT_RISK_WITHOUT_APPROVAL,
        "`high` or `critical` risk without an approval policy that requires approval",
        true,
        "Require approval (`approval(required, ...)` and an `Approval` parameter; hosts demand it for this risk anyway), lower the risk, or waive `contract.lint.risk_without_approval` with a reason.",
    ),
    rule(
        CONTRACT_LINT_POLICY_WITHOUT_CONTRACT,
        "`high`/`critical` risk or `requires_human_approval` on a capability without a contract",
        true,
        "Declare a capability contract, or waive `contract.lint.policy_without_contract` with a reason.",
    ),
    rule(
        CONTRACT_LINT_DATA_WITHOUT_REDACTION,
        "PII or `restricted`/`regulated` data without `redaction_required`",
        true,
        "Require redaction (`data(..., redaction)`), or waive `contract.lint.data_without_redaction` with a reason.",
    ),
    rule(
        CONTRACT_LINT_CREDENTIALS_WITHOUT_SCOPES,
        "required credentials without required scopes",
        true,
        "Name the downstream scopes the credential must carry, or waive `contract.lint.credentials_without_scopes` with a reason.",
    ),
    rule(
        CONTRACT_LINT_APPROVAL_WITHOUT_EVIDENCE,
        "required approval without evidence requirements",
        true,
        "Name the evidence an approval must carry (e.g. `reason`, `input_snapshot`), or waive `contract.lint.approval_without_evidence` with a reason.",
    ),
    // Implementation agreement (upstream checks 18–27).
    rule(
        IMPLEMENTATION_MISSING,
        "a callable capability has no registered implementation claim",
        false,
        "Register a handler for the capability, or mark it as a `resource`.",
    ),
    rule(
        IMPLEMENTATION_CLAIM_UNSUPPORTED,
        "the contract claims behaviour the implementation does not support",
        false,
        "Give the handler the parameter or companion handler that implements the claim (`Cancellation`, `StreamSink<T>`, `IdempotencyKey`, `Checkpoint`, `reconcile = ...`, `Approval`, `Credential`), or stop claiming it.",
    ),
    // Implementation contradictions.
    rule(
        IMPLEMENTATION_CANCELLATION_UNDECLARED,
        "the handler observes cancellation but the contract says `supports_cancel = false`",
        false,
        "Declare `supports_cancel`, or remove the `Cancellation` parameter.",
    ),
    rule(
        IMPLEMENTATION_STREAMING_UNDECLARED,
        "the handler streams but the contract says `supports_streaming = false`",
        false,
        "Declare `supports_streaming`, or remove the `StreamSink` parameter.",
    ),
    rule(
        IMPLEMENTATION_RETRY_UNDECLARED,
        "the handler takes an idempotency key but the contract says `supports_retry = false`",
        false,
        "Declare `supports_retry` with a key-based retry safety, or remove the `IdempotencyKey` parameter.",
    ),
    rule(
        IMPLEMENTATION_TRANSACTION_UNDECLARED,
        "the handler checkpoints a transaction but the contract has no transaction section",
        false,
        "Declare `transaction(modes = [...])`, or remove the `Checkpoint` parameter. A compensating capability (named by another's `compensation(capability = ...)`) takes `Compensation` beside it instead.",
    ),
    rule(
        IMPLEMENTATION_RECONCILIATION_UNDECLARED,
        "a reconciliation handler exists but the transaction modes lack `reconcile`",
        false,
        "Add `reconcile` to the transaction modes, or remove the `reconcile = ...` handler.",
    ),
    rule(
        IMPLEMENTATION_CREDENTIALS_UNDECLARED,
        "the handler takes a credential handle but credentials are not required",
        false,
        "Require credentials in the contract, or remove the `Credential` parameter.",
    ),
    rule(
        IMPLEMENTATION_APPROVAL_UNDECLARED,
        "the handler takes a verified approval but approval is not required",
        false,
        "Require approval in the contract, or remove the `Approval` parameter.",
    ),
    rule(
        IMPLEMENTATION_MODE_UNSUPPORTED,
        "the contract declares `sync` or `async` execution but the handler runs only when streamed",
        false,
        "Declare only `streaming` in `execution(...)` (a `StreamSink` handler cannot answer a call without a stream), or remove the `StreamSink` parameter.",
    ),
    // Compensating handlers (connector level, macro only: admission sees no handler).
    rule(
        IMPLEMENTATION_COMPENSATION_TARGET_UNSUPPORTED,
        "the compensating capability's handler does not take `Compensation`",
        false,
        "Add a `Compensation` parameter to the compensating capability's handler and undo the action it names, or name a capability whose handler takes it.",
    ),
    // Connector level.
    rule(
        MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
        "a compensation capability id names no capability of the manifest",
        true,
        "Name a capability of this connector, or waive `manifest.compensation.capability_unknown` with a reason saying where the external compensating capability lives.",
    ),
    rule(
        MANIFEST_COMPENSATION_APPROVAL_UNGATED,
        "the compensating capability requires approval, but the compensated capability does not gate its compensations",
        false,
        "Declare `compensation(requires_approval)` on the compensated capability (its `approval(...)` section, if any, then names the approvers of the undo; mirror it on the compensating capability), so the host approves every undo and hands the compensating handler its `Approval`.",
    ),
    // Waivers.
    rule(
        MANIFEST_WAIVER_MALFORMED,
        "`/governance/contract_waivers` or one of its entries is not a waiver object",
        false,
        "Publish an array of `{capability_id, code, reason}` objects.",
    ),
    rule(
        MANIFEST_WAIVER_REASON_EMPTY,
        "a waiver has a blank reason",
        false,
        "Say why the rule does not apply to this capability.",
    ),
    rule(
        MANIFEST_WAIVER_CODE_UNKNOWN,
        "a waiver names an unknown rule code",
        false,
        "Use a code from the diagnostics catalogue.",
    ),
    rule(
        MANIFEST_WAIVER_NOT_WAIVABLE,
        "a waiver names a rule that cannot be waived",
        false,
        "Fix the contract instead; only lint rules may be waived.",
    ),
    rule(
        MANIFEST_WAIVER_CAPABILITY_UNKNOWN,
        "a waiver names a capability the manifest does not declare",
        false,
        "Name a declared capability id, or remove the waiver.",
    ),
];

/// The catalogue entry for `code`, if it is a rule code.
pub fn rule_info(code: &str) -> Option<&'static RuleInfo> {
    RULES.iter().find(|rule| rule.code == code)
}

/// The fix sentence for `code`, appended to our own rules' messages.
pub(crate) fn fix_for(code: &str) -> &'static str {
    rule_info(code).map_or("", |rule| rule.fix)
}
