//! Bounds on handler inputs and results, with diagnostics that explain the fix.

use aip_connector_core::model::{
    ConnectorFailure, ConnectorOperation, ErrorCategory, ProtocolError,
};
use aip_connector_core::parse::{ParseError, ParseErrorCategory};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::{DeserializeOwned, Deserializer, Unexpected, Visitor};
use serde_json::{Map, Value};

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

// `do_not_recommend`: the note above names what to derive; without it rustc appends the list of
// every type that implements the missing trait.
#[diagnostic::do_not_recommend]
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
    T: CapabilityOutput,
    E: HandlerError,
{
    type Output = T;

    fn into_result(self) -> Result<T, ConnectorFailure> {
        self.map_err(HandlerError::into_failure)
    }
}

/// A type that can be a capability's output: it serializes into `ActionResult.output` and has
/// a JSON Schema (published as `output_schema`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the output of a capability",
    label = "the handler's `Ok` type is the capability output",
    note = "derive `serde::Serialize` and `schemars::JsonSchema` for `{Self}`: `#[derive(Serialize, JsonSchema)]`"
)]
pub trait CapabilityOutput: Serialize + JsonSchema + Send + 'static {}

// `do_not_recommend`: a type that misses a bound is reported as "cannot be the output" with the
// fix above, instead of rustc's list of every type that implements `JsonSchema`.
#[diagnostic::do_not_recommend]
impl<T: Serialize + JsonSchema + Send + 'static> CapabilityOutput for T {}

/// A handler's error type: anything that converts into a [`ConnectorFailure`], which carries
/// the code, category and retry flag the host answers with.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error of a capability handler",
    label = "the handler's `Err` type must convert into `ConnectorFailure`",
    note = "a failure needs a code, a category and a retry flag, which `{Self}` does not say: return `ConnectorFailure` (`ConnectorFailure::permanent(code, message, component)` or `::temporary(..)`), e.g. `.map_err(|e| ConnectorFailure::permanent(\"acme.lookup_failed\", e.to_string(), \"acme\"))?`",
    note = "or use an error type of your own crate with `impl From<YourError> for ConnectorFailure`"
)]
pub trait HandlerError: Send {
    /// The failure the host reports.
    fn into_failure(self) -> ConnectorFailure;
}

// `do_not_recommend`: rustc then reports "cannot be the error" with the fix above, not the
// missing `From<E> for ConnectorFailure` and the unrelated `From` impls it found.
#[diagnostic::do_not_recommend]
impl<E: Into<ConnectorFailure> + Send> HandlerError for E {
    fn into_failure(self) -> ConnectorFailure {
        self.into()
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
    let decoded = match input {
        Value::Object(members) => T::deserialize(ObjectInput(members)),
        other => Err(not_an_object(other)),
    };
    match decoded {
        Ok(decoded) => Ok(decoded),
        Err(error) => Err(invalid_input(
            &error,
            input,
            crate::schema::input_schema::<T>,
            connector,
        )),
    }
}

/// `Action.input` as the deserializer of an input type: the members of an object.
///
/// Capability inputs have object roots. Decoding from `&Value` would also compile, for every
/// input type, the path that reads a struct from a JSON array (serde accepts one), which no valid
/// input takes; offering serde only the object keeps that code out of every connector crate.
/// Newtype wrappers and `Option` see the object through them, as they would through `&Value`.
struct ObjectInput<'de>(&'de Map<String, Value>);

impl<'de> Deserializer<'de> for ObjectInput<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.deserialize_ignored_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The decode error of an input that is not an object.
#[cold]
fn not_an_object(input: &Value) -> serde_json::Error {
    let found = match input {
        Value::Null => Unexpected::Unit,
        Value::Bool(value) => Unexpected::Bool(*value),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(text) => Unexpected::Str(text),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    };
    serde::de::Error::invalid_type(found, &"a JSON object (capability inputs are objects)")
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Booking {
        room: String,
        #[serde(default)]
        guests: u32,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Wrapped(Booking);

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum External {
        Cancel { reason: String },
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Internal {
        Hold { minutes: u32 },
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Flattened {
        #[serde(flatten)]
        booking: Booking,
        note: Option<String>,
    }

    fn decode<T: CapabilityInput>(input: Value) -> Result<T, ConnectorFailure> {
        decode_input::<T>(&input, "test")
    }

    #[test]
    fn every_object_shaped_input_type_decodes() {
        let booking = Booking {
            room: "a".into(),
            guests: 2,
        };
        let object = json!({ "room": "a", "guests": 2 });
        assert_eq!(decode::<Booking>(object.clone()).unwrap(), booking);
        assert_eq!(
            decode::<Wrapped>(object.clone()).unwrap(),
            Wrapped(Booking {
                room: "a".into(),
                guests: 2
            })
        );
        assert_eq!(
            decode::<Option<Booking>>(object.clone()).unwrap(),
            Some(booking)
        );
        assert_eq!(
            decode::<External>(json!({ "cancel": { "reason": "rain" } })).unwrap(),
            External::Cancel {
                reason: "rain".into()
            }
        );
        assert_eq!(
            decode::<Internal>(json!({ "kind": "hold", "minutes": 5 })).unwrap(),
            Internal::Hold { minutes: 5 }
        );
        assert_eq!(
            decode::<Flattened>(json!({ "room": "b", "note": "late" })).unwrap(),
            Flattened {
                booking: Booking {
                    room: "b".into(),
                    guests: 0
                },
                note: Some("late".into())
            }
        );
        assert_eq!(
            decode::<BTreeMap<String, u32>>(json!({ "x": 1 })).unwrap(),
            BTreeMap::from([("x".to_owned(), 1)])
        );
        assert_eq!(decode::<Value>(object.clone()).unwrap(), object);
    }

    #[test]
    fn decode_errors_are_invalid_input_naming_the_problem() {
        let missing = decode::<Booking>(json!({ "guests": 1 })).unwrap_err();
        assert_eq!(missing.code, codes::ACTION_INVALID_INPUT);
        assert!(
            missing.message.contains("missing field `room`"),
            "{}",
            missing.message
        );
        // A struct is not read from an array, whatever serde would allow from a `&Value`.
        let array = decode::<Booking>(json!(["a", 2])).unwrap_err();
        assert_eq!(array.code, codes::ACTION_INVALID_INPUT);
        assert!(array.message.contains("a JSON object"), "{}", array.message);
        let null = decode::<Option<Booking>>(Value::Null).unwrap_err();
        assert!(null.message.contains("a JSON object"), "{}", null.message);
    }
}
