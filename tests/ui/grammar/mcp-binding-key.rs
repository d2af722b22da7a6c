// rmcp's annotation names, or a misspelt key, inside `mcp(...)` set nothing: binding metadata
// takes any key, so they compiled and the tool kept its derived annotations. Other keys are
// free metadata.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", profiles = [native_http, mcp])]
impl Demo {
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        bindings(mcp(tool_name = "look", destructive_hint = false, open_world = false, team = "search")),
    )]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        bindings(mcp(tool_nme = "peek", title = "Peek", tool_type = "lookup", operation = "peek")),
    )]
    async fn peek(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
