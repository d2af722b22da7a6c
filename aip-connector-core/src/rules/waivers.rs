//! Connector-level rules: compensation targets, the handlers behind them and the approval of
//! an undo, and the waivers a
//! manifest publishes under `/governance/contract_waivers` so that every exemption from a lint is
//! visible to callers.

use serde_json::Value;

use super::catalogue::rule_info;
use super::codes::*;
use super::{Reporter, Waiver, is_waived, own_issue};
use crate::ids::CapabilityId;
use crate::issue::Issue;
use crate::model::{Capability, Manifest, RiskLevel};

/// Where a manifest publishes its waivers, as a JSON Pointer.
const WAIVERS_POINTER: &str = "/governance/contract_waivers";

/// The capability `capability`'s contract names as its compensation, if any.
fn compensation_target(capability: &Capability) -> Option<&CapabilityId> {
    capability
        .contract
        .as_ref()
        .and_then(|contract| contract.compensation.as_ref())
        .and_then(|compensation| compensation.compensation_capability_id.as_ref())
}

/// A compensation capability must be one this connector serves, unless a waiver says where the
/// external one lives.
pub fn compensation_targets(manifest: &Manifest, waivers: &[Waiver], out: &mut Vec<Issue>) {
    for (i, capability) in manifest.capabilities.iter().enumerate() {
        let Some(target) = compensation_target(capability) else {
            continue;
        };
        if manifest.capability(target.as_str()).is_some()
            || is_waived(
                waivers,
                &capability.id,
                MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
            )
        {
            continue;
        }
        let base = format!("/capabilities/{i}");
        Reporter::new(capability, &base, out).own(
            MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
            "/contract/compensation/compensation_capability_id",
            &format!("compensation capability `{target}` is not a capability of this manifest"),
        );
    }
}

/// A compensating capability must read what it undoes: the host hands it the committed target
/// (ids, output, provider operation) only through the `Compensation` extractor, so a handler
/// without it cannot tell which effect to undo.
///
/// Manifest admission sees support records, not handlers, so it cannot run this rule; the
/// `#[connector]` macro runs it at compile time, and `Host::build` for every connector, from its
/// handlers' facts. `takes_compensation` says whether a capability's handler takes
/// `Compensation` (`None` when its handler is unknown, which skips it). A target that is not in the manifest, or that is the
/// capability itself, is left to [`compensation_targets`] and the consistency rules.
pub fn compensating_handlers(
    manifest: &Manifest,
    takes_compensation: impl Fn(&CapabilityId) -> Option<bool>,
    out: &mut Vec<Issue>,
) {
    for (i, capability) in manifest.capabilities.iter().enumerate() {
        let Some(target) =
            compensation_target(capability).filter(|target| **target != capability.id)
        else {
            continue;
        };
        if manifest.capability(target.as_str()).is_none()
            || takes_compensation(target) != Some(false)
        {
            continue;
        }
        let base = format!("/capabilities/{i}");
        Reporter::new(capability, &base, out).own(
            IMPLEMENTATION_COMPENSATION_TARGET_UNSUPPORTED,
            "/contract/compensation/compensation_capability_id",
            &format!(
                "compensation capability `{target}` cannot compensate: its handler does not take `Compensation`, so it cannot read which action it undoes"
            ),
        );
    }
}

/// A compensating capability that requires approval can only run where the host approves its
/// undo: a `compensate` action names the compensated capability and passes the approval gate
/// under that capability's contract, never the compensating one's (docs/host-runtime.md §6.8).
/// When that contract does not gate it (no approval required, risk `medium` or lower, no
/// `requires_human_approval`, no `compensation(requires_approval)`), no approval ever reaches the
/// compensating handler, whose `Approval` parameter then refuses every undo with
/// `approval.required` (found by an author trial: the `delete` lint asks for the approval, and
/// only the conformance suite noticed). A target that is not in the manifest is left to
/// [`compensation_targets`].
pub fn compensation_approval(manifest: &Manifest, out: &mut Vec<Issue>) {
    for (i, capability) in manifest.capabilities.iter().enumerate() {
        let Some(target) =
            compensation_target(capability).filter(|target| **target != capability.id)
        else {
            continue;
        };
        let Some(compensating) = manifest.capability(target.as_str()) else {
            continue;
        };
        let target_requires_approval = compensating
            .contract
            .as_ref()
            .and_then(|contract| contract.approval.as_ref())
            .is_some_and(|approval| approval.required);
        if !target_requires_approval || gates_compensations(capability) {
            continue;
        }
        let base = format!("/capabilities/{i}");
        Reporter::new(capability, &base, out).own(
            MANIFEST_COMPENSATION_APPROVAL_UNGATED,
            "/contract/compensation/requires_approval",
            &format!(
                "compensation capability `{target}` requires approval, but `{}` does not gate its compensations: the host approves an undo under the compensated capability's contract, so `{target}` would never receive an approval and every compensation would fail with `approval.required`",
                capability.id
            ),
        );
    }
}

/// Whether the host's approval gate (stage 10) applies to a call of `capability`: its contract
/// requires approval, it asks for a human, or its risk is above `medium`.
pub fn approval_gated(capability: &Capability) -> bool {
    capability
        .contract
        .as_ref()
        .and_then(|contract| contract.approval.as_ref())
        .is_some_and(|approval| approval.required)
        || capability.requires_human_approval == Some(true)
        || capability.risk.is_some_and(|risk| risk > RiskLevel::Medium)
}

/// Whether the host's approval gate applies to a `compensate` of `capability`: every call of it
/// is gated, or its contract says `compensation(requires_approval)`.
pub fn gates_compensations(capability: &Capability) -> bool {
    approval_gated(capability)
        || capability
            .contract
            .as_ref()
            .and_then(|contract| contract.compensation.as_ref())
            .is_some_and(|compensation| compensation.requires_approval)
}

/// The valid waivers published at `/governance/contract_waivers`. Each malformed or invalid entry
/// gives one issue per problem and is left out, so an invalid waiver never suppresses a rule.
pub fn waivers_from_manifest(manifest: &Manifest, out: &mut Vec<Issue>) -> Vec<Waiver> {
    let Some(published) = manifest
        .governance
        .as_ref()
        .and_then(|governance| governance.get("contract_waivers"))
    else {
        return Vec::new();
    };
    let Some(entries) = published.as_array() else {
        out.push(own_issue(
            MANIFEST_WAIVER_MALFORMED,
            WAIVERS_POINTER.to_owned(),
            "contract_waivers must be an array of waiver objects",
        ));
        return Vec::new();
    };
    let mut waivers = Vec::new();
    for (k, entry) in entries.iter().enumerate() {
        let before = out.len();
        let path = format!("{WAIVERS_POINTER}/{k}");
        let waiver = match serde_json::from_value::<Waiver>(entry.clone()) {
            Ok(waiver) => waiver,
            Err(error) => {
                out.push(malformed_waiver(entry, path, &error));
                continue;
            }
        };
        waiver_has_reason(&waiver, &path, out);
        waiver_names_waivable_rule(&waiver, &path, out);
        waiver_names_declared_capability(&waiver, manifest, &path, out);
        if out.len() == before {
            waivers.push(waiver);
        }
    }
    waivers
}

/// An entry that is not a `{capability_id, code, reason}` object cannot waive anything.
fn malformed_waiver(entry: &Value, path: String, error: &serde_json::Error) -> Issue {
    let issue = own_issue(
        MANIFEST_WAIVER_MALFORMED,
        path,
        &format!("waiver is not a `{{capability_id, code, reason}}` object: {error}"),
    );
    match entry.get("capability_id").and_then(Value::as_str) {
        Some(id) => issue.with_capability(&CapabilityId::from(id)),
        None => issue,
    }
}

/// An exemption must say why; a blank reason is no reason.
fn waiver_has_reason(waiver: &Waiver, path: &str, out: &mut Vec<Issue>) {
    if waiver.reason.trim().is_empty() {
        out.push(
            own_issue(
                MANIFEST_WAIVER_REASON_EMPTY,
                path.to_owned(),
                &format!("the waiver of `{}` has a blank reason", waiver.code),
            )
            .with_capability(&waiver.capability_id),
        );
    }
}

/// Only lint rules may be waived; a waiver of anything else would hide a broken contract.
fn waiver_names_waivable_rule(waiver: &Waiver, path: &str, out: &mut Vec<Issue>) {
    let (code, problem) = match rule_info(&waiver.code) {
        None => (
            MANIFEST_WAIVER_CODE_UNKNOWN,
            format!("`{}` is not a rule code", waiver.code),
        ),
        Some(rule) if !rule.waivable => (
            MANIFEST_WAIVER_NOT_WAIVABLE,
            format!("rule `{}` cannot be waived", waiver.code),
        ),
        Some(_) => return,
    };
    out.push(own_issue(code, path.to_owned(), &problem).with_capability(&waiver.capability_id));
}

/// A waiver for a capability that does not exist is stale or misspelled.
fn waiver_names_declared_capability(
    waiver: &Waiver,
    manifest: &Manifest,
    path: &str,
    out: &mut Vec<Issue>,
) {
    if manifest.capability(waiver.capability_id.as_str()).is_none() {
        out.push(
            own_issue(
                MANIFEST_WAIVER_CAPABILITY_UNKNOWN,
                path.to_owned(),
                &format!(
                    "the waiver names capability `{}`, which the manifest does not declare",
                    waiver.capability_id
                ),
            )
            .with_capability(&waiver.capability_id),
        );
    }
}
