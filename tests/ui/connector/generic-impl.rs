// The manifest is computed once per connector type, so the impl block cannot be generic. The
// type is still a `Connector` after the error, so using it as one adds no second error.
use aip_connector::prelude::*;

struct Demo<T>(T);

#[connector(id = "demo")]
impl<T: Send + Sync + 'static> Demo<T> {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {
    let _ = Demo(1_u8).definition();
}
