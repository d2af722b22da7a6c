// After its input, a `validate` companion takes only what a preview has: `Tenant`, `Caller`,
// `Deadline`, `Cancellation`, and `Credential` where the capability declares a credential
// policy. Every wrong parameter is reported on its type, in one compile.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Booking {
    day: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [plan, commit], requires_plan, fidelity = downstream_validation),
        validate = Self::check
    )]
    async fn book(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }

    async fn check(
        &self,
        booking: Booking,
        _tenant: Tenant,
        _key: IdempotencyKey,
        _limit: u32,
        _credential: Credential,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }
}

fn main() {}
