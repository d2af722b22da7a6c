// A handler takes one state.
use aip_connector::prelude::*;

#[derive(Clone)]
struct Clock;

#[derive(Clone)]
struct Calendar;

#[capability(id = "cap:demo:now", risk = low, side_effects = [read], data(sensitivity = public))]
async fn now(State(_clock): State<Clock>, State(_calendar): State<Calendar>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {}
