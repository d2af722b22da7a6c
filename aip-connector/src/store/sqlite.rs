//! [`SqliteStore`]: every family in one SQLite file, durable and shareable between processes.
//!
//! Records are stored as JSON text next to the few columns the compare-and-set statements test
//! or look up by (key, fencing token, expiry, version, resumed flag; transaction, action and plan
//! ids, status, revision, recoverable flag). Every transition is one conditional
//! `UPDATE`/`DELETE` or one `BEGIN IMMEDIATE` transaction, so it is atomic across every
//! connection and process that opens the same file.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aip_connector_core::ids::{ActionId, ApprovalId, TransactionId};
use async_trait::async_trait;
use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Params, TransactionBehavior, ffi, params,
};
use tokio::sync::Semaphore;

use super::purgeable_approval_sql;
use super::sql::{counter_to_sql, decode, encode, millis_to_sql, unsigned_from_sql};
use super::transaction::purgeable_statuses_sql;
use super::{
    ApprovalRecord, ApprovalStore, Claim, IdempotencyRecord, IdempotencyStore, KeyEntry, Millis,
    Purged, Reservation, ReserveOutcome, ResumeClaim, StoreError, TransactionRecord,
    TransactionStore, Transition, TransitionOutcome, claim, record_is_live, reservation_is_live,
    stored_under,
};

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations in order: entry `n` brings `PRAGMA user_version` from `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    MIGRATION_1,
    MIGRATION_2,
    MIGRATION_3,
    MIGRATION_4,
    MIGRATION_5,
    MIGRATION_6,
    MIGRATION_7,
    MIGRATION_8,
];

/// Migration 8: the token of an approval's resume claim (`ResumeClaim::token`), by which
/// `release_resume` gives back that claim only; before, claims were told apart by their time,
/// and two in the same millisecond were not. Rows resumed before it keep NULL: no host of this
/// build holds their claims.
const MIGRATION_8: &str = "
ALTER TABLE approval_records ADD COLUMN resume_token TEXT;
";

/// Migration 7: a plan nobody committed ends, for retention, when it expires
/// (`TransactionRecord::finished_at_ms`: 15 minutes after it was made); this fills the column in
/// for the plans already there (writers set it on every write).
const MIGRATION_7: &str = "
UPDATE transactions SET finished_at_ms = json_extract(body, '$.created_at_ms') + 900000
    WHERE status = 'planned';
";

/// Migration 6: when an approval's single resume claimed it, so that retention keeps a resumed
/// approval for its period after the resume (`ApprovalRecord::is_purgeable`). Rows resumed
/// before it keep NULL, read as their creation time.
const MIGRATION_6: &str = "
ALTER TABLE approval_records ADD COLUMN resumed_at_ms INTEGER;
";

/// Migration 5: what retention deletes by (`ApprovalStore::purge_closed_approvals`,
/// `TransactionStore::purge_finished_transactions`), filled in from the bodies of the rows
/// already there. `finished_at_ms` is a transaction's `updated_at_ms` once it is finished
/// (`TransactionRecord::is_finished`, whose statuses the `IN` list spells), else NULL.
const MIGRATION_5: &str = "
ALTER TABLE approval_records ADD COLUMN created_at_ms INTEGER;
ALTER TABLE approval_records ADD COLUMN expires_at_ms INTEGER;
UPDATE approval_records SET
    created_at_ms = json_extract(body, '$.created_at_ms'),
    expires_at_ms = json_extract(body, '$.expires_at_ms');
CREATE INDEX approval_records_created ON approval_records (created_at_ms);
ALTER TABLE transactions ADD COLUMN finished_at_ms INTEGER;
UPDATE transactions SET finished_at_ms = json_extract(body, '$.updated_at_ms')
    WHERE status IN ('dry_run_completed', 'committed', 'compensated', 'cancelled',
                     'rollback_not_supported', 'failed', 'reconciled');
CREATE INDEX transactions_finished ON transactions (finished_at_ms)
    WHERE finished_at_ms IS NOT NULL;
";

/// Migration 4: the expiries `IdempotencyStore::purge_expired` deletes by, indexed so a purge
/// reads only what it deletes. Only records are indexed: reservations are never purged.
const MIGRATION_4: &str = "
CREATE INDEX idempotency_entries_record_expiry ON idempotency_entries (expires_at_ms)
    WHERE kind = 'record';
CREATE INDEX retry_attempts_expiry ON retry_attempts (expires_at_ms);
";

/// Migration 3: retryable failures counted per idempotency key, for dead-lettering.
const MIGRATION_3: &str = "
CREATE TABLE retry_attempts (
    key           TEXT PRIMARY KEY,
    attempts      INTEGER NOT NULL CHECK (attempts >= 1),
    expires_at_ms INTEGER
);
";

/// Migration 1: the idempotency and approval tables.
const MIGRATION_1: &str = "
CREATE TABLE idempotency_entries (
    key            TEXT PRIMARY KEY NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('reservation', 'record')),
    reservation_id TEXT CHECK ((kind = 'reservation') = (reservation_id IS NOT NULL)),
    expires_at_ms  INTEGER CHECK (kind = 'record' OR expires_at_ms IS NOT NULL),
    body           TEXT NOT NULL
);
CREATE TABLE approval_records (
    approval_id TEXT PRIMARY KEY NOT NULL,
    status      TEXT NOT NULL,
    resumed     INTEGER NOT NULL CHECK (resumed IN (0, 1)),
    version     INTEGER NOT NULL CHECK (version >= 0),
    body        TEXT NOT NULL
);
";

/// Migration 2: transaction records. The body is the whole record; the other columns are derived
/// from it on every write and serve the lookups, the recovery scan and the one-record-per-plan
/// rule (SQLite's unique indexes let any number of rows hold a NULL plan id).
const MIGRATION_2: &str = "
CREATE TABLE transactions (
    transaction_id TEXT PRIMARY KEY NOT NULL,
    action_id      TEXT NOT NULL,
    plan_id        TEXT,
    status         TEXT NOT NULL,
    revision       INTEGER NOT NULL CHECK (revision >= 0),
    recoverable    INTEGER NOT NULL CHECK (recoverable IN (0, 1)),
    body           TEXT NOT NULL
);
CREATE UNIQUE INDEX transactions_plan_id ON transactions (plan_id);
CREATE INDEX transactions_action_id ON transactions (action_id);
CREATE INDEX transactions_recoverable ON transactions (recoverable);
";

/// The `user_version` this build creates and understands.
const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// A store in one SQLite file (or in memory), the embedded durable store (feature `sqlite`, on
/// by default; the host itself defaults to `MemoryStore`).
///
/// - Opening creates the file and the schema (`PRAGMA user_version` 8; a file at an older
///   version is migrated in place), and sets `journal_mode = WAL`, `synchronous = FULL` and a
///   5 s busy timeout (several processes on one file wait for each other instead of failing).
///   Settlements, approvals and transactions are fsynced, so they survive a crash of the
///   process and of the machine. A reservation commits under `synchronous = NORMAL`, not
///   fsynced: a power loss may drop it, which reads as an expired reservation.
/// - Clones share one connection. Each call runs on tokio's blocking pool, one at a time per
///   connection, so it works from any runtime flavour without blocking its workers.
/// - Several `SqliteStore`s, in this process or others, may open the same file: every
///   transition is atomic across all of them.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

/// What the clones of one store share.
struct Shared {
    /// The connection; `rusqlite::Connection` is `Send` but not `Sync`.
    connection: Mutex<Connection>,
    /// One turn per connection, awaited before a blocking-pool thread is taken, so a burst of
    /// calls queues as futures instead of parking hundreds of threads on the mutex.
    turn: Arc<Semaphore>,
    /// The file path, or `:memory:`, for `Debug`.
    location: String,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.shared.location)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Runs `statement`, an update of the approval record `?1` = `id` that sets its resume claim
    /// to, or compares it with, `?2` = `claim.at_ms` and `?3` = `claim.token`, and says whether
    /// it changed that record.
    async fn update_one_approval(
        &self,
        operation: &'static str,
        statement: &'static str,
        id: &ApprovalId,
        claim: &ResumeClaim,
    ) -> Result<bool, StoreError> {
        let id = id.clone();
        let (at_ms, token) = (millis_to_sql(claim.at_ms), claim.token.clone());
        self.run(operation, move |connection| {
            Ok(execute_cached(connection, statement, params![id.as_str(), at_ms, token])? == 1)
        })
        .await
    }

    /// Opens (creating if needed) the store file at `path` and brings its schema up to date.
    ///
    /// Blocks while SQLite opens the file (and waits up to the busy timeout if another process
    /// is migrating it); call it at startup or from a blocking context.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let connection = Connection::open(path).map_err(|error| {
            sqlite_error(&format!("open the store file {}", path.display()), &error)
        })?;
        Self::prepare(connection, path.display().to_string())
    }

    /// A private in-memory database with the same schema and semantics (lost on drop).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let connection = Connection::open_in_memory()
            .map_err(|error| sqlite_error("open an in-memory store", &error))?;
        Self::prepare(connection, ":memory:".to_owned())
    }

    /// Configures a fresh connection and migrates its schema.
    fn prepare(mut connection: Connection, location: String) -> Result<Self, StoreError> {
        configure(&connection)?;
        migrate(&mut connection)?;
        Ok(Self {
            shared: Arc::new(Shared {
                connection: Mutex::new(connection),
                turn: Arc::new(Semaphore::new(1)),
                location,
            }),
        })
    }

    /// Runs `job` on the blocking pool with the connection; `operation` names it in errors.
    async fn run<T, F>(&self, operation: &'static str, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, JobError> + Send + 'static,
    {
        let turn = Arc::clone(&self.shared.turn)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable(format!("{operation}: the store is closed")))?;
        let shared = Arc::clone(&self.shared);
        let joined = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            // A job that panicked mid-transaction rolled it back while unwinding (rusqlite's
            // `Transaction` drop), so the connection is consistent and poison can be ignored.
            let mut connection = shared
                .connection
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            job(&mut connection)
        })
        .await;
        match joined {
            Ok(result) => result.map_err(|error| error.into_store_error(operation)),
            Err(join_error) => Err(StoreError::Unavailable(format!(
                "{operation}: the store task {}",
                if join_error.is_panic() {
                    "panicked"
                } else {
                    "was cancelled"
                }
            ))),
        }
    }
}

/// A connection whose commits do not wait for the disk (`synchronous = NORMAL`) until dropped,
/// when full fsync on commit is restored (also when the job fails half-way).
struct RelaxedSync<'c>(&'c mut Connection);

impl<'c> RelaxedSync<'c> {
    fn enter(connection: &'c mut Connection) -> rusqlite::Result<Self> {
        // Cached: `pragma_update` would parse the pragma on every reserve.
        execute_cached(connection, "PRAGMA synchronous = NORMAL", [])?;
        Ok(Self(connection))
    }
}

impl std::ops::Deref for RelaxedSync<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.0
    }
}

impl std::ops::DerefMut for RelaxedSync<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.0
    }
}

impl Drop for RelaxedSync<'_> {
    fn drop(&mut self) {
        // Outside any transaction (the job's transaction ended before this guard). Should it
        // fail, the next commits are unsynced until the store is reopened: logged, not hidden.
        if let Err(error) = execute_cached(self.0, "PRAGMA synchronous = FULL", []) {
            tracing::error!(error = %error, "could not restore synchronous = FULL on the SQLite store");
        }
    }
}

/// Statements a connection keeps prepared. The store runs some twenty-five distinct statements (the
/// transaction lookups are built from a handful of filters); rusqlite's default of 16 would
/// evict some of them on every call that alternates families.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// `Connection::execute` through the connection's statement cache: `execute` parses and plans
/// its SQL on every call, which for the store's short statements cost more CPU than running
/// them.
fn execute_cached(
    connection: &Connection,
    sql: &str,
    params: impl Params,
) -> rusqlite::Result<usize> {
    connection.prepare_cached(sql)?.execute(params)
}

/// `Connection::query_row` through the connection's statement cache (see [`execute_cached`]).
fn query_row_cached<T>(
    connection: &Connection,
    sql: &str,
    params: impl Params,
    map: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    connection.prepare_cached(sql)?.query_row(params, map)
}

/// Busy timeout, WAL and full fsync on commit; must run outside any transaction.
fn configure(connection: &Connection) -> Result<(), StoreError> {
    let step = |error: rusqlite::Error| sqlite_error("configure the store", &error);
    connection.busy_timeout(BUSY_TIMEOUT).map_err(step)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    let mode = switch_to_wal(connection).map_err(step)?;
    journal_mode_accepted(&mode)?;
    connection
        .pragma_update(None, "synchronous", "FULL")
        .map_err(step)
}

/// Refuses a journal mode other than WAL (or `memory`, an in-memory database's). SQLite answers
/// a switch it cannot make (a file system or VFS without shared memory) with the mode still in
/// force instead of an error, and the store's durability argument (the reservation commits
/// with `synchronous = NORMAL`) holds in WAL mode only.
fn journal_mode_accepted(mode: &str) -> Result<(), StoreError> {
    if mode.eq_ignore_ascii_case("wal") || mode.eq_ignore_ascii_case("memory") {
        return Ok(());
    }
    Err(StoreError::InvalidConfig(format!(
        "the store file could not be put in WAL mode (SQLite kept journal mode `{mode}`); \
         open it on a local file system that supports shared memory"
    )))
}

/// Puts the file in WAL mode (it stays so: the mode is recorded in the file), and says which
/// mode is in force afterwards.
///
/// Switching needs the file to itself, and SQLite answers a contended switch with
/// `SQLITE_BUSY` at once instead of calling the busy handler, so stores opened together on a
/// new file (replicas starting at once) would fail. The switch is retried until
/// [`BUSY_TIMEOUT`], and skipped once another connection has made it.
fn switch_to_wal(connection: &Connection) -> rusqlite::Result<String> {
    let started = std::time::Instant::now();
    loop {
        // `journal_mode` answers with the mode in force (`memory` for an in-memory database).
        let mode: String = connection.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
        if mode.eq_ignore_ascii_case("wal") || mode.eq_ignore_ascii_case("memory") {
            return Ok(mode);
        }
        match connection
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        {
            // The mode in force after the switch: not WAL when SQLite could not make it.
            Ok(mode) => return Ok(mode),
            Err(error)
                if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => return Err(error),
        }
    }
}

/// Applies the migrations the file has not seen yet, in one write transaction, so two
/// processes opening a new file at once cannot both create the tables.
fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let step = |error: rusqlite::Error| sqlite_error("migrate the store schema", &error);
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(step)?;
    let version: i64 = transaction
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(step)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Unavailable(format!(
            "the store file has schema version {version}, newer than the {SCHEMA_VERSION} this \
             build understands"
        )));
    }
    let applied = usize::try_from(version).map_err(|_| {
        StoreError::Corrupt(format!(
            "the store file has a negative schema version ({version})"
        ))
    })?;
    if applied == MIGRATIONS.len() {
        return Ok(());
    }
    for migration in MIGRATIONS.iter().skip(applied) {
        transaction.execute_batch(migration).map_err(step)?;
    }
    transaction
        .pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(step)?;
    transaction.commit().map_err(step)
}

/// A failure inside one blocking job, named after its operation when it leaves [`SqliteStore::run`].
#[derive(Debug)]
enum JobError {
    /// The driver failed.
    Sqlite(rusqlite::Error),
    /// Already a store error (fencing, corrupt JSON, …).
    Store(StoreError),
}

impl From<rusqlite::Error> for JobError {
    fn from(error: rusqlite::Error) -> Self {
        JobError::Sqlite(error)
    }
}

impl From<StoreError> for JobError {
    fn from(error: StoreError) -> Self {
        JobError::Store(error)
    }
}

impl JobError {
    /// The store error for `operation`.
    fn into_store_error(self, operation: &str) -> StoreError {
        match self {
            JobError::Sqlite(error) => sqlite_error(operation, &error),
            JobError::Store(error) => error,
        }
    }
}

/// Describes a driver failure by kind only: the driver's own messages and boxed conversion
/// errors may quote stored values, which must never reach a [`StoreError`]. A stored value of
/// the wrong type is `Corrupt`; anything else means the backend failed.
fn sqlite_error(operation: &str, error: &rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    match error {
        // `ffi::Error` displays the extended result code and SQLite's fixed description of it.
        E::SqliteFailure(code, _) => StoreError::Unavailable(format!("{operation}: {code}")),
        E::InvalidColumnType(_, column, stored) => StoreError::Corrupt(format!(
            "{operation}: column `{column}` holds an unexpected {stored} value"
        )),
        E::FromSqlConversionFailure(index, stored, _) => StoreError::Corrupt(format!(
            "{operation}: column {index} holds an unreadable {stored} value"
        )),
        E::IntegralValueOutOfRange(index, _) => {
            StoreError::Corrupt(format!("{operation}: column {index} is out of range"))
        }
        E::Utf8Error(index, _) => {
            StoreError::Corrupt(format!("{operation}: column {index} is not valid UTF-8"))
        }
        _ => StoreError::Unavailable(format!("{operation}: SQLite driver error")),
    }
}

/// The transaction rows selected by `filter` (an SQL condition on the `transactions` table),
/// decoded, in transaction-id order.
fn select_transactions(
    connection: &Connection,
    filter: &str,
    params: impl Params,
) -> Result<Vec<TransactionRecord>, JobError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT body FROM transactions WHERE {filter} ORDER BY transaction_id"
    ))?;
    let bodies = statement
        .query_map(params, |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<String>, _>>()?;
    bodies
        .iter()
        .map(|body| decode("transaction record row", body).map_err(JobError::from))
        .collect()
}

/// The one transaction row selected by `filter`, if any.
fn select_transaction(
    connection: &Connection,
    filter: &str,
    params: impl Params,
) -> Result<Option<TransactionRecord>, JobError> {
    let body = query_row_cached(
        connection,
        &format!("SELECT body FROM transactions WHERE {filter}"),
        params,
        |row| row.get::<_, String>(0),
    )
    .optional()?;
    match body {
        Some(body) => Ok(Some(decode("transaction record row", &body)?)),
        None => Ok(None),
    }
}

/// Whether `error` is a unique index refusing a row (only the plan-id index can, once the
/// insert has been told to skip an existing transaction id).
fn is_unique_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// The entry stored under `key`, if any.
fn select_entry(connection: &Connection, key: &str) -> Result<Option<KeyEntry>, JobError> {
    let row = query_row_cached(
        connection,
        "SELECT kind, expires_at_ms, body FROM idempotency_entries WHERE key = ?1",
        params![key],
        |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, String>(2)?,
            ))
        },
    )
    .optional()?;
    let Some((kind, expires_at_ms, body)) = row else {
        return Ok(None);
    };
    match kind.as_str() {
        "reservation" => {
            let mut reservation: Reservation = decode("idempotency reservation row", &body)?;
            // `renew` moves only the column, so the column is the authoritative expiry.
            let expires_at_ms = expires_at_ms.ok_or_else(|| {
                StoreError::Corrupt("idempotency reservation row has no expiry".to_owned())
            })?;
            reservation.expires_at_ms =
                unsigned_from_sql("idempotency reservation expiry", expires_at_ms)?;
            Ok(Some(KeyEntry::Reserved(Box::new(reservation))))
        }
        "record" => Ok(Some(KeyEntry::Settled(decode(
            "idempotency record row",
            &body,
        )?))),
        _ => Err(StoreError::Corrupt("idempotency row has an unknown kind".to_owned()).into()),
    }
}

#[async_trait]
impl IdempotencyStore for SqliteStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        let reservation = reservation.clone();
        let body = encode("the reservation", &reservation)?;
        self.run("reserve an idempotency key", move |connection| {
            // The reservation is committed without waiting for the disk. Other processes see it
            // at once (WAL), and a process crash cannot lose it (the write is in the OS's
            // cache). Only a power or kernel failure can, and then it is as if the reservation
            // had expired: every process holding it died too, and a retry runs the handler, as
            // it would after the expiry. The settlement that follows is fsynced, and with it
            // this write. One fsync per keyed call instead of two.
            let mut connection = RelaxedSync::enter(connection)?;
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let existing = select_entry(&transaction, &reservation.key)?;
            let outcome = match claim(existing.as_ref(), &reservation, now) {
                Claim::Take => {
                    execute_cached(
                        &transaction,
                        "INSERT OR REPLACE INTO idempotency_entries \
                         (key, kind, reservation_id, expires_at_ms, body) \
                         VALUES (?1, 'reservation', ?2, ?3, ?4)",
                        params![
                            reservation.key,
                            reservation.reservation_id,
                            millis_to_sql(reservation.expires_at_ms),
                            body
                        ],
                    )?;
                    ReserveOutcome::Acquired
                }
                Claim::Refuse(outcome) => outcome,
            };
            transaction.commit()?;
            Ok(outcome)
        })
        .await
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let record = stored_under(record, reservation);
        let key = reservation.key.clone();
        let token = reservation.reservation_id.clone();
        let expires_at_ms = record.expires_at_ms.map(millis_to_sql);
        let body = encode("the idempotency record", &record)?;
        self.run("settle an idempotency key", move |connection| {
            let changed = execute_cached(
                connection,
                "UPDATE idempotency_entries \
                 SET kind = 'record', reservation_id = NULL, expires_at_ms = ?3, body = ?4 \
                 WHERE key = ?1 AND kind = 'reservation' AND reservation_id = ?2",
                params![key, token, expires_at_ms, body],
            )?;
            if changed == 0 {
                Err(StoreError::Fenced.into())
            } else {
                Ok(())
            }
        })
        .await
    }

    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError> {
        let key = key.to_owned();
        let expires = expires_at_ms.map(millis_to_sql);
        let now = millis_to_sql(now);
        self.run("count a retry attempt", move |connection| {
            let attempts: i64 = query_row_cached(
                connection,
                "INSERT INTO retry_attempts (key, attempts, expires_at_ms) VALUES (?1, 1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET \
                   attempts = CASE WHEN retry_attempts.expires_at_ms IS NOT NULL \
                                    AND retry_attempts.expires_at_ms <= ?3 \
                                   THEN 1 ELSE retry_attempts.attempts + 1 END, \
                   expires_at_ms = ?2 \
                 RETURNING attempts",
                params![key, expires, now],
                |row| row.get(0),
            )?;
            Ok(u32::try_from(attempts).unwrap_or(u32::MAX))
        })
        .await
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        let key = reservation.key.clone();
        let token = reservation.reservation_id.clone();
        self.run("release an idempotency key", move |connection| {
            execute_cached(
                connection,
                "DELETE FROM idempotency_entries \
                 WHERE key = ?1 AND kind = 'reservation' AND reservation_id = ?2",
                params![key, token],
            )?;
            Ok(())
        })
        .await
    }

    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError> {
        let expected = record.clone();
        self.run("forget an idempotency record", move |connection| {
            // The record is the row's body: read and delete in one write transaction, so no
            // other writer can settle or claim the key in between.
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let key = expected.key.as_str();
            let owned = matches!(
                select_entry(&transaction, key)?,
                Some(KeyEntry::Settled(stored)) if *stored == expected
            );
            if owned {
                execute_cached(
                    &transaction,
                    "DELETE FROM idempotency_entries WHERE key = ?1 AND kind = 'record'",
                    params![key],
                )?;
            }
            transaction.commit()?;
            Ok(owned)
        })
        .await
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        let key = reservation.key.clone();
        let token = reservation.reservation_id.clone();
        self.run("renew an idempotency reservation", move |connection| {
            let changed = execute_cached(
                connection,
                "UPDATE idempotency_entries SET expires_at_ms = ?3 \
                 WHERE key = ?1 AND kind = 'reservation' AND reservation_id = ?2",
                params![key, token, millis_to_sql(expires_at_ms)],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn purge_expired(&self, now: Millis, max_entries: usize) -> Result<Purged, StoreError> {
        let now = millis_to_sql(now);
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        self.run("purge expired idempotency entries", move |connection| {
            // `expires_at_ms <= ?1` is false for NULL: records kept forever are never chosen.
            let records = execute_cached(
                connection,
                "DELETE FROM idempotency_entries WHERE rowid IN ( \
                   SELECT rowid FROM idempotency_entries \
                   WHERE kind = 'record' AND expires_at_ms <= ?1 LIMIT ?2)",
                params![now, limit],
            )?;
            let attempt_counts = execute_cached(
                connection,
                "DELETE FROM retry_attempts WHERE rowid IN ( \
                   SELECT rowid FROM retry_attempts WHERE expires_at_ms <= ?1 LIMIT ?2)",
                params![now, limit],
            )?;
            Ok(Purged {
                records,
                attempt_counts,
            })
        })
        .await
    }

    async fn record(
        &self,
        key: &str,
        now: Millis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let key = key.to_owned();
        self.run("read an idempotency record", move |connection| {
            let body = query_row_cached(
                connection,
                "SELECT body FROM idempotency_entries WHERE key = ?1 AND kind = 'record'",
                params![key],
                |row| row.get::<_, String>(0),
            )
            .optional()?;
            let Some(body) = body else {
                return Ok(None);
            };
            let record: IdempotencyRecord = decode("idempotency record row", &body)?;
            Ok(record_is_live(&record, now).then_some(record))
        })
        .await
    }

    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError> {
        let key = key.to_owned();
        self.run("read an idempotency reservation", move |connection| {
            Ok(match select_entry(connection, &key)? {
                Some(KeyEntry::Reserved(reservation)) if reservation_is_live(&reservation, now) => {
                    Some(*reservation)
                }
                _ => None,
            })
        })
        .await
    }
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        let record = ApprovalRecord {
            version: 0,
            ..record.clone()
        };
        let body = encode("the approval record", &record)?;
        self.run("insert an approval record", move |connection| {
            let inserted = execute_cached(
                connection,
                "INSERT INTO approval_records \
                 (approval_id, status, resumed, version, body, created_at_ms, expires_at_ms, \
                  resumed_at_ms, resume_token) \
                 VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?8)",
                params![
                    record.approval_id.as_str(),
                    record.status.as_str(),
                    record.resumed,
                    body,
                    millis_to_sql(record.created_at_ms),
                    record.expires_at_ms.map(millis_to_sql),
                    record.resumed_at_ms.map(millis_to_sql),
                    record.resume_token
                ],
            );
            match inserted {
                Ok(_) => Ok(()),
                Err(error) if error.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                    Err(StoreError::Unavailable(
                        "an approval record with this id already exists".to_owned(),
                    )
                    .into())
                }
                Err(error) => Err(error.into()),
            }
        })
        .await
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
        let id = id.clone();
        self.run("read an approval record", move |connection| {
            let row = query_row_cached(
                connection,
                "SELECT resumed, version, body, resumed_at_ms, resume_token \
                 FROM approval_records WHERE approval_id = ?1",
                params![id.as_str()],
                |row| {
                    Ok((
                        row.get::<_, bool>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                        row.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional()?;
            let Some((resumed, version, body, resumed_at_ms, resume_token)) = row else {
                return Ok(None);
            };
            let mut record: ApprovalRecord = decode("approval record row", &body)?;
            // `claim_resume` moves only the columns, so they are authoritative.
            record.resumed = resumed;
            record.resumed_at_ms = resumed_at_ms
                .map(|ms| unsigned_from_sql("approval resume time", ms))
                .transpose()?;
            record.resume_token = resume_token;
            record.version = unsigned_from_sql("approval record version", version)?;
            Ok(Some(record))
        })
        .await
    }

    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected_version) else {
            return Ok(false);
        };
        let Some(next) = expected.checked_add(1) else {
            return Ok(false);
        };
        let record = ApprovalRecord {
            version: expected_version + 1,
            ..record.clone()
        };
        let body = encode("the approval record", &record)?;
        self.run("update an approval record", move |connection| {
            // `resumed` only ever goes from 0 to 1: an update cannot re-arm a resume (nor
            // forget when it was claimed). SET reads the row's old values.
            let changed = execute_cached(
                connection,
                "UPDATE approval_records \
                 SET status = ?2, resumed = MAX(resumed, ?3), version = ?4, body = ?5, \
                     created_at_ms = ?7, expires_at_ms = ?8, \
                     resumed_at_ms = CASE WHEN MAX(resumed, ?3) = 1 \
                                     THEN COALESCE(resumed_at_ms, ?9) END, \
                     resume_token = CASE WHEN MAX(resumed, ?3) = 1 \
                                    THEN COALESCE(resume_token, ?10) END \
                 WHERE approval_id = ?1 AND version = ?6",
                params![
                    record.approval_id.as_str(),
                    record.status.as_str(),
                    record.resumed,
                    next,
                    body,
                    expected,
                    millis_to_sql(record.created_at_ms),
                    record.expires_at_ms.map(millis_to_sql),
                    record.resumed_at_ms.map(millis_to_sql),
                    record.resume_token
                ],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn claim_resume(&self, id: &ApprovalId, claim: &ResumeClaim) -> Result<bool, StoreError> {
        // The claim bumps the version: a writer holding the pre-claim version must lose.
        self.update_one_approval(
            "claim an approval resume",
            "UPDATE approval_records \
             SET resumed = 1, resumed_at_ms = ?2, resume_token = ?3, version = version + 1 \
             WHERE approval_id = ?1 AND status = 'approved' AND resumed = 0",
            id,
            claim,
        )
        .await
    }

    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &ResumeClaim,
    ) -> Result<bool, StoreError> {
        // The token alone tells claims apart; `?2`, the claim's time, is left unread.
        self.update_one_approval(
            "release an approval resume",
            "UPDATE approval_records \
             SET resumed = 0, resumed_at_ms = NULL, resume_token = NULL, version = version + 1 \
             WHERE approval_id = ?1 AND status = 'approved' AND resumed = 1 \
             AND resume_token = ?3",
            id,
            claim,
        )
        .await
    }

    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let (created_before, now) = (millis_to_sql(created_before), millis_to_sql(now));
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        self.run("purge closed approval records", move |connection| {
            // `ApprovalRecord::is_purgeable` in SQL; the conformance suite holds the two
            // together.
            Ok(execute_cached(
                connection,
                concat!(
                    "DELETE FROM approval_records WHERE rowid IN ( \
                       SELECT rowid FROM approval_records WHERE ",
                    purgeable_approval_sql!("?1", "?2"),
                    " LIMIT ?3)"
                ),
                params![created_before, now, limit],
            )?)
        })
        .await
    }
}

#[async_trait]
impl TransactionStore for SqliteStore {
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError> {
        let record = TransactionRecord {
            revision: 0,
            ..record.clone()
        };
        let body = encode("the transaction record", &record)?;
        self.run("insert a transaction record", move |connection| {
            // The conflict target is the transaction id only: an existing id is skipped, while
            // a new id with a taken plan id still fails on the plan-id index.
            let inserted = execute_cached(
                connection,
                "INSERT INTO transactions \
                 (transaction_id, action_id, plan_id, status, revision, recoverable, body, \
                  finished_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7) \
                 ON CONFLICT (transaction_id) DO NOTHING",
                params![
                    record.transaction_id.as_str(),
                    record.action_id.as_str(),
                    record.plan_id(),
                    record.status.as_str(),
                    record.is_recoverable(),
                    body,
                    record.finished_at_ms().map(millis_to_sql)
                ],
            );
            match inserted {
                Ok(changed) => Ok(changed == 1),
                Err(error) if is_unique_violation(&error) => Err(StoreError::PlanIdTaken.into()),
                Err(error) => Err(error.into()),
            }
        })
        .await
    }

    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        let id = id.clone();
        self.run("read a transaction record", move |connection| {
            select_transaction(connection, "transaction_id = ?1", params![id.as_str()])
        })
        .await
    }

    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        let plan_id = plan_id.to_owned();
        self.run("read a transaction record by plan", move |connection| {
            select_transaction(connection, "plan_id = ?1", params![plan_id])
        })
        .await
    }

    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError> {
        let action_id = action_id.clone();
        self.run(
            "read the transaction records of an action",
            move |connection| {
                select_transactions(connection, "action_id = ?1", params![action_id.as_str()])
            },
        )
        .await
    }

    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError> {
        let id = id.clone();
        let transition = transition.clone();
        self.run("transition a transaction record", move |connection| {
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let Some(current) =
                select_transaction(&transaction, "transaction_id = ?1", params![id.as_str()])?
            else {
                return Ok(TransitionOutcome::NotFound);
            };
            if current.revision != expected_revision {
                return Ok(TransitionOutcome::RevisionConflict(current));
            }
            let Some(next) = transition.apply(&current, now) else {
                return Ok(TransitionOutcome::StateConflict(current));
            };
            let body = encode("the transaction record", &next)?;
            execute_cached(
                &transaction,
                "UPDATE transactions \
                 SET action_id = ?2, plan_id = ?3, status = ?4, revision = ?5, \
                     recoverable = ?6, body = ?7, finished_at_ms = ?8 \
                 WHERE transaction_id = ?1",
                params![
                    id.as_str(),
                    next.action_id.as_str(),
                    next.plan_id(),
                    next.status.as_str(),
                    counter_to_sql("transaction revision", next.revision)?,
                    next.is_recoverable(),
                    body,
                    next.finished_at_ms().map(millis_to_sql)
                ],
            )?;
            transaction.commit()?;
            Ok(TransitionOutcome::Applied(next))
        })
        .await
    }

    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError> {
        self.run("list recoverable transaction records", |connection| {
            select_transactions(connection, "recoverable = 1", [])
        })
        .await
    }

    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let updated_before = millis_to_sql(updated_before);
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        self.run("purge finished transaction records", move |connection| {
            // NULL (not finished) is never below anything.
            Ok(execute_cached(
                connection,
                concat!(
                    "DELETE FROM transactions WHERE rowid IN ( \
                       SELECT rowid FROM transactions WHERE finished_at_ms < ?1 AND status IN ",
                    purgeable_statuses_sql!(),
                    " LIMIT ?2)"
                ),
                params![updated_before, limit],
            )?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::store::ApprovalStatus;
    use aip_connector_core::ids::{ActionId, CapabilityId, PrincipalId};
    use aip_connector_core::model::{
        ActionResult, ActionResultStatus, IdempotencyKeyScope, TransactionProtocolStatus,
    };
    use serde_json::json;

    use super::super::fixtures::{RetentionRows, approval, planned};
    use super::*;

    #[test]
    fn a_journal_mode_other_than_wal_is_refused() {
        for accepted in ["wal", "WAL", "memory"] {
            assert!(journal_mode_accepted(accepted).is_ok(), "{accepted}");
        }
        for kept in ["delete", "truncate", "persist", "off"] {
            let Err(StoreError::InvalidConfig(message)) = journal_mode_accepted(kept) else {
                panic!("journal mode `{kept}` was accepted");
            };
            assert!(message.contains(&format!("`{kept}`")), "{message}");
        }
    }

    /// A store file in the temp dir, removed (with its WAL files) on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let unique = NEXT.fetch_add(1, Ordering::Relaxed);
            Self(std::env::temp_dir().join(format!(
                "aip-store-unit-{}-{unique}-{name}.db",
                std::process::id()
            )))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let mut path = self.0.clone().into_os_string();
                path.push(suffix);
                let _ = std::fs::remove_file(path);
            }
        }
    }

    fn raw(store: &SqliteStore) -> std::sync::MutexGuard<'_, Connection> {
        store.shared.connection.lock().unwrap()
    }

    fn reservation(key: &str) -> Reservation {
        Reservation {
            key: key.to_owned(),
            reservation_id: "r1".to_owned(),
            action_id: ActionId::trusted("act_1"),
            tenant_id: None,
            input_hash: "h".to_owned(),
            resume_pending: false,
            expires_at_ms: 1_000,
        }
    }

    fn record(key: &str) -> IdempotencyRecord {
        IdempotencyRecord {
            key: key.to_owned(),
            key_scope: IdempotencyKeyScope::Action,
            action_id: ActionId::trusted("act_1"),
            capability_id: CapabilityId::from("cap:demo"),
            principal_id: PrincipalId::from("user:1"),
            tenant_id: None,
            input_hash: "h".to_owned(),
            result: ActionResult::completed(ActionId::trusted("act_1"), json!({"v": 1})),
            created_at_ms: 0,
            expires_at_ms: None,
        }
    }

    /// A new file gets the tables, the latest schema version, WAL and full fsync.
    #[test]
    fn open_creates_schema_and_sets_pragmas() {
        let file = TempFile::new("schema");
        let store = SqliteStore::open(&file.0).unwrap();
        let connection = raw(&store);
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mode: String = connection
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let synchronous: i64 = connection
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(synchronous, 2, "synchronous = FULL");
        let mut tables: Vec<String> = connection
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        tables.sort();
        assert_eq!(
            tables,
            [
                "approval_records",
                "idempotency_entries",
                "retry_attempts",
                "transactions"
            ]
        );
    }

    /// Reopening an existing file keeps its rows and does not re-run the migrations.
    /// `PRAGMA synchronous` of the store's connection (2 = FULL, 1 = NORMAL).
    fn synchronous(store: &SqliteStore) -> i64 {
        let connection = store.shared.connection.lock().unwrap();
        connection
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap()
    }

    /// Only the reservation's own commit skips the fsync: full sync is back once it is done,
    /// including after a reservation that was refused.
    #[tokio::test]
    async fn a_reservation_restores_full_sync() {
        let file = TempFile::new("sync");
        let store = SqliteStore::open(&file.0).unwrap();
        assert_eq!(synchronous(&store), 2);
        let claim = reservation("Action:act_1:k");
        assert_eq!(store.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        assert_eq!(synchronous(&store), 2);
        let rival = Reservation {
            reservation_id: "other".to_owned(),
            ..reservation("Action:act_1:k")
        };
        assert!(matches!(
            store.reserve(&rival, 0).await,
            Ok(ReserveOutcome::InProgress(_))
        ));
        assert_eq!(synchronous(&store), 2);
    }

    #[tokio::test]
    async fn reopening_keeps_rows_and_schema() {
        let file = TempFile::new("reopen");
        let store = SqliteStore::open(&file.0).unwrap();
        let claim = reservation("Action:act_1:k");
        assert_eq!(store.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        store
            .settle(&claim, record("Action:act_1:k"))
            .await
            .unwrap();
        drop(store);
        let reopened = SqliteStore::open(&file.0).unwrap();
        assert_eq!(
            reopened.record("Action:act_1:k", 0).await,
            Ok(Some(record("Action:act_1:k")))
        );
    }

    /// A file created by a schema-1 build keeps its rows and gains the transaction table.
    #[tokio::test]
    async fn schema_1_file_upgrades_to_the_latest() {
        let file = TempFile::new("upgrade");
        let request = approval("appr_1");
        {
            let connection = Connection::open(&file.0).unwrap();
            connection.execute_batch(MIGRATION_1).unwrap();
            connection.pragma_update(None, "user_version", 1).unwrap();
            connection
                .execute(
                    "INSERT INTO approval_records (approval_id, status, resumed, version, body) \
                     VALUES ('appr_1', 'pending', 0, 0, ?1)",
                    params![serde_json::to_string(&request).unwrap()],
                )
                .unwrap();
        }
        let store = SqliteStore::open(&file.0).unwrap();
        let version: i64 = raw(&store)
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, 8);
        assert_eq!(
            store.approval(&ApprovalId::trusted("appr_1")).await,
            Ok(Some(request))
        );
        let record = planned("txn_1", "plan:1");
        assert_eq!(store.insert_transaction(&record).await, Ok(true));
        // The retry counter of migration 3 and the purge of migration 4's indexes work on the
        // upgraded file.
        assert_eq!(store.count_attempt("k", Some(5), 0).await, Ok(1));
        assert_eq!(
            store.purge_expired(5, 10).await,
            Ok(Purged {
                records: 0,
                attempt_counts: 1
            })
        );
        let indexes: Vec<String> = raw(&store)
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE '%expiry'")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            indexes,
            ["idempotency_entries_record_expiry", "retry_attempts_expiry"]
        );
        drop(store);
        // Reopening the upgraded file must not run migrations 2 to 4 again (their CREATEs
        // would fail).
        let reopened = SqliteStore::open(&file.0).unwrap();
        assert_eq!(
            reopened.transaction_by_plan("plan:1").await,
            Ok(Some(record))
        );
    }

    /// Migrations 5 and 7 fill the retention columns in from the bodies of the rows already
    /// there, so records written before them are purged like new ones.
    #[tokio::test]
    async fn schema_4_rows_gain_their_retention_columns() {
        let file = TempFile::new("upgrade-retention");
        let rows = RetentionRows::new();
        {
            let connection = Connection::open(&file.0).unwrap();
            for migration in &MIGRATIONS[..4] {
                connection.execute_batch(migration).unwrap();
            }
            connection.pragma_update(None, "user_version", 4).unwrap();
            for record in rows.approvals() {
                connection
                    .execute(
                        "INSERT INTO approval_records (approval_id, status, resumed, version, body) \
                         VALUES (?1, ?2, 0, 0, ?3)",
                        params![
                            record.approval_id.as_str(),
                            record.status.as_str(),
                            serde_json::to_string(record).unwrap()
                        ],
                    )
                    .unwrap();
            }
            for record in rows.transactions() {
                connection
                    .execute(
                        "INSERT INTO transactions \
                         (transaction_id, action_id, plan_id, status, revision, recoverable, body) \
                         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6)",
                        params![
                            record.transaction_id.as_str(),
                            record.action_id.as_str(),
                            record.plan_id(),
                            record.status.as_str(),
                            record.is_recoverable(),
                            serde_json::to_string(record).unwrap()
                        ],
                    )
                    .unwrap();
            }
        }
        rows.assert_purged_like_new_rows(&SqliteStore::open(&file.0).unwrap())
            .await;
    }

    /// A file written by a newer build is refused rather than misread.
    #[test]
    fn newer_schema_version_is_refused() {
        let file = TempFile::new("newer");
        let connection = Connection::open(&file.0).unwrap();
        connection.pragma_update(None, "user_version", 9).unwrap();
        drop(connection);
        let error = SqliteStore::open(&file.0).unwrap_err();
        assert!(
            matches!(&error, StoreError::Unavailable(message) if message.contains("schema version 9")),
            "{error:?}"
        );
    }

    /// A directory that does not exist cannot hold the file.
    #[test]
    fn unreachable_path_is_unavailable() {
        let path = std::env::temp_dir()
            .join("aip-store-no-such-dir")
            .join("x")
            .join("store.db");
        assert!(matches!(
            SqliteStore::open(path),
            Err(StoreError::Unavailable(_))
        ));
    }

    /// Bad JSON in any row is `Corrupt`, and the message quotes none of the row's values.
    #[tokio::test]
    async fn corrupt_json_rows_read_as_corrupt_without_values() {
        let store = SqliteStore::open_in_memory().unwrap();
        {
            let connection = raw(&store);
            connection
                .execute(
                    "INSERT INTO idempotency_entries (key, kind, expires_at_ms, body) \
                     VALUES ('rec', 'record', NULL, ?1)",
                    params![r#"{"key":"rec","key_scope":"s3cr3t-scope"}"#],
                )
                .unwrap();
            connection
                .execute(
                    "INSERT INTO idempotency_entries (key, kind, reservation_id, expires_at_ms, body) \
                     VALUES ('res', 'reservation', 'r1', 5, ?1)",
                    params![r#"{"key":"res","reservation_id":["s3cr3t-token"]}"#],
                )
                .unwrap();
            connection
                .execute(
                    "INSERT INTO approval_records (approval_id, status, resumed, version, body) \
                     VALUES ('appr_1', 'pending', 0, 0, ?1)",
                    params![r#"{"approval_id":"appr_1","action":"s3cr3t-action""#],
                )
                .unwrap();
        }
        let errors = [
            store.record("rec", 0).await.unwrap_err(),
            store.reserve(&reservation("rec"), 0).await.unwrap_err(),
            store.reserve(&reservation("res"), 0).await.unwrap_err(),
            store
                .approval(&ApprovalId::trusted("appr_1"))
                .await
                .unwrap_err(),
        ];
        for error in errors {
            assert!(matches!(error, StoreError::Corrupt(_)), "{error:?}");
            assert!(!error.to_string().contains("s3cr3t"), "{error}");
        }
    }

    /// A stored value of the wrong SQL type is `Corrupt` too, and names no value.
    #[tokio::test]
    async fn wrongly_typed_columns_read_as_corrupt() {
        let store = SqliteStore::open_in_memory().unwrap();
        let body = serde_json::to_string(&approval("appr_1")).unwrap();
        raw(&store)
            .execute(
                "INSERT INTO approval_records (approval_id, status, resumed, version, body) \
                 VALUES ('appr_1', 'pending', 0, 0, CAST(?1 AS BLOB))",
                params![body],
            )
            .unwrap();
        let error = store
            .approval(&ApprovalId::trusted("appr_1"))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::Corrupt(message) if !message.contains("hunter2")),
            "{error:?}"
        );
    }

    /// Inserting an existing approval id fails without quoting the record.
    #[tokio::test]
    async fn duplicate_approval_error_quotes_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.insert_approval(&approval("appr_1")).await.unwrap();
        let error = store
            .insert_approval(&approval("appr_1"))
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            !message.contains("hunter2") && !message.contains("appr_1"),
            "{message}"
        );
    }

    /// Driver failures are described by their result code, never by the driver's message text.
    #[test]
    fn driver_failures_drop_their_message_text() {
        let failure = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            Some("CHECK constraint failed: value 's3cr3t'".to_owned()),
        );
        let error = sqlite_error("settle", &failure);
        assert!(
            matches!(&error, StoreError::Unavailable(message) if message.starts_with("settle: "))
        );
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
        let conversion = rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Text,
            "s3cr3t is not a number".into(),
        );
        let error = sqlite_error("read", &conversion);
        assert!(matches!(&error, StoreError::Corrupt(message) if !message.contains("s3cr3t")));
    }

    /// The `status` column is compared with `'approved'` in SQL, so it must spell statuses as
    /// serde does.
    #[test]
    fn status_column_matches_json_spelling() {
        for status in ApprovalStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
    }

    /// The transaction `status` column spells statuses as serde does, so the two cannot drift.
    #[test]
    fn transaction_status_column_matches_json_spelling() {
        for status in TransactionProtocolStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
    }

    /// A second record for a taken plan id is refused, and the error quotes neither record.
    #[tokio::test]
    async fn duplicate_plan_error_quotes_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(
            store
                .insert_transaction(&planned("txn_1", "plan:s3cr3t"))
                .await,
            Ok(true)
        );
        let error = store
            .insert_transaction(&planned("txn_2", "plan:s3cr3t"))
            .await
            .unwrap_err();
        assert_eq!(error, StoreError::PlanIdTaken);
        assert_eq!(
            store.transaction(&TransactionId::trusted("txn_2")).await,
            Ok(None)
        );
    }

    /// Every write keeps the lookup columns equal to the body they are derived from.
    #[tokio::test]
    async fn transition_rewrites_the_lookup_columns() {
        let store = SqliteStore::open_in_memory().unwrap();
        let id = TransactionId::trusted("txn_1");
        store
            .insert_transaction(&planned("txn_1", "plan:1"))
            .await
            .unwrap();
        let claim = Transition {
            rebind_action: Some(ActionId::trusted("act_commit")),
            ..Transition::new(
                &[TransactionProtocolStatus::Planned],
                TransactionProtocolStatus::Committed,
            )
        };
        assert!(matches!(
            store.transition(&id, 0, &claim, 5).await,
            Ok(TransitionOutcome::Applied(_))
        ));
        let columns: (String, Option<String>, String, i64, bool) = raw(&store)
            .query_row(
                "SELECT action_id, plan_id, status, revision, recoverable FROM transactions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!(
            columns,
            (
                "act_commit".to_owned(),
                Some("plan:1".to_owned()),
                "committed".to_owned(),
                1,
                false
            )
        );
    }

    /// A transaction row with a bad body reads as `Corrupt` everywhere, quoting nothing.
    #[tokio::test]
    async fn corrupt_transaction_rows_read_as_corrupt_without_values() {
        let store = SqliteStore::open_in_memory().unwrap();
        raw(&store)
            .execute(
                "INSERT INTO transactions \
                 (transaction_id, action_id, plan_id, status, revision, recoverable, body) \
                 VALUES ('txn_1', 'act_1', 'plan:1', 'planned', 0, 1, ?1)",
                params![r#"{"transaction_id":"txn_1","action_id":["s3cr3t"]}"#],
            )
            .unwrap();
        let id = TransactionId::trusted("txn_1");
        let bump = Transition::new(
            &[TransactionProtocolStatus::Planned],
            TransactionProtocolStatus::Committing,
        );
        let errors = [
            store.transaction(&id).await.unwrap_err(),
            store.transaction_by_plan("plan:1").await.unwrap_err(),
            store
                .transactions_by_action(&ActionId::trusted("act_1"))
                .await
                .unwrap_err(),
            store.recoverable().await.unwrap_err(),
            store.transition(&id, 0, &bump, 1).await.unwrap_err(),
        ];
        for error in errors {
            assert!(matches!(error, StoreError::Corrupt(_)), "{error:?}");
            assert!(!error.to_string().contains("s3cr3t"), "{error}");
        }
    }

    /// `claim_resume` moves only the columns; reads must overlay them on the JSON body.
    #[tokio::test]
    async fn columns_override_body_after_claim_and_renew() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.insert_approval(&approval("appr_1")).await.unwrap();
        let approved = ApprovalRecord {
            status: ApprovalStatus::Approved,
            ..approval("appr_1")
        };
        assert_eq!(store.update_approval(&approved, 0).await, Ok(true));
        assert_eq!(
            store
                .claim_resume(&ApprovalId::trusted("appr_1"), &ResumeClaim::new(1))
                .await,
            Ok(true)
        );
        let stored = store
            .approval(&ApprovalId::trusted("appr_1"))
            .await
            .unwrap()
            .unwrap();
        assert!(stored.resumed);
        assert_eq!(stored.version, 2);

        let claim = reservation("k");
        assert_eq!(store.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        assert_eq!(store.renew(&claim, 9_000).await, Ok(true));
        let other = Reservation {
            reservation_id: "r2".to_owned(),
            ..reservation("k")
        };
        assert_eq!(
            store.reserve(&other, 5_000).await,
            Ok(ReserveOutcome::InProgress(Reservation {
                expires_at_ms: 9_000,
                ..claim
            }))
        );
    }

    /// `record` answers with settled records only, never with a reservation.
    #[tokio::test]
    async fn record_ignores_reservations() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(
            store.reserve(&reservation("k"), 0).await,
            Ok(ReserveOutcome::Acquired)
        );
        assert_eq!(store.record("k", 0).await, Ok(None));
        let pending = IdempotencyRecord {
            result: ActionResult::new(
                ActionId::trusted("act_1"),
                ActionResultStatus::PendingApproval,
            ),
            ..record("k")
        };
        store
            .settle(&reservation("k"), pending.clone())
            .await
            .unwrap();
        assert_eq!(store.record("k", 0).await, Ok(Some(pending)));
    }
}
