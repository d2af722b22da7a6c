// Parameter docs in the style of tool libraries that take one parameter per argument: the
// input is one type, whose fields carry the descriptions.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct SearchInput {
    text: String,
}

struct Tracker;

#[connector(id = "tracker")]
impl Tracker {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(
        &self,
        /// The text to look for.
        #[schemars(description = "The text to look for")]
        #[allow(unused_variables)]
        input: SearchInput,
    ) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
