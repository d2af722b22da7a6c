//! Governance lints (DESIGN §3, the last four "Consistency" bullets, and the upstream
//! `enterprise.capability_contract` conformance rules). Unlike the other groups these may be
//! waived, but only by a published waiver that carries a reason.

use super::codes::*;
use super::{Reporter, Waiver, is_waived, wire_name};
use crate::issue::Issue;
use crate::model::{Capability, CapabilityContract, IdempotencyRequirement, RiskLevel};

/// The lints for one capability, skipping those a waiver covers for it.
pub fn lints(capability: &Capability, waivers: &[Waiver], base: &str, out: &mut Vec<Issue>) {
    let mut found = Vec::new();
    {
        let mut report = Reporter::new(capability, base, &mut found);
        match &capability.contract {
            None => governed_capability_has_contract(capability, &mut report),
            Some(contract) => {
                mutating_requires_idempotency(contract, &mut report);
                regulated_effects_require_approval(contract, &mut report);
                high_risk_requires_approval(capability, contract, &mut report);
                sensitive_data_requires_redaction(contract, &mut report);
                required_credentials_name_scopes(contract, &mut report);
                required_approval_names_evidence(contract, &mut report);
            }
        }
    }
    out.extend(
        found
            .into_iter()
            .filter(|issue| !is_waived(waivers, &capability.id, &issue.code)),
    );
}

/// Whether the risk level makes hosts demand approval.
fn is_high_risk(risk: Option<RiskLevel>) -> bool {
    matches!(risk, Some(RiskLevel::High | RiskLevel::Critical))
}

/// Whether the contract's approval policy requires approval.
fn requires_approval(contract: &CapabilityContract) -> bool {
    contract.approval.as_ref().is_some_and(|a| a.required)
}

/// Upstream conformance: a capability the host must govern needs a contract to govern it by.
fn governed_capability_has_contract(capability: &Capability, report: &mut Reporter<'_>) {
    let suffix = if is_high_risk(capability.risk) {
        "/risk"
    } else if capability.requires_human_approval == Some(true) {
        "/requires_human_approval"
    } else {
        return;
    };
    report.own(
        CONTRACT_LINT_POLICY_WITHOUT_CONTRACT,
        suffix,
        &format!(
            "{} requires enterprise policy but has no CapabilityContract",
            capability.id
        ),
    );
}

/// A retried or duplicated mutation without a key can apply its effect twice.
fn mutating_requires_idempotency(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let requirement = contract.idempotency.requirement;
    if requirement == IdempotencyRequirement::Required {
        return;
    }
    if let Some(effect) = contract.side_effects.iter().find(|e| e.is_mutating()) {
        report.own(
            CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
            "/contract/idempotency/requirement",
            &format!(
                "mutating contract must require idempotency: side effect `{}` is mutating (every side effect but `read` is), but idempotency is `{}`",
                wire_name(effect),
                wire_name(&requirement),
            ),
        );
    }
}

/// Upstream conformance: regulated or externally visible effects need a human decision.
fn regulated_effects_require_approval(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    if requires_approval(contract) {
        return;
    }
    let offending: Vec<(usize, String)> = contract
        .side_effects
        .iter()
        .enumerate()
        .filter(|(_, effect)| effect.needs_approval())
        .map(|(k, effect)| (k, format!("`{}`", wire_name(effect))))
        .collect();
    if let Some((first, _)) = offending.first() {
        let names: Vec<&str> = offending.iter().map(|(_, name)| name.as_str()).collect();
        report.own(
            CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL,
            &format!("/contract/side_effects/{first}"),
            &format!(
                "regulated or externally visible side effects must require approval ({} without required approval)",
                names.join(", ")
            ),
        );
    }
}

/// Hosts demand approval for high and critical risk anyway; the contract must say so.
fn high_risk_requires_approval(
    capability: &Capability,
    contract: &CapabilityContract,
    report: &mut Reporter<'_>,
) {
    if is_high_risk(capability.risk) && !requires_approval(contract) {
        let risk = capability.risk.map(|r| wire_name(&r)).unwrap_or_default();
        report.own(
            CONTRACT_LINT_RISK_WITHOUT_APPROVAL,
            "/risk",
            &format!("risk `{risk}` requires approval but the contract does not require approval"),
        );
    }
}

/// PII and restricted or regulated data must not reach stored records, logs or errors verbatim.
fn sensitive_data_requires_redaction(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let data = &contract.data;
    if data.redaction_required {
        return;
    }
    let why = if data.contains_pii {
        "the data contains PII".to_owned()
    } else if data.sensitivity.requires_redaction() {
        format!("the data is `{}`", wire_name(&data.sensitivity))
    } else {
        return;
    };
    report.own(
        CONTRACT_LINT_DATA_WITHOUT_REDACTION,
        "/contract/data/redaction_required",
        &format!("{why} but redaction_required is false"),
    );
}

/// A required credential with no scopes lets any credential through, however weak.
fn required_credentials_name_scopes(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let Some(credentials) = &contract.credentials else {
        return;
    };
    if credentials.required && credentials.required_scopes.is_empty() {
        report.own(
            CONTRACT_LINT_CREDENTIALS_WITHOUT_SCOPES,
            "/contract/credentials/required_scopes",
            "credentials are required but no required scopes are declared",
        );
    }
}

/// Upstream conformance: an approval without evidence cannot be audited.
fn required_approval_names_evidence(contract: &CapabilityContract, report: &mut Reporter<'_>) {
    let Some(approval) = &contract.approval else {
        return;
    };
    if approval.required && approval.evidence_requirements.is_empty() {
        report.own(
            CONTRACT_LINT_APPROVAL_WITHOUT_EVIDENCE,
            "/contract/approval/evidence_requirements",
            "approval policy should declare evidence requirements",
        );
    }
}
