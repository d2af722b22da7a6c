// Handlers are called concurrently: `&mut self` is not allowed.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&mut self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
