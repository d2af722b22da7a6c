// A handler takes one input parameter.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _day: String, _room: String) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
