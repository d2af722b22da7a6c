// `impl Trait` in argument position is a type parameter: a handler cannot be generic.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, day: impl Into<String>) -> Result<(), ConnectorFailure> {
        let _ = day.into();
        Ok(())
    }
}

fn main() {}
