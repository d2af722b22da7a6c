//! The contract against the implementation behind it, in both directions: claims the
//! implementation does not support (upstream admission checks 19–27, exact codes and messages)
//! and support the contract does not declare (DESIGN §2 "Both directions are checked").

use super::codes::*;
use super::{ImplementationFacts, Reporter};
use crate::issue::Issue;
use crate::model::{
    Capability, CapabilityContract, CapabilityImplementationSupport, CompensationMode,
    TransactionMode,
};

/// Upstream checks 19–27: every behaviour the capability claims must be implemented. All issues
/// sit at `base` (the capability itself), as upstream reports them.
pub fn implementation_claims(
    capability: &Capability,
    support: &CapabilityImplementationSupport,
    base: &str,
    out: &mut Vec<Issue>,
) {
    let mut report = Reporter::new(capability, base, out);
    // Check 19 applies with or without a contract; the rest read the contract.
    if capability.is_callable() && !support.invocation {
        claim_unsupported("invocation", &mut report);
    }
    let Some(contract) = &capability.contract else {
        return;
    };
    for (operation, claimed, supported) in claimed_operations(contract, support) {
        if claimed && !supported {
            claim_unsupported(operation, &mut report);
        }
    }
}

/// Checks 20–27 in upstream order: operation name, whether the contract claims it, whether the
/// implementation supports it.
fn claimed_operations(
    contract: &CapabilityContract,
    support: &CapabilityImplementationSupport,
) -> [(&'static str, bool, bool); 8] {
    let execution = &contract.execution;
    let transaction = contract.transaction.as_ref();
    [
        (
            "cancellation",
            execution.supports_cancel,
            support.cancellation,
        ),
        ("streaming", execution.supports_streaming, support.streaming),
        ("retry", execution.supports_retry, support.retry),
        ("transaction", transaction.is_some(), support.transaction),
        (
            "reconciliation",
            transaction.is_some_and(|t| t.supports(TransactionMode::Reconcile)),
            support.reconciliation,
        ),
        (
            "compensation",
            contract
                .compensation
                .as_ref()
                .is_some_and(|c| c.mode == CompensationMode::Supported),
            support.compensation,
        ),
        (
            "approval",
            contract.approval.as_ref().is_some_and(|a| a.required),
            support.approval,
        ),
        (
            "credentials",
            contract.credentials.as_ref().is_some_and(|c| c.required),
            support.credentials,
        ),
    ]
}

/// One upstream `implementation.claim_unsupported` issue.
fn claim_unsupported(operation: &str, report: &mut Reporter<'_>) {
    report.upstream(
        IMPLEMENTATION_CLAIM_UNSUPPORTED,
        "",
        &format!("capability claims `{operation}` but its implementation does not support it"),
    );
}

/// The reverse direction: the implementation does something the contract does not declare, so
/// callers and hosts would not govern it. Nothing to compare when there is no contract.
pub fn implementation_contradictions(
    capability: &Capability,
    facts: &ImplementationFacts,
    base: &str,
    out: &mut Vec<Issue>,
) {
    let Some(contract) = &capability.contract else {
        return;
    };
    let mut report = Reporter::new(capability, base, out);
    for (contradicts, code, suffix, problem) in undeclared_support(contract, &facts.support) {
        if contradicts {
            report.own(code, suffix, problem);
        }
    }
    // Without `streaming` in the contract, `streaming_undeclared` above is the one mistake.
    if facts.stream_required && contract.execution.supports_streaming {
        for (suffix, problem) in modes_without_stream(contract) {
            report.own(IMPLEMENTATION_MODE_UNSUPPORTED, suffix, problem);
        }
    }
}

/// The modes a handler that needs a stream cannot serve but the contract offers: the path of
/// each declaration and the problem. A call in such a mode would pass every check up to the
/// handler and fail there, after approval was asked and the idempotency key reserved.
fn modes_without_stream(
    contract: &CapabilityContract,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    let execution = &contract.execution;
    [
        (
            execution.supports_sync,
            "/contract/execution/supports_sync",
            "the contract declares `sync` execution but the handler takes a `StreamSink` and runs only when the action is streamed",
        ),
        (
            execution.supports_async,
            "/contract/execution/supports_async",
            "the contract declares `async` execution but the handler takes a `StreamSink` and runs only when the action is streamed",
        ),
    ]
    .into_iter()
    .filter_map(|(declared, suffix, problem)| declared.then_some((suffix, problem)))
}

/// Each implemented behaviour the contract could fail to declare, in support-record order:
/// whether it is undeclared, the code, the path suffix of the declaration, and the problem.
fn undeclared_support(
    contract: &CapabilityContract,
    support: &CapabilityImplementationSupport,
) -> [(bool, &'static str, &'static str, &'static str); 7] {
    let execution = &contract.execution;
    let transaction = contract.transaction.as_ref();
    [
        (
            support.cancellation && !execution.supports_cancel,
            IMPLEMENTATION_CANCELLATION_UNDECLARED,
            "/contract/execution/supports_cancel",
            "the handler observes cancellation but the contract says `supports_cancel = false`",
        ),
        (
            support.streaming && !execution.supports_streaming,
            IMPLEMENTATION_STREAMING_UNDECLARED,
            "/contract/execution/supports_streaming",
            "the handler streams but the contract says `supports_streaming = false`",
        ),
        (
            support.retry && !execution.supports_retry,
            IMPLEMENTATION_RETRY_UNDECLARED,
            "/contract/execution/supports_retry",
            "the handler takes an idempotency key but the contract says `supports_retry = false`",
        ),
        (
            support.transaction && transaction.is_none(),
            IMPLEMENTATION_TRANSACTION_UNDECLARED,
            "/contract/transaction",
            "the handler checkpoints a transaction but the contract has no transaction section",
        ),
        (
            support.reconciliation
                && !transaction.is_some_and(|t| t.supports(TransactionMode::Reconcile)),
            IMPLEMENTATION_RECONCILIATION_UNDECLARED,
            "/contract/transaction/supported_modes",
            "a reconciliation handler exists but the transaction modes do not include `reconcile`",
        ),
        (
            support.approval && !contract.approval.as_ref().is_some_and(|a| a.required),
            IMPLEMENTATION_APPROVAL_UNDECLARED,
            "/contract/approval/required",
            "the handler takes a verified approval but the contract does not require approval",
        ),
        (
            support.credentials && !contract.credentials.as_ref().is_some_and(|c| c.required),
            IMPLEMENTATION_CREDENTIALS_UNDECLARED,
            "/contract/credentials/required",
            "the handler takes a credential handle but the contract does not require credentials",
        ),
    ]
}
