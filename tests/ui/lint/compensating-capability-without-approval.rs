// A compensating capability with a financial effect still needs an approval policy in its
// published contract, though the host gates the undo with the compensated capability's: the
// lint says both.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Refund {
    reason: String,
}

struct Payments;

#[connector(id = "payments")]
impl Payments {
    #[capability(
        id = "cap:payments:refund",
        risk = medium,
        side_effects = [write, financial],
        idempotency(required),
        data(sensitivity = internal),
    )]
    async fn refund(
        &self,
        refund: Refund,
        _key: IdempotencyKey,
        _compensation: Compensation,
    ) -> Result<(), ConnectorFailure> {
        let _ = refund.reason;
        Ok(())
    }
}

fn main() {}
