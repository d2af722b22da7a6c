//! Core-validation rules that admission's C1–C15 do not cover.

use serde_json::json;

use super::fixtures::*;
use crate::model::{ApprovalPolicy, ApproverSelector, CredentialPolicy};
use crate::rules::codes::*;
use crate::rules::core_validation;

#[test]
fn input_schema_must_be_an_object() {
    let mut bad = enterprise_capability();
    bad.input_schema = json!(true);
    let issues = check(&bad);
    assert_single(
        &issues,
        CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
        "/input_schema",
        &bad,
    );
    assert!(
        issues[0]
            .message
            .starts_with("capability `cap:test:enterprise` input_schema must be a JSON object. ")
    );
    bad.input_schema = json!({});
    assert_clean(&check(&bad));
}

#[test]
fn input_schema_is_checked_without_a_contract() {
    let mut bad = capability("cap:test:plain", "plain");
    bad.input_schema = json!("object");
    let issues = check(&bad);
    assert_single(
        &issues,
        CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
        "/input_schema",
        &bad,
    );
}

#[test]
fn side_effects_must_not_be_empty() {
    let bad = enterprise_with(|c| c.side_effects.clear());
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_SIDE_EFFECT_EMPTY,
        "/contract/side_effects",
        &bad,
    );
    assert_clean(&check(&enterprise_capability()));
}

#[test]
fn each_zero_sla_duration_is_reported_at_its_key() {
    for field in ["expected_latency_ms", "timeout_ms", "max_queue_delay_ms"] {
        let bad = enterprise_with(|c| {
            if let Some(sla) = c.sla.as_mut() {
                let duration = match field {
                    "expected_latency_ms" => &mut sla.expected_latency_ms,
                    "timeout_ms" => &mut sla.timeout_ms,
                    _ => &mut sla.max_queue_delay_ms,
                };
                *duration = Some(0);
            }
        });
        let issues = check(&bad);
        let path = format!("/contract/sla/{field}");
        assert_single(&issues, CONTRACT_SLA_INVALID_DURATION, &path, &bad);
    }
    assert_clean(&check(&enterprise_capability()));
}

/// The enterprise fixture with optional credentials carrying `issuers` and `scopes`.
fn with_credentials(issuers: &[&str], scopes: &[&str]) -> crate::model::Capability {
    enterprise_with(|c| {
        c.credentials = Some(CredentialPolicy {
            required: false,
            accepted_issuers: issuers.iter().map(|s| (*s).to_owned()).collect(),
            required_scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            allow_oauth_refresh: true,
        })
    })
}

#[test]
fn blank_credential_issuer() {
    let bad = with_credentials(&["vault:primary", "  "], &[]);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_CREDENTIALS_ISSUER_EMPTY,
        "/contract/credentials/accepted_issuers/1",
        &bad,
    );
    assert_clean(&check(&with_credentials(&["vault:primary"], &[])));
}

#[test]
fn blank_credential_scope() {
    let bad = with_credentials(&[], &[""]);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_CREDENTIALS_SCOPE_EMPTY,
        "/contract/credentials/required_scopes/0",
        &bad,
    );
    assert_clean(&check(&with_credentials(&[], &["calendar:write"])));
}

/// The enterprise fixture with a non-required approval policy using `selector`.
fn with_selector(selector: ApproverSelector) -> crate::model::Capability {
    enterprise_with(|c| {
        c.approval = Some(ApprovalPolicy {
            approver_selector: selector,
            ..ApprovalPolicy::default()
        })
    })
}

#[test]
fn blank_approver_selector_names() {
    let cases = [
        (
            ApproverSelector::Role { name: " ".into() },
            ApproverSelector::Role {
                name: "finance".into(),
            },
            CONTRACT_APPROVAL_SELECTOR_ROLE_EMPTY,
            "/contract/approval/approver_selector/name",
        ),
        (
            ApproverSelector::Group { name: "".into() },
            ApproverSelector::Group {
                name: "treasury".into(),
            },
            CONTRACT_APPROVAL_SELECTOR_GROUP_EMPTY,
            "/contract/approval/approver_selector/name",
        ),
        (
            ApproverSelector::ExternalSystem { system: "".into() },
            ApproverSelector::ExternalSystem {
                system: "servicenow".into(),
            },
            CONTRACT_APPROVAL_SELECTOR_EXTERNAL_SYSTEM_EMPTY,
            "/contract/approval/approver_selector/system",
        ),
    ];
    for (bad, fixed, code, path) in cases {
        let capability = with_selector(bad);
        assert_single(&check(&capability), code, path, &capability);
        assert_clean(&check(&with_selector(fixed)));
    }
}

#[test]
fn paths_carry_the_manifest_base() {
    let bad = enterprise_with(|c| c.side_effects.clear());
    let mut issues = Vec::new();
    core_validation(&bad, "/capabilities/7", &mut issues);
    assert_single(
        &issues,
        CONTRACT_SIDE_EFFECT_EMPTY,
        "/capabilities/7/contract/side_effects",
        &bad,
    );
}
