// `allow_self_approval` beside `requester_must_differ`: the host would let the stricter flag win.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), approval(optional, reason = "why", evidence = [reason], separation(requester_must_differ, allow_self_approval)))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
