//! Waivable governance lints.

use super::fixtures::*;
use crate::model::{
    ApprovalPolicy, CredentialPolicy, DataSensitivity, EvidenceRequirement, IdempotencyRequirement,
    RiskLevel, SideEffect,
};
use crate::rules::codes::*;
use crate::rules::{lints, rule_info};

#[test]
fn mutating_side_effect_needs_required_idempotency() {
    let bad = enterprise_with(|c| c.idempotency.requirement = IdempotencyRequirement::Optional);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
        "/contract/idempotency/requirement",
        &bad,
    );
    assert!(issues[0].message.starts_with(
        "mutating contract must require idempotency: side effect `write` is mutating (every side effect but `read` is), but idempotency is `optional`. "
    ));
    assert!(
        issues[0]
            .message
            .contains("waive `contract.lint.mutating_without_idempotency` with a reason")
    );
    assert_clean(&check(&enterprise_with(|c| {
        c.idempotency.requirement = IdempotencyRequirement::Optional;
        c.side_effects = vec![SideEffect::Read];
    })));
}

#[test]
fn regulated_side_effects_need_required_approval() {
    for effect in [
        SideEffect::Financial,
        SideEffect::Legal,
        SideEffect::Medical,
        SideEffect::Identity,
        SideEffect::Delete,
        SideEffect::SendMessage,
    ] {
        let bad = enterprise_with(|c| c.side_effects.push(effect));
        assert_single(
            &check(&bad),
            CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL,
            "/contract/side_effects/2",
            &bad,
        );
    }
    let mut fixed = governed_financial_capability(REFUND_ID);
    assert_clean(&check(&fixed));
    if let Some(approval) = fixed.contract.as_mut().and_then(|c| c.approval.as_mut()) {
        approval.required = false;
    }
    let issues = check(&fixed);
    assert_single(
        &issues,
        CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL,
        "/contract/side_effects/0",
        &fixed,
    );
    assert!(issues[0].message.starts_with(
        "regulated or externally visible side effects must require approval (`financial` without required approval). "
    ));
}

#[test]
fn high_risk_needs_required_approval() {
    for risk in [RiskLevel::High, RiskLevel::Critical] {
        let mut bad = enterprise_capability();
        bad.risk = Some(risk);
        assert_single(
            &check(&bad),
            CONTRACT_LINT_RISK_WITHOUT_APPROVAL,
            "/risk",
            &bad,
        );
    }
    let mut fixed = enterprise_with(|c| {
        c.approval = Some(ApprovalPolicy {
            required: true,
            evidence_requirements: vec![EvidenceRequirement::Reason],
            ..ApprovalPolicy::default()
        })
    });
    fixed.risk = Some(RiskLevel::Critical);
    assert_clean(&check(&fixed));
    fixed.risk = Some(RiskLevel::Medium);
    fixed.contract = enterprise_capability().contract;
    assert_clean(&check(&fixed));
}

#[test]
fn governed_capability_needs_a_contract() {
    let mut bad = capability("cap:test:plain", "plain");
    bad.risk = Some(RiskLevel::Critical);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_LINT_POLICY_WITHOUT_CONTRACT,
        "/risk",
        &bad,
    );
    assert!(
        issues[0].message.starts_with(
            "cap:test:plain requires enterprise policy but has no CapabilityContract. "
        )
    );

    bad.risk = Some(RiskLevel::Low);
    bad.requires_human_approval = Some(true);
    assert_single(
        &check(&bad),
        CONTRACT_LINT_POLICY_WITHOUT_CONTRACT,
        "/requires_human_approval",
        &bad,
    );

    bad.requires_human_approval = Some(false);
    assert_clean(&check(&bad));
}

#[test]
fn sensitive_data_needs_redaction() {
    let pii = enterprise_with(|c| {
        c.data.contains_pii = true;
        c.data.redaction_required = false;
    });
    assert_single(
        &check(&pii),
        CONTRACT_LINT_DATA_WITHOUT_REDACTION,
        "/contract/data/redaction_required",
        &pii,
    );
    for sensitivity in [DataSensitivity::Restricted, DataSensitivity::Regulated] {
        let bad = enterprise_with(|c| {
            c.data.sensitivity = sensitivity;
            c.data.redaction_required = false;
        });
        assert_single(
            &check(&bad),
            CONTRACT_LINT_DATA_WITHOUT_REDACTION,
            "/contract/data/redaction_required",
            &bad,
        );
    }
    assert_clean(&check(&enterprise_with(|c| {
        c.data.redaction_required = false;
    })));
}

#[test]
fn required_credentials_need_scopes() {
    let with_scopes = |scopes: Vec<String>| {
        enterprise_with(|c| {
            c.credentials = Some(CredentialPolicy {
                required: true,
                required_scopes: scopes,
                ..CredentialPolicy::default()
            })
        })
    };
    let bad = with_scopes(Vec::new());
    assert_single(
        &check(&bad),
        CONTRACT_LINT_CREDENTIALS_WITHOUT_SCOPES,
        "/contract/credentials/required_scopes",
        &bad,
    );
    assert_clean(&check(&with_scopes(vec!["calendar:write".to_owned()])));
}

#[test]
fn required_approval_needs_evidence() {
    let with_evidence = |evidence: Vec<EvidenceRequirement>| {
        enterprise_with(|c| {
            c.approval = Some(ApprovalPolicy {
                required: true,
                evidence_requirements: evidence,
                ..ApprovalPolicy::default()
            })
        })
    };
    let bad = with_evidence(Vec::new());
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_LINT_APPROVAL_WITHOUT_EVIDENCE,
        "/contract/approval/evidence_requirements",
        &bad,
    );
    assert!(
        issues[0]
            .message
            .starts_with("approval policy should declare evidence requirements. ")
    );
    assert_clean(&check(&with_evidence(vec![
        EvidenceRequirement::InputSnapshot,
    ])));
}

#[test]
fn waivers_suppress_only_the_named_capability_and_code() {
    let bad = enterprise_with(|c| {
        c.idempotency.requirement = IdempotencyRequirement::Optional;
        c.data.contains_pii = true;
        c.data.redaction_required = false;
    });
    assert_eq!(
        codes_and_paths(&check(&bad)),
        [
            (
                CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
                "/contract/idempotency/requirement"
            ),
            (
                CONTRACT_LINT_DATA_WITHOUT_REDACTION,
                "/contract/data/redaction_required"
            ),
        ]
    );

    let idempotency_waiver = waiver(
        ENTERPRISE_ID,
        CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
        "provider deduplicates by external reference",
    );
    assert_eq!(
        codes_and_paths(&check_waived(&bad, &[idempotency_waiver])),
        [(
            CONTRACT_LINT_DATA_WITHOUT_REDACTION,
            "/contract/data/redaction_required"
        )]
    );

    let other_capability = waiver(
        "cap:test:other",
        CONTRACT_LINT_DATA_WITHOUT_REDACTION,
        "other capability",
    );
    assert_eq!(check_waived(&bad, &[other_capability]).len(), 2);
}

#[test]
fn waivers_do_not_suppress_non_lint_rules() {
    let bad = enterprise_with(|c| c.idempotency.ttl_ms = Some(0));
    let waivers = [waiver(
        ENTERPRISE_ID,
        CONTRACT_IDEMPOTENCY_INVALID_TTL,
        "not waivable",
    )];
    assert_single(
        &check_waived(&bad, &waivers),
        CONTRACT_IDEMPOTENCY_INVALID_TTL,
        "/contract/idempotency/ttl_ms",
        &bad,
    );
}

#[test]
fn lint_messages_end_with_the_catalogue_fix() {
    let bad = enterprise_with(|c| {
        c.idempotency.requirement = IdempotencyRequirement::Optional;
        c.data.contains_pii = true;
        c.data.redaction_required = false;
    });
    let mut issues = Vec::new();
    lints(&bad, &[], "/capabilities/0", &mut issues);
    assert_eq!(issues.len(), 2);
    for issue in &issues {
        assert!(issue.path.starts_with("/capabilities/0/contract/"));
        let fix = rule_info(&issue.code)
            .map(|rule| rule.fix)
            .unwrap_or("missing");
        assert!(issue.message.ends_with(fix), "{}", issue.message);
    }
}
