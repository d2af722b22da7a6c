// A literal of the attributes takes no suffix: the value is read without it, so the suffix
// would be dropped (a string's) or checked against nothing (an integer's).
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo"x)]
impl Demo {
    #[capability(
        id = "cap:demo:look"suffix,
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        sla(timeout_ms = 300u8),
        tags = ["calendar"t],
    )]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

/// A free capability.
#[capability(id = "cap:demo:ping", risk = low, side_effects = [read], data(sensitivity = public), idempotency(ttl_ms = 1_000_u64))]
async fn ping() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
