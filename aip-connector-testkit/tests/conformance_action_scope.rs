//! A write whose idempotency keys are scoped to the action (`idempotency(scope = action)`)
//! passes the whole suite: by declaration a new action id is a new key, so the restart
//! scenario's resend under a new action id, which it used to count as a duplicate effect, is not
//! sent for it.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceSuite, Scenario};
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Note {
    booking_id: String,
    note: String,
}

#[derive(Serialize, JsonSchema)]
struct Changed {
    operation_id: String,
}

/// Notes on bookings, each keyed by the action that adds it.
#[derive(Clone)]
struct Notes {
    client: ProviderClient,
}

#[connector(id = "notes")]
impl Notes {
    /// Add a note.
    #[capability(
        id = "cap:notes:annotate",
        risk = low,
        side_effects = [write],
        idempotency(collision = return_original_result, scope = action),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"booking_id": "op-1", "note": "Bring the slides"}"#],
    )]
    async fn annotate(
        &self,
        note: Note,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Changed, ConnectorFailure> {
        let op = format!("op-{}", key.for_provider());
        checkpoint
            .record(
                aip_connector::model::ProviderOperationRef {
                    provider: "double".into(),
                    operation_id: op.clone(),
                    request_id: None,
                },
                None,
            )
            .await?;
        let path = format!("/bookings/{}/notes", note.booking_id);
        let _answer: Value = self
            .client
            .post(&path)
            .idempotency(&key)
            .header(
                aip_connector_testkit::provider_double::OPERATION_ID_HEADER,
                &op,
            )
            .json(&json!({ "note": note.note }))
            .send_json()
            .await?;
        Ok(Changed { operation_id: op })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let path = format!("/operations/{}", request.provider_operation.operation_id);
        let answer: Value = self.client.get(&path).send_json().await?;
        Ok(match answer["state"].as_str() {
            Some("committed") => ReconcileOutcome::Committed {
                evidence: Some(answer),
            },
            Some("pending") => ReconcileOutcome::Pending { cursor: None },
            _ => ReconcileOutcome::NotCommitted {
                evidence: Some(answer),
            },
        })
    }
}

#[test]
fn an_action_scoped_transactional_write_passes_every_scenario() {
    let report = ConformanceSuite::new(|env| Notes {
        client: ProviderClient::builder(env.provider_url())
            .proxy_from_environment(false)
            .build()
            .expect("the double's URL is valid"),
    })
    .run();
    assert!(report.passed(), "{report}");
    let restart = report
        .check(&Scenario::RestartReconnect.check_name())
        .unwrap();
    assert!(
        restart
            .detail
            .contains("scopes keys to the action, so only a resend of the same action was checked"),
        "{}",
        restart.detail
    );
}
