// A reconcile companion written like a validation handler (it takes the capability's input and
// answers a `bool`), and the reverse. rustc's errors point at the parameter's type and at the
// return type, not at `#[connector]`.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Entry {
    amount: u64,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    id: String,
}

struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
    )]
    async fn post(
        &self,
        entry: Entry,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        Ok(Posted { id: entry.amount.to_string() })
    }

    async fn find(&self, entry: Entry) -> Result<bool, ConnectorFailure> {
        Ok(entry.amount > 0)
    }

    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [plan, commit], fidelity = downstream_validation),
        validate = Self::check,
    )]
    async fn transfer(
        &self,
        entry: Entry,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        Ok(Posted { id: entry.amount.to_string() })
    }

    // A validation companion written like a reconcile companion.
    async fn check(&self, request: Reconciliation) -> Result<bool, ConnectorFailure> {
        Ok(request.cursor.is_none())
    }
}

fn main() {}
