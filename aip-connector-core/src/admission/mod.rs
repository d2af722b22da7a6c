//! Manifest admission: every upstream `admit_manifest` check (`aip-model.md` §7.4) plus this
//! SDK's contract rules, all issues collected in one report.
//!
//! [`admit_manifest`] runs the phases in upstream order and never stops at the first problem:
//!
//! | Phase | Checks | What |
//! |---|---|---|
//! | A | 1–10, C1–C15 | manifest structure; each capability's contract invariants after checks 4 and 5 |
//! | B | 11–13 | schema roots and remote `$ref`s for every capability, then every schema compiled |
//! | C | 15–17 | bindings |
//! | D | 18–27 | implementation claims against the support map |
//! | E | 28 | projected names per profile |
//! | F | SDK | only with [`AdmissionPolicy::sdk_rules`]: core validation, consistency, waivable lints (waivers from `/governance/contract_waivers`), compensation targets and the approval of their undos |
//!
//! Inside a phase, issues follow manifest order, so a report is stable for a given manifest.
//! Codes, paths, extra fields and messages of phases A–E are upstream's; the codes of the
//! manifest and schema checks are in [`codes`].
//!
//! Success yields an [`AdmittedManifest`], an opaque token that only this function creates: it
//! holds the manifest together with its projected names and every compiled schema, so a host
//! validates with exactly what was admitted and never compiles a schema twice.
//!
//! ```
//! use aip_connector_core::admission::{admit_manifest, AdmissionPolicy, ImplementationSupportMap};
//! use aip_connector_core::model::Manifest;
//!
//! let manifest: Manifest = serde_json::from_value(serde_json::json!({
//!     "manifest_version": "aip-manifest/v1",
//!     "agent": { "id": "agent:demo", "kind": "service" },
//!     "profiles": [],
//! }))
//! .unwrap();
//! let report = admit_manifest(&manifest, &AdmissionPolicy::upstream(), &ImplementationSupportMap::new())
//!     .unwrap_err();
//! assert_eq!(report.to_string(), "manifest.profiles.empty at /profiles: at least one profile is required");
//! ```

pub mod codes;

mod bindings;
mod claims;
mod names;
mod schemas;
mod sdk;
mod structure;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{CapabilityId, ProfileId};
use crate::issue::Issue;
use crate::model::{CapabilityImplementationSupport, Manifest};
use crate::schema::{CompiledSchema, SchemaLimits};

use schemas::CapabilitySchemas;

/// What the admitting runtime accepts (upstream `ManifestAdmissionPolicy`, plus SDK switches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionPolicy {
    /// Whether non-fragment JSON Schema `$ref`s are permitted (check 12). Even when they are,
    /// compilation never fetches anything: a reference that resolves inside the schema (to its
    /// own `$id`) compiles, and one that needs another document fails check 13.
    pub allow_remote_schema_references: bool,
    /// Whether every callable capability must have an implementation claim (check 18).
    pub require_implementation_claims: bool,
    /// Profiles for which bindings may be admitted (check 17); empty accepts the manifest's.
    pub allowed_binding_profiles: BTreeSet<ProfileId>,
    /// Whether this SDK's rules (phase F) run on top of upstream's checks.
    pub sdk_rules: bool,
    /// Complexity limits every schema must respect before it is compiled (check 13).
    pub schema_limits: SchemaLimits,
}

impl Default for AdmissionPolicy {
    /// Upstream's default policy with this SDK's rules switched on.
    fn default() -> Self {
        Self {
            sdk_rules: true,
            ..Self::upstream()
        }
    }
}

impl AdmissionPolicy {
    /// Exactly upstream's default policy: checks 1–28 only, claims optional, no SDK rules.
    pub fn upstream() -> Self {
        Self {
            allow_remote_schema_references: false,
            require_implementation_claims: false,
            allowed_binding_profiles: BTreeSet::new(),
            sdk_rules: false,
            schema_limits: SchemaLimits::default(),
        }
    }

    /// What a host uses: the default policy, and every callable capability must be claimed
    /// (upstream's connector-registry policy plus the SDK rules).
    pub fn strict() -> Self {
        Self {
            require_implementation_claims: true,
            ..Self::default()
        }
    }
}

/// Implementation claims by capability id (upstream's admission argument).
pub type ImplementationSupportMap = HashMap<CapabilityId, CapabilityImplementationSupport>;

/// Every issue found by a failed admission, in phase order and then manifest order
/// (upstream `ManifestAdmissionReport`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionReport {
    /// The issues; never empty in a report returned by [`admit_manifest`].
    pub issues: Vec<Issue>,
}

impl AdmissionReport {
    /// The code of every issue, in report order.
    pub fn codes(&self) -> Vec<&str> {
        self.issues
            .iter()
            .map(|issue| issue.code.as_str())
            .collect()
    }
}

impl fmt::Display for AdmissionReport {
    /// `"{code} at {path}: {message}"` per issue, joined with `"; "`, as upstream.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, issue) in self.issues.iter().enumerate() {
            if position > 0 {
                f.write_str("; ")?;
            }
            fmt::Display::fmt(issue, f)?;
        }
        Ok(())
    }
}

impl std::error::Error for AdmissionReport {}

/// A manifest that passed admission, with what admission computed about it.
///
/// Only [`admit_manifest`] creates one, so holding this token proves the manifest inside was
/// checked: a caller cannot check one value and publish another.
#[derive(Clone, Debug)]
pub struct AdmittedManifest {
    manifest: Manifest,
    projected_names: names::ProjectedNames,
    /// Stable name of each capability under each profile, aligned with `manifest.profiles`.
    projections: Vec<Vec<String>>,
    /// Compiled schemas, aligned with `manifest.capabilities`.
    schemas: Vec<CapabilitySchemas>,
    /// Position of each capability in `manifest.capabilities`.
    positions: HashMap<CapabilityId, usize>,
}

impl AdmittedManifest {
    /// The admitted manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// `(profile, projected name)` → capability id, for every manifest profile.
    pub fn projected_names(&self) -> &BTreeMap<(ProfileId, String), CapabilityId> {
        &self.projected_names
    }

    /// The projected name of capability `id` under `profile`, if both are declared.
    pub fn projected_name(&self, profile: &str, id: &str) -> Option<&str> {
        let capability = *self.positions.get(id)?;
        let profile = self.manifest.profiles.iter().position(|p| p == profile)?;
        self.projections
            .get(capability)?
            .get(profile)
            .map(String::as_str)
    }

    /// The compiled input schema of capability `id`.
    pub fn input_schema(&self, id: &str) -> Option<&CompiledSchema> {
        let capability = *self.positions.get(id)?;
        self.schemas.get(capability).map(|schemas| &schemas.input)
    }

    /// The compiled output schema of capability `id`, if it declares one.
    pub fn output_schema(&self, id: &str) -> Option<&CompiledSchema> {
        let capability = *self.positions.get(id)?;
        self.schemas.get(capability)?.output.as_ref()
    }

    /// Gives the manifest back, dropping what admission computed.
    pub fn into_manifest(self) -> Manifest {
        self.manifest
    }
}

/// Admits `manifest` under `policy`, checking implementation claims against `support`.
///
/// Runs every check of phases A–E (and F when [`AdmissionPolicy::sdk_rules`] is set), collects
/// all issues, and fails when there is at least one. Never panics on any manifest value.
pub fn admit_manifest(
    manifest: &Manifest,
    policy: &AdmissionPolicy,
    support: &ImplementationSupportMap,
) -> Result<AdmittedManifest, AdmissionReport> {
    let mut issues = Vec::new();
    structure::check(manifest, &mut issues);
    schemas::check_shapes(manifest, policy.allow_remote_schema_references, &mut issues);
    let compiled = schemas::compile(manifest, &policy.schema_limits, &mut issues);
    bindings::check(manifest, &policy.allowed_binding_profiles, &mut issues);
    claims::check(manifest, policy, support, &mut issues);
    let projection = names::project(manifest, &mut issues);
    if policy.sdk_rules {
        sdk::check(manifest, &mut issues);
    }
    if !issues.is_empty() {
        return Err(AdmissionReport { issues });
    }
    let positions = manifest
        .capabilities
        .iter()
        .enumerate()
        .map(|(position, capability)| (capability.id.clone(), position))
        .collect();
    Ok(AdmittedManifest {
        manifest: manifest.clone(),
        projected_names: projection.names,
        projections: projection.per_capability,
        schemas: compiled,
        positions,
    })
}
