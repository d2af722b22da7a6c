// Admission checks 9 and 10, where the channels are written: every channel is an object with a
// non-empty `id` (or `name`), and no identity repeats, webhook receivers' channels included.
use aip_connector::prelude::*;

struct Support;

#[connector(
    id = "support",
    webhooks = ["tickets"],
    channels = [
        r#"{"id": "support-inbox", "kind": "email"}"#,
        r#"{"name": "support-inbox"}"#,
        r#"{"id": "tickets", "kind": "chat"}"#,
        r#"{"id": " ", "name": "chat"}"#,
        r#""sms""#,
    ]
)]
impl Support {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
