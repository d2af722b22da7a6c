// A companion naming no method of the impl block, but close to one, is reported on the name.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::fnd,
    )]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }
}

fn main() {}
