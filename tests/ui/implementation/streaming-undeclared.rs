// The handler streams but the contract denies streaming.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), execution(sync, streaming = false))]
    async fn look(&self, _sink: StreamSink<u32>) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
