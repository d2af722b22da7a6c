// A required approval names its evidence.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(required))]
    async fn look(&self, _approval: Approval) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
