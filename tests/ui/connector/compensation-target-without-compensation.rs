// The compensating capability's handler does not take `Compensation`: it cannot read what it undoes.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [write], data(sensitivity = internal), transaction(modes = [execute, compensate]), compensation(capability = "cap:demo:undo"))]
    async fn save(&self, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    async fn undo(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
