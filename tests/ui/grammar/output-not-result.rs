// A handler returns a `Result`, not a bare value.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> u32 {
        7
    }
}

fn main() {}
