//! Compile-fail UI tests (one per diagnostic, `ui/<category>/<name>.rs` + `.stderr`) and
//! compile-pass cases (`pass/*.rs`). Regenerate snapshots with `TRYBUILD=overwrite` and review
//! every changed span and message.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*/*.rs");
    cases.pass("pass/*.rs");
}
