//! Bounds on handler inputs and results, with diagnostics that explain the fix.

use aip_connector_core::model::{
    ConnectorFailure, ConnectorOperation, ErrorCategory, ProtocolError,
};
use aip_connector_core::parse::{ParseError, ParseErrorCategory};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::codes;

/// A type that can be a capability's input: it deserializes from `Action.input` and has a JSON
/// Schema (which must have an object root).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the input of a capability",
    label = "this parameter is the capability input",
    note = "derive `serde::Deserialize` and `schemars::JsonSchema` for `{Self}`: `#[derive(Deserialize, JsonSchema)]`",
    note = "if this parameter is an aip-connector extractor imported under another name, import it under its own name so `#[capability]` recognises it"
)]
pub trait CapabilityInput: DeserializeOwned + JsonSchema + Send + 'static {}

impl<T: DeserializeOwned + JsonSchema + Send + 'static> CapabilityInput for T {}

/// A handler's return type: `Result<T, E>` where `T` is the output (serialized into
/// `ActionResult.output`, its schema published as `output_schema`) and `E` converts into a
/// [`ConnectorFailure`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a capability handler result",
    label = "a capability handler returns `Result<Output, Error>`",
    note = "return `Result<T, ConnectorFailure>` where `T: serde::Serialize + schemars::JsonSchema` (or any error type that implements `Into<ConnectorFailure>`)"
)]
pub trait HandlerResult: Send {
    /// The success type.
    type Output: Serialize + JsonSchema + 'static;

    /// Splits the result.
    fn into_result(self) -> Result<Self::Output, ConnectorFailure>;
}

impl<T, E> HandlerResult for Result<T, E>
where
    T: Serialize + JsonSchema + Send + 'static,
    E: Into<ConnectorFailure> + Send,
{
    type Output = T;

    fn into_result(self) -> Result<T, ConnectorFailure> {
        self.map_err(Into::into)
    }
}

/// Decodes `Action.input` into the handler's input type. A mismatch is the caller's mistake:
/// `action.invalid_input`, permanent, naming the offending field.
///
/// Only the decode call is generic; everything that builds the error is not, because this
/// function is instantiated once per capability input type and its size is build time.
pub fn decode_input<T: CapabilityInput>(
    input: &Value,
    connector: &str,
) -> Result<T, ConnectorFailure> {
    match T::deserialize(input) {
        Ok(decoded) => Ok(decoded),
        Err(error) => Err(invalid_input(
            &error,
            input,
            crate::schema::input_schema::<T>,
            connector,
        )),
    }
}

/// The `action.invalid_input` failure of a decode error.
///
/// serde's error says what was wrong but not where. Tracking the path while decoding
/// (`serde_path_to_error`) would wrap every input type's `Deserialize` in a second visitor layer
/// and cost about a tenth of a connector crate's build, so the path is found here, on the cold
/// path, from the first violation of the type's own input schema. (The host validates input
/// against that schema before dispatch, with every violation listed, so a decode error behind a
/// host is rare: a `Deserialize` impl stricter than its schema.)
#[cold]
fn invalid_input(
    error: &serde_json::Error,
    input: &Value,
    schema: fn() -> Value,
    connector: &str,
) -> ConnectorFailure {
    let path = aip_connector_core::schema::compile_draft202012(
        &schema(),
        &aip_connector_core::schema::SchemaLimits::default(),
    )
    .ok()
    .and_then(|compiled| compiled.validate(input, 1).err())
    .and_then(|violations| violations.into_iter().next())
    .map(|violation| violation.instance_path)
    .unwrap_or_default();
    let error = ParseError {
        category: ParseErrorCategory::Data,
        path,
        position: None,
        message: error.to_string(),
    };
    let protocol = ProtocolError::invalid_input(error.to_string());
    ConnectorFailure::from_protocol_error(&protocol, ConnectorOperation::Invocation, connector)
}

/// Encodes a handler's result (generic in the same minimal way as [`decode_input`]).
pub fn encode_output<R: HandlerResult>(
    result: R,
    connector: &str,
) -> Result<Value, ConnectorFailure> {
    match serde_json::to_value(result.into_result()?) {
        Ok(output) => Ok(output),
        Err(error) => Err(output_unserializable(&error, connector)),
    }
}

#[cold]
fn output_unserializable(error: &serde_json::Error, connector: &str) -> ConnectorFailure {
    ConnectorFailure::new(
        codes::OUTPUT_UNSERIALIZABLE,
        format!("handler output could not be serialized: {error}"),
        ErrorCategory::Connector,
        ConnectorOperation::Invocation,
        connector,
    )
}
