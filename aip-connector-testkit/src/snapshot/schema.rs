//! Comparing two JSON Schemas by the values they accept.
//!
//! Each difference is described by its [`Effect`] on the set of valid values: wider, narrower,
//! changed both ways (or beyond what this check can tell), or documentation only. Whether that is
//! breaking depends on the side of the call ([`Side`]): a caller's old input must stay valid, and
//! a client must never see an output the old schema did not allow.
//!
//! The comparison is structural and deliberately conservative. Keywords it understands (`type`,
//! `enum`, `const`, `properties`/`required`, bounds, `items`, `additionalProperties`, `anyOf`,
//! `oneOf`, `allOf`, local `$ref`s) are compared by meaning; any other keyword that differs is
//! reported as [`Effect::Changed`], which is breaking on both sides.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// Which side of a call a schema describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// `input_schema`: the values a caller may send.
    Input,
    /// `output_schema`: the values a client may receive.
    Output,
}

/// How a difference changes the set of values a schema accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// More values are valid than before.
    Widened,
    /// Fewer values are valid than before.
    Narrowed,
    /// Some values became valid and others invalid, or the check cannot tell which.
    Changed,
    /// Documentation only (`title`, `description`, `examples`, ...).
    Annotation,
}

/// What happened to a declared object property, when the difference is about one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PropertyEvent {
    /// Not a property addition or removal.
    None,
    /// A property was declared that was not before.
    Added {
        /// The new property is in `required`.
        required: bool,
        /// The old object schema refused undeclared properties (`additionalProperties: false`
        /// or `unevaluatedProperties: false`).
        old_closed: bool,
    },
    /// A declared property was removed.
    Removed,
}

/// One difference between two schemas.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SchemaFinding {
    /// JSON Pointer below the schema's own location (e.g. `/properties/start`).
    pub(crate) path: String,
    /// How the set of valid values changed.
    pub(crate) effect: Effect,
    /// Property addition or removal, which the manifest diff classifies by its own rules.
    pub(crate) property: PropertyEvent,
    /// What changed, for people.
    pub(crate) detail: String,
    /// The old value of the keyword, if it had one.
    pub(crate) before: Option<Value>,
    /// The new value of the keyword, if it has one.
    pub(crate) after: Option<Value>,
}

/// Keywords that only document a schema.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords holding one subschema that is `true` when absent: compared recursively.
const SUBSCHEMAS: &[&str] = &[
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
];

/// Lower bounds: a larger value (or a new bound) accepts fewer values.
const LOWER_BOUNDS: &[&str] = &[
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
];

/// Upper bounds: a smaller value (or a new bound) accepts fewer values.
const UPPER_BOUNDS: &[&str] = &[
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];

/// Assertions that can only reject values: adding one narrows, removing one widens, changing
/// one does both.
const PURE_ASSERTIONS: &[&str] = &[
    "pattern",
    "format",
    "multipleOf",
    "contentEncoding",
    "contentMediaType",
    "not",
    "contains",
    "dependentRequired",
    "dependentSchemas",
];

/// Keywords compared through the `$ref`s that point into them, never on their own.
const DEFINITIONS: &[&str] = &["$defs", "definitions"];

/// Keywords handled together with `properties`.
const OBJECT_SHAPE: &[&str] = &["properties", "required"];

/// Combinators whose branches are matched and compared one by one.
const COMBINATORS: &[&str] = &["anyOf", "oneOf", "allOf"];

/// Compares `old` with `new`, both complete schemas (their own roots for `$ref` resolution).
pub(crate) fn compare_schemas(old: &Value, new: &Value, side: Side) -> Vec<SchemaFinding> {
    let mut comparison = Comparison {
        old_root: old,
        new_root: new,
        side,
        findings: Vec::new(),
        compared_refs: HashSet::new(),
        compared_ref_pairs: HashSet::new(),
        open_refs: Vec::new(),
    };
    comparison.node(old, new, "", false);
    comparison.findings
}

/// Whether `old` and `new` differ in meaning, as far as a plain comparison can tell: local
/// `$ref`s are inlined (so renamed or unused definitions do not count) and the order of
/// unordered lists (`required`, `type`, `enum`, combinator branches) is ignored. Used as a
/// safety net: a difference that [`compare_schemas`] did not report is reported as
/// unclassified.
pub(crate) fn differ_semantically(old: &Value, new: &Value) -> bool {
    let inline = |schema: &Value| {
        let mut budget = INLINE_BUDGET;
        inlined(schema, schema, &mut Vec::new(), &mut budget)
            .filter(|_| budget > 0)
            .unwrap_or_else(|| schema.clone())
    };
    normalized(&inline(old)) != normalized(&inline(new))
}

/// Most nodes an inlined schema may have; beyond it the schema is compared as written.
const INLINE_BUDGET: usize = 200_000;

/// `value` with every pure local `$ref` replaced by its target (annotations of the reference
/// laid over it) and definitions dropped. A reference to a definition already being inlined
/// further up becomes `#enclosing/<n>` (`n` definitions up), so recursive definitions
/// terminate. `None` when the budget runs out.
fn inlined(
    value: &Value,
    root: &Value,
    open: &mut Vec<String>,
    budget: &mut usize,
) -> Option<Value> {
    *budget = budget.checked_sub(1)?;
    match value {
        Value::Object(map) => {
            if let Some(reference) = pure_local_ref(value)
                && let Some(depth) = open.iter().rev().position(|seen| seen == reference)
            {
                // A recursive reference, written relative to the definition it re-enters, so
                // that renaming a recursive type changes nothing.
                let mut marker = map.clone();
                marker.insert(
                    "$ref".to_owned(),
                    Value::String(format!("#enclosing/{depth}")),
                );
                return Some(Value::Object(marker));
            }
            if let Some(reference) = pure_local_ref(value)
                && let Some(target) = root.pointer(&reference[1..])
            {
                open.push(reference.to_owned());
                let target = inlined(target, root, open, budget);
                let merged = target.map(|target| match target {
                    Value::Object(mut merged) => {
                        for (key, value) in map {
                            if key != "$ref" {
                                merged.insert(key.clone(), value.clone());
                            }
                        }
                        Value::Object(merged)
                    }
                    other => other,
                });
                open.pop();
                return merged;
            }
            let mut out = Map::new();
            for (key, value) in map {
                if !DEFINITIONS.contains(&key.as_str()) {
                    out.insert(key.clone(), inlined(value, root, open, budget)?);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(|item| inlined(item, root, open, budget))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        other => Some(other.clone()),
    }
}

/// `value` with the arrays whose order carries no meaning sorted, and every object's keys in
/// sorted order: with serde_json's `preserve_order` (which a dependency may turn on), an
/// object's text follows its insertion order, and the sort keys below are texts.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .map(|(key, value)| {
                    let mut value = normalized(value);
                    let unordered = matches!(
                        key.as_str(),
                        "required" | "type" | "enum" | "anyOf" | "oneOf" | "allOf"
                    );
                    if let (true, Value::Array(items)) = (unordered, &mut value) {
                        items.sort_by_cached_key(|item| item.to_string());
                    }
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

static TRUE_SCHEMA: Value = Value::Bool(true);

struct Comparison<'r> {
    old_root: &'r Value,
    new_root: &'r Value,
    side: Side,
    findings: Vec<SchemaFinding>,
    /// Pairs of identical `$ref`s already compared: a definition used in many places is
    /// reported once, at its own location, and recursive definitions terminate.
    compared_refs: HashSet<String>,
    /// Pairs of different `$ref`s already compared, for the same reason.
    compared_ref_pairs: HashSet<(String, String)>,
    /// Pairs of `$ref`s (or a `$ref` and an inline schema) being compared further up the
    /// stack (cycle guard).
    open_refs: Vec<(Option<String>, Option<String>)>,
}

impl Comparison<'_> {
    /// Compares two schema nodes at `path`. `exclusive` is set below a `oneOf` whose branches
    /// may overlap: there a wider branch can make a value match two branches, which `oneOf`
    /// rejects, so no difference is known to be only widening or only narrowing.
    fn node(&mut self, old: &Value, new: &Value, path: &str, exclusive: bool) {
        if old == new && !contains_ref(old) {
            return;
        }
        if self.references(old, new, path, exclusive) {
            return;
        }
        match (old, new) {
            (Value::Bool(false), Value::Bool(false)) => {}
            (Value::Bool(false), _) => self.push(
                path,
                Effect::Widened,
                boolean_detail(path, true),
                Some(old),
                Some(new),
                exclusive,
            ),
            (_, Value::Bool(false)) => self.push(
                path,
                Effect::Narrowed,
                boolean_detail(path, false),
                Some(old),
                Some(new),
                exclusive,
            ),
            _ => match (as_schema_object(old), as_schema_object(new)) {
                (Some(old_map), Some(new_map)) => {
                    self.object(&old_map, &new_map, path, exclusive);
                }
                _ => self.push(
                    path,
                    Effect::Changed,
                    "schema replaced by a value that is not a schema".to_owned(),
                    Some(old),
                    Some(new),
                    exclusive,
                ),
            },
        }
    }

    /// Handles nodes that are references (`{"$ref": ..}` with only annotations beside it).
    /// Returns whether the pair was fully handled here.
    fn references(&mut self, old: &Value, new: &Value, path: &str, exclusive: bool) -> bool {
        let old_ref = pure_local_ref(old);
        let new_ref = pure_local_ref(new);
        if old_ref.is_none() && new_ref.is_none() {
            return false;
        }
        if let (Some(old_target), Some(new_target)) = (old_ref, new_ref)
            && old_target == new_target
        {
            // The same definition on both sides: the site's own annotations here, the
            // definition once, at its own location.
            let empty = Map::new();
            self.annotations(
                old.as_object().unwrap_or(&empty),
                new.as_object().unwrap_or(&empty),
                path,
                exclusive,
            );
            if !self.compared_refs.insert(old_target.to_owned()) {
                return true;
            }
            let pointer = &old_target[1..];
            match (
                self.old_root.pointer(pointer),
                self.new_root.pointer(pointer),
            ) {
                (Some(old_definition), Some(new_definition)) => {
                    self.node(old_definition, new_definition, pointer, exclusive);
                }
                (None, None) => {}
                (old_definition, new_definition) => self.push(
                    pointer,
                    Effect::Changed,
                    format!("`$ref` target `{old_target}` appeared or disappeared"),
                    old_definition,
                    new_definition,
                    exclusive,
                ),
            }
            return true;
        }
        // Different targets, or a reference on one side only: compare what they stand for.
        let key = (old_ref.map(str::to_owned), new_ref.map(str::to_owned));
        if self.open_refs.contains(&key) {
            return true;
        }
        if let (Some(old_target), Some(new_target)) = (old_ref, new_ref)
            && !self
                .compared_ref_pairs
                .insert((old_target.to_owned(), new_target.to_owned()))
        {
            // A renamed definition used in many places is compared (and reported) once.
            return true;
        }
        let old_effective = Self::effective(old, old_ref, self.old_root);
        let new_effective = Self::effective(new, new_ref, self.new_root);
        match (old_effective, new_effective) {
            (Some(old_effective), Some(new_effective)) => {
                self.open_refs.push(key);
                self.node(&old_effective, &new_effective, path, exclusive);
                self.open_refs.pop();
            }
            _ => self.push(
                path,
                Effect::Changed,
                "a `$ref` changed and one of its targets cannot be resolved".to_owned(),
                Some(old),
                Some(new),
                exclusive,
            ),
        }
        true
    }

    /// The schema a node stands for: its `$ref` target with the node's annotations laid over
    /// it, or the node itself when it is no reference.
    fn effective(node: &Value, reference: Option<&str>, root: &Value) -> Option<Value> {
        let Some(reference) = reference else {
            return Some(node.clone());
        };
        let target = root.pointer(&reference[1..])?;
        let mut merged = match target {
            Value::Object(map) => map.clone(),
            Value::Bool(true) => Map::new(),
            other => return Some(other.clone()),
        };
        for (key, value) in node.as_object()? {
            if key != "$ref" {
                merged.insert(key.clone(), value.clone());
            }
        }
        Some(Value::Object(merged))
    }

    fn object(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        path: &str,
        exclusive: bool,
    ) {
        self.annotations(old, new, path, exclusive);
        self.object_shape(old, new, path, exclusive);
        // A closed set of values written once as `enum` and once as a `oneOf` of constants
        // (what documenting an enum's variants does) is compared as the set it is.
        let mut settled: &[&str] = &[];
        if let (Some((old_form, old_values)), Some((new_form, new_values))) =
            (finite_values(old), finite_values(new))
            && old_form != new_form
        {
            let (before, after) = (Value::Array(old_values), Value::Array(new_values));
            self.push(
                path,
                Effect::Annotation,
                format!("closed set of values now written as `{new_form}` (was `{old_form}`)"),
                old.get(old_form),
                new.get(new_form),
                exclusive,
            );
            self.value_sets(&before, &after, &format!("{path}/enum"), exclusive);
            settled = &["type", "enum", "oneOf"];
        }
        let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let key = key.as_str();
            let (before, after) = (old.get(key), new.get(key));
            if settled.contains(&key)
                || (before == after && before.is_none_or(|value| !contains_ref(value)))
            {
                continue;
            }
            let at = format!("{path}/{}", escape(key));
            if ANNOTATIONS.contains(&key)
                || DEFINITIONS.contains(&key)
                || OBJECT_SHAPE.contains(&key)
                || (key == "default" && self.side == Side::Output)
            {
                continue;
            } else if key == "default" {
                self.push(
                    &at,
                    Effect::Changed,
                    "default value changed: a caller that leaves the property out gets a \
                     different value"
                        .to_owned(),
                    before,
                    after,
                    exclusive,
                );
            } else if key == "type" {
                self.type_keyword(before, after, &at, exclusive);
            } else if key == "enum" {
                self.enum_keyword(before, after, &at, exclusive);
            } else if key == "const" {
                let effect = presence_effect(before, after);
                self.push(
                    &at,
                    effect,
                    constraint_detail(key, before, after),
                    before,
                    after,
                    exclusive,
                );
            } else if LOWER_BOUNDS.contains(&key) || UPPER_BOUNDS.contains(&key) {
                self.bound(key, before, after, &at, exclusive);
            } else if key == "uniqueItems" {
                let was = before.and_then(Value::as_bool).unwrap_or(false);
                let is = after.and_then(Value::as_bool).unwrap_or(false);
                if was != is {
                    let effect = if is {
                        Effect::Narrowed
                    } else {
                        Effect::Widened
                    };
                    let detail = if is {
                        "array items must now be unique"
                    } else {
                        "array items no longer need to be unique"
                    };
                    self.push(&at, effect, detail.to_owned(), before, after, exclusive);
                }
            } else if SUBSCHEMAS.contains(&key) {
                let (before_schema, after_schema) = (
                    before.unwrap_or(&TRUE_SCHEMA),
                    after.unwrap_or(&TRUE_SCHEMA),
                );
                if before_schema.is_array() || after_schema.is_array() {
                    self.push(
                        &at,
                        Effect::Changed,
                        constraint_detail(key, before, after),
                        before,
                        after,
                        exclusive,
                    );
                } else {
                    self.node(before_schema, after_schema, &at, exclusive);
                }
            } else if COMBINATORS.contains(&key) {
                self.combinator(key, before, after, &at, exclusive);
            } else if PURE_ASSERTIONS.contains(&key) {
                let effect = presence_effect(before, after);
                self.push(
                    &at,
                    effect,
                    constraint_detail(key, before, after),
                    before,
                    after,
                    exclusive,
                );
            } else if key == "$ref" {
                self.sibling_ref(before, after, &at, exclusive);
            } else {
                self.push(
                    &at,
                    Effect::Changed,
                    format!(
                        "{} (keyword not classified by this check)",
                        constraint_detail(key, before, after)
                    ),
                    before,
                    after,
                    exclusive,
                );
            }
        }
    }

    fn annotations(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        path: &str,
        exclusive: bool,
    ) {
        let output_default = (self.side == Side::Output).then_some("default");
        for key in ANNOTATIONS.iter().copied().chain(output_default) {
            let (before, after) = (old.get(key), new.get(key));
            if before != after {
                let at = format!("{path}/{}", escape(key));
                let detail = match (before, after) {
                    (None, Some(_)) => format!("`{key}` added"),
                    (Some(_), None) => format!("`{key}` removed"),
                    _ => format!("`{key}` changed"),
                };
                self.push(&at, Effect::Annotation, detail, before, after, exclusive);
            }
        }
    }

    /// `properties` and `required`, which only make sense together.
    fn object_shape(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        path: &str,
        exclusive: bool,
    ) {
        let empty = Map::new();
        let old_properties = old
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let new_properties = new
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let old_required = required_names(old);
        let new_required = required_names(new);
        let old_closed = is_closed(old);

        for (name, old_property) in old_properties {
            let at = format!("{path}/properties/{}", escape(name));
            match new_properties.get(name) {
                Some(new_property) => self.node(old_property, new_property, &at, exclusive),
                None => self.push_property(
                    &at,
                    // A caller's value is now refused (closed) or silently ignored (open);
                    // a client loses a property it read. Either way not a pure widening.
                    Effect::Changed,
                    PropertyEvent::Removed,
                    format!("property `{name}` removed"),
                    Some(old_property),
                    None,
                    exclusive,
                ),
            }
        }
        for (name, new_property) in new_properties {
            if old_properties.contains_key(name) {
                continue;
            }
            let required = new_required.contains(&name.as_str());
            // Undeclared properties of an open schema are not part of its contract, so
            // declaring an optional one widens an input and narrows an output; a closed output
            // schema promised there was nothing else, so a new output property widens it.
            let effect = match (required, self.side, old_closed) {
                (true, _, _) => Effect::Narrowed,
                (false, Side::Input, _) => Effect::Widened,
                (false, Side::Output, true) => Effect::Widened,
                (false, Side::Output, false) => Effect::Narrowed,
            };
            let detail = match (required, self.side == Side::Output && old_closed) {
                (true, _) => format!("new required property `{name}`"),
                (false, true) => format!(
                    "new property `{name}`, but the old schema was closed \
                     (`additionalProperties: false`): a client validating against it rejects it"
                ),
                (false, false) => format!("new optional property `{name}`"),
            };
            self.push_property(
                &format!("{path}/properties/{}", escape(name)),
                effect,
                PropertyEvent::Added {
                    required,
                    old_closed,
                },
                detail,
                None,
                Some(new_property),
                exclusive,
            );
        }
        let at = format!("{path}/required");
        for name in &new_required {
            let added_here =
                new_properties.contains_key(*name) && !old_properties.contains_key(*name);
            if !old_required.contains(name) && !added_here {
                self.push(
                    &at,
                    Effect::Narrowed,
                    format!("property `{name}` is now required"),
                    old.get("required"),
                    new.get("required"),
                    exclusive,
                );
            }
        }
        for name in &old_required {
            let removed_here =
                old_properties.contains_key(*name) && !new_properties.contains_key(*name);
            if !new_required.contains(name) && !removed_here {
                self.push(
                    &at,
                    Effect::Widened,
                    format!("property `{name}` is no longer required"),
                    old.get("required"),
                    new.get("required"),
                    exclusive,
                );
            }
        }
    }

    fn type_keyword(
        &mut self,
        before: Option<&Value>,
        after: Option<&Value>,
        at: &str,
        exclusive: bool,
    ) {
        let (Some(old_types), Some(new_types)) = (type_set(before), type_set(after)) else {
            self.push(
                at,
                Effect::Changed,
                "`type` is not a type name or a list of them".to_owned(),
                before,
                after,
                exclusive,
            );
            return;
        };
        let widens = types_cover(&new_types, &old_types);
        let narrows = types_cover(&old_types, &new_types);
        let effect = match (widens, narrows) {
            (true, true) => return,
            (true, false) => Effect::Widened,
            (false, true) => Effect::Narrowed,
            (false, false) => Effect::Changed,
        };
        let word = match effect {
            Effect::Widened => "widened",
            Effect::Narrowed => "narrowed",
            _ => "changed",
        };
        self.push(
            at,
            effect,
            format!(
                "type {word}: {} → {}",
                show_types(&old_types),
                show_types(&new_types)
            ),
            before,
            after,
            exclusive,
        );
    }

    fn enum_keyword(
        &mut self,
        before: Option<&Value>,
        after: Option<&Value>,
        at: &str,
        exclusive: bool,
    ) {
        let (old_values, new_values) = (
            before.and_then(Value::as_array),
            after.and_then(Value::as_array),
        );
        if old_values.is_none() || new_values.is_none() {
            let effect = presence_effect(before, after);
            let detail = match (before, after) {
                (None, Some(_)) => "values restricted by a new `enum`".to_owned(),
                (Some(_), None) => "`enum` removed: any value of the type is accepted".to_owned(),
                _ => "`enum` changed".to_owned(),
            };
            self.push(at, effect, detail, before, after, exclusive);
            return;
        }
        if let (Some(before), Some(after)) = (before, after) {
            self.value_sets(before, after, at, exclusive);
        }
    }

    /// Two closed sets of values (JSON arrays): values removed narrow, values added widen.
    fn value_sets(&mut self, before: &Value, after: &Value, at: &str, exclusive: bool) {
        let empty = Vec::new();
        let old_values = before.as_array().unwrap_or(&empty);
        let new_values = after.as_array().unwrap_or(&empty);
        let (before, after) = (Some(before), Some(after));
        let removed: Vec<&Value> = old_values
            .iter()
            .filter(|v| !new_values.contains(v))
            .collect();
        let added: Vec<&Value> = new_values
            .iter()
            .filter(|v| !old_values.contains(v))
            .collect();
        if !removed.is_empty() {
            self.push(
                at,
                Effect::Narrowed,
                format!("enum values removed: {}", show_values(&removed)),
                before,
                after,
                exclusive,
            );
        }
        if !added.is_empty() {
            self.push(
                at,
                Effect::Widened,
                format!("enum values added: {}", show_values(&added)),
                before,
                after,
                exclusive,
            );
        }
    }

    fn bound(
        &mut self,
        key: &str,
        before: Option<&Value>,
        after: Option<&Value>,
        at: &str,
        exclusive: bool,
    ) {
        let lower = LOWER_BOUNDS.contains(&key);
        let effect = match (before.map(Value::as_f64), after.map(Value::as_f64)) {
            (None, Some(_)) => Effect::Narrowed,
            (Some(_), None) => Effect::Widened,
            (Some(Some(old)), Some(Some(new))) if new == old => return,
            (Some(Some(old)), Some(Some(new))) => {
                if (new > old) == lower {
                    Effect::Narrowed
                } else {
                    Effect::Widened
                }
            }
            _ => Effect::Changed,
        };
        let detail = match (before, after) {
            (None, Some(value)) => format!("`{key}` {value} added"),
            (Some(value), None) => format!("`{key}` {value} removed"),
            (Some(old), Some(new)) => {
                let word = match (effect, lower) {
                    (Effect::Narrowed, true) | (Effect::Widened, false) => "raised",
                    (Effect::Narrowed, false) | (Effect::Widened, true) => "lowered",
                    _ => "changed",
                };
                format!("`{key}` {word}: {old} → {new}")
            }
            (None, None) => return,
        };
        self.push(at, effect, detail, before, after, exclusive);
    }

    fn combinator(
        &mut self,
        key: &str,
        before: Option<&Value>,
        after: Option<&Value>,
        at: &str,
        exclusive: bool,
    ) {
        let (old_branches, new_branches) = match (before, after) {
            (Some(Value::Array(old)), Some(Value::Array(new))) => (old, new),
            (None, Some(_)) | (Some(_), None) => {
                // A new combinator constrains further (an `allOf`, or alternatives that replace
                // "anything"); a removed one lifts that constraint.
                let effect = presence_effect(before, after);
                self.push(
                    at,
                    effect,
                    constraint_detail(key, before, after),
                    before,
                    after,
                    exclusive,
                );
                return;
            }
            _ => {
                self.push(
                    at,
                    Effect::Changed,
                    constraint_detail(key, before, after),
                    before,
                    after,
                    exclusive,
                );
                return;
            }
        };
        // `oneOf` rejects a value that matches two branches; only when every branch admits its
        // own distinct constant values (how a documented Rust enum is rendered) can it be read
        // like `anyOf`.
        let overlapping = key == "oneOf"
            && !(disjoint_constants(old_branches) && disjoint_constants(new_branches));
        let inner_exclusive = exclusive || overlapping;
        let matching = match_branches(old_branches, new_branches);
        for &(old_index, new_index) in &matching.pairs {
            let branch_at = format!("{at}/{new_index}");
            self.node(
                &old_branches[old_index],
                &new_branches[new_index],
                &branch_at,
                inner_exclusive,
            );
        }
        let (effect_of_removal, effect_of_addition) = if key == "allOf" {
            (Effect::Widened, Effect::Narrowed)
        } else {
            (Effect::Narrowed, Effect::Widened)
        };
        for &old_index in &matching.removed {
            let branch = &old_branches[old_index];
            self.push(
                &format!("{at}/{old_index}"),
                effect_of_removal,
                format!("`{key}` branch removed: {}", show_value(branch)),
                Some(branch),
                None,
                inner_exclusive,
            );
        }
        for &new_index in &matching.added {
            let branch = &new_branches[new_index];
            self.push(
                &format!("{at}/{new_index}"),
                effect_of_addition,
                format!("`{key}` branch added: {}", show_value(branch)),
                None,
                Some(branch),
                inner_exclusive,
            );
        }
    }

    /// A `$ref` next to other assertions: the same target is compared once; a different one
    /// is a change this check does not untangle.
    fn sibling_ref(
        &mut self,
        before: Option<&Value>,
        after: Option<&Value>,
        at: &str,
        exclusive: bool,
    ) {
        match (
            before.and_then(Value::as_str),
            after.and_then(Value::as_str),
        ) {
            (Some(old), Some(new)) if old == new && old.starts_with('#') => {
                if !self.compared_refs.insert(old.to_owned()) {
                    return;
                }
                let pointer = &old[1..];
                if let (Some(old_target), Some(new_target)) = (
                    self.old_root.pointer(pointer),
                    self.new_root.pointer(pointer),
                ) {
                    self.node(old_target, new_target, pointer, exclusive);
                }
            }
            (Some(old), Some(new)) if old == new => {}
            _ => self.push(
                at,
                Effect::Changed,
                constraint_detail("$ref", before, after),
                before,
                after,
                exclusive,
            ),
        }
    }

    fn push(
        &mut self,
        path: &str,
        effect: Effect,
        detail: String,
        before: Option<&Value>,
        after: Option<&Value>,
        exclusive: bool,
    ) {
        self.push_property(
            path,
            effect,
            PropertyEvent::None,
            detail,
            before,
            after,
            exclusive,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push_property(
        &mut self,
        path: &str,
        effect: Effect,
        property: PropertyEvent,
        detail: String,
        before: Option<&Value>,
        after: Option<&Value>,
        exclusive: bool,
    ) {
        let (effect, property, detail) = if exclusive && effect != Effect::Annotation {
            (
                Effect::Changed,
                PropertyEvent::None,
                format!("{detail} (inside a `oneOf` whose branches may overlap)"),
            )
        } else {
            (effect, property, detail)
        };
        self.findings.push(SchemaFinding {
            path: path.to_owned(),
            effect,
            property,
            detail,
            before: before.cloned(),
            after: after.cloned(),
        });
    }
}

/// The local `$ref` of a node that is only a reference plus annotations.
fn pure_local_ref(node: &Value) -> Option<&str> {
    let map = node.as_object()?;
    let reference = map.get("$ref")?.as_str()?;
    let only_annotations = map
        .keys()
        .all(|key| key == "$ref" || ANNOTATIONS.contains(&key.as_str()));
    (only_annotations && reference.starts_with('#')).then_some(reference)
}

fn contains_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(contains_ref),
        Value::Array(items) => items.iter().any(contains_ref),
        _ => false,
    }
}

/// A schema as an object: `true` is the empty schema. `None` for anything that is not a schema.
fn as_schema_object(value: &Value) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map.clone()),
        Value::Bool(true) => Some(Map::new()),
        _ => None,
    }
}

fn required_names(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn is_closed(schema: &Map<String, Value>) -> bool {
    schema.get("additionalProperties") == Some(&Value::Bool(false))
        || schema.get("unevaluatedProperties") == Some(&Value::Bool(false))
}

/// The JSON types a `type` keyword admits; `Some(None)` when there is no `type` (any type),
/// `None` when the keyword is malformed.
fn type_set(value: Option<&Value>) -> Option<Option<Vec<String>>> {
    match value {
        None => Some(None),
        Some(Value::String(name)) => Some(Some(vec![name.clone()])),
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| name.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some),
        Some(_) => None,
    }
}

/// Whether every type in `inner` is admitted by `outer` (`integer` is a kind of `number`).
fn types_cover(outer: &Option<Vec<String>>, inner: &Option<Vec<String>>) -> bool {
    match (outer, inner) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(outer), Some(inner)) => inner.iter().all(|name| {
            outer.contains(name) || (name == "integer" && outer.iter().any(|o| o == "number"))
        }),
    }
}

fn show_types(types: &Option<Vec<String>>) -> String {
    match types {
        None => "any".to_owned(),
        Some(names) => names.join(" | "),
    }
}

/// Adding a keyword that can only reject values narrows; removing it widens.
fn presence_effect(before: Option<&Value>, after: Option<&Value>) -> Effect {
    match (before, after) {
        (None, Some(_)) => Effect::Narrowed,
        (Some(_), None) => Effect::Widened,
        _ => Effect::Changed,
    }
}

fn constraint_detail(key: &str, before: Option<&Value>, after: Option<&Value>) -> String {
    match (before, after) {
        (None, Some(value)) => format!("`{key}` added: {}", show_value(value)),
        (Some(value), None) => format!("`{key}` removed (was {})", show_value(value)),
        (Some(old), Some(new)) => {
            format!("`{key}` changed: {} → {}", show_value(old), show_value(new))
        }
        (None, None) => format!("`{key}` changed"),
    }
}

fn boolean_detail(path: &str, now_valid: bool) -> String {
    let keyword = path.rsplit('/').next().unwrap_or_default();
    match (keyword, now_valid) {
        ("additionalProperties" | "unevaluatedProperties", true) => {
            "undeclared properties are now allowed".to_owned()
        }
        ("additionalProperties" | "unevaluatedProperties", false) => {
            "undeclared properties are no longer allowed".to_owned()
        }
        (_, true) => "schema that accepted nothing now accepts values".to_owned(),
        (_, false) => "schema now accepts nothing (`false`)".to_owned(),
    }
}

/// The closed set of values a schema admits when it is written as an `enum` or as a `oneOf`
/// of constants (branches with only `const`, `type` and annotations, no value twice), with the
/// form it is written in.
fn finite_values(schema: &Map<String, Value>) -> Option<(&'static str, Vec<Value>)> {
    if let Some(Value::Array(branches)) = schema.get("oneOf") {
        let constants_only = branches.iter().all(|branch| {
            branch.get("const").is_some()
                && branch.as_object().is_some_and(|map| {
                    map.keys().all(|key| {
                        key == "const" || key == "type" || ANNOTATIONS.contains(&key.as_str())
                    })
                })
        });
        if constants_only && disjoint_constants(branches) && !schema.contains_key("enum") {
            let values = branches
                .iter()
                .filter_map(|branch| branch.get("const"))
                .cloned();
            return Some(("oneOf", values.collect()));
        }
        return None;
    }
    match schema.get("enum") {
        Some(Value::Array(values)) => Some(("enum", values.clone())),
        _ => None,
    }
}

/// Every branch is an object with a `const` (or an `enum`), and no value appears in two.
fn disjoint_constants(branches: &[Value]) -> bool {
    let mut seen: Vec<&Value> = Vec::new();
    for branch in branches {
        let values: Vec<&Value> = match (branch.get("const"), branch.get("enum")) {
            (Some(value), _) => vec![value],
            (None, Some(Value::Array(values))) => values.iter().collect(),
            _ => return false,
        };
        for value in values {
            if seen.contains(&value) {
                return false;
            }
            seen.push(value);
        }
    }
    true
}

struct BranchMatching {
    pairs: Vec<(usize, usize)>,
    removed: Vec<usize>,
    added: Vec<usize>,
}

/// Pairs old and new combinator branches: equal branches first, then branches with the same
/// `const`, then the same `$ref`, then — when as many remain on both sides — by position.
fn match_branches(old: &[Value], new: &[Value]) -> BranchMatching {
    let mut old_free: Vec<usize> = (0..old.len()).collect();
    let mut new_free: Vec<usize> = (0..new.len()).collect();
    let mut pairs = Vec::new();
    let keys: [fn(&Value) -> Option<Value>; 3] = [
        |branch| Some(branch.clone()),
        |branch| branch.get("const").cloned(),
        |branch| branch.get("$ref").cloned(),
    ];
    for key in keys {
        old_free.retain(|&old_index| {
            let Some(wanted) = key(&old[old_index]) else {
                return true;
            };
            match new_free
                .iter()
                .position(|&new_index| key(&new[new_index]).as_ref() == Some(&wanted))
            {
                Some(slot) => {
                    pairs.push((old_index, new_free.remove(slot)));
                    false
                }
                None => true,
            }
        });
    }
    if old_free.len() == new_free.len() {
        pairs.extend(old_free.drain(..).zip(new_free.drain(..)));
    }
    pairs.sort_by_key(|&(_, new_index)| new_index);
    BranchMatching {
        pairs,
        removed: old_free,
        added: new_free,
    }
}

/// Escapes a JSON Pointer reference token.
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A compact rendering for messages, shortened when long.
pub(crate) fn show_value(value: &Value) -> String {
    const LIMIT: usize = 120;
    let text = value.to_string();
    if text.chars().count() <= LIMIT {
        return text;
    }
    let cut: String = text.chars().take(LIMIT).collect();
    format!("{cut}…")
}

fn show_values(values: &[&Value]) -> String {
    values
        .iter()
        .map(|value| show_value(value))
        .collect::<Vec<_>>()
        .join(", ")
}
