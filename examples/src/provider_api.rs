//! What the calendar and payments examples share about their provider's API: client-chosen
//! operation ids, tenant-scoped idempotency keys, and operation lookups for reconciliation.
//!
//! The provider API these examples are written against (which the testkit's provider double
//! implements) accepts a client-chosen operation id in the `x-operation-id` header of a
//! mutating request, deduplicates requests by their `Idempotency-Key`, and answers
//! `GET /operations/{id}` with the operation's state. Choosing the id before the call is what
//! lets a handler checkpoint it durably *before* the request leaves: whatever happens to the
//! request, reconciliation knows which operation to ask about.

use aip_connector::model::{ConnectorOperation, ProviderOperationRef};
use aip_connector::prelude::*;
use serde_json::Value;

/// Request header carrying the client-chosen operation id.
pub(crate) const OPERATION_ID_HEADER: &str = "x-operation-id";

/// What the provider knows about an operation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OperationState {
    /// The provider applied it; `result` is the provider's answer to the request that made it.
    Committed { result: Value },
    /// The provider has not decided yet.
    Pending,
    /// The provider has never seen it.
    Unknown,
}

/// Asks the provider about `operation` (`GET /operations/{id}`), giving up at `deadline` when
/// one is given (reconciliation has none: the host bounds it). The whole answer is returned
/// too, as evidence.
pub(crate) async fn look_up(
    api: &ProviderClient,
    operation: &ProviderOperationRef,
    purpose: ConnectorOperation,
    deadline: Option<&Deadline>,
) -> Result<(OperationState, Value), ConnectorFailure> {
    let path = format!("/operations/{}", path_segment(&operation.operation_id));
    let mut call = api
        .get(&path)
        .operation(purpose)
        .provider_operation(operation.clone());
    if let Some(deadline) = deadline {
        call = call.deadline(deadline);
    }
    let answer: Value = call.send_json().await?;
    let state = match answer.get("state").and_then(Value::as_str) {
        Some("committed") => OperationState::Committed {
            result: answer.get("result").cloned().unwrap_or(Value::Null),
        },
        Some("unknown") => OperationState::Unknown,
        // `pending`, or a state this connector does not know: no final answer either way.
        _ => OperationState::Pending,
    };
    Ok((state, answer))
}

/// The reconciliation answer for `operation`. An operation the provider has never seen was
/// never applied: its id was checkpointed before the request was sent, and the host reconciles
/// only once the attempt is over (after `reconcile_after_ms`).
pub(crate) async fn reconcile(
    api: &ProviderClient,
    request: &Reconciliation,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    let (state, evidence) = look_up(
        api,
        &request.provider_operation,
        ConnectorOperation::Reconciliation,
        None,
    )
    .await?;
    Ok(match state {
        OperationState::Committed { .. } => ReconcileOutcome::Committed {
            evidence: Some(evidence),
        },
        OperationState::Unknown => ReconcileOutcome::NotCommitted {
            evidence: Some(evidence),
        },
        // The provider's cursor, when its answer has one, so a later round (on this host or a
        // restarted one) resumes the lookup from it.
        OperationState::Pending => ReconcileOutcome::Pending {
            cursor: evidence
                .get("cursor")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| request.cursor.clone()),
        },
    })
}
