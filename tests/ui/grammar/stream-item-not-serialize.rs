// The items of a `StreamSink` must be serializable: refused once, at the parameter, not again
// at each `send`.
use aip_connector::prelude::*;

struct Page {
    hits: u32,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(&self, sink: StreamSink<Page>) -> Result<(), ConnectorFailure> {
        sink.send(Page { hits: 1 }).await?;
        sink.send(Page { hits: 2 }).await
    }
}

fn main() {}
