//! Free capabilities with connector state: `ConnectorBuilder::with_state(id, state)` and handlers
//! (and their companions) taking `State<S>`. Two connectors built from the same functions keep
//! their state apart, which process-wide statics (the only option before) could not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aip_connector::host::{CancelOutcome, Host, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, Principal, PrincipalKind, TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::{BuiltConnector, VerifiedTenant};
use serde_json::json;

/// What the notes capabilities share: the provider double of one connector.
#[derive(Clone, Default)]
struct Notes {
    written: Arc<Mutex<Vec<String>>>,
    reconciled: Arc<AtomicUsize>,
    previews: Arc<AtomicUsize>,
    stopped: Arc<Mutex<Vec<CancelRequest>>>,
    started: Arc<tokio::sync::Notify>,
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
    /// The provider's answer is lost after it wrote the note.
    #[serde(default)]
    lost: bool,
}

#[derive(Serialize, JsonSchema)]
struct Written {
    /// How many notes this connector holds.
    count: usize,
}

/// Write a note to this connector's provider.
#[capability(
    id = "cap:notes:write",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = principal),
    data(sensitivity = internal),
    transaction(modes = [execute, dry_run, reconcile], fidelity = downstream_validation),
    reconcile = find_note,
    validate = preview_note,
)]
async fn write(
    State(notes): State<Notes>,
    note: Note,
    key: IdempotencyKey,
    checkpoint: Checkpoint,
) -> Result<Written, ConnectorFailure> {
    let operation = ProviderOperationRef {
        provider: "notes".into(),
        operation_id: format!("op-{}", key.as_str()),
        request_id: None,
    };
    checkpoint.record(operation.clone(), None).await?;
    let count = {
        let mut written = notes.written.lock().unwrap();
        written.push(note.text);
        written.len()
    };
    if note.lost {
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
    Ok(Written { count })
}

async fn find_note(
    State(notes): State<Notes>,
    _request: Reconciliation,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    notes.reconciled.fetch_add(1, Ordering::SeqCst);
    Ok(ReconcileOutcome::Committed {
        evidence: Some(json!({ "notes": notes.written.lock().unwrap().len() })),
    })
}

async fn preview_note(State(notes): State<Notes>, note: Note) -> Result<Written, ConnectorFailure> {
    notes.previews.fetch_add(1, Ordering::SeqCst);
    Ok(Written {
        count: notes.written.lock().unwrap().len() + usize::from(!note.text.is_empty()),
    })
}

/// Export the notes until cancelled; the cancel reaches this connector's provider.
#[capability(
    id = "cap:notes:export",
    risk = low,
    side_effects = [read],
    data(sensitivity = internal),
    cancel = stop_export,
)]
async fn export(State(notes): State<Notes>) -> Result<Written, ConnectorFailure> {
    notes.started.notify_one();
    std::future::pending::<()>().await;
    Ok(Written { count: 0 })
}

async fn stop_export(
    State(notes): State<Notes>,
    request: CancelRequest,
) -> Result<(), ConnectorFailure> {
    notes.stopped.lock().unwrap().push(request);
    Ok(())
}

/// A capability without state joins a connector with state.
#[capability(id = "cap:notes:ping", risk = low, side_effects = [read], data(sensitivity = public))]
async fn ping() -> Result<String, ConnectorFailure> {
    Ok("pong".to_owned())
}

fn notes(state: Notes) -> BuiltConnector<Notes> {
    ConnectorBuilder::with_state("notes", state)
        .capability::<write>()
        .capability::<export>()
        .capability::<ping>()
        .build()
        .unwrap()
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn write_action(text: &str, key: &str) -> Action {
    Action::new("cap:notes:write", json!({ "text": text })).with_idempotency_key(key)
}

#[tokio::test]
async fn each_connector_keeps_its_own_state() {
    let (first, second) = (Notes::default(), Notes::default());
    let first_host = Host::builder()
        .connector(notes(first.clone()))
        .build()
        .unwrap();
    let second_host = Host::builder()
        .connector(notes(second.clone()))
        .build()
        .unwrap();
    for key in ["a", "b"] {
        let result = first_host.invoke(write_action(key, key), &caller()).await;
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    }
    let result = second_host.invoke(write_action("c", "c"), &caller()).await;
    assert_eq!(
        result.output.unwrap()["count"],
        1,
        "the second connector's own count"
    );
    assert_eq!(*first.written.lock().unwrap(), ["a", "b"]);
    assert_eq!(*second.written.lock().unwrap(), ["c"]);
}

#[tokio::test]
async fn companions_receive_the_state() {
    let state = Notes::default();
    let host = Host::builder()
        .connector(notes(state.clone()))
        .build()
        .unwrap();
    let transaction = TransactionId::new();
    let mut execute = ActionTransaction::new(TransactionMode::Execute);
    execute.transaction_id = Some(transaction.clone());
    let lost = Action::new("cap:notes:write", json!({ "text": "a", "lost": true }))
        .with_idempotency_key("a")
        .with_transaction(execute);
    let lost = host.invoke(lost, &caller()).await;
    assert_eq!(lost.error.unwrap().code, "notes.reset");

    let mut reconcile = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile.transaction_id = Some(transaction);
    let reconciled = host
        .invoke(
            write_action("a", "reconcile").with_transaction(reconcile),
            &caller(),
        )
        .await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    assert_eq!(
        reconciled.output.unwrap()["reconciliation"]["evidence"]["notes"],
        1,
        "the companion read the connector's provider"
    );
    assert_eq!(state.reconciled.load(Ordering::SeqCst), 1);

    let preview = host
        .invoke(
            write_action("b", "preview")
                .with_transaction(ActionTransaction::new(TransactionMode::DryRun)),
            &caller(),
        )
        .await;
    assert_eq!(preview.status, ActionResultStatus::Completed, "{preview:?}");
    assert_eq!(state.previews.load(Ordering::SeqCst), 1);
    assert_eq!(
        state.written.lock().unwrap().len(),
        1,
        "a preview writes nothing"
    );

    let action = Action::new("cap:notes:export", json!({}));
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    state.started.notified().await;
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    let stopped = state.stopped.lock().unwrap();
    assert_eq!(
        stopped.len(),
        1,
        "stopped at this connector's provider: {stopped:?}"
    );
    assert_eq!(stopped[0].action_id, id);
}

#[tokio::test]
async fn a_stateless_capability_joins_a_connector_with_state() {
    let host = Host::builder()
        .connector(notes(Notes::default()))
        .build()
        .unwrap();
    let result = host
        .invoke(Action::new("cap:notes:ping", json!({})), &caller())
        .await;
    assert_eq!(result.output, Some(json!("pong")), "{result:?}");
}

#[test]
fn the_built_connector_holds_its_state() {
    let state = Notes::default();
    state.written.lock().unwrap().push("kept".to_owned());
    let connector = notes(state);
    assert_eq!(*connector.state().written.lock().unwrap(), ["kept"]);
}

#[test]
fn state_debug_names_the_type_not_the_contents() {
    let state = State("sk_live_canary".to_owned());
    let shown = format!("{state:?}");
    assert!(!shown.contains("canary"), "{shown}");
    assert!(shown.contains("String"), "{shown}");
    // Deref reaches the state.
    assert_eq!(state.len(), "sk_live_canary".len());
}

/// A workspace whose state holds the notes and an audit trail: handlers written against `Notes`
/// (above) join it through `FromRef`, next to one that takes the whole workspace.
#[derive(Clone, Default)]
struct Workspace {
    notes: Notes,
    audit: Audit,
}

#[derive(Clone, Default)]
struct Audit(Arc<Mutex<Vec<String>>>);

impl FromRef<Workspace> for Notes {
    fn from_ref(workspace: &Workspace) -> Self {
        workspace.notes.clone()
    }
}

impl FromRef<Workspace> for Audit {
    fn from_ref(workspace: &Workspace) -> Self {
        workspace.audit.clone()
    }
}

/// Reads the audit trail: takes only the part it needs.
#[capability(id = "cap:workspace:audit", risk = low, side_effects = [read], data(sensitivity = internal))]
async fn audit_trail(State(audit): State<Audit>) -> Result<Vec<String>, ConnectorFailure> {
    Ok(audit.0.lock().unwrap().clone())
}

/// Takes the whole workspace: records the export in the audit trail, then counts the notes.
#[capability(id = "cap:workspace:summary", risk = low, side_effects = [read], data(sensitivity = internal))]
async fn summary(State(workspace): State<Workspace>) -> Result<Written, ConnectorFailure> {
    workspace.audit.0.lock().unwrap().push("summary".to_owned());
    Ok(Written {
        count: workspace.notes.written.lock().unwrap().len(),
    })
}

#[tokio::test]
async fn handlers_take_parts_of_the_state_through_from_ref() {
    let workspace = Workspace::default();
    let connector = ConnectorBuilder::with_state("workspace", workspace.clone())
        .capability::<write>()
        .capability::<export>()
        .capability::<audit_trail>()
        .capability::<summary>()
        .capability::<ping>()
        .build()
        .unwrap();
    let host = Host::builder().connector(connector).build().unwrap();

    let written = host.invoke(write_action("a", "a"), &caller()).await;
    assert_eq!(written.status, ActionResultStatus::Completed, "{written:?}");
    assert_eq!(
        *workspace.notes.written.lock().unwrap(),
        ["a"],
        "`State<Notes>` is the workspace's notes"
    );
    let summary = host
        .invoke(Action::new("cap:workspace:summary", json!({})), &caller())
        .await;
    assert_eq!(summary.output, Some(json!({"count": 1})), "{summary:?}");
    let trail = host
        .invoke(Action::new("cap:workspace:audit", json!({})), &caller())
        .await;
    assert_eq!(trail.output, Some(json!(["summary"])), "{trail:?}");

    // A companion takes the handler's part too: the cancel reaches the workspace's notes.
    let action = Action::new("cap:notes:export", json!({}));
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    workspace.notes.started.notified().await;
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    assert_eq!(running.await.unwrap().status, ActionResultStatus::Cancelled);
    assert_eq!(workspace.notes.stopped.lock().unwrap().len(), 1);
}
