// A handler without `self` in an impl block that lacks `#[connector]`: the attribute cannot see
// the block and reads a free capability. The `id` error says to put `#[connector]` on the block.
use aip_connector::prelude::*;

struct Demo;

impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look() -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
