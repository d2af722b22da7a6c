// A write claims retries without an idempotency key: one error, the claim's (the key, or no
// `retry`), not also the derived retry safety's, which either fix settles.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = medium, side_effects = [write], idempotency(required), execution(retry), data(sensitivity = internal))]
    async fn save(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
