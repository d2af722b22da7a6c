// One capability id twice under the same `#[cfg]`: never alternatives, refused by the macro.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[cfg(all())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[cfg(all())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look_again(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
