// A financial effect at high risk breaks two approval lints with one cause: only the side
// effect's lint is reported, since requiring approval settles both.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = high, side_effects = [financial], data(sensitivity = internal))]
    async fn pay(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
