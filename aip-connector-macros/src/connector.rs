//! `#[connector(...)]` on an impl block: every `#[capability]` method becomes a capability of
//! one connector, with cross-capability checks the free form cannot make.

use std::collections::{BTreeMap, HashSet};

use aip_connector_core::model::Manifest;
use aip_connector_core::naming::stable_profile_name;
use aip_connector_core::rules::{self, Waiver, codes};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Expr, ImplItem, ItemImpl};

use crate::capability::{self, CapabilityItem};
use crate::ctxt::Ctxt;
use crate::diagnostics;
use crate::keys;
use crate::meta::{self, MetaArgs, MetaItem, MetaKind};
use crate::signature::Extractor;

/// What `#[connector(...)]` says.
pub(crate) struct ConnectorAttr {
    pub(crate) id: String,
    pub(crate) display_name: Option<String>,
    pub(crate) profiles: Vec<String>,
    pub(crate) agent: Option<String>,
    pub(crate) compatibility: Option<String>,
    /// The webhook receivers published as channels, each with the span of its literal.
    pub(crate) webhooks: Vec<(String, Span)>,
    /// The other channels, each parsed from its literal, with the literal's span; published
    /// after the webhook receivers' channels.
    pub(crate) channels: Vec<(serde_json::Value, Span)>,
    /// Where each key was written, for rules about what it declares.
    pub(crate) spans: BTreeMap<&'static str, Span>,
    /// The literal of each profile written in `profiles`, in order.
    pub(crate) profile_spans: Vec<Span>,
    /// `crate = "..."`: the SDK's path in the generated code, if not `::aip_connector`.
    pub(crate) sdk_path: Option<syn::Path>,
}

/// The profile a connector speaks when it names none.
const DEFAULT_PROFILE: &str = aip_connector_core::ids::profiles::NATIVE_HTTP;

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    crate::expand::set_sdk_path(None);
    let cx = Ctxt::new();
    let mut block = match syn::parse2::<ItemImpl>(item.clone()) {
        Ok(block) => block,
        Err(_) => {
            cx.error_at(Span::call_site(), "`#[connector]` goes on an inherent `impl` block whose methods carry `#[capability]`");
            let errors = cx.check().err().map(|e| e.to_compile_error());
            return quote! { #errors #item };
        }
    };
    let errors_before_attr = cx.error_count();
    let attr = parse_args(&cx, args);
    // The connector's own attribute read cleanly: its profiles are all there for the checks
    // across capabilities (a misspelt profile would make every binding of it look undeclared).
    let attr_clean = cx.error_count() == errors_before_attr;
    crate::expand::set_sdk_path(attr.sdk_path.clone());
    if let Some((_, path, _)) = &block.trait_ {
        cx.error_spanned_by(
            path,
            "`#[connector]` goes on an inherent impl block, not a trait impl",
        );
    }
    if !block.generics.params.is_empty() {
        cx.error_spanned_by(&block.generics, "`#[connector]` does not support generic impl blocks yet: the manifest and schemas are computed once per connector type");
    }
    let mut capabilities = Vec::new();
    // Whether each capability's `#[capability]` analyzed without errors: one that had errors is
    // left out of the checks across capabilities, which then skip the rules that could name it.
    let mut clean = Vec::new();
    let mut any_failed = false;
    for impl_item in &mut block.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let errors_at_method = cx.error_count();
        refuse_capability_under_cfg_attr(&cx, &mut method.attrs);
        // A `#[capability]` refused here is missing from the block's capabilities.
        any_failed |= cx.error_count() > errors_at_method;
        let Some(index) = method.attrs.iter().position(is_capability_attribute) else {
            continue;
        };
        let attribute = method.attrs.remove(index);
        crate::capability::refuse_repeated_capability(&cx, &mut method.attrs);
        let args = match &attribute.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            syn::Meta::Path(_) => TokenStream::new(),
            syn::Meta::NameValue(nv) => {
                cx.error_spanned_by(nv, "write `#[capability(...)]`");
                any_failed = true;
                continue;
            }
        };
        let errors_before = cx.error_count();
        let analyzed = capability::analyze(
            &cx,
            args,
            attribute.span(),
            &method.attrs,
            &method.sig,
            Some(&attr.id),
        );
        if let Some(capability) = analyzed {
            if capability.sig.refused_input {
                method
                    .attrs
                    .push(syn::parse_quote!(#[allow(unused_variables)]));
            }
            clean.push(cx.error_count() == errors_before);
            capabilities.push(capability);
        }
        any_failed |= cx.error_count() > errors_before;
        crate::signature::strip_refused_parameters(&mut method.sig);
        capability::allow_unused_async(&mut method.attrs);
    }
    allow_unused_async_in_companions(&mut block, &capabilities);
    misspelt_companions(&cx, &block, &capabilities);
    unqualified_companions(&cx, &block, &capabilities);
    id_constant_collisions(&cx, &capabilities);
    companion_signatures(&cx, &block, &capabilities);
    if capabilities.is_empty() && !cx.has_errors() {
        cx.error_at(
            Span::call_site(),
            "a connector needs at least one `#[capability]` method",
        );
    }
    // Checked across the capabilities that analyzed cleanly even when another had errors, so
    // that one compile reports every problem (found by an author trial: a duplicate id showed
    // only once the per-capability errors were fixed). Not when the connector's own attribute
    // had errors, whose checks would then report what is missing from it.
    if attr_clean {
        let checked: Vec<&CapabilityItem> = capabilities
            .iter()
            .zip(&clean)
            .filter_map(|(capability, clean)| clean.then_some(capability))
            .collect();
        check_connector(&cx, &attr, &checked, !any_failed);
    }
    match cx.check() {
        Ok(()) => crate::expand::connector(&block, &attr, &capabilities),
        Err(errors) => {
            let errors = errors.to_compile_error();
            let fallback = crate::expand::fallback_connector(&block, &capabilities);
            quote! { #errors #block #fallback }
        }
    }
}

/// The companions this block defines (`reconcile = Self::find`, …) get the handlers'
/// `unused_async` allowance: they must be `async` too. A companion of a capability under
/// `#[cfg]` is also allowed to be dead: configured out with its capability, nothing calls it.
fn allow_unused_async_in_companions(block: &mut ItemImpl, capabilities: &[CapabilityItem]) {
    let companions: Vec<(String, bool)> = capabilities
        .iter()
        .flat_map(|c| {
            c.self_companions()
                .map(move |(_, name)| (name.to_string(), !c.cfgs.is_empty()))
        })
        .collect();
    for item in &mut block.items {
        let ImplItem::Fn(method) = item else {
            continue;
        };
        let name = method.sig.ident.to_string();
        let uses: Vec<bool> = companions
            .iter()
            .filter(|(companion, _)| *companion == name)
            .map(|(_, configured)| *configured)
            .collect();
        if uses.is_empty() {
            continue;
        }
        capability::allow_unused_async(&mut method.attrs);
        if uses.iter().all(|configured| *configured) {
            method.attrs.push(syn::parse_quote!(#[allow(dead_code)]));
        }
    }
}

/// What a companion takes besides `&self`, by its key, for [`companion_signatures`].
fn companion_argument(key: &str) -> &'static str {
    match key {
        "reconcile" => "a `Reconciliation`",
        "cancel" => "a `CancelRequest`",
        _ => "the capability's input",
    }
}

/// What a companion's parameters may be, as its signature error says.
fn companion_parameters(key: &str) -> String {
    if key == keys::capability::VALIDATE {
        format!(
            "takes `&self` and the capability's input, then any of the preview extractors {}",
            Extractor::PREVIEW
        )
    } else {
        format!(
            "takes `&self` and {}, nothing else",
            companion_argument(key)
        )
    }
}

/// A companion of this block (`reconcile = Self::find`, ...) is an `async fn` taking `&self` and
/// one argument (a `validate` companion, then preview extractors): checked on the method itself,
/// since rustc's errors about the generated call (a future expected, an argument count) point at
/// `#[connector]` instead. The argument's type is left to rustc, whose mismatch names both types.
fn companion_signatures(cx: &Ctxt, block: &ItemImpl, capabilities: &[CapabilityItem]) {
    let mut checked = HashSet::new();
    for capability in capabilities {
        for (key, name) in capability.self_companions() {
            let Some(method) = block.items.iter().find_map(|item| match item {
                ImplItem::Fn(method) if method.sig.ident == *name => Some(method),
                _ => None,
            }) else {
                continue;
            };
            let sig = &method.sig;
            if key == keys::capability::VALIDATE {
                // Per capability: one companion may serve a capability with a credential policy
                // and one without.
                preview_credential(cx, capability, name, sig);
            }
            if !checked.insert((key, name.to_string())) {
                continue;
            }
            let returns_future = matches!(&sig.output, syn::ReturnType::Type(_, ty)
                if matches!(&**ty, syn::Type::ImplTrait(_)));
            if sig.asyncness.is_none() && !returns_future {
                cx.error_spanned_by(
                    sig.fn_token,
                    format!("`{name}` is the `{key}` companion of a capability and must be an `async fn` (`async fn {name}(&self, ...)`)"),
                );
            }
            let takes_ref_self = matches!(
                sig.inputs.first(),
                Some(syn::FnArg::Receiver(receiver))
                    if crate::signature::takes_shared_self(receiver)
            );
            let arity_fits = if key == keys::capability::VALIDATE {
                sig.inputs.len() >= 2
            } else {
                sig.inputs.len() == 2
            };
            if !takes_ref_self || !arity_fits {
                cx.error_spanned_by(
                    &sig.inputs,
                    format!(
                        "the `{key}` companion `{name}` {} (docs/attribute-reference.md, companion handlers)",
                        companion_parameters(key)
                    ),
                );
                continue;
            }
            if let Some(syn::FnArg::Typed(argument)) = sig.inputs.iter().nth(1)
                && let syn::Type::Reference(reference) = &*argument.ty
            {
                // rustc's own error suggests borrowing the host's value once more (`&&T`).
                let owned = &reference.elem;
                cx.error_spanned_by(
                    &argument.ty,
                    format!(
                        "the `{key}` companion `{name}` takes {} by value: the host hands it over (`{}: {}`)",
                        companion_argument(key),
                        quote::ToTokens::to_token_stream(&argument.pat),
                        quote::ToTokens::to_token_stream(owned)
                    ),
                );
            }
            let mut taken = Vec::new();
            for argument in preview_extractor_params(sig) {
                preview_extractor(cx, name, argument, &mut taken);
            }
        }
    }
}

/// The parameters of a `validate` companion after its input: the extractors a preview hands it.
pub(crate) fn preview_extractor_params(
    sig: &syn::Signature,
) -> impl Iterator<Item = &syn::PatType> {
    sig.inputs.iter().skip(2).filter_map(|input| match input {
        syn::FnArg::Typed(typed) => Some(typed),
        syn::FnArg::Receiver(_) => None,
    })
}

/// One parameter of a `validate` companion after its input: an extractor a preview has, taken
/// once, by value, and always passed (`taken`: the extractors of the parameters before it).
fn preview_extractor(
    cx: &Ctxt,
    name: &syn::Ident,
    argument: &syn::PatType,
    taken: &mut Vec<Extractor>,
) {
    let ty = &*argument.ty;
    // The generated call passes every parameter: one configured out would leave the call with
    // an argument too many, reported by rustc on `#[connector]`.
    if let Some(attr) = argument.attrs.first() {
        cx.error_spanned_by(
            attr,
            format!("a parameter of the `validate` companion `{name}` cannot carry attributes: the host passes each one"),
        );
        return;
    }
    let Some(kind) = Extractor::from_type(ty) else {
        let wrapped = crate::signature::wrapped_extractor(ty).map(|(kind, written)| {
            format!(
                "`{written}` is not an extractor; the `validate` companion `{name}` takes `{}` by value: the preview hands over an owned handle",
                kind.name()
            )
        });
        let message = wrapped.unwrap_or_else(|| {
            let written = quote::ToTokens::to_token_stream(ty).to_string().replace(' ', "");
            format!(
                "the `validate` companion `{name}` takes one input; after it come only the preview extractors {} (by value), and `{written}` is none of them",
                Extractor::PREVIEW
            )
        });
        cx.error_spanned_by(ty, message);
        return;
    };
    if let Err(why) = kind.in_preview() {
        cx.error_spanned_by(
            ty,
            format!(
                "a `validate` companion cannot take `{}`: {why}",
                kind.name()
            ),
        );
    } else if taken.contains(&kind) {
        cx.error_spanned_by(
            ty,
            format!(
                "the `validate` companion `{name}` takes `{}` twice",
                kind.name()
            ),
        );
    }
    taken.push(kind);
}

/// A `validate` companion that takes `Credential` serves only capabilities that require
/// credentials: the host resolves a credential for no other (stage 4), so the extractor would
/// fail every preview.
fn preview_credential(
    cx: &Ctxt,
    capability: &CapabilityItem,
    name: &syn::Ident,
    sig: &syn::Signature,
) {
    // `required`, as for a handler (`implementation.credentials_undeclared`): under an optional
    // policy a deployment that resolves none would fail every preview.
    let requires_credentials = capability
        .capability
        .contract
        .as_ref()
        .and_then(|contract| contract.credentials.as_ref())
        .is_some_and(|credentials| credentials.required);
    if requires_credentials {
        return;
    }
    for argument in preview_extractor_params(sig) {
        if Extractor::from_type(&argument.ty) == Some(Extractor::Credential) {
            cx.error_spanned_by(
                &argument.ty,
                format!(
                    "the `validate` companion `{name}` takes `Credential`, but `{}` does not require credentials: the host resolves a credential only under a credential policy, and a deployment may resolve none under an optional one, failing every preview. Declare `credentials(required, scopes = [\"<scope>\"])` on its `#[capability(...)]`, or remove the parameter",
                    capability.capability.id.as_str()
                ),
            );
        }
    }
}

/// A companion (`reconcile = Self::find`) naming no method of this impl block but close to one
/// is a typo: reported on the name with the method meant. rustc's own error for it ("no function
/// or associated item named ...") suggests unrelated trait methods in scope. A name close to
/// none is left to rustc, since the method may live in another impl block of the type.
fn misspelt_companions(cx: &Ctxt, block: &ItemImpl, capabilities: &[CapabilityItem]) {
    let methods: Vec<String> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(method) => Some(method.sig.ident.to_string()),
            _ => None,
        })
        .collect();
    let candidates: Vec<&str> = methods.iter().map(String::as_str).collect();
    for capability in capabilities {
        for (key, ident) in capability.self_companions() {
            let name = ident.to_string();
            if candidates.contains(&name.as_str()) {
                continue;
            }
            if let Some(meant) = crate::meta::did_you_mean(&name, &candidates) {
                cx.error_spanned_by(
                    ident,
                    format!("no method `{name}` in this `#[connector]` impl block for `{key} = Self::{name}` (did you mean `{meant}`?)"),
                );
            }
        }
    }
}

/// A companion written as a bare name (`reconcile = find`) that is a method of this impl block
/// with a receiver: a method is not in scope by its bare name, and rustc's error for it suggests
/// rewriting `#[connector]` itself (found by an author trial). A free function of the same name
/// is named by its path (`self::find`), which this leaves alone.
fn unqualified_companions(cx: &Ctxt, block: &ItemImpl, capabilities: &[CapabilityItem]) {
    for capability in capabilities {
        for (key, companion) in capability.companions() {
            let Some(Expr::Path(path)) = companion else {
                continue;
            };
            let Some(name) = path.path.get_ident() else {
                continue;
            };
            let is_method = block.items.iter().any(|item| {
                matches!(item, ImplItem::Fn(method)
                    if method.sig.ident == *name && method.sig.receiver().is_some())
            });
            if is_method && path.qself.is_none() {
                cx.error_spanned_by(
                    path,
                    format!("`{name}` is a method of this impl block: write `{key} = Self::{name}` (a method is not in scope by its bare name), or `{key} = self::{name}` for a free function of that name"),
                );
            }
        }
    }
}

/// Two handlers whose names differ only in case (`fetch`, `Fetch`) would both get the id
/// constant `FETCH_ID`, which rustc reports as a duplicate definition of a name the author never
/// wrote (a review). Under the same `#[cfg]`s, reported here on the second handler's name; under
/// different ones they may be alternatives, left to rustc.
fn id_constant_collisions(cx: &Ctxt, capabilities: &[CapabilityItem]) {
    let mut seen: Vec<(String, Vec<String>, &CapabilityItem)> = Vec::new();
    for capability in capabilities {
        let constant = crate::expand::id_const_ident(capability).to_string();
        // The set of cfgs, whatever their order: `#[cfg(a)] #[cfg(b)]` and `#[cfg(b)] #[cfg(a)]`
        // compile the two handlers together.
        let mut cfgs: Vec<String> = capability
            .cfgs
            .iter()
            .map(|cfg| quote!(#cfg).to_string())
            .collect();
        cfgs.sort();
        cfgs.dedup();
        let clash = seen.iter().find(|(other_constant, other_cfgs, other)| {
            *other_constant == constant
                && *other_cfgs == cfgs
                && other.sig.ident != capability.sig.ident
        });
        if let Some((_, _, first)) = clash {
            cx.error_spanned_by(
                &capability.sig.ident,
                format!(
                    "`{}` and `{}` would both get the id constant `{constant}` (`#[connector]` names each capability's `<METHOD>_ID`); rename one of the handlers",
                    first.sig.ident, capability.sig.ident
                ),
            );
        }
        seen.push((constant, cfgs, capability));
    }
}

fn parse_args(cx: &Ctxt, args: TokenStream) -> ConnectorAttr {
    use keys::connector as k;
    let mut attr = ConnectorAttr {
        id: String::new(),
        display_name: None,
        profiles: Vec::new(),
        agent: None,
        compatibility: None,
        webhooks: Vec::new(),
        channels: Vec::new(),
        spans: BTreeMap::new(),
        profile_spans: Vec::new(),
        sdk_path: None,
    };
    let items = match syn::parse2::<MetaArgs>(args.clone()) {
        Ok(MetaArgs(items)) => {
            meta::refuse_literal_suffixes(cx, &args);
            items
        }
        Err(error) => {
            cx.syn_error(error);
            return attr;
        }
    };
    let mut seen = HashSet::new();
    // Whether `profiles` was written in a form already reported.
    let mut profiles_malformed = false;
    let mut id_given = false;
    for item in &items {
        let name = item.name();
        if !k::ALL.contains(&name.as_str()) {
            cx.error_at(
                item.key.span(),
                format!(
                    "unknown key `{name}` in #[connector]{}; expected one of {}",
                    meta::suggestion(&name, k::ALL),
                    meta::one_of(k::ALL)
                ),
            );
            // A misspelt `id` (`ID = "demo"`) already has its error, with the key meant: it is
            // not also missing (as `#[capability]` treats its required keys).
            id_given |= meta::did_you_mean(&name, k::ALL) == Some(k::ID);
            continue;
        }
        if !seen.insert(name.clone()) {
            cx.error_at(
                item.key.span(),
                format!("duplicate key `{name}` in #[connector]"),
            );
            continue;
        }
        if let Some(key) = k::ALL.iter().find(|key| **key == name) {
            attr.spans.insert(key, item.span());
        }
        match name.as_str() {
            k::ID => {
                id_given = true;
                if let Some(id) = string(cx, item) {
                    if id.trim().is_empty() {
                        cx.error_at(item.span(), "the connector `id` must not be empty");
                    }
                    attr.id = id;
                }
            }
            k::NAME => attr.display_name = string(cx, item),
            k::AGENT => attr.agent = string(cx, item),
            k::COMPATIBILITY => {
                if let Some(text) = string(cx, item) {
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(value) if value.is_object() => attr.compatibility = Some(text),
                        Ok(_) => cx.error_at(item.span(), "`compatibility` must be a JSON object"),
                        Err(error) => cx.error_at(
                            item.span(),
                            format!("`compatibility` is not valid JSON: {error}"),
                        ),
                    }
                }
            }
            k::PROFILES => {
                let Some(expr) = value(cx, item) else {
                    continue;
                };
                match meta::as_array(expr) {
                    Some(elements) => {
                        for element in elements {
                            // A profile's short name, as `bindings(...)` writes it, or its id.
                            let alias = meta::as_ident(element).and_then(|ident| {
                                crate::keys::bindings::ALIASES
                                    .iter()
                                    .find(|(name, _)| ident == name)
                                    .map(|(_, profile)| ((*profile).to_owned(), ident.span()))
                            });
                            // A short name in quotes (`"mcp"`) is the well-known profile too,
                            // as `ConnectorBuilder::profile("mcp")` takes it.
                            let written = alias.or_else(|| {
                                meta::as_str(element)
                                    .filter(|lit| !lit.value().trim().is_empty())
                                    .map(|lit| {
                                        let value = lit.value();
                                        let id = aip_connector_core::ids::profiles::resolve(&value);
                                        (id.to_owned(), lit.span())
                                    })
                            });
                            match written {
                                Some((profile, span)) => {
                                    if let Some((known, short)) = misspelt_profile(&profile) {
                                        cx.error_at(span, format!("`{profile}` {}: write `{short}` (the id `{known}`); a profile of your own is named in your own namespace (rule `{}`)", diagnostics::PROFILE_TYPO.message, diagnostics::PROFILE_TYPO.code));
                                    }
                                    attr.profiles.push(profile);
                                    attr.profile_spans.push(span);
                                }
                                None => {
                                    profiles_malformed = true;
                                    let short_names: Vec<&str> = crate::keys::bindings::ALIASES
                                        .iter()
                                        .map(|(name, _)| *name)
                                        .collect();
                                    let typo = meta::as_ident(element)
                                        .map(|ident| {
                                            meta::suggestion(&ident.to_string(), &short_names)
                                        })
                                        .unwrap_or_default();
                                    cx.error_spanned_by(element, format!("a profile is a short name (`native_http`, `native_nats`, `mcp`, `a2a`, `webhook`, `sse`) or a non-empty string literal, e.g. \"aip.native.http.v1\"{typo}"));
                                }
                            }
                        }
                    }
                    None => {
                        profiles_malformed = true;
                        cx.error_spanned_by(expr, "`profiles` takes an array of profile short names or ids: `profiles = [native_http, mcp]` or `profiles = [\"aip.native.http.v1\"]`");
                    }
                }
                // Reported on the repeat, as a repeat in any list of the attributes is.
                for (j, profile) in attr.profiles.iter().enumerate() {
                    if attr.profiles[..j].contains(profile) {
                        cx.error_at(
                            attr.profile_spans[j],
                            format!("profile `{profile}` is listed twice"),
                        );
                    }
                }
            }
            k::WEBHOOKS => {
                let Some(expr) = value(cx, item) else {
                    continue;
                };
                let Some(elements) = meta::as_array(expr) else {
                    cx.error_spanned_by(
                        expr,
                        "`webhooks` takes an array of receiver ids: `webhooks = [\"bookings\"]`",
                    );
                    continue;
                };
                for element in elements {
                    match meta::as_str(element) {
                        Some(lit) if !lit.value().trim().is_empty() => {
                            let id = lit.value();
                            if attr.webhooks.iter().any(|(seen, _)| *seen == id) {
                                cx.error_spanned_by(element, format!("webhook receiver `{id}` is listed twice"));
                            } else {
                                attr.webhooks.push((id, lit.span()));
                            }
                        }
                        _ => cx.error_spanned_by(element, "a webhook receiver is named by its non-empty id, the one given to `WebhookReceiver::builder`: `webhooks = [\"bookings\"]`"),
                    }
                }
            }
            k::CHANNELS => {
                let Some(expr) = value(cx, item) else {
                    continue;
                };
                let Some(elements) = meta::as_array(expr) else {
                    cx.error_spanned_by(expr, CHANNELS_SHAPE);
                    continue;
                };
                for element in elements {
                    let Some(lit) = meta::as_str(element) else {
                        cx.error_spanned_by(element, CHANNELS_SHAPE);
                        continue;
                    };
                    match serde_json::from_str::<serde_json::Value>(&lit.value()) {
                        Ok(channel) => attr.channels.push((channel, lit.span())),
                        Err(error) => cx.error_spanned_by(
                            element,
                            format!("this channel is not valid JSON: {error}"),
                        ),
                    }
                }
            }
            k::CRATE => attr.sdk_path = meta::sdk_path(cx, item),
            _ => unreachable!("checked against keys::connector::ALL"),
        }
    }
    channel_identities(cx, &attr);
    if !id_given {
        cx.error_at(
            Span::call_site(),
            "missing `id`: `#[connector(id = \"calendar\")]` names the connector",
        );
    }
    if attr.profiles.is_empty() && !seen.contains(k::PROFILES) {
        attr.profiles.push(DEFAULT_PROFILE.to_owned());
    } else if attr.profiles.is_empty() && !profiles_malformed {
        // (A malformed list was reported where it was written; it is not also empty.)
        cx.error_at(
            Span::call_site(),
            "`profiles` must name at least one profile",
        );
    }
    // Declared receivers are reached through the webhook profile: advertised with them.
    let webhook = aip_connector_core::ids::profiles::HTTP_WEBHOOK;
    if !attr.webhooks.is_empty() && !attr.profiles.iter().any(|p| p == webhook) {
        attr.profiles.push(webhook.to_owned());
    }
    attr
}

/// How `channels` is written, for every malformed form of it.
const CHANNELS_SHAPE: &str = "`channels` takes an array of string literals, each a channel as a JSON object: `channels = [r#\"{\"id\": \"support-inbox\", \"kind\": \"email\"}\"#]`";

/// The manifest's channels as `ConnectorDefinition::manifest` publishes them: one per webhook
/// receiver, then the declared ones; each with the span of the literal that declared it.
fn manifest_channels(attr: &ConnectorAttr) -> Vec<(serde_json::Value, Span)> {
    let receivers = attr
        .webhooks
        .iter()
        .map(|(id, span)| (aip_connector_core::discovery::webhook_channel(id), *span));
    let declared = attr.channels.iter().cloned();
    receivers.chain(declared).collect()
}

/// Admission checks 9 and 10 (`manifest.channel.identifier_missing`, `.duplicate`), run on the
/// channels where they are written. A receiver's channel always has an id, and receivers are
/// checked against each other when read, so a duplicate is reported on the declared channel.
fn channel_identities(cx: &Ctxt, attr: &ConnectorAttr) {
    use aip_connector_core::discovery;
    let channels = manifest_channels(attr);
    let values: Vec<serde_json::Value> = channels.iter().map(|(c, _)| c.clone()).collect();
    for issue in discovery::channel_issues(&values) {
        let index: usize = issue
            .path
            .rsplit('/')
            .next()
            .and_then(|index| index.parse().ok())
            .expect("channel issues are at /channels/<index>");
        let (channel, span) = &channels[index];
        let message = if issue.code == discovery::MANIFEST_CHANNEL_DUPLICATE {
            let identity = discovery::channel_identity(channel).unwrap_or_default();
            format!(
                "channel `{identity}` is declared twice: a channel's `id` (or `name`) must be unique among the connector's channels, and each webhook receiver is published as a channel with its id"
            )
        } else {
            "a channel must be a JSON object with a non-empty string `id` (or `name`, when it has no `id`), e.g. `{\"id\": \"support-inbox\"}`".to_owned()
        };
        cx.error_at(*span, format!("{message} (rule `{}`)", issue.code));
    }
}

fn value<'i>(cx: &Ctxt, item: &'i MetaItem) -> Option<&'i syn::Expr> {
    match &item.kind {
        MetaKind::Value(expr) => Some(expr),
        _ => {
            cx.error_at(
                item.span(),
                format!("`{}` takes a value: `{} = ...`", item.name(), item.name()),
            );
            None
        }
    }
}

fn string(cx: &Ctxt, item: &MetaItem) -> Option<String> {
    let expr = value(cx, item)?;
    let lit = meta::as_str(expr);
    if lit.is_none() {
        cx.error_spanned_by(expr, meta::string_literal_required(&item.name(), expr));
    }
    lit.map(|l| l.value())
}

/// Whether two declarations of one capability id may be alternatives: both under `#[cfg]`, and
/// not the same ones. The macro cannot evaluate a cfg, so it leaves such pairs to the marker
/// types of `expand::cfg_alternative_markers`, which collide only when both are compiled in.
pub(crate) fn cfg_alternatives(a: &CapabilityItem, b: &CapabilityItem) -> bool {
    let (a, b) = (&a.cfgs, &b.cfgs);
    !a.is_empty()
        && !b.is_empty()
        && quote::quote!(#(#a)*).to_string() != quote::quote!(#(#b)*).to_string()
}

/// The well-known profile (its id and short name) that `written`, a profile id from a string
/// literal the SDK does not know, misspells: an id in the `aip.` namespace within two edits of a
/// well-known id, or a name without dots of four characters or more one edit from a short name
/// (`"native_htp"`). Ids of other namespaces (`"aws.sse.stream.v1"`), short dotless names
/// (`"rss"`, `"acp"`) and the same id at another version (`aip.mcp.compat.v2`, may be a later
/// profile) are not typos: profile ids are free-form, and this rule cannot be waived.
fn misspelt_profile(written: &str) -> Option<(&'static str, &'static str)> {
    fn versionless(id: &str) -> &str {
        match id.rsplit_once(".v") {
            Some((stem, version))
                if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) =>
            {
                stem
            }
            _ => id,
        }
    }
    let dotted = written.contains('.');
    if dotted && !written.starts_with("aip.") {
        return None;
    }
    // Dotted: the `aip.` ids, two edits; dotless: short names, one edit.
    let max_edits = if dotted {
        2
    } else if written.chars().count() >= 4 {
        1
    } else {
        return None;
    };
    aip_connector_core::ids::profiles::SHORT_NAMES
        .iter()
        .filter(|(short, id)| written != *id && written != *short)
        .map(|&(short, id)| {
            let against = if dotted { id } else { short };
            (meta::edit_distance(written, against), (id, short))
        })
        .filter(|&(edits, (id, _))| edits <= max_edits && versionless(written) != versionless(id))
        .min_by_key(|&(edits, _)| edits)
        .map(|(_, known)| known)
}

/// Cross-capability rules: unique ids, bindings to declared profiles, projected names that do
/// not collide, and compensation capabilities that exist (or are waived as external) and whose
/// handlers take `Compensation`. With `complete` false (a capability of the block had errors and
/// is not in `capabilities`), the compensation rules are skipped: the target may be the
/// capability that failed.
fn check_connector(
    cx: &Ctxt,
    attr: &ConnectorAttr,
    capabilities: &[&CapabilityItem],
    complete: bool,
) {
    let mut ids: BTreeMap<&str, Vec<&CapabilityItem>> = BTreeMap::new();
    for capability in capabilities {
        let id = capability.capability.id.as_str();
        let earlier = ids.entry(id).or_default();
        if let Some(other) = earlier
            .iter()
            .find(|other| !cfg_alternatives(other, capability))
        {
            // Stable proc macros cannot attach a note at a second span, so the message names
            // the other handler: the author sees both places from the one error.
            cx.error_at(capability.id_span.unwrap_or(capability.attr_span), format!("capability id `{id}` is declared twice in this connector: `{}` already declares it; give one of them another `id` (rule `manifest.capability.duplicate`)", other.sig.ident));
        }
        earlier.push(capability);
        for binding in &capability.capability.bindings {
            if !attr.profiles.iter().any(|p| *p == binding.profile.as_str()) {
                cx.error_at(capability.name_span(binding.profile.as_str()), format!("binding profile `{}` is not declared by the connector; add it to `#[connector(profiles = [...])]` (rule `manifest.binding.profile_undeclared`)", binding.profile));
            }
        }
    }
    for profile in &attr.profiles {
        let mut names: BTreeMap<String, &str> = BTreeMap::new();
        for capability in capabilities {
            let raw = capability
                .capability
                .binding(profile)
                .and_then(|b| b.projected_name())
                .unwrap_or(capability.capability.id.as_str());
            let projected = stable_profile_name(raw);
            if let Some(earlier) =
                names.insert(projected.clone(), capability.capability.id.as_str())
                && earlier != capability.capability.id.as_str()
            {
                {
                    cx.error_at(capability.name_span(profile.as_str()), format!("projected name `{projected}` under profile `{profile}` collides with capability `{earlier}`; give one of them a distinct binding name (rule `manifest.profile_name.collision`)"));
                }
            }
        }
    }
    let mut manifest = Manifest::new(
        aip_connector_core::model::Principal::new(
            "agent",
            aip_connector_core::model::PrincipalKind::Service,
        ),
        attr.profiles.iter().map(|p| p.as_str().into()),
    );
    manifest.capabilities = capabilities.iter().map(|c| c.capability.clone()).collect();
    profile_bindings(cx, attr, &mut manifest);
    let waivers: Vec<Waiver> = capabilities
        .iter()
        .flat_map(|c| {
            c.waivers.iter().map(|(code, reason)| Waiver {
                capability_id: c.capability.id.clone(),
                code: code.clone(),
                reason: reason.clone(),
            })
        })
        .collect();
    if !complete {
        return;
    }
    let mut issues = Vec::new();
    rules::compensation_targets(&manifest, &waivers, &mut issues);
    rules::compensation_approval(&manifest, &mut issues);
    // The macro sees every handler of the block, so it knows whether a compensating capability
    // can read what it compensates (admission cannot).
    rules::compensating_handlers(
        &manifest,
        |id| {
            capabilities
                .iter()
                .find(|c| c.capability.id == *id)
                .map(|c| c.sig.has(Extractor::Compensation))
        },
        &mut issues,
    );
    let ids: Vec<&str> = capabilities
        .iter()
        .map(|c| c.capability.id.as_str())
        .collect();
    for issue in issues {
        let Some(capability) = issue
            .capability_id
            .as_ref()
            .and_then(|id| capabilities.iter().find(|c| c.capability.id == *id))
        else {
            cx.error_at(
                Span::call_site(),
                format!("{} (rule `{}`)", issue.message, issue.code),
            );
            continue;
        };
        // Each rule here is about the compensation target: spanned on its name.
        let span = capability
            .compensation_target_span
            .unwrap_or(capability.attr_span);
        if issue.code != codes::MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN {
            cx.error_at(span, crate::valid::render(&issue.code, &issue.message));
            continue;
        }
        // An unknown target is matched against this connector's ids.
        let target = capability
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.compensation.as_ref())
            .and_then(|c| c.compensation_capability_id.as_ref())
            .map(|id| id.as_str())
            .unwrap_or_default();
        cx.error_at(
            span,
            format!(
                "compensation capability `{target}` is not a capability of this connector{}. {} (rule `{}`)",
                // A capability does not compensate itself: its own id is no suggestion.
                crate::meta::suggestion(
                    target,
                    &ids.iter()
                        .copied()
                        .filter(|id| *id != capability.capability.id.as_str())
                        .collect::<Vec<_>>()
                ),
                rules::rule_info(&issue.code).map_or("", |info| info.fix),
                issue.code
            ),
        );
    }
}

/// Rule `discovery.profile_bindings`: every advertised profile says where a peer reaches it. The
/// routes of the profiles the SDK serves are filled in as `ConnectorDefinition::manifest` does;
/// NATS and A2A need their metadata in `compatibility`, the webhook profile needs a channel
/// (`webhooks` or `channels`).
/// Reported on the profile's literal in `profiles`; for the default profile, on `compatibility`
/// (whose `native_http` entry is then not an object).
fn profile_bindings(cx: &Ctxt, attr: &ConnectorAttr, manifest: &mut Manifest) {
    use aip_connector_core::discovery;
    use aip_connector_core::ids::profiles::HTTP_WEBHOOK;
    let mut compatibility = attr
        .compatibility
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    discovery::fill_served_bindings(&manifest.profiles, &mut compatibility);
    manifest.compatibility = Some(compatibility);
    manifest.channels = manifest_channels(attr)
        .into_iter()
        .map(|(channel, _)| channel)
        .collect();
    // Every issue of this check carries its profile.
    for (profile, message) in discovery::profile_binding_problems(manifest)
        .into_iter()
        .filter_map(|issue| Some((issue.profile?, issue.message)))
    {
        let span = attr
            .profiles
            .iter()
            .position(|p| *p == profile.as_str())
            .and_then(|index| attr.profile_spans.get(index))
            .or_else(|| attr.spans.get(keys::connector::COMPATIBILITY))
            .copied()
            .unwrap_or_else(Span::call_site);
        let fix = if profile.as_str() == HTTP_WEBHOOK {
            "; name the connector's receivers (the ids given to `WebhookReceiver::builder`): `webhooks = [\"bookings\"]`, or declare the channels it is reached through: `channels = [r#\"{\"id\": \"...\"}\"#]`".to_owned()
        } else if let Some(served) = discovery::SERVED_BINDING_DEFAULTS
            .iter()
            .find(|served| served.profile == profile.as_str())
        {
            // Served by the SDK: only a `compatibility` entry of the wrong shape gets here.
            format!(
                "; `compatibility.{}` must be an object of non-empty strings, or be left out for the SDK's routes",
                served.key
            )
        } else {
            let bound = discovery::PROFILE_BINDING_FIELDS
                .iter()
                .find(|bound| bound.profile == profile.as_str())
                .expect("only bound profiles have problems");
            let key = bound.key;
            let example: Vec<String> = bound
                .fields
                .iter()
                .map(|field| format!("\"{field}\": \"...\""))
                .collect();
            format!(
                "; the SDK does not serve this profile, so declare where it is served: `compatibility = r#\"{{\"{key}\": {{{}}}}}\"#`",
                example.join(", ")
            )
        };
        cx.error_at(
            span,
            format!(
                "{message}{fix} (rule `{}`)",
                discovery::DISCOVERY_PROFILE_BINDINGS
            ),
        );
    }
}

/// Rule `item.capability_under_cfg_attr`: `#[cfg_attr(pred, capability(...))]` on a method.
/// Reported on the `capability` inside, with the `#[cfg]` to write instead; the attribute is then
/// dropped, so that rustc does not expand it into a free `#[capability]` on a method, whose
/// error (`self` outside `#[connector]`) would be wrong.
fn refuse_capability_under_cfg_attr(cx: &Ctxt, attrs: &mut Vec<syn::Attribute>) {
    attrs.retain(|attribute| {
        if !attribute.path().is_ident(keys::attributes::CFG_ATTR) {
            return true;
        }
        let Some((predicates, capability)) = capability_in_cfg_attr(&attribute.meta) else {
            return true;
        };
        let predicate = match predicates.as_slice() {
            [one] => quote!(#one),
            all => quote!(all(#(#all),*)),
        };
        cx.error_spanned_by(
            capability,
            crate::diagnostics::CAPABILITY_UNDER_CFG_ATTR
                .message
                .replace("#[cfg(...)]", &format!("#[cfg({predicate})]")),
        );
        false
    });
}

/// The predicates of a `cfg_attr` (nested ones too) that applies `capability`, and the path of
/// that `capability`.
fn capability_in_cfg_attr(meta: &syn::Meta) -> Option<(Vec<syn::Meta>, syn::Path)> {
    use syn::punctuated::Punctuated;
    let syn::Meta::List(list) = meta else {
        return None;
    };
    let parts = list
        .parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
        .ok()?;
    let mut parts = parts.into_iter();
    let predicate = parts.next()?;
    parts.find_map(|applied| {
        if applied.path().is_ident(keys::attributes::CFG_ATTR) {
            let (mut predicates, path) = capability_in_cfg_attr(&applied)?;
            predicates.insert(0, predicate.clone());
            Some((predicates, path))
        } else {
            is_capability_path(applied.path())
                .then(|| (vec![predicate.clone()], applied.path().clone()))
        }
    })
}

/// `#[capability(...)]` however it is imported: `capability`, `aip_connector::capability`, or a
/// renamed crate path (`aip::capability`).
pub(crate) fn is_capability_attribute(attribute: &syn::Attribute) -> bool {
    is_capability_path(attribute.path())
}

fn is_capability_path(path: &syn::Path) -> bool {
    path.segments
        .last()
        .is_some_and(|segment| segment.ident == keys::attributes::CAPABILITY)
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::misspelt_profile;

    #[test]
    fn profile_typos_are_told_from_other_profiles() {
        let mcp = Some(("aip.mcp.compat.v1", "mcp"));
        assert_eq!(misspelt_profile("aip.mpc.compat.v1"), mcp);
        assert_eq!(misspelt_profile("aip.mcp.compat.v"), mcp);
        let http = Some(("aip.native.http.v1", "native_http"));
        assert_eq!(misspelt_profile("aip.native.htp.v1"), http);
        assert_eq!(misspelt_profile("native_htp"), http);
        // Known ids, other versions, other namespaces and distant names are not typos.
        for fine in [
            "aip.mcp.compat.v1",
            "aip.mcp.compat.v2",
            "aip.native.http.v10",
            "aip.native.grpc.v1",
            "aip.connector.dify.v1",
            "acme.mcp.compat.v1",
            "aws.sse.stream.v1",
            "gcp.sse.stream.v1",
            "api.mcp.compat.v1",
            "grpc",
            "mpc",
            "acp",
            "ap2",
            "rss",
            "ws",
            "ftp",
            "sip",
            "a2ui",
            "amqp",
        ] {
            assert_eq!(misspelt_profile(fine), None, "{fine}");
        }
    }

    /// Every path the generated code takes into the SDK goes through `crate = "..."` when given,
    /// for a `#[connector]` and a free `#[capability]` alike; without it, through
    /// `::aip_connector`.
    #[test]
    fn the_sdk_path_is_the_attributes_crate_path() {
        let block = quote! {
            impl Demo {
                #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
                async fn look(&self, key: IdempotencyKey) -> Result<(), ConnectorFailure> {
                    Ok(())
                }
            }
        };
        let free = quote! {
            async fn look() -> Result<(), ConnectorFailure> {
                Ok(())
            }
        };
        let free_args = quote!(
            id = "cap:demo:free",
            risk = low,
            side_effects = [read],
            data(sensitivity = public)
        );
        let expanded = [
            super::expand(
                quote!(id = "demo", crate = "my_platform::aip"),
                block.clone(),
            ),
            crate::capability::expand_free(
                quote!(#free_args, crate = "my_platform::aip"),
                free.clone(),
            ),
        ];
        for tokens in expanded {
            let text = tokens.to_string().replace(' ', "");
            assert!(!text.contains("compile_error"), "{text}");
            assert!(text.contains("my_platform::aip::__private"), "{text}");
            assert!(!text.contains("aip_connector::"), "{text}");
        }
        // The next expansion does not inherit the path.
        let default = super::expand(quote!(id = "demo"), block)
            .to_string()
            .replace(' ', "");
        assert!(default.contains("::aip_connector::__private"), "{default}");
        assert!(!default.contains("my_platform"), "{default}");
    }

    /// A short profile name in quotes is the well-known profile, as `ConnectorBuilder::profile`
    /// takes it.
    #[test]
    fn a_quoted_short_profile_name_is_the_well_known_profile() {
        let block = quote! {
            impl Demo {
                #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
                async fn look(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }
            }
        };
        let text = super::expand(
            quote!(id = "demo", profiles = ["native_http", "mcp"]),
            block,
        )
        .to_string();
        assert!(!text.contains("compile_error"), "{text}");
        assert!(text.contains("\"aip.mcp.compat.v1\""), "{text}");
        assert!(!text.contains("\"mcp\""), "{text}");
    }

    /// The generated `impl Connector` carries a rustdoc table of the capabilities (the handlers
    /// are private, so `cargo doc` showed none); a row of a handler under `#[cfg]` is
    /// documented under the same condition.
    #[test]
    fn the_connector_impl_documents_its_capabilities() {
        let block = quote! {
            impl Demo {
                /// Looks at `a` or | b in Vec<T>
                /// [on] one \| line, `x |
                /// y`, ``a`b`` and a lone ` tick.
                ///
                /// Not in the table.
                #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
                async fn look(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }

                #[cfg(feature = "beta")]
                #[capability(
                    risk = high,
                    side_effects = [write, external_network],
                    idempotency(required, scope = tenant),
                    data(sensitivity = internal),
                    approval(required, evidence = [reason]),
                    transaction(modes = [execute]),
                )]
                async fn book(
                    &self,
                    key: IdempotencyKey,
                    approval: Approval,
                    checkpoint: Checkpoint,
                ) -> Result<(), ConnectorFailure> {
                    Ok(())
                }
            }
        };
        let text = super::expand(quote!(id = "demo"), block).to_string();
        assert!(!text.contains("compile_error"), "{text}");
        let doc = |line: &str| format!("doc = {line:?}");
        let heading = doc(
            " The AIP connector `demo`, generated by `#[connector]` (its methods are the \
             `Connector` trait's, generated from the handlers below).",
        );
        assert!(text.contains(&heading), "{text}");
        assert!(
            text.contains(&doc(
                " | Capability | Handler | Risk | Side effects | Approval | Transaction modes | Description |"
            )),
            "{text}"
        );
        let look = doc(
            // Code spans stay code (a `|` in them escaped); the rest is plain text: nothing in it
            // is read as Markdown or HTML.
            r" | `cap:demo:look` | `look` | low | read |  |  | Looks at `a` or \| b in Vec\<T\> \[on\] one \\\| line, `x \| y`, ``a`b`` and a lone \` tick. |",
        );
        let row = text.find(&look).expect("the row of `look`");
        // The table comes before the impl it documents.
        let impl_at = text.find("impl :: aip_connector :: __private :: Connector for Demo");
        assert!(impl_at.is_some_and(|at| at > row), "{text}");
        let book = doc(
            " | `cap:demo:book` | `book` | high | write, external_network | required | execute |  |",
        );
        let cfg_row = format!("cfg_attr (all (feature = \"beta\") , {book})");
        assert!(text.contains(&cfg_row), "{text}");
        // The generated methods (and their `__aip_*` parameters) stay out of the page.
        let methods = &text[impl_at.unwrap()..];
        for method in ["fn definition", "fn invoke"] {
            let at = methods.find(method);
            assert!(
                at.is_some_and(|at| methods[..at].trim_end().ends_with("# [doc (hidden)]")),
                "{method} is not hidden: {methods}"
            );
        }
    }

    /// A capability id is free text (upstream checks only that it is not empty), so one
    /// holding a `|`, a backtick or a line break is shown as written in the table's code span
    /// instead of ending the cell, the span or the row (found by a hostile probe); the
    /// connector's id in the heading, and the id constants' docs, likewise.
    #[test]
    fn ids_with_markdown_characters_keep_the_table_whole() {
        let block = quote! {
            impl Demo {
                #[capability(
                    id = "cap:demo:a|b",
                    risk = low,
                    side_effects = [read],
                    data(sensitivity = public)
                )]
                async fn pipe(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }

                #[capability(
                    id = "cap:demo:``tick`",
                    risk = low,
                    side_effects = [read],
                    data(sensitivity = public)
                )]
                async fn tick(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }

                #[capability(
                    id = "cap:demo:two\nlines",
                    risk = low,
                    side_effects = [read],
                    data(sensitivity = public)
                )]
                async fn lines(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }
            }
        };
        let text = super::expand(quote!(id = "de`mo"), block).to_string();
        assert!(!text.contains("compile_error"), "{text}");
        let doc = |line: &str| format!("doc = {line:?}");
        for row in [
            r" | `cap:demo:a\|b` | `pipe` | low | read |  |  |  |",
            " | ``` cap:demo:``tick` ``` | `tick` | low | read |  |  |  |",
            " | `cap:demo:two lines` | `lines` | low | read |  |  |  |",
            " The AIP connector ``de`mo``, generated by `#[connector]` (its methods are the \
             `Connector` trait's, generated from the handlers below).",
            " The id of the capability `tick` declares: ``` cap:demo:``tick` ```.",
        ] {
            assert!(text.contains(&doc(row)), "{row:?} not in {text}");
        }
    }

    /// Two handlers whose names differ only in case, under the same cfgs written in another
    /// order, are compiled together: the clash of their id constants is reported as one, not
    /// left to rustc's duplicate definition.
    #[test]
    fn case_colliding_handlers_under_reordered_cfgs_are_reported() {
        let block = quote! {
            impl Demo {
                #[cfg(feature = "a")]
                #[cfg(unix)]
                #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
                async fn look(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }

                #[cfg(unix)]
                #[cfg(feature = "a")]
                #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
                async fn Look(&self) -> Result<(), ConnectorFailure> {
                    Ok(())
                }
            }
        };
        let text = super::expand(quote!(id = "demo"), block).to_string();
        assert!(
            text.contains("would both get the id constant `LOOK_ID`"),
            "{text}"
        );
    }
}
