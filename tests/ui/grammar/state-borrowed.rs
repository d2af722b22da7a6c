// A state is cloned into every call and may outlive it, so it cannot borrow: `State<&str>`
// and `State<Cow<'_, str>>` (at any depth) are refused once each, on the state type. What is
// accepted is in `tests/pass/state-static-and-fn.rs`.
use std::borrow::Cow;

use aip_connector::prelude::*;

#[capability(id = "cap:demo:greet", risk = low, side_effects = [read], data(sensitivity = public))]
async fn greet(_greeting: State<&str>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:wave", risk = low, side_effects = [read], data(sensitivity = public))]
async fn wave(_wave: State<Cow<'_, str>>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:blink", risk = low, side_effects = [read], data(sensitivity = public))]
async fn blink(_blink: State<Vec<(u8, &str)>>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:peek", risk = low, side_effects = [read], data(sensitivity = public))]
async fn peek(_peek: State<std::sync::Arc<dyn Iterator<Item = &str> + Send + Sync>>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {}
