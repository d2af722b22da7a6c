// The id constants are read by the generated code (the dispatch matches them, a free
// capability's definition reads its `ID`), so they need no `allow(dead_code)`, and a crate may
// forbid the lint even when it never names them.
#![forbid(dead_code)]
use aip_connector::prelude::*;

/// A connector whose tests would name `Demo::LOOK_ID`.
pub struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<u32, ConnectorFailure> {
        Ok(2)
    }
}

/// A free capability.
#[capability(id = "cap:tools:ping", risk = low, side_effects = [read], data(sensitivity = public))]
pub async fn ping() -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
