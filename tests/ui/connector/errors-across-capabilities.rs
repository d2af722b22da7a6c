// One compile reports a capability's own mistake and a duplicate id between two others.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), colour = "red")]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(id = "cap:demo:find", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn find(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(id = "cap:demo:find", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
