// The handler takes an idempotency key but the contract denies retries.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), idempotency(optional), execution(retry = false))]
    async fn look(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
