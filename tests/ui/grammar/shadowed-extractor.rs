// A local type named like an extractor is not an extractor.
use aip_connector::prelude::*;

struct Deadline;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _deadline: Deadline) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
