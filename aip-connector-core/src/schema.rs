//! JSON Schema handling for capability `input_schema` / `output_schema` (admission Phase B).
//!
//! - [`check_complexity`]: the safety limits upstream enforces before compiling (depth, node count,
//!   text bytes), as an iterative walk that stops at the first limit exceeded, so a hostile schema
//!   costs bounded time and memory and cannot overflow the stack.
//! - [`remote_references`]: the `$ref` scan behind `schema.remote_reference_forbidden`.
//! - [`is_valid_root`]: the root-type rule behind `schema.invalid_root`.
//! - `compile_draft202012` (feature `schema-compiler`): limits, then a Draft 2020-12 compile that
//!   never fetches anything, giving a `CompiledSchema` that reports violations with JSON
//!   Pointer instance paths.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::issue::escape_pointer_token;

/// Deepest nesting a schema may have; the root value is level 1 (upstream's 128-level limit).
pub const MAX_SCHEMA_DEPTH: usize = 128;
/// Most JSON values (objects, arrays and scalars alike) a schema may contain.
pub const MAX_SCHEMA_NODES: usize = 100_000;
/// Most bytes of object keys plus string values a schema may contain (8 MiB).
pub const MAX_SCHEMA_TEXT_BYTES: usize = 8 * 1024 * 1024;

/// Complexity limits applied to a schema before it is compiled.
///
/// Depth counts every value on the path from the root, root included: `{}` and `12` have depth
/// 1, `{"type": "string"}` has depth 2. With this reading any document `serde_json` parses with
/// its default recursion limit (at most 127 nested containers, plus a scalar leaf) fits within
/// 128 levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Deepest allowed nesting level (root = 1).
    pub max_depth: usize,
    /// Most JSON values allowed, root included.
    pub max_nodes: usize,
    /// Most bytes of object keys and string values allowed, summed over the whole schema.
    pub max_text_bytes: usize,
}

impl Default for SchemaLimits {
    /// Upstream's limits: 128 levels, 100 000 nodes, 8 MiB of text.
    fn default() -> Self {
        Self {
            max_depth: MAX_SCHEMA_DEPTH,
            max_nodes: MAX_SCHEMA_NODES,
            max_text_bytes: MAX_SCHEMA_TEXT_BYTES,
        }
    }
}

/// Why a schema was rejected before or during compilation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A complexity limit was exceeded; the text names the limit, as upstream words it.
    #[error("{0}")]
    Limit(String),
    /// The compiler rejected the schema (invalid keyword value, unresolvable `$ref`, …).
    #[error("schema compile error: {0}")]
    Compile(String),
}

/// One `$ref` whose value is not a same-document fragment (it does not start with `#`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteReference {
    /// JSON Pointer of the `$ref` key inside the schema, e.g. `/properties/a/$ref`.
    pub pointer: String,
    /// The reference text as written.
    pub reference: String,
}

/// The children of one container still to visit, for the iterative walks.
enum PendingChildren<'a> {
    Array(std::iter::Enumerate<std::slice::Iter<'a, Value>>),
    Object(serde_json::map::Iter<'a>),
}

impl<'a> PendingChildren<'a> {
    /// The children of `value` if it is a container, `None` for scalars.
    fn of(value: &'a Value) -> Option<Self> {
        match value {
            Value::Array(items) => Some(Self::Array(items.iter().enumerate())),
            Value::Object(map) => Some(Self::Object(map.iter())),
            _ => None,
        }
    }

    /// The next child: its key (objects) or index (arrays) as a pointer token, and its value.
    fn next_child(&mut self) -> Option<(ChildKey<'a>, &'a Value)> {
        match self {
            Self::Array(items) => items
                .next()
                .map(|(index, item)| (ChildKey::Index(index), item)),
            Self::Object(entries) => entries
                .next()
                .map(|(key, item)| (ChildKey::Key(key.as_str()), item)),
        }
    }
}

/// How a child hangs off its parent.
enum ChildKey<'a> {
    Index(usize),
    Key(&'a str),
}

/// Running totals of the complexity walk, checked after every increment.
struct ComplexityTally<'l> {
    limits: &'l SchemaLimits,
    nodes: usize,
    text_bytes: usize,
}

impl ComplexityTally<'_> {
    /// Counts one value found at `depth`; fails once depth, node or text limits are exceeded.
    fn count_value(&mut self, value: &Value, depth: usize) -> Result<(), SchemaError> {
        if depth > self.limits.max_depth {
            return Err(SchemaError::Limit(format!(
                "schema exceeds the {}-level nesting limit",
                self.limits.max_depth
            )));
        }
        self.nodes += 1;
        if self.nodes > self.limits.max_nodes {
            return Err(SchemaError::Limit(format!(
                "schema exceeds the {}-node safety limit",
                self.limits.max_nodes
            )));
        }
        if let Value::String(text) = value {
            self.count_text(text.len())?;
        }
        Ok(())
    }

    /// Adds key or string bytes; fails once the text limit is exceeded.
    fn count_text(&mut self, bytes: usize) -> Result<(), SchemaError> {
        self.text_bytes = self.text_bytes.saturating_add(bytes);
        if self.text_bytes > self.limits.max_text_bytes {
            return Err(SchemaError::Limit(format!(
                "schema exceeds the {}-byte text safety limit",
                self.limits.max_text_bytes
            )));
        }
        Ok(())
    }
}

/// Rejects schemas too deep, too large or too wordy to compile safely (upstream's pre-compile
/// limits).
///
/// The walk keeps its own stack of at most `max_depth` open containers and stops at the first
/// limit exceeded, so its cost is bounded by the limits, not by the size of `schema`.
pub fn check_complexity(schema: &Value, limits: &SchemaLimits) -> Result<(), SchemaError> {
    let mut tally = ComplexityTally {
        limits,
        nodes: 0,
        text_bytes: 0,
    };
    tally.count_value(schema, 1)?;
    let mut open: Vec<PendingChildren<'_>> = PendingChildren::of(schema).into_iter().collect();
    while let Some(children) = open.last_mut() {
        let Some((key, child)) = children.next_child() else {
            open.pop();
            continue;
        };
        if let ChildKey::Key(key) = key {
            tally.count_text(key.len())?;
        }
        // `open` holds one entry per ancestor of `child`, the root included.
        tally.count_value(child, open.len() + 1)?;
        if let Some(grandchildren) = PendingChildren::of(child) {
            open.push(grandchildren);
        }
    }
    Ok(())
}

/// Finds every `$ref` that points outside the document, which admission forbids unless the
/// policy allows remote schema references.
///
/// Like upstream this is not keyword-aware: any object key `"$ref"` with a string value not
/// starting with `#` counts, even inside `const`, `enum` or `examples` data. Results are in
/// depth-first pre-order, keys in document order. The walk is iterative, so any depth is safe.
pub fn remote_references(schema: &Value) -> Vec<RemoteReference> {
    let mut found = Vec::new();
    // The pointer of the container on top of `open`; each entry remembers the pointer length
    // to restore when it is closed.
    let mut pointer = String::new();
    let mut open: Vec<(PendingChildren<'_>, usize)> = PendingChildren::of(schema)
        .map(|children| (children, 0))
        .into_iter()
        .collect();
    while let Some((children, _)) = open.last_mut() {
        let Some((key, child)) = children.next_child() else {
            if let Some((_, parent_len)) = open.pop() {
                pointer.truncate(parent_len);
            }
            continue;
        };
        if let (ChildKey::Key("$ref"), Value::String(reference)) = (&key, child)
            && !reference.starts_with('#')
        {
            found.push(RemoteReference {
                pointer: format!("{pointer}/{}", escape_pointer_token("$ref")),
                reference: reference.clone(),
            });
        }
        if let Some(grandchildren) = PendingChildren::of(child) {
            let parent_len = pointer.len();
            pointer.push('/');
            match key {
                ChildKey::Index(index) => pointer.push_str(&index.to_string()),
                ChildKey::Key(key) => pointer.push_str(&escape_pointer_token(key)),
            }
            open.push((grandchildren, parent_len));
        }
    }
    found
}

/// A JSON Schema root must be an object or a boolean (`schema.invalid_root`).
pub fn is_valid_root(schema: &Value) -> bool {
    matches!(schema, Value::Object(_) | Value::Bool(_))
}

#[cfg(feature = "schema-compiler")]
pub use compiler::{CompiledSchema, SchemaViolation, compile_draft202012};

#[cfg(feature = "schema-compiler")]
mod compiler {
    use std::fmt;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::Arc;

    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use jsonschema::error::ValidationErrorKind;

    use super::{SchemaError, SchemaLimits, check_complexity};
    use crate::issue::escape_pointer_token;

    /// One way an instance fails its schema.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct SchemaViolation {
        /// JSON Pointer of the failing part of the instance (`""` for the whole instance).
        pub instance_path: String,
        /// JSON Pointer of the failing keyword inside the schema.
        pub schema_path: String,
        /// The validator's description of the failure; it may quote the failing value.
        pub message: String,
        /// The failure told from the schema's side only, quoting no part of the instance: the
        /// property a `required` names, the expected type, the limit, the pattern or format
        /// (`"title" is a required property`, `value is shorter than 3 characters`). Unexpected
        /// properties are counted, not named, since a map's keys can be data. This is what a
        /// capability that requires redaction may report in place of `message`.
        #[serde(default)]
        pub value_free_message: String,
    }

    /// The message and where in the instance it applies, the root named in words:
    /// `"title" is a required property (at the root)`, or the pointer in backticks
    /// (``… (at `/items/0`)``).
    impl fmt::Display for SchemaViolation {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.instance_path.is_empty() {
                write!(f, "{} (at the root)", self.message)
            } else {
                write!(f, "{} (at `{}`)", self.message, self.instance_path)
            }
        }
    }

    /// A compiled Draft 2020-12 schema; cheap to clone and shareable across threads.
    #[derive(Clone)]
    pub struct CompiledSchema {
        validator: Arc<jsonschema::Validator>,
    }

    impl fmt::Debug for CompiledSchema {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("CompiledSchema").finish_non_exhaustive()
        }
    }

    impl CompiledSchema {
        /// Checks `instance`; on failure returns its violations in validator order, at most
        /// `max_errors` of them but always at least one.
        pub fn validate(
            &self,
            instance: &Value,
            max_errors: usize,
        ) -> Result<(), Vec<SchemaViolation>> {
            // Most instances are valid: `is_valid` answers without building error values,
            // and the violations are collected only for the rare instance that fails.
            if self.validator.is_valid(instance) {
                return Ok(());
            }
            let violations: Vec<SchemaViolation> = self
                .validator
                .iter_errors(instance)
                .take(max_errors.max(1))
                .map(|error| SchemaViolation {
                    instance_path: error.instance_path().as_str().to_owned(),
                    schema_path: error.schema_path().as_str().to_owned(),
                    message: choices_message(&error).unwrap_or_else(|| error.to_string()),
                    value_free_message: value_free_message(&error, "value"),
                })
                .collect();
            if violations.is_empty() {
                Ok(())
            } else {
                Err(violations)
            }
        }

        /// Whether `instance` satisfies the schema.
        pub fn is_valid(&self, instance: &Value) -> bool {
            self.validator.is_valid(instance)
        }
    }

    /// At most this many allowed values are listed in one message.
    const MAX_LISTED_CHOICES: usize = 20;

    /// For an `anyOf`/`oneOf` that no branch matches, where every branch allows a finite set of
    /// values (a `const`, an `enum`, `null`, or another such union: what schemars makes of a
    /// unit-variant enum, documented or not, and of an `Option` of one), the values the
    /// instance could have been: `"pending" is not one of "open", "closed" or null`. The
    /// validator's own message names only the keyword (`is not valid under any of the schemas
    /// listed in the 'anyOf' keyword`), of a schema a client may never have seen (the MCP
    /// projection inlines and collapses unions), so a caller could not correct its value.
    fn choices_message(error: &jsonschema::ValidationError<'_>) -> Option<String> {
        let alternatives = union_choices(error)?;
        Some(format!("{} is not one of {alternatives}", error.instance()))
    }

    /// The values a failed union of values allows, listed (`"open", "closed" or null`).
    fn union_choices(error: &jsonschema::ValidationError<'_>) -> Option<String> {
        let mut choices = Vec::new();
        collect_choices(error.kind(), error.instance_path().as_str(), &mut choices)?;
        listed_choices(&choices)
    }

    /// `choices` without repeats, at most [`MAX_LISTED_CHOICES`] of them named; `None` when
    /// there are none.
    fn listed_choices(choices: &[Value]) -> Option<String> {
        let mut distinct = std::collections::HashSet::new();
        let mut listed: Vec<String> = Vec::new();
        for choice in choices {
            let text = choice.to_string();
            if distinct.insert(text.clone()) {
                listed.push(text);
            }
        }
        if listed.is_empty() {
            return None;
        }
        let more = listed.len().saturating_sub(MAX_LISTED_CHOICES);
        listed.truncate(MAX_LISTED_CHOICES);
        Some(if more > 0 {
            format!("{}, or one of {more} more", listed.join(", "))
        } else {
            or_list(&listed)
        })
    }

    /// `a`, `a or b`, `a, b or c`.
    fn or_list(items: &[String]) -> String {
        match items {
            [] => String::new(),
            [only] => only.clone(),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
        }
    }

    /// `error` described with only what the schema holds (see
    /// [`SchemaViolation::value_free_message`]); `subject` names the failing value (`value`,
    /// or `a property name` below `propertyNames`). Nothing here may read `error.instance()`
    /// or a list of unexpected names.
    pub(super) fn value_free_message(
        error: &jsonschema::ValidationError<'_>,
        subject: &str,
    ) -> String {
        use ValidationErrorKind as Kind;
        use jsonschema::error::TypeKind;
        fn plural(count: impl Into<u64>, one: &str, many: &str) -> String {
            let count = count.into();
            format!("{count} {}", if count == 1 { one } else { many })
        }
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        // The failing keyword as the schema spells it.
        let keyword = error
            .schema_path()
            .as_str()
            .rsplit('/')
            .next()
            .filter(|segment| !segment.is_empty())
            .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
            .unwrap_or_else(|| error.kind().keyword().to_owned());
        // Whether the failing keyword is `name` itself, not a property or definition of that
        // name (`/properties/propertyNames` is a property).
        let path: Vec<&str> = error.schema_path().as_str().rsplit('/').take(2).collect();
        let names_keyword = |name: &str| {
            path.first() == Some(&name)
                && !matches!(
                    path.get(1),
                    Some(
                        &("properties"
                            | "patternProperties"
                            | "$defs"
                            | "definitions"
                            | "dependentSchemas")
                    )
                )
        };
        match error.kind() {
            Kind::Required { property } => format!("{property} is a required property"),
            Kind::Type {
                kind: TypeKind::Single(expected),
            } => format!(r#"{subject} is not of type "{expected}""#),
            Kind::Type {
                kind: TypeKind::Multiple(expected),
            } => {
                let types: Vec<String> = expected.iter().map(|t| format!(r#""{t}""#)).collect();
                format!("{subject} is not of type {}", or_list(&types))
            }
            Kind::Minimum { limit } => format!("{subject} is less than the minimum of {limit}"),
            Kind::Maximum { limit } => {
                format!("{subject} is greater than the maximum of {limit}")
            }
            Kind::ExclusiveMinimum { limit } => {
                format!("{subject} is less than or equal to the exclusive minimum of {limit}")
            }
            Kind::ExclusiveMaximum { limit } => {
                format!("{subject} is greater than or equal to the exclusive maximum of {limit}")
            }
            Kind::MultipleOf { multiple_of } => {
                format!("{subject} is not a multiple of {multiple_of}")
            }
            Kind::MinLength { limit } => format!(
                "{subject} is shorter than {}",
                plural(*limit, "character", "characters")
            ),
            Kind::MaxLength { limit } => format!(
                "{subject} is longer than {}",
                plural(*limit, "character", "characters")
            ),
            Kind::MinItems { limit } => {
                format!("array has fewer than {}", plural(*limit, "item", "items"))
            }
            Kind::MaxItems { limit } => {
                format!("array has more than {}", plural(*limit, "item", "items"))
            }
            Kind::MinProperties { limit } => format!(
                "object has fewer than {}",
                plural(*limit, "property", "properties")
            ),
            Kind::MaxProperties { limit } => format!(
                "object has more than {}",
                plural(*limit, "property", "properties")
            ),
            Kind::Pattern { pattern } => format!(r#"{subject} does not match "{pattern}""#),
            Kind::BacktrackLimitExceeded { .. } | Kind::RegexEngineFailure { .. } => {
                format!(r#"{subject} could not be matched against the "pattern" keyword"#)
            }
            Kind::Format { format } => format!(r#"{subject} is not a valid "{format}""#),
            Kind::Enum { options } => match options.as_array().and_then(|o| listed_choices(o)) {
                Some(alternatives) => format!("{subject} is not one of {alternatives}"),
                None => format!("{subject} is not one of the allowed values"),
            },
            Kind::Constant { expected_value } => format!("{subject} is not {expected_value}"),
            Kind::AnyOf { .. } | Kind::OneOfNotValid { .. } => match union_choices(error) {
                Some(alternatives) => format!("{subject} is not one of {alternatives}"),
                None => format!(
                    r#"{subject} is not valid under any of the schemas listed in "{keyword}""#
                ),
            },
            Kind::OneOfMultipleValid { .. } => format!(
                r#"{subject} is valid under more than one of the schemas listed in "oneOf""#
            ),
            Kind::Not { .. } => format!(r#"{subject} matches the schema in "not""#),
            Kind::FalseSchema if names_keyword("propertyNames") => {
                r#"object has properties, and "propertyNames" is false"#.to_owned()
            }
            Kind::FalseSchema => format!("{subject} is not allowed here (the schema is false)"),
            // jsonschema reports `minContains` and `maxContains` as `contains` failures too.
            Kind::Contains if names_keyword("maxContains") => {
                r#"array has more items matching the "contains" schema than "maxContains" allows"#
                    .to_owned()
            }
            Kind::Contains if names_keyword("minContains") => {
                r#"array has fewer items matching the "contains" schema than "minContains" requires"#
                    .to_owned()
            }
            Kind::Contains => r#"no item of the array matches the "contains" schema"#.to_owned(),
            Kind::UniqueItems => "array has non-unique items".to_owned(),
            Kind::AdditionalItems { limit } => format!(
                "array has more items than the {} the schema allows",
                plural(count(*limit), "item", "items")
            ),
            Kind::UnevaluatedItems { unexpected } => format!(
                "array has {} the schema does not allow",
                plural(count(unexpected.len()), "item", "items")
            ),
            Kind::AdditionalProperties { unexpected }
            | Kind::UnevaluatedProperties { unexpected } => format!(
                "object has {} the schema does not allow",
                plural(count(unexpected.len()), "property", "properties")
            ),
            Kind::PropertyNames { error: name_error } => {
                value_free_message(name_error, "a property name")
            }
            Kind::ContentEncoding { content_encoding } => {
                format!(r#"{subject} is not compliant with "{content_encoding}" content encoding"#)
            }
            Kind::ContentMediaType { content_media_type } => {
                format!(r#"{subject} is not compliant with "{content_media_type}" media type"#)
            }
            Kind::FromUtf8 { .. } => format!("{subject} does not decode to UTF-8 text"),
            // Custom keywords and reference failures: their own messages are not ours to vet.
            Kind::Custom { .. } | Kind::Referencing(_) if keyword.is_empty() => {
                format!("{subject} fails its schema")
            }
            Kind::Custom { .. } | Kind::Referencing(_) => {
                format!(r#"{subject} fails the "{keyword}" keyword"#)
            }
        }
    }

    /// Adds the values a failed union at `at` (the instance path) allows to `choices`; `None`
    /// when a branch allows more than a list of values (a type, a pattern, an object), or
    /// fails below the union's own value (a wrong field of an object branch is not a value the
    /// union lists; a hostile review found `{"state": "pending"}` told it should be `"open"`).
    fn collect_choices(
        kind: &ValidationErrorKind,
        at: &str,
        choices: &mut Vec<Value>,
    ) -> Option<()> {
        use jsonschema::error::TypeKind;
        use jsonschema::types::JsonType;
        let (ValidationErrorKind::AnyOf { context }
        | ValidationErrorKind::OneOfNotValid { context }) = kind
        else {
            return None;
        };
        for branch in context {
            // A branch fails with every keyword it breaks: an `enum` of strings given a number
            // breaks `type` too, and the enum's values are still the whole answer.
            let mut finite = false;
            for error in branch {
                if error.instance_path().as_str() != at {
                    return None;
                }
                match error.kind() {
                    ValidationErrorKind::Constant { expected_value } => {
                        choices.push(Value::clone(expected_value));
                        finite = true;
                    }
                    ValidationErrorKind::Enum { options } => {
                        choices.extend(options.as_array().into_iter().flatten().cloned());
                        finite = true;
                    }
                    ValidationErrorKind::Type {
                        kind: TypeKind::Single(JsonType::Null),
                    } if branch.len() == 1 => {
                        choices.push(Value::Null);
                        finite = true;
                    }
                    nested @ (ValidationErrorKind::AnyOf { .. }
                    | ValidationErrorKind::OneOfNotValid { .. }) => {
                        collect_choices(nested, at, choices)?;
                        finite = true;
                    }
                    ValidationErrorKind::Type { .. } => {}
                    _ => return None,
                }
            }
            if !finite {
                return None;
            }
        }
        Some(())
    }

    /// Compiles a capability schema as Draft 2020-12 after the complexity limits, the way
    /// admission check 13 does.
    ///
    /// Remote retrieval is switched off explicitly (not just by leaving out jsonschema's HTTP
    /// feature, which another crate in the build could switch back on): a `$ref` to anything
    /// outside the document is a compile error, never a fetch. A panic inside the compiler is
    /// reported as a compile error too, so bad input cannot take the caller down.
    pub fn compile_draft202012(
        schema: &Value,
        limits: &SchemaLimits,
    ) -> Result<CompiledSchema, SchemaError> {
        check_complexity(schema, limits)?;
        let validator = match build_offline(schema)? {
            Ok(validator) => validator,
            Err(error) if matches!(error.kind(), ValidationErrorKind::Referencing(_)) => {
                let message = first_unresolvable_reference(schema)?.unwrap_or(error.to_string());
                return Err(SchemaError::Compile(message));
            }
            Err(error) => return Err(SchemaError::Compile(error.to_string())),
        };
        Ok(CompiledSchema {
            validator: Arc::new(validator),
        })
    }

    /// Builds `schema` as Draft 2020-12 with remote retrieval refused; a panic inside the compiler
    /// is a compile error.
    fn build_offline(
        schema: &Value,
    ) -> Result<Result<jsonschema::Validator, jsonschema::ValidationError<'static>>, SchemaError>
    {
        let options = jsonschema::draft202012::options().offline();
        catch_unwind(AssertUnwindSafe(|| options.build(schema)))
            .map_err(|_| SchemaError::Compile("the schema compiler panicked".to_owned()))
    }

    /// At most this many `$ref`s are probed one by one for [`first_unresolvable_reference`].
    const MAX_REFERENCE_PROBES: usize = 64;

    /// The compile error of the first `$ref`, in document order, that cannot be resolved.
    ///
    /// The compiler resolves a schema's references in no fixed order, so with two unresolvable
    /// ones its error named either, and the same schema could be refused with two different
    /// messages. Each non-fragment `$ref` is compiled on its own (the others pointed at the root)
    /// until one fails: the message is then a function of the schema. `None` when no single
    /// reference fails alone (or there are too many to probe): the caller keeps the compiler's.
    fn first_unresolvable_reference(schema: &Value) -> Result<Option<String>, SchemaError> {
        let mut pointers = Vec::new();
        collect_external_references(schema, String::new(), &mut pointers);
        if pointers.len() > MAX_REFERENCE_PROBES {
            return Ok(None);
        }
        for keep in &pointers {
            let mut probe = schema.clone();
            for other in pointers.iter().filter(|p| *p != keep) {
                if let Some(reference) = probe.pointer_mut(other) {
                    *reference = Value::String("#".to_owned());
                }
            }
            if let Err(error) = build_offline(&probe)?
                && matches!(error.kind(), ValidationErrorKind::Referencing(_))
            {
                return Ok(Some(error.to_string()));
            }
        }
        Ok(None)
    }

    /// JSON Pointers (in document order) to the `$ref` values of `value` that do not start with
    /// `#`, i.e. that name a resource rather than a place in this one.
    fn collect_external_references(value: &Value, at: String, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, item) in map {
                    let pointer = format!("{at}/{}", escape_pointer_token(key));
                    if key == "$ref" && item.as_str().is_some_and(|r| !r.starts_with('#')) {
                        out.push(pointer);
                    } else {
                        collect_external_references(item, pointer, out);
                    }
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    collect_external_references(item, format!("{at}/{index}"), out);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Takes a value apart without recursion: serde_json's own `Drop` recurses once per level
    /// and would overflow the test thread's stack on the 100 000-deep values below.
    fn dismantle(value: Value) {
        let mut pending = vec![value];
        while let Some(mut value) = pending.pop() {
            match &mut value {
                Value::Array(items) => pending.append(items),
                Value::Object(map) => {
                    pending.extend(std::mem::take(map).into_iter().map(|(_, item)| item));
                }
                _ => {}
            }
        }
    }

    /// `levels` values on the root-to-leaf path: nested `{"not": …}` objects ending in `true`.
    fn nested_objects(levels: usize) -> Value {
        let mut value = Value::Bool(true);
        for _ in 1..levels {
            value = json!({ "not": value });
        }
        value
    }

    fn limits(max_depth: usize, max_nodes: usize, max_text_bytes: usize) -> SchemaLimits {
        SchemaLimits {
            max_depth,
            max_nodes,
            max_text_bytes,
        }
    }

    fn limit_message(schema: &Value, limits: &SchemaLimits) -> Option<String> {
        check_complexity(schema, limits)
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn default_limits_are_upstreams() {
        let limits = SchemaLimits::default();
        assert_eq!(
            (limits.max_depth, limits.max_nodes, limits.max_text_bytes),
            (128, 100_000, 8_388_608)
        );
    }

    #[test]
    fn depth_limit_triggers_at_one_past_the_limit() {
        let defaults = SchemaLimits::default();
        assert_eq!(limit_message(&nested_objects(128), &defaults), None);
        assert_eq!(
            limit_message(&nested_objects(129), &defaults).as_deref(),
            Some("schema exceeds the 128-level nesting limit")
        );
        assert_eq!(limit_message(&json!(12), &limits(1, 10, 10)), None);
        assert_eq!(
            limit_message(&json!([1]), &limits(1, 10, 10)).as_deref(),
            Some("schema exceeds the 1-level nesting limit")
        );
    }

    #[test]
    fn deepest_document_serde_json_parses_fits_the_depth_limit() {
        let text = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        let parsed: Value = serde_json::from_str(&text).expect("127 levels parse");
        assert_eq!(check_complexity(&parsed, &SchemaLimits::default()), Ok(()));
        let too_deep = format!("{}1{}", "[".repeat(128), "]".repeat(128));
        assert!(serde_json::from_str::<Value>(&too_deep).is_err());
    }

    #[test]
    fn node_limit_counts_every_value_and_triggers_at_one_past_the_limit() {
        // Root object, array, three numbers, one string: six values.
        let schema = json!({ "enum": [1, 2, 3], "title": "x" });
        assert_eq!(limit_message(&schema, &limits(128, 6, 1_000)), None);
        assert_eq!(
            limit_message(&schema, &limits(128, 5, 1_000)).as_deref(),
            Some("schema exceeds the 5-node safety limit")
        );
        let at_limit = Value::Array(vec![Value::Null; MAX_SCHEMA_NODES - 1]);
        assert_eq!(limit_message(&at_limit, &SchemaLimits::default()), None);
        let over_limit = Value::Array(vec![Value::Null; MAX_SCHEMA_NODES]);
        assert_eq!(
            limit_message(&over_limit, &SchemaLimits::default()).as_deref(),
            Some("schema exceeds the 100000-node safety limit")
        );
    }

    #[test]
    fn text_limit_counts_keys_and_strings_and_triggers_at_one_past_the_limit() {
        // Keys "ab" + "c" and strings "def" + "g": 7 bytes; numbers do not count.
        let schema = json!({ "ab": "def", "c": ["g", 12345] });
        assert_eq!(limit_message(&schema, &limits(128, 100, 7)), None);
        assert_eq!(
            limit_message(&schema, &limits(128, 100, 6)).as_deref(),
            Some("schema exceeds the 6-byte text safety limit")
        );
        let half = "a".repeat(MAX_SCHEMA_TEXT_BYTES / 2);
        let at_limit = json!([half, half]);
        assert_eq!(limit_message(&at_limit, &SchemaLimits::default()), None);
        let over_limit = json!([half, format!("{half}a")]);
        assert_eq!(
            limit_message(&over_limit, &SchemaLimits::default()).as_deref(),
            Some("schema exceeds the 8388608-byte text safety limit")
        );
    }

    #[test]
    fn text_bytes_are_utf8_bytes_not_characters() {
        // "é" is two bytes.
        assert_eq!(limit_message(&json!("é"), &limits(128, 10, 2)), None);
        assert!(limit_message(&json!("é"), &limits(128, 10, 1)).is_some());
    }

    #[test]
    fn very_deep_value_is_rejected_without_recursion() {
        let mut deep = Value::Null;
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        let started = std::time::Instant::now();
        assert_eq!(
            limit_message(&deep, &SchemaLimits::default()).as_deref(),
            Some("schema exceeds the 128-level nesting limit")
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        dismantle(deep);
    }

    #[test]
    fn remote_reference_scan_reports_pointers_in_pre_order() {
        let schema = json!({
            "$ref": "other.json",
            "properties": {
                "a": { "$ref": "https://example.com/a.json" },
                "local": { "$ref": "#/$defs/x" },
                "we/ird~": { "items": [{ "$ref": "" }, { "$ref": 5 }] }
            },
            "const": { "$ref": "data-not-a-keyword" },
            "$defs": { "x": { "$ref": "urn:x" } }
        });
        let found: Vec<(String, String)> = remote_references(&schema)
            .into_iter()
            .map(|r| (r.pointer, r.reference))
            .collect();
        let expected = [
            ("/$ref", "other.json"),
            ("/properties/a/$ref", "https://example.com/a.json"),
            ("/properties/we~1ird~0/items/0/$ref", ""),
            ("/const/$ref", "data-not-a-keyword"),
            ("/$defs/x/$ref", "urn:x"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(p, r)| ((*p).to_owned(), (*r).to_owned()))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn remote_reference_scan_descends_into_non_string_refs_and_handles_any_depth() {
        let schema = json!({ "$ref": { "$ref": "x.json" } });
        let found = remote_references(&schema);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pointer, "/$ref/$ref");

        let mut deep = json!({ "$ref": "deep.json" });
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        let found = remote_references(&deep);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pointer, format!("{}/$ref", "/0".repeat(100_000)));
        dismantle(deep);
    }

    #[test]
    fn remote_reference_scan_ignores_scalars_and_fragments() {
        assert!(remote_references(&json!("$ref")).is_empty());
        assert!(remote_references(&json!({ "$ref": "#" })).is_empty());
    }

    #[test]
    fn only_objects_and_booleans_are_schema_roots() {
        assert!(is_valid_root(&json!({})));
        assert!(is_valid_root(&json!(false)));
        for root in [json!(null), json!(1), json!("s"), json!([])] {
            assert!(!is_valid_root(&root), "{root}");
        }
    }

    #[test]
    fn errors_display_as_upstream() {
        assert_eq!(
            SchemaError::Compile("bad".to_owned()).to_string(),
            "schema compile error: bad"
        );
        assert_eq!(SchemaError::Limit("x".to_owned()).to_string(), "x");
    }

    #[cfg(feature = "schema-compiler")]
    mod compiled {
        use serde_json::json;

        use super::*;

        fn compile(schema: &Value) -> Result<CompiledSchema, SchemaError> {
            compile_draft202012(schema, &SchemaLimits::default())
        }

        #[test]
        fn compiled_schema_is_shareable() {
            fn assert_shareable<T: Send + Sync + Clone + std::fmt::Debug>() {}
            assert_shareable::<CompiledSchema>();
        }

        #[test]
        fn limits_are_checked_before_compiling() {
            let error = compile_draft202012(&json!({ "type": "string" }), &limits(1, 10, 100))
                .expect_err("depth 2 exceeds a 1-level limit");
            assert_eq!(
                error,
                SchemaError::Limit("schema exceeds the 1-level nesting limit".to_owned())
            );
        }

        #[test]
        fn invalid_keyword_value_is_a_compile_error() {
            let error = compile(&json!({ "type": 12 })).expect_err("type must be a string");
            assert!(matches!(error, SchemaError::Compile(_)), "{error:?}");
            assert!(error.to_string().starts_with("schema compile error: "));
        }

        #[test]
        fn non_schema_root_is_a_compile_error() {
            let error = compile(&json!(12)).expect_err("a number is no schema");
            assert!(matches!(error, SchemaError::Compile(_)), "{error:?}");
        }

        #[test]
        fn external_reference_fails_without_fetching() {
            let schema = json!({ "$ref": "https://example.com/x.json" });
            let error = compile(&schema).expect_err("retrieval is disabled");
            assert!(matches!(error, SchemaError::Compile(_)), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("https://example.com/x.json"), "{text}");
            // The offline retriever's wording: retrieval was refused, not merely unsupported
            // by the features jsonschema happens to be built with.
            assert!(text.contains("Retrieval is disabled"), "{text}");
        }

        /// Two unresolvable references: the compiler resolves them in no fixed order, the
        /// error always names the first in document order.
        #[test]
        fn the_first_unresolvable_reference_is_reported_every_time() {
            let schema = json!({
                "type": "object",
                "properties": {
                    "p": { "$ref": "other.json" },
                    "q": { "$ref": "quorum" },
                    "r": { "$ref": "#/$defs/x" }
                },
                "$defs": { "x": { "type": "string" } }
            });
            for _ in 0..20 {
                let text = compile(&schema).expect_err("unresolvable").to_string();
                assert!(text.contains("other.json"), "{text}");
                assert!(!text.contains("quorum"), "{text}");
            }
            // A resolvable reference is never the one reported.
            let text = compile(&json!({
                "properties": { "a": { "$ref": "#/$defs/x" }, "b": { "$ref": "https://example.com/y" } },
                "$defs": { "x": {} }
            }))
            .expect_err("unresolvable")
            .to_string();
            assert!(text.contains("https://example.com/y"), "{text}");
        }

        #[test]
        fn draft_2020_12_keywords_apply() {
            // `prefixItems` exists only from Draft 2020-12 on.
            let compiled =
                compile(&json!({ "prefixItems": [{ "type": "integer" }] })).expect("valid schema");
            assert!(compiled.is_valid(&json!([1, "x"])));
            assert!(!compiled.is_valid(&json!(["x"])));
        }

        #[test]
        fn violations_carry_pointers_and_are_truncated() {
            let compiled = compile(&json!({
                "type": "object",
                "properties": {
                    "a": { "type": "integer" },
                    "b": { "type": "string" },
                    "c": { "type": "boolean" }
                },
                "required": ["a"]
            }))
            .expect("valid schema");
            assert_eq!(compiled.validate(&json!({ "a": 1, "b": "x" }), 16), Ok(()));
            assert!(compiled.is_valid(&json!({ "a": 1 })));

            let bad = json!({ "a": "no", "b": 2, "c": "no" });
            let all = compiled.validate(&bad, 16).expect_err("three violations");
            let paths: Vec<&str> = all.iter().map(|v| v.instance_path.as_str()).collect();
            assert_eq!(paths, ["/a", "/b", "/c"]);
            assert_eq!(all[0].schema_path, "/properties/a/type");
            assert!(all[0].message.contains("integer"), "{}", all[0].message);

            let first_two = compiled.validate(&bad, 2).expect_err("invalid");
            assert_eq!(first_two, all[..2]);
            let at_least_one = compiled.validate(&bad, 0).expect_err("invalid");
            assert_eq!(at_least_one, all[..1]);

            let missing = compiled
                .validate(&json!({}), 16)
                .expect_err("a is required");
            assert_eq!(missing[0].instance_path, "");
        }

        /// A union of values (schemars' documented unit-variant enum, an `Option` of it) is
        /// refused with the values it allows, not with the keyword's name (found by an author
        /// trial: a model could not tell which states exist).
        #[test]
        fn a_value_outside_a_union_of_values_is_told_the_values() {
            let compiled = compile(&json!({
                "type": "object",
                "properties": {
                    "state": { "anyOf": [{ "$ref": "#/$defs/State" }, { "type": "null" }] },
                    "plain": { "type": "string", "enum": ["a", "b"] },
                    "mixed": { "anyOf": [{ "const": 1 }, { "type": "string" }] },
                    "many": { "oneOf": (0..25).map(|n| json!({ "const": n })).collect::<Vec<_>>() }
                },
                "$defs": { "State": { "oneOf": [
                    { "const": "open", "description": "Being worked on." },
                    { "const": "closed", "description": "Done." }
                ] } }
            }))
            .expect("valid schema");
            let message = |instance: Value| {
                compiled.validate(&instance, 16).expect_err("invalid")[0]
                    .message
                    .clone()
            };
            assert_eq!(
                message(json!({ "state": "pending" })),
                r#""pending" is not one of "open", "closed" or null"#
            );
            // A number where strings were expected: the values are still the whole answer.
            assert_eq!(
                message(json!({ "state": 7 })),
                r#"7 is not one of "open", "closed" or null"#
            );
            // Not a union: the validator's message, which lists the values already.
            let plain = message(json!({ "plain": "c" }));
            assert!(
                plain.contains(r#""a""#) && plain.contains(r#""b""#),
                "{plain}"
            );
            // A branch that allows a whole type: the validator's message.
            assert!(message(json!({ "mixed": 2 })).contains("'anyOf'"));
            // A wrong field below an optional object is the validator's to describe: the union's
            // own values are the object or null, not the field's.
            let nested = compile(&json!({
                "type": "object",
                "properties": { "filter": { "anyOf": [
                    { "type": "object", "properties": { "state": { "enum": ["open", "closed"] } } },
                    { "type": "null" }
                ] } }
            }))
            .expect("valid schema");
            let below = nested
                .validate(&json!({ "filter": { "state": "pending" } }), 16)
                .expect_err("invalid");
            assert!(
                !below[0].message.contains("is not one of \"open\""),
                "{}",
                below[0].message
            );
            let many = message(json!({ "many": 99 }));
            assert!(many.ends_with("19, or one of 5 more"), "{many}");
            assert!(many.starts_with("99 is not one of 0, 1, 2,"), "{many}");
        }

        const CANARY: &str = "canary-9c1e";
        /// The numeric canary: no limit below has these digits.
        const NUMBER: i64 = 98765;

        /// The value-free message of the first violation of `instance`, checked to quote no
        /// part of the canaries that `instance` holds.
        fn value_free(schema: Value, instance: Value) -> String {
            let compiled = compile(&schema).expect("valid schema");
            let violation = compiled
                .validate(&instance, 16)
                .expect_err("invalid")
                .remove(0);
            let message = violation.value_free_message;
            assert!(!message.is_empty(), "{schema} / {instance}");
            assert!(!message.contains(CANARY), "{message}");
            assert!(!message.contains("9c1e"), "{message}");
            assert!(!message.contains(&NUMBER.to_string()), "{message}");
            message
        }

        /// jsonschema reports `minContains`/`maxContains` as `contains` failures; a property
        /// named like a keyword is not that keyword (found by a review).
        #[test]
        fn contains_bounds_and_keyword_named_properties_are_told_apart() {
            let bounded =
                json!({ "contains": { "const": CANARY }, "maxContains": 1, "minContains": 1 });
            let too_many = value_free(bounded.clone(), json!([CANARY, CANARY]));
            assert!(too_many.contains("\"maxContains\""), "{too_many}");
            let none = value_free(bounded, json!([NUMBER]));
            assert!(
                none.contains("no item") || none.contains("\"minContains\""),
                "{none}"
            );
            let at_least_two = json!({ "contains": { "const": CANARY }, "minContains": 2 });
            let too_few = value_free(at_least_two, json!([CANARY, NUMBER]));
            assert!(too_few.contains("\"minContains\""), "{too_few}");

            let named = json!({ "properties": { "propertyNames": false } });
            let message = value_free(named, json!({ "propertyNames": CANARY }));
            assert_eq!(message, "value is not allowed here (the schema is false)");
        }

        #[test]
        fn a_missing_property_is_named_without_the_instance() {
            let schema = json!({ "type": "object", "required": ["title"] });
            let message = value_free(schema, json!({ "note": CANARY }));
            assert_eq!(message, r#""title" is a required property"#);
        }

        #[test]
        fn a_wrong_type_is_told_the_schemas_types() {
            let schema = json!({ "properties": { "n": { "type": "integer" } } });
            let message = value_free(schema, json!({ "n": CANARY }));
            assert_eq!(message, r#"value is not of type "integer""#);
            let schema = json!({ "type": ["integer", "null"] });
            let message = value_free(schema, json!(CANARY));
            // The validator keeps a set of types, in its own order.
            assert!(
                [
                    r#"value is not of type "integer" or "null""#,
                    r#"value is not of type "null" or "integer""#
                ]
                .contains(&message.as_str()),
                "{message}"
            );
        }

        #[test]
        fn a_limit_is_told_from_the_schema() {
            let text = json!(CANARY);
            for (schema, instance, expected) in [
                (
                    json!({ "minLength": 30 }),
                    text.clone(),
                    "value is shorter than 30 characters",
                ),
                (
                    json!({ "maxLength": 1 }),
                    text.clone(),
                    "value is longer than 1 character",
                ),
                (
                    json!({ "minimum": 10 }),
                    json!(-NUMBER),
                    "value is less than the minimum of 10",
                ),
                (
                    json!({ "maximum": 10 }),
                    json!(NUMBER),
                    "value is greater than the maximum of 10",
                ),
                (
                    json!({ "exclusiveMinimum": 0 }),
                    json!(-NUMBER),
                    "value is less than or equal to the exclusive minimum of 0",
                ),
                (
                    json!({ "exclusiveMaximum": 5 }),
                    json!(NUMBER),
                    "value is greater than or equal to the exclusive maximum of 5",
                ),
                (
                    json!({ "multipleOf": 4 }),
                    json!(NUMBER),
                    "value is not a multiple of 4",
                ),
                (
                    json!({ "minItems": 3 }),
                    json!([CANARY]),
                    "array has fewer than 3 items",
                ),
                (
                    json!({ "maxItems": 1 }),
                    json!([CANARY, CANARY]),
                    "array has more than 1 item",
                ),
                (
                    json!({ "minProperties": 2 }),
                    json!({ "a": CANARY }),
                    "object has fewer than 2 properties",
                ),
                (
                    json!({ "maxProperties": 1 }),
                    json!({ "a": CANARY, "b": CANARY }),
                    "object has more than 1 property",
                ),
            ] {
                assert_eq!(value_free(schema, instance), expected);
            }
        }

        #[test]
        fn a_pattern_or_format_is_told_from_the_schema() {
            let message = value_free(json!({ "pattern": "^[a-z]+$" }), json!(CANARY));
            assert_eq!(message, r#"value does not match "^[a-z]+$""#);
            // `compile_draft202012` leaves formats as annotations; asserted, they fail so.
            let validator = jsonschema::draft202012::options()
                .should_validate_formats(true)
                .build(&json!({ "format": "email" }))
                .expect("valid schema");
            let instance = json!(CANARY);
            let error = validator
                .iter_errors(&instance)
                .next()
                .expect("not an email");
            let message = compiler::value_free_message(&error, "value");
            assert_eq!(message, r#"value is not a valid "email""#);
        }

        #[test]
        fn values_outside_an_enum_or_const_are_told_the_schemas_values() {
            let message = value_free(json!({ "enum": ["a", 1] }), json!(CANARY));
            assert_eq!(message, r#"value is not one of "a" or 1"#);
            let message = value_free(json!({ "const": "open" }), json!(CANARY));
            assert_eq!(message, r#"value is not "open""#);
            let union = json!({ "anyOf": [{ "const": "open" }, { "type": "null" }] });
            let message = value_free(union, json!(CANARY));
            assert_eq!(message, r#"value is not one of "open" or null"#);
        }

        /// A map's keys can be data: unexpected properties are counted, not named.
        #[test]
        fn unexpected_properties_are_counted_not_named() {
            let instance = json!({ "ok": 1, CANARY: 1, "canary-9c1e-2": 2 });
            let schema = json!({ "properties": { "ok": {} }, "additionalProperties": false });
            assert_eq!(
                value_free(schema, instance.clone()),
                "object has 2 properties the schema does not allow"
            );
            let schema = json!({ "properties": { "ok": {} }, "unevaluatedProperties": false });
            assert_eq!(
                value_free(schema, instance.clone()),
                "object has 2 properties the schema does not allow"
            );
            let schema = json!({ "propertyNames": { "maxLength": 3 } });
            assert_eq!(
                value_free(schema, instance.clone()),
                "a property name is longer than 3 characters"
            );
            let schema = json!({ "propertyNames": false });
            assert_eq!(
                value_free(schema, instance),
                r#"object has properties, and "propertyNames" is false"#
            );
        }

        #[test]
        fn other_keywords_are_named_without_the_instance() {
            for (schema, instance, expected) in [
                (
                    json!({ "not": { "type": "string" } }),
                    json!(CANARY),
                    r#"value matches the schema in "not""#,
                ),
                (
                    json!({ "properties": { "x": false } }),
                    json!({ "x": CANARY }),
                    "value is not allowed here (the schema is false)",
                ),
                (
                    json!({ "uniqueItems": true }),
                    json!([CANARY, CANARY]),
                    "array has non-unique items",
                ),
                (
                    json!({ "contains": { "type": "integer" } }),
                    json!([CANARY]),
                    r#"no item of the array matches the "contains" schema"#,
                ),
                (
                    json!({ "prefixItems": [{}], "items": false }),
                    json!([1, CANARY]),
                    "value is not allowed here (the schema is false)",
                ),
                (
                    json!({ "prefixItems": [{}], "unevaluatedItems": false }),
                    json!([1, CANARY]),
                    "array has 1 item the schema does not allow",
                ),
                (
                    json!({ "oneOf": [{ "type": "string" }, { "minLength": 1 }] }),
                    json!(CANARY),
                    r#"value is valid under more than one of the schemas listed in "oneOf""#,
                ),
                (
                    json!({ "anyOf": [{ "type": "integer" }, { "minLength": 30 }] }),
                    json!(CANARY),
                    r#"value is not valid under any of the schemas listed in "anyOf""#,
                ),
            ] {
                assert_eq!(value_free(schema, instance), expected);
            }
        }

        /// A custom keyword's own message may quote the value: it is not repeated.
        #[test]
        fn a_custom_failure_does_not_repeat_its_own_message() {
            let error = jsonschema::ValidationError::custom(format!("{CANARY} is odd"));
            assert_eq!(
                compiler::value_free_message(&error, "value"),
                "value fails its schema"
            );
        }

        /// Violations stored before the value-free message existed still read back.
        #[test]
        fn a_violation_without_a_value_free_message_deserializes() {
            let violation: SchemaViolation = serde_json::from_value(json!({
                "instance_path": "/a", "schema_path": "/type", "message": "x"
            }))
            .expect("older form");
            assert_eq!(violation.value_free_message, "");
        }

        #[test]
        fn self_referential_schema_compiles_and_validation_terminates() {
            // jsonschema compiles a bare `$ref` cycle (targets are compiled once, off the call
            // stack) and the cycle constrains nothing, so every instance is valid.
            let schema = json!({ "$defs": { "a": { "$ref": "#/$defs/a" } }, "$ref": "#/$defs/a" });
            let compiled = compile(&schema).expect("jsonschema accepts a bare $ref cycle");
            assert!(compiled.is_valid(&json!({ "anything": [1, 2] })));
            assert_eq!(compiled.validate(&json!(null), 16), Ok(()));
        }

        #[test]
        fn recursive_schema_validates_nested_instances() {
            let schema = json!({
                "$defs": { "node": {
                    "type": "object",
                    "properties": { "next": { "$ref": "#/$defs/node" } }
                } },
                "$ref": "#/$defs/node"
            });
            let compiled = compile(&schema).expect("valid recursive schema");
            assert!(compiled.is_valid(&json!({ "next": { "next": {} } })));
            let violations = compiled
                .validate(&json!({ "next": { "next": 3 } }), 16)
                .expect_err("3 is not an object");
            assert_eq!(violations[0].instance_path, "/next/next");
        }
    }
}
