// A companion is an `async fn` taking `&self` and one argument: checked on the method, not
// reported from the generated call at `#[connector]`.
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
        transaction(modes = [execute, dry_run, reconcile], fidelity = downstream_validation),
        reconcile = Self::find,
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

    fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }

    async fn check(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
