//! Phase B: schemas (upstream checks 11–13).
//!
//! Checks 11 and 12 run for every capability first; a second loop then compiles every input and
//! output schema, including roots already flagged by check 11, as upstream does. Compilation is
//! the expensive part of admission, so each schema is compiled exactly once, in place (no copy of
//! the schema value), and the compiled validators are handed to the admitted token.

use serde_json::Value;

use super::codes;
use crate::issue::Issue;
use crate::model::{Capability, Manifest};
use crate::schema::{self, CompiledSchema, SchemaLimits};

/// The compiled schemas of one capability.
#[derive(Clone, Debug)]
pub(super) struct CapabilitySchemas {
    /// The compiled `input_schema`.
    pub(super) input: CompiledSchema,
    /// The compiled `output_schema`, when the capability declares one.
    pub(super) output: Option<CompiledSchema>,
}

/// Runs checks 11 and 12 for every schema of every capability, in manifest order.
pub(super) fn check_shapes(manifest: &Manifest, allow_remote: bool, out: &mut Vec<Issue>) {
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        for (path, schema) in schema_locations(capability, index) {
            if check_root(capability, &path, schema, out) && !allow_remote {
                check_remote_references(capability, &path, schema, out);
            }
        }
    }
}

/// Runs check 13 for every schema; returns the compiled schemas of the capabilities whose
/// schemas all compiled, in manifest order (complete when no issue was added).
pub(super) fn compile(
    manifest: &Manifest,
    limits: &SchemaLimits,
    out: &mut Vec<Issue>,
) -> Vec<CapabilitySchemas> {
    let mut compiled = Vec::with_capacity(manifest.capabilities.len());
    for (index, capability) in manifest.capabilities.iter().enumerate() {
        let base = format!("/capabilities/{index}");
        let input = compile_schema(
            capability,
            format!("{base}/input_schema"),
            &capability.input_schema,
            limits,
            out,
        );
        let output = capability.output_schema.as_ref().map(|schema| {
            compile_schema(
                capability,
                format!("{base}/output_schema"),
                schema,
                limits,
                out,
            )
        });
        match (input, output) {
            (Some(input), None) => compiled.push(CapabilitySchemas {
                input,
                output: None,
            }),
            (Some(input), Some(Some(output))) => compiled.push(CapabilitySchemas {
                input,
                output: Some(output),
            }),
            _ => {}
        }
    }
    compiled
}

/// The input schema and, if declared, the output schema of a capability, with their paths.
fn schema_locations(
    capability: &Capability,
    index: usize,
) -> impl Iterator<Item = (String, &Value)> {
    let input = (
        format!("/capabilities/{index}/input_schema"),
        &capability.input_schema,
    );
    let output = capability
        .output_schema
        .as_ref()
        .map(|schema| (format!("/capabilities/{index}/output_schema"), schema));
    std::iter::once(input).chain(output)
}

/// Check 11: a JSON Schema is an object or a boolean; anything else validates nothing sensible.
///
/// Returns whether the root is valid, because check 12 is skipped for an invalid root.
fn check_root(capability: &Capability, path: &str, schema: &Value, out: &mut Vec<Issue>) -> bool {
    if schema::is_valid_root(schema) {
        return true;
    }
    out.push(
        Issue::new(
            codes::SCHEMA_INVALID_ROOT,
            path,
            "JSON Schema root must be an object or boolean",
        )
        .with_capability(&capability.id)
        .with_schema_pointer(""),
    );
    false
}

/// Check 12: a non-fragment `$ref` would make validation depend on documents outside the
/// manifest, so it is refused unless the policy allows it (one issue per reference).
fn check_remote_references(
    capability: &Capability,
    path: &str,
    schema: &Value,
    out: &mut Vec<Issue>,
) {
    for remote in schema::remote_references(schema) {
        out.push(
            Issue::new(
                codes::SCHEMA_REMOTE_REFERENCE_FORBIDDEN,
                path,
                format!(
                    "non-fragment schema reference `{}` is forbidden",
                    remote.reference
                ),
            )
            .with_capability(&capability.id)
            .with_schema_pointer(remote.pointer),
        );
    }
}

/// Check 13: the host validates every input and output against these schemas, so each one
/// must stay within the complexity limits and compile as Draft 2020-12.
fn compile_schema(
    capability: &Capability,
    path: String,
    schema: &Value,
    limits: &SchemaLimits,
    out: &mut Vec<Issue>,
) -> Option<CompiledSchema> {
    match schema::compile_draft202012(schema, limits) {
        Ok(compiled) => Some(compiled),
        Err(error) => {
            out.push(
                Issue::new(codes::SCHEMA_COMPILE_FAILED, path, error.to_string())
                    .with_capability(&capability.id)
                    .with_schema_pointer(""),
            );
            None
        }
    }
}
