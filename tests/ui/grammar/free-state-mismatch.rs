// A free capability whose handler takes `State<Clock>` added to a connector built with another
// state: refused where it is added.
use aip_connector::prelude::*;

#[derive(Clone)]
struct Clock;

#[derive(Clone)]
struct Calendar;

#[capability(id = "cap:demo:now", risk = low, side_effects = [read], data(sensitivity = public))]
async fn now(State(_clock): State<Clock>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {
    let _ = ConnectorBuilder::with_state("demo", Calendar).capability::<now>();
    // Without state, too: the builder's state is `()`.
    let _ = ConnectorBuilder::new("demo").capability::<now>();
}
