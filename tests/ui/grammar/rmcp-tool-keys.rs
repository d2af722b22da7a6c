// rmcp's `#[tool(...)]` keys are pointed to where the contract says the same thing: the doc
// comment for `description`, the derived annotations for the hints, `name` for `title`.
use aip_connector::prelude::*;

struct Tracker;

#[connector(id = "tracker")]
impl Tracker {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        description = "Search issues",
        read_only_hint = true,
        annotations(idempotent_hint = true),
        title = "Search",
    )]
    async fn search(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
