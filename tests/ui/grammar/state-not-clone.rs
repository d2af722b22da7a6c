// The state is cloned into every call, and must be aip-connector's `State`.
use aip_connector::prelude::*;

struct Clock;

#[capability(id = "cap:demo:now", risk = low, side_effects = [read], data(sensitivity = public))]
async fn now(_clock: State<Clock>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

mod other {
    /// Another crate's `State`, as `axum::extract::State` would be.
    pub struct State<S>(pub S);
}

#[derive(Clone)]
struct Calendar;

#[capability(id = "cap:demo:today", risk = low, side_effects = [read], data(sensitivity = public))]
async fn today(_calendar: other::State<Calendar>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {}
