// Valid edge cases: `&self`, `self: &Self` and receiver-less handlers, multi-line doc descriptions, no input
// parameter, a renamed import of the crate, and a waiver that publishes its reason.
use aip_connector as aip;
use aip::prelude::{ConnectorFailure, Deserialize, JsonSchema, Serialize};
use aip::Connector as _;

#[derive(Deserialize, JsonSchema)]
struct Query {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Answer {
    text: String,
}

struct Demo {
    prefix: String,
}

#[aip::connector(id = "demo", profiles = ["aip.native.http.v1", "aip.mcp.compat.v1"])]
impl Demo {
    /// Echoes the query.
    ///
    /// The second paragraph is part of the description too.
    #[aip::capability(risk = low, side_effects = [read], data(sensitivity = public), bindings(mcp(tool_name = "echo")))]
    async fn echo(&self, query: Query) -> Result<Answer, ConnectorFailure> {
        Ok(Answer { text: format!("{}{}", self.prefix, query.text) })
    }

    /// Says hello; takes no input and no receiver.
    #[aip::capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn hello() -> Result<Answer, ConnectorFailure> {
        Ok(Answer { text: "hello".to_owned() })
    }

    /// Appends to a log the provider deduplicates by content, so no key is needed.
    #[aip::capability(
        risk = low,
        side_effects = [write],
        data(sensitivity = internal),
        waive(code = "contract.lint.mutating_without_idempotency", reason = "the provider deduplicates appends by content hash"),
    )]
    async fn append(&self, query: Query) -> Result<Answer, ConnectorFailure> {
        Ok(Answer { text: query.text })
    }

    /// Echoes the query, its receiver written out.
    #[aip::capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn echo_again(self: &Self, query: Query) -> Result<Answer, ConnectorFailure> {
        Ok(Answer { text: format!("{}{}", self.prefix, query.text) })
    }

    /// Echoes the query, its receiver's lifetime anonymous.
    #[aip::capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn echo_anonymous(&'_ self, query: Query) -> Result<Answer, ConnectorFailure> {
        Ok(Answer { text: format!("{}{}", self.prefix, query.text) })
    }
}

fn main() {
    let demo = Demo { prefix: ">".to_owned() };
    let definition = demo.definition();
    let echo = &definition.capabilities[0].capability;
    assert_eq!(echo.description.as_deref(), Some("Echoes the query.\n\nThe second paragraph is part of the description too."));
    assert_eq!(echo.bindings[0].projected_name(), Some("echo"));
    let hello = &definition.capabilities[1].capability;
    assert_eq!(hello.name, "Hello");
    assert_eq!(hello.input_schema["properties"], serde_json::json!({}));
    let manifest = definition.manifest();
    let waivers = &manifest.governance.as_ref().unwrap()["contract_waivers"];
    assert_eq!(waivers[0]["code"], "contract.lint.mutating_without_idempotency");
    assert_eq!(waivers[0]["capability_id"], "cap:demo:append");
    assert_eq!(definition.capabilities[3].capability.id.as_str(), "cap:demo:echo_again");
}
