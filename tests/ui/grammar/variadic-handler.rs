// A handler's parameters are fixed: the input and extractors.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _rest: ...) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
