//! scratch
#![allow(missing_docs, dead_code)]
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct In { a: String }
#[derive(Serialize, JsonSchema)]
struct Out { b: String }

struct C;

#[connector(id = "c", profiles = ["aip.native.http.v1", "aip.mcp.compat.v1"])]
impl C {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public),
        execution(sync, r#async, expected = any),
        bindings(mcp(profile = "zzz", tool_name = "x")))]
    async fn one(&self, i: In) -> Result<Out, ConnectorFailure> { Ok(Out { b: i.a }) }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public), bindings(mcp, mcp))]
    async fn two(&self, i: In) -> Result<Out, ConnectorFailure> { Ok(Out { b: i.a }) }

    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn three(&self, i: String) -> Result<Out, ConnectorFailure> { Ok(Out { b: i }) }
}

#[capability(id = "cap:f:x", risk = low, side_effects = [read], data(sensitivity = public),
    transaction(modes = [execute, reconcile]), reconcile = does_not_exist, cancel = nope::nope)]
async fn freecap(i: In, _c: Checkpoint) -> Result<Out, ConnectorFailure> { Ok(Out { b: i.a }) }

#[test]
fn scratch() {
    let d = <freecap as aip_connector::FreeCapability>::definition();
    println!("free support {:?}", d.facts.support);
    let def = C.definition();
    println!("{}", serde_json::to_string_pretty(&def.manifest()).unwrap());
}
