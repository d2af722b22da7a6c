// A waiver's code a typo away from a rule's is refused on the code, with the code meant.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [delete],
        data(sensitivity = internal),
        waive(code = "contract.lint.side_effects_without_approval", reason = "the provider asks"),
    )]
    async fn remove(&self, key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        let _ = key;
        Ok(())
    }
}

fn main() {}
