// The webhook profile is reached through channels: a connector that advertises it names its
// receivers with `webhooks = [...]` (rule `discovery.profile_bindings`).
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", profiles = ["aip.native.http.v1", "aip.http.webhook.v1"])]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
