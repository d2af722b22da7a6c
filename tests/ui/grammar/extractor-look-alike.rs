// The SDK's host-side types are not extractors: the refusal names the extractor that was meant.
use aip_connector::prelude::*;
use aip_connector::{CredentialHandle, VerifiedTenant};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Transfer {
    cents: u64,
}

struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn post(
        &self,
        transfer: Transfer,
        credential: CredentialHandle,
        tenant: VerifiedTenant,
    ) -> Result<(), ConnectorFailure> {
        let _ = (transfer.cents, credential, tenant);
        Ok(())
    }
}

fn main() {}
