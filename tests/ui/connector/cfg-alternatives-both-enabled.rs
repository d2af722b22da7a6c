// One capability id under two different `#[cfg]`s is allowed as alternatives, but here both
// cfgs hold: rustc reports the second declaration (E0428), on its `id`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[cfg(all())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[cfg(not(any()))]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:look")]
    async fn look_again(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
