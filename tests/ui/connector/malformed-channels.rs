// `channels` lists channels: string literals, each a JSON document.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", channels = r#"{"id": "support-inbox"}"#)]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

struct Other;

#[connector(id = "other", channels = [support_inbox, r#"{"id": "support-inbox""#])]
impl Other {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
