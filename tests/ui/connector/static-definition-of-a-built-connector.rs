// A connector assembled at run time has its definition on a value: a manifest snapshot of its
// type says so, with the form that works.
use aip_connector::BuiltConnector;

fn main() {
    aip_connector_testkit::assert_manifest_snapshot!(type = BuiltConnector);
}
