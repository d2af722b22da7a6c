// `requires_plan` needs both `plan` and `commit`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), transaction(modes = [execute], requires_plan))]
    async fn look(&self, _checkpoint: Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
