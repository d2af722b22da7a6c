// The handler's error type must convert into `ConnectorFailure`: a bare `String` says nothing
// about the failure's code, category or retry flag.
use aip_connector::prelude::*;

#[derive(Serialize, JsonSchema)]
struct Output {}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<Output, String> {
        Ok(Output {})
    }
}

fn main() {}
