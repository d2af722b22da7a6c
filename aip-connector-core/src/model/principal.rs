//! `Principal` and its references (`aip-model.md` §3.3).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::ids::PrincipalId;

/// What sort of party a principal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// A person.
    Human,
    /// An autonomous agent.
    Agent,
    /// A service or connector.
    Service,
    /// A tenant (organisation).
    Tenant,
    /// A customer of a tenant.
    Customer,
    /// A contact in a conversation surface.
    Contact,
    /// The platform itself.
    System,
}

/// A party that acts, is acted upon, or provides capabilities.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// Principal id.
    pub id: PrincipalId,
    /// Principal kind.
    pub kind: PrincipalKind,
    /// Human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Trust domain the principal belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// Decentralised identifier, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
    /// The principal's identities in other systems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_refs: Vec<ExternalRef>,
    /// Authority delegated to this principal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegated_authority: Vec<DelegatedAuthorityGrant>,
    /// Free-form authentication context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_context: Option<Value>,
}

impl Principal {
    /// A principal with only an id and a kind.
    pub fn new(id: impl Into<PrincipalId>, kind: PrincipalKind) -> Self {
        Self {
            id: id.into(),
            kind,
            display_name: None,
            trust_domain: None,
            did: None,
            external_refs: Vec::new(),
            delegated_authority: Vec::new(),
            auth_context: None,
        }
    }
}

/// A principal's identity in another system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalRef {
    /// The other system.
    pub system: String,
    /// Kind of reference in that system (wire key `type`).
    #[serde(rename = "type")]
    pub ref_type: String,
    /// The id in that system.
    pub id: String,
}

/// Authority one principal grants another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegatedAuthorityGrant {
    /// The principal that granted the authority.
    pub principal_id: PrincipalId,
    /// Granted scopes; `*` grants every scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// When the grant stops applying; expired grants must be ignored.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
    /// Why the authority was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
