//! What the governed host costs on top of calling a handler directly.
//!
//! One trivial capability (a read of a 5-field input that echoes one field) is measured five
//! ways, each against a baseline taken in the same run:
//!
//! - `latency/floor`: the direct typed call — `serde_json::from_value` into the input type, the
//!   handler, `serde_json::to_value` of its output;
//! - `latency/memory_keyed`: `Host::invoke` on a [`MemoryStore`] with a unique idempotency key
//!   per call (every call executes; input and output validated);
//! - `latency/memory_unkeyed`: the same without a key;
//! - `throughput/workers_1`, `throughput/workers_2`: [`THROUGHPUT_CALLS`] keyed invocations
//!   spawned in batches on a multi-thread runtime with one, then two workers;
//! - `sqlite/two_upserts` against `sqlite/keyed`: a keyed invocation on a [`SqliteStore`]
//!   against two bare upserts of a row the size of its idempotency record, in a file with the
//!   store's settings (WAL, `synchronous = FULL`, 5 s busy timeout).
//!
//! Criterion reports each case; a summary at the end times every case again in interleaved
//! rounds with a fixed call count (so a slow moment of the machine hits all cases alike) and
//! prints the ratios and their targets. Run with
//! `cargo bench -p aip-connector --bench invoke`; `aip-connector/README.md` records the figures.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aip_connector::VerifiedTenant;
use aip_connector::host::{Host, TrustedContext};
use aip_connector::model::{Action, ActionResult, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::store::{MemoryStore, SharedStore, SqliteStore};
use criterion::{Criterion, Throughput};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// The benchmarked capability.
const CAPABILITY: &str = "cap:directory:lookup";

/// Invocations per throughput run.
const THROUGHPUT_CALLS: usize = 20_000;

/// Invocations spawned at once in a throughput run; the next batch waits for this one.
const THROUGHPUT_BATCH: usize = 256;

/// Calls per case per round of the in-memory latency summary.
const SUMMARY_CALLS: usize = 20_000;

/// Calls per case per round of the SQLite summary (each commit is fsynced).
const SUMMARY_SQLITE_CALLS: usize = 200;

/// Interleaved rounds of the summary; medians are reported.
const SUMMARY_ROUNDS: usize = 7;

/// Targets: governed invocation over the floor, with and without a key; two workers over one;
/// keyed SQLite invocation over two bare upserts.
const TARGET_KEYED: f64 = 4.0;
const TARGET_UNKEYED: f64 = 2.5;
const TARGET_SCALING: f64 = 1.7;
const TARGET_SQLITE: f64 = 2.5;

/// A customer lookup input with five fields of the usual kinds.
#[derive(Deserialize, JsonSchema)]
#[allow(
    dead_code,
    reason = "every field is decoded to measure the input codec; the read echoes one of them"
)]
struct LookupInput {
    customer_id: String,
    email: String,
    region: String,
    limit: u32,
    include_archived: bool,
}

/// The lookup's answer: the id it was asked for.
#[derive(Serialize, JsonSchema)]
struct LookupOutput {
    customer_id: String,
}

/// A connector with one trivial read.
#[derive(Clone, Copy, Default)]
struct Directory;

#[connector(id = "directory")]
impl Directory {
    /// Look a customer up (echoes the id).
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, input: LookupInput) -> Result<LookupOutput, ConnectorFailure> {
        Ok(LookupOutput {
            customer_id: input.customer_id,
        })
    }
}

/// The input every call sends.
fn input() -> Value {
    json!({
        "customer_id": "cus_0123456789abcdef",
        "email": "ada@example.com",
        "region": "eu-west-1",
        "limit": 25,
        "include_archived": false
    })
}

/// The authenticated caller; the capability's keys are tenant-scoped, so it has a tenant.
fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("svc:bench", PrincipalKind::Service), "bench").with_tenant(
        VerifiedTenant {
            id: "tenant_bench".into(),
            system: None,
        },
    )
}

/// A host serving [`Directory`] on `store`.
fn host(store: SharedStore) -> Host {
    Host::builder()
        .connector(Directory)
        .store(store)
        .build()
        .expect("the benchmark connector is admitted")
}

/// A host on a fresh in-memory store.
fn memory_host() -> Host {
    host(Arc::new(MemoryStore::default()))
}

/// A runtime for the latency cases: one thread, timers on (the host sets deadlines).
fn current_thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime starts")
}

/// A multi-thread runtime with `workers` workers.
fn multi_thread_runtime(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .build()
        .expect("a tokio runtime starts")
}

/// `count` actions, each with a unique idempotency key when `keyed`. Built before timing starts.
fn actions(count: usize, keyed: bool) -> Vec<Action> {
    let input = input();
    (0..count)
        .map(|index| {
            let action = Action::new(CAPABILITY, input.clone());
            if keyed {
                action.with_idempotency_key(format!("key-{index}"))
            } else {
                action
            }
        })
        .collect()
}

/// Panics unless `result` completed: a benchmark of failures would measure nothing useful.
fn expect_completed(result: &ActionResult) {
    assert_eq!(
        result.status,
        ActionResultStatus::Completed,
        "the benchmark call must complete: {:?}",
        result.error
    );
}

/// Runs `count` direct typed calls and returns the time they took.
fn time_floor(runtime: &Runtime, count: usize) -> Duration {
    let inputs: Vec<Value> = (0..count).map(|_| input()).collect();
    let directory = Directory;
    runtime.block_on(async move {
        let start = Instant::now();
        for input in inputs {
            let typed: LookupInput =
                serde_json::from_value(input).expect("the benchmark input decodes");
            let output = directory.lookup(typed).await.expect("the lookup succeeds");
            black_box(serde_json::to_value(&output).expect("the output encodes"));
        }
        start.elapsed()
    })
}

/// Runs `count` governed invocations on `host` and returns the time they took.
fn time_invocations(runtime: &Runtime, host: &Host, count: usize, keyed: bool) -> Duration {
    let actions = actions(count, keyed);
    let caller = caller();
    runtime.block_on(async {
        let start = Instant::now();
        for action in actions {
            black_box(host.invoke(action, &caller).await);
        }
        start.elapsed()
    })
}

/// Runs `count` keyed invocations spawned in batches on a runtime with `workers` workers.
fn time_throughput(workers: usize, count: usize) -> Duration {
    let runtime = multi_thread_runtime(workers);
    let host = memory_host();
    let caller = Arc::new(caller());
    let mut pending = actions(count, true);
    let driver = runtime.spawn(async move {
        let start = Instant::now();
        while !pending.is_empty() {
            let batch = pending.split_off(pending.len().saturating_sub(THROUGHPUT_BATCH));
            let mut tasks = JoinSet::new();
            for action in batch {
                let host = host.clone();
                let caller = Arc::clone(&caller);
                tasks.spawn(async move { host.invoke(action, &caller).await });
            }
            while let Some(joined) = tasks.join_next().await {
                black_box(joined.expect("an invocation task does not panic"));
            }
        }
        start.elapsed()
    });
    runtime
        .block_on(driver)
        .expect("the throughput driver does not panic")
}

/// A scratch directory for the SQLite files, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("aip-bench-invoke-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("the temp dir is writable");
        Self(path)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The store's idempotency table, so the baseline writes rows of the same shape.
const BASELINE_TABLE: &str = "
CREATE TABLE IF NOT EXISTS idempotency_entries (
    key            TEXT PRIMARY KEY NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('reservation', 'record')),
    reservation_id TEXT CHECK ((kind = 'reservation') = (reservation_id IS NOT NULL)),
    expires_at_ms  INTEGER CHECK (kind = 'record' OR expires_at_ms IS NOT NULL),
    body           TEXT NOT NULL
);";

/// The baseline upsert: a settled row, inserted the first time, replaced the second.
const BASELINE_UPSERT: &str = "
INSERT INTO idempotency_entries (key, kind, reservation_id, expires_at_ms, body)
VALUES (?1, 'record', NULL, NULL, ?2)
ON CONFLICT (key) DO UPDATE SET body = excluded.body";

/// A bare connection with the store's settings: WAL, `synchronous = FULL`, 5 s busy timeout.
fn baseline_connection(path: &Path) -> Connection {
    let connection = Connection::open(path).expect("the baseline file opens");
    connection
        .busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let _mode: String = connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .expect("WAL");
    connection
        .pragma_update(None, "synchronous", "FULL")
        .expect("synchronous = FULL");
    connection
        .execute_batch(BASELINE_TABLE)
        .expect("the baseline table is created");
    connection
}

/// The size, in bytes, of the idempotency record a keyed call on `store_path` stored.
fn record_body_len(store_path: &Path) -> usize {
    let connection = Connection::open(store_path).expect("the store file opens");
    let length: i64 = connection
        .query_row(
            "SELECT max(length(body)) FROM idempotency_entries WHERE kind = 'record'",
            [],
            |row| row.get(0),
        )
        .expect("a keyed call stored a record");
    usize::try_from(length).expect("a length is not negative")
}

/// The two-upsert baseline: a new key inserted, then updated, each its own fsynced commit.
struct UpsertBaseline {
    connection: Connection,
    body: String,
    next_key: u64,
}

impl UpsertBaseline {
    fn new(path: &Path, body_len: usize) -> Self {
        Self {
            connection: baseline_connection(path),
            body: "x".repeat(body_len),
            next_key: 0,
        }
    }

    /// Runs `count` pairs of upserts and returns the time they took.
    fn time(&mut self, count: usize) -> Duration {
        let keys: Vec<String> = (self.next_key..self.next_key + count as u64)
            .map(|index| format!("Tenant:tenant_bench:key-{index}"))
            .collect();
        self.next_key += count as u64;
        let start = Instant::now();
        for key in &keys {
            for _ in 0..2 {
                let mut statement = self
                    .connection
                    .prepare_cached(BASELINE_UPSERT)
                    .expect("the upsert prepares");
                statement
                    .execute(params![key, self.body])
                    .expect("the upsert runs");
            }
        }
        start.elapsed()
    }
}

/// Keyed invocations on one SQLite-backed host, with fresh keys on every call.
struct SqliteCase {
    runtime: Runtime,
    host: Host,
    next_key: u64,
}

impl SqliteCase {
    fn new(path: &Path) -> Self {
        let store = SqliteStore::open(path).expect("the store file opens");
        Self {
            runtime: current_thread_runtime(),
            host: host(Arc::new(store)),
            next_key: 0,
        }
    }

    /// Runs `count` keyed invocations and returns the time they took.
    fn time(&mut self, count: usize) -> Duration {
        let input = input();
        let actions: Vec<Action> = (self.next_key..self.next_key + count as u64)
            .map(|index| {
                Action::new(CAPABILITY, input.clone())
                    .with_idempotency_key(format!("sqlite-key-{index}"))
            })
            .collect();
        self.next_key += count as u64;
        let caller = caller();
        let host = &self.host;
        self.runtime.block_on(async {
            let start = Instant::now();
            for action in actions {
                black_box(host.invoke(action, &caller).await);
            }
            start.elapsed()
        })
    }

    /// One keyed call, checked.
    fn check(&mut self) {
        let action = Action::new(CAPABILITY, input()).with_idempotency_key("sqlite-check");
        let result = self.runtime.block_on(self.host.invoke(action, &caller()));
        expect_completed(&result);
    }
}

/// Checks once that every benchmarked call completes.
fn check_setup() {
    let runtime = current_thread_runtime();
    let host = memory_host();
    for keyed in [true, false] {
        for action in actions(1, keyed) {
            expect_completed(&runtime.block_on(host.invoke(action, &caller())));
        }
    }
}

fn bench_latency(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("latency");
    group.throughput(Throughput::Elements(1));
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| time_floor(&runtime, iters as usize));
    });
    // A fresh host per sample, so the key map grows only by the keys of one sample.
    group.bench_function("memory_keyed", |b| {
        b.iter_custom(|iters| time_invocations(&runtime, &memory_host(), iters as usize, true));
    });
    group.bench_function("memory_unkeyed", |b| {
        b.iter_custom(|iters| time_invocations(&runtime, &memory_host(), iters as usize, false));
    });
    group.finish();
}

fn bench_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("throughput");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(THROUGHPUT_CALLS as u64));
    for workers in [1, 2] {
        group.bench_function(format!("workers_{workers}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| time_throughput(workers, THROUGHPUT_CALLS))
                    .sum()
            });
        });
    }
    group.finish();
}

fn bench_sqlite(c: &mut Criterion, scratch: &ScratchDir) {
    let mut keyed = SqliteCase::new(&scratch.file("criterion-store.db"));
    keyed.check();
    let body_len = record_body_len(&scratch.file("criterion-store.db"));
    let mut baseline = UpsertBaseline::new(&scratch.file("criterion-baseline.db"), body_len);
    let mut group = c.benchmark_group("sqlite");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(1));
    group.bench_function("two_upserts", |b| {
        b.iter_custom(|iters| baseline.time(iters as usize));
    });
    group.bench_function("keyed", |b| {
        b.iter_custom(|iters| keyed.time(iters as usize));
    });
    group.finish();
}

/// The median of `samples`.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Nanoseconds per call.
fn per_call_ns(elapsed: Duration, calls: usize) -> f64 {
    elapsed.as_nanos() as f64 / calls as f64
}

/// One line of the summary: the ratio, its target, and whether it is met.
fn verdict(name: &str, ratio: f64, target: f64, at_most: bool) {
    let met = if at_most {
        ratio <= target
    } else {
        ratio >= target
    };
    let bound = if at_most { "<=" } else { ">=" };
    println!(
        "  {name:<34} {ratio:>6.2}x   target {bound} {target:.1}x   {}",
        if met { "met" } else { "MISSED" }
    );
}

/// Times every case again in interleaved rounds and prints medians and ratios.
fn summary(scratch: &ScratchDir) {
    let runtime = current_thread_runtime();
    let (mut floor, mut keyed, mut unkeyed) = (Vec::new(), Vec::new(), Vec::new());
    let (mut one, mut two) = (Vec::new(), Vec::new());
    let mut sqlite_case = SqliteCase::new(&scratch.file("summary-store.db"));
    sqlite_case.check();
    let body_len = record_body_len(&scratch.file("summary-store.db"));
    let mut baseline = UpsertBaseline::new(&scratch.file("summary-baseline.db"), body_len);
    let (mut upserts, mut sqlite) = (Vec::new(), Vec::new());
    for _ in 0..SUMMARY_ROUNDS {
        floor.push(per_call_ns(
            time_floor(&runtime, SUMMARY_CALLS),
            SUMMARY_CALLS,
        ));
        let host = memory_host();
        keyed.push(per_call_ns(
            time_invocations(&runtime, &host, SUMMARY_CALLS, true),
            SUMMARY_CALLS,
        ));
        unkeyed.push(per_call_ns(
            time_invocations(&runtime, &host, SUMMARY_CALLS, false),
            SUMMARY_CALLS,
        ));
        for (workers, samples) in [(1, &mut one), (2, &mut two)] {
            let elapsed = time_throughput(workers, THROUGHPUT_CALLS);
            samples.push(THROUGHPUT_CALLS as f64 / elapsed.as_secs_f64());
        }
        upserts.push(per_call_ns(
            baseline.time(SUMMARY_SQLITE_CALLS),
            SUMMARY_SQLITE_CALLS,
        ));
        sqlite.push(per_call_ns(
            sqlite_case.time(SUMMARY_SQLITE_CALLS),
            SUMMARY_SQLITE_CALLS,
        ));
    }
    let (floor, keyed, unkeyed) = (median(floor), median(keyed), median(unkeyed));
    let (one, two) = (median(one), median(two));
    let (upserts, sqlite) = (median(upserts), median(sqlite));
    println!();
    println!(
        "summary: medians of {SUMMARY_ROUNDS} interleaved rounds \
         ({SUMMARY_CALLS} calls per in-memory case, {SUMMARY_SQLITE_CALLS} per SQLite case, \
         {THROUGHPUT_CALLS} per throughput run)"
    );
    println!("  floor (typed call)                 {floor:>10.0} ns/call");
    println!("  host, memory store, keyed          {keyed:>10.0} ns/call");
    println!("  host, memory store, no key         {unkeyed:>10.0} ns/call");
    println!("  throughput, 1 worker               {one:>10.0} calls/s");
    println!("  throughput, 2 workers              {two:>10.0} calls/s");
    println!("  sqlite baseline (two upserts)      {upserts:>10.0} ns/call");
    println!("  host, sqlite store, keyed          {sqlite:>10.0} ns/call");
    println!("ratios:");
    verdict("keyed / floor", keyed / floor, TARGET_KEYED, true);
    verdict("no key / floor", unkeyed / floor, TARGET_UNKEYED, true);
    verdict("2 workers / 1 worker", two / one, TARGET_SCALING, false);
    verdict(
        "sqlite keyed / two upserts",
        sqlite / upserts,
        TARGET_SQLITE,
        true,
    );
}

fn main() {
    check_setup();
    let scratch = ScratchDir::new();
    let mut criterion = Criterion::default().configure_from_args();
    bench_latency(&mut criterion);
    bench_throughput(&mut criterion);
    bench_sqlite(&mut criterion, &scratch);
    criterion.final_summary();
    // `cargo test --benches` runs this binary without `--bench`: criterion then runs each case
    // once as a smoke test, and the timed summary would only slow the test run down; under
    // `--profile-time` (criterion's mode for running one case in a profiler) it would blur the
    // profile.
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench")
        && !args
            .iter()
            .any(|a| a == "--test" || a == "--list" || a.starts_with("--profile-time"));
    if benchmarking {
        summary(&scratch);
    }
}
