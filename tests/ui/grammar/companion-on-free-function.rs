// Companion handlers are dispatched by a `#[connector]`; a free capability has none.
use aip_connector::prelude::*;

async fn find(_request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
    Ok(ReconcileOutcome::Pending { cursor: None })
}

#[capability(
    id = "cap:demo:look",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
    reconcile = find,
)]
async fn look() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
