//! Phase F: this SDK's rules on top of upstream's admission (only with `sdk_rules`).
//!
//! Upstream admission does not run `aip-core`'s core validation, nor any consistency rule; a
//! manifest that passes it can still fail the other layer or contradict itself. Phase F runs the
//! union (`aip-model.md` §7.5) plus this SDK's consistency rules and waivable lints
//! (`DESIGN.md` §3), so a hand-written manifest is held to what `#[capability]` enforces.

use crate::issue::Issue;
use crate::model::Manifest;
use crate::rules;

/// Reads the waivers, then runs core validation, consistency and the lints per capability, then
/// checks compensation targets and the approval of their undos across the manifest.
pub(super) fn check(manifest: &Manifest, out: &mut Vec<Issue>) {
    let waivers = rules::waivers_from_manifest(manifest, out);
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let base = format!("/capabilities/{index}");
        rules::core_validation(capability, &base, out);
        rules::consistency(capability, None, &base, out);
        rules::lints(capability, &waivers, &base, out);
    }
    rules::compensation_targets(manifest, &waivers, out);
    rules::compensation_approval(manifest, out);
}
