//! A connector whose keyed write scopes its idempotency keys to the external account the
//! deployment acts as (`idempotency(required, scope = external_account)`).
//!
//! The conformance host acts as a fixed, documented test account by default
//! (`conformance`/`acct-conformance`), so such a connector passes every applicable check out of
//! the box; `ConformanceSuite::with_external_account` makes it act as another one, and the keys
//! the provider receives are derived from that account. `conformance_tests!(suite = …)` takes a
//! configured suite.

mod common;

use aip_connector::host::ExternalAccountRef;
use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckStatus, ConformanceReport, ConformanceSuite, EXTERNAL_ACCOUNT_ID, EXTERNAL_ACCOUNT_SYSTEM,
    Scenario,
};
use aip_connector_testkit::provider_double::OPERATION_ID_HEADER;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Charge {
    /// The customer charged.
    customer: String,
    /// The amount, in minor units.
    amount: u64,
}

#[derive(Serialize, JsonSchema)]
struct Charged {
    /// The provider's operation for the charge.
    charge_id: String,
}

/// Charges at a payments provider, made on behalf of the deployment's merchant account: a key
/// names one charge of that account, whichever tenant or principal sends it.
#[derive(Clone)]
struct Payments {
    client: ProviderClient,
    /// When set, the key the caller sent goes to the provider as is (wrong: it is not the key
    /// as the host scopes it).
    forwards_raw_key: bool,
}

#[connector(id = "account-payments")]
impl Payments {
    /// Charge a customer.
    #[capability(
        id = "cap:account-payments:charge",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = external_account),
        data(sensitivity = confidential),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"customer": "cus_1", "amount": 1200}"#],
    )]
    async fn charge(
        &self,
        charge: Charge,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Charged, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "double".into(),
            operation_id: format!("op-{}", key.for_provider()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let request = self.client.post("/charges");
        let request = if self.forwards_raw_key {
            request.idempotency_key(key.as_str())
        } else {
            request.idempotency(&key)
        };
        let answer: Value = request
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .json(&json!({ "customer": charge.customer, "amount": charge.amount }))
            .send_json()
            .await?;
        Ok(Charged {
            charge_id: answer["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

fn payments(url: &str) -> Payments {
    Payments {
        client: common::double_client(url),
        forwards_raw_key: false,
    }
}

fn assert_every_applicable_check_passed(report: &ConformanceReport) {
    assert!(report.passed(), "{report}");
    for check in &report.checks {
        assert_ne!(check.status, CheckStatus::Failed, "{report}");
    }
    for scenario in [
        Scenario::IdentityCredentials,
        Scenario::SchemaEnforcement,
        Scenario::IdempotencyDuplicates,
        Scenario::RetryExhaustion,
        Scenario::ErrorsUncertainOutcomes,
        Scenario::TransactionLifecycle,
        Scenario::AuditRedaction,
        Scenario::RestartReconnect,
    ] {
        let check = report.check(&scenario.check_name()).unwrap();
        assert_eq!(check.status, CheckStatus::Passed, "{scenario}: {report}");
        for name in scenario.required_assertions() {
            assert_eq!(check.assertions.get(*name), Some(&true), "{name}: {report}");
        }
    }
}

#[test]
fn an_external_account_scoped_write_passes_every_applicable_check_out_of_the_box() {
    let report = ConformanceSuite::new(|env| payments(env.provider_url())).run();
    assert_every_applicable_check_passed(&report);
    // The scoped key the host stored names the documented test account.
    let idempotency = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    let account = format!("ExternalAccount:{EXTERNAL_ACCOUNT_SYSTEM}:{EXTERNAL_ACCOUNT_ID}:");
    assert!(
        idempotency
            .artifacts
            .iter()
            .any(|a| a.starts_with(&format!("idempotency:{account}"))),
        "{:?}",
        idempotency.artifacts
    );
    assert_eq!(
        (EXTERNAL_ACCOUNT_SYSTEM, EXTERNAL_ACCOUNT_ID),
        ("conformance", "acct-conformance")
    );
}

#[test]
fn the_suite_acts_as_the_account_it_is_given_and_the_factory_sees_it() {
    let account = ExternalAccountRef {
        id: "acct_9".to_owned(),
        system: "stripe".to_owned(),
    };
    let expected = account.clone();
    let report = ConformanceSuite::new(move |env| {
        assert_eq!(env.external_account(), &expected);
        payments(env.provider_url())
    })
    .with_external_account(account)
    .run();
    assert_every_applicable_check_passed(&report);
    let idempotency = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert!(
        idempotency
            .artifacts
            .iter()
            .any(|a| a.starts_with("idempotency:ExternalAccount:stripe:acct_9:")),
        "{:?}",
        idempotency.artifacts
    );
}

#[test]
fn forwarding_the_callers_key_under_an_external_account_scope_fails_delivery_id_stable() {
    let report = ConformanceSuite::new(|env| Payments {
        forwards_raw_key: true,
        ..payments(env.provider_url())
    })
    .run();
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert_eq!(check.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        check.assertions.get("delivery_id_stable"),
        Some(&false),
        "{report}"
    );
    // The detail names the key the provider should have received: the digest of the key as
    // the host scopes it under the test account.
    let scoped = format!(
        "ExternalAccount:{EXTERNAL_ACCOUNT_SYSTEM}:{EXTERNAL_ACCOUNT_ID}:conformance-idempotency-duplicate-cap:account-payments:charge"
    );
    assert!(
        check
            .detail
            .contains(&IdempotencyKey::provider_key_of(&scoped)),
        "{}",
        check.detail
    );
    assert!(check.detail.contains(&scoped), "{}", check.detail);
}

// The one-line form, with a configured suite: one `#[test]` per check.
aip_connector_testkit::conformance_tests!(
    suite = ConformanceSuite::new(|env| payments(env.provider_url())).with_external_account(
        ExternalAccountRef {
            id: "acct_macro".to_owned(),
            system: "payments".to_owned(),
        }
    )
);
