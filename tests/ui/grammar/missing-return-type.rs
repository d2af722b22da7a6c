// A handler returns `Result<Output, ConnectorFailure>`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) {
        
    }
}

fn main() {}
