// A capability names itself as its compensation: a `compensate` would run its own handler again.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(id = "cap:demo:save", risk = low, side_effects = [write], data(sensitivity = internal), transaction(modes = [execute, compensate]), compensation(capability = "cap:demo:save"))]
    async fn save(&self, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
