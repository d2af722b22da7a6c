// The connector's state is taken by value: each call gets its own clone.
use aip_connector::prelude::*;
use std::sync::Arc;

#[derive(Clone)]
struct Clock;

#[capability(id = "cap:demo:now", risk = low, side_effects = [read], data(sensitivity = public))]
async fn now(_clock: &State<Clock>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:later", risk = low, side_effects = [read], data(sensitivity = public))]
async fn later(_clock: Option<State<Clock>>, _shared: Arc<State<Clock>>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {}
