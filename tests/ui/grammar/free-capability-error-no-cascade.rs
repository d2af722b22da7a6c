// A mistake in a free capability is its only error: the descriptor type that
// `ConnectorBuilder::capability::<echo>()` names is still emitted.
use aip_connector::prelude::*;

#[capability(id = "cap:free:echo", risk = lo, side_effects = [read], data(sensitivity = public))]
pub async fn echo() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {
    let _ = ConnectorBuilder::new("free").capability::<echo>().build();
}
