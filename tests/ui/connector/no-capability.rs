// A connector has at least one `#[capability]` method.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
