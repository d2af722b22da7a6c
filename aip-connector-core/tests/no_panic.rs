//! Property tests: parsing and admitting any input never panics, and admission is a pure
//! function of its input (same manifest, same report; every issue path is a JSON Pointer).
//!
//! Four sources of input, from least to most structured:
//! 1. arbitrary strings given to `serde_json::from_str::<Manifest>`, plus truncations and byte
//!    edits of a valid manifest's text;
//! 2. arbitrary JSON values (keys and strings biased towards the wire vocabulary) given to
//!    `from_value::<Manifest>` and `from_value::<Capability>`, admitted when they parse;
//! 3. manifest-shaped values whose every field is drawn from the wire vocabulary (so they parse)
//!    with arbitrary schemas, bindings, contracts, approval-rule trees, claims and policies;
//! 4. a valid manifest with nodes replaced by arbitrary values and keys deleted.
#![cfg(feature = "schema-compiler")]

use std::collections::BTreeSet;

use aip_connector_core::admission::{AdmissionPolicy, ImplementationSupportMap, admit_manifest};
use aip_connector_core::model::{Capability, CapabilityImplementationSupport, Manifest};
use aip_connector_core::schema::SchemaLimits;
use aip_connector_core::{CapabilityId, ProfileId};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------------

const PROFILES: &[&str] = &["aip.native.http.v1", "aip.mcp.compat.v1", "aip.other.v1"];
const CAPABILITY_IDS: &[&str] = &["cap:a", "cap:b", "cap_a", "CAP A", "", " ", "cap:c"];

/// Object keys that mean something somewhere in a manifest or a schema.
const KEYS: &[&str] = &[
    "manifest_version",
    "agent",
    "id",
    "kind",
    "capabilities",
    "profiles",
    "resources",
    "channels",
    "governance",
    "contract_waivers",
    "capability_id",
    "code",
    "reason",
    "name",
    "input_schema",
    "output_schema",
    "bindings",
    "profile",
    "tool_name",
    "operation_id",
    "contract",
    "side_effects",
    "idempotency",
    "requirement",
    "collision_behavior",
    "key_scope",
    "ttl_ms",
    "execution",
    "supports_sync",
    "supports_async",
    "supports_streaming",
    "supports_cancel",
    "supports_retry",
    "expected_completion",
    "retry_safety",
    "data",
    "sensitivity",
    "contains_pii",
    "redaction_required",
    "approval",
    "required",
    "approver_selector",
    "type",
    "rule",
    "rules",
    "operator",
    "transaction",
    "supported_modes",
    "requires_plan_before_commit",
    "dry_run_fidelity",
    "compensation",
    "mode",
    "compensation_capability_id",
    "compensation_window_ms",
    "requires_approval",
    "credentials",
    "$ref",
    "$defs",
    "$id",
    "properties",
    "items",
    "not",
    "enum",
    "const",
    "pattern",
    "format",
];

/// String values that mean something somewhere (enum spellings, ids, references, blanks).
const WORDS: &[&str] = &[
    "aip-manifest/v1",
    "service",
    "agent",
    "tool",
    "resource",
    "workflow",
    "read",
    "write",
    "delete",
    "financial",
    "required",
    "optional",
    "unsupported",
    "return_original_result",
    "tenant",
    "sync",
    "async",
    "streaming",
    "any",
    "safe",
    "safe_with_idempotency_key",
    "unsafe",
    "public",
    "restricted",
    "supported",
    "best_effort",
    "not_required",
    "execute",
    "plan",
    "commit",
    "reconcile",
    "compensate",
    "schema_only",
    "full_simulation",
    "all",
    "quorum",
    "role",
    "group",
    "tenant_policy",
    "external_system",
    "delegated_authority",
    "object",
    "string",
    "integer",
    "array",
    "#",
    "#/$defs/x",
    "https://example.com/s.json",
    "other.json",
    "[",
    "^(a+)+$",
    "date-time",
    "contract.lint.data_without_redaction",
    "aip.native.http.v1",
    "aip.mcp.compat.v1",
    "cap:a",
    "cap:b",
    "",
    " ",
    "é\u{0}\u{ffff}",
];

/// Generous settings for the cheap properties, fewer cases where every case compiles schemas.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Integration tests have no lib.rs next to them for proptest's regression files; a
        // failure prints its minimal input instead.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(KEYS).prop_map(str::to_owned),
        1 => "[a-z$_~/]{0,6}",
    ]
}

fn arb_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..5).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        select(WORDS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ]
}

/// Arbitrary JSON: at most 4 levels of containers, about 48 values.
fn arb_json() -> impl Strategy<Value = Value> {
    arb_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

fn word(options: &'static [&'static str]) -> impl Strategy<Value = Value> + Clone {
    select(options).prop_map(Value::from)
}

/// A JSON Schema: mostly small plausible schemas, sometimes anything at all.
fn arb_schema() -> impl Strategy<Value = Value> {
    let plausible = (
        word(&["object", "string", "integer", "array", "nonsense"]),
        prop::option::of(word(&[
            "#",
            "#/$defs/x",
            "#/nowhere",
            "other.json",
            "https://example.com/s.json",
        ])),
        prop::option::of(word(&["^[a-z]+$", "[", "^(a+)+$"])),
        prop::option::of(word(&["date-time", "email", "uuid", "made-up"])),
        prop::option::of(arb_json()),
    )
        .prop_map(|(kind, reference, pattern, format, extra)| {
            let mut property = Map::new();
            property.insert("type".into(), kind);
            if let Some(pattern) = pattern {
                property.insert("pattern".into(), pattern);
            }
            if let Some(format) = format {
                property.insert("format".into(), format);
            }
            if let Some(reference) = reference {
                property.insert("$ref".into(), reference);
            }
            let mut schema = json!({
                "type": "object",
                "$defs": { "x": { "type": "string" } },
                "properties": { "p": property }
            });
            if let Some(extra) = extra {
                schema["properties"]["q"] = extra;
            }
            schema
        });
    prop_oneof![3 => plausible, 1 => any::<bool>().prop_map(Value::Bool), 1 => arb_json()]
}

/// An approval-rule tree, invalid nodes included.
fn arb_approval_rule() -> impl Strategy<Value = Value> {
    let leaf = (
        word(&["principal", "role", "group", "tenant_policy", "external_system", "delegated_authority"]),
        word(&["", " ", "approvers"]),
    )
        .prop_map(|(operator, text)| {
            json!({ "operator": operator, "id": text, "name": text, "policy_id": text, "system": text, "scope": text })
        });
    leaf.prop_recursive(3, 12, 3, |inner| {
        (
            word(&["all", "any", "quorum"]),
            0u32..4,
            prop::collection::vec(inner, 0..3),
        )
            .prop_map(|(operator, required, rules)| {
                json!({ "operator": operator, "required": required, "rules": rules })
            })
    })
}

/// A contract whose every field has a wire-valid type and a value from the vocabulary.
fn arb_contract() -> impl Strategy<Value = Value> {
    let execution = (
        prop::collection::vec(any::<bool>(), 5),
        word(&["sync", "async", "streaming", "any"]),
        word(&["safe", "safe_with_idempotency_key", "unsafe", "unknown"]),
    )
        .prop_map(|(flags, expected, safety)| {
            json!({
                "supports_sync": flags[0], "supports_async": flags[1],
                "supports_streaming": flags[2], "supports_cancel": flags[3],
                "supports_retry": flags[4], "expected_completion": expected, "retry_safety": safety
            })
        });
    let idempotency = (
        word(&["required", "optional", "unsupported"]),
        prop::option::of(0u64..3),
    )
        .prop_map(|(requirement, ttl)| {
            let mut idempotency = json!({
                "requirement": requirement,
                "collision_behavior": "reject_conflict",
                "key_scope": "tenant"
            });
            if let Some(ttl) = ttl {
                idempotency["ttl_ms"] = json!(ttl);
            }
            idempotency
        });
    let data = (word(&["public", "internal", "restricted", "regulated"]), any::<bool>(), any::<bool>())
        .prop_map(|(sensitivity, pii, redaction)| {
            json!({ "sensitivity": sensitivity, "contains_pii": pii, "redaction_required": redaction })
        });
    let approval = (
        any::<bool>(),
        0u32..3,
        prop::option::of(arb_approval_rule()),
        prop::collection::vec(word(&["reason", "attachment"]), 0..2),
        word(&["", "admins"]),
    )
        .prop_map(|(required, distinct, rule, evidence, role)| {
            let mut approval = json!({
                "required": required,
                "approver_selector": { "type": "role", "name": role },
                "minimum_distinct_principals": distinct,
                "evidence_requirements": evidence
            });
            if let Some(rule) = rule {
                approval["rule"] = rule;
            }
            approval
        });
    let transaction = (
        prop::collection::vec(word(&["execute", "plan", "commit", "reconcile", "compensate", "dry_run"]), 0..4),
        any::<bool>(),
        word(&["schema_only", "downstream_validation", "full_simulation"]),
    )
        .prop_map(|(modes, plan_first, fidelity)| {
            json!({ "supported_modes": modes, "requires_plan_before_commit": plan_first, "dry_run_fidelity": fidelity })
        });
    let compensation = (
        word(&["not_required", "supported", "best_effort"]),
        prop::option::of(select(CAPABILITY_IDS)),
        prop::option::of(0u64..2),
    )
        .prop_map(|(mode, target, window)| {
            let mut compensation = json!({ "mode": mode, "requires_approval": false });
            if let Some(target) = target {
                compensation["compensation_capability_id"] = json!(target);
            }
            if let Some(window) = window {
                compensation["compensation_window_ms"] = json!(window);
            }
            compensation
        });
    let credentials = (any::<bool>(), prop::collection::vec(word(&["", " ", "scope"]), 0..2))
        .prop_map(|(required, scopes)| {
            json!({ "required": required, "required_scopes": scopes, "accepted_issuers": scopes, "allow_oauth_refresh": false })
        });
    let sla = prop::option::of(0u64..2).prop_map(|timeout| {
        let mut sla = json!({ "async_expected": false });
        if let Some(timeout) = timeout {
            sla["timeout_ms"] = json!(timeout);
        }
        sla
    });
    (
        prop::collection::vec(word(&["read", "write", "delete", "financial", "external_network"]), 0..3),
        idempotency,
        execution,
        data,
        prop::option::of(approval),
        prop::option::of(transaction),
        prop::option::of(compensation),
        prop::option::of(credentials),
        prop::option::of(sla),
    )
        .prop_map(|(effects, idempotency, execution, data, approval, transaction, compensation, credentials, sla)| {
            let mut contract = json!({
                "side_effects": effects, "idempotency": idempotency, "execution": execution, "data": data
            });
            for (key, section) in [
                ("approval", approval),
                ("transaction", transaction),
                ("compensation", compensation),
                ("credentials", credentials),
                ("sla", sla),
            ] {
                if let Some(section) = section {
                    contract[key] = section;
                }
            }
            contract
        })
}

fn arb_binding() -> impl Strategy<Value = Value> {
    let name_keys = select(&["tool_name", "operation_id", "name", "description"][..]);
    (
        select(PROFILES),
        prop::option::of(name_keys),
        prop::option::of(arb_leaf()),
    )
        .prop_map(|(profile, name_key, name)| {
            let mut binding = json!({ "profile": profile });
            if let (Some(key), Some(name)) = (name_key, name) {
                binding[key] = name;
            }
            binding
        })
}

fn arb_capability() -> impl Strategy<Value = Value> {
    (
        select(CAPABILITY_IDS),
        word(&["Read", "", " "]),
        word(&["tool", "agent", "resource", "human_task"]),
        arb_schema(),
        prop::option::of(arb_schema()),
        prop::collection::vec(arb_binding(), 0..3),
        prop::option::of(arb_contract()),
        prop::option::of(word(&["low", "high", "critical"])),
    )
        .prop_map(|(id, name, kind, input, output, bindings, contract, risk)| {
            let mut capability = json!({
                "id": id, "name": name, "kind": kind, "input_schema": input, "bindings": bindings
            });
            if let Some(output) = output {
                capability["output_schema"] = output;
            }
            if let Some(contract) = contract {
                capability["contract"] = contract;
            }
            if let Some(risk) = risk {
                capability["risk"] = risk;
            }
            capability
        })
}

/// A manifest-shaped value that almost always parses.
fn arb_manifest_value() -> impl Strategy<Value = Value> {
    (
        word(&["aip-manifest/v1", "", " "]),
        prop::collection::vec(arb_capability(), 0..4),
        prop::collection::vec(select(PROFILES), 0..3),
        prop::collection::vec(
            (
                word(&["res:1", "", " "]),
                prop::option::of(select(CAPABILITY_IDS)),
            ),
            0..3,
        ),
        prop::collection::vec(arb_json(), 0..3),
        prop::option::of(arb_json()),
    )
        .prop_map(
            |(version, capabilities, profiles, resources, channels, waivers)| {
                let resources: Vec<Value> = resources
                    .into_iter()
                    .map(|(id, capability)| match capability {
                        Some(capability) => {
                            json!({ "id": id, "name": "r", "capability_id": capability })
                        }
                        None => json!({ "id": id, "name": "r" }),
                    })
                    .collect();
                let mut manifest = json!({
                    "manifest_version": version,
                    "agent": { "id": "agent:x", "kind": "service" },
                    "capabilities": capabilities,
                    "profiles": profiles,
                    "resources": resources,
                    "channels": channels
                });
                if let Some(waivers) = waivers {
                    manifest["governance"] = json!({ "contract_waivers": waivers });
                }
                manifest
            },
        )
}

fn arb_support() -> impl Strategy<Value = CapabilityImplementationSupport> {
    prop::collection::vec(any::<bool>(), 9).prop_map(|flags| CapabilityImplementationSupport {
        invocation: flags[0],
        cancellation: flags[1],
        streaming: flags[2],
        retry: flags[3],
        transaction: flags[4],
        reconciliation: flags[5],
        compensation: flags[6],
        approval: flags[7],
        credentials: flags[8],
    })
}

fn arb_support_map() -> impl Strategy<Value = ImplementationSupportMap> {
    prop::collection::vec((select(CAPABILITY_IDS), arb_support()), 0..4).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(id, support)| (CapabilityId::from(id), support))
            .collect()
    })
}

fn arb_policy() -> impl Strategy<Value = AdmissionPolicy> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::btree_set(select(PROFILES), 0..2),
        prop::option::of((1usize..6, 1usize..40, 1usize..64)),
    )
        .prop_map(
            |(remote, claims, sdk_rules, allowed, limits)| AdmissionPolicy {
                allow_remote_schema_references: remote,
                require_implementation_claims: claims,
                allowed_binding_profiles: allowed
                    .into_iter()
                    .map(ProfileId::from)
                    .collect::<BTreeSet<_>>(),
                sdk_rules,
                schema_limits: limits.map_or_else(
                    SchemaLimits::default,
                    |(max_depth, max_nodes, max_text_bytes)| SchemaLimits {
                        max_depth,
                        max_nodes,
                        max_text_bytes,
                    },
                ),
            },
        )
}

// ---------------------------------------------------------------------------------------------
// The valid manifest that mutations start from
// ---------------------------------------------------------------------------------------------

fn valid_manifest() -> Value {
    json!({
        "manifest_version": "aip-manifest/v1",
        "agent": { "id": "agent:shop", "kind": "service" },
        "capabilities": [
            {
                "id": "cap:shop:order:create",
                "name": "Create order",
                "kind": "tool",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "sku": { "type": "string", "pattern": "^[A-Z0-9-]{3,32}$" },
                        "quantity": { "type": "integer", "minimum": 1 },
                        "note": { "$ref": "#/$defs/note" }
                    },
                    "required": ["sku", "quantity"],
                    "$defs": { "note": { "type": "string", "maxLength": 200 } }
                },
                "output_schema": { "type": "object", "properties": { "order_id": { "type": "string" } } },
                "risk": "medium",
                "bindings": [{ "profile": "aip.mcp.compat.v1", "tool_name": "create_order" }],
                "contract": {
                    "side_effects": ["write"],
                    "idempotency": { "requirement": "required", "collision_behavior": "revalidate_input_hash", "key_scope": "tenant", "ttl_ms": 60000 },
                    "execution": {
                        "supports_sync": true, "supports_async": false, "supports_streaming": false,
                        "supports_cancel": true, "supports_retry": true,
                        "expected_completion": "sync", "retry_safety": "safe_with_idempotency_key"
                    },
                    "data": { "sensitivity": "confidential", "contains_pii": true, "redaction_required": true },
                    "credentials": { "required": true, "required_scopes": ["orders.write"], "allow_oauth_refresh": false },
                    "approval": {
                        "required": true,
                        "approver_selector": { "type": "tenant_policy" },
                        "evidence_requirements": ["reason"],
                        "rule": { "operator": "all", "rules": [{ "operator": "role", "name": "buyer" }, { "operator": "quorum", "required": 1, "rules": [{ "operator": "group", "name": "finance" }] }] }
                    },
                    "transaction": { "supported_modes": ["execute", "plan", "commit", "reconcile", "compensate"], "requires_plan_before_commit": true, "dry_run_fidelity": "schema_only" },
                    "compensation": { "mode": "supported", "compensation_capability_id": "cap:shop:order:cancel", "compensation_window_ms": 1000, "requires_approval": false }
                }
            },
            {
                "id": "cap:shop:order:cancel",
                "name": "Cancel order",
                "kind": "tool",
                "input_schema": { "type": "object", "properties": { "order_id": { "type": "string" } } },
                "contract": {
                    "side_effects": ["read"],
                    "idempotency": { "requirement": "optional", "collision_behavior": "return_original_result", "key_scope": "tenant" },
                    "execution": {
                        "supports_sync": true, "supports_async": false, "supports_streaming": false,
                        "supports_cancel": false, "supports_retry": false,
                        "expected_completion": "sync", "retry_safety": "safe"
                    },
                    "data": { "sensitivity": "internal", "contains_pii": false, "redaction_required": false }
                }
            },
            { "id": "cap:shop:catalogue", "name": "Catalogue", "kind": "resource", "input_schema": { "type": "object" } }
        ],
        "profiles": ["aip.native.http.v1", "aip.mcp.compat.v1"],
        "resources": [{ "id": "res:catalogue", "name": "Catalogue", "capability_id": "cap:shop:catalogue" }],
        "channels": [{ "id": "chan:orders" }],
        "governance": { "contract_waivers": [] }
    })
}

fn valid_claims() -> ImplementationSupportMap {
    let everything = CapabilityImplementationSupport {
        invocation: true,
        cancellation: true,
        streaming: true,
        retry: true,
        transaction: true,
        reconciliation: true,
        compensation: true,
        approval: true,
        credentials: true,
    };
    [
        ("cap:shop:order:create", everything),
        (
            "cap:shop:order:cancel",
            CapabilityImplementationSupport::INVOCATION_ONLY,
        ),
    ]
    .into_iter()
    .map(|(id, support)| (CapabilityId::from(id), support))
    .collect()
}

/// JSON Pointers of every node of `value` (root included), in pre-order.
fn pointers(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![(String::new(), value)];
    while let Some((pointer, node)) = pending.pop() {
        match node {
            Value::Array(items) => {
                for (k, item) in items.iter().enumerate().rev() {
                    pending.push((format!("{pointer}/{k}"), item));
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter().rev() {
                    let token = key.replace('~', "~0").replace('/', "~1");
                    pending.push((format!("{pointer}/{token}"), item));
                }
            }
            _ => {}
        }
        found.push(pointer);
    }
    found
}

/// One edit of a JSON document, at the node (or object) an index picks.
#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the node with an arbitrary value (usually breaks the wire types).
    Replace(Index, Value),
    /// Replace the node with another value of the same JSON kind (usually still parses):
    /// a vocabulary word for a string, the negation of a bool, a small number for a number,
    /// an element dropped or repeated for an array, a key dropped for an object.
    Tweak(Index, Index, i64),
    /// Remove one key of an object.
    DeleteKey(Index, Index),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<Index>(), arb_json()).prop_map(|(at, value)| Mutation::Replace(at, value)),
        6 => (any::<Index>(), any::<Index>(), -1i64..3).prop_map(|(at, pick, number)| Mutation::Tweak(at, pick, number)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(at, key)| Mutation::DeleteKey(at, key)),
    ]
}

/// The pointer `at` picks among `candidates`, if there is any.
fn pick(candidates: &[String], at: &Index) -> Option<String> {
    (!candidates.is_empty()).then(|| at.get(candidates).clone())
}

fn apply(document: &mut Value, mutation: &Mutation) {
    match mutation {
        Mutation::Replace(at, value) => {
            if let Some(node) = pick(&pointers(document), at).and_then(|p| document.pointer_mut(&p))
            {
                *node = value.clone();
            }
        }
        Mutation::Tweak(at, choice, number) => {
            if let Some(node) = pick(&pointers(document), at).and_then(|p| document.pointer_mut(&p))
            {
                tweak(node, choice, *number);
            }
        }
        Mutation::DeleteKey(at, key) => {
            let objects: Vec<String> = pointers(document)
                .into_iter()
                .filter(|pointer| document.pointer(pointer).is_some_and(Value::is_object))
                .collect();
            if let Some(Value::Object(map)) =
                pick(&objects, at).and_then(|p| document.pointer_mut(&p))
            {
                remove_key(map, key);
            }
        }
    }
}

fn remove_key(map: &mut Map<String, Value>, key: &Index) {
    if map.is_empty() {
        return;
    }
    let victim = map.keys().nth(key.index(map.len())).cloned();
    if let Some(victim) = victim {
        map.shift_remove(&victim);
    }
}

fn tweak(node: &mut Value, choice: &Index, number: i64) {
    match node {
        Value::String(text) => *text = choice.get(WORDS).to_string(),
        Value::Bool(flag) => *flag = !*flag,
        Value::Number(_) => *node = Value::from(number),
        Value::Array(items) if !items.is_empty() => {
            let k = choice.index(items.len());
            if number > 0 {
                let copy = items[k].clone();
                items.push(copy);
            } else {
                items.remove(k);
            }
        }
        Value::Object(map) => remove_key(map, choice),
        Value::Array(_) | Value::Null => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Admits twice and checks the outcome is the same both times and every issue is well formed.
fn admit_checked(
    manifest: &Manifest,
    policy: &AdmissionPolicy,
    support: &ImplementationSupportMap,
) -> Result<(), TestCaseError> {
    let first = admit_manifest(manifest, policy, support);
    let second = admit_manifest(manifest, policy, support);
    match (&first, &second) {
        (Ok(admitted), Ok(_)) => {
            prop_assert_eq!(admitted.manifest(), manifest);
            for capability in &manifest.capabilities {
                prop_assert!(admitted.input_schema(capability.id.as_str()).is_some());
                prop_assert_eq!(
                    admitted.output_schema(capability.id.as_str()).is_some(),
                    capability.output_schema.is_some()
                );
            }
        }
        (Err(report), Err(again)) => {
            prop_assert!(!report.issues.is_empty());
            prop_assert_eq!(report, again);
            for issue in &report.issues {
                prop_assert!(issue.path.starts_with('/'), "path {:?}", issue.path);
                prop_assert!(!issue.code.is_empty());
            }
        }
        _ => prop_assert!(false, "admission is not deterministic"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn arbitrary_strings_never_panic_the_parser(text in ".{0,200}") {
        let _ = serde_json::from_str::<Manifest>(&text);
        let _ = serde_json::from_str::<Capability>(&text);
    }

    #[test]
    fn damaged_manifest_text_never_panics(cut in any::<Index>(), at in any::<Index>(), byte in any::<u8>()) {
        let text = serde_json::to_string(&valid_manifest()).expect("serializable");
        let truncated = &text.as_bytes()[..cut.index(text.len() + 1)];
        let _ = serde_json::from_slice::<Manifest>(truncated);
        let mut edited = text.into_bytes();
        let position = at.index(edited.len());
        edited[position] = byte;
        if let Ok(manifest) = serde_json::from_slice::<Manifest>(&edited) {
            admit_checked(&manifest, &AdmissionPolicy::strict(), &valid_claims())?;
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn arbitrary_json_never_panics(value in arb_json(), policy in arb_policy(), support in arb_support_map()) {
        let _ = serde_json::from_value::<Capability>(value.clone());
        if let Ok(manifest) = serde_json::from_value::<Manifest>(value) {
            admit_checked(&manifest, &policy, &support)?;
        }
    }

    #[test]
    fn manifest_shaped_values_parse_and_admission_never_panics(
        value in arb_manifest_value(),
        policy in arb_policy(),
        support in arb_support_map(),
    ) {
        for capability in value["capabilities"].as_array().into_iter().flatten() {
            let _ = serde_json::from_value::<Capability>(capability.clone());
        }
        let manifest = serde_json::from_value::<Manifest>(value);
        prop_assert!(manifest.is_ok(), "generator drifted from the wire model: {:?}", manifest.err());
        if let Ok(manifest) = manifest {
            admit_checked(&manifest, &policy, &support)?;
        }
    }

    #[test]
    fn mutated_valid_manifest_never_panics(
        mutations in prop::collection::vec(arb_mutation(), 1..5),
        policy in arb_policy(),
    ) {
        let mut document = valid_manifest();
        for mutation in &mutations {
            apply(&mut document, mutation);
        }
        if let Ok(manifest) = serde_json::from_value::<Manifest>(document) {
            admit_checked(&manifest, &policy, &valid_claims())?;
        }
    }
}

#[test]
fn the_mutation_base_is_admitted_under_strict() {
    let manifest: Manifest = serde_json::from_value(valid_manifest()).expect("parses");
    if let Err(report) = admit_manifest(&manifest, &AdmissionPolicy::strict(), &valid_claims()) {
        panic!("the valid manifest must admit: {report}");
    }
}
