//! Phase C: bindings (upstream checks 15–17).

use std::collections::{BTreeSet, HashSet};

use super::codes;
use crate::ids::ProfileId;
use crate::issue::Issue;
use crate::model::{Binding, Manifest};

/// Runs checks 15–17 for every binding of every capability, in manifest order.
pub(super) fn check(
    manifest: &Manifest,
    allowed_profiles: &BTreeSet<ProfileId>,
    out: &mut Vec<Issue>,
) {
    let declared: HashSet<&str> = manifest.profiles.iter().map(ProfileId::as_str).collect();
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let mut bound = HashSet::with_capacity(capability.bindings.len());
        for (position, binding) in capability.bindings.iter().enumerate() {
            let path = format!("/capabilities/{index}/bindings/{position}/profile");
            let issue = |code: &str, message: &str| {
                Issue::new(code, path.as_str(), message)
                    .with_capability(&capability.id)
                    .with_profile(&binding.profile)
            };
            if binding_repeated(binding, &mut bound) {
                out.push(issue(
                    codes::MANIFEST_BINDING_DUPLICATE,
                    "one capability cannot declare the same profile binding twice",
                ));
            }
            if binding_undeclared(binding, &declared) {
                out.push(issue(
                    codes::MANIFEST_BINDING_PROFILE_UNDECLARED,
                    "binding profile is not declared by the manifest",
                ));
            }
            if binding_unsupported(binding, allowed_profiles) {
                out.push(issue(
                    codes::MANIFEST_BINDING_PROFILE_UNSUPPORTED,
                    "runtime does not support this binding profile",
                ));
            }
        }
    }
}

/// Check 15: one capability has one projection per profile, so a second binding is ambiguous.
fn binding_repeated<'m>(binding: &'m Binding, bound: &mut HashSet<&'m str>) -> bool {
    !bound.insert(binding.profile.as_str())
}

/// Check 16: a binding for a profile the participant does not speak can never be reached.
fn binding_undeclared(binding: &Binding, declared: &HashSet<&str>) -> bool {
    !declared.contains(binding.profile.as_str())
}

/// Check 17: a host may serve only some profiles; a binding for another one cannot be honoured.
fn binding_unsupported(binding: &Binding, allowed_profiles: &BTreeSet<ProfileId>) -> bool {
    !allowed_profiles.is_empty() && !allowed_profiles.contains(binding.profile.as_str())
}
