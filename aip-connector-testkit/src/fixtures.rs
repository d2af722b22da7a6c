//! Deterministic fixtures: the same content every run, so tests and snapshots can compare them
//! byte for byte.
//!
//! The builders match the content of upstream's testkit fixtures (`aip-model.md` §8.2), so a
//! document built here reads the same as one an upstream test would build. The seed booking
//! capability is the public "Example capability" of the seed capability-contract document, once
//! built with the Rust types and once as literal JSON, so tests can check that both agree.

use aip_connector::ids::{CapabilityId, PrincipalId, ProfileId, profiles};
use aip_connector::model::{
    ApprovalPolicy, ApproverSelector, Capability, CapabilityContract, CapabilityKind,
    CompensationContract, CompensationMode, CredentialPolicy, DataContract, DataSensitivity,
    DryRunFidelity, EvidenceRequirement, ExecutionContract, ExpectedCompletionMode,
    IdempotencyCollisionBehavior, IdempotencyContract, IdempotencyKeyScope, IdempotencyRequirement,
    Manifest, Principal, PrincipalKind, RetrySafety, RiskLevel, ServiceLevelContract, SideEffect,
    Stability, TransactionContract, TransactionMode,
};
use serde_json::{Value, json};

/// One day in milliseconds: the idempotency TTL and compensation window of the fixtures.
const ONE_DAY_MS: u64 = 86_400_000;

/// A principal with only an id and a kind.
pub fn principal(id: &str, kind: PrincipalKind) -> Principal {
    Principal::new(PrincipalId::from(id), kind)
}

/// A `tool` capability with input schema `{"type":"object"}` and description
/// "Test capability {name}", and no contract.
pub fn capability(id: &str, name: &str) -> Capability {
    let mut capability = Capability::new(
        CapabilityId::from(id),
        name,
        CapabilityKind::Tool,
        json!({"type": "object"}),
    );
    capability.description = Some(format!("Test capability {name}"));
    capability
}

/// A complete contract with the given side effects: required capability-scoped idempotency,
/// sync and async execution with cancel and retry, confidential data with redaction, an SLA,
/// transactions with plan-before-commit, and no rollback. No credentials and no approval.
pub fn capability_contract(side_effects: &[SideEffect]) -> CapabilityContract {
    CapabilityContract {
        side_effects: side_effects.to_vec(),
        idempotency: IdempotencyContract {
            requirement: IdempotencyRequirement::Required,
            collision_behavior: IdempotencyCollisionBehavior::ReturnOriginalResult,
            key_scope: IdempotencyKeyScope::Capability,
            ttl_ms: Some(ONE_DAY_MS),
        },
        execution: ExecutionContract {
            supports_sync: true,
            supports_async: true,
            supports_streaming: false,
            supports_cancel: true,
            supports_retry: true,
            expected_completion: ExpectedCompletionMode::Any,
            retry_safety: RetrySafety::SafeWithIdempotencyKey,
        },
        data: DataContract {
            sensitivity: DataSensitivity::Confidential,
            contains_pii: false,
            redaction_required: true,
            residency: None,
            retention: None,
        },
        credentials: None,
        approval: None,
        sla: Some(ServiceLevelContract {
            expected_latency_ms: Some(2_000),
            timeout_ms: Some(30_000),
            async_expected: false,
            max_queue_delay_ms: Some(5_000),
            availability_target: Some("99.9%".to_owned()),
        }),
        transaction: Some(TransactionContract {
            supported_modes: vec![
                TransactionMode::Execute,
                TransactionMode::DryRun,
                TransactionMode::Plan,
                TransactionMode::Commit,
                TransactionMode::RollbackNotSupported,
            ],
            requires_plan_before_commit: true,
            dry_run_fidelity: DryRunFidelity::PolicyAndSchema,
        }),
        compensation: Some(CompensationContract {
            mode: CompensationMode::RollbackNotSupported,
            compensation_capability_id: None,
            compensation_window_ms: None,
            requires_approval: false,
        }),
    }
}

/// [`capability`] with the contract `capability_contract([read, write])`.
pub fn enterprise_capability(id: &str, name: &str) -> Capability {
    let mut capability = capability(id, name);
    capability.contract = Some(capability_contract(&[SideEffect::Read, SideEffect::Write]));
    capability
}

/// [`capability`] with a governed financial contract: the base contract changed to financial
/// writes with tenant-scoped keys, restricted PII data, required vault credentials, required
/// tenant-policy approval with evidence, a compensate transaction mode and supported compensation
/// through `compensation_id`. Execution flags stay as in the base contract.
pub fn governed_financial_capability(id: &str, name: &str, compensation_id: &str) -> Capability {
    let mut contract = capability_contract(&[SideEffect::Financial, SideEffect::Write]);
    contract.idempotency.key_scope = IdempotencyKeyScope::Tenant;
    contract.data.sensitivity = DataSensitivity::Restricted;
    contract.data.contains_pii = true;
    contract.credentials = Some(CredentialPolicy {
        required: true,
        accepted_issuers: vec!["vault:primary".to_owned()],
        required_scopes: vec!["financial:write".to_owned()],
        allow_oauth_refresh: false,
    });
    contract.approval = Some(ApprovalPolicy {
        required: true,
        reason: Some("financial mutation requires approval".to_owned()),
        approver_selector: ApproverSelector::TenantPolicy,
        ttl_ms: Some(900_000),
        evidence_requirements: vec![
            EvidenceRequirement::Reason,
            EvidenceRequirement::InputSnapshot,
            EvidenceRequirement::PolicyDecision,
        ],
        ..ApprovalPolicy::default()
    });
    if let Some(transaction) = contract.transaction.as_mut() {
        transaction.supported_modes = vec![
            TransactionMode::Execute,
            TransactionMode::DryRun,
            TransactionMode::Plan,
            TransactionMode::Commit,
            TransactionMode::Compensate,
        ];
    }
    contract.compensation = Some(CompensationContract {
        mode: CompensationMode::Supported,
        compensation_capability_id: Some(CapabilityId::from(compensation_id)),
        compensation_window_ms: Some(ONE_DAY_MS),
        requires_approval: true,
    });

    let mut capability = capability(id, name);
    capability.contract = Some(contract);
    capability
}

/// An `aip-manifest/v1` manifest for agent `agent:test` (kind `agent`) with the single
/// capability `cap:test:echo`, speaking `aip.native.http.v1`.
pub fn manifest() -> Manifest {
    let mut manifest = Manifest::new(
        principal("agent:test", PrincipalKind::Agent),
        [ProfileId::from(profiles::NATIVE_HTTP)],
    );
    manifest.capabilities = vec![capability("cap:test:echo", "echo")];
    manifest
}

/// The seed's "Example capability" (`cap:calendar:booking:create`), built with the Rust types:
/// a tenant-scoped, retry-sensitive, synchronous write.
///
/// Serializes to exactly [`seed_booking_capability_json`].
pub fn seed_booking_capability() -> Capability {
    let mut capability = Capability::new(
        CapabilityId::from("cap:calendar:booking:create"),
        "Create booking",
        CapabilityKind::Tool,
        json!({
            "type": "object",
            "required": ["starts_at"],
            "properties": {
                "starts_at": { "type": "string", "format": "date-time" }
            },
            "additionalProperties": false
        }),
    );
    capability.output_schema = Some(json!({
        "type": "object",
        "required": ["booking_id"],
        "properties": {
            "booking_id": { "type": "string" }
        },
        "additionalProperties": false
    }));
    capability.risk = Some(RiskLevel::Medium);
    capability.stability = Some(Stability::Stable);
    capability.contract = Some(CapabilityContract {
        side_effects: vec![SideEffect::Write, SideEffect::ExternalNetwork],
        idempotency: IdempotencyContract {
            requirement: IdempotencyRequirement::Required,
            collision_behavior: IdempotencyCollisionBehavior::RevalidateInputHash,
            key_scope: IdempotencyKeyScope::Tenant,
            ttl_ms: Some(ONE_DAY_MS),
        },
        execution: ExecutionContract {
            supports_sync: true,
            supports_async: false,
            supports_streaming: false,
            supports_cancel: false,
            supports_retry: true,
            expected_completion: ExpectedCompletionMode::Sync,
            retry_safety: RetrySafety::SafeWithIdempotencyKey,
        },
        data: DataContract {
            sensitivity: DataSensitivity::Internal,
            contains_pii: true,
            redaction_required: true,
            residency: None,
            retention: None,
        },
        credentials: None,
        approval: None,
        sla: None,
        transaction: None,
        compensation: None,
    });
    capability
}

/// The seed's "Example capability" as literal JSON, verbatim (keys in the seed's order).
pub fn seed_booking_capability_json() -> Value {
    json!({
      "id": "cap:calendar:booking:create",
      "name": "Create booking",
      "kind": "tool",
      "input_schema": {
        "type": "object",
        "required": ["starts_at"],
        "properties": {
          "starts_at": { "type": "string", "format": "date-time" }
        },
        "additionalProperties": false
      },
      "output_schema": {
        "type": "object",
        "required": ["booking_id"],
        "properties": {
          "booking_id": { "type": "string" }
        },
        "additionalProperties": false
      },
      "risk": "medium",
      "stability": "stable",
      "contract": {
        "side_effects": ["write", "external_network"],
        "idempotency": {
          "requirement": "required",
          "collision_behavior": "revalidate_input_hash",
          "key_scope": "tenant",
          "ttl_ms": 86400000
        },
        "execution": {
          "supports_sync": true,
          "supports_async": false,
          "supports_streaming": false,
          "supports_cancel": false,
          "supports_retry": true,
          "expected_completion": "sync",
          "retry_safety": "safe_with_idempotency_key"
        },
        "data": {
          "sensitivity": "internal",
          "contains_pii": true,
          "redaction_required": true
        }
      }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governed_financial_keeps_base_execution_and_sla() {
        let base = capability_contract(&[SideEffect::Read]);
        let governed = governed_financial_capability("cap:t:pay", "pay", "cap:t:refund")
            .contract
            .expect("contract");
        assert_eq!(governed.execution, base.execution);
        assert_eq!(governed.sla, base.sla);
        assert_eq!(
            governed.data.redaction_required,
            base.data.redaction_required
        );
        assert_eq!(
            governed
                .compensation
                .and_then(|c| c.compensation_capability_id),
            Some(CapabilityId::from("cap:t:refund"))
        );
    }

    #[test]
    fn manifest_declares_one_echo_capability_on_native_http() {
        let manifest = manifest();
        assert_eq!(manifest.manifest_version, "aip-manifest/v1");
        assert_eq!(manifest.agent.id, "agent:test");
        assert_eq!(manifest.agent.kind, PrincipalKind::Agent);
        assert_eq!(
            manifest.profiles,
            vec![ProfileId::from("aip.native.http.v1")]
        );
        let ids: Vec<&str> = manifest
            .capabilities
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["cap:test:echo"]);
    }
}
