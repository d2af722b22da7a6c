// A required credential names its scopes.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), credentials(required))]
    async fn look(&self, _credential: Credential) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
