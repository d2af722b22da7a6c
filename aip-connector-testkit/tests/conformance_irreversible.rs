//! A connector whose only write declares itself irreversible (`rollback_not_supported`) has
//! nothing to compensate, and the suite's note says which capability declared what, instead of
//! "no capability declares compensation" (a warehouse trial's `drop_table` read so).

mod common;

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceSuite, Scenario};
use aip_connector_testkit::provider_double::OPERATION_ID_HEADER;
use serde_json::Value;

#[derive(Deserialize, Serialize, JsonSchema)]
struct Table {
    /// The table to drop.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Dropped {
    /// The table dropped.
    name: String,
}

struct Warehouse {
    api: ProviderClient,
}

#[connector(id = "warehouse")]
impl Warehouse {
    /// Drop a table, for good.
    #[capability(
        risk = medium,
        side_effects = [delete],
        data(sensitivity = internal),
        idempotency(required),
        approval(required, selector = role("dba"), evidence = [reason]),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
        compensation(rollback_not_supported),
        examples = [r#"{"name": "events_2019"}"#],
    )]
    async fn drop_table(
        &self,
        input: Table,
        key: IdempotencyKey,
        _approval: Approval,
        checkpoint: Checkpoint,
    ) -> Result<Dropped, ConnectorFailure> {
        let operation = checkpoint.operation_for(&key, "warehouse", "drop");
        checkpoint.record(operation.clone(), None).await?;
        self.api
            .delete(&format!("/tables/{}", input.name))
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .send_json::<Value>()
            .await?;
        Ok(Dropped { name: input.name })
    }

    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.api, request).await
    }
}

#[test]
fn the_note_names_the_capability_that_declared_its_effects_irreversible() {
    let report = ConformanceSuite::new(|env| Warehouse {
        api: common::double_client(env.provider_url()),
    })
    .run();
    let check = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .expect("the transaction scenario ran");
    assert_eq!(
        check.assertions.get("compensation_governed"),
        Some(&true),
        "{report}"
    );
    let note = check
        .notes
        .iter()
        .find(|n| n.starts_with("compensation_governed"))
        .expect("a note on compensation_governed");
    assert!(
        note.contains("`cap:warehouse:drop_table` (rollback_not_supported)"),
        "{note}"
    );
    assert!(
        !note.contains("no capability declares compensation"),
        "{note}"
    );
}
