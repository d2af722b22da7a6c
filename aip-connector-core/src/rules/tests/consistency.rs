//! Consistency between contract sections.

use super::fixtures::*;
use crate::model::{
    CompensationMode, DryRunFidelity, ExpectedCompletionMode, IdempotencyRequirement, RetrySafety,
    SideEffect, TransactionMode,
};
use crate::rules::codes::*;
use crate::rules::{ImplementationFacts, consistency};

#[test]
fn expected_completion_must_be_supported() {
    let bad = enterprise_with(|c| {
        c.execution.supports_sync = false;
        c.execution.expected_completion = ExpectedCompletionMode::Sync;
    });
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_EXECUTION_EXPECTED_COMPLETION_UNSUPPORTED,
        "/contract/execution/expected_completion",
        &bad,
    );
    assert!(
        issues[0]
            .message
            .starts_with("expected_completion is `sync` but `supports_sync` is false. ")
    );
    assert_clean(&check(&enterprise_with(|c| {
        c.execution.supports_sync = false;
        c.execution.expected_completion = ExpectedCompletionMode::Async;
    })));
}

#[test]
fn key_based_retry_needs_idempotency() {
    let read_only = |requirement| {
        enterprise_with(move |c| {
            c.side_effects = vec![SideEffect::Read];
            c.idempotency.requirement = requirement;
        })
    };
    let bad = read_only(IdempotencyRequirement::Unsupported);
    assert_single(
        &check(&bad),
        CONTRACT_EXECUTION_KEY_RETRY_WITHOUT_IDEMPOTENCY,
        "/contract/execution/retry_safety",
        &bad,
    );
    assert_clean(&check(&read_only(IdempotencyRequirement::Optional)));
}

#[test]
fn retry_support_needs_a_safe_classification() {
    for safety in [RetrySafety::Unsafe, RetrySafety::Unknown] {
        let bad = enterprise_with(|c| c.execution.retry_safety = safety);
        assert_single(
            &check(&bad),
            CONTRACT_EXECUTION_RETRY_UNSAFE,
            "/contract/execution/supports_retry",
            &bad,
        );
    }
    assert_clean(&check(&enterprise_with(|c| {
        c.execution.retry_safety = RetrySafety::Safe
    })));
}

#[test]
fn retry_safety_needs_retry_support() {
    let bad = enterprise_with(|c| c.execution.supports_retry = false);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_EXECUTION_RETRY_SAFETY_WITHOUT_RETRY,
        "/contract/execution/supports_retry",
        &bad,
    );
    assert!(
        issues[0]
            .message
            .starts_with("contract declares retry safety without retry support. ")
    );
    assert_clean(&check(&enterprise_with(|c| {
        c.execution.supports_retry = false;
        c.execution.retry_safety = RetrySafety::Unsafe;
    })));
}

/// The enterprise fixture with transaction `modes` and the plan-before-commit flag.
fn with_modes(modes: &[TransactionMode], requires_plan: bool) -> crate::model::Capability {
    enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes = modes.to_vec();
            t.requires_plan_before_commit = requires_plan;
        }
    })
}

#[test]
fn plan_before_commit_needs_plan_and_commit() {
    use TransactionMode::*;
    let bad = with_modes(&[Execute, Plan], true);
    assert_single(
        &check(&bad),
        CONTRACT_TRANSACTION_PLAN_REQUIREMENT_WITHOUT_MODES,
        "/contract/transaction/requires_plan_before_commit",
        &bad,
    );
    assert_clean(&check(&with_modes(&[Execute, Plan], false)));
    assert_clean(&check(&with_modes(&[Execute, Plan, Commit], true)));
}

#[test]
fn commit_needs_plan() {
    use TransactionMode::*;
    let bad = with_modes(&[Execute, Commit], false);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_TRANSACTION_COMMIT_WITHOUT_PLAN,
        "/contract/transaction/supported_modes/1",
        &bad,
    );
    assert!(
        issues[0]
            .message
            .starts_with("commit support must also publish plan support. ")
    );
    assert_clean(&check(&with_modes(&[Execute, Plan, Commit], false)));
}

#[test]
fn compensate_mode_needs_compensation() {
    let bad = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.push(TransactionMode::Compensate);
        }
    });
    assert_single(
        &check(&bad),
        CONTRACT_TRANSACTION_COMPENSATE_WITHOUT_COMPENSATION,
        "/contract/transaction/supported_modes/5",
        &bad,
    );
    assert_clean(&check(&enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.push(TransactionMode::Compensate);
        }
        if let Some(comp) = c.compensation.as_mut() {
            comp.mode = CompensationMode::BestEffort;
        }
    })));
}

#[test]
fn compensation_needs_compensate_mode() {
    let bad = enterprise_with(|c| {
        if let Some(comp) = c.compensation.as_mut() {
            comp.mode = CompensationMode::BestEffort;
        }
    });
    assert_single(
        &check(&bad),
        CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE,
        "/contract/compensation/mode",
        &bad,
    );
    // Without any transaction section the mode is missing too.
    let no_transaction = financial_with(|c| c.transaction = None);
    assert_single(
        &check(&no_transaction),
        CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE,
        "/contract/compensation/mode",
        &no_transaction,
    );
    assert_clean(&check(&governed_financial_capability(REFUND_ID)));
}

#[test]
fn compensation_must_name_another_capability() {
    let bad = governed_financial_capability(FINANCIAL_ID);
    let issues = check(&bad);
    assert_single(
        &issues,
        CONTRACT_COMPENSATION_SELF_REFERENCE,
        "/contract/compensation/compensation_capability_id",
        &bad,
    );
    assert!(issues[0].message.starts_with(
        "compensation capability `cap:test:payment` is this capability itself: a `compensate` would run its own handler again instead of undoing its effect. "
    ));
    // With the implementation known, the self-reference is still the only issue: naming a
    // capability is the compensation claim, and the claim is implemented.
    assert_single(
        &check_with(&bad, &exact_facts(&bad)),
        CONTRACT_COMPENSATION_SELF_REFERENCE,
        "/contract/compensation/compensation_capability_id",
        &bad,
    );
    assert_clean(&check(&governed_financial_capability(REFUND_ID)));
}

#[test]
fn downstream_fidelity_needs_a_validation_handler() {
    let bad = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.dry_run_fidelity = DryRunFidelity::DownstreamValidation;
        }
    });
    let without_handler = ImplementationFacts {
        validation_handler: false,
        compensation_handler: false,
        ..exact_facts(&bad)
    };
    assert_single(
        &check_with(&bad, &without_handler),
        CONTRACT_TRANSACTION_FIDELITY_WITHOUT_VALIDATION,
        "/contract/transaction/dry_run_fidelity",
        &bad,
    );
    assert_clean(&check_with(&bad, &exact_facts(&bad)));
    // Unknown implementation: the rule cannot be checked and is skipped.
    assert_clean(&check(&bad));
}

#[test]
fn a_validation_handler_needs_a_preview_that_asks_it() {
    let facts = |capability| ImplementationFacts {
        validation_handler: true,
        ..exact_facts(capability)
    };
    let schema_only = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.dry_run_fidelity = DryRunFidelity::SchemaOnly;
        }
    });
    assert_single(
        &check_with(&schema_only, &facts(&schema_only)),
        CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY,
        "/contract/transaction/dry_run_fidelity",
        &schema_only,
    );
    let no_transaction = enterprise_with(|c| c.transaction = None);
    let issues = check_with(&no_transaction, &facts(&no_transaction));
    assert!(
        issues.iter().any(
            |i| i.code == CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY
                && i.path == "/contract/transaction"
        ),
        "{issues:?}"
    );
    let asked = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.dry_run_fidelity = DryRunFidelity::DownstreamValidation;
        }
    });
    assert!(
        !check_with(&asked, &facts(&asked))
            .iter()
            .any(|i| i.code == CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY)
    );
    // Unknown implementation: the rule cannot be checked and is skipped.
    assert!(
        !check(&schema_only)
            .iter()
            .any(|i| i.code == CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY)
    );
}

#[test]
fn fidelity_matters_only_for_dry_runs_and_plans() {
    use TransactionMode::*;
    let execute_only = enterprise_with(|c| {
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes = vec![Execute];
            t.requires_plan_before_commit = false;
            t.dry_run_fidelity = DryRunFidelity::FullSimulation;
        }
    });
    let mut issues = Vec::new();
    let facts = ImplementationFacts {
        validation_handler: false,
        compensation_handler: false,
        ..exact_facts(&execute_only)
    };
    consistency(&execute_only, Some(&facts), "", &mut issues);
    assert_clean(&issues);
}
