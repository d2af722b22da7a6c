// A misspelt type inside an extractor: rustc reports it where the user wrote it (and once more
// for the generated compile-time check), without suggesting generics inside the type.
use aip_connector::prelude::*;

#[derive(serde::Serialize)]
struct Page {
    hits: u32,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(&self, sink: StreamSink<Pgae>) -> Result<(), ConnectorFailure> {
        let _ = sink;
        Ok(())
    }
}

fn main() {}
