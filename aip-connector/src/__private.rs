//! Items used only by code that `#[capability]` and `#[connector]` generate. Not public API:
//! names here may change in any release; the macro crate is pinned to this crate's exact version.
// Tables of function pointers the generated code reads; nobody prints them.
#![allow(missing_debug_implementations)]

pub use ::core::convert::From;
pub use ::core::future::ready;
pub use ::core::marker::{Send, Sync};
pub use ::core::option::Option;
pub use ::core::result::Result;
pub use ::core::unreachable;
pub use ::std::boxed::Box;
pub use ::std::string::String;
pub use ::std::sync::{Arc, OnceLock};
pub use ::std::vec::Vec;
pub use aip_connector_core::discovery::webhook_channel;

pub use aip_connector_core::ids::{CapabilityId, PrincipalId, ProfileId};
pub use aip_connector_core::model::{
    Capability, CapabilityImplementationSupport, ConnectorFailure, ConnectorOperation, Principal,
    PrincipalKind,
};
pub use aip_connector_core::rules::{ImplementationFacts, Waiver};
pub use serde_json::Value;

pub use crate::builder::{ConnectorState, FreeCapability, FromRef, State, take_state};
pub use crate::connector::{
    CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition, ReconcileOutcome,
    Reconciliation, StaticDefinition, unknown_capability,
};
pub use crate::extract::{Extractor, ExtractorKind};
pub use crate::handler::{
    CapabilityInput, HandlerError, HandlerResult, decode_input, encode_output,
};
pub use crate::invocation::{BoxFuture, InvocationContext};

/// How the generated code reads one extractor: built by [`extractor`], the one place that requires
/// the `Extractor` bound.
pub struct ExtractorOf<T> {
    /// Reads the extractor out of the invocation.
    pub extract: fn(&Arc<dyn InvocationContext>) -> Result<T, ConnectorFailure>,
}

/// The reader of extractor `T`, failing the build (in a `const`) when the macro took a parameter
/// for extractor `expected` but the type's `Extractor::KIND` says otherwise (a type that merely
/// shares an extractor's name).
///
/// The generated code calls it twice per extractor parameter: naming the type, in a `const` that
/// checks the kind at compile time, and with the type inferred from the handler's parameter, to
/// read the value. A type that is no extractor (a `StreamSink` of a non-`Serialize` item) then
/// fails the same bound at the same span twice, and rustc reports it once.
pub const fn extractor<T: Extractor>(expected: ExtractorKind) -> ExtractorOf<T> {
    if T::KIND as u8 != expected as u8 {
        panic!(
            "#[capability] recognised this parameter as an aip-connector extractor by its name, but its type is a different extractor; import extractors under their own names"
        );
    }
    ExtractorOf {
        extract: T::extract,
    }
}

/// How to describe and decode one capability's input type. Built in exactly one place per
/// capability (a generated function), so a type lacking `Deserialize`/`JsonSchema` gets one
/// diagnostic, not one per use.
pub struct InputCodec<T> {
    /// The type's input schema.
    pub schema: fn() -> Value,
    /// Decodes `Action.input`.
    pub decode: fn(&Value, &str) -> Result<T, ConnectorFailure>,
}

/// The codec of input type `T`.
pub fn input_codec<T: CapabilityInput>() -> InputCodec<T> {
    InputCodec {
        schema: crate::schema::input_schema::<T>,
        decode: decode_input::<T>,
    }
}

/// How to describe and encode one handler's result type (see [`InputCodec`]).
pub struct OutputCodec<R> {
    /// The output schema.
    pub schema: fn() -> Value,
    /// Encodes the handler's result.
    pub encode: fn(R, &str) -> Result<Value, ConnectorFailure>,
}

/// The codec of handler result type `R`.
pub fn output_codec<R: HandlerResult>() -> OutputCodec<R> {
    OutputCodec {
        schema: crate::schema::output_schema::<R::Output>,
        encode: encode_output::<R>,
    }
}

/// The input schema of a handler that takes no input: an empty, closed object, declared in
/// Draft 2020-12 like every schema derived from a type.
pub fn empty_input_schema() -> Value {
    serde_json::json!({
        "$schema": crate::schema::DRAFT_2020_12,
        "type": "object",
        "properties": {},
        "additionalProperties": false,
    })
}

/// The output of a reconcile handler: `Result<ReconcileOutcome, E>` (see [`ReconcileResult`]).
pub fn reconcile_result<R: ReconcileResult>(
    result: R,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    result.into_reconcile_result()
}

/// The argument of a reconcile handler, given the host's request (see [`ReconcileArgument`]).
pub fn reconcile_argument<A: ReconcileArgument>(request: Reconciliation) -> A {
    A::from_reconciliation(request)
}

/// The argument of a cancel handler, given the host's request (see [`CancelArgument`]).
pub fn cancel_argument<A: CancelArgument>(request: CancelRequest) -> A {
    A::from_cancel_request(request)
}

/// What a `reconcile = ...` companion takes. A trait, like [`ReconcileResult`], so that another
/// parameter type is one error on that parameter saying what to take: rustc's own mismatch there
/// read "expected `ProviderOperationRef`, found `Reconciliation`", which an author trial took
/// for "the parameter must be `ProviderOperationRef`".
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a reconcile handler takes",
    label = "a reconcile handler takes `Reconciliation`",
    note = "the host passes what to look up at the provider: `async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure>`, the checkpointed operation in `request.provider_operation` (docs/transactions.md)"
)]
pub trait ReconcileArgument {
    /// The argument, from the host's request.
    fn from_reconciliation(request: Reconciliation) -> Self;
}

impl ReconcileArgument for Reconciliation {
    fn from_reconciliation(request: Reconciliation) -> Self {
        request
    }
}

/// What a `cancel = ...` companion takes (see [`ReconcileArgument`] for why a trait).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a cancel handler takes",
    label = "a cancel handler takes `CancelRequest`",
    note = "the host passes the action to stop: `async fn stop(&self, request: CancelRequest) -> Result<(), ConnectorFailure>` (docs/host-runtime.md §7.2)"
)]
pub trait CancelArgument {
    /// The argument, from the host's request.
    fn from_cancel_request(request: CancelRequest) -> Self;
}

impl CancelArgument for CancelRequest {
    fn from_cancel_request(request: CancelRequest) -> Self {
        request
    }
}

/// The output of a cancel handler: `Result<(), E>` (see [`CancelResult`]).
pub fn cancel_result<R: CancelResult>(result: R) -> Result<(), ConnectorFailure> {
    result.into_cancel_result()
}

/// What a `reconcile = ...` companion returns. A trait rather than a concrete parameter type,
/// so that another return type is one error, spanned on the companion's return type, that
/// names the type to return, instead of a mismatch inside the generated code; a wrong error
/// type is still reported as the handler's is (`HandlerError`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a reconcile handler returns",
    label = "a reconcile handler returns `Result<ReconcileOutcome, ConnectorFailure>`",
    note = "answer what the provider says about the checkpointed operation: `ReconcileOutcome::Committed {{ evidence }}`, `ReconcileOutcome::NotCommitted {{ evidence }}` or `ReconcileOutcome::Pending {{ cursor }}` (docs/transactions.md)"
)]
pub trait ReconcileResult {
    /// The outcome, the error converted.
    fn into_reconcile_result(self) -> Result<ReconcileOutcome, ConnectorFailure>;
}

impl<E: HandlerError> ReconcileResult for Result<ReconcileOutcome, E> {
    fn into_reconcile_result(self) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.map_err(HandlerError::into_failure)
    }
}

/// What a `cancel = ...` companion returns (see [`ReconcileResult`] for why a trait).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a cancel handler returns",
    label = "a cancel handler returns `Result<(), ConnectorFailure>`",
    note = "the companion stops at the provider what the cancelled handler started, and answers `Ok(())` once it asked; the host answers the caller with the `cancelled` result itself (docs/host-runtime.md §7.2)"
)]
pub trait CancelResult {
    /// The result, the error converted.
    fn into_cancel_result(self) -> Result<(), ConnectorFailure>;
}

impl<E: HandlerError> CancelResult for Result<(), E> {
    fn into_cancel_result(self) -> Result<(), ConnectorFailure> {
        self.map_err(HandlerError::into_failure)
    }
}

/// What the macro knows about one capability at compile time, plus its run-time schemas.
pub struct GeneratedCapability<'a> {
    /// The capability serialized at compile time, without its schemas.
    pub capability_json: &'a str,
    /// The input schema derived at run time.
    pub input_schema: Value,
    /// The output schema derived at run time.
    pub output_schema: Value,
    /// The support record derived from the signature.
    pub support: CapabilityImplementationSupport,
    /// Whether a `validate = ...` companion exists.
    pub validation_handler: bool,
    /// Whether the handler takes `Compensation`.
    pub compensation_handler: bool,
    /// Whether the handler takes a `StreamSink` (it runs only when streamed).
    pub stream_required: bool,
    /// Example inputs (JSON checked at compile time).
    pub examples: &'a [&'a str],
    /// Tags.
    pub tags: &'a [&'a str],
    /// Waivers as `(code, reason)`.
    pub waivers: &'a [(&'a str, &'a str)],
    /// The doc comment's parts when one of them is an expression (`#[doc = include_str!(..)]`),
    /// which the macro cannot read: the description is joined from them here.
    pub description_parts: Option<&'a [&'a str]>,
}

/// Assembles a capability definition.
///
/// # Panics
///
/// Panics if `capability_json` is not a capability, which would be a bug in the macro (the JSON
/// is produced by serializing a `Capability` at compile time).
pub fn capability_definition(generated: GeneratedCapability<'_>) -> CapabilityDefinition {
    let GeneratedCapability {
        capability_json,
        input_schema,
        output_schema,
        support,
        validation_handler,
        compensation_handler,
        stream_required,
        examples,
        tags,
        waivers,
        description_parts,
    } = generated;
    let mut capability: Capability = serde_json::from_str(capability_json)
        .expect("aip-connector-macros produced an invalid capability; please report this bug");
    capability.input_schema = input_schema;
    capability.output_schema = Some(output_schema);
    if let Some(parts) = description_parts {
        capability.description = Capability::description_from_doc(parts.iter().copied());
    }
    let waivers = waivers
        .iter()
        .map(|(code, reason)| Waiver {
            capability_id: capability.id.clone(),
            code: (*code).to_owned(),
            reason: (*reason).to_owned(),
        })
        .collect();
    CapabilityDefinition {
        facts: ImplementationFacts {
            support,
            validation_handler,
            compensation_handler,
            stream_required,
        },
        examples: examples
            .iter()
            .map(|e| serde_json::from_str(e).expect("examples are checked at compile time"))
            .collect(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        waivers,
        capability,
    }
}

/// The profile a connector speaks when it names none.
pub const DEFAULT_PROFILE: &str = aip_connector_core::ids::profiles::NATIVE_HTTP;

/// The provider principal of a connector.
pub fn agent(id: &str, display_name: Option<String>) -> Principal {
    let mut agent = Principal::new(id, PrincipalKind::Service);
    agent.display_name = display_name;
    agent
}

/// JSON checked at compile time (connector `compatibility`).
///
/// # Panics
///
/// Panics if `text` is not JSON, which the macro rules out at compile time.
pub fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).expect("checked by #[connector] at compile time")
}

/// The output of a validation handler.
pub fn encode_validation<R: HandlerResult>(
    result: R,
    connector: &str,
) -> Result<Value, ConnectorFailure> {
    encode_output(result, connector)
}

/// The future of a call that failed before its handler ran (the input did not decode).
/// Not generic: one copy serves every capability.
pub fn failed_future(
    failure: ConnectorFailure,
) -> BoxFuture<'static, Result<Value, ConnectorFailure>> {
    Box::pin(::core::future::ready(Err(failure)))
}

/// A companion handler this capability does not have.
pub fn unsupported_companion<'a, T: Send + 'a>(
    operation: ConnectorOperation,
    connector: &str,
) -> BoxFuture<'a, Result<T, ConnectorFailure>> {
    let failure = ConnectorFailure::unsupported(operation, connector);
    Box::pin(::core::future::ready(Err(failure)))
}
