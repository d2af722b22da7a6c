//! Bounds on handler inputs and results, with diagnostics that explain the fix.

use aip_connector_core::model::{
    ConnectorFailure, ConnectorOperation, ErrorCategory, ProtocolError,
};
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
/// `action.invalid_input`, permanent, with the JSON path of the offending field.
pub fn decode_input<T: CapabilityInput>(
    input: Value,
    connector: &str,
) -> Result<T, ConnectorFailure> {
    aip_connector_core::parse::from_value(input).map_err(|error| {
        let protocol = ProtocolError::invalid_input(error.to_string());
        ConnectorFailure::from_protocol_error(&protocol, ConnectorOperation::Invocation, connector)
    })
}

/// Encodes a handler's result.
pub fn encode_output<R: HandlerResult>(
    result: R,
    connector: &str,
) -> Result<Value, ConnectorFailure> {
    let output = result.into_result()?;
    serde_json::to_value(output).map_err(|error| {
        ConnectorFailure::new(
            codes::OUTPUT_UNSERIALIZABLE,
            format!("handler output could not be serialized: {error}"),
            ErrorCategory::Connector,
            ConnectorOperation::Invocation,
            connector,
        )
    })
}
