// The input is decoded into an owned value for every call: a reference or a borrowing type is
// refused on the parameter, not inside the generated decoder.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Day {
    day: String,
}

#[derive(Deserialize, JsonSchema)]
struct Borrowed<'a> {
    day: &'a str,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn by_reference(&self, day: &Day) -> Result<(), ConnectorFailure> {
        let _ = &day.day;
        Ok(())
    }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn borrowing(&self, day: Borrowed<'_>) -> Result<(), ConnectorFailure> {
        let _ = day.day;
        Ok(())
    }
}

fn main() {}
