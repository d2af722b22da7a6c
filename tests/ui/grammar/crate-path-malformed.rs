// `crate` takes the SDK's path as a string, on `#[connector]` (never on a capability inside
// it) or on a free `#[capability]`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", crate = aip_connector)]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), crate = "aip_connector")]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

#[capability(id = "cap:demo:free", crate = "not a path", risk = low, side_effects = [read], data(sensitivity = public), crate = "::aip_connector")]
async fn free() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
