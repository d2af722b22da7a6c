//! The notes example through real hosts and provider doubles: each connector built from the
//! same free functions calls the provider of its own state, a write's lost answer is settled by
//! the companion through that state, reads see only the tenant's notes, and the capability
//! without state answers beside the others.

use std::sync::Arc;

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    TransactionMode,
};
use aip_connector::store::MemoryStore;
use aip_connector_examples::{loopback_client, notes};
use aip_connector_testkit::provider_double::{Fault, ProviderDouble, ProviderHandle};
use serde_json::{Value, json};

fn caller_in(tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new(tenant))
}

async fn world() -> (Host, ProviderHandle, ProviderDouble) {
    let (double, provider) = ProviderDouble::start().await;
    let connector = notes::connector(loopback_client(double.base_url(), "notes").unwrap()).unwrap();
    let host = Host::builder()
        .connector(connector)
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    (host, provider, double)
}

fn create(text: &str, key: &str, transaction: &TransactionId, mode: TransactionMode) -> Action {
    let mut block = ActionTransaction::new(mode);
    block.transaction_id = Some(transaction.clone());
    Action::new(notes::CREATE_NOTE, json!({ "text": text }))
        .with_idempotency_key(key)
        .with_transaction(block)
}

fn output(result: &ActionResult) -> &Value {
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    result.output.as_ref().unwrap()
}

#[tokio::test]
async fn each_connector_writes_to_the_provider_of_its_own_state() {
    let (first, first_provider, _first_double) = world().await;
    let (second, second_provider, _second_double) = world().await;
    let written = first
        .invoke(
            create(
                "projector",
                "k1",
                &TransactionId::new(),
                TransactionMode::Execute,
            ),
            &caller_in("acme"),
        )
        .await;
    let note_id = output(&written)["note_id"].as_str().unwrap().to_owned();
    assert!(note_id.starts_with("nt_"), "{note_id}");
    assert_eq!(first_provider.effect_total(), 1);
    assert_eq!(
        second_provider.effect_total(),
        0,
        "the other connector's provider"
    );

    let read = |host: Host, tenant: &'static str, note_id: String| async move {
        host.invoke(
            Action::new(notes::GET_NOTE, json!({ "note_id": note_id })),
            &caller_in(tenant),
        )
        .await
    };
    assert_eq!(
        output(&read(first.clone(), "acme", note_id.clone()).await).clone(),
        json!({ "found": true, "text": "projector" })
    );
    assert_eq!(
        output(&read(first, "globex", note_id.clone()).await).clone(),
        json!({ "found": false }),
        "another tenant's note is not found"
    );
    assert_eq!(
        output(&read(second, "acme", note_id).await).clone(),
        json!({ "found": false }),
        "the second connector asks its own provider, which never saw the note"
    );
}

#[tokio::test]
async fn a_lost_answer_is_reconciled_through_the_state() {
    let (host, provider, _double) = world().await;
    provider.inject(notes::NOTES_ROUTE, Fault::drop_connection());
    let id = TransactionId::new();
    let lost = host
        .invoke(
            create("projector", "k1", &id, TransactionMode::Execute),
            &caller_in("acme"),
        )
        .await;
    assert_eq!(
        lost.error.as_ref().unwrap().code,
        codes::PROVIDER_OUTCOME_UNKNOWN,
        "{lost:?}"
    );
    let reconciled = host
        .invoke(
            create("projector", "r1", &id, TransactionMode::Reconcile),
            &caller_in("acme"),
        )
        .await;
    let answer = &output(&reconciled)["reconciliation"];
    assert_eq!(answer["committed"], true, "{answer}");
    assert_eq!(answer["evidence"]["state"], "committed");
    assert_eq!(
        provider.effect_total(),
        1,
        "settled by asking, not by writing again"
    );
}

#[tokio::test]
async fn a_blank_note_is_refused_before_the_provider_is_called() {
    let (host, provider, _double) = world().await;
    let refused = host
        .invoke(
            create("  ", "k1", &TransactionId::new(), TransactionMode::Execute),
            &caller_in("acme"),
        )
        .await;
    assert_eq!(refused.error.as_ref().unwrap().code, "notes.text_invalid");
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn the_capability_without_state_answers_beside_the_others() {
    let (host, _provider, _double) = world().await;
    let limits = host
        .invoke(Action::new(notes::LIMITS, json!({})), &caller_in("acme"))
        .await;
    assert_eq!(
        output(&limits).clone(),
        json!({ "max_note_chars": notes::MAX_NOTE_CHARS })
    );
}
