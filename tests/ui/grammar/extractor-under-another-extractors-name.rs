// An extractor imported under another extractor's name: the macro reads the name (`Deadline`),
// the type says `Cancellation`, and the compile-time assertion refuses the mismatch.
use aip_connector::prelude::*;
use aip_connector::Cancellation as Deadline;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, deadline: Deadline) -> Result<(), ConnectorFailure> {
        let _ = deadline;
        Ok(())
    }
}

fn main() {}
