//! One behaviour test per transaction code the host raises (`docs/host-runtime.md` §3 and §6):
//! each reaches the code through `Host::invoke` and checks the category, the retryable flag and,
//! where the host sets them, `retry_after_ms` and `details`.
//!
//! Two codes need a record this host never writes (a planned record without its plan, a plan
//! without an identity); their tests seed the shared store the way another implementation
//! sharing it could. Codes no input can reach are listed, with the reason, in
//! `tests/tests/error_codes.rs`. Tests marked `#[ignore = "bug: …"]` document the expected
//! behaviour of a known defect.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{Deployment, Host, HostLimits, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::invocation::BoxFuture;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ConnectorOperation,
    DryRunFidelity, ExternalAccountRef, Principal, PrincipalKind, ProtocolError,
    ProviderOperationRef, TransactionMode, TransactionPlan, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{
    Clock, MemoryStore, Millis, SharedStore, TransactionRecord, TransactionStore, Transition,
    TransitionOutcome,
};
use aip_connector::{ConnectorDefinition, InvocationContext, VerifiedTenant};
use aip_connector_tests::hooked_store::HookedStore;
use serde_json::{Value, json};

// ---- the connector ----------------------------------------------------------------------------

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    amount: u32,
    /// How the provider call goes: `""` succeeds; see [`Bank::transfer`] for the others.
    #[serde(default)]
    behaviour: String,
}

#[derive(Serialize, JsonSchema)]
struct Receipt {
    transfer_id: String,
}

/// A bank whose transfers fail on demand and whose reconciliation answers on demand.
#[derive(Clone, Default)]
struct Bank {
    /// Handler calls, whatever their outcome.
    calls: Arc<AtomicUsize>,
    /// Provider calls that went out (after the checkpoint).
    effects: Arc<AtomicUsize>,
    /// While set, reconciliation answers `Pending` with cursor `cursor-2`.
    still_pending: Arc<AtomicBool>,
    /// While set, reconciliation never answers.
    reconciliation_hangs: Arc<AtomicBool>,
    /// While set, reconciliation panics.
    reconciliation_panics: Arc<AtomicBool>,
    /// The cursor each reconciliation was handed, in order.
    cursors_seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Bank {
    fn failure(code: &str, category: ErrorCategory) -> ConnectorFailure {
        ConnectorFailure::new(
            code,
            "the bank said no",
            category,
            ConnectorOperation::TransactionCommit,
            "bank",
        )
    }

    fn operation(key: &IdempotencyKey) -> ProviderOperationRef {
        ProviderOperationRef {
            provider: "bank".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        }
    }
}

#[connector(id = "bank")]
impl Bank {
    /// Moves money. Behaviours: `slow` never answers and `unrecorded` fails uncertainly, both
    /// before any checkpoint; `retry` fails retryably before any checkpoint; after the
    /// checkpoint, `uncertain` fails uncertainly (retry after 2 s), `fail` fails permanently,
    /// `conflict` checkpoints a second, different operation.
    #[capability(
        id = "cap:bank:transfer",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, dry_run, plan, commit, reconcile], fidelity = policy_and_schema),
        reconcile = Self::ask,
    )]
    async fn transfer(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Receipt, ConnectorFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match transfer.behaviour.as_str() {
            "slow" => tokio::time::sleep(Duration::from_secs(30)).await,
            "unrecorded" => {
                return Err(Self::failure("bank.reset", ErrorCategory::Temporary)
                    .with_retryable(true)
                    .with_uncertain_outcome());
            }
            "retry" => {
                return Err(
                    Self::failure("bank.busy", ErrorCategory::Temporary).with_retryable(true)
                );
            }
            _ => {}
        }
        let operation = Self::operation(&key);
        checkpoint
            .record(operation.clone(), Some("cursor-1".into()))
            .await?;
        if transfer.behaviour == "conflict" {
            let mut other = operation.clone();
            other.operation_id.push_str("-other");
            checkpoint.record(other, None).await?;
        }
        if transfer.behaviour == "again" {
            // Recording the same operation without a cursor keeps the cursor; the receipt
            // reports what the handler's checkpoint says it holds.
            checkpoint.record(operation.clone(), None).await?;
            let (_, cursor) = checkpoint.recorded().expect("recorded above");
            return Ok(Receipt {
                transfer_id: cursor.unwrap_or_else(|| "no cursor".to_owned()),
            });
        }
        self.effects.fetch_add(1, Ordering::SeqCst);
        match transfer.behaviour.as_str() {
            "uncertain" => Err(Self::failure("bank.reset", ErrorCategory::Temporary)
                .with_retryable(true)
                .with_retry_after_ms(2_000)
                .with_uncertain_outcome()
                .with_provider_operation(operation)),
            "fail" => Err(Self::failure("bank.refused", ErrorCategory::Permanent)),
            "panic" => panic!("the bank's handler has a bug"),
            _ => Ok(Receipt {
                transfer_id: format!("tr-{}", transfer.amount),
            }),
        }
    }

    async fn ask(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.cursors_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.cursor);
        if self.reconciliation_hangs.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        assert!(
            !self.reconciliation_panics.load(Ordering::SeqCst),
            "the bank's reconciliation has a bug"
        );
        if self.still_pending.load(Ordering::SeqCst) {
            return Ok(ReconcileOutcome::Pending {
                cursor: Some("cursor-2".into()),
            });
        }
        Ok(ReconcileOutcome::Committed {
            evidence: Some(json!({ "found": request.provider_operation.operation_id })),
        })
    }

    /// Refunds a transfer; plans and commits like a transfer.
    #[capability(
        id = "cap:bank:refund",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit]),
    )]
    async fn refund(
        &self,
        transfer: Transfer,
        _checkpoint: Checkpoint,
    ) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            transfer_id: format!("rf-{}", transfer.amount),
        })
    }

    /// Closes an account; cannot be rolled back.
    #[capability(
        id = "cap:bank:close",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, rollback_not_supported]),
        compensation(rollback_not_supported),
    )]
    async fn close(
        &self,
        transfer: Transfer,
        _checkpoint: Checkpoint,
    ) -> Result<Receipt, ConnectorFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(Receipt {
            transfer_id: format!("cl-{}", transfer.amount),
        })
    }
}

/// A connector behind a hand-edited definition.
struct Redefined<C> {
    inner: C,
    definition: ConnectorDefinition,
}

impl<C: Connector> Connector for Redefined<C> {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        self.inner.invoke(capability_id, input, context)
    }
}

// ---- the host ---------------------------------------------------------------------------------

/// When every test starts.
const START: Millis = 1_750_000_000_000;
/// A plan's lifetime.
const FIFTEEN_MINUTES: Millis = 15 * 60 * 1000;

/// A clock that moves only when told.
struct FixedClock(AtomicU64);

impl FixedClock {
    fn new() -> Arc<Self> {
        Arc::new(Self(AtomicU64::new(START)))
    }

    fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

fn host_on(
    connector: impl Connector,
    store: SharedStore,
    clock: Arc<FixedClock>,
    deployment: Deployment,
) -> Host {
    Host::builder()
        .connector(connector)
        .store(store)
        .clock(clock)
        .deployment(deployment)
        .build()
        .expect("host builds")
}

/// A bank host on its own memory store and fixed clock.
struct Setup {
    bank: Bank,
    store: Arc<MemoryStore>,
    clock: Arc<FixedClock>,
    host: Host,
}

fn setup() -> Setup {
    let bank = Bank::default();
    let store = Arc::new(MemoryStore::default());
    let clock = FixedClock::new();
    let host = host_on(
        bank.clone(),
        store.clone(),
        clock.clone(),
        Deployment::default(),
    );
    Setup {
        bank,
        store,
        clock,
        host,
    }
}

fn person(id: &str, kind: PrincipalKind, tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, kind), "test").with_tenant(VerifiedTenant::new(tenant))
}

fn ada() -> TrustedContext {
    person("user:ada", PrincipalKind::Human, "t1")
}

fn action_on(capability: &str, transaction: ActionTransaction, key: &str, input: Value) -> Action {
    Action::new(capability, input)
        .with_idempotency_key(key)
        .with_transaction(transaction)
}

/// A transfer in `mode`, with an optional transaction id.
fn transfer(mode: TransactionMode, id: Option<&TransactionId>, key: &str, input: Value) -> Action {
    let mut transaction = ActionTransaction::new(mode);
    transaction.transaction_id = id.cloned();
    action_on("cap:bank:transfer", transaction, key, input)
}

/// A commit of `plan_id` on `capability`.
fn commit_on(capability: &str, plan_id: &str, key: &str, input: Value) -> Action {
    let mut transaction = ActionTransaction::new(TransactionMode::Commit);
    transaction.plan_id = Some(plan_id.to_owned());
    action_on(capability, transaction, key, input)
}

fn commit(plan_id: &str, key: &str, input: Value) -> Action {
    commit_on("cap:bank:transfer", plan_id, key, input)
}

fn reconcile(id: &TransactionId, key: &str) -> Action {
    transfer(
        TransactionMode::Reconcile,
        Some(id),
        key,
        json!({ "amount": 1 }),
    )
}

/// Plans `input` as `caller` and returns the plan.
async fn plan_as(host: &Host, caller: &TrustedContext, key: &str, input: Value) -> TransactionPlan {
    let result = host
        .invoke(transfer(TransactionMode::Plan, None, key, input), caller)
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let output = result.output.expect("a plan has output");
    assert_eq!(output["transaction"], "plan");
    serde_json::from_value(output["plan"].clone()).expect("the output carries a plan")
}

async fn plan(host: &Host, key: &str, input: Value) -> TransactionPlan {
    plan_as(host, &ada(), key, input).await
}

/// The error of a failed result.
fn failure(result: &ActionResult) -> &ProtocolError {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    result.error.as_ref().expect("a failed result has an error")
}

/// Asserts code, category, retryability and `retry_after_ms` of an error the host raised.
fn assert_host_error(
    error: &ProtocolError,
    code: &str,
    category: ErrorCategory,
    retryable: bool,
    retry_after_ms: Option<u64>,
) {
    assert_eq!(error.code, code, "{error:?}");
    assert_eq!(error.category, category, "{error:?}");
    assert_eq!(error.retryable, Some(retryable), "{error:?}");
    assert_eq!(error.retry_after_ms, retry_after_ms, "{error:?}");
    assert_eq!(
        error.source,
        Some(json!({ "component": "aip-connector.host" })),
        "{error:?}"
    );
}

/// Asserts a policy refusal (category `policy`, never retryable) with code `code`.
fn assert_policy(result: &ActionResult, code: &str) {
    assert_host_error(failure(result), code, ErrorCategory::Policy, false, None);
}

async fn record(store: &MemoryStore, id: &TransactionId) -> TransactionRecord {
    store
        .transaction(id)
        .await
        .expect("the memory store answers")
        .expect("the transaction is recorded")
}

/// Plans on a scratch host, lets `edit` change the planned record, and writes it into `store`:
/// a record this host never writes, as another implementation sharing the store could.
async fn seed_plan(store: &MemoryStore, edit: impl FnOnce(&mut TransactionRecord)) -> String {
    let scratch = Arc::new(MemoryStore::default());
    let host = host_on(
        Bank::default(),
        scratch.clone(),
        FixedClock::new(),
        Deployment::default(),
    );
    let planned = plan(&host, "seed", json!({ "amount": 5 })).await;
    let mut record = record(&scratch, &planned.transaction_id).await;
    edit(&mut record);
    assert!(store.insert_transaction(&record).await.unwrap());
    planned.plan_id
}

// ---- stage 3 ----------------------------------------------------------------------------------

#[tokio::test]
async fn rollback_not_supported_is_refused_without_running_anything() {
    let Setup { bank, host, .. } = setup();
    let transaction = ActionTransaction::new(TransactionMode::RollbackNotSupported);
    let result = host
        .invoke(
            action_on("cap:bank:close", transaction, "rb", json!({ "amount": 1 })),
            &ada(),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_ROLLBACK_NOT_SUPPORTED);
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
    // A compensate of it says its effects cannot be compensated, not only that the mode is
    // not declared (a porting trial).
    let compensate = ActionTransaction::compensate(aip_connector::ids::ActionId::new());
    let refused = host
        .invoke(
            action_on("cap:bank:close", compensate, "cp", json!({ "amount": 1 })),
            &ada(),
        )
        .await;
    let error = refused.error.expect("refused");
    assert!(
        error.message.ends_with(
            "; its contract says `compensation.mode = rollback_not_supported`: its effects cannot be compensated"
        ),
        "{}: {}",
        error.code,
        error.message
    );
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

// ---- stage 8: previews ------------------------------------------------------------------------

/// A definition that claims downstream fidelity without a validation handler passes admission
/// (which cannot see handlers), so the host refuses the preview itself.
#[tokio::test]
async fn downstream_fidelity_without_a_validation_handler_is_plan_handler_unsupported() {
    let bank = Bank::default();
    let mut definition = Connector::definition(&bank).clone();
    let transfer_definition = definition
        .capabilities
        .iter_mut()
        .find(|c| c.capability.id == "cap:bank:transfer")
        .expect("the bank transfers");
    assert!(!transfer_definition.facts.validation_handler);
    transfer_definition
        .capability
        .contract
        .as_mut()
        .and_then(|c| c.transaction.as_mut())
        .expect("transfer declares transactions")
        .dry_run_fidelity = DryRunFidelity::DownstreamValidation;
    let store = Arc::new(MemoryStore::default());
    let host = host_on(
        Redefined {
            inner: bank.clone(),
            definition,
        },
        store.clone(),
        FixedClock::new(),
        Deployment::default(),
    );
    for (mode, key) in [(TransactionMode::Plan, "p"), (TransactionMode::DryRun, "d")] {
        let id = TransactionId::new();
        let result = host
            .invoke(
                transfer(mode, Some(&id), key, json!({ "amount": 5 })),
                &ada(),
            )
            .await;
        assert_policy(&result, codes::TRANSACTION_PLAN_HANDLER_UNSUPPORTED);
        assert_eq!(
            store.transaction(&id).await.unwrap(),
            None,
            "nothing is recorded"
        );
    }
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

// ---- stage 11: plan commits, in the order they are checked ------------------------------------

#[tokio::test]
async fn a_commit_of_an_unknown_plan_is_plan_not_found() {
    let Setup { host, .. } = setup();
    let result = host
        .invoke(commit("plan:nope", "c", json!({ "amount": 5 })), &ada())
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_NOT_FOUND);
}

#[tokio::test]
async fn a_commit_through_another_capability_is_plan_capability_mismatch() {
    let Setup { bank, host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let result = host
        .invoke(
            commit_on(
                "cap:bank:refund",
                &planned.plan_id,
                "c",
                json!({ "amount": 5 }),
            ),
            &ada(),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_CAPABILITY_MISMATCH);
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

/// A plan whose commit failed is `failed`, not `planned`: it cannot be committed again. Nor can
/// the record of a dry run that carried a plan id.
#[tokio::test]
async fn a_commit_of_a_record_no_commit_owns_is_plan_not_committable() {
    let Setup { store, host, .. } = setup();
    let input = json!({ "amount": 5, "behaviour": "fail" });
    let planned = plan(&host, "p", input.clone()).await;
    let first = host
        .invoke(commit(&planned.plan_id, "c1", input.clone()), &ada())
        .await;
    assert_eq!(failure(&first).code, "bank.refused");
    assert_eq!(
        record(&store, &planned.transaction_id).await.status,
        TransactionProtocolStatus::Failed
    );
    let again = host
        .invoke(commit(&planned.plan_id, "c2", input), &ada())
        .await;
    assert_policy(&again, codes::TRANSACTION_PLAN_NOT_COMMITTABLE);

    let mut previewing = ActionTransaction::new(TransactionMode::DryRun);
    previewing.plan_id = Some("plan:preview".into());
    let preview = host
        .invoke(
            action_on("cap:bank:transfer", previewing, "d", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_eq!(preview.status, ActionResultStatus::Completed, "{preview:?}");
    let result = host
        .invoke(commit("plan:preview", "c3", json!({ "amount": 5 })), &ada())
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_NOT_COMMITTABLE);
}

/// This host always stores the plan with its planned record; only a record written by
/// something else can be planned without one.
#[tokio::test]
async fn a_planned_record_without_its_plan_is_plan_missing_payload() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let plan_id = seed_plan(&store, |record| record.plan = None).await;
    let result = host
        .invoke(commit(&plan_id, "c", json!({ "amount": 5 })), &ada())
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_MISSING_PAYLOAD);
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

/// Only the planner commits: same principal id **and** kind.
#[tokio::test]
async fn a_commit_by_another_principal_is_plan_principal_mismatch() {
    let Setup { bank, host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let eve = person("user:eve", PrincipalKind::Human, "t1");
    let ada_as_agent = person("user:ada", PrincipalKind::Agent, "t1");
    for (who, key) in [(eve, "c1"), (ada_as_agent, "c2")] {
        let result = host
            .invoke(commit(&planned.plan_id, key, json!({ "amount": 5 })), &who)
            .await;
        assert_policy(&result, codes::TRANSACTION_PLAN_PRINCIPAL_MISMATCH);
    }
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

/// A plan lives 15 minutes: one millisecond before, the commit is checked further; at 15
/// minutes it is expired.
#[tokio::test]
async fn a_plan_expires_fifteen_minutes_after_it_is_made() {
    let Setup {
        bank,
        store,
        clock,
        host,
    } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    assert_eq!(
        planned.expires_at,
        Some(planned.created_at + time::Duration::minutes(15))
    );
    clock.advance(FIFTEEN_MINUTES - 1);
    let changed = host
        .invoke(
            commit(&planned.plan_id, "c1", json!({ "amount": 6 })),
            &ada(),
        )
        .await;
    assert_policy(&changed, codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH);
    clock.advance(1);
    let late = host
        .invoke(
            commit(&planned.plan_id, "c2", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_policy(&late, codes::TRANSACTION_PLAN_EXPIRED);
    assert_eq!(
        record(&store, &planned.transaction_id).await.status,
        TransactionProtocolStatus::Planned
    );
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_commit_naming_another_transaction_is_plan_transaction_mismatch() {
    let Setup { host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let mut action = commit(&planned.plan_id, "c", json!({ "amount": 5 }));
    action
        .transaction
        .as_mut()
        .expect("a commit is transactional")
        .transaction_id = Some(TransactionId::new());
    let result = host.invoke(action, &ada()).await;
    assert_policy(&result, codes::TRANSACTION_PLAN_TRANSACTION_MISMATCH);
}

/// The details name the planned hash and the hash of what was sent — the same hash a dry run
/// of that input reports.
#[tokio::test]
async fn a_commit_with_other_input_is_plan_input_hash_mismatch() {
    let Setup { host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let result = host
        .invoke(
            commit(&planned.plan_id, "c", json!({ "amount": 9 })),
            &ada(),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH);
    let preview = host
        .invoke(
            transfer(TransactionMode::DryRun, None, "d", json!({ "amount": 9 })),
            &ada(),
        )
        .await;
    let actual = &preview.output.expect("a dry run has output")["input_hash"];
    assert_eq!(
        failure(&result).details,
        Some(json!({ "expected_hash": planned.input_hash, "actual_hash": actual }))
    );
    assert_ne!(actual, &json!(planned.input_hash));
}

/// This host stamps every action with the identity it vouches for, so its own plans always
/// carry one; a plan without one comes from something else sharing the store.
#[tokio::test]
async fn a_plan_without_identity_is_plan_identity_missing() {
    let Setup { store, host, .. } = setup();
    let plan_id = seed_plan(&store, |record| {
        record.plan.as_mut().expect("a planned record").identity = None;
    })
    .await;
    let result = host
        .invoke(commit(&plan_id, "c", json!({ "amount": 5 })), &ada())
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_IDENTITY_MISSING);
}

/// The same principal id without a tenant is another tenant's caller: the plan is not there
/// for it either (`plan_tenant_mismatch` would tell that it exists).
#[tokio::test]
async fn a_commit_without_the_plans_tenant_is_plan_not_found() {
    let Setup { bank, host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let ada_untenanted =
        TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test");
    let result = host
        .invoke(
            commit(&planned.plan_id, "c", json!({ "amount": 5 })),
            &ada_untenanted,
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_NOT_FOUND);
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

/// Another tenant's plan is not there for this caller: the answer must not tell that it exists,
/// let alone whose it is (`plan_principal_mismatch` did).
#[tokio::test]
async fn a_commit_of_another_tenants_plan_is_plan_not_found() {
    let Setup { bank, host, .. } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    for caller in [
        person("user:ada", PrincipalKind::Human, "t2"),
        person("user:eve", PrincipalKind::Human, "t2"),
    ] {
        let result = host
            .invoke(
                commit(&planned.plan_id, "c", json!({ "amount": 5 })),
                &caller,
            )
            .await;
        assert_policy(&result, codes::TRANSACTION_PLAN_NOT_FOUND);
    }
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
    // Its own tenant still commits it.
    let committed = host
        .invoke(
            commit(&planned.plan_id, "c1", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_eq!(
        committed.status,
        ActionResultStatus::Completed,
        "{committed:?}"
    );
}

/// The external account is the deployment's, so it differs only between two hosts sharing one
/// store.
#[tokio::test]
async fn a_commit_for_another_external_account_is_plan_external_account_mismatch() {
    let bank = Bank::default();
    let store = Arc::new(MemoryStore::default());
    let clock = FixedClock::new();
    let for_account = host_on(
        bank.clone(),
        store.clone(),
        clock.clone(),
        Deployment::new().with_external_account(ExternalAccountRef {
            id: "acct_1".into(),
            system: "bank".into(),
        }),
    );
    let without_account = host_on(bank.clone(), store, clock, Deployment::default());
    let planned = plan(&for_account, "p", json!({ "amount": 5 })).await;
    let result = without_account
        .invoke(
            commit(&planned.plan_id, "c", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_PLAN_EXTERNAL_ACCOUNT_MISMATCH);
    assert_eq!(bank.calls.load(Ordering::SeqCst), 0);
}

/// A committed plan is claimed; so is a transaction id a second plan reuses.
#[tokio::test]
async fn a_claimed_plan_is_plan_already_claimed() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let first = host
        .invoke(
            commit(&planned.plan_id, "c1", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
    let second = host
        .invoke(
            commit(&planned.plan_id, "c2", json!({ "amount": 5 })),
            &ada(),
        )
        .await;
    assert_policy(&second, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
    assert_eq!(bank.effects.load(Ordering::SeqCst), 1);
    let committed = record(&store, &planned.transaction_id).await;
    assert_eq!(committed.status, TransactionProtocolStatus::Committed);

    let replanned = host
        .invoke(
            transfer(
                TransactionMode::Plan,
                Some(&planned.transaction_id),
                "p2",
                json!({ "amount": 5 }),
            ),
            &ada(),
        )
        .await;
    assert_policy(&replanned, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
    assert_eq!(
        record(&store, &planned.transaction_id).await,
        committed,
        "the committed record is untouched"
    );
}

/// The planner's commit whose outcome is unknown, sent again (under another key, as a client
/// retrying a failure does), is told to reconcile, as an `execute` in that state is; another
/// principal learns only that the plan was claimed.
#[tokio::test]
async fn a_retried_commit_of_an_unknown_outcome_is_reconciliation_required() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let input = json!({ "amount": 5, "behaviour": "uncertain" });
    let planned = plan(&host, "p", input.clone()).await;
    let first = host
        .invoke(commit(&planned.plan_id, "c1", input.clone()), &ada())
        .await;
    assert_eq!(
        record(&store, &planned.transaction_id).await.status,
        TransactionProtocolStatus::OutcomeUnknown,
        "{first:?}"
    );
    let retried = host
        .invoke(commit(&planned.plan_id, "c2", input.clone()), &ada())
        .await;
    assert_policy(&retried, codes::TRANSACTION_RECONCILIATION_REQUIRED);
    assert_eq!(
        failure(&retried).details.as_ref().unwrap()["transaction_id"],
        json!(planned.transaction_id)
    );
    let stranger = host
        .invoke(
            commit(&planned.plan_id, "c3", input),
            &person("user:bob", PrincipalKind::Human, "t1"),
        )
        .await;
    assert_policy(&stranger, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
    assert_eq!(bank.effects.load(Ordering::SeqCst), 1);
}

/// A plan id the caller chose that another transaction already answers to is refused as a
/// policy conflict, like a reused transaction id — not as a retryable storage failure, which
/// would invite retries that can never succeed.
#[tokio::test]
async fn a_taken_plan_id_is_plan_already_claimed() {
    let Setup { host, .. } = setup();
    let named = |key: &str, amount: u32| {
        let mut transaction = ActionTransaction::new(TransactionMode::Plan);
        transaction.plan_id = Some("plan:mine".into());
        action_on(
            "cap:bank:transfer",
            transaction,
            key,
            json!({ "amount": amount }),
        )
    };
    let first = host.invoke(named("p1", 5), &ada()).await;
    assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
    let second = host.invoke(named("p2", 6), &ada()).await;
    assert_policy(&second, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
}

/// An `execute` naming a plan id another transaction answers to meets the store's one-record-
/// per-plan rule when its record is inserted: that is the same refusal, not a storage fault
/// (until 2026-12-01 it was `storage.unavailable`, retryable, so a caller retried forever).
#[tokio::test]
async fn an_execute_naming_a_taken_plan_id_is_plan_already_claimed() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let planned = plan(&host, "p", json!({ "amount": 5 })).await;
    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.plan_id = Some(planned.plan_id.clone());
    let execute = action_on(
        "cap:bank:transfer",
        transaction,
        "e1",
        json!({ "amount": 5 }),
    );
    let refused = host.invoke(execute, &ada()).await;
    assert_policy(&refused, codes::TRANSACTION_PLAN_ALREADY_CLAIMED);
    assert_eq!(bank.effects.load(Ordering::SeqCst), 0);
    assert_eq!(
        record(&store, &planned.transaction_id).await.status,
        TransactionProtocolStatus::Planned,
        "the plan is untouched"
    );
}

// ---- stage 11: the execute replay gate ---------------------------------------------------------

/// An unknown outcome refuses re-execution; the details say what reconciliation will use, and
/// the reconcile time honours the failure's `retry_after_ms`.
#[tokio::test]
async fn reexecuting_an_unknown_outcome_is_reconciliation_required() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let id = TransactionId::new();
    let input = json!({ "amount": 5, "behaviour": "uncertain" });
    let first = transfer(TransactionMode::Execute, Some(&id), "e1", input.clone());
    let action_id = first.id.clone();
    let uncertain = host.invoke(first, &ada()).await;
    assert_eq!(failure(&uncertain).code, "bank.reset");
    let unknown = record(&store, &id).await;
    assert_eq!(unknown.status, TransactionProtocolStatus::OutcomeUnknown);
    assert_eq!(unknown.reconcile_after_ms, Some(START + 2_000));

    // The unknown outcome is kept under the key, not retryable: the exact resend replays it
    // (naming the transaction), and so does a resend without the transaction id, which would
    // otherwise start a second transaction (an MCP tool call's shape).
    let mut exact = transfer(TransactionMode::Execute, Some(&id), "e1", input.clone());
    exact.id = action_id.clone();
    let mut without_id = transfer(TransactionMode::Execute, None, "e1", input.clone());
    without_id.id = action_id.clone();
    for resend in [exact, without_id] {
        let replayed = host.invoke(resend, &ada()).await;
        let error = failure(&replayed);
        assert_eq!(error.code, "bank.reset");
        assert_eq!(error.retryable, Some(false));
        assert_eq!(error.details.as_ref().unwrap()["transaction_id"], json!(id));
        assert_eq!(replayed.output.unwrap()["idempotent_replay"], true);
    }

    // The same action under another key, naming the transaction: reconcile first.
    let mut again = transfer(TransactionMode::Execute, Some(&id), "e2", input);
    again.id = action_id;
    let refused = host.invoke(again, &ada()).await;
    assert_policy(&refused, codes::TRANSACTION_RECONCILIATION_REQUIRED);
    assert_eq!(
        failure(&refused).details,
        Some(json!({
            "transaction_id": id,
            "status": "outcome_unknown",
            "provider_operation": { "provider": "bank", "operation_id": "op-e1" },
            "cursor": "cursor-1",
            "reconcile_after_ms": START + 2_000,
        }))
    );
    assert_eq!(bank.effects.load(Ordering::SeqCst), 1);
}

/// A retryable failure before any provider call reopens for one retry; a second retry racing
/// it loses the reopening and is denied rather than run twice.
#[tokio::test]
async fn racing_retries_of_a_failed_execution_leave_one_retry_denied() {
    let bank = Bank::default();
    // `failed → prepared` transitions are held until two callers attempt one, so two racing
    // retries both read `failed` before either reopens it.
    let reopen = Arc::new(tokio::sync::Barrier::new(2));
    let store = Arc::new(HookedStore::before_transition(move |transition| {
        (transition.expected == [TransactionProtocolStatus::Failed]
            && transition.to == TransactionProtocolStatus::Prepared)
            .then(|| {
                let reopen = Arc::clone(&reopen);
                Box::pin(async move {
                    reopen.wait().await;
                }) as _
            })
    }));
    let host = host_on(
        bank.clone(),
        store.clone(),
        FixedClock::new(),
        Deployment::default(),
    );
    let id = TransactionId::new();
    let input = json!({ "amount": 5, "behaviour": "retry" });
    let first = transfer(TransactionMode::Execute, Some(&id), "e1", input.clone());
    let retry = |key: &str| {
        let mut action = transfer(TransactionMode::Execute, Some(&id), key, input.clone());
        action.id = first.id.clone();
        action
    };
    let (retry_a, retry_b) = (retry("e2"), retry("e3"));
    assert_eq!(failure(&host.invoke(first, &ada()).await).code, "bank.busy");
    let failed = store.transaction(&id).await.unwrap().unwrap();
    assert_eq!(failed.status, TransactionProtocolStatus::Failed);

    let caller = ada();
    let (a, b) = tokio::join!(host.invoke(retry_a, &caller), host.invoke(retry_b, &caller));
    let (denied, ran) = if a.error.as_ref().is_some_and(|e| e.code == "bank.busy") {
        (b, a)
    } else {
        (a, b)
    };
    assert_eq!(failure(&ran).code, "bank.busy");
    assert_policy(&denied, codes::TRANSACTION_RETRY_DENIED);
    assert_eq!(
        bank.calls.load(Ordering::SeqCst),
        2,
        "the first call and one retry"
    );
}

/// `execute` runs only a new, prepared or safely retryable transaction: a plan is not executed,
/// and a reconciled transaction is not re-run (reconciled is not committed, so nothing replays).
#[tokio::test]
async fn executing_a_planned_or_reconciled_transaction_is_execute_state_invalid() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let planning = transfer(TransactionMode::Plan, None, "p", json!({ "amount": 5 }));
    let planning_id = planning.id.clone();
    let planned = host.invoke(planning, &ada()).await;
    let plan: TransactionPlan =
        serde_json::from_value(planned.output.expect("a plan")["plan"].clone()).unwrap();
    let mut execute_plan = transfer(
        TransactionMode::Execute,
        Some(&plan.transaction_id),
        "e0",
        json!({ "amount": 5 }),
    );
    execute_plan.id = planning_id;
    let refused = host.invoke(execute_plan, &ada()).await;
    assert_policy(&refused, codes::TRANSACTION_EXECUTE_STATE_INVALID);

    let id = TransactionId::new();
    let input = json!({ "amount": 5, "behaviour": "uncertain" });
    let first = transfer(TransactionMode::Execute, Some(&id), "e1", input.clone());
    let action_id = first.id.clone();
    host.invoke(first, &ada()).await;
    let reconciled = host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::Reconciled
    );
    let mut again = transfer(TransactionMode::Execute, Some(&id), "e2", input);
    again.id = action_id;
    let refused = host.invoke(again, &ada()).await;
    assert_policy(&refused, codes::TRANSACTION_EXECUTE_STATE_INVALID);
    assert_eq!(bank.effects.load(Ordering::SeqCst), 1);
}

/// Found by a hostile audit: the gate's answer with the stored result of a committed execute (the
/// same action and transaction, resent under another key) was not marked as a replay, though
/// nothing ran; nor was the copy stored under the new key.
#[tokio::test]
async fn an_execute_answered_by_the_gate_is_a_marked_replay() {
    let Setup { host, bank, .. } = setup();
    let id = TransactionId::new();
    let first = transfer(
        TransactionMode::Execute,
        Some(&id),
        "e1",
        json!({ "amount": 5 }),
    );
    let action_id = first.id.clone();
    let done = host.invoke(first, &ada()).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    assert!(!done.is_idempotent_replay());
    let again = || {
        let mut action = transfer(
            TransactionMode::Execute,
            Some(&id),
            "e2",
            json!({ "amount": 5 }),
        );
        action.id = action_id.clone();
        action
    };
    let gated = host.invoke(again(), &ada()).await;
    assert!(gated.is_idempotent_replay(), "{gated:?}");
    assert_eq!(gated.original_output(), done.original_output());
    // Replayed again under the second key: still one marker, same output.
    let keyed = host.invoke(again(), &ada()).await;
    assert_eq!(keyed.output, gated.output);
    assert_eq!(bank.effects.load(Ordering::SeqCst), 1);
}

/// The gate binds a transaction to its execution contract, identity included (`aip-runtime.md`
/// §3.5): the same action id sent from another tenant is not handed the stored result.
#[tokio::test]
async fn an_execute_replay_from_another_tenant_is_not_authorized() {
    let Setup { host, .. } = setup();
    let id = TransactionId::new();
    let first = transfer(
        TransactionMode::Execute,
        Some(&id),
        "e1",
        json!({ "amount": 5 }),
    );
    let action_id = first.id.clone();
    let done = host.invoke(first, &ada()).await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    let mut replay = transfer(
        TransactionMode::Execute,
        Some(&id),
        "e1",
        json!({ "amount": 5 }),
    );
    replay.id = action_id;
    let result = host
        .invoke(replay, &person("user:eve", PrincipalKind::Human, "t2"))
        .await;
    assert_host_error(
        failure(&result),
        codes::AUTH_NOT_AUTHORIZED,
        ErrorCategory::Auth,
        false,
        None,
    );
}

/// The same action sent again under another idempotency key while its first attempt still runs
/// (before its checkpoint) must not run the handler a second time.
#[tokio::test]
async fn an_execute_while_an_earlier_attempt_runs_is_attempt_in_progress() {
    let Setup {
        bank,
        store,
        clock,
        host,
    } = setup();
    let host = Arc::new(host);
    let id = TransactionId::new();
    let first = transfer(
        TransactionMode::Execute,
        Some(&id),
        "e1",
        json!({ "amount": 5, "behaviour": "slow" }),
    )
    .with_timeout_ms(10_000);
    let first_id = first.id.clone();
    let again = |key: &str| {
        let mut action = transfer(
            TransactionMode::Execute,
            Some(&id),
            key,
            json!({ "amount": 5 }),
        );
        action.id = first_id.clone();
        action
    };
    let (second, third) = (again("e2"), again("e2"));
    // The first attempt runs until its host "dies": its future is leaked, not dropped (a
    // dropped call is settled, docs/host-runtime.md §7.2; a dead host runs no destructor).
    let (die, dies) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let host = Arc::clone(&host);
        async move {
            let caller = ada();
            let mut call = Box::pin(host.invoke(first, &caller));
            tokio::select! {
                result = &mut call => panic!("the first attempt answered: {result:?}"),
                _ = dies => std::mem::forget(call),
            }
        }
    });
    while bank.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let attempt_over_at = START + 10_000 + 5_000;
    assert_eq!(
        record(&store, &id).await.reconcile_after_ms,
        Some(attempt_over_at)
    );
    clock.advance(4_000);
    // Waiting is not an attempt: resends beyond the key's attempt limit are not dead-lettered,
    // and the same key runs once the earlier attempt is over.
    for _ in 0..HostLimits::default().max_attempts_per_key + 1 {
        let refused = host.invoke(again("e2"), &ada()).await;
        assert_eq!(
            failure(&refused).code,
            codes::TRANSACTION_ATTEMPT_IN_PROGRESS
        );
    }
    let refused = host.invoke(second, &ada()).await;
    let error = failure(&refused);
    assert_host_error(
        error,
        codes::TRANSACTION_ATTEMPT_IN_PROGRESS,
        ErrorCategory::Temporary,
        true,
        Some(attempt_over_at - START - 4_000),
    );
    assert_eq!(
        error.details,
        Some(json!({ "transaction_id": id, "reconcile_after_ms": attempt_over_at }))
    );
    assert_eq!(bank.calls.load(Ordering::SeqCst), 1, "the handler ran once");

    // The first attempt's host dies; once its deadline has passed, a retry takes it over.
    die.send(()).unwrap();
    running.await.unwrap();
    clock.advance(attempt_over_at - START - 4_000);
    let retried = host.invoke(third, &ada()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(bank.calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::Committed
    );
}

// ---- stage 11: reconciliation -----------------------------------------------------------------

/// Another tenant's transaction is not there for a reconciliation: its handler would be asked,
/// with this caller's tenant and credential, about another tenant's provider operation, and the
/// answer would settle the other tenant's record.
#[tokio::test]
async fn reconciling_another_tenants_transaction_is_not_found() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let id = TransactionId::new();
    host.invoke(
        transfer(
            TransactionMode::Execute,
            Some(&id),
            "e1",
            json!({ "amount": 5, "behaviour": "uncertain" }),
        ),
        &ada(),
    )
    .await;
    let result = host
        .invoke(
            reconcile(&id, "r1"),
            &person("user:mallory", PrincipalKind::Human, "t2"),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_NOT_FOUND);
    assert!(bank.cursors_seen.lock().unwrap().is_empty(), "not asked");
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::OutcomeUnknown
    );
    // Anyone of its own tenant may look the outcome up.
    let result = host
        .invoke(
            reconcile(&id, "r2"),
            &person("user:ops", PrincipalKind::Human, "t1"),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
}

/// Only the capability that checkpointed the operation reconciles it (its connector's reconcile
/// handler knows the operation).
#[tokio::test]
async fn reconciling_another_capabilitys_transaction_is_not_reconcilable() {
    let Setup { bank, host, .. } = setup();
    let id = TransactionId::new();
    let closed = host
        .invoke(
            action_on(
                "cap:bank:close",
                ActionTransaction::new(TransactionMode::Execute).with_transaction_id(id.clone()),
                "e1",
                json!({ "amount": 5 }),
            ),
            &ada(),
        )
        .await;
    assert_eq!(closed.status, ActionResultStatus::Completed, "{closed:?}");
    let result = host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_policy(&result, codes::TRANSACTION_NOT_RECONCILABLE);
    assert_eq!(
        failure(&result).details,
        Some(json!({ "capability_id": "cap:bank:close" }))
    );
    assert!(bank.cursors_seen.lock().unwrap().is_empty(), "not asked");
}

/// An uncertain `execute` whose reconciliation (1 s deadline) is abandoned mid-lookup, as a
/// host that dies would leave it: the record stays `reconciling`. The call's future is leaked,
/// not dropped: a dropped call is settled (docs/host-runtime.md §7.2), a dead host runs no
/// destructor.
async fn abandon_a_reconciliation(bank: &Bank, host: &Arc<Host>) -> TransactionId {
    let id = TransactionId::new();
    host.invoke(
        transfer(
            TransactionMode::Execute,
            Some(&id),
            "e1",
            json!({ "amount": 5, "behaviour": "uncertain" }),
        ),
        &ada(),
    )
    .await;
    bank.reconciliation_hangs.store(true, Ordering::SeqCst);
    let caller = ada();
    let mut lookup = Box::pin(host.invoke(reconcile(&id, "r1").with_timeout_ms(1_000), &caller));
    tokio::select! {
        result = &mut lookup => panic!("the lookup answered: {result:?}"),
        () = async {
            while bank.cursors_seen.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } => {}
    }
    std::mem::forget(lookup);
    bank.reconciliation_hangs.store(false, Ordering::SeqCst);
    id
}

/// A reconciliation whose host died during the lookup is not a dead end: once its deadline has
/// passed, the transaction is reconciled again.
#[tokio::test]
async fn an_abandoned_reconciliation_is_reconciled_again_after_its_deadline() {
    let Setup {
        bank,
        store,
        clock,
        host,
    } = setup();
    let host = Arc::new(host);
    let id = abandon_a_reconciliation(&bank, &host).await;
    let stuck = record(&store, &id).await;
    assert_eq!(stuck.status, TransactionProtocolStatus::Reconciling);
    assert_eq!(stuck.reconcile_after_ms, Some(START + 1_000 + 5_000));

    // It may still be running until then: "not yet", retryable, so the same key works later.
    let early = host.invoke(reconcile(&id, "r2"), &ada()).await;
    let refusal = failure(&early);
    assert_eq!(refusal.code, codes::TRANSACTION_ATTEMPT_IN_PROGRESS);
    assert!(refusal.is_retryable());
    assert_eq!(refusal.retry_after_ms, Some(6_000));
    assert_eq!(
        refusal.details,
        Some(json!({ "status": "reconciling", "reconcile_after_ms": START + 6_000 }))
    );
    clock.advance(6_000);
    let settled = host.invoke(reconcile(&id, "r2"), &ada()).await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::Reconciled
    );
}

/// A record left `reconciling` without a deadline (as builds from before deadlines were stored
/// wrote them) is not stuck for good: it is given the longest deadline the host allows a
/// handler, from its last update, and reconciled again after it.
#[tokio::test]
async fn a_reconciliation_without_a_stored_deadline_is_reconciled_after_the_longest_one() {
    let Setup {
        bank,
        store,
        clock,
        host,
    } = setup();
    let host = Arc::new(host);
    let id = abandon_a_reconciliation(&bank, &host).await;
    // What an older build left: the same status, no deadline.
    let stuck = record(&store, &id).await;
    let legacy = Transition::new(
        &[TransactionProtocolStatus::Reconciling],
        TransactionProtocolStatus::Reconciling,
    );
    assert!(matches!(
        store.transition(&id, stuck.revision, &legacy, START).await,
        Ok(TransitionOutcome::Applied(ref record)) if record.reconcile_after_ms.is_none()
    ));

    let longest = START + HostLimits::default().max_action_timeout_ms + 5_000;
    let early = host.invoke(reconcile(&id, "r2"), &ada()).await;
    assert_eq!(failure(&early).code, codes::TRANSACTION_ATTEMPT_IN_PROGRESS);
    assert_eq!(
        failure(&early).details,
        Some(json!({ "status": "reconciling", "reconcile_after_ms": longest }))
    );
    clock.advance(longest - START);
    let settled = host.invoke(reconcile(&id, "r3"), &ada()).await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::Reconciled
    );
}

/// A handler that panics after its checkpoint leaves an unknown outcome (the provider may have
/// acted); a reconcile handler that panics leaves it unknown too, to be asked again.
#[tokio::test]
async fn a_panic_after_the_checkpoint_or_in_reconciliation_leaves_the_outcome_unknown() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let id = TransactionId::new();
    let panicked = host
        .invoke(
            transfer(
                TransactionMode::Execute,
                Some(&id),
                "e1",
                json!({ "amount": 5, "behaviour": "panic" }),
            ),
            &ada(),
        )
        .await;
    assert_host_error(
        failure(&panicked),
        codes::CONNECTOR_RUNTIME_FAILURE,
        ErrorCategory::Connector,
        false,
        None,
    );
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::OutcomeUnknown
    );

    bank.reconciliation_panics.store(true, Ordering::SeqCst);
    let asked = host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_eq!(failure(&asked).code, codes::CONNECTOR_RUNTIME_FAILURE);
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::OutcomeUnknown
    );
    bank.reconciliation_panics.store(false, Ordering::SeqCst);
    let settled = host.invoke(reconcile(&id, "r2"), &ada()).await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
}

#[tokio::test]
async fn reconciling_an_unknown_transaction_is_not_found() {
    let Setup { host, .. } = setup();
    let result = host
        .invoke(reconcile(&TransactionId::new(), "r"), &ada())
        .await;
    assert_policy(&result, codes::TRANSACTION_NOT_FOUND);
}

/// A timeout is an unknown outcome (reconcile no earlier than 5 s later), but a handler that
/// timed out before checkpointing left nothing to reconcile against.
#[tokio::test]
async fn reconciling_without_a_checkpointed_operation_is_provider_operation_required() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let id = TransactionId::new();
    let slow = transfer(
        TransactionMode::Execute,
        Some(&id),
        "e1",
        json!({ "amount": 5, "behaviour": "slow" }),
    )
    .with_timeout_ms(20);
    let timed_out = host.invoke(slow, &ada()).await;
    assert_eq!(failure(&timed_out).code, codes::SLA_TIMEOUT_EXCEEDED);
    // Named an unknown outcome in the details clients read (§6.5), whatever the code.
    let details = failure(&timed_out).details.clone().unwrap();
    assert_eq!(details["uncertain_outcome"], true, "{details}");
    assert_eq!(details["transaction_id"], json!(id));
    let unknown = record(&store, &id).await;
    assert_eq!(unknown.status, TransactionProtocolStatus::OutcomeUnknown);
    assert_eq!(unknown.reconcile_after_ms, Some(START + 5_000));
    assert_eq!(unknown.provider_operation, None);

    let result = host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_policy(&result, codes::TRANSACTION_PROVIDER_OPERATION_REQUIRED);
    assert_eq!(bank.cursors_seen.lock().unwrap().len(), 0, "not asked");
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::OutcomeUnknown
    );
}

/// Only an unknown outcome is reconciled: not a committed transaction, and not one already
/// reconciled.
#[tokio::test]
async fn reconciling_a_settled_transaction_is_not_reconcilable() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let committed = TransactionId::new();
    let done = host
        .invoke(
            transfer(
                TransactionMode::Execute,
                Some(&committed),
                "e1",
                json!({ "amount": 5 }),
            ),
            &ada(),
        )
        .await;
    assert_eq!(done.status, ActionResultStatus::Completed, "{done:?}");
    let record_before = record(&store, &committed).await;
    assert_eq!(record_before.status, TransactionProtocolStatus::Committed);
    assert!(record_before.provider_operation.is_some(), "checkpointed");
    let result = host.invoke(reconcile(&committed, "r1"), &ada()).await;
    assert_policy(&result, codes::TRANSACTION_NOT_RECONCILABLE);

    let unknown = TransactionId::new();
    host.invoke(
        transfer(
            TransactionMode::Execute,
            Some(&unknown),
            "e2",
            json!({ "amount": 5, "behaviour": "uncertain" }),
        ),
        &ada(),
    )
    .await;
    let first = host.invoke(reconcile(&unknown, "r2"), &ada()).await;
    assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
    let second = host.invoke(reconcile(&unknown, "r3"), &ada()).await;
    assert_policy(&second, codes::TRANSACTION_NOT_RECONCILABLE);
    assert_eq!(bank.cursors_seen.lock().unwrap().len(), 1);
}

/// A `Pending` answer fails retryably (ask again in 5 s) and puts the record back to
/// `outcome_unknown`; a later terminal answer settles it `reconciled`.
#[tokio::test]
async fn a_pending_reconcile_answer_is_reconciliation_pending() {
    let Setup {
        bank,
        store,
        clock,
        host,
    } = setup();
    let id = TransactionId::new();
    host.invoke(
        transfer(
            TransactionMode::Execute,
            Some(&id),
            "e1",
            json!({ "amount": 5, "behaviour": "uncertain" }),
        ),
        &ada(),
    )
    .await;
    bank.still_pending.store(true, Ordering::SeqCst);
    clock.advance(3_000);
    let pending = host.invoke(reconcile(&id, "r1"), &ada()).await;
    let error = failure(&pending);
    assert_host_error(
        error,
        codes::TRANSACTION_RECONCILIATION_PENDING,
        ErrorCategory::Temporary,
        true,
        Some(5_000),
    );
    assert_eq!(
        error.details,
        Some(json!({ "reconciliation_cursor": "cursor-2", "evidence": null }))
    );
    let unknown = record(&store, &id).await;
    assert_eq!(unknown.status, TransactionProtocolStatus::OutcomeUnknown);
    assert_eq!(unknown.reconcile_after_ms, Some(START + 3_000 + 5_000));

    bank.still_pending.store(false, Ordering::SeqCst);
    let settled = host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_eq!(settled.status, ActionResultStatus::Completed, "{settled:?}");
    assert_eq!(
        settled.output.expect("a reconciliation has output")["reconciliation"],
        json!({ "terminal": true, "committed": true, "cursor": null, "evidence": { "found": "op-e1" } })
    );
    assert_eq!(
        record(&store, &id).await.status,
        TransactionProtocolStatus::Reconciled
    );
}

/// `Reconciliation::cursor` is "the cursor from an earlier, non-terminal answer": after a
/// `Pending { cursor }` answer, the next reconciliation resumes from that cursor.
#[tokio::test]
async fn the_next_reconciliation_resumes_from_the_pending_cursor() {
    let Setup {
        bank, store, host, ..
    } = setup();
    let id = TransactionId::new();
    host.invoke(
        transfer(
            TransactionMode::Execute,
            Some(&id),
            "e1",
            json!({ "amount": 5, "behaviour": "uncertain" }),
        ),
        &ada(),
    )
    .await;
    bank.still_pending.store(true, Ordering::SeqCst);
    host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_eq!(
        record(&store, &id).await.reconciliation_cursor.as_deref(),
        Some("cursor-2")
    );
    host.invoke(reconcile(&id, "r1"), &ada()).await;
    assert_eq!(
        *bank.cursors_seen.lock().unwrap(),
        [Some("cursor-1".to_owned()), Some("cursor-2".to_owned())]
    );
}

// ---- stage 14: checkpoints under the host ------------------------------------------------------

/// Recording the same operation again without a cursor keeps the cursor, in the store and in
/// what the handler's `Checkpoint` reports.
#[tokio::test]
async fn recording_again_without_a_cursor_keeps_the_cursor() {
    let Setup { store, host, .. } = setup();
    let id = TransactionId::new();
    let result = host
        .invoke(
            transfer(
                TransactionMode::Execute,
                Some(&id),
                "e1",
                json!({ "amount": 5, "behaviour": "again" }),
            ),
            &ada(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(result.output.unwrap()["transfer_id"], "cursor-1");
    assert_eq!(
        record(&store, &id).await.reconciliation_cursor.as_deref(),
        Some("cursor-1")
    );
}

/// The host's checkpoint is durable and refuses to replace the recorded operation; a handler
/// that takes a `Checkpoint` cannot run outside a transactional action.
#[tokio::test]
async fn checkpoints_are_durable_single_valued_and_need_a_transaction() {
    let Setup { store, host, .. } = setup();
    let id = TransactionId::new();
    let conflict = host
        .invoke(
            transfer(
                TransactionMode::Execute,
                Some(&id),
                "e1",
                json!({ "amount": 5, "behaviour": "conflict" }),
            ),
            &ada(),
        )
        .await;
    let error = failure(&conflict);
    assert_eq!(error.code, codes::TRANSACTION_CHECKPOINT_CONFLICT);
    assert_eq!(error.category, ErrorCategory::Permanent);
    assert_eq!(error.retryable, Some(false));
    let failed = record(&store, &id).await;
    assert_eq!(failed.status, TransactionProtocolStatus::Failed);
    assert_eq!(
        failed.provider_operation.map(|op| op.operation_id),
        Some("op-e1".to_owned()),
        "the first checkpoint stands"
    );
    assert_eq!(failed.reconciliation_cursor.as_deref(), Some("cursor-1"));

    // A plain action on a capability that offers `execute` runs as one: its checkpoint has a
    // transaction to record into.
    let plain = Action::new("cap:bank:transfer", json!({ "amount": 5 })).with_idempotency_key("x");
    let plain_id = plain.id.clone();
    let result = host.invoke(plain, &ada()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let view = host
        .transaction(
            &aip_connector::host::TransactionSelector::Action(plain_id),
            &ada(),
        )
        .await
        .unwrap()
        .expect("the plain action ran as an `execute` transaction");
    assert_eq!(view.status, TransactionProtocolStatus::Committed);
    assert_eq!(view.transaction.mode, TransactionMode::Execute);
}

/// A vault whose moves need approval and can be reconciled.
#[derive(Clone, Default)]
struct Vault {
    asked: Arc<AtomicUsize>,
}

#[connector(id = "vault")]
impl Vault {
    /// Moves gold between vaults; an approver must release each move.
    #[capability(
        id = "cap:vault:move",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::ask,
        approval(required, selector = role("finance"), evidence = [reason], ttl_ms = 60_000),
    )]
    async fn move_gold(
        &self,
        transfer: Transfer,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            transfer_id: format!("gold-{}", transfer.amount),
        })
    }

    async fn ask(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ReconcileOutcome::Committed { evidence: None })
    }
}

/// A gated `reconcile` that admission would refuse whatever an approver decides is refused
/// before the approval gate: no approver is asked to release a lookup of nothing.
#[tokio::test]
async fn a_gated_reconcile_of_nothing_is_refused_before_the_gate() {
    let vault = Vault::default();
    let host = Host::builder()
        .connector(vault.clone())
        .store(Arc::new(MemoryStore::default()))
        .build()
        .expect("host builds");
    let result = host
        .invoke(
            action_on(
                "cap:vault:move",
                ActionTransaction::new(TransactionMode::Reconcile)
                    .with_transaction_id(TransactionId::new()),
                "r1",
                json!({ "amount": 1 }),
            ),
            &ada(),
        )
        .await;
    assert_policy(&result, codes::TRANSACTION_NOT_FOUND);
    assert!(result.approval_id().is_none());
    assert_eq!(vault.asked.load(Ordering::SeqCst), 0);
}
