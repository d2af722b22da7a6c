// A free capability declaring the `reconcile` mode without a companion: the usual fix,
// `reconcile = Self::...`, names nothing outside an impl block, so the message asks for a free
// `async fn` instead.
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
