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
//!   spawned in batches on a multi-thread runtime with one, then two workers; the summary runs
//!   a control in the same harness (tasks of typed calls that share nothing), so a machine that
//!   cannot give the second worker a core is told apart from a host that serializes;
//! - `sqlite/two_upserts` against `sqlite/keyed`: a keyed invocation on a [`SqliteStore`]
//!   against two bare upserts of a row the size of its idempotency record, in a file with the
//!   store's settings (WAL, `synchronous = FULL`, 5 s busy timeout).
//!
//! Criterion reports each case; a summary at the end times every case again in interleaved
//! rounds with a fixed call count (so a slow moment of the machine hits all cases alike) and
//! prints the ratios and their targets. Next to wall-clock time it reads the CPU time of the
//! working threads (Linux `schedstat`): on a machine busy with other work, the CPU-time ratio
//! still measures the host's own cost, and "cores busy" shows whether the second worker got a
//! core at all. Run with
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

/// Floor calls per round of the summary (a cheap call: enough to run for tens of milliseconds).
const SUMMARY_FLOOR_CALLS: usize = 100_000;

/// Host calls per case per round of the summary.
const SUMMARY_HOST_CALLS: usize = 20_000;

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

/// What a timed section took: wall-clock time, and the CPU time of the threads that did the
/// work when the platform tells it (Linux `schedstat`). On a busy machine the CPU time still
/// measures the work; the wall time then also counts waiting for a core.
#[derive(Clone, Copy, Debug)]
struct Sample {
    wall: Duration,
    cpu: Option<Duration>,
}

impl Sample {
    /// Nothing timed yet: the start of a sum.
    const ZERO: Sample = Sample {
        wall: Duration::ZERO,
        cpu: Some(Duration::ZERO),
    };
}

impl std::ops::Add for Sample {
    type Output = Sample;

    fn add(self, other: Sample) -> Sample {
        Sample {
            wall: self.wall + other.wall,
            cpu: self.cpu.zip(other.cpu).map(|(a, b)| a + b),
        }
    }
}

/// Whose CPU time a [`Stopwatch`] reads.
#[derive(Clone, Copy)]
enum CpuScope {
    /// The calling thread (the single-threaded latency cases).
    Thread,
    /// Every thread of the process (the throughput cases).
    Process,
}

/// Starts at construction; [`Stopwatch::stop`] gives the [`Sample`].
struct Stopwatch {
    scope: CpuScope,
    wall: Instant,
    cpu: Option<Duration>,
}

impl Stopwatch {
    fn start(scope: CpuScope) -> Self {
        Self {
            scope,
            cpu: cpu_time(scope),
            wall: Instant::now(),
        }
    }

    fn stop(self) -> Sample {
        let wall = self.wall.elapsed();
        let cpu = self
            .cpu
            .zip(cpu_time(self.scope))
            .map(|(start, end)| end.saturating_sub(start));
        Sample { wall, cpu }
    }
}

/// CPU time consumed so far by the calling thread or the whole process; `None` off Linux.
fn cpu_time(scope: CpuScope) -> Option<Duration> {
    match scope {
        CpuScope::Thread => schedstat_ns(Path::new("/proc/thread-self/schedstat")),
        CpuScope::Process => {
            let mut total = 0u64;
            for task in std::fs::read_dir("/proc/self/task").ok()? {
                total += schedstat_ns(&task.ok()?.path().join("schedstat"))?;
            }
            Some(total)
        }
    }
    .map(Duration::from_nanos)
}

/// The first field of a `schedstat` file: nanoseconds spent on a CPU.
fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Calls prepared and timed at once; bounds the memory of prepared inputs.
const CHUNK: usize = 10_000;

/// Runs `count` direct typed calls, in chunks whose inputs are built before timing starts.
fn time_floor(runtime: &Runtime, count: usize) -> Sample {
    let mut total = Sample::ZERO;
    let mut remaining = count;
    while remaining > 0 {
        let size = remaining.min(CHUNK);
        remaining -= size;
        let inputs: Vec<Value> = (0..size).map(|_| input()).collect();
        let directory = Directory;
        total = total
            + runtime.block_on(async move {
                let watch = Stopwatch::start(CpuScope::Thread);
                for input in inputs {
                    let typed: LookupInput =
                        serde_json::from_value(input).expect("the benchmark input decodes");
                    let output = directory.lookup(typed).await.expect("the lookup succeeds");
                    black_box(serde_json::to_value(&output).expect("the output encodes"));
                }
                watch.stop()
            });
    }
    total
}

/// Runs `count` governed invocations on `host`, in chunks whose actions are built before timing
/// starts.
fn time_invocations(runtime: &Runtime, host: &Host, count: usize, keyed: bool) -> Sample {
    let caller = caller();
    let mut total = Sample::ZERO;
    let mut remaining = count;
    while remaining > 0 {
        let size = remaining.min(CHUNK);
        remaining -= size;
        let actions = actions(size, keyed);
        total = total
            + runtime.block_on(async {
                let watch = Stopwatch::start(CpuScope::Thread);
                for action in actions {
                    black_box(host.invoke(action, &caller).await);
                }
                watch.stop()
            });
    }
    total
}

/// Runs one task per item, spawned in batches of [`THROUGHPUT_BATCH`] on a runtime with
/// `workers` workers (each batch is awaited before the next is spawned), and times the whole run.
fn time_batches<T, F, Fut>(workers: usize, mut pending: Vec<T>, work: F) -> Sample
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let runtime = multi_thread_runtime(workers);
    let watch = Stopwatch::start(CpuScope::Process);
    let driver = runtime.spawn(async move {
        while !pending.is_empty() {
            let batch = pending.split_off(pending.len().saturating_sub(THROUGHPUT_BATCH));
            let mut tasks = JoinSet::new();
            for item in batch {
                tasks.spawn(work(item));
            }
            while let Some(joined) = tasks.join_next().await {
                black_box(joined.expect("a benchmark task does not panic"));
            }
        }
    });
    runtime
        .block_on(driver)
        .expect("the throughput driver does not panic");
    watch.stop()
}

/// Runs `count` keyed invocations as concurrent tasks on `workers` workers.
fn time_throughput(workers: usize, count: usize) -> Sample {
    let host = memory_host();
    let caller = Arc::new(caller());
    time_batches(workers, actions(count, true), move |action| {
        let host = host.clone();
        let caller = Arc::clone(&caller);
        async move { host.invoke(action, &caller).await }
    })
}

/// Typed calls per control task: about the CPU work of one governed invocation.
const CONTROL_CALLS_PER_TASK: usize = 16;

/// The control for [`time_throughput`]: `count` tasks of [`CONTROL_CALLS_PER_TASK`] direct typed
/// calls each, in the same harness. Nothing is shared between its tasks, so whatever keeps it
/// from scaling is the machine (a core taken by other work), not the host. Each task builds its
/// own inputs: built by the spawning task, they would be serial work the workers wait for.
fn time_control_throughput(workers: usize, count: usize) -> Sample {
    time_batches(workers, vec![(); count], move |()| async move {
        for _ in 0..CONTROL_CALLS_PER_TASK {
            let typed: LookupInput =
                serde_json::from_value(input()).expect("the benchmark input decodes");
            let output = Directory.lookup(typed).await.expect("the lookup succeeds");
            black_box(serde_json::to_value(&output).expect("the output encodes"));
        }
    })
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
        b.iter_custom(|iters| time_floor(&runtime, iters as usize).wall);
    });
    // A fresh host per sample, so the key map grows only by the keys of one sample.
    group.bench_function("memory_keyed", |b| {
        b.iter_custom(|iters| {
            time_invocations(&runtime, &memory_host(), iters as usize, true).wall
        });
    });
    group.bench_function("memory_unkeyed", |b| {
        b.iter_custom(|iters| {
            time_invocations(&runtime, &memory_host(), iters as usize, false).wall
        });
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
                    .map(|_| time_throughput(workers, THROUGHPUT_CALLS).wall)
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

/// The median of `samples` (`NaN` when there are none).
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Nanoseconds per call.
fn per_call_ns(elapsed: Duration, calls: usize) -> f64 {
    elapsed.as_nanos() as f64 / calls as f64
}

/// Per-call wall and CPU nanoseconds of one case, one entry per round.
#[derive(Default)]
struct LatencySeries {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl LatencySeries {
    fn push(&mut self, sample: Sample, calls: usize) {
        self.wall.push(per_call_ns(sample.wall, calls));
        if let Some(cpu) = sample.cpu {
            self.cpu.push(per_call_ns(cpu, calls));
        }
    }

    /// Median wall and CPU nanoseconds per call.
    fn medians(self) -> (f64, f64) {
        (median(self.wall), median(self.cpu))
    }
}

/// Calls per wall second and cores kept busy, one entry per round.
#[derive(Default)]
struct ThroughputSeries {
    rate: Vec<f64>,
    cores: Vec<f64>,
    rate_per_core: Vec<f64>,
}

impl ThroughputSeries {
    fn push(&mut self, sample: Sample, calls: usize) {
        self.rate.push(calls as f64 / sample.wall.as_secs_f64());
        if let Some(cpu) = sample.cpu {
            self.cores
                .push(cpu.as_secs_f64() / sample.wall.as_secs_f64());
            self.rate_per_core.push(calls as f64 / cpu.as_secs_f64());
        }
    }

    /// Median calls per second, cores busy, and calls per CPU-second.
    fn medians(self) -> (f64, f64, f64) {
        (
            median(self.rate),
            median(self.cores),
            median(self.rate_per_core),
        )
    }
}

/// One line of the summary: a ratio, its target, whether it is met, and a cross-check.
fn verdict(name: &str, ratio: f64, target: f64, at_most: bool, cross_check: &str) {
    let met = if at_most {
        ratio <= target
    } else {
        ratio >= target
    };
    let bound = if at_most { "<=" } else { ">=" };
    println!(
        "  {name:<30} {ratio:>6.2}x  target {bound} {target:.1}x  {:<6}  {cross_check}",
        if met { "met" } else { "MISSED" }
    );
}

/// Times every case again in interleaved rounds and prints medians and ratios.
fn summary(scratch: &ScratchDir) {
    let runtime = current_thread_runtime();
    let (mut floor, mut keyed, mut unkeyed) = (
        LatencySeries::default(),
        LatencySeries::default(),
        LatencySeries::default(),
    );
    let (mut one, mut two) = (ThroughputSeries::default(), ThroughputSeries::default());
    let (mut control_one, mut control_two) =
        (ThroughputSeries::default(), ThroughputSeries::default());
    let mut sqlite_case = SqliteCase::new(&scratch.file("summary-store.db"));
    sqlite_case.check();
    let body_len = record_body_len(&scratch.file("summary-store.db"));
    let mut baseline = UpsertBaseline::new(&scratch.file("summary-baseline.db"), body_len);
    let (mut upserts, mut sqlite) = (Vec::new(), Vec::new());
    for _ in 0..SUMMARY_ROUNDS {
        floor.push(
            time_floor(&runtime, SUMMARY_FLOOR_CALLS),
            SUMMARY_FLOOR_CALLS,
        );
        let host = memory_host();
        keyed.push(
            time_invocations(&runtime, &host, SUMMARY_HOST_CALLS, true),
            SUMMARY_HOST_CALLS,
        );
        unkeyed.push(
            time_invocations(&runtime, &host, SUMMARY_HOST_CALLS, false),
            SUMMARY_HOST_CALLS,
        );
        one.push(time_throughput(1, THROUGHPUT_CALLS), THROUGHPUT_CALLS);
        two.push(time_throughput(2, THROUGHPUT_CALLS), THROUGHPUT_CALLS);
        control_one.push(
            time_control_throughput(1, THROUGHPUT_CALLS),
            THROUGHPUT_CALLS,
        );
        control_two.push(
            time_control_throughput(2, THROUGHPUT_CALLS),
            THROUGHPUT_CALLS,
        );
        upserts.push(per_call_ns(
            baseline.time(SUMMARY_SQLITE_CALLS),
            SUMMARY_SQLITE_CALLS,
        ));
        sqlite.push(per_call_ns(
            sqlite_case.time(SUMMARY_SQLITE_CALLS),
            SUMMARY_SQLITE_CALLS,
        ));
    }
    let (floor, floor_cpu) = floor.medians();
    let (keyed, keyed_cpu) = keyed.medians();
    let (unkeyed, unkeyed_cpu) = unkeyed.medians();
    let (one, one_cores, one_per_core) = one.medians();
    let (two, two_cores, two_per_core) = two.medians();
    let (control_one, control_one_cores, _) = control_one.medians();
    let (control_two, control_two_cores, _) = control_two.medians();
    let (upserts, sqlite) = (median(upserts), median(sqlite));
    let future_size = {
        let action = Action::new(CAPABILITY, input());
        let host = memory_host();
        let caller = caller();
        std::mem::size_of_val(&host.invoke(action, &caller))
    };
    println!();
    println!(
        "summary: medians of {SUMMARY_ROUNDS} interleaved rounds ({SUMMARY_FLOOR_CALLS} floor \
         calls, {SUMMARY_HOST_CALLS} host calls, {THROUGHPUT_CALLS} tasks per throughput run, \
         control tasks of {CONTROL_CALLS_PER_TASK} typed calls, {SUMMARY_SQLITE_CALLS} SQLite \
         calls per round)"
    );
    println!("  {:<34} {:>12} {:>12}", "case", "wall", "cpu");
    let line = |name: &str, wall: f64, cpu: f64| {
        println!("  {name:<34} {wall:>9.0} ns {cpu:>9.0} ns");
    };
    line("floor: typed call", floor, floor_cpu);
    line("host, memory store, keyed", keyed, keyed_cpu);
    line("host, memory store, no key", unkeyed, unkeyed_cpu);
    println!("  {:<34} {upserts:>9.0} ns", "sqlite baseline: two upserts");
    println!("  {:<34} {sqlite:>9.0} ns", "host, sqlite store, keyed");
    println!(
        "  {:<34} {one:>9.0}/s  ({one_cores:.2} cores busy, {one_per_core:.0} calls per CPU-second)",
        "throughput, 1 worker"
    );
    println!(
        "  {:<34} {two:>9.0}/s  ({two_cores:.2} cores busy, {two_per_core:.0} calls per CPU-second)",
        "throughput, 2 workers"
    );
    println!(
        "  {:<34} {control_one:>9.0}/s  ({control_one_cores:.2} cores busy)",
        "control tasks, 1 worker"
    );
    println!(
        "  {:<34} {control_two:>9.0}/s  ({control_two_cores:.2} cores busy)",
        "control tasks, 2 workers"
    );
    println!("  Host::invoke future: {future_size} bytes");
    println!("ratios (wall clock; CPU-time ratio alongside):");
    verdict(
        "keyed / floor",
        keyed / floor,
        TARGET_KEYED,
        true,
        &format!("cpu {:.2}x", keyed_cpu / floor_cpu),
    );
    verdict(
        "no key / floor",
        unkeyed / floor,
        TARGET_UNKEYED,
        true,
        &format!("cpu {:.2}x", unkeyed_cpu / floor_cpu),
    );
    verdict(
        "2 workers / 1 worker",
        two / one,
        TARGET_SCALING,
        false,
        &format!(
            "cores busy {:.2}x, calls per CPU-second {:.2}x; control tasks scale {:.2}x",
            two_cores / one_cores,
            two_per_core / one_per_core,
            control_two / control_one
        ),
    );
    verdict(
        "sqlite keyed / two upserts",
        sqlite / upserts,
        TARGET_SQLITE,
        true,
        "",
    );
}

/// The environment variable that selects [`profile`] mode: `<case>:<calls>`, where the case is
/// `floor`, `keyed`, `unkeyed` (for an instruction profiler) or `workers_1`, `workers_2` (the
/// throughput run alone, for a sampling profiler such as `perf`).
const PROFILE_VAR: &str = "AIP_INVOKE_PROFILE";

/// Runs `calls` calls of one case and nothing else, for an instruction-level profiler:
///
/// ```sh
/// AIP_INVOKE_PROFILE=unkeyed:10000 valgrind --tool=callgrind --collect-atstart=no \
///     --toggle-collect='*profiled_calls*' target/release/deps/invoke-<hash>
/// ```
///
/// Only [`profiled_calls`] is collected, so the profile's total divided by `calls` is the cost
/// of one call, setup excluded.
fn profile(spec: &str) {
    let (case, calls) = spec
        .split_once(':')
        .and_then(|(case, calls)| Some((case, calls.parse::<usize>().ok()?)))
        .unwrap_or_else(|| {
            panic!("{PROFILE_VAR} is `<floor|keyed|unkeyed|workers_1|workers_2>:<calls>`")
        });
    let runtime = current_thread_runtime();
    let host = memory_host();
    let caller = caller();
    // One call of each kind first, so one-time initialisation stays out of the profile.
    check_setup();
    let future_size =
        std::mem::size_of_val(&host.invoke(Action::new(CAPABILITY, input()), &caller));
    eprintln!("Host::invoke future: {future_size} bytes");
    match case {
        "floor" => {
            let inputs: Vec<Value> = (0..calls).map(|_| input()).collect();
            profiled_calls_floor(&runtime, inputs);
        }
        "keyed" | "unkeyed" => {
            let actions = actions(calls, case == "keyed");
            profiled_calls(&runtime, &host, &caller, actions);
        }
        "workers_1" | "workers_2" => {
            let workers = if case == "workers_1" { 1 } else { 2 };
            let sample = time_throughput(workers, calls);
            eprintln!(
                "{calls} keyed calls as tasks on {workers} worker(s): {:.0} calls/s",
                calls as f64 / sample.wall.as_secs_f64()
            );
        }
        other => panic!("unknown {PROFILE_VAR} case `{other}`"),
    }
}

/// The profiled section of the host cases (synchronous and not inlined, so a profiler can
/// select it by name).
#[inline(never)]
fn profiled_calls(runtime: &Runtime, host: &Host, caller: &TrustedContext, actions: Vec<Action>) {
    runtime.block_on(async {
        for action in actions {
            black_box(host.invoke(action, caller).await);
        }
    });
}

/// The profiled section of the floor; its name matches the same `--toggle-collect` pattern.
#[inline(never)]
fn profiled_calls_floor(runtime: &Runtime, inputs: Vec<Value>) {
    runtime.block_on(async {
        for input in inputs {
            let typed: LookupInput =
                serde_json::from_value(input).expect("the benchmark input decodes");
            let output = Directory.lookup(typed).await.expect("the lookup succeeds");
            black_box(serde_json::to_value(&output).expect("the output encodes"));
        }
    });
}

fn main() {
    if let Ok(spec) = std::env::var(PROFILE_VAR) {
        profile(&spec);
        return;
    }
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
