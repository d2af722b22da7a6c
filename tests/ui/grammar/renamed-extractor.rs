// An extractor imported under another name is taken for the input.
use aip_connector::prelude::*;

use aip_connector::prelude::IdempotencyKey as Key;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _key: Key) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
