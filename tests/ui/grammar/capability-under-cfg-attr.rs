// `#[connector]` reads `#[capability]` before `cfg_attr` is expanded: a capability applied through
// `cfg_attr` is refused with the `#[cfg]` to write instead, and no other error follows.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[cfg_attr(feature = "payments", capability(risk = low, side_effects = [read], data(sensitivity = public)))]
    async fn pay(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[cfg_attr(unix, cfg_attr(debug_assertions, aip_connector::capability(risk = low, side_effects = [read])))]
    async fn nested(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {
    let _ = Demo.definition();
}
