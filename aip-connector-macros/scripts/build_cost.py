#!/usr/bin/env python3
"""Measures the build cost of `#[capability]` / `#[connector]`.

Generates two fixture crates under target/build-cost/ (ignored by git) that share one target
dir, so dependencies are compiled once. They depend by path on a snapshot of the workspace's
aip-connector crates taken when the script starts, so edits made to the checkout while it
measures cannot trigger a dependency rebuild inside a timed build:

- with_attributes: 100 input/output type pairs and 100 `#[capability]` handlers in one
  `#[connector]` impl, with contracts varied the way real connectors vary them;
- without_attributes: the same types (same derives) and the same handlers with the same bodies
  in a plain impl block.

After one warm-up build it alternates, in one run, "touch lib.rs, `cargo build -p <fixture>`"
between the crates and prints the median wall time of each, the ratio, and the same for
`cargo check`. CPU time (user + system of cargo and rustc) is printed alongside: it is far
less sensitive than wall time to other work on the machine. Incremental compilation is off
(CARGO_INCREMENTAL=0), so every timed build compiles the whole fixture crate instead of
replaying cached queries. `--hand-written` adds a third fixture, the plain handlers plus a
hand-written dispatcher and schema table, to tell the macro's own cost from the cost of
decoding, encoding and describing typed handlers at all; `--passes` adds rustc's per-pass
times and the expanded source size of each fixture, to see where the time goes.

Run from the repository root:

    python3 aip-connector-macros/scripts/build_cost.py --runs 5
"""

import argparse
import datetime
import json
import os
import pathlib
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass

REPO = pathlib.Path(__file__).resolve().parents[2]
WITH = "with_attributes"
WITHOUT = "without_attributes"
# Optional third fixture: the plain handlers plus a dispatcher and schema table written by hand
# (what an author would write instead of the attributes), to separate the macro's own cost
# from the cost of decoding, encoding and describing 100 typed handlers at all.
HAND = "hand_written"
# The workspace crates the fixtures need, copied into the snapshot.
SNAPSHOT_CRATES = ["aip-connector", "aip-connector-core", "aip-connector-macros"]

# Twenty nouns times the verbs below give 100 distinct handler names.
ENTITIES = [
    "account", "invoice", "ticket", "booking", "contact", "order", "payment", "document",
    "user", "project", "message", "repository", "shipment", "subscription", "device",
    "report", "calendar", "lead", "asset", "policy",
]

# The ten contract shapes, cycled: (verb, attribute, extractor parameters). Each one is a
# consistent contract under the macro's defaults (aip-connector-macros/src/resolve.rs) and lints.
KINDS = [
    ("get",
     "risk = low, side_effects = [read], data(sensitivity = public)",
     []),
    ("search",
     "risk = low, side_effects = [read], data(sensitivity = internal), tags = [\"search\"]",
     [("cancel", "Cancellation")]),
    ("update",
     "risk = medium, side_effects = [write], idempotency(required), data(sensitivity = internal)",
     [("key", "IdempotencyKey")]),
    ("stream",
     "risk = low, side_effects = [read], data(sensitivity = public), tags = [\"streaming\"]",
     [("sink", "StreamSink<{out}>"), ("cancel", "Cancellation")]),
    ("sync",
     "risk = medium, side_effects = [write, external_network], "
     "idempotency(required, scope = tenant), data(sensitivity = internal, pii), "
     "transaction(modes = [execute, dry_run])",
     [("key", "IdempotencyKey"), ("checkpoint", "Checkpoint")]),
    ("charge",
     "risk = high, side_effects = [write, financial], idempotency(required), "
     "data(sensitivity = confidential), approval(required, evidence = [reason, input_snapshot])",
     [("key", "IdempotencyKey"), ("approval", "Approval")]),
    ("fetch",
     "risk = low, side_effects = [read], data(sensitivity = internal), "
     "credentials(required, scopes = [\"{entity}.read\"])",
     [("credential", "Credential"), ("deadline", "Deadline")]),
    ("delete",
     "risk = medium, side_effects = [delete], idempotency(required), "
     "data(sensitivity = internal), approval(required, evidence = [reason])",
     [("key", "IdempotencyKey"), ("approval", "Approval"), ("tenant", "Tenant")]),
    ("book",
     "risk = medium, side_effects = [write, external_network], idempotency(required), "
     "data(sensitivity = internal, pii), "
     "transaction(modes = [execute, dry_run, plan, commit, reconcile], "
     "fidelity = downstream_validation), "
     "reconcile = Self::reconcile_{name}, validate = Self::preview_{name}, "
     "examples = [r#\"{example}\"#]",
     [("key", "IdempotencyKey"), ("checkpoint", "Checkpoint")]),
    ("notify",
     "risk = medium, side_effects = [send_message], idempotency(required), "
     "data(sensitivity = internal, pii), approval(required, evidence = [reason]), "
     "credentials(required, scopes = [\"{entity}.send\"])",
     [("key", "IdempotencyKey"), ("approval", "Approval"), ("credential", "Credential"),
      ("caller", "Caller")]),
]

# Input field shapes, cycled so the types vary: (field name, Rust type, expression converting
# the field into the handler's u64 total, Option<String> remark or Vec<String> entries).
NUMBERS = [("limit", "u32", "u64::from(input.limit)"),
           ("amount_cents", "u64", "input.amount_cents"),
           ("offset", "i64", "input.offset.unsigned_abs()"),
           ("weight", "f64", "input.weight.max(0.0) as u64")]
OPTIONALS = [("note", "Option<String>", "input.note.clone()"),
             ("page", "Option<u32>", "input.page.map(|page| page.to_string())")]
LISTS = [("tags", "Vec<String>", "input.tags.clone()"),
         ("ids", "Vec<u64>", "input.ids.iter().map(u64::to_string).collect()")]


@dataclass
class Handler:
    """One generated capability: its name, contract shape and field shapes."""

    index: int
    verb: str
    entity: str
    attribute: str
    extractors: list
    number: tuple
    optional: tuple
    listing: tuple

    @property
    def name(self):
        return f"{self.verb}_{self.entity}"

    @property
    def camel(self):
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def input(self):
        return f"{self.camel}Input"

    @property
    def output(self):
        return f"{self.camel}Output"


def handlers(count):
    """The `count` handlers, contract shapes and field shapes cycled."""
    out = []
    for index in range(count):
        verb, attribute, extractors = KINDS[index % len(KINDS)]
        entity = ENTITIES[(index // 5) % len(ENTITIES)]
        if index >= 5 * len(ENTITIES):
            entity = f"{entity}{index // (5 * len(ENTITIES))}"
        h = Handler(index, verb, entity, attribute, extractors,
                    NUMBERS[index % len(NUMBERS)], OPTIONALS[(index // 2) % len(OPTIONALS)],
                    LISTS[(index // 3) % len(LISTS)])
        example = f'{{"{entity}_ref": "{entity}-1", "{h.number[0]}": 1, "dry": false, ' \
                  f'"{h.optional[0]}": null, "{h.listing[0]}": []}}'
        h.attribute = attribute.format(entity=entity, name=h.name, example=example)
        h.extractors = [(p, t.format(out=h.output)) for p, t in extractors]
        out.append(h)
    names = [h.name for h in out]
    assert len(set(names)) == len(names), "handler names must be distinct"
    return out


def render_types(h):
    """The input and output types of one handler, with the derives both crates share."""
    return f"""/// Input of `{h.name}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct {h.input} {{
    /// The {h.entity} this call is about.
    pub {h.entity}_ref: String,
    /// A number the provider needs.
    pub {h.number[0]}: {h.number[1]},
    /// Only report what would happen.
    pub dry: bool,
    /// Optional extra detail.
    pub {h.optional[0]}: {h.optional[1]},
    /// Items the call works on.
    pub {h.listing[0]}: {h.listing[1]},
}}

/// Output of `{h.name}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct {h.output} {{
    /// Provider id of the {h.entity}.
    pub {h.entity}_id: String,
    /// Items counted or amount processed.
    pub total: u64,
    /// Whether the provider accepted the call.
    pub accepted: bool,
    /// Optional provider remark.
    pub remark: Option<String>,
    /// Provider entries.
    pub entries: Vec<String>,
}}
"""


def extractor_uses(h):
    """Statements using each extractor, so every parameter does real work in the body."""
    lines = []
    for param, ty in h.extractors:
        if ty == "IdempotencyKey":
            lines.append(f"total += {param}.as_str().len() as u64;")
        elif ty == "Cancellation":
            lines.append(f"let accepted = accepted && !{param}.is_cancelled();")
        elif ty == "Checkpoint":
            lines.append(
                f"{param}.record(ProviderOperationRef {{ provider: \"{h.entity}-api\".into(), "
                f"operation_id: format!(\"op-{{id}}\"), request_id: None }}, None).await?;")
        elif ty == "Approval":
            lines.append(f"total += {param}.approvals().approval_ids.len() as u64;")
        elif ty == "Credential":
            lines.append(f"total += {param}.scopes().len() as u64;")
        elif ty == "Deadline":
            lines.append(f"let remark = remark.or_else(|| "
                         f"Some(format!(\"{{}}ms left\", {param}.remaining().as_millis())));")
        elif ty == "Tenant":
            lines.append(f"let id = format!(\"{{}}/{{id}}\", {param}.id());")
        elif ty == "Caller":
            lines.append(f"let remark = remark.or_else(|| Some({param}.issuer().to_owned()));")
        elif ty.startswith("StreamSink"):
            lines.append(f"for (n, entry) in entries.iter().enumerate() {{")
            lines.append(f"    {param}.send({h.output} {{ {h.entity}_id: format!(\"{{id}}-{{n}}\"), "
                         f"total: n as u64, accepted, remark: None, entries: vec![entry.clone()] }}).await?;")
            lines.append("}")
        else:
            raise ValueError(f"no use written for extractor {ty}")
    return lines


def render_handler(h, with_attributes):
    """One handler (plus its companions), identical in both crates but for the attribute."""
    params = ", ".join(["&self", f"input: {h.input}"] + [f"{p}: {t}" for p, t in h.extractors])
    body = [
        f"let id = format!(\"{h.entity}-{{}}\", input.{h.entity}_ref);",
        f"let mut total = {h.number[2]};",
        "let accepted = !input.dry;",
        f"let remark: Option<String> = {h.optional[2]};",
        f"let entries: Vec<String> = {h.listing[2]};",
        "total += entries.len() as u64;",
        *extractor_uses(h),
        f"Ok({h.output} {{ {h.entity}_id: id, total, accepted, remark, entries }})",
    ]
    attribute = f"    #[capability({h.attribute})]\n" if with_attributes else ""
    text = (f"    /// {h.verb.capitalize()} the {h.entity} at the provider.\n{attribute}"
            f"    pub async fn {h.name}({params}) -> Result<{h.output}, ConnectorFailure> {{\n"
            + "".join(f"        {line}\n" for line in body) + "    }\n")
    if "reconcile = " in h.attribute:
        text += f"""
    /// Finds out whether an interrupted `{h.name}` committed.
    pub async fn reconcile_{h.name}(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {{
        Ok(ReconcileOutcome::Committed {{
            evidence: Some(serde_json::json!({{ "operation": request.provider_operation.operation_id }})),
        }})
    }}

    /// Previews `{h.name}` without side effects.
    pub async fn preview_{h.name}(&self, input: {h.input}) -> Result<{h.output}, ConnectorFailure> {{
        Ok({h.output} {{ {h.entity}_id: input.{h.entity}_ref, total: 0, accepted: false, remark: None, entries: Vec::new() }})
    }}
"""
    return text


def render_lib(specs, crate):
    """The whole lib.rs of one fixture crate."""
    with_attributes = crate == WITH
    out = [
        "//! GENERATED by aip-connector-macros/scripts/build_cost.py: a build-cost fixture.",
        "#![allow(clippy::all)]",
        "",
        "use aip_connector::model::ProviderOperationRef;",
        "use aip_connector::prelude::*;",
        "",
    ]
    out += [render_types(h) for h in specs]
    out += ["/// The fixture connector.", "pub struct Fixture;", ""]
    if with_attributes:
        out.append('#[connector(id = "fixture")]')
    out.append("impl Fixture {")
    out.append("\n".join(render_handler(h, with_attributes) for h in specs))
    out.append("}")
    if crate == HAND:
        out.append(render_hand_dispatch(specs))
    return "\n".join(out) + "\n"


def render_hand_dispatch(specs):
    """A minimal hand-written equivalent of the generated dispatch: decode, extract, call,
    encode per capability id, and the input/output schema of each."""
    schemas = "".join(
        f"            (\"cap:fixture:{h.name}\", schemars::schema_for!({h.input}), "
        f"schemars::schema_for!({h.output})),\n" for h in specs)
    arms = []
    for h in specs:
        extract = "".join(f"                let {p} = Extractor::extract(&context)?;\n"
                          for p, _ in h.extractors)
        args = ", ".join(["input"] + [p for p, _ in h.extractors])
        arms.append(f"""            "cap:fixture:{h.name}" => Box::pin(async move {{
                let input = serde_json::from_value(input).map_err(invalid_input)?;
{extract}                let output = self.{h.name}({args}).await?;
                serde_json::to_value(output).map_err(unserializable)
            }}),
""")
    return f"""
use aip_connector::extract::Extractor;
use aip_connector::invocation::{{BoxFuture, InvocationContext}};
use aip_connector::model::ConnectorOperation;
use serde_json::Value;
use std::sync::Arc;

fn invalid_input(error: serde_json::Error) -> ConnectorFailure {{
    ConnectorFailure::new("action.invalid_input", error.to_string(), ErrorCategory::Permanent, ConnectorOperation::Invocation, "fixture")
}}

fn unserializable(error: serde_json::Error) -> ConnectorFailure {{
    ConnectorFailure::new("output.unserializable", error.to_string(), ErrorCategory::Connector, ConnectorOperation::Invocation, "fixture")
}}

impl Fixture {{
    /// Input and output schema of every capability.
    pub fn schemas() -> Vec<(&'static str, schemars::Schema, schemars::Schema)> {{
        vec![
{schemas}        ]
    }}

    /// Decodes the input, extracts, calls the handler and encodes its output.
    pub fn dispatch<'a>(&'a self, capability: &'a str, input: Value, context: Arc<dyn InvocationContext>) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {{
        match capability {{
{"".join(arms)}            _ => Box::pin(std::future::ready(Err(invalid_input(serde::de::Error::custom(capability))))),
        }}
    }}
}}
"""


def workspace_versions():
    """Dependency requirements of the repository's workspace, so the fixtures use the same."""
    manifest = tomllib.loads((REPO / "Cargo.toml").read_text())
    deps = manifest["workspace"]["dependencies"]

    def requirement(name):
        dep = deps[name]
        return dep if isinstance(dep, str) else dep["version"]

    return {name: requirement(name) for name in ("serde", "serde_json", "schemars")}


def snapshot_workspace(root):
    """Copies the aip-connector crates and the workspace manifest (members cut down to them)
    into `root`; unchanged files keep their timestamps, so an unchanged workspace means no
    rebuild. Returns the snapshot's path."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = (REPO / "Cargo.toml").read_text()
    members = ", ".join(f'"{crate}"' for crate in SNAPSHOT_CRATES)
    manifest, replaced = re.subn(r"members\s*=\s*\[[^\]]*\]", f"members = [{members}]",
                                 manifest, count=1)
    if replaced != 1:
        sys.exit("could not find `members = [...]` in the workspace Cargo.toml")
    write_if_changed(root / "Cargo.toml", manifest)
    write_if_changed(root / "Cargo.lock", (REPO / "Cargo.lock").read_text())
    for crate in SNAPSHOT_CRATES:
        source, copy = REPO / crate, root / crate
        wanted = {path.relative_to(source) for path in source.rglob("*")
                  if path.is_file() and "target" not in path.relative_to(source).parts}
        for relative in wanted:
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            write_if_changed(copy / relative, (source / relative).read_bytes())
        for stale in [p for p in copy.rglob("*") if p.is_file()]:
            if stale.relative_to(copy) not in wanted:
                stale.unlink()
    return root


def write_fixtures(root, count, snapshot, crates):
    """Writes the fixture workspace; returns the path of each crate's lib.rs."""
    versions = workspace_versions()
    root.mkdir(parents=True, exist_ok=True)
    # A workspace of its own: the repository's workspace must not adopt (or reject) the fixtures.
    write_if_changed(root / "Cargo.toml", f"""[workspace]
resolver = "3"
members = [{", ".join(f'"{crate}"' for crate in crates)}]
""")
    # The repository's lockfile pins the dependency versions the workspace builds with.
    write_if_changed(root / "Cargo.lock", (REPO / "Cargo.lock").read_text())
    specs = handlers(count)
    libs = {}
    for crate in crates:
        crate_dir = root / crate
        (crate_dir / "src").mkdir(parents=True, exist_ok=True)
        write_if_changed(crate_dir / "Cargo.toml", f"""[package]
name = "{crate}"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
aip-connector = {{ path = "{snapshot / 'aip-connector'}" }}
serde = {{ version = "{versions['serde']}", features = ["derive"] }}
serde_json = {{ version = "{versions['serde_json']}", features = ["preserve_order"] }}
schemars = "{versions['schemars']}"
""")
        libs[crate] = crate_dir / "src" / "lib.rs"
        write_if_changed(libs[crate], render_lib(specs, crate))
    return libs


def write_if_changed(path, content):
    """Leaves an unchanged file alone so cargo does not rebuild for nothing."""
    data = content.encode() if isinstance(content, str) else content
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def cargo(args, root, env, crates):
    """Runs cargo in the fixture workspace. Returns wall seconds, CPU seconds (cargo and
    rustc, user + system) and whether anything besides `crates` was recompiled.
    Stops on a failure or on a warning in a fixture: both must compile cleanly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(["cargo", *args, "--message-format=json"], cwd=root, env=env,
                            capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        sys.exit(f"`cargo {' '.join(args)}` failed:\n{result.stderr}\n{rendered(result.stdout)}")
    others_rebuilt = False
    for line in result.stdout.splitlines():
        message = json.loads(line)
        crate = message.get("target", {}).get("name")
        if message.get("reason") == "compiler-artifact" and not message["fresh"]:
            others_rebuilt |= crate not in crates
        if (message.get("reason") == "compiler-message" and crate in (WITH, WITHOUT, HAND)
                and message["message"]["level"] == "warning"):
            sys.exit(f"`cargo {' '.join(args)}` warned; the fixtures must compile cleanly:\n"
                     f"{rendered(result.stdout)}")
    return elapsed, cpu, others_rebuilt


def rendered(stdout):
    """The human-readable diagnostics inside cargo's JSON messages."""
    messages = (json.loads(line) for line in stdout.splitlines())
    return "".join(m["message"]["rendered"] for m in messages
                   if m.get("reason") == "compiler-message" and m["message"].get("rendered"))


def timed(args, root, env, crate, touch):
    """(wall, CPU) seconds of a cargo run that compiled `crate` and nothing else, after
    touching `touch` (if given). A run that recompiled a dependency is repeated."""
    for _ in range(3):
        if touch is not None:
            os.utime(touch)
        elapsed, cpu, others_rebuilt = cargo(args, root, env, {crate})
        if not others_rebuilt:
            return elapsed, cpu
        print("  a dependency was recompiled during the run; repeating it", file=sys.stderr)
    sys.exit("dependencies keep being recompiled; is something else writing the target dir?")


def measure(command, libs, root, env, runs):
    """Alternates touch + `cargo <command> -p <crate>` between the fixtures, `runs` times each;
    the order rotates every run so drift in machine load hits every crate alike. Returns the
    (wall, CPU) samples per crate and the median no-op run (cargo's fixed cost)."""
    crates = list(libs)
    samples = {crate: [] for crate in crates}
    noop = []
    for run in range(runs):
        shift = run % len(crates)
        order = crates[shift:] + crates[:shift]
        for crate in order:
            samples[crate].append(timed([command, "-p", crate], root, env, crate, libs[crate]))
        noop.append(timed([command, "-p", WITH], root, env, WITH, None)[0])
        print(f"  {command} run {run + 1}/{runs}: " + ", ".join(
            f"{crate} {samples[crate][-1][0]:.2f}s (CPU {samples[crate][-1][1]:.2f}s)"
            for crate in crates), file=sys.stderr)
    return samples, statistics.median(noop)


def median(samples, which):
    """Median wall (`which` = 0) or CPU (`which` = 1) seconds."""
    return statistics.median(sample[which] for sample in samples)


def rustc_command(crate, root, env):
    """The rustc invocation cargo uses for `crate`, read from `cargo build -v` after a touch."""
    os.utime(root / crate / "src" / "lib.rs")
    result = subprocess.run(["cargo", "build", "-v", "-p", crate], cwd=root, env=env,
                            capture_output=True, text=True)
    for line in result.stderr.splitlines():
        line = line.strip()
        if line.startswith("Running `") and f"--crate-name {crate} " in line:
            return shlex.split(line[len("Running `"):-1])
    sys.exit(f"could not find the rustc command of {crate}:\n{result.stderr}")


def compiler_passes(crates, root, env, scratch):
    """Per-pass rustc time (`-Ztime-passes`), expanded source size (`-Zunpretty=expanded`) and
    monomorphization statistics (`-Zdump-mono-stats`) of each fixture. These are unstable
    flags, unlocked with RUSTC_BOOTSTRAP=1 on the direct rustc call only, so cargo's
    fingerprints (and the timed builds) are untouched."""
    passes = ["expand_crate", "type_check_crate", "MIR_borrow_checking",
              "monomorphization_collector_graph_walk", "generate_crate_metadata",
              "codegen_crate", "LLVM_passes", "total"]
    bootstrap = dict(env, RUSTC_BOOTSTRAP="1")
    table = {}
    for crate in crates:
        command = rustc_command(crate, root, env)
        out_dir = scratch / crate
        out_dir.mkdir(parents=True, exist_ok=True)
        command[command.index("--out-dir") + 1] = str(out_dir)
        command = [arg for arg in command
                   if not arg.startswith(("--error-format", "--json"))]
        timing = subprocess.run(command + ["-Ztime-passes"], cwd=root, env=bootstrap,
                                capture_output=True, text=True)
        expanded = subprocess.run(command + ["-Zunpretty=expanded"], cwd=root, env=bootstrap,
                                  capture_output=True, text=True)
        mono = subprocess.run(command + [f"-Zdump-mono-stats={out_dir}",
                                         "-Zdump-mono-stats-format=json"],
                              cwd=root, env=bootstrap, capture_output=True, text=True)
        if timing.returncode != 0 or expanded.returncode != 0 or mono.returncode != 0:
            sys.exit(f"rustc -Z failed for {crate}:\n"
                     f"{timing.stderr}{expanded.stderr}{mono.stderr}")
        items = json.loads((out_dir / f"{crate}.mono_items.json").read_text())
        times = {}
        for line in timing.stderr.splitlines():
            match = re.match(r"time:\s+([\d.]+);.*\t(\S+)$", line)
            if match and match.group(2) in passes:
                times[match.group(2)] = float(match.group(1))
        table[crate] = (times, len(expanded.stdout.encode()), items)
    print(f"\n| rustc pass (s, one run) | " + " | ".join(crates) + " |")
    print("|---|" + "---|" * len(crates))
    for name in passes:
        print(f"| {name} | " + " | ".join(f"{table[c][0].get(name, 0.0):.2f}" for c in crates)
              + " |")
    print("| expanded source (KB) | "
          + " | ".join(f"{table[c][1] / 1000:.0f}" for c in crates) + " |")
    print("| mono items | " + " | ".join(
        str(sum(i["instantiation_count"] for i in table[c][2])) for c in crates) + " |")
    print("| mono size estimate | " + " | ".join(
        str(sum(i["total_estimate"] for i in table[c][2])) for c in crates) + " |")
    # Which generic functions the attributes instantiate most, beyond the plain crate.
    plain = {i["name"]: i["total_estimate"] for i in table[WITHOUT][2]}
    extra = sorted(((i["total_estimate"] - plain.get(i["name"], 0), i["instantiation_count"],
                     i["name"]) for i in table[WITH][2]), reverse=True)
    print(f"\nLargest monomorphized functions in {WITH} beyond {WITHOUT} "
          "(size estimate, instances, function):")
    for size, count, name in extra[:12]:
        print(f"- {size} ({count}×) `{name}`")


def rustc_version():
    """`rustc -V`, for the record."""
    return subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed builds per crate (default 5)")
    parser.add_argument("--capabilities", type=int, default=100,
                        help="capabilities in the fixture (default 100)")
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "target" / "build-cost",
                        help="fixture workspace (default target/build-cost)")
    parser.add_argument("--no-check", action="store_true", help="skip the `cargo check` figures")
    parser.add_argument("--hand-written", action="store_true",
                        help=f"also measure `{HAND}`: the plain handlers plus a hand-written "
                             "dispatcher and schema table")
    parser.add_argument("--passes", action="store_true",
                        help="also print rustc's per-pass times, the expanded source size and "
                             "monomorphization statistics of each fixture (unstable -Z flags "
                             "via RUSTC_BOOTSTRAP=1)")
    parser.add_argument("--incremental", action="store_true",
                        help="keep incremental compilation on (measures touch-and-rebuild)")
    args = parser.parse_args()
    if args.runs < 1 or args.capabilities < 1:
        parser.error("--runs and --capabilities must be at least 1")

    out = args.out.resolve()
    snapshot = snapshot_workspace(out / "snapshot")
    root = out / "fixtures"
    crates = [WITH, WITHOUT] + ([HAND] if args.hand_written else [])
    libs = write_fixtures(root, args.capabilities, snapshot, crates)
    env = dict(os.environ, CARGO_TARGET_DIR=str(out / "target"),
               CARGO_INCREMENTAL="1" if args.incremental else "0", CARGO_TERM_COLOR="never")
    commands = ["build"] + ([] if args.no_check else ["check"])

    print(f"fixtures in {root}; warming up (dependencies compile once)", file=sys.stderr)
    for command in commands:
        cargo([command, *(a for crate in crates for a in ("-p", crate))], root, env, set(crates))

    load_before = os.getloadavg()[0]
    rows = [(command, *measure(command, libs, root, env, args.runs)) for command in commands]
    load_after = os.getloadavg()[0]

    print(f"\n{args.capabilities} capabilities, {args.runs} alternating runs, "
          f"CARGO_INCREMENTAL={env['CARGO_INCREMENTAL']}, {os.cpu_count()} cores, "
          f"{rustc_version()}, {datetime.date.today().isoformat()}, "
          f"load average {load_before:.1f} → {load_after:.1f}\n")
    print("| `cargo` | with attributes | without | ratio | CPU with | CPU without | CPU ratio "
          "| no-op cargo |")
    print("|---|---|---|---|---|---|---|---|")
    for command, samples, noop in rows:
        wall = median(samples[WITH], 0), median(samples[WITHOUT], 0)
        cpu = median(samples[WITH], 1), median(samples[WITHOUT], 1)
        print(f"| `{command} -p` | {wall[0]:.2f} s | {wall[1]:.2f} s | {wall[0] / wall[1]:.2f}× "
              f"| {cpu[0]:.2f} s | {cpu[1]:.2f} s | {cpu[0] / cpu[1]:.2f}× | {noop:.2f} s |")
    if args.hand_written:
        print(f"\n| `cargo` | {HAND} | CPU | with attributes ÷ {HAND} (wall / CPU) |")
        print("|---|---|---|---|")
        for command, samples, _ in rows:
            wall, cpu = median(samples[HAND], 0), median(samples[HAND], 1)
            print(f"| `{command} -p` | {wall:.2f} s | {cpu:.2f} s "
                  f"| {median(samples[WITH], 0) / wall:.2f}× / {median(samples[WITH], 1) / cpu:.2f}× |")
    print("\nMedians of wall and CPU time per timed build. Samples (wall / CPU, seconds):")
    for command, samples, _ in rows:
        for crate in crates:
            print(f"- {command} {crate}: "
                  + ", ".join(f"{wall:.2f}/{cpu:.2f}" for wall, cpu in samples[crate]))
    if args.passes:
        compiler_passes(crates, root, env, out / "passes")


if __name__ == "__main__":
    main()
