// The handler observes cancellation the contract denies.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), execution(cancel = false))]
    async fn look(&self, _cancel: Cancellation) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
