// A misspelt `id` is reported once, as an unknown key with the key meant, not also as missing.
use aip_connector::prelude::*;

struct Demo;

#[connector(ID = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
