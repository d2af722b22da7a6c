// Free capabilities with companions, each a free `async fn`, compile cleanly under
// `#![deny(warnings)]` and assemble with `ConnectorBuilder`.
#![deny(warnings)]

use aip_connector::prelude::*;
use aip_connector::{CancelRequest, ConnectorBuilder};

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

/// Create a note.
#[capability(
    id = "cap:notes:create",
    risk = medium,
    side_effects = [write],
    idempotency(required, scope = tenant),
    data(sensitivity = internal),
    transaction(modes = [dry_run, plan, commit, execute, reconcile], fidelity = downstream_validation),
    reconcile = notes::find,
    validate = check,
    cancel = stop,
)]
async fn create(note: Note, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

mod notes {
    use aip_connector::prelude::*;

    pub async fn find(_request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }
}

async fn check(note: Note) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

async fn stop(_request: CancelRequest) -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {
    let connector = ConnectorBuilder::new("notes").capability::<create>().build();
    assert!(connector.is_ok());
}
