//! Payments: a financial side effect that needs everything the SDK can govern.
//!
//! `cap:payments:charge` charges a customer's card at the payment provider:
//!
//! - **credentials**: a credential with the `payments.charge` scope from the accepted issuer is
//!   required; the handler reads it with the [`Credential`] extractor and sends its secret as a
//!   bearer token on this one call (the client itself holds no credential);
//! - **approval**: two of `finance`, `finance-lead` and `treasury`, from two different people,
//!   neither of them the requester, with a reason and an input snapshot as evidence;
//! - **plan before commit**: the only way to charge is to plan and commit the plan (no
//!   `execute`); the plan is previewed before approval, the commit waits for it;
//! - **compensation**: within 30 days a settled charge can be undone by a `compensate` action,
//!   which the host routes to `cap:payments:refund`: a capability of its own, with its own
//!   credential scope, that reads the charge through the [`Compensation`] extractor;
//! - **PII**: the customer's e-mail address is PII. The contract says so (`confidential`,
//!   `pii`, `redaction`), so the host keeps the input out of approval records, plan snapshots
//!   and schema errors; the handler only ever returns it masked, and no failure quotes it;
//! - **reconciliation**: the charge's provider operation is checkpointed before the call, and an
//!   unknown outcome is looked up at the provider (`GET /operations/{id}`).

use aip_connector::model::{ConnectorOperation, ProviderOperationRef};
use aip_connector::prelude::*;
use serde_json::Value;

use crate::provider_api::{self, OPERATION_ID_HEADER};

/// The connector id.
pub const CONNECTOR_ID: &str = "payments";
/// The charge capability.
pub const CHARGE: &str = Payments::CHARGE_ID;
/// The refund capability (the charge's compensation).
pub const REFUND: &str = Payments::REFUND_ID;
/// The only issuer whose credentials these capabilities accept.
pub const ISSUER: &str = "https://auth.payments.example";
/// The scope a charge needs.
pub const CHARGE_SCOPE: &str = "payments.charge";
/// The scope a refund needs.
pub const REFUND_SCOPE: &str = "payments.refund";
/// The provider route charges are created on.
pub const CHARGES_ROUTE: &str = "/charges";
/// The provider route refunds are created on.
pub const REFUNDS_ROUTE: &str = "/refunds";
/// The `provider` named in checkpointed operations.
pub const PROVIDER: &str = "payment-provider";

/// What to charge.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Charge {
    /// The amount in the currency's minor unit (cents), at most 1,000,000.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub amount_cents: u64,
    /// ISO 4217 currency code, upper case.
    #[schemars(pattern(r"^[A-Z]{3}$"))]
    pub currency: String,
    /// Where the provider sends the receipt. PII.
    #[schemars(email, length(max = 254))]
    pub customer_email: String,
    /// What the charge is for, shown on the customer's statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub description: Option<String>,
}

/// A charge the provider accepted.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Charged {
    /// The provider's id of the charge (its operation id).
    pub charge_id: String,
    /// The amount charged, in minor units.
    pub amount_cents: u64,
    /// Its currency.
    pub currency: String,
    /// Where the receipt went, masked (`a***@example.com`): the address itself is PII and stays
    /// with the provider.
    pub receipt_sent_to: String,
}

/// Why a charge is refunded.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// The reason, kept with the refund at the provider.
    #[schemars(length(min = 1, max = 500))]
    pub reason: String,
}

/// A refund the provider accepted.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Refunded {
    /// The provider's id of the refund.
    pub refund_id: String,
    /// The charge it refunds.
    pub charge_id: String,
    /// The action whose charge was refunded.
    pub compensated_action_id: String,
}

/// The body of `POST /charges`.
#[derive(Serialize)]
struct ProviderChargeRequest<'a> {
    account: &'a str,
    amount_cents: u64,
    currency: &'a str,
    customer_email: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
}

/// Request header naming the approvals that released a charge, for the provider's audit trail.
/// A header, not a body field: a resumed approval and a re-submission carry different approval
/// ids, and the provider rejects a second request under the same idempotency key whose body
/// differs from the first.
pub const APPROVAL_IDS_HEADER: &str = "x-approval-ids";

/// The body of `POST /refunds`.
#[derive(Serialize)]
struct ProviderRefundRequest<'a> {
    charge_id: &'a str,
    reason: &'a str,
}

/// The provider's answer to a mutating request.
#[derive(Deserialize)]
struct ProviderEffect {
    operation_id: String,
}

/// The payments connector: charges and refunds at the provider behind `api`.
#[derive(Clone, Debug)]
pub struct Payments {
    api: ProviderClient,
}

impl Payments {
    /// A payments connector that calls the provider through `api`. The client carries no
    /// credential: each call sends the credential the host resolved for the action.
    pub fn new(api: ProviderClient) -> Self {
        Self { api }
    }
}

/// `ada@example.com` → `a***@example.com`: enough for a person to recognise their own address,
/// not enough to contact anyone.
pub fn mask_email(address: &str) -> String {
    match address.split_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}***@{domain}")
        }
        None => "***".to_owned(),
    }
}

fn failure(code: &str, message: &str, operation: ConnectorOperation) -> ConnectorFailure {
    ConnectorFailure::new(
        code,
        message,
        ErrorCategory::Permanent,
        operation,
        CONNECTOR_ID,
    )
}

#[connector(id = "payments", name = "Payments")]
impl Payments {
    /// Charge a customer's card.
    ///
    /// Moves money: plan it, get two finance approvers to approve the commit, then commit. A
    /// settled charge can be refunded within 30 days with a `compensate` action, which runs
    /// `cap:payments:refund`.
    #[capability(
        id = "cap:payments:charge",
        name = "Charge card",
        risk = high,
        side_effects = [write, financial, external_network],
        idempotency(required, collision = revalidate_input_hash, scope = tenant, ttl_ms = 86_400_000),
        data(sensitivity = confidential, pii, redaction),
        credentials(issuers = ["https://auth.payments.example"], scopes = ["payments.charge"]),
        approval(
            reason = "moves money from a customer's card",
            rule = quorum(2, role("finance"), role("finance-lead"), role("treasury")),
            evidence = [reason, input_snapshot],
            distinct_principals = 2,
            separation(requester_must_differ),
            ttl_ms = 86_400_000,
            policy_version = "payments.charge/1",
        ),
        transaction(modes = [plan, commit, compensate, reconcile], requires_plan),
        compensation(supported, capability = "cap:payments:refund", window_ms = 2_592_000_000),
        reconcile = Self::find_charge,
        tags = ["payments"],
        examples = [r#"{"amount_cents": 2500, "currency": "EUR", "customer_email": "ada@example.com", "description": "Workshop ticket"}"#],
    )]
    #[allow(clippy::too_many_arguments)]
    async fn charge(
        &self,
        input: Charge,
        key: IdempotencyKey,
        tenant: Tenant,
        credential: Credential,
        approval: Approval,
        deadline: Deadline,
        checkpoint: Checkpoint,
    ) -> Result<Charged, ConnectorFailure> {
        let operation = checkpoint.operation_for(&key, PROVIDER, "ch");
        // Durable before the request leaves: a lost answer is reconciled against this
        // operation, never charged again.
        checkpoint.record(operation.clone(), None).await?;
        let approval_ids = approval
            .approvals()
            .approval_ids
            .iter()
            .map(|id| id.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let effect: ProviderEffect = self
            .api
            .post(CHARGES_ROUTE)
            .bearer_auth(credential.secret())
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .header(APPROVAL_IDS_HEADER, &approval_ids)
            .provider_operation(operation)
            .operation(ConnectorOperation::TransactionCommit)
            .deadline(&deadline)
            .json(&ProviderChargeRequest {
                account: tenant.id(),
                amount_cents: input.amount_cents,
                currency: &input.currency,
                customer_email: &input.customer_email,
                description: input.description.as_deref(),
            })
            .send_json()
            .await?;
        Ok(Charged {
            charge_id: effect.operation_id,
            amount_cents: input.amount_cents,
            currency: input.currency,
            receipt_sent_to: mask_email(&input.customer_email),
        })
    }

    /// Asks the provider whether a charge whose outcome is unknown was made.
    async fn find_charge(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        provider_api::reconcile(&self.api, &request).await
    }

    /// Refund a charge: the compensation of `cap:payments:charge`.
    ///
    /// Runs only as a `compensate` action for a settled charge (the host routes it here and
    /// checks the window and that the charge is compensated at most once). The refund is keyed
    /// at the provider by the provider's own charge id (`refund:<charge id>`), so however often
    /// the compensation is attempted, the provider refunds the charge at most once.
    ///
    /// A `compensate` action names the charge, so it is approved under the *charge's* approval
    /// policy (two of finance, finance-lead and treasury). The refund cannot be called directly
    /// (the host refuses an action naming it), so the `approval(...)` below is never applied: it
    /// is published because every contract with a financial effect must declare approval, and
    /// it states the policy that does gate a refund (docs/attribute-reference.md,
    /// "compensation").
    #[capability(
        id = "cap:payments:refund",
        name = "Refund charge",
        risk = high,
        side_effects = [write, financial, external_network],
        idempotency(required, collision = revalidate_input_hash, scope = tenant, ttl_ms = 86_400_000),
        data(sensitivity = confidential, redaction),
        credentials(issuers = ["https://auth.payments.example"], scopes = ["payments.refund"]),
        approval(
            reason = "returns money to a customer",
            rule = quorum(2, role("finance"), role("finance-lead"), role("treasury")),
            evidence = [reason],
            distinct_principals = 2,
            separation(requester_must_differ),
            policy_version = "payments.refund/1",
        ),
        tags = ["payments"],
        examples = [r#"{"reason": "the workshop was cancelled"}"#],
    )]
    async fn refund(
        &self,
        input: RefundRequest,
        _key: IdempotencyKey,
        credential: Credential,
        _approval: Approval,
        deadline: Deadline,
        compensation: Compensation,
    ) -> Result<Refunded, ConnectorFailure> {
        let charge_id = charge_of(&compensation).ok_or_else(|| {
            failure(
                "payments.charge_unknown",
                "the compensated action recorded no charge to refund",
                ConnectorOperation::Compensation,
            )
        })?;
        let operation = ProviderOperationRef {
            provider: PROVIDER.to_owned(),
            operation_id: format!("rf_{charge_id}"),
            request_id: None,
        };
        let effect: ProviderEffect = self
            .api
            .post(REFUNDS_ROUTE)
            .bearer_auth(credential.secret())
            // One refund per charge: the provider's own charge id is unique at the provider,
            // where the compensated action's id is the caller's choice.
            .idempotency_key(format!("refund:{charge_id}"))
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .operation(ConnectorOperation::Compensation)
            .deadline(&deadline)
            .json(&ProviderRefundRequest {
                charge_id: &charge_id,
                reason: &input.reason,
            })
            .send_json()
            .await?;
        Ok(Refunded {
            refund_id: effect.operation_id,
            charge_id,
            compensated_action_id: compensation.action_id.to_string(),
        })
    }
}

/// The provider's id of the charge being compensated: the operation its handler checkpointed
/// (present for every charge that reached the provider), else the `charge_id` of its output.
fn charge_of(compensation: &Compensation) -> Option<String> {
    compensation
        .provider_operation
        .as_ref()
        .map(|operation| operation.operation_id.clone())
        .or_else(|| {
            compensation
                .output
                .as_ref()
                .and_then(|output| output.get("charge_id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
}
