//! A host for a connector's own tests, with the callers, approvers and credential a test
//! needs: [`TestHost`] is the host under test, and the handle that names callers, records
//! approvals and reads the store.
//!
//! ```
//! use aip_connector::model::{Action, ActionResultStatus};
//! use aip_connector::prelude::*;
//! use aip_connector_testkit::TestHost;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Greet {
//!     name: String,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Greeting {
//!     text: String,
//! }
//!
//! struct Hello;
//!
//! #[connector(id = "hello")]
//! impl Hello {
//!     /// Greets someone by name.
//!     #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
//!     async fn greet(&self, input: Greet) -> Result<Greeting, ConnectorFailure> {
//!         Ok(Greeting { text: format!("Hello, {}!", input.name) })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let test = TestHost::builder(Hello).build().expect("the connector is admitted");
//! let action = Action::new("cap:hello:greet", serde_json::json!({ "name": "Ada" }));
//! let result = test.invoke("user:ada", action).await;
//! assert_eq!(result.status, ActionResultStatus::Completed);
//! # }
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aip_connector::Connector;
use aip_connector::host::{
    ApprovalRecord, ApproverMemberships, CancelOutcome, ChunkStream, CredentialHandle,
    CredentialProvider, Deployment, ExternalAccountRef, Host, HostBuildError, HostLimits, Secret,
    StaticApprovalAuthority, TrustedContext, VerifiedTenant,
};
use aip_connector::ids::{ActionId, ApprovalId};
use aip_connector::invocation::BoxFuture;
use aip_connector::model::{
    Action, ActionMode, ActionResult, ActionResultStatus, ApprovalDecision, ApprovalDecisionKind,
    Capability, ConnectorFailure, EvidenceArtifact, EvidenceRequirement, Principal, PrincipalKind,
    ProtocolError,
};
use aip_connector::store::{MemoryStore, SharedStore};

/// The tenant a [`TestHost`]'s callers belong to unless [`TestHostBuilder::tenant`] names
/// another.
pub const TEST_TENANT: &str = "tenant-test";

/// The issuer of the [`TestHost`]'s callers, and of its credential unless
/// [`TestHostBuilder::credential_issuer`] or the called capability's accepted issuers name
/// another.
pub const TEST_ISSUER: &str = "aip-connector-testkit";

/// The secret of the credential [`TestHostBuilder::credential`] hands out. It is a canary:
/// a test can assert that it appears in no output, error or log line.
pub const TEST_CREDENTIAL_SECRET: &str = "testkit-canary-secret-7d2c";

/// The reason every decision [`TestHost::approve`], [`TestHost::deny`] and
/// [`TestHost::revoke`] record carries (approval policies often require `reason` evidence).
pub const TEST_DECISION_REASON: &str = "decided in a test";

/// A [`Host`] for a connector's tests, over a fresh [`MemoryStore`] unless
/// [`TestHostBuilder::store`] gives another, and the handle that drives it: callers of the test
/// tenant by principal id, approvals recorded by the approvers the builder named, and the store
/// to look into.
#[derive(Clone)]
pub struct TestHost {
    host: Host,
    store: SharedStore,
    tenant: VerifiedTenant,
    /// Numbers the decisions this host records (shared by its clones), so every decision gets
    /// its own `decision_id`.
    decisions: Arc<AtomicU64>,
    /// The actions [`invoke`](Self::invoke) saw gated, by approval id: [`resume`](Self::resume)
    /// re-submits one whose record could not keep its input (a redacted capability).
    gated: Arc<Mutex<HashMap<ApprovalId, Action>>>,
    /// The actions [`invoke_stream`](Self::invoke_stream) sent, by action id (a stream's gate is
    /// seen only by its consumer), for the same re-submission.
    streamed: Arc<Mutex<HashMap<ActionId, Action>>>,
}

impl std::fmt::Debug for TestHost {
    // The store is a trait object without `Debug`; the host and tenant say what it serves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost")
            .field("host", &self.host)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// Builds a [`TestHost`]; see [`TestHost::builder`].
#[must_use = "a builder does nothing until `build()` is called"]
pub struct TestHostBuilder {
    connectors: Vec<Arc<dyn Connector>>,
    tenant: String,
    approvers: Vec<(String, ApproverMemberships)>,
    scopes: Option<Vec<String>>,
    credential_issuer: Option<String>,
    external_account: Option<ExternalAccountRef>,
    limits: HostLimits,
    store: Option<SharedStore>,
    clock: Option<Arc<dyn aip_connector::store::Clock>>,
    credential_provider: Option<Arc<dyn CredentialProvider>>,
}

impl TestHost {
    /// A builder hosting `connector` (more with [`TestHostBuilder::connector`]), for callers
    /// of tenant [`TEST_TENANT`], with no approver, no credential and no external account.
    pub fn builder(connector: impl Connector) -> TestHostBuilder {
        TestHostBuilder {
            connectors: vec![Arc::new(connector)],
            tenant: TEST_TENANT.to_owned(),
            approvers: Vec::new(),
            scopes: None,
            credential_issuer: None,
            external_account: None,
            limits: HostLimits::default(),
            store: None,
            clock: None,
            credential_provider: None,
        }
    }

    /// The host under test.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The store the host keeps its idempotency, approval and transaction records in.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The tenant the callers belong to.
    pub fn tenant(&self) -> &VerifiedTenant {
        &self.tenant
    }

    /// A human caller `principal` of the test tenant, as an authenticator would vouch for it.
    pub fn caller(&self, principal: &str) -> TrustedContext {
        self.caller_in(&self.tenant.id, principal)
    }

    /// A human caller `principal` of another tenant (for isolation tests).
    pub fn caller_in(&self, tenant: &str, principal: &str) -> TrustedContext {
        TrustedContext::new(Principal::new(principal, PrincipalKind::Human), TEST_ISSUER)
            .with_tenant(VerifiedTenant::new(tenant))
    }

    /// Runs `action` as [`caller(principal)`](Self::caller).
    ///
    /// An action the approval gate holds (`pending_approval`) is remembered under its approval
    /// id, for [`resume`](Self::resume).
    pub async fn invoke(&self, principal: &str, action: Action) -> ActionResult {
        self.invoke_as(&self.caller(principal), action).await
    }

    /// Runs `action` as [`caller_in(tenant, principal)`](Self::caller_in): a caller of another
    /// tenant (isolation, a credential provider that serves each tenant its own account),
    /// remembered for [`resume`](Self::resume) as [`invoke`](Self::invoke) does.
    pub async fn invoke_in(&self, tenant: &str, principal: &str, action: Action) -> ActionResult {
        self.invoke_as(&self.caller_in(tenant, principal), action)
            .await
    }

    /// Runs `action` as `caller`, remembering a gated action for [`resume`](Self::resume).
    async fn invoke_as(&self, caller: &TrustedContext, action: Action) -> ActionResult {
        let gated = action.clone();
        let result = self.host.invoke(action, caller).await;
        if let Some(approval_id) = result.approval_id() {
            self.gated_actions().insert(approval_id, gated);
        }
        result
    }

    /// Starts [`invoke`](Self::invoke) of `action` on a task of its own (the current tokio
    /// runtime's) and returns its handle, so the test can [`cancel`](Self::cancel) the action,
    /// or race it against another call, while it runs.
    pub fn spawn_invoke(
        &self,
        principal: &str,
        action: Action,
    ) -> tokio::task::JoinHandle<ActionResult> {
        let test = self.clone();
        let principal = principal.to_owned();
        tokio::spawn(async move { test.invoke(&principal, action).await })
    }

    /// [`spawn_invoke`](Self::spawn_invoke) for a capability that streams: starts
    /// [`invoke_stream`](Self::invoke_stream) of `action` on a task of its own and returns a
    /// handle to its result (the terminal chunk's), its chunks read and dropped. A migration
    /// trial cancelled a streaming tool with `spawn_invoke`, which calls it the plain way and is
    /// refused `execution.mode_unsupported`. Read the chunks with `invoke_stream` instead when
    /// the test checks them.
    ///
    /// The handle's task panics if the stream ends without a terminal chunk (the host's task
    /// was aborted), which `JoinHandle::await` reports as an error.
    pub fn spawn_invoke_stream(
        &self,
        principal: &str,
        action: Action,
    ) -> tokio::task::JoinHandle<ActionResult> {
        let chunks = self.invoke_stream(principal, action);
        tokio::spawn(async move {
            chunks
                .result()
                .await
                .expect("the stream ended without a terminal chunk: the host's task was aborted")
        })
    }

    /// Cancels the action `action_id` that `principal` runs, as a server does on that caller's
    /// cancel (`Host::cancel_as`): `Cancelled` when it was executing, `Pending` when it has not
    /// reached its handler yet (the cancel is remembered for 60 s and the action ends
    /// `cancelled` when it does). Either way its result is normally `cancelled`
    /// ([`assert_cancelled!`](crate::assert_cancelled)).
    pub fn cancel(&self, action_id: &ActionId, principal: &str) -> CancelOutcome {
        self.host.cancel_as(action_id, &self.caller(principal))
    }

    /// Runs `action` streaming, as [`caller(principal)`](Self::caller): the chunks of
    /// `Host::invoke_stream`, in order, ending with exactly one terminal chunk
    /// (`.collect().await` gathers them).
    ///
    /// The action is remembered, for [`resume`](Self::resume) to re-submit should it wait for
    /// an approval whose record keeps no input.
    pub fn invoke_stream(&self, principal: &str, mut action: Action) -> ChunkStream {
        if action.mode.is_none() {
            action.mode = Some(ActionMode::Streaming);
        }
        self.streamed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(action.id.clone(), action.clone());
        self.host.invoke_stream(action, self.caller(principal))
    }

    fn gated_actions(&self) -> std::sync::MutexGuard<'_, HashMap<ApprovalId, Action>> {
        self.gated
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records `approver`'s approval of `approval_id`, authenticated as
    /// [`caller(approver)`](Self::caller), with the evidence the approval's policy requires (its
    /// `evidence_requirements`, read from the approval record):
    ///
    /// - `reason`: the decision's reason, [`TEST_DECISION_REASON`] (every decision carries it);
    /// - `input_snapshot`: an artifact whose `hash` is the record's `input_hash`, the fingerprint
    ///   of the gated action the host matches a re-submission against, so it names exactly the
    ///   input approved; `redacted` is set when the record kept no input (a redacted capability);
    /// - `policy_decision`: an artifact whose `hash` is the record's `policy_hash`, the policy
    ///   snapshot the decision is checked against;
    /// - `external_ticket`, `attachment`: an artifact of that kind, without `uri` or `hash` (a
    ///   test has no ticket system or file to point at).
    ///
    /// Each artifact's id is `<decision_id>/<kind>`. The host accepts an artifact by its `kind`
    /// (a non-blank id and kind; it compares no hash), so these are what a real approver's
    /// client would send, not a bypass; no artifact is sent for a kind the policy does not
    /// require. To test a decision that lacks evidence (`policy.approval_evidence_missing`),
    /// send your own [`ApprovalDecision`] through [`host()`](Self::host)`.record_approval_decision`.
    ///
    /// Every call is a new decision with its own `decision_id` (`decision-<approver>-<n>`,
    /// numbered per test host), never a resend of an earlier one: an approver may approve and
    /// later deny (while the request is pending) or [`revoke`](Self::revoke), and the host
    /// judges each decision on its own. The stored id is in the returned record's `decisions`.
    /// To test the replay of a resent decision, send the same [`ApprovalDecision`] twice
    /// through [`host()`](Self::host)`.record_approval_decision`.
    pub async fn approve(
        &self,
        approval_id: &ApprovalId,
        approver: &str,
    ) -> Result<ApprovalRecord, ProtocolError> {
        let decision_id = self.next_decision_id(approver);
        let mut decision = ApprovalDecision::approve(
            approval_id.clone(),
            Principal::new(approver, PrincipalKind::Human),
        )
        .with_decision_id(decision_id.as_str());
        // Read from the store, not through `Host::approval`, which would settle a lapsed request
        // as expired first and change what the host answers this decision. Without a record
        // there is nothing to evidence; the host answers why (not found).
        if let Some(record) = self.store.approval(approval_id).await.ok().flatten() {
            decision.evidence = required_evidence(&record, &decision_id);
        }
        self.decide(decision, approver).await
    }

    /// Records `approver`'s denial of `approval_id`, as [`approve`](Self::approve) does (a new
    /// decision with its own id and the reason [`TEST_DECISION_REASON`]; a denial needs no other
    /// evidence).
    pub async fn deny(
        &self,
        approval_id: &ApprovalId,
        approver: &str,
    ) -> Result<ApprovalRecord, ProtocolError> {
        let decision = ApprovalDecision::deny(
            approval_id.clone(),
            Principal::new(approver, PrincipalKind::Human),
        )
        .with_decision_id(self.next_decision_id(approver));
        self.decide(decision, approver).await
    }

    /// Records `approver`'s revocation of the approval `target_decision_id` (the
    /// `decision_id` of an `approved` decision in the record), as [`approve`](Self::approve)
    /// does. The host accepts it while the request is pending, or approved and not yet
    /// resumed; the request is then `revoked`.
    pub async fn revoke(
        &self,
        approval_id: &ApprovalId,
        approver: &str,
        target_decision_id: &str,
    ) -> Result<ApprovalRecord, ProtocolError> {
        let mut decision = ApprovalDecision::new(
            approval_id.clone(),
            ApprovalDecisionKind::Revoked,
            Principal::new(approver, PrincipalKind::Human),
        );
        decision.target_decision_id = Some(target_decision_id.to_owned());
        let decision = decision.with_decision_id(self.next_decision_id(approver));
        self.decide(decision, approver).await
    }

    /// A decision id no decision of this host (or its clones) used before.
    fn next_decision_id(&self, approver: &str) -> String {
        let n = self.decisions.fetch_add(1, Ordering::Relaxed) + 1;
        format!("decision-{approver}-{n}")
    }

    /// Sends `decision`, with the reason [`TEST_DECISION_REASON`], as `approver`.
    async fn decide(
        &self,
        decision: ApprovalDecision,
        approver: &str,
    ) -> Result<ApprovalRecord, ProtocolError> {
        let decision = decision.with_reason(TEST_DECISION_REASON);
        self.host
            .record_approval_decision(decision, &self.caller(approver))
            .await
    }

    /// Runs the approved action of `approval_id` once, as its requester `principal` would.
    ///
    /// Usually that is `Host::resume_approved`, which runs the action the approval record
    /// kept. A redacted capability's record keeps no input (`input_retained: false`;
    /// `data(pii)`, `restricted` or `regulated`, or `redaction_required`), and `resume_approved`
    /// answers `policy.approval_resubmission_required`: then, as a client must
    /// (docs/host-runtime.md §5.5), this re-submits the action [`invoke`](Self::invoke) (or
    /// [`invoke_stream`](Self::invoke_stream)) sent, with the record's approved decision
    /// attached. An action sent for streaming is resumed as [`resume_stream`](Self::resume_stream)
    /// does, and its stream read to the result (its chunks are dropped). Either way the host
    /// checks the approval and runs the action at most once.
    pub async fn resume(&self, approval_id: &ApprovalId, principal: &str) -> ActionResult {
        let caller = self.caller(principal);
        let record = self.host.approval(approval_id).await.ok().flatten();
        if let Some(streamed) = record
            .as_ref()
            .filter(|r| r.action.mode == Some(ActionMode::Streaming))
        {
            let action_id = streamed.action.id.clone();
            return self
                .stream_resumed(record.as_ref(), approval_id, caller)
                .result()
                .await
                .unwrap_or_else(|| ActionResult::new(action_id, ActionResultStatus::Failed));
        }
        if let Some(resubmission) = self.resubmission(record.as_ref(), approval_id) {
            return self.host.invoke(resubmission, &caller).await;
        }
        self.host.resume_approved(approval_id, &caller).await
    }

    /// [`resume`](Self::resume) of an approval whose gated `action` this `TestHost` did not
    /// send: a restarted host (a second `TestHost` over the first one's
    /// [`store`](TestHostBuilder::store)) never saw it. `action` is the one first sent, same id
    /// and input. When the record kept it (`input_retained`), the host runs the kept action
    /// and `action` is not used; when it kept none (a redacted capability), `action` is
    /// re-submitted with the record's approving decision attached, as a restarted deployment's
    /// client re-submits it. The host checks it is the action that was approved: another id,
    /// input or capability is refused and runs nothing.
    pub async fn resume_sent(
        &self,
        approval_id: &ApprovalId,
        principal: &str,
        action: Action,
    ) -> ActionResult {
        // The action given replaces whatever this host remembered for the approval (a gated
        // action is looked up before a streamed one).
        if action.mode == Some(ActionMode::Streaming) {
            self.gated_actions().remove(approval_id);
            self.streamed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(action.id.clone(), action);
        } else {
            self.gated_actions().insert(approval_id.clone(), action);
        }
        self.resume(approval_id, principal).await
    }

    /// [`resume`](Self::resume), streamed: the chunks of `Host::resume_approved_stream`, for an
    /// approved action that was sent for streaming (`Host::resume_approved` cannot run it: its
    /// handler needs the stream, and the host answers `execution.mode_unsupported` without
    /// claiming the approval). A redacted record's action is re-submitted to `invoke_stream`
    /// instead, as [`invoke_stream`](Self::invoke_stream) (or [`invoke`](Self::invoke)) sent it.
    pub async fn resume_stream(&self, approval_id: &ApprovalId, principal: &str) -> ChunkStream {
        let record = self.host.approval(approval_id).await.ok().flatten();
        self.stream_resumed(record.as_ref(), approval_id, self.caller(principal))
    }

    /// [`resume_stream`](Self::resume_stream) with the approval `record` already read.
    fn stream_resumed(
        &self,
        record: Option<&ApprovalRecord>,
        approval_id: &ApprovalId,
        caller: TrustedContext,
    ) -> ChunkStream {
        if let Some(resubmission) = self.resubmission(record, approval_id) {
            return self.host.invoke_stream(resubmission, caller);
        }
        self.host.resume_approved_stream(approval_id, caller)
    }

    /// The gated action of `approval_id` with the record's approved decision attached, when the
    /// record is approved but kept no input and this host sent the action.
    fn resubmission(
        &self,
        record: Option<&ApprovalRecord>,
        approval_id: &ApprovalId,
    ) -> Option<Action> {
        let record = record?;
        if record.input_retained {
            return None;
        }
        let decision = record.approving_decision()?.clone();
        let sent = self.gated_actions().get(approval_id).cloned().or_else(|| {
            self.streamed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .get(&record.action.id)
                .cloned()
        });
        let mut action = sent?;
        action.approval = Some(Box::new(decision));
        Some(action)
    }
}

impl std::fmt::Debug for TestHostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHostBuilder")
            .field(
                "connectors",
                &self
                    .connectors
                    .iter()
                    .map(|c| c.definition().id.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("tenant", &self.tenant)
            .field("approvers", &self.approvers)
            .field("scopes", &self.scopes)
            .field("external_account", &self.external_account)
            .field("credential_provider", &self.credential_provider.is_some())
            .finish_non_exhaustive()
    }
}

impl TestHostBuilder {
    /// Hosts another connector too.
    pub fn connector(mut self, connector: impl Connector) -> Self {
        self.connectors.push(Arc::new(connector));
        self
    }

    /// The tenant the callers belong to (default [`TEST_TENANT`]).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// Lets `principal` decide approvals with `memberships` (the roles, groups and other
    /// memberships the capabilities' approval selectors name); it is placed in the test tenant
    /// unless `memberships` names another.
    ///
    /// That placement is the test host's convenience, not a production default: a deployment's
    /// [`StaticApprovalAuthority`] gives an
    /// approver only the memberships it is given, so under the default selector
    /// (`tenant_policy`: a member of the request's tenant) the same approver needs
    /// `ApproverMemberships::new().with_tenant("<tenant>")` there, or every decision is refused
    /// `policy.approver_unauthorized`.
    pub fn approver(mut self, principal: &str, memberships: ApproverMemberships) -> Self {
        self.approvers.push((principal.to_owned(), memberships));
        self
    }

    /// Hands every call a credential with `scopes` (`*` grants every scope), bound to the test
    /// tenant, whose secret is [`TEST_CREDENTIAL_SECRET`]. Its issuer is the one set with
    /// [`credential_issuer`](Self::credential_issuer), else the first issuer the called
    /// capability accepts (`credentials(issuers = [...])`, as the conformance suite picks it),
    /// else [`TEST_ISSUER`]: capabilities that trust different identity providers are each
    /// served a credential they accept.
    pub fn credential<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The issuer of the credential [`credential`](Self::credential) hands out, for every call:
    /// to test a capability's `credentials(issuers = [...])` against an issuer it does not
    /// accept, or to pick one of several it does. A capability that accepts other issuers only
    /// is then refused (`credential.issuer_denied`); without it, each call gets the first
    /// issuer its capability accepts.
    pub fn credential_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.credential_issuer = Some(issuer.into());
        self
    }

    /// Resolves credentials with the deployment's own `provider` instead of the test credential
    /// of [`credential`](Self::credential), which it replaces: a provider that hands each tenant
    /// its own credential, tested with the test host's callers of several tenants
    /// ([`TestHost::caller_in`]) and its helpers (a warehouse trial had to leave `TestHost` for
    /// a bare `Host` to test one).
    pub fn credential_provider(mut self, provider: impl CredentialProvider + 'static) -> Self {
        self.credential_provider = Some(Arc::new(provider));
        self
    }

    /// Acts as `account` (the partition of `external_account`-scoped keys).
    pub fn external_account(mut self, account: ExternalAccountRef) -> Self {
        self.external_account = Some(account);
        self
    }

    /// The host's limits (default [`HostLimits::default`]).
    pub fn limits(mut self, limits: HostLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Keeps the host's records in `store` instead of a fresh [`MemoryStore`]: a `SqliteStore`
    /// or `PostgresStore`, to test what a deployment on it does (a restart is another
    /// `TestHost` over the same store), with the same callers, approvers and helpers.
    pub fn store(mut self, store: SharedStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Reads the time from `clock` instead of the system's: a `ManualClock` to test what
    /// expires (an approval's `ttl_ms`, a plan, an idempotency key's TTL) without waiting, with
    /// the same callers, approvers and helpers.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use aip_connector::prelude::*;
    /// # use aip_connector::store::ManualClock;
    /// # use aip_connector_testkit::TestHost;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     employee: String,
    /// # }
    /// # #[derive(Serialize, JsonSchema)]
    /// # struct Employee {
    /// #     name: String,
    /// # }
    /// # struct Hr;
    /// # impl Hr {
    /// #     fn new() -> Self {
    /// #         Hr
    /// #     }
    /// # }
    /// # #[connector(id = "hr")]
    /// # impl Hr {
    /// #     /// Looks an employee up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn employee(&self, input: Lookup) -> Result<Employee, ConnectorFailure> {
    /// #         Ok(Employee { name: input.employee })
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), aip_connector::host::HostBuildError> {
    /// let clock = Arc::new(ManualClock::new());
    /// let test = TestHost::builder(Hr::new()).clock(clock.clone()).build()?;
    /// clock.advance(2 * 60 * 60 * 1000); // two hours later
    /// # let _ = test;
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock(mut self, clock: Arc<dyn aip_connector::store::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Builds the host: full admission of every connector, as [`Host::builder`] does, so a
    /// test fails here on what a deployment would refuse.
    pub fn build(self) -> Result<TestHost, HostBuildError> {
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemoryStore::default()));
        let authority = self.approvers.into_iter().fold(
            StaticApprovalAuthority::new(),
            |authority, (principal, memberships)| {
                let memberships = if memberships.tenant_id.is_some() {
                    memberships
                } else {
                    memberships.with_tenant(self.tenant.clone())
                };
                authority.with(principal.as_str(), memberships)
            },
        );
        let mut deployment = Deployment::default();
        if let Some(scopes) = self.scopes {
            deployment = deployment.with_credentials(IssuedPerCapability {
                credential: CredentialHandle::new(
                    "testkit-credential",
                    TEST_ISSUER,
                    Secret::new(TEST_CREDENTIAL_SECRET),
                )
                .with_scopes(scopes)
                .with_tenant(self.tenant.clone()),
                issuer: self.credential_issuer,
            });
        }
        if let Some(provider) = self.credential_provider {
            deployment = deployment.with_shared_credentials(provider);
        }
        if let Some(account) = self.external_account {
            deployment = deployment.with_external_account(account);
        }
        let mut host = Host::builder()
            .store(store.clone())
            .deployment(deployment)
            .approval_authority(authority)
            .limits(self.limits);
        if let Some(clock) = self.clock {
            host = host.clock(clock);
        }
        let builder = self
            .connectors
            .into_iter()
            .fold(host, |builder, connector| {
                builder.shared_connector(connector)
            });
        Ok(TestHost {
            host: builder.build()?,
            store,
            tenant: VerifiedTenant::new(self.tenant),
            decisions: Arc::new(AtomicU64::new(0)),
            gated: Arc::default(),
            streamed: Arc::default(),
        })
    }
}

/// One artifact for every evidence kind but `reason` (the decision's own reason meets it) that
/// the policy of `record` requires, as [`TestHost::approve`] documents: the host accepts an
/// artifact whose `kind` is the requirement's wire name, so the hashes are there for what a
/// test reads back from the stored decision, naming what was approved.
fn required_evidence(record: &ApprovalRecord, decision_id: &str) -> Vec<EvidenceArtifact> {
    let mut artifacts: Vec<EvidenceArtifact> = Vec::new();
    for requirement in &record.policy.evidence_requirements {
        let (kind, hash, redacted) = match requirement {
            EvidenceRequirement::Reason => continue,
            EvidenceRequirement::InputSnapshot => (
                "input_snapshot",
                Some(record.input_hash.clone()),
                !record.input_retained,
            ),
            EvidenceRequirement::PolicyDecision => {
                ("policy_decision", Some(record.policy_hash.clone()), false)
            }
            EvidenceRequirement::ExternalTicket => ("external_ticket", None, false),
            EvidenceRequirement::Attachment => ("attachment", None, false),
        };
        // A policy that names a kind twice needs it once.
        if artifacts.iter().any(|artifact| artifact.kind == kind) {
            continue;
        }
        artifacts.push(EvidenceArtifact {
            id: format!("{decision_id}/{kind}"),
            kind: kind.to_owned(),
            uri: None,
            hash,
            redacted,
        });
    }
    artifacts
}

/// Hands every call `credential`, issued by `issuer` when the test names one, else by the first
/// issuer the called capability accepts (`credentials(issuers = [...])`), else by
/// [`TEST_ISSUER`]. Per capability, so a connector whose capabilities trust different identity
/// providers is served as a deployment holding a credential of each would serve it.
#[derive(Debug)]
pub(crate) struct IssuedPerCapability {
    pub(crate) credential: CredentialHandle,
    pub(crate) issuer: Option<String>,
}

impl CredentialProvider for IssuedPerCapability {
    fn resolve<'a>(
        &'a self,
        capability: &'a Capability,
        _caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>> {
        let accepted = || {
            capability
                .contract
                .as_ref()?
                .credentials
                .as_ref()?
                .accepted_issuers
                .first()
        };
        let issuer = self
            .issuer
            .as_ref()
            .or_else(accepted)
            .map_or(TEST_ISSUER, String::as_str);
        let mut credential = self.credential.clone();
        credential.issuer = issuer.to_owned();
        Box::pin(std::future::ready(Ok(Some(credential))))
    }
}
