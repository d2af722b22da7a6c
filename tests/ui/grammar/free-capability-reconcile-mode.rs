// A free capability declaring the `reconcile` mode: the usual fix, a `reconcile = Self::...`
// companion, is not available outside an impl block, and the message says so.
use aip_connector::prelude::*;

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
)]
async fn create(note: Note, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<String, ConnectorFailure> {
    Ok(note.text)
}

fn main() {}
