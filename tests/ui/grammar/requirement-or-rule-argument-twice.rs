// `required` and `optional` in one credentials or approval section, and a rule argument given
// twice: the later one would silently win, so each is refused.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), credentials(required, scopes = ["a.read"], optional))]
    async fn look(&self, _credential: Credential) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, reason = "why", evidence = [reason], required))]
    async fn peek(&self, _approval: Approval) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, rule = delegated_authority("payments", max_risk = low, max_risk = high)))]
    async fn glance(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
