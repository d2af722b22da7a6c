//! Classifying every difference between two manifests as breaking or compatible.
//!
//! The rule behind every classification: a change is **compatible** only when everyone who
//! relied on the old manifest stays right — a caller whose requests were valid, a client that
//! reads outputs, and the governance (policy, approval, audit) that admitted the capability on
//! the strength of its declared effects and protections. Everything else, and everything this
//! check cannot interpret, is **breaking**. The full table is in the crate README, section
//! "Manifest snapshots"; each rule is applied in one place below.

use std::collections::BTreeSet;
use std::fmt;

use aip_connector::aip_connector_core::naming::stable_profile_name;
use aip_connector::ids::{CapabilityId, ProfileId};
use aip_connector::model::{
    ApprovalPolicy, ApprovalRule, Capability, CapabilityContract, CompensationContract,
    CompensationMode, CredentialPolicy, DataContract, DryRunFidelity, ExecutionContract,
    IdempotencyContract, IdempotencyKeyScope, IdempotencyRequirement, Manifest, Principal,
    RetrySafety, ServiceLevelContract, SideEffect, Stability, TransactionContract, TransactionMode,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::schema::{self, Effect, PropertyEvent, Side, escape, show_value};

/// Whether a change can ship without breaking those who relied on the old manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeClass {
    /// Someone who relied on the old manifest is now wrong: a caller's valid request is
    /// refused, a client misses an output it read, or governance admitted the capability
    /// under effects or protections it no longer has. Calls for a new major version.
    Breaking,
    /// Additive or documentation only: every old caller, client and policy stays right.
    Compatible,
}

impl ChangeClass {
    /// `breaking` or `compatible`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeClass::Breaking => "breaking",
            ChangeClass::Compatible => "compatible",
        }
    }
}

impl fmt::Display for ChangeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What changed. The [`ChangeClass`] is recorded next to it because a few kinds are breaking
/// or compatible depending on the details (see each variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ChangeKind {
    /// A capability was added. Compatible.
    CapabilityAdded,
    /// A capability was removed (or its id changed). Breaking.
    CapabilityRemoved,
    /// The same capabilities are listed in another order. Compatible.
    CapabilitiesReordered,
    /// A capability's `kind` changed. Breaking.
    CapabilityKindChanged,
    /// Names, descriptions, titles, approval reasons, waiver reasons, schema annotations.
    /// Compatible.
    Documentation,
    /// SDK metadata: a capability's tags or examples. Compatible.
    Metadata,
    /// A capability's stability label changed. Breaking when a `stable` capability becomes
    /// `experimental` or loses its label; compatible otherwise.
    StabilityChanged,
    /// The risk level went up. Breaking: hosts and policies may now require approval or refuse.
    RiskRaised,
    /// The risk level went down. Breaking: approval that followed from the risk may no longer
    /// be asked for.
    RiskLowered,
    /// A risk level was added or removed. Breaking.
    RiskChanged,
    /// A side effect was declared that was not before. Breaking.
    SideEffectAdded,
    /// A declared side effect was dropped. Compatible: side effects are an upper bound.
    SideEffectRemoved,
    /// Fewer duplicates are recognised: requirement lowered, key scope narrowed, keys kept
    /// for a shorter time or newly expiring. Breaking.
    IdempotencyWeakened,
    /// Stricter idempotency: breaking when a key becomes required (callers without one are
    /// refused); compatible for `unsupported` → `optional` and a longer key TTL.
    IdempotencyStrengthened,
    /// Collision behaviour, a wider or incomparable key scope, or a TTL no longer declared.
    /// Breaking.
    IdempotencyChanged,
    /// A `supports_*` execution flag turned on. Compatible.
    ExecutionModeAdded,
    /// A `supports_*` execution flag turned off. Breaking.
    ExecutionModeRemoved,
    /// The expected completion mode changed. Breaking.
    ExecutionChanged,
    /// Retries became safer (`unsafe`/`unknown` → `safe_with_idempotency_key` → `safe`).
    /// Compatible.
    RetrySafetyRaised,
    /// Retries became less safe. Breaking.
    RetrySafetyLowered,
    /// `unsafe` ↔ `unknown`. Breaking.
    RetrySafetyChanged,
    /// Any change to the data contract (sensitivity, PII, redaction, residency, retention).
    /// Breaking in both directions: it changes what governance must do with the data.
    DataChanged,
    /// Any change to the credential policy. Breaking.
    CredentialsChanged,
    /// Approval is required where it was not, or needs more approvers, evidence or
    /// separation of duties. Breaking: callers and approvers set up for the old policy stall.
    ApprovalStrengthened,
    /// Approval is no longer required, or needs fewer approvers, less evidence, looser
    /// separation of duties, or auto-approves more (higher delegated limits). Breaking.
    ApprovalWeakened,
    /// Another approval change (selector, rule shape, TTL, delegation, policy version).
    /// Breaking.
    ApprovalChanged,
    /// A service-level field changed: compatible for expectations (`expected_latency_ms`,
    /// `max_queue_delay_ms`, `availability_target`) and a longer timeout; breaking for a
    /// shorter, new or removed timeout and for `async_expected`.
    ServiceLevelChanged,
    /// A transaction mode was added. Compatible, except `rollback_not_supported` (breaking:
    /// it declares that rollback is now impossible).
    TransactionModeAdded,
    /// A transaction mode was removed. Breaking, except `rollback_not_supported` (compatible).
    TransactionModeRemoved,
    /// `requires_plan_before_commit` changed (breaking) or the dry-run fidelity changed
    /// (compatible when raised, breaking when lowered).
    TransactionChanged,
    /// Compensation got stronger (`rollback_not_supported` → `best_effort` → `supported`, a
    /// longer window, a newly declared `supported`/`best_effort` contract). Compatible.
    CompensationStrengthened,
    /// Compensation got weaker (mode down, shorter or new window). Breaking.
    CompensationWeakened,
    /// Another compensation change (target capability, approval, `not_required`, contract
    /// removed). Breaking.
    CompensationChanged,
    /// A capability gained a contract. Breaking: effects and protections are now declared
    /// that governance never reviewed.
    ContractAdded,
    /// A capability lost its contract. Breaking.
    ContractRemoved,
    /// An input property was declared. Compatible when optional, breaking when required.
    InputPropertyAdded,
    /// An input property was removed. Breaking: callers' values are refused or ignored.
    InputPropertyRemoved,
    /// The input schema accepts fewer values (type or enum tightened, bound added, property
    /// made required, ...). Breaking.
    InputSchemaNarrowed,
    /// The input schema accepts more values. Compatible.
    InputSchemaWidened,
    /// The input schema changed both ways or in a way this check does not classify. Breaking.
    InputSchemaChanged,
    /// An output property was declared. Compatible, unless the old output schema was closed
    /// (`additionalProperties: false`) — then breaking: clients validating against it reject
    /// the new property.
    OutputPropertyAdded,
    /// An output property was removed. Breaking: clients relied on it.
    OutputPropertyRemoved,
    /// The output schema admits fewer values (a newly declared output schema included).
    /// Compatible.
    OutputSchemaNarrowed,
    /// The output schema admits more values (a property no longer required, a type or enum
    /// widened, the output schema removed, ...). Breaking.
    OutputSchemaWidened,
    /// The output schema changed both ways or in a way this check does not classify.
    /// Breaking.
    OutputSchemaChanged,
    /// A binding for a new profile was added. Compatible.
    BindingAdded,
    /// A binding was removed. Breaking.
    BindingRemoved,
    /// A binding's metadata or a projected operation name changed. Breaking.
    BindingChanged,
    /// The manifest speaks a new profile. Compatible.
    ProfileAdded,
    /// The manifest no longer speaks a profile. Breaking.
    ProfileRemoved,
    /// A resource was added. Compatible.
    ResourceAdded,
    /// A resource was removed. Breaking.
    ResourceRemoved,
    /// A resource changed. Breaking.
    ResourceChanged,
    /// A channel was added. Compatible.
    ChannelAdded,
    /// A channel was removed. Breaking.
    ChannelRemoved,
    /// A channel changed. Breaking.
    ChannelChanged,
    /// A contract waiver was added. Breaking: a capability now opts out of a rule it met.
    WaiverAdded,
    /// A contract waiver was removed. Compatible.
    WaiverRemoved,
    /// The manifest's agent changed (anything but its display name). Breaking.
    AgentChanged,
    /// `manifest_version` changed. Breaking.
    ManifestVersionChanged,
    /// A free-form section changed (`security`, `governance`, `limits`, `compatibility`,
    /// `extensions`, a capability's `cost` or `auth`), or a difference this check does not
    /// classify. Breaking, except keys added to `compatibility` (new endpoints: compatible).
    Other,
    /// The snapshot file differs from the canonical rendering, but not in meaning (formatting,
    /// order of unordered lists, names or unused schema definitions). Compatible.
    Formatting,
}

impl ChangeKind {
    /// The kind in `snake_case`, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::CapabilityAdded => "capability_added",
            ChangeKind::CapabilityRemoved => "capability_removed",
            ChangeKind::CapabilitiesReordered => "capabilities_reordered",
            ChangeKind::CapabilityKindChanged => "capability_kind_changed",
            ChangeKind::Documentation => "documentation",
            ChangeKind::Metadata => "metadata",
            ChangeKind::StabilityChanged => "stability_changed",
            ChangeKind::RiskRaised => "risk_raised",
            ChangeKind::RiskLowered => "risk_lowered",
            ChangeKind::RiskChanged => "risk_changed",
            ChangeKind::SideEffectAdded => "side_effect_added",
            ChangeKind::SideEffectRemoved => "side_effect_removed",
            ChangeKind::IdempotencyWeakened => "idempotency_weakened",
            ChangeKind::IdempotencyStrengthened => "idempotency_strengthened",
            ChangeKind::IdempotencyChanged => "idempotency_changed",
            ChangeKind::ExecutionModeAdded => "execution_mode_added",
            ChangeKind::ExecutionModeRemoved => "execution_mode_removed",
            ChangeKind::ExecutionChanged => "execution_changed",
            ChangeKind::RetrySafetyRaised => "retry_safety_raised",
            ChangeKind::RetrySafetyLowered => "retry_safety_lowered",
            ChangeKind::RetrySafetyChanged => "retry_safety_changed",
            ChangeKind::DataChanged => "data_changed",
            ChangeKind::CredentialsChanged => "credentials_changed",
            ChangeKind::ApprovalStrengthened => "approval_strengthened",
            ChangeKind::ApprovalWeakened => "approval_weakened",
            ChangeKind::ApprovalChanged => "approval_changed",
            ChangeKind::ServiceLevelChanged => "service_level_changed",
            ChangeKind::TransactionModeAdded => "transaction_mode_added",
            ChangeKind::TransactionModeRemoved => "transaction_mode_removed",
            ChangeKind::TransactionChanged => "transaction_changed",
            ChangeKind::CompensationStrengthened => "compensation_strengthened",
            ChangeKind::CompensationWeakened => "compensation_weakened",
            ChangeKind::CompensationChanged => "compensation_changed",
            ChangeKind::ContractAdded => "contract_added",
            ChangeKind::ContractRemoved => "contract_removed",
            ChangeKind::InputPropertyAdded => "input_property_added",
            ChangeKind::InputPropertyRemoved => "input_property_removed",
            ChangeKind::InputSchemaNarrowed => "input_schema_narrowed",
            ChangeKind::InputSchemaWidened => "input_schema_widened",
            ChangeKind::InputSchemaChanged => "input_schema_changed",
            ChangeKind::OutputPropertyAdded => "output_property_added",
            ChangeKind::OutputPropertyRemoved => "output_property_removed",
            ChangeKind::OutputSchemaNarrowed => "output_schema_narrowed",
            ChangeKind::OutputSchemaWidened => "output_schema_widened",
            ChangeKind::OutputSchemaChanged => "output_schema_changed",
            ChangeKind::BindingAdded => "binding_added",
            ChangeKind::BindingRemoved => "binding_removed",
            ChangeKind::BindingChanged => "binding_changed",
            ChangeKind::ProfileAdded => "profile_added",
            ChangeKind::ProfileRemoved => "profile_removed",
            ChangeKind::ResourceAdded => "resource_added",
            ChangeKind::ResourceRemoved => "resource_removed",
            ChangeKind::ResourceChanged => "resource_changed",
            ChangeKind::ChannelAdded => "channel_added",
            ChangeKind::ChannelRemoved => "channel_removed",
            ChangeKind::ChannelChanged => "channel_changed",
            ChangeKind::WaiverAdded => "waiver_added",
            ChangeKind::WaiverRemoved => "waiver_removed",
            ChangeKind::AgentChanged => "agent_changed",
            ChangeKind::ManifestVersionChanged => "manifest_version_changed",
            ChangeKind::Other => "other",
            ChangeKind::Formatting => "formatting",
        }
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One classified difference between an old and a new manifest.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ManifestChange {
    /// Breaking or compatible.
    pub class: ChangeClass,
    /// What changed.
    pub kind: ChangeKind,
    /// The capability it concerns, if any.
    pub capability: Option<CapabilityId>,
    /// JSON Pointer to the changed value: inside the capability object when
    /// [`capability`](Self::capability) is set (e.g. `/contract/idempotency/requirement`),
    /// else inside the manifest. Empty for the capability (or manifest) as a whole.
    pub path: String,
    /// What changed and why it has its class, for people.
    pub detail: String,
    /// The old value at [`path`](Self::path), if there was one.
    pub before: Option<Value>,
    /// The new value at [`path`](Self::path), if there is one.
    pub after: Option<Value>,
}

impl ManifestChange {
    /// Whether the change is [`ChangeClass::Breaking`].
    pub fn is_breaking(&self) -> bool {
        self.class == ChangeClass::Breaking
    }

    /// The change as a JSON object (`class`, `kind`, `capability`, `path`, `detail`, `before`,
    /// `after`), for reports.
    pub fn to_json(&self) -> Value {
        json!({
            "class": self.class.as_str(),
            "kind": self.kind.as_str(),
            "capability": self.capability,
            "path": self.path,
            "detail": self.detail,
            "before": self.before,
            "after": self.after,
        })
    }

    pub(crate) fn formatting() -> Self {
        ManifestChange {
            class: ChangeClass::Compatible,
            kind: ChangeKind::Formatting,
            capability: None,
            path: String::new(),
            detail: "the snapshot file differs from the canonical rendering, but not in meaning \
                     (formatting, order of unordered lists, names or unused schema definitions)"
                .to_owned(),
            before: None,
            after: None,
        }
    }
}

impl fmt::Display for ManifestChange {
    /// `breaking: capability `cap:x` /contract/side_effects: new side effect `delete``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.class)?;
        match (&self.capability, self.path.is_empty()) {
            (Some(id), true) => write!(f, "capability `{id}`: ")?,
            (Some(id), false) => write!(f, "capability `{id}` {}: ", self.path)?,
            (None, true) => write!(f, "manifest: ")?,
            (None, false) => write!(f, "manifest {}: ", self.path)?,
        }
        f.write_str(&self.detail)
    }
}

/// Every classified difference between two manifests, in manifest order (manifest-level
/// changes, then capability by capability).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotDiff {
    changes: Vec<ManifestChange>,
}

impl SnapshotDiff {
    /// A diff holding exactly these changes.
    pub fn from_changes(changes: Vec<ManifestChange>) -> Self {
        SnapshotDiff { changes }
    }

    /// Every change.
    pub fn changes(&self) -> &[ManifestChange] {
        &self.changes
    }

    /// The changes, by value.
    pub fn into_changes(self) -> Vec<ManifestChange> {
        self.changes
    }

    /// No difference at all.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// How many changes there are.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// At least one change is breaking.
    pub fn is_breaking(&self) -> bool {
        self.changes.iter().any(ManifestChange::is_breaking)
    }

    /// The breaking changes.
    pub fn breaking(&self) -> impl Iterator<Item = &ManifestChange> {
        self.changes.iter().filter(|change| change.is_breaking())
    }

    /// The compatible changes.
    pub fn compatible(&self) -> impl Iterator<Item = &ManifestChange> {
        self.changes.iter().filter(|change| !change.is_breaking())
    }

    /// The changes of kind `kind`.
    pub fn of_kind(&self, kind: ChangeKind) -> impl Iterator<Item = &ManifestChange> {
        self.changes
            .iter()
            .filter(move |change| change.kind == kind)
    }

    /// The diff as a JSON object: `breaking` (bool), `changes` (see
    /// [`ManifestChange::to_json`]).
    pub fn to_json(&self) -> Value {
        json!({
            "breaking": self.is_breaking(),
            "changes": self.changes.iter().map(ManifestChange::to_json).collect::<Vec<_>>(),
        })
    }

    pub(crate) fn push(&mut self, change: ManifestChange) {
        self.changes.push(change);
    }
}

impl<'a> IntoIterator for &'a SnapshotDiff {
    type Item = &'a ManifestChange;
    type IntoIter = std::slice::Iter<'a, ManifestChange>;

    fn into_iter(self) -> Self::IntoIter {
        self.changes.iter()
    }
}

impl fmt::Display for SnapshotDiff {
    /// A summary line, then the breaking changes, then the compatible ones, one per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let breaking = self.breaking().count();
        let compatible = self.changes.len() - breaking;
        if self.changes.is_empty() {
            return f.write_str("no changes");
        }
        write!(
            f,
            "{} change{} ({breaking} breaking, {compatible} compatible)",
            self.changes.len(),
            if self.changes.len() == 1 { "" } else { "s" },
        )?;
        for change in self.breaking().chain(self.compatible()) {
            write!(f, "\n  - {change}")?;
        }
        Ok(())
    }
}

/// Compares `old` with `new` and classifies every difference.
///
/// Lists whose order carries no meaning (profiles, side effects, transaction modes, enum values,
/// `required`) are compared as sets; capabilities are matched by id (a changed id is a removal
/// plus an addition), and a new order of the same capabilities is reported as compatible.
/// Schemas are compared through their `$ref`s, so a renamed or unused definition is no change.
/// Differences without meaning are not reported: the diff of two manifests that differ only
/// in them is empty.
pub fn diff_manifests(old: &Manifest, new: &Manifest) -> SnapshotDiff {
    let mut diff = Diff {
        out: SnapshotDiff::default(),
        capability: None,
    };
    diff.manifest(old, new);
    diff.out
}

/// Whether the host's approval gate applies to a capability's calls or compensations whatever
/// its policy's `required` says (`rules::gates_compensations`), before and after the change: a
/// policy that is not required is still the one such a gate applies.
#[derive(Clone, Copy)]
struct Gated {
    old: bool,
    new: bool,
}

struct Diff {
    out: SnapshotDiff,
    /// The capability whose fields are being compared; `None` for manifest-level fields.
    capability: Option<CapabilityId>,
}

impl Diff {
    fn push(
        &mut self,
        class: ChangeClass,
        kind: ChangeKind,
        path: impl Into<String>,
        detail: impl Into<String>,
        before: Option<Value>,
        after: Option<Value>,
    ) {
        self.out.push(ManifestChange {
            class,
            kind,
            capability: self.capability.clone(),
            path: path.into(),
            detail: detail.into(),
            before,
            after,
        });
    }

    /// Pushes a change whose old and new values are the serialised `before` and `after`.
    fn push_values<T: Serialize>(
        &mut self,
        class: ChangeClass,
        kind: ChangeKind,
        path: &str,
        detail: impl Into<String>,
        before: Option<&T>,
        after: Option<&T>,
    ) {
        let before = before.map(to_value);
        let after = after.map(to_value);
        self.push(class, kind, path, detail, before, after);
    }

    fn manifest(&mut self, old: &Manifest, new: &Manifest) {
        // Destructured exhaustively: a field added to `Manifest` does not compile here until
        // it is classified.
        let Manifest {
            manifest_version,
            agent,
            capabilities,
            profiles,
            resources,
            channels,
            security,
            governance,
            limits,
            compatibility,
            extensions,
        } = old;

        if *manifest_version != new.manifest_version {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ManifestVersionChanged,
                "/manifest_version",
                format!(
                    "manifest version `{manifest_version}` → `{}`",
                    new.manifest_version
                ),
                Some(manifest_version),
                Some(&new.manifest_version),
            );
        }
        self.agent(agent, &new.agent);
        self.profiles(profiles, &new.profiles);
        self.keyed_list(
            &keyed(resources, |resource| Some(resource.id.clone())),
            &keyed(&new.resources, |resource| Some(resource.id.clone())),
            "/resources",
            "resource",
            [
                ChangeKind::ResourceAdded,
                ChangeKind::ResourceRemoved,
                ChangeKind::ResourceChanged,
            ],
        );
        self.keyed_list(
            &keyed(channels, channel_key),
            &keyed(&new.channels, channel_key),
            "/channels",
            "channel",
            [
                ChangeKind::ChannelAdded,
                ChangeKind::ChannelRemoved,
                ChangeKind::ChannelChanged,
            ],
        );
        self.free_form(security.as_ref(), new.security.as_ref(), "/security", false);
        self.governance(governance.as_ref(), new.governance.as_ref(), old, new);
        self.free_form(limits.as_ref(), new.limits.as_ref(), "/limits", false);
        self.free_form(
            compatibility.as_ref(),
            new.compatibility.as_ref(),
            "/compatibility",
            true,
        );
        self.extensions(extensions.as_ref(), new.extensions.as_ref());
        self.capabilities(old, new, capabilities, &new.capabilities);
    }

    fn agent(&mut self, old: &Principal, new: &Principal) {
        if old.display_name != new.display_name {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::Documentation,
                "/agent/display_name",
                "agent display name changed",
                old.display_name.as_ref(),
                new.display_name.as_ref(),
            );
        }
        let identity = |principal: &Principal| {
            let mut value = to_value(principal);
            if let Some(map) = value.as_object_mut() {
                map.remove("display_name");
            }
            value
        };
        let (before, after) = (identity(old), identity(new));
        if before != after {
            self.push(
                ChangeClass::Breaking,
                ChangeKind::AgentChanged,
                "/agent",
                format!(
                    "agent changed: {} → {}",
                    show_value(&before),
                    show_value(&after)
                ),
                Some(before),
                Some(after),
            );
        }
    }

    fn profiles(&mut self, old: &[ProfileId], new: &[ProfileId]) {
        for profile in old.iter().filter(|profile| !new.contains(profile)) {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ProfileRemoved,
                "/profiles",
                format!("profile `{profile}` removed"),
                Some(profile),
                None,
            );
        }
        for profile in new.iter().filter(|profile| !old.contains(profile)) {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::ProfileAdded,
                "/profiles",
                format!("profile `{profile}` added"),
                None,
                Some(profile),
            );
        }
    }

    /// Resources and channels, matched by key: added compatible, removed or changed breaking.
    fn keyed_list(
        &mut self,
        old: &[(String, Value)],
        new: &[(String, Value)],
        path: &str,
        noun: &str,
        [added, removed, changed]: [ChangeKind; 3],
    ) {
        for (key, before) in old {
            let at = format!("{path}/{}", escape(key));
            match new.iter().find(|(new_key, _)| new_key == key) {
                None => self.push(
                    ChangeClass::Breaking,
                    removed,
                    at,
                    format!("{noun} `{key}` removed"),
                    Some(before.clone()),
                    None,
                ),
                Some((_, after)) if after != before => self.push(
                    ChangeClass::Breaking,
                    changed,
                    at,
                    format!("{noun} `{key}` changed"),
                    Some(before.clone()),
                    Some(after.clone()),
                ),
                Some(_) => {}
            }
        }
        for (key, after) in new {
            if !old.iter().any(|(old_key, _)| old_key == key) {
                self.push(
                    ChangeClass::Compatible,
                    added,
                    format!("{path}/{}", escape(key)),
                    format!("{noun} `{key}` added"),
                    None,
                    Some(after.clone()),
                );
            }
        }
    }

    /// `/governance`: contract waivers by (capability, rule); anything else free-form. The
    /// waivers of a capability that was added or removed belong to that change (a new
    /// capability never met the rule its waiver names), so only waivers of capabilities in
    /// both manifests are compared.
    fn governance(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        old_manifest: &Manifest,
        new_manifest: &Manifest,
    ) {
        let in_both = |capability: &str| {
            old_manifest.capability(capability).is_some()
                && new_manifest.capability(capability).is_some()
        };
        let waivers = |governance: Option<&Value>| -> Vec<(String, String, Value)> {
            governance
                .and_then(|value| value.get("contract_waivers"))
                .and_then(Value::as_array)
                .map(|entries| {
                    entries
                        .iter()
                        .map(|entry| {
                            let field = |name: &str| {
                                entry
                                    .get(name)
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned()
                            };
                            (field("capability_id"), field("code"), entry.clone())
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let kept = |mut entries: Vec<(String, String, Value)>| {
            entries.retain(|(capability, _, _)| in_both(capability));
            entries
        };
        let (old_waivers, new_waivers) = (kept(waivers(old)), kept(waivers(new)));
        let at = "/governance/contract_waivers";
        for (capability, code, entry) in &old_waivers {
            match new_waivers
                .iter()
                .find(|(c, k, _)| c == capability && k == code)
            {
                None => self.push(
                    ChangeClass::Compatible,
                    ChangeKind::WaiverRemoved,
                    at,
                    format!("waiver of `{code}` for `{capability}` removed"),
                    Some(entry.clone()),
                    None,
                ),
                Some((_, _, new_entry)) if new_entry != entry => self.push(
                    ChangeClass::Compatible,
                    ChangeKind::Documentation,
                    at,
                    format!("reason of the waiver of `{code}` for `{capability}` changed"),
                    Some(entry.clone()),
                    Some(new_entry.clone()),
                ),
                Some(_) => {}
            }
        }
        for (capability, code, entry) in &new_waivers {
            if !old_waivers
                .iter()
                .any(|(c, k, _)| c == capability && k == code)
            {
                self.push(
                    ChangeClass::Breaking,
                    ChangeKind::WaiverAdded,
                    at,
                    format!(
                        "waiver of `{code}` for `{capability}` added: the capability now opts \
                         out of a rule it met"
                    ),
                    None,
                    Some(entry.clone()),
                );
            }
        }
        let rest = |governance: Option<&Value>| {
            governance.cloned().map(|mut value| {
                if let Some(map) = value.as_object_mut() {
                    map.remove("contract_waivers");
                }
                value
            })
        };
        let (old_rest, new_rest) = (rest(old), rest(new));
        self.free_form(
            old_rest.as_ref().filter(|value| !is_empty_object(value)),
            new_rest.as_ref().filter(|value| !is_empty_object(value)),
            "/governance",
            false,
        );
    }

    /// `/extensions`: the SDK's own tags and examples per capability are metadata
    /// (compatible); anything else is free-form.
    fn extensions(&mut self, old: Option<&Value>, new: Option<&Value>) {
        const POINTER: &str = "/aip_connector/capabilities";
        let metadata = |extensions: Option<&Value>| {
            extensions
                .and_then(|value| value.pointer(POINTER))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (old_metadata, new_metadata) = (metadata(old), metadata(new));
        let mut ids: BTreeSet<&String> = old_metadata.keys().collect();
        ids.extend(new_metadata.keys());
        for id in ids {
            for field in ["tags", "examples"] {
                let before = old_metadata.get(id).and_then(|entry| entry.get(field));
                let after = new_metadata.get(id).and_then(|entry| entry.get(field));
                let empty = |value: Option<&Value>| {
                    value.is_none_or(|value| value.as_array().is_some_and(Vec::is_empty))
                };
                if before != after && !(empty(before) && empty(after)) {
                    self.push(
                        ChangeClass::Compatible,
                        ChangeKind::Metadata,
                        format!("/extensions{POINTER}/{}/{field}", escape(id)),
                        format!("{field} of capability `{id}` changed"),
                        before.cloned(),
                        after.cloned(),
                    );
                }
            }
        }
        let rest = |extensions: Option<&Value>| {
            extensions.cloned().map(|mut value| {
                if let Some(sdk) = value
                    .get_mut("aip_connector")
                    .and_then(Value::as_object_mut)
                {
                    sdk.remove("capabilities");
                    if sdk.is_empty() {
                        value.as_object_mut().map(|map| map.remove("aip_connector"));
                    }
                }
                value
            })
        };
        let (old_rest, new_rest) = (rest(old), rest(new));
        self.free_form(
            old_rest.as_ref().filter(|value| !is_empty_object(value)),
            new_rest.as_ref().filter(|value| !is_empty_object(value)),
            "/extensions",
            false,
        );
    }

    /// A section without a schema: every changed leaf is breaking, except — when
    /// `additions_compatible` — keys that are only added.
    fn free_form(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &str,
        additions_compatible: bool,
    ) {
        let mut leaves = Vec::new();
        json_leaves(old, new, path.to_owned(), &mut leaves);
        for (at, before, after) in leaves {
            let (class, detail) = match (&before, &after) {
                (None, Some(_)) if additions_compatible => {
                    (ChangeClass::Compatible, format!("`{at}` added"))
                }
                (None, Some(_)) => (ChangeClass::Breaking, format!("`{at}` added")),
                (Some(_), None) => (ChangeClass::Breaking, format!("`{at}` removed")),
                _ => (ChangeClass::Breaking, format!("`{at}` changed")),
            };
            self.push(class, ChangeKind::Other, at, detail, before, after);
        }
    }

    fn capabilities(
        &mut self,
        old_manifest: &Manifest,
        new_manifest: &Manifest,
        old: &[Capability],
        new: &[Capability],
    ) {
        let common_in_old: Vec<&CapabilityId> = old
            .iter()
            .map(|capability| &capability.id)
            .filter(|id| new_manifest.capability(id.as_str()).is_some())
            .collect();
        let common_in_new: Vec<&CapabilityId> = new
            .iter()
            .map(|capability| &capability.id)
            .filter(|id| old_manifest.capability(id.as_str()).is_some())
            .collect();
        if common_in_old != common_in_new {
            self.push(
                ChangeClass::Compatible,
                ChangeKind::CapabilitiesReordered,
                "/capabilities",
                "capabilities are listed in another order",
                Some(json!(common_in_old)),
                Some(json!(common_in_new)),
            );
        }
        for capability in old {
            self.capability = Some(capability.id.clone());
            match new_manifest.capability(capability.id.as_str()) {
                Some(new_capability) => {
                    self.capability_fields(capability, new_capability, old_manifest, new_manifest)
                }
                None => self.push(
                    ChangeClass::Breaking,
                    ChangeKind::CapabilityRemoved,
                    "",
                    "capability removed",
                    Some(to_value(capability)),
                    None,
                ),
            }
        }
        for capability in new {
            if old_manifest.capability(capability.id.as_str()).is_none() {
                self.capability = Some(capability.id.clone());
                self.push(
                    ChangeClass::Compatible,
                    ChangeKind::CapabilityAdded,
                    "",
                    "capability added",
                    None,
                    Some(to_value(capability)),
                );
            }
        }
        self.capability = None;
    }

    fn capability_fields(
        &mut self,
        old: &Capability,
        new: &Capability,
        old_manifest: &Manifest,
        new_manifest: &Manifest,
    ) {
        let Capability {
            id: _,
            name,
            kind,
            input_schema,
            output_schema,
            description,
            risk,
            stability,
            cost,
            auth,
            bindings: _,
            requires_human_approval,
            contract,
        } = old;

        if *name != new.name {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::Documentation,
                "/name",
                "name changed (projected operation names come from bindings or the id)",
                Some(name),
                Some(&new.name),
            );
        }
        if *description != new.description {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::Documentation,
                "/description",
                "description changed",
                description.as_ref(),
                new.description.as_ref(),
            );
        }
        if *kind != new.kind {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::CapabilityKindChanged,
                "/kind",
                format!("kind `{}` → `{}`", wire(kind), wire(&new.kind)),
                Some(kind),
                Some(&new.kind),
            );
        }
        self.risk(*risk, new.risk);
        self.stability(*stability, new.stability);
        self.free_form(cost.as_ref(), new.cost.as_ref(), "/cost", false);
        self.free_form(auth.as_ref(), new.auth.as_ref(), "/auth", false);
        self.bindings(old, new, old_manifest, new_manifest);
        self.schema(
            input_schema,
            &new.input_schema,
            "/input_schema",
            Side::Input,
        );
        match (output_schema, &new.output_schema) {
            (Some(old_schema), Some(new_schema)) => {
                self.schema(old_schema, new_schema, "/output_schema", Side::Output)
            }
            (None, Some(new_schema)) => self.push(
                ChangeClass::Compatible,
                ChangeKind::OutputSchemaNarrowed,
                "/output_schema",
                "output schema declared (the output was unconstrained)",
                None,
                Some(new_schema.clone()),
            ),
            (Some(old_schema), None) => self.push(
                ChangeClass::Breaking,
                ChangeKind::OutputSchemaWidened,
                "/output_schema",
                "output schema removed: clients lose every guarantee about the output",
                Some(old_schema.clone()),
                None,
            ),
            (None, None) => {}
        }
        if *requires_human_approval != new.requires_human_approval {
            let (was, is) = (
                requires_human_approval.unwrap_or(false),
                new.requires_human_approval.unwrap_or(false),
            );
            let (kind, detail) = match (was, is) {
                (false, true) => (
                    ChangeKind::ApprovalStrengthened,
                    "human approval now required",
                ),
                (true, false) => (
                    ChangeKind::ApprovalWeakened,
                    "human approval no longer required",
                ),
                _ => (
                    ChangeKind::ApprovalChanged,
                    "`requires_human_approval` changed",
                ),
            };
            self.push_values(
                ChangeClass::Breaking,
                kind,
                "/requires_human_approval",
                detail,
                requires_human_approval.as_ref(),
                new.requires_human_approval.as_ref(),
            );
        }
        match (contract, &new.contract) {
            (Some(old_contract), Some(new_contract)) => self.contract(
                old_contract,
                new_contract,
                // A policy that is not required still applies when the host gates the calls
                // anyway (risk above `medium`, `requires_human_approval`) or the capability's
                // compensations (`compensation(requires_approval)`).
                Gated {
                    old: aip_connector::rules::gates_compensations(old),
                    new: aip_connector::rules::gates_compensations(new),
                },
            ),
            (None, Some(new_contract)) => self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ContractAdded,
                "/contract",
                "contract added: effects and protections declared that were never reviewed",
                None,
                Some(new_contract),
            ),
            (Some(old_contract), None) => self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ContractRemoved,
                "/contract",
                "contract removed",
                Some(old_contract),
                None,
            ),
            (None, None) => {}
        }
    }

    fn risk(
        &mut self,
        old: Option<aip_connector::model::RiskLevel>,
        new: Option<aip_connector::model::RiskLevel>,
    ) {
        let (kind, detail) = match (old, new) {
            (Some(old), Some(new)) if new > old => (
                ChangeKind::RiskRaised,
                format!(
                    "risk raised `{}` → `{}`: hosts and policies may now require approval or refuse",
                    wire(&old),
                    wire(&new)
                ),
            ),
            (Some(old), Some(new)) if new < old => (
                ChangeKind::RiskLowered,
                format!(
                    "risk lowered `{}` → `{}`: approval that followed from the risk may no longer \
                     be asked for",
                    wire(&old),
                    wire(&new)
                ),
            ),
            (None, Some(new)) => (
                ChangeKind::RiskChanged,
                format!("risk `{}` declared", wire(&new)),
            ),
            (Some(old), None) => (
                ChangeKind::RiskChanged,
                format!("risk `{}` no longer declared", wire(&old)),
            ),
            _ => return,
        };
        self.push_values(
            ChangeClass::Breaking,
            kind,
            "/risk",
            detail,
            old.as_ref(),
            new.as_ref(),
        );
    }

    fn stability(&mut self, old: Option<Stability>, new: Option<Stability>) {
        if old == new {
            return;
        }
        let breaking = old == Some(Stability::Stable)
            && !matches!(new, Some(Stability::Stable | Stability::Deprecated));
        let show = |stability: Option<Stability>| {
            stability.map_or_else(|| "none".to_owned(), |stability| wire(&stability))
        };
        let detail = if breaking {
            format!(
                "stability `{}` → `{}`: the stability promise is withdrawn",
                show(old),
                show(new)
            )
        } else {
            format!("stability `{}` → `{}`", show(old), show(new))
        };
        let class = if breaking {
            ChangeClass::Breaking
        } else {
            ChangeClass::Compatible
        };
        self.push_values(
            class,
            ChangeKind::StabilityChanged,
            "/stability",
            detail,
            old.as_ref(),
            new.as_ref(),
        );
    }

    /// Bindings by profile, plus the projected operation name of every profile both manifests
    /// speak (a binding's name keys, else the id).
    fn bindings(
        &mut self,
        old: &Capability,
        new: &Capability,
        old_manifest: &Manifest,
        new_manifest: &Manifest,
    ) {
        for binding in &old.bindings {
            let at = format!("/bindings/{}", escape(binding.profile.as_str()));
            match new.binding(binding.profile.as_str()) {
                None => self.push_values(
                    ChangeClass::Breaking,
                    ChangeKind::BindingRemoved,
                    &at,
                    format!("binding for profile `{}` removed", binding.profile),
                    Some(binding),
                    None,
                ),
                Some(new_binding) => {
                    let strip = |metadata: &Map<String, Value>| {
                        let mut metadata = metadata.clone();
                        for key in aip_connector::model::Binding::NAME_KEYS {
                            metadata.remove(key);
                        }
                        metadata
                    };
                    if strip(&binding.metadata) != strip(&new_binding.metadata) {
                        self.push_values(
                            ChangeClass::Breaking,
                            ChangeKind::BindingChanged,
                            &at,
                            format!("binding for profile `{}` changed", binding.profile),
                            Some(binding),
                            Some(new_binding),
                        );
                    }
                }
            }
        }
        for binding in &new.bindings {
            if old.binding(binding.profile.as_str()).is_none() {
                self.push_values(
                    ChangeClass::Compatible,
                    ChangeKind::BindingAdded,
                    &format!("/bindings/{}", escape(binding.profile.as_str())),
                    format!("binding for profile `{}` added", binding.profile),
                    None,
                    Some(binding),
                );
            }
        }
        let projected = |capability: &Capability, profile: &ProfileId| {
            let raw = capability
                .binding(profile.as_str())
                .and_then(|binding| binding.projected_name())
                .unwrap_or(capability.id.as_str());
            stable_profile_name(raw)
        };
        for profile in old_manifest
            .profiles
            .iter()
            .filter(|p| new_manifest.profiles.contains(p))
        {
            let (before, after) = (projected(old, profile), projected(new, profile));
            if before != after {
                self.push(
                    ChangeClass::Breaking,
                    ChangeKind::BindingChanged,
                    format!("/bindings/{}", escape(profile.as_str())),
                    format!(
                        "operation name under profile `{profile}` changed: `{before}` → `{after}`"
                    ),
                    Some(Value::String(before)),
                    Some(Value::String(after)),
                );
            }
        }
    }

    fn schema(&mut self, old: &Value, new: &Value, base: &str, side: Side) {
        let findings = schema::compare_schemas(old, new, side);
        let classified = !findings.is_empty();
        for finding in findings {
            let (class, kind) = classify_schema_finding(side, finding.effect, finding.property);
            let what = match side {
                Side::Input => "input",
                Side::Output => "output",
            };
            self.push(
                class,
                kind,
                format!("{base}{}", finding.path),
                format!("{what}: {}", finding.detail),
                finding.before,
                finding.after,
            );
        }
        if !classified && schema::differ_semantically(old, new) {
            let kind = match side {
                Side::Input => ChangeKind::InputSchemaChanged,
                Side::Output => ChangeKind::OutputSchemaChanged,
            };
            self.push(
                ChangeClass::Breaking,
                kind,
                base,
                "schema changed in a way this check does not classify",
                Some(old.clone()),
                Some(new.clone()),
            );
        }
    }

    /// `gated`: whether the host's approval gate applies to the old and the new capability's
    /// calls or compensations whatever its policy's `required` says.
    fn contract(&mut self, old: &CapabilityContract, new: &CapabilityContract, gated: Gated) {
        let CapabilityContract {
            side_effects,
            idempotency,
            execution,
            data,
            credentials,
            approval,
            sla,
            transaction,
            compensation,
        } = old;
        self.side_effects(side_effects, &new.side_effects);
        self.idempotency(idempotency, &new.idempotency);
        self.execution(execution, &new.execution);
        self.data(data, &new.data);
        self.credentials(credentials.as_ref(), new.credentials.as_ref());
        self.approval(approval.as_ref(), new.approval.as_ref(), gated);
        self.service_level(sla.as_ref(), new.sla.as_ref());
        self.transaction(transaction.as_ref(), new.transaction.as_ref());
        self.compensation(compensation.as_ref(), new.compensation.as_ref());
    }

    fn side_effects(&mut self, old: &[SideEffect], new: &[SideEffect]) {
        let at = "/contract/side_effects";
        for effect in new.iter().filter(|effect| !old.contains(effect)) {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::SideEffectAdded,
                at,
                format!("new side effect `{}`", wire(effect)),
                None,
                Some(effect),
            );
        }
        for effect in old.iter().filter(|effect| !new.contains(effect)) {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::SideEffectRemoved,
                at,
                format!("side effect `{}` no longer declared", wire(effect)),
                Some(effect),
                None,
            );
        }
    }

    fn idempotency(&mut self, old: &IdempotencyContract, new: &IdempotencyContract) {
        let IdempotencyContract {
            requirement,
            collision_behavior,
            key_scope,
            ttl_ms,
        } = old;
        let rank = |requirement: IdempotencyRequirement| match requirement {
            IdempotencyRequirement::Unsupported => 0,
            IdempotencyRequirement::Optional => 1,
            IdempotencyRequirement::Required => 2,
        };
        if *requirement != new.requirement {
            let change = format!("`{}` → `{}`", wire(requirement), wire(&new.requirement));
            let (class, kind, detail) = if rank(new.requirement) < rank(*requirement) {
                (
                    ChangeClass::Breaking,
                    ChangeKind::IdempotencyWeakened,
                    format!(
                        "idempotency requirement weakened {change}: retries may now duplicate effects"
                    ),
                )
            } else if new.requirement == IdempotencyRequirement::Required {
                (
                    ChangeClass::Breaking,
                    ChangeKind::IdempotencyStrengthened,
                    format!(
                        "idempotency key now required {change}: callers that send none are refused"
                    ),
                )
            } else {
                (
                    ChangeClass::Compatible,
                    ChangeKind::IdempotencyStrengthened,
                    format!("idempotency requirement strengthened {change}"),
                )
            };
            self.push_values(
                class,
                kind,
                "/contract/idempotency/requirement",
                detail,
                Some(requirement),
                Some(&new.requirement),
            );
        }
        if *collision_behavior != new.collision_behavior {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::IdempotencyChanged,
                "/contract/idempotency/collision_behavior",
                format!(
                    "collision behaviour `{}` → `{}`: duplicates are answered differently",
                    wire(collision_behavior),
                    wire(&new.collision_behavior)
                ),
                Some(collision_behavior),
                Some(&new.collision_behavior),
            );
        }
        if *key_scope != new.key_scope {
            // Action ⊂ principal ⊂ tenant ⊂ capability; an external account does not nest.
            let width = |scope: IdempotencyKeyScope| match scope {
                IdempotencyKeyScope::Action => Some(0),
                IdempotencyKeyScope::Principal => Some(1),
                IdempotencyKeyScope::Tenant => Some(2),
                IdempotencyKeyScope::Capability => Some(3),
                IdempotencyKeyScope::ExternalAccount => None,
            };
            let change = format!("`{}` → `{}`", wire(key_scope), wire(&new.key_scope));
            let (kind, detail) = match (width(*key_scope), width(new.key_scope)) {
                (Some(old_width), Some(new_width)) if new_width < old_width => (
                    ChangeKind::IdempotencyWeakened,
                    format!(
                        "idempotency key scope narrowed {change}: fewer duplicates are recognised"
                    ),
                ),
                (Some(_), Some(_)) => (
                    ChangeKind::IdempotencyChanged,
                    format!(
                        "idempotency key scope widened {change}: keys of different callers now collide"
                    ),
                ),
                _ => (
                    ChangeKind::IdempotencyChanged,
                    format!("idempotency key scope changed {change}"),
                ),
            };
            self.push_values(
                ChangeClass::Breaking,
                kind,
                "/contract/idempotency/key_scope",
                detail,
                Some(key_scope),
                Some(&new.key_scope),
            );
        }
        if *ttl_ms != new.ttl_ms {
            let (class, kind, detail) = match (*ttl_ms, new.ttl_ms) {
                (Some(old), Some(new)) if new > old => (
                    ChangeClass::Compatible,
                    ChangeKind::IdempotencyStrengthened,
                    format!("idempotency keys kept longer: {old} ms → {new} ms"),
                ),
                (Some(old), Some(new)) => (
                    ChangeClass::Breaking,
                    ChangeKind::IdempotencyWeakened,
                    format!(
                        "idempotency keys kept shorter: {old} ms → {new} ms; a late retry duplicates"
                    ),
                ),
                (None, Some(new)) => (
                    ChangeClass::Breaking,
                    ChangeKind::IdempotencyWeakened,
                    format!("idempotency keys now expire after {new} ms"),
                ),
                (Some(old), None) => (
                    ChangeClass::Breaking,
                    ChangeKind::IdempotencyChanged,
                    format!("idempotency key retention ({old} ms) no longer declared"),
                ),
                (None, None) => return,
            };
            self.push_values(
                class,
                kind,
                "/contract/idempotency/ttl_ms",
                detail,
                ttl_ms.as_ref(),
                new.ttl_ms.as_ref(),
            );
        }
    }

    fn execution(&mut self, old: &ExecutionContract, new: &ExecutionContract) {
        let ExecutionContract {
            supports_sync,
            supports_async,
            supports_streaming,
            supports_cancel,
            supports_retry,
            expected_completion,
            retry_safety,
        } = old;
        let flags = [
            ("supports_sync", *supports_sync, new.supports_sync),
            ("supports_async", *supports_async, new.supports_async),
            (
                "supports_streaming",
                *supports_streaming,
                new.supports_streaming,
            ),
            ("supports_cancel", *supports_cancel, new.supports_cancel),
            ("supports_retry", *supports_retry, new.supports_retry),
        ];
        for (name, was, is) in flags {
            if was == is {
                continue;
            }
            let (class, kind, detail) = if is {
                (
                    ChangeClass::Compatible,
                    ChangeKind::ExecutionModeAdded,
                    format!("`{name}` turned on"),
                )
            } else {
                (
                    ChangeClass::Breaking,
                    ChangeKind::ExecutionModeRemoved,
                    format!("`{name}` turned off: callers using it are refused"),
                )
            };
            self.push(
                class,
                kind,
                format!("/contract/execution/{name}"),
                detail,
                Some(json!(was)),
                Some(json!(is)),
            );
        }
        if *expected_completion != new.expected_completion {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ExecutionChanged,
                "/contract/execution/expected_completion",
                format!(
                    "expected completion `{}` → `{}`",
                    wire(expected_completion),
                    wire(&new.expected_completion)
                ),
                Some(expected_completion),
                Some(&new.expected_completion),
            );
        }
        if *retry_safety != new.retry_safety {
            let rank = |safety: RetrySafety| match safety {
                RetrySafety::Unsafe | RetrySafety::Unknown => 0,
                RetrySafety::SafeWithIdempotencyKey => 1,
                RetrySafety::Safe => 2,
            };
            let change = format!("`{}` → `{}`", wire(retry_safety), wire(&new.retry_safety));
            let (class, kind, detail) = match rank(new.retry_safety).cmp(&rank(*retry_safety)) {
                std::cmp::Ordering::Greater => (
                    ChangeClass::Compatible,
                    ChangeKind::RetrySafetyRaised,
                    format!("retry safety raised {change}"),
                ),
                std::cmp::Ordering::Less => (
                    ChangeClass::Breaking,
                    ChangeKind::RetrySafetyLowered,
                    format!(
                        "retry safety lowered {change}: callers' retries may now duplicate effects"
                    ),
                ),
                std::cmp::Ordering::Equal => (
                    ChangeClass::Breaking,
                    ChangeKind::RetrySafetyChanged,
                    format!("retry safety changed {change}"),
                ),
            };
            self.push_values(
                class,
                kind,
                "/contract/execution/retry_safety",
                detail,
                Some(retry_safety),
                Some(&new.retry_safety),
            );
        }
    }

    fn data(&mut self, old: &DataContract, new: &DataContract) {
        let DataContract {
            sensitivity,
            contains_pii,
            redaction_required,
            residency,
            retention,
        } = old;
        let fields = [
            (
                "sensitivity",
                to_value(sensitivity),
                to_value(&new.sensitivity),
            ),
            ("contains_pii", json!(contains_pii), json!(new.contains_pii)),
            (
                "redaction_required",
                json!(redaction_required),
                json!(new.redaction_required),
            ),
            ("residency", to_value(residency), to_value(&new.residency)),
            ("retention", to_value(retention), to_value(&new.retention)),
        ];
        for (name, before, after) in fields {
            if before != after {
                self.push(
                    ChangeClass::Breaking,
                    ChangeKind::DataChanged,
                    format!("/contract/data/{name}"),
                    format!(
                        "data `{name}` changed: {} → {}: governance must handle the data differently",
                        show_value(&before),
                        show_value(&after)
                    ),
                    Some(before),
                    Some(after),
                );
            }
        }
    }

    fn credentials(&mut self, old: Option<&CredentialPolicy>, new: Option<&CredentialPolicy>) {
        if old == new {
            return;
        }
        let detail = match (old, new) {
            (None, Some(policy)) if policy.required => "a credential is now required".to_owned(),
            (Some(policy), None) if policy.required => "credential policy removed".to_owned(),
            (Some(old), Some(new)) if old.required != new.required => {
                format!("credential `required` {} → {}", old.required, new.required)
            }
            _ => "credential policy changed (issuers, scopes or refresh)".to_owned(),
        };
        self.push_values(
            ChangeClass::Breaking,
            ChangeKind::CredentialsChanged,
            "/contract/credentials",
            detail,
            old,
            new,
        );
    }

    /// `gated`: the host applies a policy even when it is not required (see
    /// [`contract`](Self::contract)), so the fields of such a policy still matter.
    fn approval(
        &mut self,
        old: Option<&ApprovalPolicy>,
        new: Option<&ApprovalPolicy>,
        gated: Gated,
    ) {
        // An absent policy reads as the default one: approval not required.
        let default = ApprovalPolicy::default();
        let (added, removed) = (old.is_none(), new.is_none());
        let (old, new) = (old.unwrap_or(&default), new.unwrap_or(&default));
        let ApprovalPolicy {
            required,
            reason,
            approver_selector,
            ttl_ms,
            evidence_requirements,
            delegated_authority,
            rule,
            minimum_distinct_principals,
            separation_of_duties,
            policy_version,
        } = old;
        let base = "/contract/approval";
        // A policy that is not required, declared or removed on a capability the host gates
        // anyway: the absent side is the host's own default policy (docs/host-runtime.md), not
        // these serde defaults, so comparing fields would report changes nobody meets (a
        // review). The replacement is reported as such.
        if !*required && !new.required && added != removed {
            let (class, detail) = match (gated.old, gated.new, added) {
                (true, true, true) => (
                    ChangeClass::Breaking,
                    "approval policy declared (not required): the host gates these calls or their compensations anyway (risk above `medium`, `requires_human_approval` or `compensation(requires_approval)`), under this policy from now on instead of its default policy (docs/host-runtime.md)",
                ),
                (true, true, false) => (
                    ChangeClass::Breaking,
                    "approval policy removed (it was not required): the host still gates these calls or their compensations (risk above `medium`, `requires_human_approval` or `compensation(requires_approval)`), now under its default policy (docs/host-runtime.md), not the one declared before",
                ),
                (false, false, true) => (
                    ChangeClass::Compatible,
                    "approval policy declared (not required): nothing gates these calls or their compensations, so no host applies it",
                ),
                (false, false, false) => (
                    ChangeClass::Compatible,
                    "approval policy removed (it was not required, and nothing gated these calls or their compensations: no host applied it)",
                ),
                // The gate itself changed (risk, `requires_human_approval`,
                // `compensation(requires_approval)`), and is reported where it changed: on one
                // side the host applied its default policy, on the other no policy applies.
                _ => return,
            };
            self.push_values(
                class,
                ChangeKind::ApprovalChanged,
                base,
                detail,
                (!added).then_some(old),
                (!removed).then_some(new),
            );
            return;
        }
        if *required != new.required {
            let (kind, detail) = if new.required {
                (
                    ChangeKind::ApprovalStrengthened,
                    "approval now required: callers wait for a human decision",
                )
            } else if gated.new && removed {
                (
                    ChangeKind::ApprovalWeakened,
                    "approval policy removed: the host still gates these calls or their compensations (risk above `medium`, `requires_human_approval` or `compensation(requires_approval)`), now under its default policy (docs/host-runtime.md), not the one declared before",
                )
            } else if gated.new {
                (
                    ChangeKind::ApprovalWeakened,
                    "approval no longer required by the policy, but the host still gates these calls or their compensations (risk above `medium`, `requires_human_approval` or `compensation(requires_approval)`) and applies the policy compared below",
                )
            } else {
                (ChangeKind::ApprovalWeakened, "approval no longer required")
            };
            self.push(
                ChangeClass::Breaking,
                kind,
                format!("{base}/required"),
                detail,
                Some(json!(required)),
                Some(json!(new.required)),
            );
            // Who approves, with what evidence and quorum, no longer matters once nobody has
            // to: a removed section compared field by field with the defaults it reads as
            // (found by an author trial: `approver_selector changed: role → tenant_policy`)
            // would describe a policy no caller waits for. Unless the host still gates the
            // capability's calls or compensations and applies the declared policy there (a
            // review); a removed one is replaced by the host's own default, which these
            // defaults are not, so nothing more is listed then. The same holds the other way:
            // a newly required policy is new to its callers, all of it, unless the old one was
            // declared and applied by a gate (then its field changes are what callers meet).
            if !new.required && (!gated.new || removed) {
                return;
            }
            if new.required && (!gated.old || added) {
                return;
            }
        }
        if *reason != new.reason {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::Documentation,
                &format!("{base}/reason"),
                "approval reason changed",
                reason.as_ref(),
                new.reason.as_ref(),
            );
        }
        if *minimum_distinct_principals != new.minimum_distinct_principals {
            let (kind, word) = if new.minimum_distinct_principals < *minimum_distinct_principals {
                (ChangeKind::ApprovalWeakened, "fewer")
            } else {
                (ChangeKind::ApprovalStrengthened, "more")
            };
            self.push(
                ChangeClass::Breaking,
                kind,
                format!("{base}/minimum_distinct_principals"),
                format!(
                    "{word} distinct approvers required: {minimum_distinct_principals} → {}",
                    new.minimum_distinct_principals
                ),
                Some(json!(minimum_distinct_principals)),
                Some(json!(new.minimum_distinct_principals)),
            );
        }
        let evidence_at = format!("{base}/evidence_requirements");
        for evidence in evidence_requirements
            .iter()
            .filter(|e| !new.evidence_requirements.contains(e))
        {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ApprovalWeakened,
                &evidence_at,
                format!("approval evidence `{}` no longer required", wire(evidence)),
                Some(evidence),
                None,
            );
        }
        for evidence in new
            .evidence_requirements
            .iter()
            .filter(|e| !evidence_requirements.contains(e))
        {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ApprovalStrengthened,
                &evidence_at,
                format!("approval evidence `{}` now required", wire(evidence)),
                None,
                Some(evidence),
            );
        }
        let duties = [
            // (flag, old, new, true means stricter)
            (
                "requester_must_differ",
                separation_of_duties.requester_must_differ,
                new.separation_of_duties.requester_must_differ,
                true,
            ),
            (
                "operator_must_differ",
                separation_of_duties.operator_must_differ,
                new.separation_of_duties.operator_must_differ,
                true,
            ),
            (
                "allow_self_approval",
                separation_of_duties.allow_self_approval,
                new.separation_of_duties.allow_self_approval,
                false,
            ),
        ];
        for (name, was, is, true_is_stricter) in duties {
            if was != is {
                let (kind, word) = if is == true_is_stricter {
                    (ChangeKind::ApprovalStrengthened, "tightened")
                } else {
                    (ChangeKind::ApprovalWeakened, "relaxed")
                };
                self.push(
                    ChangeClass::Breaking,
                    kind,
                    format!("{base}/separation_of_duties/{name}"),
                    format!("separation of duties {word}: `{name}` {was} → {is}"),
                    Some(json!(was)),
                    Some(json!(is)),
                );
            }
        }
        match (rule, &new.rule) {
            (Some(old_rule), Some(new_rule)) => {
                self.approval_rule(old_rule, new_rule, &format!("{base}/rule"))
            }
            (None, None) => {}
            (before, after) => self.push_values(
                ChangeClass::Breaking,
                ChangeKind::ApprovalChanged,
                &format!("{base}/rule"),
                if after.is_some() {
                    "approval rule added"
                } else {
                    "approval rule removed"
                },
                before.as_ref(),
                after.as_ref(),
            ),
        }
        let others = [
            (
                "approver_selector",
                to_value(approver_selector),
                to_value(&new.approver_selector),
            ),
            ("ttl_ms", to_value(ttl_ms), to_value(&new.ttl_ms)),
            (
                "delegated_authority",
                to_value(delegated_authority),
                to_value(&new.delegated_authority),
            ),
            (
                "policy_version",
                to_value(policy_version),
                to_value(&new.policy_version),
            ),
        ];
        for (name, before, after) in others {
            if before != after {
                self.push(
                    ChangeClass::Breaking,
                    ChangeKind::ApprovalChanged,
                    format!("{base}/{name}"),
                    format!(
                        "approval `{name}` changed: {} → {}",
                        show_value(&before),
                        show_value(&after)
                    ),
                    Some(before),
                    Some(after),
                );
            }
        }
    }

    /// Compares two approval rules node by node; any structural difference is a change.
    fn approval_rule(&mut self, old: &ApprovalRule, new: &ApprovalRule, path: &str) {
        if old == new {
            return;
        }
        let mut verdicts: Vec<(ChangeKind, String, String)> = Vec::new();
        match (old, new) {
            (
                ApprovalRule::All {
                    rules: old_rules,
                    allow_decision_reuse: old_reuse,
                },
                ApprovalRule::All {
                    rules: new_rules,
                    allow_decision_reuse: new_reuse,
                },
            ) if old_rules.len() == new_rules.len() => {
                if old_reuse != new_reuse {
                    let kind = if *new_reuse {
                        ChangeKind::ApprovalWeakened
                    } else {
                        ChangeKind::ApprovalStrengthened
                    };
                    verdicts.push((
                        kind,
                        format!("{path}/allow_decision_reuse"),
                        format!("`allow_decision_reuse` {old_reuse} → {new_reuse}"),
                    ));
                }
                for (index, (old_child, new_child)) in old_rules.iter().zip(new_rules).enumerate() {
                    self.approval_rule(old_child, new_child, &format!("{path}/rules/{index}"));
                }
            }
            (ApprovalRule::Any { rules: old_rules }, ApprovalRule::Any { rules: new_rules })
                if old_rules.len() == new_rules.len() =>
            {
                for (index, (old_child, new_child)) in old_rules.iter().zip(new_rules).enumerate() {
                    self.approval_rule(old_child, new_child, &format!("{path}/rules/{index}"));
                }
            }
            (
                ApprovalRule::Quorum {
                    required: old_required,
                    rules: old_rules,
                    distinct_principals: old_distinct,
                },
                ApprovalRule::Quorum {
                    required: new_required,
                    rules: new_rules,
                    distinct_principals: new_distinct,
                },
            ) if old_rules.len() == new_rules.len() => {
                if old_required != new_required {
                    let kind = if new_required < old_required {
                        ChangeKind::ApprovalWeakened
                    } else {
                        ChangeKind::ApprovalStrengthened
                    };
                    verdicts.push((
                        kind,
                        format!("{path}/required"),
                        format!("quorum {old_required} → {new_required}"),
                    ));
                }
                if old_distinct != new_distinct {
                    let kind = if *new_distinct {
                        ChangeKind::ApprovalStrengthened
                    } else {
                        ChangeKind::ApprovalWeakened
                    };
                    verdicts.push((
                        kind,
                        format!("{path}/distinct_principals"),
                        format!("quorum `distinct_principals` {old_distinct} → {new_distinct}"),
                    ));
                }
                for (index, (old_child, new_child)) in old_rules.iter().zip(new_rules).enumerate() {
                    self.approval_rule(old_child, new_child, &format!("{path}/rules/{index}"));
                }
            }
            (
                ApprovalRule::DelegatedAuthority {
                    scope: old_scope,
                    max_risk: old_risk,
                    max_value: old_value,
                },
                ApprovalRule::DelegatedAuthority {
                    scope: new_scope,
                    max_risk: new_risk,
                    max_value: new_value,
                },
            ) if old_scope == new_scope => {
                // `None` is "no limit": the widest delegation.
                if old_value != new_value {
                    let higher = match (old_value, new_value) {
                        (_, None) => true,
                        (None, Some(_)) => false,
                        (Some(old), Some(new)) => new > old,
                    };
                    let kind = if higher {
                        ChangeKind::ApprovalWeakened
                    } else {
                        ChangeKind::ApprovalStrengthened
                    };
                    let word = if higher {
                        "higher auto-approval limit"
                    } else {
                        "lower auto-approval limit"
                    };
                    verdicts.push((
                        kind,
                        format!("{path}/max_value"),
                        format!("{word}: `max_value` {old_value:?} → {new_value:?}"),
                    ));
                }
                if old_risk != new_risk {
                    let higher = match (old_risk, new_risk) {
                        (_, None) => true,
                        (None, Some(_)) => false,
                        (Some(old), Some(new)) => new > old,
                    };
                    let kind = if higher {
                        ChangeKind::ApprovalWeakened
                    } else {
                        ChangeKind::ApprovalStrengthened
                    };
                    let word = if higher {
                        "higher auto-approval risk"
                    } else {
                        "lower auto-approval risk"
                    };
                    verdicts.push((
                        kind,
                        format!("{path}/max_risk"),
                        format!(
                            "{word}: `max_risk` {} → {}",
                            to_value(old_risk),
                            to_value(new_risk)
                        ),
                    ));
                }
            }
            _ => verdicts.push((
                ChangeKind::ApprovalChanged,
                path.to_owned(),
                "approval rule changed".to_owned(),
            )),
        }
        for (kind, at, detail) in verdicts {
            let (before, after) = if at == path {
                (Some(to_value(old)), Some(to_value(new)))
            } else {
                (None, None)
            };
            self.push(ChangeClass::Breaking, kind, at, detail, before, after);
        }
    }

    fn service_level(
        &mut self,
        old: Option<&ServiceLevelContract>,
        new: Option<&ServiceLevelContract>,
    ) {
        let default = ServiceLevelContract::default();
        let (old, new) = (old.unwrap_or(&default), new.unwrap_or(&default));
        let ServiceLevelContract {
            expected_latency_ms,
            timeout_ms,
            async_expected,
            max_queue_delay_ms,
            availability_target,
        } = old;
        let base = "/contract/sla";
        let expectations = [
            (
                "expected_latency_ms",
                to_value(expected_latency_ms),
                to_value(&new.expected_latency_ms),
            ),
            (
                "max_queue_delay_ms",
                to_value(max_queue_delay_ms),
                to_value(&new.max_queue_delay_ms),
            ),
            (
                "availability_target",
                to_value(availability_target),
                to_value(&new.availability_target),
            ),
        ];
        for (name, before, after) in expectations {
            if before != after {
                self.push(
                    ChangeClass::Compatible,
                    ChangeKind::ServiceLevelChanged,
                    format!("{base}/{name}"),
                    format!(
                        "`{name}` {} → {} (an expectation, not a guarantee)",
                        show_value(&before),
                        show_value(&after)
                    ),
                    Some(before),
                    Some(after),
                );
            }
        }
        if *timeout_ms != new.timeout_ms {
            let (class, detail) = match (*timeout_ms, new.timeout_ms) {
                (Some(old), Some(new)) if new > old => (
                    ChangeClass::Compatible,
                    format!("timeout raised: {old} ms → {new} ms"),
                ),
                (Some(old), Some(new)) => (
                    ChangeClass::Breaking,
                    format!("timeout lowered: {old} ms → {new} ms; slower calls now time out"),
                ),
                (None, Some(new)) => (
                    ChangeClass::Breaking,
                    format!("timeout of {new} ms declared"),
                ),
                (Some(old), None) => (
                    ChangeClass::Breaking,
                    format!("timeout of {old} ms no longer declared"),
                ),
                (None, None) => unreachable!("the timeouts differ"),
            };
            self.push_values(
                class,
                ChangeKind::ServiceLevelChanged,
                &format!("{base}/timeout_ms"),
                detail,
                timeout_ms.as_ref(),
                new.timeout_ms.as_ref(),
            );
        }
        if *async_expected != new.async_expected {
            self.push(
                ChangeClass::Breaking,
                ChangeKind::ServiceLevelChanged,
                format!("{base}/async_expected"),
                format!("`async_expected` {async_expected} → {}", new.async_expected),
                Some(json!(async_expected)),
                Some(json!(new.async_expected)),
            );
        }
    }

    fn transaction(
        &mut self,
        old: Option<&TransactionContract>,
        new: Option<&TransactionContract>,
    ) {
        let base = "/contract/transaction";
        let modes = |contract: Option<&TransactionContract>| {
            contract
                .map(|contract| contract.supported_modes.clone())
                .unwrap_or_default()
        };
        let (old_modes, new_modes) = (modes(old), modes(new));
        let at = format!("{base}/supported_modes");
        for mode in old_modes.iter().filter(|mode| !new_modes.contains(mode)) {
            let (class, detail) = if *mode == TransactionMode::RollbackNotSupported {
                (
                    ChangeClass::Compatible,
                    "`rollback_not_supported` no longer declared".to_owned(),
                )
            } else {
                (
                    ChangeClass::Breaking,
                    format!("transaction mode `{}` removed", wire(mode)),
                )
            };
            self.push_values(
                class,
                ChangeKind::TransactionModeRemoved,
                &at,
                detail,
                Some(mode),
                None,
            );
        }
        for mode in new_modes.iter().filter(|mode| !old_modes.contains(mode)) {
            let (class, detail) = if *mode == TransactionMode::RollbackNotSupported {
                (
                    ChangeClass::Breaking,
                    "`rollback_not_supported` declared: rollback is no longer possible".to_owned(),
                )
            } else {
                (
                    ChangeClass::Compatible,
                    format!("transaction mode `{}` added", wire(mode)),
                )
            };
            self.push_values(
                class,
                ChangeKind::TransactionModeAdded,
                &at,
                detail,
                None,
                Some(mode),
            );
        }
        let (Some(old), Some(new)) = (old, new) else {
            return;
        };
        let TransactionContract {
            supported_modes: _,
            requires_plan_before_commit,
            dry_run_fidelity,
        } = old;
        if *requires_plan_before_commit != new.requires_plan_before_commit {
            let detail = if new.requires_plan_before_commit {
                "a plan is now required before commit: direct commits are refused"
            } else {
                "a plan is no longer required before commit: commits skip the plan review"
            };
            self.push(
                ChangeClass::Breaking,
                ChangeKind::TransactionChanged,
                format!("{base}/requires_plan_before_commit"),
                detail,
                Some(json!(requires_plan_before_commit)),
                Some(json!(new.requires_plan_before_commit)),
            );
        }
        if *dry_run_fidelity != new.dry_run_fidelity {
            let rank = |fidelity: DryRunFidelity| match fidelity {
                DryRunFidelity::SchemaOnly => 0,
                DryRunFidelity::PolicyAndSchema => 1,
                DryRunFidelity::DownstreamValidation => 2,
                DryRunFidelity::FullSimulation => 3,
            };
            let raised = rank(new.dry_run_fidelity) > rank(*dry_run_fidelity);
            let (class, word) = if raised {
                (ChangeClass::Compatible, "raised")
            } else {
                (ChangeClass::Breaking, "lowered")
            };
            self.push_values(
                class,
                ChangeKind::TransactionChanged,
                &format!("{base}/dry_run_fidelity"),
                format!(
                    "dry-run fidelity {word}: `{}` → `{}`",
                    wire(dry_run_fidelity),
                    wire(&new.dry_run_fidelity)
                ),
                Some(dry_run_fidelity),
                Some(&new.dry_run_fidelity),
            );
        }
    }

    fn compensation(
        &mut self,
        old: Option<&CompensationContract>,
        new: Option<&CompensationContract>,
    ) {
        let base = "/contract/compensation";
        let rank = |mode: CompensationMode| match mode {
            CompensationMode::RollbackNotSupported => Some(0),
            CompensationMode::BestEffort => Some(1),
            CompensationMode::Supported => Some(2),
            CompensationMode::NotRequired => None,
        };
        let (old, new) = match (old, new) {
            (Some(old), Some(new)) => (old, new),
            (None, None) => return,
            (None, Some(new)) => {
                let (class, kind) = if rank(new.mode).is_some_and(|rank| rank > 0) {
                    (
                        ChangeClass::Compatible,
                        ChangeKind::CompensationStrengthened,
                    )
                } else {
                    (ChangeClass::Breaking, ChangeKind::CompensationChanged)
                };
                self.push_values(
                    class,
                    kind,
                    base,
                    format!("compensation `{}` declared", wire(&new.mode)),
                    None,
                    Some(new),
                );
                return;
            }
            (Some(old), None) => {
                self.push_values(
                    ChangeClass::Breaking,
                    ChangeKind::CompensationChanged,
                    base,
                    "compensation contract removed",
                    Some(old),
                    None,
                );
                return;
            }
        };
        let CompensationContract {
            mode,
            compensation_capability_id,
            compensation_window_ms,
            requires_approval,
        } = old;
        if *mode != new.mode {
            let change = format!("`{}` → `{}`", wire(mode), wire(&new.mode));
            let (class, kind, detail) = match (rank(*mode), rank(new.mode)) {
                (Some(old_rank), Some(new_rank)) if new_rank > old_rank => (
                    ChangeClass::Compatible,
                    ChangeKind::CompensationStrengthened,
                    format!("compensation strengthened {change}"),
                ),
                (Some(_), Some(_)) => (
                    ChangeClass::Breaking,
                    ChangeKind::CompensationWeakened,
                    format!("compensation weakened {change}"),
                ),
                _ => (
                    ChangeClass::Breaking,
                    ChangeKind::CompensationChanged,
                    format!("compensation mode changed {change}"),
                ),
            };
            self.push_values(
                class,
                kind,
                &format!("{base}/mode"),
                detail,
                Some(mode),
                Some(&new.mode),
            );
        }
        // Only a changed or dropped target leaves existing compensations pointing elsewhere; a
        // target named for the first time adds a way to undo (compatible), and is reported even
        // when the mode stays (`best_effort` without, then with, a capability).
        if compensation_capability_id.is_none() && new.compensation_capability_id.is_some() {
            self.push_values(
                ChangeClass::Compatible,
                ChangeKind::CompensationStrengthened,
                &format!("{base}/compensation_capability_id"),
                "compensating capability named",
                None,
                new.compensation_capability_id.as_ref(),
            );
        } else if compensation_capability_id.is_some()
            && *compensation_capability_id != new.compensation_capability_id
        {
            self.push_values(
                ChangeClass::Breaking,
                ChangeKind::CompensationChanged,
                &format!("{base}/compensation_capability_id"),
                "compensating capability changed",
                compensation_capability_id.as_ref(),
                new.compensation_capability_id.as_ref(),
            );
        }
        if *compensation_window_ms != new.compensation_window_ms {
            let (class, kind, detail) = match (*compensation_window_ms, new.compensation_window_ms)
            {
                (Some(old), Some(new)) if new > old => (
                    ChangeClass::Compatible,
                    ChangeKind::CompensationStrengthened,
                    format!("compensation window longer: {old} ms → {new} ms"),
                ),
                (Some(old), Some(new)) => (
                    ChangeClass::Breaking,
                    ChangeKind::CompensationWeakened,
                    format!("compensation window shorter: {old} ms → {new} ms"),
                ),
                (None, Some(new)) => (
                    ChangeClass::Breaking,
                    ChangeKind::CompensationWeakened,
                    format!("compensation now limited to {new} ms"),
                ),
                (Some(old), None) => (
                    ChangeClass::Breaking,
                    ChangeKind::CompensationChanged,
                    format!("compensation window ({old} ms) no longer declared"),
                ),
                (None, None) => unreachable!("the windows differ"),
            };
            self.push_values(
                class,
                kind,
                &format!("{base}/compensation_window_ms"),
                detail,
                compensation_window_ms.as_ref(),
                new.compensation_window_ms.as_ref(),
            );
        }
        if *requires_approval != new.requires_approval {
            self.push(
                ChangeClass::Breaking,
                ChangeKind::CompensationChanged,
                format!("{base}/requires_approval"),
                format!(
                    "compensation `requires_approval` {requires_approval} → {}",
                    new.requires_approval
                ),
                Some(json!(requires_approval)),
                Some(json!(new.requires_approval)),
            );
        }
    }
}

/// How a schema finding is classified on `side`.
fn classify_schema_finding(
    side: Side,
    effect: Effect,
    property: PropertyEvent,
) -> (ChangeClass, ChangeKind) {
    use ChangeClass::{Breaking, Compatible};
    match (side, property, effect) {
        (_, _, Effect::Annotation) => (Compatible, ChangeKind::Documentation),
        (Side::Input, PropertyEvent::Added { required: true, .. }, _) => {
            (Breaking, ChangeKind::InputPropertyAdded)
        }
        (
            Side::Input,
            PropertyEvent::Added {
                required: false, ..
            },
            _,
        ) => (Compatible, ChangeKind::InputPropertyAdded),
        (Side::Input, PropertyEvent::Removed, _) => (Breaking, ChangeKind::InputPropertyRemoved),
        (Side::Input, PropertyEvent::None, Effect::Widened) => {
            (Compatible, ChangeKind::InputSchemaWidened)
        }
        (Side::Input, PropertyEvent::None, Effect::Narrowed) => {
            (Breaking, ChangeKind::InputSchemaNarrowed)
        }
        (Side::Input, PropertyEvent::None, Effect::Changed) => {
            (Breaking, ChangeKind::InputSchemaChanged)
        }
        (
            Side::Output,
            PropertyEvent::Added {
                old_closed: true, ..
            },
            _,
        ) => (Breaking, ChangeKind::OutputPropertyAdded),
        (
            Side::Output,
            PropertyEvent::Added {
                old_closed: false, ..
            },
            _,
        ) => (Compatible, ChangeKind::OutputPropertyAdded),
        (Side::Output, PropertyEvent::Removed, _) => (Breaking, ChangeKind::OutputPropertyRemoved),
        (Side::Output, PropertyEvent::None, Effect::Narrowed) => {
            (Compatible, ChangeKind::OutputSchemaNarrowed)
        }
        (Side::Output, PropertyEvent::None, Effect::Widened) => {
            (Breaking, ChangeKind::OutputSchemaWidened)
        }
        (Side::Output, PropertyEvent::None, Effect::Changed) => {
            (Breaking, ChangeKind::OutputSchemaChanged)
        }
    }
}

/// Resources and channels as (key, value) pairs, in order. A channel without an identity (as
/// admission reads it: a non-blank `id`, else `name`) is keyed by its position.
fn keyed<T: Serialize>(items: &[T], key: impl Fn(&T) -> Option<String>) -> Vec<(String, Value)> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            (
                key(item).unwrap_or_else(|| format!("#{index}")),
                to_value(item),
            )
        })
        .collect()
}

fn channel_key(channel: &Value) -> Option<String> {
    // The identity admission reads (id, else name): the one a gateway addresses.
    aip_connector::discovery::channel_identity(channel).map(str::to_owned)
}

/// The leaves at which `old` and `new` differ: objects are compared key by key, anything else
/// as a whole.
fn json_leaves(
    old: Option<&Value>,
    new: Option<&Value>,
    path: String,
    out: &mut Vec<(String, Option<Value>, Option<Value>)>,
) {
    match (old, new) {
        (Some(Value::Object(old_map)), Some(Value::Object(new_map))) => {
            let mut keys: Vec<&String> = old_map.keys().chain(new_map.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                json_leaves(
                    old_map.get(key),
                    new_map.get(key),
                    format!("{path}/{}", escape(key)),
                    out,
                );
            }
        }
        (old, new) if old != new => out.push((path, old.cloned(), new.cloned())),
        _ => {}
    }
}

fn is_empty_object(value: &Value) -> bool {
    value.as_object().is_some_and(Map::is_empty)
}

fn to_value<T: Serialize + ?Sized>(value: &T) -> Value {
    // The model's types serialise infallibly (no maps with non-string keys).
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The wire spelling of an enum value (`safe_with_idempotency_key`).
fn wire<T: Serialize>(value: &T) -> String {
    match to_value(value) {
        Value::String(text) => text,
        other => other.to_string(),
    }
}
