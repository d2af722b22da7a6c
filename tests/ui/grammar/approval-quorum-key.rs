// A quorum written as a key of `approval(...)` is pointed to the rule that expresses it.
use aip_connector::prelude::*;

struct Payments;

#[connector(id = "payments")]
impl Payments {
    #[capability(
        risk = high,
        side_effects = [financial],
        approval(required, reason = "moves money", quorum = 2, evidence = [reason]),
    )]
    async fn pay(&self, _approval: Approval) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
