// `compatibility` is a JSON object written as a string literal.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", compatibility = "[1]")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
