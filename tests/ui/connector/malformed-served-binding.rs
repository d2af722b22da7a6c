// The SDK fills in where the native binding is served, unless `compatibility` declares it; a
// declared `native_http` must then be an object of non-empty strings (rule
// `discovery.profile_bindings`). With the default profile, reported on `compatibility`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", compatibility = r#"{"native_http": "/aip"}"#)]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
