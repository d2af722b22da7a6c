// A free capability names its companion as a free function: `Self` names nothing here.
use aip_connector::prelude::*;

#[capability(
    id = "cap:demo:look",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
    cancel = Self::stop,
)]
async fn look() -> Result<(), ConnectorFailure> {
    Ok(())
}

// The qualified form names `Self` too.
#[capability(
    id = "cap:demo:peek",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
    cancel = <Self>::stop,
)]
async fn peek() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
