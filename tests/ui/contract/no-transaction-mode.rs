// C12: a transaction section declares at least one mode.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = []))]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
