//! Transaction wire types (`aip-model.md` §4.4) and the reconciliation request/answer of the
//! connector layer (§9.3).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalPolicy,
    CompensationContract, DryRunFidelity, IdentityContext, Principal, ProtocolError, SideEffect,
};
use crate::ids::{ActionId, CapabilityId, ReceiptId, TransactionId};

/// Status of a transaction as reported on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionProtocolStatus {
    /// A dry run finished.
    DryRunCompleted,
    /// A durable plan exists.
    Planned,
    /// Execution was admitted and is about to call the provider.
    Prepared,
    /// A commit is in progress.
    Committing,
    /// The effect was committed.
    Committed,
    /// A compensation is in progress.
    Compensating,
    /// The effect was compensated.
    Compensated,
    /// A human must decide.
    RequiresHuman,
    /// The transaction was cancelled.
    Cancelled,
    /// The operation cannot be rolled back.
    RollbackNotSupported,
    /// The transaction failed.
    Failed,
    /// The provider may or may not have applied the effect.
    OutcomeUnknown,
    /// A reconciliation is in progress.
    Reconciling,
    /// Reconciliation settled the outcome.
    Reconciled,
}

impl TransactionProtocolStatus {
    /// Every status, in declaration order (for exhaustive checks and tests).
    pub const ALL: [Self; 14] = [
        Self::DryRunCompleted,
        Self::Planned,
        Self::Prepared,
        Self::Committing,
        Self::Committed,
        Self::Compensating,
        Self::Compensated,
        Self::RequiresHuman,
        Self::Cancelled,
        Self::RollbackNotSupported,
        Self::Failed,
        Self::OutcomeUnknown,
        Self::Reconciling,
        Self::Reconciled,
    ];

    /// The wire name (`outcome_unknown`, ...), as serde spells it: for messages, logs and
    /// store columns.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::DryRunCompleted => "dry_run_completed",
            Self::Planned => "planned",
            Self::Prepared => "prepared",
            Self::Committing => "committing",
            Self::Committed => "committed",
            Self::Compensating => "compensating",
            Self::Compensated => "compensated",
            Self::RequiresHuman => "requires_human",
            Self::Cancelled => "cancelled",
            Self::RollbackNotSupported => "rollback_not_supported",
            Self::Failed => "failed",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Reconciling => "reconciling",
            Self::Reconciled => "reconciled",
        }
    }
}

/// The wire name (see [`TransactionProtocolStatus::as_str`]).
impl fmt::Display for TransactionProtocolStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider-side operation, recorded so an uncertain outcome can be reconciled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOperationRef {
    /// The provider, e.g. the connector id.
    pub provider: String,
    /// Durable operation id at the provider.
    pub operation_id: String,
    /// The provider's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ProviderOperationRef {
    /// The operation `operation_id` at `provider` (the connector id, most often), without a
    /// request id.
    ///
    /// ```
    /// use aip_connector_core::model::ProviderOperationRef;
    ///
    /// let operation = ProviderOperationRef::new("travel", "fl_booking-42").with_request_id("req_7");
    /// assert_eq!(operation.operation_id, "fl_booking-42");
    /// assert_eq!(operation.request_id.as_deref(), Some("req_7"));
    /// ```
    pub fn new(provider: impl Into<String>, operation_id: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            operation_id: operation_id.into(),
            request_id: None,
        }
    }

    /// The same operation with the provider's request id.
    #[must_use]
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }
}

/// A durable plan produced by a `plan` action and claimed by a later `commit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionPlan {
    /// Plan id, carried by the committing action's `transaction.plan_id`.
    pub plan_id: String,
    /// The transaction the plan belongs to.
    pub transaction_id: TransactionId,
    /// The planning action.
    pub action_id: ActionId,
    /// The capability to commit.
    pub capability_id: CapabilityId,
    /// The planning action's transaction block.
    pub transaction: ActionTransaction,
    /// Who planned it.
    pub planned_by: Principal,
    /// Hash of the planned input; a commit must present the same input.
    pub input_hash: String,
    /// The commit needs approval.
    pub approval_required: bool,
    /// When the plan was made.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The planned input (a hash instead of the value when redaction is required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_snapshot: Option<Value>,
    /// Side effects the commit is expected to have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicted_side_effects: Vec<SideEffect>,
    /// The approval policy that applies to the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
    /// How the committed effect can be reversed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<CompensationContract>,
    /// How faithful the plan's validation was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_fidelity: Option<DryRunFidelity>,
    /// Identity captured at planning time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityContext>,
    /// When the plan can no longer be committed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// What a connector is asked when an outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciliationRequest {
    /// The transaction whose outcome is unknown.
    pub transaction_id: TransactionId,
    /// The durable provider operation to look up.
    pub provider_operation_id: String,
    /// Opaque cursor from an earlier, non-terminal answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// A connector's answer to a [`ReconciliationRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciliationResult {
    /// The provider outcome is settled; false means "ask again later".
    pub terminal: bool,
    /// Whether the effect happened, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<bool>,
    /// Opaque cursor to resume from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// What the connector saw at the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
}

/// The first-class transaction message (`aip.transaction.v1.request`): an action in a
/// transaction mode, wrapped with the transaction it belongs to and who asks for it.
///
/// It is not a second transaction engine: the host runs the wrapped action through the ordinary
/// pipeline and answers a [`TransactionResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransactionRequest {
    /// The transaction. Copied into `action.transaction.transaction_id` when that is absent;
    /// must equal it when present.
    pub transaction_id: TransactionId,
    /// The action; it must carry a `transaction` block.
    pub action: Action,
    /// Who asks. Must be the transport-authenticated caller: a payload never names its own
    /// identity.
    pub requested_by: Principal,
    /// Why, for the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// The provider operation the requester knows of (informational: reconciliation reads the
    /// operation the handler checkpointed durably).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_operation: Option<ProviderOperationRef>,
    /// The reconciliation cursor the requester knows of (informational, as above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_cursor: Option<String>,
}

/// The answer to a [`TransactionRequest`] (`aip.transaction.v1.result`), and the durable view of
/// a transaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransactionResult {
    /// The transaction.
    pub transaction_id: TransactionId,
    /// Its transaction block (mode, ids, compensation target); `transaction_id` equals the
    /// field above.
    pub transaction: ActionTransaction,
    /// The wire status: the durable status, except `requires_human` and `cancelled`, which are
    /// projected from the action result.
    pub status: TransactionProtocolStatus,
    /// The action result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ActionResult>,
    /// The plan, for a planned transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<TransactionPlan>,
    /// The provider operation a handler checkpointed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_operation: Option<ProviderOperationRef>,
    /// Where reconciliation resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_cursor: Option<String>,
    /// Earliest time a reconciliation is useful.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub reconcile_after: Option<OffsetDateTime>,
    /// The last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProtocolError>,
    /// The receipt chain `transaction:<transaction_id>`, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<TransactionReceipt>,
}

impl TransactionResult {
    /// The wire status of a transaction whose durable status is `durable` and whose action
    /// settled as `result`: a pending approval reads `requires_human`, a cancelled action
    /// `cancelled`; everything else is the durable status.
    ///
    /// Unlike upstream, a cancelled action whose transaction is `outcome_unknown` (it was
    /// cancelled after checkpointing a provider operation, so the effect may have happened),
    /// or is being or was reconciled, reads as that durable status: `cancelled` would tell the
    /// caller nothing happened when only a reconciliation can say.
    pub fn project_status(
        durable: TransactionProtocolStatus,
        result: Option<&ActionResult>,
    ) -> TransactionProtocolStatus {
        use TransactionProtocolStatus as Status;
        match result.map(|r| r.status) {
            Some(ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman) => {
                Status::RequiresHuman
            }
            Some(ActionResultStatus::Cancelled)
                if !matches!(
                    durable,
                    Status::OutcomeUnknown | Status::Reconciling | Status::Reconciled
                ) =>
            {
                Status::Cancelled
            }
            _ => durable,
        }
    }
}

/// What a transaction receipt records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A dry run finished.
    DryRunCompleted,
    /// A plan was stored.
    Planned,
    /// An `execute` was admitted.
    ExecutionStarted,
    /// A commit claimed its plan (or started directly).
    CommitStarted,
    /// The effect committed.
    Committed,
    /// A compensation was admitted.
    CompensationStarted,
    /// The compensation finished.
    Compensated,
    /// The transaction failed.
    Failed,
    /// The outcome is unknown; reconciliation is pending.
    OutcomePending,
    /// A reconciliation started.
    ReconciliationStarted,
    /// Reconciliation settled the outcome.
    Reconciled,
}

impl ReceiptKind {
    /// The receipt a transaction entering `status` gets, if any.
    pub fn for_status(status: TransactionProtocolStatus) -> Option<Self> {
        use TransactionProtocolStatus as S;
        Some(match status {
            S::DryRunCompleted => Self::DryRunCompleted,
            S::Planned => Self::Planned,
            S::Prepared => Self::ExecutionStarted,
            S::Committing => Self::CommitStarted,
            S::Committed => Self::Committed,
            S::Compensating => Self::CompensationStarted,
            S::Compensated => Self::Compensated,
            S::Failed => Self::Failed,
            S::OutcomeUnknown => Self::OutcomePending,
            S::Reconciling => Self::ReconciliationStarted,
            S::Reconciled => Self::Reconciled,
            S::RequiresHuman | S::Cancelled | S::RollbackNotSupported => return None,
        })
    }

    /// The wire name (`commit_started`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DryRunCompleted => "dry_run_completed",
            Self::Planned => "planned",
            Self::ExecutionStarted => "execution_started",
            Self::CommitStarted => "commit_started",
            Self::Committed => "committed",
            Self::CompensationStarted => "compensation_started",
            Self::Compensated => "compensated",
            Self::Failed => "failed",
            Self::OutcomePending => "outcome_pending",
            Self::ReconciliationStarted => "reconciliation_started",
            Self::Reconciled => "reconciled",
        }
    }
}

/// One link of a transaction's receipt chain (`transaction:<transaction_id>`).
///
/// Ids are deterministic (`rcpt_<transaction_id>_<kind>`), so recording the same step twice is
/// a no-op; each receipt's `hash` covers its own fields and the previous receipt's hash, so a
/// removed or altered link breaks every later hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionReceipt {
    /// `rcpt_<transaction_id>_<kind>`.
    pub id: ReceiptId,
    /// `transaction:<transaction_id>`.
    pub chain: String,
    /// What happened.
    pub kind: ReceiptKind,
    /// The transaction.
    pub transaction_id: TransactionId,
    /// The action that owned the transaction at that step.
    pub action_id: ActionId,
    /// The durable status entered.
    pub status: TransactionProtocolStatus,
    /// When, in milliseconds since the Unix epoch.
    pub recorded_at_ms: u64,
    /// The previous receipt's hash; `None` for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_hash: Option<String>,
    /// Lowercase hex SHA-256 of the receipt serialized as JSON, fields in this order, with
    /// `hash` set to `""` (and `previous_hash` omitted when `None`).
    pub hash: String,
}

impl TransactionReceipt {
    /// The receipt of `kind` for `transaction_id`, linked after `previous`.
    pub fn new(
        transaction_id: &TransactionId,
        action_id: &ActionId,
        kind: ReceiptKind,
        status: TransactionProtocolStatus,
        recorded_at_ms: u64,
        previous: Option<&TransactionReceipt>,
    ) -> Self {
        let mut receipt = Self {
            id: ReceiptId::trusted(format!("rcpt_{transaction_id}_{}", kind.as_str())),
            chain: format!("transaction:{transaction_id}"),
            kind,
            transaction_id: transaction_id.clone(),
            action_id: action_id.clone(),
            status,
            recorded_at_ms,
            previous_hash: previous.map(|p| p.hash.clone()),
            hash: String::new(),
        };
        receipt.hash = receipt.computed_hash();
        receipt
    }

    /// The hash this receipt must carry, given its other fields.
    pub fn computed_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut unhashed = self.clone();
        unhashed.hash = String::new();
        let bytes = serde_json::to_vec(&unhashed).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        let mut hex = String::with_capacity(64);
        for byte in digest {
            hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
        }
        hex
    }

    /// Whether `receipts` form an unbroken chain: each hash right and linked to the one
    /// before.
    pub fn chain_is_intact(receipts: &[TransactionReceipt]) -> bool {
        let mut previous: Option<&TransactionReceipt> = None;
        for receipt in receipts {
            if receipt.previous_hash.as_deref() != previous.map(|p| p.hash.as_str())
                || receipt.hash != receipt.computed_hash()
            {
                return false;
            }
            previous = Some(receipt);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::model::{
        ApproverSelector, CompensationMode, PrincipalKind, TenantRef, TransactionMode,
    };

    /// `as_str` and `Display` spell statuses as serde does (stores and messages rely on it).
    #[test]
    fn status_names_are_the_wire_spelling() {
        for status in TransactionProtocolStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::String(status.to_string())
            );
        }
        for mode in TransactionMode::ALL {
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::Value::String(mode.as_str().to_owned())
            );
        }
    }

    fn full_plan() -> TransactionPlan {
        TransactionPlan {
            plan_id: "plan:txn_1".into(),
            transaction_id: TransactionId::trusted("txn_1"),
            action_id: ActionId::trusted("act_1"),
            capability_id: "cap:calendar:booking:create".into(),
            transaction: ActionTransaction {
                mode: TransactionMode::Plan,
                transaction_id: Some(TransactionId::trusted("txn_1")),
                plan_id: None,
                compensation_for: None,
            },
            planned_by: Principal::new("agent:planner", PrincipalKind::Agent),
            input_hash: "sha256:ab".into(),
            approval_required: true,
            created_at: datetime!(2026-01-02 03:04:05 UTC),
            input_snapshot: Some(json!({"slot": "09:00"})),
            predicted_side_effects: vec![SideEffect::Write, SideEffect::ExternalNetwork],
            approval_policy: Some(ApprovalPolicy {
                required: true,
                approver_selector: ApproverSelector::TenantPolicy,
                ..ApprovalPolicy::default()
            }),
            compensation: Some(CompensationContract {
                mode: CompensationMode::RollbackNotSupported,
                compensation_capability_id: None,
                compensation_window_ms: None,
                requires_approval: false,
            }),
            dry_run_fidelity: Some(DryRunFidelity::PolicyAndSchema),
            identity: Some(IdentityContext {
                tenant: Some(TenantRef {
                    id: "t1".into(),
                    system: None,
                }),
                ..IdentityContext::default()
            }),
            expires_at: Some(datetime!(2026-01-02 04:04:05 UTC)),
            metadata: Some(json!({"k": 1})),
        }
    }

    #[test]
    fn transaction_plan_round_trips_in_declaration_order() {
        let plan = full_plan();
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"plan_id":"plan:txn_1","transaction_id":"txn_1","action_id":"act_1","#,
                r#""capability_id":"cap:calendar:booking:create","#,
                r#""transaction":{"mode":"plan","transaction_id":"txn_1"},"#,
                r#""planned_by":{"id":"agent:planner","kind":"agent"},"#,
                r#""input_hash":"sha256:ab","approval_required":true,"#,
                r#""created_at":"2026-01-02T03:04:05Z","input_snapshot":{"slot":"09:00"},"#,
                r#""predicted_side_effects":["write","external_network"],"#,
                r#""approval_policy":{"required":true,"approver_selector":{"type":"tenant_policy"},"#,
                r#""minimum_distinct_principals":1,"separation_of_duties":{"requester_must_differ":false,"#,
                r#""operator_must_differ":false,"allow_self_approval":false}},"#,
                r#""compensation":{"mode":"rollback_not_supported","requires_approval":false},"#,
                r#""dry_run_fidelity":"policy_and_schema","identity":{"tenant":{"id":"t1"}},"#,
                r#""expires_at":"2026-01-02T04:04:05Z","metadata":{"k":1}}"#
            )
        );
        let back: TransactionPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn transaction_plan_requires_approval_required_and_created_at() {
        let mut value = serde_json::to_value(full_plan()).unwrap();
        value.as_object_mut().unwrap().remove("approval_required");
        assert!(serde_json::from_value::<TransactionPlan>(value).is_err());
        let mut value = serde_json::to_value(full_plan()).unwrap();
        value["created_at"] = json!("yesterday");
        assert!(serde_json::from_value::<TransactionPlan>(value).is_err());
    }

    #[test]
    fn status_spellings_are_snake_case() {
        assert_eq!(
            serde_json::to_string(&TransactionProtocolStatus::RollbackNotSupported).unwrap(),
            r#""rollback_not_supported""#
        );
        assert_eq!(
            serde_json::from_str::<TransactionProtocolStatus>(r#""outcome_unknown""#).unwrap(),
            TransactionProtocolStatus::OutcomeUnknown
        );
    }

    #[test]
    fn reconciliation_types_skip_absent_fields() {
        let request = ReconciliationRequest {
            transaction_id: TransactionId::trusted("txn_1"),
            provider_operation_id: "op-1".into(),
            cursor: None,
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"transaction_id":"txn_1","provider_operation_id":"op-1"}"#
        );
        let result = ReconciliationResult {
            terminal: true,
            committed: Some(true),
            cursor: Some("c2".into()),
            evidence: Some(json!({"booking": "b1"})),
        };
        let text = serde_json::to_string(&result).unwrap();
        assert_eq!(
            text,
            r#"{"terminal":true,"committed":true,"cursor":"c2","evidence":{"booking":"b1"}}"#
        );
        assert_eq!(
            serde_json::from_str::<ReconciliationResult>(&text).unwrap(),
            result
        );
        assert_eq!(
            serde_json::to_string(&ReconciliationResult {
                terminal: false,
                committed: None,
                cursor: None,
                evidence: None,
            })
            .unwrap(),
            r#"{"terminal":false}"#
        );
    }

    #[test]
    fn a_cancelled_result_reads_cancelled_unless_the_outcome_is_unknown() {
        use TransactionProtocolStatus as Status;
        let result = |status| ActionResult::new(crate::ids::ActionId::trusted("act_1"), status);
        let cancelled = result(ActionResultStatus::Cancelled);
        for durable in [Status::Failed, Status::Prepared, Status::Committed] {
            assert_eq!(
                TransactionResult::project_status(durable, Some(&cancelled)),
                Status::Cancelled
            );
        }
        for durable in [
            Status::OutcomeUnknown,
            Status::Reconciling,
            Status::Reconciled,
        ] {
            assert_eq!(
                TransactionResult::project_status(durable, Some(&cancelled)),
                durable
            );
        }
        let pending = result(ActionResultStatus::PendingApproval);
        assert_eq!(
            TransactionResult::project_status(Status::Failed, Some(&pending)),
            Status::RequiresHuman
        );
        assert_eq!(
            TransactionResult::project_status(Status::Committed, None),
            Status::Committed
        );
    }
}
