// An output written as `impl Trait`: the published output schema needs the type itself.
use aip_connector::prelude::*;

#[derive(Serialize, JsonSchema)]
struct Booking {
    id: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<impl Serialize, ConnectorFailure> {
        Ok(Booking { id: "b-1".to_owned() })
    }
}

fn main() {}
