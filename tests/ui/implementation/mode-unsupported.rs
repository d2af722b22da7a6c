// The handler needs a stream, but the contract also offers sync and async calls: both would
// fail in the handler, after the approval gate and the idempotency reservation.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), execution(sync, async, streaming))]
    async fn export(&self, sink: StreamSink<u32>) -> Result<(), ConnectorFailure> {
        sink.send(1).await?;
        Ok(())
    }
}

fn main() {}
