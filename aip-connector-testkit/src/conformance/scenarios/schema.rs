//! `schema_enforcement`: inputs that violate the declared input schema never reach the handler
//! (`action.input_schema_invalid`), and an output that violates the declared output schema is
//! replaced by `action.output_schema_invalid`.
//!
//! Each example must complete (`declared_output_produced`: its output matches the declared
//! schema), every declared example of a capability, not only the first; one that fails
//! produced no output to check and leaves the assertion unexercised, and failed. The output
//! replaced for `invalid_output_rejected` is that of a capability whose handler returned one on
//! its example.

use aip_connector::CapabilityDefinition;
use aip_connector::aip_connector_core::schema::{SchemaLimits, compile_draft202012};
use aip_connector::codes;
use aip_connector::model::ActionResultStatus;
use serde_json::{Map, Value, json};

use super::{code, shown_code};
use crate::conformance::{Evidence, Harness};

/// Inputs derived from `schema` and the valid `example` that the schema rejects: a non-object,
/// a required property removed, a property of the wrong type, and an unknown property when
/// additional properties are closed. Each candidate is kept only if the compiled schema does
/// reject it, so a schema that accepts arrays (say, one for a `serde_json::Value` input) is not
/// blamed for letting one through.
/// `Err` says why the schema could not be used.
fn invalid_inputs(schema: &Value, example: &Value) -> Result<Vec<(String, Value)>, String> {
    let compiled =
        compile_draft202012(schema, &SchemaLimits::default()).map_err(|e| e.to_string())?;
    let mut candidates = candidate_inputs(schema, example);
    candidates.retain(|(_, input)| !compiled.is_valid(input));
    Ok(candidates)
}

/// The candidates of [`invalid_inputs`], before the schema has had its say.
fn candidate_inputs(schema: &Value, example: &Value) -> Vec<(String, Value)> {
    let mut out = vec![("a JSON array instead of an object".to_owned(), json!([]))];
    let Some(object) = example.as_object() else {
        return out;
    };
    if let Some(required) = schema.get("required").and_then(Value::as_array)
        && let Some(name) = required.iter().filter_map(Value::as_str).next()
    {
        let mut missing = object.clone();
        missing.remove(name);
        out.push((
            format!("required property `{name}` removed"),
            Value::Object(missing),
        ));
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if let Some(wrong) = wrong_type(property) {
                let mut changed = object.clone();
                changed.insert(name.clone(), wrong);
                out.push((
                    format!("property `{name}` of the wrong type"),
                    Value::Object(changed),
                ));
                break;
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        let mut extra: Map<String, Value> = object.clone();
        extra.insert("aip_conformance_unknown_property".to_owned(), json!(1));
        out.push(("an undeclared property".to_owned(), Value::Object(extra)));
    }
    out
}

/// A value of another JSON type than the property's declared (single) type.
fn wrong_type(property: &Value) -> Option<Value> {
    let kind = match property.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => return None,
    };
    Some(match kind {
        "string" => json!(12345),
        "integer" | "number" => json!("not a number"),
        "boolean" => json!("not a boolean"),
        "array" => json!({ "not": "an array" }),
        "object" => json!("not an object"),
        _ => return None,
    })
}

/// An output the declared output schema rejects.
fn invalid_output(schema: &Value) -> Option<Value> {
    let compiled = compile_draft202012(schema, &SchemaLimits::default()).ok()?;
    [
        json!("aip-conformance: not the declared output"),
        json!({}),
        json!(null),
        json!([{ "aip_conformance": true }]),
    ]
    .into_iter()
    .find(|candidate| !compiled.is_valid(candidate))
}

/// How a failure names example `n` of `capability`: "its declared example" when it declares
/// one, else which of them (counted from 1, as an author reads the attribute).
fn example_name(capability: &CapabilityDefinition, n: usize) -> String {
    if capability.examples.len() == 1 {
        "its declared example".to_owned()
    } else {
        format!(
            "its declared example #{} of {}",
            n + 1,
            capability.examples.len()
        )
    }
}

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let examples = h.examples();
    if examples.is_empty() {
        evidence.no_example("no capability declares an example input: nothing can be invoked");
        return evidence;
    }

    // invalid_input_rejected, on every capability with an example.
    let mut tried = 0;
    for (capability, example) in &examples {
        let calls_before = h.probe().calls(capability.id().as_str());
        let inputs = match invalid_inputs(&capability.capability.input_schema, example) {
            Ok(inputs) if inputs.is_empty() => {
                evidence.note(format!(
                    "invalid_input_rejected: the input schema of `{}` accepts every invalid input the suite derives, so none was sent",
                    capability.id()
                ));
                continue;
            }
            Ok(inputs) => inputs,
            Err(why) => {
                evidence.note(format!(
                    "invalid_input_rejected: the input schema of `{}` did not compile here ({why}), so no invalid input was derived",
                    capability.id()
                ));
                continue;
            }
        };
        for (n, (what, input)) in inputs.into_iter().enumerate() {
            tried += 1;
            let key = format!("conformance-schema-{}-{n}", capability.id());
            let result = h
                .host()
                .invoke(h.action(capability, input, &key), &h.caller())
                .await;
            evidence.artifact(format!("action:{}", result.action_id));
            evidence.assert(
                "invalid_input_rejected",
                code(&result) == codes::ACTION_INPUT_SCHEMA_INVALID,
                || {
                    format!(
                        "`{}` with {what} answered `{}` ({}) instead of `{}`",
                        capability.id(),
                        result.status,
                        shown_code(&result),
                        codes::ACTION_INPUT_SCHEMA_INVALID
                    )
                },
            );
        }
        let calls_after = h.probe().calls(capability.id().as_str());
        evidence.assert(
            "invalid_input_rejected",
            calls_after == calls_before,
            || {
                format!(
                    "the handler of `{}` ran {} time(s) on invalid input",
                    capability.id(),
                    calls_after - calls_before
                )
            },
        );
    }
    if tried == 0 {
        evidence.assert("invalid_input_rejected", false, || {
            "no invalid input was sent to any capability with an example (see the notes): declare the input's type, required properties or `additionalProperties: false` so that some input is invalid".to_owned()
        });
    }

    // declared_output_produced: the examples run and their outputs match the declared output
    // schema (a handler whose serialization disagrees with its published schema fails here).
    // `returned`: the capabilities whose handler returned an output on its example, valid or not.
    let mut returned = Vec::new();
    for (capability, n, example) in h.every_example() {
        let which = example_name(capability, n);
        let key = format!("conformance-schema-example-{}-{n}", capability.id());
        let settled = h
            .settle(h.host(), h.action(capability, example, &key))
            .await;
        evidence.artifact(format!("action:{}", settled.result.action_id));
        // Only a completed example's output was checked: one that failed produced none, which
        // does not count as producing the declared one.
        if settled.result.status == ActionResultStatus::Completed
            || code(&settled.result) == codes::ACTION_OUTPUT_SCHEMA_INVALID
        {
            if !returned.contains(&capability.id().as_str()) {
                returned.push(capability.id().as_str());
            }
        } else {
            super::call_unexercised(
                &mut evidence,
                h,
                "declared_output_produced",
                capability.id().as_str(),
                &settled.result,
                format!(
                    "`{}` on {which} answered {}, so no output of it was checked against its output schema",
                    capability.id(),
                    super::outcome(&settled.result)
                ),
            );
        }
        evidence.assert(
            "declared_output_produced",
            code(&settled.result) != codes::ACTION_OUTPUT_SCHEMA_INVALID,
            || {
                format!(
                    "`{}` on {which} produced an output its own output schema rejects: {:?}",
                    capability.id(),
                    settled.result.error.as_ref().map(|e| &e.details)
                )
            },
        );
    }

    // invalid_output_rejected: a handler's valid output replaced by one the schema rejects. Only
    // an output a handler returns can be replaced, so a capability whose handler returned one on
    // its example is preferred.
    let mut targets: Vec<_> = examples
        .iter()
        .filter_map(|(capability, example)| {
            let schema = capability.capability.output_schema.as_ref()?;
            invalid_output(schema).map(|output| (*capability, example.clone(), output))
        })
        .collect();
    targets.sort_by_key(|(capability, _, _)| !returned.contains(&capability.id().as_str()));
    match targets.into_iter().next() {
        None => evidence.assert("invalid_output_rejected", false, || {
            "no capability with an example has an output schema that rejects anything".to_owned()
        }),
        Some((capability, _, _)) if !returned.contains(&capability.id().as_str()) => {
            evidence.unexercised(
                "invalid_output_rejected",
                capability.id().as_str(),
                format!(
                    "no handler of a capability whose output schema rejects something returned an output on its example (`{}` did not, see `declared_output_produced`), so there was none to replace",
                    capability.id()
                ),
            );
        }
        Some((capability, example, output)) => {
            h.probe().override_output(Some(output.clone()));
            let settled = h
                .settle(
                    h.host(),
                    h.action(capability, example, "conformance-schema-output"),
                )
                .await;
            h.probe().override_output(None);
            evidence.artifact(format!("action:{}", settled.result.action_id));
            evidence.assert(
                "invalid_output_rejected",
                code(&settled.result) == codes::ACTION_OUTPUT_SCHEMA_INVALID,
                || {
                    format!(
                        "`{}` returning {output} answered `{}` ({}) instead of `{}`",
                        capability.id(),
                        settled.result.status,
                        shown_code(&settled.result),
                        codes::ACTION_OUTPUT_SCHEMA_INVALID
                    )
                },
            );
        }
    }
    evidence
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whats(schema: &Value, example: &Value) -> Vec<String> {
        invalid_inputs(schema, example)
            .unwrap()
            .into_iter()
            .map(|(what, _)| what)
            .collect()
    }

    #[test]
    fn every_candidate_of_a_closed_object_schema_is_invalid() {
        let schema = json!({
            "type": "object",
            "properties": { "n": { "type": "integer" } },
            "required": ["n"],
            "additionalProperties": false
        });
        assert_eq!(
            whats(&schema, &json!({ "n": 1 })),
            [
                "a JSON array instead of an object",
                "required property `n` removed",
                "property `n` of the wrong type",
                "an undeclared property",
            ]
        );
    }

    #[test]
    fn candidates_the_schema_accepts_are_dropped() {
        // A `serde_json::Value` input: every candidate is valid, so none is sent.
        assert!(whats(&json!({}), &json!({ "n": 1 })).is_empty());
        // An open object: an array is invalid, an undeclared property is not a candidate.
        let open = json!({ "type": "object", "properties": { "n": { "type": "integer" } } });
        assert_eq!(
            whats(&open, &json!({ "n": 1 })),
            [
                "a JSON array instead of an object",
                "property `n` of the wrong type"
            ]
        );
        // An array input: the array candidate is dropped.
        assert!(whats(&json!({ "type": "array" }), &json!([1])).is_empty());
    }
}
