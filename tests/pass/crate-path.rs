// `crate = "..."`: a connector and a free capability written against the SDK as another crate
// re-exports it (a platform's facade), compiled and run through that path.
mod platform {
    pub use aip_connector as aip;
}

use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Query {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Hits {
    count: usize,
}

struct Search;

#[connector(id = "search", crate = "crate::platform::aip")]
impl Search {
    /// Counts the words of a query.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn count(&self, query: Query, _cancel: Cancellation) -> Result<Hits, ConnectorFailure> {
        Ok(Hits {
            count: query.text.split_whitespace().count(),
        })
    }
}

/// Says hello.
#[capability(
    id = "cap:search:hello",
    crate = "crate::platform::aip",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
)]
async fn hello() -> Result<Hits, ConnectorFailure> {
    Ok(Hits { count: 1 })
}

fn main() {
    let definition = Search.definition();
    assert!(definition.capability("cap:search:count").is_some());
    let free = ConnectorBuilder::new("greeter").capability::<hello>().build();
    assert!(free.is_ok());
}
