//! Capability-contract rules, shared by the `#[capability]` macros (at compile time) and manifest
//! admission (at run time), so a rule and its message are written once.
//!
//! Rules come in groups, each appending [`Issue`]s to a caller's vector with paths prefixed by a
//! base pointer (`""` for a lone capability, `/capabilities/3` inside a manifest):
//!
//! - [`contract_invariants`]: upstream admission checks C1–C15 with the approval-rule recursion,
//!   with upstream's exact codes, paths, messages and order;
//! - [`core_validation`]: the aip-core `validate_capability` rules admission does not repeat;
//! - [`consistency`]: contract sections that contradict each other;
//! - [`lints`]: governance rules a connector may waive with a published reason;
//! - [`implementation_claims`] and [`implementation_contradictions`]: the contract against the
//!   implementation behind it, in both directions;
//! - [`compensation_targets`], [`compensating_handlers`] and [`waivers_from_manifest`]:
//!   connector-level rules ([`compensating_handlers`] runs in the `#[connector]` macro at
//!   compile time and in `Host::build` for every connector, from its handlers' facts; manifest
//!   admission cannot run it, since it sees no handler).
//!
//! [`check_capability`] runs every capability-level group in that order. Every code is a
//! constant in [`codes`] and has an entry in [`RULES`]. Upstream codes keep upstream's messages;
//! our own rules end their message with the catalogue's fix sentence.

pub mod codes;

mod catalogue;
mod consistency;
mod core_validation;
mod implementation;
mod invariants;
mod lints;
mod waivers;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use catalogue::{RULES, RuleInfo, rule_info};
pub use consistency::consistency;
pub use core_validation::core_validation;
pub use implementation::{implementation_claims, implementation_contradictions};
pub use invariants::contract_invariants;
pub use lints::lints;
pub use waivers::{
    approval_gated, compensating_handlers, compensation_approval, compensation_targets,
    gates_compensations, waivers_from_manifest,
};

use crate::ids::CapabilityId;
use crate::issue::Issue;
use crate::model::{Capability, CapabilityImplementationSupport};

/// Facts about the implementation behind a capability (the macro knows all of them; admission
/// only `support`).
///
/// Admission, which cannot see a validation handler, should run [`implementation_claims`] with
/// the support record rather than pass facts with a guessed `validation_handler`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImplementationFacts {
    /// The support record derived from the handler's signature and companion handlers.
    pub support: CapabilityImplementationSupport,
    /// A downstream validation handler (`validate = ...`) backs dry runs and plans.
    pub validation_handler: bool,
    /// The handler takes `Compensation`: it runs only as the compensation of another
    /// capability (routed from a `compensate` action of the capability it undoes), never when
    /// an action names it. A host refuses such actions before any approver is asked, and the
    /// MCP projection does not list it as a tool.
    pub compensation_handler: bool,
    /// The handler runs only when the action is streamed (the macro's handlers: it takes a
    /// `StreamSink`), so a contract that also offers `sync` or `async` execution promises calls
    /// it cannot answer.
    pub stream_required: bool,
}

/// A published, reasoned exemption from one waivable rule for one capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiver {
    /// The capability the exemption applies to.
    pub capability_id: CapabilityId,
    /// The waived rule code; must be waivable (see [`RuleInfo::waivable`]).
    pub code: String,
    /// Why the rule does not apply; must not be blank.
    pub reason: String,
}

impl Waiver {
    /// Whether this waiver exempts `capability` from `code`.
    pub fn covers(&self, capability: &CapabilityId, code: &str) -> bool {
        self.capability_id == *capability && self.code == code
    }
}

/// How [`check_capability`] runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions<'a> {
    /// Pointer prefix of every issue path (`""` for a lone capability).
    pub base_path: &'a str,
    /// The implementation behind the capability; implementation rules run only when present.
    pub implementation: Option<&'a ImplementationFacts>,
    /// Published waivers; lints they cover are skipped.
    pub waivers: &'a [Waiver],
}

/// Every rule for one capability (what the macro runs): invariants, core validation,
/// consistency, lints (minus waived), implementation claims and contradictions (when
/// `implementation` is Some). Stable order.
pub fn check_capability(capability: &Capability, options: &CheckOptions<'_>) -> Vec<Issue> {
    let base = options.base_path;
    let mut issues = Vec::new();
    contract_invariants(capability, base, &mut issues);
    core_validation(capability, base, &mut issues);
    consistency(capability, options.implementation, base, &mut issues);
    lints(capability, options.waivers, base, &mut issues);
    if let Some(facts) = options.implementation {
        implementation_claims(capability, &facts.support, base, &mut issues);
        implementation_contradictions(capability, facts, base, &mut issues);
    }
    issues
}

/// Whether any of `waivers` exempts `capability` from `code`.
fn is_waived(waivers: &[Waiver], capability: &CapabilityId, code: &str) -> bool {
    waivers.iter().any(|waiver| waiver.covers(capability, code))
}

/// Appends issues about one capability, with paths under one base pointer.
struct Reporter<'a> {
    capability: &'a CapabilityId,
    base: &'a str,
    out: &'a mut Vec<Issue>,
}

impl<'a> Reporter<'a> {
    fn new(capability: &'a Capability, base: &'a str, out: &'a mut Vec<Issue>) -> Self {
        Self {
            capability: &capability.id,
            base,
            out,
        }
    }

    /// An issue with upstream's exact message, at `base` + `suffix`.
    fn upstream(&mut self, code: &str, suffix: &str, message: &str) {
        self.out.push(
            Issue::new(code, format!("{}{suffix}", self.base), message)
                .with_capability(self.capability),
        );
    }

    /// An issue of our own, at `base` + `suffix`.
    fn own(&mut self, code: &str, suffix: &str, problem: &str) {
        self.out.push(
            own_issue(code, format!("{}{suffix}", self.base), problem)
                .with_capability(self.capability),
        );
    }
}

/// An issue of one of our own rules: what is wrong, then the catalogue's fix sentence.
fn own_issue(code: &str, path: String, problem: &str) -> Issue {
    let fix = catalogue::fix_for(code);
    Issue::new(code, path, format!("{problem}. {fix}"))
}

/// The wire spelling of a unit enum value (e.g. `safe_with_idempotency_key`), for messages
/// (the rules' and the macro's generated docs).
pub fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}
