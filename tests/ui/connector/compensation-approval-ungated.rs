// The undo requires approval, but the capability it compensates does not gate its compensations:
// the host approves an undo under the compensated capability's contract, so the `Approval`
// parameter of the undo would never receive one.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [write], data(sensitivity = internal), transaction(modes = [execute, compensate]), compensation(capability = "cap:demo:remove"))]
    async fn create(&self, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [delete], data(sensitivity = internal), approval(selector = role("admin"), evidence = [reason]))]
    async fn remove(&self, _key: IdempotencyKey, _approval: Approval, _compensation: Compensation) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
