// `#[capability]` goes on an `async fn`, not on a struct.
use aip_connector::prelude::*;

#[capability(risk = low, side_effects = [read], data(sensitivity = public))]
struct Look;

fn main() {}
