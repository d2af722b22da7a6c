// After a contract error, the id constants are still generated: code naming them reports
// nothing more than the real mistakes (one per capability here), even where `dead_code` is
// forbidden (the fallbacks read the constants instead of allowing the lint).
#![forbid(dead_code)]
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

#[capability(id = "cap:tools:echo", risk = low, data(sensitivity = public))]
async fn echo() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {
    let _: &str = Demo::LOOK_ID;
    let _: &str = echo::ID;
}
