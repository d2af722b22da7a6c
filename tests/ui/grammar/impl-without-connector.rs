// A `#[capability]` method in an impl block that lacks `#[connector]`: one error, on `self`,
// naming the missing attribute (not also a missing `id`).
use aip_connector::prelude::*;

struct Demo;

impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
