// A write whose handler takes the key, declared `idempotency(optional)`: the key is not required,
// so a retry without one can apply the write twice. The fix is to drop `optional`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(optional),
        data(sensitivity = internal)
    )]
    async fn save(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
