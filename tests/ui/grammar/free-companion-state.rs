// A handler that takes `State<S>` has companions called with it first: `find` takes the
// request alone. The reverse: `stop` takes the state, but its handler does not.
use aip_connector::prelude::*;

#[derive(Clone)]
struct Notes;

async fn find(_request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
    Ok(ReconcileOutcome::Pending { cursor: None })
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

#[capability(
    id = "cap:notes:create",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = tenant),
    data(sensitivity = internal),
    transaction(modes = [execute, reconcile]),
    reconcile = find,
)]
async fn create(
    State(_notes): State<Notes>,
    note: Note,
    _key: IdempotencyKey,
    _checkpoint: Checkpoint,
) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

async fn stop(State(_notes): State<Notes>, _request: CancelRequest) -> Result<(), ConnectorFailure> {
    Ok(())
}

#[capability(
    id = "cap:notes:export",
    risk = low,
    side_effects = [read],
    data(sensitivity = internal),
    cancel = stop,
)]
async fn export(note: Note) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

fn main() {}
