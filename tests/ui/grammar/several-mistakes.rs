// Independent mistakes in one attribute and signature are all reported in one compile.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], stability = beta, idempotncy(optional))]
    async fn look(&mut self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
