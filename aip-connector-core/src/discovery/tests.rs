use serde_json::json;

use super::*;
use crate::model::{Binding, Capability, CapabilityKind, Principal, PrincipalKind};

fn manifest(profiles: &[&str]) -> Manifest {
    let mut manifest = Manifest::new(
        Principal::new("agent:cal", PrincipalKind::Service),
        profiles.iter().map(|p| ProfileId::from(*p)),
    );
    manifest.capabilities = vec![Capability::new(
        "cap:cal:list",
        "List",
        CapabilityKind::Tool,
        json!({"type": "object"}),
    )];
    manifest.compatibility = Some(json!({"connector": "cal"}));
    manifest
}

fn messages(problems: &[Issue]) -> Vec<&str> {
    problems.iter().map(|p| p.message.as_str()).collect()
}

/// Each issue as `(code, path, message)`.
fn located(problems: &[Issue]) -> Vec<(&str, &str, &str)> {
    problems
        .iter()
        .map(|p| (p.code.as_str(), p.path.as_str(), p.message.as_str()))
        .collect()
}

#[test]
fn served_profiles_get_the_sdk_routes_and_keep_declared_ones() {
    let profiles = [
        ProfileId::from(profiles::NATIVE_HTTP),
        ProfileId::from(profiles::MCP_COMPAT),
        ProfileId::from(profiles::A2A_COMPAT),
    ];
    let mut compatibility =
        json!({"connector": "cal", "native_http": {"messages": "/api/messages"}});
    fill_served_bindings(&profiles, &mut compatibility);
    assert_eq!(
        compatibility,
        json!({
            "connector": "cal",
            "native_http": {"messages": "/api/messages", "manifest": "/aip/v1/manifest"},
            "mcp": {"jsonrpc": "/mcp"},
        }),
        "A2A is not served by the SDK, so it gets no default"
    );
}

#[test]
fn a_non_object_compatibility_or_binding_is_left_alone() {
    let profiles = [ProfileId::from(profiles::NATIVE_HTTP)];
    let mut text = json!("cal");
    fill_served_bindings(&profiles, &mut text);
    assert_eq!(text, json!("cal"));
    let mut odd = json!({"native_http": "/aip"});
    fill_served_bindings(&profiles, &mut odd);
    assert_eq!(odd, json!({"native_http": "/aip"}));
}

#[test]
fn a_filled_manifest_passes_every_binding_rule_of_served_profiles() {
    let mut m = manifest(&[profiles::NATIVE_HTTP, profiles::MCP_COMPAT]);
    assert_eq!(profile_binding_problems(&m).len(), 2);
    let declared = m.profiles.clone();
    fill_served_bindings(&declared, m.compatibility.as_mut().unwrap());
    assert_eq!(profile_binding_problems(&m), Vec::new());
}

#[test]
fn each_bound_profile_names_what_it_misses() {
    let mut m = manifest(&[
        profiles::NATIVE_HTTP,
        profiles::NATIVE_NATS,
        profiles::MCP_COMPAT,
        profiles::A2A_COMPAT,
        profiles::HTTP_WEBHOOK,
        profiles::SSE_STREAM,
    ]);
    m.compatibility = Some(json!({
        "native_http": {"messages": "/m", "manifest": "  "},
        "a2a": {"agent_card": "/card", "jsonrpc": 7},
    }));
    let problems = profile_binding_problems(&m);
    assert_eq!(
        messages(&problems),
        vec![
            "profile `aip.native.http.v1` is advertised but `compatibility` has no string at `/native_http/manifest`",
            "profile `aip.native.nats.v1` is advertised but `compatibility` has no string at `/native_nats/subject`",
            "profile `aip.mcp.compat.v1` is advertised but `compatibility` has no string at `/mcp/jsonrpc`",
            "profile `aip.a2a.compat.v1` is advertised but `compatibility` has no string at `/a2a/jsonrpc`",
            "profile `aip.http.webhook.v1` is advertised but the manifest has no channel: each webhook receiver is published as a channel",
        ]
    );
    assert!(
        problems
            .iter()
            .all(|p| p.code == DISCOVERY_PROFILE_BINDINGS && p.profile.is_some()),
        "every binding issue names its check and carries its profile: {problems:?}"
    );
    assert_eq!(
        problems[4].profile.as_ref().map(ProfileId::as_str),
        Some(profiles::HTTP_WEBHOOK)
    );
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/compatibility/native_http",
            "/compatibility/native_nats",
            "/compatibility/mcp",
            "/compatibility/a2a",
            "/channels",
        ]
    );
    m.channels.push(json!({"id": "bookings"}));
    assert_eq!(profile_binding_problems(&m).len(), 4);
    // A profile listed twice is reported once.
    m.profiles.push(ProfileId::from(profiles::NATIVE_NATS));
    assert_eq!(profile_binding_problems(&m).len(), 4);
}

#[test]
fn discovery_manifest_rules() {
    let mut m = manifest(&[profiles::NATIVE_HTTP]);
    assert!(manifest_problems(&m).is_empty());
    m.manifest_version = " ".to_owned();
    m.profiles.clear();
    m.capabilities[0].name = String::new();
    m.capabilities[0].input_schema = json!(true);
    let problems = manifest_problems(&m);
    assert_eq!(
        located(&problems),
        vec![
            (
                DISCOVERY_MANIFEST,
                "/manifest_version",
                "manifest_version is empty"
            ),
            (
                DISCOVERY_MANIFEST,
                "/profiles",
                "profiles must not be empty"
            ),
            (
                DISCOVERY_MANIFEST,
                "/capabilities/0/name",
                "capability name is empty (`cap:cal:list`)"
            ),
            (
                DISCOVERY_MANIFEST,
                "/capabilities/0/input_schema",
                "capability input_schema must be a JSON object (`cap:cal:list`)"
            ),
        ]
    );
    assert_eq!(
        problems[2].capability_id.as_ref().map(|id| id.as_str()),
        Some("cap:cal:list")
    );
}

#[test]
fn profile_set_requires_every_listed_profile() {
    let m = manifest(&[profiles::NATIVE_HTTP]);
    assert!(profile_set_problems(&m, &[ProfileId::from(profiles::NATIVE_HTTP)]).is_empty());
    let missing = profile_set_problems(&m, &[ProfileId::from(profiles::MCP_COMPAT)]);
    assert_eq!(
        located(&missing),
        vec![(
            DISCOVERY_PROFILE_SET,
            "/profiles",
            "missing required profile `aip.mcp.compat.v1`"
        )]
    );
    assert_eq!(
        missing[0].profile,
        Some(ProfileId::from(profiles::MCP_COMPAT))
    );
    let blank = manifest(&[profiles::NATIVE_HTTP, " "]);
    assert_eq!(
        located(&profile_set_problems(&blank, &[])),
        vec![(
            DISCOVERY_PROFILE_SET,
            "/profiles/1",
            "a profile id is empty"
        )]
    );
}

#[test]
fn connector_manifest_names_the_connector_and_offers_a_surface() {
    let mut m = manifest(&[profiles::NATIVE_HTTP]);
    assert!(connector_manifest_problems(&m, "cal").is_empty());
    assert_eq!(
        located(&connector_manifest_problems(&m, "payments")),
        vec![(
            CONNECTOR_MANIFEST,
            "/compatibility",
            "`compatibility` does not name the connector `payments`"
        )]
    );
    m.capabilities.clear();
    assert_eq!(
        located(&connector_manifest_problems(&m, "cal")),
        vec![(
            CONNECTOR_MANIFEST,
            "",
            "the manifest offers no capability, resource or channel"
        )]
    );
    m.channels.push(json!({"name": "bookings"}));
    assert!(connector_manifest_problems(&m, "cal").is_empty());
}

#[test]
fn connector_boundary_checks_profile_prefix_and_binding_metadata() {
    let mut m = manifest(&[profiles::NATIVE_HTTP]);
    m.compatibility = Some(json!({"system": "  CAL  "}));
    let boundary = ConnectorBoundary::new("cal", profiles::NATIVE_HTTP, "cap:cal:")
        .require_binding_metadata("operation_id");
    assert_eq!(
        located(&connector_boundary_problems(&m, &boundary)),
        vec![(
            CONNECTOR_BOUNDARY,
            "/capabilities/0/bindings",
            "capability `cap:cal:list` has no binding for `aip.native.http.v1`"
        )]
    );
    m.capabilities[0].bindings = vec![
        Binding::new(profiles::MCP_COMPAT).with("tool_name", "list"),
        Binding::new(profiles::NATIVE_HTTP).with("operation_id", ""),
    ];
    let missing = connector_boundary_problems(&m, &boundary);
    assert_eq!(
        located(&missing),
        vec![(
            CONNECTOR_BOUNDARY,
            "/capabilities/0/bindings/1/operation_id",
            "capability `cap:cal:list`'s `aip.native.http.v1` binding has no `operation_id`"
        )],
        "the path points into the profile's binding, not the first one"
    );
    assert_eq!(
        (
            missing[0].capability_id.as_ref().map(|id| id.as_str()),
            missing[0].profile.as_ref().map(ProfileId::as_str)
        ),
        (Some("cap:cal:list"), Some(profiles::NATIVE_HTTP))
    );
    let odd_key = ConnectorBoundary::new("cal", profiles::NATIVE_HTTP, "cap:cal:")
        .require_binding_metadata("x/y~z");
    assert_eq!(
        connector_boundary_problems(&m, &odd_key)[0].path,
        "/capabilities/0/bindings/1/x~1y~0z",
        "a metadata key is escaped as a JSON Pointer token"
    );
    m.capabilities[0].bindings[1] =
        Binding::new(profiles::NATIVE_HTTP).with("operation_id", "listEvents");
    assert!(connector_boundary_problems(&m, &boundary).is_empty());

    let elsewhere = ConnectorBoundary::new("payments", profiles::MCP_COMPAT, "cap:payments:");
    m.capabilities[0].bindings.remove(0);
    assert_eq!(
        located(&connector_boundary_problems(&m, &elsewhere)),
        vec![
            (
                CONNECTOR_BOUNDARY,
                "/profiles",
                "the manifest does not advertise `aip.mcp.compat.v1`"
            ),
            (
                CONNECTOR_BOUNDARY,
                "/compatibility",
                "`compatibility` does not name the connector `payments`"
            ),
            (
                CONNECTOR_BOUNDARY,
                "/capabilities/0/id",
                "capability `cap:cal:list` does not start with `cap:payments:`"
            ),
            (
                CONNECTOR_BOUNDARY,
                "/capabilities/0/bindings",
                "capability `cap:cal:list` has no binding for `aip.mcp.compat.v1`"
            ),
        ]
    );
}

#[test]
fn webhook_receivers_are_the_identities_of_webhook_channels() {
    let mut m = manifest(&[profiles::HTTP_WEBHOOK]);
    m.channels = vec![
        webhook_channel("bookings"),
        json!({"name": "status", "kind": "webhook"}),
        json!({"id": "support-inbox", "kind": "email"}),
        json!({"id": " ", "name": "blank", "kind": "webhook"}),
    ];
    assert_eq!(
        webhook_receiver_ids(&m),
        ["bookings", "status"],
        "a name-only webhook channel is a receiver; an email channel and one without identity are not"
    );
}

#[test]
fn channel_issues_follow_admission_checks_9_and_10() {
    let channels = [
        json!({"id": "inbox"}),
        json!({"id": 7, "name": "chat"}),
        json!({"name": "inbox"}),
        json!("sms"),
        json!({"name": "chat"}),
    ];
    let issues = channel_issues(&channels);
    let found: Vec<(&str, &str)> = issues
        .iter()
        .map(|issue| (issue.code.as_str(), issue.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (MANIFEST_CHANNEL_IDENTIFIER_MISSING, "/channels/1"),
            (MANIFEST_CHANNEL_DUPLICATE, "/channels/2"),
            (MANIFEST_CHANNEL_IDENTIFIER_MISSING, "/channels/3"),
        ],
        "an `id` that is not a string hides the `name`, so `chat` is declared once"
    );
}
