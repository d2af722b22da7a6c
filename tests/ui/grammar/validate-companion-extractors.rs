// After its input, a `validate` companion takes only what a preview has: `Tenant`, `Caller`,
// `Deadline`, `Cancellation`, and `Credential` where the capability requires credentials. Each
// once, by value, without attributes. Every wrong parameter is reported on its type, in one
// compile.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Booking {
    day: String,
}

#[derive(Serialize, JsonSchema)]
struct Slot {
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

    #[allow(clippy::too_many_arguments)]
    async fn check(
        &self,
        booking: Booking,
        _tenant: Tenant,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _stream: StreamSink<Slot>,
        _approval: Approval,
        _compensation: Compensation,
        _plan: ClaimedPlan,
        _limit: u32,
        _caller: Option<Caller>,
        _again: Tenant,
        #[cfg(any())] _deadline: Deadline,
        _credential: Credential,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }

    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        credentials(optional, scopes = ["bookings.write"]),
        transaction(modes = [dry_run, execute], fidelity = downstream_validation),
        validate = Self::check_signed
    )]
    async fn hold(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }

    async fn check_signed(
        &self,
        booking: Booking,
        _credential: Credential,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }
}

fn main() {}
