//! `Action` (a capability invocation) and its context blocks (`aip-model.md` §4.1).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::{ExternalRef, Principal, TransactionMode};
use crate::ids::{ActionId, ApprovalId, CapabilityId, ConversationId, ProfileId, TransactionId};

/// A capability invocation.
///
/// The context blocks most calls leave out (conversation, callback, observability, compliance,
/// identity, approval) are boxed: an action stays a few hundred bytes instead of almost 3 KB, so
/// moving, sharing and freeing one on every call stays cheap. Serde reads and writes them as
/// plain objects, so the wire form is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Stable action id.
    pub id: ActionId,
    /// The capability to invoke.
    pub capability_id: CapabilityId,
    /// Input payload, checked against the capability's input schema; `null` is rejected.
    pub input: Value,
    /// Requested invocation mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ActionMode>,
    /// Replay-safe deduplication key; `""` is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Caller timeout; `0` is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Conversation the action belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Box<Conversation>>,
    /// Shared memory or context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_context: Option<Box<Value>>,
    /// Delegation chain authorizing the call; at most 10 hops.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegation_chain: Vec<DelegationEntry>,
    /// Cross-domain routing context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation: Option<Box<FederationContext>>,
    /// Where an asynchronous result is delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Box<Callback>>,
    /// Trace and span metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability: Option<Box<ObservabilityContext>>,
    /// Policy and compliance context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compliance: Option<Box<ComplianceContext>>,
    /// Tenant, account, user and credential context; hosts overwrite it with the trusted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Box<IdentityContext>>,
    /// Approval decision authorizing the call; must be `approved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Box<ApprovalDecision>>,
    /// Transactional execution context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<Box<ActionTransaction>>,
}

impl Action {
    /// An action with a fresh `act_…` id invoking `capability_id` with `input`, nothing else set.
    pub fn new(capability_id: impl Into<CapabilityId>, input: Value) -> Self {
        Self {
            id: ActionId::new(),
            capability_id: capability_id.into(),
            input,
            mode: None,
            idempotency_key: None,
            timeout_ms: None,
            conversation: None,
            memory_context: None,
            delegation_chain: Vec::new(),
            federation: None,
            callback: None,
            observability: None,
            compliance: None,
            identity: None,
            approval: None,
            transaction: None,
        }
    }

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the transaction block: an [`ActionTransaction`], or the box another action's
    /// `transaction` holds (`action.with_transaction(commit.transaction.clone().unwrap())`, no
    /// deref needed; a booking trial's `*commit.transaction…` met an E0308 inside this crate).
    pub fn with_transaction(mut self, transaction: impl Into<Box<ActionTransaction>>) -> Self {
        self.transaction = Some(transaction.into());
        self
    }

    /// Sets the approval decision that authorizes the call (a re-submission after approval):
    /// an [`ApprovalDecision`], or the box another action's `approval` holds.
    pub fn with_approval(mut self, decision: impl Into<Box<ApprovalDecision>>) -> Self {
        self.approval = Some(decision.into());
        self
    }

    /// Sets the caller timeout.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// The transaction mode, if the action carries a transaction block.
    pub fn transaction_mode(&self) -> Option<TransactionMode> {
        self.transaction.as_ref().map(|t| t.mode)
    }
}

/// Requested invocation mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionMode {
    /// Request/response.
    Sync,
    /// Accepted now, completed later.
    Async,
    /// Incremental chunks.
    Streaming,
}

/// Transaction block of an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionTransaction {
    /// Transaction mode.
    pub mode: TransactionMode,
    /// The transaction; hosts assign one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<TransactionId>,
    /// Plan to commit; required in `commit` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// Action to compensate; required in `compensate` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_for: Option<ActionId>,
}

impl ActionTransaction {
    /// A transaction block with only a mode.
    pub fn new(mode: TransactionMode) -> Self {
        Self {
            mode,
            transaction_id: None,
            plan_id: None,
            compensation_for: None,
        }
    }

    /// Names the transaction: a caller that assigns the id itself can `reconcile` it later by
    /// that id without looking it up.
    pub fn with_transaction_id(mut self, id: TransactionId) -> Self {
        self.transaction_id = Some(id);
        self
    }

    /// Names the plan a `commit` executes.
    pub fn with_plan_id(mut self, plan_id: impl Into<String>) -> Self {
        self.plan_id = Some(plan_id.into());
        self
    }

    /// A `commit` of the plan `plan_id` (the `plan_id` of a `plan` action's result).
    pub fn commit(plan_id: impl Into<String>) -> Self {
        Self::new(TransactionMode::Commit).with_plan_id(plan_id)
    }

    /// A `compensate` of the action `target`: sent with the target's capability id and the
    /// compensating handler's input, it runs the capability's compensation once per target.
    ///
    /// ```
    /// # use aip_connector_core::model::{Action, ActionTransaction};
    /// # use aip_connector_core::ids::ActionId;
    /// # let charge = ActionId::new();
    /// let refund = Action::new("cap:payments:charge", serde_json::json!({ "reason": "duplicate" }))
    ///     .with_idempotency_key("refund-order-17")
    ///     .with_transaction(ActionTransaction::compensate(charge));
    /// # assert_eq!(refund.transaction.unwrap().compensation_for.unwrap().as_str().len(), 36);
    /// ```
    pub fn compensate(target: ActionId) -> Self {
        Self {
            compensation_for: Some(target),
            ..Self::new(TransactionMode::Compensate)
        }
    }
}

/// One hop of a delegation chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationEntry {
    /// The delegating principal.
    pub from: Principal,
    /// The delegate.
    pub to: Principal,
    /// Delegated scope.
    pub scope: String,
    /// When the delegation was made.
    #[serde(with = "time::serde::rfc3339")]
    pub delegated_at: OffsetDateTime,
}

/// Cross-domain routing context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationContext {
    /// Current trust domain.
    pub trust_domain: String,
    /// Trust domains already traversed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<String>,
}

/// Where an asynchronous result is delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callback {
    /// Delivery profile.
    pub profile: ProfileId,
    /// Target URI or subject.
    pub target: String,
    /// Profile-specific delivery configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// Trace and span metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservabilityContext {
    /// Trace id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Span id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Free-form fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Value>,
}

/// Policy and compliance context.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComplianceContext {
    /// Compliance regimes that apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regimes: Vec<String>,
    /// Data classification label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_classification: Option<String>,
    /// Further policy metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// Tenant, account, user and credential context of an action. Never carries token material.
///
/// The three principals are boxed: a host writes a trusted identity into every action it runs,
/// and with them inline the context was 984 bytes to allocate and copy for a tenant and an
/// account; boxed, it is a third of that. (Boxing the credential blocks too measured no better.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityContext {
    /// Tenant boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantRef>,
    /// External account boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_account: Option<ExternalAccountRef>,
    /// External user the call is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_user: Option<ExternalUserRef>,
    /// Human who started or owns the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_actor: Option<Box<Principal>>,
    /// Service account executing the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<Box<Principal>>,
    /// Principal on whose behalf the call is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acted_on_behalf_of: Option<Box<Principal>>,
    /// Reference to credential material stored elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_ref: Option<CredentialRef>,
    /// OAuth lifecycle state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthCredentialState>,
}

/// A tenant, for policy and credential partitioning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRef {
    /// Tenant id; must not be blank.
    pub id: String,
    /// System that owns the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
}

/// An account in an external system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalAccountRef {
    /// Account id in that system; must not be blank.
    pub id: String,
    /// The system; must not be blank.
    pub system: String,
}

/// A user in an external system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalUserRef {
    /// User id in that system; must not be blank.
    pub id: String,
    /// The system; must not be blank.
    pub system: String,
}

/// Reference to credential material kept outside the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRef {
    /// Credential id or vault reference; must not be blank.
    pub id: String,
    /// Issuer or storage boundary; must not be blank.
    pub issuer: String,
    /// Scopes the credential is known to carry; blank entries are rejected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// OAuth credential state, without token material.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthCredentialState {
    /// Authorization server or provider; must not be blank.
    pub issuer: String,
    /// OAuth client id; must not be empty when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Granted scopes; blank entries are rejected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// When the token expires, if known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
    /// The token can be refreshed without a human.
    pub refresh_available: bool,
}

/// An approval decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The approval request decided.
    pub approval_id: ApprovalId,
    /// The outcome.
    pub decision: ApprovalDecisionKind,
    /// Who decided.
    pub approver: Principal,
    /// When the decision was made.
    #[serde(with = "time::serde::rfc3339")]
    pub decided_at: OffsetDateTime,
    /// Reason or comment; must not be blank when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Restrictions attached to the approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<ApprovalConstraint>,
    /// Evidence for the decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceArtifact>,
    /// Stable id, for idempotent replay of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    /// Hash of the policy the approver evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_hash: Option<String>,
    /// Authority path found by the resolver, kept as audit evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authority_path: Vec<String>,
    /// The earlier decision being revoked, for `revoked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_decision_id: Option<String>,
}

impl ApprovalDecision {
    /// A decision by `approver` on `approval_id`, made now, with nothing else set: add a reason
    /// ([`with_reason`](Self::with_reason)) when the policy requires one as evidence, and a
    /// decision id ([`with_decision_id`](Self::with_decision_id)) so a resent decision is
    /// recognised as the same one. A host stamps `decided_at` and `authority_path` itself.
    pub fn new(
        approval_id: ApprovalId,
        decision: ApprovalDecisionKind,
        approver: Principal,
    ) -> Self {
        Self {
            approval_id,
            decision,
            approver,
            decided_at: OffsetDateTime::now_utc(),
            reason: None,
            constraints: Vec::new(),
            evidence: Vec::new(),
            decision_id: None,
            policy_hash: None,
            authority_path: Vec::new(),
            target_decision_id: None,
        }
    }

    /// The first approving decision of `decisions`: what a client attaches to the re-submission
    /// of an approved action (with a quorum, any approving decision of the request will do).
    pub fn first_approving(decisions: &[ApprovalDecision]) -> Option<&ApprovalDecision> {
        decisions
            .iter()
            .find(|d| d.decision == ApprovalDecisionKind::Approved)
    }

    /// An approval of `approval_id` by `approver` (see [`new`](Self::new)).
    pub fn approve(approval_id: ApprovalId, approver: Principal) -> Self {
        Self::new(approval_id, ApprovalDecisionKind::Approved, approver)
    }

    /// A denial of `approval_id` by `approver` (see [`new`](Self::new)).
    pub fn deny(approval_id: ApprovalId, approver: Principal) -> Self {
        Self::new(approval_id, ApprovalDecisionKind::Denied, approver)
    }

    /// Sets the reason (a policy that requires `reason` evidence refuses a decision without it).
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets the stable decision id that makes a resent decision a replay, not a second vote.
    pub fn with_decision_id(mut self, decision_id: impl Into<String>) -> Self {
        self.decision_id = Some(decision_id.into());
        self
    }
}

/// Outcome of an approval decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecisionKind {
    /// Granted.
    Approved,
    /// Denied.
    Denied,
    /// Expired before a decision.
    Expired,
    /// Revoked after being granted.
    Revoked,
}

/// A restriction attached to an approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalConstraint {
    /// Field or path constrained; must not be blank.
    pub field: String,
    /// Operator, e.g. `lte`, `eq` or `matches`; must not be blank.
    pub operator: String,
    /// Operand.
    pub value: Value,
}

/// An evidence artifact for approval and audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceArtifact {
    /// Stable artifact id; must not be blank.
    pub id: String,
    /// Evidence kind; must not be blank.
    pub kind: String,
    /// Where the artifact can be fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Integrity hash of the artifact or its redacted view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The artifact was redacted.
    pub redacted: bool,
}

/// A user-facing conversation thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// Stable conversation id.
    pub id: ConversationId,
    /// Channel metadata.
    pub channel: Value,
    /// Conversation state.
    pub status: ConversationStatus,
    /// Product-specific ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_refs: Vec<ExternalRef>,
    /// Customer or contact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<Principal>,
    /// Human or bot assignee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<Principal>,
    /// Priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<ConversationPriority>,
    /// Labels or tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Extension metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// State of a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationStatus {
    /// Open.
    Open,
    /// Waiting on someone.
    Pending,
    /// Resolved.
    Resolved,
    /// Snoozed until later.
    Snoozed,
    /// Archived.
    Archived,
}

/// Priority of a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationPriority {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Urgent.
    Urgent,
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::model::PrincipalKind;

    #[test]
    fn a_transaction_block_is_built_from_its_parts() {
        let id = TransactionId::new();
        let block = ActionTransaction::new(TransactionMode::Commit)
            .with_transaction_id(id.clone())
            .with_plan_id("plan:1");
        assert_eq!(
            block,
            ActionTransaction {
                mode: TransactionMode::Commit,
                transaction_id: Some(id),
                plan_id: Some("plan:1".to_owned()),
                compensation_for: None,
            }
        );
    }

    #[test]
    fn another_action_s_boxed_transaction_is_taken_as_it_is() {
        let commit = Action::new("cap:hotel:book", json!({}))
            .with_transaction(ActionTransaction::new(TransactionMode::Commit).with_plan_id("p"));
        let resent = Action::new("cap:hotel:book", json!({}))
            .with_transaction(commit.transaction.clone().expect("a transaction"));
        assert_eq!(resent.transaction, commit.transaction);
    }

    #[test]
    fn a_decision_built_by_its_constructors_has_only_what_was_said() {
        let id = ApprovalId::trusted("appr_0190f2a6c8d47b21a5e3d9c0f1b2a3c4");
        let approver = principal("user:alice");
        let approved = ApprovalDecision::approve(id.clone(), approver.clone())
            .with_reason("checked the order")
            .with_decision_id("dec-1");
        assert_eq!(approved.decision, ApprovalDecisionKind::Approved);
        assert_eq!(approved.reason.as_deref(), Some("checked the order"));
        assert_eq!(approved.decision_id.as_deref(), Some("dec-1"));
        assert!(approved.constraints.is_empty() && approved.evidence.is_empty());
        assert!(approved.policy_hash.is_none() && approved.target_decision_id.is_none());
        let denied = ApprovalDecision::deny(id.clone(), approver.clone());
        assert_eq!(
            denied,
            ApprovalDecision {
                decided_at: denied.decided_at,
                ..ApprovalDecision::new(id, ApprovalDecisionKind::Denied, approver)
            }
        );
        // It is a wire value like any other.
        let text = serde_json::to_string(&approved).unwrap();
        assert_eq!(
            serde_json::from_str::<ApprovalDecision>(&text).unwrap(),
            approved
        );
    }

    /// Hosts move, share and free an action on every call, and every move copies all of it.
    /// Before the rare blocks were boxed an action was 2,848 bytes; with `memory_context`,
    /// `federation` and `transaction` still inline, 440.
    #[test]
    fn an_action_stays_small() {
        let identity = std::mem::size_of::<IdentityContext>();
        assert!(identity <= 336, "IdentityContext is {identity} bytes");
        let size = std::mem::size_of::<Action>();
        assert!(size <= 264, "Action is {size} bytes");
    }

    fn principal(id: &str) -> Principal {
        Principal::new(id, PrincipalKind::Human)
    }

    /// Every one of the 16 keys set, so the key-order test covers them all.
    fn full_action() -> Action {
        Action {
            id: ActionId::trusted("act_1"),
            capability_id: "cap:calendar:booking:create".into(),
            input: json!({"attendee": "ada"}),
            mode: Some(ActionMode::Async),
            idempotency_key: Some("k1".into()),
            timeout_ms: Some(5000),
            conversation: Some(Box::new(Conversation {
                id: ConversationId::trusted("conv_1"),
                channel: json!({"kind": "email"}),
                status: ConversationStatus::Snoozed,
                external_refs: vec![ExternalRef {
                    system: "chatwoot".into(),
                    ref_type: "conversation".into(),
                    id: "42".into(),
                }],
                contact: Some(Principal::new("contact:1", PrincipalKind::Contact)),
                assignee: Some(principal("human:ops")),
                priority: Some(ConversationPriority::Urgent),
                labels: vec!["vip".into()],
                metadata: Some(json!({"m": true})),
            })),
            memory_context: Some(Box::new(json!(["note"]))),
            delegation_chain: vec![DelegationEntry {
                from: principal("human:ada"),
                to: Principal::new("agent:a", PrincipalKind::Agent),
                scope: "calendar:write".into(),
                delegated_at: datetime!(2026-01-02 03:04:05 UTC),
            }],
            federation: Some(Box::new(FederationContext {
                trust_domain: "example.org".into(),
                hops: vec!["a.example".into()],
            })),
            callback: Some(Box::new(Callback {
                profile: "aip.http.webhook.v1".into(),
                target: "https://cb.example/x".into(),
                metadata: Some(json!({"auth": "ref:1"})),
            })),
            observability: Some(Box::new(ObservabilityContext {
                trace_id: Some("t".into()),
                span_id: Some("s".into()),
                fields: Some(json!({"f": 1})),
            })),
            compliance: Some(Box::new(ComplianceContext {
                regimes: vec!["gdpr".into()],
                data_classification: Some("internal".into()),
                metadata: Some(json!({"c": 1})),
            })),
            identity: Some(Box::new(full_identity())),
            approval: Some(Box::new(full_approval())),
            transaction: Some(Box::new(ActionTransaction {
                mode: TransactionMode::Compensate,
                transaction_id: Some(TransactionId::trusted("txn_1")),
                plan_id: Some("plan:txn_1".into()),
                compensation_for: Some(ActionId::trusted("act_0")),
            })),
        }
    }

    fn full_identity() -> IdentityContext {
        IdentityContext {
            tenant: Some(TenantRef {
                id: "t1".into(),
                system: Some("aip".into()),
            }),
            external_account: Some(ExternalAccountRef {
                id: "acc".into(),
                system: "cal".into(),
            }),
            external_user: Some(ExternalUserRef {
                id: "u".into(),
                system: "cal".into(),
            }),
            human_actor: Some(Box::new(principal("human:ada"))),
            service_account: Some(Box::new(Principal::new("svc:cal", PrincipalKind::Service))),
            acted_on_behalf_of: Some(Box::new(principal("human:bob"))),
            credential_ref: Some(CredentialRef {
                id: "vault:1".into(),
                issuer: "vault".into(),
                scopes: vec!["calendar.write".into()],
            }),
            oauth: Some(OAuthCredentialState {
                issuer: "idp".into(),
                client_id: Some("client".into()),
                scopes: vec!["calendar".into()],
                expires_at: Some(datetime!(2026-01-03 00:00:00 UTC)),
                refresh_available: true,
            }),
        }
    }

    fn full_approval() -> ApprovalDecision {
        ApprovalDecision {
            approval_id: ApprovalId::trusted("appr_1"),
            decision: ApprovalDecisionKind::Approved,
            approver: principal("human:boss"),
            decided_at: datetime!(2026-01-02 03:00:00 UTC),
            reason: Some("ok".into()),
            constraints: vec![ApprovalConstraint {
                field: "/amount".into(),
                operator: "lte".into(),
                value: json!(100),
            }],
            evidence: vec![EvidenceArtifact {
                id: "ev1".into(),
                kind: "ticket".into(),
                uri: Some("https://t/1".into()),
                hash: Some("sha256:00".into()),
                redacted: false,
            }],
            decision_id: Some("d1".into()),
            policy_hash: Some("sha256:pol".into()),
            authority_path: vec!["role:ops".into()],
            target_decision_id: Some("d0".into()),
        }
    }

    #[test]
    fn full_action_round_trips_with_all_16_keys_in_order() {
        let action = full_action();
        let text = serde_json::to_string(&action).unwrap();
        let expected = concat!(
            r#"{"id":"act_1","capability_id":"cap:calendar:booking:create","#,
            r#""input":{"attendee":"ada"},"mode":"async","idempotency_key":"k1","timeout_ms":5000,"#,
            r#""conversation":{"id":"conv_1","channel":{"kind":"email"},"status":"snoozed","#,
            r#""external_refs":[{"system":"chatwoot","type":"conversation","id":"42"}],"#,
            r#""contact":{"id":"contact:1","kind":"contact"},"assignee":{"id":"human:ops","kind":"human"},"#,
            r#""priority":"urgent","labels":["vip"],"metadata":{"m":true}},"#,
            r#""memory_context":["note"],"#,
            r#""delegation_chain":[{"from":{"id":"human:ada","kind":"human"},"#,
            r#""to":{"id":"agent:a","kind":"agent"},"scope":"calendar:write","#,
            r#""delegated_at":"2026-01-02T03:04:05Z"}],"#,
            r#""federation":{"trust_domain":"example.org","hops":["a.example"]},"#,
            r#""callback":{"profile":"aip.http.webhook.v1","target":"https://cb.example/x","metadata":{"auth":"ref:1"}},"#,
            r#""observability":{"trace_id":"t","span_id":"s","fields":{"f":1}},"#,
            r#""compliance":{"regimes":["gdpr"],"data_classification":"internal","metadata":{"c":1}},"#,
            r#""identity":{"tenant":{"id":"t1","system":"aip"},"external_account":{"id":"acc","system":"cal"},"#,
            r#""external_user":{"id":"u","system":"cal"},"human_actor":{"id":"human:ada","kind":"human"},"#,
            r#""service_account":{"id":"svc:cal","kind":"service"},"acted_on_behalf_of":{"id":"human:bob","kind":"human"},"#,
            r#""credential_ref":{"id":"vault:1","issuer":"vault","scopes":["calendar.write"]},"#,
            r#""oauth":{"issuer":"idp","client_id":"client","scopes":["calendar"],"#,
            r#""expires_at":"2026-01-03T00:00:00Z","refresh_available":true}},"#,
            r#""approval":{"approval_id":"appr_1","decision":"approved","approver":{"id":"human:boss","kind":"human"},"#,
            r#""decided_at":"2026-01-02T03:00:00Z","reason":"ok","#,
            r#""constraints":[{"field":"/amount","operator":"lte","value":100}],"#,
            r#""evidence":[{"id":"ev1","kind":"ticket","uri":"https://t/1","hash":"sha256:00","redacted":false}],"#,
            r#""decision_id":"d1","policy_hash":"sha256:pol","authority_path":["role:ops"],"target_decision_id":"d0"},"#,
            r#""transaction":{"mode":"compensate","transaction_id":"txn_1","plan_id":"plan:txn_1","compensation_for":"act_0"}}"#
        );
        assert_eq!(text, expected);
        let object: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "capability_id",
                "input",
                "mode",
                "idempotency_key",
                "timeout_ms",
                "conversation",
                "memory_context",
                "delegation_chain",
                "federation",
                "callback",
                "observability",
                "compliance",
                "identity",
                "approval",
                "transaction",
            ]
        );
        let back: Action = serde_json::from_str(&text).unwrap();
        assert_eq!(back, action);
    }

    #[test]
    fn minimal_action_omits_absent_fields_and_keeps_null_input() {
        let mut action = Action::new("cap:x", Value::Null);
        action.id = ActionId::trusted("act_2");
        assert_eq!(
            serde_json::to_string(&action).unwrap(),
            r#"{"id":"act_2","capability_id":"cap:x","input":null}"#
        );
        let back: Action =
            serde_json::from_str(r#"{"id":"act_2","capability_id":"cap:x","input":null}"#).unwrap();
        assert_eq!(back, action);
    }

    #[test]
    fn input_is_required_but_optional_keys_accept_null() {
        assert!(serde_json::from_str::<Action>(r#"{"id":"a","capability_id":"c"}"#).is_err());
        let action: Action = serde_json::from_str(
            r#"{"id":"a","capability_id":"c","input":{},"mode":null,"identity":null}"#,
        )
        .unwrap();
        assert_eq!(action.mode, None);
        assert_eq!(action.identity, None);
    }

    #[test]
    fn null_is_rejected_for_vec_fields() {
        let err = serde_json::from_str::<Action>(
            r#"{"id":"a","capability_id":"c","input":{},"delegation_chain":null}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("invalid type: null"), "{err}");
        assert!(
            serde_json::from_str::<FederationContext>(r#"{"trust_domain":"d","hops":null}"#)
                .is_err()
        );
    }

    #[test]
    fn required_bools_have_no_default() {
        assert!(serde_json::from_str::<EvidenceArtifact>(r#"{"id":"e","kind":"k"}"#).is_err());
        assert!(serde_json::from_str::<OAuthCredentialState>(r#"{"issuer":"i"}"#).is_err());
        let evidence: EvidenceArtifact =
            serde_json::from_str(r#"{"id":"e","kind":"k","redacted":true}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&evidence).unwrap(),
            r#"{"id":"e","kind":"k","redacted":true}"#
        );
    }

    #[test]
    fn new_generates_an_act_id_and_builders_set_fields() {
        let action = Action::new("cap:x", json!({}))
            .with_idempotency_key("k")
            .with_timeout_ms(10)
            .with_transaction(ActionTransaction::new(TransactionMode::Plan));
        assert!(ActionId::parse(action.id.as_str()).is_ok());
        assert_eq!(action.idempotency_key.as_deref(), Some("k"));
        assert_eq!(action.timeout_ms, Some(10));
        assert_eq!(action.transaction_mode(), Some(TransactionMode::Plan));
        assert_ne!(Action::new("cap:x", json!({})).id, action.id);
    }

    #[test]
    fn unit_enums_use_snake_case() {
        assert_eq!(
            serde_json::to_string(&ConversationStatus::Archived).unwrap(),
            r#""archived""#
        );
        assert_eq!(
            serde_json::to_string(&ApprovalDecisionKind::Revoked).unwrap(),
            r#""revoked""#
        );
        assert!(serde_json::from_str::<ActionMode>(r#""Sync""#).is_err());
    }
}
