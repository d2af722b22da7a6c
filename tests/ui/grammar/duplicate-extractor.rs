// Each extractor may be taken once.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _first: Deadline, _second: Deadline) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
