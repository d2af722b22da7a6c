// A validation handler that no dry run or plan calls: the fidelity does not ask it, or the
// capability offers no preview at all. Both compiled, admitted and never called it.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Label {
    parcel: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [dry_run, execute], fidelity = policy_and_schema),
        validate = Self::price,
    )]
    async fn buy(&self, label: Label, _key: IdempotencyKey, _checkpoint: Checkpoint) -> Result<String, ConnectorFailure> {
        Ok(label.parcel)
    }

    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        validate = Self::price,
    )]
    async fn buy_now(&self, label: Label, _key: IdempotencyKey) -> Result<String, ConnectorFailure> {
        Ok(label.parcel)
    }

    async fn price(&self, label: Label) -> Result<String, ConnectorFailure> {
        Ok(label.parcel)
    }
}

fn main() {}
