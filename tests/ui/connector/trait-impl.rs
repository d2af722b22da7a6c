// `#[connector]` goes on an inherent impl block, not a trait impl.
use aip_connector::prelude::*;

struct Demo;

trait Look {
    async fn look(&self) -> Result<(), ConnectorFailure>;
}

#[connector(id = "demo")]
impl Look for Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
