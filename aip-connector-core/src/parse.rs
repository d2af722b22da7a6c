//! Typed parsing of untrusted JSON text into wire types.
//!
//! Every error names where it happened: a JSON Pointer to the offending value (built with
//! `serde_path_to_error`), the line and column for text input, and whether the text was not JSON
//! at all, ended early, or was JSON of the wrong shape. serde_json's recursion limit (128) stays
//! on, so hostile nesting is a [`ParseError`], never a stack overflow.
//!
//! Paths stop where serde buffers input before choosing a type: inside internally tagged enums
//! (`MessagePart`, `ApproverSelector`, `ApprovalRule`) and flattened maps (`Binding`) the pointer
//! names the enclosing value (for a missing field: the enclosing value plus the field's name,
//! which for a nested `ApprovalRule` child is the outermost rule, not the child).

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

use crate::issue::pointer_join;
use crate::model::{Action, Capability, CapabilityContract, Manifest};

/// What sort of parse failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseErrorCategory {
    /// The text is not valid JSON (including nesting deeper than the recursion limit).
    Syntax,
    /// The JSON is valid but does not have the expected shape.
    Data,
    /// The text ended in the middle of a value.
    Eof,
}

impl fmt::Display for ParseErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseErrorCategory::Syntax => "syntax error",
            ParseErrorCategory::Data => "invalid data",
            ParseErrorCategory::Eof => "unexpected end of input",
        })
    }
}

/// A 1-based position in the input text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TextPosition {
    /// Line, starting at 1.
    pub line: usize,
    /// Column, starting at 1.
    pub column: usize,
}

/// Why untrusted JSON could not be read as the requested type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(self))]
pub struct ParseError {
    /// Syntax, data or end-of-input.
    pub category: ParseErrorCategory,
    /// JSON Pointer to the offending value; `""` is the document root. For a missing field it
    /// points at where the field should be.
    pub path: String,
    /// Position in the text, when the input was text.
    pub position: Option<TextPosition>,
    /// serde's description, without the position.
    pub message: String,
}

/// `{category} at {pointer} (line L, column C): {message}`; the root is named in words.
fn render(error: &ParseError) -> String {
    let at = if error.path.is_empty() {
        "the document root"
    } else {
        &error.path
    };
    match error.position {
        Some(p) => format!(
            "{} at {at} (line {}, column {}): {}",
            error.category, p.line, p.column, error.message
        ),
        None => format!("{} at {at}: {}", error.category, error.message),
    }
}

impl ParseError {
    /// Builds the error from a failure serde_path_to_error tracked to a path.
    fn tracked(error: &serde_path_to_error::Error<serde_json::Error>) -> Self {
        Self::at(pointer_from_path(error.path()), error.inner())
    }

    /// Builds the error from serde_json's error, found at `pointer`.
    fn at(mut pointer: String, inner: &serde_json::Error) -> Self {
        let position = (inner.line() > 0).then(|| TextPosition {
            line: inner.line(),
            column: inner.column(),
        });
        let message = strip_position(&inner.to_string(), position);
        if let Some(field) = missing_field_name(&message) {
            pointer = pointer_join(&pointer, field);
        }
        Self {
            category: category_of(inner),
            path: pointer,
            position,
            message,
        }
    }
}

/// Parses a manifest.
pub fn parse_manifest(text: &str) -> Result<Manifest, ParseError> {
    parse_json(text)
}

/// Parses one capability.
pub fn parse_capability(text: &str) -> Result<Capability, ParseError> {
    parse_json(text)
}

/// Parses an action.
pub fn parse_action(text: &str) -> Result<Action, ParseError> {
    parse_json(text)
}

/// Parses a capability contract.
pub fn parse_contract(text: &str) -> Result<CapabilityContract, ParseError> {
    parse_json(text)
}

/// Parses JSON text as `T`, rejecting trailing characters after the value.
pub fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T, ParseError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|e| ParseError::tracked(&e))?;
    // Anything after the value is outside every path: report it at the root.
    deserializer
        .end()
        .map_err(|e| ParseError::at(String::new(), &e))?;
    Ok(value)
}

/// Reads an already-parsed JSON value as `T`; errors carry a path but no position.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ParseError> {
    serde_path_to_error::deserialize(value).map_err(|e| ParseError::tracked(&e))
}

/// Renders serde_path_to_error's path as a JSON Pointer. An unknown segment ends the pointer
/// there, so it names the deepest ancestor known for sure.
fn pointer_from_path(path: &serde_path_to_error::Path) -> String {
    let mut pointer = String::new();
    for segment in path {
        pointer = match segment {
            Segment::Seq { index } => pointer_join(&pointer, index),
            Segment::Map { key } => pointer_join(&pointer, key),
            Segment::Enum { variant } => pointer_join(&pointer, variant),
            Segment::Unknown => break,
        };
    }
    pointer
}

/// The field named by serde's "missing field `x`" message, so the pointer can name it too.
fn missing_field_name(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

/// serde_json appends " at line L column C" to its messages; the position is kept separately.
fn strip_position(message: &str, position: Option<TextPosition>) -> String {
    match position {
        Some(p) => {
            let suffix = format!(" at line {} column {}", p.line, p.column);
            message.strip_suffix(&suffix).unwrap_or(message).to_owned()
        }
        None => message.to_owned(),
    }
}

/// Maps serde_json's error class onto ours.
fn category_of(error: &serde_json::Error) -> ParseErrorCategory {
    match error.classify() {
        serde_json::error::Category::Data => ParseErrorCategory::Data,
        serde_json::error::Category::Eof => ParseErrorCategory::Eof,
        // Reading from a string cannot fail with I/O; treat anything else as unreadable text.
        serde_json::error::Category::Syntax | serde_json::error::Category::Io => {
            ParseErrorCategory::Syntax
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{IdempotencyRequirement, MessagePart};

    fn manifest_json() -> Value {
        json!({
            "manifest_version": "aip-manifest/v1",
            "agent": {"id": "svc:calendar", "kind": "service"},
            "capabilities": [{
                "id": "cap:calendar:booking:create",
                "name": "Create booking",
                "kind": "tool",
                "input_schema": {"type": "object"},
                "contract": {
                    "side_effects": ["write"],
                    "idempotency": {
                        "requirement": "required",
                        "collision_behavior": "return_original_result",
                        "key_scope": "tenant"
                    },
                    "execution": {
                        "supports_sync": true,
                        "supports_async": false,
                        "supports_streaming": false,
                        "supports_cancel": false,
                        "supports_retry": false,
                        "expected_completion": "sync",
                        "retry_safety": "unsafe"
                    },
                    "data": {
                        "sensitivity": "internal",
                        "contains_pii": false,
                        "redaction_required": false
                    }
                }
            }],
            "profiles": ["aip.native.http.v1"]
        })
    }

    #[test]
    fn a_valid_manifest_parses() {
        let manifest = parse_manifest(&manifest_json().to_string()).unwrap();
        let contract = manifest.capabilities[0].contract.as_ref().unwrap();
        assert_eq!(
            contract.idempotency.requirement,
            IdempotencyRequirement::Required
        );
    }

    #[test]
    fn wrong_enum_value_deep_inside_a_manifest_names_its_pointer() {
        let mut manifest = manifest_json();
        manifest["capabilities"][0]["contract"]["idempotency"]["requirement"] = json!("sometimes");
        let error = parse_manifest(&serde_json::to_string_pretty(&manifest).unwrap()).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Data);
        assert_eq!(
            error.path,
            "/capabilities/0/contract/idempotency/requirement"
        );
        assert!(
            error.message.starts_with("unknown variant `sometimes`"),
            "{}",
            error.message
        );
        let position = error.position.expect("text input has a position");
        assert!(position.line > 1);
        assert!(
            error.to_string().starts_with(
                "invalid data at /capabilities/0/contract/idempotency/requirement (line "
            ),
            "{error}"
        );
    }

    #[test]
    fn missing_required_field_points_where_it_belongs() {
        let mut manifest = manifest_json();
        manifest["capabilities"][0]["contract"]["execution"]
            .as_object_mut()
            .unwrap()
            .remove("retry_safety");
        let error = parse_manifest(&manifest.to_string()).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Data);
        assert_eq!(
            error.path,
            "/capabilities/0/contract/execution/retry_safety"
        );
        assert_eq!(error.message, "missing field `retry_safety`");

        let error = parse_action(r#"{"id":"act_1","capability_id":"cap:x"}"#).unwrap_err();
        assert_eq!(error.path, "/input");
        assert_eq!(error.message, "missing field `input`");
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        let error =
            parse_json::<std::collections::BTreeMap<String, u8>>(r#"{"a/b~c": "x"}"#).unwrap_err();
        assert_eq!(error.path, "/a~1b~0c");
    }

    #[test]
    fn malformed_json_reports_line_and_column() {
        let error =
            parse_action("{\n  \"id\": \"act_1\",\n  \"capability_id\" \"cap:x\"\n}").unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(
            error.position,
            Some(TextPosition {
                line: 3,
                column: 19
            })
        );
        assert_eq!(error.message, "expected `:`");
        // The key was never read, so no path was entered yet.
        assert_eq!(error.path, "");
        assert_eq!(
            error.to_string(),
            "syntax error at the document root (line 3, column 19): expected `:`"
        );
        let error = parse_action("{\"id\": \"a\", \"capability_id\": \"c\", \"input\": [1, tru]}")
            .unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(error.path, "/input/1");
    }

    #[test]
    fn truncated_json_is_eof() {
        let error = parse_contract(r#"{"side_effects": ["read""#).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Eof);
        assert!(error.position.is_some());
    }

    #[test]
    fn trailing_characters_are_rejected() {
        let error = parse_json::<Value>("{} {}").unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(error.path, "");
        assert_eq!(error.message, "trailing characters");
    }

    #[test]
    fn deep_nesting_is_a_typed_error_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        let error = parse_json::<Value>(&deep).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(error.message, "recursion limit exceeded");

        // Free-form `Value` fields inside typed documents hit the same limit.
        let action = format!(r#"{{"id":"a","capability_id":"c","input":{deep}}}"#);
        let error = parse_action(&action).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(error.message, "recursion limit exceeded");
        assert!(error.path.starts_with("/input/0/0/"), "{}", error.path);

        let mut manifest = manifest_json().to_string();
        manifest.pop();
        manifest.push_str(&format!(r#","extensions":{}}}"#, "{\"a\":".repeat(100_000)));
        let error = parse_manifest(&manifest).unwrap_err();
        assert_eq!(error.category, ParseErrorCategory::Syntax);
        assert_eq!(error.message, "recursion limit exceeded");
    }

    #[test]
    fn from_value_reports_path_without_position() {
        let error = from_value::<Action>(json!({
            "id": "a", "capability_id": "c", "input": {}, "timeout_ms": -1
        }))
        .unwrap_err();
        assert_eq!(error.path, "/timeout_ms");
        assert_eq!(error.position, None);
        assert_eq!(error.category, ParseErrorCategory::Data);
        assert!(
            error
                .to_string()
                .starts_with("invalid data at /timeout_ms: ")
        );
        let part: MessagePart = from_value(json!({"type": "text", "text": "hi"})).unwrap();
        assert_eq!(
            part,
            MessagePart::Text {
                text: "hi".into(),
                format: None
            }
        );
    }
}
