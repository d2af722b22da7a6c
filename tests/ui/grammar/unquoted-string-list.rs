// A list of strings holds string literals: text without its quotes is refused once, on the
// first such item, with the list as it should be written.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = [invoices:write]),
    )]
    async fn look(&self, credential: Credential) -> Result<(), ConnectorFailure> {
        let _ = credential;
        Ok(())
    }

    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        tags = ["billing", invoices.read, reports],
    )]
    async fn list(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
