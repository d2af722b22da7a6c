// `#[connector]` goes on an impl block.
use aip_connector::prelude::*;

#[connector(id = "demo")]
struct Demo;

fn main() {}
