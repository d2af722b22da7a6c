//! The README's main demo, as a library function: the calendar example on the embedded SQLite
//! store, end to end, against a provider on loopback.
//!
//! [`run`] prints a short narrative and returns a [`DemoReport`] of what happened, so
//! `examples/demo.rs` can print it and `examples/tests/demo.rs` can run it twice against one
//! file and check that the second run found the first run's state.
//!
//! The steps:
//!
//! 1. build a host over [`SqliteStore`] with the calendar connector (strict admission) and print
//!    the admitted manifest: each capability's risk, side effects, completion and transaction
//!    modes, idempotency and data classification;
//! 2. plan and commit a booking under fixed idempotency keys, and look it up at the provider;
//! 3. send the same commit again: the stored result is replayed (`idempotent_replay`), the
//!    provider sees nothing;
//! 4. book again while the provider commits the booking and drops the connection: the outcome
//!    is unknown, a retry of the transaction is refused (`transaction.reconciliation_required`),
//!    and a `reconcile` asks the provider, which confirms the booking;
//! 5. print where the state lives: the file and the rows of its tables.
//!
//! Because the keys of step 2 are fixed, a second run against the same file (within the keys'
//! one-day TTL) finds the plan and the commit already settled: both replay from the store, and
//! the provider receives no booking request for them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aip_connector::VerifiedTenant;
use aip_connector::host::{Deployment, Host, HostBuildError, TransactionSelector, TrustedContext};
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Manifest, Principal,
    PrincipalKind, TransactionMode, TransactionProtocolStatus, TransactionReceipt,
};
use aip_connector::provider::ProviderClientError;
use aip_connector::store::{SqliteStore, StoreError};
use aip_connector_testkit::provider_double::{Fault, ProviderDouble};
use serde::Serialize;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::calendar::{self, Calendar};
use crate::loopback_client;

/// The environment variable that names the store file (a command-line argument wins over it).
pub const STORE_ENV: &str = "AIP_DEMO_DB";
/// The tenant the demo's host serves.
pub const TENANT: &str = "demo-tenant";
/// The caller every step acts as.
pub const CALLER: &str = "user:ada";
/// The booking of step 2.
pub const BOOKING_STARTS_AT: &str = "2026-12-01T09:00:00Z";
/// The idempotency key of step 2's plan: fixed, so a later run replays it.
pub const PLAN_KEY: &str = "demo-booking-plan";
/// The idempotency key of step 2's commit (and of step 3's replay): fixed, so a later run
/// replays it.
pub const COMMIT_KEY: &str = "demo-booking-commit";
/// The booking of step 4 (a new one every run).
pub const UNCERTAIN_STARTS_AT: &str = "2026-12-02T14:00:00Z";

/// The tables of the SQLite store, with what each holds (docs/host-runtime.md §7.4).
const TABLES: [(&str, &str); 3] = [
    (
        "transactions",
        "plans, commits, unknown outcomes, reconciliations, receipt chains",
    ),
    (
        "idempotency_entries",
        "settled results (replayed to duplicates) and live reservations",
    ),
    ("approval_records", "approval requests and decisions"),
];

/// Where the demo keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoConfig {
    /// The SQLite file. Created, with its directory, when missing.
    pub store_path: PathBuf,
}

impl DemoConfig {
    /// The store file named by the first of `args` (the program name excluded), else by
    /// [`STORE_ENV`], else [`default_store_path`].
    pub fn from_args(mut args: impl Iterator<Item = String>) -> Self {
        let store_path = args
            .next()
            .or_else(|| std::env::var(STORE_ENV).ok())
            .filter(|path| !path.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(default_store_path);
        Self { store_path }
    }
}

/// `<target dir>/aip-demo/demo.db`: the `target` directory the running binary was built in
/// (`CARGO_TARGET_DIR` when set), else `./target`.
pub fn default_store_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::current_exe().ok().and_then(|exe| {
                exe.ancestors()
                    .find(|dir| dir.file_name().is_some_and(|name| name == "target"))
                    .map(Path::to_path_buf)
            })
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("aip-demo").join("demo.db")
}

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The narrative could not be written.
    #[error("cannot write the demo's output: {0}")]
    Output(#[from] std::io::Error),
    /// The store file could not be opened, created or read.
    #[error("cannot use the store at {path}: {message}")]
    Store {
        /// The store file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The host refused to start (a manifest failed admission).
    #[error("the host did not start: {0}")]
    Host(#[from] HostBuildError),
    /// The provider client could not be built.
    #[error("the provider client cannot be built: {0}")]
    Client(#[from] ProviderClientError),
    /// A step did not end as the demo expects.
    #[error(
        "{step}: {detail} (if the store file holds state from an incompatible run, delete it or pass another path)"
    )]
    Unexpected {
        /// The step.
        step: &'static str,
        /// What happened instead.
        detail: String,
    },
}

/// What one run did.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoReport {
    /// The store file.
    pub store_path: PathBuf,
    /// Rows per table before this run touched the file (all zero for a new file).
    pub rows_before: Vec<(String, u64)>,
    /// Rows per table after this run.
    pub rows_after: Vec<(String, u64)>,
    /// Capability ids of the admitted manifest.
    pub capabilities: Vec<String>,
    /// Step 2.
    pub booking: BookingStep,
    /// Step 3.
    pub replay: ReplayStep,
    /// Step 4.
    pub uncertain: UncertainStep,
}

/// Step 2: the planned and committed booking.
#[derive(Clone, Debug, PartialEq)]
pub struct BookingStep {
    /// The booking's transaction.
    pub transaction_id: TransactionId,
    /// Its plan.
    pub plan_id: String,
    /// The provider's booking id.
    pub booking_id: String,
    /// Whether the plan and the commit were replays of an earlier run's results.
    pub from_earlier_run: bool,
    /// The durable status of the transaction, read back from the store.
    pub status: TransactionProtocolStatus,
    /// When the commit settled (milliseconds since the Unix epoch), from the receipt chain.
    pub committed_at_ms: Option<u64>,
    /// Booking requests the provider received in this step.
    pub provider_requests: usize,
}

/// Step 3: the same commit sent again.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayStep {
    /// Whether the result said `idempotent_replay: true`.
    pub idempotent_replay: bool,
    /// The booking id the replay carried.
    pub booking_id: String,
    /// Requests the provider received in this step.
    pub provider_requests: usize,
}

/// Step 4: the uncertain outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct UncertainStep {
    /// The transaction whose outcome was lost.
    pub transaction_id: TransactionId,
    /// The error the lost answer produced.
    pub error_code: String,
    /// Its status right after (`outcome_unknown`).
    pub status_after_failure: TransactionProtocolStatus,
    /// The refusal of the retry.
    pub retry_refusal_code: String,
    /// What reconciliation found at the provider.
    pub committed_at_provider: bool,
    /// The status after reconciliation (`reconciled`).
    pub final_status: TransactionProtocolStatus,
    /// Effects the provider holds for this booking (one: it was made exactly once).
    pub provider_effects: usize,
}

/// The wire spelling of an enum value (`write`, `outcome_unknown`, ...).
fn wire(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

fn rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// Rows per table of the store file; zeros when the file does not exist yet.
fn table_rows(path: &Path) -> Result<Vec<(String, u64)>, DemoError> {
    let store_error = |message: String| DemoError::Store {
        path: path.to_path_buf(),
        message,
    };
    if !path.exists() {
        return Ok(TABLES.iter().map(|(t, _)| ((*t).to_owned(), 0)).collect());
    }
    let connection =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| store_error(e.to_string()))?;
    TABLES
        .iter()
        .map(|(table, _)| {
            // The table names are this module's constants, not input.
            let count: Result<i64, _> =
                connection.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                    row.get(0)
                });
            match count {
                Ok(count) => Ok(((*table).to_owned(), u64::try_from(count).unwrap_or(0))),
                // A file that the store has not initialised yet.
                Err(rusqlite::Error::SqliteFailure(_, Some(message)))
                    if message.contains("no such table") =>
                {
                    Ok(((*table).to_owned(), 0))
                }
                Err(error) => Err(store_error(error.to_string())),
            }
        })
        .collect()
}

/// `1 transaction`, `2 transactions`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn rows_of(rows: &[(String, u64)], table: &str) -> u64 {
    rows.iter()
        .find(|(name, _)| name == table)
        .map_or(0, |(_, n)| *n)
}

/// The error code of a result, or `-`.
fn code(result: &ActionResult) -> String {
    result
        .error
        .as_ref()
        .map_or_else(|| "-".to_owned(), |e| e.code.clone())
}

fn is_replay(result: &ActionResult) -> bool {
    result
        .output
        .as_ref()
        .and_then(|o| o.get("idempotent_replay"))
        .and_then(Value::as_bool)
        == Some(true)
}

fn unexpected(step: &'static str, result: &ActionResult) -> DemoError {
    DemoError::Unexpected {
        step,
        detail: format!(
            "the result was {} with error {} ({})",
            wire(&result.status),
            code(result),
            result.error.as_ref().map_or("", |e| e.message.as_str())
        ),
    }
}

fn transactional(
    input: Value,
    key: &str,
    mode: TransactionMode,
    configure: impl FnOnce(&mut ActionTransaction),
) -> Action {
    let mut block = ActionTransaction::new(mode);
    configure(&mut block);
    Action::new(calendar::CREATE_BOOKING, input)
        .with_idempotency_key(key)
        .with_transaction(block)
}

/// Runs the demo against `config.store_path`, writing the narrative to `out`.
///
/// # Errors
///
/// When the store cannot be opened, the host does not start, the narrative cannot be written,
/// or a step does not end as the demo expects (for example, a file holding state the demo did
/// not write).
pub async fn run(config: &DemoConfig, out: &mut dyn Write) -> Result<DemoReport, DemoError> {
    let path = &config.store_path;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| DemoError::Store {
            path: path.clone(),
            message: e.to_string(),
        })?;
    }
    let rows_before = table_rows(path)?;
    let store = Arc::new(
        SqliteStore::open(path).map_err(|e: StoreError| DemoError::Store {
            path: path.clone(),
            message: e.to_string(),
        })?,
    );
    let shown_path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());

    let (double, provider) = ProviderDouble::start().await;
    let host = Host::builder()
        .connector(Calendar::new(loopback_client(
            double.base_url(),
            calendar::CONNECTOR_ID,
        )?))
        .store(store)
        .deployment(Deployment::new().with_tenant(VerifiedTenant::new(TENANT.to_owned())))
        .build()?;
    let caller = TrustedContext::new(Principal::new(CALLER, PrincipalKind::Human), "aip-demo")
        .with_tenant(VerifiedTenant::new(TENANT.to_owned()));

    writeln!(out, "aip-connector demo: the calendar example, end to end")?;
    writeln!(out, "  state    {} (embedded SQLite)", shown_path.display())?;
    let earlier = rows_of(&rows_before, "transactions");
    if earlier == 0 {
        writeln!(out, "           a new file: nothing from earlier runs")?;
    } else {
        writeln!(
            out,
            "           holds {} and {} from earlier runs",
            count(earlier, "transaction"),
            count(
                rows_of(&rows_before, "idempotency_entries"),
                "idempotency record"
            )
        )?;
    }
    writeln!(
        out,
        "  provider {} (the testkit's provider double, on loopback, in this process)",
        double.base_url()
    )?;

    // 1. The admitted manifest.
    writeln!(
        out,
        "\n1. Admitted manifest (strict admission: schemas, contract rules, implementation claims)"
    )?;
    let mut capabilities = Vec::new();
    for admitted in host.manifests() {
        let manifest = admitted.manifest();
        capabilities.extend(manifest.capabilities.iter().map(|c| c.id.to_string()));
        print_manifest(out, manifest)?;
    }

    // 2. Plan and commit.
    let booking = plan_and_commit(out, &host, &caller, &provider).await?;

    // 3. The same commit again.
    let replay = replay_commit(out, &host, &caller, &provider, &booking).await?;

    // 4. An uncertain outcome, reconciled.
    let uncertain = uncertain_outcome(out, &host, &caller, &provider).await?;

    // 5. Where the state lives.
    drop(host);
    let rows_after = table_rows(path)?;
    writeln!(out, "\n5. Where the state lives")?;
    writeln!(out, "   {}", shown_path.display())?;
    for (table, holds) in TABLES {
        writeln!(
            out,
            "     {table:<20} {:>4} rows  {holds}",
            rows_of(&rows_after, table)
        )?;
    }
    writeln!(
        out,
        "   Run the demo again: the booking of step 2 is found in this file and replayed, not made twice."
    )?;
    writeln!(
        out,
        "   Another file: pass its path as the argument or set {STORE_ENV}; to start over, delete this one."
    )?;

    Ok(DemoReport {
        store_path: path.clone(),
        rows_before,
        rows_after,
        capabilities,
        booking,
        replay,
        uncertain,
    })
}

fn print_manifest(out: &mut dyn Write, manifest: &Manifest) -> Result<(), DemoError> {
    let profiles: Vec<&str> = manifest.profiles.iter().map(|p| p.as_str()).collect();
    writeln!(
        out,
        "   {} · profiles {}",
        manifest.agent.id,
        profiles.join(", ")
    )?;
    for capability in &manifest.capabilities {
        let risk = capability.risk.as_ref().map_or("-".to_owned(), wire);
        let Some(contract) = capability.contract.as_ref() else {
            writeln!(out, "   {}: risk {risk}, no contract", capability.id)?;
            continue;
        };
        let effects: Vec<String> = contract.side_effects.iter().map(wire).collect();
        writeln!(
            out,
            "   {}: risk {risk} · effects {}",
            capability.id,
            effects.join(", ")
        )?;
        let execution = &contract.execution;
        let completion: Vec<&str> = [
            (execution.supports_sync, "sync"),
            (execution.supports_async, "async"),
            (execution.supports_streaming, "streaming"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        let transactions = contract.transaction.as_ref().map_or_else(
            || "none".to_owned(),
            |t| {
                let modes: Vec<String> = t.supported_modes.iter().map(wire).collect();
                let plan = if t.requires_plan_before_commit {
                    " (commit needs a plan)"
                } else {
                    ""
                };
                format!("{}{plan}", modes.join(", "))
            },
        );
        writeln!(
            out,
            "     modes {} · transactions {transactions}",
            completion.join(", ")
        )?;
        let data = &contract.data;
        writeln!(
            out,
            "     idempotency key {} ({} scope) · retry {} · data {}{}{}",
            wire(&contract.idempotency.requirement),
            wire(&contract.idempotency.key_scope),
            wire(&execution.retry_safety),
            wire(&data.sensitivity),
            if data.contains_pii { ", PII" } else { "" },
            if data.redaction_required {
                ", redacted"
            } else {
                ""
            },
        )?;
    }
    Ok(())
}

async fn plan_and_commit(
    out: &mut dyn Write,
    host: &Host,
    caller: &TrustedContext,
    provider: &aip_connector_testkit::provider_double::ProviderHandle,
) -> Result<BookingStep, DemoError> {
    const STEP: &str = "step 2 (plan and commit)";
    let input = json!({ "starts_at": BOOKING_STARTS_AT });
    let requests_before = provider.request_count();
    writeln!(
        out,
        "\n2. Plan and commit a booking for {BOOKING_STARTS_AT} (keys `{PLAN_KEY}`, `{COMMIT_KEY}`)"
    )?;

    let planned = host
        .invoke(
            transactional(input.clone(), PLAN_KEY, TransactionMode::Plan, |_| {}),
            caller,
        )
        .await;
    let plan = planned
        .output
        .as_ref()
        .and_then(|o| o.get("plan"))
        .filter(|_| planned.status == ActionResultStatus::Completed)
        .ok_or_else(|| unexpected(STEP, &planned))?;
    let plan_id = plan["plan_id"].as_str().unwrap_or_default().to_owned();
    let from_earlier_run = is_replay(&planned);
    if from_earlier_run {
        writeln!(
            out,
            "   plan    → replayed from the store (idempotent_replay): an earlier run planned it as {plan_id}"
        )?;
    } else {
        writeln!(
            out,
            "   plan    → planned {plan_id}, expires {}; approval required: {}",
            plan["expires_at"].as_str().unwrap_or("-"),
            plan["approval_required"]
        )?;
    }

    let committed = host
        .invoke(
            transactional(input, COMMIT_KEY, TransactionMode::Commit, |block| {
                block.plan_id = Some(plan_id.clone());
            }),
            caller,
        )
        .await;
    let booking_id = committed
        .output
        .as_ref()
        .and_then(|o| o.get("booking_id"))
        .and_then(Value::as_str)
        .filter(|_| committed.status == ActionResultStatus::Completed)
        .ok_or_else(|| unexpected(STEP, &committed))?
        .to_owned();
    let view = host
        .transaction(&TransactionSelector::Plan(plan_id.clone()), caller)
        .await
        .map_err(|e| DemoError::Unexpected {
            step: STEP,
            detail: e.message,
        })?
        .ok_or_else(|| DemoError::Unexpected {
            step: STEP,
            detail: format!("no transaction answers to {plan_id}"),
        })?;
    let committed_at_ms = view
        .receipts
        .iter()
        .find(|r| r.status == TransactionProtocolStatus::Committed)
        .map(|r| r.recorded_at_ms);
    let chain: Vec<String> = view.receipts.iter().map(|r| wire(&r.kind)).collect();
    let when = committed_at_ms.map_or_else(|| "-".to_owned(), rfc3339);
    if from_earlier_run || is_replay(&committed) {
        writeln!(
            out,
            "   commit  → replayed from the store: booking {booking_id}, committed {when} by an earlier run"
        )?;
    } else {
        writeln!(
            out,
            "   commit  → {}: booking {booking_id}, at {when}",
            wire(&view.status)
        )?;
    }
    writeln!(
        out,
        "   record  → transaction {} is {}; receipts {} ({})",
        view.transaction_id,
        wire(&view.status),
        chain.join(" → "),
        if TransactionReceipt::chain_is_intact(&view.receipts) {
            "hash chain intact"
        } else {
            "HASH CHAIN BROKEN"
        }
    )?;

    let provider_requests = provider.request_count() - requests_before;
    if from_earlier_run {
        writeln!(
            out,
            "   the provider received {} for it in this run: the booking was made once, by the earlier run",
            count(provider_requests as u64, "request")
        )?;
    } else {
        let lookup = host
            .invoke(
                Action::new(calendar::GET_BOOKING, json!({ "booking_id": booking_id })),
                caller,
            )
            .await;
        let state = lookup
            .output
            .as_ref()
            .and_then(|o| o.get("state"))
            .and_then(Value::as_str)
            .ok_or_else(|| unexpected(STEP, &lookup))?;
        writeln!(
            out,
            "   lookup  → {} says the provider has it: {state}",
            calendar::GET_BOOKING
        )?;
    }
    Ok(BookingStep {
        transaction_id: view.transaction_id,
        plan_id,
        booking_id,
        from_earlier_run,
        status: view.status,
        committed_at_ms,
        provider_requests,
    })
}

async fn replay_commit(
    out: &mut dyn Write,
    host: &Host,
    caller: &TrustedContext,
    provider: &aip_connector_testkit::provider_double::ProviderHandle,
    booking: &BookingStep,
) -> Result<ReplayStep, DemoError> {
    const STEP: &str = "step 3 (replay)";
    writeln!(
        out,
        "\n3. Send the same commit again: new action id, same key `{COMMIT_KEY}`"
    )?;
    let requests_before = provider.request_count();
    let again = host
        .invoke(
            transactional(
                json!({ "starts_at": BOOKING_STARTS_AT }),
                COMMIT_KEY,
                TransactionMode::Commit,
                |block| block.plan_id = Some(booking.plan_id.clone()),
            ),
            caller,
        )
        .await;
    let booking_id = again
        .output
        .as_ref()
        .and_then(|o| o.get("booking_id"))
        .and_then(Value::as_str)
        .ok_or_else(|| unexpected(STEP, &again))?
        .to_owned();
    let idempotent_replay = is_replay(&again);
    let provider_requests = provider.request_count() - requests_before;
    writeln!(
        out,
        "   → {} with idempotent_replay: {idempotent_replay}, booking {booking_id}; the handler did not run, the provider received {}",
        wire(&again.status),
        count(provider_requests as u64, "request")
    )?;
    Ok(ReplayStep {
        idempotent_replay,
        booking_id,
        provider_requests,
    })
}

async fn uncertain_outcome(
    out: &mut dyn Write,
    host: &Host,
    caller: &TrustedContext,
    provider: &aip_connector_testkit::provider_double::ProviderHandle,
) -> Result<UncertainStep, DemoError> {
    const STEP: &str = "step 4 (uncertain outcome)";
    let input = json!({ "starts_at": UNCERTAIN_STARTS_AT });
    let run = uuid::Uuid::now_v7().simple().to_string();
    let transaction_id = TransactionId::new();
    writeln!(
        out,
        "\n4. Book {UNCERTAIN_STARTS_AT} while the provider commits the booking and drops the connection"
    )?;
    provider.inject(calendar::BOOKINGS_ROUTE, Fault::drop_connection());
    let effects_before = provider.effect_total();

    let first_action = transactional(
        input.clone(),
        &format!("demo-uncertain-{run}"),
        TransactionMode::Execute,
        |block| block.transaction_id = Some(transaction_id.clone()),
    );
    let first = host.invoke(first_action.clone(), caller).await;
    let error_code = code(&first);
    let view = read_view(host, caller, &transaction_id, STEP).await?;
    let status_after_failure = view.status;
    let operation = view
        .provider_operation
        .as_ref()
        .map_or("-", |op| op.operation_id.as_str())
        .to_owned();
    let uncertain = first.error.as_ref().is_some_and(|e| {
        e.details
            .as_ref()
            .and_then(|d| d.get("uncertain_outcome"))
            .and_then(Value::as_bool)
            == Some(true)
    });
    writeln!(
        out,
        "   execute   → {}: {error_code}{}; transaction {transaction_id} is {}",
        wire(&first.status),
        if uncertain {
            " (uncertain outcome)"
        } else {
            ""
        },
        wire(&status_after_failure)
    )?;
    writeln!(
        out,
        "               provider operation {operation} was checkpointed before the request left"
    )?;

    // A client that lost the answer sends the same action again. Under the same key it gets
    // the stored answer back; under a new key the host refuses to run it a second time.
    let resent = host.invoke(first_action.clone(), caller).await;
    writeln!(
        out,
        "   resend    → same action, same key: the stored {} is replayed (idempotent_replay: {})",
        code(&resent),
        is_replay(&resent)
    )?;
    let retry = host
        .invoke(
            first_action.with_idempotency_key(format!("demo-uncertain-retry-{run}")),
            caller,
        )
        .await;
    let retry_refusal_code = code(&retry);
    writeln!(
        out,
        "   retry     → same action, new key: {} {retry_refusal_code}: the provider may have the booking, so it is not sent again",
        wire(&retry.status)
    )?;

    let reconciled = host
        .invoke(
            transactional(
                input,
                &format!("demo-uncertain-reconcile-{run}"),
                TransactionMode::Reconcile,
                |block| block.transaction_id = Some(transaction_id.clone()),
            ),
            caller,
        )
        .await;
    let answer = reconciled
        .output
        .as_ref()
        .and_then(|o| o.get("reconciliation"))
        .filter(|_| reconciled.status == ActionResultStatus::Completed)
        .ok_or_else(|| unexpected(STEP, &reconciled))?;
    let committed_at_provider = answer["committed"].as_bool() == Some(true);
    let final_status = read_view(host, caller, &transaction_id, STEP).await?.status;
    let provider_effects = provider.effect_total() - effects_before;
    writeln!(
        out,
        "   reconcile → the provider answers `{}` for {operation}: committed = {committed_at_provider}; the transaction is {} (never rewritten as committed)",
        answer["evidence"]["state"].as_str().unwrap_or("-"),
        wire(&final_status)
    )?;
    writeln!(
        out,
        "   the provider holds {} for this attempt: made once, never repeated",
        count(provider_effects as u64, "booking")
    )?;
    Ok(UncertainStep {
        transaction_id,
        error_code,
        status_after_failure,
        retry_refusal_code,
        committed_at_provider,
        final_status,
        provider_effects,
    })
}

async fn read_view(
    host: &Host,
    caller: &TrustedContext,
    transaction_id: &TransactionId,
    step: &'static str,
) -> Result<aip_connector::model::TransactionResult, DemoError> {
    host.transaction(
        &TransactionSelector::Transaction(transaction_id.clone()),
        caller,
    )
    .await
    .map_err(|e| DemoError::Unexpected {
        step,
        detail: e.message,
    })?
    .ok_or_else(|| DemoError::Unexpected {
        step,
        detail: format!("no record of transaction {transaction_id}"),
    })
}
