// A handler's parameter configured out: the generated call would pass it all the same.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Query {
    text: String,
}

struct Tracker;

#[connector(id = "tracker")]
impl Tracker {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(
        &self,
        query: Query,
        #[cfg(feature = "cancel")] _cancel: Cancellation,
    ) -> Result<String, ConnectorFailure> {
        Ok(query.text)
    }
}

#[capability(id = "cap:demo:find", risk = low, side_effects = [read], data(sensitivity = public))]
async fn find(
    query: Query,
    #[cfg_attr(not(test), cfg(any()))] _deadline: Deadline,
) -> Result<String, ConnectorFailure> {
    Ok(query.text)
}

fn main() {}
