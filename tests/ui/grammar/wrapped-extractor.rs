// Extractors are taken by value: an `Option` or a reference around one is reported as such, not
// as a second input.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Entry {
    amount: u64,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn maybe_keyed(
        &self,
        _entry: Entry,
        _key: Option<IdempotencyKey>,
    ) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn maybe_deadline(
        &self,
        _entry: Entry,
        _deadline: &Option<Deadline>,
        _cancel: Cancellation,
    ) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn maybe_streamed(
        &self,
        _entry: Entry,
        _sink: Option<StreamSink<Entry>>,
    ) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn borrowed(&self, _entry: Entry, _checkpoint: &Checkpoint) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
