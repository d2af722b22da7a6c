// Alternatives of one capability under exclusive `#[cfg]`s, with the same handler name: each
// alternative's id constant carries its handler's `#[cfg]`, so exactly one `LOOK_ID` exists.
// Without the cfgs on the constants this would not compile (two `LOOK_ID`s).
#![deny(dead_code)]
use aip_connector::prelude::*;

/// A connector with one capability in two versions.
pub struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[cfg(all())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<u32, ConnectorFailure> {
        Ok(2)
    }

    #[cfg(any())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<u32, ConnectorFailure> {
        Ok(1)
    }
}

fn main() {
    assert_eq!(Demo::LOOK_ID, "cap:demo:look");
}
