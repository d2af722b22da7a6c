// `State<S>` belongs to free capabilities; a `#[connector]` handler has `&self`.
use aip_connector::prelude::*;

#[derive(Clone)]
struct Settings {
    region: String,
}

struct Demo {
    settings: Settings,
}

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn region(&self, State(settings): State<Settings>) -> Result<String, ConnectorFailure> {
        Ok(settings.region)
    }
}

fn main() {}
