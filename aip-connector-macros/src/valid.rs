//! Validation: the macro's own grammar rules, then the shared contract rules of
//! `aip_connector_core::rules` on the resolved capability, each issue spanned on the key (or
//! parameter) that caused it.
//!
//! Cascades are avoided on purpose: when a required key is missing or a key failed to parse,
//! the contract rules are not run, because they would report consequences of the same mistake.

use aip_connector_core::ids::{self, profiles::MCP_DESTRUCTIVE_KEY};
use aip_connector_core::model::CapabilityKind;
use aip_connector_core::rules::{self, CheckOptions, Waiver, codes};
use proc_macro2::Span;

use crate::attr::{CapabilityAttr, RISK_POINTER, SIDE_EFFECTS_POINTER, SpanMap};
use crate::ctxt::Ctxt;
use crate::diagnostics;
use crate::resolve::ResolvedCapability;
use crate::signature::{Extractor, HandlerSignature};

/// Rules about the attribute itself that the shared checker cannot see.
pub(crate) fn check_attribute(cx: &Ctxt, attr: &CapabilityAttr, attr_span: Span) {
    // A key written with a value that did not parse already has its error; it is not missing.
    required_key(
        cx,
        attr.side_effects.is_some() || attr.spans.contains_key(SIDE_EFFECTS_POINTER),
        attr_span,
        diagnostics::MISSING_SIDE_EFFECTS,
    );
    required_key(
        cx,
        attr.risk.is_some() || attr.spans.contains_key(RISK_POINTER),
        attr_span,
        diagnostics::MISSING_RISK,
    );
    if let Some((id, span)) = &attr.id
        && id.trim().is_empty()
    {
        cx.error_at(*span, diagnostics::EMPTY_ID.message);
    }
    if let Some((name, span)) = &attr.name
        && name.trim().is_empty()
    {
        cx.error_at(*span, diagnostics::EMPTY_NAME.message);
    }
    if let Some((CapabilityKind::Resource, span)) = attr.kind {
        cx.error_at(span, diagnostics::RESOURCE_KIND.message);
    }
    mcp_destructive(cx, attr, attr_span);
    mcp_binding_keys(cx, attr, attr_span);
}

/// The keys a misspelling (one edit: `tool_nme`) is told of. Not `name`, whose neighbours
/// (`note`, `same`) are plausible metadata of their own; and one edit only, since `tool_type`
/// or `operation` may be too. The projection reads these and `name` ([`Binding::NAME_KEYS`]).
///
/// [`Binding::NAME_KEYS`]: aip_connector_core::model::Binding::NAME_KEYS
const MCP_TYPO_TARGETS: &[&str] = &["tool_name", "operation_id", MCP_DESTRUCTIVE_KEY];

/// rmcp's tool annotations and their short forms: an author moving a tool over writes them into
/// `mcp(...)`, where any key is accepted as binding metadata and these set nothing.
const MCP_ANNOTATION_KEYS: &[&str] = &[
    "annotations",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
    "read_only",
    "idempotent",
    "open_world",
];

/// An `mcp(...)` key that reads like an MCP annotation or a misspelt key the projection reads:
/// binding metadata takes any key, so `destructive_hint = false` compiled and the tool stayed
/// destructive (a migration trial). Other keys stay free metadata.
fn mcp_binding_keys(cx: &Ctxt, attr: &CapabilityAttr, attr_span: Span) {
    for (position, binding) in mcp_bindings(attr) {
        for key in binding.metadata.keys() {
            if aip_connector_core::model::Binding::NAME_KEYS.contains(&key.as_str())
                || key == MCP_DESTRUCTIVE_KEY
            {
                continue;
            }
            let fix = if MCP_ANNOTATION_KEYS.contains(&key.as_str()) {
                "; MCP's annotations are derived from the contract (docs/mcp.md §4): `side_effects = [read]` alone is `readOnlyHint`, a required `idempotency` or `retry_safety = safe` is `idempotentHint`, `external_network` is `openWorldHint`, and `mcp(destructive = false)` declares a `write` additive".to_owned()
            } else if key == "title" || key == "description" {
                "; the tool's title is the capability's `name = \"...\"` and its description the handler's doc comment".to_owned()
            } else if let Some(meant) = MCP_TYPO_TARGETS
                .iter()
                .find(|target| crate::meta::edit_distance(key, target) == 1)
            {
                format!(" (did you mean `{meant}`?)")
            } else {
                continue;
            };
            cx.error_at(
                binding_key_span(attr, position, key, attr_span),
                format!(
                    "`{key}` in `mcp(...)` {}{fix} (rule `{}`)",
                    diagnostics::MCP_BINDING_KEY.message,
                    diagnostics::MCP_BINDING_KEY.code
                ),
            );
        }
    }
}

/// The capability's `mcp(...)` bindings, with their positions among its bindings.
fn mcp_bindings(
    attr: &CapabilityAttr,
) -> impl Iterator<Item = (usize, &aip_connector_core::model::Binding)> {
    attr.bindings
        .iter()
        .enumerate()
        .filter(|(_, binding)| binding.profile == ids::profiles::MCP_COMPAT)
}

/// Where the key `key` of the binding at `position` is written, else the attribute.
fn binding_key_span(attr: &CapabilityAttr, position: usize, key: &str, attr_span: Span) -> Span {
    attr.spans
        .get(&format!("/bindings/{position}/{key}"))
        .copied()
        .unwrap_or(attr_span)
}

/// `mcp(destructive = false)` declares a capability's `write` additive for MCP's
/// `destructiveHint`; it must be a boolean, and cannot speak for an effect that destroys.
fn mcp_destructive(cx: &Ctxt, attr: &CapabilityAttr, attr_span: Span) {
    let Some((position, value)) = mcp_bindings(attr)
        .find_map(|(j, binding)| Some((j, binding.metadata.get(MCP_DESTRUCTIVE_KEY)?)))
    else {
        return;
    };
    let span = binding_key_span(attr, position, MCP_DESTRUCTIVE_KEY, attr_span);
    match value {
        serde_json::Value::Bool(false) => {
            if attr
                .side_effects
                .as_ref()
                .is_some_and(|effects| effects.iter().any(|effect| effect.destroys()))
            {
                cx.error_at(span, diagnostics::MCP_DESTRUCTIVE_DENIED.message);
            }
        }
        serde_json::Value::Bool(true) => {}
        _ => cx.error_at(span, diagnostics::MCP_DESTRUCTIVE_NOT_BOOL.message),
    }
}

fn required_key(cx: &Ctxt, present: bool, span: Span, diagnostic: diagnostics::Diagnostic) {
    if !present {
        cx.error_at(span, diagnostic.message);
    }
}

/// Runs every shared rule on the resolved capability and reports each issue on its key.
pub(crate) fn check_contract(
    cx: &Ctxt,
    attr: &CapabilityAttr,
    sig: &HandlerSignature,
    resolved: &ResolvedCapability,
    attr_span: Span,
    free: bool,
) {
    let waivers: Vec<Waiver> = attr
        .waivers
        .iter()
        .map(|w| Waiver {
            capability_id: resolved.capability.id.clone(),
            code: w.code.clone(),
            reason: w.reason.clone(),
        })
        .collect();
    for waiver in &attr.waivers {
        match rules::rule_info(&waiver.code) {
            None => cx.error_at(
                waiver.code_span,
                format!(
                    "`{}` is not a rule code{}; see docs/diagnostics.md for the catalogue",
                    waiver.code,
                    code_suggestion(&waiver.code)
                        .map(|meant| format!(" (did you mean `{meant}`?)"))
                        .unwrap_or_default()
                ),
            ),
            Some(info) if !info.waivable => cx.error_at(
                waiver.span,
                format!("rule `{}` cannot be waived: {}", info.code, info.fix),
            ),
            Some(_) if waiver.reason.trim().is_empty() => cx.error_at(
                waiver.span,
                "a waiver needs a non-blank `reason`: it is published in the manifest",
            ),
            Some(_) => {}
        }
    }
    let options = CheckOptions {
        base_path: "",
        implementation: Some(&resolved.facts),
        waivers: &waivers,
    };
    let issues = rules::check_capability(&resolved.capability, &options);
    stale_waivers(cx, attr, resolved);
    // One cause, one diagnostic: a regulated side effect at high risk breaks both approval lints,
    // and requiring approval settles both, so the side effect's lint speaks for the two.
    let side_effect_needs_approval = issues
        .iter()
        .any(|i| i.code == codes::CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL);
    // Likewise, `compensation(supported)` without a compensating capability is one mistake that
    // breaks a contract invariant and the compensation claim; naming the capability fixes both.
    let compensation_capability_missing = issues
        .iter()
        .any(|i| i.code == codes::CONTRACT_COMPENSATION_CAPABILITY_MISSING);
    // Likewise, `execution(retry)` without an `IdempotencyKey` breaks the retry claim and, when
    // retry safety is derived (`unsafe`, or `unknown` for a required key the handler never
    // sees), the retry-safety rule: either fix of the claim (the key, or no `retry`) settles
    // both, while the safety rule's own advice ("classify retries") settled nothing in an
    // author trial.
    let retry_claim_unsupported =
        attr.execution.retry_safety.is_none() && issues.iter().any(|i| is_claim(i, "`retry`"));
    for issue in issues {
        // The input schema is derived at run time; its object root is checked there.
        if issue.code == codes::CAPABILITY_INPUT_SCHEMA_NOT_OBJECT
            || (side_effect_needs_approval
                && issue.code == codes::CONTRACT_LINT_RISK_WITHOUT_APPROVAL)
            || (compensation_capability_missing && is_claim(&issue, "`compensation`"))
            || (retry_claim_unsupported && issue.code == codes::CONTRACT_EXECUTION_RETRY_UNSAFE)
        {
            continue;
        }
        let span =
            span_for(&issue.code, &issue.path, &issue.message, attr, sig).unwrap_or(attr_span);
        // The usual fix, a `reconcile = Self::...` companion, is an error on a free function:
        // say how a free capability names its companion instead.
        let message = if free && is_claim(&issue, "`reconciliation`") {
            format!(
                "{}. Name a free `async fn` as its companion: `reconcile = find_<operation>` (it takes `Reconciliation` and returns `Result<ReconcileOutcome, _>`), or remove `reconcile` from the transaction's `modes` (rule `{}`)",
                issue.message, issue.code
            )
        } else if let Some(lint) = is_claim(&issue, "`approval`")
            .then(|| lint_asking_for_approval(resolved, &options))
            .flatten()
        {
            // An author trial followed "stop requiring approval" on a `delete` and met the lint
            // that demands it: offer only the fix this contract allows.
            format!(
                "{}. Add an `Approval` parameter to the handler (it receives the verified decisions). Approval cannot become optional here: `{}` would then refuse the contract ({}) (rule `{}`)",
                issue.message,
                lint.code,
                without_fix(&lint.code, &lint.message),
                issue.code
            )
        } else if resolved.facts.compensation_handler
            && (issue.code == codes::CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL
                || issue.code == codes::CONTRACT_LINT_RISK_WITHOUT_APPROVAL)
        {
            // An author trial found the lint puzzling here: the host never applies this policy.
            let rendered = render(&issue.code, &issue.message);
            let rule = format!(" (rule `{}`)", issue.code);
            format!(
                "{} This capability runs only as the compensation of another (its handler takes `Compensation`), and a host gates the undo with the compensated capability's `approval(...)` and `compensation(requires_approval)`, never with this one; but upstream's enterprise conformance judges every published contract on its own, so declare here the policy that gates the undo.{rule}",
                rendered.strip_suffix(&rule).unwrap_or(&rendered)
            )
        } else {
            render(&issue.code, &issue.message)
        };
        cx.error_at(span, message);
    }
}

/// The lint (side effects or risk) that would fire were the capability's approval not required,
/// under the same waivers: why "stop requiring approval" is no fix for it.
fn lint_asking_for_approval(
    resolved: &ResolvedCapability,
    options: &CheckOptions<'_>,
) -> Option<aip_connector_core::Issue> {
    let mut optional = resolved.capability.clone();
    optional.contract.as_mut()?.approval.as_mut()?.required = false;
    rules::check_capability(&optional, options)
        .into_iter()
        .find(|issue| {
            issue.code == codes::CONTRACT_LINT_SIDE_EFFECT_WITHOUT_APPROVAL
                || issue.code == codes::CONTRACT_LINT_RISK_WITHOUT_APPROVAL
        })
}

/// Whether `issue` is the `implementation.claim_unsupported` of the claim of `operation` (as
/// [`CLAIMS`] quotes it).
fn is_claim(issue: &aip_connector_core::Issue, operation: &str) -> bool {
    issue.code == codes::IMPLEMENTATION_CLAIM_UNSUPPORTED
        && claim(&issue.message).is_some_and(|claim| claim.operation == operation)
}

/// A waiver of a lint that does not fire for this capability waives nothing, yet it is
/// published in the manifest as a gap the contract admits to (and hides the lint should the
/// contract change later). Only the capability's own lints are judged here; a waiver of a
/// connector-level rule (`manifest.*`) is checked where that rule runs.
fn stale_waivers(cx: &Ctxt, attr: &CapabilityAttr, resolved: &ResolvedCapability) {
    let lints: Vec<_> = attr
        .waivers
        .iter()
        // A waiver refused above for its code or reason is not judged again.
        .filter(|w| {
            w.code.starts_with(LINT_PREFIX)
                && rules::rule_info(&w.code).is_some_and(|info| info.waivable)
                && !w.reason.trim().is_empty()
        })
        .collect();
    if lints.is_empty() {
        return;
    }
    let unwaived = CheckOptions {
        base_path: "",
        implementation: Some(&resolved.facts),
        waivers: &[],
    };
    let fired: Vec<String> = rules::check_capability(&resolved.capability, &unwaived)
        .into_iter()
        .map(|issue| issue.code)
        .collect();
    for waiver in lints {
        if !fired.contains(&waiver.code) {
            cx.error_at(
                waiver.span,
                format!(
                    "this waiver waives nothing: `{}` does not fire for this capability. Remove it: a waiver is published in the manifest as a gap the contract admits to",
                    waiver.code
                ),
            );
        }
    }
}

/// The rule code a waiver's unknown code was most likely meant to be (an author trial wrote
/// `side_effects_without_approval` for `side_effect_without_approval`): a waivable code a few
/// edits away, else a code that ends with it (its family left out), else any code a few edits
/// away.
fn code_suggestion(given: &str) -> Option<&'static str> {
    /// Far enough for a plural, a transposition or a changed ending; the codes share long
    /// prefixes, so the looser distance of key typos would name unrelated rules.
    const MAX_EDITS: usize = 3;
    let closest = |waivable_only: bool| {
        rules::RULES
            .iter()
            .filter(|rule| rule.waivable || !waivable_only)
            .map(|rule| (crate::meta::edit_distance(given, rule.code), rule.code))
            .filter(|(distance, _)| *distance <= MAX_EDITS)
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, code)| code)
    };
    let family_left_out = || {
        rules::RULES
            .iter()
            .map(|rule| rule.code)
            .find(|code| !given.is_empty() && code.ends_with(&format!(".{given}")))
    };
    closest(true)
        .or_else(family_left_out)
        .or_else(|| closest(false))
}

/// The codes of the capability lints, the rules a capability's waiver may name.
const LINT_PREFIX: &str = "contract.lint.";

/// A rule's message without the catalogue's fix it may carry, and without its final period.
fn without_fix(code: &str, message: &str) -> String {
    let bare =
        rules::rule_info(code).map_or(message.to_owned(), |info| message.replace(info.fix, ""));
    bare.trim_end().trim_end_matches('.').to_owned()
}

/// "message. Fix. (rule `code`)": the catalogue's fix is appended when the message lacks one;
/// an unsupported claim gets the fix for that claim rather than the rule's list of all of them.
pub(crate) fn render(code: &str, message: &str) -> String {
    if let Some(fix) = attribute_fix(code) {
        // In place of the catalogue's fix, which the rule's message may already carry.
        let bare = without_fix(code, message);
        return format!("{bare}. {fix} (rule `{code}`)");
    }
    let fix = if code == codes::IMPLEMENTATION_CLAIM_UNSUPPORTED {
        claim(message).map(|claim| claim.fix)
    } else {
        None
    };
    match fix.or_else(|| rules::rule_info(code).map(|info| info.fix)) {
        Some(fix) if !message.contains(fix) => format!("{message}. {fix} (rule `{code}`)"),
        _ => format!("{message} (rule `{code}`)"),
    }
}

/// The fix in the attribute's own words, where the catalogue's (shared with manifests written by
/// hand) names the wire field: inside `#[capability]` these contradictions arise only from a
/// flag the author turned off.
fn attribute_fix(code: &str) -> Option<&'static str> {
    match code {
        codes::IMPLEMENTATION_CANCELLATION_UNDECLARED => Some(
            "Remove `cancel = false` from `execution(...)` (cancellation support follows from the `Cancellation` parameter or a `cancel = ...` companion), or remove what observes cancellation.",
        ),
        codes::IMPLEMENTATION_STREAMING_UNDECLARED => Some(
            "Remove `streaming = false` from `execution(...)` (the `StreamSink` parameter is what declares streaming), or remove the parameter.",
        ),
        codes::IMPLEMENTATION_RETRY_UNDECLARED => Some(
            "Remove `retry = false` from `execution(...)` (the `IdempotencyKey` parameter is what declares retry with the key), or remove the parameter.",
        ),
        codes::IMPLEMENTATION_CREDENTIALS_UNDECLARED => Some(
            "Add `credentials(required, scopes = [\"<scope>\"])` to `#[capability(...)]`, or remove the `Credential` parameter.",
        ),
        codes::IMPLEMENTATION_APPROVAL_UNDECLARED => Some(
            "Add `approval(required, evidence = [reason])` to `#[capability(...)]`, or remove the `Approval` parameter.",
        ),
        _ => None,
    }
}

/// Where to report an issue: the parameter for contradictions about extractors, the contract
/// key for unsupported claims, otherwise the key that set the path or, when the path holds a
/// default, the key that caused the problem (see [`cause`]).
fn span_for(
    code: &str,
    path: &str,
    message: &str,
    attr: &CapabilityAttr,
    sig: &HandlerSignature,
) -> Option<Span> {
    let extractor = match code {
        codes::IMPLEMENTATION_CANCELLATION_UNDECLARED => Some(Extractor::Cancellation),
        codes::IMPLEMENTATION_STREAMING_UNDECLARED => Some(Extractor::StreamSink),
        codes::IMPLEMENTATION_RETRY_UNDECLARED => Some(Extractor::IdempotencyKey),
        codes::IMPLEMENTATION_TRANSACTION_UNDECLARED => Some(Extractor::Checkpoint),
        codes::IMPLEMENTATION_CREDENTIALS_UNDECLARED => Some(Extractor::Credential),
        codes::IMPLEMENTATION_APPROVAL_UNDECLARED => Some(Extractor::Approval),
        _ => None,
    };
    if let Some(param) = extractor.and_then(|kind| sig.extractor(kind)) {
        return Some(param.span);
    }
    let path = if code == codes::IMPLEMENTATION_CLAIM_UNSUPPORTED {
        claim_path(message)
    } else {
        path
    };
    let spans = &attr.spans;
    let candidates = || std::iter::once(path).chain(cause(code).iter().copied());
    // A key the author wrote for exactly this field or for a cause beats a whole section; among
    // those, the most specific pointer wins, and the issue's own path on a tie.
    let written = candidates()
        .filter_map(|pointer| Some((pointer.matches('/').count(), *spans.get(pointer)?)))
        .min_by_key(|(depth, _)| std::cmp::Reverse(*depth));
    if let Some((_, span)) = written {
        return Some(span);
    }
    if let Some(span) = companion_handler(code, attr) {
        return Some(span);
    }
    candidates().find_map(|pointer| longest_prefix(spans, pointer))
}

/// Keys that cause an issue when its own path holds a default the author never wrote, in order
/// of preference: e.g. a mutating lint is caused by the `side_effects` that mutate, and a
/// retry-safety rule by the idempotency requirement that made the default retry-safe.
fn cause(code: &str) -> &'static [&'static str] {
    match code {
        codes::CONTRACT_EXECUTION_NO_COMPLETION_MODE => &[
            "/contract/execution/supports_sync",
            "/contract/execution/supports_streaming",
            "/contract/execution/supports_async",
        ],
        codes::CONTRACT_COMPENSATION_CAPABILITY_MISSING => &["/contract/compensation/mode"],
        codes::CONTRACT_EXECUTION_KEY_RETRY_WITHOUT_IDEMPOTENCY => {
            &["/contract/idempotency/requirement"]
        }
        codes::CONTRACT_EXECUTION_RETRY_UNSAFE => &["/contract/execution/retry_safety"],
        codes::CONTRACT_EXECUTION_RETRY_SAFETY_WITHOUT_RETRY => &[
            "/contract/execution/retry_safety",
            "/contract/idempotency/requirement",
        ],
        codes::CONTRACT_COMPENSATION_MODE_WITHOUT_COMPENSATE => {
            &["/contract/compensation/compensation_capability_id"]
        }
        codes::CONTRACT_LINT_MUTATING_WITHOUT_IDEMPOTENCY => &["/contract/side_effects"],
        codes::CONTRACT_LINT_DATA_WITHOUT_REDACTION => {
            &["/contract/data/contains_pii", "/contract/data/sensitivity"]
        }
        codes::CONTRACT_LINT_CREDENTIALS_WITHOUT_SCOPES => &["/contract/credentials/required"],
        codes::CONTRACT_LINT_APPROVAL_WITHOUT_EVIDENCE => &["/contract/approval/required"],
        _ => &[],
    }
}

/// The companion handler (`reconcile = ...`, `cancel = ...`) behind a contradiction that no
/// contract key explains.
fn companion_handler(code: &str, attr: &CapabilityAttr) -> Option<Span> {
    let handler = match code {
        codes::IMPLEMENTATION_RECONCILIATION_UNDECLARED => attr.reconcile.as_ref(),
        codes::IMPLEMENTATION_CANCELLATION_UNDECLARED => attr.cancel.as_ref(),
        codes::CONTRACT_TRANSACTION_VALIDATION_WITHOUT_FIDELITY => attr.validate.as_ref(),
        _ => None,
    };
    handler.map(syn::spanned::Spanned::span)
}

/// A behaviour a contract can claim, as upstream's `implementation.claim_unsupported` message
/// names it: the key that claims it and what implements it.
struct Claim {
    /// The operation in upstream's message, quoted as it is there.
    operation: &'static str,
    /// The JSON Pointer of the key that claims it.
    path: &'static str,
    /// How to implement it, or how to stop claiming it.
    fix: &'static str,
}

/// Every claim upstream checks (checks 20–27), in its order.
const CLAIMS: &[Claim] = &[
    Claim {
        operation: "`cancellation`",
        path: "/contract/execution/supports_cancel",
        fix: "Add a `Cancellation` parameter to the handler (or name a cancel handler with `cancel = ...`), or remove `cancel` from `execution(...)`.",
    },
    Claim {
        operation: "`streaming`",
        path: "/contract/execution/supports_streaming",
        fix: "Add a `StreamSink<T>` parameter to the handler (a streaming handler offers only `streaming`: drop `sync` and `async`), or remove `streaming` from `execution(...)`.",
    },
    Claim {
        operation: "`retry`",
        path: "/contract/execution/supports_retry",
        fix: "Add an `IdempotencyKey` parameter to the handler (a retry re-sends the same key), or remove `retry` from `execution(...)`.",
    },
    Claim {
        operation: "`transaction`",
        path: "/contract/transaction",
        fix: "Add a `Checkpoint` parameter to the handler, or remove the `transaction(...)` section.",
    },
    Claim {
        operation: "`reconciliation`",
        path: "/contract/transaction/supported_modes",
        fix: "Name the handler that asks the provider with `reconcile = Self::<method>`, or remove `reconcile` from the transaction's `modes`.",
    },
    Claim {
        operation: "`compensation`",
        path: "/contract/compensation/mode",
        fix: "Name the compensating capability, `compensation(supported, capability = \"cap:...\")`, or do not declare compensation `supported`.",
    },
    Claim {
        operation: "`approval`",
        path: "/contract/approval/required",
        fix: "Add an `Approval` parameter to the handler (it receives the verified decisions), or stop requiring approval (`approval(optional, ...)`).",
    },
    Claim {
        operation: "`credentials`",
        path: "/contract/credentials/required",
        fix: "Add a `Credential` parameter to the handler, or stop requiring a credential (`credentials(optional, ...)`).",
    },
];

/// The claim an `implementation.claim_unsupported` message names.
fn claim(message: &str) -> Option<&'static Claim> {
    CLAIMS
        .iter()
        .find(|claim| message.contains(claim.operation))
}

/// The contract key behind an `implementation.claim_unsupported` message ("" when unknown).
fn claim_path(message: &str) -> &'static str {
    claim(message).map_or("", |claim| claim.path)
}

/// The span of the longest recorded pointer that is `path` or one of its ancestors.
fn longest_prefix(spans: &SpanMap, path: &str) -> Option<Span> {
    let mut candidate = path;
    loop {
        if let Some(span) = spans.get(candidate) {
            return Some(*span);
        }
        let cut = candidate.rfind('/')?;
        candidate = &candidate[..cut];
        if candidate.is_empty() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::code_suggestion;

    #[test]
    fn a_waivers_misspelt_code_gets_the_code_meant() {
        assert_eq!(
            code_suggestion("contract.lint.side_effects_without_approval"),
            Some("contract.lint.side_effect_without_approval")
        );
        assert_eq!(
            code_suggestion("contract.lint.mutating_without_idempotence"),
            Some("contract.lint.mutating_without_idempotency")
        );
        // The family left out.
        assert_eq!(
            code_suggestion("side_effect_without_approval"),
            Some("contract.lint.side_effect_without_approval")
        );
        // Far from every code.
        assert_eq!(code_suggestion("contract.lint.made_up"), None);
        assert_eq!(code_suggestion(""), None);
    }
}
