//! Validation: the macro's own grammar rules, then the shared contract rules of
//! `aip_connector_core::rules` on the resolved capability, each issue spanned on the key (or
//! parameter) that caused it.
//!
//! Cascades are avoided on purpose: when a required key is missing or a key failed to parse,
//! the contract rules are not run, because they would report consequences of the same mistake.

use aip_connector_core::model::CapabilityKind;
use aip_connector_core::rules::{self, CheckOptions, Waiver, codes};
use proc_macro2::Span;

use crate::attr::{CapabilityAttr, SpanMap};
use crate::ctxt::Ctxt;
use crate::diagnostics;
use crate::resolve::ResolvedCapability;
use crate::signature::{Extractor, HandlerSignature};

/// Rules about the attribute itself that the shared checker cannot see.
pub(crate) fn check_attribute(cx: &Ctxt, attr: &CapabilityAttr, attr_span: Span) {
    required_key(
        cx,
        attr.side_effects.is_some(),
        attr_span,
        diagnostics::MISSING_SIDE_EFFECTS,
    );
    required_key(
        cx,
        attr.risk.is_some(),
        attr_span,
        diagnostics::MISSING_RISK,
    );
    if let Some((id, span)) = &attr.id {
        if id.trim().is_empty() {
            cx.error_at(*span, diagnostics::EMPTY_ID.message);
        }
    }
    if let Some((name, span)) = &attr.name {
        if name.trim().is_empty() {
            cx.error_at(*span, diagnostics::EMPTY_NAME.message);
        }
    }
    if let Some((CapabilityKind::Resource, span)) = attr.kind {
        cx.error_at(span, diagnostics::RESOURCE_KIND.message);
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
                waiver.span,
                format!(
                    "`{}` is not a rule code; see docs/diagnostics.md for the catalogue",
                    waiver.code
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
    for issue in rules::check_capability(&resolved.capability, &options) {
        // The input schema is derived at run time; its object root is checked there.
        if issue.code == codes::CAPABILITY_INPUT_SCHEMA_NOT_OBJECT {
            continue;
        }
        let span = span_for(&issue.code, &issue.path, &issue.message, &attr.spans, sig)
            .unwrap_or(attr_span);
        cx.error_at(span, render(&issue.code, &issue.message));
    }
}

/// "message (rule `code`)", with the catalogue's fix appended when the message lacks one.
fn render(code: &str, message: &str) -> String {
    match rules::rule_info(code) {
        Some(info) if !message.contains(info.fix) => {
            format!("{message}; {} (rule `{code}`)", info.fix)
        }
        _ => format!("{message} (rule `{code}`)"),
    }
}

/// Where to report an issue: the parameter for contradictions about extractors, the contract
/// key for unsupported claims, otherwise the most specific key that set the path.
fn span_for(
    code: &str,
    path: &str,
    message: &str,
    spans: &SpanMap,
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
    longest_prefix(spans, path)
}

/// The contract key behind an unsupported claim ("capability claims `cancellation` ...").
fn claim_path(message: &str) -> &'static str {
    const CLAIMS: &[(&str, &str)] = &[
        ("`cancellation`", "/contract/execution/supports_cancel"),
        ("`streaming`", "/contract/execution/supports_streaming"),
        ("`retry`", "/contract/execution/supports_retry"),
        ("`transaction`", "/contract/transaction"),
        ("`reconciliation`", "/contract/transaction/supported_modes"),
        ("`compensation`", "/contract/compensation/mode"),
        ("`approval`", "/contract/approval/required"),
        ("`credentials`", "/contract/credentials/required"),
    ];
    CLAIMS
        .iter()
        .find(|(op, _)| message.contains(op))
        .map(|(_, path)| *path)
        .unwrap_or("")
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
