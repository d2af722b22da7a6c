//! Transaction records (`aip-runtime.md` §3): plans, commits, unknown outcomes, reconciliation
//! and compensation, with a revision fence on every transition.

use aip_connector_core::ids::{ActionId, CapabilityId, PrincipalId, TransactionId};
use aip_connector_core::model::{
    ActionResult, ActionTransaction, IdentityContext, ProtocolError, ProviderOperationRef,
    ReceiptKind, TransactionPlan, TransactionProtocolStatus, TransactionReceipt,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{Millis, StoreError};

/// How long a plan may be committed after it was made: 15 minutes (`aip-runtime.md` §3.5). A
/// commit released by an approval does not count the time the approval waited for its
/// decisions (docs/host-runtime.md §6.3).
pub const PLAN_TTL_MS: Millis = 15 * 60 * 1000;

/// The `status` column values of the statuses retention may delete (those whose
/// [`TransactionRecord::finished_at_ms`] is set: the finished ones, and `planned`) as an SQL
/// list, for the SQL stores' retention statements: the purge tests the status as well as
/// `finished_at_ms`, which a host of an older build does not clear when it reopens a record.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! purgeable_statuses_sql {
    () => {
        "('dry_run_completed', 'committed', 'compensated', 'cancelled', \
          'rollback_not_supported', 'failed', 'reconciled', 'planned')"
    };
}
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(super) use purgeable_statuses_sql;

/// The durable state of one transaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransactionRecord {
    /// Transaction id (`txn_…`).
    pub transaction_id: TransactionId,
    /// The action that owns it (rebound to the commit action when a plan is claimed).
    pub action_id: ActionId,
    /// The capability.
    pub capability_id: CapabilityId,
    /// The action's transaction block.
    pub transaction: ActionTransaction,
    /// The principal that created it.
    pub principal_id: PrincipalId,
    /// The trusted identity captured at creation.
    pub identity: Option<IdentityContext>,
    /// Current status.
    pub status: TransactionProtocolStatus,
    /// The plan, for planned transactions.
    pub plan: Option<TransactionPlan>,
    /// The settled result, if any.
    pub result: Option<ActionResult>,
    /// The provider operation the handler checkpointed.
    pub provider_operation: Option<ProviderOperationRef>,
    /// Opaque reconciliation cursor: the one the handler's checkpoint recorded, replaced by the
    /// cursor of each later pending reconciliation answer that carries one.
    pub reconciliation_cursor: Option<String>,
    /// The cursor the handler's checkpoint recorded, which no reconciliation answer replaces:
    /// what the handler wrote down for its undo and its lookups (a resource its input named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_cursor: Option<String>,
    /// Earliest time reconciliation is useful.
    pub reconcile_after_ms: Option<Millis>,
    /// The last error.
    pub error: Option<ProtocolError>,
    /// Compare-and-set counter, bumped by every transition.
    pub revision: u64,
    /// Creation time.
    pub created_at_ms: Millis,
    /// Last update time.
    pub updated_at_ms: Millis,
    /// The receipt chain `transaction:<transaction_id>`, one receipt per step taken (see
    /// [`TransactionRecord::record_receipt`]). Records written before receipts existed read as
    /// an empty chain.
    #[serde(default)]
    pub receipts: Vec<TransactionReceipt>,
}

impl TransactionRecord {
    /// The plan id this record answers to: the plan's, else the transaction block's.
    pub fn plan_id(&self) -> Option<&str> {
        self.plan
            .as_ref()
            .map(|p| p.plan_id.as_str())
            .or(self.transaction.plan_id.as_deref())
    }

    /// Appends the receipt of the current status, linked to the last one, unless the chain
    /// already holds that receipt (ids are deterministic, so repeating a step is a no-op).
    /// Every backend's transition and the host's first insert call it.
    pub fn record_receipt(&mut self, now: Millis) {
        let Some(kind) = ReceiptKind::for_status(self.status) else {
            return;
        };
        let receipt = TransactionReceipt::new(
            &self.transaction_id,
            &self.action_id,
            kind,
            self.status,
            now,
            self.receipts.last(),
        );
        if !self.receipts.iter().any(|r| r.id == receipt.id) {
            self.receipts.push(receipt);
        }
    }

    /// Whether the transaction has ended in a status only a new action could follow up on:
    /// dry run completed, committed, compensated, cancelled, rollback not supported, failed or
    /// reconciled. Recoverable records and `requires_human` (which waits for an operator) are
    /// not finished. Retention deletes only finished records. A `failed` record may still be
    /// reopened by a retry (to `prepared`, or `compensating` for a compensation) until it is
    /// deleted.
    pub fn is_finished(&self) -> bool {
        use TransactionProtocolStatus as S;
        match self.status {
            S::DryRunCompleted
            | S::Committed
            | S::Compensated
            | S::Cancelled
            | S::RollbackNotSupported
            | S::Failed
            | S::Reconciled => true,
            S::Planned
            | S::Prepared
            | S::Committing
            | S::Compensating
            | S::RequiresHuman
            | S::OutcomeUnknown
            | S::Reconciling => false,
        }
    }

    /// When the record finished, for retention, which counts from it (the SQL stores keep it
    /// in a column): its last update once [`is_finished`](Self::is_finished); for a plan
    /// nobody committed, the moment it expires ([`PLAN_TTL_MS`] after it was made), after which
    /// no commit can claim it (unless an approval kept one waiting, whose wait the plan does not
    /// count); else `None`. Before plans ended this way, a preview nobody committed kept its
    /// input for good, whatever the retention (found by a store-failure probe).
    pub fn finished_at_ms(&self) -> Option<Millis> {
        match self.status {
            TransactionProtocolStatus::Planned => {
                Some(self.created_at_ms.saturating_add(PLAN_TTL_MS))
            }
            _ => self.is_finished().then_some(self.updated_at_ms),
        }
    }

    /// Whether a restarted host must look at this record (planned, prepared, committing,
    /// compensating, outcome unknown, reconciling). Upstream leaves `compensating` out; a
    /// compensation interrupted by a crash needs an operator as much as a commit does.
    pub fn is_recoverable(&self) -> bool {
        use TransactionProtocolStatus as S;
        matches!(
            self.status,
            S::Planned
                | S::Prepared
                | S::Committing
                | S::Compensating
                | S::OutcomeUnknown
                | S::Reconciling
        )
    }
}

/// One state change: allowed only from `expected` states, at the caller's revision.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// States the record may be in.
    pub expected: Vec<TransactionProtocolStatus>,
    /// The new status.
    pub to: TransactionProtocolStatus,
    /// The result to store (`None` clears it).
    pub result: Option<ActionResult>,
    /// The provider operation to record (`None` keeps the stored one).
    pub provider_operation: Option<ProviderOperationRef>,
    /// The cursor to record (`None` keeps the stored one).
    pub reconciliation_cursor: Option<String>,
    /// The handler's checkpoint cursor to record (`None` keeps the stored one); only a
    /// checkpoint sets it.
    pub checkpoint_cursor: Option<String>,
    /// Always overwritten.
    pub reconcile_after_ms: Option<Millis>,
    /// Always overwritten.
    pub error: Option<ProtocolError>,
    /// Rebinds the record to another action (a plan claimed by its commit action).
    pub rebind_action: Option<ActionId>,
}

impl Transition {
    /// A bare status change from `expected` to `to`.
    pub fn new(expected: &[TransactionProtocolStatus], to: TransactionProtocolStatus) -> Self {
        Self {
            expected: expected.to_vec(),
            to,
            result: None,
            provider_operation: None,
            reconciliation_cursor: None,
            checkpoint_cursor: None,
            reconcile_after_ms: None,
            error: None,
            rebind_action: None,
        }
    }

    /// Applies the transition to `record` (status check and revision bump included), as every
    /// backend must: returns `None` when the record is not in an expected state.
    pub fn apply(&self, record: &TransactionRecord, now: Millis) -> Option<TransactionRecord> {
        if !self.expected.contains(&record.status) {
            return None;
        }
        let mut next = record.clone();
        next.status = self.to;
        next.result = self.result.clone();
        if let Some(operation) = &self.provider_operation {
            next.provider_operation = Some(operation.clone());
        }
        if let Some(cursor) = &self.reconciliation_cursor {
            next.reconciliation_cursor = Some(cursor.clone());
        }
        if let Some(cursor) = &self.checkpoint_cursor {
            next.checkpoint_cursor = Some(cursor.clone());
        }
        next.reconcile_after_ms = self.reconcile_after_ms;
        next.error = self.error.clone();
        if let Some(action) = &self.rebind_action {
            next.action_id = action.clone();
        }
        next.revision = record.revision + 1;
        next.updated_at_ms = now;
        if self.to != record.status {
            next.record_receipt(now);
        }
        Some(next)
    }
}

/// What [`TransactionStore::transition`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum TransitionOutcome {
    /// Applied; the new record.
    Applied(TransactionRecord),
    /// No record with that id.
    NotFound,
    /// The stored revision is not the expected one (someone else moved first). Checked before
    /// the status: a stale caller gets this even when the status would not match either.
    RevisionConflict(TransactionRecord),
    /// The record is not in an expected state.
    StateConflict(TransactionRecord),
}

/// Transaction records.
#[async_trait]
pub trait TransactionStore: Send + Sync {
    /// Inserts `record` if no record has its id (revision stored as 0, whatever revision it
    /// carries); false if one exists. [`StoreError::PlanIdTaken`] if another record already
    /// answers to its plan id (checked after the id: an existing id is `false` even when its
    /// plan id is taken too; see the [conflict rules](crate::store#time-and-conflict-rules)).
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError>;

    /// The record, if any.
    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError>;

    /// The record whose [`plan_id`](TransactionRecord::plan_id) is `plan_id`, if any.
    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError>;

    /// Every record owned by `action_id`, in byte order of transaction id.
    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError>;

    /// Applies `transition` atomically if the stored revision is `expected_revision` and the
    /// status is expected (see [`Transition::apply`]). Otherwise it changes nothing and says why,
    /// checking in this order: no record → `NotFound`; another revision → `RevisionConflict`
    /// (which wins when the status is unexpected too); an unexpected status → `StateConflict`
    /// (see the [conflict rules](crate::store#time-and-conflict-rules)).
    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Every recoverable record (see [`TransactionRecord::is_recoverable`]), in byte order of
    /// transaction id.
    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError>;

    /// Deletes up to `max_entries` records that finished before `updated_before`
    /// ([`TransactionRecord::finished_at_ms`] `< updated_before`: finished records by their last
    /// update, plans nobody committed by their expiry; one that finished at `updated_before` is
    /// kept, see the [time rules](crate::store#time-and-conflict-rules)), and says how many went.
    /// Other records are never deleted, however old.
    ///
    /// This is the transactions' retention (see `Retention` in the host module): after it, the
    /// transaction and its plan id are unknown to every reader, so a committed transaction can
    /// no longer be compensated through the host.
    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError>;
}

// What they test is the SQL stores' spelling of the rules.
#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use aip_connector_core::model::TransactionProtocolStatus;

    use super::super::fixtures::planned;
    use super::*;

    /// The SQL list names exactly the statuses for which `finished_at_ms` is set, in their JSON
    /// spelling.
    #[test]
    fn the_sql_list_of_purgeable_statuses_matches_finished_at_ms() {
        let mut listed: Vec<String> = purgeable_statuses_sql!()
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .map(|name| name.trim().trim_matches('\'').to_owned())
            .collect();
        listed.sort();
        let mut purgeable: Vec<String> = TransactionProtocolStatus::ALL
            .into_iter()
            .filter(|&status| {
                TransactionRecord {
                    status,
                    ..planned("txn_1", "plan:1")
                }
                .finished_at_ms()
                .is_some()
            })
            .map(|status| {
                serde_json::to_value(status)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        purgeable.sort();
        assert_eq!(listed, purgeable);
    }
}
