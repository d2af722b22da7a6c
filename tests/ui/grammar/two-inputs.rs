// A handler takes one input parameter.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, _day: String, _room: String) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    // The refused parameter is not also reported as an unused variable.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn book(&self, day: String, room: String) -> Result<(), ConnectorFailure> {
        let _ = day;
        Ok(())
    }
}

fn main() {}
