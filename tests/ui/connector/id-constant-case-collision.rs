// Two handlers whose names differ only in case would get the same id constant (`FETCH_ID`):
// reported on the second handler's name, not as rustc's duplicate of a name nobody wrote.
#![allow(non_snake_case)]
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:fetch")]
    async fn fetch(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), id = "cap:demo:fetch_all")]
    async fn Fetch(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
