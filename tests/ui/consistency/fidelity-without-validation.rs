// Downstream dry-run fidelity needs a validation handler.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = [dry_run], fidelity = downstream_validation))]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
