// `profiles` is an array of strings.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", profiles = "aip.native.http.v1")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
