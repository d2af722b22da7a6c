// A write without required idempotency can apply twice.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [write], data(sensitivity = internal))]
    async fn save(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
