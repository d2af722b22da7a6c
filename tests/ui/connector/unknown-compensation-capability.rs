// The compensating capability is not part of this connector.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = [execute, compensate]), compensation(capability = "cap:demo:undo"))]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
