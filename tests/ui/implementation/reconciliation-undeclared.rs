// A reconcile handler exists but no `reconcile` mode is declared.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), reconcile = Self::find)]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }
}

fn main() {}
