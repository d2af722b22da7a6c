// The host grants every scope only for a granted `*`: a `*` inside a scope is no wildcard.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["invoices:*"]),
    )]
    async fn look(&self, credential: Credential) -> Result<(), ConnectorFailure> {
        let _ = credential;
        Ok(())
    }

    // A whole `"*"` is accepted: it requires a credential granted every scope.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["*"]),
    )]
    async fn audit(&self, credential: Credential) -> Result<(), ConnectorFailure> {
        let _ = credential;
        Ok(())
    }
}

fn main() {}
