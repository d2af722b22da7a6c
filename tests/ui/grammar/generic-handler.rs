// The input and output types fix the schemas, so a handler cannot be generic.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look<T>(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
