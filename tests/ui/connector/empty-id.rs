// The connector id must not be blank.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = " ")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
