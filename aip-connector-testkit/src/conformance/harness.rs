//! What every scenario runs on: a fresh provider double, the connector under test (probed),
//! a host over a store of its own (a temporary SQLite file, or a PostgreSQL schema with
//! `ConformanceSuite::with_store`) with a canary credential and approvers able to satisfy every
//! declared approval policy, and helpers that drive a capability to its settled result.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use aip_connector::host::{
    ApproverMemberships, Deployment, ExternalAccountRef, Host, HostBuildError,
    StaticApprovalAuthority, TrustedContext,
};
use aip_connector::ids::{ApprovalId, PrincipalId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision,
    ApprovalDecisionKind, ApprovalPolicy, ApprovalRule, ApproverSelector, EvidenceArtifact,
    Principal, PrincipalKind, SideEffect, StreamChunk, TransactionMode,
};
use aip_connector::rules::codes::CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY;
use aip_connector::store::{ApprovalStatus, IdempotencyStore, MemoryStore, SharedStore};
use aip_connector::webhook::WebhookReceiver;
use aip_connector::{
    CapabilityDefinition, Connector, ConnectorDefinition, CredentialHandle, Secret, VerifiedTenant,
};
use serde_json::Value;

use super::probe::ProbedConnector;
use super::store::{ConformanceStore, ScenarioStore};
use super::{Factory, ProviderSetup, WebhookFactory};
use crate::logs::LogCapture;
use crate::provider_double::{ProviderDouble, ProviderHandle};

/// The tenant the conformance host serves.
pub const TENANT: &str = "tenant-conformance-a";
/// A second tenant, for isolation checks.
pub const OTHER_TENANT: &str = "tenant-conformance-b";
/// The caller every scenario acts as.
pub const CALLER: &str = "user:conformance-caller";
/// The secret material of the canary credential: it must never appear in any output, error,
/// record or log the suite can see.
pub const CANARY_SECRET: &str = "canary-secret-3f9c1e7a-do-not-leak";
/// The system of the external account the conformance host acts as unless the suite is given
/// another ([`ConformanceSuite::with_external_account`](super::ConformanceSuite::with_external_account)).
pub const EXTERNAL_ACCOUNT_SYSTEM: &str = "conformance";
/// The id of the external account the conformance host acts as by default: keys of an
/// `external_account`-scoped capability are stored as
/// `ExternalAccount:conformance:acct-conformance:<key>`.
pub const EXTERNAL_ACCOUNT_ID: &str = "acct-conformance";

/// The external account the conformance host acts as by default: [`EXTERNAL_ACCOUNT_ID`] in
/// [`EXTERNAL_ACCOUNT_SYSTEM`].
pub fn default_external_account() -> ExternalAccountRef {
    ExternalAccountRef {
        id: EXTERNAL_ACCOUNT_ID.to_owned(),
        system: EXTERNAL_ACCOUNT_SYSTEM.to_owned(),
    }
}

/// What a connector factory gets: where the scenario's provider double listens, and the
/// external account the host acts as.
#[derive(Clone, Debug)]
pub struct Environment {
    provider_url: String,
    external_account: ExternalAccountRef,
}

impl Environment {
    /// The provider double's base URL (`http://127.0.0.1:<port>`): point the connector's
    /// `ProviderClient` at it.
    pub fn provider_url(&self) -> &str {
        &self.provider_url
    }

    /// The external account the conformance host acts as (its `Deployment.external_account`):
    /// [`default_external_account`] unless the suite was given another with
    /// [`ConformanceSuite::with_external_account`](super::ConformanceSuite::with_external_account).
    /// A connector configured per account (a merchant id sent in a header, say) is built for it.
    pub fn external_account(&self) -> &ExternalAccountRef {
        &self.external_account
    }

    /// An environment with no provider behind it, used to read the connector's definition.
    pub(super) fn detached(external_account: ExternalAccountRef) -> Self {
        Self {
            provider_url: "http://127.0.0.1:9".to_owned(),
            external_account,
        }
    }
}

/// One scenario's world. Dropping it stops the provider double.
pub struct Harness {
    factory: Arc<Factory>,
    double: ProviderDouble,
    provider: ProviderHandle,
    env: Environment,
    probe: ProbedConnector,
    store: SharedStore,
    host: Host,
    webhooks: Vec<Arc<WebhookFactory>>,
    /// The capabilities the suite waives unexercised assertions of: a scenario that tests one
    /// candidate capability prefers the others.
    waived: std::collections::BTreeSet<String>,
    /// Why the connector has no provider, when the suite was told so.
    no_provider: Option<String>,
    /// What the suite's runtime logs outside any capture ([`Harness::ambient_logs`]).
    ambient_logs: Option<LogCapture>,
    /// Last: removed after the host and the store that use it are gone.
    place: ScenarioStore,
}

/// Why a scenario's world could not be set up.
#[derive(Debug)]
pub(super) enum StartError {
    /// The scenario's store did not open: the environment's fault, not the connector's.
    Store(aip_connector::store::StoreError),
    /// The host refused the connector (an example that fails its input schema, say).
    Host(HostBuildError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(error) => write!(f, "the scenario's store did not open: {error}"),
            Self::Host(error) => write!(
                f,
                "the scenario's host refused the connector (`Host::build`): {error}"
            ),
        }
    }
}

/// Names the connector, the provider double's address and the store.
impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("connector", &self.probe)
            .field("provider_url", &self.env.provider_url())
            .field("no_provider", &self.no_provider)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// A fresh world for one scenario.
    ///
    /// # Errors
    ///
    /// When the store does not open, or the host refuses the connector (an example that fails
    /// its input schema, say): the scenario cannot run, and the error says why.
    pub(super) async fn start(
        factory: Arc<Factory>,
        external_account: ExternalAccountRef,
        provider_setup: Option<&ProviderSetup>,
        webhooks: Vec<Arc<WebhookFactory>>,
        stores: &ConformanceStore,
    ) -> Result<Self, StartError> {
        let (double, provider) = ProviderDouble::start().await;
        if let Some(setup) = provider_setup {
            setup(&provider);
        }
        let env = Environment {
            provider_url: double.base_url().to_owned(),
            external_account,
        };
        let probe = ProbedConnector::new(factory(&env));
        // A durable store, so that a restart opens it anew as a new process would.
        let place = stores.create().await.map_err(StartError::Store)?;
        let store = match place.open().await {
            Ok(store) => store,
            Err(error) => {
                place.remove().await;
                return Err(StartError::Store(error));
            }
        };
        let host = match try_build_host_for(
            Arc::new(probe.clone()),
            probe.definition(),
            Arc::clone(&store),
            aip_connector::host::HostLimits::default(),
            (TENANT, &env.external_account),
        ) {
            Ok(host) => host,
            Err(error) => {
                drop(store);
                place.remove().await;
                return Err(StartError::Host(error));
            }
        };
        Ok(Self {
            place,
            factory,
            double,
            provider,
            env,
            probe,
            store,
            host,
            webhooks,
            waived: std::collections::BTreeSet::new(),
            no_provider: None,
            ambient_logs: None,
        })
    }

    /// The harness, knowing whether the suite was told the connector has no provider
    /// ([`ConformanceSuite::without_provider`](super::ConformanceSuite::without_provider)).
    pub(super) fn with_no_provider(mut self, reason: Option<String>) -> Self {
        self.no_provider = reason;
        self
    }

    /// The harness, knowing the capture of what the suite's runtime logs outside any other
    /// capture (see `ConformanceSuite::ambient_logs`); `None` under `run_async` on a runtime
    /// of the caller's.
    pub(super) fn with_ambient_logs(mut self, ambient: Option<LogCapture>) -> Self {
        self.ambient_logs = ambient;
        self
    }

    /// What the suite's runtime logged outside any capture, when it runs on its own runtime.
    pub(crate) fn ambient_logs(&self) -> Option<&LogCapture> {
        self.ambient_logs.as_ref()
    }

    /// Why the connector has no provider, when the suite was told so.
    pub(crate) fn no_provider(&self) -> Option<&str> {
        self.no_provider.as_deref()
    }

    /// The harness, knowing which capabilities the suite waives
    /// ([`ConformanceSuite::with_unexercised_waiver`](super::ConformanceSuite::with_unexercised_waiver)).
    pub(super) fn with_waived(mut self, waived: std::collections::BTreeSet<String>) -> Self {
        self.waived = waived;
        self
    }

    /// Whether the suite waives unexercised assertions of capability `id`.
    pub(crate) fn waived(&self, id: &str) -> bool {
        self.waived.contains(id)
    }

    /// `candidates` in their order, the capabilities the suite waives moved last: a scenario that
    /// tests one candidate then tests one whose assertions a waiver cannot turn into notes, when
    /// there is one.
    pub(crate) fn waived_last<T>(&self, candidates: &mut [(&CapabilityDefinition, T)]) {
        candidates.sort_by_key(|(c, _)| self.waived(c.id().as_str()));
    }

    /// The host under test.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The store the host writes.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The provider double's handle.
    pub fn provider(&self) -> &ProviderHandle {
        &self.provider
    }

    /// The provider double.
    pub fn double(&self) -> &ProviderDouble {
        &self.double
    }

    /// The probe around the connector under test.
    pub fn probe(&self) -> &ProbedConnector {
        &self.probe
    }

    /// The connector's definition.
    pub fn definition(&self) -> &ConnectorDefinition {
        self.probe.definition()
    }

    /// A new host over the same state and provider, with a freshly built connector: what a
    /// restarted process would have. Its store is opened anew, so what it reads comes from the
    /// file or the database, not from the first host's open store.
    ///
    /// # Panics
    ///
    /// When the scenario's store, which opened when the scenario started, no longer opens.
    pub async fn restarted(&self) -> (Host, ProbedConnector) {
        let probe = ProbedConnector::new((self.factory)(&self.env));
        let host = build_host(
            &probe,
            self.place.reopen().await,
            &self.env.external_account,
        );
        (host, probe)
    }

    /// The connector's webhook receivers, built as [`ConformanceSuite::with_webhook`] says, on
    /// the scenario's store (`restarted`: opened anew, as a new process would).
    ///
    /// # Panics
    ///
    /// When `restarted` and the scenario's store no longer opens.
    ///
    /// [`ConformanceSuite::with_webhook`]: super::ConformanceSuite::with_webhook
    pub async fn webhook_receivers(&self, restarted: bool) -> Vec<WebhookReceiver> {
        let store = if restarted {
            self.place.reopen().await
        } else {
            Arc::clone(&self.store)
        };
        self.webhooks
            .iter()
            .map(|factory| factory(&self.env, Arc::clone(&store) as Arc<dyn IdempotencyStore>))
            .collect()
    }

    /// The external account the host acts as (its deployment's).
    pub fn external_account(&self) -> &ExternalAccountRef {
        &self.env.external_account
    }

    /// The caller every scenario acts as, in [`TENANT`].
    pub fn caller(&self) -> TrustedContext {
        caller_in(TENANT)
    }

    /// The same caller, as verified for another tenant.
    pub fn caller_in(&self, tenant: &str) -> TrustedContext {
        caller_in(tenant)
    }

    /// Capabilities with their first declared example, in declaration order. A compensating
    /// capability is left out: it runs only routed from a `compensate` of the capability it
    /// undoes, and the host refuses an action naming it (`transaction.context_missing`).
    pub fn examples(&self) -> Vec<(&CapabilityDefinition, Value)> {
        self.invocable()
            .filter_map(|c| c.examples.first().map(|e| (c, e.clone())))
            .collect()
    }

    /// The capabilities an action may name, in declaration order: all but the compensating
    /// ones, which run only routed from a `compensate` of the capability they undo.
    fn invocable(&self) -> impl Iterator<Item = &CapabilityDefinition> {
        self.definition()
            .capabilities
            .iter()
            .filter(|c| !c.facts.compensation_handler)
    }

    /// Every declared example of every capability [`examples`](Self::examples) lists, in
    /// declaration order, each with its position among its capability's examples (0 for the
    /// first). The scenarios that check what an output looks like run them all: a second
    /// example may take a path of the handler the first does not.
    pub fn every_example(&self) -> Vec<(&CapabilityDefinition, usize, Value)> {
        self.invocable()
            .flat_map(|c| {
                c.examples
                    .iter()
                    .enumerate()
                    .map(move |(n, e)| (c, n, e.clone()))
            })
            .collect()
    }

    /// Capabilities with an example whose contract satisfies `filter`.
    pub fn examples_where(
        &self,
        filter: impl Fn(&CapabilityDefinition) -> bool,
    ) -> Vec<(&CapabilityDefinition, Value)> {
        self.examples()
            .into_iter()
            .filter(|(c, _)| filter(c))
            .collect()
    }

    /// An action for `capability` on `input` under idempotency key `key`, in the transaction
    /// mode a single call can settle (`execute` when declared, else `plan`; none without a
    /// transaction contract).
    pub fn action(&self, capability: &CapabilityDefinition, input: Value, key: &str) -> Action {
        let mut action = Action::new(capability.id().as_str(), input).with_idempotency_key(key);
        if let Some(transaction) = capability
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.transaction.as_ref())
        {
            let mode = if transaction
                .supported_modes
                .contains(&TransactionMode::Execute)
            {
                TransactionMode::Execute
            } else {
                TransactionMode::Plan
            };
            action = action.with_transaction(ActionTransaction::new(mode));
        }
        action
    }

    /// Whether `capability` can only stream (no synchronous result).
    pub fn streams_only(capability: &CapabilityDefinition) -> bool {
        capability
            .capability
            .contract
            .as_ref()
            .is_some_and(|c| c.execution.supports_streaming && !c.execution.supports_sync)
    }

    /// Sends `action` to `host` once, as a client of its capability would: streamed when the
    /// capability only streams (the result rebuilt from the terminal chunk, with the chunks),
    /// else with `invoke`. Nothing is approved, resumed or committed. A keyed streaming
    /// capability sent with `invoke` is refused at the mode check (`execution.mode_unsupported`)
    /// before its key is looked at: a warehouse trial's streamed query failed
    /// `collision_rejected` that way.
    pub(crate) async fn invoke_once(
        &self,
        host: &Host,
        action: Action,
    ) -> (ActionResult, Vec<StreamChunk>) {
        let streams = self
            .definition()
            .capability(action.capability_id.as_str())
            .is_some_and(Self::streams_only);
        if streams {
            let chunks = host
                .invoke_stream(action.clone(), self.caller())
                .collect()
                .await;
            (result_of_stream(&action, &chunks), chunks)
        } else {
            (host.invoke(action, &self.caller()).await, Vec::new())
        }
    }

    /// Runs `action` to its settled result on `host`: streams it when the capability only
    /// streams (the result is rebuilt from the terminal chunk), approves and resumes it when it
    /// waits for approval, and commits the plan when it was a `plan` whose capability cannot
    /// `execute`. Returns the final result, the chunks streamed, and the approval id if any.
    ///
    /// The commit of a plan has the action id `<plan's action id>_commit`, so settling the same
    /// plan action twice sends the same commit twice (its replay, as a client resending a lost
    /// commit gets). A plan action id within 7 bytes of the host's `max_id_bytes` gives a
    /// commit id over it (`action.id_too_long`).
    pub async fn settle(&self, host: &Host, action: Action) -> Settled {
        let mut settled = Settled {
            result: ActionResult::new(action.id.clone(), ActionResultStatus::Failed),
            chunks: Vec::new(),
            approval_id: None,
            plan_id: None,
        };
        let (mut result, chunks) = self.invoke_once(host, action.clone()).await;
        settled.chunks = chunks;
        if result.status == ActionResultStatus::PendingApproval
            && let Some(id) = approval_id_of(&result)
        {
            settled.approval_id = Some(id.clone());
            self.approve(host, &id).await;
            // Re-submits the action when the record could not keep its (redacted) input.
            let (resumed, chunks) = self.resume_streamed(host, &id, &action).await;
            settled.chunks.extend(chunks);
            result = resumed;
        }
        if let Some(commit_action) = self.commit_for(&action, &result) {
            settled.plan_id = commit_action
                .transaction
                .as_ref()
                .and_then(|t| t.plan_id.clone());
            let committed = Box::pin(self.settle(host, commit_action)).await;
            settled.approval_id = settled.approval_id.or(committed.approval_id);
            settled.chunks.extend(committed.chunks);
            result = committed.result;
        }
        settled.result = result;
        settled
    }

    /// Approves `id` with as many distinct approvers as the policy needs (each holds every
    /// membership the declared policies name, in [`TENANT`], with every kind of evidence).
    pub async fn approve(&self, host: &Host, id: &ApprovalId) {
        for approver in approvers(self.definition()) {
            let Ok(Some(record)) = host.approval(id).await else {
                return;
            };
            if record.status != ApprovalStatus::Pending {
                return;
            }
            let decision = approval_decision(id, &approver);
            let _ = host
                .record_approval_decision(decision, &caller_as(&approver, TENANT))
                .await;
        }
    }
}

/// A driven call: its settled result, and what happened on the way.
#[derive(Clone, Debug)]
pub struct Settled {
    /// The final result (after approval, resume and commit).
    pub result: ActionResult,
    /// Chunks streamed, for a streaming capability.
    pub chunks: Vec<StreamChunk>,
    /// The approval the call waited for, if any.
    pub approval_id: Option<ApprovalId>,
    /// The plan committed, if the call went through plan and commit.
    pub plan_id: Option<String>,
}

fn caller_in(tenant: &str) -> TrustedContext {
    caller_as(&PrincipalId::from(CALLER), tenant)
}

fn caller_as(principal: &PrincipalId, tenant: &str) -> TrustedContext {
    TrustedContext::new(
        Principal::new(principal.as_str(), PrincipalKind::Human),
        "aip-connector-testkit",
    )
    .with_tenant(VerifiedTenant::new(tenant.to_owned()))
}

/// A host over `store` for the probed connector, serving [`TENANT`] as `account`, with the
/// canary credential and approvers for every declared policy.
fn build_host(probe: &ProbedConnector, store: SharedStore, account: &ExternalAccountRef) -> Host {
    build_host_for(
        Arc::new(probe.clone()),
        probe.definition(),
        store,
        aip_connector::host::HostLimits::default(),
        (TENANT, account),
    )
}

fn policies(definition: &ConnectorDefinition) -> impl Iterator<Item = &ApprovalPolicy> {
    definition
        .capabilities
        .iter()
        .filter_map(|c| c.capability.contract.as_ref()?.approval.as_ref())
}

/// The approvers: the principals the policies name, then enough generic ones for any quorum.
fn approvers(definition: &ConnectorDefinition) -> Vec<PrincipalId> {
    let mut named = BTreeSet::new();
    let mut needed = 1_usize;
    for policy in policies(definition) {
        if let ApproverSelector::Principal { id } = &policy.approver_selector {
            named.insert(id.clone());
        }
        if let Some(rule) = &policy.rule {
            leaves(rule, &mut |leaf| {
                if let ApprovalRule::Principal { id } = leaf {
                    named.insert(id.clone());
                }
            });
            needed = needed.max(rule_size(rule));
        }
        needed = needed.max(policy.minimum_distinct_principals as usize);
    }
    let mut all: Vec<PrincipalId> = named.into_iter().collect();
    all.extend(
        (1..=needed + 1).map(|n| PrincipalId::from(format!("user:conformance-approver-{n}"))),
    );
    all
}

/// Memberships covering every leaf the declared policies name.
fn memberships(definition: &ConnectorDefinition) -> ApproverMemberships {
    let mut m = ApproverMemberships::new().with_tenant(TENANT);
    for policy in policies(definition) {
        match &policy.approver_selector {
            ApproverSelector::Role { name } => {
                m.roles.insert(name.clone());
            }
            ApproverSelector::Group { name } => {
                m.groups.insert(name.clone());
            }
            ApproverSelector::ExternalSystem { system } => {
                m.external_systems.insert(system.clone());
            }
            ApproverSelector::Principal { .. } | ApproverSelector::TenantPolicy => {}
        }
        if let Some(rule) = &policy.rule {
            leaves(rule, &mut |leaf| match leaf {
                ApprovalRule::Role { name } => {
                    m.roles.insert(name.clone());
                }
                ApprovalRule::Group { name } => {
                    m.groups.insert(name.clone());
                }
                ApprovalRule::TenantPolicy { policy_id } => {
                    m.tenant_policies.insert(policy_id.clone());
                }
                ApprovalRule::ExternalSystem { system } => {
                    m.external_systems.insert(system.clone());
                }
                ApprovalRule::DelegatedAuthority { scope, .. } => {
                    m.delegated
                        .push(aip_connector::host::DelegatedScope::new(scope.clone()));
                }
                _ => {}
            });
        }
    }
    m
}

fn leaves(rule: &ApprovalRule, visit: &mut impl FnMut(&ApprovalRule)) {
    match rule {
        ApprovalRule::All { rules, .. }
        | ApprovalRule::Any { rules }
        | ApprovalRule::Quorum { rules, .. } => {
            for child in rules {
                leaves(child, visit);
            }
        }
        leaf => visit(leaf),
    }
}

/// How many distinct decisions a rule can need at most.
fn rule_size(rule: &ApprovalRule) -> usize {
    match rule {
        ApprovalRule::All { rules, .. } => rules.iter().map(rule_size).sum(),
        ApprovalRule::Any { rules } => rules.iter().map(rule_size).max().unwrap_or(1),
        ApprovalRule::Quorum { rules, .. } => rules.iter().map(rule_size).sum(),
        _ => 1,
    }
}

/// An `approved` decision by `approver`, with a reason and one artifact of every evidence kind.
fn approval_decision(id: &ApprovalId, approver: &PrincipalId) -> ApprovalDecision {
    let evidence = [
        "input_snapshot",
        "policy_decision",
        "external_ticket",
        "attachment",
    ]
    .into_iter()
    .map(|kind| EvidenceArtifact {
        id: format!("evidence-{kind}-{approver}"),
        kind: kind.to_owned(),
        uri: None,
        hash: None,
        redacted: false,
    })
    .collect();
    ApprovalDecision {
        approval_id: id.clone(),
        decision: ApprovalDecisionKind::Approved,
        approver: Principal::new(approver.as_str(), PrincipalKind::Human),
        decided_at: time::OffsetDateTime::from_unix_timestamp(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        )
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
        reason: Some("approved by the conformance suite".to_owned()),
        constraints: Vec::new(),
        evidence,
        decision_id: None,
        policy_hash: None,
        authority_path: Vec::new(),
        target_decision_id: None,
    }
}

/// The approval id a `pending_approval` result names ([`ActionResult::approval_id`]).
pub fn approval_id_of(result: &ActionResult) -> Option<ApprovalId> {
    result.approval_id()
}

/// The result a stream settled with: the terminal chunk carries the whole `ActionResult`.
fn result_of_stream(action: &Action, chunks: &[StreamChunk]) -> ActionResult {
    chunks
        .last()
        .and_then(|last| last.data.clone())
        .and_then(|data| serde_json::from_value(data).ok())
        // No terminal chunk: a failed result without an error, which every check rejects.
        .unwrap_or_else(|| ActionResult::new(action.id.clone(), ActionResultStatus::Failed))
}

// ---- Helpers of the idempotency, retry, errors and audit scenarios ---------------------------

/// What one clean call of a capability did at the provider (see [`Harness::scout`]).
pub(crate) struct Scouted {
    /// The provider requests it made, in order.
    pub(crate) requests: Vec<crate::provider_double::RecordedRequest>,
    /// The provider effects it committed, in order.
    pub(crate) effects: Vec<crate::provider_double::Effect>,
    /// How the call settled: a call that made no provider request because it failed first
    /// exercised nothing at the provider, unlike one that completed without needing any.
    pub(crate) result: ActionResult,
}

impl Scouted {
    /// Where a fault must be injected to hit the call's first change at the provider: the path
    /// of its first mutating request, else of its first request (a read); `None` when the call
    /// never reached the provider.
    pub(crate) fn route(&self) -> Option<&str> {
        self.requests
            .iter()
            .find(|r| is_mutating(&r.method))
            .or_else(|| self.requests.first())
            .map(|r| r.path.as_str())
    }
}

/// Whether a capability declares that it may change provider state: a side effect other than
/// `read`, unless it is a lookup over the network (`read` and `external_network` only) whose
/// author waived `contract.lint.mutating_without_idempotency` (docs/attribute-reference.md: the
/// waiver's reason states the lookup changes nothing). Without a contract nothing is declared,
/// so it counts as mutating.
pub(crate) fn declares_mutation(capability: &CapabilityDefinition) -> bool {
    let Some(contract) = capability.capability.contract.as_ref() else {
        return true;
    };
    if contract.side_effects.iter().all(|e| *e == SideEffect::Read) {
        return false;
    }
    let network_lookup = contract
        .side_effects
        .iter()
        .all(|e| matches!(e, SideEffect::Read | SideEffect::ExternalNetwork));
    let waived = capability
        .waivers
        .iter()
        .any(|w| w.covers(capability.id(), CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY));
    !(network_lookup && waived)
}

/// Whether an HTTP method may change provider state (the provider client's default reading).
pub(crate) fn is_mutating(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

impl Harness {
    /// A host over a new, empty store, with the same probed connector and provider double:
    /// what a host whose idempotency settlement was lost sees when the same action is delivered
    /// again (a failed settlement is logged and "a later duplicate may execute again", host
    /// docs §2). Only the key the connector forwards to the provider then stands between the
    /// redelivery and a second effect.
    pub(crate) fn host_without_records(&self) -> Host {
        build_host(
            &self.probe,
            Arc::new(MemoryStore::new()),
            &self.env.external_account,
        )
    }

    /// The external account a deployment serving [`OTHER_TENANT`] acts as: the harness's
    /// [account](Self::external_account) with `-other` appended to its id, in the same system.
    pub(crate) fn other_tenant_account(&self) -> ExternalAccountRef {
        let account = self.external_account();
        ExternalAccountRef {
            id: format!("{}-other", account.id),
            system: account.system.clone(),
        }
    }

    /// A host over the same store, probed connector and provider double, deployed for `tenant`
    /// as `account` (its canary credential bound to `tenant`): another tenant's deployment
    /// sharing this one's store.
    pub(crate) fn host_deployed_for(&self, tenant: &str, account: &ExternalAccountRef) -> Host {
        build_host_for(
            Arc::new(self.probe.clone()),
            self.definition(),
            Arc::clone(&self.store),
            aip_connector::host::HostLimits::default(),
            (tenant, account),
        )
    }

    /// The scoped key (`<Scope>:<partition>:<raw key>`, host docs §4.1) under which this
    /// harness's hosts keep the idempotency record of `action` called by [`CALLER`] in
    /// [`TENANT`], acting as the harness's [external account](Self::external_account)
    /// (`ExternalAccount:<system>:<id>:<raw key>`), as the host builds it
    /// ([`scoped_idempotency_key`](aip_connector::host::scoped_idempotency_key)). `None` without
    /// a non-blank key.
    pub(crate) fn scoped_key(&self, action: &Action) -> Option<String> {
        use aip_connector::model::IdempotencyKeyScope;
        let raw = action
            .idempotency_key
            .as_deref()
            .filter(|k| !k.trim().is_empty())?;
        let scope = self
            .definition()
            .capability(action.capability_id.as_str())
            .and_then(|c| c.capability.contract.as_ref())
            .map_or(IdempotencyKeyScope::Action, |c| c.idempotency.key_scope);
        aip_connector::host::scoped_idempotency_key(
            scope,
            raw,
            action,
            CALLER,
            Some(TENANT),
            Some(self.external_account()),
        )
        .ok()
    }

    /// The live idempotency record this harness's store holds for `action`, if any.
    pub(crate) async fn idempotency_record(
        &self,
        action: &Action,
    ) -> Option<aip_connector::store::IdempotencyRecord> {
        let key = self.scoped_key(action)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.store.record(&key, now).await.ok().flatten()
    }

    /// Settles `action` on this harness's host and returns what it did at the provider.
    pub(crate) async fn scout(&self, action: Action) -> Scouted {
        let requests_before = self.provider.request_count();
        let effects_before = self.provider.effect_total();
        let settled = self.settle(&self.host, action).await;
        Scouted {
            result: settled.result,
            requests: self
                .provider
                .requests()
                .into_iter()
                .skip(requests_before)
                .collect(),
            effects: self
                .provider
                .effects()
                .into_iter()
                .skip(effects_before)
                .collect(),
        }
    }
}

// ---- Helpers of the cancellation, streaming, approval, transaction and restart scenarios -----
//
// The helpers that await the host return boxed futures: in debug builds every poll frame holds
// room for the futures it creates, and the pipeline's futures are large, so a scenario built
// from unboxed awaits needs megabytes of stack.

/// A boxed future of a harness helper.
pub(crate) type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A call driven to its end by [`Harness::drive`], keeping the action whose result is final.
pub(crate) struct Driven {
    /// The action that produced [`result`](Self::result): the commit of a planned call, else
    /// the action driven. Re-sending it exactly is a duplicate of the settled call.
    pub(crate) action: Action,
    /// The final result (after approval, resume and commit).
    pub(crate) result: ActionResult,
    /// Chunks streamed on the way, for a streaming capability.
    pub(crate) chunks: Vec<StreamChunk>,
    /// The approval the final action waited for, if any.
    pub(crate) approval_id: Option<ApprovalId>,
    /// The plan committed, if the call went through plan and commit.
    pub(crate) plan_id: Option<String>,
}

impl Harness {
    /// A fresh connector from the factory, pointed at this scenario's provider double: what a
    /// restarted process builds.
    pub(crate) fn fresh_connector(&self) -> Arc<dyn Connector> {
        (self.factory)(&self.env)
    }

    /// A host configured like [`host`](Self::host) — same store, tenant, canary credential and
    /// approvers — around `connector` (a wrapper of the probe, or a restarted connector), with
    /// `limits` (e.g. a small stream buffer).
    pub(crate) fn host_for(
        &self,
        connector: Arc<dyn Connector>,
        limits: aip_connector::host::HostLimits,
    ) -> Host {
        self.host_over(connector, Arc::clone(&self.store), limits)
    }

    /// [`host_for`](Self::host_for) over the store opened anew, as a restarted process opens
    /// it: what it reads comes from the file or the database, not from the first host's open
    /// store.
    pub(crate) async fn host_reopened(
        &self,
        connector: Arc<dyn Connector>,
        limits: aip_connector::host::HostLimits,
    ) -> Host {
        let store = self.place.reopen().await;
        self.host_over(connector, store, limits)
    }

    /// Ends the scenario: drops its hosts and stores, then removes the state they kept (the
    /// SQLite file, or the PostgreSQL schema, which cannot be dropped while a connection of
    /// the scenario's pools still uses it).
    pub(super) async fn finish(self) {
        self.into_place().remove().await;
    }

    /// The scenario's store place; everything else of the harness (hosts, stores, the provider
    /// double) is dropped when this returns.
    fn into_place(self) -> ScenarioStore {
        self.place
    }

    fn host_over(
        &self,
        connector: Arc<dyn Connector>,
        store: SharedStore,
        limits: aip_connector::host::HostLimits,
    ) -> Host {
        build_host_for(
            connector,
            self.definition(),
            store,
            limits,
            (TENANT, &self.env.external_account),
        )
    }

    /// The approvers the conformance authority vouches for, in the order
    /// [`approve`](Self::approve) uses them.
    pub(crate) fn approvers(&self) -> Vec<PrincipalId> {
        approvers(self.definition())
    }

    /// [`approve`](Self::approve), boxed.
    pub(crate) fn approve_all<'a>(&'a self, host: &'a Host, id: &'a ApprovalId) -> Boxed<'a, ()> {
        Box::pin(self.approve(host, id))
    }

    /// Records one `approved` decision on `id` by `approver` (authenticated as itself, in
    /// [`TENANT`], with a reason and one artifact of every evidence kind), whoever it is: the
    /// authority decides whether it counts.
    pub(crate) fn approve_as<'a>(
        &'a self,
        host: &'a Host,
        id: &'a ApprovalId,
        approver: &'a PrincipalId,
    ) -> Boxed<'a, Result<aip_connector::store::ApprovalRecord, aip_connector::model::ProtocolError>>
    {
        Box::pin(async move {
            host.record_approval_decision(
                approval_decision(id, approver),
                &caller_as(approver, TENANT),
            )
            .await
        })
    }

    /// Resumes the approved request `id` of `gated` as [`CALLER`], the way a client must: with
    /// `resume_approved` when the record kept the input (`resume_approved_stream` for an
    /// action sent for streaming, whose chunks are read to the result), else by re-submitting
    /// `gated` with an approved decision attached (a redacted record cannot be resumed from the
    /// store, host docs §5.5). Before any decision exists, the attached one is a well-formed
    /// decision that was never recorded, so the host answers from the record's status.
    pub(crate) fn resume<'a>(
        &'a self,
        host: &'a Host,
        id: &'a ApprovalId,
        gated: &'a Action,
    ) -> Boxed<'a, ActionResult> {
        Box::pin(async move { self.resume_streamed(host, id, gated).await.0 })
    }

    /// [`resume`](Self::resume), answering the chunks of a streamed resume too.
    fn resume_streamed<'a>(
        &'a self,
        host: &'a Host,
        id: &'a ApprovalId,
        gated: &'a Action,
    ) -> Boxed<'a, (ActionResult, Vec<StreamChunk>)> {
        Box::pin(async move {
            let record = host.approval(id).await.ok().flatten();
            if record.as_ref().is_none_or(|r| r.input_retained) {
                let streamed = record.as_ref().map_or(gated, |r| &r.action).mode
                    == Some(aip_connector::model::ActionMode::Streaming);
                if streamed {
                    let chunks = host
                        .resume_approved_stream(id, self.caller())
                        .collect()
                        .await;
                    return (result_of_stream(gated, &chunks), chunks);
                }
                let caller = self.caller();
                return (
                    Box::pin(host.resume_approved(id, &caller)).await,
                    Vec::new(),
                );
            }
            let resubmitted = self.resubmission(record.as_ref(), id, gated);
            self.run_once(host, resubmitted).await
        })
    }

    /// `gated` with the decision that approved `id` attached (a well-formed decision of the
    /// first approver when `record` holds none): the re-submission of host docs §5.5.
    fn resubmission(
        &self,
        record: Option<&aip_connector::store::ApprovalRecord>,
        id: &ApprovalId,
        gated: &Action,
    ) -> Action {
        let decision = record
            .and_then(|r| r.approving_decision().cloned())
            .or_else(|| {
                approvers(self.definition())
                    .first()
                    .map(|approver| approval_decision(id, approver))
            });
        let mut resubmitted = gated.clone();
        resubmitted.approval = decision.map(Box::new);
        resubmitted
    }

    /// Sends `action` once, expecting it to wait for approval; approves it as every approver
    /// and answers its re-submission with the approving decision attached (host docs §5.5),
    /// which runs the handler as the original action would have, on whichever path it is sent:
    /// the path a remote client takes, where [`resume`](Self::resume) takes the host's own.
    /// Answers why not, in words, when the action settled without waiting for approval (it ran
    /// then) or the approvals did not make the request `approved`.
    pub(crate) fn approved<'a>(
        &'a self,
        host: &'a Host,
        action: Action,
    ) -> Boxed<'a, Result<Action, String>> {
        Box::pin(async move {
            let (first, _) = self.run_once(host, action.clone()).await;
            let Some(approval) = approval_id_of(&first)
                .filter(|_| first.status == ActionResultStatus::PendingApproval)
            else {
                return Err(format!(
                    "its first call settled `{}` ({}) instead of waiting for approval",
                    first.status,
                    first.error.as_ref().map_or("no error", |e| e.code.as_str())
                ));
            };
            self.approve(host, &approval).await;
            let record = host.approval(&approval).await.ok().flatten();
            match record.as_ref().map(|r| r.status) {
                Some(ApprovalStatus::Approved) => {
                    Ok(self.resubmission(record.as_ref(), &approval, &action))
                }
                status => Err(format!(
                    "its approval request `{approval}` was {} after the suite's approvers decided ({})",
                    super::scenarios::maybe(status),
                    approvers(self.definition())
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        })
    }

    /// Runs `action` once on `host` as [`CALLER`]: streamed (the result rebuilt from the terminal
    /// chunk) when its capability only streams, else invoked.
    pub(crate) fn run_once<'a>(
        &'a self,
        host: &'a Host,
        action: Action,
    ) -> Boxed<'a, (ActionResult, Vec<StreamChunk>)> {
        self.run_once_as(host, action, self.caller())
    }

    /// [`run_once`](Self::run_once) as `caller`.
    pub(crate) fn run_once_as<'a>(
        &'a self,
        host: &'a Host,
        action: Action,
        caller: TrustedContext,
    ) -> Boxed<'a, (ActionResult, Vec<StreamChunk>)> {
        Box::pin(async move {
            // A capability that only streams, or an action sent for streaming (a re-submission of
            // one gated on a stream): its handler takes the stream.
            let streams = action.mode == Some(aip_connector::model::ActionMode::Streaming)
                || self
                    .definition()
                    .capability(action.capability_id.as_str())
                    .is_some_and(Self::streams_only);
            if streams {
                let chunks = host.invoke_stream(action.clone(), caller).collect().await;
                (result_of_stream(&action, &chunks), chunks)
            } else {
                (Box::pin(host.invoke(action, &caller)).await, Vec::new())
            }
        })
    }

    /// The commit of a completed `plan` action: same capability and input, the plan's id, and
    /// the key `<key>:commit`. `None` when `planned` was not a plan or `plan_result` names none.
    pub(crate) fn commit_for(
        &self,
        planned: &Action,
        plan_result: &ActionResult,
    ) -> Option<Action> {
        let is_plan = planned
            .transaction
            .as_ref()
            .is_some_and(|t| t.mode == TransactionMode::Plan);
        let plan_id = plan_result
            .output
            .as_ref()
            .and_then(|o| o.pointer("/plan/plan_id"))
            .and_then(Value::as_str)
            .filter(|_| is_plan && plan_result.status == ActionResultStatus::Completed)?;
        let mut commit = ActionTransaction::new(TransactionMode::Commit);
        commit.plan_id = Some(plan_id.to_owned());
        let mut action = Action::new(planned.capability_id.as_str(), planned.input.clone())
            .with_transaction(commit);
        action.id = commit_action_id(&planned.id);
        action.idempotency_key = planned
            .idempotency_key
            .as_ref()
            .map(|k| format!("{k}:commit"));
        Some(action)
    }

    /// [`settle`](Self::settle), keeping the final action: runs `action`, approves and resumes
    /// it when it waits for approval, and commits it when it was a `plan`.
    pub(crate) fn drive<'a>(&'a self, host: &'a Host, action: Action) -> Boxed<'a, Driven> {
        Box::pin(async move {
            let (mut result, chunks) = self.run_once(host, action.clone()).await;
            let mut driven = Driven {
                action,
                result: ActionResult::new(
                    aip_connector::ids::ActionId::new(),
                    ActionResultStatus::Failed,
                ),
                chunks,
                approval_id: None,
                plan_id: None,
            };
            if result.status == ActionResultStatus::PendingApproval
                && let Some(id) = approval_id_of(&result)
            {
                self.approve_all(host, &id).await;
                result = self.resume(host, &id, &driven.action).await;
                driven.approval_id = Some(id);
            }
            if let Some(commit) = self.commit_for(&driven.action, &result) {
                let committed = self.drive(host, commit).await;
                driven.plan_id = committed
                    .action
                    .transaction
                    .as_ref()
                    .and_then(|t| t.plan_id.clone());
                driven.chunks.extend(committed.chunks);
                driven.approval_id = committed.approval_id.or(driven.approval_id);
                driven.action = committed.action;
                result = committed.result;
            }
            driven.result = result;
            driven
        })
    }

    /// The action that runs `action`'s handler: `action` itself, or — when it is a `plan` — its
    /// commit, after the plan was made on `host` (so a fault injected next hits the handler, not
    /// the plan's validation). The plan's own result when it made no plan.
    pub(crate) fn handler_call<'a>(
        &'a self,
        host: &'a Host,
        action: Action,
    ) -> Boxed<'a, Result<Action, ActionResult>> {
        Box::pin(async move {
            let plans = action
                .transaction
                .as_ref()
                .is_some_and(|t| t.mode == TransactionMode::Plan);
            if !plans {
                return Ok(action);
            }
            let (planned, _) = self.run_once(host, action.clone()).await;
            self.commit_for(&action, &planned).ok_or(planned)
        })
    }

    /// [`scout`](Self::scout), boxed.
    pub(crate) fn scout_boxed(&self, action: Action) -> Boxed<'_, Scouted> {
        Box::pin(self.scout(action))
    }
}

/// The id of the commit the suite sends for the plan `planned` made: derived from the plan's
/// action, so driving the same planned call again sends the same commit, as a client resending
/// a lost commit does. (Under `idempotency(scope = action)` a fresh id would be a fresh key, and
/// the resend a second claim of a committed plan.)
fn commit_action_id(planned: &aip_connector::ids::ActionId) -> aip_connector::ids::ActionId {
    aip_connector::ids::ActionId::trusted(format!("{planned}_commit"))
}

/// [`build_host`] for any connector and limits, deployed for `tenant` as `account`. Only
/// after [`Harness::start`] built a host for the same connector, so a refusal is a bug.
fn build_host_for(
    connector: Arc<dyn Connector>,
    definition: &ConnectorDefinition,
    store: SharedStore,
    limits: aip_connector::host::HostLimits,
    deployed: (&str, &ExternalAccountRef),
) -> Host {
    try_build_host_for(connector, definition, store, limits, deployed)
        .unwrap_or_else(|error| panic!("the conformance host cannot be built: {error}"))
}

/// [`build_host_for`], answering the host's refusal.
fn try_build_host_for(
    connector: Arc<dyn Connector>,
    definition: &ConnectorDefinition,
    store: SharedStore,
    limits: aip_connector::host::HostLimits,
    (tenant, account): (&str, &ExternalAccountRef),
) -> Result<Host, HostBuildError> {
    // Each capability is served a credential of an issuer it accepts, as a deployment holding
    // one per identity provider serves it.
    let credentials = crate::test_host::IssuedPerCapability {
        credential: CredentialHandle::new(
            "cred-conformance",
            crate::TEST_ISSUER,
            Secret::new(CANARY_SECRET),
        )
        .with_scopes(["*"])
        .with_tenant(tenant),
        issuer: None,
    };
    let mut authority = StaticApprovalAuthority::new();
    for approver in approvers(definition) {
        authority = authority.with(approver, memberships(definition));
    }
    Host::builder()
        .shared_connector(connector)
        .store(store)
        .deployment(
            Deployment::new()
                .with_tenant(VerifiedTenant::new(tenant.to_owned()))
                .with_external_account(account.clone())
                .with_credentials(credentials),
        )
        .approval_authority(authority)
        .limits(limits)
        .build()
}

#[cfg(test)]
mod tests {
    use aip_connector::ids::CapabilityId;
    use aip_connector::rules::{ImplementationFacts, Waiver};

    use super::*;
    use crate::fixtures;

    fn definition(side_effects: &[SideEffect], waived: bool) -> CapabilityDefinition {
        let mut capability = fixtures::capability("cap:test:lookup", "lookup");
        capability.contract = Some(fixtures::capability_contract(side_effects));
        let waivers = if waived {
            vec![Waiver {
                capability_id: CapabilityId::from("cap:test:lookup"),
                code: CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY.to_owned(),
                reason: "the lookup changes nothing".to_owned(),
            }]
        } else {
            Vec::new()
        };
        CapabilityDefinition {
            capability,
            facts: ImplementationFacts {
                support: Default::default(),
                validation_handler: false,
                compensation_handler: false,
                stream_required: false,
            },
            examples: Vec::new(),
            tags: Vec::new(),
            waivers,
        }
    }

    #[test]
    fn a_read_declares_no_mutation() {
        assert!(!declares_mutation(&definition(&[SideEffect::Read], false)));
    }

    #[test]
    fn a_network_lookup_with_the_mutating_lint_waived_declares_no_mutation() {
        let lookup = [SideEffect::Read, SideEffect::ExternalNetwork];
        assert!(!declares_mutation(&definition(&lookup, true)));
        assert!(!declares_mutation(&definition(
            &[SideEffect::ExternalNetwork],
            true
        )));
        // Without the waiver the author stated nothing: the network call may change state.
        assert!(declares_mutation(&definition(&lookup, false)));
    }

    #[test]
    fn a_waiver_does_not_make_a_write_a_lookup() {
        let write = [
            SideEffect::Read,
            SideEffect::Write,
            SideEffect::ExternalNetwork,
        ];
        assert!(declares_mutation(&definition(&write, true)));
        assert!(declares_mutation(&definition(
            &[SideEffect::SendMessage],
            true
        )));
    }

    #[test]
    fn a_waiver_of_another_rule_or_capability_does_not_count() {
        let lookup = [SideEffect::Read, SideEffect::ExternalNetwork];
        let mut other_rule = definition(&lookup, true);
        other_rule.waivers[0].code = "contract.lint.some_other_rule".to_owned();
        assert!(declares_mutation(&other_rule));
        let mut other_capability = definition(&lookup, true);
        other_capability.waivers[0].capability_id = CapabilityId::from("cap:test:other");
        assert!(declares_mutation(&other_capability));
    }

    #[test]
    fn no_contract_counts_as_mutating() {
        let mut bare = definition(&[SideEffect::Read], false);
        bare.capability.contract = None;
        assert!(declares_mutation(&bare));
    }
}
