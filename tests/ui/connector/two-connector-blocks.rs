// Two `#[connector]` blocks for one type: rustc reports conflicting `Connector` impls (E0119),
// spanned on both attributes. A connector is one impl block.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look_again(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
