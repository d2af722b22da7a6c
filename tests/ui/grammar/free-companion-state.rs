// A handler that takes `State<S>` has companions called with it first: `find` takes the
// request alone.
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

fn main() {}
