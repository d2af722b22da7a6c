// Handlers are called concurrently: `self` by value is not allowed.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
