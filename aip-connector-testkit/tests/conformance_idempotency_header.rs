//! A provider that reads idempotency keys from a header of its own
//! (`ProviderClient::builder(..).idempotency_header(..)`): the suite checks the connector as
//! shipped once its provider setup tells the double where the key is
//! (`ProviderHandle::set_idempotency_header`), and says where it looked when it is not told
//! (found by an author trial: the double read `Idempotency-Key` only, so such a connector
//! failed `duplicate_suppressed` and `delivery_id_stable` unless tested with another client).

mod common;

use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceReport, ConformanceSuite, Scenario};
use serde_json::{Value, json};

/// The provider's own idempotency header.
const KEY_HEADER: &str = "Postbox-Idempotency-Key";

#[derive(Deserialize, JsonSchema)]
struct Message {
    to: String,
    subject: String,
}

#[derive(Serialize, JsonSchema)]
struct Sent {
    operation_id: String,
}

#[derive(Clone)]
struct Mail {
    client: ProviderClient,
}

#[connector(id = "mail")]
impl Mail {
    /// Send a message.
    #[capability(
        id = "cap:mail:send",
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"to": "ada@example.com", "subject": "Hello"}"#],
    )]
    async fn send(
        &self,
        message: Message,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Sent, ConnectorFailure> {
        let operation_id = format!("op-{}", key.for_provider());
        let operation = ProviderOperationRef {
            provider: "postbox".into(),
            operation_id: operation_id.clone(),
            request_id: None,
        };
        checkpoint.record(operation, None).await?;
        self.client
            .post("/messages")
            .idempotency(&key)
            .header(
                aip_connector_testkit::provider_double::OPERATION_ID_HEADER,
                &operation_id,
            )
            .json(&json!({ "to": message.to, "subject": message.subject }))
            .send_json::<Value>()
            .await?;
        Ok(Sent { operation_id })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

fn run(tell_the_double: bool) -> ConformanceReport {
    let suite = ConformanceSuite::new(|env| Mail {
        client: ProviderClient::builder(env.provider_url())
            .proxy_from_environment(false)
            .idempotency_header(KEY_HEADER)
            .build()
            .expect("the double's URL is valid"),
    });
    if tell_the_double {
        suite
            .with_provider_setup(|provider| provider.set_idempotency_header(KEY_HEADER))
            .run()
    } else {
        suite.run()
    }
}

#[test]
fn a_connector_with_its_providers_own_key_header_passes_once_the_double_reads_it() {
    let report = run(true);
    assert!(report.passed(), "{report}");
}

#[test]
fn a_double_not_told_the_header_says_where_it_looked() {
    let report = run(false);
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("delivery_id_stable"),
        Some(&false),
        "{report}"
    );
    assert!(
        check
            .detail
            .contains("idempotency header `idempotency-key`")
            && check.detail.contains("provider.set_idempotency_header"),
        "{}",
        check.detail
    );
}
