// `destructive = false` cannot speak for a side effect that destroys.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Branch {
    name: String,
}

struct Demo;

#[connector(id = "demo", profiles = [native_http, mcp])]
impl Demo {
    #[capability(
        risk = medium,
        side_effects = [write, delete],
        data(sensitivity = internal),
        approval(required, evidence = [reason]),
        bindings(mcp(tool_name = "delete_branch", destructive = false)),
    )]
    async fn delete_branch(
        &self,
        branch: Branch,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<(), ConnectorFailure> {
        let _ = branch.name;
        Ok(())
    }
}

fn main() {}
