//! Implementation claims (upstream checks 19–27) and contradictions (the reverse direction).

use super::fixtures::*;
use crate::model::{
    Capability, CapabilityImplementationSupport, CapabilityKind, ExpectedCompletionMode,
    RetrySafety, TransactionMode,
};
use crate::rules::codes::*;
use crate::rules::{ImplementationFacts, implementation_claims, implementation_contradictions};

/// Facts with `support` and no validation handler (the fixtures preview with `schema_only`).
fn facts(support: CapabilityImplementationSupport) -> ImplementationFacts {
    ImplementationFacts {
        support,
        validation_handler: false,
        compensation_handler: false,
        stream_required: false,
    }
}

/// A capability that claims every operation: streaming and reconciliation added to the governed
/// financial fixture.
fn claims_everything() -> Capability {
    financial_with(|c| {
        c.execution.supports_streaming = true;
        if let Some(t) = c.transaction.as_mut() {
            t.supported_modes.push(TransactionMode::Reconcile);
        }
    })
}

#[test]
fn each_claim_without_support_is_reported_at_the_capability() {
    let capability = claims_everything();
    let exact = exact_support(&capability);
    assert_eq!(exact.flags().iter().filter(|(_, on)| *on).count(), 9);
    assert_clean(&check_with(&capability, &facts(exact)));
    for (k, (operation, _)) in exact.flags().into_iter().enumerate() {
        let mut missing = exact;
        match k {
            0 => missing.invocation = false,
            1 => missing.cancellation = false,
            2 => missing.streaming = false,
            3 => missing.retry = false,
            4 => missing.transaction = false,
            5 => missing.reconciliation = false,
            6 => missing.compensation = false,
            7 => missing.approval = false,
            _ => missing.credentials = false,
        }
        let issues = check_with(&capability, &facts(missing));
        assert_single(&issues, IMPLEMENTATION_CLAIM_UNSUPPORTED, "", &capability);
        assert_eq!(
            issues[0].message,
            format!("capability claims `{operation}` but its implementation does not support it")
        );
    }
}

#[test]
fn claims_follow_upstream_order_and_path() {
    let capability = claims_everything();
    let mut issues = Vec::new();
    implementation_claims(
        &capability,
        &CapabilityImplementationSupport::default(),
        "/capabilities/2",
        &mut issues,
    );
    let operations: Vec<&str> = issues
        .iter()
        .map(|issue| {
            assert_eq!(issue.code, IMPLEMENTATION_CLAIM_UNSUPPORTED);
            assert_eq!(issue.path, "/capabilities/2");
            issue.message.split('`').nth(1).unwrap_or_default()
        })
        .collect();
    assert_eq!(
        operations,
        [
            "invocation",
            "cancellation",
            "streaming",
            "retry",
            "transaction",
            "reconciliation",
            "compensation",
            "approval",
            "credentials"
        ]
    );
}

#[test]
fn only_invocation_is_claimed_without_a_contract() {
    let plain = capability("cap:test:plain", "plain");
    let mut issues = Vec::new();
    implementation_claims(
        &plain,
        &CapabilityImplementationSupport::default(),
        "",
        &mut issues,
    );
    assert_single(&issues, IMPLEMENTATION_CLAIM_UNSUPPORTED, "", &plain);

    let mut resource = plain.clone();
    resource.kind = CapabilityKind::Resource;
    let mut issues = Vec::new();
    implementation_claims(
        &resource,
        &CapabilityImplementationSupport::default(),
        "",
        &mut issues,
    );
    assert_clean(&issues);
}

#[test]
fn resources_with_a_contract_still_have_their_claims_checked() {
    let mut resource = enterprise_capability();
    resource.kind = CapabilityKind::Resource;
    let mut issues = Vec::new();
    implementation_claims(
        &resource,
        &CapabilityImplementationSupport::default(),
        "",
        &mut issues,
    );
    // cancellation, retry and transaction; no invocation claim for a resource.
    assert_eq!(issues.len(), 3);
}

/// `capability` checked with its exact support plus `extra`.
fn check_with_extra(
    capability: &Capability,
    extra: impl FnOnce(&mut CapabilityImplementationSupport),
) -> Vec<crate::Issue> {
    let mut support = exact_support(capability);
    extra(&mut support);
    check_with(capability, &facts(support))
}

#[test]
fn cancellation_without_declaration() {
    let capability = enterprise_with(|c| c.execution.supports_cancel = false);
    assert_single(
        &check_with_extra(&capability, |s| s.cancellation = true),
        IMPLEMENTATION_CANCELLATION_UNDECLARED,
        "/contract/execution/supports_cancel",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn streaming_without_declaration() {
    let capability = enterprise_capability();
    assert_single(
        &check_with_extra(&capability, |s| s.streaming = true),
        IMPLEMENTATION_STREAMING_UNDECLARED,
        "/contract/execution/supports_streaming",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn a_handler_that_needs_a_stream_offers_no_other_mode() {
    let streams_only = enterprise_with(|c| {
        c.execution.supports_sync = false;
        c.execution.supports_async = false;
        c.execution.supports_streaming = true;
        c.execution.expected_completion = ExpectedCompletionMode::Streaming;
    });
    let needs_stream = |capability: &Capability| ImplementationFacts {
        stream_required: true,
        ..facts(exact_support(capability))
    };
    let mut issues = Vec::new();
    implementation_contradictions(&streams_only, &needs_stream(&streams_only), "", &mut issues);
    assert_clean(&issues);

    // Each mode the handler cannot serve is its own issue, at its own declaration.
    let also_sync_and_async = enterprise_with(|c| {
        c.execution.supports_sync = true;
        c.execution.supports_async = true;
        c.execution.supports_streaming = true;
    });
    let mut issues = Vec::new();
    implementation_contradictions(
        &also_sync_and_async,
        &needs_stream(&also_sync_and_async),
        "/capabilities/0",
        &mut issues,
    );
    let found: Vec<_> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                IMPLEMENTATION_MODE_UNSUPPORTED,
                "/capabilities/0/contract/execution/supports_sync"
            ),
            (
                IMPLEMENTATION_MODE_UNSUPPORTED,
                "/capabilities/0/contract/execution/supports_async"
            ),
        ]
    );
    assert!(
        issues[0].message.contains("`sync`"),
        "{}",
        issues[0].message
    );
    assert!(
        issues[1].message.contains("`async`"),
        "{}",
        issues[1].message
    );

    // A contract that denies streaming altogether gets `streaming_undeclared` alone: one
    // mistake, one issue.
    let denies_streaming = enterprise_with(|c| c.execution.supports_streaming = false);
    let mut issues = Vec::new();
    let mut streaming = exact_support(&denies_streaming);
    streaming.streaming = true;
    implementation_contradictions(
        &denies_streaming,
        &ImplementationFacts {
            stream_required: true,
            ..facts(streaming)
        },
        "",
        &mut issues,
    );
    let codes: Vec<_> = issues.iter().map(|i| i.code.as_str()).collect();
    assert_eq!(codes, [IMPLEMENTATION_STREAMING_UNDECLARED]);

    // A handler that streams when asked and answers otherwise (hand-written) may offer both.
    let mut issues = Vec::new();
    implementation_contradictions(
        &also_sync_and_async,
        &facts(exact_support(&also_sync_and_async)),
        "",
        &mut issues,
    );
    assert_clean(&issues);
}

#[test]
fn retry_without_declaration() {
    let capability = enterprise_with(|c| {
        c.execution.supports_retry = false;
        c.execution.retry_safety = RetrySafety::Unknown;
    });
    assert_single(
        &check_with_extra(&capability, |s| s.retry = true),
        IMPLEMENTATION_RETRY_UNDECLARED,
        "/contract/execution/supports_retry",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn transaction_without_declaration() {
    let capability = enterprise_with(|c| c.transaction = None);
    assert_single(
        &check_with_extra(&capability, |s| s.transaction = true),
        IMPLEMENTATION_TRANSACTION_UNDECLARED,
        "/contract/transaction",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn reconciliation_without_declaration() {
    let capability = enterprise_capability();
    assert_single(
        &check_with_extra(&capability, |s| s.reconciliation = true),
        IMPLEMENTATION_RECONCILIATION_UNDECLARED,
        "/contract/transaction/supported_modes",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn approval_without_declaration() {
    let capability = enterprise_capability();
    assert_single(
        &check_with_extra(&capability, |s| s.approval = true),
        IMPLEMENTATION_APPROVAL_UNDECLARED,
        "/contract/approval/required",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn credentials_without_declaration() {
    let capability = enterprise_capability();
    assert_single(
        &check_with_extra(&capability, |s| s.credentials = true),
        IMPLEMENTATION_CREDENTIALS_UNDECLARED,
        "/contract/credentials/required",
        &capability,
    );
    assert_clean(&check_with_extra(&capability, |_| {}));
}

#[test]
fn contradictions_need_a_contract() {
    let plain = capability("cap:test:plain", "plain");
    let everything = facts(exact_support(&claims_everything()));
    let mut issues = Vec::new();
    implementation_contradictions(&plain, &everything, "", &mut issues);
    assert_clean(&issues);
}

#[test]
fn fixtures_pass_with_their_exact_implementation() {
    for capability in [
        enterprise_capability(),
        governed_financial_capability(REFUND_ID),
        seed_example_capability(),
    ] {
        assert_clean(&check_with(&capability, &exact_facts(&capability)));
    }
}
