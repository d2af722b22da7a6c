// The output type must implement `JsonSchema`.
use aip_connector::prelude::*;

#[derive(Serialize)]
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
