//! Phase E: projected names (upstream check 28).
//!
//! Every capability is projected under every manifest profile to a stable identifier (a tool
//! name for MCP, an operation id for HTTP, ...); two capabilities must not project to the same
//! identifier under one profile.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use super::codes;
use crate::ids::{CapabilityId, ProfileId};
use crate::issue::Issue;
use crate::model::{Capability, Manifest};
use crate::naming::stable_profile_name;

/// The projection map: `(profile, stable name)` → capability id.
pub(super) type ProjectedNames = BTreeMap<(ProfileId, String), CapabilityId>;

/// What phase E computes.
pub(super) struct Projection {
    /// The projection map.
    pub(super) names: ProjectedNames,
    /// The stable name of each capability under each manifest profile, in manifest order.
    pub(super) per_capability: Vec<Vec<String>>,
}

/// Runs check 28 and returns the projection ("a later insert replaces an earlier one").
pub(super) fn project(manifest: &Manifest, out: &mut Vec<Issue>) -> Projection {
    let mut projected = ProjectedNames::new();
    let mut per_capability = Vec::with_capacity(manifest.capabilities.len());
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let mut stable_names = Vec::with_capacity(manifest.profiles.len());
        for profile in &manifest.profiles {
            let stable = stable_profile_name(raw_projected_name(capability, profile));
            stable_names.push(stable.clone());
            match projected.entry((profile.clone(), stable)) {
                Entry::Vacant(slot) => {
                    slot.insert(capability.id.clone());
                }
                Entry::Occupied(mut slot) => {
                    let earlier = slot.insert(capability.id.clone());
                    check_collision(capability, index, profile, &slot.key().1, &earlier, out);
                }
            }
        }
        per_capability.push(stable_names);
    }
    Projection {
        names: projected,
        per_capability,
    }
}

/// The raw name of `capability` under `profile`: its first binding's name metadata, else its id.
fn raw_projected_name<'m>(capability: &'m Capability, profile: &ProfileId) -> &'m str {
    capability
        .binding(profile.as_str())
        .and_then(|binding| binding.projected_name())
        .unwrap_or(capability.id.as_str())
}

/// Check 28: a projected identifier must route to exactly one capability.
fn check_collision(
    capability: &Capability,
    index: usize,
    profile: &ProfileId,
    stable: &str,
    earlier: &CapabilityId,
    out: &mut Vec<Issue>,
) {
    if *earlier != capability.id {
        out.push(
            Issue::new(
                codes::MANIFEST_PROFILE_NAME_COLLISION,
                format!("/capabilities/{index}/bindings"),
                format!("projected identifier `{stable}` collides with capability `{earlier}`"),
            )
            .with_capability(&capability.id)
            .with_profile(profile),
        );
    }
}
