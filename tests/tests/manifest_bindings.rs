//! Where a manifest says each advertised profile is served (upstream's
//! `discovery.profile_bindings`): the routes the SDK serves are filled in, declared ones are
//! kept, webhook receivers are published as channels, and what the SDK cannot know is refused
//! when the connector is built.

use aip_connector::ConnectorBuilder;
use aip_connector::discovery::{
    self, connector_manifest_problems, manifest_problems, profile_binding_problems,
};
use aip_connector::ids::{ProfileId, profiles};
use aip_connector::prelude::*;
use aip_connector_tests::{assert_valid_against, upstream_schema};
use serde_json::json;

struct Calendar;

#[connector(
    id = "calendar",
    profiles = ["aip.native.http.v1", "aip.mcp.compat.v1"],
    webhooks = ["bookings", "cancellations"]
)]
impl Calendar {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn list(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

/// Declares its own native route (mounted under a prefix) and the NATS subject.
struct Mounted;

#[connector(
    id = "mounted",
    profiles = ["aip.native.http.v1", "aip.native.nats.v1"],
    compatibility = r#"{"native_http": {"messages": "/calendar/aip/v1/messages"}, "native_nats": {"subject": "aip.mounted"}}"#
)]
impl Mounted {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn list(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

/// Reached through an email inbox and a chat: channels that are not webhook receivers, which
/// also bind the webhook profile (upstream asks only for a channel).
struct Support;

#[connector(
    id = "support",
    profiles = ["aip.native.http.v1", "aip.http.webhook.v1"],
    webhooks = ["tickets"],
    channels = [
        r#"{"id": "support-inbox", "kind": "email", "address": "support@example.com"}"#,
        r#"{"name": "support-chat", "kind": "chat"}"#,
    ]
)]
impl Support {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn open_tickets(&self) -> Result<u32, ConnectorFailure> {
        Ok(3)
    }
}

/// A receiver declared as a channel of its own, which carries the path a gateway posts to: it
/// binds the webhook profile without `webhooks`.
struct Payments;

#[connector(
    id = "payments",
    profiles = ["aip.native.http.v1", "aip.http.webhook.v1"],
    channels = [r#"{"id": "status", "kind": "webhook", "path": "/webhooks/status"}"#]
)]
impl Payments {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn status(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

#[test]
fn declared_channels_follow_the_receivers_and_bind_the_webhook_profile() {
    let manifest = Support.definition().manifest();
    assert_eq!(
        manifest.channels,
        vec![
            json!({"id": "tickets", "kind": "webhook", "profile": "aip.http.webhook.v1"}),
            json!({"id": "support-inbox", "kind": "email", "address": "support@example.com"}),
            json!({"name": "support-chat", "kind": "chat"}),
        ]
    );
    assert_eq!(discovery::webhook_receiver_ids(&manifest), vec!["tickets"]);
    assert!(discovery::channel_issues(&manifest.channels).is_empty());
    assert!(profile_binding_problems(&manifest).is_empty());

    let payments = Payments.definition().manifest();
    assert_eq!(
        payments.profiles,
        vec![
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::HTTP_WEBHOOK),
        ]
    );
    assert_eq!(payments.channels.len(), 1);
    assert!(
        profile_binding_problems(&payments).is_empty(),
        "a declared channel binds the webhook profile"
    );
    // Read as a receiver, as the testkit's `receivers_declared` reads it.
    assert_eq!(discovery::webhook_receiver_ids(&payments), vec!["status"]);
}

#[test]
fn served_profiles_name_the_sdk_routes_and_receivers_are_channels() {
    let manifest = Calendar.definition().manifest();
    assert_eq!(
        manifest.profiles,
        vec![
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::MCP_COMPAT),
            ProfileId::from(profiles::HTTP_WEBHOOK),
        ],
        "declaring receivers advertises the webhook profile"
    );
    assert_eq!(
        manifest.compatibility,
        Some(json!({
            "connector": "calendar",
            "native_http": {"messages": "/aip/v1/messages", "manifest": "/aip/v1/manifest"},
            "mcp": {"jsonrpc": "/mcp"},
        }))
    );
    assert_eq!(
        manifest.channels,
        vec![
            json!({"id": "bookings", "kind": "webhook", "profile": "aip.http.webhook.v1"}),
            json!({"id": "cancellations", "kind": "webhook", "profile": "aip.http.webhook.v1"}),
        ]
    );
    assert_eq!(
        discovery::webhook_receiver_ids(&manifest),
        vec!["bookings", "cancellations"]
    );
    assert_eq!(profile_binding_problems(&manifest), Vec::new());
    assert!(manifest_problems(&manifest).is_empty());
    assert!(connector_manifest_problems(&manifest, "calendar").is_empty());
}

#[test]
fn declared_binding_metadata_is_kept_and_completed() {
    let manifest = Mounted.definition().manifest();
    assert_eq!(
        manifest.compatibility,
        Some(json!({
            "connector": "mounted",
            "native_http": {
                "messages": "/calendar/aip/v1/messages",
                "manifest": "/aip/v1/manifest",
            },
            "native_nats": {"subject": "aip.mounted"},
        }))
    );
    assert!(manifest.channels.is_empty());
    assert!(profile_binding_problems(&manifest).is_empty());
}

#[test]
fn the_builder_publishes_receivers_and_refuses_unbound_profiles() {
    let built = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .webhook("bookings")
        .build()
        .unwrap();
    let manifest = built.definition().manifest();
    assert_eq!(
        manifest.profiles,
        vec![
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::HTTP_WEBHOOK),
        ]
    );
    assert_eq!(discovery::webhook_receiver_ids(&manifest), vec!["bookings"]);
    assert!(profile_binding_problems(&manifest).is_empty());

    // A short name is the well-known profile, as in `#[connector(profiles = [...])]` (an
    // author trial's `.profile("mcp")` was published as a custom profile named `mcp`).
    let short = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .profile("native_http")
        .profile("mcp")
        .build()
        .unwrap();
    assert_eq!(
        short.definition().manifest().profiles,
        vec![
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::MCP_COMPAT),
        ]
    );

    // A binding of an undeclared profile is refused by the builder, as `#[connector]` refuses
    // it at compile time (it used to pass here and fail only at `Host::build`).
    let tool_without_profile = ConnectorBuilder::new("tools")
        .capability::<named_tool>()
        .build()
        .expect_err("an MCP binding without the MCP profile is refused");
    assert_eq!(
        tool_without_profile,
        BuildError::BindingProfileUndeclared {
            capability: "cap:tools:named_tool".to_owned(),
            profile: ProfileId::from(profiles::MCP_COMPAT),
        }
    );
    assert!(
        tool_without_profile
            .to_string()
            .contains(".profile(\"aip.mcp.compat.v1\")"),
        "{tool_without_profile}"
    );
    ConnectorBuilder::new("tools")
        .capability::<named_tool>()
        .profile("native_http")
        .profile("mcp")
        .build()
        .expect("declared, the binding is accepted");

    let unbound = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .profile(profiles::NATIVE_HTTP)
        .profile(profiles::A2A_COMPAT)
        .compatibility(json!({"a2a": {"agent_card": "/.well-known/agent.json"}}))
        .build()
        .expect_err("A2A without its JSON-RPC path is refused");
    assert_eq!(
        unbound,
        BuildError::ProfileUnbound {
            profile: ProfileId::from(profiles::A2A_COMPAT),
            message: "profile `aip.a2a.compat.v1` is advertised but `compatibility` has no string at `/a2a/jsonrpc`".to_owned(),
        }
    );
    assert!(
        unbound
            .to_string()
            .ends_with("(rule `discovery.profile_bindings`)"),
        "{unbound}"
    );

    let no_receiver = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .profile(profiles::HTTP_WEBHOOK)
        .build()
        .expect_err("the webhook profile without a receiver is refused");
    assert!(
        matches!(&no_receiver, BuildError::ProfileUnbound { profile, .. } if profile.as_str() == profiles::HTTP_WEBHOOK),
        "{no_receiver:?}"
    );

    let not_an_object = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .compatibility(json!("tools"))
        .build()
        .err();
    assert_eq!(not_an_object, Some(BuildError::CompatibilityNotObject));

    let odd_native = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .compatibility(json!({"native_http": "/aip"}))
        .build()
        .expect_err("a native_http entry that is not an object is refused");
    assert!(
        matches!(&odd_native, BuildError::ProfileUnbound { profile, .. } if profile.as_str() == profiles::NATIVE_HTTP),
        "{odd_native:?}"
    );

    let with_channel = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .profile(profiles::NATIVE_HTTP)
        .profile(profiles::HTTP_WEBHOOK)
        .channel(json!({"id": "status", "kind": "webhook", "path": "/webhooks/status"}))
        .build()
        .expect("a declared channel binds the webhook profile");
    assert_eq!(
        with_channel.definition().manifest().channels,
        vec![json!({"id": "status", "kind": "webhook", "path": "/webhooks/status"})]
    );

    let clash = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .webhook("bookings")
        .channel(json!({"name": "bookings"}))
        .build()
        .err();
    assert_eq!(
        clash,
        Some(BuildError::InvalidChannel {
            code: discovery::MANIFEST_CHANNEL_DUPLICATE.to_owned(),
            path: "/channels/1".to_owned(),
            message: "channel id or name is duplicated".to_owned(),
        }),
        "a channel's name shares the namespace of the receivers' ids"
    );
    for anonymous in [
        json!("sms"),
        json!({"id": ""}),
        json!({"id": 7, "name": "sms"}),
    ] {
        let refused = ConnectorBuilder::new("tools")
            .capability::<echo>()
            .channel(anonymous.clone())
            .build()
            .expect_err("a channel without an identity is refused");
        assert_eq!(
            refused.to_string(),
            "channel must declare a non-empty id or name at /channels/0 (rule `manifest.channel.identifier_missing`)",
            "{anonymous}"
        );
    }

    for ids in [&[" "][..], &["bookings", "bookings"][..]] {
        let mut builder = ConnectorBuilder::new("tools").capability::<echo>();
        for id in ids {
            builder = builder.webhook(*id);
        }
        assert!(
            matches!(builder.build(), Err(BuildError::WebhookReceiver(_))),
            "{ids:?}"
        );
    }

    // Found by an author trial: blank and repeated profiles were accepted, the first failing
    // only in conformance (`discovery.profile_set`), the second only at `Host::build`.
    for profiles in [
        &[""][..],
        &[" "][..],
        &["aip.native.http.v1", "aip.native.http.v1"][..],
    ] {
        let mut builder = ConnectorBuilder::new("tools").capability::<echo>();
        for profile in profiles {
            builder = builder.profile(*profile);
        }
        let refused = builder.build().expect_err("refused");
        assert!(
            matches!(&refused, BuildError::InvalidProfile(p) if p == profiles[profiles.len() - 1]),
            "{profiles:?}: {refused}"
        );
    }
}

#[capability(id = "cap:tools:echo", risk = low, side_effects = [read], data(sensitivity = public))]
async fn echo() -> Result<(), ConnectorFailure> {
    Ok(())
}

/// The manifest validates against upstream's published schema, channels included.
#[test]
fn the_manifest_with_channels_validates_against_upstream_schema() {
    let Some(schema) = upstream_schema("manifest.schema.json") else {
        return;
    };
    for manifest in [
        Calendar.definition().manifest(),
        Support.definition().manifest(),
    ] {
        assert_valid_against(&schema, &serde_json::to_value(manifest).unwrap());
    }
}

#[derive(Deserialize, JsonSchema)]
struct Comment {
    /// The comment's text.
    body: String,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    comment_id: String,
}

fn posted(comment: &Comment, key: &IdempotencyKey) -> Posted {
    Posted {
        comment_id: format!("c-{}-{}", comment.body.len(), key.for_provider()),
    }
}

/// Profiles by their short names, and a write that only adds, told to MCP clients so.
struct Reviews;

#[connector(id = "reviews", profiles = [native_http, mcp])]
impl Reviews {
    /// Comment on a pull request.
    #[capability(
        risk = low,
        side_effects = [write],
        data(sensitivity = internal),
        bindings(mcp(tool_name = "comment", destructive = false)),
    )]
    async fn comment(
        &self,
        comment: Comment,
        key: IdempotencyKey,
    ) -> Result<Posted, ConnectorFailure> {
        Ok(posted(&comment, &key))
    }

    /// Edit a comment: a write that changes what exists.
    #[capability(risk = low, side_effects = [write], data(sensitivity = internal))]
    async fn edit(
        &self,
        comment: Comment,
        key: IdempotencyKey,
    ) -> Result<Posted, ConnectorFailure> {
        Ok(posted(&comment, &key))
    }
}

#[test]
fn profiles_by_short_name_and_an_additive_write_reach_the_manifest_and_mcp() {
    let definition = Reviews.definition().clone();
    let manifest = definition.manifest();
    assert_eq!(
        manifest.profiles,
        vec![
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::MCP_COMPAT)
        ]
    );
    let comment = manifest
        .capabilities
        .iter()
        .find(|c| c.id.as_str() == "cap:reviews:comment")
        .unwrap();
    let binding = serde_json::to_value(&comment.bindings).unwrap();
    assert_eq!(
        binding,
        json!([{ "profile": "aip.mcp.compat.v1", "tool_name": "comment", "destructive": false }])
    );
    if let Some(schema) = upstream_schema("manifest.schema.json") {
        assert_valid_against(&schema, &serde_json::to_value(&manifest).unwrap());
    }

    let host = aip_connector::host::Host::builder()
        .connector(Reviews)
        .build()
        .unwrap();
    let projection = aip_connector::serve::mcp::McpProjection::new(host).unwrap();
    let hint = |name: &str| {
        projection
            .tool(name)
            .and_then(|tool| tool.annotations.as_ref())
            .and_then(|a| a.destructive_hint)
    };
    assert_eq!(hint("comment"), Some(false));
    let edit = projection.tool_name("cap:reviews:edit").unwrap().to_owned();
    assert_eq!(hint(&edit), Some(true));
}

/// A free capability with an MCP tool name, for a connector that must declare the MCP profile.
#[capability(
    id = "cap:tools:named_tool",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
    bindings(mcp(tool_name = "named")),
)]
async fn named_tool() -> Result<(), ConnectorFailure> {
    Ok(())
}
