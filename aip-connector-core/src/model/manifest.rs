//! `Manifest`, `Resource` and discovery requests (`aip-model.md` §3).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::{Capability, Principal, RiskLevel, SideEffect};
use crate::ids::{CapabilityId, PrincipalId, ProfileId};

/// The manifest version string every fixture uses.
pub const MANIFEST_VERSION_V1: &str = "aip-manifest/v1";

/// AIP participant manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version, e.g. `aip-manifest/v1`.
    pub manifest_version: String,
    /// Provider identity.
    pub agent: Principal,
    /// Callable and discovery-only capabilities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Capability>,
    /// Profiles the participant speaks; always written, must be non-empty.
    pub profiles: Vec<ProfileId>,
    /// Readable resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Resource>,
    /// Conversation channels (free-form objects with an `id` or `name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<Value>,
    /// Authentication and signature requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Value>,
    /// Audit and compliance metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governance: Option<Value>,
    /// Limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Value>,
    /// Per-profile compatibility endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<Value>,
    /// Vendor extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

impl Manifest {
    /// A `aip-manifest/v1` manifest for `agent` speaking `profiles`, with nothing else declared.
    pub fn new(agent: Principal, profiles: impl IntoIterator<Item = ProfileId>) -> Self {
        Self {
            manifest_version: MANIFEST_VERSION_V1.to_owned(),
            agent,
            capabilities: Vec::new(),
            profiles: profiles.into_iter().collect(),
            resources: Vec::new(),
            channels: Vec::new(),
            security: None,
            governance: None,
            limits: None,
            compatibility: None,
            extensions: None,
        }
    }

    /// The capability with `id`, if declared.
    pub fn capability(&self, id: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.id == id)
    }
}

/// A readable resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// Resource id; non-empty and unique.
    pub id: String,
    /// Human-readable name.
    pub name: String,
    /// Resource kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Capability that reads it; must be declared in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_id: Option<CapabilityId>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Owning tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Read policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<ResourceAccessPolicy>,
    /// Expiry.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
}

/// Who may read a resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceAccessPolicy {
    /// Anyone may read it.
    #[serde(default)]
    pub public: bool,
    /// Principals allowed to read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_principals: Vec<PrincipalId>,
    /// Any one of these scopes authorizes the read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_scopes: Vec<String>,
    /// A tenant context is required.
    #[serde(default)]
    pub tenant_required: bool,
}

/// A request for a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRequest {
    /// Profiles the client speaks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<ProfileId>,
    /// Filter on capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ManifestFilter>,
}

/// Filter of a manifest request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFilter {
    /// Capability ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_ids: Vec<CapabilityId>,
    /// Resource kinds; blank entries are invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_kinds: Vec<String>,
    /// Profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<ProfileId>,
    /// Risk levels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub risk: Vec<RiskLevel>,
    /// Side effects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<SideEffect>,
    /// Only capabilities that do (or do not) require approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_approval: Option<bool>,
    /// Only capabilities that do (or do not) stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_streaming: Option<bool>,
    /// Only capabilities that do (or do not) declare transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_transactions: Option<bool>,
}
