// Only handlers inside a `#[connector]` impl block take `self`. The function is emitted with its
// `self` (which in an impl block, a trait impl's included, adds nothing), so rustc's own error,
// saying the same, follows the macro's.
use aip_connector::prelude::*;

#[capability(id = "cap:demo:look", risk = low, side_effects = [read], data(sensitivity = public))]
async fn look(&self) -> Result<(), ConnectorFailure> {
    Ok(())
}

fn main() {}
