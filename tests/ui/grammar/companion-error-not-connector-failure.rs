// A companion's error type must convert into `ConnectorFailure`, like a handler's: reported on
// the companion's return type, not on `#[connector]`.
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
        cancel = Self::stop,
        validate = Self::preview
    )]
    async fn book(
        &self,
        booking: Booking,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _cancel: Cancellation,
    ) -> Result<(), ConnectorFailure> {
        let _ = booking.day;
        Ok(())
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, String> {
        Ok(ReconcileOutcome::Pending { cursor: None })
    }

    async fn stop(&self, _request: aip_connector::CancelRequest) -> Result<(), std::io::Error> {
        Ok(())
    }

    async fn preview(&self, booking: Booking) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let _ = booking.day;
        Ok(())
    }
}

fn main() {}
