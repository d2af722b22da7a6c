//! Connector-level rules: compensation targets, the approval of an undo, and published waivers.

use serde_json::json;

use super::fixtures::*;
use crate::ids::CapabilityId;
use crate::model::{Manifest, Principal, PrincipalKind};
use crate::rules::codes::*;
use crate::rules::{
    compensating_handlers, compensation_approval, compensation_targets, waivers_from_manifest,
};

/// A manifest holding the enterprise and financial fixtures, plus `extra`.
fn manifest_with(extra: Vec<crate::model::Capability>) -> Manifest {
    let mut manifest = Manifest::new(
        Principal::new("agent:test", PrincipalKind::Agent),
        ["aip.native.http.v1".into()],
    );
    manifest.capabilities = vec![
        enterprise_capability(),
        governed_financial_capability(REFUND_ID),
    ];
    manifest.capabilities.extend(extra);
    manifest
}

#[test]
fn compensation_target_must_be_a_manifest_capability() {
    let manifest = manifest_with(Vec::new());
    let mut issues = Vec::new();
    compensation_targets(&manifest, &[], &mut issues);
    assert_single(
        &issues,
        MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
        "/capabilities/1/contract/compensation/compensation_capability_id",
        &manifest.capabilities[1],
    );
    assert!(issues[0].message.starts_with(
        "compensation capability `cap:test:refund` is not a capability of this manifest. "
    ));

    let fixed = manifest_with(vec![capability(REFUND_ID, "refund")]);
    let mut issues = Vec::new();
    compensation_targets(&fixed, &[], &mut issues);
    assert_clean(&issues);
}

#[test]
fn external_compensation_target_can_be_waived() {
    let manifest = manifest_with(Vec::new());
    let waived = [waiver(
        FINANCIAL_ID,
        MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
        "refunds run in the billing connector",
    )];
    let mut issues = Vec::new();
    compensation_targets(&manifest, &waived, &mut issues);
    assert_clean(&issues);

    let wrong_capability = [waiver(
        ENTERPRISE_ID,
        MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
        "refunds run in the billing connector",
    )];
    let mut issues = Vec::new();
    compensation_targets(&manifest, &wrong_capability, &mut issues);
    assert_eq!(issues.len(), 1);
}

#[test]
fn compensating_handler_must_take_compensation() {
    let manifest = manifest_with(vec![capability(REFUND_ID, "refund")]);
    let handlers = |takes: Option<bool>| {
        move |id: &CapabilityId| (id.as_str() == REFUND_ID).then_some(takes).flatten()
    };
    let mut issues = Vec::new();
    compensating_handlers(&manifest, handlers(Some(false)), &mut issues);
    assert_single(
        &issues,
        IMPLEMENTATION_COMPENSATION_TARGET_UNSUPPORTED,
        "/capabilities/1/contract/compensation/compensation_capability_id",
        &manifest.capabilities[1],
    );
    assert!(issues[0].message.starts_with(
        "compensation capability `cap:test:refund` cannot compensate: its handler does not take `Compensation`, so it cannot read which action it undoes. "
    ));

    // A handler that takes it, or one the caller does not know, passes.
    for takes in [Some(true), None] {
        let mut issues = Vec::new();
        compensating_handlers(&manifest, handlers(takes), &mut issues);
        assert_clean(&issues);
    }
}

#[test]
fn compensating_handlers_leave_unknown_and_self_targets_to_their_rules() {
    // The target is not in the manifest: `manifest.compensation.capability_unknown` reports it.
    let mut issues = Vec::new();
    compensating_handlers(&manifest_with(Vec::new()), |_| Some(false), &mut issues);
    assert_clean(&issues);

    // The capability names itself: `contract.compensation.self_reference` reports it.
    let mut manifest = manifest_with(Vec::new());
    manifest.capabilities[1] = governed_financial_capability(FINANCIAL_ID);
    compensating_handlers(&manifest, |_| Some(false), &mut issues);
    assert_clean(&issues);
}

/// A refund capability whose contract requires approval.
fn refund_requiring_approval() -> crate::model::Capability {
    let mut refund = capability(REFUND_ID, "refund");
    refund.contract = Some(capability_contract(&[crate::model::SideEffect::Financial]));
    refund.contract.as_mut().unwrap().approval = Some(crate::model::ApprovalPolicy {
        required: true,
        ..crate::model::ApprovalPolicy::default()
    });
    refund
}

#[test]
fn an_undo_requiring_approval_needs_a_compensated_capability_that_gates_it() {
    // The payment neither requires approval nor gates its compensations: no approval can reach
    // the refund's handler.
    let ungated = |contract: &mut crate::model::CapabilityContract| {
        contract.approval = None;
        contract.compensation.as_mut().unwrap().requires_approval = false;
    };
    let mut payment = financial_with(ungated);
    payment.risk = Some(crate::model::RiskLevel::Medium);
    let manifest = manifest_with(vec![refund_requiring_approval()]);
    let manifest = Manifest {
        capabilities: vec![
            manifest.capabilities[0].clone(),
            payment.clone(),
            manifest.capabilities[2].clone(),
        ],
        ..manifest
    };
    let mut issues = Vec::new();
    compensation_approval(&manifest, &mut issues);
    assert_single(
        &issues,
        MANIFEST_COMPENSATION_APPROVAL_UNGATED,
        "/capabilities/1/contract/compensation/requires_approval",
        &payment,
    );
    assert!(issues[0].message.starts_with(
        "compensation capability `cap:test:refund` requires approval, but `cap:test:payment` does not gate its compensations: "
    ), "{}", issues[0].message);

    // Any gate the host applies to a compensate of the payment passes: its own approval,
    // `compensation(requires_approval)`, risk above medium, or `requires_human_approval`.
    let gated: [fn(&mut crate::model::Capability); 4] = [
        |c| {
            c.contract.as_mut().unwrap().approval = Some(crate::model::ApprovalPolicy {
                required: true,
                ..crate::model::ApprovalPolicy::default()
            })
        },
        |c| {
            c.contract
                .as_mut()
                .unwrap()
                .compensation
                .as_mut()
                .unwrap()
                .requires_approval = true
        },
        |c| c.risk = Some(crate::model::RiskLevel::High),
        |c| c.requires_human_approval = Some(true),
    ];
    for gate in gated {
        let mut fixed = manifest.clone();
        gate(&mut fixed.capabilities[1]);
        let mut issues = Vec::new();
        compensation_approval(&fixed, &mut issues);
        assert_clean(&issues);
    }

    // A refund that needs no approval needs no gate; a target outside the manifest is left to
    // `manifest.compensation.capability_unknown`.
    let mut fixed = manifest.clone();
    fixed.capabilities[2] = capability(REFUND_ID, "refund");
    let mut issues = Vec::new();
    compensation_approval(&fixed, &mut issues);
    compensation_approval(&manifest_with(Vec::new()), &mut issues);
    assert_clean(&issues);
}

/// A manifest of the two fixtures publishing `waivers` under governance.
fn publishing(waivers: serde_json::Value) -> Manifest {
    let mut manifest = manifest_with(Vec::new());
    manifest.governance = Some(json!({ "audit": true, "contract_waivers": waivers }));
    manifest
}

#[test]
fn valid_waivers_are_returned() {
    let manifest = publishing(json!([
        {
            "capability_id": ENTERPRISE_ID,
            "code": CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
            "reason": "provider deduplicates by external reference"
        },
        {
            "capability_id": FINANCIAL_ID,
            "code": MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
            "reason": "refunds run in the billing connector"
        }
    ]));
    let mut issues = Vec::new();
    let waivers = waivers_from_manifest(&manifest, &mut issues);
    assert_clean(&issues);
    assert_eq!(
        waivers,
        [
            waiver(
                ENTERPRISE_ID,
                CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
                "provider deduplicates by external reference"
            ),
            waiver(
                FINANCIAL_ID,
                MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
                "refunds run in the billing connector"
            ),
        ]
    );
}

#[test]
fn no_governance_means_no_waivers() {
    let mut issues = Vec::new();
    assert!(waivers_from_manifest(&manifest_with(Vec::new()), &mut issues).is_empty());
    assert_clean(&issues);
}

/// Loads `entry` as the only published waiver; returns the waivers and `(code, path)` pairs.
fn load_one(entry: serde_json::Value) -> (usize, Vec<(String, String)>) {
    let mut issues = Vec::new();
    let waivers = waivers_from_manifest(&publishing(json!([entry])), &mut issues);
    let found = issues
        .iter()
        .map(|issue| (issue.code.clone(), issue.path.clone()))
        .collect();
    (waivers.len(), found)
}

/// Asserts that `entry` is rejected with exactly `code` at the first entry's path.
#[track_caller]
fn assert_rejected(entry: serde_json::Value, code: &str) {
    let (accepted, found) = load_one(entry);
    assert_eq!(accepted, 0);
    assert_eq!(
        found,
        [(code.to_owned(), "/governance/contract_waivers/0".to_owned())]
    );
}

#[test]
fn blank_reason_is_rejected() {
    assert_rejected(
        json!({ "capability_id": ENTERPRISE_ID, "code": CONTRACT_LINT_DATA_WITHOUT_REDACTION, "reason": "  " }),
        MANIFEST_WAIVER_REASON_EMPTY,
    );
}

#[test]
fn non_waivable_code_is_rejected() {
    assert_rejected(
        json!({ "capability_id": ENTERPRISE_ID, "code": CONTRACT_EXECUTION_NO_COMPLETION_MODE, "reason": "legacy" }),
        MANIFEST_WAIVER_NOT_WAIVABLE,
    );
}

#[test]
fn unknown_code_is_rejected() {
    assert_rejected(
        json!({ "capability_id": ENTERPRISE_ID, "code": "contract.lint.made_up", "reason": "legacy" }),
        MANIFEST_WAIVER_CODE_UNKNOWN,
    );
}

#[test]
fn undeclared_capability_is_rejected() {
    assert_rejected(
        json!({ "capability_id": "cap:test:ghost", "code": CONTRACT_LINT_DATA_WITHOUT_REDACTION, "reason": "legacy" }),
        MANIFEST_WAIVER_CAPABILITY_UNKNOWN,
    );
}

#[test]
fn malformed_entry_is_rejected() {
    assert_rejected(
        json!({ "capability_id": ENTERPRISE_ID, "code": CONTRACT_LINT_DATA_WITHOUT_REDACTION }),
        MANIFEST_WAIVER_MALFORMED,
    );
    assert_rejected(json!("waive everything"), MANIFEST_WAIVER_MALFORMED);
}

#[test]
fn malformed_list_is_rejected() {
    let mut issues = Vec::new();
    let waivers = waivers_from_manifest(&publishing(json!({ "not": "a list" })), &mut issues);
    assert!(waivers.is_empty());
    assert_eq!(
        codes_and_paths(&issues),
        [(MANIFEST_WAIVER_MALFORMED, "/governance/contract_waivers")]
    );
}

#[test]
fn every_problem_of_an_entry_is_reported_and_issues_name_the_capability() {
    let mut issues = Vec::new();
    let waivers = waivers_from_manifest(
        &publishing(json!([
            { "capability_id": "cap:test:ghost", "code": CONTRACT_IDEMPOTENCY_INVALID_TTL, "reason": "" }
        ])),
        &mut issues,
    );
    assert!(waivers.is_empty());
    let codes: Vec<&str> = issues.iter().map(|issue| issue.code.as_str()).collect();
    assert_eq!(
        codes,
        [
            MANIFEST_WAIVER_REASON_EMPTY,
            MANIFEST_WAIVER_NOT_WAIVABLE,
            MANIFEST_WAIVER_CAPABILITY_UNKNOWN
        ]
    );
    assert!(
        issues
            .iter()
            .all(|issue| issue.capability_id.as_ref().map(|id| id.as_str())
                == Some("cap:test:ghost"))
    );
}
