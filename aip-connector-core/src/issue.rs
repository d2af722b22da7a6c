//! The issue record shared by contract rules and manifest admission.
//!
//! One rule produces one [`Issue`]: a stable dotted `code`, a JSON-Pointer `path` into the
//! manifest (or into a lone capability, for the macros), and a message that says what to fix.
//! The macros map `path` back to the attribute key that produced it; admission reports it as is.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{CapabilityId, ProfileId};

/// One problem found by a rule or an admission check (upstream `AdmissionIssue`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Stable machine code, e.g. `contract.idempotency.invalid_ttl`.
    pub code: String,
    /// JSON Pointer into the checked document: starts with `/`, or is `""` (the root) for an
    /// issue about the document as a whole: a lone capability checked under base path `""`
    /// (e.g. `implementation.claim_unsupported`), or a manifest that offers nothing
    /// (`connector.manifest`).
    pub path: String,
    /// The capability the issue is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_id: Option<CapabilityId>,
    /// JSON Pointer inside the schema at `path`, for schema issues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_pointer: Option<String>,
    /// The profile the issue is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileId>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Issue {
    /// An issue with a code, a path and a message.
    pub fn new(code: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            path: path.into(),
            capability_id: None,
            schema_pointer: None,
            profile: None,
            message: message.into(),
        }
    }

    /// Attaches the capability the issue is about.
    pub fn with_capability(mut self, id: &CapabilityId) -> Self {
        self.capability_id = Some(id.clone());
        self
    }

    /// Attaches a pointer inside a schema.
    pub fn with_schema_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.schema_pointer = Some(pointer.into());
        self
    }

    /// Attaches the profile the issue is about.
    pub fn with_profile(mut self, profile: &ProfileId) -> Self {
        self.profile = Some(profile.clone());
        self
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.code, self.path, self.message)
    }
}

/// Escapes one JSON Pointer reference token (RFC 6901: `~` → `~0`, `/` → `~1`).
pub fn escape_pointer_token(token: &str) -> String {
    if token.contains(['~', '/']) {
        token.replace('~', "~0").replace('/', "~1")
    } else {
        token.to_owned()
    }
}

/// Appends one token to a JSON Pointer, escaping it.
pub fn pointer_join(base: &str, token: impl fmt::Display) -> String {
    format!("{base}/{}", escape_pointer_token(&token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(pointer_join("/a", "b/c~d"), "/a/b~1c~0d");
        assert_eq!(pointer_join("", 3), "/3");
    }

    #[test]
    fn display_matches_upstream_report_format() {
        let issue = Issue::new(
            "manifest.profiles.empty",
            "/profiles",
            "at least one profile is required",
        );
        assert_eq!(
            issue.to_string(),
            "manifest.profiles.empty at /profiles: at least one profile is required"
        );
    }

    #[test]
    fn serializes_in_upstream_key_order_and_skips_absent_fields() {
        let issue = Issue::new("c", "/p", "m").with_capability(&"cap:x".into());
        assert_eq!(
            serde_json::to_string(&issue).unwrap(),
            r#"{"code":"c","path":"/p","capability_id":"cap:x","message":"m"}"#
        );
    }
}
