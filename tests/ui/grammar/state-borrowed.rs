// A state is cloned into every call and may outlive it, so it cannot borrow: `State<&str>`
// and `State<Cow<'_, str>>` (at any depth) are refused once each, on the state type; `'static`
// data is fine, also inside other types.
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

#[capability(id = "cap:demo:nod", risk = low, side_effects = [read], data(sensitivity = public))]
async fn nod(_nod: State<&'static str>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:shrug", risk = low, side_effects = [read], data(sensitivity = public))]
async fn shrug(_shrug: State<(u8, Option<&'static str>)>) -> Result<u64, ConnectorFailure> {
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

// Accepted: the elided lifetimes of a function pointer or an `Fn` bound are the call's own.
#[capability(id = "cap:demo:count", risk = low, side_effects = [read], data(sensitivity = public))]
async fn count(_count: State<fn(&str) -> usize>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

#[capability(id = "cap:demo:call", risk = low, side_effects = [read], data(sensitivity = public))]
async fn call(_call: State<std::sync::Arc<dyn Fn(&str) -> usize + Send + Sync>>) -> Result<u64, ConnectorFailure> {
    Ok(0)
}

fn main() {}
