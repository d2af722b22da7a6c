// Sending a message is externally visible and needs approval.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [send_message], data(sensitivity = internal))]
    async fn notify(&self, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
