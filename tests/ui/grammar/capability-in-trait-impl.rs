// A trait's method is not a capability: `#[capability]` in `impl Trait for Type` gets one error,
// on its `self`, saying where handlers go (not rustc's about the trait's signature).
use aip_connector::prelude::*;

struct Demo;

trait Lookup {
    async fn look(&self) -> Result<(), ConnectorFailure>;
}

impl Lookup for Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
