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
//! - `throughput/workers_1`, `throughput/workers_2`: [`THROUGHPUT_CALLS`] keyed invocations, in
//!   units of [`THROUGHPUT_CALLS_PER_TASK`] run by [`THROUGHPUT_CALLERS`] caller tasks on a
//!   multi-thread runtime with one, then two workers; the summary runs
//!   a control in the same harness (units of typed calls that share nothing), so a machine that
//!   cannot give the second worker a core is told apart from a host that serializes;
//! - `sqlite/two_upserts` against `sqlite/keyed`: a keyed invocation on a [`SqliteStore`]
//!   against two bare upserts of a row the size of its idempotency record, in a file with the
//!   store's settings (WAL, `synchronous = FULL`, 5 s busy timeout).
//!
//! A second, transactional capability (`cap:ledger:entry:post`, modes `execute`, `plan`,
//! `commit`; its handler echoes one field and records no checkpoint) is measured on the durable
//! stores, against the bare store writes each case needs:
//!
//! - `transactions_sqlite/execute` against `transactions_sqlite/bare_execute_writes`: one
//!   `execute` with a fresh key and a fresh transaction per call, on a [`SqliteStore`], against
//!   the four writes it makes (reserve the key, insert the transaction record, transition it to
//!   `committed`, settle the key), each committed on its own, straight through `rusqlite` on a
//!   file with the store's schema and settings;
//! - `transactions_sqlite/plan_commit` against `transactions_sqlite/bare_plan_commit_writes`: a
//!   `plan` and the `commit` that names its plan id, each with a fresh key, against their seven
//!   writes (plan: reserve, insert the planned record, settle; commit: reserve, claim the plan,
//!   transition to `committed`, settle);
//! - `transactions_postgres/…`: the same on a [`PostgresStore`] in a fresh schema, against the
//!   same statements sent one by one, each its own transaction, over a bare `tokio-postgres`
//!   connection to another fresh schema of the same server. They run when
//!   `AIP_TEST_POSTGRES_URL` names a server, and are skipped (saying so) otherwise.
//!
//! The write list is not taken on trust: before timing, one unit of each case runs on a host
//! whose store logs every call ([`CensusStore`]); the bench stops if the writes differ from the
//! list above, and the baseline writes the very bodies the host wrote (same JSON, same sizes).
//!
//! Criterion reports each case; a summary at the end times every case again in interleaved
//! rounds with a fixed call count (so a slow moment of the machine hits all cases alike) and
//! prints the ratios and their targets. Next to wall-clock time it reads the CPU time of the
//! working threads (Linux `schedstat`): on a machine busy with other work, the CPU-time ratio
//! still measures the host's own cost, and "cores busy" shows whether the second worker got a
//! core at all. Run with
//! `AIP_TEST_POSTGRES_URL=postgres://… cargo bench -p aip-connector --bench invoke`;
//! `aip-connector/README.md` has the latest figures, `docs/performance.md` the method and every
//! run.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aip_connector::VerifiedTenant;
use aip_connector::host::{Host, TrustedContext};
use aip_connector::ids::{ActionId, ApprovalId, TransactionId};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Principal, PrincipalKind,
    TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::store::{
    ApprovalRecord, ApprovalStore, IdempotencyRecord, IdempotencyStore, MemoryStore, Millis,
    PostgresStore, Reservation, ReserveOutcome, SharedStore, SqliteStore, StoreError,
    TransactionRecord, TransactionStore, Transition, TransitionOutcome,
};
use async_trait::async_trait;
use criterion::{Criterion, Throughput};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

/// The benchmarked capability.
const CAPABILITY: &str = "cap:directory:lookup";

/// Invocations per throughput run.
const THROUGHPUT_CALLS: usize = 20_000;

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

/// The transactional capability measured on the durable stores.
const TRANSACTION_CAPABILITY: &str = "cap:ledger:entry:post";

/// The environment variable naming the PostgreSQL server of the `transactions_postgres` cases.
const POSTGRES_URL_VAR: &str = "AIP_TEST_POSTGRES_URL";

/// Units (one `execute`, or one `plan` + `commit` pair) per case per round of the summary, on
/// each durable store; every write is a committed, synced transaction.
const SUMMARY_DURABLE_UNITS: usize = 100;

/// Targets: a transactional case over the bare writes it needs, on SQLite and on PostgreSQL.
const TARGET_TRANSACTION_SQLITE: f64 = 2.5;
const TARGET_TRANSACTION_POSTGRES: f64 = 2.0;

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
    TrustedContext::new(Principal::new("svc:bench", PrincipalKind::Service), "bench")
        .with_tenant(VerifiedTenant::new("tenant_bench"))
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

/// A key no other call of this process has used: the benchmarks time first executions, and a
/// key reused by a later chunk of the same host would time a replay instead.
fn unique_key() -> String {
    static NEXT_KEY: AtomicUsize = AtomicUsize::new(0);
    format!("key-{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

/// `count` actions, each with a unique idempotency key when `keyed`. Built before timing starts.
fn actions(count: usize, keyed: bool) -> Vec<Action> {
    let input = input();
    (0..count)
        .map(|_| {
            let action = Action::new(CAPABILITY, input.clone());
            if keyed {
                action.with_idempotency_key(unique_key())
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

/// Concurrent callers in a throughput run: long-lived tasks, like the connections of a server.
const THROUGHPUT_CALLERS: usize = 64;

/// Runs `units` units of work on a runtime with `workers` workers and times the whole run. The
/// work is done by [`THROUGHPUT_CALLERS`] caller tasks, spawned once, each claiming the next
/// unit from a shared counter and running it before it claims another.
///
/// The harness spawned a task per unit, in batches, from a driver task that joined them. Each
/// finished task was then freed by the driver into the glibc arena of the thread that had
/// spawned it while the workers freed into it too, and the driver slept on that arena's lock:
/// in a two-worker run, 98 % of the waits on a glibc lock (perf, `sched:sched_switch`) were the
/// driver's, and they left a worker idle. A counter claimed once per unit costs nothing like it.
fn time_callers<F, Fut>(workers: usize, units: usize, work: F) -> Sample
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runtime = multi_thread_runtime(workers);
    let work = Arc::new(work);
    let next = Arc::new(AtomicUsize::new(0));
    let watch = Stopwatch::start(CpuScope::Process);
    let callers: Vec<_> = (0..THROUGHPUT_CALLERS)
        .map(|_| {
            let work = Arc::clone(&work);
            let next = Arc::clone(&next);
            runtime.spawn(async move {
                loop {
                    let unit = next.fetch_add(1, Ordering::Relaxed);
                    if unit >= units {
                        break;
                    }
                    work(unit).await;
                }
            })
        })
        .collect();
    runtime.block_on(async {
        for caller in callers {
            caller.await.expect("a benchmark caller does not panic");
        }
    });
    watch.stop()
}

/// Invocations per unit of a throughput run: a caller sends them one after another.
const THROUGHPUT_CALLS_PER_TASK: usize = 16;

/// Runs `count` keyed invocations in units of [`THROUGHPUT_CALLS_PER_TASK`] calls on `workers`
/// workers (see [`time_callers`]). Each unit builds its own actions, as a server builds each
/// action from the request on the worker that runs it: actions built by another thread would be
/// freed by this one, and glibc returns such memory to the allocating thread's arena, under
/// that arena's lock, which is contention of the harness and not of the host.
fn time_throughput(workers: usize, count: usize) -> Sample {
    let host = memory_host();
    let caller = Arc::new(caller());
    let input = Arc::new(input());
    let units = count.div_ceil(THROUGHPUT_CALLS_PER_TASK);
    time_callers(workers, units, move |unit| {
        let host = host.clone();
        let caller = Arc::clone(&caller);
        let input = Arc::clone(&input);
        async move {
            // Unique within the run (one fresh host), and no shared counter between workers.
            let first = unit * THROUGHPUT_CALLS_PER_TASK;
            for index in first..(first + THROUGHPUT_CALLS_PER_TASK).min(count) {
                let action = Action::new(CAPABILITY, Value::clone(&input))
                    .with_idempotency_key(format!("key-{index}"));
                black_box(host.invoke(action, &caller).await);
            }
        }
    })
}

/// Typed calls per control unit: about the CPU work of one governed invocation.
const CONTROL_CALLS_PER_TASK: usize = 16;

/// The control for [`time_throughput`]: `count` units of [`CONTROL_CALLS_PER_TASK`] direct typed
/// calls each, in the same harness. Nothing is shared between its units, so whatever keeps it
/// from scaling is the machine (a core taken by other work), not the host. Each unit builds its
/// own inputs.
fn time_control_throughput(workers: usize, count: usize) -> Sample {
    time_callers(workers, count, move |_| async move {
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
///
/// The update writes a different body of the same length. SQLite skips a write that would
/// store a row's current content again (the b-tree compares the new cell with the old one), and
/// that commit then writes nothing and syncs nothing: with one body for both upserts, as until
/// the fifth session of 2026-12-01, the baseline made one fsync per pair, not two.
struct UpsertBaseline {
    connection: Connection,
    /// The inserted body, then the body that replaces it.
    bodies: [String; 2],
    next_key: u64,
}

impl UpsertBaseline {
    fn new(path: &Path, body_len: usize) -> Self {
        Self {
            connection: baseline_connection(path),
            bodies: ["x".repeat(body_len), "y".repeat(body_len)],
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
            for body in &self.bodies {
                let mut statement = self
                    .connection
                    .prepare_cached(BASELINE_UPSERT)
                    .expect("the upsert prepares");
                statement
                    .execute(params![key, body])
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

// ---------------------------------------------------------------------------------------------
// Transactions on durable stores.
// ---------------------------------------------------------------------------------------------

/// A ledger entry to post: five fields of the usual kinds, like [`LookupInput`].
#[derive(Deserialize, JsonSchema)]
#[allow(
    dead_code,
    reason = "every field is decoded to measure the input codec; the post echoes one of them"
)]
struct EntryInput {
    account: String,
    amount_cents: i64,
    currency: String,
    reference: String,
    memo: String,
}

/// The posted entry: the reference it was posted under.
#[derive(Serialize, JsonSchema)]
struct EntryOutput {
    entry_id: String,
}

/// A connector with one trivial transactional write.
#[derive(Clone, Copy, Default)]
struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    /// Post an entry (echoes the reference).
    ///
    /// The handler records no checkpoint: a real one records the provider operation before it
    /// calls out, which adds one more transition (a read and a compare-and-set) per `execute`
    /// and `commit`. Leaving it out keeps the measured host work to what every transactional
    /// call pays.
    #[capability(
        id = "cap:ledger:entry:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = public),
        transaction(modes = [execute, plan, commit]),
    )]
    async fn post(
        &self,
        input: EntryInput,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<EntryOutput, ConnectorFailure> {
        Ok(EntryOutput {
            entry_id: input.reference,
        })
    }
}

/// The input every transactional call sends.
fn entry_input() -> Value {
    json!({
        "account": "acct_0123456789abcdef",
        "amount_cents": 125_000,
        "currency": "EUR",
        "reference": "inv-2026-000123",
        "memo": "monthly subscription"
    })
}

/// A host serving [`Ledger`] on `store`.
fn ledger_host(store: SharedStore) -> Host {
    Host::builder()
        .connector(Ledger)
        .store(store)
        .build()
        .expect("the benchmark ledger is admitted")
}

/// A runtime for the durable cases: one thread, timers and I/O (PostgreSQL connections).
fn durable_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

/// The two transactional cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxnCase {
    /// One `execute` with a fresh key and a fresh transaction.
    Execute,
    /// A `plan`, then the `commit` that names its plan id, each with a fresh key.
    PlanCommit,
}

impl TxnCase {
    const ALL: [TxnCase; 2] = [TxnCase::Execute, TxnCase::PlanCommit];

    fn name(self) -> &'static str {
        match self {
            TxnCase::Execute => "execute",
            TxnCase::PlanCommit => "plan_commit",
        }
    }

    fn label(self) -> &'static str {
        match self {
            TxnCase::Execute => "execute",
            TxnCase::PlanCommit => "plan + commit",
        }
    }

    /// The store writes the host makes for one unit, in order (see [`pipeline_writes`]).
    fn expected_writes(self) -> &'static [WriteKind] {
        use WriteKind::{InsertTransaction, Reserve, Settle, Transition};
        match self {
            // Reserve the key; admission inserts the record `prepared`; the handler runs;
            // settlement moves the record to `committed`; the key is settled with the result.
            TxnCase::Execute => &[Reserve, InsertTransaction, Transition, Settle],
            // The plan: reserve, insert the record `planned`, settle. The commit: reserve,
            // claim the plan (`planned` → `committing`), settle the record (`committed`),
            // settle the key.
            TxnCase::PlanCommit => &[
                Reserve,
                InsertTransaction,
                Settle,
                Reserve,
                Transition,
                Transition,
                Settle,
            ],
        }
    }

    /// The actions of one unit named `unit` (keys and plan id unique per unit), in order.
    fn actions(self, unit: &str) -> Vec<Action> {
        let input = entry_input();
        match self {
            TxnCase::Execute => vec![
                Action::new(TRANSACTION_CAPABILITY, input)
                    .with_idempotency_key(format!("{unit}-execute"))
                    .with_transaction(ActionTransaction::new(TransactionMode::Execute)),
            ],
            TxnCase::PlanCommit => {
                let plan_id = format!("plan-{unit}");
                let mut plan = ActionTransaction::new(TransactionMode::Plan);
                plan.plan_id = Some(plan_id.clone());
                let mut commit = ActionTransaction::new(TransactionMode::Commit);
                commit.plan_id = Some(plan_id);
                vec![
                    Action::new(TRANSACTION_CAPABILITY, input.clone())
                        .with_idempotency_key(format!("{unit}-plan"))
                        .with_transaction(plan),
                    Action::new(TRANSACTION_CAPABILITY, input)
                        .with_idempotency_key(format!("{unit}-commit"))
                        .with_transaction(commit),
                ]
            }
        }
    }
}

/// A store write the transactional cases make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    /// `IdempotencyStore::reserve` of a free key: one insert.
    Reserve,
    /// `IdempotencyStore::settle`: the reservation row becomes the record.
    Settle,
    /// `TransactionStore::insert_transaction`.
    InsertTransaction,
    /// `TransactionStore::transition`: the record's row rewritten at the next revision.
    Transition,
}

impl WriteKind {
    fn label(self) -> &'static str {
        match self {
            WriteKind::Reserve => "reserve key",
            WriteKind::Settle => "settle key",
            WriteKind::InsertTransaction => "insert transaction",
            WriteKind::Transition => "transition",
        }
    }
}

/// One write the host made, with what the baseline needs to make the same row.
#[derive(Clone, Debug)]
struct StoreWrite {
    kind: WriteKind,
    /// The row body as the stores encode it (the record's JSON).
    body: String,
    /// The idempotency row's expiry column (reservations and records).
    expires_at_ms: Option<i64>,
    /// The transaction row's status column (the status's JSON spelling).
    status: String,
    /// The transaction row's recoverable column.
    recoverable: bool,
    /// Whether the transaction row has a plan id.
    has_plan: bool,
}

impl StoreWrite {
    fn idempotency(kind: WriteKind, body: String, expires_at_ms: Option<Millis>) -> Self {
        Self {
            kind,
            body,
            expires_at_ms: expires_at_ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            status: String::new(),
            recoverable: false,
            has_plan: false,
        }
    }

    fn transaction(kind: WriteKind, record: &TransactionRecord) -> Self {
        Self {
            kind,
            body: serde_json::to_string(record).expect("a transaction record encodes"),
            expires_at_ms: None,
            status: serde_json::to_value(record.status)
                .ok()
                .and_then(|status| status.as_str().map(str::to_owned))
                .expect("a status encodes as a string"),
            recoverable: record.is_recoverable(),
            has_plan: record.plan_id().is_some(),
        }
    }
}

/// What one unit of a case did to its store.
#[derive(Clone, Debug, Default)]
struct Census {
    /// The writes, in order.
    writes: Vec<StoreWrite>,
    /// The reads, in order (store calls that change nothing).
    reads: Vec<&'static str>,
    /// Writes of any other kind (releases, renewals, attempt counts, approvals): none expected.
    other_writes: Vec<&'static str>,
}

/// A [`MemoryStore`] that logs every call: the writes the host really makes, and their bodies.
/// Used once per case before timing, never in a timed run.
#[derive(Default)]
struct CensusStore {
    inner: MemoryStore,
    log: std::sync::Mutex<Census>,
}

impl CensusStore {
    fn log(&self) -> std::sync::MutexGuard<'_, Census> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self, name: &'static str) {
        self.log().reads.push(name);
    }

    fn other(&self, name: &'static str) {
        self.log().other_writes.push(name);
    }

    fn take(&self) -> Census {
        std::mem::take(&mut *self.log())
    }
}

#[async_trait]
impl IdempotencyStore for CensusStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        let outcome = self.inner.reserve(reservation, now).await?;
        if outcome == ReserveOutcome::Acquired {
            let body = serde_json::to_string(reservation).expect("a reservation encodes");
            self.log().writes.push(StoreWrite::idempotency(
                WriteKind::Reserve,
                body,
                Some(reservation.expires_at_ms),
            ));
        } else {
            self.read("reserve (refused)");
        }
        Ok(outcome)
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_string(&record).expect("an idempotency record encodes");
        let expires_at_ms = record.expires_at_ms;
        self.inner.settle(reservation, record).await?;
        self.log().writes.push(StoreWrite::idempotency(
            WriteKind::Settle,
            body,
            expires_at_ms,
        ));
        Ok(())
    }

    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError> {
        self.other("forget_record");
        self.inner.forget_record(record).await
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        self.other("release");
        self.inner.release(reservation).await
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        self.other("renew");
        self.inner.renew(reservation, expires_at_ms).await
    }

    async fn record(
        &self,
        key: &str,
        now: Millis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.read("idempotency record");
        self.inner.record(key, now).await
    }

    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError> {
        self.read("idempotency reservation");
        self.inner.reservation(key, now).await
    }

    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError> {
        self.other("count_attempt");
        self.inner.count_attempt(key, expires_at_ms, now).await
    }

    async fn purge_expired(
        &self,
        now: Millis,
        max_entries: usize,
    ) -> Result<aip_connector::store::Purged, StoreError> {
        self.other("purge_expired");
        self.inner.purge_expired(now, max_entries).await
    }
}

#[async_trait]
impl ApprovalStore for CensusStore {
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.other("insert_approval");
        self.inner.insert_approval(record).await
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
        self.read("approval");
        self.inner.approval(id).await
    }

    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        self.other("update_approval");
        self.inner.update_approval(record, expected_version).await
    }

    async fn claim_resume(
        &self,
        id: &ApprovalId,
        claim: &aip_connector::store::ResumeClaim,
    ) -> Result<bool, StoreError> {
        self.other("claim_resume");
        self.inner.claim_resume(id, claim).await
    }

    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &aip_connector::store::ResumeClaim,
    ) -> Result<bool, StoreError> {
        self.other("release_resume");
        self.inner.release_resume(id, claim).await
    }

    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        self.other("purge_closed_approvals");
        self.inner
            .purge_closed_approvals(created_before, now, max_entries)
            .await
    }
}

#[async_trait]
impl TransactionStore for CensusStore {
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError> {
        let inserted = self.inner.insert_transaction(record).await?;
        if inserted {
            // The stores write the record at revision 0, whatever the caller's says.
            let stored = TransactionRecord {
                revision: 0,
                ..record.clone()
            };
            self.log().writes.push(StoreWrite::transaction(
                WriteKind::InsertTransaction,
                &stored,
            ));
        } else {
            self.read("insert_transaction (refused)");
        }
        Ok(inserted)
    }

    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        self.read("transaction by id");
        self.inner.transaction(id).await
    }

    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        self.read("transaction by plan id");
        self.inner.transaction_by_plan(plan_id).await
    }

    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError> {
        self.read("transactions by action");
        self.inner.transactions_by_action(action_id).await
    }

    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError> {
        let outcome = self
            .inner
            .transition(id, expected_revision, transition, now)
            .await?;
        match &outcome {
            TransitionOutcome::Applied(next) => self
                .log()
                .writes
                .push(StoreWrite::transaction(WriteKind::Transition, next)),
            _ => self.read("transition (refused)"),
        }
        Ok(outcome)
    }

    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError> {
        self.read("recoverable");
        self.inner.recoverable().await
    }

    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        self.other("purge_finished_transactions");
        self.inner
            .purge_finished_transactions(updated_before, max_entries)
            .await
    }
}

/// Runs one unit of `case` on a host over a [`CensusStore`] and returns what it wrote. Panics
/// if the writes are not [`TxnCase::expected_writes`]: the baselines and the write list in
/// `docs/performance.md` would then be wrong.
fn pipeline_writes(case: TxnCase) -> Census {
    let store = Arc::new(CensusStore::default());
    let host = ledger_host(Arc::clone(&store) as SharedStore);
    let runtime = durable_runtime();
    for action in case.actions("census") {
        expect_completed(&runtime.block_on(host.invoke(action, &caller())));
    }
    let census = store.take();
    let kinds: Vec<WriteKind> = census.writes.iter().map(|w| w.kind).collect();
    assert_eq!(
        kinds,
        case.expected_writes(),
        "the host's writes for `{}` changed: update `TxnCase::expected_writes` and the write \
         list in docs/performance.md",
        case.name()
    );
    assert!(
        census.other_writes.is_empty(),
        "unexpected writes for `{}`: {:?}",
        case.name(),
        census.other_writes
    );
    census
}

/// One bare write of a baseline unit, with every column value fixed before timing.
enum BareWrite {
    /// Insert a reservation row under a new key.
    Reserve {
        key: String,
        token: String,
        expires_at_ms: i64,
        body: String,
    },
    /// Turn the reservation row into the record (compare-and-set on the token).
    Settle {
        key: String,
        token: String,
        expires_at_ms: Option<i64>,
        body: String,
    },
    /// Insert a transaction row.
    Insert {
        id: String,
        action_id: String,
        plan_id: Option<String>,
        status: String,
        recoverable: bool,
        body: String,
    },
    /// Rewrite the transaction row at the next revision (compare-and-set on the revision).
    Transition {
        id: String,
        expected_revision: i64,
        action_id: String,
        plan_id: Option<String>,
        status: String,
        revision: i64,
        recoverable: bool,
        body: String,
    },
}

/// The bare writes of one baseline unit named `unit`: the census's writes, in its order, on
/// fresh keys and ids, with the host's bodies.
fn bare_unit(census: &Census, unit: &str) -> Vec<BareWrite> {
    let mut reserved: Vec<(String, String)> = Vec::new();
    let mut reservations = 0;
    let (id, action_id) = (format!("txn_{unit}"), format!("act_{unit}"));
    let mut revision = 0i64;
    census
        .writes
        .iter()
        .map(|write| {
            let plan_id = write.has_plan.then(|| format!("plan-{unit}"));
            match write.kind {
                WriteKind::Reserve => {
                    reservations += 1;
                    let key = format!("Tenant:tenant_bench:{unit}-{reservations}");
                    let token = format!("{unit}-token-{reservations}");
                    reserved.push((key.clone(), token.clone()));
                    BareWrite::Reserve {
                        key,
                        token,
                        expires_at_ms: write.expires_at_ms.expect("a reservation expires"),
                        body: write.body.clone(),
                    }
                }
                WriteKind::Settle => {
                    let (key, token) = reserved.pop().expect("a settle follows its reserve");
                    BareWrite::Settle {
                        key,
                        token,
                        expires_at_ms: write.expires_at_ms,
                        body: write.body.clone(),
                    }
                }
                WriteKind::InsertTransaction => BareWrite::Insert {
                    id: id.clone(),
                    action_id: action_id.clone(),
                    plan_id,
                    status: write.status.clone(),
                    recoverable: write.recoverable,
                    body: write.body.clone(),
                },
                WriteKind::Transition => {
                    revision += 1;
                    BareWrite::Transition {
                        id: id.clone(),
                        expected_revision: revision - 1,
                        action_id: action_id.clone(),
                        plan_id,
                        status: write.status.clone(),
                        revision,
                        recoverable: write.recoverable,
                        body: write.body.clone(),
                    }
                }
            }
        })
        .collect()
}

/// The statements of the bare writes on SQLite: the store's own write statements, each run on
/// its own (autocommit), without the reads and the `BEGIN IMMEDIATE` around some of them.
const SQLITE_RESERVE: &str = "INSERT OR REPLACE INTO idempotency_entries \
     (key, kind, reservation_id, expires_at_ms, body) VALUES (?1, 'reservation', ?2, ?3, ?4)";
const SQLITE_SETTLE: &str = "UPDATE idempotency_entries \
     SET kind = 'record', reservation_id = NULL, expires_at_ms = ?3, body = ?4 \
     WHERE key = ?1 AND kind = 'reservation' AND reservation_id = ?2";
const SQLITE_INSERT_TRANSACTION: &str = "INSERT INTO transactions \
     (transaction_id, action_id, plan_id, status, revision, recoverable, body) \
     VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6) ON CONFLICT (transaction_id) DO NOTHING";
const SQLITE_TRANSITION: &str = "UPDATE transactions \
     SET action_id = ?3, plan_id = ?4, status = ?5, revision = ?6, recoverable = ?7, body = ?8 \
     WHERE transaction_id = ?1 AND revision = ?2";

/// Runs one bare write on SQLite; panics unless it changed exactly one row.
fn sqlite_bare_write(connection: &Connection, write: &BareWrite) {
    let run = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        connection
            .prepare_cached(sql)
            .expect("a bare statement prepares")
            .execute(params)
            .expect("a bare write runs")
    };
    let changed = match write {
        BareWrite::Reserve {
            key,
            token,
            expires_at_ms,
            body,
        } => run(SQLITE_RESERVE, params![key, token, expires_at_ms, body]),
        BareWrite::Settle {
            key,
            token,
            expires_at_ms,
            body,
        } => run(SQLITE_SETTLE, params![key, token, expires_at_ms, body]),
        BareWrite::Insert {
            id,
            action_id,
            plan_id,
            status,
            recoverable,
            body,
        } => run(
            SQLITE_INSERT_TRANSACTION,
            params![id, action_id, plan_id, status, recoverable, body],
        ),
        BareWrite::Transition {
            id,
            expected_revision,
            action_id,
            plan_id,
            status,
            revision,
            recoverable,
            body,
        } => run(
            SQLITE_TRANSITION,
            params![
                id,
                expected_revision,
                action_id,
                plan_id,
                status,
                revision,
                recoverable,
                body
            ],
        ),
    };
    assert_eq!(changed, 1, "a bare write changes one row");
}

/// The statements of the bare writes on PostgreSQL: the store's own write statements (its
/// `reserve` of a free key is exactly the insert), each sent on its own (autocommit).
const POSTGRES_RESERVE: &str = "INSERT INTO idempotency_entries \
     (key, kind, reservation_id, expires_at_ms, body) \
     VALUES ($1, 'reservation', $2, $3, $4::text::json) ON CONFLICT (key) DO NOTHING";
const POSTGRES_SETTLE: &str = "UPDATE idempotency_entries \
     SET kind = 'record', reservation_id = NULL, expires_at_ms = $3, body = $4::text::json \
     WHERE key = $1 AND kind = 'reservation' AND reservation_id = $2";
const POSTGRES_INSERT_TRANSACTION: &str = "INSERT INTO transactions \
     (transaction_id, action_id, plan_id, status, revision, recoverable, body) \
     VALUES ($1, $2, $3, $4, 0, $5, $6::text::json) ON CONFLICT (transaction_id) DO NOTHING";
const POSTGRES_TRANSITION: &str = "UPDATE transactions \
     SET action_id = $3, plan_id = $4, status = $5, revision = $6, recoverable = $7, \
         body = $8::text::json \
     WHERE transaction_id = $1 AND revision = $2";

/// A bare `tokio-postgres` connection with the four write statements prepared.
struct PostgresBare {
    client: tokio_postgres::Client,
    reserve: tokio_postgres::Statement,
    settle: tokio_postgres::Statement,
    insert: tokio_postgres::Statement,
    transition: tokio_postgres::Statement,
}

impl PostgresBare {
    /// Connects to `url` with `schema` first on the search path (as the store's pool does);
    /// the connection's task runs on the runtime this is called on.
    async fn connect(url: &str, schema: &str) -> Self {
        let mut config: tokio_postgres::Config = url.parse().expect("the PostgreSQL URL parses");
        config.options(format!("-c search_path={schema}"));
        config.application_name("aip-connector-bench");
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .expect("the baseline connects to PostgreSQL");
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                eprintln!("the baseline's PostgreSQL connection failed: {error}");
            }
        });
        let prepare = |sql: &'static str| {
            let client = &client;
            async move {
                client
                    .prepare(sql)
                    .await
                    .expect("a bare statement prepares")
            }
        };
        Self {
            reserve: prepare(POSTGRES_RESERVE).await,
            settle: prepare(POSTGRES_SETTLE).await,
            insert: prepare(POSTGRES_INSERT_TRANSACTION).await,
            transition: prepare(POSTGRES_TRANSITION).await,
            client,
        }
    }

    /// Runs one bare write; panics unless it changed exactly one row.
    async fn write(&self, write: &BareWrite) {
        let changed = match write {
            BareWrite::Reserve {
                key,
                token,
                expires_at_ms,
                body,
            } => {
                self.client
                    .execute(&self.reserve, &[key, token, expires_at_ms, body])
                    .await
            }
            BareWrite::Settle {
                key,
                token,
                expires_at_ms,
                body,
            } => {
                self.client
                    .execute(&self.settle, &[key, token, expires_at_ms, body])
                    .await
            }
            BareWrite::Insert {
                id,
                action_id,
                plan_id,
                status,
                recoverable,
                body,
            } => {
                self.client
                    .execute(
                        &self.insert,
                        &[id, action_id, plan_id, status, recoverable, body],
                    )
                    .await
            }
            BareWrite::Transition {
                id,
                expected_revision,
                action_id,
                plan_id,
                status,
                revision,
                recoverable,
                body,
            } => {
                self.client
                    .execute(
                        &self.transition,
                        &[
                            id,
                            expected_revision,
                            action_id,
                            plan_id,
                            status,
                            revision,
                            recoverable,
                            body,
                        ],
                    )
                    .await
            }
        }
        .expect("a bare write runs");
        assert_eq!(changed, 1, "a bare write changes one row");
    }
}

/// Where a baseline writes.
enum Bare {
    /// A bare `rusqlite` connection with the store's settings.
    Sqlite(Connection),
    /// A bare `tokio-postgres` connection.
    Postgres(PostgresBare),
}

/// The schemas a PostgreSQL bench created, dropped with it.
struct PostgresSchemas {
    url: String,
    names: Vec<String>,
}

/// The transactional cases on one durable store: a host on the store, the baseline next to
/// it, and the write census of each case.
struct DurableBench {
    /// `sqlite` or `postgres`.
    backend: &'static str,
    runtime: Runtime,
    host: Host,
    bare: Bare,
    /// The census of each case, in [`TxnCase::ALL`] order.
    censuses: [Census; 2],
    /// Unit names are unique per store and per baseline.
    prefix: String,
    next_unit: u64,
    next_bare_unit: u64,
    /// Set on PostgreSQL: dropped when the bench is.
    schemas: Option<PostgresSchemas>,
}

impl DurableBench {
    /// On SQLite: the store in `store_path`; the baseline in `bare_path`, whose schema the
    /// store creates (then a bare connection opens it with the store's settings).
    fn sqlite(store_path: &Path, bare_path: &Path, censuses: &[Census; 2]) -> Self {
        let store = SqliteStore::open(store_path).expect("the store file opens");
        drop(SqliteStore::open(bare_path).expect("the baseline file gets the store's schema"));
        Self::new(
            "sqlite",
            durable_runtime(),
            Arc::new(store),
            Bare::Sqlite(baseline_connection(bare_path)),
            censuses,
            None,
        )
    }

    /// On PostgreSQL at `url`: the store in the fresh schema `<tag>_store`, the baseline in
    /// `<tag>_bare` (whose tables the store's migration creates).
    fn postgres(url: &str, tag: &str, censuses: &[Census; 2]) -> Self {
        let runtime = durable_runtime();
        let pid = std::process::id();
        let (store_schema, bare_schema) = (
            format!("aip_bench_{pid}_{tag}_store"),
            format!("aip_bench_{pid}_{tag}_bare"),
        );
        let (store, bare) = runtime.block_on(async {
            let store = PostgresStore::connect_with_schema(url, &store_schema)
                .await
                .unwrap_or_else(|error| {
                    panic!("{POSTGRES_URL_VAR} is set but the store cannot connect: {error}")
                });
            let migrated = PostgresStore::connect_with_schema(url, &bare_schema)
                .await
                .expect("the baseline schema gets the store's tables");
            drop(migrated);
            (store, PostgresBare::connect(url, &bare_schema).await)
        });
        Self::new(
            "postgres",
            runtime,
            Arc::new(store),
            Bare::Postgres(bare),
            censuses,
            Some(PostgresSchemas {
                url: url.to_owned(),
                names: vec![store_schema, bare_schema],
            }),
        )
    }

    fn new(
        backend: &'static str,
        runtime: Runtime,
        store: SharedStore,
        bare: Bare,
        censuses: &[Census; 2],
        schemas: Option<PostgresSchemas>,
    ) -> Self {
        let mut bench = Self {
            backend,
            runtime,
            host: ledger_host(store),
            bare,
            censuses: censuses.clone(),
            prefix: format!("{backend}-{}", std::process::id()),
            next_unit: 0,
            next_bare_unit: 0,
            schemas,
        };
        // One unit of each case and of each baseline: every path works before it is timed.
        for case in TxnCase::ALL {
            bench.time_host(case, 1);
            bench.time_bare(case, 1);
        }
        bench
    }

    fn census(&self, case: TxnCase) -> &Census {
        &self.censuses[TxnCase::ALL
            .iter()
            .position(|c| *c == case)
            .expect("every case has a census")]
    }

    /// Runs `count` units of `case` through the host, each call checked to complete.
    fn time_host(&mut self, case: TxnCase, count: usize) -> Sample {
        let units: Vec<Vec<Action>> = (0..count)
            .map(|_| {
                self.next_unit += 1;
                case.actions(&format!("{}-u{}", self.prefix, self.next_unit))
            })
            .collect();
        let caller = caller();
        let host = &self.host;
        self.runtime.block_on(async {
            let watch = Stopwatch::start(CpuScope::Process);
            for unit in units {
                for action in unit {
                    let result = host.invoke(action, &caller).await;
                    expect_completed(&result);
                }
            }
            watch.stop()
        })
    }

    /// Times `count` baseline units and `count` host units of `case` one at a time, in
    /// alternating order (baseline first for even units, host first for odd ones): one sample
    /// per unit and side.
    fn time_paired(&mut self, case: TxnCase, count: usize) -> (Vec<Sample>, Vec<Sample>) {
        let (mut bare, mut host) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for unit in 0..count {
            if unit % 2 == 0 {
                bare.push(self.time_bare(case, 1));
                host.push(self.time_host(case, 1));
            } else {
                host.push(self.time_host(case, 1));
                bare.push(self.time_bare(case, 1));
            }
        }
        (bare, host)
    }

    /// Runs the bare writes of `count` units of `case`.
    fn time_bare(&mut self, case: TxnCase, count: usize) -> Sample {
        let units: Vec<Vec<BareWrite>> = (0..count)
            .map(|_| {
                self.next_bare_unit += 1;
                let unit = format!("{}-b{}", self.prefix, self.next_bare_unit);
                bare_unit(self.census(case), &unit)
            })
            .collect();
        match &self.bare {
            Bare::Sqlite(connection) => {
                let watch = Stopwatch::start(CpuScope::Process);
                for write in units.iter().flatten() {
                    sqlite_bare_write(connection, write);
                }
                watch.stop()
            }
            Bare::Postgres(bare) => self.runtime.block_on(async {
                let watch = Stopwatch::start(CpuScope::Process);
                for write in units.iter().flatten() {
                    bare.write(write).await;
                }
                watch.stop()
            }),
        }
    }
}

impl Drop for DurableBench {
    fn drop(&mut self) {
        let Some(schemas) = self.schemas.take() else {
            return;
        };
        for name in &schemas.names {
            if let Err(error) = self
                .runtime
                .block_on(PostgresStore::drop_schema(&schemas.url, name))
            {
                eprintln!("could not drop the bench schema {name}: {error}");
            }
        }
    }
}

/// The PostgreSQL URL of the `transactions_postgres` cases, or why they are skipped.
fn postgres_url() -> Result<String, String> {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => Err(format!(
            "PostgreSQL cases skipped: {POSTGRES_URL_VAR} is not set (set it to a server URL, \
             e.g. postgres://postgres@127.0.0.1:5432/test, to measure them)"
        )),
    }
}

/// The durable benches of one phase (`tag`: `criterion` or `summary`, so each phase starts on
/// fresh files and schemas): SQLite always, PostgreSQL when a server is configured.
fn durable_benches(
    scratch: &ScratchDir,
    tag: &str,
    censuses: &[Census; 2],
    postgres: &Result<String, String>,
) -> Vec<DurableBench> {
    let mut benches = vec![DurableBench::sqlite(
        &scratch.file(&format!("{tag}-txn-store.db")),
        &scratch.file(&format!("{tag}-txn-bare.db")),
        censuses,
    )];
    if let Ok(url) = postgres {
        benches.push(DurableBench::postgres(url, tag, censuses));
    }
    benches
}

/// One line per write of a case: kind, target status for transitions, body size.
fn describe_writes(census: &Census) -> String {
    census
        .writes
        .iter()
        .map(|write| match write.kind {
            WriteKind::Transition => format!(
                "{} to {} ({} B)",
                write.kind.label(),
                write.status,
                write.body.len()
            ),
            WriteKind::InsertTransaction => format!(
                "{} {} ({} B)",
                write.kind.label(),
                write.status,
                write.body.len()
            ),
            _ => format!("{} ({} B)", write.kind.label(), write.body.len()),
        })
        .collect::<Vec<_>>()
        .join(", ")
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

fn bench_durable(c: &mut Criterion, benches: &mut [DurableBench]) {
    for bench in benches {
        let mut group = c.benchmark_group(format!("transactions_{}", bench.backend));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(8))
            .throughput(Throughput::Elements(1));
        for case in TxnCase::ALL {
            group.bench_function(format!("bare_{}_writes", case.name()), |b| {
                b.iter_custom(|iters| bench.time_bare(case, iters as usize).wall);
            });
            group.bench_function(case.name(), |b| {
                b.iter_custom(|iters| bench.time_host(case, iters as usize).wall);
            });
        }
        group.finish();
    }
}

/// The timed units of one transactional case on one store: one entry per round, holding one
/// sample per unit. Baseline and host units alternate (see [`DurableBench::time_paired`]), so
/// both sides see the same moments of a shared disk.
#[derive(Default)]
struct DurableSeries {
    bare: Vec<Vec<Sample>>,
    host: Vec<Vec<Sample>>,
}

/// The statistics of one side of a [`DurableSeries`], in microseconds per unit.
struct DurableStats {
    /// Median wall time of a unit, over every unit of every round.
    median: f64,
    /// Mean wall time of a unit, over every unit of every round.
    mean: f64,
    /// Mean process CPU time of a unit.
    cpu: f64,
}

impl DurableSeries {
    fn push(&mut self, (bare, host): (Vec<Sample>, Vec<Sample>)) {
        self.bare.push(bare);
        self.host.push(host);
    }

    /// Baseline and host statistics.
    fn stats(&self) -> [DurableStats; 2] {
        let stats = |rounds: &[Vec<Sample>]| {
            let units: Vec<&Sample> = rounds.iter().flatten().collect();
            let micros = |d: Duration| d.as_secs_f64() * 1e6;
            let count = units.len() as f64;
            DurableStats {
                median: median(units.iter().map(|s| micros(s.wall)).collect()),
                mean: units.iter().map(|s| micros(s.wall)).sum::<f64>() / count,
                cpu: units.iter().filter_map(|s| s.cpu).map(micros).sum::<f64>() / count,
            }
        };
        [stats(&self.bare), stats(&self.host)]
    }

    /// The smallest and largest ratio of the host's median unit to the baseline's, per round.
    fn ratio_range(&self) -> (f64, f64) {
        let round_median =
            |units: &[Sample]| median(units.iter().map(|s| s.wall.as_secs_f64()).collect());
        self.bare.iter().zip(&self.host).fold(
            (f64::INFINITY, f64::NEG_INFINITY),
            |(low, high), (bare, host)| {
                let ratio = round_median(host) / round_median(bare);
                (low.min(ratio), high.max(ratio))
            },
        )
    }
}

/// The reads of a census, counted by kind in first-seen order: `transaction by id ×2, …`.
fn describe_reads(census: &Census) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for read in &census.reads {
        match counted.iter_mut().find(|(name, _)| name == read) {
            Some((_, count)) => *count += 1,
            None => counted.push((read, 1)),
        }
    }
    if counted.is_empty() {
        return "none".to_owned();
    }
    counted
        .iter()
        .map(|(name, count)| format!("{name} x{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints the transactional cases of the summary: the write census, medians per unit, and the
/// ratios with their targets.
fn durable_summary(
    benches: &[DurableBench],
    series: &[[DurableSeries; 2]],
    censuses: &[Census; 2],
    postgres: &Result<String, String>,
) {
    println!();
    println!(
        "transactions on durable stores: {SUMMARY_ROUNDS} rounds of {SUMMARY_DURABLE_UNITS} \
         units per case, baseline and host units alternating; per unit: median and mean wall \
         time, mean CPU of the bench process (which leaves out the PostgreSQL server)"
    );
    for (case, census) in TxnCase::ALL.iter().zip(censuses) {
        println!(
            "  {} writes ({}): {}",
            case.label(),
            census.writes.len(),
            describe_writes(census)
        );
        println!(
            "  {} reads (host only, not in the baseline): {}",
            case.label(),
            describe_reads(census)
        );
    }
    println!(
        "  {:<8} {:<36} {:>12} {:>12} {:>12}",
        "store", "case", "median", "mean", "cpu"
    );
    for (bench, series) in benches.iter().zip(series) {
        for (case, series) in TxnCase::ALL.iter().zip(series) {
            let writes = bench.census(*case).writes.len();
            let [bare, host] = series.stats();
            for (name, stats) in [
                (
                    format!("bare writes of {} ({writes} commits)", case.label()),
                    bare,
                ),
                (format!("host {}", case.label()), host),
            ] {
                println!(
                    "  {:<8} {name:<36} {:>9.0} us {:>9.0} us {:>9.0} us",
                    bench.backend, stats.median, stats.mean, stats.cpu
                );
            }
        }
    }
    if let Err(skipped) = postgres {
        println!("  {skipped}");
    }
    println!(
        "ratios (median unit over median unit; per-round range, ratio of means and of CPU \
         alongside):"
    );
    for (bench, series) in benches.iter().zip(series) {
        let target = if bench.backend == "postgres" {
            TARGET_TRANSACTION_POSTGRES
        } else {
            TARGET_TRANSACTION_SQLITE
        };
        for (case, series) in TxnCase::ALL.iter().zip(series) {
            let [bare, host] = series.stats();
            let (low, high) = series.ratio_range();
            verdict(
                &format!("{} {} / writes", bench.backend, case.label()),
                host.median / bare.median,
                target,
                true,
                &format!(
                    "rounds {low:.2}-{high:.2}x; means {:.2}x; process cpu {:.2}x",
                    host.mean / bare.mean,
                    host.cpu / bare.cpu
                ),
            );
        }
    }
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
fn summary(scratch: &ScratchDir, censuses: &[Census; 2], postgres: &Result<String, String>) {
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
    let mut durable = durable_benches(scratch, "summary", censuses, postgres);
    let mut durable_series: Vec<[DurableSeries; 2]> =
        durable.iter().map(|_| Default::default()).collect();
    for _ in 0..SUMMARY_ROUNDS {
        floor.push(
            time_floor(&runtime, SUMMARY_FLOOR_CALLS),
            SUMMARY_FLOOR_CALLS,
        );
        // A fresh host for each, as in the criterion cases: unkeyed calls timed on a host whose
        // store holds the keyed calls' records would time the allocator's walk through the
        // records' heap, not the host.
        keyed.push(
            time_invocations(&runtime, &memory_host(), SUMMARY_HOST_CALLS, true),
            SUMMARY_HOST_CALLS,
        );
        unkeyed.push(
            time_invocations(&runtime, &memory_host(), SUMMARY_HOST_CALLS, false),
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
        for (bench, series) in durable.iter_mut().zip(&mut durable_series) {
            for (case, series) in TxnCase::ALL.into_iter().zip(series.iter_mut()) {
                series.push(bench.time_paired(case, SUMMARY_DURABLE_UNITS));
            }
        }
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
         calls, {SUMMARY_HOST_CALLS} host calls, {THROUGHPUT_CALLS} keyed calls in units of \
         {THROUGHPUT_CALLS_PER_TASK} by {THROUGHPUT_CALLERS} callers per throughput run, \
         {THROUGHPUT_CALLS} control units of \
         {CONTROL_CALLS_PER_TASK} typed calls, {SUMMARY_SQLITE_CALLS} SQLite calls per round)"
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
        "control units, 1 worker"
    );
    println!(
        "  {:<34} {control_two:>9.0}/s  ({control_two_cores:.2} cores busy)",
        "control units, 2 workers"
    );
    println!("  Host::invoke future: {future_size} bytes");
    println!(
        "ratios (wall clock; CPU-time ratio and the host's own cost, its median minus the floor's, alongside):"
    );
    verdict(
        "keyed / floor",
        keyed / floor,
        TARGET_KEYED,
        true,
        &format!(
            "cpu {:.2}x; the host's own cost {:.0} ns",
            keyed_cpu / floor_cpu,
            keyed - floor
        ),
    );
    verdict(
        "no key / floor",
        unkeyed / floor,
        TARGET_UNKEYED,
        true,
        &format!(
            "cpu {:.2}x; the host's own cost {:.0} ns",
            unkeyed_cpu / floor_cpu,
            unkeyed - floor
        ),
    );
    verdict(
        "2 workers / 1 worker",
        two / one,
        TARGET_SCALING,
        false,
        &format!(
            "cores busy {:.2}x, calls per CPU-second {:.2}x; control units scale {:.2}x",
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
    durable_summary(&durable, &durable_series, censuses, postgres);
}

/// The environment variable that selects [`profile`] mode: `<case>:<calls>`, where the case is
/// `floor`, `keyed`, `unkeyed` (for an instruction profiler), `workers_1`, `workers_2` (the
/// throughput run alone, for a sampling profiler such as `perf`), or `sqlite`,
/// `sqlite_baseline` (keyed invocations on a [`SqliteStore`], or the pairs of bare upserts they
/// are compared with, timed and printed per call; for `perf` or `strace`).
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
            panic!(
                "{PROFILE_VAR} is `<floor|keyed|unkeyed|workers_1|workers_2|sqlite|sqlite_baseline>:<calls>`"
            )
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
        "sqlite" | "sqlite_baseline" => {
            let scratch = ScratchDir::new();
            let mut keyed = SqliteCase::new(&scratch.file("profile-store.db"));
            keyed.check();
            let took = if case == "sqlite" {
                profiled_calls_sqlite(&mut keyed, calls)
            } else {
                let body_len = record_body_len(&scratch.file("profile-store.db"));
                let mut baseline =
                    UpsertBaseline::new(&scratch.file("profile-baseline.db"), body_len);
                profiled_calls_sqlite_baseline(&mut baseline, calls)
            };
            eprintln!("{calls} {case} calls: {:?} per call", took / calls as u32);
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

/// The profiled section of the SQLite case: keyed invocations on a [`SqliteStore`].
#[inline(never)]
fn profiled_calls_sqlite(case: &mut SqliteCase, calls: usize) -> Duration {
    case.time(calls)
}

/// The profiled section of the SQLite baseline: pairs of bare upserts.
#[inline(never)]
fn profiled_calls_sqlite_baseline(baseline: &mut UpsertBaseline, calls: usize) -> Duration {
    baseline.time(calls)
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
    let censuses = TxnCase::ALL.map(pipeline_writes);
    let postgres = postgres_url();
    if let Err(skipped) = &postgres {
        println!("{skipped}");
    }
    let scratch = ScratchDir::new();
    let mut criterion = Criterion::default().configure_from_args();
    bench_latency(&mut criterion);
    bench_throughput(&mut criterion);
    bench_sqlite(&mut criterion, &scratch);
    {
        let mut durable = durable_benches(&scratch, "criterion", &censuses, &postgres);
        bench_durable(&mut criterion, &mut durable);
    }
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
        summary(&scratch, &censuses, &postgres);
    }
}
