//! Contract sections that contradict each other (DESIGN §3 "Consistency", plus the conformance
//! rule "contract declares retry safety without retry support"). A contract that fails one of
//! these promises callers something the host could never deliver, so none of them is waivable.

use super::codes::*;
use super::{ImplementationFacts, Reporter, wire_name};
use crate::issue::Issue;
use crate::model::{
    Capability, CapabilityContract, CompensationContract, CompensationMode, ExecutionContract,
    ExpectedCompletionMode, IdempotencyRequirement, RetrySafety, TransactionContract,
    TransactionMode,
};

/// Consistency rules for one capability with a contract. The dry-run fidelity rule needs the
/// implementation and is skipped when `implementation` is `None`.
pub fn consistency(
    capability: &Capability,
    implementation: Option<&ImplementationFacts>,
    base: &str,
    out: &mut Vec<Issue>,
) {
    let Some(contract) = &capability.contract else {
        return;
    };
    let mut report = Reporter::new(capability, base, out);
    expected_completion_supported(&contract.execution, &mut report);
    key_retry_needs_idempotency(contract, &mut report);
    retry_support_needs_safe_retry(&contract.execution, &mut report);
    retry_safety_needs_retry_support(contract, &mut report);
    if let Some(transaction) = &contract.transaction {
        plan_requirement_needs_plan_and_commit(transaction, &mut report);
        commit_needs_plan(transaction, &mut report);
        compensate_mode_needs_compensation(
            transaction,
            contract.compensation.as_ref(),
            &mut report,
        );
    }
    if let Some(compensation) = &contract.compensation {
        compensation_needs_compensate_mode(
            compensation,
            contract.transaction.as_ref(),
            &mut report,
        );
        compensation_names_another_capability(capability, compensation, &mut report);
    }
    if let (Some(transaction), Some(facts)) = (&contract.transaction, implementation) {
        fidelity_needs_validation_handler(transaction, facts, &mut report);
    }
    if let Some(facts) = implementation {
        validation_handler_needs_fidelity(contract.transaction.as_ref(), facts, &mut report);
    }
}

/// Callers plan around `expected_completion`; it must be a mode the capability supports.
fn expected_completion_supported(execution: &ExecutionContract, report: &mut Reporter<'_>) {
    let (mode, flag, supported) = match execution.expected_completion {
        ExpectedCompletionMode::Any => return,
        ExpectedCompletionMode::Sync => ("sync", "supports_sync", execution.supports_sync),
        ExpectedCompletionMode::Async => ("async", "supports_async", execution.supports_async),
        ExpectedCompletionMode::Streaming => (
            "streaming",
            "supports_streaming",
            execution.supports_streaming,
        ),
    };
    if !supported {
        report.own(
            CONTRACT_EXECUTION_EXPECTED_COMPLETION_UNSUPPORTED,
            "/contract/execution/expected_completion",
            &format!("expected_completion is `{mode}` but `{flag}` is false"),
        );
    }
}

/// A retry made safe by the idempotency key cannot exist when keys are not supported.
fn key_retry_needs_idempotency(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    if contract.execution.retry_safety == RetrySafety::SafeWithIdempotencyKey
        && contract.idempotency.requirement == IdempotencyRequirement::Unsupported
    {
        report.own(
            CONTRACT_EXECUTION_KEY_RETRY_WITHOUT_IDEMPOTENCY,
            "/contract/execution/retry_safety",
            "retry_safety is `safe_with_idempotency_key` but idempotency is `unsupported`",
        );
    }
}

/// Implementing retries for an operation that is not known to be retry-safe invites duplicates.
fn retry_support_needs_safe_retry(execution: &ExecutionContract, report: &mut Reporter<'_>) {
    if execution.supports_retry && !execution.retry_safety.allows_retry() {
        let safety = wire_name(&execution.retry_safety);
        report.own(
            CONTRACT_EXECUTION_RETRY_UNSAFE,
            "/contract/execution/supports_retry",
            &format!("supports_retry is true but retry_safety is `{safety}`"),
        );
    }
}

/// Upstream conformance: with required keys, a retry-safe classification promises retries that
/// the implementation says it does not perform.
fn retry_safety_needs_retry_support(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let execution = &contract.execution;
    if contract.idempotency.requirement == IdempotencyRequirement::Required
        && !execution.supports_retry
        && execution.retry_safety.allows_retry()
    {
        report.own(
            CONTRACT_EXECUTION_RETRY_SAFETY_WITHOUT_RETRY,
            "/contract/execution/supports_retry",
            "contract declares retry safety without retry support",
        );
    }
}

/// Requiring a plan before commit is meaningless unless both steps are offered.
fn plan_requirement_needs_plan_and_commit(
    transaction: &TransactionContract,
    report: &mut Reporter<'_>,
) {
    if transaction.requires_plan_before_commit
        && !(transaction.supports(TransactionMode::Plan)
            && transaction.supports(TransactionMode::Commit))
    {
        report.own(
            CONTRACT_TRANSACTION_PLAN_REQUIREMENT_WITHOUT_MODES,
            "/contract/transaction/requires_plan_before_commit",
            "requires_plan_before_commit is set but the modes do not include both `plan` and `commit`",
        );
    }
}

/// Upstream conformance: a commit always commits a plan, so `plan` must be offered.
fn commit_needs_plan(transaction: &TransactionContract, report: &mut Reporter<'_>) {
    let commit = mode_index(transaction, TransactionMode::Commit);
    if let Some(k) = commit.filter(|_| !transaction.supports(TransactionMode::Plan)) {
        report.own(
            CONTRACT_TRANSACTION_COMMIT_WITHOUT_PLAN,
            &format!("/contract/transaction/supported_modes/{k}"),
            "commit support must also publish plan support",
        );
    }
}

/// A `compensate` action needs a compensation contract that says compensation exists.
fn compensate_mode_needs_compensation(
    transaction: &TransactionContract,
    compensation: Option<&CompensationContract>,
    report: &mut Reporter<'_>,
) {
    let Some(k) = mode_index(transaction, TransactionMode::Compensate) else {
        return;
    };
    if !compensation.is_some_and(|c| offers_compensation(c.mode)) {
        report.own(
            CONTRACT_TRANSACTION_COMPENSATE_WITHOUT_COMPENSATION,
            &format!("/contract/transaction/supported_modes/{k}"),
            "the `compensate` transaction mode is declared but compensation is not `supported` or `best_effort`",
        );
    }
}

/// Declared compensation is reachable only through the `compensate` transaction mode.
fn compensation_needs_compensate_mode(
    compensation: &CompensationContract,
    transaction: Option<&TransactionContract>,
    report: &mut Reporter<'_>,
) {
    if offers_compensation(compensation.mode)
        && !transaction.is_some_and(|t| t.supports(TransactionMode::Compensate))
    {
        let mode = wire_name(&compensation.mode);
        report.own(
            CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE,
            "/contract/compensation/mode",
            &format!(
                "compensation is `{mode}` but the transaction modes do not include `compensate`"
            ),
        );
    }
}

/// Compensation is a separate governed action that undoes this one: a `compensate` routed to the
/// capability itself would run its own handler (the effect, not its undoing) again.
fn compensation_names_another_capability(
    capability: &Capability,
    compensation: &CompensationContract,
    report: &mut Reporter<'_>,
) {
    if compensation
        .compensation_capability_id
        .as_ref()
        .is_some_and(|target| *target == capability.id)
    {
        report.own(
            CONTRACT_COMPENSATION_SELF_REFERENCE,
            "/contract/compensation/compensation_capability_id",
            &format!(
                "compensation capability `{}` is this capability itself: a `compensate` would run its own handler again instead of undoing its effect",
                capability.id
            ),
        );
    }
}

/// A dry run or plan that claims downstream fidelity must actually ask the provider.
fn fidelity_needs_validation_handler(
    transaction: &TransactionContract,
    facts: &ImplementationFacts,
    report: &mut Reporter<'_>,
) {
    let previews = transaction.supports(TransactionMode::DryRun)
        || transaction.supports(TransactionMode::Plan);
    if previews
        && transaction.dry_run_fidelity.needs_validation_handler()
        && !facts.validation_handler
    {
        let fidelity = wire_name(&transaction.dry_run_fidelity);
        report.own(
            CONTRACT_TRANSACTION_FIDELITY_WITHOUT_VALIDATION,
            "/contract/transaction/dry_run_fidelity",
            &format!(
                "dry_run_fidelity is `{fidelity}` but no validation handler backs dry runs or plans"
            ),
        );
    }
}

/// The reverse: a validation handler is called only by a dry run or plan whose fidelity asks
/// the provider. Otherwise it compiles, admits and is never called, so previews quietly lack
/// what it would have said (an author trial's dry run showed no price).
fn validation_handler_needs_fidelity(
    transaction: Option<&TransactionContract>,
    facts: &ImplementationFacts,
    report: &mut Reporter<'_>,
) {
    if !facts.validation_handler {
        return;
    }
    let Some(transaction) = transaction
        .filter(|t| t.supports(TransactionMode::DryRun) || t.supports(TransactionMode::Plan))
    else {
        report.own(
            CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY,
            "/contract/transaction",
            "a validation handler (`validate = ...`) exists but the capability offers no `dry_run` or `plan`, the only calls that ask it",
        );
        return;
    };
    if !transaction.dry_run_fidelity.needs_validation_handler() {
        let fidelity = wire_name(&transaction.dry_run_fidelity);
        report.own(
            CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY,
            "/contract/transaction/dry_run_fidelity",
            &format!(
                "a validation handler (`validate = ...`) exists but dry_run_fidelity is `{fidelity}`, so no dry run or plan ever calls it"
            ),
        );
    }
}

/// Whether the compensation mode says a compensating action exists.
fn offers_compensation(mode: CompensationMode) -> bool {
    matches!(
        mode,
        CompensationMode::Supported | CompensationMode::BestEffort
    )
}

/// The index of the first occurrence of `mode`, for a path to the offending entry.
fn mode_index(transaction: &TransactionContract, mode: TransactionMode) -> Option<usize> {
    transaction.supported_modes.iter().position(|m| *m == mode)
}
