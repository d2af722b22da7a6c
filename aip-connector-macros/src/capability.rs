//! One capability: attribute + handler → resolved capability, checked. Shared by the
//! `#[connector]` path (methods) and the free-function path.

use aip_connector_core::model::Capability;
use aip_connector_core::rules::ImplementationFacts;
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Attribute, Expr, Signature};

use crate::attr::{self, CapabilityAttr};
use crate::ctxt::Ctxt;
use crate::diagnostics;
use crate::meta::{MetaArgs, MetaItem};
use crate::resolve;
use crate::signature::{self, HandlerSignature};
use crate::valid;

/// A capability ready for code generation.
pub(crate) struct CapabilityItem {
    pub(crate) capability: Capability,
    pub(crate) facts: ImplementationFacts,
    pub(crate) sig: HandlerSignature,
    pub(crate) examples: Vec<String>,
    pub(crate) tags: Vec<String>,
    pub(crate) waivers: Vec<(String, String)>,
    pub(crate) reconcile: Option<Expr>,
    pub(crate) validate: Option<Expr>,
    pub(crate) cancel: Option<Expr>,
    pub(crate) attr_span: Span,
    /// The id `compensation(capability = "...")` names, for the connector-level checks that the
    /// target exists and takes `Compensation`.
    pub(crate) compensation_target_span: Option<Span>,
    /// The `id = "..."` value, when written.
    pub(crate) id_span: Option<Span>,
    /// Each binding by profile id, for the connector-level checks of bindings and names.
    pub(crate) binding_spans: std::collections::BTreeMap<String, Span>,
    /// The handler's `#[cfg(...)]` attributes: everything generated for the capability (its
    /// dispatch arms, codecs, assertions and definition) is compiled under the same conditions,
    /// so a handler configured out takes its capability with it.
    pub(crate) cfgs: Vec<Attribute>,
    /// The doc comment's parts when one is an expression: the description is joined from them
    /// at run time.
    pub(crate) description_parts: Option<Vec<Expr>>,
}

impl CapabilityItem {
    /// The companions named as `Self::method` (`reconcile = Self::find`, ...): each key with
    /// the method's name as written. Other paths (a free function, a method elsewhere) are
    /// left to rustc.
    pub(crate) fn self_companions(&self) -> impl Iterator<Item = (&'static str, &syn::Ident)> {
        self.companions().filter_map(|(key, companion)| {
            let Some(Expr::Path(path)) = companion else {
                return None;
            };
            let segments = &path.path.segments;
            (segments.len() == 2 && segments[0].ident == "Self").then(|| (key, &segments[1].ident))
        })
    }

    /// Every companion as written, with its key.
    pub(crate) fn companions(&self) -> impl Iterator<Item = (&'static str, &Option<Expr>)> {
        [
            ("reconcile", &self.reconcile),
            ("validate", &self.validate),
            ("cancel", &self.cancel),
        ]
        .into_iter()
    }

    /// Where an error about the capability's name under `profile` points: its binding for that
    /// profile, else its `id = "..."`, else the attribute.
    pub(crate) fn name_span(&self, profile: &str) -> Span {
        self.binding_spans
            .get(profile)
            .or(self.id_span.as_ref())
            .copied()
            .unwrap_or(self.attr_span)
    }
}

/// Whether a companion is written `Self::...`, which only an impl block can resolve.
fn names_self(companion: &Expr) -> bool {
    let Expr::Path(path) = companion else {
        return false;
    };
    // `Self::f`, `<Self>::f` and `<Self as Trait>::f`.
    let self_type = |ty: &syn::Type| matches!(ty, syn::Type::Path(t) if t.path.is_ident("Self"));
    path.qself.as_ref().is_some_and(|q| self_type(&q.ty))
        || (path.qself.is_none()
            && path
                .path
                .segments
                .first()
                .is_some_and(|s| s.ident == "Self"))
}

/// Parses, resolves and checks one handler. `connector_id` is `Some` inside `#[connector]`.
pub(crate) fn analyze(
    cx: &Ctxt,
    args: TokenStream,
    attr_span: Span,
    fn_attrs: &[Attribute],
    sig: &Signature,
    connector_id: Option<&str>,
) -> Option<CapabilityItem> {
    let items = match syn::parse2::<MetaArgs>(args.clone()) {
        Ok(MetaArgs(items)) => {
            crate::meta::refuse_literal_suffixes(cx, &args);
            items
        }
        Err(error) => {
            cx.syn_error(error);
            return None;
        }
    };
    let errors_before = cx.error_count();
    let items = take_sdk_path(cx, items, connector_id.is_some());
    let attr = attr::parse_capability(cx, &items);
    let handler = signature::read(cx, sig, connector_id.is_some());
    valid::check_attribute(cx, &attr, attr_span);
    let id = match (&attr.id, connector_id) {
        (Some((id, _)), _) => id.clone(),
        (None, Some(connector)) => format!(
            "cap:{connector}:{}",
            sig.ident.to_string().trim_start_matches("r#")
        ),
        (None, None) => {
            // A free function with `self` is a method whose impl block lacks `#[connector]`
            // (the error on `self` says so); asking it for an `id` would be a second error for
            // the same mistake.
            if !handler.has_receiver {
                cx.error_at(attr_span, diagnostics::FREE_ID_MISSING.message);
            }
            String::new()
        }
    };
    if connector_id.is_none() {
        // A free capability's companions are free functions too: `Self` names nothing here.
        for companion in [&attr.reconcile, &attr.validate, &attr.cancel]
            .into_iter()
            .flatten()
            .filter(|companion| names_self(companion))
        {
            cx.error_spanned_by(companion, diagnostics::FREE_COMPANION_SELF.message);
        }
    }
    let (description, description_parts) = match doc_comment(fn_attrs) {
        DocComment::Text(text) => (text, None),
        DocComment::Parts(parts) => (None, Some(parts)),
    };
    let resolved = resolve::resolve(&attr, &handler, id, description);
    // Contract rules only run on an attribute that parsed cleanly: otherwise they would report
    // consequences of the mistake already reported.
    if cx.error_count() == errors_before {
        valid::check_contract(
            cx,
            &attr,
            &handler,
            &resolved,
            attr_span,
            connector_id.is_none(),
        );
        claimed_plan_needs_a_plan(cx, &handler, &resolved.capability);
    }
    let cfgs = fn_attrs
        .iter()
        .filter(|a| a.path().is_ident(crate::keys::attributes::CFG))
        .cloned()
        .collect();
    let mut item = item(attr, handler, resolved, attr_span, cfgs);
    item.description_parts = description_parts;
    Some(item)
}

/// A handler that takes `ClaimedPlan` runs only as the commit of a plan: the contract must offer
/// `commit` (which always names a plan) and no `execute`, whose calls have no plan and would
/// all fail `transaction.context_missing`.
fn claimed_plan_needs_a_plan(cx: &Ctxt, handler: &HandlerSignature, capability: &Capability) {
    use aip_connector_core::model::TransactionMode;
    let Some(param) = handler.extractor(signature::Extractor::ClaimedPlan) else {
        return;
    };
    let transaction = capability
        .contract
        .as_ref()
        .and_then(|contract| contract.transaction.as_ref());
    let commits_only_plans = transaction.is_some_and(|transaction| {
        let modes = &transaction.supported_modes;
        modes.contains(&TransactionMode::Commit) && !modes.contains(&TransactionMode::Execute)
    });
    if !commits_only_plans {
        cx.error_at(
            param.span,
            format!(
                "`{}` takes `ClaimedPlan`, the plan a commit claims, so it must run only as the commit of a plan: declare `transaction(modes = [plan, commit], requires_plan)` without `execute` (whose calls have no plan), or remove the parameter",
                handler.ident
            ),
        );
    }
}

fn item(
    attr: CapabilityAttr,
    sig: HandlerSignature,
    resolved: resolve::ResolvedCapability,
    attr_span: Span,
    cfgs: Vec<Attribute>,
) -> CapabilityItem {
    CapabilityItem {
        cfgs,
        description_parts: None,
        capability: resolved.capability,
        facts: resolved.facts,
        sig,
        examples: attr
            .examples
            .iter()
            .map(|(value, _)| value.to_string())
            .collect(),
        tags: attr.tags.clone(),
        waivers: attr
            .waivers
            .iter()
            .map(|w| (w.code.clone(), w.reason.clone()))
            .collect(),
        compensation_target_span: attr
            .spans
            .get(crate::attr::COMPENSATION_TARGET_POINTER)
            .copied(),
        id_span: attr.id.as_ref().map(|(_, span)| *span),
        binding_spans: attr
            .spans
            .iter()
            .filter_map(|(path, span)| {
                path.strip_prefix(crate::attr::BINDING_OF_PROFILE)
                    .map(|profile| (profile.to_owned(), *span))
            })
            .collect(),
        reconcile: attr.reconcile,
        validate: attr.validate,
        cancel: attr.cancel,
        attr_span,
    }
}

/// The handler's doc comment as the macro reads it.
pub(crate) enum DocComment {
    /// Every `#[doc]` is a string literal (`///` lines): the description, known now.
    Text(Option<String>),
    /// Some `#[doc]` is an expression (`#[doc = include_str!("look.md")]`): every part, in
    /// order, to be joined at run time by the same rule.
    Parts(Vec<Expr>),
}

/// The doc comment of a handler (see [`Capability::description_from_doc`] for the rule). A
/// written text of several lines (a `/** ... */` comment) loses its decoration first
/// ([`Capability::undecorated_block_doc`]); an expression's text (`include_str!`) is left as it
/// is.
pub(crate) fn doc_comment(attrs: &[Attribute]) -> DocComment {
    let values: Vec<Expr> = attrs
        .iter()
        .filter(|a| a.path().is_ident(crate::keys::attributes::DOC))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => Some(undecorated(&nv.value)),
            _ => None,
        })
        .collect();
    let literals: Option<Vec<String>> = values
        .iter()
        .map(|value| crate::meta::as_str(value).map(|s| s.value()))
        .collect();
    match literals {
        Some(lines) => DocComment::Text(Capability::description_from_doc(
            lines.iter().map(String::as_str),
        )),
        None => DocComment::Parts(values),
    }
}

/// `value`, a doc attribute's value, with a written text of several lines undecorated.
fn undecorated(value: &Expr) -> Expr {
    match crate::meta::as_str(value) {
        Some(text) if text.value().contains('\n') => {
            let undecorated = Capability::undecorated_block_doc(&text.value());
            let literal = syn::LitStr::new(&undecorated, text.span());
            syn::parse_quote!(#literal)
        }
        _ => value.clone(),
    }
}

/// Adds `#[allow(clippy::unused_async)]` to a handler (or companion) the macro re-emits: the
/// macro requires `async`, so pedantic clippy's advice to drop it on a handler that awaits
/// nothing would only trade the lint for a compile error.
pub(crate) fn allow_unused_async(attrs: &mut Vec<Attribute>) {
    attrs.push(syn::parse_quote!(#[allow(clippy::unused_async)]));
}

/// `#[capability]` outside `#[connector]`: a free `async fn`.
/// `items` without `crate = "..."`, which a free capability's expansion takes as the SDK's path
/// ([`expand::set_sdk_path`](crate::expand::set_sdk_path)); in a `#[connector]` block it is the
/// connector's to say, for every capability at once.
fn take_sdk_path(cx: &Ctxt, items: Vec<MetaItem>, in_connector: bool) -> Vec<MetaItem> {
    let (paths, items): (Vec<MetaItem>, Vec<MetaItem>) = items
        .into_iter()
        .partition(|item| item.name() == crate::keys::CRATE);
    for (index, item) in paths.iter().enumerate() {
        if in_connector {
            cx.error_at(item.key.span(), "`crate = \"...\"` goes on `#[connector(...)]`, where it applies to every capability of the impl block");
        } else if index > 0 {
            cx.error_at(
                item.key.span(),
                format!("duplicate key `{}` in #[capability]", crate::keys::CRATE),
            );
        } else if let Some(path) = crate::meta::sdk_path(cx, item) {
            crate::expand::set_sdk_path(Some(path));
        }
    }
    items
}

/// Refuses, and removes, every `#[capability]` left in `attrs` once the handler's own was taken:
/// a copy-paste slip that otherwise expanded the handler a second time as a free capability,
/// which told a method in a `#[connector]` block to add `#[connector]` and gave a free function
/// seven errors of rustc's (found by a hostile probe).
pub(crate) fn refuse_repeated_capability(cx: &Ctxt, attrs: &mut Vec<syn::Attribute>) {
    attrs.retain(|attribute| {
        let repeated = crate::connector::is_capability_attribute(attribute);
        if repeated {
            cx.error_spanned_by(attribute, diagnostics::CAPABILITY_REPEATED.message);
        }
        !repeated
    });
}

pub(crate) fn expand_free(args: TokenStream, item: TokenStream) -> TokenStream {
    crate::expand::set_sdk_path(None);
    let cx = Ctxt::new();
    let mut function = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            cx.error_at(Span::call_site(), diagnostics::NOT_A_FUNCTION.message);
            let errors = cx.check().err().map(|e| e.to_compile_error());
            return quote! { #errors #item };
        }
    };
    refuse_repeated_capability(&cx, &mut function.attrs);
    let analyzed = analyze(
        &cx,
        args,
        Span::call_site(),
        &function.attrs,
        &function.sig,
        None,
    );
    // A receiver means a method of an impl block without `#[connector]`: no item may be
    // emitted beside it there.
    let in_impl = function.sig.receiver().is_some();
    if analyzed.as_ref().is_some_and(|c| c.sig.refused_input) {
        function
            .attrs
            .push(syn::parse_quote!(#[allow(unused_variables)]));
    }
    crate::signature::strip_refused_parameters(&mut function.sig);
    allow_unused_async(&mut function.attrs);
    match (cx.check(), analyzed) {
        (Ok(()), Some(capability)) => crate::expand::free_capability(&function, &capability),
        (Err(errors), analyzed) => {
            let errors = errors.to_compile_error();
            let fallback = (!in_impl)
                .then(|| crate::expand::fallback_free_capability(&function, analyzed.as_ref()));
            quote! { #errors #function #fallback }
        }
        (Ok(()), None) => quote! { #function },
    }
}
