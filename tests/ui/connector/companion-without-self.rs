// A companion named by the bare name of a method of the block: a method is not in scope by its
// bare name, so the macro says to write `Self::` (rustc's own error suggested rewriting the
// `#[connector]` attribute).
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        transaction(modes = [execute, reconcile]),
        reconcile = find,
    )]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }
}

fn main() {}
