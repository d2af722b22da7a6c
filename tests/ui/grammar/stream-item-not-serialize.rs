// The items of a `StreamSink` must be serializable: refused at the parameter, not at `send`.
use aip_connector::prelude::*;

struct Page {
    hits: u32,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(&self, sink: StreamSink<Page>) -> Result<(), ConnectorFailure> {
        let _ = sink;
        Ok(())
    }
}

fn main() {}
