// A free capability has no connector to derive its id from.
use aip_connector::prelude::*;

#[capability(risk = low, side_effects = [read], data(sensitivity = public))]
async fn look() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
