//! Manifest admission against `aip-model.md` §7.4: one failing manifest per upstream check, the
//! phase order, the report format, this SDK's phase F, and hostile schemas.
#![cfg(feature = "schema-compiler")]

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use aip_connector_core::admission::{
    AdmissionPolicy, AdmissionReport, AdmittedManifest, ImplementationSupportMap, admit_manifest,
    codes,
};
use aip_connector_core::model::{CapabilityImplementationSupport, Manifest};
use aip_connector_core::rules::codes as rule_codes;
use aip_connector_core::{CapabilityId, Issue, ProfileId};
use serde_json::{Value, json};

const HTTP: &str = "aip.native.http.v1";
const MCP: &str = "aip.mcp.compat.v1";

/// Generous bound for work that must not hang (debug build, 2 shared cores).
const BOUNDED: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A read-only capability whose contract satisfies every upstream check and every SDK rule.
fn read_capability(id: &str) -> Value {
    json!({
        "id": id,
        "name": format!("Read {id}"),
        "kind": "tool",
        "input_schema": {
            "type": "object",
            "properties": { "id": { "type": "string" } },
            "required": ["id"]
        },
        "output_schema": { "type": "object" },
        "risk": "low",
        "contract": {
            "side_effects": ["read"],
            "idempotency": {
                "requirement": "optional",
                "collision_behavior": "return_original_result",
                "key_scope": "tenant"
            },
            "execution": {
                "supports_sync": true,
                "supports_async": false,
                "supports_streaming": false,
                "supports_cancel": false,
                "supports_retry": false,
                "expected_completion": "sync",
                "retry_safety": "safe"
            },
            "data": { "sensitivity": "internal", "contains_pii": false, "redaction_required": false }
        }
    })
}

/// A manifest speaking the native HTTP profile with `capabilities`.
fn manifest_json(capabilities: Vec<Value>) -> Value {
    json!({
        "manifest_version": "aip-manifest/v1",
        "agent": { "id": "agent:test", "kind": "service" },
        "capabilities": capabilities,
        "profiles": [HTTP]
    })
}

fn parse(value: Value) -> Manifest {
    serde_json::from_value(value).expect("fixture is a wire-valid manifest")
}

fn no_claims() -> ImplementationSupportMap {
    ImplementationSupportMap::new()
}

/// Every flag set: an implementation that supports whatever a contract can claim.
fn full_support() -> CapabilityImplementationSupport {
    CapabilityImplementationSupport {
        invocation: true,
        cancellation: true,
        streaming: true,
        retry: true,
        transaction: true,
        reconciliation: true,
        compensation: true,
        approval: true,
        credentials: true,
    }
}

fn claims(entries: &[(&str, CapabilityImplementationSupport)]) -> ImplementationSupportMap {
    entries
        .iter()
        .map(|(id, support)| (CapabilityId::from(*id), *support))
        .collect()
}

/// The issues of a manifest that admission must reject.
fn rejected(
    value: Value,
    policy: &AdmissionPolicy,
    support: &ImplementationSupportMap,
) -> Vec<Issue> {
    admit_manifest(&parse(value), policy, support)
        .expect_err("admission must fail")
        .issues
}

/// The issues under upstream's default policy with no claims.
fn upstream_issues(value: Value) -> Vec<Issue> {
    rejected(value, &AdmissionPolicy::upstream(), &no_claims())
}

fn admitted(
    value: Value,
    policy: &AdmissionPolicy,
    support: &ImplementationSupportMap,
) -> AdmittedManifest {
    match admit_manifest(&parse(value), policy, support) {
        Ok(admitted) => admitted,
        Err(report) => panic!("admission must succeed, got: {report}"),
    }
}

fn issue(code: &str, path: &str, message: &str) -> Issue {
    Issue::new(code, path, message)
}

fn cap(id: &str) -> CapabilityId {
    CapabilityId::from(id)
}

fn profile(id: &str) -> ProfileId {
    ProfileId::from(id)
}

fn codes_of(issues: &[Issue]) -> Vec<&str> {
    issues.iter().map(|issue| issue.code.as_str()).collect()
}

/// `levels` values on the root-to-leaf path, built without recursion: `{"not": {"not": … true}}`.
fn nested_schema(levels: usize) -> Value {
    let mut schema = Value::Bool(true);
    for _ in 1..levels {
        let mut wrapper = serde_json::Map::new();
        wrapper.insert("not".to_owned(), schema);
        schema = Value::Object(wrapper);
    }
    schema
}

/// Takes a value apart without recursion; serde_json's `Drop` recurses once per level.
fn dismantle(value: Value) {
    let mut pending = vec![value];
    while let Some(mut value) = pending.pop() {
        match &mut value {
            Value::Array(items) => pending.append(items),
            Value::Object(map) => pending.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase A: structure (checks 1–10)
// ---------------------------------------------------------------------------------------------

#[test]
fn check_01_blank_manifest_version() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["manifest_version"] = json!("  ");
    assert_eq!(
        upstream_issues(manifest),
        [issue(
            codes::MANIFEST_VERSION_EMPTY,
            "/manifest_version",
            "manifest_version must not be empty"
        )]
    );
}

#[test]
fn check_02_no_profiles() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["profiles"] = json!([]);
    assert_eq!(
        upstream_issues(manifest),
        [issue(
            codes::MANIFEST_PROFILES_EMPTY,
            "/profiles",
            "at least one profile is required"
        )]
    );
}

#[test]
fn check_03_duplicate_profile_once_per_repeat() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["profiles"] = json!([HTTP, MCP, HTTP, HTTP]);
    let repeat = issue(
        codes::MANIFEST_PROFILE_DUPLICATE,
        "/profiles",
        "duplicate identifier `aip.native.http.v1`",
    );
    assert_eq!(upstream_issues(manifest), [repeat.clone(), repeat]);
}

#[test]
fn check_04_duplicate_capability_id() {
    let manifest = manifest_json(vec![
        read_capability("cap:a"),
        read_capability("cap:b"),
        read_capability("cap:a"),
    ]);
    assert_eq!(
        upstream_issues(manifest),
        [issue(
            codes::MANIFEST_CAPABILITY_DUPLICATE,
            "/capabilities/2/id",
            "capability id is duplicated"
        )
        .with_capability(&cap("cap:a"))]
    );
}

#[test]
fn check_05_blank_capability_name() {
    let mut capability = read_capability("cap:a");
    capability["name"] = json!(" \t");
    assert_eq!(
        upstream_issues(manifest_json(vec![read_capability("cap:ok"), capability])),
        [issue(
            codes::MANIFEST_CAPABILITY_NAME_EMPTY,
            "/capabilities/1/name",
            "capability name must not be empty"
        )
        .with_capability(&cap("cap:a"))]
    );
}

#[test]
fn contract_invariants_follow_checks_4_and_5_of_the_same_capability() {
    let mut second = read_capability("cap:a");
    second["name"] = json!("");
    second["contract"]["idempotency"]["ttl_ms"] = json!(0);
    let mut third = read_capability("cap:c");
    third["contract"]["execution"]["supports_sync"] = json!(false);
    let issues = upstream_issues(manifest_json(vec![read_capability("cap:a"), second, third]));
    assert_eq!(
        issues,
        [
            issue(
                codes::MANIFEST_CAPABILITY_DUPLICATE,
                "/capabilities/1/id",
                "capability id is duplicated"
            )
            .with_capability(&cap("cap:a")),
            issue(
                codes::MANIFEST_CAPABILITY_NAME_EMPTY,
                "/capabilities/1/name",
                "capability name must not be empty"
            )
            .with_capability(&cap("cap:a")),
            issue(
                rule_codes::CONTRACT_IDEMPOTENCY_INVALID_TTL,
                "/capabilities/1/contract/idempotency/ttl_ms",
                "idempotency TTL must be greater than zero"
            )
            .with_capability(&cap("cap:a")),
            issue(
                rule_codes::CONTRACT_EXECUTION_NO_COMPLETION_MODE,
                "/capabilities/2/contract/execution",
                "execution must support sync, async, or streaming"
            )
            .with_capability(&cap("cap:c")),
        ]
    );
}

#[test]
fn check_06_blank_resource_id_carries_its_capability() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["resources"] = json!([
        { "id": "res:1", "name": "one" },
        { "id": " ", "name": "blank", "capability_id": "cap:a" },
        { "id": "", "name": "empty" }
    ]);
    assert_eq!(
        upstream_issues(manifest),
        [
            issue(
                codes::MANIFEST_RESOURCE_ID_EMPTY,
                "/resources/1/id",
                "resource id must be non-empty and unique"
            )
            .with_capability(&cap("cap:a")),
            issue(
                codes::MANIFEST_RESOURCE_ID_EMPTY,
                "/resources/2/id",
                "resource id must be non-empty and unique"
            ),
        ]
    );
}

#[test]
fn check_07_duplicate_resource_id() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["resources"] = json!([
        { "id": "res:1", "name": "one" },
        { "id": "res:1", "name": "again", "capability_id": "cap:a" }
    ]);
    assert_eq!(
        upstream_issues(manifest),
        [issue(
            codes::MANIFEST_RESOURCE_DUPLICATE,
            "/resources/1/id",
            "resource id must be non-empty and unique"
        )
        .with_capability(&cap("cap:a"))]
    );
}

#[test]
fn check_08_resource_names_undeclared_capability() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["resources"] = json!([
        { "id": "res:1", "name": "one", "capability_id": "cap:a" },
        { "id": "res:2", "name": "two", "capability_id": "cap:missing" }
    ]);
    assert_eq!(
        upstream_issues(manifest),
        [issue(
            codes::MANIFEST_RESOURCE_CAPABILITY_MISSING,
            "/resources/1/capability_id",
            "resource references an undeclared capability"
        )
        .with_capability(&cap("cap:missing"))]
    );
}

#[test]
fn check_09_channel_without_identity() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["channels"] = json!([
        { "id": "chan:ok" },
        { "name": "named" },
        "not an object",
        { "id": 7, "name": "name is not consulted when id exists" },
        { "id": "  " },
        { "name": null },
        {}
    ]);
    let missing = |k: usize| {
        issue(
            codes::MANIFEST_CHANNEL_IDENTIFIER_MISSING,
            &format!("/channels/{k}"),
            "channel must declare a non-empty id or name",
        )
    };
    assert_eq!(
        upstream_issues(manifest),
        [missing(2), missing(3), missing(4), missing(5), missing(6)]
    );
}

#[test]
fn check_10_channel_identity_repeated_across_id_and_name() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["channels"] =
        json!([{ "id": "support" }, { "name": "sales" }, { "name": "support" }, { "id": "sales" }]);
    let duplicate = |k: usize| {
        issue(
            codes::MANIFEST_CHANNEL_DUPLICATE,
            &format!("/channels/{k}"),
            "channel id or name is duplicated",
        )
    };
    assert_eq!(upstream_issues(manifest), [duplicate(2), duplicate(3)]);
}

// ---------------------------------------------------------------------------------------------
// Phase B: schemas (checks 11–13)
// ---------------------------------------------------------------------------------------------

#[test]
fn check_11_invalid_root_skips_the_ref_scan_but_is_still_compiled() {
    let mut capability = read_capability("cap:a");
    capability["input_schema"] = json!([{ "$ref": "https://example.com/never-scanned.json" }]);
    let issues = upstream_issues(manifest_json(vec![capability]));
    assert_eq!(
        codes_of(&issues),
        [codes::SCHEMA_INVALID_ROOT, codes::SCHEMA_COMPILE_FAILED]
    );
    assert_eq!(
        issues[0],
        issue(
            codes::SCHEMA_INVALID_ROOT,
            "/capabilities/0/input_schema",
            "JSON Schema root must be an object or boolean"
        )
        .with_capability(&cap("cap:a"))
        .with_schema_pointer("")
    );
    assert_eq!(issues[1].path, "/capabilities/0/input_schema");
    assert_eq!(issues[1].schema_pointer.as_deref(), Some(""));
}

#[test]
fn boolean_schema_roots_are_admitted_upstream() {
    let mut capability = read_capability("cap:a");
    capability["input_schema"] = json!(true);
    capability["output_schema"] = json!(false);
    admitted(
        manifest_json(vec![capability]),
        &AdmissionPolicy::upstream(),
        &no_claims(),
    );
}

#[test]
fn check_12_remote_reference_forbidden_with_pointer_per_reference() {
    let mut capability = read_capability("cap:a");
    capability["output_schema"] = json!({
        "type": "object",
        "properties": {
            "local": { "$ref": "#/$defs/x" },
            "a/b": { "$ref": "https://example.com/a.json" }
        },
        "$defs": { "x": { "type": "string" }, "y": { "$ref": "other.json#/z" } }
    });
    let issues = upstream_issues(manifest_json(vec![read_capability("cap:ok"), capability]));
    let forbidden = |pointer: &str, reference: &str| {
        issue(
            codes::SCHEMA_REMOTE_REFERENCE_FORBIDDEN,
            "/capabilities/1/output_schema",
            &format!("non-fragment schema reference `{reference}` is forbidden"),
        )
        .with_capability(&cap("cap:a"))
        .with_schema_pointer(pointer)
    };
    assert_eq!(
        issues[..2],
        [
            forbidden("/properties/a~1b/$ref", "https://example.com/a.json"),
            forbidden("/$defs/y/$ref", "other.json#/z"),
        ]
    );
    // Unresolvable without retrieval, so compilation fails too (phase B's second loop).
    assert_eq!(codes_of(&issues[2..]), [codes::SCHEMA_COMPILE_FAILED]);
}

#[test]
fn check_13_compile_failure_on_input_and_output() {
    let mut capability = read_capability("cap:a");
    capability["input_schema"] = json!({ "type": 12 });
    capability["output_schema"] = json!({ "minLength": "three" });
    let issues = upstream_issues(manifest_json(vec![capability]));
    assert_eq!(
        codes_of(&issues),
        [codes::SCHEMA_COMPILE_FAILED, codes::SCHEMA_COMPILE_FAILED]
    );
    for (found, path) in issues.iter().zip([
        "/capabilities/0/input_schema",
        "/capabilities/0/output_schema",
    ]) {
        assert_eq!(found.path, path);
        assert_eq!(found.capability_id, Some(cap("cap:a")));
        assert_eq!(found.schema_pointer.as_deref(), Some(""));
        assert_eq!(found.profile, None);
        assert!(
            found.message.starts_with("schema compile error: "),
            "{}",
            found.message
        );
    }
}

#[test]
fn schema_shape_issues_of_every_capability_precede_compile_issues() {
    let mut first = read_capability("cap:a");
    first["input_schema"] = json!({ "type": 12 });
    let mut second = read_capability("cap:b");
    second["input_schema"] = json!("not a schema");
    let issues = upstream_issues(manifest_json(vec![first, second]));
    let located: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        located,
        [
            (codes::SCHEMA_INVALID_ROOT, "/capabilities/1/input_schema"),
            (codes::SCHEMA_COMPILE_FAILED, "/capabilities/0/input_schema"),
            (codes::SCHEMA_COMPILE_FAILED, "/capabilities/1/input_schema"),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Phase C: bindings (checks 15–17)
// ---------------------------------------------------------------------------------------------

#[test]
fn check_15_same_profile_bound_twice() {
    let mut capability = read_capability("cap:a");
    capability["bindings"] = json!([{ "profile": HTTP, "operation_id": "a" }, { "profile": HTTP }]);
    assert_eq!(
        upstream_issues(manifest_json(vec![capability])),
        [issue(
            codes::MANIFEST_BINDING_DUPLICATE,
            "/capabilities/0/bindings/1/profile",
            "one capability cannot declare the same profile binding twice"
        )
        .with_capability(&cap("cap:a"))
        .with_profile(&profile(HTTP))]
    );
}

#[test]
fn check_16_binding_profile_not_declared_by_the_manifest() {
    let mut capability = read_capability("cap:a");
    capability["bindings"] = json!([{ "profile": HTTP }, { "profile": MCP, "tool_name": "a" }]);
    assert_eq!(
        upstream_issues(manifest_json(vec![capability])),
        [issue(
            codes::MANIFEST_BINDING_PROFILE_UNDECLARED,
            "/capabilities/0/bindings/1/profile",
            "binding profile is not declared by the manifest"
        )
        .with_capability(&cap("cap:a"))
        .with_profile(&profile(MCP))]
    );
}

#[test]
fn check_17_binding_profile_outside_the_allowed_set() {
    let mut capability = read_capability("cap:a");
    capability["bindings"] = json!([{ "profile": HTTP }]);
    let mut manifest = manifest_json(vec![capability]);
    manifest["profiles"] = json!([HTTP, MCP]);
    let policy = AdmissionPolicy {
        allowed_binding_profiles: BTreeSet::from([profile(MCP)]),
        ..AdmissionPolicy::upstream()
    };
    assert_eq!(
        rejected(manifest.clone(), &policy, &no_claims()),
        [issue(
            codes::MANIFEST_BINDING_PROFILE_UNSUPPORTED,
            "/capabilities/0/bindings/0/profile",
            "runtime does not support this binding profile"
        )
        .with_capability(&cap("cap:a"))
        .with_profile(&profile(HTTP))]
    );
    // An empty set accepts the manifest's own profiles.
    admitted(manifest, &AdmissionPolicy::upstream(), &no_claims());
}

#[test]
fn binding_checks_15_to_17_apply_to_one_binding_in_order() {
    let mut capability = read_capability("cap:a");
    capability["bindings"] = json!([{ "profile": "aip.other.v1" }, { "profile": "aip.other.v1" }]);
    let policy = AdmissionPolicy {
        allowed_binding_profiles: BTreeSet::from([profile(HTTP)]),
        ..AdmissionPolicy::upstream()
    };
    let issues = rejected(manifest_json(vec![capability]), &policy, &no_claims());
    let located: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        located,
        [
            (
                codes::MANIFEST_BINDING_PROFILE_UNDECLARED,
                "/capabilities/0/bindings/0/profile"
            ),
            (
                codes::MANIFEST_BINDING_PROFILE_UNSUPPORTED,
                "/capabilities/0/bindings/0/profile"
            ),
            (
                codes::MANIFEST_BINDING_DUPLICATE,
                "/capabilities/0/bindings/1/profile"
            ),
            (
                codes::MANIFEST_BINDING_PROFILE_UNDECLARED,
                "/capabilities/0/bindings/1/profile"
            ),
            (
                codes::MANIFEST_BINDING_PROFILE_UNSUPPORTED,
                "/capabilities/0/bindings/1/profile"
            ),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Phase D: implementation claims (checks 18–27)
// ---------------------------------------------------------------------------------------------

fn claim_unsupported(index: usize, id: &str, operation: &str) -> Issue {
    issue(
        rule_codes::IMPLEMENTATION_CLAIM_UNSUPPORTED,
        &format!("/capabilities/{index}"),
        &format!("capability claims `{operation}` but its implementation does not support it"),
    )
    .with_capability(&cap(id))
}

#[test]
fn check_18_missing_claim_only_for_callable_capabilities_when_required() {
    let mut resource = read_capability("cap:doc");
    resource["kind"] = json!("resource");
    let manifest = manifest_json(vec![
        read_capability("cap:claimed"),
        resource,
        read_capability("cap:a"),
    ]);
    let policy = AdmissionPolicy {
        require_implementation_claims: true,
        ..AdmissionPolicy::upstream()
    };
    let support = claims(&[("cap:claimed", full_support())]);
    assert_eq!(
        rejected(manifest.clone(), &policy, &support),
        [issue(
            rule_codes::IMPLEMENTATION_MISSING,
            "/capabilities/2",
            "callable capability has no registered implementation claim"
        )
        .with_capability(&cap("cap:a"))]
    );
    // Without the requirement a missing claim skips every claim check.
    admitted(manifest, &AdmissionPolicy::upstream(), &support);
}

#[test]
fn check_19_invocation_not_implemented() {
    let support = CapabilityImplementationSupport {
        invocation: false,
        ..full_support()
    };
    let mut resource = read_capability("cap:doc");
    resource["kind"] = json!("resource");
    let manifest = manifest_json(vec![resource, read_capability("cap:a")]);
    // A resource is not callable, so check 19 does not apply to it.
    assert_eq!(
        rejected(
            manifest,
            &AdmissionPolicy::upstream(),
            &claims(&[("cap:doc", support), ("cap:a", support)])
        ),
        [claim_unsupported(1, "cap:a", "invocation")]
    );
}

/// A contract claiming exactly one operation, for checks 20–27.
fn claiming(operation: &str) -> Value {
    let mut capability = read_capability("cap:a");
    let contract = &mut capability["contract"];
    match operation {
        "cancellation" => contract["execution"]["supports_cancel"] = json!(true),
        "streaming" => contract["execution"]["supports_streaming"] = json!(true),
        "retry" => contract["execution"]["supports_retry"] = json!(true),
        "transaction" | "reconciliation" => {
            let modes = if operation == "transaction" {
                json!(["execute"])
            } else {
                json!(["execute", "reconcile"])
            };
            contract["transaction"] = json!({
                "supported_modes": modes,
                "requires_plan_before_commit": false,
                "dry_run_fidelity": "schema_only"
            });
        }
        "compensation" => {
            contract["compensation"] = json!({
                "mode": "supported",
                "compensation_capability_id": "cap:undo",
                "requires_approval": false
            });
        }
        "approval" => {
            contract["approval"] =
                json!({ "required": true, "approver_selector": { "type": "tenant_policy" } })
        }
        "credentials" => {
            contract["credentials"] = json!({ "required": true, "allow_oauth_refresh": false })
        }
        other => panic!("no fixture for {other}"),
    }
    capability
}

/// Full support except `operation`.
fn lacking(operation: &str) -> CapabilityImplementationSupport {
    let mut support = full_support();
    let flag = match operation {
        "cancellation" => &mut support.cancellation,
        "streaming" => &mut support.streaming,
        "retry" => &mut support.retry,
        "transaction" => &mut support.transaction,
        "reconciliation" => &mut support.reconciliation,
        "compensation" => &mut support.compensation,
        "approval" => &mut support.approval,
        "credentials" => &mut support.credentials,
        other => panic!("no flag {other}"),
    };
    *flag = false;
    support
}

#[test]
fn checks_20_to_27_each_claim_without_support() {
    let operations = [
        "cancellation",
        "streaming",
        "retry",
        "transaction",
        "reconciliation",
        "compensation",
        "approval",
        "credentials",
    ];
    for operation in operations {
        let manifest = manifest_json(vec![claiming(operation)]);
        assert_eq!(
            rejected(
                manifest.clone(),
                &AdmissionPolicy::upstream(),
                &claims(&[("cap:a", lacking(operation))])
            ),
            [claim_unsupported(0, "cap:a", operation)],
            "check for {operation}"
        );
        admitted(
            manifest,
            &AdmissionPolicy::upstream(),
            &claims(&[("cap:a", full_support())]),
        );
    }
}

#[test]
fn claim_issues_follow_upstream_order_and_resources_are_checked_too() {
    let mut resource = read_capability("cap:doc");
    resource["kind"] = json!("resource");
    resource["contract"]["execution"]["supports_cancel"] = json!(true);
    let mut everything = read_capability("cap:a");
    let contract = &mut everything["contract"];
    contract["execution"]["supports_cancel"] = json!(true);
    contract["execution"]["supports_streaming"] = json!(true);
    contract["execution"]["supports_retry"] = json!(true);
    contract["transaction"] = json!({
        "supported_modes": ["execute", "reconcile"],
        "requires_plan_before_commit": false,
        "dry_run_fidelity": "schema_only"
    });
    contract["compensation"] = json!({ "mode": "supported", "compensation_capability_id": "cap:undo", "requires_approval": false });
    contract["approval"] =
        json!({ "required": true, "approver_selector": { "type": "tenant_policy" } });
    contract["credentials"] = json!({ "required": true, "allow_oauth_refresh": false });
    let nothing = CapabilityImplementationSupport::default();
    let issues = rejected(
        manifest_json(vec![resource, everything]),
        &AdmissionPolicy::upstream(),
        &claims(&[("cap:doc", nothing), ("cap:a", nothing)]),
    );
    let mut expected = vec![claim_unsupported(0, "cap:doc", "cancellation")];
    expected.extend(
        [
            "invocation",
            "cancellation",
            "streaming",
            "retry",
            "transaction",
            "reconciliation",
            "compensation",
            "approval",
            "credentials",
        ]
        .map(|operation| claim_unsupported(1, "cap:a", operation)),
    );
    assert_eq!(issues, expected);
}

// ---------------------------------------------------------------------------------------------
// Phase E: projected names (check 28)
// ---------------------------------------------------------------------------------------------

#[test]
fn check_28_upstream_collision_case() {
    let mut first = read_capability("cap:a");
    first["bindings"] = json!([{ "profile": HTTP, "tool_name": "same name" }]);
    let mut second = read_capability("cap:b");
    second["bindings"] = json!([{ "profile": HTTP, "tool_name": "same_name" }]);
    assert_eq!(
        upstream_issues(manifest_json(vec![first, second])),
        [issue(
            codes::MANIFEST_PROFILE_NAME_COLLISION,
            "/capabilities/1/bindings",
            "projected identifier `same_name` collides with capability `cap:a`"
        )
        .with_capability(&cap("cap:b"))
        .with_profile(&profile(HTTP))]
    );
}

#[test]
fn check_28_later_insert_replaces_the_earlier_and_ids_are_the_fallback() {
    // No bindings under MCP: the raw name is the id, and `cap:x` / `cap_x` / `CAP x` all
    // normalise to `cap_x`.
    let mut manifest = manifest_json(vec![
        read_capability("cap:x"),
        read_capability("cap_x"),
        read_capability("CAP x"),
    ]);
    manifest["profiles"] = json!([MCP]);
    let collision = |index: usize, id: &str, earlier: &str| {
        issue(
            codes::MANIFEST_PROFILE_NAME_COLLISION,
            &format!("/capabilities/{index}/bindings"),
            &format!("projected identifier `cap_x` collides with capability `{earlier}`"),
        )
        .with_capability(&cap(id))
        .with_profile(&profile(MCP))
    };
    assert_eq!(
        upstream_issues(manifest),
        [
            collision(1, "cap_x", "cap:x"),
            collision(2, "CAP x", "cap_x")
        ]
    );
}

#[test]
fn check_28_reads_name_keys_in_order_and_falls_back_on_non_strings() {
    let mut by_operation_id = read_capability("cap:a");
    by_operation_id["bindings"] =
        json!([{ "profile": HTTP, "operation_id": "shared", "name": "ignored" }]);
    let mut non_string = read_capability("shared");
    // `tool_name` is present but not a string: the raw name is the capability id, `shared`.
    non_string["bindings"] = json!([{ "profile": HTTP, "tool_name": 3, "operation_id": "other" }]);
    let issues = upstream_issues(manifest_json(vec![by_operation_id, non_string]));
    assert_eq!(codes_of(&issues), [codes::MANIFEST_PROFILE_NAME_COLLISION]);
    assert_eq!(
        issues[0].message,
        "projected identifier `shared` collides with capability `cap:a`"
    );
}

// ---------------------------------------------------------------------------------------------
// A valid manifest and the admitted token
// ---------------------------------------------------------------------------------------------

/// Several capabilities using every contract section, valid under upstream checks and SDK rules.
fn several_capabilities() -> Value {
    let mut create = read_capability("cap:shop:order:create");
    create["name"] = json!("Create order");
    create["risk"] = json!("medium");
    create["bindings"] = json!([{ "profile": MCP, "tool_name": "create_order" }, { "profile": HTTP, "operation_id": "createOrder" }]);
    create["contract"] = json!({
        "side_effects": ["write", "external_network"],
        "idempotency": {
            "requirement": "required",
            "collision_behavior": "revalidate_input_hash",
            "key_scope": "tenant",
            "ttl_ms": 86_400_000
        },
        "execution": {
            "supports_sync": true,
            "supports_async": true,
            "supports_streaming": false,
            "supports_cancel": true,
            "supports_retry": true,
            "expected_completion": "any",
            "retry_safety": "safe_with_idempotency_key"
        },
        "data": { "sensitivity": "confidential", "contains_pii": true, "redaction_required": true },
        "credentials": { "required": true, "required_scopes": ["orders.write"], "allow_oauth_refresh": true },
        "sla": { "timeout_ms": 30_000, "async_expected": false },
        "transaction": {
            "supported_modes": ["execute", "plan", "commit", "reconcile", "compensate"],
            "requires_plan_before_commit": true,
            "dry_run_fidelity": "schema_only"
        },
        "compensation": {
            "mode": "supported",
            "compensation_capability_id": "cap:shop:order:cancel",
            "compensation_window_ms": 3_600_000,
            // The cancel requires approval, so its undos must be gated.
            "requires_approval": true
        }
    });
    let mut cancel = read_capability("cap:shop:order:cancel");
    cancel["name"] = json!("Cancel order");
    cancel["risk"] = json!("high");
    cancel["contract"] = json!({
        "side_effects": ["delete"],
        "idempotency": { "requirement": "required", "collision_behavior": "return_original_result", "key_scope": "tenant" },
        "execution": {
            "supports_sync": true,
            "supports_async": false,
            "supports_streaming": false,
            "supports_cancel": false,
            "supports_retry": true,
            "expected_completion": "sync",
            "retry_safety": "safe_with_idempotency_key"
        },
        "data": { "sensitivity": "internal", "contains_pii": false, "redaction_required": false },
        "approval": {
            "required": true,
            "approver_selector": { "type": "role", "name": "order-admin" },
            "evidence_requirements": ["reason"],
            "rule": { "operator": "quorum", "required": 1, "rules": [{ "operator": "role", "name": "order-admin" }] }
        }
    });
    let mut watch = read_capability("cap:shop:order:watch");
    watch["name"] = json!("Watch order");
    watch["output_schema"] = Value::Null;
    watch["contract"]["execution"]["supports_streaming"] = json!(true);
    watch["contract"]["execution"]["expected_completion"] = json!("streaming");
    let mut catalogue = read_capability("cap:shop:catalogue");
    catalogue["kind"] = json!("resource");
    let mut manifest = manifest_json(vec![
        read_capability("cap:shop:order:get"),
        create,
        cancel,
        watch,
        catalogue,
    ]);
    manifest["profiles"] = json!([HTTP, MCP]);
    manifest["resources"] = json!([{ "id": "res:catalogue", "name": "Catalogue", "capability_id": "cap:shop:catalogue" }]);
    manifest["channels"] = json!([{ "id": "chan:orders" }, { "name": "support" }]);
    manifest
}

fn several_claims() -> ImplementationSupportMap {
    claims(&[
        (
            "cap:shop:order:get",
            CapabilityImplementationSupport::INVOCATION_ONLY,
        ),
        ("cap:shop:order:create", full_support()),
        ("cap:shop:order:cancel", full_support()),
        (
            "cap:shop:order:watch",
            CapabilityImplementationSupport {
                streaming: true,
                ..CapabilityImplementationSupport::INVOCATION_ONLY
            },
        ),
    ])
}

#[test]
fn several_capabilities_admit_under_strict_with_full_claims() {
    let value = several_capabilities();
    let admitted = admitted(value.clone(), &AdmissionPolicy::strict(), &several_claims());
    assert_eq!(admitted.manifest(), &parse(value.clone()));

    assert!(admitted.input_schema("cap:shop:order:create").is_some());
    assert!(admitted.output_schema("cap:shop:order:create").is_some());
    assert!(admitted.input_schema("cap:shop:order:watch").is_some());
    assert!(admitted.output_schema("cap:shop:order:watch").is_none());
    assert!(admitted.input_schema("cap:unknown").is_none());
    let input = admitted
        .input_schema("cap:shop:order:get")
        .expect("compiled");
    assert!(input.is_valid(&json!({ "id": "o-1" })));
    assert!(!input.is_valid(&json!({ "id": 1 })));

    assert_eq!(
        admitted.projected_name(MCP, "cap:shop:order:create"),
        Some("create_order")
    );
    assert_eq!(
        admitted.projected_name(HTTP, "cap:shop:order:create"),
        Some("createorder")
    );
    assert_eq!(
        admitted.projected_name(HTTP, "cap:shop:order:get"),
        Some("cap_shop_order_get")
    );
    assert_eq!(
        admitted.projected_name("aip.other.v1", "cap:shop:order:get"),
        None
    );
    assert_eq!(admitted.projected_name(HTTP, "cap:unknown"), None);
    let names = admitted.projected_names();
    assert_eq!(names.len(), 5 * 2);
    assert_eq!(
        names.get(&(profile(MCP), "create_order".to_owned())),
        Some(&cap("cap:shop:order:create"))
    );

    assert_eq!(admitted.into_manifest(), parse(value));
}

#[test]
fn strict_requires_a_claim_for_every_callable_capability() {
    let mut support = several_claims();
    support.remove("cap:shop:order:watch");
    let issues = rejected(several_capabilities(), &AdmissionPolicy::strict(), &support);
    assert_eq!(
        issues,
        [issue(
            rule_codes::IMPLEMENTATION_MISSING,
            "/capabilities/3",
            "callable capability has no registered implementation claim"
        )
        .with_capability(&cap("cap:shop:order:watch"))]
    );
}

#[test]
fn policies_match_upstream_defaults() {
    let upstream = AdmissionPolicy::upstream();
    assert!(!upstream.allow_remote_schema_references);
    assert!(!upstream.require_implementation_claims);
    assert!(upstream.allowed_binding_profiles.is_empty());
    assert!(!upstream.sdk_rules);
    assert_eq!(
        AdmissionPolicy::default(),
        AdmissionPolicy {
            sdk_rules: true,
            ..upstream.clone()
        }
    );
    assert_eq!(
        AdmissionPolicy::strict(),
        AdmissionPolicy {
            require_implementation_claims: true,
            sdk_rules: true,
            ..upstream
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Ordering and the report
// ---------------------------------------------------------------------------------------------

/// One issue from each of phases A–F, with manifest order opposite to phase order.
fn one_issue_per_phase() -> Value {
    let mut names_collide = read_capability("cap:a");
    names_collide["bindings"] = json!([{ "profile": HTTP, "tool_name": "shared" }]);
    let mut unclaimed = read_capability("cap:b");
    unclaimed["bindings"] = json!([{ "profile": HTTP, "tool_name": "shared" }]);
    let mut undeclared_binding = read_capability("cap:c");
    undeclared_binding["bindings"] = json!([{ "profile": MCP }]);
    let mut bad_schema = read_capability("cap:d");
    bad_schema["input_schema"] = json!({ "type": "no such type" });
    let mut blank_name = read_capability("cap:e");
    blank_name["name"] = json!("");
    blank_name["contract"]["side_effects"] = json!([]);
    manifest_json(vec![
        names_collide,
        unclaimed,
        undeclared_binding,
        bad_schema,
        blank_name,
    ])
}

#[test]
fn issues_are_ordered_by_phase_then_manifest_order() {
    let support = claims(&[
        ("cap:a", CapabilityImplementationSupport::INVOCATION_ONLY),
        ("cap:c", CapabilityImplementationSupport::INVOCATION_ONLY),
        ("cap:d", CapabilityImplementationSupport::INVOCATION_ONLY),
        ("cap:e", CapabilityImplementationSupport::INVOCATION_ONLY),
    ]);
    let issues = rejected(one_issue_per_phase(), &AdmissionPolicy::strict(), &support);
    let located: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        located,
        [
            (
                codes::MANIFEST_CAPABILITY_NAME_EMPTY,
                "/capabilities/4/name"
            ),
            (codes::SCHEMA_COMPILE_FAILED, "/capabilities/3/input_schema"),
            (
                codes::MANIFEST_BINDING_PROFILE_UNDECLARED,
                "/capabilities/2/bindings/0/profile"
            ),
            (rule_codes::IMPLEMENTATION_MISSING, "/capabilities/1"),
            (
                codes::MANIFEST_PROFILE_NAME_COLLISION,
                "/capabilities/1/bindings"
            ),
            (
                rule_codes::CONTRACT_SIDE_EFFECT_EMPTY,
                "/capabilities/4/contract/side_effects"
            ),
        ]
    );
    // Same input, same report.
    assert_eq!(
        rejected(one_issue_per_phase(), &AdmissionPolicy::strict(), &support),
        issues
    );
}

#[test]
fn report_display_joins_issues_and_is_an_error() {
    let mut manifest = manifest_json(vec![read_capability("cap:a")]);
    manifest["manifest_version"] = json!("");
    manifest["profiles"] = json!([]);
    let report = admit_manifest(&parse(manifest), &AdmissionPolicy::upstream(), &no_claims())
        .expect_err("rejected");
    assert_eq!(
        report.to_string(),
        "manifest.version.empty at /manifest_version: manifest_version must not be empty; \
         manifest.profiles.empty at /profiles: at least one profile is required"
    );
    assert_eq!(
        report.codes(),
        [
            codes::MANIFEST_VERSION_EMPTY,
            codes::MANIFEST_PROFILES_EMPTY
        ]
    );
    let as_error: Box<dyn std::error::Error> = Box::new(report.clone());
    assert_eq!(as_error.to_string(), report.to_string());
    let wire = serde_json::to_value(&report).expect("serializable");
    assert_eq!(
        wire,
        json!({ "issues": [
            { "code": "manifest.version.empty", "path": "/manifest_version", "message": "manifest_version must not be empty" },
            { "code": "manifest.profiles.empty", "path": "/profiles", "message": "at least one profile is required" }
        ] })
    );
    assert_eq!(
        serde_json::from_value::<AdmissionReport>(wire).expect("round trip"),
        report
    );
}

// ---------------------------------------------------------------------------------------------
// Phase F: SDK rules
// ---------------------------------------------------------------------------------------------

#[test]
fn sdk_rules_run_only_when_enabled() {
    let mut boolean_input = read_capability("cap:a");
    boolean_input["input_schema"] = json!(true);
    let mut no_effects = read_capability("cap:b");
    no_effects["contract"]["side_effects"] = json!([]);
    let manifest = manifest_json(vec![boolean_input, no_effects]);

    admitted(manifest.clone(), &AdmissionPolicy::upstream(), &no_claims());
    let issues = rejected(manifest, &AdmissionPolicy::default(), &no_claims());
    let located: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        located,
        [
            (
                rule_codes::CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
                "/capabilities/0/input_schema"
            ),
            (
                rule_codes::CONTRACT_SIDE_EFFECT_EMPTY,
                "/capabilities/1/contract/side_effects"
            ),
        ]
    );
}

#[test]
fn sdk_rules_check_consistency_lints_and_compensation_targets() {
    let mut inconsistent = read_capability("cap:a");
    inconsistent["contract"]["execution"]["expected_completion"] = json!("async");
    let mut unredacted = read_capability("cap:b");
    unredacted["contract"]["data"]["contains_pii"] = json!(true);
    let mut dangling = claiming("compensation");
    dangling["id"] = json!("cap:c");
    dangling["contract"]["transaction"] = json!({
        "supported_modes": ["execute", "compensate"],
        "requires_plan_before_commit": false,
        "dry_run_fidelity": "schema_only"
    });
    let issues = rejected(
        manifest_json(vec![inconsistent, unredacted, dangling]),
        &AdmissionPolicy::default(),
        &no_claims(),
    );
    let located: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        located,
        [
            (
                rule_codes::CONTRACT_EXECUTION_EXPECTED_COMPLETION_UNSUPPORTED,
                "/capabilities/0/contract/execution/expected_completion"
            ),
            (
                rule_codes::CONTRACT_LINT_DATA_WITHOUT_REDACTION,
                "/capabilities/1/contract/data/redaction_required"
            ),
            (
                rule_codes::MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN,
                "/capabilities/2/contract/compensation/compensation_capability_id"
            ),
        ]
    );
}

#[test]
fn sdk_rules_refuse_a_capability_that_compensates_itself() {
    let mut itself = claiming("compensation");
    itself["contract"]["compensation"]["compensation_capability_id"] = json!("cap:a");
    itself["contract"]["transaction"] = json!({
        "supported_modes": ["execute", "compensate"],
        "requires_plan_before_commit": false,
        "dry_run_fidelity": "schema_only"
    });
    let manifest = manifest_json(vec![itself]);
    let support = claims(&[("cap:a", full_support())]);

    // Upstream admits it: the target exists, and upstream has no such rule.
    admitted(manifest.clone(), &AdmissionPolicy::upstream(), &support);
    for policy in [AdmissionPolicy::default(), AdmissionPolicy::strict()] {
        let issues = rejected(manifest.clone(), &policy, &support);
        assert_eq!(
            issues,
            [issue(
                rule_codes::CONTRACT_COMPENSATION_SELF_REFERENCE,
                "/capabilities/0/contract/compensation/compensation_capability_id",
                "compensation capability `cap:a` is this capability itself: a `compensate` would run its own handler again instead of undoing its effect. Name a separate capability that undoes this one's effect, one whose handler takes `Compensation`, or declare compensation `not_required` and remove the `compensate` mode."
            )
            .with_capability(&cap("cap:a"))]
        );
    }

    // Naming another capability of the manifest is admitted.
    let mut other = manifest;
    other["capabilities"][0]["contract"]["compensation"]["compensation_capability_id"] =
        json!("cap:undo");
    other["capabilities"]
        .as_array_mut()
        .expect("capabilities")
        .push(read_capability("cap:undo"));
    let support = claims(&[("cap:a", full_support()), ("cap:undo", full_support())]);
    admitted(other, &AdmissionPolicy::strict(), &support);
}

#[test]
fn a_published_waiver_suppresses_its_lint() {
    let mut unredacted = read_capability("cap:b");
    unredacted["contract"]["data"]["contains_pii"] = json!(true);
    let mut manifest = manifest_json(vec![unredacted]);
    let lint = rule_codes::CONTRACT_LINT_DATA_WITHOUT_REDACTION;
    assert_eq!(
        codes_of(&rejected(
            manifest.clone(),
            &AdmissionPolicy::default(),
            &no_claims()
        )),
        [lint]
    );

    manifest["governance"] = json!({ "contract_waivers": [
        { "capability_id": "cap:b", "code": lint, "reason": "values are opaque hashes" }
    ] });
    admitted(manifest.clone(), &AdmissionPolicy::default(), &no_claims());

    // A waiver without a reason is refused and waives nothing.
    manifest["governance"]["contract_waivers"][0]["reason"] = json!(" ");
    assert_eq!(
        codes_of(&rejected(
            manifest,
            &AdmissionPolicy::default(),
            &no_claims()
        )),
        [rule_codes::MANIFEST_WAIVER_REASON_EMPTY, lint]
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile schemas: bounded time, no stack overflow
// ---------------------------------------------------------------------------------------------

/// Admits a manifest whose only capability has `input_schema`, timing it; the schema is taken
/// apart without recursion afterwards.
fn admit_with_input_schema(
    input_schema: Value,
    policy: &AdmissionPolicy,
) -> (Result<AdmittedManifest, AdmissionReport>, Duration) {
    let mut manifest = parse(manifest_json(vec![read_capability("cap:a")]));
    manifest.capabilities[0].input_schema = input_schema;
    let started = Instant::now();
    let outcome = admit_manifest(&manifest, policy, &no_claims());
    let elapsed = started.elapsed();
    dismantle(std::mem::take(&mut manifest.capabilities[0].input_schema));
    (outcome, elapsed)
}

fn only_compile_failure(
    outcome: Result<AdmittedManifest, AdmissionReport>,
    elapsed: Duration,
) -> Issue {
    assert!(elapsed < BOUNDED, "took {elapsed:?}");
    let issues = outcome.expect_err("rejected").issues;
    assert_eq!(
        codes_of(&issues),
        [codes::SCHEMA_COMPILE_FAILED],
        "{issues:?}"
    );
    issues.into_iter().next().expect("one issue")
}

#[test]
fn schema_129_levels_deep_is_rejected_with_the_limit_text() {
    let (outcome, elapsed) =
        admit_with_input_schema(nested_schema(128), &AdmissionPolicy::default());
    assert!(outcome.is_ok(), "128 levels are within the limit");
    let (outcome, elapsed_deep) =
        admit_with_input_schema(nested_schema(129), &AdmissionPolicy::default());
    let found = only_compile_failure(outcome, elapsed_deep.max(elapsed));
    assert_eq!(
        found,
        issue(
            codes::SCHEMA_COMPILE_FAILED,
            "/capabilities/0/input_schema",
            "schema exceeds the 128-level nesting limit"
        )
        .with_capability(&cap("cap:a"))
        .with_schema_pointer("")
    );
}

#[test]
fn schema_hundreds_of_thousands_of_levels_deep_neither_hangs_nor_overflows() {
    let (outcome, elapsed) =
        admit_with_input_schema(nested_schema(300_000), &AdmissionPolicy::default());
    let found = only_compile_failure(outcome, elapsed);
    assert_eq!(found.message, "schema exceeds the 128-level nesting limit");
}

#[test]
fn schema_with_100_001_nodes_is_rejected_with_the_limit_text() {
    // Root object + `enum` array + 99 999 numbers = 100 001 values.
    let schema = json!({ "enum": (0..99_999).collect::<Vec<u32>>() });
    let (outcome, elapsed) = admit_with_input_schema(schema, &AdmissionPolicy::default());
    let found = only_compile_failure(outcome, elapsed);
    assert_eq!(found.message, "schema exceeds the 100000-node safety limit");
    assert_eq!(found.path, "/capabilities/0/input_schema");
}

#[test]
fn schema_with_too_much_text_is_rejected_with_the_limit_text() {
    let schema = json!({ "type": "object", "description": "x".repeat(8 * 1024 * 1024) });
    let (outcome, elapsed) = admit_with_input_schema(schema, &AdmissionPolicy::default());
    let found = only_compile_failure(outcome, elapsed);
    assert_eq!(
        found.message,
        "schema exceeds the 8388608-byte text safety limit"
    );
}

#[test]
fn self_referential_schemas_compile_and_validate_in_bounded_time() {
    // A bare `$ref` cycle constrains nothing, and a recursive tree schema is legitimate: both
    // compile (no issue), and validating with the admitted schema terminates.
    let cycle = json!({ "$defs": { "a": { "$ref": "#/$defs/b" }, "b": { "$ref": "#/$defs/a" } }, "$ref": "#/$defs/a" });
    let (outcome, elapsed) = admit_with_input_schema(cycle, &AdmissionPolicy::default());
    assert!(elapsed < BOUNDED, "took {elapsed:?}");
    let admitted = outcome.expect("a $ref cycle compiles");
    assert!(
        admitted
            .input_schema("cap:a")
            .expect("compiled")
            .is_valid(&json!({ "x": 1 }))
    );

    let tree = json!({
        "type": "object",
        "properties": { "children": { "type": "array", "items": { "$ref": "#" } } }
    });
    let (outcome, elapsed) = admit_with_input_schema(tree, &AdmissionPolicy::default());
    assert!(elapsed < BOUNDED, "took {elapsed:?}");
    let admitted = outcome.expect("a recursive schema compiles");
    let compiled = admitted.input_schema("cap:a").expect("compiled");
    assert!(compiled.is_valid(&json!({ "children": [{ "children": [] }] })));
    assert!(!compiled.is_valid(&json!({ "children": [{ "children": 3 }] })));
}

// ---------------------------------------------------------------------------------------------
// Remote references
// ---------------------------------------------------------------------------------------------

#[test]
fn remote_reference_is_rejected_unless_allowed_and_never_fetched() {
    // A listener the compiler would reach if it tried to fetch the reference.
    let listener = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("address").port();
    let reference = format!("http://127.0.0.1:{port}/schema.json");
    let schema = json!({ "type": "object", "properties": { "x": { "$ref": reference } } });

    let (forbidden, _) = admit_with_input_schema(schema.clone(), &AdmissionPolicy::default());
    let issues = forbidden.expect_err("rejected").issues;
    assert_eq!(
        codes_of(&issues),
        [
            codes::SCHEMA_REMOTE_REFERENCE_FORBIDDEN,
            codes::SCHEMA_COMPILE_FAILED
        ]
    );
    assert_eq!(
        issues[0].schema_pointer.as_deref(),
        Some("/properties/x/$ref")
    );
    assert_eq!(
        issues[0].message,
        format!("non-fragment schema reference `{reference}` is forbidden")
    );

    // Allowed by policy, the reference still cannot be fetched: compilation fails instead.
    let allowing = AdmissionPolicy {
        allow_remote_schema_references: true,
        ..AdmissionPolicy::default()
    };
    let (allowed, elapsed) = admit_with_input_schema(schema, &allowing);
    let found = only_compile_failure(allowed, elapsed);
    assert!(
        found.message.starts_with("schema compile error: "),
        "{}",
        found.message
    );
    assert!(found.message.contains(&reference), "{}", found.message);
    match listener.accept() {
        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the compiler connected to the referenced host: {other:?}"),
    }
}

#[test]
fn allowed_absolute_reference_into_the_same_document_resolves_locally() {
    // `$id` makes the absolute URI name this very document: nothing outside it is needed.
    let schema = json!({
        "$id": "https://schemas.example.com/order.json",
        "$defs": { "code": { "type": "string", "pattern": "^[A-Z]{3}$" } },
        "type": "object",
        "properties": { "currency": { "$ref": "https://schemas.example.com/order.json#/$defs/code" } }
    });
    let (forbidden, _) = admit_with_input_schema(schema.clone(), &AdmissionPolicy::default());
    assert_eq!(
        forbidden.expect_err("rejected").codes(),
        [codes::SCHEMA_REMOTE_REFERENCE_FORBIDDEN]
    );

    let allowing = AdmissionPolicy {
        allow_remote_schema_references: true,
        ..AdmissionPolicy::default()
    };
    let (allowed, _) = admit_with_input_schema(schema, &allowing);
    let admitted = allowed.expect("resolves inside the document");
    let compiled = admitted.input_schema("cap:a").expect("compiled");
    assert!(compiled.is_valid(&json!({ "currency": "EUR" })));
    assert!(!compiled.is_valid(&json!({ "currency": "euro" })));
}
