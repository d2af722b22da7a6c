// A misspelt compensation target is reported on the name, with the closest capability id.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = [execute, compensate]), compensation(capability = "cap:demo:refnd"))]
    async fn charge(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn refund(&self, _compensation: Compensation) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
