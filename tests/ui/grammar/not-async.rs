// A handler must be an `async fn`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
