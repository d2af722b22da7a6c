// A waiver of a lint that does not fire for the capability (a read needs no idempotency) is
// refused: it would be published as a gap the contract does not have.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "copied from the write next door"
        )
    )]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
