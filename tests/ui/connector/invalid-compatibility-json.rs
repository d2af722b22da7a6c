// `compatibility` must parse as JSON.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", compatibility = "{")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
