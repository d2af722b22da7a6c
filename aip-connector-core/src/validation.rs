//! Pure core validation of actions and action results (`aip-model.md` §6.3, §6.4).
//!
//! These are the checks upstream's `aip-core` runs on every action body before any runtime logic
//! (also on `delegation_request.child_action` and `transaction_request.action`). Each function
//! stops at the **first** error, in upstream's order, and the [`ValidationError`] texts are
//! upstream's exactly, so a peer sees the same message from either implementation.
//!
//! [`validate_envelope`] does not read `delegation_request` bodies (they arrive as
//! [`MessageBody::Other`]): call [`validate_action`] on the child action yourself.

use crate::model::{
    AIP_VERSION, Action, ActionResult, ActionResultStatus, ApprovalDecision, ApprovalDecisionKind,
    Envelope, IdentityContext, MessageBody, MessageType, TransactionMode,
    TransactionProtocolStatus, TransactionQueryRequest, TransactionRequest, TransactionResult,
};

/// Most hops a delegation chain may have.
pub const MAX_DELEGATION_HOPS: usize = 10;

/// Why an action or result was refused. `Display` is upstream's text, prefix included.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// A required value is absent or blank; carries the dotted path upstream names.
    #[error("missing required field `{0}`")]
    MissingField(String),
    /// `action.input` is JSON `null`.
    #[error("validation failed: action.input must not be null")]
    NullInput,
    /// `action.idempotency_key` is `""`.
    #[error("validation failed: action.idempotency_key must not be empty")]
    EmptyIdempotencyKey,
    /// `action.timeout_ms` is `0`.
    #[error("validation failed: action.timeout_ms must be greater than zero")]
    ZeroTimeout,
    /// `action.delegation_chain` has more than [`MAX_DELEGATION_HOPS`] entries.
    #[error("validation failed: action.delegation_chain must not exceed 10 hops")]
    DelegationChainTooLong {
        /// How many hops the chain has.
        hops: usize,
    },
    /// A credential reference lists a blank scope.
    #[error("validation failed: {path}.credential_ref.scopes must not contain empty values")]
    BlankCredentialScope {
        /// Path of the identity context, e.g. `action.identity`.
        path: String,
    },
    /// The OAuth state lists a blank scope.
    #[error("validation failed: {path}.oauth.scopes must not contain empty values")]
    BlankOAuthScope {
        /// Path of the identity context, e.g. `action.identity`.
        path: String,
    },
    /// The OAuth client id is present but blank.
    #[error("validation failed: {path}.oauth.client_id must not be empty")]
    BlankOAuthClientId {
        /// Path of the identity context, e.g. `action.identity`.
        path: String,
    },
    /// An approval decision's reason is present but blank.
    #[error("validation failed: approval_decision.reason must not be empty")]
    BlankApprovalReason,
    /// The action carries an approval decision that is not `approved`.
    #[error("validation failed: action.approval must contain an approved decision")]
    ApprovalNotApproved {
        /// The decision carried.
        decision: ApprovalDecisionKind,
    },
    /// A `commit` action names no plan.
    #[error("validation failed: action.transaction.plan_id is required for commit mode")]
    CommitWithoutPlan,
    /// A `compensate` action names no action to compensate.
    #[error(
        "validation failed: action.transaction.compensation_for is required for compensate mode"
    )]
    CompensateWithoutTarget,
    /// A `failed` result carries no error.
    #[error("validation failed: failed action_result must include error")]
    FailedResultWithoutError,
    /// A transaction request names another transaction than its action.
    #[error(
        "validation failed: transaction_request transaction_id must match action.transaction.transaction_id"
    )]
    TransactionRequestIdMismatch,
    /// A transaction result's block names another transaction than the result, or none.
    #[error(
        "validation failed: transaction_result transaction.transaction_id must match transaction_id"
    )]
    TransactionResultIdMismatch,
    /// A `failed` transaction result carries neither an error nor a failed result with one.
    #[error("validation failed: failed transaction_result must include error")]
    FailedTransactionWithoutError,
    /// A `planned` transaction result carries no plan, or a plan of another transaction, or
    /// (when it carries an action result) of another action. The capability is not compared.
    #[error("validation failed: planned transaction_result must include a matching plan")]
    PlannedTransactionWithoutPlan,
    /// The envelope speaks another protocol version than [`AIP_VERSION`].
    #[error("unsupported AIP version `{0}`")]
    UnsupportedVersion(String),
    /// The body is not the one the message type declares.
    #[error("message body does not match declared message type `{0}`")]
    MessageTypeMismatch(MessageType),
    /// The envelope's own idempotency key is `""`.
    #[error("validation failed: envelope idempotency_key must not be empty")]
    EmptyEnvelopeIdempotencyKey,
    /// A manifest request's filter lists a blank resource kind.
    #[error(
        "validation failed: manifest_request.filter.resource_kinds must not contain empty values"
    )]
    BlankResourceKind,
    /// A transaction query names no selector, or more than one.
    #[error(
        "validation failed: transaction_query_request must name exactly one of transaction_id, plan_id, action_id"
    )]
    TransactionQuerySelector,
}

/// The envelope checks of `aip-model.md` §6.1 in upstream's order (version, message type
/// against body, message id, idempotency key), then the checks of the body: action, action
/// result, transaction request and result, manifest request, transaction query.
pub fn validate_envelope(envelope: &Envelope) -> Result<(), ValidationError> {
    if envelope.aip_version != AIP_VERSION {
        return Err(ValidationError::UnsupportedVersion(
            envelope.aip_version.clone(),
        ));
    }
    if envelope.body.key() != envelope.message_type.body_key() {
        return Err(ValidationError::MessageTypeMismatch(envelope.message_type));
    }
    if envelope.message_id.as_str().is_empty() {
        return Err(ValidationError::MissingField("message_id".to_owned()));
    }
    if envelope.idempotency_key.as_deref() == Some("") {
        return Err(ValidationError::EmptyEnvelopeIdempotencyKey);
    }
    match &envelope.body {
        MessageBody::Action(action) => validate_action(action),
        MessageBody::ActionResult(result) => validate_action_result(result),
        MessageBody::TransactionRequest(request) => validate_transaction_request(request),
        MessageBody::TransactionResult(result) | MessageBody::TransactionView(result) => {
            validate_transaction_result(result)
        }
        MessageBody::ManifestRequest(request) => {
            if request
                .filter
                .as_ref()
                .is_some_and(|f| f.resource_kinds.iter().any(|k| k.trim().is_empty()))
            {
                return Err(ValidationError::BlankResourceKind);
            }
            Ok(())
        }
        MessageBody::TransactionQueryRequest(query) => validate_transaction_query(query),
        _ => Ok(()),
    }
}

/// A transaction query names exactly one selector.
pub fn validate_transaction_query(query: &TransactionQueryRequest) -> Result<(), ValidationError> {
    let named = usize::from(query.transaction_id.is_some())
        + usize::from(
            query
                .plan_id
                .as_deref()
                .is_some_and(|p| !p.trim().is_empty()),
        )
        + usize::from(query.action_id.is_some());
    if named == 1 {
        Ok(())
    } else {
        Err(ValidationError::TransactionQuerySelector)
    }
}

/// Runs every core action check in upstream's order and returns the first failure.
pub fn validate_action(action: &Action) -> Result<(), ValidationError> {
    check_input_not_null(action)?;
    check_idempotency_key_not_empty(action)?;
    check_timeout_positive(action)?;
    check_delegation_chain_length(action)?;
    if let Some(identity) = &action.identity {
        validate_identity_context(identity, "action.identity")?;
    }
    if let Some(approval) = &action.approval {
        validate_approval_decision(approval)?;
        check_approval_is_approved(approval)?;
    }
    check_commit_has_plan(action)?;
    check_compensate_has_target(action)
}

/// A `failed` result must say why, or callers cannot tell a retryable failure from a final one.
pub fn validate_action_result(result: &ActionResult) -> Result<(), ValidationError> {
    if result.status == ActionResultStatus::Failed && result.error.is_none() {
        return Err(ValidationError::FailedResultWithoutError);
    }
    Ok(())
}

/// The checks of a `transaction_request` (`aip-model.md` §6.4): the action has a transaction
/// block whose id, when present, is the request's; then every action check.
pub fn validate_transaction_request(request: &TransactionRequest) -> Result<(), ValidationError> {
    let Some(transaction) = &request.action.transaction else {
        return Err(ValidationError::MissingField(
            "transaction_request.action.transaction".to_owned(),
        ));
    };
    if transaction
        .transaction_id
        .as_ref()
        .is_some_and(|id| *id != request.transaction_id)
    {
        return Err(ValidationError::TransactionRequestIdMismatch);
    }
    validate_action(&request.action)
}

/// The checks of a `transaction_result` (`aip-model.md` §6.4).
pub fn validate_transaction_result(result: &TransactionResult) -> Result<(), ValidationError> {
    if result.transaction.transaction_id.as_ref() != Some(&result.transaction_id) {
        return Err(ValidationError::TransactionResultIdMismatch);
    }
    if result.status == TransactionProtocolStatus::Failed
        && result.error.is_none()
        && !result
            .result
            .as_ref()
            .is_some_and(|r| r.status == ActionResultStatus::Failed && r.error.is_some())
    {
        return Err(ValidationError::FailedTransactionWithoutError);
    }
    if result.status == TransactionProtocolStatus::Planned
        && !result.plan.as_ref().is_some_and(|plan| {
            plan.transaction_id == result.transaction_id
                && result
                    .result
                    .as_ref()
                    .is_none_or(|r| r.action_id == plan.action_id)
        })
    {
        return Err(ValidationError::PlannedTransactionWithoutPlan);
    }
    Ok(())
}

/// Checks that every present identity reference names itself and carries no blank scope.
/// `path` is the dotted path of the context, used in the error (e.g. `action.identity`).
pub fn validate_identity_context(
    identity: &IdentityContext,
    path: &str,
) -> Result<(), ValidationError> {
    let missing = || ValidationError::MissingField(path.to_owned());
    if let Some(tenant) = &identity.tenant
        && is_blank(&tenant.id)
    {
        return Err(missing());
    }
    if let Some(account) = &identity.external_account
        && (is_blank(&account.id) || is_blank(&account.system))
    {
        return Err(missing());
    }
    if let Some(user) = &identity.external_user
        && (is_blank(&user.id) || is_blank(&user.system))
    {
        return Err(missing());
    }
    if let Some(credential) = &identity.credential_ref {
        if is_blank(&credential.id) || is_blank(&credential.issuer) {
            return Err(missing());
        }
        if credential.scopes.iter().any(|s| is_blank(s)) {
            return Err(ValidationError::BlankCredentialScope {
                path: path.to_owned(),
            });
        }
    }
    if let Some(oauth) = &identity.oauth {
        if is_blank(&oauth.issuer) {
            return Err(missing());
        }
        if oauth.scopes.iter().any(|s| is_blank(s)) {
            return Err(ValidationError::BlankOAuthScope {
                path: path.to_owned(),
            });
        }
        if oauth.client_id.as_deref().is_some_and(is_blank) {
            return Err(ValidationError::BlankOAuthClientId {
                path: path.to_owned(),
            });
        }
    }
    Ok(())
}

/// Checks that an approval decision's reason, constraints and evidence are not blank, so the
/// audit trail never records an unexplained or unnamed restriction.
pub fn validate_approval_decision(decision: &ApprovalDecision) -> Result<(), ValidationError> {
    if decision.reason.as_deref().is_some_and(is_blank) {
        return Err(ValidationError::BlankApprovalReason);
    }
    for constraint in &decision.constraints {
        if is_blank(&constraint.field) {
            return Err(missing_field("approval_decision.constraints.field"));
        }
        if is_blank(&constraint.operator) {
            return Err(missing_field("approval_decision.constraints.operator"));
        }
    }
    for evidence in &decision.evidence {
        if is_blank(&evidence.id) {
            return Err(missing_field("approval_decision.evidence.id"));
        }
        if is_blank(&evidence.kind) {
            return Err(missing_field("approval_decision.evidence.kind"));
        }
    }
    Ok(())
}

/// A `null` input is never a valid invocation; an empty object is how "no input" is spelled.
fn check_input_not_null(action: &Action) -> Result<(), ValidationError> {
    if action.input.is_null() {
        return Err(ValidationError::NullInput);
    }
    Ok(())
}

/// An empty key would collapse every keyless retry into one slot; upstream does not trim here.
fn check_idempotency_key_not_empty(action: &Action) -> Result<(), ValidationError> {
    if action.idempotency_key.as_deref() == Some("") {
        return Err(ValidationError::EmptyIdempotencyKey);
    }
    Ok(())
}

/// A zero timeout could never succeed.
fn check_timeout_positive(action: &Action) -> Result<(), ValidationError> {
    if action.timeout_ms == Some(0) {
        return Err(ValidationError::ZeroTimeout);
    }
    Ok(())
}

/// Bounds delegation depth so authorization cost and audit chains stay bounded.
fn check_delegation_chain_length(action: &Action) -> Result<(), ValidationError> {
    let hops = action.delegation_chain.len();
    if hops > MAX_DELEGATION_HOPS {
        return Err(ValidationError::DelegationChainTooLong { hops });
    }
    Ok(())
}

/// An action may only carry a granting decision; anything else must not authorize it.
fn check_approval_is_approved(decision: &ApprovalDecision) -> Result<(), ValidationError> {
    if decision.decision != ApprovalDecisionKind::Approved {
        return Err(ValidationError::ApprovalNotApproved {
            decision: decision.decision,
        });
    }
    Ok(())
}

/// A commit must name the plan it commits, or there is nothing to claim.
fn check_commit_has_plan(action: &Action) -> Result<(), ValidationError> {
    if let Some(transaction) = &action.transaction
        && transaction.mode == TransactionMode::Commit
        && transaction.plan_id.is_none()
    {
        return Err(ValidationError::CommitWithoutPlan);
    }
    Ok(())
}

/// A compensation must name the action whose effect it offsets.
fn check_compensate_has_target(action: &Action) -> Result<(), ValidationError> {
    if let Some(transaction) = &action.transaction
        && transaction.mode == TransactionMode::Compensate
        && transaction.compensation_for.is_none()
    {
        return Err(ValidationError::CompensateWithoutTarget);
    }
    Ok(())
}

/// Upstream's `MissingField` for a fixed dotted path.
fn missing_field(path: &str) -> ValidationError {
    ValidationError::MissingField(path.to_owned())
}

/// Upstream treats whitespace-only strings as absent in these checks.
fn is_blank(value: &str) -> bool {
    value.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use time::macros::datetime;

    use super::*;
    use crate::ids::{ActionId, ApprovalId};
    use crate::model::{
        ActionTransaction, ApprovalConstraint, CredentialRef, DelegationEntry, EvidenceArtifact,
        ExternalAccountRef, ExternalUserRef, OAuthCredentialState, Principal, PrincipalKind,
        ProtocolError, TenantRef,
    };

    fn action() -> Action {
        Action::new("cap:x", json!({}))
    }

    fn message(action: &Action) -> String {
        validate_action(action).unwrap_err().to_string()
    }

    fn approval(decision: ApprovalDecisionKind) -> ApprovalDecision {
        ApprovalDecision {
            decided_at: datetime!(2026-01-02 03:00:00 UTC),
            ..ApprovalDecision::new(
                ApprovalId::trusted("appr_1"),
                decision,
                Principal::new("human:boss", PrincipalKind::Human),
            )
        }
    }

    fn hop() -> DelegationEntry {
        DelegationEntry {
            from: Principal::new("a", PrincipalKind::Agent),
            to: Principal::new("b", PrincipalKind::Agent),
            scope: "s".into(),
            delegated_at: datetime!(2026-01-01 00:00:00 UTC),
        }
    }

    fn oauth() -> OAuthCredentialState {
        OAuthCredentialState {
            issuer: "idp".into(),
            client_id: None,
            scopes: Vec::new(),
            expires_at: None,
            refresh_available: false,
        }
    }

    fn identity_error(identity: IdentityContext) -> String {
        let mut action = action();
        action.identity = Some(Box::new(identity));
        message(&action)
    }

    #[test]
    fn a_plain_action_is_valid() {
        assert_eq!(validate_action(&action()), Ok(()));
    }

    #[test]
    fn null_input_is_rejected() {
        assert_eq!(
            message(&Action::new("cap:x", Value::Null)),
            "validation failed: action.input must not be null"
        );
    }

    #[test]
    fn empty_idempotency_key_is_rejected_without_trimming() {
        assert_eq!(
            message(&action().with_idempotency_key("")),
            "validation failed: action.idempotency_key must not be empty"
        );
        assert_eq!(validate_action(&action().with_idempotency_key(" ")), Ok(()));
    }

    #[test]
    fn zero_timeout_is_rejected() {
        assert_eq!(
            message(&action().with_timeout_ms(0)),
            "validation failed: action.timeout_ms must be greater than zero"
        );
        assert_eq!(validate_action(&action().with_timeout_ms(1)), Ok(()));
    }

    #[test]
    fn delegation_chain_allows_ten_hops_and_refuses_eleven() {
        let mut ten = action();
        ten.delegation_chain = vec![hop(); 10];
        assert_eq!(validate_action(&ten), Ok(()));
        let mut eleven = action();
        eleven.delegation_chain = vec![hop(); 11];
        assert_eq!(
            validate_action(&eleven),
            Err(ValidationError::DelegationChainTooLong { hops: 11 })
        );
        assert_eq!(
            message(&eleven),
            "validation failed: action.delegation_chain must not exceed 10 hops"
        );
    }

    #[test]
    fn blank_identity_references_are_missing_fields_at_the_context_path() {
        let expected = "missing required field `action.identity`";
        let tenant = IdentityContext {
            tenant: Some(TenantRef {
                id: "  ".into(),
                system: None,
            }),
            ..IdentityContext::default()
        };
        assert_eq!(identity_error(tenant), expected);
        for (id, system) in [("", "s"), ("i", " ")] {
            let account = IdentityContext {
                external_account: Some(ExternalAccountRef {
                    id: id.into(),
                    system: system.into(),
                }),
                ..IdentityContext::default()
            };
            assert_eq!(identity_error(account), expected);
            let user = IdentityContext {
                external_user: Some(ExternalUserRef {
                    id: id.into(),
                    system: system.into(),
                }),
                ..IdentityContext::default()
            };
            assert_eq!(identity_error(user), expected);
            let credential = IdentityContext {
                credential_ref: Some(CredentialRef {
                    id: id.into(),
                    issuer: system.into(),
                    scopes: Vec::new(),
                }),
                ..IdentityContext::default()
            };
            assert_eq!(identity_error(credential), expected);
        }
        let oauth_issuer = IdentityContext {
            oauth: Some(OAuthCredentialState {
                issuer: "".into(),
                ..oauth()
            }),
            ..IdentityContext::default()
        };
        assert_eq!(identity_error(oauth_issuer), expected);
    }

    #[test]
    fn blank_identity_scopes_and_client_id_are_rejected() {
        let credential = IdentityContext {
            credential_ref: Some(CredentialRef {
                id: "c".into(),
                issuer: "i".into(),
                scopes: vec!["a".into(), " ".into()],
            }),
            ..IdentityContext::default()
        };
        assert_eq!(
            identity_error(credential),
            "validation failed: action.identity.credential_ref.scopes must not contain empty values"
        );
        let scopes = IdentityContext {
            oauth: Some(OAuthCredentialState {
                scopes: vec!["".into()],
                ..oauth()
            }),
            ..IdentityContext::default()
        };
        assert_eq!(
            identity_error(scopes),
            "validation failed: action.identity.oauth.scopes must not contain empty values"
        );
        let client = IdentityContext {
            oauth: Some(OAuthCredentialState {
                client_id: Some("".into()),
                ..oauth()
            }),
            ..IdentityContext::default()
        };
        assert_eq!(
            identity_error(client),
            "validation failed: action.identity.oauth.client_id must not be empty"
        );
    }

    #[test]
    fn identity_path_is_the_callers() {
        let identity = IdentityContext {
            oauth: Some(OAuthCredentialState {
                client_id: Some("".into()),
                ..oauth()
            }),
            ..IdentityContext::default()
        };
        assert_eq!(
            validate_identity_context(&identity, "transaction_request.action.identity")
                .unwrap_err()
                .to_string(),
            "validation failed: transaction_request.action.identity.oauth.client_id must not be empty"
        );
        assert_eq!(
            validate_identity_context(&IdentityContext::default(), "p"),
            Ok(())
        );
    }

    #[test]
    fn approval_decision_checks_reason_constraints_and_evidence() {
        let blank_reason = ApprovalDecision {
            reason: Some(" ".into()),
            ..approval(ApprovalDecisionKind::Approved)
        };
        assert_eq!(
            validate_approval_decision(&blank_reason)
                .unwrap_err()
                .to_string(),
            "validation failed: approval_decision.reason must not be empty"
        );
        let constraint = |field: &str, operator: &str| ApprovalDecision {
            constraints: vec![ApprovalConstraint {
                field: field.into(),
                operator: operator.into(),
                value: json!(1),
            }],
            ..approval(ApprovalDecisionKind::Approved)
        };
        assert_eq!(
            validate_approval_decision(&constraint("", "eq"))
                .unwrap_err()
                .to_string(),
            "missing required field `approval_decision.constraints.field`"
        );
        assert_eq!(
            validate_approval_decision(&constraint("/a", ""))
                .unwrap_err()
                .to_string(),
            "missing required field `approval_decision.constraints.operator`"
        );
        let evidence = |id: &str, kind: &str| ApprovalDecision {
            evidence: vec![EvidenceArtifact {
                id: id.into(),
                kind: kind.into(),
                uri: None,
                hash: None,
                redacted: false,
            }],
            ..approval(ApprovalDecisionKind::Approved)
        };
        assert_eq!(
            validate_approval_decision(&evidence("", "ticket"))
                .unwrap_err()
                .to_string(),
            "missing required field `approval_decision.evidence.id`"
        );
        assert_eq!(
            validate_approval_decision(&evidence("e", " "))
                .unwrap_err()
                .to_string(),
            "missing required field `approval_decision.evidence.kind`"
        );
        assert_eq!(validate_approval_decision(&evidence("e", "ticket")), Ok(()));
    }

    #[test]
    fn action_approval_must_be_approved_after_the_decision_checks() {
        let mut denied = action();
        denied.approval = Some(Box::new(approval(ApprovalDecisionKind::Denied)));
        assert_eq!(
            message(&denied),
            "validation failed: action.approval must contain an approved decision"
        );
        // The decision's own checks come first.
        let mut blank_and_denied = action();
        blank_and_denied.approval = Some(Box::new(ApprovalDecision {
            reason: Some("".into()),
            ..approval(ApprovalDecisionKind::Revoked)
        }));
        assert_eq!(
            validate_action(&blank_and_denied),
            Err(ValidationError::BlankApprovalReason)
        );
        let mut approved = action();
        approved.approval = Some(Box::new(approval(ApprovalDecisionKind::Approved)));
        assert_eq!(validate_action(&approved), Ok(()));
    }

    #[test]
    fn commit_needs_a_plan_and_compensate_needs_a_target() {
        let commit = action().with_transaction(ActionTransaction::new(TransactionMode::Commit));
        assert_eq!(
            message(&commit),
            "validation failed: action.transaction.plan_id is required for commit mode"
        );
        let compensate =
            action().with_transaction(ActionTransaction::new(TransactionMode::Compensate));
        assert_eq!(
            message(&compensate),
            "validation failed: action.transaction.compensation_for is required for compensate mode"
        );
        let planned = action().with_transaction(ActionTransaction {
            plan_id: Some("plan:txn_1".into()),
            ..ActionTransaction::new(TransactionMode::Commit)
        });
        assert_eq!(validate_action(&planned), Ok(()));
        let targeted = action().with_transaction(ActionTransaction {
            compensation_for: Some(ActionId::trusted("act_0")),
            ..ActionTransaction::new(TransactionMode::Compensate)
        });
        assert_eq!(validate_action(&targeted), Ok(()));
    }

    #[test]
    fn the_first_failing_rule_wins() {
        let action = Action::new("cap:x", Value::Null)
            .with_idempotency_key("")
            .with_timeout_ms(0);
        assert_eq!(validate_action(&action), Err(ValidationError::NullInput));
        let action = Action::new("cap:x", json!({}))
            .with_timeout_ms(0)
            .with_transaction(ActionTransaction::new(TransactionMode::Commit));
        assert_eq!(validate_action(&action), Err(ValidationError::ZeroTimeout));
    }

    #[test]
    fn failed_result_must_carry_an_error() {
        let id = ActionId::trusted("act_1");
        let mut failed = ActionResult::failed(id.clone(), ProtocolError::invalid_input("x"));
        assert_eq!(validate_action_result(&failed), Ok(()));
        failed.error = None;
        assert_eq!(
            validate_action_result(&failed).unwrap_err().to_string(),
            "validation failed: failed action_result must include error"
        );
        assert_eq!(
            validate_action_result(&ActionResult::completed(id, json!(null))),
            Ok(())
        );
    }
}
