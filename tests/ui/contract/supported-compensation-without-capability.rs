// C14: `supported` compensation names the capability that compensates.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = [execute, compensate]), compensation(supported))]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
