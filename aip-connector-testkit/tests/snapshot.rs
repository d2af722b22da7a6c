//! The manifest snapshot and its drift check: one test per classification rule (a before/after
//! pair of manifests), the snapshot file lifecycle in a temporary folder, and the macro on a
//! committed snapshot.

use std::path::{Path, PathBuf};

use aip_connector::model::Manifest;
use aip_connector::prelude::*;
use aip_connector_testkit::fixtures;
use aip_connector_testkit::snapshot::{
    ChangeClass::{self, Breaking, Compatible},
    ChangeKind, SnapshotDiff, SnapshotError, SnapshotMode, SnapshotOutcome,
    assert_manifest_snapshot_at, check_manifest_snapshot, default_snapshot_path, diff_manifests,
    render_manifest,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Before/after pairs
// ---------------------------------------------------------------------------------------------

/// Index of the seed booking capability in [`base`].
const BOOKING: usize = 1;
/// Index of the governed financial capability (approval, credentials, compensation).
const PAY: usize = 2;

/// Four capabilities: a contract-less echo, the seed booking capability, a governed payment
/// and its refund.
fn base() -> Value {
    let mut manifest = fixtures::manifest();
    manifest
        .capabilities
        .push(fixtures::seed_booking_capability());
    manifest
        .capabilities
        .push(fixtures::governed_financial_capability(
            "cap:test:pay",
            "Pay",
            "cap:test:refund",
        ));
    manifest
        .capabilities
        .push(fixtures::enterprise_capability("cap:test:refund", "Refund"));
    serde_json::to_value(manifest).unwrap()
}

fn manifest(value: Value) -> Manifest {
    serde_json::from_value(value).expect("a valid manifest")
}

/// The diff from [`base`] to [`base`] changed by `edit`.
fn diff_after(edit: impl FnOnce(&mut Value)) -> SnapshotDiff {
    let old = base();
    let mut new = old.clone();
    edit(&mut new);
    diff_manifests(&manifest(old), &manifest(new))
}

fn kinds(diff: &SnapshotDiff) -> Vec<(ChangeKind, ChangeClass)> {
    diff.changes()
        .iter()
        .map(|change| (change.kind, change.class))
        .collect()
}

/// The diff from [`base`] changed by `before` to that changed further by `after`.
fn diff_between(before: impl FnOnce(&mut Value), after: impl FnOnce(&mut Value)) -> SnapshotDiff {
    let mut old = base();
    before(&mut old);
    let mut new = old.clone();
    after(&mut new);
    diff_manifests(&manifest(old), &manifest(new))
}

/// Asserts that `edit` produces exactly `expected` (kind, class) pairs, in order.
#[track_caller]
fn assert_changes(
    edit: impl FnOnce(&mut Value),
    expected: &[(ChangeKind, ChangeClass)],
) -> SnapshotDiff {
    let diff = diff_after(edit);
    assert_eq!(kinds(&diff), expected, "{diff}");
    diff
}

fn capability(manifest: &mut Value, index: usize) -> &mut Value {
    &mut manifest["capabilities"][index]
}

fn contract(manifest: &mut Value, index: usize) -> &mut Value {
    &mut manifest["capabilities"][index]["contract"]
}

#[test]
fn an_unchanged_manifest_has_no_changes() {
    let diff = diff_after(|_| {});
    assert!(diff.is_empty());
    assert!(!diff.is_breaking());
    assert_eq!(diff.to_string(), "no changes");
}

// --- capabilities ----------------------------------------------------------------------------

#[test]
fn a_new_capability_is_compatible() {
    let diff = assert_changes(
        |m| {
            let mut echo = m["capabilities"][0].clone();
            echo["id"] = json!("cap:test:echo2");
            m["capabilities"].as_array_mut().unwrap().push(echo);
        },
        &[(ChangeKind::CapabilityAdded, Compatible)],
    );
    assert_eq!(
        diff.changes()[0].capability.as_ref().unwrap().as_str(),
        "cap:test:echo2"
    );
}

#[test]
fn a_removed_capability_is_breaking() {
    assert_changes(
        |m| {
            m["capabilities"].as_array_mut().unwrap().remove(0);
        },
        &[(ChangeKind::CapabilityRemoved, Breaking)],
    );
}

#[test]
fn a_changed_capability_id_is_a_removal_and_an_addition() {
    let diff = assert_changes(
        |m| capability(m, 0)["id"] = json!("cap:test:echo_v2"),
        &[
            (ChangeKind::CapabilityRemoved, Breaking),
            (ChangeKind::CapabilityAdded, Compatible),
        ],
    );
    assert!(diff.is_breaking());
}

#[test]
fn reordered_capabilities_are_compatible() {
    assert_changes(
        |m| m["capabilities"].as_array_mut().unwrap().swap(0, 1),
        &[(ChangeKind::CapabilitiesReordered, Compatible)],
    );
}

#[test]
fn a_changed_kind_is_breaking() {
    assert_changes(
        |m| capability(m, 0)["kind"] = json!("workflow"),
        &[(ChangeKind::CapabilityKindChanged, Breaking)],
    );
}

#[test]
fn names_and_descriptions_are_documentation() {
    assert_changes(
        |m| {
            capability(m, 0)["name"] = json!("Echo, renamed");
            capability(m, 0)["description"] = json!("Says it again.");
        },
        &[
            (ChangeKind::Documentation, Compatible),
            (ChangeKind::Documentation, Compatible),
        ],
    );
}

#[test]
fn risk_changes_are_breaking_both_ways() {
    assert_changes(
        |m| capability(m, BOOKING)["risk"] = json!("high"),
        &[(ChangeKind::RiskRaised, Breaking)],
    );
    assert_changes(
        |m| capability(m, BOOKING)["risk"] = json!("low"),
        &[(ChangeKind::RiskLowered, Breaking)],
    );
    assert_changes(
        |m| capability(m, 0)["risk"] = json!("low"),
        &[(ChangeKind::RiskChanged, Breaking)],
    );
}

#[test]
fn stability_is_breaking_only_when_a_stable_promise_is_withdrawn() {
    assert_changes(
        |m| capability(m, BOOKING)["stability"] = json!("deprecated"),
        &[(ChangeKind::StabilityChanged, Compatible)],
    );
    assert_changes(
        |m| capability(m, BOOKING)["stability"] = json!("experimental"),
        &[(ChangeKind::StabilityChanged, Breaking)],
    );
    assert_changes(
        |m| capability(m, 0)["stability"] = json!("stable"),
        &[(ChangeKind::StabilityChanged, Compatible)],
    );
}

#[test]
fn a_contract_added_or_removed_is_breaking() {
    assert_changes(
        |m| capability(m, 0)["contract"] = base()["capabilities"][BOOKING]["contract"].clone(),
        &[(ChangeKind::ContractAdded, Breaking)],
    );
    assert_changes(
        |m| {
            capability(m, BOOKING)
                .as_object_mut()
                .unwrap()
                .remove("contract");
        },
        &[(ChangeKind::ContractRemoved, Breaking)],
    );
}

// --- side effects ----------------------------------------------------------------------------

#[test]
fn a_new_side_effect_is_breaking_and_a_dropped_one_compatible() {
    let diff = assert_changes(
        |m| contract(m, BOOKING)["side_effects"] = json!(["write", "external_network", "delete"]),
        &[(ChangeKind::SideEffectAdded, Breaking)],
    );
    assert_eq!(diff.changes()[0].path, "/contract/side_effects");
    assert_eq!(diff.changes()[0].after, Some(json!("delete")));
    assert_changes(
        |m| contract(m, BOOKING)["side_effects"] = json!(["write"]),
        &[(ChangeKind::SideEffectRemoved, Compatible)],
    );
    // The order of a set is no change.
    assert_changes(
        |m| contract(m, BOOKING)["side_effects"] = json!(["external_network", "write"]),
        &[],
    );
}

// --- idempotency -----------------------------------------------------------------------------

#[test]
fn weaker_idempotency_requirement_is_breaking() {
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["requirement"] = json!("optional"),
        &[(ChangeKind::IdempotencyWeakened, Breaking)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["requirement"] = json!("unsupported"),
        &[(ChangeKind::IdempotencyWeakened, Breaking)],
    );
}

#[test]
fn a_newly_required_key_is_breaking_but_optional_support_is_compatible() {
    let requirement = |value: &'static str| {
        move |m: &mut Value| contract(m, BOOKING)["idempotency"]["requirement"] = json!(value)
    };
    let diff = diff_between(requirement("optional"), requirement("required"));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::IdempotencyStrengthened, Breaking)],
        "{diff}"
    );
    assert!(
        diff.changes()[0]
            .detail
            .contains("callers that send none are refused")
    );

    let diff = diff_between(requirement("unsupported"), requirement("optional"));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::IdempotencyStrengthened, Compatible)],
        "{diff}"
    );
}

#[test]
fn a_narrower_key_scope_is_weaker_and_a_wider_one_still_breaking() {
    let diff = assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["key_scope"] = json!("principal"),
        &[(ChangeKind::IdempotencyWeakened, Breaking)],
    );
    assert!(diff.changes()[0].detail.contains("narrowed"));
    let diff = assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["key_scope"] = json!("capability"),
        &[(ChangeKind::IdempotencyChanged, Breaking)],
    );
    assert!(diff.changes()[0].detail.contains("widened"));
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["key_scope"] = json!("external_account"),
        &[(ChangeKind::IdempotencyChanged, Breaking)],
    );
}

#[test]
fn key_retention_shorter_is_breaking_longer_compatible() {
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["ttl_ms"] = json!(3_600_000),
        &[(ChangeKind::IdempotencyWeakened, Breaking)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["ttl_ms"] = json!(172_800_000),
        &[(ChangeKind::IdempotencyStrengthened, Compatible)],
    );
    assert_changes(
        |m| {
            contract(m, BOOKING)["idempotency"]
                .as_object_mut()
                .unwrap()
                .remove("ttl_ms");
        },
        &[(ChangeKind::IdempotencyChanged, Breaking)],
    );
}

#[test]
fn a_changed_collision_behaviour_is_breaking() {
    assert_changes(
        |m| contract(m, BOOKING)["idempotency"]["collision_behavior"] = json!("reject_conflict"),
        &[(ChangeKind::IdempotencyChanged, Breaking)],
    );
}

// --- execution -------------------------------------------------------------------------------

#[test]
fn execution_modes_removed_are_breaking_added_compatible() {
    assert_changes(
        |m| contract(m, BOOKING)["execution"]["supports_retry"] = json!(false),
        &[(ChangeKind::ExecutionModeRemoved, Breaking)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["execution"]["supports_cancel"] = json!(true),
        &[(ChangeKind::ExecutionModeAdded, Compatible)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["execution"]["expected_completion"] = json!("any"),
        &[(ChangeKind::ExecutionChanged, Breaking)],
    );
}

#[test]
fn retry_safety_raised_is_compatible_lowered_breaking() {
    assert_changes(
        |m| contract(m, BOOKING)["execution"]["retry_safety"] = json!("safe"),
        &[(ChangeKind::RetrySafetyRaised, Compatible)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["execution"]["retry_safety"] = json!("unsafe"),
        &[(ChangeKind::RetrySafetyLowered, Breaking)],
    );
}

// --- data and credentials --------------------------------------------------------------------

#[test]
fn data_contract_changes_are_breaking_in_both_directions() {
    assert_changes(
        |m| contract(m, BOOKING)["data"]["sensitivity"] = json!("restricted"),
        &[(ChangeKind::DataChanged, Breaking)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["data"]["contains_pii"] = json!(false),
        &[(ChangeKind::DataChanged, Breaking)],
    );
    assert_changes(
        |m| contract(m, BOOKING)["data"]["redaction_required"] = json!(false),
        &[(ChangeKind::DataChanged, Breaking)],
    );
}

#[test]
fn credential_policy_changes_are_breaking() {
    assert_changes(
        |m| {
            contract(m, PAY)["credentials"]["required_scopes"] =
                json!(["financial:write", "financial:read"])
        },
        &[(ChangeKind::CredentialsChanged, Breaking)],
    );
    assert_changes(
        |m| {
            contract(m, BOOKING)["credentials"] =
                json!({"required": true, "allow_oauth_refresh": false})
        },
        &[(ChangeKind::CredentialsChanged, Breaking)],
    );
}

// --- approval --------------------------------------------------------------------------------

/// `PAY` with nothing but its policy's `required` gating it: risk `medium`, no
/// `requires_human_approval`, compensations not gated.
fn ungated_pay(m: &mut Value) {
    capability(m, PAY)["risk"] = json!("medium");
    capability(m, PAY)
        .as_object_mut()
        .unwrap()
        .remove("requires_human_approval");
    contract(m, PAY)["compensation"]["requires_approval"] = json!(false);
}

#[test]
fn approval_no_longer_required_is_weaker() {
    let not_required = diff_between(ungated_pay, |m| {
        ungated_pay(m);
        contract(m, PAY)["approval"]["required"] = json!(false);
    });
    assert_eq!(
        kinds(&not_required),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{not_required}"
    );
    assert_eq!(
        not_required.changes()[0].path,
        "/contract/approval/required"
    );
    // The removed policy reads as "not required", reported alone: its reason, evidence and
    // TTL compared with the defaults would describe a policy no caller waits for.
    let removed = diff_between(ungated_pay, |m| {
        ungated_pay(m);
        contract(m, PAY).as_object_mut().unwrap().remove("approval");
    });
    assert_eq!(
        kinds(&removed),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{removed}"
    );
    assert_eq!(removed.changes()[0].path, "/contract/approval/required");
}

/// Found by an author trial: removing `approval(selector = role("calendar-admin"), evidence =
/// [reason])` also reported `approver_selector changed: {"type":"role",…} → {"type":"tenant_policy"}`,
/// the removed section's fields compared with the defaults an absent section reads as. That
/// holds only where nothing else gates the calls: where the host still does (a review), the
/// defaults are the policy it applies from then on, and their changes are reported.
#[test]
fn a_removed_approval_section_reports_its_removal_alone() {
    let with_selector = |m: &mut Value| {
        contract(m, PAY)["approval"]["approver_selector"] =
            json!({"type": "role", "name": "calendar-admin"});
        contract(m, PAY)["approval"]["evidence_requirements"] = json!(["reason"]);
    };
    let diff = diff_between(
        |m| {
            ungated_pay(m);
            with_selector(m);
        },
        |m| {
            ungated_pay(m);
            contract(m, PAY).as_object_mut().unwrap().remove("approval");
        },
    );
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{diff}"
    );
    let text = diff.to_string();
    assert!(text.contains("approval no longer required"), "{text}");
    assert!(
        !text.contains("approver_selector") && !text.contains("evidence"),
        "{text}"
    );

    // Still gated (its compensations need approval): removed, the policy is replaced by the
    // host's default, which the diff names without comparing fields against serde's defaults.
    let removed = diff_between(with_selector, |m| {
        contract(m, PAY).as_object_mut().unwrap().remove("approval");
    });
    let text = removed.to_string();
    assert!(
        text.contains("the host still gates these calls")
            && text.contains("now under its default policy")
            && !text.contains("approver_selector"),
        "{text}"
    );
    // No longer required but still declared, the policy is what the host applies: its field
    // changes are listed.
    let unrequired = diff_between(with_selector, |m| {
        contract(m, PAY)["approval"]["required"] = json!(false);
        contract(m, PAY)["approval"]["approver_selector"] = json!({"type": "tenant_policy"});
    });
    let text = unrequired.to_string();
    assert!(
        text.contains("applies the policy compared below") && text.contains("approver_selector"),
        "{text}"
    );

    // A policy still required keeps its field-level changes.
    let selector = diff_after(|m| {
        contract(m, PAY)["approval"]["approver_selector"] =
            json!({"type": "role", "name": "calendar-admin"});
    });
    assert!(
        selector.to_string().contains("approver_selector"),
        "{selector}"
    );
}

/// The other way round: a policy newly required of a capability nothing gated before is new to
/// its callers as a whole, so it is reported alone, not as its reason, selector and evidence
/// compared with the defaults of the section it replaced. Where a gate applied the old,
/// unrequired policy, its field changes are what callers meet, and are listed.
#[test]
fn a_newly_required_approval_section_reports_its_addition_alone() {
    let required_with_selector = |m: &mut Value| {
        contract(m, PAY)["approval"] = json!({
            "required": true,
            "reason": "payments need a second pair of eyes",
            "approver_selector": {"type": "role", "name": "finance"},
            "evidence_requirements": ["reason", "input_snapshot"],
        });
    };
    let added = diff_between(
        |m| {
            ungated_pay(m);
            contract(m, PAY).as_object_mut().unwrap().remove("approval");
        },
        |m| {
            ungated_pay(m);
            required_with_selector(m);
        },
    );
    assert_eq!(
        kinds(&added),
        [(ChangeKind::ApprovalStrengthened, Breaking)],
        "{added}"
    );
    assert_eq!(added.changes()[0].path, "/contract/approval/required");
    let text = added.to_string();
    assert!(
        !text.contains("approver_selector") && !text.contains("evidence"),
        "{text}"
    );

    // Declared but not required, on a capability nothing gated: the old fields applied to no
    // call either.
    let now_required = diff_between(
        |m| {
            ungated_pay(m);
            contract(m, PAY)["approval"]["required"] = json!(false);
        },
        |m| {
            ungated_pay(m);
            required_with_selector(m);
        },
    );
    assert_eq!(
        kinds(&now_required),
        [(ChangeKind::ApprovalStrengthened, Breaking)],
        "{now_required}"
    );

    // Gated before (its compensations need approval) under the declared, unrequired policy:
    // the new policy's changes to it are listed.
    let gated = diff_between(
        |m| contract(m, PAY)["approval"]["required"] = json!(false),
        required_with_selector,
    );
    let text = gated.to_string();
    assert!(
        text.contains("approval now required") && text.contains("approver_selector"),
        "{text}"
    );

    // Gated before under the host's default policy (no section declared): the new policy
    // replaces that default, not serde's defaults, so it is reported alone too.
    let gated_default = diff_between(
        |m| {
            contract(m, PAY).as_object_mut().unwrap().remove("approval");
        },
        required_with_selector,
    );
    assert_eq!(
        kinds(&gated_default),
        [(ChangeKind::ApprovalStrengthened, Breaking)],
        "{gated_default}"
    );
}

/// The mirror cases, where `required` stays false: a policy declared or removed on a capability
/// the host gates anyway replaces, or is replaced by, the host's default policy. Compared field
/// by field with serde's defaults, a removal listed "evidence `reason` no longer required" where
/// the host's default requires it (a review).
#[test]
fn an_unrequired_policy_declared_or_removed_on_a_gated_capability_replaces_the_default() {
    let unrequired = |m: &mut Value| {
        contract(m, PAY)["approval"] = json!({
            "required": false,
            "approver_selector": {"type": "role", "name": "finance"},
            "evidence_requirements": ["reason"],
        });
    };
    let absent = |m: &mut Value| {
        contract(m, PAY).as_object_mut().unwrap().remove("approval");
    };
    for (diff, says) in [
        (
            diff_between(absent, unrequired),
            "under this policy from now on",
        ),
        (
            diff_between(unrequired, absent),
            "now under its default policy",
        ),
    ] {
        assert_eq!(
            kinds(&diff),
            [(ChangeKind::ApprovalChanged, Breaking)],
            "{diff}"
        );
        assert_eq!(diff.changes()[0].path, "/contract/approval");
        let text = diff.to_string();
        assert!(
            text.contains(says)
                && !text.contains("evidence")
                && !text.contains("approver_selector"),
            "{text}"
        );
    }
    // Nothing gates the capability on either side: no host applies the policy, a compatible
    // change with no fields listed.
    let ungated_unrequired = |m: &mut Value| {
        ungated_pay(m);
        unrequired(m);
    };
    let ungated_absent = |m: &mut Value| {
        ungated_pay(m);
        absent(m);
    };
    for diff in [
        diff_between(ungated_absent, ungated_unrequired),
        diff_between(ungated_unrequired, ungated_absent),
    ] {
        assert_eq!(
            kinds(&diff),
            [(ChangeKind::ApprovalChanged, Compatible)],
            "{diff}"
        );
        assert!(diff.to_string().contains("no host appl"), "{diff}");
    }
    // The gate changes in the same release (compensations no longer need approval): the gate's
    // own change is reported, and nothing claims the host "still" gates or "anyway" does.
    let diff = diff_between(absent, ungated_unrequired);
    let text = diff.to_string();
    assert!(
        !text.contains("still gates") && !text.contains("anyway") && !text.contains("evidence"),
        "{text}"
    );
    assert!(
        kinds(&diff)
            .iter()
            .all(|(kind, _)| *kind != ChangeKind::ApprovalChanged),
        "{diff}"
    );
}

#[test]
fn fewer_approvers_or_less_evidence_is_weaker() {
    let strict =
        |m: &mut Value| contract(m, PAY)["approval"]["minimum_distinct_principals"] = json!(2);
    let diff = {
        let mut old = base();
        strict(&mut old);
        diff_manifests(&manifest(old), &manifest(base()))
    };
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{diff}"
    );
    assert!(
        diff.changes()[0]
            .detail
            .contains("fewer distinct approvers")
    );

    assert_changes(
        |m| {
            contract(m, PAY)["approval"]["evidence_requirements"] =
                json!(["reason", "input_snapshot"])
        },
        &[(ChangeKind::ApprovalWeakened, Breaking)],
    );
    assert_changes(
        |m| {
            contract(m, PAY)["approval"]["separation_of_duties"]["allow_self_approval"] =
                json!(true)
        },
        &[(ChangeKind::ApprovalWeakened, Breaking)],
    );
}

#[test]
fn stricter_approval_is_breaking_too() {
    assert_changes(
        |m| {
            contract(m, BOOKING)["approval"] =
                json!({"required": true, "approver_selector": {"type": "tenant_policy"}})
        },
        &[(ChangeKind::ApprovalStrengthened, Breaking)],
    );
    assert_changes(
        |m| contract(m, PAY)["approval"]["minimum_distinct_principals"] = json!(2),
        &[(ChangeKind::ApprovalStrengthened, Breaking)],
    );
    assert_changes(
        |m| capability(m, 0)["requires_human_approval"] = json!(true),
        &[(ChangeKind::ApprovalStrengthened, Breaking)],
    );
}

#[test]
fn a_higher_auto_approval_limit_is_weaker() {
    let rule = |limit: u64, quorum: u32| {
        json!({
            "operator": "quorum",
            "required": quorum,
            "rules": [
                {"operator": "role", "name": "finance"},
                {"operator": "delegated_authority", "scope": "payments", "max_value": limit},
            ],
        })
    };
    let with_rule = |limit, quorum| {
        let mut manifest = base();
        contract(&mut manifest, PAY)["approval"]["rule"] = rule(limit, quorum);
        manifest
    };
    let diff = diff_manifests(
        &manifest(with_rule(1_000, 2)),
        &manifest(with_rule(50_000, 2)),
    );
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{diff}"
    );
    assert!(
        diff.changes()[0]
            .detail
            .contains("higher auto-approval limit"),
        "{diff}"
    );
    assert_eq!(
        diff.changes()[0].path,
        "/contract/approval/rule/rules/1/max_value"
    );

    let diff = diff_manifests(
        &manifest(with_rule(1_000, 2)),
        &manifest(with_rule(1_000, 1)),
    );
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ApprovalWeakened, Breaking)],
        "{diff}"
    );
    assert!(diff.changes()[0].detail.contains("quorum 2 → 1"), "{diff}");
}

#[test]
fn an_approval_reason_is_documentation() {
    assert_changes(
        |m| contract(m, PAY)["approval"]["reason"] = json!("payments need a second pair of eyes"),
        &[(ChangeKind::Documentation, Compatible)],
    );
}

// --- service level, transactions, compensation -----------------------------------------------

#[test]
fn service_level_expectations_are_compatible_a_shorter_timeout_breaking() {
    assert_changes(
        |m| contract(m, PAY)["sla"]["expected_latency_ms"] = json!(4_000),
        &[(ChangeKind::ServiceLevelChanged, Compatible)],
    );
    assert_changes(
        |m| contract(m, PAY)["sla"]["timeout_ms"] = json!(60_000),
        &[(ChangeKind::ServiceLevelChanged, Compatible)],
    );
    assert_changes(
        |m| contract(m, PAY)["sla"]["timeout_ms"] = json!(10_000),
        &[(ChangeKind::ServiceLevelChanged, Breaking)],
    );
    assert_changes(
        |m| contract(m, PAY)["sla"]["async_expected"] = json!(true),
        &[(ChangeKind::ServiceLevelChanged, Breaking)],
    );
}

#[test]
fn transaction_modes_removed_are_breaking_added_compatible() {
    assert_changes(
        |m| {
            contract(m, PAY)["transaction"]["supported_modes"] =
                json!(["execute", "dry_run", "plan", "commit"])
        },
        &[(ChangeKind::TransactionModeRemoved, Breaking)],
    );
    assert_changes(
        |m| {
            contract(m, PAY)["transaction"]["supported_modes"] = json!([
                "execute",
                "dry_run",
                "plan",
                "commit",
                "compensate",
                "reconcile"
            ])
        },
        &[(ChangeKind::TransactionModeAdded, Compatible)],
    );
    // Declaring that rollback is impossible is the opposite of an addition.
    assert_changes(
        |m| {
            contract(m, PAY)["transaction"]["supported_modes"] = json!([
                "execute",
                "dry_run",
                "plan",
                "commit",
                "compensate",
                "rollback_not_supported"
            ])
        },
        &[(ChangeKind::TransactionModeAdded, Breaking)],
    );
    assert_changes(
        |m| {
            contract(m, BOOKING)["transaction"] = json!({
                "supported_modes": ["execute", "dry_run"],
                "requires_plan_before_commit": false,
                "dry_run_fidelity": "schema_only",
            });
        },
        &[
            (ChangeKind::TransactionModeAdded, Compatible),
            (ChangeKind::TransactionModeAdded, Compatible),
        ],
    );
    assert_changes(
        |m| {
            contract(m, PAY)
                .as_object_mut()
                .unwrap()
                .remove("transaction");
        },
        &[(ChangeKind::TransactionModeRemoved, Breaking); 5],
    );
}

#[test]
fn plan_requirement_and_dry_run_fidelity() {
    assert_changes(
        |m| contract(m, PAY)["transaction"]["requires_plan_before_commit"] = json!(false),
        &[(ChangeKind::TransactionChanged, Breaking)],
    );
    assert_changes(
        |m| contract(m, PAY)["transaction"]["dry_run_fidelity"] = json!("schema_only"),
        &[(ChangeKind::TransactionChanged, Breaking)],
    );
    assert_changes(
        |m| contract(m, PAY)["transaction"]["dry_run_fidelity"] = json!("full_simulation"),
        &[(ChangeKind::TransactionChanged, Compatible)],
    );
}

#[test]
fn compensation_stronger_is_compatible_weaker_breaking() {
    assert_changes(
        |m| contract(m, PAY)["compensation"]["compensation_window_ms"] = json!(3_600_000),
        &[(ChangeKind::CompensationWeakened, Breaking)],
    );
    assert_changes(
        |m| contract(m, PAY)["compensation"]["mode"] = json!("best_effort"),
        &[(ChangeKind::CompensationWeakened, Breaking)],
    );
    assert_changes(
        |m| contract(m, 3)["compensation"]["mode"] = json!("best_effort"),
        &[(ChangeKind::CompensationStrengthened, Compatible)],
    );
    assert_changes(
        |m| contract(m, PAY)["compensation"]["compensation_capability_id"] = json!("cap:test:echo"),
        &[(ChangeKind::CompensationChanged, Breaking)],
    );
    // A compensating capability named for the first time, the mode unchanged: a way to undo
    // was added (it used to go unreported).
    let named = diff_between(
        |m| contract(m, 3)["compensation"]["mode"] = json!("best_effort"),
        |m| contract(m, 3)["compensation"]["compensation_capability_id"] = json!("cap:test:echo"),
    );
    assert_eq!(
        kinds(&named),
        [(ChangeKind::CompensationStrengthened, Compatible)],
        "{named}"
    );
    assert!(
        named.to_string().contains("compensating capability named"),
        "{named}"
    );
}

// --- input schema ----------------------------------------------------------------------------

fn booking_input(m: &mut Value) -> &mut Value {
    &mut m["capabilities"][BOOKING]["input_schema"]
}

fn booking_output(m: &mut Value) -> &mut Value {
    &mut m["capabilities"][BOOKING]["output_schema"]
}

#[test]
fn a_new_required_input_property_is_breaking() {
    let diff = assert_changes(
        |m| {
            booking_input(m)["properties"]["room"] = json!({"type": "string"});
            booking_input(m)["required"] = json!(["starts_at", "room"]);
        },
        &[(ChangeKind::InputPropertyAdded, Breaking)],
    );
    assert_eq!(diff.changes()[0].path, "/input_schema/properties/room");
}

#[test]
fn a_new_optional_input_property_is_compatible() {
    assert_changes(
        |m| booking_input(m)["properties"]["note"] = json!({"type": "string"}),
        &[(ChangeKind::InputPropertyAdded, Compatible)],
    );
}

#[test]
fn a_removed_input_property_is_breaking() {
    assert_changes(
        |m| {
            booking_input(m)["properties"]
                .as_object_mut()
                .unwrap()
                .remove("starts_at");
            booking_input(m)["required"] = json!([]);
        },
        &[(ChangeKind::InputPropertyRemoved, Breaking)],
    );
}

#[test]
fn input_requiredness() {
    let with_optional_note =
        |m: &mut Value| booking_input(m)["properties"]["note"] = json!({"type": "string"});
    let mut old = base();
    with_optional_note(&mut old);
    let mut new = old.clone();
    booking_input(&mut new)["required"] = json!(["starts_at", "note"]);
    let diff = diff_manifests(&manifest(old.clone()), &manifest(new.clone()));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaNarrowed, Breaking)],
        "{diff}"
    );
    let diff = diff_manifests(&manifest(new), &manifest(old));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaWidened, Compatible)],
        "{diff}"
    );
}

#[test]
fn tightened_input_types_and_enums_are_breaking_loosened_compatible() {
    let loose = |m: &mut Value| {
        booking_input(m)["properties"]["room"] =
            json!({"type": ["string", "null"], "enum": ["a", "b", null]});
    };
    let tight = |m: &mut Value| {
        booking_input(m)["properties"]["room"] = json!({"type": "string", "enum": ["a", "b"]});
    };
    let diff = diff_between(loose, tight);
    assert_eq!(
        kinds(&diff),
        [
            (ChangeKind::InputSchemaNarrowed, Breaking),
            (ChangeKind::InputSchemaNarrowed, Breaking),
        ],
        "{diff}"
    );
    assert!(
        diff.to_string().contains("enum values removed: null"),
        "{diff}"
    );
    assert!(
        diff.to_string()
            .contains("type narrowed: string | null → string"),
        "{diff}"
    );
    let diff = diff_between(tight, loose);
    assert_eq!(
        kinds(&diff),
        [
            (ChangeKind::InputSchemaWidened, Compatible),
            (ChangeKind::InputSchemaWidened, Compatible),
        ],
        "{diff}"
    );
    let diff = assert_changes(
        |m| booking_input(m)["properties"]["starts_at"]["maxLength"] = json!(64),
        &[(ChangeKind::InputSchemaNarrowed, Breaking)],
    );
    assert!(
        diff.changes()[0].detail.contains("`maxLength` 64 added"),
        "{diff}"
    );
}

#[test]
fn integer_to_number_widens_and_bounds_move_both_ways() {
    // `integer` is a kind of `number`.
    let schema = |ty: &'static str, minimum: i64, maximum: i64| {
        move |m: &mut Value| {
            booking_input(m)["properties"]["seats"] =
                json!({"type": ty, "minimum": minimum, "maximum": maximum});
        }
    };
    let diff = diff_between(schema("integer", 1, 10), schema("number", 0, 20));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaWidened, Compatible); 3],
        "{diff}"
    );
    let diff = diff_between(schema("number", 1, 10), schema("integer", 2, 10));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaNarrowed, Breaking); 2],
        "{diff}"
    );
}

#[test]
fn closing_an_input_schema_is_breaking() {
    let mut open = base();
    booking_input(&mut open)
        .as_object_mut()
        .unwrap()
        .remove("additionalProperties");
    let diff = diff_manifests(&manifest(open.clone()), &manifest(base()));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaNarrowed, Breaking)],
        "{diff}"
    );
    assert!(
        diff.to_string()
            .contains("undeclared properties are no longer allowed")
    );
    let diff = diff_manifests(&manifest(base()), &manifest(open));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaWidened, Compatible)],
        "{diff}"
    );
}

#[test]
fn input_annotations_are_documentation_but_a_new_default_is_breaking() {
    assert_changes(
        |m| booking_input(m)["properties"]["starts_at"]["description"] = json!("When it starts."),
        &[(ChangeKind::Documentation, Compatible)],
    );
    assert_changes(
        |m| {
            booking_input(m)["properties"]["note"] = json!({"type": "string", "default": ""});
        },
        &[(ChangeKind::InputPropertyAdded, Compatible)],
    );
    let mut old = base();
    booking_input(&mut old)["properties"]["note"] = json!({"type": "string", "default": ""});
    let mut new = old.clone();
    booking_input(&mut new)["properties"]["note"]["default"] = json!("none");
    let diff = diff_manifests(&manifest(old), &manifest(new));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaChanged, Breaking)],
        "{diff}"
    );
}

#[test]
fn an_unknown_input_keyword_is_breaking() {
    let diff = assert_changes(
        |m| booking_input(m)["x-vendor-rule"] = json!({"strict": true}),
        &[(ChangeKind::InputSchemaChanged, Breaking)],
    );
    assert!(
        diff.changes()[0].detail.contains("not classified"),
        "{diff}"
    );
}

#[test]
fn renamed_or_unused_definitions_are_no_change() {
    let referenced = |name: &'static str| {
        move |m: &mut Value| {
            let input = booking_input(m);
            input["$defs"] = json!({ name: {"type": "string", "format": "date-time"} });
            input["properties"]["starts_at"] = json!({"$ref": format!("#/$defs/{name}")});
        }
    };
    let diff = diff_between(referenced("Instant"), referenced("Timestamp"));
    assert!(diff.is_empty(), "{diff}");
    assert_changes(
        |m| booking_input(m)["$defs"] = json!({"Unused": {"type": "string"}}),
        &[],
    );
    // The same rename with a tightened definition is still seen through the reference.
    let diff = diff_between(referenced("Instant"), |m| {
        referenced("Timestamp")(m);
        booking_input(m)["$defs"]["Timestamp"]["maxLength"] = json!(40);
    });
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaNarrowed, Breaking)],
        "{diff}"
    );
}

#[test]
fn a_renamed_recursive_definition_is_no_change() {
    let recursive = |name: &'static str| {
        move |m: &mut Value| {
            let input = booking_input(m);
            input["$defs"] = json!({ name: {
                "type": "object",
                "properties": {"child": {"$ref": format!("#/$defs/{name}")}},
            }});
            input["properties"]["tree"] = json!({"$ref": format!("#/$defs/{name}")});
        }
    };
    let diff = diff_between(recursive("Node"), recursive("Tree"));
    assert!(diff.is_empty(), "{diff}");
    let diff = diff_between(recursive("Node"), |m| {
        recursive("Tree")(m);
        booking_input(m)["$defs"]["Tree"]["required"] = json!(["child"]);
    });
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaNarrowed, Breaking)],
        "{diff}"
    );
}

#[test]
fn a_schema_difference_the_comparison_cannot_read_is_breaking() {
    // `required` must be an array; the comparison reads neither value, the safety net still
    // sees that they differ.
    let diff = diff_between(
        |m| booking_input(m)["required"] = json!("starts_at"),
        |m| booking_input(m)["required"] = json!("ends_at"),
    );
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaChanged, Breaking)],
        "{diff}"
    );
    assert!(
        diff.changes()[0].detail.contains("does not classify"),
        "{diff}"
    );
}

#[test]
fn documenting_enum_variants_is_documentation() {
    // schemars renders a plain enum as `enum` and one with documented variants as a `oneOf`
    // of constants: the same closed set of values.
    let plain = |m: &mut Value| {
        booking_input(m)["properties"]["room"] = json!({"type": "string", "enum": ["a", "b"]});
    };
    let documented = |values: &[&str]| {
        let branches: Vec<Value> = values
            .iter()
            .map(|value| json!({"type": "string", "const": value, "description": format!("Room {value}.")}))
            .collect();
        move |m: &mut Value| booking_input(m)["properties"]["room"] = json!({"oneOf": branches})
    };
    let diff = diff_between(plain, documented(&["a", "b"]));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::Documentation, Compatible)],
        "{diff}"
    );
    let diff = diff_between(plain, documented(&["a", "b", "c"]));
    assert_eq!(
        kinds(&diff),
        [
            (ChangeKind::Documentation, Compatible),
            (ChangeKind::InputSchemaWidened, Compatible)
        ],
        "{diff}"
    );
    let diff = diff_between(plain, documented(&["a"]));
    assert_eq!(
        kinds(&diff),
        [
            (ChangeKind::Documentation, Compatible),
            (ChangeKind::InputSchemaNarrowed, Breaking)
        ],
        "{diff}"
    );
    // Overlapping `oneOf` branches are not a set of values: any change inside is breaking.
    let overlapping = |extra: Value| {
        move |m: &mut Value| {
            booking_input(m)["properties"]["room"] =
                json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": extra}]});
        }
    };
    let diff = diff_between(overlapping(json!(4)), overlapping(json!(8)));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::InputSchemaChanged, Breaking)],
        "{diff}"
    );
}

// --- output schema ---------------------------------------------------------------------------

#[test]
fn a_removed_output_property_is_breaking() {
    assert_changes(
        |m| {
            booking_output(m)["properties"]
                .as_object_mut()
                .unwrap()
                .remove("booking_id");
            booking_output(m)["required"] = json!([]);
        },
        &[(ChangeKind::OutputPropertyRemoved, Breaking)],
    );
}

#[test]
fn a_new_output_property_is_compatible_unless_the_old_schema_was_closed() {
    let mut open = base();
    booking_output(&mut open)
        .as_object_mut()
        .unwrap()
        .remove("additionalProperties");
    let mut open_with_status = open.clone();
    booking_output(&mut open_with_status)["properties"]["status"] = json!({"type": "string"});
    let diff = diff_manifests(&manifest(open), &manifest(open_with_status));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::OutputPropertyAdded, Compatible)],
        "{diff}"
    );

    // The seed's output schema is closed: a client validating against it rejects `status`.
    let diff = assert_changes(
        |m| booking_output(m)["properties"]["status"] = json!({"type": "string"}),
        &[(ChangeKind::OutputPropertyAdded, Breaking)],
    );
    assert!(diff.changes()[0].detail.contains("closed"), "{diff}");
}

#[test]
fn a_widened_output_is_breaking_a_narrowed_one_compatible() {
    assert_changes(
        |m| booking_output(m)["required"] = json!([]),
        &[(ChangeKind::OutputSchemaWidened, Breaking)],
    );
    assert_changes(
        |m| booking_output(m)["properties"]["booking_id"]["type"] = json!(["string", "null"]),
        &[(ChangeKind::OutputSchemaWidened, Breaking)],
    );
    assert_changes(
        |m| booking_output(m)["properties"]["booking_id"]["minLength"] = json!(1),
        &[(ChangeKind::OutputSchemaNarrowed, Compatible)],
    );
    assert_changes(
        |m| {
            capability(m, BOOKING)
                .as_object_mut()
                .unwrap()
                .remove("output_schema");
        },
        &[(ChangeKind::OutputSchemaWidened, Breaking)],
    );
    assert_changes(
        |m| capability(m, 0)["output_schema"] = json!({"type": "object"}),
        &[(ChangeKind::OutputSchemaNarrowed, Compatible)],
    );
}

// --- manifest-level sections -----------------------------------------------------------------

#[test]
fn profiles_added_are_compatible_removed_breaking() {
    assert_changes(
        |m| m["profiles"] = json!(["aip.native.http.v1", "aip.mcp.compat.v1"]),
        &[(ChangeKind::ProfileAdded, Compatible)],
    );
    let mut two = base();
    two["profiles"] = json!(["aip.native.http.v1", "aip.mcp.compat.v1"]);
    let diff = diff_manifests(&manifest(two), &manifest(base()));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ProfileRemoved, Breaking)],
        "{diff}"
    );
}

#[test]
fn a_changed_projected_operation_name_is_breaking() {
    let diff = assert_changes(
        |m| {
            capability(m, 0)["bindings"] =
                json!([{"profile": "aip.native.http.v1", "tool_name": "echo"}])
        },
        &[
            (ChangeKind::BindingAdded, Compatible),
            (ChangeKind::BindingChanged, Breaking),
        ],
    );
    assert!(
        diff.to_string().contains("`cap.test.echo` → `echo`")
            || diff.to_string().contains("→ `echo`"),
        "{diff}"
    );
    // A binding that projects the same name is only an addition.
    assert_changes(
        |m| {
            capability(m, 0)["bindings"] =
                json!([{"profile": "aip.mcp.compat.v1", "tool_name": "echo"}])
        },
        &[(ChangeKind::BindingAdded, Compatible)],
    );
}

#[test]
fn waivers_added_are_breaking_removed_compatible_and_metadata_compatible() {
    let waiver = json!({"contract_waivers": [{
        "capability_id": "cap:test:echo", "code": "contract.lint.example", "reason": "because",
    }]});
    assert_changes(
        |m| m["governance"] = waiver.clone(),
        &[(ChangeKind::WaiverAdded, Breaking)],
    );
    // A new capability's waiver is part of the (compatible) addition: it never met the rule.
    assert_changes(
        |m| {
            let mut added = capability(m, 0).clone();
            added["id"] = json!("cap:test:added");
            m["capabilities"].as_array_mut().unwrap().push(added);
            m["governance"] = json!({"contract_waivers": [{
                "capability_id": "cap:test:added", "code": "contract.lint.example",
                "reason": "because",
            }]});
        },
        &[(ChangeKind::CapabilityAdded, Compatible)],
    );
    let mut waived = base();
    waived["governance"] = waiver.clone();
    let diff = diff_manifests(&manifest(waived.clone()), &manifest(base()));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::WaiverRemoved, Compatible)],
        "{diff}"
    );
    let mut reasoned = waived.clone();
    reasoned["governance"]["contract_waivers"][0]["reason"] = json!("a better reason");
    let diff = diff_manifests(&manifest(waived), &manifest(reasoned));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::Documentation, Compatible)],
        "{diff}"
    );

    assert_changes(
        |m| {
            m["extensions"] = json!({"aip_connector": {"capabilities": {
                "cap:test:echo": {"tags": ["demo"], "examples": [{"text": "hi"}]},
            }}});
        },
        &[
            (ChangeKind::Metadata, Compatible),
            (ChangeKind::Metadata, Compatible),
        ],
    );
}

#[test]
fn free_form_sections_are_breaking_except_new_compatibility_entries() {
    assert_changes(
        |m| m["compatibility"] = json!({"native_http": {"messages": "/aip/messages"}}),
        &[(ChangeKind::Other, Compatible)],
    );
    let mut with_endpoint = base();
    with_endpoint["compatibility"] = json!({"native_http": {"messages": "/aip/messages"}});
    let mut moved = with_endpoint.clone();
    moved["compatibility"]["native_http"]["messages"] = json!("/v2/messages");
    let diff = diff_manifests(&manifest(with_endpoint), &manifest(moved));
    assert_eq!(kinds(&diff), [(ChangeKind::Other, Breaking)], "{diff}");

    assert_changes(
        |m| m["security"] = json!({"signatures": "required"}),
        &[(ChangeKind::Other, Breaking)],
    );
    assert_changes(
        |m| m["limits"] = json!({"max_input_bytes": 1024}),
        &[(ChangeKind::Other, Breaking)],
    );
    assert_changes(
        |m| m["extensions"] = json!({"vendor": {"x": 1}}),
        &[(ChangeKind::Other, Breaking)],
    );
    assert_changes(
        |m| capability(m, 0)["cost"] = json!({"per_call_usd": 0.01}),
        &[(ChangeKind::Other, Breaking)],
    );
}

#[test]
fn the_agent_identity_is_breaking_its_display_name_documentation() {
    assert_changes(
        |m| m["agent"]["display_name"] = json!("Test agent"),
        &[(ChangeKind::Documentation, Compatible)],
    );
    assert_changes(
        |m| m["agent"]["id"] = json!("agent:other"),
        &[(ChangeKind::AgentChanged, Breaking)],
    );
    assert_changes(
        |m| m["manifest_version"] = json!("aip-manifest/v2"),
        &[(ChangeKind::ManifestVersionChanged, Breaking)],
    );
}

#[test]
fn resources_and_channels_by_key() {
    let resource = json!({"id": "res:calendar", "name": "Calendar"});
    assert_changes(
        |m| m["resources"] = json!([resource.clone()]),
        &[(ChangeKind::ResourceAdded, Compatible)],
    );
    let mut with_resource = base();
    with_resource["resources"] = json!([resource]);
    let mut renamed = with_resource.clone();
    renamed["resources"][0]["name"] = json!("Team calendar");
    let diff = diff_manifests(&manifest(with_resource.clone()), &manifest(renamed));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ResourceChanged, Breaking)],
        "{diff}"
    );
    let diff = diff_manifests(&manifest(with_resource), &manifest(base()));
    assert_eq!(
        kinds(&diff),
        [(ChangeKind::ResourceRemoved, Breaking)],
        "{diff}"
    );
    assert_changes(
        |m| m["channels"] = json!([{"id": "chan:alerts"}]),
        &[(ChangeKind::ChannelAdded, Compatible)],
    );
}

// --- display ---------------------------------------------------------------------------------

#[test]
fn the_diff_lists_breaking_changes_first_with_a_summary() {
    let diff = diff_after(|m| {
        let mut echo = m["capabilities"][0].clone();
        echo["id"] = json!("cap:test:echo2");
        m["capabilities"].as_array_mut().unwrap().push(echo);
        contract(m, BOOKING)["side_effects"] = json!(["write", "external_network", "delete"]);
    });
    let text = diff.to_string();
    assert_eq!(
        text,
        "2 changes (1 breaking, 1 compatible)\n  \
         - breaking: capability `cap:calendar:booking:create` /contract/side_effects: new side effect `delete`\n  \
         - compatible: capability `cap:test:echo2`: capability added"
    );
    assert_eq!(diff.breaking().count(), 1);
    assert_eq!(diff.compatible().count(), 1);
    assert_eq!(diff.of_kind(ChangeKind::SideEffectAdded).count(), 1);
    let json = diff.to_json();
    assert_eq!(json["breaking"], json!(true));
    assert_eq!(json["changes"][0]["kind"], json!("side_effect_added"));
    assert_eq!(json["changes"][0]["class"], json!("breaking"));
    assert_eq!(
        json["changes"][0]["capability"],
        json!("cap:calendar:booking:create")
    );
}

// ---------------------------------------------------------------------------------------------
// Schemas derived by `#[connector]`: two versions of one connector
// ---------------------------------------------------------------------------------------------

mod v1 {
    use aip_connector::prelude::*;

    /// A colour.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub(super) enum Colour {
        /// Red.
        Red,
        /// Green.
        Green,
    }

    /// Where to paint.
    #[derive(Deserialize, JsonSchema)]
    pub(super) struct Wall {
        pub(super) room: String,
    }

    #[derive(Deserialize, JsonSchema)]
    pub(super) struct Paint {
        pub(super) colour: Colour,
        pub(super) wall: Option<Wall>,
        pub(super) walls: Vec<Wall>,
    }

    #[derive(Serialize, JsonSchema)]
    pub(super) struct Painted {
        pub(super) colour: Colour,
    }

    pub(super) struct Palette;

    #[connector(id = "palette")]
    impl Palette {
        /// Paints walls.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        async fn paint(&self, input: Paint) -> Result<Painted, ConnectorFailure> {
            let _ = (input.wall.map(|wall| wall.room), input.walls.len());
            Ok(Painted {
                colour: input.colour,
            })
        }
    }
}

/// The next version: a new colour, and a new required field in the nested `Wall`.
mod v2 {
    use aip_connector::prelude::*;

    /// A colour.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub(super) enum Colour {
        /// Red.
        Red,
        /// Green.
        Green,
        /// Blue.
        Blue,
    }

    /// Where to paint.
    #[derive(Deserialize, JsonSchema)]
    pub(super) struct Wall {
        pub(super) room: String,
        pub(super) side: String,
    }

    #[derive(Deserialize, JsonSchema)]
    pub(super) struct Paint {
        pub(super) colour: Colour,
        pub(super) wall: Option<Wall>,
        pub(super) walls: Vec<Wall>,
    }

    #[derive(Serialize, JsonSchema)]
    pub(super) struct Painted {
        pub(super) colour: Colour,
    }

    pub(super) struct Palette;

    #[connector(id = "palette")]
    impl Palette {
        /// Paints walls.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        async fn paint(&self, input: Paint) -> Result<Painted, ConnectorFailure> {
            let _ = (
                input.wall.map(|wall| (wall.room, wall.side)),
                input.walls.len(),
            );
            Ok(Painted {
                colour: input.colour,
            })
        }
    }
}

#[test]
fn derived_schemas_are_compared_through_their_definitions() {
    let old = v1::Palette.definition().manifest();
    let new = v2::Palette.definition().manifest();
    let diff = diff_manifests(&old, &new);
    let mut found: Vec<(ChangeKind, ChangeClass, &str)> = diff
        .changes()
        .iter()
        .map(|change| (change.kind, change.class, change.path.as_str()))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            // A new required field of a nested type narrows the input, reported once at the
            // definition although two properties use it...
            (
                ChangeKind::InputPropertyAdded,
                Breaking,
                "/input_schema/$defs/Wall/properties/side"
            ),
            // ...a new variant of a documented enum (`oneOf` of constants) widens it...
            (
                ChangeKind::InputSchemaWidened,
                Compatible,
                "/input_schema/$defs/Colour/oneOf/2"
            ),
            // ...and the same new variant widens the output.
            (
                ChangeKind::OutputSchemaWidened,
                Breaking,
                "/output_schema/$defs/Colour/oneOf/2"
            ),
        ],
        "{diff}"
    );
}

// ---------------------------------------------------------------------------------------------
// The snapshot file
// ---------------------------------------------------------------------------------------------

/// A fresh folder under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("aip-snapshot-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn snapshot(&self) -> PathBuf {
        default_snapshot_path(&self.0, "booking")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_missing_snapshot_fails_and_says_how_to_create_it() {
    let dir = TempDir::new("missing");
    let path = dir.snapshot();
    let error = check_manifest_snapshot(&manifest(base()), &path, SnapshotMode::Check).unwrap_err();
    assert!(matches!(error, SnapshotError::Missing { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.starts_with("no manifest snapshot yet at "),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("AIP_UPDATE_SNAPSHOTS=1"), "{message}");
    assert!(!path.exists(), "check mode never writes");
}

#[test]
fn update_mode_creates_the_snapshot_then_check_mode_passes() {
    let dir = TempDir::new("create");
    let path = dir.snapshot();
    assert_eq!(path, dir.0.join("tests/snapshots/booking.manifest.json"));
    let current = manifest(base());
    let outcome = check_manifest_snapshot(&current, &path, SnapshotMode::Update).unwrap();
    assert_eq!(outcome, SnapshotOutcome::Created);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, render_manifest(&current));
    assert!(text.ends_with("}\n") && !text.ends_with("\n\n"));
    assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), current);
    assert_eq!(
        check_manifest_snapshot(&current, &path, SnapshotMode::Check).unwrap(),
        SnapshotOutcome::Unchanged
    );
    // No temporary file is left behind.
    let entries = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(entries, 1);
}

#[test]
fn the_rendering_is_canonical() {
    fn assert_sorted(value: &Value) {
        match value {
            Value::Object(map) => {
                let keys: Vec<&String> = map.keys().collect();
                let mut sorted = keys.clone();
                sorted.sort();
                assert_eq!(keys, sorted);
                map.values().for_each(assert_sorted);
            }
            Value::Array(items) => items.iter().for_each(assert_sorted),
            _ => {}
        }
    }
    let current = manifest(base());
    let text = render_manifest(&current);
    // `serde_json` keeps the file's key order here (feature `preserve_order`).
    assert_sorted(&serde_json::from_str(&text).unwrap());
    assert!(text.starts_with("{\n  \"agent\": {\n    \"id\""), "{text}");
    assert!(text.ends_with("\n}\n"), "{text}");
    // Capabilities keep their order.
    let echo = text.find("\"cap:test:echo\"").unwrap();
    let booking = text.find("\"cap:calendar:booking:create\"").unwrap();
    assert!(echo < booking);
    // The same manifest, built again or with its keys shuffled, renders to the same bytes.
    assert_eq!(text, render_manifest(&manifest(base())));
    let reparsed: Manifest =
        serde_json::from_str(&serde_json::to_string(&current).unwrap()).unwrap();
    assert_eq!(text, render_manifest(&reparsed));
}

#[test]
fn drift_fails_in_check_mode_and_leaves_the_file() {
    let dir = TempDir::new("drift");
    let path = dir.snapshot();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, render_manifest(&manifest(base()))).unwrap();
    let mut changed = base();
    contract(&mut changed, BOOKING)["idempotency"]["requirement"] = json!("optional");
    booking_input(&mut changed)["properties"]["note"] = json!({"type": "string"});

    let error =
        check_manifest_snapshot(&manifest(changed), &path, SnapshotMode::Check).unwrap_err();
    let diff = error.diff().expect("a drift");
    assert_eq!(
        kinds(diff),
        [
            (ChangeKind::InputPropertyAdded, Compatible),
            (ChangeKind::IdempotencyWeakened, Breaking),
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains("manifest drifted from the snapshot at"),
        "{message}"
    );
    assert!(
        message.contains("2 changes (1 breaking, 1 compatible)"),
        "{message}"
    );
    assert!(
        message.contains(
            "breaking: capability `cap:calendar:booking:create` /contract/idempotency/requirement: \
             idempotency requirement weakened `required` → `optional`"
        ),
        "{message}"
    );
    assert!(
        message.contains("compatible: capability `cap:calendar:booking:create` /input_schema/properties/note: input: new optional property `note`"),
        "{message}"
    );
    assert!(message.contains("BREAKING"), "{message}");
    assert!(message.contains("AIP_UPDATE_SNAPSHOTS=1"), "{message}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        render_manifest(&manifest(base()))
    );
}

#[test]
fn compatible_drift_still_fails_but_says_so() {
    let dir = TempDir::new("compatible");
    let path = dir.snapshot();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, render_manifest(&manifest(base()))).unwrap();
    let mut changed = base();
    capability(&mut changed, 0)["description"] = json!("Repeats.");
    let error =
        check_manifest_snapshot(&manifest(changed), &path, SnapshotMode::Check).unwrap_err();
    assert!(!error.diff().unwrap().is_breaking());
    assert!(
        error
            .to_string()
            .contains("compatible: the changes can ship in a minor release"),
        "{error}"
    );
}

#[test]
fn update_mode_rewrites_a_drifted_snapshot() {
    let dir = TempDir::new("rewrite");
    let path = dir.snapshot();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, render_manifest(&manifest(base()))).unwrap();
    let mut changed = base();
    contract(&mut changed, BOOKING)["side_effects"] =
        json!(["write", "external_network", "delete"]);
    let changed = manifest(changed);

    let outcome = check_manifest_snapshot(&changed, &path, SnapshotMode::Update).unwrap();
    let SnapshotOutcome::Updated(diff) = outcome else {
        panic!("expected an update, got {outcome:?}");
    };
    assert_eq!(kinds(&diff), [(ChangeKind::SideEffectAdded, Breaking)]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        render_manifest(&changed)
    );
    assert_eq!(
        check_manifest_snapshot(&changed, &path, SnapshotMode::Check).unwrap(),
        SnapshotOutcome::Unchanged
    );
}

#[test]
fn a_snapshot_that_differs_only_in_formatting_is_reported_as_such() {
    let dir = TempDir::new("formatting");
    let path = dir.snapshot();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let current = manifest(base());
    std::fs::write(&path, serde_json::to_string(&current).unwrap()).unwrap();
    let error = check_manifest_snapshot(&current, &path, SnapshotMode::Check).unwrap_err();
    assert_eq!(
        kinds(error.diff().unwrap()),
        [(ChangeKind::Formatting, Compatible)],
        "{error}"
    );

    // Windows line endings from a `core.autocrlf` checkout are not drift.
    std::fs::write(&path, render_manifest(&current).replace('\n', "\r\n")).unwrap();
    assert_eq!(
        check_manifest_snapshot(&current, &path, SnapshotMode::Check).unwrap(),
        SnapshotOutcome::Unchanged
    );
}

#[test]
fn an_unreadable_snapshot_fails_in_check_mode_and_is_replaced_in_update_mode() {
    let dir = TempDir::new("unreadable");
    let path = dir.snapshot();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "{ not json").unwrap();
    let current = manifest(base());
    let error = check_manifest_snapshot(&current, &path, SnapshotMode::Check).unwrap_err();
    assert!(matches!(error, SnapshotError::Unreadable { .. }), "{error}");
    assert!(
        error.to_string().contains("cannot be read as a manifest"),
        "{error}"
    );
    let outcome = check_manifest_snapshot(&current, &path, SnapshotMode::Update).unwrap();
    assert!(
        matches!(outcome, SnapshotOutcome::Replaced { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        render_manifest(&current)
    );
}

#[test]
fn the_assertion_panics_with_the_message() {
    let dir = TempDir::new("panic");
    let path = dir.snapshot();
    let current = manifest(base());
    let panic = std::panic::catch_unwind(|| {
        assert_manifest_snapshot_at(&current, &path, SnapshotMode::Check);
    })
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("no manifest snapshot yet at"),
        "{message}"
    );
    assert_manifest_snapshot_at(&current, &path, SnapshotMode::Update);
    assert_manifest_snapshot_at(&current, &path, SnapshotMode::Check);
}

#[test]
fn the_update_variable_values() {
    assert_eq!(SnapshotMode::from_env_value(None), SnapshotMode::Check);
    for off in ["", "0", "false", "No", "OFF", " 0 "] {
        assert_eq!(
            SnapshotMode::from_env_value(Some(off)),
            SnapshotMode::Check,
            "{off:?}"
        );
    }
    for on in ["1", "true", "yes", "always"] {
        assert_eq!(
            SnapshotMode::from_env_value(Some(on)),
            SnapshotMode::Update,
            "{on:?}"
        );
    }
}

#[test]
fn snapshot_file_names_are_portable() {
    assert_eq!(
        default_snapshot_path(Path::new("/crate"), "cap:calendar/v1 beta"),
        Path::new("/crate/tests/snapshots/cap_calendar_v1_beta.manifest.json")
    );
}

// ---------------------------------------------------------------------------------------------
// The macro, as a connector crate uses it, on a committed snapshot
// ---------------------------------------------------------------------------------------------

/// `tests/snapshots/palette.manifest.json` is committed with this crate. With
/// `AIP_UPDATE_SNAPSHOTS=1` this test rewrites it instead.
#[test]
fn the_macro_checks_the_committed_snapshot() {
    use aip_connector_testkit::assert_manifest_snapshot;
    let path = "tests/snapshots/palette.manifest.json";
    assert_manifest_snapshot!(v1::Palette);
    assert_manifest_snapshot!(v1::Palette, path = path);
    // A reference, an `Arc` or a trait object works the same.
    let palette = v1::Palette;
    assert_manifest_snapshot!(&palette);
    assert_manifest_snapshot!(std::sync::Arc::new(v1::Palette));
    let boxed: Box<dyn Connector> = Box::new(v1::Palette);
    assert_manifest_snapshot!(boxed, path = path);
    let manifest = v1::Palette.definition().manifest();
    assert_manifest_snapshot!(manifest = manifest, path = path);
    // The type alone: no value to build.
    assert_manifest_snapshot!(type = v1::Palette);
    assert_manifest_snapshot!(type = v1::Palette, path = path);
}

/// A snapshot read back from its file has its keys sorted, while the live manifest's schemas
/// keep schemars' order (serde_json's `preserve_order` is on in this build). A change elsewhere in
/// the manifest must not make the unchanged schemas read as changed.
#[test]
fn key_order_alone_is_no_schema_change() {
    let live = v1::Palette.definition().manifest();
    let mut read_back: Manifest = serde_json::from_str(&render_manifest(&live)).unwrap();
    read_back.compatibility.as_mut().unwrap()["system"] = json!("paint-co");
    let diff = diff_manifests(&read_back, &live);
    let changes: Vec<String> = diff.changes().iter().map(|c| c.to_string()).collect();
    assert_eq!(changes.len(), 1, "{changes:#?}");
    assert!(changes[0].contains("/compatibility/system"), "{changes:#?}");
}
