// A blank principal id in an approval rule, a selector or a delegation names no approver.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, rule = principal(" ")))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, selector = principal("")))]
    async fn peek(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, selector = role("treasury"), delegated(principal = "", scope = ["payments"])))]
    async fn glance(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
