//! JSON Schemas of capability inputs and outputs, derived with schemars (Draft 2020-12).
//!
//! Inputs are described as they *deserialize* and outputs as they *serialize*, so optional
//! fields with defaults are optional in the input schema but present in the output schema.
//! Generated code caches each schema once per capability; these functions do the work.

use std::any::TypeId;
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use schemars::{JsonSchema, Schema, SchemaGenerator};

use schemars::generate::{Contract, SchemaSettings};
use serde_json::{Map, Value};

/// How a schema is rendered for a client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaDialect {
    /// Draft 2020-12 exactly as schemars produces it: `$defs` and `$ref`, nullable fields as
    /// `["T", "null"]` or `anyOf [T, null]`.
    #[default]
    Draft202012,
    /// For clients that cannot follow `$ref` or read type unions (many LLM tool-callers):
    /// every `$ref` is inlined (recursive types keep theirs), and nullable unions collapse to
    /// the non-null type — an optional field is then left out rather than sent as `null`, which
    /// the deserializer accepts the same way.
    ClientCompatible,
}

/// The schema of an input type `T` (deserialize contract), generated once per type.
pub fn input_schema<T: JsonSchema + 'static>() -> Value {
    cached::<T>(Contract::Deserialize)
}

/// The schema of an output type `T` (serialize contract), generated once per type.
pub fn output_schema<T: JsonSchema + 'static>() -> Value {
    cached::<T>(Contract::Serialize)
}

/// Schemas by (type, contract): generating a schema walks the whole type graph, and the same
/// type often serves several capabilities or connectors.
///
/// Only this line is generic: the cache itself is one non-generic function, so a crate with a
/// hundred input and output types instantiates the lookup once, not two hundred times.
fn cached<T: JsonSchema + 'static>(contract: Contract) -> Value {
    cached_by_type(TypeId::of::<T>(), contract, SchemaFns::of::<T>())
}

fn cached_by_type(type_id: TypeId, contract: Contract, fns: SchemaFns) -> Value {
    type Cache = Mutex<HashMap<(TypeId, bool), Value>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (type_id, matches!(contract, Contract::Serialize));
    let cache = CACHE.get_or_init(Cache::default);
    if let Some(schema) = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&key)
    {
        return schema.clone();
    }
    // Generated outside the lock: schemars may call back into user `JsonSchema` impls.
    let schema = generate(fns, contract);
    cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(key)
        .or_insert(schema)
        .clone()
}

/// The `JsonSchema` functions of one type that a root schema needs, as function pointers.
///
/// They are the functions the type's derive already compiled; a generic root-schema call per
/// type (`into_root_schema_for::<T>`, which inlines the generator's bookkeeping and its drop)
/// would compile all of that again for every input and output type of every connector.
#[derive(Clone, Copy)]
struct SchemaFns {
    name: fn() -> Cow<'static, str>,
    id: fn() -> Cow<'static, str>,
    json_schema: fn(&mut SchemaGenerator) -> Schema,
}

impl SchemaFns {
    fn of<T: JsonSchema>() -> Self {
        Self {
            name: T::schema_name,
            id: T::schema_id,
            json_schema: T::json_schema,
        }
    }
}

thread_local! {
    /// The type [`ErasedRoot`] stands for while [`generate`] runs on this thread.
    static ROOT: Cell<Option<SchemaFns>> = const { Cell::new(None) };
}

/// The one root type schemars is instantiated with: it answers with the functions of the type
/// being generated ([`ROOT`]). Its schema id is that type's, so a recursive type still refers
/// to the root as `#`, exactly as with `into_root_schema_for::<T>`.
struct ErasedRoot;

impl ErasedRoot {
    fn fns() -> SchemaFns {
        ROOT.with(Cell::get)
            .expect("ErasedRoot is only asked for its schema inside `generate`")
    }
}

impl JsonSchema for ErasedRoot {
    fn schema_name() -> Cow<'static, str> {
        (Self::fns().name)()
    }

    fn schema_id() -> Cow<'static, str> {
        (Self::fns().id)()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        (Self::fns().json_schema)(generator)
    }
}

/// Restores the previous [`ROOT`] when generation ends, by return or by panic (a user's
/// `JsonSchema` impl may generate another root schema while this one is being generated).
struct RootGuard(Option<SchemaFns>);

impl Drop for RootGuard {
    fn drop(&mut self) {
        ROOT.with(|root| root.set(self.0));
    }
}

fn generate(fns: SchemaFns, contract: Contract) -> Value {
    let _restore = RootGuard(ROOT.with(|root| root.replace(Some(fns))));
    let mut settings = SchemaSettings::draft2020_12();
    settings.contract = contract;
    settings
        .into_generator()
        .into_root_schema_for::<ErasedRoot>()
        .to_value()
}

/// Renders `schema` in `dialect`.
pub fn render(schema: &Value, dialect: SchemaDialect) -> Value {
    match dialect {
        SchemaDialect::Draft202012 => schema.clone(),
        SchemaDialect::ClientCompatible => client_compatible(schema),
    }
}

/// Inlines local `$defs` references and collapses nullable unions. A reference that is already
/// being expanded (a recursive type) is left as a `$ref`, and the definitions it needs are kept.
pub fn client_compatible(schema: &Value) -> Value {
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut expanding = Vec::new();
    let mut kept = Map::new();
    let mut out = rewrite(schema, &defs, &mut expanding, &mut kept);
    if let Some(object) = out.as_object_mut() {
        object.remove("$defs");
        if !kept.is_empty() {
            object.insert("$defs".to_owned(), Value::Object(kept));
        }
    }
    out
}

const DEFS_PREFIX: &str = "#/$defs/";

/// The `$schema` of every schema the SDK publishes.
pub(crate) const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

fn rewrite(
    node: &Value,
    defs: &Map<String, Value>,
    expanding: &mut Vec<String>,
    kept: &mut Map<String, Value>,
) -> Value {
    match node {
        Value::Object(object) => {
            if let Some((name, target)) = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(DEFS_PREFIX))
                .and_then(|name| defs.get(name).map(|target| (name, target)))
            {
                if expanding.iter().any(|n| n == name) {
                    if !kept.contains_key(name) {
                        kept.insert(name.to_owned(), Value::Null);
                        let rendered = rewrite(target, defs, &mut Vec::new(), kept);
                        kept.insert(name.to_owned(), rendered);
                    }
                    return node.clone();
                }
                expanding.push(name.to_owned());
                let mut inlined = rewrite(target, defs, expanding, kept);
                expanding.pop();
                // Keywords next to the `$ref` (descriptions, defaults) win over the target's.
                if let Value::Object(inlined_object) = &mut inlined {
                    for (key, value) in object.iter().filter(|(k, _)| *k != "$ref") {
                        inlined_object.insert(key.clone(), rewrite(value, defs, expanding, kept));
                    }
                }
                return inlined;
            }
            let mut out = Map::new();
            for (key, value) in object {
                if key == "$defs" {
                    continue;
                }
                out.insert(key.clone(), rewrite(value, defs, expanding, kept));
            }
            collapse_nullable(&mut out);
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| rewrite(item, defs, expanding, kept))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `type: ["T", "null"]` → `type: "T"`; `anyOf: [S, {"type": "null"}]` → S merged in place. A
/// `default: null` (schemars writes one for `#[serde(default)] Option<T>`) goes with the null,
/// and so does `null` in an `enum`: neither is an instance of the collapsed schema, which a
/// client checking defaults refuses and a model reads as an invitation to send `null`.
fn collapse_nullable(object: &mut Map<String, Value>) {
    let collapsed = collapse_null_type(object);
    if collapsed {
        if object.get("default") == Some(&Value::Null) {
            object.remove("default");
        }
        if let Some(Value::Array(values)) = object.get_mut("enum") {
            values.retain(|value| !value.is_null());
        }
    }
}

/// The collapse of [`collapse_nullable`]; whether it removed a null.
fn collapse_null_type(object: &mut Map<String, Value>) -> bool {
    let mut collapsed = false;
    if let Some(Value::Array(types)) = object.get("type") {
        let non_null: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        if non_null.len() < types.len() {
            let replacement = match non_null.len() {
                1 => non_null.into_iter().next().unwrap_or(Value::Null),
                _ => Value::Array(non_null),
            };
            object.insert("type".to_owned(), replacement);
            collapsed = true;
        }
    }
    for keyword in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = object.get(keyword) else {
            continue;
        };
        let is_null = |b: &Value| {
            b.get("type").and_then(Value::as_str) == Some("null")
                && b.as_object().is_some_and(|o| o.len() == 1)
        };
        if branches.len() == 2 && branches.iter().any(is_null) {
            let Some(Value::Object(kept)) = branches.iter().find(|b| !is_null(b)).cloned() else {
                continue;
            };
            object.remove(keyword);
            for (key, value) in kept {
                object.entry(key).or_insert(value);
            }
            collapsed = true;
        }
    }
    if object.get("nullable") == Some(&Value::Bool(true)) {
        object.remove("nullable");
        collapsed = true;
    }
    collapsed
}

/// Whether `schema` describes only JSON objects at its root (what a capability input must be):
/// `{"type": "object"}`, or a `oneOf`/`anyOf` whose branches all do (an internally or
/// adjacently tagged enum, an untagged enum of structs), or an `allOf` with a branch that does;
/// a local `$ref` (`#`, `#/$defs/...`) is followed.
pub fn has_object_root(schema: &Value) -> bool {
    // Each schema node looked at costs one step: a `$ref` cycle, or branches that refer back
    // to the root several times over, end when the budget does, instead of growing with the
    // number of paths (exponential for a cycle through two branches).
    let budget = std::cell::Cell::new(10_000_u32);
    describes_objects(schema, schema, 0, &budget)
}

/// [`has_object_root`] of `schema`, a part of `root`, `depth` schemas below it, within
/// `budget` steps; the depth bounds the stack, the budget the work.
fn describes_objects(
    root: &Value,
    schema: &Value,
    depth: usize,
    budget: &std::cell::Cell<u32>,
) -> bool {
    const MAX_DEPTH: usize = 32;
    let Some(object) = schema.as_object() else {
        return false;
    };
    let Some(left) = budget.get().checked_sub(1) else {
        return false;
    };
    budget.set(left);
    if depth > MAX_DEPTH {
        return false;
    }
    if object.get("type").and_then(Value::as_str) == Some("object") {
        return true;
    }
    let nested = |branch: &Value| describes_objects(root, branch, depth + 1, budget);
    if let Some(target) = object
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
        && nested(target)
    {
        return true;
    }
    let all_objects = |keyword: &str| {
        matches!(object.get(keyword), Some(Value::Array(branches))
            if !branches.is_empty() && branches.iter().all(nested))
    };
    if all_objects("oneOf") || all_objects("anyOf") {
        return true;
    }
    matches!(object.get("allOf"), Some(Value::Array(branches)) if branches.iter().any(nested))
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Attendee {
        email: String,
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Booking {
        starts_at: String,
        note: Option<String>,
        attendee: Attendee,
        backup: Option<Attendee>,
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        children: Vec<Tree>,
    }

    /// An enum with a default, a renamed field and a nested, optional, recursive part: every
    /// shape whose schema differs between the contracts or needs `$defs`.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Step {
        Wait {
            #[serde(default)]
            seconds: u32,
        },
        Branch {
            #[serde(rename = "then")]
            next: Box<Step>,
            fallback: Option<Tree>,
        },
    }

    /// What schemars generates for `T` through its own generic entry point.
    fn schemars_root<T: JsonSchema>(contract: Contract) -> Value {
        let mut settings = SchemaSettings::draft2020_12();
        settings.contract = contract;
        settings
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }

    #[test]
    fn the_erased_root_generates_what_schemars_generates_for_the_type() {
        fn same<T: JsonSchema>() {
            for contract in [Contract::Deserialize, Contract::Serialize] {
                let expected = schemars_root::<T>(contract.clone());
                let erased = generate(SchemaFns::of::<T>(), contract);
                assert_eq!(erased, expected, "{}", T::schema_name());
                // The key order is kept too (the published manifest shows it).
                assert_eq!(erased.to_string(), expected.to_string());
            }
        }
        same::<Attendee>();
        same::<Booking>();
        same::<Tree>();
        same::<Step>();
        same::<Vec<Booking>>();
        // A recursive root still refers to itself as the root.
        assert_eq!(
            generate(SchemaFns::of::<Tree>(), Contract::Deserialize)["properties"]["children"]["items"]
                ["$ref"],
            "#"
        );
        // The stand-in is only answered for inside `generate`.
        assert!(ROOT.with(Cell::get).is_none());
    }

    #[test]
    fn a_panicking_schema_leaves_no_stand_in_behind() {
        struct Broken;
        impl JsonSchema for Broken {
            fn schema_name() -> Cow<'static, str> {
                "Broken".into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                panic!("a user impl that fails");
            }
        }
        let outcome =
            std::panic::catch_unwind(|| generate(SchemaFns::of::<Broken>(), Contract::Deserialize));
        assert!(outcome.is_err());
        assert!(ROOT.with(Cell::get).is_none());
        assert_eq!(
            generate(SchemaFns::of::<Tree>(), Contract::Serialize),
            schemars_root::<Tree>(Contract::Serialize)
        );
    }

    #[test]
    fn input_schema_is_draft_2020_12_with_object_root() {
        let schema = input_schema::<Booking>();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert!(has_object_root(&schema));
        assert!(schema["$defs"]["Attendee"].is_object());
    }

    #[test]
    fn the_schema_of_no_input_is_draft_2020_12_like_a_derived_one() {
        let empty = crate::__private::empty_input_schema();
        assert_eq!(empty["$schema"], input_schema::<Booking>()["$schema"]);
        assert_eq!(empty["$schema"], DRAFT_2020_12);
        assert!(has_object_root(&empty));
        assert_eq!(empty["additionalProperties"], false);
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(tag = "t", content = "c")]
    enum Adjacent {
        Email { to: String },
        Nothing,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum External {
        Email { to: String },
        Nothing,
    }

    #[test]
    fn an_object_root_may_be_a_union_of_objects() {
        // Internally and adjacently tagged enums: every value is an object.
        assert!(has_object_root(&input_schema::<Step>()));
        assert!(has_object_root(&input_schema::<Adjacent>()));
        // An externally tagged unit variant is a string.
        assert!(!has_object_root(&input_schema::<External>()));
        assert!(!has_object_root(&input_schema::<String>()));
        assert!(!has_object_root(&json!(true)));
        assert!(has_object_root(&json!({
            "$ref": "#/$defs/A",
            "$defs": {"A": {"anyOf": [{"type": "object"}, {"$ref": "#/$defs/B"}]}, "B": {"type": "object"}}
        })));
        assert!(has_object_root(
            &json!({"allOf": [{"required": ["a"]}, {"type": "object"}]})
        ));
        assert!(!has_object_root(&json!({"oneOf": []})));
        assert!(!has_object_root(
            &json!({"anyOf": [{"type": "object"}, {"type": "null"}]})
        ));
        // A `$ref` cycle ends, also one through two branches (2^n paths without the budget).
        assert!(!has_object_root(&json!({"$ref": "#"})));
        assert!(!has_object_root(
            &json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]})
        ));
    }

    #[test]
    fn client_compatible_inlines_refs_and_collapses_nullable_unions() {
        let schema = client_compatible(&input_schema::<Booking>());
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "{text}");
        assert!(!text.contains("$defs"), "{text}");
        assert!(!text.contains("\"null\""), "{text}");
        assert_eq!(schema["properties"]["note"]["type"], json!("string"));
        assert_eq!(
            schema["properties"]["backup"]["properties"]["email"]["type"],
            json!("string")
        );
        assert_eq!(
            schema["properties"]["attendee"]["required"],
            json!(["email"])
        );
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Page {
        #[serde(default)]
        cursor: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
        #[serde(default)]
        owner: Option<Attendee>,
        #[serde(default = "default_sort")]
        sort: Option<String>,
    }

    fn default_sort() -> Option<String> {
        Some("name".into())
    }

    /// Found by an author trial: `{"type": "string", "default": null}` contradicted itself.
    #[test]
    fn a_null_default_goes_with_the_null_it_defaulted_to() {
        let draft = input_schema::<Page>();
        assert_eq!(draft["properties"]["cursor"]["default"], Value::Null);
        assert!(draft["properties"]["cursor"].get("default").is_some());
        let schema = client_compatible(&draft);
        for field in ["cursor", "limit", "owner"] {
            let property = &schema["properties"][field];
            assert!(property.get("default").is_none(), "{field}: {property}");
            assert!(property.get("type").is_some(), "{field}: {property}");
        }
        // A default that is an instance of the collapsed schema stays.
        assert_eq!(schema["properties"]["sort"]["default"], json!("name"));
        // The same collapse of a schema written by hand, with `null` among its values.
        let mut written =
            json!({ "type": ["string", "null"], "enum": ["a", null], "default": null })
                .as_object()
                .cloned()
                .unwrap();
        collapse_nullable(&mut written);
        assert_eq!(
            Value::Object(written),
            json!({ "type": "string", "enum": ["a"] })
        );
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Forest {
        trees: Vec<Tree>,
    }

    #[test]
    fn client_compatible_keeps_recursive_definitions() {
        let schema = client_compatible(&input_schema::<Forest>());
        // The first level is inlined; the recursion cannot be, so it stays a `$ref` whose
        // definition is kept, and the output is finite.
        let items = &schema["properties"]["trees"]["items"];
        assert_eq!(items["type"], json!("object"));
        assert_eq!(
            items["properties"]["children"]["items"]["$ref"],
            json!("#/$defs/Tree")
        );
        assert_eq!(schema["$defs"]["Tree"]["type"], json!("object"));
    }
}
