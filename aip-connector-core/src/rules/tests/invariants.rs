//! C1–C15 and the approval-rule recursion: upstream codes, paths and messages.

use super::fixtures::*;
use crate::model::{
    ApprovalPolicy, ApprovalRule, CapabilityContract, CompensationMode, SideEffect, TransactionMode,
};
use crate::rules::codes::*;
use crate::rules::contract_invariants;

/// Runs the invariants alone under a manifest-style base.
fn invariants_at(base: &str, change: impl FnOnce(&mut CapabilityContract)) -> Vec<crate::Issue> {
    let mut issues = Vec::new();
    contract_invariants(&enterprise_with(change), base, &mut issues);
    issues
}

#[test]
fn c1_no_completion_mode() {
    let bad = enterprise_with(|c| {
        c.execution.supports_sync = false;
        c.execution.supports_async = false;
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_EXECUTION_NO_COMPLETION_MODE,
        "/contract/execution",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "execution must support sync, async, or streaming"
    );
    assert_clean(&check(&enterprise_with(|c| {
        c.execution.supports_sync = false;
        c.execution.supports_async = false;
        c.execution.supports_streaming = true;
    })));
}

#[test]
fn c2_duplicate_side_effect() {
    let bad = enterprise_with(|c| c.side_effects.push(SideEffect::Write));
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_SIDE_EFFECT_DUPLICATE,
        "/contract/side_effects",
        &bad,
    );
    assert_eq!(issues[0].message, "side effects must be unique");
    assert_clean(&check(&enterprise_capability()));
}

#[test]
fn c3_zero_idempotency_ttl() {
    let bad = enterprise_with(|c| c.idempotency.ttl_ms = Some(0));
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_IDEMPOTENCY_INVALID_TTL,
        "/contract/idempotency/ttl_ms",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "idempotency TTL must be greater than zero"
    );
    assert_clean(&check(&enterprise_with(|c| c.idempotency.ttl_ms = None)));
}

#[test]
fn c4_zero_distinct_principals() {
    let bad = enterprise_with(|c| {
        c.approval = Some(ApprovalPolicy {
            minimum_distinct_principals: 0,
            ..ApprovalPolicy::default()
        })
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_APPROVAL_INVALID_DISTINCT_PRINCIPALS,
        "/contract/approval/minimum_distinct_principals",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "minimum_distinct_principals must be greater than zero"
    );
    assert_clean(&check(&enterprise_with(|c| {
        c.approval = Some(ApprovalPolicy::default())
    })));
}

/// The enterprise fixture with a non-required approval policy whose rule is `rule`.
fn with_rule(rule: ApprovalRule) -> crate::model::Capability {
    enterprise_with(|c| {
        c.approval = Some(ApprovalPolicy {
            rule: Some(rule),
            ..ApprovalPolicy::default()
        })
    })
}

fn role(name: &str) -> ApprovalRule {
    ApprovalRule::Role {
        name: name.to_owned(),
    }
}

/// One approval-rule leaf or composite per C5–C11 code: (bad rule, fixed rule, code, message).
fn approval_rule_cases() -> Vec<(ApprovalRule, ApprovalRule, &'static str, &'static str)> {
    vec![
        (
            ApprovalRule::All {
                rules: vec![],
                allow_decision_reuse: false,
            },
            ApprovalRule::All {
                rules: vec![role("finance")],
                allow_decision_reuse: false,
            },
            CONTRACT_APPROVAL_RULE_EMPTY,
            "all and any rules require at least one child",
        ),
        (
            ApprovalRule::Any { rules: vec![] },
            ApprovalRule::Any {
                rules: vec![role("finance")],
            },
            CONTRACT_APPROVAL_RULE_EMPTY,
            "all and any rules require at least one child",
        ),
        (
            ApprovalRule::Quorum {
                required: 2,
                rules: vec![role("finance")],
                distinct_principals: true,
            },
            ApprovalRule::Quorum {
                required: 1,
                rules: vec![role("finance")],
                distinct_principals: true,
            },
            CONTRACT_APPROVAL_QUORUM_INVALID,
            "quorum must be within the number of child rules",
        ),
        (
            ApprovalRule::Quorum {
                required: 0,
                rules: vec![role("finance")],
                distinct_principals: true,
            },
            ApprovalRule::Quorum {
                required: 1,
                rules: vec![role("finance")],
                distinct_principals: false,
            },
            CONTRACT_APPROVAL_QUORUM_INVALID,
            "quorum must be within the number of child rules",
        ),
        (
            role("  "),
            role("finance"),
            CONTRACT_APPROVAL_ROLE_EMPTY,
            "role name must not be empty",
        ),
        (
            ApprovalRule::Group {
                name: String::new(),
            },
            ApprovalRule::Group {
                name: "treasury".to_owned(),
            },
            CONTRACT_APPROVAL_GROUP_EMPTY,
            "group name must not be empty",
        ),
        (
            ApprovalRule::TenantPolicy {
                policy_id: " ".to_owned(),
            },
            ApprovalRule::TenantPolicy {
                policy_id: "payments".to_owned(),
            },
            CONTRACT_APPROVAL_TENANT_POLICY_EMPTY,
            "tenant policy id must not be empty",
        ),
        (
            ApprovalRule::ExternalSystem {
                system: String::new(),
            },
            ApprovalRule::ExternalSystem {
                system: "servicenow".to_owned(),
            },
            CONTRACT_APPROVAL_EXTERNAL_SYSTEM_EMPTY,
            "external approval system id must not be empty",
        ),
        (
            ApprovalRule::DelegatedAuthority {
                scope: "\t".to_owned(),
                max_risk: None,
                max_value: Some(10),
            },
            ApprovalRule::DelegatedAuthority {
                scope: "payments:approve".to_owned(),
                max_risk: None,
                max_value: Some(10),
            },
            CONTRACT_APPROVAL_DELEGATED_SCOPE_EMPTY,
            "delegated authority scope must not be empty",
        ),
    ]
}

#[test]
fn c5_to_c11_each_approval_rule_node() {
    for (bad, fixed, code, message) in approval_rule_cases() {
        let capability = with_rule(bad);
        let issues = check(&capability);
        assert_single(&issues, code, "/contract/approval/rule", &capability);
        assert_eq!(issues[0].message, message);
        assert_clean(&check(&with_rule(fixed)));
    }
}

#[test]
fn principal_rule_is_never_flagged() {
    assert_clean(&check(&with_rule(ApprovalRule::Principal {
        id: "user:alice".into(),
    })));
}

#[test]
fn approval_rule_recursion_visits_children_of_flagged_parents() {
    let tree = ApprovalRule::All {
        rules: vec![
            ApprovalRule::Any { rules: vec![] },
            ApprovalRule::Quorum {
                required: 3,
                rules: vec![
                    role(""),
                    ApprovalRule::Any {
                        rules: vec![ApprovalRule::Group {
                            name: " ".to_owned(),
                        }],
                    },
                ],
                distinct_principals: true,
            },
            ApprovalRule::Principal {
                id: "user:alice".into(),
            },
            ApprovalRule::ExternalSystem {
                system: String::new(),
            },
        ],
        allow_decision_reuse: false,
    };
    let capability = with_rule(tree);
    let mut issues = Vec::new();
    contract_invariants(&capability, "/capabilities/3", &mut issues);
    let rule = "/capabilities/3/contract/approval/rule";
    assert_eq!(
        super::fixtures::codes_and_paths(&issues),
        [
            (
                CONTRACT_APPROVAL_RULE_EMPTY,
                format!("{rule}/rules/0").as_str()
            ),
            (
                CONTRACT_APPROVAL_QUORUM_INVALID,
                format!("{rule}/rules/1").as_str()
            ),
            (
                CONTRACT_APPROVAL_ROLE_EMPTY,
                format!("{rule}/rules/1/rules/0").as_str()
            ),
            (
                CONTRACT_APPROVAL_GROUP_EMPTY,
                format!("{rule}/rules/1/rules/1/rules/0").as_str()
            ),
            (
                CONTRACT_APPROVAL_EXTERNAL_SYSTEM_EMPTY,
                format!("{rule}/rules/3").as_str()
            ),
        ]
    );
    assert!(
        issues
            .iter()
            .all(|issue| issue.capability_id.as_ref() == Some(&capability.id))
    );
}

#[test]
fn approval_rule_recursion_paths_nest_at_depth() {
    let mut rule = role("");
    for _ in 0..50 {
        rule = ApprovalRule::Any { rules: vec![rule] };
    }
    let mut issues = Vec::new();
    contract_invariants(&with_rule(rule), "", &mut issues);
    let expected = format!("/contract/approval/rule{}", "/rules/0".repeat(50));
    assert_eq!(
        super::fixtures::codes_and_paths(&issues),
        [(CONTRACT_APPROVAL_ROLE_EMPTY, expected.as_str())]
    );
}

#[test]
fn c12_empty_transaction_modes() {
    let bad = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.clear();
            t.requires_plan_before_commit = false;
        }
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_TRANSACTION_MODES_EMPTY,
        "/contract/transaction/supported_modes",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "transaction contract must declare at least one mode"
    );
    assert_clean(&check(&enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes = vec![TransactionMode::Execute];
            t.requires_plan_before_commit = false;
        }
    })));
}

#[test]
fn c13_duplicate_transaction_mode() {
    let bad = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.push(TransactionMode::Execute);
        }
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_TRANSACTION_MODE_DUPLICATE,
        "/contract/transaction/supported_modes",
        &bad,
    );
    assert_eq!(issues[0].message, "transaction modes must be unique");
}

#[test]
fn c14_supported_compensation_without_capability() {
    let bad = financial_with(|c| {
        if let Some(comp) = c.compensation.as_mut() {
            comp.compensation_capability_id = None;
        }
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_COMPENSATION_CAPABILITY_MISSING,
        "/contract/compensation/compensation_capability_id",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "supported compensation requires a compensation capability id"
    );
    assert_clean(&check(&financial_with(|c| {
        if let Some(comp) = c.compensation.as_mut() {
            comp.compensation_capability_id = None;
            comp.mode = CompensationMode::BestEffort;
        }
    })));
}

#[test]
fn c15_zero_compensation_window() {
    let bad = financial_with(|c| {
        if let Some(comp) = c.compensation.as_mut() {
            comp.compensation_window_ms = Some(0);
        }
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_COMPENSATION_INVALID_WINDOW,
        "/contract/compensation/compensation_window_ms",
        &bad,
    );
    assert_eq!(
        issues[0].message,
        "compensation window must be greater than zero"
    );
    assert_clean(&check(&governed_financial_capability(REFUND_ID)));
}

#[test]
fn invariants_follow_upstream_order_under_a_manifest_base() {
    let issues = invariants_at("/capabilities/3", |c| {
        c.execution.supports_sync = false;
        c.execution.supports_async = false;
        c.side_effects.push(SideEffect::Read);
        c.idempotency.ttl_ms = Some(0);
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.push(TransactionMode::Plan);
        }
        c.compensation = None;
    });
    assert_eq!(
        super::fixtures::codes_and_paths(&issues),
        [
            (
                CONTRACT_EXECUTION_NO_COMPLETION_MODE,
                "/capabilities/3/contract/execution"
            ),
            (
                CONTRACT_SIDE_EFFECT_DUPLICATE,
                "/capabilities/3/contract/side_effects"
            ),
            (
                CONTRACT_IDEMPOTENCY_INVALID_TTL,
                "/capabilities/3/contract/idempotency/ttl_ms"
            ),
            (
                CONTRACT_TRANSACTION_MODE_DUPLICATE,
                "/capabilities/3/contract/transaction/supported_modes"
            ),
        ]
    );
}

#[test]
fn capability_without_contract_has_no_invariant_issues() {
    let mut issues = Vec::new();
    contract_invariants(&capability("cap:test:plain", "plain"), "", &mut issues);
    assert_clean(&issues);
}
