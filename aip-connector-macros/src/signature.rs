//! Reads a handler's signature: its receiver, its input parameter, its extractors and its
//! return type.
//!
//! Extractors are recognised by the last segment of their type path. That is only the macro's
//! view; the generated code asserts `<T as Extractor>::KIND` for each of them (see
//! `aip_connector::__private::extractor`), so the compiler confirms the classification and
//! a shadowing or renamed type cannot make the derived support record lie.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, PathArguments, ReturnType, Signature, Type};

use crate::ctxt::Ctxt;
use crate::diagnostics;

/// The extractors of `aip_connector::extract`, mirrored for recognition and codegen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extractor {
    IdempotencyKey,
    Cancellation,
    Deadline,
    StreamSink,
    Checkpoint,
    Credential,
    Tenant,
    Caller,
    Approval,
    Compensation,
    ClaimedPlan,
}

impl Extractor {
    const ALL: [Extractor; 11] = [
        Extractor::IdempotencyKey,
        Extractor::Cancellation,
        Extractor::Deadline,
        Extractor::StreamSink,
        Extractor::Checkpoint,
        Extractor::Credential,
        Extractor::Tenant,
        Extractor::Caller,
        Extractor::Approval,
        Extractor::Compensation,
        Extractor::ClaimedPlan,
    ];

    /// The type name, which is also the `ExtractorKind` variant name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Extractor::IdempotencyKey => "IdempotencyKey",
            Extractor::Cancellation => "Cancellation",
            Extractor::Deadline => "Deadline",
            Extractor::StreamSink => "StreamSink",
            Extractor::Checkpoint => "Checkpoint",
            Extractor::Credential => "Credential",
            Extractor::Tenant => "Tenant",
            Extractor::Caller => "Caller",
            Extractor::Approval => "Approval",
            Extractor::Compensation => "Compensation",
            Extractor::ClaimedPlan => "ClaimedPlan",
        }
    }

    /// The extractor as an author writes it, with its type parameter: `StreamSink<T>`.
    fn written(self) -> &'static str {
        match self {
            Extractor::StreamSink => "StreamSink<T>",
            other => other.name(),
        }
    }

    pub(crate) fn from_type(ty: &Type) -> Option<Extractor> {
        let Type::Path(path) = peeled(ty) else {
            return None;
        };
        let last = path.path.segments.last()?;
        Extractor::ALL.into_iter().find(|e| last.ident == e.name())
    }

    /// The extractors a `validate` companion may take after its input, as written in messages.
    pub(crate) const PREVIEW: &'static str =
        "`Tenant`, `Caller`, `Deadline`, `Cancellation` and `Credential`";

    /// Whether a preview (`dry_run`, `plan`) can hand this extractor to a `validate` companion:
    /// its context holds the caller, the tenant, the deadline, a cancellation and the resolved
    /// credential, and nothing that exists only once the effect runs. `Err` says why not.
    pub(crate) fn in_preview(self) -> Result<(), &'static str> {
        match self {
            Extractor::Tenant
            | Extractor::Caller
            | Extractor::Deadline
            | Extractor::Cancellation
            | Extractor::Credential => Ok(()),
            Extractor::IdempotencyKey => Err(
                "a preview reserves no idempotency key (it makes no effect to deduplicate); the commit's handler takes the key",
            ),
            Extractor::Checkpoint => Err(
                "a preview has no attempt to checkpoint (it sends no write); the commit's handler records the provider operation",
            ),
            Extractor::StreamSink => Err("a preview's answer is one value, never a stream"),
            Extractor::Approval => Err(
                "previews run before the approval gate, so no approval has released them; the commit's handler takes `Approval`",
            ),
            Extractor::Compensation => Err(
                "a preview compensates nothing; the compensating capability's handler takes `Compensation`",
            ),
            Extractor::ClaimedPlan => Err(
                "a preview makes the plan, it does not commit one; the commit's handler takes `ClaimedPlan`",
            ),
        }
    }
}

/// The `S` of a parameter written `State<S>` (by the last segment, as extractors are
/// recognised). A `State` without a type argument is left alone: it may be the author's input.
fn state_type(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = peeled(ty) else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(state), None) => Some(state),
        _ => None,
    }
}

/// `ty` without the invisible groups a `macro_rules!` `$t:ty` fragment wraps it in, and without
/// parentheses: `(IdempotencyKey)` and a `$key:ty` given `IdempotencyKey` name the extractor as
/// plainly as the bare path (found by a hostile probe: a handler generated by a `macro_rules!`
/// had its extractors read as inputs).
fn peeled(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => peeled(&group.elem),
        Type::Paren(paren) => peeled(&paren.elem),
        other => other,
    }
}

/// Wrappers an author may put around an extractor, expecting it to work as in other frameworks.
const EXTRACTOR_WRAPPERS: [&str; 5] = ["Option", "Box", "Arc", "Rc", "Vec"];

/// A handler parameter `recognise` names (an extractor, `State<S>`) written inside references
/// or wrappers (`&Checkpoint`, `Option<IdempotencyKey>`, `&Option<Deadline>`, `Arc<State<S>>`):
/// what was recognised and the type as written, for the message. Such parameters are taken by
/// value, and one written like this would otherwise be read as the capability's input.
fn wrapped<K>(
    ty: &Type,
    recognise: &impl Fn(&Type) -> Option<(K, &'static str)>,
) -> Option<(K, String)> {
    let direct_or_wrapped = |inner: &Type| {
        recognise(inner)
            .map(|(kind, written)| (kind, written.to_owned()))
            .or_else(|| wrapped(inner, recognise))
    };
    match peeled(ty) {
        Type::Reference(reference) => {
            let (kind, inner) = direct_or_wrapped(&reference.elem)?;
            Some((kind, format!("&{inner}")))
        }
        Type::Path(path) => {
            let last = path.path.segments.last()?;
            let wrapper = EXTRACTOR_WRAPPERS.into_iter().find(|w| last.ident == w)?;
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(inner) => direct_or_wrapped(inner)
                    .map(|(kind, inner)| (kind, format!("{wrapper}<{inner}>"))),
                _ => None,
            })
        }
        _ => None,
    }
}

/// An extractor in a reference or wrapper (see [`wrapped`]).
pub(crate) fn wrapped_extractor(ty: &Type) -> Option<(Extractor, String)> {
    wrapped(ty, &|inner| {
        Extractor::from_type(inner).map(|kind| (kind, kind.written()))
    })
}

/// `State<S>` in a reference or wrapper (see [`wrapped`]): the type as written.
fn wrapped_state(ty: &Type) -> Option<String> {
    wrapped(ty, &|inner| state_type(inner).map(|_| ((), "State<S>"))).map(|((), written)| written)
}

/// The error for an extractor taken as `written` (see [`wrapped_extractor`]).
fn wrapped_extractor_message(kind: Extractor, written: &str) -> String {
    let name = kind.written();
    let why = if written.contains("Option<") {
        format!(
            "taking `{name}` is what declares the behaviour it stands for, so a handler that can do without it leaves it out"
        )
    } else {
        "each extractor is an owned handle the host builds per call".to_owned()
    };
    format!("`{written}` is not an extractor; take `{name}` by value: {why}")
}

/// Types of the SDK (and of tokio-util) that an author takes for an extractor, by the last
/// segment of their path, with the extractor that gives a handler what they hold. Only used to
/// word the refusal of a second input, so an author's own type of one of these names loses
/// nothing: it would be a second input anyway. (An author trial took `CredentialHandle`, which
/// the docs show on the deployment's side, and was told to look at its imports.)
const EXTRACTOR_LOOK_ALIKES: [(&str, &str, &str); 8] = [
    (
        "CredentialHandle",
        "Credential",
        "a deployment's credential provider returns it to the host",
    ),
    (
        "Secret",
        "Credential",
        "it is a credential's material, which a handler reaches through the `Credential` the host resolved",
    ),
    (
        "VerifiedTenant",
        "Tenant",
        "it is what a transport verified, handed to the host in the caller's `TrustedContext`",
    ),
    (
        "TrustedContext",
        "Caller",
        "it is what a transport hands the host for each call",
    ),
    (
        "VerifiedApprovals",
        "Approval",
        "the host builds it from the approval records",
    ),
    (
        "ApprovalRecord",
        "Approval",
        "it is the host's stored record of an approval request",
    ),
    (
        "ApprovalDecision",
        "Approval",
        "it is one approver's decision, recorded through the host",
    ),
    (
        "CancellationToken",
        "Cancellation",
        "the host creates the call's token when a handler first asks `Cancellation` for it",
    ),
];

/// The refusal of a parameter that would be a handler's second input: which extractor was
/// meant, when its type is one that looks like one.
fn second_input_message(ty: &Type) -> String {
    let last = match ty {
        Type::Path(path) => path.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    };
    if let Some((written, extractor, why)) = last.and_then(|last| {
        EXTRACTOR_LOOK_ALIKES
            .iter()
            .find(|(written, _, _)| *written == last)
    }) {
        return format!(
            "a capability handler takes one input parameter, and this is a second one: `{written}` is not an extractor ({why}); to receive it in a handler, take the `{extractor}` extractor (`aip_connector::{extractor}`)"
        );
    }
    "a capability handler takes one input parameter, and this is a second one; group the fields into one input type, or, if this is an aip-connector extractor imported under another name, import it under its own name".to_owned()
}

/// Types whose JSON Schema is never an object, by the last segment of their path: a
/// capability's input is one JSON object (`Host::build` refuses any other schema root). Names an
/// author would not give an input struct of their own; `serde_json::Value` is recognised only
/// by its full path, since `Value` alone may well be the author's struct.
const NON_OBJECT_INPUTS: [&str; 22] = [
    "String", "str", "bool", "char", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize", "f32", "f64", "Vec", "VecDeque", "HashSet", "BTreeSet",
];

/// Why `ty` cannot be a capability's input, if the macro can tell from the type as written:
/// a borrowed type (a reference, a lifetime argument), an `impl Trait`, or a type whose schema
/// is not an object (a scalar, a string, a sequence, a tuple, `Option`, `serde_json::Value`).
/// Anything else is left to the type checks of the generated code and to admission.
pub(crate) fn unfit_input(ty: &Type) -> Option<String> {
    const OWNED: &str = "the input is decoded into an owned value for every call: take the input type by value, with owned fields (`String`, not `&str`), and no lifetime parameters";
    const OBJECT: &str =
        "a capability's input is one JSON object (its schema's root is `{\"type\": \"object\"}`)";
    match peeled(ty) {
        Type::Reference(_) => Some(OWNED.to_owned()),
        Type::ImplTrait(_) => Some(
            "a capability handler cannot be generic (`impl Trait` is a type parameter): its input and output types fix the published schemas".to_owned(),
        ),
        Type::Tuple(tuple) if tuple.elems.is_empty() => Some(
            "a capability without input takes no input parameter: remove this one (the published input schema is then an empty object)".to_owned(),
        ),
        Type::Tuple(_) | Type::Array(_) | Type::Slice(_) => Some(format!(
            "{OBJECT}; a tuple or an array is a JSON array: name its parts as the fields of a `#[derive(Deserialize, JsonSchema)] struct`"
        )),
        Type::Path(path) if has_lifetime(path) => Some(OWNED.to_owned()),
        Type::Path(path) => {
            let segments = &path.path.segments;
            let last = segments.last()?;
            let json_value = last.ident == "Value"
                && segments.len() >= 2
                && segments[segments.len() - 2].ident == "serde_json";
            if json_value {
                return Some(format!(
                    "{OBJECT}, and `serde_json::Value` may be anything: declare the input's fields in a `#[derive(Deserialize, JsonSchema)] struct` (a `serde_json::Value` field can hold what is free-form)"
                ));
            }
            if last.ident == "Option" {
                return Some(format!(
                    "{OBJECT}, and always present; make the fields of the input struct optional (`Option<T>` fields with `#[serde(default)]`) instead"
                ));
            }
            NON_OBJECT_INPUTS
                .iter()
                .any(|name| last.ident == name)
                .then(|| format!(
                    "{OBJECT}, and `{}` is not one: wrap it in a `#[derive(Deserialize, JsonSchema)] struct` with a named field",
                    last.ident
                ))
        }
        _ => None,
    }
}

/// Whether `ty` borrows something other than `'static` data: a reference, or a lifetime
/// argument, at any depth (`Cow<'_, str>`, `Vec<(u8, &str)>`, `Box<dyn Trait + '_>`). Unlike
/// the input's `has_lifetime`, `'static` references are owned enough: `State<&'static str>` and
/// `State<Option<&'static str>>` are valid states. Function pointers and `Fn` bounds are not
/// looked into: their elided lifetimes are the call's own (`fn(&str) -> usize` borrows nothing).
fn borrows(ty: &Type) -> bool {
    let non_static = |lifetime: &syn::Lifetime| lifetime.ident != "static";
    match ty {
        Type::Reference(reference) => {
            reference.lifetime.as_ref().is_none_or(non_static) || borrows(&reference.elem)
        }
        Type::Paren(paren) => borrows(&paren.elem),
        Type::Group(group) => borrows(&group.elem),
        Type::Slice(slice) => borrows(&slice.elem),
        Type::Array(array) => borrows(&array.elem),
        Type::Tuple(tuple) => tuple.elems.iter().any(borrows),
        Type::Path(path) => path_borrows(&path.path, &[]),
        Type::TraitObject(object) => object.bounds.iter().any(|bound| match bound {
            syn::TypeParamBound::Lifetime(lifetime) => non_static(lifetime),
            // `dyn for<'a> Visitor<'a>` names its own lifetime: not a borrow of the state.
            syn::TypeParamBound::Trait(bound) => {
                let bound_here: Vec<&syn::Ident> = bound
                    .lifetimes
                    .iter()
                    .flat_map(|binder| &binder.lifetimes)
                    .filter_map(|param| match param {
                        syn::GenericParam::Lifetime(param) => Some(&param.lifetime.ident),
                        _ => None,
                    })
                    .collect();
                path_borrows(&bound.path, &bound_here)
            }
            _ => false,
        }),
        _ => false,
    }
}

/// Whether the angle-bracketed arguments of `path` borrow (see [`borrows`]), lifetimes bound
/// by an enclosing `for<...>` (`bound_here`) aside.
fn path_borrows(path: &syn::Path, bound_here: &[&syn::Ident]) -> bool {
    path.segments.iter().any(|segment| {
        let PathArguments::AngleBracketed(args) = &segment.arguments else {
            return false;
        };
        args.args.iter().any(|arg| match arg {
            GenericArgument::Lifetime(lifetime) => {
                lifetime.ident != "static" && !bound_here.contains(&&lifetime.ident)
            }
            GenericArgument::Type(inner) => borrows(inner),
            GenericArgument::AssocType(assoc) => borrows(&assoc.ty),
            _ => false,
        })
    })
}

/// Whether a lifetime appears in the generic arguments of `path`, at any depth.
fn has_lifetime(path: &syn::TypePath) -> bool {
    path.path
        .segments
        .iter()
        .any(|segment| match &segment.arguments {
            PathArguments::AngleBracketed(args) => args.args.iter().any(|arg| match arg {
                // `'static` borrows nothing from the request (a `Cow<'static, str>` field is owned).
                GenericArgument::Lifetime(lifetime) => lifetime.ident != "static",
                GenericArgument::Type(Type::Path(inner)) => has_lifetime(inner),
                GenericArgument::Type(Type::Reference(_)) => true,
                _ => false,
            }),
            _ => false,
        })
}

/// One handler parameter after the receiver.
pub(crate) struct Param {
    pub(crate) ty: Type,
    pub(crate) role: Role,
    pub(crate) span: Span,
}

pub(crate) enum Role {
    Input,
    Extractor(Extractor),
    /// `State<S>`: the connector's state, for a free capability.
    State,
}

/// What the macro learned from a handler's signature.
pub(crate) struct HandlerSignature {
    pub(crate) ident: Ident,
    pub(crate) has_receiver: bool,
    pub(crate) params: Vec<Param>,
    pub(crate) output: Option<Type>,
    /// A second input parameter was refused: the handler is re-emitted with
    /// `#[allow(unused_variables)]`, so that an unused one is not a second diagnostic.
    pub(crate) refused_input: bool,
}

impl HandlerSignature {
    /// The input parameter's type, if the handler takes one.
    pub(crate) fn input(&self) -> Option<&Type> {
        self.params
            .iter()
            .find(|p| matches!(p.role, Role::Input))
            .map(|p| &p.ty)
    }

    /// The `S` of the handler's `State<S>`, if it takes one.
    pub(crate) fn state(&self) -> Option<&Type> {
        self.params
            .iter()
            .find(|p| matches!(p.role, Role::State))
            .and_then(|p| state_type(&p.ty))
    }

    /// Whether the handler takes extractor `kind`.
    pub(crate) fn has(&self, kind: Extractor) -> bool {
        self.extractor(kind).is_some()
    }

    /// The parameter of extractor `kind`, if taken.
    pub(crate) fn extractor(&self, kind: Extractor) -> Option<&Param> {
        self.params
            .iter()
            .find(|p| matches!(p.role, Role::Extractor(k) if k == kind))
    }
}

/// The first `impl Trait` written anywhere in `ty` (`Result<impl Serialize, _>`).
fn impl_trait_in(ty: &Type) -> Option<&Type> {
    match ty {
        Type::ImplTrait(_) => Some(ty),
        Type::Group(group) => impl_trait_in(&group.elem),
        Type::Paren(paren) => impl_trait_in(&paren.elem),
        Type::Reference(reference) => impl_trait_in(&reference.elem),
        Type::Array(array) => impl_trait_in(&array.elem),
        Type::Slice(slice) => impl_trait_in(&slice.elem),
        Type::Tuple(tuple) => tuple.elems.iter().find_map(impl_trait_in),
        Type::Path(path) => path.path.segments.iter().find_map(|segment| {
            let PathArguments::AngleBracketed(args) = &segment.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(inner) => impl_trait_in(inner),
                _ => None,
            })
        }),
        _ => None,
    }
}

/// Whether `receiver` is `&self` or `self: &Self`, with no lifetime of its own: what the
/// generated code can call with the connector it borrows for one call. syn gives the second
/// form no `reference`, only its type (found by a hostile probe: it was refused as `self` by
/// value).
pub(crate) fn takes_shared_self(receiver: &syn::Receiver) -> bool {
    if receiver.mutability.is_some() {
        return false;
    }
    // `'_` is the anonymous lifetime: the same as none.
    let anonymous = |lifetime: Option<&syn::Lifetime>| lifetime.is_none_or(|l| l.ident == "_");
    match (&receiver.reference, &*receiver.ty) {
        (Some((_, lifetime)), _) => anonymous(lifetime.as_ref()),
        (None, Type::Reference(reference)) => {
            reference.mutability.is_none()
                && anonymous(reference.lifetime.as_ref())
                && matches!(peeled(&reference.elem), Type::Path(path) if path.path.is_ident("Self"))
        }
        _ => false,
    }
}

/// Removes from `sig` what [`read`] refused and rustc would refuse again (a variadic `...`, a
/// parameter's refused attributes), so the item emitted after the error compiles as far as it
/// can and the mistake yields one diagnostic, not one per compiler pass.
///
/// A `self` refused outside a `#[connector]` block is kept: the attribute cannot see the block
/// around the function, and a receiver almost always means a method of an impl block, where
/// removing it made rustc add an error of its own in a trait impl (`E0186`, "expected `&self`
/// in impl" at a method that has it; found by a hostile probe). On a free function written with
/// `self`, rustc's own error follows the macro's and says the same.
pub(crate) fn strip_refused_parameters(sig: &mut Signature) {
    sig.variadic = None;
    for arg in &mut sig.inputs {
        if let FnArg::Typed(typed) = arg {
            typed.attrs.retain(is_parameter_attribute);
        }
    }
}

/// The attributes a handler's parameter may carry: lint levels, and a `cfg_attr` that applies
/// only such attributes. rustc takes `cfg` too, but a parameter configured out would leave the
/// generated call with an argument too many ([`configures_out`]); any other attribute is refused
/// by [`read`], and every refused one is removed by [`strip_refused_parameters`].
fn is_parameter_attribute(attr: &syn::Attribute) -> bool {
    ["allow", "warn", "deny", "forbid", "expect"]
        .iter()
        .any(|name| attr.path().is_ident(name))
        || (attr.path().is_ident("cfg_attr") && !configures_out(attr))
}

/// Whether `attr` can configure its parameter out: `#[cfg(...)]`, or a `#[cfg_attr(...)]` that
/// applies one (or whose arguments do not read as a predicate and attributes).
fn configures_out(attr: &syn::Attribute) -> bool {
    if attr.path().is_ident("cfg") {
        return true;
    }
    if !attr.path().is_ident("cfg_attr") {
        return false;
    }
    let parsed = attr.parse_args_with(
        syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
    );
    parsed.map_or(true, |metas| {
        metas
            .iter()
            .skip(1)
            .any(|meta| meta.path().is_ident("cfg") || meta.path().is_ident("cfg_attr"))
    })
}

pub(crate) fn read(cx: &Ctxt, sig: &Signature, in_impl: bool) -> HandlerSignature {
    if sig.asyncness.is_none() {
        cx.error_spanned_by(sig.fn_token, "a capability handler must be an `async fn`");
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(&sig.generics, "a capability handler cannot be generic: its input and output types fix the published schemas");
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a capability handler cannot be variadic");
    }
    let mut has_receiver = false;
    let mut refused_input = false;
    let mut params: Vec<Param> = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(receiver) => {
                has_receiver = true;
                if !in_impl {
                    cx.error_spanned_by(
                        receiver,
                        "`self` is only allowed on handlers inside a `#[connector]` impl block: put `#[connector(id = \"...\")]` on the impl block this method is in; in a trait impl (`impl Trait for Type`), which cannot be a connector, move the handler to an inherent `impl Type` block with `#[connector]` and have the trait's method call it (a free capability function takes no `self`)",
                    );
                } else if !takes_shared_self(receiver) {
                    cx.error_spanned_by(receiver, "a capability handler takes `&self` (or `self: &Self`), without a lifetime: the host calls handlers concurrently, so they cannot take `self` by value or `&mut self`, and each call borrows the connector for that call only (`&'static self` would need the connector borrowed for ever)");
                }
            }
            FnArg::Typed(typed) => {
                // rmcp-style parameter docs (`/// ...`, `#[schemars(description = ...)]`): the
                // input is one type, and its fields carry the descriptions. Said here, on the
                // attribute, rather than left to rustc's "only allowed built-in attributes".
                if let Some(attr) = typed.attrs.iter().find(|a| configures_out(a)) {
                    cx.error_spanned_by(attr, diagnostics::PARAMETER_CFG.message);
                } else if let Some(attr) = typed.attrs.iter().find(|a| !is_parameter_attribute(a)) {
                    cx.error_spanned_by(attr, diagnostics::PARAMETER_ATTRIBUTE.message);
                }
                let ty = (*typed.ty).clone();
                let span = typed.ty.span();
                if let Some(state) = state_type(&ty) {
                    if in_impl {
                        cx.error_spanned_by(&typed.ty, diagnostics::STATE_IN_CONNECTOR.message);
                        continue;
                    }
                    if borrows(state) {
                        cx.error_spanned_by(state, diagnostics::BORROWED_STATE.message);
                        continue;
                    }
                    if params.iter().any(|p| matches!(p.role, Role::State)) {
                        cx.error_spanned_by(&typed.ty, "the handler already takes `State<S>`; a handler takes one state: the connector's, or one type holding what it needs, given by the connector's state through `FromRef`");
                    }
                    let role = Role::State;
                    params.push(Param { ty, role, span });
                    continue;
                }
                let role = match Extractor::from_type(&ty) {
                    Some(kind) => {
                        if params
                            .iter()
                            .any(|p| matches!(p.role, Role::Extractor(k) if k == kind))
                        {
                            cx.error_spanned_by(&typed.ty, format!("the handler already takes `{}`; take each extractor at most once", kind.name()));
                        }
                        Role::Extractor(kind)
                    }
                    None if wrapped_state(&ty).is_some() => {
                        let written = wrapped_state(&ty).unwrap_or_default();
                        cx.error_spanned_by(&typed.ty, format!("`{written}` is not the connector's state; take `State<S>` by value: each call gets its own clone of the state, so what must be shared goes in an `Arc` inside `S`"));
                        continue;
                    }
                    None => match wrapped_extractor(&ty) {
                        // Reported as what it was meant to be and left out, so it is neither a
                        // second input nor a duplicate of the extractor taken by value.
                        Some((kind, written)) => {
                            cx.error_spanned_by(
                                &typed.ty,
                                wrapped_extractor_message(kind, &written),
                            );
                            continue;
                        }
                        None => {
                            if params.iter().any(|p| matches!(p.role, Role::Input)) {
                                refused_input = true;
                                cx.error_spanned_by(&typed.ty, second_input_message(&ty));
                            }
                            Role::Input
                        }
                    },
                };
                params.push(Param { ty, role, span });
            }
        }
    }
    // The input's own type, checked once there is exactly one (two inputs are one mistake,
    // reported above). Reported here, on the parameter: otherwise rustc reports it inside the
    // generated decoder ("missing lifetime specifier", "`impl Trait` is not allowed in paths"),
    // or, for a type that is not an object, nothing does until `Host::build`.
    let mut inputs = params.iter().filter(|p| matches!(p.role, Role::Input));
    if let (Some(input), None) = (inputs.next(), inputs.next())
        && let Some(message) = unfit_input(&input.ty)
    {
        cx.error_spanned_by(&input.ty, message);
    }
    let output = match &sig.output {
        ReturnType::Type(_, ty) => {
            if let Some(opaque) = impl_trait_in(ty) {
                cx.error_spanned_by(
                    opaque,
                    "a capability handler's output cannot be an `impl Trait`: its type fixes the published output schema, and the generated code must name it; return the type itself (`Result<Booking, ConnectorFailure>`)",
                );
            }
            Some((**ty).clone())
        }
        ReturnType::Default => {
            cx.error_spanned_by(
                &sig.ident,
                "a capability handler returns `Result<Output, ConnectorFailure>`",
            );
            None
        }
    };
    HandlerSignature {
        ident: sig.ident.clone(),
        has_receiver,
        params,
        output,
        refused_input,
    }
}
