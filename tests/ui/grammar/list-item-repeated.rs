// Each item of a list of the attribute counts once: a repeat is refused on the repeat, in every
// list where it would otherwise be published twice.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = medium,
        side_effects = [read],
        data(sensitivity = internal, residency(allowed = ["eu", "eu"])),
        credentials(
            required,
            scopes = ["calendar.read", "calendar.read"],
            issuers = ["https://id.example.com", "https://id.example.com"],
        ),
        tags = ["calendar", "rooms", "calendar"],
    )]
    async fn look(&self, credential: Credential) -> Result<(), ConnectorFailure> {
        let _ = credential;
        Ok(())
    }

    #[capability(
        risk = high,
        side_effects = [write],
        data(sensitivity = internal),
        approval(
            required,
            evidence = [reason, external_ticket, reason],
            delegated(principal = "user:lead", scope = ["payments", "payments"]),
        ),
    )]
    async fn book(&self, key: IdempotencyKey, approval: Approval) -> Result<(), ConnectorFailure> {
        let _ = (key, approval);
        Ok(())
    }
}

fn main() {}
