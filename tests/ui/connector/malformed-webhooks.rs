// `webhooks` lists receiver ids: string literals, each non-empty and listed once.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", webhooks = "bookings")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

struct Other;

#[connector(id = "other", webhooks = ["bookings", " ", bookings, "bookings"])]
impl Other {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
