//! Human approval of gated actions: the durable request, the decisions recorded on it, who may
//! decide, and the status the decisions add up to.
//!
//! # Trust
//!
//! Who may decide is never read from a payload. The approver is the transport-authenticated
//! [`TrustedContext`]; what it is a member of comes from the deployment's [`ApprovalAuthority`]
//! (default [`DenyAllApprovalAuthority`]: nobody may decide). Roles, groups or authority paths
//! written inside a decision are ignored and overwritten.
//!
//! # Checks on one decision, in order
//!
//! Every refusal is a `policy` error, not retryable, with source
//! `{"component":"aip-connector.approval"}` and `details.approval_id`:
//!
//! 0. the context's verified tenant is another one than the record's →
//!    `policy.approval_not_found`, whatever the authority says: another tenant learns nothing
//!    about the request, not even that it exists, so this comes before every other check;
//! 1. the decision names another approval id → `policy.approval_mismatch`;
//! 2. its approver is not the authenticated principal → `policy.approver_identity_mismatch`;
//! 3. it is malformed (blank reason, constraint or evidence field, blank `decision_id`, or an
//!    `expired` decision: expiry is the host clock's to decide) → `policy.approval_decision_invalid`;
//! 4. the approver's tenant (the authority's `tenant_id`, else the context's verified tenant)
//!    differs from the record's, or is unknown while the record has one →
//!    `policy.approver_tenant_mismatch`;
//! 5. its `decision_id` was recorded before: by the same approver with the same outcome it is a
//!    replay and the record is returned unchanged; otherwise → `policy.approval_mismatch`;
//! 6. the request is closed → `policy.approval_not_pending`. `approved` and `denied` need a
//!    `pending` request; `revoked` also accepts an `approved` request that was not resumed yet.
//!    A pending request whose TTL passed (`now >= expires_at_ms`) → `policy.approval_expired`,
//!    and [`record_decision`] stores it as `expired`;
//! 7. a `policy_hash` other than the record's → `policy.approval_hash_mismatch`;
//! 8. separation of duties, for `approved` decisions only (denying or revoking never grants
//!    anything): the requester may approve their own request only when `allow_self_approval` is
//!    set **and** `requester_must_differ` is not — the stricter flag wins →
//!    `policy.separation_of_duties.requester`; with `operator_must_differ`, the operator
//!    (`action.identity.service_account`, which the host writes from the trusted context) may not
//!    approve → `policy.separation_of_duties.operator`;
//! 9. authority, for every kind of decision (an outsider may not deny either): the approver must
//!    satisfy at least one leaf of the policy's `rule` (or of `approver_selector`, read as one
//!    leaf) → else `policy.approver_unauthorized`;
//! 10. evidence, for `approved` decisions only: `reason` needs a non-blank `reason`; every other
//!     requirement needs an artifact whose `kind` is its wire name (`input_snapshot`,
//!     `policy_decision`, `external_ticket`, `attachment`) → `policy.approval_evidence_missing`;
//! 11. a `revoked` decision must name, in `target_decision_id`, an `approved` decision of the
//!     record → `policy.approval_revocation_target_required` / `_missing`;
//! 12. the constraints of an `approved` decision must hold on the stored input
//!     ([`check_constraints`]) → `policy.approval_constraint_missing_field` / `_failed`. When the
//!     input was redacted from the record they cannot be checked here; the resume of the
//!     re-submitted action must check them.
//!
//! An accepted decision is stored with the trusted approver principal, `decided_at` from the host
//! clock, the record's `policy_hash`, an `authority_path` listing every leaf the approver
//! satisfies (e.g. `["role:finance"]`), and a fresh `decision_id` (`dec_…`) when it had none.
//! A second approval by the same approver counts once, so it is recorded only when it carries a
//! leaf the approver's earlier approvals lack; otherwise the record comes back unchanged, as for
//! a replay, and one approver cannot grow a pending record without bound. A decision larger than
//! `HostLimits::max_decision_bytes` is refused before the record is read
//! ([`check_decision_size`]).
//!
//! # Leaves
//!
//! Every leaf needs the authority to vouch for the approver (memberships other than the
//! default, empty ones). Then: `principal` — the approver is that principal; `role`, `group`,
//! `tenant_policy{policy_id}`, `external_system` — the membership lists it; the
//! `tenant_policy` selector (no fields) — the authority names the record's tenant as the
//! approver's (any vouched approver when the record has no tenant); `delegated_authority` — the
//! approver holds a [`DelegatedScope`] of that scope whose `max_risk` and `max_value` (absent:
//! unbounded) cover the leaf's. Both sides are trusted values. A grant whose `max_risk` is below
//! the capability's own risk (looked up among the hosted capabilities when the decision is
//! recorded) does not count at all, whatever the leaf asks; input values are payload, so
//! `max_value` is compared with the leaf's bound only.
//!
//! # Status
//!
//! [`evaluate_status`]: any `revoked` decision → revoked; else TTL passed (or an `expired`
//! decision) → expired; else any `denied` → denied; else approved when the distinct approving
//! principals reach `minimum_distinct_principals` (at least one) **and** the rule is satisfied;
//! else pending. A leaf is satisfied by an approving principal whose decisions' authority paths
//! contain it; `any` needs one child; `all` needs every child and, without
//! `allow_decision_reuse`, a different principal for each; `quorum` needs `required` children,
//! by different principals when `distinct_principals`. Malformed rules (empty `all`/`any`,
//! `quorum` with `required` 0 or above its children), which admission refuses, never approve.
//! Matching considers the first 64 approving principals and a bounded amount of search; past
//! either bound it fails closed (stays pending).

#![allow(
    clippy::result_large_err,
    reason = "`ProtocolError` is the wire error the host returns by value; refusals are cold paths"
)]

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use aip_connector_core::ids::{ApprovalId, CapabilityId, PrincipalId};
use aip_connector_core::model::{
    Action, ApprovalDecision, ApprovalDecisionKind, ApprovalPolicy, ApprovalRule, ApproverSelector,
    Capability, ConnectorFailure, ErrorCategory, EvidenceRequirement, ProtocolError, RiskLevel,
    SeparationOfDuties,
};
use aip_connector_core::validation::validate_approval_decision;
use serde_json::{Number, Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use super::canonical::{canonical_json, sha256_hex};
use super::context::TrustedContext;
use crate::codes;
use crate::invocation::BoxFuture;
use crate::store::{ApprovalRecord, ApprovalStatus, ApprovalStore, Clock, Millis, StoreError};

/// The `source` component of every error raised here.
pub(crate) const APPROVAL_COMPONENT: &str = "aip-connector.approval";

/// Compare-and-set attempts of one decision. Every lost race means another writer succeeded,
/// so this bounds the concurrent writers one decision outlasts.
const MAX_UPDATE_ATTEMPTS: usize = 32;

/// Approving principals the rule matcher considers (one bit each in a `u64`).
const MAX_MATCHED_PRINCIPALS: usize = 64;

/// Steps the rule matcher may take before it gives up (and the request stays pending).
const MATCH_BUDGET: u32 = 100_000;

/// Memberships a trusted resolver vouches for; leaf predicates are evaluated only against
/// these, never payload values. The default (all empty) vouches for nothing.
///
/// Build one with [`ApproverMemberships::new`] and the `with_*` methods (new fields may come in
/// minor versions); the fields stay public to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproverMemberships {
    /// The id the authority knows this principal by, when it resolves ids loosely (ignoring
    /// case, following aliases): decisions are recorded, counted and checked for separation of
    /// duties under it. Without it, under the id the transport verified. An authority that
    /// answers `USER:HANA` with `user:hana`'s memberships and leaves this unset lets one person
    /// meet a quorum of two, or approve their own request, under two spellings of one id.
    pub principal_id: Option<PrincipalId>,
    /// The approver's tenant, as the authority knows it. A transport that verified another
    /// tenant than a request's still decides first (the approver is told the approval does not
    /// exist); this places an approver the transport gave no tenant, or must agree with it.
    pub tenant_id: Option<String>,
    /// Roles held (`role` leaves).
    pub roles: BTreeSet<String>,
    /// Groups belonged to (`group` leaves).
    pub groups: BTreeSet<String>,
    /// Tenant policies that name the approver (`tenant_policy` leaves, by `policy_id`).
    pub tenant_policies: BTreeSet<String>,
    /// External approval systems the approver decides through (`external_system` leaves).
    pub external_systems: BTreeSet<String>,
    /// Approval authority delegated to the approver (`delegated_authority` leaves).
    pub delegated: Vec<DelegatedScope>,
}

impl ApproverMemberships {
    /// Vouches for nothing yet; add memberships with the `with_*` methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id the authority knows this principal by (see
    /// [`principal_id`](Self::principal_id)): what a directory that matches ids loosely
    /// resolved the verified id to.
    pub fn with_principal_id(mut self, principal_id: impl Into<PrincipalId>) -> Self {
        self.principal_id = Some(principal_id.into());
        self
    }

    /// The approver's tenant, as the authority knows it.
    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// Adds a role (`role` leaves).
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.roles.insert(role.into());
        self
    }

    /// Adds a group (`group` leaves).
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.groups.insert(group.into());
        self
    }

    /// Adds a tenant policy that names the approver (`tenant_policy` leaves).
    pub fn with_tenant_policy(mut self, policy_id: impl Into<String>) -> Self {
        self.tenant_policies.insert(policy_id.into());
        self
    }

    /// Adds an external approval system the approver decides through.
    pub fn with_external_system(mut self, system: impl Into<String>) -> Self {
        self.external_systems.insert(system.into());
        self
    }

    /// Adds authority delegated within one scope.
    pub fn with_delegated(mut self, scope: DelegatedScope) -> Self {
        self.delegated.push(scope);
        self
    }
}

/// Approval authority delegated to an approver within one scope.
///
/// Build one with [`DelegatedScope::new`] and the `with_*` methods (new fields may come in
/// minor versions); the fields stay public to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DelegatedScope {
    /// The delegated scope, matched against a leaf's `scope`.
    pub scope: String,
    /// Highest risk the delegation covers; `None` is unbounded. A delegation bounded below the
    /// capability's own risk approves nothing of it, whatever the policy's leaf asks (it may
    /// still deny or revoke).
    pub max_risk: Option<RiskLevel>,
    /// Highest value the delegation covers; `None` is unbounded.
    pub max_value: Option<u64>,
}

impl DelegatedScope {
    /// Authority within `scope`, unbounded in risk and value.
    pub fn new(scope: impl Into<String>) -> Self {
        Self {
            scope: scope.into(),
            max_risk: None,
            max_value: None,
        }
    }

    /// Bounds the risk it covers.
    pub fn with_max_risk(mut self, max_risk: RiskLevel) -> Self {
        self.max_risk = Some(max_risk);
        self
    }

    /// Bounds the value it covers.
    pub fn with_max_value(mut self, max_value: u64) -> Self {
        self.max_value = Some(max_value);
        self
    }
}

/// Where the host learns what an approver is a member of. Implemented by the deployment
/// (directory, IAM, ticketing system); the host never trusts memberships from a payload.
///
/// `tenant` is the tenant of the approval's request (`None` for a deployment without
/// tenants). Answer what the approver is a member of *in that tenant*: default memberships
/// vouch for nothing, and the decision is refused (`policy.approver_unauthorized`). An
/// authority that names a tenant (`ApproverMemberships::with_tenant`) must name the request's. A
/// lookup that fails (the directory is down) is a `ConnectorFailure`, and the decision is
/// refused with it.
///
/// ```
/// use std::collections::HashMap;
///
/// use aip_connector::host::{ApprovalAuthority, ApproverMemberships};
/// use aip_connector::ids::PrincipalId;
/// use aip_connector::invocation::BoxFuture;
/// use aip_connector::model::ConnectorFailure;
///
/// /// Roles per principal, per tenant, from the deployment's configuration.
/// struct ConfiguredApprovers(HashMap<(String, PrincipalId), Vec<String>>);
///
/// impl ApprovalAuthority for ConfiguredApprovers {
///     fn memberships<'a>(
///         &'a self,
///         approver: &'a PrincipalId,
///         tenant: Option<&'a str>,
///     ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>> {
///         // `tenant` is the approval's: vouch only for members of it.
///         let Some(tenant) = tenant else {
///             return Box::pin(std::future::ready(Ok(ApproverMemberships::default())));
///         };
///         let roles = self.0.get(&(tenant.to_owned(), approver.clone()));
///         let memberships = roles.into_iter().flatten().fold(
///             ApproverMemberships::default().with_tenant(tenant),
///             |memberships, role| memberships.with_role(role),
///         );
///         Box::pin(std::future::ready(Ok(memberships)))
///     }
/// }
///
/// let approvers = ConfiguredApprovers(HashMap::from([(
///     ("acme".to_owned(), PrincipalId::from("user:alice")),
///     vec!["billing-admin".to_owned()],
/// )]));
/// let alice = PrincipalId::from("user:alice");
/// let memberships = block_on(approvers.memberships(&alice, Some("acme")));
/// assert!(memberships.unwrap().roles.contains("billing-admin"));
/// # fn block_on<F: std::future::Future>(future: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
/// # }
/// ```
pub trait ApprovalAuthority: Send + Sync {
    /// The memberships of `approver`, for a request of `tenant`. Default memberships mean the
    /// authority does not vouch for the approver.
    fn memberships<'a>(
        &'a self,
        approver: &'a PrincipalId,
        tenant: Option<&'a str>,
    ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>>;
}

/// The default authority: vouches for nobody, so no decision is accepted until the deployment
/// configures a real one.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAllApprovalAuthority;

impl ApprovalAuthority for DenyAllApprovalAuthority {
    fn memberships<'a>(
        &'a self,
        _approver: &'a PrincipalId,
        _tenant: Option<&'a str>,
    ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>> {
        Box::pin(std::future::ready(Ok(ApproverMemberships::default())))
    }
}

/// A fixed table of approvers and their memberships (tests, small deployments). Principals not
/// in the table are not vouched for; the requested tenant is not consulted.
#[derive(Clone, Debug, Default)]
pub struct StaticApprovalAuthority {
    /// Memberships by approver.
    members: HashMap<PrincipalId, ApproverMemberships>,
}

impl StaticApprovalAuthority {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `principal` with `memberships`.
    pub fn with(
        mut self,
        principal: impl Into<PrincipalId>,
        memberships: ApproverMemberships,
    ) -> Self {
        self.members.insert(principal.into(), memberships);
        self
    }
}

impl ApprovalAuthority for StaticApprovalAuthority {
    fn memberships<'a>(
        &'a self,
        approver: &'a PrincipalId,
        _tenant: Option<&'a str>,
    ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>> {
        let memberships = self.members.get(approver).cloned().unwrap_or_default();
        Box::pin(std::future::ready(Ok(memberships)))
    }
}

/// A fresh pending record for a gated action: the policy is snapshotted with its hash
/// (SHA-256 hex of its canonical JSON), the TTL runs from `now`, and the input is replaced by
/// `null` unless `retain_input` (a redacted action is resumed by re-submitting it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn new_record(
    mut action: Action,
    input_hash: String,
    retain_input: bool,
    capability: &Capability,
    policy: ApprovalPolicy,
    requested_by: PrincipalId,
    tenant_id: Option<String>,
    idempotency_key: Option<String>,
    now: Millis,
) -> ApprovalRecord {
    if !retain_input {
        action.input = Value::Null;
    }
    ApprovalRecord {
        approval_id: ApprovalId::new(),
        action,
        input_retained: retain_input,
        input_hash,
        capability_id: capability.id.clone(),
        requested_by,
        tenant_id,
        policy_hash: policy_hash(&policy),
        expires_at_ms: policy.ttl_ms.map(|ttl| now.saturating_add(ttl)),
        policy,
        idempotency_key,
        status: ApprovalStatus::Pending,
        decisions: Vec::new(),
        created_at_ms: now,
        resumed: false,
        resumed_at_ms: None,
        resume_token: None,
        version: 0,
    }
}

/// SHA-256 hex of the policy's canonical JSON, so decisions can name the exact policy they were
/// checked against. A policy that cannot be serialized (only a Rust-built one with an
/// out-of-range date can fail) is hashed from its debug text, which is still deterministic.
fn policy_hash(policy: &ApprovalPolicy) -> String {
    let text = serde_json::to_value(policy)
        .map(|value| canonical_json(&value))
        .unwrap_or_else(|_| format!("{policy:?}"));
    sha256_hex(text.as_bytes())
}

/// Validates one decision by an authenticated approver and returns the updated record (status
/// re-evaluated), without storing it. The checks and what is stamped on the decision are listed
/// in the module documentation. A replayed decision returns the record unchanged (same
/// `version`); the returned record otherwise keeps the loaded `version`, which is the one to
/// compare-and-set against.
#[cfg(test)]
pub(crate) fn apply_decision(
    record: &ApprovalRecord,
    decision: ApprovalDecision,
    approver: &TrustedContext,
    memberships: &ApproverMemberships,
    now: Millis,
) -> Result<ApprovalRecord, ProtocolError> {
    apply_decision_for(
        record,
        decision,
        approver,
        memberships,
        &Parties::default(),
        now,
    )
}

/// The requester and the operator of a gated action as the authority resolved them
/// ([`ApproverMemberships::principal_id`]), when it did: separation of duties refuses an approver
/// any of whose ids (verified, resolved) is any of theirs (recorded, resolved).
#[derive(Debug, Default)]
struct Parties {
    requester: Option<PrincipalId>,
    operator: Option<PrincipalId>,
}

/// [`apply_decision`] with the parties as the authority knows them.
fn apply_decision_for(
    record: &ApprovalRecord,
    mut decision: ApprovalDecision,
    approver: &TrustedContext,
    memberships: &ApproverMemberships,
    parties: &Parties,
    now: Millis,
) -> Result<ApprovalRecord, ProtocolError> {
    // Before anything else: another tenant's approver learns nothing about the request, not
    // even that it exists (a check that only a real request reaches would tell it).
    check_transport_tenant(record, approver)?;
    check_names_record(record, &decision)?;
    check_approver_identity(record, &decision, approver)?;
    check_well_formed(record, &decision)?;
    check_tenant(record, approver, memberships)?;
    // The approver as the authority knows them: one person under two spellings of an id is one
    // approver (found by an approval trial). Decisions are recorded under this id.
    let approver_id = memberships
        .principal_id
        .as_ref()
        .unwrap_or(&approver.principal.id);
    if is_replay(record, &decision, approver_id)? {
        return Ok(record.clone());
    }
    check_open(record, decision.decision, now)?;
    check_policy_hash(record, &decision)?;
    let approving = decision.decision == ApprovalDecisionKind::Approved;
    if approving {
        check_separation_of_duties(record, [&approver.principal.id, approver_id], parties)?;
    }
    let authority_path = authority_path(record, approver_id, memberships);
    if authority_path.is_empty() {
        return Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVER_UNAUTHORIZED,
            unauthorized_message(record, memberships),
        ));
    }
    if approving {
        check_evidence(record, &decision)?;
    }
    if decision.decision == ApprovalDecisionKind::Revoked {
        check_revocation_target(record, &decision)?;
    }
    if approving && record.input_retained {
        check_constraints(&decision, &record.action.input)?;
    }
    if approving && adds_no_authority(record, approver_id, &authority_path) {
        // The principal's earlier approvals already carry every leaf this one would: it could
        // not change the status, and storing it would let one approver grow the record without
        // bound while it waits for others.
        return Ok(record.clone());
    }
    decision.approver = approver.principal.clone();
    decision.approver.id = approver_id.clone();
    decision.decided_at = trusted_time(now).unwrap_or(decision.decided_at);
    decision.authority_path = authority_path;
    decision.policy_hash = Some(record.policy_hash.clone());
    decision.decision_id.get_or_insert_with(new_decision_id);
    let mut updated = record.clone();
    updated.decisions.push(decision);
    updated.status = evaluate_status(&updated.policy, &updated.decisions, false);
    Ok(updated)
}

/// Whether `approver` already approved `record` under every leaf of `authority_path`. Status
/// evaluation unions a principal's approvals (a principal voting twice counts once), so such an
/// approval adds nothing.
fn adds_no_authority(
    record: &ApprovalRecord,
    approver: &PrincipalId,
    authority_path: &[String],
) -> bool {
    let earlier: Vec<&ApprovalDecision> = record
        .decisions
        .iter()
        .filter(|d| d.decision == ApprovalDecisionKind::Approved && d.approver.id == *approver)
        .collect();
    !earlier.is_empty()
        && authority_path
            .iter()
            .all(|label| earlier.iter().any(|d| d.authority_path.contains(label)))
}

/// The `policy.approval_decision_too_large` refusal for a decision whose compact JSON exceeds
/// `max_bytes`: every accepted decision is stored in its record, and rewritten with it on every
/// later decision.
pub(crate) fn check_decision_size(
    decision: &ApprovalDecision,
    max_bytes: usize,
) -> Result<(), ProtocolError> {
    // Serializing a decision fails only for an out-of-range date, which nothing stores either.
    let bytes = serde_json::to_vec(decision).map_or(usize::MAX, |text| text.len());
    if bytes <= max_bytes {
        return Ok(());
    }
    let mut error = refusal(
        &decision.approval_id,
        codes::POLICY_APPROVAL_DECISION_TOO_LARGE,
        format!("the decision is {bytes} bytes of JSON; this host accepts at most {max_bytes}"),
    );
    error.details = Some(json!({
        "approval_id": decision.approval_id,
        "decision_bytes": bytes,
        "max_decision_bytes": max_bytes,
    }));
    Err(error)
}

/// The full service: loads the record, resolves the approver's memberships through the
/// authority (for the record's tenant), applies the decision and compare-and-sets the result,
/// re-reading and re-applying on a lost race (up to 32 attempts, then `storage.unavailable`,
/// retryable). Returns the stored record. A decision on a pending request whose TTL passed
/// stores the request as `expired` and fails with `policy.approval_expired`. An unknown id, or
/// an approver whose transport verified another tenant (checked before the authority is asked),
/// is `policy.approval_not_found`; store failures are `storage.unavailable`; an authority
/// failure is returned as its own wire error.
pub(crate) async fn record_decision(
    store: &dyn ApprovalStore,
    authority: &dyn ApprovalAuthority,
    clock: &dyn Clock,
    decision: ApprovalDecision,
    approver: &TrustedContext,
    risk_of: &RiskOf<'_>,
) -> Result<ApprovalRecord, ProtocolError> {
    let id = decision.approval_id.clone();
    let mut record = load(store, &id).await?;
    // Before the authority is asked: an approver of another tenant learns nothing of the
    // request, not even through the authority's failure, and is never looked up for it.
    check_transport_tenant(&record, approver)?;
    let mut memberships = authority
        .memberships(&approver.principal.id, record.tenant_id.as_deref())
        .await
        .map_err(|failure| failure.to_protocol_error())?;
    // Approvals only: a delegate may still deny or revoke what their grant could not approve.
    if decision.decision == ApprovalDecisionKind::Approved {
        within_risk(&mut memberships, risk_of(&record.capability_id));
    }
    // The requester and the operator as the authority knows them, for separation of duties:
    // only an approval can break it, and only when the policy forbids it is there anyone to ask
    // about.
    let mut parties = Parties::default();
    if decision.decision == ApprovalDecisionKind::Approved {
        let duties = record.policy.separation_of_duties;
        let tenant = record.tenant_id.as_deref();
        let resolve = async |principal: &PrincipalId| {
            authority
                .memberships(principal, tenant)
                .await
                .map(|memberships| memberships.principal_id)
                .map_err(|failure| failure.to_protocol_error())
        };
        if self_approval_forbidden(duties) {
            parties.requester = resolve(&record.requested_by).await?;
        }
        if let Some(operator) = operator_of(&record).filter(|_| duties.operator_must_differ) {
            parties.operator = resolve(operator).await?;
        }
    }
    for attempt in 0..MAX_UPDATE_ATTEMPTS {
        if attempt > 0 {
            tokio::task::yield_now().await;
            record = load(store, &id).await?;
        }
        // Read after the authority answered, and again on each attempt: a slow authority must
        // not let a decision arriving at the end of the TTL be applied as if made before it,
        // nor stamp it with an earlier `decided_at` (found by a hostile review).
        let now = clock.now_ms();
        let (next, outcome) = match apply_decision_for(
            &record,
            decision.clone(),
            approver,
            &memberships,
            &parties,
            now,
        ) {
            Ok(updated) if updated == record => return Ok(record),
            Ok(updated) => (updated, Ok(())),
            Err(error) if error.code == codes::POLICY_APPROVAL_EXPIRED && is_due(&record, now) => {
                (expired(&record), Err(error))
            }
            Err(error) => return Err(error),
        };
        if store
            .update_approval(&next, record.version)
            .await
            .map_err(|e| storage_failure(&e))?
        {
            let stored = ApprovalRecord {
                version: record.version.saturating_add(1),
                ..next
            };
            return outcome.map(|()| stored);
        }
    }
    Err(contention(&id))
}

/// The risk of a hosted capability, by id (`None`: not hosted, or no risk declared).
pub(crate) type RiskOf<'a> = dyn Fn(&CapabilityId) -> Option<RiskLevel> + Send + Sync + 'a;

/// Drops the delegations that do not reach a request of a capability of `risk`: one whose
/// `max_risk` is below it, whatever the policy's `delegated_authority` leaf asks (a leaf
/// without a `max_risk` asks nothing of the grant, yet the authority bounded the grant itself:
/// found by a hostile review). A grant bounded below `critical` reaches no capability of
/// unknown risk (one no longer hosted, or that declares none); one bounded at `critical`, or
/// unbounded, reaches every risk.
fn within_risk(memberships: &mut ApproverMemberships, risk: Option<RiskLevel>) {
    memberships.delegated.retain(|grant| match risk {
        Some(risk) => covers(grant.max_risk, Some(risk)),
        None => matches!(grant.max_risk, None | Some(RiskLevel::Critical)),
    });
}

/// Expires the record if it is pending and its TTL passed (compare-and-set, retried on a lost
/// race); returns the current record, `None` for an unknown id.
pub(crate) async fn expire_if_due(
    store: &dyn ApprovalStore,
    id: &ApprovalId,
    now: Millis,
) -> Result<Option<ApprovalRecord>, ProtocolError> {
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        let Some(record) = store.approval(id).await.map_err(|e| storage_failure(&e))? else {
            return Ok(None);
        };
        if !is_due(&record, now) {
            return Ok(Some(record));
        }
        let next = expired(&record);
        if store
            .update_approval(&next, record.version)
            .await
            .map_err(|e| storage_failure(&e))?
        {
            return Ok(Some(ApprovalRecord {
                version: record.version.saturating_add(1),
                ..next
            }));
        }
        tokio::task::yield_now().await;
    }
    Err(contention(id))
}

/// The status `decisions` add up to under `policy`: revoked, then expired (`ttl_passed`, or an
/// `expired` decision), then denied, then approved when enough distinct principals approved and
/// the rule (or the selector) is satisfied, else pending.
pub(crate) fn evaluate_status(
    policy: &ApprovalPolicy,
    decisions: &[ApprovalDecision],
    ttl_passed: bool,
) -> ApprovalStatus {
    let any = |kind: ApprovalDecisionKind| decisions.iter().any(|d| d.decision == kind);
    if any(ApprovalDecisionKind::Revoked) {
        ApprovalStatus::Revoked
    } else if ttl_passed || any(ApprovalDecisionKind::Expired) {
        ApprovalStatus::Expired
    } else if any(ApprovalDecisionKind::Denied) {
        ApprovalStatus::Denied
    } else if approvals_suffice(policy, decisions) {
        ApprovalStatus::Approved
    } else {
        ApprovalStatus::Pending
    }
}

/// Checks every constraint of a decision against an action input: `field` is a JSON pointer
/// (or, without a leading `/`, a top-level key); operators `eq`, `neq`, `lt`, `lte`, `gt`,
/// `gte` (numbers), `contains` (substring, or array element), `max_length`, `min_length`
/// (characters of a string, items of an array) and `in` (the value is one of an array's items).
/// An unknown operator fails, so a restriction the host cannot enforce never passes. Used on the
/// stored input when a decision is recorded, and by a resume on a re-submitted input.
pub(crate) fn check_constraints(
    decision: &ApprovalDecision,
    input: &Value,
) -> Result<(), ProtocolError> {
    for constraint in &decision.constraints {
        let Some(actual) = constraint_target(input, &constraint.field) else {
            return Err(refusal(
                &decision.approval_id,
                codes::POLICY_APPROVAL_CONSTRAINT_MISSING_FIELD,
                format!(
                    "approval constraint field `{}` is not in the action input",
                    constraint.field
                ),
            ));
        };
        if !constraint_holds(&constraint.operator, actual, &constraint.value) {
            return Err(refusal(
                &decision.approval_id,
                codes::POLICY_APPROVAL_CONSTRAINT_FAILED,
                format!(
                    "the action input does not satisfy approval constraint `{} {}`",
                    constraint.field, constraint.operator
                ),
            ));
        }
    }
    Ok(())
}

// ---- Checks on one decision ---------------------------------------------------------------

/// A decision counts only on the request it names.
fn check_names_record(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
) -> Result<(), ProtocolError> {
    if decision.approval_id == record.approval_id {
        return Ok(());
    }
    Err(refusal(
        &record.approval_id,
        codes::POLICY_APPROVAL_MISMATCH,
        "the decision names another approval",
    ))
}

/// The approver named in the decision must be the one the transport authenticated.
fn check_approver_identity(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
    approver: &TrustedContext,
) -> Result<(), ProtocolError> {
    if decision.approver.id == approver.principal.id {
        return Ok(());
    }
    Err(refusal(
        &record.approval_id,
        codes::POLICY_APPROVER_IDENTITY_MISMATCH,
        "the decision's approver is not the authenticated principal",
    ))
}

/// The audit trail records no unexplained restriction, unnamed evidence or blank id, and an
/// approver cannot declare a request expired.
fn check_well_formed(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
) -> Result<(), ProtocolError> {
    let invalid = |message: String| {
        refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_DECISION_INVALID,
            message,
        )
    };
    validate_approval_decision(decision).map_err(|error| invalid(error.to_string()))?;
    if decision.decision == ApprovalDecisionKind::Expired {
        return Err(invalid(
            "an approver cannot record an `expired` decision".to_owned(),
        ));
    }
    if decision
        .decision_id
        .as_deref()
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err(invalid(
            "approval_decision.decision_id must not be empty".to_owned(),
        ));
    }
    Ok(())
}

/// A decision re-sent with a recorded `decision_id` is a replay when it is the same approver's
/// same outcome (true); reusing the id for anything else is refused. The recorded decision names
/// the approver as the authority resolved them (`approver_id`).
fn is_replay(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
    approver_id: &PrincipalId,
) -> Result<bool, ProtocolError> {
    let Some(id) = decision.decision_id.as_deref() else {
        return Ok(false);
    };
    match record
        .decisions
        .iter()
        .find(|earlier| earlier.decision_id.as_deref() == Some(id))
    {
        None => Ok(false),
        Some(earlier)
            if (earlier.approver.id == decision.approver.id
                || earlier.approver.id == *approver_id)
                && earlier.decision == decision.decision =>
        {
            Ok(true)
        }
        Some(_) => Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_MISMATCH,
            "this decision id was already recorded for another decision",
        )),
    }
}

/// Decisions land only on an open request: pending and within its TTL, or — for a revocation —
/// approved and not yet resumed (a resumed action already ran).
fn check_open(
    record: &ApprovalRecord,
    kind: ApprovalDecisionKind,
    now: Millis,
) -> Result<(), ProtocolError> {
    match record.status {
        ApprovalStatus::Pending if is_due(record, now) => Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_EXPIRED,
            "the approval request expired",
        )),
        ApprovalStatus::Pending => Ok(()),
        ApprovalStatus::Approved if kind == ApprovalDecisionKind::Revoked && !record.resumed => {
            Ok(())
        }
        _ => Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_NOT_PENDING,
            "the approval request is no longer open for this decision",
        )),
    }
}

/// An approver who evaluated another policy than the record's snapshot decided something else.
fn check_policy_hash(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
) -> Result<(), ProtocolError> {
    match decision.policy_hash.as_deref() {
        Some(hash) if hash != record.policy_hash => Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_HASH_MISMATCH,
            "the decision was made against another policy than the request's",
        )),
        _ => Ok(()),
    }
}

/// An approver whose transport verified another tenant than the request's is told the approval
/// does not exist, as every read of another tenant's approval is (docs/serving.md): an
/// existence or state oracle across tenants would leak. The transport's word comes first,
/// whatever the authority says: an authority that looks principals up by id alone would
/// otherwise place another tenant's `user:alice` in this one, and let them decide its requests.
/// A request made without a tenant is no tenant's: an approver whose transport verified one is
/// told it does not exist too, as its views tell them (found by a hostile review).
fn check_transport_tenant(
    record: &ApprovalRecord,
    approver: &TrustedContext,
) -> Result<(), ProtocolError> {
    match (record.tenant_id.as_deref(), approver.tenant.as_ref()) {
        (required, Some(tenant)) if required != Some(tenant.id.as_str()) => Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_NOT_FOUND,
            "no approval with this id",
        )),
        _ => Ok(()),
    }
}

/// A request of one tenant is decided only by that tenant's approvers: one in the request's
/// tenant (or in none) whom the authority places in another tenant, or in none while the
/// request has one, is told so: `policy.approver_tenant_mismatch`. (An approver whose
/// transport verified another tenant was refused first, by [`check_transport_tenant`].)
fn check_tenant(
    record: &ApprovalRecord,
    approver: &TrustedContext,
    memberships: &ApproverMemberships,
) -> Result<(), ProtocolError> {
    let Some(required) = record.tenant_id.as_deref() else {
        return Ok(());
    };
    let transport_tenant = approver.tenant.as_ref().map(|tenant| tenant.id.as_str());
    let approver_tenant = memberships.tenant_id.as_deref().or(transport_tenant);
    if approver_tenant == Some(required) {
        return Ok(());
    }
    Err(refusal(
        &record.approval_id,
        codes::POLICY_APPROVER_TENANT_MISMATCH,
        "the approver does not belong to the request's tenant",
    ))
}

/// Whoever asked (or operates the call) does not also grant it, unless the policy allows it.
///
/// `approver`: the verified id and the one the authority resolved it to. Either matching the
/// requester's or the operator's id, recorded or resolved ([`Parties`]), is that party: an
/// authority that resolves loosely must not let `User:Req` approve `user:req`'s request, nor
/// `user:req` approve its own when it resolves it to `employee:42` (found by a hostile review).
fn check_separation_of_duties(
    record: &ApprovalRecord,
    approver: [&PrincipalId; 2],
    parties: &Parties,
) -> Result<(), ProtocolError> {
    let duties = record.policy.separation_of_duties;
    let is = |recorded: Option<&PrincipalId>, resolved: Option<&PrincipalId>| {
        approver
            .iter()
            .any(|id| Some(*id) == recorded || Some(*id) == resolved)
    };
    if is(Some(&record.requested_by), parties.requester.as_ref()) && self_approval_forbidden(duties)
    {
        return Err(refusal(
            &record.approval_id,
            codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER,
            "the requester may not approve their own request",
        ));
    }
    if duties.operator_must_differ && is(operator_of(record), parties.operator.as_ref()) {
        return Err(refusal(
            &record.approval_id,
            codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR,
            "the operator of the action may not approve it",
        ));
    }
    Ok(())
}

/// Self-approval needs an explicit allowance, and `requester_must_differ` overrides it.
fn self_approval_forbidden(duties: SeparationOfDuties) -> bool {
    duties.requester_must_differ || !duties.allow_self_approval
}

/// The operator of the gated action: its service account, which the host writes into the
/// action's identity from the trusted context (the payload's identity is overwritten).
pub(crate) fn operator_of(record: &ApprovalRecord) -> Option<&PrincipalId> {
    record
        .action
        .identity
        .as_ref()?
        .service_account
        .as_ref()
        .map(|account| &account.id)
}

/// An approval carries every piece of evidence the policy asks for.
fn check_evidence(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
) -> Result<(), ProtocolError> {
    let missing: Vec<&'static str> = record
        .policy
        .evidence_requirements
        .iter()
        .filter(|requirement| !evidence_present(**requirement, decision))
        .map(|requirement| evidence_name(*requirement))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut error = refusal(
        &record.approval_id,
        codes::POLICY_APPROVAL_EVIDENCE_MISSING,
        format!(
            "the approval lacks required evidence: {}",
            missing.join(", ")
        ),
    );
    if let Some(Value::Object(details)) = error.details.as_mut() {
        details.insert("missing_evidence".to_owned(), json!(missing));
    }
    Err(error)
}

/// `reason` is the decision's own reason; other evidence is an artifact of that kind.
fn evidence_present(requirement: EvidenceRequirement, decision: &ApprovalDecision) -> bool {
    match requirement {
        EvidenceRequirement::Reason => decision
            .reason
            .as_deref()
            .is_some_and(|reason| !reason.trim().is_empty()),
        other => {
            let kind = evidence_name(other);
            decision
                .evidence
                .iter()
                .any(|artifact| artifact.kind == kind)
        }
    }
}

/// The wire name of an evidence requirement, which is also the artifact `kind` that meets it.
fn evidence_name(requirement: EvidenceRequirement) -> &'static str {
    match requirement {
        EvidenceRequirement::Reason => "reason",
        EvidenceRequirement::InputSnapshot => "input_snapshot",
        EvidenceRequirement::PolicyDecision => "policy_decision",
        EvidenceRequirement::ExternalTicket => "external_ticket",
        EvidenceRequirement::Attachment => "attachment",
    }
}

/// A revocation says which approval it withdraws, and that approval must be on the record.
fn check_revocation_target(
    record: &ApprovalRecord,
    decision: &ApprovalDecision,
) -> Result<(), ProtocolError> {
    let Some(target) = decision.target_decision_id.as_deref() else {
        return Err(refusal(
            &record.approval_id,
            codes::POLICY_APPROVAL_REVOCATION_TARGET_REQUIRED,
            "a revocation must name the decision it revokes in target_decision_id",
        ));
    };
    let found = record.decisions.iter().any(|earlier| {
        earlier.decision == ApprovalDecisionKind::Approved
            && earlier.decision_id.as_deref() == Some(target)
    });
    if found {
        return Ok(());
    }
    Err(refusal(
        &record.approval_id,
        codes::POLICY_APPROVAL_REVOCATION_TARGET_MISSING,
        "the revoked decision is not an approval recorded on this request",
    ))
}

/// The value a constraint restricts: a JSON pointer, or a top-level key.
fn constraint_target<'v>(input: &'v Value, field: &str) -> Option<&'v Value> {
    if field.starts_with('/') {
        input.pointer(field)
    } else {
        input.get(field)
    }
}

/// Whether `actual` satisfies `operator operand`; unknown operators never hold.
fn constraint_holds(operator: &str, actual: &Value, operand: &Value) -> bool {
    match operator {
        "eq" => same_json(actual, operand),
        "neq" => !same_json(actual, operand),
        "lt" => number_order(actual, operand) == Some(Ordering::Less),
        "lte" => matches!(
            number_order(actual, operand),
            Some(Ordering::Less | Ordering::Equal)
        ),
        "gt" => number_order(actual, operand) == Some(Ordering::Greater),
        "gte" => {
            matches!(
                number_order(actual, operand),
                Some(Ordering::Greater | Ordering::Equal)
            )
        }
        "contains" => match (actual, operand) {
            (Value::String(text), Value::String(part)) => text.contains(part.as_str()),
            (Value::Array(items), item) => items.iter().any(|entry| same_json(entry, item)),
            _ => false,
        },
        "max_length" => length(actual)
            .zip(operand.as_u64())
            .is_some_and(|(len, max)| len <= max),
        "min_length" => length(actual)
            .zip(operand.as_u64())
            .is_some_and(|(len, min)| len >= min),
        "in" => operand
            .as_array()
            .is_some_and(|options| options.iter().any(|option| same_json(option, actual))),
        _ => false,
    }
}

/// JSON equality where numbers compare by value: `42` and `42.0` are one number, as JSON Schema
/// has it. Plain `Value` equality tells them apart, which made `neq 42` hold for an input of
/// `42.0` (a constraint an approver set to forbid a value, passed by respelling it).
fn same_json(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(_), Value::Number(_)) => number_order(left, right) == Some(Ordering::Equal),
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(l, r)| same_json(l, r))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left
                    .iter()
                    .all(|(key, l)| right.get(key).is_some_and(|r| same_json(l, r)))
        }
        _ => left == right,
    }
}

/// The exact order of two numbers (integers of either sign and floats mixed, with no rounding
/// through `f64`); `None` for non-numbers.
fn number_order(left: &Value, right: &Value) -> Option<Ordering> {
    let (Value::Number(left), Value::Number(right)) = (left, right) else {
        return None;
    };
    match (integer(left), integer(right)) {
        (Some(left), Some(right)) => Some(left.cmp(&right)),
        (Some(left), None) => Some(integer_to_float(left, right.as_f64()?)),
        (None, Some(right)) => Some(integer_to_float(right, left.as_f64()?).reverse()),
        (None, None) => left.as_f64()?.partial_cmp(&right.as_f64()?),
    }
}

/// An integer against a finite float, exactly: `9007199254740993` is above `9007199254740992.0`
/// although both round to the same `f64`.
fn integer_to_float(integer: i128, float: f64) -> Ordering {
    // Every integer a JSON number can hold here (i64 or u64) lies within ±2^64.
    const BOUND: f64 = 18_446_744_073_709_551_616.0;
    if float >= BOUND {
        return Ordering::Less;
    }
    if float <= -BOUND {
        return Ordering::Greater;
    }
    let whole = float.trunc();
    // `whole` is integral and within ±2^64, so the cast is exact.
    let whole_integer = whole as i128;
    integer.cmp(&whole_integer).then_with(|| {
        let fraction = float - whole;
        if fraction > 0.0 {
            Ordering::Less
        } else if fraction < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    })
}

/// A JSON integer, widened so signed and unsigned compare exactly.
fn integer(number: &Number) -> Option<i128> {
    number
        .as_i64()
        .map(i128::from)
        .or_else(|| number.as_u64().map(i128::from))
}

/// Characters of a string or items of an array.
fn length(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) => u64::try_from(text.chars().count()).ok(),
        Value::Array(items) => u64::try_from(items.len()).ok(),
        _ => None,
    }
}

// ---- Authority ------------------------------------------------------------------------------

/// One leaf predicate of a policy, from a rule or from the legacy selector.
#[derive(Clone, Copy, Debug)]
enum Leaf<'p> {
    /// `principal`: that very principal.
    Principal(&'p PrincipalId),
    /// `role`.
    Role(&'p str),
    /// `group`.
    Group(&'p str),
    /// `tenant_policy` rule leaf, by policy id.
    TenantPolicy(&'p str),
    /// `tenant_policy` selector: a member of the request's tenant.
    TenantMember,
    /// `external_system`.
    ExternalSystem(&'p str),
    /// `delegated_authority`.
    Delegated {
        /// Delegated scope.
        scope: &'p str,
        /// Risk the delegation must cover.
        max_risk: Option<RiskLevel>,
        /// Value the delegation must cover.
        max_value: Option<u64>,
    },
}

impl Leaf<'_> {
    /// The leaf's name in an authority path, e.g. `role:finance`.
    fn label(&self) -> String {
        match self {
            Leaf::Principal(id) => format!("principal:{id}"),
            Leaf::Role(name) => format!("role:{name}"),
            Leaf::Group(name) => format!("group:{name}"),
            Leaf::TenantPolicy(policy_id) => format!("tenant_policy:{policy_id}"),
            Leaf::TenantMember => "tenant_policy".to_owned(),
            Leaf::ExternalSystem(system) => format!("external_system:{system}"),
            Leaf::Delegated {
                scope,
                max_risk,
                max_value,
            } => {
                let mut label = format!("delegated_authority:{scope}");
                if let Some(risk) = max_risk {
                    label.push_str(";max_risk=");
                    label.push_str(risk_name(*risk));
                }
                if let Some(value) = max_value {
                    label.push_str(&format!(";max_value={value}"));
                }
                label
            }
        }
    }

    /// Whether a vouched-for approver satisfies the leaf, from trusted values only.
    fn satisfied_by(
        &self,
        approver: &PrincipalId,
        memberships: &ApproverMemberships,
        record_tenant: Option<&str>,
    ) -> bool {
        match self {
            Leaf::Principal(id) => approver == *id,
            Leaf::Role(name) => memberships.roles.contains(*name),
            Leaf::Group(name) => memberships.groups.contains(*name),
            Leaf::TenantPolicy(policy_id) => memberships.tenant_policies.contains(*policy_id),
            Leaf::TenantMember => {
                record_tenant.is_none_or(|tenant| memberships.tenant_id.as_deref() == Some(tenant))
            }
            Leaf::ExternalSystem(system) => memberships.external_systems.contains(*system),
            Leaf::Delegated {
                scope,
                max_risk,
                max_value,
            } => memberships.delegated.iter().any(|grant| {
                grant.scope == *scope
                    && covers(grant.max_risk, *max_risk)
                    && covers(grant.max_value, *max_value)
            }),
        }
    }
}

/// A grant bound covers a required bound when the grant is unbounded, nothing is required, or
/// the grant reaches at least as far.
fn covers<T: Ord>(granted: Option<T>, required: Option<T>) -> bool {
    match (granted, required) {
        (None, _) | (_, None) => true,
        (Some(granted), Some(required)) => granted >= required,
    }
}

/// The wire name of a risk level.
fn risk_name(risk: RiskLevel) -> &'static str {
    match risk {
        RiskLevel::Low => "low",
        RiskLevel::Medium => "medium",
        RiskLevel::High => "high",
        RiskLevel::Critical => "critical",
    }
}

/// The leaf a rule node is, if it is one.
fn rule_leaf(rule: &ApprovalRule) -> Option<Leaf<'_>> {
    Some(match rule {
        ApprovalRule::All { .. } | ApprovalRule::Any { .. } | ApprovalRule::Quorum { .. } => {
            return None;
        }
        ApprovalRule::Principal { id } => Leaf::Principal(id),
        ApprovalRule::Role { name } => Leaf::Role(name),
        ApprovalRule::Group { name } => Leaf::Group(name),
        ApprovalRule::TenantPolicy { policy_id } => Leaf::TenantPolicy(policy_id),
        ApprovalRule::ExternalSystem { system } => Leaf::ExternalSystem(system),
        ApprovalRule::DelegatedAuthority {
            scope,
            max_risk,
            max_value,
        } => Leaf::Delegated {
            scope,
            max_risk: *max_risk,
            max_value: *max_value,
        },
    })
}

/// What the leaf of `rule` asks for, in words a person reads (the MCP projection's "who may
/// approve"), each name passed through `name`; `None` for a composite. The host's own reading of
/// the policy (`rule_leaf`), so the words cannot drift from what it checks.
#[cfg(feature = "mcp")]
pub(crate) fn rule_leaf_in_words(
    rule: &ApprovalRule,
    name: &dyn Fn(&str) -> String,
) -> Option<String> {
    rule_leaf(rule).map(|leaf| leaf.in_words(name))
}

/// [`rule_leaf_in_words`] of the legacy selector.
#[cfg(feature = "mcp")]
pub(crate) fn selector_in_words(
    selector: &ApproverSelector,
    name: &dyn Fn(&str) -> String,
) -> String {
    selector_leaf(selector).in_words(name)
}

#[cfg(feature = "mcp")]
impl Leaf<'_> {
    fn in_words(&self, name: &dyn Fn(&str) -> String) -> String {
        match self {
            Leaf::Principal(id) => format!("`{}`", name(id.as_str())),
            Leaf::Role(role) => format!("a person with the role `{}`", name(role)),
            Leaf::Group(group) => format!("a member of the group `{}`", name(group)),
            Leaf::TenantPolicy(policy_id) => {
                format!("whoever the tenant's policy `{}` names", name(policy_id))
            }
            Leaf::TenantMember => "whoever the tenant's approval policy names".to_owned(),
            Leaf::ExternalSystem(system) => {
                format!("the external approval system `{}`", name(system))
            }
            Leaf::Delegated { scope, .. } => {
                format!("a delegate with authority for `{}`", name(scope))
            }
        }
    }
}

/// The legacy selector, read as one leaf.
fn selector_leaf(selector: &ApproverSelector) -> Leaf<'_> {
    match selector {
        ApproverSelector::Principal { id } => Leaf::Principal(id),
        ApproverSelector::Role { name } => Leaf::Role(name),
        ApproverSelector::Group { name } => Leaf::Group(name),
        ApproverSelector::TenantPolicy => Leaf::TenantMember,
        ApproverSelector::ExternalSystem { system } => Leaf::ExternalSystem(system),
    }
}

/// Every leaf of the policy, in rule order (iteratively: rule depth is not bounded by type).
fn policy_leaves(policy: &ApprovalPolicy) -> Vec<Leaf<'_>> {
    let Some(rule) = &policy.rule else {
        return vec![selector_leaf(&policy.approver_selector)];
    };
    let mut leaves = Vec::new();
    let mut pending = vec![rule];
    while let Some(rule) = pending.pop() {
        match rule {
            ApprovalRule::All { rules, .. }
            | ApprovalRule::Any { rules }
            | ApprovalRule::Quorum { rules, .. } => pending.extend(rules.iter().rev()),
            leaf => leaves.extend(rule_leaf(leaf)),
        }
    }
    leaves
}

/// Whether the authority vouches for the approver at all.
fn vouched(memberships: &ApproverMemberships) -> bool {
    *memberships != ApproverMemberships::default()
}

/// Why an approver was refused, naming what the policy asks for: a deployment whose authority
/// knows the approver under other memberships (a role, where the policy defaulted to the
/// tenant's own policy because the contract names no selector) sees which one is missing. An
/// approver registered with no memberships at all reads as unknown to the authority (it vouches
/// for nothing), so that message says what registering them needs (an author trial registered
/// an approver with `ApproverMemberships::new()` and read "does not vouch" as "unknown id").
fn unauthorized_message(record: &ApprovalRecord, memberships: &ApproverMemberships) -> String {
    let leaves = policy_leaves(&record.policy);
    let wanted = unique_labels(leaves.iter()).join(", ");
    let mut message = if vouched(memberships) {
        format!(
            "the approval authority does not vouch for this approver under the policy: its memberships satisfy none of {wanted}"
        )
    } else {
        format!(
            "the approval authority does not vouch for this approver: it knows no membership of theirs (an approver registered with empty ApproverMemberships counts as unknown), and the policy asks for one of {wanted}"
        )
    };
    let asks_for_tenant = leaves.iter().any(|leaf| matches!(leaf, Leaf::TenantMember));
    if let (true, Some(tenant), None) = (
        asks_for_tenant,
        record.tenant_id.as_deref(),
        memberships.tenant_id.as_deref(),
    ) {
        message.push_str(&format!(
            "; `tenant_policy` is met by a member of the request's tenant `{tenant}`: give the approver ApproverMemberships::with_tenant(\"{tenant}\")"
        ));
    }
    message
}

/// The labels of `leaves`, in order, each once (a policy may name one role in several rules).
fn unique_labels<'l, 'p: 'l>(leaves: impl Iterator<Item = &'l Leaf<'p>>) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for label in leaves.map(Leaf::label) {
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    labels
}

/// The labels of every policy leaf the approver satisfies, without duplicates; empty when the
/// authority does not vouch for the approver.
fn authority_path(
    record: &ApprovalRecord,
    approver: &PrincipalId,
    memberships: &ApproverMemberships,
) -> Vec<String> {
    if !vouched(memberships) {
        return Vec::new();
    }
    let leaves = policy_leaves(&record.policy);
    unique_labels(
        leaves
            .iter()
            .filter(|leaf| leaf.satisfied_by(approver, memberships, record.tenant_id.as_deref())),
    )
}

// ---- Status ---------------------------------------------------------------------------------

/// Enough distinct principals approved and the rule (or the selector leaf) is satisfied.
fn approvals_suffice(policy: &ApprovalPolicy, decisions: &[ApprovalDecision]) -> bool {
    let approvers = approving_principals(decisions);
    // `0` is refused by admission; it never lowers the bar below one approval.
    let minimum = usize::try_from(policy.minimum_distinct_principals.max(1)).unwrap_or(usize::MAX);
    if approvers.len() < minimum {
        return false;
    }
    let matched = &approvers[..approvers.len().min(MAX_MATCHED_PRINCIPALS)];
    match &policy.rule {
        Some(rule) => {
            let matcher = Matcher {
                approvers: matched,
                budget: Cell::new(MATCH_BUDGET),
            };
            matcher.satisfy(rule, 0, &mut |_| true)
        }
        None => {
            let label = selector_leaf(&policy.approver_selector).label();
            matched.iter().any(|labels| labels.contains(label.as_str()))
        }
    }
}

/// For each distinct approving principal (in order of first approval), the union of the
/// authority paths of their approvals: a principal voting twice counts once.
fn approving_principals(decisions: &[ApprovalDecision]) -> Vec<BTreeSet<&str>> {
    let mut index: HashMap<&PrincipalId, usize> = HashMap::new();
    let mut approvers: Vec<BTreeSet<&str>> = Vec::new();
    for decision in decisions
        .iter()
        .filter(|d| d.decision == ApprovalDecisionKind::Approved)
    {
        let slot = *index.entry(&decision.approver.id).or_insert_with(|| {
            approvers.push(BTreeSet::new());
            approvers.len() - 1
        });
        approvers[slot].extend(decision.authority_path.iter().map(String::as_str));
    }
    approvers
}

/// Backtracking search for an assignment of approving principals to rule leaves.
///
/// Principals are bits of a `u64`. [`satisfy`](Self::satisfy) enumerates the ways a rule can be
/// satisfied without the `forbidden` principals and hands the principals each way used to a
/// continuation, stopping at the first one the continuation accepts. `all` without reuse and
/// distinct `quorum` forbid, for each later child, the principals earlier children used.
struct Matcher<'a, 'd> {
    /// Authority-path labels of each approving principal.
    approvers: &'a [BTreeSet<&'d str>],
    /// Steps left; at zero every search fails (closed).
    budget: Cell<u32>,
}

impl Matcher<'_, '_> {
    /// Takes one step of the budget; false once it is spent.
    fn spend(&self) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(1));
        left > 0
    }

    /// Whether `rule` can be satisfied, avoiding `forbidden`, in a way `then` accepts.
    fn satisfy(
        &self,
        rule: &ApprovalRule,
        forbidden: u64,
        then: &mut dyn FnMut(u64) -> bool,
    ) -> bool {
        if !self.spend() {
            return false;
        }
        match rule {
            ApprovalRule::All {
                rules,
                allow_decision_reuse,
            } => {
                !rules.is_empty()
                    && self.satisfy_all(rules, forbidden, 0, *allow_decision_reuse, then)
            }
            ApprovalRule::Any { rules } => rules
                .iter()
                .any(|child| self.satisfy(child, forbidden, &mut *then)),
            ApprovalRule::Quorum {
                required,
                rules,
                distinct_principals,
            } => {
                let required = usize::try_from(*required).unwrap_or(usize::MAX);
                required > 0
                    && required <= rules.len()
                    && self.satisfy_some(rules, required, forbidden, 0, !distinct_principals, then)
            }
            leaf => match rule_leaf(leaf) {
                Some(leaf) => self.satisfy_leaf(&leaf.label(), forbidden, then),
                None => false,
            },
        }
    }

    /// A leaf: any allowed principal whose authority path names it.
    fn satisfy_leaf(&self, label: &str, forbidden: u64, then: &mut dyn FnMut(u64) -> bool) -> bool {
        self.approvers.iter().enumerate().any(|(position, labels)| {
            let bit = 1u64 << position;
            forbidden & bit == 0 && labels.contains(label) && self.spend() && then(bit)
        })
    }

    /// Every one of `rules`, on top of the principals already `used` by earlier siblings.
    fn satisfy_all(
        &self,
        rules: &[ApprovalRule],
        forbidden: u64,
        used: u64,
        reuse: bool,
        then: &mut dyn FnMut(u64) -> bool,
    ) -> bool {
        let Some((first, rest)) = rules.split_first() else {
            return then(used);
        };
        let blocked = if reuse { forbidden } else { forbidden | used };
        self.satisfy(first, blocked, &mut |principals| {
            self.satisfy_all(rest, forbidden, used | principals, reuse, &mut *then)
        })
    }

    /// `count` of `rules` (each combination once, in index order), on top of `used`.
    fn satisfy_some(
        &self,
        rules: &[ApprovalRule],
        count: usize,
        forbidden: u64,
        used: u64,
        reuse: bool,
        then: &mut dyn FnMut(u64) -> bool,
    ) -> bool {
        if count == 0 {
            return then(used);
        }
        let blocked = if reuse { forbidden } else { forbidden | used };
        (0..rules.len())
            .take_while(|start| rules.len() - start >= count)
            .any(|start| {
                self.satisfy(&rules[start], blocked, &mut |principals| {
                    self.satisfy_some(
                        &rules[start + 1..],
                        count - 1,
                        forbidden,
                        used | principals,
                        reuse,
                        &mut *then,
                    )
                })
            })
    }
}

// ---- Records and errors -----------------------------------------------------------------------

/// Whether a pending request's TTL has passed (`now >= expires_at_ms`).
fn is_due(record: &ApprovalRecord, now: Millis) -> bool {
    record.status == ApprovalStatus::Pending
        && record
            .expires_at_ms
            .is_some_and(|expires_at| now >= expires_at)
}

/// The record with its TTL applied.
fn expired(record: &ApprovalRecord) -> ApprovalRecord {
    ApprovalRecord {
        status: evaluate_status(&record.policy, &record.decisions, true),
        ..record.clone()
    }
}

/// The host clock as a wire timestamp (`None` beyond the representable range).
fn trusted_time(now: Millis) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(now) * 1_000_000).ok()
}

/// A fresh decision id, so every stored decision can be named by a revocation.
fn new_decision_id() -> String {
    format!("dec_{}", Uuid::now_v7().simple())
}

/// The record, or `policy.approval_not_found`.
async fn load(store: &dyn ApprovalStore, id: &ApprovalId) -> Result<ApprovalRecord, ProtocolError> {
    store
        .approval(id)
        .await
        .map_err(|e| storage_failure(&e))?
        .ok_or_else(|| {
            refusal(
                id,
                codes::POLICY_APPROVAL_NOT_FOUND,
                "no approval with this id",
            )
        })
}

/// A refusal: policy category, not retryable, naming the approval.
fn refusal(id: &ApprovalId, code: &str, message: impl Into<String>) -> ProtocolError {
    let mut error = ProtocolError::new(code, message, ErrorCategory::Policy);
    error.retryable = Some(false);
    error.details = Some(json!({ "approval_id": id }));
    error.source = Some(json!({ "component": APPROVAL_COMPONENT }));
    error
}

/// A store failure: temporary and retryable when the backend is unreachable.
fn storage_failure(failure: &StoreError) -> ProtocolError {
    let retryable = matches!(failure, StoreError::Unavailable(_));
    let mut error = ProtocolError::new(
        codes::STORAGE_UNAVAILABLE,
        failure.to_string(),
        ErrorCategory::Temporary,
    );
    error.retryable = Some(retryable);
    error.retry_after_ms = retryable.then_some(1_000);
    error.source = Some(json!({ "component": APPROVAL_COMPONENT }));
    error
}

/// Every compare-and-set attempt lost to another writer: temporary, retryable.
fn contention(id: &ApprovalId) -> ProtocolError {
    let mut error = ProtocolError::new(
        codes::STORAGE_UNAVAILABLE,
        "the approval record kept changing under concurrent updates",
        ErrorCategory::Temporary,
    );
    error.retryable = Some(true);
    error.retry_after_ms = Some(100);
    error.details = Some(json!({ "approval_id": id }));
    error.source = Some(json!({ "component": APPROVAL_COMPONENT }));
    error
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    use aip_connector_core::model::{
        ApprovalConstraint, CapabilityKind, ConnectorOperation, EvidenceArtifact, IdentityContext,
        Principal, PrincipalKind,
    };
    use async_trait::async_trait;

    use super::*;
    use crate::invocation::VerifiedTenant;
    use crate::store::MemoryStore;

    #[test]
    fn memberships_are_built_one_membership_at_a_time() {
        let built = ApproverMemberships::new()
            .with_tenant("acme")
            .with_role("finance")
            .with_role("finance")
            .with_group("treasury")
            .with_tenant_policy("pol-1")
            .with_external_system("servicenow");
        assert_eq!(built.tenant_id.as_deref(), Some("acme"));
        assert_eq!(built.roles, BTreeSet::from(["finance".to_owned()]));
        assert_eq!(built.groups, BTreeSet::from(["treasury".to_owned()]));
        assert_eq!(built.tenant_policies, BTreeSet::from(["pol-1".to_owned()]));
        assert_eq!(
            built.external_systems,
            BTreeSet::from(["servicenow".to_owned()])
        );
        assert!(built.delegated.is_empty());
        assert_eq!(ApproverMemberships::new(), ApproverMemberships::default());
    }

    const TENANT: &str = "tenant_acme";
    /// When the fixture record was created; its TTL is one minute.
    const CREATED: Millis = 1_000_000;
    /// A moment within the TTL.
    const NOW: Millis = CREATED + 1;
    /// The first moment past the TTL.
    const EXPIRY: Millis = CREATED + 60_000;

    use ApprovalDecisionKind::{Approved, Denied, Expired, Revoked};

    /// A clock that stands at one instant until a test moves it.
    struct At(std::sync::atomic::AtomicU64);

    impl At {
        fn new(now: Millis) -> Self {
            At(std::sync::atomic::AtomicU64::new(now))
        }
    }

    impl Clock for At {
        fn now_ms(&self) -> Millis {
            self.0.load(AtomicOrdering::SeqCst)
        }
    }

    fn capability() -> Capability {
        let mut capability = Capability::new(
            "cap:payments.send",
            "Send payment",
            CapabilityKind::Tool,
            json!({ "type": "object" }),
        );
        capability.risk = Some(RiskLevel::High);
        capability
    }

    fn role(name: &str) -> ApprovalRule {
        ApprovalRule::Role {
            name: name.to_owned(),
        }
    }

    /// A one-minute policy whose selector is `role:finance`, with `rule`.
    fn policy(rule: Option<ApprovalRule>) -> ApprovalPolicy {
        ApprovalPolicy {
            required: true,
            approver_selector: ApproverSelector::Role {
                name: "finance".to_owned(),
            },
            ttl_ms: Some(60_000),
            rule,
            ..ApprovalPolicy::default()
        }
    }

    /// A pending request by `requester`, operated by `svc_operator`, in [`TENANT`].
    fn record(policy: ApprovalPolicy) -> ApprovalRecord {
        let mut action = Action::new(
            "cap:payments.send",
            json!({ "amount": 250, "currency": "EUR", "tags": ["q3"], "memo": "rent" }),
        );
        action.identity = Some(Box::new(IdentityContext {
            service_account: Some(Box::new(Principal::new(
                "svc_operator",
                PrincipalKind::Service,
            ))),
            ..IdentityContext::default()
        }));
        new_record(
            action,
            "input-hash".to_owned(),
            true,
            &capability(),
            policy,
            "requester".into(),
            Some(TENANT.to_owned()),
            Some("Tenant:tenant_acme:key-1".to_owned()),
            CREATED,
        )
    }

    fn context(id: &str) -> TrustedContext {
        TrustedContext::new(
            Principal::new(id, PrincipalKind::Human),
            "https://idp.example",
        )
        .with_tenant(VerifiedTenant::new(TENANT.to_owned()))
    }

    /// Memberships in [`TENANT`] with `roles`.
    fn member(roles: &[&str]) -> ApproverMemberships {
        ApproverMemberships {
            tenant_id: Some(TENANT.to_owned()),
            roles: roles.iter().map(|role| (*role).to_owned()).collect(),
            ..ApproverMemberships::default()
        }
    }

    fn decision(
        record: &ApprovalRecord,
        approver: &str,
        kind: ApprovalDecisionKind,
    ) -> ApprovalDecision {
        ApprovalDecision {
            decided_at: OffsetDateTime::UNIX_EPOCH,
            ..ApprovalDecision::new(
                record.approval_id.clone(),
                kind,
                Principal::new(approver, PrincipalKind::Human),
            )
            .with_reason("checked the invoice")
        }
    }

    /// `approver` decides `kind` at [`NOW`] with `memberships`.
    fn decide(
        record: &ApprovalRecord,
        approver: &str,
        kind: ApprovalDecisionKind,
        memberships: &ApproverMemberships,
    ) -> Result<ApprovalRecord, ProtocolError> {
        apply_decision(
            record,
            decision(record, approver, kind),
            &context(approver),
            memberships,
            NOW,
        )
    }

    fn approve(
        record: &ApprovalRecord,
        approver: &str,
        memberships: &ApproverMemberships,
    ) -> Result<ApprovalRecord, ProtocolError> {
        decide(record, approver, Approved, memberships)
    }

    fn refused(result: Result<ApprovalRecord, ProtocolError>) -> String {
        result.expect_err("the decision must be refused").code
    }

    fn accepted(result: Result<ApprovalRecord, ProtocolError>) -> ApprovalRecord {
        result.expect("the decision must be accepted")
    }

    // ---- Records ----------------------------------------------------------------------------

    #[test]
    fn a_new_record_snapshots_the_policy_with_its_canonical_hash() {
        let record = record(policy(Some(role("finance"))));
        assert_eq!(record.status, ApprovalStatus::Pending);
        assert_eq!(record.expires_at_ms, Some(EXPIRY));
        assert_eq!(record.created_at_ms, CREATED);
        assert_eq!(record.capability_id.as_str(), "cap:payments.send");
        assert_eq!(
            (record.version, record.resumed, record.decisions.len()),
            (0, false, 0)
        );
        let value = serde_json::to_value(&record.policy).expect("policy serializes");
        assert_eq!(
            record.policy_hash,
            sha256_hex(canonical_json(&value).as_bytes())
        );
        assert_eq!(record.policy_hash.len(), 64);
        assert!(record.input_retained && record.action.input["amount"] == json!(250));
    }

    #[test]
    fn a_redacted_record_keeps_no_input_and_no_ttl_means_no_expiry() {
        let record = new_record(
            Action::new("cap:payments.send", json!({ "secret": "x" })),
            "h".to_owned(),
            false,
            &capability(),
            ApprovalPolicy {
                ttl_ms: None,
                ..policy(None)
            },
            "requester".into(),
            None,
            None,
            CREATED,
        );
        assert!(!record.input_retained);
        assert_eq!(record.action.input, Value::Null);
        assert_eq!(record.expires_at_ms, None);
        assert!(!is_due(&record, Millis::MAX));
    }

    #[test]
    fn the_policy_hash_changes_with_the_policy() {
        let finance = record(policy(Some(role("finance"))));
        let legal = record(policy(Some(role("legal"))));
        assert_ne!(finance.policy_hash, legal.policy_hash);
        assert_eq!(
            finance.policy_hash,
            record(policy(Some(role("finance")))).policy_hash
        );
    }

    // ---- Rules --------------------------------------------------------------------------------

    #[test]
    fn a_quorum_of_two_needs_two_distinct_principals() {
        let quorum = ApprovalRule::Quorum {
            required: 2,
            rules: vec![role("finance"), role("finance"), role("finance")],
            distinct_principals: true,
        };
        let finance = member(&["finance"]);
        let once = accepted(approve(&record(policy(Some(quorum))), "alice", &finance));
        assert_eq!(once.status, ApprovalStatus::Pending);
        let twice = accepted(approve(&once, "alice", &finance));
        assert_eq!(
            twice, once,
            "a second vote with no new authority changes nothing"
        );
        let done = accepted(approve(&twice, "bob", &finance));
        assert_eq!(done.status, ApprovalStatus::Approved);
    }

    #[test]
    fn a_repeat_approval_is_recorded_only_when_it_brings_new_authority() {
        let all = ApprovalRule::All {
            rules: vec![role("finance"), role("legal")],
            allow_decision_reuse: true,
        };
        let pending = record(policy(Some(all)));
        let as_finance = accepted(approve(&pending, "alice", &member(&["finance"])));
        assert_eq!(as_finance.status, ApprovalStatus::Pending);
        // However often she repeats it, the record does not grow.
        let mut repeated = as_finance.clone();
        for _ in 0..100 {
            repeated = accepted(approve(&repeated, "alice", &member(&["finance"])));
        }
        assert_eq!(repeated, as_finance);
        // Granted `legal` since, her next approval carries a leaf her first did not: recorded,
        // and it completes the rule.
        let as_both = accepted(approve(&repeated, "alice", &member(&["finance", "legal"])));
        assert_eq!(as_both.decisions.len(), 2);
        assert_eq!(as_both.status, ApprovalStatus::Approved);
    }

    #[test]
    fn a_repeat_approval_does_not_hide_a_later_denial() {
        let quorum = ApprovalRule::Quorum {
            required: 2,
            rules: vec![role("finance"), role("finance")],
            distinct_principals: true,
        };
        let finance = member(&["finance"]);
        let once = accepted(approve(&record(policy(Some(quorum))), "alice", &finance));
        let denied = accepted(decide(
            &once,
            "alice",
            ApprovalDecisionKind::Denied,
            &finance,
        ));
        assert_eq!(denied.decisions.len(), 2);
        assert_eq!(denied.status, ApprovalStatus::Denied);
    }

    #[test]
    fn a_quorum_without_distinct_principals_accepts_one_principal_for_several_children() {
        let quorum = ApprovalRule::Quorum {
            required: 2,
            rules: vec![role("finance"), role("legal")],
            distinct_principals: false,
        };
        let both = accepted(approve(
            &record(policy(Some(quorum))),
            "alice",
            &member(&["finance", "legal"]),
        ));
        assert_eq!(both.status, ApprovalStatus::Approved);
    }

    #[test]
    fn minimum_distinct_principals_counts_principals_not_votes() {
        let two = ApprovalPolicy {
            minimum_distinct_principals: 2,
            ..policy(None)
        };
        let finance = member(&["finance"]);
        let once = accepted(approve(&record(two), "alice", &finance));
        let twice = accepted(approve(&once, "alice", &finance));
        assert_eq!(twice.status, ApprovalStatus::Pending);
        assert_eq!(
            accepted(approve(&twice, "bob", &finance)).status,
            ApprovalStatus::Approved
        );
    }

    #[test]
    fn all_of_without_reuse_needs_a_principal_per_child() {
        let all = ApprovalRule::All {
            rules: vec![role("finance"), role("legal")],
            allow_decision_reuse: false,
        };
        let alice = accepted(approve(
            &record(policy(Some(all))),
            "alice",
            &member(&["finance", "legal"]),
        ));
        assert_eq!(
            alice.decisions[0].authority_path,
            ["role:finance", "role:legal"]
        );
        assert_eq!(
            alice.status,
            ApprovalStatus::Pending,
            "one decision satisfies one child only"
        );
        let another_finance = accepted(approve(&alice, "bob", &member(&["finance"])));
        assert_eq!(
            another_finance.status,
            ApprovalStatus::Approved,
            "alice covers legal once bob covers finance (the matcher backtracks)"
        );
    }

    #[test]
    fn all_of_with_reuse_lets_one_decision_satisfy_every_child() {
        let all = ApprovalRule::All {
            rules: vec![role("finance"), role("legal")],
            allow_decision_reuse: true,
        };
        let record = record(policy(Some(all)));
        assert_eq!(
            accepted(approve(&record, "alice", &member(&["finance", "legal"]))).status,
            ApprovalStatus::Approved
        );
        assert_eq!(
            accepted(approve(&record, "bob", &member(&["finance"]))).status,
            ApprovalStatus::Pending
        );
    }

    #[test]
    fn any_of_needs_one_child() {
        let any = ApprovalRule::Any {
            rules: vec![
                role("finance"),
                ApprovalRule::Group {
                    name: "ops".to_owned(),
                },
            ],
        };
        let ops = ApproverMemberships {
            groups: BTreeSet::from(["ops".to_owned()]),
            ..member(&[])
        };
        let approved = accepted(approve(&record(policy(Some(any))), "carol", &ops));
        assert_eq!(approved.decisions[0].authority_path, ["group:ops"]);
        assert_eq!(approved.status, ApprovalStatus::Approved);
    }

    #[test]
    fn nested_rules_combine_disjoint_assignments() {
        // (finance or treasury) and 2 of {legal, audit, risk} by distinct principals, no reuse.
        let rule = ApprovalRule::All {
            rules: vec![
                ApprovalRule::Any {
                    rules: vec![role("finance"), role("treasury")],
                },
                ApprovalRule::Quorum {
                    required: 2,
                    rules: vec![role("legal"), role("audit"), role("risk")],
                    distinct_principals: true,
                },
            ],
            allow_decision_reuse: false,
        };
        let mut record = record(policy(Some(rule)));
        record = accepted(approve(&record, "ann", &member(&["treasury", "legal"])));
        record = accepted(approve(&record, "ben", &member(&["legal"])));
        assert_eq!(
            record.status,
            ApprovalStatus::Pending,
            "ann cannot be treasury and legal at once"
        );
        record = accepted(approve(&record, "cid", &member(&["audit"])));
        assert_eq!(record.status, ApprovalStatus::Approved);
    }

    /// Decisions approving with the given authority paths, one principal each.
    fn votes(paths: &[&[&str]]) -> Vec<ApprovalDecision> {
        let record = record(policy(None));
        paths
            .iter()
            .enumerate()
            .map(|(index, path)| ApprovalDecision {
                authority_path: path.iter().map(|label| (*label).to_owned()).collect(),
                ..decision(&record, &format!("p{index}"), Approved)
            })
            .collect()
    }

    #[test]
    fn malformed_rules_never_approve() {
        let everyone = votes(&[&["role:finance"], &["role:finance"]]);
        let malformed = [
            ApprovalRule::All {
                rules: Vec::new(),
                allow_decision_reuse: true,
            },
            ApprovalRule::Any { rules: Vec::new() },
            ApprovalRule::Quorum {
                required: 0,
                rules: vec![role("finance")],
                distinct_principals: true,
            },
            ApprovalRule::Quorum {
                required: 3,
                rules: vec![role("finance"), role("finance")],
                distinct_principals: false,
            },
        ];
        for rule in malformed {
            let status = evaluate_status(&policy(Some(rule.clone())), &everyone, false);
            assert_eq!(status, ApprovalStatus::Pending, "{rule:?}");
        }
        let zero = ApprovalPolicy {
            minimum_distinct_principals: 0,
            ..policy(None)
        };
        assert_eq!(
            evaluate_status(&zero, &[], false),
            ApprovalStatus::Pending,
            "0 still needs one approval"
        );
    }

    #[test]
    fn the_matcher_is_bounded_and_fails_closed() {
        // 40 children needing 40 distinct principals among 39: unsatisfiable, and a naive search
        // would try 39! assignments.
        let hard = ApprovalRule::All {
            rules: vec![role("x"); 40],
            allow_decision_reuse: false,
        };
        let paths: Vec<&[&str]> = vec![&["role:x"]; 39];
        let started = std::time::Instant::now();
        assert_eq!(
            evaluate_status(&policy(Some(hard)), &votes(&paths), false),
            ApprovalStatus::Pending
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));

        // 64 children and 64 principals: satisfiable within the bounds.
        let wide = ApprovalRule::All {
            rules: vec![role("x"); 64],
            allow_decision_reuse: false,
        };
        let paths: Vec<&[&str]> = vec![&["role:x"]; 64];
        assert_eq!(
            evaluate_status(&policy(Some(wide)), &votes(&paths), false),
            ApprovalStatus::Approved
        );

        // Only the first 64 principals are matched: a 65th distinct one is not considered.
        let wider = ApprovalRule::All {
            rules: vec![role("x"); 65],
            allow_decision_reuse: false,
        };
        let paths: Vec<&[&str]> = vec![&["role:x"]; 70];
        assert_eq!(
            evaluate_status(&policy(Some(wider)), &votes(&paths), false),
            ApprovalStatus::Pending
        );
    }

    // ---- Leaves -------------------------------------------------------------------------------

    /// The authority path `approver` gets under a single-leaf `rule`, or the refusal code.
    fn path_under(
        rule: ApprovalRule,
        approver: &str,
        memberships: &ApproverMemberships,
    ) -> Result<Vec<String>, String> {
        approve(&record(policy(Some(rule))), approver, memberships)
            .map(|updated| updated.decisions[0].authority_path.clone())
            .map_err(|error| error.code)
    }

    #[test]
    fn every_leaf_kind_is_read_from_the_memberships_only() {
        let unauthorized = Err(codes::POLICY_APPROVER_UNAUTHORIZED.to_owned());
        let vouched = member(&[]);
        let principal = || ApprovalRule::Principal { id: "alice".into() };
        assert_eq!(
            path_under(principal(), "alice", &vouched),
            Ok(vec!["principal:alice".to_owned()])
        );
        assert_eq!(path_under(principal(), "bob", &vouched), unauthorized);
        assert_eq!(
            path_under(principal(), "alice", &ApproverMemberships::default()),
            unauthorized,
            "an identity the authority does not vouch for is not enough"
        );

        let group = ApproverMemberships {
            groups: BTreeSet::from(["ops".to_owned()]),
            ..member(&[])
        };
        assert_eq!(
            path_under(ApprovalRule::Group { name: "ops".into() }, "a", &group),
            Ok(vec!["group:ops".to_owned()])
        );
        assert_eq!(
            path_under(ApprovalRule::Group { name: "dev".into() }, "a", &group),
            unauthorized
        );

        let tenant_policy = ApproverMemberships {
            tenant_policies: BTreeSet::from(["payments-approvers".to_owned()]),
            ..member(&[])
        };
        let leaf = ApprovalRule::TenantPolicy {
            policy_id: "payments-approvers".into(),
        };
        assert_eq!(
            path_under(leaf, "a", &tenant_policy),
            Ok(vec!["tenant_policy:payments-approvers".to_owned()])
        );
        assert_eq!(
            path_under(
                ApprovalRule::TenantPolicy {
                    policy_id: "other".into()
                },
                "a",
                &tenant_policy
            ),
            unauthorized
        );

        let external = ApproverMemberships {
            external_systems: BTreeSet::from(["servicenow".to_owned()]),
            ..member(&[])
        };
        let leaf = ApprovalRule::ExternalSystem {
            system: "servicenow".into(),
        };
        assert_eq!(
            path_under(leaf, "a", &external),
            Ok(vec!["external_system:servicenow".to_owned()])
        );
        assert_eq!(
            path_under(
                ApprovalRule::ExternalSystem {
                    system: "jira".into()
                },
                "a",
                &external
            ),
            unauthorized
        );

        assert_eq!(
            path_under(role("finance"), "a", &member(&["legal"])),
            unauthorized
        );
    }

    #[test]
    fn a_delegated_leaf_needs_a_grant_of_its_scope_covering_its_bounds() {
        let leaf = || ApprovalRule::DelegatedAuthority {
            scope: "payments".into(),
            max_risk: Some(RiskLevel::High),
            max_value: Some(1_000),
        };
        let grant = |scope: &str, max_risk, max_value| ApproverMemberships {
            delegated: vec![DelegatedScope {
                scope: scope.to_owned(),
                max_risk,
                max_value,
            }],
            ..member(&[])
        };
        let label = "delegated_authority:payments;max_risk=high;max_value=1000".to_owned();
        assert_eq!(
            path_under(leaf(), "d", &grant("payments", None, None)),
            Ok(vec![label.clone()])
        );
        assert_eq!(
            path_under(
                leaf(),
                "d",
                &grant("payments", Some(RiskLevel::High), Some(1_000))
            ),
            Ok(vec![label.clone()])
        );
        assert_eq!(
            path_under(
                leaf(),
                "d",
                &grant("payments", Some(RiskLevel::Critical), Some(5_000))
            ),
            Ok(vec![label])
        );
        let unauthorized = Err(codes::POLICY_APPROVER_UNAUTHORIZED.to_owned());
        assert_eq!(
            path_under(
                leaf(),
                "d",
                &grant("payments", Some(RiskLevel::Medium), None)
            ),
            unauthorized,
            "risk not covered"
        );
        assert_eq!(
            path_under(leaf(), "d", &grant("payments", None, Some(500))),
            unauthorized,
            "value not covered"
        );
        assert_eq!(
            path_under(leaf(), "d", &grant("refunds", None, None)),
            unauthorized,
            "other scope"
        );

        let unbounded = ApprovalRule::DelegatedAuthority {
            scope: "payments".into(),
            max_risk: None,
            max_value: None,
        };
        assert_eq!(
            path_under(
                unbounded,
                "d",
                &grant("payments", Some(RiskLevel::Low), Some(1))
            ),
            Ok(vec!["delegated_authority:payments".to_owned()]),
            "a leaf without bounds asks nothing of the grant's"
        );
    }

    #[test]
    fn the_tenant_policy_selector_means_a_vouched_member_of_the_request_tenant() {
        let selector = ApprovalPolicy {
            approver_selector: ApproverSelector::TenantPolicy,
            ..policy(None)
        };
        let approved = accepted(approve(&record(selector.clone()), "alice", &member(&[])));
        assert_eq!(approved.decisions[0].authority_path, ["tenant_policy"]);
        assert_eq!(approved.status, ApprovalStatus::Approved);

        let transport_only = ApproverMemberships {
            roles: BTreeSet::from(["x".to_owned()]),
            ..ApproverMemberships::default()
        };
        assert_eq!(
            refused(approve(&record(selector.clone()), "alice", &transport_only)),
            codes::POLICY_APPROVER_UNAUTHORIZED,
            "the authority itself must name the tenant"
        );

        // A request made without a tenant is decided by approvers without one; one whose
        // transport verified a tenant is told it does not exist, as its views tell them.
        let mut untenanted = record(selector);
        untenanted.tenant_id = None;
        let untenanted_approver = |memberships: &ApproverMemberships| {
            apply_decision(
                &untenanted,
                decision(&untenanted, "alice", Approved),
                &TrustedContext::new(
                    Principal::new("alice", PrincipalKind::Human),
                    "https://idp.example",
                ),
                memberships,
                NOW,
            )
        };
        assert_eq!(
            accepted(untenanted_approver(&transport_only)).status,
            ApprovalStatus::Approved
        );
        assert_eq!(
            refused(untenanted_approver(&ApproverMemberships::default())),
            codes::POLICY_APPROVER_UNAUTHORIZED
        );
        assert_eq!(
            refused(approve(&untenanted, "alice", &transport_only)),
            codes::POLICY_APPROVAL_NOT_FOUND
        );
    }

    // ---- Checks -------------------------------------------------------------------------------

    #[test]
    fn self_approval_is_refused_unless_the_policy_allows_it() {
        let finance = member(&["finance"]);
        let with_duties = |duties: SeparationOfDuties| {
            record(ApprovalPolicy {
                separation_of_duties: duties,
                ..policy(None)
            })
        };
        let requester = codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER;

        assert_eq!(
            refused(approve(
                &with_duties(SeparationOfDuties::default()),
                "requester",
                &finance
            )),
            requester
        );
        let allowed = SeparationOfDuties {
            allow_self_approval: true,
            ..SeparationOfDuties::default()
        };
        assert_eq!(
            accepted(approve(&with_duties(allowed), "requester", &finance)).status,
            ApprovalStatus::Approved
        );
        let contradictory = SeparationOfDuties {
            allow_self_approval: true,
            requester_must_differ: true,
            operator_must_differ: false,
        };
        assert_eq!(
            refused(approve(&with_duties(contradictory), "requester", &finance)),
            requester,
            "the stricter flag wins"
        );
        assert_eq!(
            accepted(decide(
                &with_duties(contradictory),
                "requester",
                Denied,
                &finance
            ))
            .status,
            ApprovalStatus::Denied,
            "a requester may still withdraw by denying"
        );
    }

    #[test]
    fn the_operator_may_not_approve_when_duties_say_so() {
        let finance = member(&["finance"]);
        let operator = SeparationOfDuties {
            operator_must_differ: true,
            ..SeparationOfDuties::default()
        };
        let strict = record(ApprovalPolicy {
            separation_of_duties: operator,
            ..policy(None)
        });
        assert_eq!(
            refused(approve(&strict, "svc_operator", &finance)),
            codes::POLICY_SEPARATION_OF_DUTIES_OPERATOR
        );
        assert_eq!(
            accepted(approve(&strict, "alice", &finance)).status,
            ApprovalStatus::Approved
        );
        assert_eq!(
            accepted(approve(&record(policy(None)), "svc_operator", &finance)).status,
            ApprovalStatus::Approved
        );
    }

    #[test]
    fn approvals_carry_the_required_evidence_and_denials_need_none() {
        let evidence = ApprovalPolicy {
            evidence_requirements: vec![
                EvidenceRequirement::Reason,
                EvidenceRequirement::ExternalTicket,
            ],
            ..policy(None)
        };
        let record = record(evidence);
        let finance = member(&["finance"]);
        let ticket = EvidenceArtifact {
            id: "CHG-42".to_owned(),
            kind: "external_ticket".to_owned(),
            uri: None,
            hash: None,
            redacted: false,
        };
        let context = context("alice");

        let error = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &context,
            &finance,
            NOW,
        )
        .expect_err("no ticket");
        assert_eq!(error.code, codes::POLICY_APPROVAL_EVIDENCE_MISSING);
        assert_eq!(
            error
                .details
                .as_ref()
                .map(|d| d["missing_evidence"].clone()),
            Some(json!(["external_ticket"]))
        );

        let no_reason = ApprovalDecision {
            reason: None,
            evidence: vec![ticket.clone()],
            ..decision(&record, "alice", Approved)
        };
        let error =
            apply_decision(&record, no_reason, &context, &finance, NOW).expect_err("no reason");
        assert_eq!(
            error
                .details
                .as_ref()
                .map(|d| d["missing_evidence"].clone()),
            Some(json!(["reason"]))
        );

        let wrong_kind = EvidenceArtifact {
            kind: "attachment".to_owned(),
            ..ticket.clone()
        };
        let mislabelled = ApprovalDecision {
            evidence: vec![wrong_kind],
            ..decision(&record, "alice", Approved)
        };
        assert_eq!(
            refused(apply_decision(
                &record,
                mislabelled,
                &context,
                &finance,
                NOW
            )),
            codes::POLICY_APPROVAL_EVIDENCE_MISSING
        );

        let complete = ApprovalDecision {
            evidence: vec![ticket],
            ..decision(&record, "alice", Approved)
        };
        assert_eq!(
            accepted(apply_decision(&record, complete, &context, &finance, NOW)).status,
            ApprovalStatus::Approved
        );

        let bare_denial = ApprovalDecision {
            reason: None,
            ..decision(&record, "alice", Denied)
        };
        assert_eq!(
            accepted(apply_decision(
                &record,
                bare_denial,
                &context,
                &finance,
                NOW
            ))
            .status,
            ApprovalStatus::Denied
        );
    }

    #[test]
    fn the_approver_must_be_the_authenticated_principal() {
        let record = record(policy(None));
        let spoofed = decision(&record, "ceo", Approved);
        let error = apply_decision(
            &record,
            spoofed,
            &context("alice"),
            &member(&["finance"]),
            NOW,
        )
        .expect_err("identity mismatch");
        assert_eq!(error.code, codes::POLICY_APPROVER_IDENTITY_MISMATCH);
        assert_eq!(error.category, ErrorCategory::Policy);
        assert_eq!(error.retryable, Some(false));
        assert_eq!(
            error.source,
            Some(json!({ "component": "aip-connector.approval" }))
        );
        assert_eq!(
            error.details,
            Some(json!({ "approval_id": record.approval_id }))
        );
    }

    #[test]
    fn the_approver_must_belong_to_the_request_tenant() {
        let record = record(policy(None));
        let mismatch = codes::POLICY_APPROVER_TENANT_MISMATCH;
        let roles_only = ApproverMemberships {
            tenant_id: None,
            ..member(&["finance"])
        };

        let elsewhere = context("alice").with_tenant(VerifiedTenant::new("tenant_other"));
        let result = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &elsewhere,
            &roles_only,
            NOW,
        );
        assert_eq!(
            refused(result),
            codes::POLICY_APPROVAL_NOT_FOUND,
            "an approver of another tenant learns nothing about the request"
        );
        // Not even its state: a closed request answers the same.
        let closed = ApprovalRecord {
            status: ApprovalStatus::Denied,
            ..record.clone()
        };
        let result = apply_decision(
            &closed,
            decision(&closed, "alice", Approved),
            &elsewhere,
            &roles_only,
            NOW,
        );
        assert_eq!(refused(result), codes::POLICY_APPROVAL_NOT_FOUND);

        let authority_elsewhere = ApproverMemberships {
            tenant_id: Some("tenant_other".to_owned()),
            ..member(&["finance"])
        };
        assert_eq!(
            refused(approve(&record, "alice", &authority_elsewhere)),
            mismatch,
            "the authority's tenant wins"
        );

        let nowhere = TrustedContext::new(Principal::new("alice", PrincipalKind::Human), "idp");
        let result = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &nowhere,
            &roles_only,
            NOW,
        );
        assert_eq!(
            refused(result),
            mismatch,
            "an unknown tenant is not the request's"
        );

        let result = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &nowhere,
            &member(&["finance"]),
            NOW,
        );
        assert_eq!(
            accepted(result).status,
            ApprovalStatus::Approved,
            "the authority vouches for the tenant"
        );
    }

    #[test]
    fn a_decision_for_another_request_is_refused() {
        let record = record(policy(None));
        let other = ApprovalDecision {
            approval_id: ApprovalId::new(),
            ..decision(&record, "alice", Approved)
        };
        let result = apply_decision(
            &record,
            other,
            &context("alice"),
            &member(&["finance"]),
            NOW,
        );
        assert_eq!(refused(result), codes::POLICY_APPROVAL_MISMATCH);
    }

    #[test]
    fn malformed_decisions_are_refused() {
        let record = record(policy(None));
        let finance = member(&["finance"]);
        let invalid = codes::POLICY_APPROVAL_DECISION_INVALID;
        assert_eq!(
            refused(decide(&record, "alice", Expired, &finance)),
            invalid
        );
        let blank_reason = ApprovalDecision {
            reason: Some("  ".to_owned()),
            ..decision(&record, "alice", Approved)
        };
        assert_eq!(
            refused(apply_decision(
                &record,
                blank_reason,
                &context("alice"),
                &finance,
                NOW
            )),
            invalid
        );
        let blank_id = ApprovalDecision {
            decision_id: Some(String::new()),
            ..decision(&record, "alice", Approved)
        };
        assert_eq!(
            refused(apply_decision(
                &record,
                blank_id,
                &context("alice"),
                &finance,
                NOW
            )),
            invalid
        );
    }

    #[test]
    fn a_decision_against_another_policy_is_refused() {
        let record = record(policy(None));
        let finance = member(&["finance"]);
        let stale = ApprovalDecision {
            policy_hash: Some("0".repeat(64)),
            ..decision(&record, "alice", Approved)
        };
        let result = apply_decision(&record, stale, &context("alice"), &finance, NOW);
        assert_eq!(refused(result), codes::POLICY_APPROVAL_HASH_MISMATCH);
        let current = ApprovalDecision {
            policy_hash: Some(record.policy_hash.clone()),
            ..decision(&record, "alice", Approved)
        };
        assert!(apply_decision(&record, current, &context("alice"), &finance, NOW).is_ok());
    }

    #[test]
    fn accepted_decisions_are_stamped_from_trusted_values() {
        let record = record(policy(None));
        let mut sent = decision(&record, "alice", Approved);
        sent.approver.display_name = Some("The CEO".to_owned());
        sent.authority_path = vec!["role:ceo".to_owned()];
        let stored = accepted(apply_decision(
            &record,
            sent,
            &context("alice"),
            &member(&["finance"]),
            NOW,
        ));
        let stamped = &stored.decisions[0];
        assert_eq!(stamped.approver, context("alice").principal);
        assert_eq!(stamped.authority_path, ["role:finance"]);
        assert_eq!(
            stamped.policy_hash.as_deref(),
            Some(record.policy_hash.as_str())
        );
        assert_eq!(Some(stamped.decided_at), trusted_time(NOW));
        assert!(
            stamped
                .decision_id
                .as_deref()
                .is_some_and(|id| id.starts_with("dec_") && id.len() == 36)
        );
        assert_eq!(
            stored.version, record.version,
            "apply_decision does not store"
        );
    }

    #[test]
    fn a_replayed_decision_changes_nothing_and_a_reused_id_is_refused() {
        let record = record(ApprovalPolicy {
            minimum_distinct_principals: 2,
            ..policy(None)
        });
        let finance = member(&["finance"]);
        let first = ApprovalDecision {
            decision_id: Some("d-1".to_owned()),
            ..decision(&record, "alice", Approved)
        };
        let once = accepted(apply_decision(
            &record,
            first.clone(),
            &context("alice"),
            &finance,
            NOW,
        ));
        let again = accepted(apply_decision(
            &once,
            first.clone(),
            &context("alice"),
            &finance,
            NOW + 5,
        ));
        assert_eq!(again, once);
        let reused = ApprovalDecision {
            decision: Denied,
            ..first
        };
        assert_eq!(
            refused(apply_decision(
                &once,
                reused,
                &context("alice"),
                &finance,
                NOW
            )),
            codes::POLICY_APPROVAL_MISMATCH
        );
    }

    #[test]
    fn constraints_must_hold_on_the_stored_input() {
        let record = record(policy(None));
        let finance = member(&["finance"]);
        let with = |field: &str, operator: &str, value: Value| ApprovalDecision {
            constraints: vec![ApprovalConstraint {
                field: field.to_owned(),
                operator: operator.to_owned(),
                value,
            }],
            ..decision(&record, "alice", Approved)
        };
        let run = |decision| apply_decision(&record, decision, &context("alice"), &finance, NOW);
        assert!(run(with("/amount", "lte", json!(500))).is_ok());
        assert!(run(with("currency", "in", json!(["EUR", "USD"]))).is_ok());
        assert_eq!(
            refused(run(with("/amount", "lte", json!(100)))),
            codes::POLICY_APPROVAL_CONSTRAINT_FAILED
        );
        assert_eq!(
            refused(run(with("/memo", "matches", json!("r.*")))),
            codes::POLICY_APPROVAL_CONSTRAINT_FAILED
        );
        assert_eq!(
            refused(run(with("/iban", "eq", json!("x")))),
            codes::POLICY_APPROVAL_CONSTRAINT_MISSING_FIELD
        );

        let mut redacted = record.clone();
        redacted.input_retained = false;
        redacted.action.input = Value::Null;
        let result = apply_decision(
            &redacted,
            with("/amount", "lte", json!(100)),
            &context("alice"),
            &finance,
            NOW,
        );
        assert!(
            result.is_ok(),
            "a redacted input is checked at resume, not here"
        );
    }

    #[test]
    fn constraint_operators() {
        let cases = [
            ("eq", json!(1), json!(1), true),
            ("eq", json!(1), json!(1.0), true),
            ("neq", json!(42.0), json!(42), false),
            (
                "eq",
                json!({ "a": [1, 2.5] }),
                json!({ "a": [1.0, 2.5] }),
                true,
            ),
            ("eq", json!({ "a": 1 }), json!({ "a": 1, "b": 2 }), false),
            ("eq", json!([1]), json!([1, 1]), false),
            ("contains", json!([1.0, 2.0]), json!(2), true),
            ("in", json!(42.0), json!([7, 42]), true),
            ("in", json!(42.5), json!([7, 42]), false),
            (
                "lte",
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992.0),
                false,
            ),
            (
                "gt",
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992.0),
                true,
            ),
            (
                "lt",
                json!(9_007_199_254_740_992.0),
                json!(9_007_199_254_740_993_u64),
                true,
            ),
            ("lt", json!(1), json!(1.5), true),
            ("gt", json!(-1), json!(-1.5), true),
            ("lt", json!(-2), json!(-1.5), true),
            ("eq", json!(-3), json!(-3.0), true),
            ("lt", json!(u64::MAX), json!(1e300), true),
            ("gt", json!(i64::MIN), json!(-1e300), true),
            ("gt", json!(0.5), json!(0.25), true),
            ("neq", json!("a"), json!("b"), true),
            ("lt", json!(1), json!(2), true),
            ("lt", json!(2), json!(2), false),
            ("lte", json!(2), json!(2.0), true),
            ("gt", json!(u64::MAX), json!(i64::MAX), true),
            ("gte", json!(-1), json!(0), false),
            ("gt", json!("9"), json!(1), false),
            ("contains", json!("invoice 42"), json!("42"), true),
            ("contains", json!(["a", "b"]), json!("b"), true),
            ("contains", json!({ "b": 1 }), json!("b"), false),
            ("max_length", json!("héllo"), json!(5), true),
            ("max_length", json!([1, 2, 3]), json!(2), false),
            ("min_length", json!("ab"), json!(3), false),
            ("min_length", json!(12), json!(1), false),
            ("in", json!("EUR"), json!(["EUR"]), true),
            ("in", json!("GBP"), json!(["EUR"]), false),
            ("in", json!("EUR"), json!("EUR"), false),
            ("matches", json!("x"), json!("x"), false),
        ];
        for (operator, actual, operand, expected) in cases {
            assert_eq!(
                constraint_holds(operator, &actual, &operand),
                expected,
                "{actual} {operator} {operand}"
            );
        }
    }

    // ---- Lifecycle ------------------------------------------------------------------------------

    #[test]
    fn a_denial_closes_the_request() {
        let finance = member(&["finance"]);
        let denied = accepted(decide(&record(policy(None)), "alice", Denied, &finance));
        assert_eq!(denied.status, ApprovalStatus::Denied);
        assert_eq!(
            refused(approve(&denied, "bob", &finance)),
            codes::POLICY_APPROVAL_NOT_PENDING
        );
    }

    #[test]
    fn a_revocation_names_an_approval_and_revokes_the_request() {
        let finance = member(&["finance"]);
        let approved = accepted(approve(&record(policy(None)), "alice", &finance));
        assert_eq!(approved.status, ApprovalStatus::Approved);
        assert_eq!(
            refused(approve(&approved, "bob", &finance)),
            codes::POLICY_APPROVAL_NOT_PENDING
        );

        assert_eq!(
            refused(decide(&approved, "bob", Revoked, &finance)),
            codes::POLICY_APPROVAL_REVOCATION_TARGET_REQUIRED
        );
        let revoke = |target: &str| ApprovalDecision {
            target_decision_id: Some(target.to_owned()),
            ..decision(&approved, "bob", Revoked)
        };
        let run = |decision| apply_decision(&approved, decision, &context("bob"), &finance, NOW);
        assert_eq!(
            refused(run(revoke("dec_unknown"))),
            codes::POLICY_APPROVAL_REVOCATION_TARGET_MISSING
        );
        let target = approved.decisions[0]
            .decision_id
            .clone()
            .unwrap_or_default();
        let revoked = accepted(run(revoke(&target)));
        assert_eq!(revoked.status, ApprovalStatus::Revoked);
        assert_eq!(
            refused(apply_decision(
                &revoked,
                revoke(&target),
                &context("bob"),
                &finance,
                NOW
            )),
            codes::POLICY_APPROVAL_NOT_PENDING,
            "a revoked request is closed"
        );

        let mut resumed = approved.clone();
        resumed.resumed = true;
        assert_eq!(
            refused(apply_decision(
                &resumed,
                revoke(&target),
                &context("bob"),
                &finance,
                NOW
            )),
            codes::POLICY_APPROVAL_NOT_PENDING,
            "a resumed action already ran"
        );
    }

    #[test]
    fn a_decision_after_the_ttl_is_refused_as_expired() {
        let record = record(policy(None));
        let finance = member(&["finance"]);
        let late = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &context("alice"),
            &finance,
            EXPIRY,
        );
        assert_eq!(refused(late), codes::POLICY_APPROVAL_EXPIRED);
        let just_in_time = apply_decision(
            &record,
            decision(&record, "alice", Approved),
            &context("alice"),
            &finance,
            EXPIRY - 1,
        );
        assert_eq!(accepted(just_in_time).status, ApprovalStatus::Approved);
    }

    #[test]
    fn status_precedence_is_revoked_expired_denied_approved_pending() {
        let record = record(policy(None));
        let vote = |kind| ApprovalDecision {
            authority_path: vec!["role:finance".to_owned()],
            ..decision(&record, "alice", kind)
        };
        let kinds = [Approved, Denied, Expired, Revoked];
        for subset in 0u8..16 {
            let decisions: Vec<ApprovalDecision> = (0..4)
                .filter(|bit| subset & (1 << bit) != 0)
                .map(|bit| vote(kinds[bit]))
                .collect();
            let has = |kind| decisions.iter().any(|d| d.decision == kind);
            for ttl_passed in [false, true] {
                let expected = if has(Revoked) {
                    ApprovalStatus::Revoked
                } else if ttl_passed || has(Expired) {
                    ApprovalStatus::Expired
                } else if has(Denied) {
                    ApprovalStatus::Denied
                } else if has(Approved) {
                    ApprovalStatus::Approved
                } else {
                    ApprovalStatus::Pending
                };
                let status = evaluate_status(&record.policy, &decisions, ttl_passed);
                assert_eq!(
                    status, expected,
                    "decisions {subset:04b}, ttl passed {ttl_passed}"
                );
            }
        }
        let unauthorized_vote = ApprovalDecision {
            authority_path: vec!["role:legal".to_owned()],
            ..vote(Approved)
        };
        assert_eq!(
            evaluate_status(&record.policy, &[unauthorized_vote], false),
            ApprovalStatus::Pending
        );
    }

    // ---- Service ------------------------------------------------------------------------------

    /// A memory store that yields after every read, so concurrent deciders interleave between
    /// read and compare-and-set, and counts the updates that lost.
    #[derive(Default)]
    struct RacyStore {
        inner: MemoryStore,
        lost: AtomicUsize,
    }

    #[async_trait]
    impl ApprovalStore for RacyStore {
        async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
            self.inner.insert_approval(record).await
        }

        async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
            let record = self.inner.approval(id).await;
            tokio::task::yield_now().await;
            record
        }

        async fn update_approval(
            &self,
            record: &ApprovalRecord,
            expected_version: u64,
        ) -> Result<bool, StoreError> {
            let updated = self.inner.update_approval(record, expected_version).await?;
            if !updated {
                self.lost.fetch_add(1, AtomicOrdering::SeqCst);
            }
            Ok(updated)
        }

        async fn claim_resume(
            &self,
            id: &ApprovalId,
            claim: &crate::store::ResumeClaim,
        ) -> Result<bool, StoreError> {
            self.inner.claim_resume(id, claim).await
        }

        async fn release_resume(
            &self,
            id: &ApprovalId,
            claim: &crate::store::ResumeClaim,
        ) -> Result<bool, StoreError> {
            self.inner.release_resume(id, claim).await
        }

        async fn purge_closed_approvals(
            &self,
            created_before: Millis,
            now: Millis,
            max_entries: usize,
        ) -> Result<usize, StoreError> {
            self.inner
                .purge_closed_approvals(created_before, now, max_entries)
                .await
        }
    }

    #[tokio::test]
    async fn twenty_concurrent_approvers_all_land_through_compare_and_set() {
        let store = Arc::new(RacyStore::default());
        let stored = record(ApprovalPolicy {
            minimum_distinct_principals: 20,
            ..policy(None)
        });
        store.insert_approval(&stored).await.expect("insert");
        let approvers: Vec<String> = (0..20).map(|n| format!("approver_{n}")).collect();
        let authority = Arc::new(
            approvers
                .iter()
                .fold(StaticApprovalAuthority::new(), |authority, id| {
                    authority.with(id.as_str(), member(&["finance"]))
                }),
        );
        let mut tasks = tokio::task::JoinSet::new();
        for id in &approvers {
            let (store, authority) = (store.clone(), authority.clone());
            let decision = decision(&stored, id, Approved);
            let context = context(id);
            tasks.spawn(async move {
                record_decision(
                    store.as_ref(),
                    authority.as_ref(),
                    &At::new(NOW),
                    decision,
                    &context,
                    &|_| None,
                )
                .await
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("task").expect("every decision lands");
        }
        let last = store
            .approval(&stored.approval_id)
            .await
            .expect("read")
            .expect("record");
        assert_eq!(last.decisions.len(), 20);
        assert_eq!(last.version, 20);
        assert_eq!(last.status, ApprovalStatus::Approved);
        assert!(
            store.lost.load(AtomicOrdering::SeqCst) > 0,
            "the races were real and retried"
        );
    }

    #[tokio::test]
    async fn record_decision_returns_the_stored_record_and_replays_idempotently() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let authority = StaticApprovalAuthority::new().with("alice", member(&["finance"]));
        let sent = ApprovalDecision {
            decision_id: Some("d-1".to_owned()),
            ..decision(&stored, "alice", Approved)
        };
        let first = record_decision(
            &store,
            &authority,
            &At::new(NOW),
            sent.clone(),
            &context("alice"),
            &|_| None,
        )
        .await
        .expect("decide");
        assert_eq!((first.version, first.status), (1, ApprovalStatus::Approved));
        assert_eq!(
            store.approval(&stored.approval_id).await.expect("read"),
            Some(first.clone())
        );
        let replay = record_decision(
            &store,
            &authority,
            &At::new(NOW),
            sent,
            &context("alice"),
            &|_| None,
        )
        .await
        .expect("replay");
        assert_eq!(replay, first, "nothing written twice");
    }

    #[tokio::test]
    async fn the_default_authority_vouches_for_nobody() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let error = record_decision(
            &store,
            &DenyAllApprovalAuthority,
            &At::new(NOW),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await
        .expect_err("nobody is vouched for");
        assert_eq!(error.code, codes::POLICY_APPROVER_UNAUTHORIZED);
        let unchanged = store
            .approval(&stored.approval_id)
            .await
            .expect("read")
            .expect("record");
        assert_eq!((unchanged.version, unchanged.decisions.len()), (0, 0));
    }

    #[tokio::test]
    async fn a_late_decision_stores_the_expiry() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let authority = StaticApprovalAuthority::new().with("alice", member(&["finance"]));
        let late = record_decision(
            &store,
            &authority,
            &At::new(EXPIRY),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await;
        assert_eq!(
            late.expect_err("expired").code,
            codes::POLICY_APPROVAL_EXPIRED
        );
        let after = store
            .approval(&stored.approval_id)
            .await
            .expect("read")
            .expect("record");
        assert_eq!((after.status, after.version), (ApprovalStatus::Expired, 1));
        let again = record_decision(
            &store,
            &authority,
            &At::new(EXPIRY),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await;
        assert_eq!(
            again.expect_err("closed").code,
            codes::POLICY_APPROVAL_NOT_PENDING
        );
    }

    /// An authority that takes until the approval's TTL has passed to answer.
    struct SlowAuthority {
        clock: Arc<At>,
        inner: StaticApprovalAuthority,
    }

    impl ApprovalAuthority for SlowAuthority {
        fn memberships<'a>(
            &'a self,
            approver: &'a PrincipalId,
            tenant: Option<&'a str>,
        ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>> {
            self.clock.0.store(EXPIRY, AtomicOrdering::SeqCst);
            self.inner.memberships(approver, tenant)
        }
    }

    #[test]
    fn a_delegation_reaches_the_risks_its_bound_covers() {
        let grants = |risk| {
            let mut memberships = ApproverMemberships::new();
            for max_risk in [
                None,
                Some(RiskLevel::Low),
                Some(RiskLevel::High),
                Some(RiskLevel::Critical),
            ] {
                memberships = memberships.with_delegated(DelegatedScope {
                    scope: "payments".into(),
                    max_risk,
                    max_value: None,
                });
            }
            within_risk(&mut memberships, risk);
            memberships
                .delegated
                .into_iter()
                .map(|grant| grant.max_risk)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            grants(Some(RiskLevel::High)),
            [None, Some(RiskLevel::High), Some(RiskLevel::Critical)]
        );
        assert_eq!(
            grants(Some(RiskLevel::Low)),
            [
                None,
                Some(RiskLevel::Low),
                Some(RiskLevel::High),
                Some(RiskLevel::Critical)
            ]
        );
        assert_eq!(
            grants(None),
            [None, Some(RiskLevel::Critical)],
            "a capability of unknown risk: only a bound that covers every risk reaches it"
        );
    }

    #[tokio::test]
    async fn a_decision_is_timed_after_the_authority_answers() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let now = Arc::new(At::new(NOW));
        let authority = SlowAuthority {
            clock: Arc::clone(&now),
            inner: StaticApprovalAuthority::new().with("alice", member(&["finance"])),
        };
        let late = record_decision(
            &store,
            &authority,
            now.as_ref(),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await;
        assert_eq!(
            late.expect_err("the TTL passed while the authority looked the approver up")
                .code,
            codes::POLICY_APPROVAL_EXPIRED
        );
    }

    #[tokio::test]
    async fn expire_if_due_expires_once_and_only_after_the_ttl() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let id = &stored.approval_id;
        let early = expire_if_due(&store, id, EXPIRY - 1)
            .await
            .expect("read")
            .expect("record");
        assert_eq!((early.status, early.version), (ApprovalStatus::Pending, 0));
        let due = expire_if_due(&store, id, EXPIRY)
            .await
            .expect("expire")
            .expect("record");
        assert_eq!((due.status, due.version), (ApprovalStatus::Expired, 1));
        assert_eq!(store.approval(id).await.expect("read"), Some(due.clone()));
        let later = expire_if_due(&store, id, EXPIRY + 1)
            .await
            .expect("read")
            .expect("record");
        assert_eq!(later, due, "already expired: nothing written");
        assert_eq!(
            expire_if_due(&store, &ApprovalId::new(), EXPIRY).await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn an_approved_request_does_not_expire() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        store.insert_approval(&stored).await.expect("insert");
        let authority = StaticApprovalAuthority::new().with("alice", member(&["finance"]));
        record_decision(
            &store,
            &authority,
            &At::new(NOW),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await
        .expect("approve");
        let later = expire_if_due(&store, &stored.approval_id, EXPIRY + 1)
            .await
            .expect("read")
            .expect("record");
        assert_eq!(later.status, ApprovalStatus::Approved);
    }

    #[tokio::test]
    async fn unknown_requests_and_failing_authorities_are_reported() {
        let store = MemoryStore::new();
        let stored = record(policy(None));
        let authority = StaticApprovalAuthority::new();
        let missing = record_decision(
            &store,
            &authority,
            &At::new(NOW),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await;
        assert_eq!(
            missing.expect_err("unknown").code,
            codes::POLICY_APPROVAL_NOT_FOUND
        );

        struct Unreachable;
        impl ApprovalAuthority for Unreachable {
            fn memberships<'a>(
                &'a self,
                _: &'a PrincipalId,
                _: Option<&'a str>,
            ) -> BoxFuture<'a, Result<ApproverMemberships, ConnectorFailure>> {
                let failure = ConnectorFailure::new(
                    "directory.unavailable",
                    "directory down",
                    ErrorCategory::Temporary,
                    ConnectorOperation::Invocation,
                    "directory",
                );
                Box::pin(std::future::ready(Err(failure)))
            }
        }
        store.insert_approval(&stored).await.expect("insert");
        let down = record_decision(
            &store,
            &Unreachable,
            &At::new(NOW),
            decision(&stored, "alice", Approved),
            &context("alice"),
            &|_| None,
        )
        .await;
        let error = down.expect_err("authority down");
        assert_eq!(
            (error.code.as_str(), error.category),
            ("directory.unavailable", ErrorCategory::Temporary)
        );
        // An approver whose transport verified another tenant is told the request does not
        // exist before the authority is asked: its failure would reveal that it does.
        let stranger = TrustedContext::new(
            Principal::new("alice", PrincipalKind::Human),
            "https://idp.example",
        )
        .with_tenant(VerifiedTenant::new("tenant_other"));
        let hidden = record_decision(
            &store,
            &Unreachable,
            &At::new(NOW),
            decision(&stored, "alice", Approved),
            &stranger,
            &|_| None,
        )
        .await;
        assert_eq!(
            hidden.expect_err("another tenant").code,
            codes::POLICY_APPROVAL_NOT_FOUND
        );
    }
}
