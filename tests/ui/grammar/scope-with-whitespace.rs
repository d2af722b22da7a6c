// Each string of `scopes` is one scope, matched by its exact name: OAuth's space-separated
// `scope` form names one scope with spaces in it, which no credential is granted.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["invoices:read invoices:write", "reports.read"]),
    )]
    async fn look(&self, credential: Credential) -> Result<(), ConnectorFailure> {
        let _ = credential;
        Ok(())
    }
}

fn main() {}
