// `#[capability]` pasted twice on one handler: one error on the second, and nothing else.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Query {
    text: String,
}

struct Tracker;

#[connector(id = "tracker")]
impl Tracker {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(&self, query: Query) -> Result<String, ConnectorFailure> {
        Ok(query.text)
    }
}

#[capability(id = "cap:demo:find", risk = low, side_effects = [read], data(sensitivity = public))]
#[capability(id = "cap:demo:find", risk = low, side_effects = [read], data(sensitivity = public))]
async fn find(query: Query) -> Result<String, ConnectorFailure> {
    Ok(query.text)
}

fn main() {}
