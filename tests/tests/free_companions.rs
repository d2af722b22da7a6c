//! Companions of free capabilities (`reconcile = f`, `cancel = f`, `validate = f`, each a free
//! `async fn`): assembled with `ConnectorBuilder`, the host calls them as it calls the
//! companions of a `#[connector]` impl block.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use aip_connector::codes;
use aip_connector::host::{CancelOutcome, Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, ConnectorOperation, ErrorCategory, Principal,
    PrincipalKind, ProviderOperationRef, TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::{BuiltConnector, CancelRequest, ConnectorBuilder, VerifiedTenant};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
    /// `"uncertain"`: the provider's answer is lost after it wrote the note.
    #[serde(default)]
    behaviour: String,
}

#[derive(Serialize, JsonSchema)]
struct Created {
    note_id: String,
}

/// Free functions keep no state of their own; the test's provider double is process-wide.
static WRITES: AtomicUsize = AtomicUsize::new(0);
static STOPPED: Mutex<Vec<CancelRequest>> = Mutex::new(Vec::new());
static EXPORT_WAITING: LazyLock<tokio::sync::Notify> = LazyLock::new(tokio::sync::Notify::new);

/// Create a note; its lost answers are settled by asking the provider.
#[capability(
    id = "cap:notes:create",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    transaction(modes = [execute, reconcile], fidelity = policy_and_schema),
    reconcile = find_note,
)]
async fn create_note(
    note: Note,
    key: IdempotencyKey,
    checkpoint: Checkpoint,
) -> Result<Created, ConnectorFailure> {
    let operation = ProviderOperationRef {
        provider: "notes".into(),
        operation_id: format!("op-{}", key.as_str()),
        request_id: None,
    };
    checkpoint.record(operation.clone(), None).await?;
    WRITES.fetch_add(1, Ordering::SeqCst);
    if note.behaviour == "uncertain" {
        return Err(ConnectorFailure::new(
            "notes.reset",
            "connection reset after send",
            ErrorCategory::Temporary,
            ConnectorOperation::TransactionCommit,
            "notes",
        )
        .with_retryable(true)
        .with_uncertain_outcome()
        .with_provider_operation(operation));
    }
    Ok(Created {
        note_id: format!("n-{}", note.text),
    })
}

async fn find_note(request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
    Ok(ReconcileOutcome::Committed {
        evidence: Some(json!({ "found": request.provider_operation.operation_id })),
    })
}

#[derive(Deserialize, JsonSchema)]
struct Export {
    format: String,
}

/// Export the notes; a stopped export is stopped at the provider too.
#[capability(
    id = "cap:notes:export",
    risk = low,
    side_effects = [write],
    idempotency(required, scope = tenant),
    data(sensitivity = internal),
    cancel = stop_export,
)]
async fn export(export: Export, _key: IdempotencyKey) -> Result<Created, ConnectorFailure> {
    EXPORT_WAITING.notify_one();
    std::future::pending::<()>().await;
    Ok(Created {
        note_id: export.format,
    })
}

async fn stop_export(request: CancelRequest) -> Result<(), ConnectorFailure> {
    STOPPED.lock().unwrap().push(request);
    Ok(())
}

/// Rename a note; a preview asks the provider whether it would accept the change.
#[capability(
    id = "cap:notes:rename",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    transaction(modes = [dry_run, plan, commit], fidelity = downstream_validation),
    validate = check_rename,
)]
async fn rename(
    note: Note,
    _key: IdempotencyKey,
    _checkpoint: Checkpoint,
) -> Result<Created, ConnectorFailure> {
    Ok(Created {
        note_id: format!("renamed-{}", note.text),
    })
}

async fn check_rename(note: Note) -> Result<Created, ConnectorFailure> {
    Ok(Created {
        note_id: format!("would-rename-{}", note.text),
    })
}

/// A plain read without companions.
#[capability(id = "cap:notes:count", risk = low, side_effects = [read], data(sensitivity = public))]
async fn count() -> Result<u64, ConnectorFailure> {
    Ok(WRITES.load(Ordering::SeqCst) as u64)
}

fn notes() -> BuiltConnector {
    ConnectorBuilder::new("notes")
        .capability::<create_note>()
        .capability::<export>()
        .capability::<rename>()
        .capability::<count>()
        .build()
        .unwrap()
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host() -> Host {
    Host::builder().connector(notes()).build().unwrap()
}

#[test]
fn the_companions_are_published_as_implementation_support() {
    let connector = notes();
    let facts = |id: &str| {
        connector
            .definition()
            .capabilities
            .iter()
            .find(|c| c.capability.id.as_str() == id)
            .unwrap()
            .facts
    };
    assert!(facts("cap:notes:create").support.reconciliation);
    assert!(facts("cap:notes:export").support.cancellation);
    assert!(facts("cap:notes:rename").validation_handler);
    assert!(!facts("cap:notes:count").support.reconciliation);
    assert!(!facts("cap:notes:count").support.cancellation);
}

#[tokio::test]
async fn a_lost_answer_is_reconciled_by_the_free_companion() {
    let host = host();
    let id = TransactionId::new();
    let mut execute = ActionTransaction::new(TransactionMode::Execute);
    execute.transaction_id = Some(id.clone());
    let uncertain = host
        .invoke(
            Action::new(
                "cap:notes:create",
                json!({ "text": "a", "behaviour": "uncertain" }),
            )
            .with_idempotency_key("create-1")
            .with_transaction(execute),
            &caller(),
        )
        .await;
    assert_eq!(uncertain.error.as_ref().unwrap().code, "notes.reset");
    let writes = WRITES.load(Ordering::SeqCst);

    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(id);
    let reconciled = host
        .invoke(
            Action::new("cap:notes:create", json!({ "text": "a" }))
                .with_idempotency_key("reconcile-1")
                .with_transaction(reconcile),
            &caller(),
        )
        .await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    let reconciliation = &reconciled.output.unwrap()["reconciliation"];
    assert_eq!(reconciliation["committed"], true);
    // What the handler checkpointed before its provider call (it named the operation after
    // the caller's key).
    assert_eq!(
        reconciliation["evidence"]["found"], "op-create-1",
        "{reconciliation}"
    );
    assert_eq!(
        WRITES.load(Ordering::SeqCst),
        writes,
        "reconciled by asking, not by writing again"
    );
}

#[tokio::test]
async fn a_cancelled_action_calls_the_free_cancel_companion() {
    let host = host();
    let action = Action::new("cap:notes:export", json!({ "format": "csv" }))
        .with_idempotency_key("export-1");
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    EXPORT_WAITING.notified().await;
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    let stopped: Vec<CancelRequest> = STOPPED
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.action_id == id)
        .cloned()
        .collect();
    assert_eq!(stopped.len(), 1, "called exactly once: {stopped:?}");
    assert_eq!(
        stopped[0].idempotency_key.as_deref(),
        Some(IdempotencyKey::provider_key_of("Tenant:t1:export-1").as_str())
    );
}

#[tokio::test]
async fn a_preview_runs_the_free_validation_companion() {
    let host = host();
    let preview = host
        .invoke(
            Action::new("cap:notes:rename", json!({ "text": "b" }))
                .with_idempotency_key("rename-1")
                .with_transaction(ActionTransaction::new(TransactionMode::DryRun)),
            &caller(),
        )
        .await;
    assert_eq!(preview.status, ActionResultStatus::Completed, "{preview:?}");
    assert!(
        preview
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("would-rename-b"),
        "the companion's answer is the preview: {preview:?}"
    );
}

#[tokio::test]
async fn a_capability_without_the_companion_answers_unsupported() {
    let connector = notes();
    let unsupported = connector
        .cancel(
            "cap:notes:count",
            CancelRequest::new(aip_connector::ids::ActionId::new()),
        )
        .await
        .unwrap_err();
    assert_eq!(unsupported.code, codes::CONNECTOR_OPERATION_UNSUPPORTED);
    let unknown = connector
        .cancel(
            "cap:notes:nothing",
            CancelRequest::new(aip_connector::ids::ActionId::new()),
        )
        .await
        .unwrap_err();
    // As a `#[connector]` answers: the host never asks for an unknown capability's companion.
    assert_eq!(unknown.code, codes::CONNECTOR_OPERATION_UNSUPPORTED);
    let context: Arc<dyn aip_connector::InvocationContext> =
        Arc::new(aip_connector::StaticInvocation::new(
            Action::new("cap:notes:create", json!({})),
            aip_connector::CallerIdentity::new("user:ada", "test"),
        ));
    let no_validation = connector
        .validate("cap:notes:create", &json!({ "text": "c" }), context)
        .await
        .unwrap_err();
    assert_eq!(no_validation.code, codes::CONNECTOR_OPERATION_UNSUPPORTED);
}
