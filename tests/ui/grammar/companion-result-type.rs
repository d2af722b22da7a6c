// A companion that returns something other than its result type (a `reconcile` returning the
// provider's JSON, a `cancel` returning a bool) is one error on its return type that names
// the type to return, not a type mismatch inside the generated code.
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
        reconcile = Self::find,
        cancel = Self::stop
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

    async fn find(&self, _request: Reconciliation) -> Result<serde_json::Value, ConnectorFailure> {
        Ok(serde_json::Value::Null)
    }

    async fn stop(&self, _request: aip_connector::CancelRequest) -> Result<bool, ConnectorFailure> {
        Ok(true)
    }
}

fn main() {}
