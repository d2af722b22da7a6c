// A companion taking the host's request by reference is told to take it by value (rustc's own
// error suggested borrowing it once more).
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
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find
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

    async fn find(&self, request: &Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Pending {
            cursor: request.cursor.clone(),
        })
    }
}

fn main() {}
