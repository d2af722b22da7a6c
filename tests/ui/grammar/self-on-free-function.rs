// Only handlers inside a `#[connector]` impl block take `self`.
use aip_connector::prelude::*;

#[capability(id = "cap:demo:look", risk = low, side_effects = [read], data(sensitivity = public))]
async fn look(&self) -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
