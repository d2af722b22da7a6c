// Approval is required but the handler does not read it, and the `delete` makes approval
// mandatory: the fix offered is the `Approval` parameter, not `approval(optional, ...)`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = medium, side_effects = [delete], data(sensitivity = internal), approval(required, evidence = [reason]))]
    async fn remove(&self, key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        let _ = key;
        Ok(())
    }
}

fn main() {}
