//! The calendar example through a real host and the provider double: the seed's contract, the
//! checkpoint written before the provider call, tenant-scoped keys and lookups, and every
//! reconciliation answer.

use std::sync::Arc;

use aip_connector::codes;
use aip_connector::host::{Host, TransactionSelector, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::MemoryStore;
use aip_connector::{ConnectorDefinition, VerifiedTenant};
use aip_connector_examples::calendar::{self, Calendar};
use aip_connector_examples::loopback_client;
use aip_connector_testkit::fixtures::seed_booking_capability_json;
use aip_connector_testkit::provider_double::{Fault, ProviderDouble, ProviderHandle};
use serde_json::{Value, json};

fn caller_in(tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new(tenant))
}

async fn world() -> (Host, ProviderHandle, ProviderDouble) {
    let (double, provider) = ProviderDouble::start().await;
    let host = Host::builder()
        .connector(Calendar::new(
            loopback_client(double.base_url(), "calendar").unwrap(),
        ))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    (host, provider, double)
}

fn book(starts_at: &str, key: &str, mode: TransactionMode, id: &TransactionId) -> Action {
    let mut block = ActionTransaction::new(mode);
    block.transaction_id = Some(id.clone());
    Action::new(calendar::CREATE_BOOKING, json!({ "starts_at": starts_at }))
        .with_idempotency_key(key)
        .with_transaction(block)
}

fn definition() -> ConnectorDefinition {
    let provider = loopback_client("http://127.0.0.1:9", "calendar").unwrap();
    Calendar::new(provider).definition().clone()
}

fn output(result: &ActionResult) -> &Value {
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    result.output.as_ref().unwrap()
}

#[test]
fn the_booking_capability_is_the_seeds_with_a_transaction_section() {
    let definition = definition();
    let capability = &definition
        .capability(calendar::CREATE_BOOKING)
        .unwrap()
        .capability;
    let published = serde_json::to_value(capability).unwrap();
    let seed = seed_booking_capability_json();
    for key in ["id", "name", "kind", "risk", "stability"] {
        assert_eq!(published[key], seed[key], "{key}");
    }
    let mut contract = published["contract"].clone();
    let transaction = contract.as_object_mut().unwrap().remove("transaction");
    assert_eq!(
        contract, seed["contract"],
        "everything but the transaction section is the seed's"
    );
    assert_eq!(
        transaction,
        Some(json!({
            "supported_modes": ["execute", "plan", "commit", "reconcile"],
            "requires_plan_before_commit": true,
            "dry_run_fidelity": "policy_and_schema"
        }))
    );
    for schema in ["input_schema", "output_schema"] {
        for key in ["type", "required", "additionalProperties"] {
            assert_eq!(published[schema][key], seed[schema][key], "{schema}/{key}");
        }
    }
    assert_eq!(
        published["input_schema"]["properties"]["starts_at"]["format"],
        "date-time"
    );
}

#[tokio::test]
async fn the_operation_is_checkpointed_and_sent_with_a_tenant_scoped_key() {
    let (host, provider, _double) = world().await;
    let id = TransactionId::new();
    let result = host
        .invoke(
            book("2026-12-01T09:00:00Z", "k1", TransactionMode::Execute, &id),
            &caller_in("acme"),
        )
        .await;
    let booking_id = output(&result)["booking_id"].as_str().unwrap().to_owned();

    let view = host
        .transaction(&TransactionSelector::Transaction(id), &caller_in("acme"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::Committed);
    let operation = view.provider_operation.unwrap();
    assert_eq!(operation.provider, calendar::PROVIDER);
    assert_eq!(operation.operation_id, booking_id);

    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, calendar::BOOKINGS_ROUTE);
    assert_eq!(
        requests[0].header("x-operation-id"),
        Some(booking_id.as_str())
    );
    // The key as the host scopes it (`key_scope = tenant`), digested: another tenant's `k1` is
    // another operation at the provider, and the provider never sees the tenant id.
    let sent = IdempotencyKey::provider_key_of("Tenant:acme:k1");
    assert_eq!(requests[0].idempotency_key(), Some(sent.as_str()));
    assert_eq!(
        requests[0].json(),
        Some(json!({ "calendar": "acme", "starts_at": "2026-12-01T09:00:00Z" }))
    );

    // Another tenant's identical key and input is another booking, not a collision.
    let other = host
        .invoke(
            book(
                "2026-12-01T09:00:00Z",
                "k1",
                TransactionMode::Execute,
                &TransactionId::new(),
            ),
            &caller_in("globex"),
        )
        .await;
    assert_ne!(output(&other)["booking_id"], booking_id.as_str());
    assert_eq!(provider.effect_total(), 2);
}

#[tokio::test]
async fn a_start_time_that_is_not_rfc3339_never_reaches_the_provider() {
    let (host, provider, _double) = world().await;
    let result = host
        .invoke(
            book(
                "next tuesday at nine",
                "k1",
                TransactionMode::Execute,
                &TransactionId::new(),
            ),
            &caller_in("acme"),
        )
        .await;
    let error = result.error.unwrap();
    assert_eq!(error.code, "calendar.starts_at_invalid");
    assert!(!error.message.contains("tuesday"), "the value is PII");
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn a_lookup_shows_a_tenant_its_own_bookings_only() {
    let (host, _provider, _double) = world().await;
    let booked = host
        .invoke(
            book(
                "2026-12-01T09:00:00Z",
                "k1",
                TransactionMode::Execute,
                &TransactionId::new(),
            ),
            &caller_in("acme"),
        )
        .await;
    let booking_id = output(&booked)["booking_id"].clone();
    let look_up = |tenant: &'static str| {
        let host = host.clone();
        let booking_id = booking_id.clone();
        async move {
            host.invoke(
                Action::new(calendar::GET_BOOKING, json!({ "booking_id": booking_id })),
                &caller_in(tenant),
            )
            .await
        }
    };
    assert_eq!(
        output(&look_up("acme").await).clone(),
        json!({ "booking_id": booking_id, "state": "confirmed", "starts_at": "2026-12-01T09:00:00Z" })
    );
    assert_eq!(
        output(&look_up("globex").await).clone(),
        json!({ "booking_id": booking_id, "state": "unknown" })
    );
    let missing = host
        .invoke(
            Action::new(calendar::GET_BOOKING, json!({ "booking_id": "bk_nope" })),
            &caller_in("acme"),
        )
        .await;
    assert_eq!(output(&missing)["state"], "unknown");
}

/// Books while the provider drops the connection (committing first, or not), then reconciles
/// under a new key.
async fn lose_the_answer(
    fault: Fault,
    pending_lookups: usize,
) -> (Host, ProviderHandle, ProviderDouble, TransactionId) {
    let (host, provider, double) = world().await;
    provider.inject(calendar::BOOKINGS_ROUTE, fault);
    provider.lookups_pending(pending_lookups);
    let id = TransactionId::new();
    let first = host
        .invoke(
            book("2026-12-01T09:00:00Z", "k1", TransactionMode::Execute, &id),
            &caller_in("acme"),
        )
        .await;
    let error = first.error.as_ref().unwrap();
    assert_eq!(error.code, codes::PROVIDER_OUTCOME_UNKNOWN, "{first:?}");
    (host, provider, double, id)
}

async fn reconcile(host: &Host, id: &TransactionId, key: &str) -> ActionResult {
    host.invoke(
        book("2026-12-01T09:00:00Z", key, TransactionMode::Reconcile, id),
        &caller_in("acme"),
    )
    .await
}

#[tokio::test]
async fn a_booking_the_provider_made_is_reconciled_as_committed() {
    let (host, provider, _double, id) = lose_the_answer(Fault::drop_connection(), 0).await;
    let reconciled = reconcile(&host, &id, "r1").await;
    let answer = &output(&reconciled)["reconciliation"];
    assert_eq!(answer["committed"], true);
    assert_eq!(answer["evidence"]["state"], "committed");
    assert_eq!(provider.effect_total(), 1);
}

#[tokio::test]
async fn a_booking_the_provider_never_made_is_reconciled_as_not_committed() {
    let (host, provider, _double, id) =
        lose_the_answer(Fault::drop_connection().without_effect(), 0).await;
    let reconciled = reconcile(&host, &id, "r1").await;
    assert_eq!(output(&reconciled)["reconciliation"]["committed"], false);
    assert_eq!(provider.effect_total(), 0);
    let view = host
        .transaction(&TransactionSelector::Transaction(id), &caller_in("acme"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::Reconciled);
}

#[tokio::test]
async fn a_pending_answer_keeps_the_outcome_unknown_until_the_provider_decides() {
    let (host, _provider, _double, id) = lose_the_answer(Fault::drop_connection(), 1).await;
    let pending = reconcile(&host, &id, "r1").await;
    assert_eq!(
        pending.error.as_ref().unwrap().code,
        codes::TRANSACTION_RECONCILIATION_PENDING
    );
    let view = host
        .transaction(
            &TransactionSelector::Transaction(id.clone()),
            &caller_in("acme"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::OutcomeUnknown);
    let settled = reconcile(&host, &id, "r2").await;
    assert_eq!(output(&settled)["reconciliation"]["committed"], true);
}

#[tokio::test]
async fn a_commit_needs_its_plan() {
    let (host, provider, _double) = world().await;
    let planned = host
        .invoke(
            book(
                "2026-12-01T09:00:00Z",
                "p1",
                TransactionMode::Plan,
                &TransactionId::new(),
            ),
            &caller_in("acme"),
        )
        .await;
    let plan_id = output(&planned)["plan"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(provider.request_count(), 0, "planning calls nobody");

    // Committing other input than was planned is refused.
    let mut changed = ActionTransaction::new(TransactionMode::Commit);
    changed.plan_id = Some(plan_id.clone());
    let refused = host
        .invoke(
            Action::new(
                calendar::CREATE_BOOKING,
                json!({ "starts_at": "2026-12-02T09:00:00Z" }),
            )
            .with_idempotency_key("c1")
            .with_transaction(changed.clone()),
            &caller_in("acme"),
        )
        .await;
    assert_eq!(
        refused.error.as_ref().unwrap().code,
        codes::TRANSACTION_PLAN_INPUT_HASH_MISMATCH
    );
    let committed = host
        .invoke(
            Action::new(
                calendar::CREATE_BOOKING,
                json!({ "starts_at": "2026-12-01T09:00:00Z" }),
            )
            .with_idempotency_key("c2")
            .with_transaction(changed),
            &caller_in("acme"),
        )
        .await;
    assert!(output(&committed)["booking_id"].is_string());
    assert_eq!(provider.effect_total(), 1);
}
