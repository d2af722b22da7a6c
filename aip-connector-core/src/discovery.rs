//! Upstream's discovery and connector checks on a published manifest: what a gateway or
//! upstream's conformance suite reads before it routes anything to a connector.
//!
//! Admission ([`admission`](crate::admission)) decides whether a host may run a manifest; these
//! checks decide whether a peer can *reach* what it advertises: a profile is only usable when
//! the manifest says where it is served (`discovery.profile_bindings`). Each function returns
//! the problems it found as [`Issue`]s, empty when the check passes: the issue's code is the
//! check's name below, its path a JSON Pointer to the offending field of the manifest (`""` for
//! the manifest as a whole), and it carries the capability or profile it is about. The testkit's report runs them all;
//! [`profile_binding_problems`] also runs in the `#[connector]` macro (at compile time) and in
//! `ConnectorBuilder::build`, on the manifest [`fill_served_bindings`] completed, so that rule is
//! written once.
//!
//! | check | function |
//! | --- | --- |
//! | `discovery.manifest` | [`manifest_problems`] |
//! | `discovery.profile_set` | [`profile_set_problems`] |
//! | `discovery.profile_bindings` | [`profile_binding_problems`] |
//! | `connector.manifest` | [`connector_manifest_problems`] |
//! | `rfc0003.connector_boundary` | [`connector_boundary_problems`] |
//!
//! Admission's checks 9 and 10 on channels ([`channel_issues`]) live here too: the macros (built
//! without admission) and the builder run them where a channel is declared.

use serde_json::{Map, Value};

use crate::ids::ProfileId;
use crate::ids::profiles;
use crate::issue::{Issue, escape_pointer_token};
use crate::model::Manifest;

/// Check name: the manifest's version, profiles, capability names and input schemas.
pub const DISCOVERY_MANIFEST: &str = "discovery.manifest";
/// Check name: no blank profile, and every profile a deployment requires is advertised.
pub const DISCOVERY_PROFILE_SET: &str = "discovery.profile_set";
/// Check name: every advertised profile says where it is served.
pub const DISCOVERY_PROFILE_BINDINGS: &str = "discovery.profile_bindings";
/// Check name: the manifest names its connector and offers something.
pub const CONNECTOR_MANIFEST: &str = "connector.manifest";
/// Check name: the connector stays inside its declared boundary (profile, id prefix, binding
/// metadata).
pub const CONNECTOR_BOUNDARY: &str = "rfc0003.connector_boundary";

/// The path of the native binding's manifest route served by `aip_connector::serve`.
pub const NATIVE_HTTP_MANIFEST_PATH: &str = "/aip/v1/manifest";
/// The path of the native binding's messages route served by `aip_connector::serve`.
pub const NATIVE_HTTP_MESSAGES_PATH: &str = "/aip/v1/messages";
/// The path of the MCP projection's JSON-RPC endpoint served by `aip_connector::serve::mcp`.
pub const MCP_JSONRPC_PATH: &str = "/mcp";

/// Where one profile's binding metadata lives in `compatibility`: the object under `key`, with
/// a non-blank string in each of `fields`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindingFields {
    /// The profile.
    pub profile: &'static str,
    /// The key of its object under `compatibility`.
    pub key: &'static str,
    /// The string fields that object must hold.
    pub fields: &'static [&'static str],
}

/// The profiles whose binding metadata lives in `compatibility`. The webhook profile is bound by
/// channels instead (see [`profile_binding_problems`]).
pub const PROFILE_BINDING_FIELDS: &[BindingFields] = &[
    BindingFields {
        profile: profiles::NATIVE_HTTP,
        key: "native_http",
        fields: &["messages", "manifest"],
    },
    BindingFields {
        profile: profiles::NATIVE_NATS,
        key: "native_nats",
        fields: &["subject"],
    },
    BindingFields {
        profile: profiles::MCP_COMPAT,
        key: "mcp",
        fields: &["jsonrpc"],
    },
    BindingFields {
        profile: profiles::A2A_COMPAT,
        key: "a2a",
        fields: &["agent_card", "jsonrpc"],
    },
];

/// The binding metadata of a profile this SDK serves at fixed paths: `(field, path)` pairs for
/// the object under `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedBinding {
    /// The profile.
    pub profile: &'static str,
    /// The key of its object under `compatibility`.
    pub key: &'static str,
    /// Each field with the path the SDK serves it at.
    pub routes: &'static [(&'static str, &'static str)],
}

/// The binding metadata this SDK can fill in itself, because it serves the profile at a fixed
/// path: the native HTTP binding and the MCP projection. Profiles it does not serve (NATS, A2A)
/// have no default; their metadata must be declared.
pub const SERVED_BINDING_DEFAULTS: &[ServedBinding] = &[
    ServedBinding {
        profile: profiles::NATIVE_HTTP,
        key: "native_http",
        routes: &[
            ("messages", NATIVE_HTTP_MESSAGES_PATH),
            ("manifest", NATIVE_HTTP_MANIFEST_PATH),
        ],
    },
    ServedBinding {
        profile: profiles::MCP_COMPAT,
        key: "mcp",
        routes: &[("jsonrpc", MCP_JSONRPC_PATH)],
    },
];

/// Fills in, for each profile of `profiles` that this SDK serves, the binding metadata
/// `compatibility` leaves out: the paths of the routes `aip_connector::serve` mounts. A field
/// the author declared is kept as written (a server mounted under a prefix declares its own
/// paths). Nothing is added to a `compatibility` that is not an object.
pub fn fill_served_bindings<'p>(
    profiles: impl IntoIterator<Item = &'p ProfileId>,
    compatibility: &mut Value,
) {
    let Some(object) = compatibility.as_object_mut() else {
        return;
    };
    for profile in profiles {
        let Some(served) = SERVED_BINDING_DEFAULTS
            .iter()
            .find(|served| served.profile == profile.as_str())
        else {
            continue;
        };
        let entry = object
            .entry(served.key)
            .or_insert_with(|| Value::Object(Map::new()));
        // A non-object entry is the author's; it stays, and the binding check reports it.
        if let Some(binding) = entry.as_object_mut() {
            for (field, path) in served.routes {
                binding
                    .entry(*field)
                    .or_insert_with(|| Value::String((*path).to_owned()));
            }
        }
    }
}

/// The manifest channel that publishes the webhook receiver `receiver_id` under the webhook
/// profile: `{"id": receiver_id, "kind": "webhook", "profile": "aip.http.webhook.v1"}`. The
/// receiver's id is the channel's id, so a gateway can tell which receiver a channel is.
pub fn webhook_channel(receiver_id: &str) -> Value {
    serde_json::json!({
        "id": receiver_id,
        "kind": WEBHOOK_CHANNEL_KIND,
        "profile": profiles::HTTP_WEBHOOK,
    })
}

/// The `kind` of a channel made by [`webhook_channel`].
pub const WEBHOOK_CHANNEL_KIND: &str = "webhook";

/// The ids of the webhook receivers `manifest` publishes: the identities ([`channel_identity`]:
/// `id`, else `name`) of its channels of kind [`WEBHOOK_CHANNEL_KIND`], in order.
pub fn webhook_receiver_ids(manifest: &Manifest) -> Vec<&str> {
    manifest
        .channels
        .iter()
        .filter(|c| c.get("kind").and_then(Value::as_str) == Some(WEBHOOK_CHANNEL_KIND))
        .filter_map(channel_identity)
        .collect()
}

/// Admission check 9: a channel's identity (its `id` when that key is present, else its `name`)
/// is not a non-blank string.
pub const MANIFEST_CHANNEL_IDENTIFIER_MISSING: &str = "manifest.channel.identifier_missing";
/// Admission check 10: a channel identity (id and name share one namespace) is repeated.
pub const MANIFEST_CHANNEL_DUPLICATE: &str = "manifest.channel.duplicate";

/// A channel's identity as admission reads it: its `id` when that key exists, else its `name`,
/// provided it is a non-blank string; `None` otherwise (also for a channel that is no object).
pub fn channel_identity(channel: &Value) -> Option<&str> {
    let object = channel.as_object()?;
    let identity = object.get("id").or_else(|| object.get("name"))?;
    identity.as_str().filter(|text| !text.trim().is_empty())
}

/// Admission checks 9 and 10 on a channel list, in order, with upstream's codes, paths
/// (`/channels/<index>`) and messages: each channel has an identity ([`channel_identity`]), and
/// no identity repeats (ids and names share one namespace). Admission runs exactly these on
/// `manifest.channels`; `#[connector(channels = [...])]` and `ConnectorBuilder::channel` run them
/// where a channel is declared.
///
/// ```
/// use aip_connector_core::discovery::{self, channel_issues};
/// use serde_json::json;
///
/// let channels = [json!({"id": "inbox"}), json!({"name": "inbox"}), json!({"kind": "sms"})];
/// let found: Vec<(String, String)> = channel_issues(&channels)
///     .into_iter()
///     .map(|issue| (issue.code, issue.path))
///     .collect();
/// assert_eq!(found, [
///     (discovery::MANIFEST_CHANNEL_DUPLICATE.to_owned(), "/channels/1".to_owned()),
///     (discovery::MANIFEST_CHANNEL_IDENTIFIER_MISSING.to_owned(), "/channels/2".to_owned()),
/// ]);
/// ```
pub fn channel_issues(channels: &[Value]) -> Vec<Issue> {
    let mut issues = Vec::new();
    let mut seen = std::collections::HashSet::with_capacity(channels.len());
    for (index, channel) in channels.iter().enumerate() {
        let path = format!("/channels/{index}");
        match channel_identity(channel) {
            None => issues.push(Issue::new(
                MANIFEST_CHANNEL_IDENTIFIER_MISSING,
                path,
                "channel must declare a non-empty id or name",
            )),
            Some(identity) if !seen.insert(identity) => issues.push(Issue::new(
                MANIFEST_CHANNEL_DUPLICATE,
                path,
                "channel id or name is duplicated",
            )),
            Some(_) => {}
        }
    }
    issues
}

/// `discovery.manifest`: a non-blank `manifest_version`, at least one profile, and per
/// capability a non-blank name and an object `input_schema`. Each issue's code is
/// [`DISCOVERY_MANIFEST`] and its path points at the offending field.
pub fn manifest_problems(manifest: &Manifest) -> Vec<Issue> {
    let mut problems = Vec::new();
    if manifest.manifest_version.trim().is_empty() {
        problems.push(Issue::new(
            DISCOVERY_MANIFEST,
            "/manifest_version",
            "manifest_version is empty",
        ));
    }
    if manifest.profiles.is_empty() {
        problems.push(Issue::new(
            DISCOVERY_MANIFEST,
            "/profiles",
            "profiles must not be empty",
        ));
    }
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        if capability.name.trim().is_empty() {
            problems.push(
                Issue::new(
                    DISCOVERY_MANIFEST,
                    format!("/capabilities/{index}/name"),
                    format!("capability name is empty (`{}`)", capability.id),
                )
                .with_capability(&capability.id),
            );
        }
        if !capability.input_schema.is_object() {
            problems.push(
                Issue::new(
                    DISCOVERY_MANIFEST,
                    format!("/capabilities/{index}/input_schema"),
                    format!(
                        "capability input_schema must be a JSON object (`{}`)",
                        capability.id
                    ),
                )
                .with_capability(&capability.id),
            );
        }
    }
    problems
}

/// `discovery.profile_set`: no blank profile id, and every profile of `required` is advertised.
/// Each issue's code is [`DISCOVERY_PROFILE_SET`]; a missing profile's issue carries it.
pub fn profile_set_problems(manifest: &Manifest, required: &[ProfileId]) -> Vec<Issue> {
    let mut problems = Vec::new();
    if let Some(index) = manifest
        .profiles
        .iter()
        .position(|p| p.as_str().trim().is_empty())
    {
        problems.push(Issue::new(
            DISCOVERY_PROFILE_SET,
            format!("/profiles/{index}"),
            "a profile id is empty",
        ));
    }
    for profile in required {
        if !manifest.profiles.contains(profile) {
            problems.push(
                Issue::new(
                    DISCOVERY_PROFILE_SET,
                    "/profiles",
                    format!("missing required profile `{profile}`"),
                )
                .with_profile(profile),
            );
        }
    }
    problems
}

/// `discovery.profile_bindings`: each advertised profile says where it is served.
/// `aip.native.http.v1` needs string fields `messages` and `manifest` under
/// `compatibility.native_http`; `aip.native.nats.v1` needs `compatibility.native_nats.subject`;
/// `aip.mcp.compat.v1` needs `compatibility.mcp.jsonrpc`; `aip.a2a.compat.v1` needs
/// `compatibility.a2a.agent_card` and `.jsonrpc`; `aip.http.webhook.v1` needs at least one
/// channel. Other profiles have no binding rule.
///
/// One issue per unreachable profile, code [`DISCOVERY_PROFILE_BINDINGS`], always carrying the
/// profile ([`Issue::profile`]); its path is the binding's object under `compatibility`
/// (`/compatibility/native_http`), or `/channels` for the webhook profile.
pub fn profile_binding_problems(manifest: &Manifest) -> Vec<Issue> {
    let mut problems = Vec::new();
    for (index, profile) in manifest.profiles.iter().enumerate() {
        // A repeated profile is admission's to report (`manifest.profile.duplicate`), once.
        if manifest.profiles[..index].contains(profile) {
            continue;
        }
        if profile.as_str() == profiles::HTTP_WEBHOOK {
            if manifest.channels.is_empty() {
                problems.push(
                    Issue::new(
                        DISCOVERY_PROFILE_BINDINGS,
                        "/channels",
                        format!(
                            "profile `{profile}` is advertised but the manifest has no channel: each webhook receiver is published as a channel"
                        ),
                    )
                    .with_profile(profile),
                );
            }
            continue;
        }
        let Some(bound) = PROFILE_BINDING_FIELDS
            .iter()
            .find(|bound| bound.profile == profile.as_str())
        else {
            continue;
        };
        let binding = manifest
            .compatibility
            .as_ref()
            .and_then(|c| c.get(bound.key));
        let missing: Vec<String> = bound
            .fields
            .iter()
            .filter(|field| {
                binding
                    .and_then(|b| b.get(**field))
                    .and_then(Value::as_str)
                    .is_none_or(|s| s.trim().is_empty())
            })
            .map(|field| format!("`/{}/{field}`", bound.key))
            .collect();
        if !missing.is_empty() {
            problems.push(
                Issue::new(
                    DISCOVERY_PROFILE_BINDINGS,
                    format!("/compatibility/{}", bound.key),
                    format!(
                        "profile `{profile}` is advertised but `compatibility` has no string at {}",
                        missing.join(" and ")
                    ),
                )
                .with_profile(profile),
            );
        }
    }
    problems
}

/// `connector.manifest`: the `compatibility` metadata (as JSON text) names `connector_id`, and
/// the manifest offers at least one capability, resource or channel. Each issue's code is
/// [`CONNECTOR_MANIFEST`].
pub fn connector_manifest_problems(manifest: &Manifest, connector_id: &str) -> Vec<Issue> {
    let mut problems = Vec::new();
    let text = manifest
        .compatibility
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    if !text.contains(connector_id) {
        problems.push(unnamed_connector(CONNECTOR_MANIFEST, connector_id));
    }
    if no_surface(manifest) {
        problems.push(no_surface_issue(CONNECTOR_MANIFEST));
    }
    problems
}

fn no_surface(manifest: &Manifest) -> bool {
    manifest.capabilities.is_empty()
        && manifest.resources.is_empty()
        && manifest.channels.is_empty()
}

/// The manifest as a whole (path `""`, the root) offers nothing a peer could call or read.
fn no_surface_issue(check: &str) -> Issue {
    Issue::new(
        check,
        "",
        "the manifest offers no capability, resource or channel",
    )
}

fn unnamed_connector(check: &str, connector_id: &str) -> Issue {
    Issue::new(
        check,
        "/compatibility",
        format!("`compatibility` does not name the connector `{connector_id}`"),
    )
}

/// The boundary a deployment sets for one connector (upstream RFC 0003): the profile it must
/// be reachable through, the prefix of its capability ids, and the metadata every capability's
/// binding for that profile must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectorBoundary {
    /// The connector's id, which `compatibility` must name.
    pub connector_id: String,
    /// The profile every capability must be bound to.
    pub connector_profile: ProfileId,
    /// The prefix of every capability id (`cap:calendar:`, say).
    pub capability_id_prefix: String,
    /// Keys each capability's binding for `connector_profile` must hold, non-empty.
    pub required_binding_metadata: Vec<String>,
}

impl ConnectorBoundary {
    /// A boundary for `connector_id` on `connector_profile` whose capability ids start with
    /// `capability_id_prefix`, with no required binding metadata.
    pub fn new(
        connector_id: impl Into<String>,
        connector_profile: impl Into<ProfileId>,
        capability_id_prefix: impl Into<String>,
    ) -> Self {
        Self {
            connector_id: connector_id.into(),
            connector_profile: connector_profile.into(),
            capability_id_prefix: capability_id_prefix.into(),
            required_binding_metadata: Vec::new(),
        }
    }

    /// Requires `key` in every capability's binding for the connector profile.
    pub fn require_binding_metadata(mut self, key: impl Into<String>) -> Self {
        self.required_binding_metadata.push(key.into());
        self
    }
}

/// `rfc0003.connector_boundary`: the manifest advertises the boundary's profile;
/// `compatibility` names the connector (its `connector` or `system` key, compared without case
/// or surrounding blanks, or else anywhere in its JSON text); it offers at least one surface;
/// every capability id starts with the prefix; and every capability has a binding for the
/// profile holding each required metadata key with a non-empty value.
pub fn connector_boundary_problems(
    manifest: &Manifest,
    boundary: &ConnectorBoundary,
) -> Vec<Issue> {
    let check = CONNECTOR_BOUNDARY;
    let mut problems = Vec::new();
    let profile = &boundary.connector_profile;
    if !manifest.profiles.contains(profile) {
        problems.push(
            Issue::new(
                check,
                "/profiles",
                format!("the manifest does not advertise `{profile}`"),
            )
            .with_profile(profile),
        );
    }
    if !names_connector(manifest.compatibility.as_ref(), &boundary.connector_id) {
        problems.push(unnamed_connector(check, &boundary.connector_id));
    }
    if no_surface(manifest) {
        problems.push(no_surface_issue(check));
    }
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let id = &capability.id;
        if !id.as_str().starts_with(&boundary.capability_id_prefix) {
            problems.push(
                Issue::new(
                    check,
                    format!("/capabilities/{index}/id"),
                    format!(
                        "capability `{id}` does not start with `{}`",
                        boundary.capability_id_prefix
                    ),
                )
                .with_capability(id),
            );
        }
        let Some(binding_index) = capability
            .bindings
            .iter()
            .position(|b| b.profile == *profile)
        else {
            problems.push(
                Issue::new(
                    check,
                    format!("/capabilities/{index}/bindings"),
                    format!("capability `{id}` has no binding for `{profile}`"),
                )
                .with_capability(id)
                .with_profile(profile),
            );
            continue;
        };
        let binding = &capability.bindings[binding_index];
        for key in &boundary.required_binding_metadata {
            let present = binding.metadata.get(key).is_some_and(|value| match value {
                Value::Null => false,
                Value::String(s) => !s.trim().is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => true,
            });
            if !present {
                problems.push(
                    Issue::new(
                        check,
                        format!(
                            "/capabilities/{index}/bindings/{binding_index}/{}",
                            escape_pointer_token(key)
                        ),
                        format!("capability `{id}`'s `{profile}` binding has no `{key}`"),
                    )
                    .with_capability(id)
                    .with_profile(profile),
                );
            }
        }
    }
    problems
}

/// Whether `compatibility` names `connector_id`: its `connector` or `system` key contains it
/// (case and surrounding blanks aside), or its JSON text does.
fn names_connector(compatibility: Option<&Value>, connector_id: &str) -> bool {
    let Some(compatibility) = compatibility else {
        return false;
    };
    let wanted = connector_id.trim().to_lowercase();
    let keyed = ["connector", "system"].iter().any(|key| {
        compatibility
            .get(*key)
            .and_then(Value::as_str)
            .is_some_and(|named| named.trim().to_lowercase().contains(&wanted))
    });
    keyed || compatibility.to_string().contains(connector_id)
}

#[cfg(test)]
mod tests;
