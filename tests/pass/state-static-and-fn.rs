// States that borrow nothing a call could outlive are accepted by `item.borrowed_state` and
// compile: `'static` references (also inside other types), function pointers and `Fn` trait
// objects (their elided lifetimes are the call's own), and `for<'a>` trait objects.
#![deny(warnings)]

use std::sync::Arc;

use aip_connector::prelude::*;

/// Nods.
#[capability(id = "cap:demo:nod", risk = low, side_effects = [read], data(sensitivity = public))]
async fn nod(nod: State<&'static str>) -> Result<usize, ConnectorFailure> {
    Ok(nod.0.len())
}

/// Shrugs.
#[capability(id = "cap:demo:shrug", risk = low, side_effects = [read], data(sensitivity = public))]
async fn shrug(shrug: State<(u8, Option<&'static str>)>) -> Result<usize, ConnectorFailure> {
    Ok(usize::from(shrug.0.0) + shrug.0.1.map_or(0, str::len))
}

/// Counts.
#[capability(id = "cap:demo:count", risk = low, side_effects = [read], data(sensitivity = public))]
async fn count(count: State<fn(&str) -> usize>) -> Result<usize, ConnectorFailure> {
    Ok((count.0)("abc"))
}

/// Calls.
#[capability(id = "cap:demo:call", risk = low, side_effects = [read], data(sensitivity = public))]
async fn call(call: State<Arc<dyn Fn(&str) -> usize + Send + Sync>>) -> Result<usize, ConnectorFailure> {
    Ok((call.0)("abc"))
}

trait Visitor<'a> {
    fn visit(&self, text: &'a str) -> usize;
}

struct Length;

impl<'a> Visitor<'a> for Length {
    fn visit(&self, text: &'a str) -> usize {
        text.len()
    }
}

/// Visits.
#[capability(id = "cap:demo:visit", risk = low, side_effects = [read], data(sensitivity = public))]
async fn visit(
    visitor: State<Arc<dyn for<'a> Visitor<'a> + Send + Sync>>,
) -> Result<usize, ConnectorFailure> {
    Ok(visitor.0.visit("abc"))
}

fn main() {
    let _ = ConnectorBuilder::with_state("nod", "hello").capability::<nod>().build();
    let _ = ConnectorBuilder::with_state("shrug", (1_u8, Some("x"))).capability::<shrug>().build();
    let count: fn(&str) -> usize = str::len;
    let _ = ConnectorBuilder::with_state("count", count).capability::<count>().build();
    let call: Arc<dyn Fn(&str) -> usize + Send + Sync> = Arc::new(str::len);
    let _ = ConnectorBuilder::with_state("call", call).capability::<call>().build();
    let visitor: Arc<dyn for<'a> Visitor<'a> + Send + Sync> = Arc::new(Length);
    let _ = ConnectorBuilder::with_state("visit", visitor).capability::<visit>().build();
}
