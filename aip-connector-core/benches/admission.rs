//! What admission costs on top of schema compilation.
//!
//! A manifest of 1,000 capabilities, each with a realistic 10-property input schema (patterns,
//! formats, enums, bounded integers, a nested object, an array) and an output schema, under
//! contracts that pass every SDK rule. The group measures:
//!
//! - `admit_manifest/strict`: full admission with [`AdmissionPolicy::strict`] and a claim for
//!   every capability (all of phases A–F, every schema compiled once);
//! - `compile_only/jsonschema`: the same 2,000 schemas compiled with
//!   `jsonschema::draft202012::new` and kept, and nothing else: the floor admission cannot go
//!   below.
//!
//! Neither measurement includes dropping its result (see `bench_admission`). Both are taken
//! twice: in wall time (group `admission`) and in the benchmarking thread's CPU time (group
//! `admission_cpu`, see `ThreadCpuTime`).
//!
//! Run with `cargo bench -p aip-connector-core --bench admission`; the README's Performance
//! section records the figures.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aip_connector_core::CapabilityId;
use aip_connector_core::admission::{AdmissionPolicy, ImplementationSupportMap, admit_manifest};
use aip_connector_core::model::{CapabilityImplementationSupport, Manifest};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, Throughput};
use serde_json::{Value, json};

/// Capabilities in the benchmark manifest.
const CAPABILITIES: usize = 1_000;

/// A 10-property input schema, distinct per capability.
fn input_schema(index: usize) -> Value {
    json!({
        "type": "object",
        "description": format!("Input of operation {index}"),
        "properties": {
            "customer_id": { "type": "string", "pattern": "^cus_[A-Za-z0-9]{8,32}$" },
            "email": { "type": "string", "format": "email", "maxLength": 254 },
            "created_after": { "type": "string", "format": "date-time" },
            "status": { "type": "string", "enum": ["open", "pending", "closed", format!("custom_{index}")] },
            "priority": { "type": "integer", "minimum": 1, "maximum": 5 },
            "amount_cents": { "type": "integer", "minimum": 0, "maximum": 10_000_000 + index },
            "currency": { "type": "string", "pattern": "^[A-Z]{3}$" },
            "address": {
                "type": "object",
                "properties": {
                    "line1": { "type": "string", "minLength": 1, "maxLength": 200 },
                    "city": { "type": "string", "maxLength": 100 },
                    "postal_code": { "type": "string", "pattern": "^[0-9A-Z -]{3,10}$" },
                    "country": { "type": "string", "enum": ["DE", "FR", "GB", "US"] }
                },
                "required": ["line1", "country"],
                "additionalProperties": false
            },
            "tags": {
                "type": "array",
                "items": { "type": "string", "maxLength": 32 },
                "maxItems": 20,
                "uniqueItems": true
            },
            "note": { "type": "string", "maxLength": 2_000 }
        },
        "required": ["customer_id", "status"],
        "additionalProperties": false
    })
}

/// The output schema: a record with an id, a status, a timestamp and line items.
fn output_schema(index: usize) -> Value {
    json!({
        "type": "object",
        "description": format!("Output of operation {index}"),
        "properties": {
            "id": { "type": "string", "pattern": "^ord_[a-z0-9]{12}$" },
            "status": { "type": "string", "enum": ["accepted", "rejected", "queued"] },
            "updated_at": { "type": "string", "format": "date-time" },
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": { "type": "string" },
                        "quantity": { "type": "integer", "minimum": 1 }
                    },
                    "required": ["sku", "quantity"]
                }
            }
        },
        "required": ["id", "status"]
    })
}

/// A write contract using most sections (every SDK rule satisfied) or a plain read contract.
fn contract(index: usize) -> Value {
    if index.is_multiple_of(2) {
        return json!({
            "side_effects": ["read"],
            "idempotency": { "requirement": "optional", "collision_behavior": "return_original_result", "key_scope": "tenant" },
            "execution": {
                "supports_sync": true, "supports_async": false, "supports_streaming": false,
                "supports_cancel": false, "supports_retry": false,
                "expected_completion": "sync", "retry_safety": "safe"
            },
            "data": { "sensitivity": "internal", "contains_pii": false, "redaction_required": false }
        });
    }
    json!({
        "side_effects": ["write", "external_network"],
        "idempotency": {
            "requirement": "required",
            "collision_behavior": "revalidate_input_hash",
            "key_scope": "tenant",
            "ttl_ms": 86_400_000
        },
        "execution": {
            "supports_sync": true, "supports_async": true, "supports_streaming": false,
            "supports_cancel": true, "supports_retry": true,
            "expected_completion": "any", "retry_safety": "safe_with_idempotency_key"
        },
        "data": { "sensitivity": "confidential", "contains_pii": true, "redaction_required": true },
        "credentials": { "required": true, "required_scopes": ["orders.write"], "allow_oauth_refresh": true },
        "sla": { "timeout_ms": 30_000, "async_expected": false },
        "transaction": {
            "supported_modes": ["execute", "plan", "commit", "reconcile"],
            "requires_plan_before_commit": true,
            "dry_run_fidelity": "schema_only"
        }
    })
}

/// The benchmark manifest, speaking two profiles.
fn manifest() -> Manifest {
    let capabilities: Vec<Value> = (0..CAPABILITIES)
        .map(|index| {
            json!({
                "id": format!("cap:bench:operation_{index}"),
                "name": format!("Operation {index}"),
                "kind": "tool",
                "input_schema": input_schema(index),
                "output_schema": output_schema(index),
                "risk": "medium",
                "bindings": [{ "profile": "aip.mcp.compat.v1", "tool_name": format!("operation_{index}") }],
                "contract": contract(index)
            })
        })
        .collect();
    serde_json::from_value(json!({
        "manifest_version": "aip-manifest/v1",
        "agent": { "id": "agent:bench", "kind": "service" },
        "capabilities": capabilities,
        "profiles": ["aip.native.http.v1", "aip.mcp.compat.v1"]
    }))
    .expect("the benchmark manifest matches the wire model")
}

/// A claim for every capability that supports everything its contract declares.
fn support(manifest: &Manifest) -> ImplementationSupportMap {
    let everything = CapabilityImplementationSupport {
        invocation: true,
        cancellation: true,
        streaming: false,
        retry: true,
        transaction: true,
        reconciliation: true,
        compensation: false,
        approval: false,
        credentials: true,
    };
    manifest
        .capabilities
        .iter()
        .map(|capability| (CapabilityId::from(capability.id.as_str()), everything))
        .collect()
}

/// The baseline: every input and output schema compiled with jsonschema, validators kept.
fn compile_all(manifest: &Manifest) -> Vec<jsonschema::Validator> {
    let mut validators = Vec::with_capacity(2 * manifest.capabilities.len());
    for capability in &manifest.capabilities {
        let schemas = std::iter::once(&capability.input_schema).chain(&capability.output_schema);
        for schema in schemas {
            match jsonschema::draft202012::new(schema) {
                Ok(validator) => validators.push(validator),
                Err(error) => panic!("benchmark schema must compile: {error}"),
            }
        }
    }
    validators
}

/// On-CPU time of the benchmarking thread, from Linux's `/proc/thread-self/schedstat`.
///
/// The machine these figures come from has two cores shared with parallel builds; wall time
/// there measures the neighbours as much as admission, CPU time much less so. Where the file
/// does not exist, this falls back to wall time.
struct ThreadCpuTime;

/// Nanoseconds the current thread has run, or wall nanoseconds since first use as a fallback.
fn thread_cpu_nanos() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|stat| stat.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            let elapsed = ORIGIN.get_or_init(Instant::now).elapsed();
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
        })
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }

    fn end(&self, started: u64) -> u64 {
        thread_cpu_nanos().saturating_sub(started)
    }

    fn add(&self, first: &u64, second: &u64) -> u64 {
        first + second
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuMilliseconds
    }
}

/// Shows CPU nanoseconds as milliseconds and element throughput per CPU second.
struct CpuMilliseconds;

impl ValueFormatter for CpuMilliseconds {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|value| *value /= 1e6);
        "ms (CPU)"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iteration = match *throughput {
            Throughput::Elements(count)
            | Throughput::ElementsAndBytes {
                elements: count, ..
            } => count,
            Throughput::Bytes(count)
            | Throughput::BytesDecimal(count)
            | Throughput::Bits(count) => count,
        };
        values
            .iter_mut()
            .for_each(|value| *value = per_iteration as f64 * 1e9 / *value);
        "elem/s (CPU)"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// Measures admission and the compile-only baseline under one measurement.
fn bench_admission<M: Measurement>(
    criterion: &mut Criterion<M>,
    group_name: &str,
    manifest: &Manifest,
    support: &ImplementationSupportMap,
) {
    let policy = AdmissionPolicy::strict();
    let mut group = criterion.benchmark_group(group_name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(CAPABILITIES as u64));
    // Both routines return what a host keeps (the token; the validators), dropped after each
    // timed iteration: a host holds them for its lifetime, and freeing 2,000 validators costs
    // about half as much as compiling them, which would only blur the comparison.
    group.bench_function("admit_manifest/strict", |b| {
        b.iter_batched(
            || (),
            |()| admit_manifest(black_box(manifest), &policy, support),
            BatchSize::PerIteration,
        );
    });
    group.bench_function("compile_only/jsonschema", |b| {
        b.iter_batched(
            || (),
            |()| compile_all(black_box(manifest)),
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn main() {
    let manifest = manifest();
    let support = support(&manifest);
    if let Err(report) = admit_manifest(&manifest, &AdmissionPolicy::strict(), &support) {
        panic!("the benchmark manifest must be admitted: {report}");
    }
    let mut wall = Criterion::default().configure_from_args();
    bench_admission(&mut wall, "admission", &manifest, &support);
    let mut cpu = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .configure_from_args();
    bench_admission(&mut cpu, "admission_cpu", &manifest, &support);
    wall.final_summary();
}
