//! Building the wire errors and failed results the pipeline returns.

use aip_connector_core::ids::ActionId;
use aip_connector_core::model::{ActionResult, ErrorCategory, ProtocolError};
use serde_json::{Value, json};

/// The `source` of errors raised by the host itself.
pub(crate) const HOST_COMPONENT: &str = "aip-connector.host";

/// An error with code, message, category and retryability, and no `source`. The serving layer
/// raises these as they are; the host marks its own with [`error`].
pub(crate) fn classified(
    code: &str,
    message: impl Into<String>,
    category: ErrorCategory,
    retryable: bool,
) -> ProtocolError {
    let mut error = ProtocolError::new(code, message, category);
    error.retryable = Some(retryable);
    error
}

/// A host error: code, message, category, retryability and optional details.
pub(crate) fn error(
    code: &str,
    message: impl Into<String>,
    category: ErrorCategory,
    retryable: bool,
) -> ProtocolError {
    let mut error = classified(code, message, category, retryable);
    error.source = Some(json!({ "component": HOST_COMPONENT }));
    error
}

/// A permanent, non-retryable error.
pub(crate) fn permanent(code: &str, message: impl Into<String>) -> ProtocolError {
    error(code, message, ErrorCategory::Permanent, false)
}

/// A policy error (never retryable).
pub(crate) fn policy(code: &str, message: impl Into<String>) -> ProtocolError {
    error(code, message, ErrorCategory::Policy, false)
}

/// Attaches details.
pub(crate) fn with_details(mut error: ProtocolError, details: Value) -> ProtocolError {
    error.details = Some(details);
    error
}

/// A failed result carrying `error`.
pub(crate) fn failed(action_id: &ActionId, error: ProtocolError) -> ActionResult {
    ActionResult::failed(action_id.clone(), error)
}

/// The failure for a store error: the store failed, temporary and retryable after a second. The
/// message never carries record contents (`StoreError` guarantees it). A corrupt row or a
/// refused configuration is not retryable: the same call meets it again every time (a review
/// found a corrupt record under a key answering "retry in a second" for good), as the approval
/// service already had it.
///
/// The one refusal a store reports, a plan id another transaction already answers to, is
/// `transaction.plan_already_claimed` instead (policy, not retryable): the host checks plan ids
/// before it inserts, and this is the race that check cannot close, or a stage that has no such
/// check (an `execute` naming a taken plan id).
pub(crate) fn storage(error: &crate::store::StoreError) -> ProtocolError {
    if let crate::store::StoreError::PlanIdTaken = error {
        return policy(
            crate::codes::TRANSACTION_PLAN_ALREADY_CLAIMED,
            "another transaction already answers to this plan id",
        );
    }
    let retryable = !matches!(
        error,
        crate::store::StoreError::Corrupt(_) | crate::store::StoreError::InvalidConfig(_)
    );
    let mut error = self::error(
        crate::codes::STORAGE_UNAVAILABLE,
        error.to_string(),
        ErrorCategory::Temporary,
        retryable,
    );
    error.retry_after_ms = retryable.then_some(1_000);
    error
}

#[cfg(test)]
mod tests {
    use super::storage;
    use crate::store::StoreError;

    #[test]
    fn a_store_failure_is_retryable_unless_a_retry_meets_it_again() {
        for (failure, retryable) in [
            (StoreError::Unavailable("down".to_owned()), true),
            (StoreError::Fenced, true),
            (StoreError::Corrupt("bad row".to_owned()), false),
            (StoreError::InvalidConfig("bad schema".to_owned()), false),
        ] {
            let error = storage(&failure);
            assert_eq!(error.code, crate::codes::STORAGE_UNAVAILABLE, "{failure}");
            assert_eq!(error.retryable, Some(retryable), "{failure}");
            assert_eq!(
                error.retry_after_ms,
                retryable.then_some(1_000),
                "{failure}"
            );
        }
        assert_eq!(
            storage(&StoreError::PlanIdTaken).code,
            crate::codes::TRANSACTION_PLAN_ALREADY_CLAIMED
        );
    }
}
