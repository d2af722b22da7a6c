// One capability id declared twice, under different `#[cfg]`s (alternatives such as
// `feature = "v2"` and `not(feature = "v2")`): the one compiled in is the capability, with no
// duplicate-id error and no warning.
#![deny(warnings)]

use aip_connector::Connector;
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Query {
    text: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[cfg(any())]
    #[capability(id = "cap:demo:search", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search_v1(&self, query: Query) -> Result<String, ConnectorFailure> {
        Ok(query.text)
    }

    #[cfg(all())]
    #[capability(
        id = "cap:demo:search",
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        transaction(modes = [execute, dry_run], fidelity = downstream_validation),
        validate = Self::preview
    )]
    async fn search_v2(
        &self,
        query: Query,
        _checkpoint: Checkpoint,
    ) -> Result<Vec<String>, ConnectorFailure> {
        Ok(vec![query.text])
    }

    async fn preview(&self, query: Query) -> Result<String, ConnectorFailure> {
        Ok(query.text)
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {
    let definition = Demo.definition();
    let ids: Vec<&str> = definition
        .capabilities
        .iter()
        .map(|c| c.id().as_str())
        .collect();
    assert_eq!(ids, ["cap:demo:search", "cap:demo:look"]);
    // The alternative compiled in is the one described: its output is an array.
    let output = definition.capabilities[0]
        .capability
        .output_schema
        .as_ref()
        .expect("derived output schema");
    assert_eq!(output["type"], "array", "{output}");
}
