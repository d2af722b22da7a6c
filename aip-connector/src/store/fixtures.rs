//! Records the stores' own unit tests share.

use aip_connector_core::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId, TransactionId};
use aip_connector_core::model::{
    Action, ActionResult, ActionTransaction, ApprovalPolicy, TransactionMode,
    TransactionProtocolStatus,
};
use serde_json::json;

use super::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, Millis, PLAN_TTL_MS, TransactionRecord,
    TransactionStore,
};

/// A pending approval request `id` without a TTL, created at 0, carrying a secret in its input.
pub(super) fn approval(id: &str) -> ApprovalRecord {
    ApprovalRecord {
        approval_id: ApprovalId::trusted(id),
        action: Action::new("cap:demo", json!({"secret": "hunter2"})),
        input_retained: true,
        input_hash: "h".to_owned(),
        capability_id: CapabilityId::from("cap:demo"),
        requested_by: PrincipalId::from("user:1"),
        tenant_id: None,
        policy: ApprovalPolicy::default(),
        policy_hash: "p".to_owned(),
        idempotency_key: None,
        status: ApprovalStatus::Pending,
        decisions: Vec::new(),
        created_at_ms: 0,
        expires_at_ms: None,
        resumed: false,
        resumed_at_ms: None,
        resume_token: None,
        version: 0,
    }
}

/// A planned transaction `id` whose block names `plan_id`, carrying a secret in its result.
pub(super) fn planned(id: &str, plan_id: &str) -> TransactionRecord {
    TransactionRecord {
        transaction_id: TransactionId::trusted(id),
        action_id: ActionId::trusted("act_plan"),
        capability_id: CapabilityId::from("cap:demo"),
        transaction: ActionTransaction {
            plan_id: Some(plan_id.to_owned()),
            ..ActionTransaction::new(TransactionMode::Plan)
        },
        principal_id: PrincipalId::from("user:1"),
        identity: None,
        status: TransactionProtocolStatus::Planned,
        plan: None,
        result: Some(ActionResult::completed(
            ActionId::trusted("act_plan"),
            json!({"secret": "hunter2"}),
        )),
        provider_operation: None,
        reconciliation_cursor: None,
        checkpoint_cursor: None,
        reconcile_after_ms: None,
        error: None,
        revision: 0,
        created_at_ms: 0,
        updated_at_ms: 0,
        receipts: Vec::new(),
    }
}

/// Rows an older build wrote, for the tests of the migrations that add and fill the retention
/// columns: a closed and an open approval created at 10, a finished transaction and a plan
/// nobody committed (made at 0, "running") last updated at 20.
pub(super) struct RetentionRows {
    pub(super) closed: ApprovalRecord,
    pub(super) open: ApprovalRecord,
    pub(super) finished: TransactionRecord,
    pub(super) running: TransactionRecord,
}

impl RetentionRows {
    pub(super) fn new() -> Self {
        Self {
            closed: ApprovalRecord {
                status: ApprovalStatus::Denied,
                created_at_ms: 10,
                ..approval("appr_closed")
            },
            // Never expires (the host saturates `created + ttl`), and holds a NUL in its input:
            // PostgreSQL's JSON operators refuse both when reading them back as text or BIGINT.
            open: ApprovalRecord {
                created_at_ms: 10,
                expires_at_ms: Some(Millis::MAX),
                action: Action::new("cap:demo", json!({"secret": "hunter2", "note": "a\u{0}b"})),
                ..approval("appr_open")
            },
            finished: TransactionRecord {
                status: TransactionProtocolStatus::Committed,
                updated_at_ms: 20,
                result: Some(ActionResult::completed(
                    ActionId::trusted("act_plan"),
                    json!({"note": "a\u{0}b"}),
                )),
                ..planned("txn_done", "plan:done")
            },
            running: TransactionRecord {
                updated_at_ms: 20,
                ..planned("txn_running", "plan:running")
            },
        }
    }

    pub(super) fn approvals(&self) -> [&ApprovalRecord; 2] {
        [&self.closed, &self.open]
    }

    pub(super) fn transactions(&self) -> [&TransactionRecord; 2] {
        [&self.finished, &self.running]
    }

    /// Asserts that `store`, migrated after the rows were written, purges them as it would
    /// purge rows it wrote itself: by their own times, the closed and the finished one only.
    pub(super) async fn assert_purged_like_new_rows(
        self,
        store: &(impl ApprovalStore + TransactionStore),
    ) {
        assert_eq!(store.purge_closed_approvals(10, 100, 10).await, Ok(0));
        assert_eq!(store.purge_finished_transactions(20, 10).await, Ok(0));
        assert_eq!(store.purge_closed_approvals(11, 100, 10).await, Ok(1));
        assert_eq!(store.purge_finished_transactions(21, 10).await, Ok(1));
        assert_eq!(store.approval(&self.closed.approval_id).await, Ok(None));
        assert_eq!(
            store.approval(&self.open.approval_id).await,
            Ok(Some(self.open))
        );
        assert_eq!(
            store.transaction(&self.finished.transaction_id).await,
            Ok(None)
        );
        let running = self.running.transaction_id.clone();
        assert_eq!(store.transaction(&running).await, Ok(Some(self.running)));
        // The running row is a plan nobody committed, made at 0: it ends when it expires.
        assert_eq!(
            store.purge_finished_transactions(PLAN_TTL_MS, 10).await,
            Ok(0)
        );
        assert_eq!(
            store.purge_finished_transactions(PLAN_TTL_MS + 1, 10).await,
            Ok(1)
        );
        assert_eq!(store.transaction(&running).await, Ok(None));
    }
}
