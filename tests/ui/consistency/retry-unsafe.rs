// Retries are supported but not classified as safe.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), execution(retry_safety = unknown))]
    async fn look(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
