// A misspelled required value is one mistake: it is reported once, at the value, and the key
// is not also reported as missing.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = meduim, side_effects = [raed], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
