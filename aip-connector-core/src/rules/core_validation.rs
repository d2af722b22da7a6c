//! The aip-core `validate_capability` rules (`aip-model.md` §6.2) that admission's C1–C15 do not
//! repeat (§7.5), plus blank approver-selector names. Enforcing both layers means a manifest we
//! accept passes upstream core validation and upstream admission alike.

use super::Reporter;
use super::codes::*;
use crate::issue::Issue;
use crate::model::{
    ApprovalPolicy, ApproverSelector, Capability, CapabilityContract, CredentialPolicy,
    ServiceLevelContract,
};

/// Core-validation rules for one capability; the contract rules run only when it has a contract.
pub fn core_validation(capability: &Capability, base: &str, out: &mut Vec<Issue>) {
    let mut report = Reporter::new(capability, base, out);
    input_schema_is_object(capability, &mut report);
    let Some(contract) = &capability.contract else {
        return;
    };
    side_effects_declared(contract, &mut report);
    if let Some(sla) = &contract.sla {
        sla_durations_positive(sla, &mut report);
    }
    if let Some(credentials) = &contract.credentials {
        credential_issuers_not_blank(credentials, &mut report);
        credential_scopes_not_blank(credentials, &mut report);
    }
    if let Some(approval) = &contract.approval {
        approver_selector_named(approval, &mut report);
    }
}

/// Core validation requires an object input schema, although admission also accepts `true`.
fn input_schema_is_object(capability: &Capability, report: &mut Reporter<'_>) {
    if !capability.input_schema.is_object() {
        report.own(
            CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
            "/input_schema",
            &format!(
                "capability `{}` input_schema must be a JSON object",
                capability.id
            ),
        );
    }
}

/// A contract must say what invoking the capability does, even if only `read`.
fn side_effects_declared(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    if contract.side_effects.is_empty() {
        report.own(
            CONTRACT_SIDE_EFFECT_EMPTY,
            "/contract/side_effects",
            "contract.side_effects must not be empty",
        );
    }
}

/// A zero duration would time out or expire every call immediately.
fn sla_durations_positive(sla: &ServiceLevelContract, report: &mut Reporter<'_>) {
    let durations = [
        ("expected_latency_ms", sla.expected_latency_ms),
        ("timeout_ms", sla.timeout_ms),
        ("max_queue_delay_ms", sla.max_queue_delay_ms),
    ];
    for (field, value) in durations {
        if value == Some(0) {
            report.own(
                CONTRACT_SLA_INVALID_DURATION,
                &format!("/contract/sla/{field}"),
                &format!("contract.sla.{field} must be greater than zero"),
            );
        }
    }
}

/// A blank issuer can match no credential and hides a configuration mistake.
fn credential_issuers_not_blank(credentials: &CredentialPolicy, report: &mut Reporter<'_>) {
    for (k, issuer) in credentials.accepted_issuers.iter().enumerate() {
        if issuer.trim().is_empty() {
            report.own(
                CONTRACT_CREDENTIALS_ISSUER_EMPTY,
                &format!("/contract/credentials/accepted_issuers/{k}"),
                "contract.credentials.accepted_issuers must not contain empty values",
            );
        }
    }
}

/// A blank scope can never be granted, so the credential check could never pass.
fn credential_scopes_not_blank(credentials: &CredentialPolicy, report: &mut Reporter<'_>) {
    for (k, scope) in credentials.required_scopes.iter().enumerate() {
        if scope.trim().is_empty() {
            report.own(
                CONTRACT_CREDENTIALS_SCOPE_EMPTY,
                &format!("/contract/credentials/required_scopes/{k}"),
                "contract.credentials.required_scopes must not contain empty values",
            );
        }
    }
}

/// The legacy selector is the approval rule when `rule` is absent; a blank name selects nobody.
fn approver_selector_named(approval: &ApprovalPolicy, report: &mut Reporter<'_>) {
    let (code, field, value) = match &approval.approver_selector {
        ApproverSelector::Role { name } => (CONTRACT_APPROVAL_SELECTOR_ROLE_EMPTY, "name", name),
        ApproverSelector::Group { name } => (CONTRACT_APPROVAL_SELECTOR_GROUP_EMPTY, "name", name),
        ApproverSelector::ExternalSystem { system } => (
            CONTRACT_APPROVAL_SELECTOR_EXTERNAL_SYSTEM_EMPTY,
            "system",
            system,
        ),
        ApproverSelector::Principal { .. } | ApproverSelector::TenantPolicy => return,
    };
    if value.trim().is_empty() {
        report.own(
            code,
            &format!("/contract/approval/approver_selector/{field}"),
            &format!("contract.approval.approver_selector.{field} must not be empty"),
        );
    }
}
