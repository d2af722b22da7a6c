// The SDK serves neither NATS nor A2A, so it cannot say where they are served: the connector
// declares it in `compatibility`, every field (rule `discovery.profile_bindings`). The native
// HTTP binding needs nothing: the SDK fills in the routes it serves.
use aip_connector::prelude::*;

struct Demo;

#[connector(
    id = "demo",
    profiles = ["aip.native.http.v1", "aip.native.nats.v1", "aip.a2a.compat.v1"],
    compatibility = r#"{"a2a": {"agent_card": "/.well-known/agent.json"}}"#
)]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
