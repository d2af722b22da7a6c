//! Writes whose idempotency keys are scoped to the action (`idempotency(scope = action)`): by
//! declaration a new action id is a new key, so the suite resends such a call as the same
//! action, never as the same key under a new action id (which it used to count as a duplicate
//! effect). A write that `execute`s passes the whole suite; one that only plans and commits
//! passes the idempotency and restart scenarios, since the suite derives each commit's action id
//! from its plan's, as a client resending a lost commit would.

mod common;

use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceReport, ConformanceSuite, Scenario};
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

/// Posts a note, its provider operation checkpointed first.
async fn post_note(
    client: &ProviderClient,
    note: Note,
    key: IdempotencyKey,
    checkpoint: Checkpoint,
) -> Result<Changed, ConnectorFailure> {
    let operation_id = format!("op-{}", key.for_provider());
    let operation = ProviderOperationRef {
        provider: "double".into(),
        operation_id: operation_id.clone(),
        request_id: None,
    };
    checkpoint.record(operation, None).await?;
    client
        .post(&format!("/bookings/{}/notes", note.booking_id))
        .idempotency(&key)
        .header(
            aip_connector_testkit::provider_double::OPERATION_ID_HEADER,
            &operation_id,
        )
        .json(&json!({ "note": note.note }))
        .send_json::<Value>()
        .await?;
    Ok(Changed { operation_id })
}

/// Notes on bookings, each keyed by the action that adds it, executed directly.
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
        post_note(&self.client, note, key, checkpoint).await
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

/// The same notes, planned and committed.
#[derive(Clone)]
struct PlannedNotes {
    client: ProviderClient,
}

#[connector(id = "planned-notes")]
impl PlannedNotes {
    /// Add a note, once its plan is committed.
    #[capability(
        id = "cap:planned-notes:annotate",
        risk = low,
        side_effects = [write],
        idempotency(collision = return_original_result, scope = action),
        data(sensitivity = internal),
        transaction(modes = [plan, commit, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"booking_id": "op-1", "note": "Bring the slides"}"#],
    )]
    async fn annotate(
        &self,
        note: Note,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Changed, ConnectorFailure> {
        post_note(&self.client, note, key, checkpoint).await
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

fn assert_restart_resent_the_same_action_only(report: &ConformanceReport) {
    let restart = report
        .check(&Scenario::RestartReconnect.check_name())
        .unwrap();
    assert!(restart.passed(), "{report}");
    assert!(
        restart
            .detail
            .contains("scopes keys to the action, so only a resend of the same action was checked"),
        "{}",
        restart.detail
    );
}

#[test]
fn an_action_scoped_executing_write_passes_every_scenario() {
    let report = ConformanceSuite::new(|env| Notes {
        client: common::double_client(env.provider_url()),
    })
    .run();
    assert!(report.passed(), "{report}");
    assert_restart_resent_the_same_action_only(&report);
}

#[test]
fn an_action_scoped_planned_write_passes_the_idempotency_and_restart_scenarios() {
    let report = ConformanceSuite::new(|env| PlannedNotes {
        client: common::double_client(env.provider_url()),
    })
    .run();
    for scenario in [
        Scenario::IdempotencyDuplicates,
        Scenario::TransactionLifecycle,
        Scenario::ErrorsUncertainOutcomes,
    ] {
        assert!(
            report.check(&scenario.check_name()).unwrap().passed(),
            "{scenario}: {report}"
        );
    }
    assert_restart_resent_the_same_action_only(&report);
    // What docs/testkit.md says stays: a failed commit ends its plan, so each retry plans and
    // commits anew, under a new key by this scope, which the provider cannot recognise.
    let retry = report
        .check(&Scenario::RetryExhaustion.check_name())
        .unwrap();
    assert_eq!(
        retry.assertions.get("exhaustion_dead_lettered"),
        Some(&false),
        "{report}"
    );
}
