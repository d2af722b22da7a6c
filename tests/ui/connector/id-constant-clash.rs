// `#[connector]` adds a `<METHOD>_ID` constant per capability; an item of the same name in
// another impl block of the type clashes, and the error points at the method.
use aip_connector::prelude::*;

struct Demo;

impl Demo {
    const LOOK_ID: &'static str = "mine";
}

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
