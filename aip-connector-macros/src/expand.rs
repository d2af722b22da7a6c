//! Code generation. Everything generated refers to `::aip_connector::__private` (or the
//! attribute's `crate = "..."` path instead of `::aip_connector`), carries
//! `#[automatically_derived]` where it is an impl, and keeps the user's spans on the user's
//! types so rustc's own errors (a missing `Deserialize`, a wrong extractor) point at user code.

use std::collections::BTreeMap;

use aip_connector_core::model::CapabilityImplementationSupport;
use aip_connector_core::rules::wire_name;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, ItemImpl};

use crate::capability::CapabilityItem;
use crate::connector::ConnectorAttr;
use crate::signature::Role;

thread_local! {
    /// The SDK's path for the expansion under way: `crate = "..."` of the attribute being
    /// expanded, or `None` for `::aip_connector`. Set by each macro entry point before it
    /// expands anything ([`set_sdk_path`]), so no invocation sees another's.
    static SDK_PATH: std::cell::RefCell<Option<syn::Path>> = const { std::cell::RefCell::new(None) };
}

/// Sets the SDK path of the expansion that follows (`None`: `::aip_connector`).
pub(crate) fn set_sdk_path(path: Option<syn::Path>) {
    SDK_PATH.with(|sdk| *sdk.borrow_mut() = path);
}

/// The SDK's root path, every token spanned at `span` (so that an error in generated code that
/// names it points where the user's code is).
pub(crate) fn sdk_root(span: Span) -> TokenStream {
    SDK_PATH.with(|sdk| match &*sdk.borrow() {
        Some(path) => respan(path.to_token_stream(), span),
        None => quote_spanned!(span=> ::aip_connector),
    })
}

/// `tokens` with every token's span set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let proc_macro2::TokenTree::Group(group) = &tree {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = proc_macro2::TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// The path every generated item goes through.
fn private() -> TokenStream {
    let root = sdk_root(Span::call_site());
    quote!(#root::__private)
}

/// [`private`], every token spanned at `span`.
fn private_at(span: Span) -> TokenStream {
    let root = sdk_root(span);
    quote_spanned!(span=> #root::__private)
}

/// `CapabilityImplementationSupport { ... }` as tokens.
fn support_tokens(support: &CapabilityImplementationSupport) -> TokenStream {
    let p = private();
    let fields = support.flags().map(|(name, value)| {
        let name = Ident::new(name, Span::call_site());
        quote!(#name: #value)
    });
    quote!(#p::CapabilityImplementationSupport { #(#fields),* })
}

/// `tokens` with every `Self` replaced by `self_ty` (spanned on the `Self` it replaces): the
/// assertions are items outside the impl block, where `Self` names nothing.
fn replace_self(tokens: TokenStream, self_ty: &syn::Type) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    let mut out = TokenStream::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            TokenTree::Ident(ident) if ident == "Self" => {
                let span = ident.span();
                // `Self::Assoc` becomes `<T>::Assoc`, which is a path whatever `T` is.
                let path_follows =
                    matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                out.extend(if path_follows {
                    quote_spanned!(span=> <#self_ty>)
                } else {
                    quote_spanned!(span=> #self_ty)
                });
            }
            TokenTree::Group(group) => {
                let mut replaced =
                    Group::new(group.delimiter(), replace_self(group.stream(), self_ty));
                replaced.set_span(group.span());
                out.extend([TokenTree::Group(replaced)]);
            }
            other => out.extend([other]),
        }
    }
    out
}

/// Compile-time assertions that every parameter the macro took for an extractor is that
/// extractor (type-level backing of the derived support record). `self_ty` is the impl block's
/// type, which `Self` in a parameter's type stands for.
fn extractor_assertions(capability: &CapabilityItem, self_ty: Option<&syn::Type>) -> TokenStream {
    let cfgs = &capability.cfgs;
    let checks = capability
        .sig
        .params
        .iter()
        .filter_map(|param| match param.role {
            Role::Extractor(kind) => {
                let ty = quote::ToTokens::to_token_stream(&param.ty);
                let ty = match self_ty {
                    Some(self_ty) => replace_self(ty, self_ty),
                    None => ty,
                };
                let variant = Ident::new(kind.name(), Span::call_site());
                // Only the assertion carries the parameter's span: were the `const` item spanned
                // there too, rustc would suggest generics for it inside the user's type when
                // that type does not resolve. Its path is spelled here, not taken from
                // `private()`, so that every token carries the span and a failed kind check
                // points at the parameter.
                let private = private_at(param.span);
                let assertion = quote_spanned! {param.span=>
                    {
                        let _ = #private::extractor::<#ty>(
                            #private::ExtractorKind::#variant,
                        );
                    }
                };
                Some(quote! {
                    #(#cfgs)*
                    const _: () = #assertion;
                })
            }
            Role::Input | Role::State => None,
        });
    quote!(#(#checks)*)
}

/// The spans of the first and last tokens of `ty`, for a generated path that rustc should span
/// over the whole type (on stable, a proc macro cannot join two spans itself).
fn first_and_last_span(ty: &syn::Type) -> (Span, Span) {
    let mut tokens = quote::ToTokens::to_token_stream(ty).into_iter();
    let first = tokens
        .next()
        .map_or_else(Span::call_site, |token| token.span());
    let last = tokens.last().map_or(first, |token| token.span());
    (first, last)
}

/// Names of the generated codec functions of one capability.
fn codec_idents(capability: &CapabilityItem) -> (Ident, Ident) {
    let name = capability.sig.ident.to_string();
    let name = name.trim_start_matches("r#");
    (
        format_ident!("__aip_input_{}", name),
        format_ident!("__aip_output_{}", name),
    )
}

/// The one place that requires the input and result bounds of a capability, so a type that
/// lacks them produces one diagnostic on the user's type.
///
/// `must_use_candidate` and `missing_inline_in_public_items` are allowed: a pub free
/// capability's codecs are public, and clippy would ask the author for `#[must_use]` or
/// `#[inline]` on functions they never wrote.
fn codec_fns(capability: &CapabilityItem, vis: TokenStream) -> TokenStream {
    let p = private();
    let cfgs = &capability.cfgs;
    let (input_fn, output_fn) = codec_idents(capability);
    let input = capability.sig.input().map(|ty| {
        quote_spanned! {syn::spanned::Spanned::span(ty)=>
            #(#cfgs)*
            #[doc(hidden)]
            #[allow(clippy::must_use_candidate, clippy::missing_inline_in_public_items)]
            #vis fn #input_fn() -> #p::InputCodec<#ty> { #p::input_codec::<#ty>() }
        }
    });
    let output = capability.sig.output.as_ref().map(|ty| {
        quote_spanned! {syn::spanned::Spanned::span(ty)=>
            #(#cfgs)*
            #[doc(hidden)]
            #[allow(clippy::must_use_candidate, clippy::missing_inline_in_public_items)]
            #vis fn #output_fn() -> #p::OutputCodec<#ty> { #p::output_codec::<#ty>() }
        }
    });
    quote!(#input #output)
}

/// The name of a method capability's id constant: the method's name in upper case with `_ID`
/// (`book` → `BOOK_ID`), spanned on the method's name, so that a clash with an item of the
/// author's is reported at the method.
pub(crate) fn id_const_ident(capability: &CapabilityItem) -> Ident {
    let name = capability.sig.ident.to_string();
    let name = name.trim_start_matches("r#").to_uppercase();
    format_ident!("{}_ID", name, span = capability.sig.ident.span())
}

/// One `const` holding a capability's id, so that tests and clients name the capability
/// through the compiler instead of typing its id again (the design's "one source of truth": the
/// id is typed once). A capability without an id (already reported) gets none.
///
/// The doc names the method in code, not as a link: handlers are usually private, and a public
/// item linking to a private one fails `RUSTDOCFLAGS=-Dwarnings`. The generated code reads
/// every constant (the dispatch matches them, `FreeCapability::definition` and the fallbacks
/// read them), so none allows `dead_code` and a crate may forbid it; `allow` is what else the
/// constant needs.
fn id_const(
    capability: &CapabilityItem,
    name: &Ident,
    vis: &TokenStream,
    allow: &TokenStream,
) -> TokenStream {
    let id = capability.capability.id.as_str();
    if id.is_empty() {
        return TokenStream::new();
    }
    let cfgs = &capability.cfgs;
    let doc = format!(
        " The id of the capability `{}` declares: {}.",
        capability.sig.ident.to_string().trim_start_matches("r#"),
        code_span(id)
    );
    // Every token at the method's name: a clash is reported there, not on the attribute.
    quote_spanned! {name.span()=>
        #(#cfgs)*
        #[doc = #doc]
        #allow
        #vis const #name: &'static str = #id;
    }
}

/// A free capability's id constant, `ID` on its same-named type (`book::ID`), as visible as the
/// function (and the type): no lint to allow that the author's own `pub fn` would not meet.
fn free_id_const(capability: &CapabilityItem, vis: &syn::Visibility) -> TokenStream {
    id_const(
        capability,
        &Ident::new("ID", capability.sig.ident.span()),
        &quote!(#vis),
        &TokenStream::new(),
    )
}

/// The id constants of a `#[connector]`'s capabilities (`<METHOD>_ID`), for its generated
/// inherent impl, and statements reading each (`let _ = <T>::X;`) for the fallback, whose
/// dispatch does not. Always `pub`: a connector's tests in `tests/` need them, and its
/// handlers are usually private; hence `unreachable_pub` allowed (a crate cannot forbid it).
/// One constant per name and `#[cfg]`s: handlers whose names differ only in case are an error
/// of their own (`id_constant_collisions`), and a second constant would add rustc's
/// duplicate definition to it.
fn connector_id_consts<'a>(
    self_ty: &syn::Type,
    capabilities: impl IntoIterator<Item = &'a CapabilityItem>,
) -> (TokenStream, TokenStream) {
    let mut emitted = Vec::new();
    let mut consts = TokenStream::new();
    let mut reads = TokenStream::new();
    for c in capabilities {
        let name = id_const_ident(c);
        let cfgs = &c.cfgs;
        let key = (name.to_string(), quote!(#(#cfgs)*).to_string());
        if emitted.contains(&key) || c.capability.id.as_str().is_empty() {
            continue;
        }
        emitted.push(key);
        consts.extend(id_const(
            c,
            &name,
            &quote_spanned!(name.span()=> pub),
            &quote_spanned!(name.span()=> #[allow(unreachable_pub)]),
        ));
        reads.extend(quote!(#(#cfgs)* let _: &'static str = <#self_ty>::#name;));
    }
    (consts, reads)
}

/// The `CapabilityDefinition` expression of one capability; `scope` prefixes codec calls.
fn definition_expr(capability: &CapabilityItem, scope: &TokenStream) -> TokenStream {
    let p = private();
    let (input_fn, output_fn) = codec_idents(capability);
    let mut published = capability.capability.clone();
    published.output_schema = None;
    let json = serde_json::to_string(&published).unwrap_or_default();
    let input_schema = match capability.sig.input() {
        Some(_) => quote!((#scope #input_fn().schema)()),
        None => quote!(#p::empty_input_schema()),
    };
    let output_schema = match &capability.sig.output {
        Some(_) => quote!((#scope #output_fn().schema)()),
        None => quote!(#p::empty_input_schema()),
    };
    let support = support_tokens(&capability.facts.support);
    let validation = capability.facts.validation_handler;
    let compensation_handler = capability.facts.compensation_handler;
    let stream_required = capability.facts.stream_required;
    let examples = &capability.examples;
    let tags = &capability.tags;
    let description_parts = match &capability.description_parts {
        Some(parts) => quote!(#p::Option::Some(&[#(#parts),*])),
        None => quote!(#p::Option::None),
    };
    let waivers = capability
        .waivers
        .iter()
        .map(|(code, reason)| quote!((#code, #reason)));
    quote! {
        #p::capability_definition(#p::GeneratedCapability {
            capability_json: #json,
            input_schema: #input_schema,
            output_schema: #output_schema,
            support: #support,
            validation_handler: #validation,
            compensation_handler: #compensation_handler,
            stream_required: #stream_required,
            examples: &[#(#examples),*],
            tags: &[#(#tags),*],
            waivers: &[#(#waivers),*],
            description_parts: #description_parts,
        })
    }
}

/// The body that decodes, extracts, calls and encodes, as an `async move` block.
fn call_block(
    capability: &CapabilityItem,
    callee: TokenStream,
    connector_id: &str,
    scope: &TokenStream,
) -> TokenStream {
    let p = private();
    let (input_fn, output_fn) = codec_idents(capability);
    // The input is decoded before the future is built: the future then owns the typed value
    // instead of borrowing (or copying) the JSON, and a decode error costs no future at all.
    let mut decode = TokenStream::new();
    let mut state = TokenStream::new();
    let mut bindings = Vec::new();
    let mut args = Vec::new();
    for (index, param) in capability.sig.params.iter().enumerate() {
        let name = format_ident!("__aip_arg{}", index);
        match param.role {
            Role::Input => {
                decode.extend(quote! {
                    let #name = match (#scope #input_fn().decode)(__aip_input, #connector_id) {
                        #p::Result::Ok(decoded) => decoded,
                        #p::Result::Err(failure) => return #p::failed_future(failure),
                    };
                });
            }
            Role::State => {
                // Cloned once the input decoded (a refused input costs no clone) and before the
                // future is built, which then owns its copy. Annotated with the parameter's type
                // as written: a `State` that is not aip-connector's is a mismatch reported on
                // the parameter.
                let ty = &param.ty;
                // The state type is named, so an unmet `ConnectorState` bound is reported on it
                // (with the bound's own fix), not on a call rustc would suggest borrowing for.
                let inner = capability.sig.state();
                let free_state = free_state_param();
                let private = private_at(param.span);
                state.extend(quote_spanned! {param.span=>
                    let #name: #ty = #private::take_state::<#free_state, #inner>(__aip_state);
                });
            }
            Role::Extractor(kind) => {
                // The extractor's type is inferred from the handler's parameter, so a type that
                // does not resolve is reported where the user wrote it and by the assertion only.
                // The path's first and last tokens carry the type's first and last spans, so
                // rustc spans an unmet `Extractor` bound over the whole type, as in the
                // assertion, and reports the two as one.
                let variant = Ident::new(kind.name(), Span::call_site());
                let (first, last) = first_and_last_span(&param.ty);
                let root = sdk_root(first);
                let function = quote_spanned!(last=> extractor);
                bindings.push(quote_spanned! {param.span=>
                    let #name = (#root::__private::#function(#p::ExtractorKind::#variant).extract)(
                        &__aip_context,
                    )?;
                });
            }
        }
        args.push(name);
    }
    let ignore_input = capability
        .sig
        .input()
        .is_none()
        .then(|| quote!(let _ = __aip_input;));
    // Spanned on the handler's name: a future that is not `Send` (an `Rc` or a `MutexGuard` held
    // across an `.await`) is reported where it is boxed, which is then the handler, not
    // `#[connector]`; rustc's note still points at the `.await`.
    let span = capability.sig.ident.span();
    let spanned_private = private_at(span);
    let future = quote_spanned! {span=>
        #spanned_private::Box::pin(async move {
            #(#bindings)*
            (#scope #output_fn().encode)(#callee(#(#args),*).await, #connector_id)
        })
    };
    quote! {
        {
            #ignore_input
            #decode
            #state
            #future
        }
    }
}

/// The impl block plus `impl Connector for Type`.
pub(crate) fn connector(
    block: &ItemImpl,
    attr: &ConnectorAttr,
    capabilities: &[CapabilityItem],
) -> TokenStream {
    let p = private();
    let self_ty = &block.self_ty;
    let id = &attr.id;
    let agent_id = attr.agent.clone().unwrap_or_else(|| format!("agent:{id}"));
    let display_name = match &attr.display_name {
        Some(name) => quote!(#p::Option::Some(<#p::String as #p::From<&str>>::from(#name))),
        None => quote!(#p::Option::None),
    };
    let profiles = &attr.profiles;
    let compatibility = match &attr.compatibility {
        Some(text) => quote!(#p::Option::Some(#p::parse_json(#text))),
        None => quote!(#p::Option::None),
    };
    let webhooks = attr.webhooks.iter().map(|(id, _)| id);
    // Compact JSON text of the parsed channel: parsed again once, at first use of the manifest.
    let channels = attr.channels.iter().map(|(channel, _)| channel.to_string());
    let scope = quote!(<#self_ty>::);
    // Pushed one by one, so each entry can carry its handler's `#[cfg]`.
    let definitions = capabilities.iter().map(|c| {
        let cfgs = &c.cfgs;
        let definition = definition_expr(c, &scope);
        quote!(#(#cfgs)* __aip_capabilities.push(#definition);)
    });
    let codecs = capabilities
        .iter()
        .map(|c| codec_fns(c, TokenStream::new()));
    let (id_consts, _) = connector_id_consts(self_ty, capabilities);
    let assertions = capabilities
        .iter()
        .map(|c| extractor_assertions(c, Some(self_ty)));

    let connector_doc = connector_doc(id, capabilities);

    let invoke_arms = capabilities.iter().map(|c| {
        let ident = &c.sig.ident;
        let callee = if c.sig.has_receiver {
            quote!(self.#ident)
        } else {
            quote!(<#self_ty>::#ident)
        };
        let block = call_block(c, callee, id, &scope);
        let cfgs = &c.cfgs;
        // The arm matches the capability's id constant: the dispatch is what reads it.
        let constant = id_const_ident(c);
        quote!(#(#cfgs)* <#self_ty>::#constant => #block,)
    });
    let validate_arms = capabilities.iter().filter_map(|c| {
        let path = c.validate.as_ref()?;
        let cap_id = c.capability.id.as_str();
        let cfgs = &c.cfgs;
        // Every token of the call carries the span: rustc reports an unmet bound at the call.
        let call = quote_spanned!(companion_result_span(block, path)=>
            #p::encode_validation(__aip_result, #id));
        // The companion takes any input type (attribute-reference.md), decoded here; spanned on
        // the companion's parameter, a type that cannot be decoded (a `Reconciliation` where
        // `validate` was meant) is reported there, not on `#[connector]`.
        let argument = companion_argument_span(block, path);
        let input = Ident::new("__aip_validated", argument);
        let private = private_at(argument);
        let decode = quote_spanned!(argument=> #private::decode_input(__aip_input, #id));
        let (extractors, extracted) = preview_extractors(block, path, self_ty);
        Some(quote! {
            #(#cfgs)*
            #cap_id => {
                let _ = &__aip_context;
                let #input = match #decode {
                    #p::Result::Ok(decoded) => decoded,
                    #p::Result::Err(failure) => return #p::failed_future(failure),
                };
                #extractors
                #p::Box::pin(async move {
                    let __aip_result = #path(self, #input #(, #extracted)*).await;
                    #call
                })
            }
        })
    });
    let reconcile_arms = capabilities.iter().filter_map(|c| {
        let path = c.reconcile.as_ref()?;
        let cap_id = c.capability.id.as_str();
        let cfgs = &c.cfgs;
        // Every token of the call carries the span: rustc reports an unmet bound at the call.
        let call =
            quote_spanned!(companion_result_span(block, path)=> #p::reconcile_result(__aip_result));
        // Every token spanned at the companion's parameter type (the SDK path too): rustc
        // reports the unmet bound of a wrong argument type at the path of the call.
        let argument_span = companion_argument_span(block, path);
        let at = private_at(argument_span);
        let request = if companion_argument_is_concrete(block, path) {
            quote_spanned!(argument_span=> #at::reconcile_argument(__aip_request))
        } else {
            quote!(__aip_request)
        };
        Some(quote!(#(#cfgs)* #cap_id => #p::Box::pin(async move {
            let __aip_result = #path(self, #request).await;
            #call
        }),))
    });
    let cancel_arms = capabilities.iter().filter_map(|c| {
        let path = c.cancel.as_ref()?;
        let cap_id = c.capability.id.as_str();
        let cfgs = &c.cfgs;
        // Every token of the call carries the span: rustc reports an unmet bound at the call.
        let call =
            quote_spanned!(companion_result_span(block, path)=> #p::cancel_result(__aip_result));
        // Every token spanned at the companion's parameter type (the SDK path too): rustc
        // reports the unmet bound of a wrong argument type at the path of the call.
        let argument_span = companion_argument_span(block, path);
        let at = private_at(argument_span);
        let request = if companion_argument_is_concrete(block, path) {
            quote_spanned!(argument_span=> #at::cancel_argument(__aip_request))
        } else {
            quote!(__aip_request)
        };
        Some(quote!(#(#cfgs)* #cap_id => #p::Box::pin(async move {
            let __aip_result = #path(self, #request).await;
            #call
        }),))
    });
    let has_validate = capabilities.iter().any(|c| c.validate.is_some());
    let has_reconcile = capabilities.iter().any(|c| c.reconcile.is_some());
    let has_cancel = capabilities.iter().any(|c| c.cancel.is_some());
    let validate_fn = has_validate.then(|| quote! {
        #[doc(hidden)]
        fn validate<'__aip>(&'__aip self, __aip_capability: &'__aip str, __aip_input: &'__aip #p::Value, __aip_context: #p::Arc<dyn #p::InvocationContext>) -> #p::BoxFuture<'__aip, #p::Result<#p::Value, #p::ConnectorFailure>> {
            match __aip_capability {
                #(#validate_arms)*
                _ => #p::unsupported_companion(#p::ConnectorOperation::TransactionPlan, #id),
            }
        }
    });
    let reconcile_fn = has_reconcile.then(|| quote! {
        #[doc(hidden)]
        fn reconcile<'__aip>(&'__aip self, __aip_capability: &'__aip str, __aip_request: #p::Reconciliation) -> #p::BoxFuture<'__aip, #p::Result<#p::ReconcileOutcome, #p::ConnectorFailure>> {
            match __aip_capability {
                #(#reconcile_arms)*
                _ => #p::unsupported_companion(#p::ConnectorOperation::Reconciliation, #id),
            }
        }
    });
    let cancel_fn = has_cancel.then(|| quote! {
        #[doc(hidden)]
        fn cancel<'__aip>(&'__aip self, __aip_capability: &'__aip str, __aip_request: #p::CancelRequest) -> #p::BoxFuture<'__aip, #p::Result<(), #p::ConnectorFailure>> {
            match __aip_capability {
                #(#cancel_arms)*
                _ => #p::unsupported_companion(#p::ConnectorOperation::Cancellation, #id),
            }
        }
    });

    let markers = cfg_alternative_markers(capabilities);

    quote! {
        #block

        #(#assertions)*

        #markers

        #[automatically_derived]
        // `arbitrary_source_item_ordering` (restriction): the constants and codecs follow the
        // handlers' order, not the alphabet's, which a crate denying the lint would be told to
        // fix in code it cannot edit (found by a hostile probe).
        #[allow(clippy::arbitrary_source_item_ordering)]
        impl #self_ty {
            #id_consts
            #(#codecs)*
        }

        #[automatically_derived]
        // `deprecated`: a `#[deprecated]` handler's capability is defined here too.
        #[allow(unused_qualifications, deprecated)]
        impl #p::StaticDefinition for #self_ty {
            // `From` is called through the trait: under `#![no_implicit_prelude]` it is not in
            // scope for `String::from`. Hidden from rustdoc, as the `Connector` methods are.
            #[doc(hidden)]
            fn static_definition() -> &'static #p::ConnectorDefinition {
                static DEFINITION: #p::OnceLock<#p::ConnectorDefinition> = #p::OnceLock::new();
                DEFINITION.get_or_init(|| #p::ConnectorDefinition {
                    id: <#p::String as #p::From<&str>>::from(#id),
                    agent: #p::agent(#agent_id, #display_name),
                    profiles: <#p::Vec<_> as #p::From<_>>::from([#(<#p::ProfileId as #p::From<&str>>::from(#profiles)),*]),
                    compatibility: #compatibility,
                    channels: <#p::Vec<_> as #p::From<_>>::from([
                        #(#p::webhook_channel(#webhooks),)*
                        #(#p::parse_json(#channels),)*
                    ]),
                    capabilities: {
                        let mut __aip_capabilities = #p::Vec::new();
                        #(#definitions)*
                        __aip_capabilities
                    },
                })
            }
        }

        #connector_doc
        #[automatically_derived]
        // `deprecated`: a handler may be `#[deprecated]` (with `stability = deprecated`), and the
        // dispatch calling it must not break a crate that denies warnings.
        // `unreachable_patterns`: alternatives of one capability under different `#[cfg]`s each
        // have an arm; when both are compiled in, the markers' error says so, once.
        // `question_mark_used`: an extractor is read with `?`, spanned on the user's parameter.
        #[allow(unused_qualifications, deprecated, clippy::needless_question_mark, unreachable_patterns, clippy::question_mark_used)]
        impl #p::Connector for #self_ty {
            // The methods are hidden from rustdoc: the trait documents them, and their generated
            // parameter names would only clutter the connector's page.
            #[doc(hidden)]
            fn definition(&self) -> &#p::ConnectorDefinition {
                <Self as #p::StaticDefinition>::static_definition()
            }

            #[doc(hidden)]
            fn invoke<'__aip>(&'__aip self, __aip_capability: &'__aip str, __aip_input: &'__aip #p::Value, __aip_context: #p::Arc<dyn #p::InvocationContext>) -> #p::BoxFuture<'__aip, #p::Result<#p::Value, #p::ConnectorFailure>> {
                match __aip_capability {
                    #(#invoke_arms)*
                    _ => #p::Box::pin(#p::ready(#p::Result::Err(#p::unknown_capability(#id, __aip_capability)))),
                }
            }

            #validate_fn
            #reconcile_fn
            #cancel_fn
        }
    }
}

/// The first paragraph of a handler's description, on one line, as a table cell: the handlers
/// are usually private, so their doc comments appear nowhere else in the connector crate's
/// docs. Code spans (`` `limit` ``) stay code, as they render in the handler's own rustdoc
/// (found by an author trial: the table showed the backticks), with only a `|` in them escaped,
/// since it would end the cell. Everything else is shown as it is: every character Markdown or
/// HTML would read (`|`, `<T>` a tag rustdoc warns about, `[..]` a link, emphasis, a lone
/// backtick) is escaped with a backslash. Empty for a description only known at run time
/// (`#[doc = include_str!(..)]`).
fn table_summary(description: Option<&str>) -> String {
    let first = description
        .unwrap_or_default()
        .split("\n\n")
        .next()
        .unwrap_or_default();
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cell = String::with_capacity(line.len());
    let mut rest = line.as_str();
    while let Some(start) = rest.find('`') {
        escape_plain(&mut cell, &rest[..start]);
        // A code span opens with a run of backticks and closes with the next run of the same
        // length (CommonMark), so ``a`b`` is one span.
        let run = backtick_run(&rest[start..]);
        let after = &rest[start + run..];
        match closing_run(after, run) {
            Some(end) => {
                let fence = &rest[start..start + run];
                cell.push_str(fence);
                cell.push_str(&after[..end].replace('|', "\\|"));
                cell.push_str(fence);
                rest = &after[end + run..];
            }
            None => {
                for _ in 0..run {
                    cell.push_str("\\`");
                }
                rest = after;
            }
        }
    }
    escape_plain(&mut cell, rest);
    cell
}

/// How many backticks `text` starts with.
fn backtick_run(text: &str) -> usize {
    text.len() - text.trim_start_matches('`').len()
}

/// Where in `text` the first run of exactly `run` backticks starts, if any: the end of a code
/// span opened by such a run (a span holds at least one character).
fn closing_run(text: &str, run: usize) -> Option<usize> {
    let mut at = 0;
    while let Some(found) = text[at..].find('`') {
        let start = at + found;
        let length = backtick_run(&text[start..]);
        if length == run && start > 0 {
            return Some(start);
        }
        at = start + length;
    }
    None
}

/// `text`, an id the author wrote (capability ids are free text upstream), as a Markdown code
/// span that shows it as written: fenced by one backtick more than its longest run of them
/// (padded with a space when it starts or ends with one), a line break as the space a code span
/// makes of it (a newline in the `#[doc]` would end a table row). A table cell's `|` is the
/// caller's to escape: GFM reads it as a cell boundary even inside code.
fn code_span(text: &str) -> String {
    let longest = text
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or_default();
    let fence = "`".repeat(longest + 1);
    let body = text.replace("\r\n", " ").replace(['\r', '\n'], " ");
    let pad = if body.starts_with('`') || body.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// `text` with every character Markdown or HTML would read escaped with a backslash.
fn escape_plain(cell: &mut String, text: &str) {
    for character in text.chars() {
        if "\\`*_[]<>|&!~".contains(character) {
            cell.push('\\');
        }
        cell.push(character);
    }
}

/// The rustdoc of the generated `impl Connector`: the connector's id and a table of its
/// capabilities (id, handler, risk, side effects, approval, transaction modes, the first
/// paragraph of the handler's doc comment). The handlers are usually private methods, so
/// without it a connector crate's `cargo doc` showed no capability at all. A row of a handler
/// under `#[cfg(...)]` is documented under the same conditions (`cfg_attr`), so the table
/// lists what is compiled in.
fn connector_doc(id: &str, capabilities: &[CapabilityItem]) -> TokenStream {
    // A connector has at least one capability (`#[connector]` refuses an empty block).
    let heading = format!(
        " The AIP connector {}, generated by `#[connector]` (its methods are the \
         `Connector` trait's, generated from the handlers below).",
        code_span(id)
    );
    let rows = capabilities.iter().map(|c| {
        let contract = c.capability.contract.as_ref();
        let risk = c
            .capability
            .risk
            .as_ref()
            .map(wire_name)
            .unwrap_or_default();
        let effects: Vec<String> = contract
            .map(|contract| contract.side_effects.iter().map(wire_name).collect())
            .unwrap_or_default();
        let approval = if contract
            .and_then(|contract| contract.approval.as_ref())
            .is_some_and(|approval| approval.required)
        {
            "required"
        } else {
            ""
        };
        let modes: Vec<String> = contract
            .and_then(|contract| contract.transaction.as_ref())
            .map(|transaction| transaction.supported_modes.iter().map(wire_name).collect())
            .unwrap_or_default();
        let row = format!(
            " | {} | `{}` | {risk} | {} | {approval} | {} | {} |",
            code_span(&c.capability.id.as_str().replace('|', "\\|")),
            c.sig.ident,
            effects.join(", "),
            modes.join(", "),
            table_summary(c.capability.description.as_deref())
        );
        let predicates: Vec<&TokenStream> = c
            .cfgs
            .iter()
            .filter_map(|attr| match &attr.meta {
                syn::Meta::List(list) => Some(&list.tokens),
                _ => None,
            })
            .collect();
        if predicates.is_empty() {
            quote!(#[doc = #row])
        } else {
            quote!(#[cfg_attr(all(#(#predicates),*), doc = #row)])
        }
    });
    quote! {
        #[doc = #heading]
        #[doc = ""]
        #[doc = " | Capability | Handler | Risk | Side effects | Approval | Transaction modes | Description |"]
        #[doc = " |---|---|---|---|---|---|---|"]
        #(#rows)*
    }
}

/// After an error: the user's impl block (attributes stripped) and an `impl Connector` whose
/// methods are never reached, because the crate does not compile. It exists so that code using
/// the type as a connector reports nothing more than the real mistake. The id constants of the
/// capabilities that were analyzed are kept for the same reason: a test naming `Type::BOOK_ID`
/// must not add an error of its own to one in the contract.
pub(crate) fn fallback_connector(block: &ItemImpl, capabilities: &[CapabilityItem]) -> TokenStream {
    let p = private();
    let self_ty = &block.self_ty;
    if block.trait_.is_some() {
        return TokenStream::new();
    }
    // A generic block (refused) keeps its generics; `Connector`'s supertraits are required of
    // the type here rather than reported as a second error.
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let mut where_clause = where_clause
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(where));
    if !block.generics.params.is_empty() {
        where_clause.predicates.push(syn::parse_quote!(
            #self_ty: #p::Send + #p::Sync + 'static
        ));
    }
    let (id_consts, id_reads) = connector_id_consts(self_ty, capabilities);
    quote! {
        #[automatically_derived]
        impl #impl_generics #self_ty #where_clause {
            #id_consts
        }

        #[automatically_derived]
        impl #impl_generics #p::StaticDefinition for #self_ty #where_clause {
            fn static_definition() -> &'static #p::ConnectorDefinition {
                #id_reads
                #p::unreachable!("#[connector] reported a compile error")
            }
        }

        #[automatically_derived]
        impl #impl_generics #p::Connector for #self_ty #where_clause {
            fn definition(&self) -> &#p::ConnectorDefinition {
                #p::unreachable!("#[connector] reported a compile error")
            }
            fn invoke<'__aip>(&'__aip self, _: &'__aip str, _: &'__aip #p::Value, _: #p::Arc<dyn #p::InvocationContext>) -> #p::BoxFuture<'__aip, #p::Result<#p::Value, #p::ConnectorFailure>> {
                #p::unreachable!("#[connector] reported a compile error")
            }
        }
    }
}

/// After an error in a free `#[capability]`: the same-named type and a `FreeCapability` impl
/// whose methods are never reached (the crate does not compile), so that
/// `ConnectorBuilder::capability::<name>()` reports nothing more than the real mistake; its
/// `ID` too, when the attribute named one.
pub(crate) fn fallback_free_capability(
    function: &syn::ItemFn,
    capability: Option<&CapabilityItem>,
) -> TokenStream {
    let p = private();
    let vis = &function.vis;
    let ident = &function.sig.ident;
    let id_const = capability.map(|c| free_id_const(c, &function.vis));
    // Read, as the real definition reads it: a crate may forbid `dead_code`.
    let id_read = capability
        .filter(|c| !c.capability.id.as_str().is_empty())
        .map(|_| quote!(let _: &'static str = <#ident>::ID;));
    let state = free_state_param();
    let cfgs = function
        .attrs
        .iter()
        .filter(|a| a.path().is_ident(crate::keys::attributes::CFG))
        .collect::<Vec<_>>();
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(non_camel_case_types, clippy::exhaustive_structs)]
        #vis struct #ident {}

        #(#cfgs)*
        #[automatically_derived]
        impl #ident {
            #id_const
        }

        #(#cfgs)*
        #[automatically_derived]
        impl<#state: #p::ConnectorState> #p::FreeCapability<#state> for #ident {
            fn definition() -> #p::CapabilityDefinition {
                #id_read
                #p::unreachable!("#[capability] reported a compile error")
            }
            fn invoke(_: &#state, _: &#p::Value, _: #p::Arc<dyn #p::InvocationContext>) -> #p::BoxFuture<'static, #p::Result<#p::Value, #p::ConnectorFailure>> {
                #p::unreachable!("#[capability] reported a compile error")
            }
        }
    }
}

/// A free `#[capability] async fn`: the function, plus a same-named type (in the type
/// namespace only) implementing `FreeCapability`, for `ConnectorBuilder::capability::<name>()`.
pub(crate) fn free_capability(function: &syn::ItemFn, capability: &CapabilityItem) -> TokenStream {
    let p = private();
    let vis = &function.vis;
    let ident = &function.sig.ident;
    let scope = TokenStream::new();
    let definition = definition_expr(capability, &scope);
    let assertions = extractor_assertions(capability, None);
    let codecs = codec_fns(capability, quote!(#vis));
    let call = call_block(
        capability,
        quote!(#ident),
        capability.capability.id.as_str(),
        &scope,
    );
    let doc = format!(
        "The `#[capability]` descriptor of [`{ident}()`]; pass it to `ConnectorBuilder::capability`."
    );
    let cfgs = &capability.cfgs;
    let companions = free_companions(capability);
    let id_const = free_id_const(capability, vis);
    let ignore_state = capability
        .sig
        .state()
        .is_none()
        .then(|| quote!(let _ = __aip_state;));
    // Generic over the connector's state: a handler without `State` joins any connector, one
    // that takes `State<T>` any connector whose state gives a `T` (`FromRef`). The bound is
    // spanned on `T`, so a `T` that cannot be a state is reported on the parameter.
    let state = free_state_param();
    let bound = capability.sig.state().map(|part| {
        let (first, _) = first_and_last_span(part);
        let private = private_at(first);
        quote_spanned!(first=> where #part: #private::FromRef<#state>)
    });
    quote! {
        #function

        #assertions

        #codecs

        #(#cfgs)*
        #[doc = #doc]
        // `exhaustive_structs` (restriction): the descriptor is a type to name, never built, so
        // `#[non_exhaustive]` would say nothing (found by a hostile probe).
        #[allow(non_camel_case_types, clippy::exhaustive_structs)]
        #vis struct #ident {}

        #(#cfgs)*
        #[automatically_derived]
        impl #ident {
            #id_const
        }

        #(#cfgs)*
        #[automatically_derived]
        #[allow(deprecated, clippy::question_mark_used)]
        impl<#state: #p::ConnectorState> #p::FreeCapability<#state> for #ident #bound {
            #[doc(hidden)]
            fn definition() -> #p::CapabilityDefinition {
                // `ID` holds the id this definition publishes; read here, it is never dead code.
                let _: &'static str = <#ident>::ID;
                #definition
            }

            #[doc(hidden)]
            fn invoke(__aip_state: &#state, __aip_input: &#p::Value, __aip_context: #p::Arc<dyn #p::InvocationContext>) -> #p::BoxFuture<'static, #p::Result<#p::Value, #p::ConnectorFailure>> {
                #ignore_state
                #call
            }

            #companions
        }
    }
}

/// The `FreeCapability` method `method` of a companion that takes the host's request (`reconcile`,
/// `cancel`): calls `path(request)`, or `path(State(state), request)` when the handler takes
/// state, and converts its result with `convert`. The request is passed as it is: unlike an
/// impl block's companion (whose parameter the macro sees), a free companion's arity is
/// unknown here, and a shim on the argument turned a missing `State` argument into two errors.
fn free_request_companion(
    method: TokenStream,
    request_ty: TokenStream,
    output_ty: TokenStream,
    convert: TokenStream,
    path: &Expr,
    state: &FreeState,
) -> TokenStream {
    let p = private();
    let span = path.span();
    let request = Ident::new("__aip_request", span);
    let state_ty = free_state_param();
    let (take_state, state_arg) = state.argument(span);
    let run = quote_spanned!(span=> #path(#state_arg #request).await);
    let call = quote_spanned!(span=> #convert(__aip_result));
    quote! {
        #[doc(hidden)]
        fn #method(__aip_state: &#state_ty, #request: #request_ty) -> #p::Option<#p::BoxFuture<'static, #p::Result<#output_ty, #p::ConnectorFailure>>> {
            #take_state
            #p::Option::Some(#p::Box::pin(async move {
                let __aip_result = #run;
                #call
            }))
        }
    }
}

/// The state a free capability's handler and companions take: the `T` of the handler's
/// `State<T>`, taken from the connector's state through `FromRef`, or none. A handler without
/// `State` joins any connector, whatever its state (its `FreeCapability` impl is generic over it).
struct FreeState {
    /// The `T` of the handler's `State<T>`, when it takes one.
    part: Option<syn::Type>,
}

impl FreeState {
    fn of(capability: &CapabilityItem) -> Self {
        Self {
            part: capability.sig.state().cloned(),
        }
    }

    /// The statement that takes the companion's state out of `__aip_state` (a `State<T>` the
    /// future owns, or nothing), and the argument it adds before the host's, spanned on the
    /// companion's name: a companion that does not take `State<T>` first is reported there.
    fn argument(&self, span: Span) -> (TokenStream, TokenStream) {
        match &self.part {
            Some(part) => {
                let state = Ident::new("__aip_companion_state", span);
                let param = free_state_param();
                (
                    {
                        let private = private();
                        quote! {
                            let #state = #private::take_state::<#param, #part>(__aip_state);
                        }
                    },
                    quote_spanned!(span=> #state,),
                )
            }
            None => (quote!(let _ = __aip_state;), TokenStream::new()),
        }
    }
}

/// The connector state's type parameter in a free capability's `FreeCapability` impl (and so in
/// its methods' `__aip_state: &__AipState`).
fn free_state_param() -> Ident {
    Ident::new("__AipState", Span::call_site())
}

/// The `FreeCapability` methods of a free capability's companions, each a free `async fn`
/// named by path (`reconcile = find`): called with the argument alone, as there is no `self`,
/// after `State<S>` when the handler takes the connector's state.
/// The macro cannot see the function, so rustc checks it at the call, spanned on the path:
/// not `async`, a wrong argument type or an error type without `Into<ConnectorFailure>` is
/// reported where the companion is named.
fn free_companions(capability: &CapabilityItem) -> TokenStream {
    let p = private();
    let id = capability.capability.id.as_str();
    let state = FreeState::of(capability);
    let validate = capability.validate.as_ref().map(|path| {
        let span = path.span();
        let input = Ident::new("__aip_validated", span);
        let decode = quote_spanned!(span=> #p::decode_input(__aip_input, #id));
        let state_ty = free_state_param();
        let (take_state, state_arg) = state.argument(span);
        let run = quote_spanned!(span=> #path(#state_arg #input).await);
        let call = quote_spanned!(span=> #p::encode_validation(__aip_result, #id));
        quote! {
            #[doc(hidden)]
            fn validate(__aip_state: &#state_ty, __aip_input: &#p::Value, __aip_context: #p::Arc<dyn #p::InvocationContext>) -> #p::Option<#p::BoxFuture<'static, #p::Result<#p::Value, #p::ConnectorFailure>>> {
                let _ = &__aip_context;
                let #input = match #decode {
                    #p::Result::Ok(decoded) => decoded,
                    #p::Result::Err(failure) => return #p::Option::Some(#p::failed_future(failure)),
                };
                #take_state
                #p::Option::Some(#p::Box::pin(async move {
                    let __aip_result = #run;
                    #call
                }))
            }
        }
    });
    let reconcile = capability.reconcile.as_ref().map(|path| {
        free_request_companion(
            quote!(reconcile),
            quote!(#p::Reconciliation),
            quote!(#p::ReconcileOutcome),
            quote!(#p::reconcile_result),
            path,
            &state,
        )
    });
    let cancel = capability.cancel.as_ref().map(|path| {
        free_request_companion(
            quote!(cancel),
            quote!(#p::CancelRequest),
            quote!(()),
            quote!(#p::cancel_result),
            path,
            &state,
        )
    });
    quote!(#validate #reconcile #cancel)
}

/// One marker type per declaration of a capability id that is declared more than once under
/// different `#[cfg]`s (alternatives, e.g. `feature = "v2"` and `not(feature = "v2")`), under its
/// declaration's cfgs, all in one scope. The macro cannot tell which cfgs hold; rustc can: when
/// two declarations of one id are compiled in, their markers collide (E0428) on the second `id`.
fn cfg_alternative_markers(capabilities: &[CapabilityItem]) -> TokenStream {
    let mut declarations: BTreeMap<&str, usize> = BTreeMap::new();
    for capability in capabilities {
        *declarations
            .entry(capability.capability.id.as_str())
            .or_default() += 1;
    }
    // Marker names must stay distinct for distinct ids (`cap.a` and `cap-a` read alike).
    let mut names: BTreeMap<String, &str> = BTreeMap::new();
    let markers = capabilities
        .iter()
        .filter(|c| declarations[c.capability.id.as_str()] > 1)
        .map(|c| {
            let id = c.capability.id.as_str();
            let readable: String = id
                .chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() {
                        ch.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            let mut name = format!("capability_{readable}_declared_twice_under_enabled_cfgs");
            let mut n = 1;
            while names.get(&name).is_some_and(|owner| *owner != id) {
                n += 1;
                name = format!("capability_{readable}_{n}_declared_twice_under_enabled_cfgs");
            }
            names.insert(name.clone(), id);
            // The whole item carries the `id`'s span: rustc reports a redefinition on the item.
            let span = c.id_span.unwrap_or(c.attr_span);
            let marker = Ident::new(&name, span);
            let cfgs = &c.cfgs;
            let item = quote_spanned!(span=> struct #marker;);
            quote!(#(#cfgs)* #[allow(dead_code, non_camel_case_types)] #item)
        })
        .collect::<Vec<_>>();
    if markers.is_empty() {
        return TokenStream::new();
    }
    quote!(const _: () = { #(#markers)* };)
}

/// The extractors a `validate` companion of this block takes after its input (`#[connector]`
/// checked that a preview has each of them): the statements that read them out of the
/// preview's context before the future is built, failing the preview as a handler's missing
/// extractor fails its call, and the names they are bound to. Each is read as a handler's is,
/// the type inferred from the companion's parameter and asserted at compile time.
fn preview_extractors(
    block: &ItemImpl,
    companion: &Expr,
    self_ty: &syn::Type,
) -> (TokenStream, Vec<Ident>) {
    let p = private();
    let Some(method) = companion_method(block, companion) else {
        return (TokenStream::new(), Vec::new());
    };
    let mut statements = TokenStream::new();
    let mut names = Vec::new();
    for (index, param) in crate::connector::preview_extractor_params(&method.sig).enumerate() {
        let Some(kind) = crate::signature::Extractor::from_type(&param.ty) else {
            continue;
        };
        let name = format_ident!("__aip_preview{}", index);
        let span = param.ty.span();
        let variant = Ident::new(kind.name(), Span::call_site());
        let private = private_at(span);
        let ty = replace_self(quote::ToTokens::to_token_stream(&param.ty), self_ty);
        statements.extend(quote_spanned! {span=>
            const _: () = {
                let _ = #private::extractor::<#ty>(#private::ExtractorKind::#variant);
            };
            let #name = match (#private::extractor(#p::ExtractorKind::#variant).extract)(&__aip_context) {
                #p::Result::Ok(extracted) => extracted,
                #p::Result::Err(failure) => return #p::failed_future(failure),
            };
        });
        names.push(name);
    }
    (statements, names)
}

/// The method `Self::name` of this block that `companion` names, if it is one.
fn companion_method<'b>(block: &'b ItemImpl, companion: &Expr) -> Option<&'b syn::ImplItemFn> {
    let Expr::Path(path) = companion else {
        return None;
    };
    let segments = &path.path.segments;
    if segments.len() != 2 || segments[0].ident != "Self" {
        return None;
    }
    block.items.iter().find_map(|item| match item {
        syn::ImplItem::Fn(method) if method.sig.ident == segments[1].ident => Some(method),
        _ => None,
    })
}

/// Where rustc reports a companion's result type (an error type that does not convert into
/// `ConnectorFailure`): the return type of the method `Self::name` in this block, where the fix
/// goes, else the companion as named in the attribute. Without it, the error pointed at
/// `#[connector]`.
fn companion_result_span(block: &ItemImpl, companion: &Expr) -> Span {
    match companion_method(block, companion).map(|method| &method.sig.output) {
        Some(syn::ReturnType::Type(_, ty)) => ty.span(),
        _ => companion.span(),
    }
}

/// Where rustc reports the argument the host passes a companion (a `reconcile` companion taking
/// the capability's input instead of a `Reconciliation`): the type of the method's parameter,
/// where the fix goes, else the companion as named in the attribute.
/// Whether the argument shim (`reconcile_argument`/`cancel_argument`) can name the companion's
/// parameter type: only a plain path type that is not one of the method's own generic
/// parameters. An `impl Trait` or generic parameter would leave the shim's type parameter to
/// inference rustc cannot do (E0283), so those companions get the host's request as is and
/// rustc checks the bound where the author wrote it. A companion not found in this block (a free
/// function) also takes the request as is.
fn companion_argument_is_concrete(block: &ItemImpl, companion: &Expr) -> bool {
    let Some(method) = companion_method(block, companion) else {
        return false;
    };
    let Some(ty) = method.sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(typed) => Some(&*typed.ty),
        FnArg::Receiver(_) => None,
    }) else {
        return false;
    };
    let syn::Type::Path(path) = ty else {
        return false;
    };
    if path.qself.is_some() {
        return false;
    }
    let generic_types: Vec<&syn::Ident> = method
        .sig
        .generics
        .type_params()
        .map(|param| &param.ident)
        .chain(block.generics.type_params().map(|param| &param.ident))
        .collect();
    !path
        .path
        .segments
        .first()
        .is_some_and(|first| generic_types.contains(&&first.ident))
}

fn companion_argument_span(block: &ItemImpl, companion: &Expr) -> Span {
    companion_method(block, companion)
        .and_then(|method| {
            method.sig.inputs.iter().find_map(|input| match input {
                FnArg::Typed(typed) => Some(typed.ty.span()),
                FnArg::Receiver(_) => None,
            })
        })
        .unwrap_or_else(|| companion.span())
}
