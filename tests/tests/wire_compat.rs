//! Wire compatibility with upstream AIP 1.0: our serde layout against the seed example, upstream's
//! published JSON Schemas (read from `$AIP_UPSTREAM_SCHEMAS`, never copied here) and upstream's
//! serde defaults.

use std::collections::BTreeSet;

use aip_connector::ids::*;
use aip_connector::model::*;
use aip_connector_testkit::fixtures::{
    capability, capability_contract, enterprise_capability, governed_financial_capability,
    manifest, principal, seed_booking_capability, seed_booking_capability_json,
};
use aip_connector_tests::{assert_valid_against, schema_definition, upstream_schema};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

const MANIFEST_SCHEMA: &str = "manifest.schema.json";
const CONTRACT_SCHEMA: &str = "capability_contract.schema.json";
const ACTION_SCHEMA: &str = "action.schema.json";

/// One fixed instant, so the maximal fixtures serialize the same every run.
const FIXED_INSTANT: OffsetDateTime = datetime!(2030-01-31 12:00:00 UTC);

/// `value` as a JSON value.
fn to_value(value: &impl Serialize) -> Value {
    serde_json::to_value(value).expect("wire types always serialize")
}

/// `value` as compact JSON text, keys in declaration order.
fn to_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("wire types always serialize")
}

/// Serializes `value`, reads it back and checks that nothing was lost or reordered.
fn assert_round_trips<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = to_text(value);
    let read_back: T = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("our own output does not parse back: {error}\n{text}"));
    assert_eq!(&read_back, value);
    assert_eq!(to_text(&read_back), text, "second serialization differs");
}

// ---------------------------------------------------------------------------------------------
// 1–2. The seed example capability.
// ---------------------------------------------------------------------------------------------

#[test]
fn seed_example_parses_and_reserializes_to_the_same_json_in_the_same_key_order() {
    let seed = seed_booking_capability_json();
    let seed_text = to_text(&seed);

    let parsed: Capability =
        serde_json::from_str(&seed_text).expect("the seed example parses into Capability");

    assert_eq!(to_value(&parsed), seed);
    assert_eq!(
        to_text(&parsed),
        seed_text,
        "key order differs from the seed"
    );
}

#[test]
fn seed_capability_built_with_types_serializes_to_exactly_the_seed_json() {
    assert_eq!(
        to_text(&seed_booking_capability()),
        to_text(&seed_booking_capability_json())
    );
    let parsed: Capability =
        serde_json::from_value(seed_booking_capability_json()).expect("seed parses");
    assert_eq!(parsed, seed_booking_capability());
}

// ---------------------------------------------------------------------------------------------
// 3. Testkit fixtures against upstream's schemas.
// ---------------------------------------------------------------------------------------------

#[test]
fn seed_capability_validates_alone_and_inside_a_manifest() {
    let Some(manifest_schema) = upstream_schema(MANIFEST_SCHEMA) else {
        return;
    };
    let seed = seed_booking_capability();
    assert_valid_against(
        &schema_definition(&manifest_schema, "Capability"),
        &to_value(&seed),
    );

    let mut with_seed = manifest();
    with_seed.capabilities.push(seed);
    assert_valid_against(&manifest_schema, &to_value(&with_seed));
}

#[test]
fn testkit_contracts_validate_against_the_contract_schema() {
    let Some(contract_schema) = upstream_schema(CONTRACT_SCHEMA) else {
        return;
    };
    let read_write = capability_contract(&[SideEffect::Read, SideEffect::Write]);
    let governed = governed_financial_capability("cap:test:pay", "pay", "cap:test:refund")
        .contract
        .expect("the governed fixture has a contract");

    assert_valid_against(&contract_schema, &to_value(&read_write));
    assert_valid_against(&contract_schema, &to_value(&governed));
}

#[test]
fn testkit_manifests_validate_against_the_manifest_schema() {
    let Some(manifest_schema) = upstream_schema(MANIFEST_SCHEMA) else {
        return;
    };
    let mut governed = manifest();
    governed.capabilities = vec![
        enterprise_capability("cap:test:lookup", "lookup"),
        governed_financial_capability("cap:test:pay", "pay", "cap:test:refund"),
        enterprise_capability("cap:test:refund", "refund"),
    ];

    assert_valid_against(&manifest_schema, &to_value(&manifest()));
    assert_valid_against(&manifest_schema, &to_value(&governed));
}

// ---------------------------------------------------------------------------------------------
// 4. Maximal documents: every optional section and field populated.
// ---------------------------------------------------------------------------------------------

/// Every `ApproverSelector` variant, one per maximal capability.
fn every_approver_selector() -> Vec<ApproverSelector> {
    vec![
        ApproverSelector::Principal {
            id: PrincipalId::from("human:approver"),
        },
        ApproverSelector::Role {
            name: "finance-approver".to_owned(),
        },
        ApproverSelector::Group {
            name: "treasury".to_owned(),
        },
        ApproverSelector::TenantPolicy,
        ApproverSelector::ExternalSystem {
            system: "servicenow".to_owned(),
        },
    ]
}

/// An `all` rule over an `any` and a `quorum`, which together use every leaf kind.
fn nested_rule_with_every_leaf() -> ApprovalRule {
    ApprovalRule::All {
        rules: vec![
            ApprovalRule::Any {
                rules: vec![
                    ApprovalRule::Principal {
                        id: PrincipalId::from("human:cfo"),
                    },
                    ApprovalRule::Role {
                        name: "controller".to_owned(),
                    },
                ],
            },
            ApprovalRule::Quorum {
                required: 2,
                rules: vec![
                    ApprovalRule::Group {
                        name: "treasury".to_owned(),
                    },
                    ApprovalRule::TenantPolicy {
                        policy_id: "policy:payments:v3".to_owned(),
                    },
                    ApprovalRule::ExternalSystem {
                        system: "servicenow".to_owned(),
                    },
                    ApprovalRule::DelegatedAuthority {
                        scope: "payments:approve".to_owned(),
                        max_risk: Some(RiskLevel::High),
                        max_value: Some(1_000_000),
                    },
                ],
                distinct_principals: false,
            },
        ],
        allow_decision_reuse: true,
    }
}

/// A contract with every optional section and field set, approved through `approver_selector`.
fn maximal_contract(approver_selector: ApproverSelector) -> CapabilityContract {
    CapabilityContract {
        side_effects: vec![
            SideEffect::Read,
            SideEffect::Write,
            SideEffect::Delete,
            SideEffect::SendMessage,
            SideEffect::Financial,
            SideEffect::Identity,
            SideEffect::Medical,
            SideEffect::Legal,
            SideEffect::ExternalNetwork,
            SideEffect::CodeExecution,
        ],
        idempotency: IdempotencyContract {
            requirement: IdempotencyRequirement::Required,
            collision_behavior: IdempotencyCollisionBehavior::RejectConflict,
            key_scope: IdempotencyKeyScope::ExternalAccount,
            ttl_ms: Some(3_600_000),
        },
        execution: ExecutionContract {
            supports_sync: true,
            supports_async: true,
            supports_streaming: true,
            supports_cancel: true,
            supports_retry: true,
            expected_completion: ExpectedCompletionMode::Streaming,
            retry_safety: RetrySafety::SafeWithIdempotencyKey,
        },
        data: DataContract {
            sensitivity: DataSensitivity::Regulated,
            contains_pii: true,
            redaction_required: true,
            residency: Some(DataResidency {
                allowed_regions: vec!["eu-west-1".to_owned(), "eu-central-1".to_owned()],
                prohibited_regions: vec!["us-east-1".to_owned()],
            }),
            retention: Some(RetentionPolicy {
                retain_for_ms: Some(86_400_000),
                delete_after_ms: Some(2_592_000_000),
                legal_hold_allowed: true,
            }),
        },
        credentials: Some(CredentialPolicy {
            required: true,
            accepted_issuers: vec!["vault:primary".to_owned(), "oauth:bank".to_owned()],
            required_scopes: vec!["payments:write".to_owned()],
            allow_oauth_refresh: true,
        }),
        approval: Some(ApprovalPolicy {
            required: true,
            reason: Some("moves money".to_owned()),
            approver_selector,
            ttl_ms: Some(900_000),
            evidence_requirements: vec![
                EvidenceRequirement::Reason,
                EvidenceRequirement::InputSnapshot,
                EvidenceRequirement::PolicyDecision,
                EvidenceRequirement::ExternalTicket,
                EvidenceRequirement::Attachment,
            ],
            delegated_authority: Some(DelegatedApprovalAuthority {
                principal: PrincipalId::from("human:deputy"),
                scope: vec!["payments:approve".to_owned()],
                expires_at: Some(FIXED_INSTANT),
            }),
            rule: Some(nested_rule_with_every_leaf()),
            minimum_distinct_principals: 2,
            separation_of_duties: SeparationOfDuties {
                requester_must_differ: true,
                operator_must_differ: true,
                allow_self_approval: false,
            },
            policy_version: Some("2030-01".to_owned()),
        }),
        sla: Some(ServiceLevelContract {
            expected_latency_ms: Some(250),
            timeout_ms: Some(10_000),
            async_expected: true,
            max_queue_delay_ms: Some(1_000),
            availability_target: Some("99.95%".to_owned()),
        }),
        transaction: Some(TransactionContract {
            supported_modes: vec![
                TransactionMode::Execute,
                TransactionMode::DryRun,
                TransactionMode::Plan,
                TransactionMode::Commit,
                TransactionMode::Compensate,
                TransactionMode::Reconcile,
                TransactionMode::RollbackNotSupported,
            ],
            requires_plan_before_commit: true,
            dry_run_fidelity: DryRunFidelity::FullSimulation,
        }),
        compensation: Some(CompensationContract {
            mode: CompensationMode::Supported,
            compensation_capability_id: Some(CapabilityId::from("cap:bank:transfer:reverse")),
            compensation_window_ms: Some(86_400_000),
            requires_approval: true,
        }),
    }
}

/// One maximal contract per `ApproverSelector` variant.
fn maximal_contracts() -> Vec<CapabilityContract> {
    every_approver_selector()
        .into_iter()
        .map(maximal_contract)
        .collect()
}

/// A capability with every optional field set.
fn maximal_capability(index: usize, contract: CapabilityContract) -> Capability {
    let mut capability = capability(&format!("cap:bank:transfer:{index}"), "Transfer funds");
    capability.kind = CapabilityKind::Workflow;
    capability.input_schema = json!({
        "type": "object",
        "required": ["amount"],
        "properties": { "amount": { "type": "integer", "minimum": 1 } }
    });
    capability.output_schema = Some(json!({ "type": "object" }));
    capability.risk = Some(RiskLevel::Critical);
    capability.stability = Some(Stability::Experimental);
    capability.cost = Some(json!({ "unit": "call", "price_usd": 0.01 }));
    capability.auth = Some(json!({ "scopes": ["payments:write"] }));
    capability.bindings = vec![
        Binding::new(profiles::MCP_COMPAT)
            .with("tool_name", format!("bank_transfer_{index}"))
            .with("annotations", json!({ "destructiveHint": true })),
        Binding::new(profiles::NATIVE_HTTP).with("operation_id", format!("transfer{index}")),
    ];
    capability.requires_human_approval = Some(true);
    capability.contract = Some(contract);
    capability
}

/// A principal with every optional field set.
fn maximal_principal() -> Principal {
    let mut agent = principal("agent:bank", PrincipalKind::Service);
    agent.display_name = Some("Bank connector".to_owned());
    agent.trust_domain = Some("bank.example".to_owned());
    agent.did = Some("did:web:bank.example".to_owned());
    agent.external_refs = vec![ExternalRef {
        system: "okta".to_owned(),
        ref_type: "service_account".to_owned(),
        id: "svc-123".to_owned(),
    }];
    agent.delegated_authority = vec![DelegatedAuthorityGrant {
        principal_id: PrincipalId::from("tenant:acme"),
        scopes: vec!["payments:*".to_owned(), "*".to_owned()],
        expires_at: Some(FIXED_INSTANT),
        reason: Some("operates the treasury on behalf of the tenant".to_owned()),
    }];
    agent.auth_context = Some(json!({ "mtls": true }));
    agent
}

/// A manifest with every optional field set: maximal capabilities (one per approver selector),
/// resources with an access policy, channels and compatibility endpoints.
fn maximal_manifest() -> Manifest {
    let mut manifest = Manifest::new(
        maximal_principal(),
        [
            ProfileId::from(profiles::NATIVE_HTTP),
            ProfileId::from(profiles::MCP_COMPAT),
            ProfileId::from(profiles::A2A_COMPAT),
        ],
    );
    manifest.capabilities = maximal_contracts()
        .into_iter()
        .enumerate()
        .map(|(index, contract)| maximal_capability(index, contract))
        .collect();
    manifest.resources = vec![Resource {
        id: "res:bank:statement".to_owned(),
        name: "Monthly statement".to_owned(),
        kind: Some("document".to_owned()),
        capability_id: Some(CapabilityId::from("cap:bank:transfer:0")),
        description: Some("The tenant's latest statement".to_owned()),
        mime_type: Some("application/pdf".to_owned()),
        tenant_id: Some("tenant:acme".to_owned()),
        access: Some(ResourceAccessPolicy {
            public: false,
            allowed_principals: vec![PrincipalId::from("human:cfo")],
            required_scopes: vec!["statements:read".to_owned()],
            tenant_required: true,
        }),
        expires_at: Some(FIXED_INSTANT),
    }];
    manifest.channels = vec![
        json!({ "id": "chan:email", "kind": "email" }),
        json!({ "name": "slack" }),
    ];
    manifest.security = Some(json!({ "signatures": ["ed25519"] }));
    manifest.governance = Some(json!({ "audit": "required" }));
    manifest.limits = Some(json!({ "max_requests_per_minute": 60 }));
    manifest.compatibility = Some(json!({
        "native_http": { "messages": "/aip/messages", "manifest": "/aip/manifest" },
        "mcp": { "jsonrpc": "/mcp" },
        "a2a": { "agent_card": "/.well-known/agent.json", "jsonrpc": "/a2a" },
        "connector": "bank"
    }));
    manifest.extensions = Some(json!({ "x-bank": { "tier": "gold" } }));
    manifest
}

/// Every property name declared anywhere in `schema` (root and `$defs`, including `oneOf`
/// branches).
fn declared_property_names(schema: &Value, names: &mut BTreeSet<String>) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Object(properties)) = object.get("properties") {
                names.extend(properties.keys().cloned());
            }
            object
                .values()
                .for_each(|child| declared_property_names(child, names));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|child| declared_property_names(child, names)),
        _ => {}
    }
}

/// Every object key used anywhere in `instance`.
fn used_keys(instance: &Value, keys: &mut BTreeSet<String>) {
    match instance {
        Value::Object(object) => {
            for (key, child) in object {
                keys.insert(key.clone());
                used_keys(child, keys);
            }
        }
        Value::Array(items) => items.iter().for_each(|child| used_keys(child, keys)),
        _ => {}
    }
}

/// Fails when `instance` leaves out a property that `schema` declares, so "maximal" stays true
/// when upstream adds a field.
fn assert_uses_every_declared_property(schema: &Value, instance: &Value) {
    let mut declared = BTreeSet::new();
    declared_property_names(schema, &mut declared);
    let mut used = BTreeSet::new();
    used_keys(instance, &mut used);
    let missing: Vec<&String> = declared.difference(&used).collect();
    assert!(
        missing.is_empty(),
        "the maximal fixture leaves out {missing:?}"
    );
}

#[test]
fn maximal_contracts_validate_against_the_contract_schema() {
    let Some(contract_schema) = upstream_schema(CONTRACT_SCHEMA) else {
        return;
    };
    for contract in maximal_contracts() {
        assert_valid_against(&contract_schema, &to_value(&contract));
    }
    let every_selector: Vec<Value> = maximal_contracts().iter().map(to_value).collect();
    assert_uses_every_declared_property(&contract_schema, &Value::Array(every_selector));
}

#[test]
fn maximal_manifest_validates_against_the_manifest_schema() {
    let Some(manifest_schema) = upstream_schema(MANIFEST_SCHEMA) else {
        return;
    };
    let maximal = to_value(&maximal_manifest());
    assert_valid_against(&manifest_schema, &maximal);
    assert_uses_every_declared_property(&manifest_schema, &maximal);
}

#[test]
fn maximal_contracts_and_manifest_round_trip() {
    for contract in maximal_contracts() {
        assert_round_trips(&contract);
    }
    assert_round_trips(&maximal_manifest());
}

#[test]
fn timestamps_are_written_as_rfc3339() {
    let resource = &maximal_manifest().resources[0];
    assert_eq!(
        to_value(resource)["expires_at"],
        json!("2030-01-31T12:00:00Z")
    );
}

/// Every string constant of the upstream enum `definition` parses into `T` and serializes back
/// unchanged.
fn assert_upstream_enum_values_round_trip<T>(schema: &Value, definition: &str)
where
    T: Serialize + DeserializeOwned,
{
    let branches = schema["$defs"][definition]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("$defs/{definition} is not a oneOf of constants"));
    assert!(!branches.is_empty(), "$defs/{definition} has no values");
    for branch in branches {
        let constant = &branch["const"];
        let parsed: T = serde_json::from_value(constant.clone())
            .unwrap_or_else(|error| panic!("{definition} value {constant} is refused: {error}"));
        assert_eq!(
            &to_value(&parsed),
            constant,
            "{definition} respells {constant}"
        );
    }
}

#[test]
fn every_upstream_enum_value_is_spelled_the_same_by_our_types() {
    let Some(schema) = upstream_schema(MANIFEST_SCHEMA) else {
        return;
    };
    assert_upstream_enum_values_round_trip::<CapabilityKind>(&schema, "CapabilityKind");
    assert_upstream_enum_values_round_trip::<RiskLevel>(&schema, "RiskLevel");
    assert_upstream_enum_values_round_trip::<Stability>(&schema, "Stability");
    assert_upstream_enum_values_round_trip::<PrincipalKind>(&schema, "PrincipalKind");
    assert_upstream_enum_values_round_trip::<SideEffect>(&schema, "SideEffect");
    assert_upstream_enum_values_round_trip::<IdempotencyRequirement>(
        &schema,
        "IdempotencyRequirement",
    );
    assert_upstream_enum_values_round_trip::<IdempotencyCollisionBehavior>(
        &schema,
        "IdempotencyCollisionBehavior",
    );
    assert_upstream_enum_values_round_trip::<IdempotencyKeyScope>(&schema, "IdempotencyKeyScope");
    assert_upstream_enum_values_round_trip::<ExpectedCompletionMode>(
        &schema,
        "ExpectedCompletionMode",
    );
    assert_upstream_enum_values_round_trip::<RetrySafety>(&schema, "RetrySafety");
    assert_upstream_enum_values_round_trip::<DataSensitivity>(&schema, "DataSensitivity");
    assert_upstream_enum_values_round_trip::<EvidenceRequirement>(&schema, "EvidenceRequirement");
    assert_upstream_enum_values_round_trip::<TransactionMode>(&schema, "TransactionMode");
    assert_upstream_enum_values_round_trip::<DryRunFidelity>(&schema, "DryRunFidelity");
    assert_upstream_enum_values_round_trip::<CompensationMode>(&schema, "CompensationMode");

    let Some(action_schema) = upstream_schema(ACTION_SCHEMA) else {
        return;
    };
    assert_upstream_enum_values_round_trip::<ActionMode>(&action_schema, "ActionMode");
    assert_upstream_enum_values_round_trip::<ApprovalDecisionKind>(
        &action_schema,
        "ApprovalDecisionKind",
    );
    assert_upstream_enum_values_round_trip::<ConversationStatus>(
        &action_schema,
        "ConversationStatus",
    );
    assert_upstream_enum_values_round_trip::<ConversationPriority>(&action_schema, "Priority");
}

/// An action invoking the seed booking capability with nothing optional set.
fn minimal_action() -> Action {
    let mut action = Action::new(
        CapabilityId::from("cap:calendar:booking:create"),
        json!({ "starts_at": "2030-01-31T09:00:00Z" }),
    );
    action.id = ActionId::trusted("act_wire_compat_minimal");
    action
}

/// An action with every optional field and every nested optional field set.
fn maximal_action() -> Action {
    let mut action = minimal_action();
    action.id = ActionId::trusted("act_wire_compat_maximal");
    action.mode = Some(ActionMode::Streaming);
    action.idempotency_key = Some("booking-2030-01-31".to_owned());
    action.timeout_ms = Some(30_000);
    action.conversation = Some(Box::new(Conversation {
        id: ConversationId::trusted("conv_wire_compat"),
        channel: json!({ "kind": "email" }),
        status: ConversationStatus::Pending,
        external_refs: vec![ExternalRef {
            system: "chatwoot".to_owned(),
            ref_type: "conversation".to_owned(),
            id: "42".to_owned(),
        }],
        contact: Some(principal("contact:ada", PrincipalKind::Contact)),
        assignee: Some(principal("human:ops", PrincipalKind::Human)),
        priority: Some(ConversationPriority::High),
        labels: vec!["vip".to_owned()],
        metadata: Some(json!({ "source": "inbox" })),
    }));
    action.memory_context = Some(Box::new(json!({ "summary": "prefers mornings" })));
    action.delegation_chain = vec![DelegationEntry {
        from: principal("human:ada", PrincipalKind::Human),
        to: principal("agent:scheduler", PrincipalKind::Agent),
        scope: "calendar:write".to_owned(),
        delegated_at: FIXED_INSTANT,
    }];
    action.federation = Some(Box::new(FederationContext {
        trust_domain: "calendar.example".to_owned(),
        hops: vec!["gateway.example".to_owned()],
    }));
    action.callback = Some(Box::new(Callback {
        profile: ProfileId::from(profiles::HTTP_WEBHOOK),
        target: "https://callbacks.example/aip".to_owned(),
        metadata: Some(json!({ "signing_key": "ref:key-1" })),
    }));
    action.observability = Some(Box::new(ObservabilityContext {
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
        span_id: Some("00f067aa0ba902b7".to_owned()),
        fields: Some(json!({ "tenant": "acme" })),
    }));
    action.compliance = Some(Box::new(ComplianceContext {
        regimes: vec!["gdpr".to_owned()],
        data_classification: Some("internal".to_owned()),
        metadata: Some(json!({ "dpa": "v2" })),
    }));
    action.identity = Some(Box::new(IdentityContext {
        tenant: Some(TenantRef {
            id: "tenant:acme".to_owned(),
            system: Some("aip".to_owned()),
        }),
        external_account: Some(ExternalAccountRef {
            id: "acct-7".to_owned(),
            system: "calendar".to_owned(),
        }),
        external_user: Some(ExternalUserRef {
            id: "user-9".to_owned(),
            system: "calendar".to_owned(),
        }),
        human_actor: Some(Box::new(principal("human:ada", PrincipalKind::Human))),
        service_account: Some(Box::new(maximal_principal())),
        acted_on_behalf_of: Some(Box::new(principal(
            "customer:acme",
            PrincipalKind::Customer,
        ))),
        credential_ref: Some(CredentialRef {
            id: "vault:calendar:1".to_owned(),
            issuer: "vault:primary".to_owned(),
            scopes: vec!["calendar.write".to_owned()],
        }),
        oauth: Some(OAuthCredentialState {
            issuer: "https://idp.example".to_owned(),
            client_id: Some("client-1".to_owned()),
            scopes: vec!["calendar".to_owned()],
            expires_at: Some(FIXED_INSTANT),
            refresh_available: true,
        }),
    }));
    action.approval = Some(Box::new(ApprovalDecision {
        approval_id: ApprovalId::trusted("appr_wire_compat"),
        decision: ApprovalDecisionKind::Approved,
        approver: principal("human:manager", PrincipalKind::Human),
        decided_at: FIXED_INSTANT,
        reason: Some("within budget".to_owned()),
        constraints: vec![ApprovalConstraint {
            field: "/starts_at".to_owned(),
            operator: "matches".to_owned(),
            value: json!("^2030-"),
        }],
        evidence: vec![EvidenceArtifact {
            id: "evidence:1".to_owned(),
            kind: "ticket".to_owned(),
            uri: Some("https://tickets.example/1".to_owned()),
            hash: Some("sha256:00".to_owned()),
            redacted: true,
        }],
        decision_id: Some("decision:1".to_owned()),
        policy_hash: Some("sha256:11".to_owned()),
        authority_path: vec!["role:manager".to_owned()],
        target_decision_id: Some("decision:0".to_owned()),
    }));
    action.transaction = Some(Box::new(ActionTransaction {
        mode: TransactionMode::Compensate,
        transaction_id: Some(TransactionId::trusted("txn_wire_compat")),
        plan_id: Some("plan:1".to_owned()),
        compensation_for: Some(ActionId::trusted("act_wire_compat_original")),
    }));
    action
}

#[test]
fn actions_validate_against_the_action_schema() {
    let Some(action_schema) = upstream_schema(ACTION_SCHEMA) else {
        return;
    };
    assert_valid_against(&action_schema, &to_value(&minimal_action()));
    let maximal = to_value(&maximal_action());
    assert_valid_against(&action_schema, &maximal);
    assert_uses_every_declared_property(&action_schema, &maximal);
}

#[test]
fn maximal_action_round_trips() {
    assert_round_trips(&maximal_action());
}

// ---------------------------------------------------------------------------------------------
// 5. Serde defaults and strictness, as upstream.
// ---------------------------------------------------------------------------------------------

#[test]
fn approval_policy_defaults_fill_in_on_input_and_are_always_written() {
    let policy: ApprovalPolicy = serde_json::from_value(json!({
        "required": true,
        "approver_selector": { "type": "tenant_policy" }
    }))
    .expect("a policy without the defaulted keys parses");

    assert_eq!(policy.minimum_distinct_principals, 1);
    assert_eq!(policy.separation_of_duties, SeparationOfDuties::default());
    assert_eq!(
        to_text(&policy),
        to_text(&json!({
            "required": true,
            "approver_selector": { "type": "tenant_policy" },
            "minimum_distinct_principals": 1,
            "separation_of_duties": {
                "requester_must_differ": false,
                "operator_must_differ": false,
                "allow_self_approval": false
            }
        }))
    );
}

#[test]
fn separation_of_duties_reads_absent_flags_as_false() {
    let partial: SeparationOfDuties =
        serde_json::from_value(json!({ "operator_must_differ": true })).expect("parses");
    assert_eq!(
        partial,
        SeparationOfDuties {
            requester_must_differ: false,
            operator_must_differ: true,
            allow_self_approval: false,
        }
    );
    assert_eq!(
        to_text(&partial),
        r#"{"requester_must_differ":false,"operator_must_differ":true,"allow_self_approval":false}"#
    );
}

#[test]
fn composite_rule_flags_default_on_input_and_are_always_written() {
    let quorum: ApprovalRule = serde_json::from_value(json!({
        "operator": "quorum",
        "required": 1,
        "rules": [{ "operator": "role", "name": "controller" }]
    }))
    .expect("a quorum without distinct_principals parses");
    assert!(matches!(
        quorum,
        ApprovalRule::Quorum {
            distinct_principals: true,
            ..
        }
    ));
    assert_eq!(
        to_text(&quorum),
        r#"{"operator":"quorum","required":1,"rules":[{"operator":"role","name":"controller"}],"distinct_principals":true}"#
    );

    let all: ApprovalRule = serde_json::from_value(json!({ "operator": "all", "rules": [] }))
        .expect("an all without allow_decision_reuse parses");
    assert_eq!(
        to_text(&all),
        r#"{"operator":"all","rules":[],"allow_decision_reuse":false}"#
    );
}

#[test]
fn resource_access_flags_default_false_and_are_always_written() {
    let access: ResourceAccessPolicy = serde_json::from_value(json!({})).expect("parses");
    assert_eq!(access, ResourceAccessPolicy::default());
    assert_eq!(
        to_text(&access),
        r#"{"public":false,"tenant_required":false}"#
    );
}

#[test]
fn implementation_support_rejects_any_missing_field() {
    let complete = to_value(&CapabilityImplementationSupport::INVOCATION_ONLY);
    let Value::Object(fields) = &complete else {
        panic!("implementation support serializes to an object");
    };
    assert_eq!(fields.len(), 9);
    serde_json::from_value::<CapabilityImplementationSupport>(complete.clone())
        .expect("all nine fields parse");

    for missing in fields.keys() {
        let mut partial = fields.clone();
        partial.remove(missing);
        let error =
            serde_json::from_value::<CapabilityImplementationSupport>(Value::Object(partial))
                .expect_err("a record without every field is refused");
        assert!(
            error
                .to_string()
                .contains(&format!("missing field `{missing}`")),
            "unexpected error for `{missing}`: {error}"
        );
    }
}

/// `document` with `key` set to `null`.
fn with_null(mut document: Value, key: &str) -> Value {
    document[key] = Value::Null;
    document
}

#[test]
fn null_is_refused_for_list_fields() {
    let seed = seed_booking_capability_json();
    let contract = seed["contract"].clone();
    let echo_manifest = to_value(&manifest());
    let agent = echo_manifest["agent"].clone();

    assert!(serde_json::from_value::<Capability>(with_null(seed, "bindings")).is_err());
    assert!(
        serde_json::from_value::<CapabilityContract>(with_null(contract, "side_effects")).is_err()
    );
    assert!(
        serde_json::from_value::<Manifest>(with_null(echo_manifest.clone(), "capabilities"))
            .is_err()
    );
    assert!(serde_json::from_value::<Manifest>(with_null(echo_manifest, "profiles")).is_err());
    assert!(serde_json::from_value::<Principal>(with_null(agent, "external_refs")).is_err());
}

#[test]
fn null_is_read_as_none_for_optional_fields() {
    let seed = seed_booking_capability_json();
    let described: Capability =
        serde_json::from_value(with_null(seed.clone(), "description")).expect("parses");
    assert_eq!(described.description, None);

    let uncontracted: Capability =
        serde_json::from_value(with_null(seed, "contract")).expect("parses");
    assert_eq!(uncontracted.contract, None);

    let policy: ApprovalPolicy = serde_json::from_value(json!({
        "required": true,
        "approver_selector": { "type": "tenant_policy" },
        "rule": null,
        "delegated_authority": null
    }))
    .expect("parses");
    assert_eq!((policy.rule, policy.delegated_authority), (None, None));

    let resource: Resource = serde_json::from_value(json!({
        "id": "res:1",
        "name": "one",
        "expires_at": null
    }))
    .expect("a null timestamp parses");
    assert_eq!(resource.expires_at, None);
}

#[test]
fn schema_check_reports_every_violation_with_its_instance_path() {
    let Some(manifest_schema) = upstream_schema(MANIFEST_SCHEMA) else {
        return;
    };
    let mut broken = to_value(&manifest());
    broken["unexpected"] = json!(true);
    broken["capabilities"][0]["kind"] = json!("gadget");

    let failure = std::panic::catch_unwind(|| assert_valid_against(&manifest_schema, &broken))
        .expect_err("a manifest with an unknown key and an unknown kind is invalid");
    let message = failure
        .downcast_ref::<String>()
        .expect("the failure carries a formatted message");
    assert!(message.contains("at `/`"), "{message}");
    assert!(message.contains("at `/capabilities/0/kind`"), "{message}");
}
