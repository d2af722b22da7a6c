//! `ProtocolError`, `ErrorBody` and the connector-layer `ConnectorFailure` (`aip-model.md` §4.3,
//! §9.2).
//!
//! `ProtocolError` is what travels on the wire; `ConnectorFailure` is what a connector returns.
//! The two convert into each other with upstream's exact field mapping, which is deliberately not
//! symmetric (see [`ConnectorFailure::from_protocol_error`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ProviderOperationRef;

/// Stable machine codes used by this crate and the connector layer (`aip-model.md` §4.3).
pub mod codes {
    /// The action input was rejected ([`ProtocolError::invalid_input`](super::ProtocolError::invalid_input)).
    pub const ACTION_INVALID_INPUT: &str = "action.invalid_input";
    /// The connector does not implement the requested operation.
    pub const CONNECTOR_OPERATION_UNSUPPORTED: &str = "connector.operation_unsupported";
    /// A runtime error that was not a protocol error, seen by the connector layer.
    pub const CONNECTOR_RUNTIME_FAILURE: &str = "connector.runtime_failure";
    /// A connector error that was not a structured failure.
    pub const CONNECTOR_OPERATION_FAILED: &str = "connector.operation_failed";
    /// A reconciliation answer that is not terminal yet.
    pub const TRANSACTION_RECONCILIATION_PENDING: &str = "transaction.reconciliation_pending";
}

/// Machine-readable protocol or action error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolError {
    /// Stable machine code, e.g. `action.invalid_input`.
    pub code: String,
    /// Human-readable, redacted summary.
    pub message: String,
    /// Error class.
    pub category: ErrorCategory,
    /// Whether retrying may succeed; absent means the sender did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// Earliest useful retry delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Connector, profile or other source metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
}

impl ProtocolError {
    /// An error with a code, a message and a category, and nothing else said.
    pub fn new(
        code: impl Into<String>,
        message: impl Into<String>,
        category: ErrorCategory,
    ) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            category,
            retryable: None,
            retry_after_ms: None,
            details: None,
            source: None,
        }
    }

    /// The error for rejected action input: `action.invalid_input`, permanent, not retryable.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self {
            retryable: Some(false),
            ..Self::new(
                codes::ACTION_INVALID_INPUT,
                message,
                ErrorCategory::Permanent,
            )
        }
    }

    /// Whether the sender said the same request may succeed if sent again. `retryable` is
    /// optional on the wire; an error that does not say is not retryable (whether to retry
    /// such an error blindly is exactly what it did not promise).
    ///
    /// ```
    /// use aip_connector_core::model::{ErrorCategory, ProtocolError};
    ///
    /// let mut error = ProtocolError::new("provider.timeout", "no answer", ErrorCategory::Temporary);
    /// assert!(!error.is_retryable());
    /// error.retryable = Some(true);
    /// assert!(error.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.retryable == Some(true)
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ProtocolError {}

/// Error class of a [`ProtocolError`] or [`ConnectorFailure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// Transient; a later attempt may succeed.
    Temporary,
    /// Will fail again with the same input.
    Permanent,
    /// Authentication or authorization.
    Auth,
    /// Refused by policy.
    Policy,
    /// Budget, quota or payment.
    Economic,
    /// Raised by a connector or its provider.
    Connector,
    /// Transport failure.
    Transport,
}

/// The body of an error message: `{ "error": ProtocolError }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ProtocolError,
}

/// A connector operation, named in failures so the host knows which call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectorOperation {
    /// Manifest discovery.
    Discovery,
    /// Manifest admission.
    Admission,
    /// Plain invocation.
    Invocation,
    /// Cancellation of a running action.
    Cancellation,
    /// Streaming output.
    Streaming,
    /// Health probe.
    Health,
    /// Dry run or plan.
    TransactionPlan,
    /// Commit of a plan.
    TransactionCommit,
    /// Reconciliation of an unknown outcome.
    Reconciliation,
    /// Compensation of an earlier action.
    Compensation,
    /// Emission of a result to a channel.
    Emission,
    /// Ingestion of an external event.
    Ingestion,
}

/// The detail key saying a failed operation committed side effects anyway.
pub const SIDE_EFFECTS_COMMITTED: &str = "side_effects_committed";
/// The detail key saying those side effects need a compensation.
pub const COMPENSATION_REQUIRED: &str = "compensation_required";

/// Marks `details` as a partial failure: [`SIDE_EFFECTS_COMMITTED`] and
/// [`COMPENSATION_REQUIRED`] set, which a host reads (on a failure that is not retryable) as a
/// write that happened and may be compensated.
pub fn mark_committed_side_effects(details: &mut serde_json::Map<String, Value>) {
    details.insert(SIDE_EFFECTS_COMMITTED.to_owned(), Value::Bool(true));
    details.insert(COMPENSATION_REQUIRED.to_owned(), Value::Bool(true));
}

/// A structured failure returned by a connector (upstream `ConnectorFailure`, same JSON).
///
/// The fields live behind one allocation ([`ConnectorFailureData`], reached through `Deref`),
/// so `Result<T, ConnectorFailure>` stays one pointer wide: handlers return it on every path,
/// and a 264-byte error variant would bloat every future that carries it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConnectorFailure(Box<ConnectorFailureData>);

/// The fields of a [`ConnectorFailure`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorFailureData {
    /// Stable, namespaced machine code.
    pub code: String,
    /// Redacted summary; never carries credentials or payload.
    pub message: String,
    /// Error class.
    pub category: ErrorCategory,
    /// Safe to retry under the capability's idempotency contract.
    pub retryable: bool,
    /// Earliest useful retry delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The provider's request id, for support tickets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_request_id: Option<String>,
    /// The provider operation that may have been started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_operation: Option<ProviderOperationRef>,
    /// Status reported by the provider, usually an HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_status: Option<u16>,
    /// A side effect may have happened; the outcome must be reconciled, not retried blindly.
    #[serde(default)]
    pub uncertain_outcome: bool,
    /// Redacted structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted_details: Option<Value>,
    /// The component that failed, e.g. the connector id (wire key `source`).
    #[serde(rename = "source")]
    pub source_component: String,
    /// The operation that failed.
    pub operation: ConnectorOperation,
}

impl ConnectorFailure {
    /// A failure with a code, a message and a category, not retryable, with nothing else said.
    pub fn new(
        code: impl Into<String>,
        message: impl Into<String>,
        category: ErrorCategory,
        operation: ConnectorOperation,
        source_component: impl Into<String>,
    ) -> Self {
        Self::from(ConnectorFailureData {
            code: code.into(),
            message: message.into(),
            category,
            retryable: false,
            retry_after_ms: None,
            provider_request_id: None,
            provider_operation: None,
            remote_status: None,
            uncertain_outcome: false,
            redacted_details: None,
            source_component: source_component.into(),
            operation,
        })
    }

    /// A connector's own refusal of an invocation: category `permanent`, not retryable,
    /// operation `invocation`. The short form of [`new`](Self::new) for the common case:
    /// `ConnectorFailure::permanent("ledger.currency_unsupported", "the ledger books EUR only", "acme-ledger")`.
    pub fn permanent(
        code: impl Into<String>,
        message: impl Into<String>,
        source_component: impl Into<String>,
    ) -> Self {
        Self::new(
            code,
            message,
            ErrorCategory::Permanent,
            ConnectorOperation::Invocation,
            source_component,
        )
    }

    /// A passing failure of an invocation that is safe to try again (a lock held, a provider
    /// asking to slow down): category `temporary`, retryable, operation `invocation`. Add
    /// [`with_retry_after_ms`](Self::with_retry_after_ms) when the provider said when.
    pub fn temporary(
        code: impl Into<String>,
        message: impl Into<String>,
        source_component: impl Into<String>,
    ) -> Self {
        let mut failure = Self::permanent(code, message, source_component);
        failure.category = ErrorCategory::Temporary;
        failure.with_retryable(true)
    }

    /// The failure for an operation the connector does not implement: permanent, not retryable.
    pub fn unsupported(operation: ConnectorOperation, source_component: impl Into<String>) -> Self {
        Self::new(
            codes::CONNECTOR_OPERATION_UNSUPPORTED,
            format!("connector does not implement {operation:?}"),
            ErrorCategory::Permanent,
            operation,
            source_component,
        )
    }

    /// The wire error for this failure: connector fields move into `details`, the component
    /// into `source.component`. Absent optional fields become JSON `null` inside `details`.
    pub fn to_protocol_error(&self) -> ProtocolError {
        ProtocolError {
            code: self.code.clone(),
            message: self.message.clone(),
            category: self.category,
            retryable: Some(self.retryable),
            retry_after_ms: self.retry_after_ms,
            details: Some(json!({
                "operation": self.operation,
                "provider_request_id": self.provider_request_id,
                "provider_operation": self.provider_operation,
                "remote_status": self.remote_status,
                "uncertain_outcome": self.uncertain_outcome,
                "details": self.redacted_details,
            })),
            source: Some(json!({ "component": self.source_component })),
        }
    }

    /// A failure read back from a wire error. Connector fields are read out of `details` when
    /// they have the right shape; `redacted_details` keeps the **whole** `details` value (not its
    /// inner `details` key), as upstream, so the round trip is not symmetric. A missing
    /// `retryable` reads as false.
    pub fn from_protocol_error(
        error: &ProtocolError,
        operation: ConnectorOperation,
        source_component: impl Into<String>,
    ) -> Self {
        let details = error.details.as_ref();
        let detail = |key: &str| details.and_then(|d| d.get(key));
        Self::from(ConnectorFailureData {
            code: error.code.clone(),
            message: error.message.clone(),
            category: error.category,
            retryable: error.retryable.unwrap_or(false),
            retry_after_ms: error.retry_after_ms,
            provider_request_id: detail("provider_request_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            provider_operation: detail("provider_operation")
                .and_then(|v| ProviderOperationRef::deserialize(v).ok()),
            remote_status: detail("remote_status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            uncertain_outcome: detail("uncertain_outcome")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            redacted_details: error.details.clone(),
            source_component: source_component.into(),
            operation,
        })
    }
}

impl ConnectorFailure {
    /// Marks the failure as safe to retry under the capability's idempotency contract.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.0.retryable = retryable;
        self
    }

    /// Sets the earliest useful retry delay.
    pub fn with_retry_after_ms(mut self, retry_after_ms: u64) -> Self {
        self.0.retry_after_ms = Some(retry_after_ms);
        self
    }

    /// Records the provider's status (usually an HTTP status).
    pub fn with_remote_status(mut self, status: u16) -> Self {
        self.0.remote_status = Some(status);
        self
    }

    /// Records the provider operation that may have been started.
    pub fn with_provider_operation(mut self, operation: ProviderOperationRef) -> Self {
        self.0.provider_operation = Some(operation);
        self
    }

    /// Says a side effect may have happened: the host settles the action as an unknown outcome
    /// to be reconciled, and refuses blind re-execution.
    pub fn with_uncertain_outcome(mut self) -> Self {
        self.0.uncertain_outcome = true;
        self
    }

    /// Attaches redacted structured detail (never payloads or credentials).
    pub fn with_redacted_details(mut self, details: Value) -> Self {
        self.0.redacted_details = Some(details);
        self
    }

    /// Whether the failure says side effects were committed before it (set by
    /// [`with_committed_side_effects`](Self::with_committed_side_effects)).
    pub fn has_committed_side_effects(&self) -> bool {
        self.redacted_details
            .as_ref()
            .and_then(|details| details.get(SIDE_EFFECTS_COMMITTED))
            == Some(&Value::Bool(true))
    }

    /// Says the operation failed *after* committing side effects that must be compensated
    /// (a partial failure): sets `side_effects_committed` and `compensation_required` in the
    /// redacted details, keeping any other detail (a detail that is not an object is moved
    /// under `detail`). A host admits a `compensate` of such a failure when it is not
    /// retryable.
    pub fn with_committed_side_effects(mut self) -> Self {
        let mut details = match self.0.redacted_details.take() {
            Some(Value::Object(map)) => map,
            Some(other) => {
                let mut map = serde_json::Map::new();
                map.insert("detail".to_owned(), other);
                map
            }
            None => serde_json::Map::new(),
        };
        mark_committed_side_effects(&mut details);
        self.0.redacted_details = Some(Value::Object(details));
        self
    }

    /// The fields, by value.
    pub fn into_data(self) -> ConnectorFailureData {
        *self.0
    }
}

impl From<ConnectorFailureData> for ConnectorFailure {
    fn from(data: ConnectorFailureData) -> Self {
        ConnectorFailure(Box::new(data))
    }
}

impl std::ops::Deref for ConnectorFailure {
    type Target = ConnectorFailureData;
    fn deref(&self) -> &ConnectorFailureData {
        &self.0
    }
}

impl std::ops::DerefMut for ConnectorFailure {
    fn deref_mut(&mut self) -> &mut ConnectorFailureData {
        &mut self.0
    }
}

impl fmt::Debug for ConnectorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ConnectorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ConnectorFailure {}

impl From<ConnectorFailure> for ProtocolError {
    fn from(failure: ConnectorFailure) -> Self {
        failure.to_protocol_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_and_temporary_are_invocation_failures_of_their_category() {
        let refused = ConnectorFailure::permanent("ledger.currency", "EUR only", "acme-ledger");
        assert_eq!(
            refused,
            ConnectorFailure::new(
                "ledger.currency",
                "EUR only",
                ErrorCategory::Permanent,
                ConnectorOperation::Invocation,
                "acme-ledger",
            )
        );
        assert!(!refused.retryable);
        let busy = ConnectorFailure::temporary("ledger.locked", "account locked", "acme-ledger");
        assert_eq!(busy.category, ErrorCategory::Temporary);
        assert_eq!(busy.operation, ConnectorOperation::Invocation);
        assert!(busy.retryable);
        assert_eq!(busy.source_component, "acme-ledger");
    }

    fn full_failure() -> ConnectorFailure {
        ConnectorFailure::from(ConnectorFailureData {
            code: "provider.timeout".into(),
            message: "provider did not answer".into(),
            category: ErrorCategory::Temporary,
            retryable: true,
            retry_after_ms: Some(250),
            provider_request_id: Some("req-1".into()),
            provider_operation: Some(ProviderOperationRef {
                provider: "calendar".into(),
                operation_id: "op-9".into(),
                request_id: Some("req-1".into()),
            }),
            remote_status: Some(504),
            uncertain_outcome: true,
            redacted_details: Some(json!({"attempt": 2})),
            source_component: "calendar".into(),
            operation: ConnectorOperation::TransactionCommit,
        })
    }

    #[test]
    fn connector_failure_round_trips_in_upstream_key_order() {
        let failure = full_failure();
        let text = serde_json::to_string(&failure).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"code":"provider.timeout","message":"provider did not answer","#,
                r#""category":"temporary","retryable":true,"retry_after_ms":250,"#,
                r#""provider_request_id":"req-1","provider_operation":{"provider":"calendar","#,
                r#""operation_id":"op-9","request_id":"req-1"},"remote_status":504,"#,
                r#""uncertain_outcome":true,"redacted_details":{"attempt":2},"#,
                r#""source":"calendar","operation":"transaction_commit"}"#
            )
        );
        let back: ConnectorFailure = serde_json::from_str(&text).unwrap();
        assert_eq!(back, failure);
    }

    #[test]
    fn connector_failure_always_writes_uncertain_outcome_and_defaults_it() {
        let failure = ConnectorFailure::new(
            "x.y",
            "m",
            ErrorCategory::Connector,
            ConnectorOperation::Invocation,
            "c",
        );
        assert_eq!(
            serde_json::to_string(&failure).unwrap(),
            r#"{"code":"x.y","message":"m","category":"connector","retryable":false,"uncertain_outcome":false,"source":"c","operation":"invocation"}"#
        );
        let back: ConnectorFailure = serde_json::from_str(
            r#"{"code":"x.y","message":"m","category":"connector","retryable":false,"source":"c","operation":"invocation"}"#,
        )
        .unwrap();
        assert_eq!(back, failure);
        // `retryable` is a required plain bool at the connector layer.
        assert!(
            serde_json::from_str::<ConnectorFailure>(
                r#"{"code":"x.y","message":"m","category":"connector","source":"c","operation":"invocation"}"#,
            )
            .is_err()
        );
    }

    #[test]
    fn unsupported_names_the_operation_by_its_debug_name() {
        let failure = ConnectorFailure::unsupported(ConnectorOperation::Cancellation, "chatwoot");
        assert_eq!(failure.code, codes::CONNECTOR_OPERATION_UNSUPPORTED);
        assert_eq!(failure.message, "connector does not implement Cancellation");
        assert_eq!(failure.category, ErrorCategory::Permanent);
        assert!(!failure.retryable);
        assert_eq!(failure.source_component, "chatwoot");
        assert_eq!(
            failure.to_string(),
            "connector.operation_unsupported: connector does not implement Cancellation"
        );
    }

    #[test]
    fn to_protocol_error_moves_connector_fields_into_details() {
        let error = full_failure().to_protocol_error();
        assert_eq!(
            serde_json::to_string(&error).unwrap(),
            concat!(
                r#"{"code":"provider.timeout","message":"provider did not answer","#,
                r#""category":"temporary","retryable":true,"retry_after_ms":250,"#,
                r#""details":{"operation":"transaction_commit","provider_request_id":"req-1","#,
                r#""provider_operation":{"provider":"calendar","operation_id":"op-9","request_id":"req-1"},"#,
                r#""remote_status":504,"uncertain_outcome":true,"details":{"attempt":2}},"#,
                r#""source":{"component":"calendar"}}"#
            )
        );
    }

    #[test]
    fn to_protocol_error_writes_null_for_absent_fields() {
        let error =
            ConnectorFailure::unsupported(ConnectorOperation::Emission, "c").to_protocol_error();
        assert_eq!(error.retryable, Some(false));
        assert_eq!(
            error.details,
            Some(json!({
                "operation": "emission",
                "provider_request_id": null,
                "provider_operation": null,
                "remote_status": null,
                "uncertain_outcome": false,
                "details": null,
            }))
        );
    }

    #[test]
    fn round_trip_through_protocol_error_keeps_whole_details_as_redacted_details() {
        let original = full_failure();
        let wire = original.to_protocol_error();
        let back = ConnectorFailure::from_protocol_error(
            &wire,
            ConnectorOperation::TransactionCommit,
            "calendar",
        );
        assert_eq!(back.provider_request_id, original.provider_request_id);
        assert_eq!(back.provider_operation, original.provider_operation);
        assert_eq!(back.remote_status, Some(504));
        assert!(back.uncertain_outcome);
        assert!(back.retryable);
        assert_eq!(back.retry_after_ms, Some(250));
        // Asymmetric: the whole details object, not the inner `details` key.
        assert_eq!(back.redacted_details, wire.details);
        assert_ne!(back.redacted_details, original.redacted_details);
        assert_ne!(back, original);
    }

    #[test]
    fn from_protocol_error_tolerates_foreign_details() {
        let mut error = ProtocolError::new("x", "m", ErrorCategory::Transport);
        error.details = Some(json!({
            "provider_operation": "not an object",
            "remote_status": 70000,
            "uncertain_outcome": "yes",
        }));
        let failure =
            ConnectorFailure::from_protocol_error(&error, ConnectorOperation::Invocation, "src");
        assert!(!failure.retryable);
        assert_eq!(failure.provider_operation, None);
        assert_eq!(failure.remote_status, None);
        assert!(!failure.uncertain_outcome);
        assert_eq!(failure.redacted_details, error.details);
        assert_eq!(failure.source_component, "src");

        let bare = ConnectorFailure::from_protocol_error(
            &ProtocolError::invalid_input("bad"),
            ConnectorOperation::Invocation,
            "src",
        );
        assert_eq!(bare.redacted_details, None);
        assert_eq!(bare.code, codes::ACTION_INVALID_INPUT);
    }

    #[test]
    fn invalid_input_is_permanent_and_not_retryable() {
        let error = ProtocolError::invalid_input("input is not an object");
        assert_eq!(
            serde_json::to_string(&error).unwrap(),
            r#"{"code":"action.invalid_input","message":"input is not an object","category":"permanent","retryable":false}"#
        );
    }

    #[test]
    fn error_body_nests_the_error() {
        let body = ErrorBody {
            error: ProtocolError::new("a.b", "m", ErrorCategory::Auth),
        };
        let text = serde_json::to_string(&body).unwrap();
        assert_eq!(
            text,
            r#"{"error":{"code":"a.b","message":"m","category":"auth"}}"#
        );
        assert_eq!(serde_json::from_str::<ErrorBody>(&text).unwrap(), body);
    }
}
