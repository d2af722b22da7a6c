// The input type must implement `Deserialize`.
use aip_connector::prelude::*;

#[derive(JsonSchema)]
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
