//! Scenario `idempotency`: not written yet. It asserts nothing, so the scenario fails whenever a
//! manifest requires it.

use crate::conformance::{Evidence, Harness};

pub(super) async fn run(_harness: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    evidence.note("this scenario is not implemented by this version of the testkit");
    evidence
}
