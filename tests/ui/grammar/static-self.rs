// A handler's receiver with a lifetime of its own: each call borrows the connector for that
// call only, so `&'static self` could never be called (rustc said so inside generated code).
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&'static self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
