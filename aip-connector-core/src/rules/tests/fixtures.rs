//! Fixture builder: upstream-style capabilities (`aip-model.md` §8.2), the seed example, and
//! helpers that run the checker and compare `(code, path)` pairs.

use serde_json::json;

use crate::ids::CapabilityId;
use crate::issue::Issue;
use crate::model::{
    ApprovalPolicy, Capability, CapabilityContract, CapabilityImplementationSupport,
    CapabilityKind, CompensationContract, CompensationMode, CredentialPolicy, DataContract,
    DataSensitivity, DryRunFidelity, EvidenceRequirement, ExecutionContract,
    ExpectedCompletionMode, IdempotencyCollisionBehavior, IdempotencyContract, IdempotencyKeyScope,
    IdempotencyRequirement, RetrySafety, ServiceLevelContract, SideEffect, TransactionContract,
    TransactionMode,
};
use crate::rules::{CheckOptions, ImplementationFacts, Waiver, check_capability};

/// Id of the upstream-style enterprise fixture.
pub(super) const ENTERPRISE_ID: &str = "cap:test:enterprise";
/// Id of the governed financial fixture.
pub(super) const FINANCIAL_ID: &str = "cap:test:payment";
/// Id of the capability that compensates the financial fixture.
pub(super) const REFUND_ID: &str = "cap:test:refund";

/// Upstream testkit `capability(id, name)`: a tool with an object input schema.
pub(super) fn capability(id: &str, name: &str) -> Capability {
    let mut capability =
        Capability::new(id, name, CapabilityKind::Tool, json!({ "type": "object" }));
    capability.description = Some(format!("Test capability {name}"));
    capability
}

/// Upstream testkit `capability_contract(side_effects)`.
pub(super) fn capability_contract(side_effects: &[SideEffect]) -> CapabilityContract {
    CapabilityContract {
        side_effects: side_effects.to_vec(),
        idempotency: IdempotencyContract {
            requirement: IdempotencyRequirement::Required,
            collision_behavior: IdempotencyCollisionBehavior::ReturnOriginalResult,
            key_scope: IdempotencyKeyScope::Capability,
            ttl_ms: Some(86_400_000),
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

/// Upstream testkit `enterprise_capability`: `capability_contract([read, write])`.
pub(super) fn enterprise_capability() -> Capability {
    let mut capability = capability(ENTERPRISE_ID, "enterprise");
    capability.contract = Some(capability_contract(&[SideEffect::Read, SideEffect::Write]));
    capability
}

/// The enterprise fixture with its contract changed by `change`.
pub(super) fn enterprise_with(change: impl FnOnce(&mut CapabilityContract)) -> Capability {
    let mut capability = enterprise_capability();
    if let Some(contract) = capability.contract.as_mut() {
        change(contract);
    }
    capability
}

/// Upstream testkit `governed_financial_capability(..., compensation_id)`.
pub(super) fn governed_financial_capability(compensation_id: &str) -> Capability {
    let mut capability = capability(FINANCIAL_ID, "payment");
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
        compensation_window_ms: Some(86_400_000),
        requires_approval: true,
    });
    capability.contract = Some(contract);
    capability
}

/// The governed financial fixture with its contract changed by `change`.
pub(super) fn financial_with(change: impl FnOnce(&mut CapabilityContract)) -> Capability {
    let mut capability = governed_financial_capability(REFUND_ID);
    if let Some(contract) = capability.contract.as_mut() {
        change(contract);
    }
    capability
}

/// "Example capability" of `seed-capabilities-and-contracts.md`, parsed from its JSON.
pub(super) fn seed_example_capability() -> Capability {
    let json = r#"{
      "id": "cap:calendar:booking:create",
      "name": "Create booking",
      "kind": "tool",
      "input_schema": {
        "type": "object",
        "required": ["starts_at"],
        "properties": { "starts_at": { "type": "string", "format": "date-time" } },
        "additionalProperties": false
      },
      "output_schema": {
        "type": "object",
        "required": ["booking_id"],
        "properties": { "booking_id": { "type": "string" } },
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
        "data": { "sensitivity": "internal", "contains_pii": true, "redaction_required": true }
      }
    }"#;
    serde_json::from_str(json).expect("the seed example is a valid capability")
}

/// The support record that implements exactly what the capability's contract claims.
pub(super) fn exact_support(capability: &Capability) -> CapabilityImplementationSupport {
    let mut support = CapabilityImplementationSupport {
        invocation: capability.is_callable(),
        ..CapabilityImplementationSupport::default()
    };
    let Some(contract) = &capability.contract else {
        return support;
    };
    support.cancellation = contract.execution.supports_cancel;
    support.streaming = contract.execution.supports_streaming;
    support.retry = contract.execution.supports_retry;
    support.transaction = contract.transaction.is_some();
    support.reconciliation = contract
        .transaction
        .as_ref()
        .is_some_and(|t| t.supports(TransactionMode::Reconcile));
    support.compensation = contract
        .compensation
        .as_ref()
        .is_some_and(|c| c.mode == CompensationMode::Supported);
    support.approval = contract.approval.as_ref().is_some_and(|a| a.required);
    support.credentials = contract.credentials.as_ref().is_some_and(|c| c.required);
    support
}

/// Facts for an implementation that does exactly what the contract claims, with a validation
/// handler.
pub(super) fn exact_facts(capability: &Capability) -> ImplementationFacts {
    ImplementationFacts {
        support: exact_support(capability),
        // A validation handler exactly where a preview asks one.
        validation_handler: capability
            .contract
            .as_ref()
            .and_then(|c| c.transaction.as_ref())
            .is_some_and(|t| {
                (t.supports(crate::model::TransactionMode::DryRun)
                    || t.supports(crate::model::TransactionMode::Plan))
                    && t.dry_run_fidelity.needs_validation_handler()
            }),
        compensation_handler: false,
        stream_required: false,
    }
}

/// Every rule for a lone capability, without implementation facts or waivers.
pub(super) fn check(capability: &Capability) -> Vec<Issue> {
    check_capability(capability, &CheckOptions::default())
}

/// Every rule for a lone capability, with implementation facts.
pub(super) fn check_with(capability: &Capability, facts: &ImplementationFacts) -> Vec<Issue> {
    let options = CheckOptions {
        implementation: Some(facts),
        ..CheckOptions::default()
    };
    check_capability(capability, &options)
}

/// Every rule for a lone capability, with waivers.
pub(super) fn check_waived(capability: &Capability, waivers: &[Waiver]) -> Vec<Issue> {
    let options = CheckOptions {
        waivers,
        ..CheckOptions::default()
    };
    check_capability(capability, &options)
}

/// The `(code, path)` pairs of `issues`, in order.
pub(super) fn codes_and_paths(issues: &[Issue]) -> Vec<(&str, &str)> {
    issues
        .iter()
        .map(|issue| (issue.code.as_str(), issue.path.as_str()))
        .collect()
}

/// Asserts that `issues` is exactly one issue with `code` at `path` about `capability`.
#[track_caller]
pub(super) fn assert_single(issues: &[Issue], code: &str, path: &str, capability: &Capability) {
    assert_eq!(codes_and_paths(issues), [(code, path)], "{issues:#?}");
    assert_eq!(issues[0].capability_id.as_ref(), Some(&capability.id));
}

/// Asserts that there are no issues.
#[track_caller]
pub(super) fn assert_clean(issues: &[Issue]) {
    assert!(issues.is_empty(), "unexpected issues: {issues:#?}");
}

/// A published waiver.
pub(super) fn waiver(capability_id: &str, code: &str, reason: &str) -> Waiver {
    Waiver {
        capability_id: CapabilityId::from(capability_id),
        code: code.to_owned(),
        reason: reason.to_owned(),
    }
}
