// The `tenant_policy` selector takes no argument; a named policy is a rule leaf.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        approval(required, selector = tenant_policy("refunds")),
    )]
    async fn refund(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
