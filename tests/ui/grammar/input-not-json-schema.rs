// The input type must implement `JsonSchema`.
use aip_connector::prelude::*;

#[derive(Deserialize)]
struct Input {}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _input: Input) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
