//! Phase D: implementation claims (upstream checks 18–27).

use super::{AdmissionPolicy, ImplementationSupportMap};
use crate::issue::Issue;
use crate::model::{Capability, Manifest};
use crate::rules;

/// Runs check 18 and, for capabilities with a claim, checks 19–27, in manifest order.
///
/// A capability without a claim is skipped after check 18, whether or not the policy requires
/// claims; a `resource` capability with a claim still has its contract checked (checks 20–27).
pub(super) fn check(
    manifest: &Manifest,
    policy: &AdmissionPolicy,
    support: &ImplementationSupportMap,
    out: &mut Vec<Issue>,
) {
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let base = format!("/capabilities/{index}");
        match support.get(&capability.id) {
            Some(claim) => rules::implementation_claims(capability, claim, &base, out),
            None => check_claim_present(capability, policy, &base, out),
        }
    }
}

/// Check 18: a host that requires claims cannot tell what a capability without one supports.
fn check_claim_present(
    capability: &Capability,
    policy: &AdmissionPolicy,
    base: &str,
    out: &mut Vec<Issue>,
) {
    if capability.is_callable() && policy.require_implementation_claims {
        out.push(
            Issue::new(
                rules::codes::IMPLEMENTATION_MISSING,
                base,
                "callable capability has no registered implementation claim",
            )
            .with_capability(&capability.id),
        );
    }
}
