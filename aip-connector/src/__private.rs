//! Items used only by code that `#[capability]` and `#[connector]` generate. Not public API:
//! names here may change in any release; the macro crate is pinned to this crate's exact version.

pub use ::core::option::Option;
pub use ::core::result::Result;
pub use ::std::boxed::Box;
pub use ::std::string::String;
pub use ::std::sync::{Arc, OnceLock};
pub use ::std::vec::Vec;

pub use aip_connector_core::ids::{CapabilityId, PrincipalId, ProfileId};
pub use aip_connector_core::model::{
    Capability, CapabilityImplementationSupport, ConnectorFailure, ConnectorOperation, Principal,
    PrincipalKind,
};
pub use aip_connector_core::rules::{ImplementationFacts, Waiver};
pub use serde_json::Value;

pub use crate::builder::FreeCapability;
pub use crate::connector::{
    CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition, ReconcileOutcome,
    Reconciliation, unknown_capability,
};
pub use crate::extract::{Extractor, ExtractorKind};
pub use crate::handler::{CapabilityInput, HandlerResult, decode_input, encode_output};
pub use crate::invocation::{BoxFuture, InvocationContext};

/// Fails the build when the macro took a parameter for extractor `expected` but the type's
/// `Extractor::KIND` says otherwise (a type that merely shares an extractor's name).
pub const fn assert_extractor<T: Extractor>(expected: ExtractorKind) {
    if T::KIND as u8 != expected as u8 {
        panic!(
            "#[capability] recognised this parameter as an aip-connector extractor by its name, but its type is a different extractor; import extractors under their own names"
        );
    }
}

/// Reads one extractor out of the invocation.
pub fn extract<T: Extractor>(context: &Arc<dyn InvocationContext>) -> Result<T, ConnectorFailure> {
    T::extract(context)
}

/// The input schema of `T`.
pub fn input_schema<T: CapabilityInput>() -> Value {
    crate::schema::input_schema::<T>()
}

/// The output schema of a handler returning `R`.
pub fn output_schema<R: HandlerResult>() -> Value {
    crate::schema::output_schema::<R::Output>()
}

/// The input schema of a handler that takes no input: an empty, closed object.
pub fn empty_input_schema() -> Value {
    serde_json::json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

/// The output of a reconcile handler: `Result<ReconcileOutcome, E>`.
pub fn reconcile_result<E: Into<ConnectorFailure>>(
    result: Result<ReconcileOutcome, E>,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    result.map_err(Into::into)
}

/// The output of a cancel handler: `Result<(), E>`.
pub fn cancel_result<E: Into<ConnectorFailure>>(
    result: Result<(), E>,
) -> Result<(), ConnectorFailure> {
    result.map_err(Into::into)
}

/// Assembles a capability definition from the compile-time JSON of the capability (without its
/// schemas) and the schemas derived at run time.
///
/// # Panics
///
/// Panics if `capability_json` is not a capability, which would be a bug in the macro (the JSON
/// is produced by serializing a `Capability` at compile time).
pub fn capability_definition(
    capability_json: &str,
    input_schema: Value,
    output_schema: Value,
    support: CapabilityImplementationSupport,
    validation_handler: bool,
    examples: &[&str],
    tags: &[&str],
    waivers: &[(&str, &str)],
) -> CapabilityDefinition {
    let mut capability: Capability = serde_json::from_str(capability_json)
        .expect("aip-connector-macros produced an invalid capability; please report this bug");
    capability.input_schema = input_schema;
    capability.output_schema = Some(output_schema);
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
pub const DEFAULT_PROFILE: &str = "aip.native.http.v1";

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

/// A companion handler this capability does not have.
pub fn unsupported_companion<'a, T: Send + 'a>(
    operation: ConnectorOperation,
    connector: &str,
) -> BoxFuture<'a, Result<T, ConnectorFailure>> {
    let failure = ConnectorFailure::unsupported(operation, connector);
    Box::pin(::core::future::ready(Err(failure)))
}
