// A capability's input is one JSON object: a type whose schema is not one is refused on the
// parameter, rather than by `Host::build` at run time.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Day {
    day: String,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn shout(&self, text: String) -> Result<(), ConnectorFailure> {
        let _ = text;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn pair(&self, pair: (String, u32)) -> Result<(), ConnectorFailure> {
        let _ = pair;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn maybe(&self, day: Option<Day>) -> Result<(), ConnectorFailure> {
        let _ = day;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn many(&self, days: Vec<Day>) -> Result<(), ConnectorFailure> {
        let _ = days;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn nothing(&self, input: ()) -> Result<(), ConnectorFailure> {
        let _ = input;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn anything(&self, input: serde_json::Value) -> Result<(), ConnectorFailure> {
        let _ = input;
        Ok(())
    }
}

fn main() {}
