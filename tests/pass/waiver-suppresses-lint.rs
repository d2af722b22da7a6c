// A published, reasoned waiver suppresses the lint it names.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [write],
        data(sensitivity = internal),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "the provider deduplicates writes by content hash"
        )
    )]
    async fn save(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
