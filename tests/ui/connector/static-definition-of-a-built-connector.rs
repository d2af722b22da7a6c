// A connector assembled at run time has its definition on a value: asking its type for one
// (`assert_manifest_snapshot!(type = ...)` does) says so, with the form that works.
use aip_connector::{BuiltConnector, StaticDefinition};

fn snapshot_of<C: StaticDefinition>() {
    let _ = C::static_definition();
}

fn main() {
    snapshot_of::<BuiltConnector>();
}
