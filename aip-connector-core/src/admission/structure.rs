//! Phase A: manifest structure (upstream checks 1–10 with the contract invariants C1–C15).

use std::collections::HashSet;

use super::codes;
use crate::issue::Issue;
use crate::model::{Capability, Manifest, Resource};
use crate::rules;

/// Runs checks 1–10, with C1–C15 after checks 4 and 5 of each capability, in upstream order.
pub(super) fn check(manifest: &Manifest, out: &mut Vec<Issue>) {
    check_manifest_version(manifest, out);
    check_profiles_declared(manifest, out);
    check_profiles_unique(manifest, out);

    let mut capability_ids = HashSet::with_capacity(manifest.capabilities.len());
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let base = format!("/capabilities/{index}");
        check_capability_unique(capability, &base, &mut capability_ids, out);
        check_capability_name(capability, &base, out);
        rules::contract_invariants(capability, &base, out);
    }

    let mut resource_ids = HashSet::with_capacity(manifest.resources.len());
    for (index, resource) in manifest.resources.iter().enumerate() {
        check_resource_id(resource, index, &mut resource_ids, out);
        check_resource_capability(&capability_ids, resource, index, out);
    }

    // Checks 9 and 10, shared with the macros and the builder.
    out.extend(crate::discovery::channel_issues(&manifest.channels));
}

/// Check 1: a manifest must say which manifest format it is written in.
fn check_manifest_version(manifest: &Manifest, out: &mut Vec<Issue>) {
    if manifest.manifest_version.trim().is_empty() {
        out.push(Issue::new(
            codes::MANIFEST_VERSION_EMPTY,
            "/manifest_version",
            "manifest_version must not be empty",
        ));
    }
}

/// Check 2: a participant that speaks no profile cannot be reached.
fn check_profiles_declared(manifest: &Manifest, out: &mut Vec<Issue>) {
    if manifest.profiles.is_empty() {
        out.push(Issue::new(
            codes::MANIFEST_PROFILES_EMPTY,
            "/profiles",
            "at least one profile is required",
        ));
    }
}

/// Check 3: a repeated profile would project every capability twice (one issue per repeat).
fn check_profiles_unique(manifest: &Manifest, out: &mut Vec<Issue>) {
    let mut seen = HashSet::with_capacity(manifest.profiles.len());
    for profile in &manifest.profiles {
        if !seen.insert(profile.as_str()) {
            out.push(Issue::new(
                codes::MANIFEST_PROFILE_DUPLICATE,
                "/profiles",
                format!("duplicate identifier `{profile}`"),
            ));
        }
    }
}

/// Check 4: actions address capabilities by id, so an id must name exactly one capability.
fn check_capability_unique<'m>(
    capability: &'m Capability,
    base: &str,
    seen: &mut HashSet<&'m str>,
    out: &mut Vec<Issue>,
) {
    if !seen.insert(capability.id.as_str()) {
        out.push(
            Issue::new(
                codes::MANIFEST_CAPABILITY_DUPLICATE,
                format!("{base}/id"),
                "capability id is duplicated",
            )
            .with_capability(&capability.id),
        );
    }
}

/// Check 5: a capability needs a human-readable name for discovery and prompts.
fn check_capability_name(capability: &Capability, base: &str, out: &mut Vec<Issue>) {
    if capability.name.trim().is_empty() {
        out.push(
            Issue::new(
                codes::MANIFEST_CAPABILITY_NAME_EMPTY,
                format!("{base}/name"),
                "capability name must not be empty",
            )
            .with_capability(&capability.id),
        );
    }
}

/// Checks 6 and 7: resources are read by id, so an id must be present and name one resource.
///
/// A blank id is reported as empty and is not remembered, so repeated blank ids are each
/// reported as empty rather than as duplicates.
fn check_resource_id<'m>(
    resource: &'m Resource,
    index: usize,
    seen: &mut HashSet<&'m str>,
    out: &mut Vec<Issue>,
) {
    let code = if resource.id.trim().is_empty() {
        codes::MANIFEST_RESOURCE_ID_EMPTY
    } else if !seen.insert(resource.id.as_str()) {
        codes::MANIFEST_RESOURCE_DUPLICATE
    } else {
        return;
    };
    let mut issue = Issue::new(
        code,
        format!("/resources/{index}/id"),
        "resource id must be non-empty and unique",
    );
    issue.capability_id = resource.capability_id.clone();
    out.push(issue);
}

/// Check 8: a resource read through a capability must name one this manifest declares.
fn check_resource_capability(
    capability_ids: &HashSet<&str>,
    resource: &Resource,
    index: usize,
    out: &mut Vec<Issue>,
) {
    let Some(capability_id) = &resource.capability_id else {
        return;
    };
    if !capability_ids.contains(capability_id.as_str()) {
        out.push(
            Issue::new(
                codes::MANIFEST_RESOURCE_CAPABILITY_MISSING,
                format!("/resources/{index}/capability_id"),
                "resource references an undeclared capability",
            )
            .with_capability(capability_id),
        );
    }
}
