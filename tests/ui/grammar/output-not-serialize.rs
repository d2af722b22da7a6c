// The output type must implement `Serialize`.
use aip_connector::prelude::*;

#[derive(JsonSchema)]
struct Output {}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<Output, ConnectorFailure> {
        Ok(Output {})
    }
}

fn main() {}
