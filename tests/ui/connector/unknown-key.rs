// A misspelled connector key is reported with the closest known key.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", nmae = "Demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
