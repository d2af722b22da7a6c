// A handler under `#[cfg]` takes its capability with it, and a `#[deprecated]` handler does not
// break a crate that denies warnings (nor do handlers that await nothing, under pedantic clippy).
#![deny(warnings)]

use aip_connector::Connector;
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Day {
    day: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self, day: Day) -> Result<String, ConnectorFailure> {
        Ok(day.day)
    }

    #[cfg(any())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn never_built(&self, day: Day) -> Result<String, ConnectorFailure> {
        Ok(day.day)
    }

    #[cfg(all())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn always_built(
        &self,
        day: Day,
        // A lint level, applied conditionally: allowed on a parameter (`cfg` is not).
        #[cfg_attr(all(), allow(unused_variables))] cancel: Cancellation,
    ) -> Result<String, ConnectorFailure> {
        Ok(day.day)
    }

    #[cfg(any())]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), cancel = Self::abort)]
    async fn never_built_cancellable(&self, day: Day) -> Result<String, ConnectorFailure> {
        Ok(day.day)
    }

    // The companion of a capability configured out: nothing calls it, and that is no warning.
    async fn abort(&self, _request: aip_connector::CancelRequest) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[deprecated(note = "use `look`")]
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        stability = deprecated
    )]
    async fn old_look(&self, day: Day) -> Result<String, ConnectorFailure> {
        Ok(day.day)
    }
}

#[cfg(any())]
#[capability(id = "cap:demo:free", risk = low, side_effects = [read], data(sensitivity = public))]
async fn free(day: Day) -> Result<String, ConnectorFailure> {
    Ok(day.day)
}

fn main() {
    let ids: Vec<&str> = Demo
        .definition()
        .capabilities
        .iter()
        .map(|c| c.id().as_str())
        .collect();
    assert_eq!(
        ids,
        ["cap:demo:look", "cap:demo:always_built", "cap:demo:old_look"]
    );
}
