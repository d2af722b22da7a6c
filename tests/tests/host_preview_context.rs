//! A `validate` companion under the host: a downstream validation asks the provider, so it is
//! handed what a preview knows (the tenant, the caller, the deadline, a cancellation and the
//! credential the commit would use), and the host withholds that credential from its failure.

use std::sync::{Arc, Mutex};

use aip_connector::codes;
use aip_connector::host::{Deployment, Host, HostLimits, TrustedContext};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::{CredentialHandle, Secret, VerifiedTenant};
use serde_json::json;

/// The deployment's token for the provider; must never appear in a result.
const TOKEN: &str = "canary-preview-token-51f0";

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    amount: u64,
    /// `"refuse"`: the provider refuses the validation, quoting the request it was sent;
    /// `"echo"`: the validation answers with a note quoting that request.
    #[serde(default)]
    answer: String,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Quote {
    fee: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct Sent {
    transfer_id: String,
    /// The fee charged: the one the plan quoted.
    fee: u64,
}

/// What the validation saw, for the test to inspect.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    tenant: String,
    caller: String,
    secret: String,
    credential_id: String,
    deadline_ahead: bool,
    cancelled: bool,
}

#[derive(Clone, Default)]
struct Bank {
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[connector(id = "bank")]
impl Bank {
    /// Sends a transfer; a plan quotes its fee from the provider, as the caller's account.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        credentials(required, scopes = ["transfers.write"]),
        transaction(modes = [dry_run, plan, commit], requires_plan, fidelity = downstream_validation),
        validate = Self::quote,
    )]
    async fn send(
        &self,
        transfer: Transfer,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _credential: Credential,
        plan: ClaimedPlan,
    ) -> Result<Sent, ConnectorFailure> {
        // What the approvers saw, not what the provider would quote now.
        let quote: Quote = plan.validation_as()?.expect("a downstream validation ran");
        Ok(Sent {
            transfer_id: format!("tr-{}", transfer.amount),
            fee: quote.fee,
        })
    }

    async fn quote(
        &self,
        transfer: Transfer,
        tenant: Tenant,
        caller: Caller,
        deadline: Deadline,
        cancellation: Cancellation,
        credential: Credential,
    ) -> Result<Quote, ConnectorFailure> {
        let secret = credential.secret().expose_str().unwrap().to_owned();
        self.seen.lock().unwrap().push(Seen {
            tenant: tenant.id().to_owned(),
            caller: caller.principal_id().to_string(),
            secret: secret.clone(),
            credential_id: credential.as_ref().id.clone(),
            deadline_ahead: !deadline.remaining().is_zero(),
            cancelled: cancellation.is_cancelled(),
        });
        if transfer.answer == "refuse" {
            // A provider error quoting the request's authorization header, as some do.
            return Err(ConnectorFailure::new(
                "bank.quote_refused",
                format!("quote refused for request with `Authorization: Bearer {secret}`"),
                ErrorCategory::Permanent,
                ConnectorOperation::TransactionPlan,
                "bank",
            ));
        }
        if transfer.answer == "long" {
            return Ok(Quote {
                fee: transfer.amount / 100,
                note: Some("terms and conditions ".repeat(20)),
            });
        }
        Ok(Quote {
            fee: transfer.amount / 100,
            note: (transfer.answer == "echo")
                .then(|| format!("quoted for `Authorization: Bearer {secret}`")),
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(bank: &Bank) -> Host {
    host_with(
        bank,
        CredentialHandle::new("bank-token", "vault", Secret::new(TOKEN))
            .with_scopes(["transfers.write"])
            .with_tenant("t1"),
    )
}

fn host_with(bank: &Bank, credential: CredentialHandle) -> Host {
    host_limited(bank, credential, HostLimits::default())
}

fn host_limited(bank: &Bank, credential: CredentialHandle, limits: HostLimits) -> Host {
    Host::builder()
        .connector(bank.clone())
        .deployment(Deployment::default().with_static_credential(credential))
        .limits(limits)
        .build()
        .unwrap()
}

/// A validation's answer is stored in the plan and returned like an output, so it is bounded
/// like one: larger than `max_output_bytes`, the preview fails `action.output_too_large`
/// naming the validation (found by a review of the output limit).
#[tokio::test]
async fn a_validation_answer_larger_than_the_output_limit_fails_the_preview() {
    let bank = Bank::default();
    let host = host_limited(
        &bank,
        CredentialHandle::new("bank-token", "vault", Secret::new(TOKEN))
            .with_scopes(["transfers.write"])
            .with_tenant("t1"),
        HostLimits::default().max_output_bytes(256),
    );
    let result = host
        .invoke(
            preview(
                TransactionMode::Plan,
                "plan-long",
                json!({ "amount": 10, "answer": "long" }),
            ),
            &caller(),
        )
        .await;
    let error = result.error.as_deref().expect("a failure");
    assert_eq!(error.code, codes::ACTION_OUTPUT_TOO_LARGE, "{result:?}");
    assert!(
        error.message.contains("the validation's answer"),
        "{error:?}"
    );
    assert!(!error.message.contains("terms and conditions"), "{error:?}");
    let short = host
        .invoke(
            preview(TransactionMode::Plan, "plan-short", json!({ "amount": 10 })),
            &caller(),
        )
        .await;
    assert_eq!(short.status, ActionResultStatus::Completed, "{short:?}");
}

fn preview(mode: TransactionMode, key: &str, input: serde_json::Value) -> Action {
    Action::new("cap:bank:send", input)
        .with_idempotency_key(key)
        .with_transaction(ActionTransaction::new(mode))
}

/// Runs `input` as a plan and as a dry run (keys `plan-<tag>`, `dry-<tag>`) and returns each
/// result with its validation's answer, where the preview completed.
async fn both_previews(
    host: &Host,
    tag: &str,
    input: &serde_json::Value,
) -> Vec<(ActionResult, Option<serde_json::Value>)> {
    let mut results = Vec::new();
    for (mode, prefix) in [
        (TransactionMode::Plan, "plan"),
        (TransactionMode::DryRun, "dry"),
    ] {
        let key = format!("{prefix}-{tag}");
        let result = host
            .invoke(preview(mode, &key, input.clone()), &caller())
            .await;
        let validation = result.output.as_ref().map(|output| match mode {
            TransactionMode::Plan => output["plan"]["metadata"]["connector_validation"].clone(),
            _ => output["handler_result"].clone(),
        });
        results.push((result, validation));
    }
    results
}

/// Found by the carried list of gaps: a downstream validation could not authenticate as the
/// caller, nor pick the tenant's account, so `downstream_validation` could not ask a provider
/// that needs a token.
#[tokio::test]
async fn a_validation_companion_is_handed_the_tenant_caller_deadline_and_credential() {
    let bank = Bank::default();
    let host = host(&bank);
    for (result, validation) in both_previews(&host, "1", &json!({ "amount": 2_500 })).await {
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
        assert_eq!(validation, Some(json!({ "fee": 25 })), "{result:?}");
    }
    let seen = bank.seen.lock().unwrap().clone();
    let expected = Seen {
        tenant: "t1".into(),
        caller: "user:ada".into(),
        secret: TOKEN.into(),
        credential_id: "bank-token".into(),
        deadline_ahead: true,
        cancelled: false,
    };
    assert_eq!(seen, vec![expected.clone(), expected]);
}

#[tokio::test]
async fn a_validation_failure_never_carries_the_credential() {
    let bank = Bank::default();
    let host = host(&bank);
    let input = json!({ "amount": 10, "answer": "refuse" });
    for (result, _) in both_previews(&host, "2", &input).await {
        assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
        let error = result.error.as_deref().expect("the validation's failure");
        assert_eq!(error.code, "bank.quote_refused");
        let shown = serde_json::to_string(&result).unwrap();
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(
            error.message.contains("Bearer [withheld]"),
            "{}",
            error.message
        );
    }
}

/// Found by a hostile review: a validation may answer `Ok` with what the provider said, quoting
/// the request's token; the plan stores that answer and approvers read it.
#[tokio::test]
async fn a_validation_answer_never_carries_the_credential() {
    let bank = Bank::default();
    let host = host(&bank);
    let input = json!({ "amount": 300, "answer": "echo" });
    for (result, validation) in both_previews(&host, "4", &input).await {
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
        assert_eq!(
            validation,
            Some(json!({ "fee": 3, "note": "quoted for `Authorization: Bearer [withheld]`" })),
            "{result:?}"
        );
    }
}

/// A preview extractor the call cannot fill fails the preview as a handler's fails its call,
/// and the companion does not run: here a call without a verified tenant, under a deployment
/// credential bound to no tenant.
#[tokio::test]
async fn a_preview_extractor_the_call_cannot_fill_fails_the_preview() {
    let bank = Bank::default();
    let host = host_with(
        &bank,
        CredentialHandle::new("bank-token", "vault", Secret::new(TOKEN))
            .with_scopes(["transfers.write"]),
    );
    let anonymous = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test");
    let result = host
        .invoke(
            preview(TransactionMode::Plan, "plan-5", json!({ "amount": 10 })),
            &anonymous,
        )
        .await;
    let error = result.error.as_deref().expect("a failure");
    assert_eq!(error.code, codes::TENANT_MISSING, "{result:?}");
    assert!(bank.seen.lock().unwrap().is_empty());
}

/// The credential is checked before the preview, as before the commit (stage 4, unchanged by
/// handing the credential to the validation): a deployment whose credential lacks the scope
/// refuses the plan without running the validation.
#[tokio::test]
async fn a_preview_without_the_credentials_scope_is_refused_before_the_validation() {
    let bank = Bank::default();
    let host = host_with(
        &bank,
        CredentialHandle::new("bank-token", "vault", Secret::new(TOKEN))
            .with_scopes(["transfers.read"])
            .with_tenant("t1"),
    );
    let result = host
        .invoke(
            preview(TransactionMode::Plan, "plan-3", json!({ "amount": 10 })),
            &caller(),
        )
        .await;
    let error = result.error.as_deref().expect("a refusal");
    assert_eq!(error.code, codes::CREDENTIAL_SCOPE_MISSING, "{result:?}");
    assert!(bank.seen.lock().unwrap().is_empty());
}

/// A commit's handler reads the plan it commits: the fee the validation quoted, which the
/// approvers saw, not the provider's answer now.
#[tokio::test]
async fn a_commit_handler_reads_the_plan_it_commits() {
    let bank = Bank::default();
    let host = host(&bank);
    let planned = host
        .invoke(
            preview(TransactionMode::Plan, "plan-6", json!({ "amount": 4_000 })),
            &caller(),
        )
        .await;
    let plan_id = planned.output.as_ref().expect("a plan")["plan"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let committed = host
        .invoke(
            Action::new("cap:bank:send", json!({ "amount": 4_000 }))
                .with_idempotency_key("commit-6")
                .with_transaction(ActionTransaction::commit(plan_id)),
            &caller(),
        )
        .await;
    assert_eq!(
        committed.status,
        ActionResultStatus::Completed,
        "{committed:?}"
    );
    assert_eq!(
        committed.output,
        Some(json!({ "transfer_id": "tr-4000", "fee": 40 }))
    );
}
