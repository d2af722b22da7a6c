// A free companion is checked by rustc where it is named: `find` takes a `CancelRequest`, not
// the `Reconciliation` the host passes, and `stop` is not `async`.
use aip_connector::prelude::*;
use aip_connector::CancelRequest;

async fn find(_request: CancelRequest) -> Result<ReconcileOutcome, ConnectorFailure> {
    Ok(ReconcileOutcome::Pending { cursor: None })
}

fn stop(_request: CancelRequest) -> Result<(), ConnectorFailure> {
    Ok(())
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
    cancel = stop,
)]
async fn create(note: Note, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

fn main() {}
