// The handler reads an approval the contract does not require.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _approval: Approval) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
