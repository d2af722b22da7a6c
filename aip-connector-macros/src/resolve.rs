//! Turns the attribute and the signature into the real `Capability`, its `CapabilityContract`
//! and the implementation facts, applying the documented defaults.
//!
//! Defaults are the *safest honest* value, and whatever the signature proves is derived from it
//! (`docs/attribute-reference.md` lists every default). The values built here are the ones the
//! shared rules check and the ones published in the manifest: nothing is recomputed later.

use aip_connector_core::model::{
    Capability, CapabilityContract, CapabilityImplementationSupport, CapabilityKind,
    CompensationContract, CompensationMode, DataContract, DataSensitivity, DryRunFidelity,
    ExecutionContract, ExpectedCompletionMode, IdempotencyCollisionBehavior, IdempotencyContract,
    IdempotencyKeyScope, IdempotencyRequirement, RetrySafety, SideEffect, TransactionContract,
    TransactionMode,
};
use aip_connector_core::rules::ImplementationFacts;

use crate::attr::CapabilityAttr;
use crate::signature::{Extractor, HandlerSignature};

/// Idempotency keys are kept one day unless the author says otherwise.
pub(crate) const DEFAULT_IDEMPOTENCY_TTL_MS: u64 = 86_400_000;

/// The capability as it will be published, plus what the signature proves.
pub(crate) struct ResolvedCapability {
    pub(crate) capability: Capability,
    pub(crate) facts: ImplementationFacts,
}

/// Builds the published capability. `input_schema` is a placeholder object here: the real
/// schema is derived from the input type at run time (schemars), and its object root is checked
/// there and by admission.
pub(crate) fn resolve(
    attr: &CapabilityAttr,
    sig: &HandlerSignature,
    id: String,
    description: Option<String>,
) -> ResolvedCapability {
    let side_effects = attr.side_effects.clone().unwrap_or_default();
    let read_only = !side_effects.is_empty() && side_effects.iter().all(|e| *e == SideEffect::Read);
    let support = support(attr, sig);

    let idempotency = idempotency(attr, sig, read_only);
    let execution = execution(attr, sig, read_only, &support);
    let data = data(attr);
    let transaction = attr.transaction.as_ref().map(|t| TransactionContract {
        supported_modes: t.modes.clone(),
        requires_plan_before_commit: t.requires_plan.unwrap_or_else(|| {
            t.modes.contains(&TransactionMode::Plan) && t.modes.contains(&TransactionMode::Commit)
        }),
        dry_run_fidelity: t.fidelity.unwrap_or(DryRunFidelity::SchemaOnly),
    });
    let approval_required = attr.approval.as_ref().is_some_and(|a| a.required);
    let compensation = attr.compensation.as_ref().map(|c| {
        let mode = c.mode.unwrap_or(if c.capability.is_some() {
            CompensationMode::Supported
        } else {
            CompensationMode::NotRequired
        });
        CompensationContract {
            mode,
            compensation_capability_id: c.capability.clone().map(Into::into),
            compensation_window_ms: c.window_ms,
            // Compensation is a new governed action: it needs approval when the original did.
            // Where there is none to run (`not_required`, `rollback_not_supported`), a manifest
            // saying compensations need approval reads as if one could run (upstream's own
            // fixtures publish `false` there; a porting trial).
            requires_approval: c
                .requires_approval
                .unwrap_or(approval_required && mode == CompensationMode::Supported),
        }
    });

    let contract = CapabilityContract {
        side_effects,
        idempotency,
        execution,
        data,
        credentials: attr.credentials.clone(),
        approval: attr.approval.clone(),
        sla: attr.sla.clone(),
        transaction,
        compensation,
    };

    let mut capability = Capability::new(
        id,
        attr.name
            .as_ref()
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| humanize(&sig.ident.to_string())),
        attr.kind.map(|(k, _)| k).unwrap_or(CapabilityKind::Tool),
        serde_json::json!({ "type": "object" }),
    );
    capability.description = description;
    capability.risk = attr.risk;
    capability.stability = attr.stability;
    capability.cost = attr.cost.clone();
    capability.auth = attr.auth.clone();
    capability.bindings = attr.bindings.clone();
    capability.contract = Some(contract);

    let facts = ImplementationFacts {
        support: with_compensation(support, &capability),
        validation_handler: attr.validate.is_some(),
        compensation_handler: sig.has(Extractor::Compensation),
        stream_required: sig.has(Extractor::StreamSink),
    };
    ResolvedCapability { capability, facts }
}

/// What the signature and the companion handlers prove the implementation supports.
fn support(attr: &CapabilityAttr, sig: &HandlerSignature) -> CapabilityImplementationSupport {
    CapabilityImplementationSupport {
        invocation: true,
        cancellation: sig.has(Extractor::Cancellation) || attr.cancel.is_some(),
        streaming: sig.has(Extractor::StreamSink),
        retry: sig.has(Extractor::IdempotencyKey),
        // A compensating handler's `Checkpoint` records on the compensation transaction of the
        // capability it undoes (whose contract declares `compensate`), never on a transaction of
        // its own: it claims none.
        transaction: sig.has(Extractor::Checkpoint) && !sig.has(Extractor::Compensation),
        reconciliation: attr.reconcile.is_some(),
        compensation: false,
        approval: sig.has(Extractor::Approval),
        credentials: sig.has(Extractor::Credential),
    }
}

/// Compensation is implemented by a separate capability; naming it is the implementation claim
/// (the connector checks that it exists).
fn with_compensation(
    mut support: CapabilityImplementationSupport,
    capability: &Capability,
) -> CapabilityImplementationSupport {
    support.compensation = capability
        .contract
        .as_ref()
        .and_then(|c| c.compensation.as_ref())
        .is_some_and(|c| c.compensation_capability_id.is_some());
    support
}

fn idempotency(
    attr: &CapabilityAttr,
    sig: &HandlerSignature,
    read_only: bool,
) -> IdempotencyContract {
    let given = &attr.idempotency;
    // A handler that forwards the key can honour a required key; a read can be repeated without
    // one; anything else cannot be made idempotent by the host alone.
    let requirement = given
        .requirement
        .unwrap_or(if sig.has(Extractor::IdempotencyKey) {
            IdempotencyRequirement::Required
        } else if read_only {
            IdempotencyRequirement::Optional
        } else {
            IdempotencyRequirement::Unsupported
        });
    IdempotencyContract {
        requirement,
        collision_behavior: given
            .collision
            .unwrap_or(IdempotencyCollisionBehavior::RevalidateInputHash),
        key_scope: given.scope.unwrap_or(IdempotencyKeyScope::Tenant),
        ttl_ms: given
            .ttl_ms
            .or((requirement != IdempotencyRequirement::Unsupported)
                .then_some(DEFAULT_IDEMPOTENCY_TTL_MS)),
    }
}

fn execution(
    attr: &CapabilityAttr,
    sig: &HandlerSignature,
    read_only: bool,
    support: &CapabilityImplementationSupport,
) -> ExecutionContract {
    let given = &attr.execution;
    let streams = sig.has(Extractor::StreamSink);
    let supports_sync = given.sync.unwrap_or(!streams);
    let supports_async = given.r#async.unwrap_or(false);
    let supports_streaming = given.streaming.unwrap_or(streams);
    let expected_completion =
        given
            .expected
            .unwrap_or(match (supports_sync, supports_async, supports_streaming) {
                (true, false, false) => ExpectedCompletionMode::Sync,
                (false, true, false) => ExpectedCompletionMode::Async,
                (false, false, true) => ExpectedCompletionMode::Streaming,
                _ => ExpectedCompletionMode::Any,
            });
    let supports_retry = given.retry.unwrap_or(support.retry);
    // Safe to retry only what the signature proves: a forwarded key, or a read that needs no
    // key. A required key the handler never sees leaves retry safety unknown.
    let key_required_but_unused = given_requirement(attr) == Some(IdempotencyRequirement::Required)
        && !sig.has(Extractor::IdempotencyKey);
    let retry_safety = given
        .retry_safety
        .unwrap_or(if sig.has(Extractor::IdempotencyKey) {
            RetrySafety::SafeWithIdempotencyKey
        } else if key_required_but_unused {
            RetrySafety::Unknown
        } else if read_only {
            RetrySafety::Safe
        } else {
            RetrySafety::Unsafe
        });
    ExecutionContract {
        supports_sync,
        supports_async,
        supports_streaming,
        supports_cancel: given.cancel.unwrap_or(support.cancellation),
        supports_retry,
        expected_completion,
        retry_safety,
    }
}

fn data(attr: &CapabilityAttr) -> DataContract {
    let given = &attr.data;
    let sensitivity = given.sensitivity.unwrap_or(DataSensitivity::Unknown);
    let contains_pii = given.pii.unwrap_or(false);
    // Unknown data is treated as sensitive: redact unless the author classified it.
    let redaction_required = given.redaction.unwrap_or(
        contains_pii || sensitivity.requires_redaction() || sensitivity == DataSensitivity::Unknown,
    );
    DataContract {
        sensitivity,
        contains_pii,
        redaction_required,
        residency: given.residency.clone(),
        retention: given.retention.clone(),
    }
}

fn given_requirement(attr: &CapabilityAttr) -> Option<IdempotencyRequirement> {
    attr.idempotency.requirement
}

/// `create_booking` → `Create booking`.
pub(crate) fn humanize(ident: &str) -> String {
    let words = ident
        .trim_start_matches("r#")
        .split('_')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => ident.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::humanize;

    #[test]
    fn names_default_from_the_function_name() {
        assert_eq!(humanize("create_booking"), "Create booking");
        assert_eq!(humanize("r#type"), "Type");
    }
}
