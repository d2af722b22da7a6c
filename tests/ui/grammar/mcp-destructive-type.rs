// `destructive` takes a boolean.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Comment {
    body: String,
}

struct Demo;

#[connector(id = "demo", profiles = [native_http, mcp])]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [write],
        data(sensitivity = internal),
        bindings(mcp(destructive = "no")),
    )]
    async fn comment(&self, comment: Comment, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        let _ = comment.body;
        Ok(())
    }
}

fn main() {}
