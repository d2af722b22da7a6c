// A connector speaks at least one profile.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", profiles = [])]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
