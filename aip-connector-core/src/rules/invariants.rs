//! Upstream admission checks C1–C15 and the approval-rule recursion (`aip-model.md` §7.4), with
//! upstream's exact codes, paths, messages and order, so our admission reports what upstream's
//! would.

use std::collections::HashSet;
use std::hash::Hash;

use super::Reporter;
use super::codes::*;
use crate::issue::Issue;
use crate::model::{
    ApprovalPolicy, ApprovalRule, Capability, CapabilityContract, CompensationContract,
    CompensationMode, TransactionContract,
};

/// C1–C15 plus the approval-rule recursion for one capability; nothing when it has no contract.
pub fn contract_invariants(capability: &Capability, base: &str, out: &mut Vec<Issue>) {
    let Some(contract) = &capability.contract else {
        return;
    };
    let mut report = Reporter::new(capability, base, out);
    execution_has_completion_mode(contract, &mut report);
    side_effects_unique(contract, &mut report);
    idempotency_ttl_positive(contract, &mut report);
    if let Some(approval) = &contract.approval {
        approval_distinct_principals_positive(approval, &mut report);
        if let Some(rule) = &approval.rule {
            approval_rule_tree_valid(rule, &mut report);
        }
    }
    if let Some(transaction) = &contract.transaction {
        transaction_modes_declared(transaction, &mut report);
        transaction_modes_unique(transaction, &mut report);
    }
    if let Some(compensation) = &contract.compensation {
        supported_compensation_names_capability(compensation, &mut report);
        compensation_window_positive(compensation, &mut report);
    }
}

/// C1: a capability that can complete in no way cannot be invoked.
fn execution_has_completion_mode(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let execution = &contract.execution;
    if !(execution.supports_sync || execution.supports_async || execution.supports_streaming) {
        report.upstream(
            CONTRACT_EXECUTION_NO_COMPLETION_MODE,
            "/contract/execution",
            "execution must support sync, async, or streaming",
        );
    }
}

/// C2: side effects are a set; a repeat signals a copy-paste error.
fn side_effects_unique(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    if has_duplicates(&contract.side_effects) {
        report.upstream(
            CONTRACT_SIDE_EFFECT_DUPLICATE,
            "/contract/side_effects",
            "side effects must be unique",
        );
    }
}

/// C3: a zero TTL would expire every key at once, making deduplication meaningless.
fn idempotency_ttl_positive(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    if contract.idempotency.ttl_ms == Some(0) {
        report.upstream(
            CONTRACT_IDEMPOTENCY_INVALID_TTL,
            "/contract/idempotency/ttl_ms",
            "idempotency TTL must be greater than zero",
        );
    }
}

/// C4: an approval nobody has to give is no approval.
fn approval_distinct_principals_positive(approval: &ApprovalPolicy, report: &mut Reporter<'_>) {
    if approval.minimum_distinct_principals == 0 {
        report.upstream(
            CONTRACT_APPROVAL_INVALID_DISTINCT_PRINCIPALS,
            "/contract/approval/minimum_distinct_principals",
            "minimum_distinct_principals must be greater than zero",
        );
    }
}

/// C5–C11 over the whole rule tree, pre-order; children are visited even when the parent is
/// flagged. An explicit stack keeps a hand-built, very deep tree from exhausting the call stack.
fn approval_rule_tree_valid(root: &ApprovalRule, report: &mut Reporter<'_>) {
    // Each entry carries the node's path relative to the capability.
    let mut pending = vec![(root, "/contract/approval/rule".to_owned())];
    while let Some((rule, suffix)) = pending.pop() {
        approval_rule_node_valid(rule, &suffix, report);
        if let Some(children) = approval_rule_children(rule) {
            for (j, child) in children.iter().enumerate().rev() {
                pending.push((child, format!("{suffix}/rules/{j}")));
            }
        }
    }
}

/// The children of a composite rule node.
fn approval_rule_children(rule: &ApprovalRule) -> Option<&[ApprovalRule]> {
    match rule {
        ApprovalRule::All { rules, .. }
        | ApprovalRule::Any { rules }
        | ApprovalRule::Quorum { rules, .. } => Some(rules),
        _ => None,
    }
}

/// C5–C11 for one node: composites must be satisfiable, leaves must name who approves.
fn approval_rule_node_valid(rule: &ApprovalRule, suffix: &str, report: &mut Reporter<'_>) {
    let problem = match rule {
        ApprovalRule::All { rules, .. } | ApprovalRule::Any { rules } if rules.is_empty() => {
            Some((
                CONTRACT_APPROVAL_RULE_EMPTY,
                "all and any rules require at least one child",
            ))
        }
        ApprovalRule::Quorum {
            required, rules, ..
        } if !quorum_within_children(*required, rules.len()) => Some((
            CONTRACT_APPROVAL_QUORUM_INVALID,
            "quorum must be within the number of child rules",
        )),
        ApprovalRule::Role { name } if name.trim().is_empty() => {
            Some((CONTRACT_APPROVAL_ROLE_EMPTY, "role name must not be empty"))
        }
        ApprovalRule::Group { name } if name.trim().is_empty() => Some((
            CONTRACT_APPROVAL_GROUP_EMPTY,
            "group name must not be empty",
        )),
        ApprovalRule::TenantPolicy { policy_id } if policy_id.trim().is_empty() => Some((
            CONTRACT_APPROVAL_TENANT_POLICY_EMPTY,
            "tenant policy id must not be empty",
        )),
        ApprovalRule::ExternalSystem { system } if system.trim().is_empty() => Some((
            CONTRACT_APPROVAL_EXTERNAL_SYSTEM_EMPTY,
            "external approval system id must not be empty",
        )),
        ApprovalRule::DelegatedAuthority { scope, .. } if scope.trim().is_empty() => Some((
            CONTRACT_APPROVAL_DELEGATED_SCOPE_EMPTY,
            "delegated authority scope must not be empty",
        )),
        _ => None,
    };
    if let Some((code, message)) = problem {
        report.upstream(code, suffix, message);
    }
}

/// Whether a quorum of `required` can be met by `children` rules (so an empty quorum never can).
fn quorum_within_children(required: u32, children: usize) -> bool {
    required > 0 && usize::try_from(required).is_ok_and(|required| required <= children)
}

/// C12: a transaction section with no mode accepts no transaction request.
fn transaction_modes_declared(transaction: &TransactionContract, report: &mut Reporter<'_>) {
    if transaction.supported_modes.is_empty() {
        report.upstream(
            CONTRACT_TRANSACTION_MODES_EMPTY,
            "/contract/transaction/supported_modes",
            "transaction contract must declare at least one mode",
        );
    }
}

/// C13: transaction modes are a set.
fn transaction_modes_unique(transaction: &TransactionContract, report: &mut Reporter<'_>) {
    if has_duplicates(&transaction.supported_modes) {
        report.upstream(
            CONTRACT_TRANSACTION_MODE_DUPLICATE,
            "/contract/transaction/supported_modes",
            "transaction modes must be unique",
        );
    }
}

/// C14: `supported` compensation is a governed action, so it must say which capability runs it.
fn supported_compensation_names_capability(
    compensation: &CompensationContract,
    report: &mut Reporter<'_>,
) {
    if compensation.mode == CompensationMode::Supported
        && compensation.compensation_capability_id.is_none()
    {
        report.upstream(
            CONTRACT_COMPENSATION_CAPABILITY_MISSING,
            "/contract/compensation/compensation_capability_id",
            "supported compensation requires a compensation capability id",
        );
    }
}

/// C15: a zero window would forbid compensation the moment the action completes.
fn compensation_window_positive(compensation: &CompensationContract, report: &mut Reporter<'_>) {
    if compensation.compensation_window_ms == Some(0) {
        report.upstream(
            CONTRACT_COMPENSATION_INVALID_WINDOW,
            "/contract/compensation/compensation_window_ms",
            "compensation window must be greater than zero",
        );
    }
}

/// Whether some item occurs more than once.
fn has_duplicates<T: Eq + Hash>(items: &[T]) -> bool {
    let mut seen = HashSet::with_capacity(items.len());
    items.iter().any(|item| !seen.insert(item))
}
