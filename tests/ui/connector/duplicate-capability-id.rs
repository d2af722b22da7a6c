// Two capabilities share one id.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look_again(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
