//! Tests of the rule groups: one violating capability per rule (exactly one issue, right code
//! and path) and its fixed version (no issue), plus the fixtures that must pass every rule.

mod catalogue;
mod consistency;
mod core_validation;
mod fixtures;
mod implementation;
mod invariants;
mod lints;
mod waivers;

use fixtures::*;

#[test]
fn seed_example_capability_passes() {
    assert_clean(&check(&seed_example_capability()));
}

#[test]
fn upstream_enterprise_fixture_passes() {
    assert_clean(&check(&enterprise_capability()));
}

#[test]
fn upstream_governed_financial_fixture_passes() {
    assert_clean(&check(&governed_financial_capability(REFUND_ID)));
}

#[test]
fn check_capability_runs_the_groups_in_order() {
    use crate::model::{IdempotencyRequirement, RetrySafety};
    use crate::rules::codes::*;
    let mut bad = enterprise_with(|c| {
        c.idempotency.ttl_ms = Some(0);
        c.side_effects.clear();
        c.side_effects.push(crate::model::SideEffect::Write);
        c.idempotency.requirement = IdempotencyRequirement::Optional;
        c.execution.retry_safety = RetrySafety::Unsafe;
    });
    bad.input_schema = serde_json::json!(false);
    let mut support = exact_support(&bad);
    support.cancellation = false;
    support.streaming = true;
    let facts = crate::rules::ImplementationFacts {
        support,
        validation_handler: false,
        compensation_handler: false,
        stream_required: false,
    };
    let options = crate::rules::CheckOptions {
        base_path: "/capabilities/4",
        implementation: Some(&facts),
        waivers: &[],
    };
    let issues = crate::rules::check_capability(&bad, &options);
    assert_eq!(
        codes_and_paths(&issues),
        [
            (
                CONTRACT_IDEMPOTENCY_INVALID_TTL,
                "/capabilities/4/contract/idempotency/ttl_ms"
            ),
            (
                CAPABILITY_INPUT_SCHEMA_NOT_OBJECT,
                "/capabilities/4/input_schema"
            ),
            (
                CONTRACT_EXECUTION_RETRY_UNSAFE,
                "/capabilities/4/contract/execution/supports_retry"
            ),
            (
                CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY,
                "/capabilities/4/contract/idempotency/requirement"
            ),
            (IMPLEMENTATION_CLAIM_UNSUPPORTED, "/capabilities/4"),
            (
                IMPLEMENTATION_STREAMING_UNDECLARED,
                "/capabilities/4/contract/execution/supports_streaming"
            ),
        ]
    );
}
