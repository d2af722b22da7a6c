//! [`PostgresStore`]: every family in one PostgreSQL database, shared by several host replicas.
//!
//! Records are stored as JSON next to the few columns the compare-and-set statements test or
//! look up by (key, fencing token, expiry; approval version, resumed flag; transaction, action and
//! plan ids, revision, recoverable flag). Those columns are authoritative over the same fields in
//! a body. Every transition is one conditional `UPDATE`/`DELETE`, or one short transaction that
//! locks the row it reads (`SELECT … FOR UPDATE`), so it is atomic across every connection of
//! every process that uses the database.
//!
//! The schema ships with the crate (`migrations/postgres/*.sql`) and is applied by
//! [`PostgresStore::connect`], recorded in an `aip_connector_schema_migrations` table (earlier
//! builds used `schema_migrations`, which is adopted once).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aip_connector_core::ids::{ActionId, ApprovalId, TransactionId};
use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use serde::Serialize;
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, ToSql};
use tokio_postgres::{NoTls, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::purgeable_approval_sql;
use super::sql::{counter_to_sql, decode, encode, millis_to_sql, unsigned_from_sql};
use super::transaction::purgeable_statuses_sql;
use super::{
    ApprovalRecord, ApprovalStore, Claim, IdempotencyRecord, IdempotencyStore, KeyEntry, Millis,
    Purged, Reservation, ReserveOutcome, ResumeClaim, StoreError, TransactionRecord,
    TransactionStore, Transition, TransitionOutcome, claim, record_is_live, reservation_is_live,
    stored_under,
};

/// One schema migration shipped with the crate.
struct Migration {
    /// Its number in [`MIGRATIONS_TABLE`]; migrations apply in increasing order.
    version: i64,
    /// A short name, recorded next to the version.
    name: &'static str,
    /// The statements.
    sql: &'static str,
}

/// Every migration this build knows, oldest first.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "retry_attempts",
        sql: include_str!("../../migrations/postgres/0002_retry_attempts.sql"),
    },
    Migration {
        version: 3,
        name: "expiry_indexes",
        sql: include_str!("../../migrations/postgres/0003_expiry_indexes.sql"),
    },
    Migration {
        version: 4,
        name: "retention",
        sql: include_str!("../../migrations/postgres/0004_retention.sql"),
    },
    Migration {
        version: 5,
        name: "resumed_at",
        sql: include_str!("../../migrations/postgres/0005_resumed_at.sql"),
    },
    Migration {
        version: 6,
        name: "plan_expiry",
        sql: include_str!("../../migrations/postgres/0006_plan_expiry.sql"),
    },
    Migration {
        version: 7,
        name: "resume_token",
        sql: include_str!("../../migrations/postgres/0007_resume_token.sql"),
    },
];

/// How long a call waits for a free pooled connection before failing.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long opening one connection may take (also the TCP connect timeout, unless the URL sets
/// `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long checking a pooled connection before reuse may take.
const RECYCLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a statement waits for a row another connection holds locked before it fails
/// (SQLSTATE 55P03, reported as [`StoreError::Unavailable`]), as SQLite's busy timeout does: a
/// replica that hangs inside a transaction must not hang every call on the keys it locked.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server keeps a session that sits idle inside a transaction before ending it
/// (and releasing its locks). The store's transactions are a few statements long; one that
/// idles this long belongs to a client that hung or lost its connection.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// How long dropping a schema waits for its tables to be free.
const DROP_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How often `reserve` retries when the row it saw conflicting vanished before it could lock it
/// (its owner released it in between); each retry means another caller made progress.
const RESERVE_ATTEMPTS: usize = 16;

/// The longest PostgreSQL identifier, in bytes.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// A store in a PostgreSQL database, for several host replicas sharing state.
///
/// - [`connect`](Self::connect) creates a connection pool (at most
///   [`PostgresOptions::DEFAULT_MAX_CONNECTIONS`] connections, opened on demand) and brings the
///   schema up to date. Two processes connecting to a new database at once are
///   safe: migrations run under an advisory lock. [`connect_with`](Self::connect_with) takes
///   [`PostgresOptions`]: a schema of its own, and fewer (or more) connections, so that N
///   replicas times the pool stay under the server's `max_connections`.
/// - TLS: a URL with `sslmode=require` connects over TLS (rustls) and verifies the server's
///   certificate, its chain and its host name, against Mozilla's root certificates or the ones
///   given to [`PostgresOptions::tls_root_certificates`]. `sslmode=prefer` (the default) and
///   `disable` connect without TLS. Unlike libpq's `require`, ours never skips verification: an
///   unverified session is open to whoever sits on the path. libpq's `sslmode=verify-full` (or
///   `verify-ca`) and `sslrootcert=<PEM file>` (or `system`) are understood too.
/// - Clones share the pool. Several `PostgresStore`s, in this process or others, may use the
///   same database and schema: every transition is atomic across all of them.
/// - A call waits at most 30 s for a free connection, then fails with
///   [`StoreError::Unavailable`]; errors never quote record contents or statement parameters.
/// - It needs a Tokio runtime (any flavour): each connection runs as a task on the runtime that
///   opened it.
#[derive(Clone)]
pub struct PostgresStore {
    /// The connections, shared by clones.
    pool: Pool,
    /// The schema given to [`connect_with_schema`](Self::connect_with_schema), for `Debug`.
    schema: Option<String>,
}

/// How [`PostgresStore::connect_with`] connects.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    schema: Option<String>,
    max_connections: usize,
    /// PEM text of the roots a TLS server certificate must chain to, instead of Mozilla's.
    tls_root_certificates: Option<Vec<u8>>,
}

impl PostgresOptions {
    /// The most connections one store opens unless [`max_connections`](Self::max_connections)
    /// says otherwise; they are opened lazily, as concurrency needs them.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

    /// The defaults: the first schema of the connection's `search_path`, at most
    /// [`DEFAULT_MAX_CONNECTIONS`](Self::DEFAULT_MAX_CONNECTIONS) connections.
    pub fn new() -> Self {
        Self {
            schema: None,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            tls_root_certificates: None,
        }
    }

    /// Keeps every table in `schema`, created if needed (lower-case ASCII letters, digits and
    /// `_`, not starting with a digit, at most 63 bytes; checked when connecting).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Opens at most `max_connections` connections (at least 1), on demand. A call that finds
    /// them all busy waits up to 30 s for one, then fails with [`StoreError::Unavailable`].
    pub fn max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = max_connections.max(1);
        self
    }

    /// Verifies the server's TLS certificate against the certificates in `pem` (one or more
    /// `-----BEGIN CERTIFICATE-----` blocks: a private CA, a cloud provider's bundle, or a
    /// self-signed server certificate) instead of Mozilla's root certificates. Only for a URL
    /// with `sslmode=require`: given with any other mode, connecting fails with
    /// [`StoreError::InvalidConfig`] rather than silently connecting without TLS. Checked when
    /// connecting, as is every certificate in `pem`.
    ///
    /// ```no_run
    /// # async fn replica() -> Result<(), Box<dyn std::error::Error>> {
    /// use aip_connector::store::{PostgresOptions, PostgresStore};
    ///
    /// let ca = std::fs::read("/etc/aip/db-ca.pem")?;
    /// let store = PostgresStore::connect_with(
    ///     "postgres://aip@db.internal/aip?sslmode=require",
    ///     PostgresOptions::new().tls_root_certificates(ca),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificates = Some(pem.into());
        self
    }
}

impl fmt::Debug for PostgresOptions {
    // The roots are public, but their PEM text would drown the rest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field(
                "tls_root_certificates",
                &self
                    .tls_root_certificates
                    .as_ref()
                    .map(|pem| format!("{} bytes of PEM", pem.len())),
            )
            .finish()
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PostgresStore {
    // The URL is left out: it may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database` or
    /// `host=… user=… dbname=…`) and brings its schema up to date, in the first schema of the
    /// connection's `search_path` (usually `public`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::new()).await
    }

    /// Like [`connect`](Self::connect), with `options`:
    ///
    /// ```no_run
    /// # async fn replica() -> Result<(), aip_connector::store::StoreError> {
    /// use aip_connector::store::{PostgresOptions, PostgresStore};
    ///
    /// // Twelve replicas of 8 connections stay under PostgreSQL's default of 100.
    /// let store = PostgresStore::connect_with(
    ///     "postgres://aip@db.internal/aip",
    ///     PostgresOptions::new().schema("bookings").max_connections(8),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        if let Some(schema) = &options.schema {
            check_schema_name(schema)?;
        }
        let pool = build_pool(url, &options)?;
        let mut client = pool
            .get()
            .await
            .map_err(|error| pool_error("connect to the store database", error))?;
        migrate(&mut client, options.schema.as_deref()).await?;
        drop(client);
        Ok(Self {
            pool,
            schema: options.schema,
        })
    }

    /// Like [`connect`](Self::connect), but keeps every table in `schema`, created if needed
    /// (lower-case ASCII letters, digits and `_`, not starting with a digit, at most 63 bytes).
    /// Several independent stores can share one database this way, e.g. one per test.
    pub async fn connect_with_schema(url: &str, schema: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::new().schema(schema)).await
    }

    /// Drops `schema` and everything in it, if it exists: the teardown of
    /// [`connect_with_schema`](Self::connect_with_schema). Stores using it fail afterwards.
    /// Fails (SQLSTATE 55P03) rather than wait more than 10 s for a transaction that still
    /// holds one of its tables.
    pub async fn drop_schema(url: &str, schema: &str) -> Result<(), StoreError> {
        Self::drop_schema_with(url, PostgresOptions::new().schema(schema)).await
    }

    /// Like [`drop_schema`](Self::drop_schema), for the schema of `options`, connecting as
    /// they say (their TLS roots; one connection). Options without a schema are
    /// [`StoreError::InvalidConfig`]: the connection's default schema is never dropped.
    pub async fn drop_schema_with(url: &str, options: PostgresOptions) -> Result<(), StoreError> {
        const OPERATION: &str = "drop a store schema";
        let Some(schema) = &options.schema else {
            return Err(StoreError::InvalidConfig(
                "drop_schema_with needs options that name a schema".to_owned(),
            ));
        };
        check_schema_name(schema)?;
        // The schema goes into the DROP below, not into the connection's `search_path`.
        let pool = build_pool(
            url,
            &PostgresOptions {
                schema: None,
                max_connections: 1,
                tls_root_certificates: options.tls_root_certificates.clone(),
            },
        )?;
        let client = pool
            .get()
            .await
            .map_err(|error| pool_error(OPERATION, error))?;
        // The name was checked to be a plain identifier, so it needs no quoting. The setting
        // lives and dies with this connection.
        client
            .batch_execute(&format!(
                "SET lock_timeout = '{}s'; DROP SCHEMA IF EXISTS {schema} CASCADE",
                DROP_LOCK_TIMEOUT.as_secs()
            ))
            .await
            .during(OPERATION)
    }

    /// A pooled connection.
    async fn client(&self, operation: &str) -> Result<Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|error| pool_error(operation, error))
    }

    /// Runs one statement; the number of rows it changed.
    async fn execute(
        &self,
        operation: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.statement(operation, sql, params, |client, statement, params| {
            Box::pin(client.execute(statement, params))
        })
        .await
    }

    /// Runs one query expected to answer with at most one row.
    async fn query_opt(
        &self,
        operation: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        self.statement(operation, sql, params, |client, statement, params| {
            Box::pin(client.query_opt(statement, params))
        })
        .await
    }

    /// Runs one query.
    async fn query(
        &self,
        operation: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.statement(operation, sql, params, |client, statement, params| {
            Box::pin(client.query(statement, params))
        })
        .await
    }

    /// Prepares `sql` (cached per connection) and runs it with `run`, once more on a fresh
    /// connection when the first one was gone before the statement could run on it
    /// ([`session_ended`]): a server restart, a failover or an idle-connection reaper ends every
    /// pooled session at once, and the pool hands out a dead one until its reader notices.
    /// Without the second try, one such event lost both settlements of the call in flight (its
    /// transaction and its key).
    ///
    /// A connection that closed after the statement was sent is not retried: the statement may
    /// have committed, and a repeat would answer as a lost race (no row changed) for the
    /// caller's own change. A session the server ended under the statement (SQLSTATE 57P01…)
    /// rolled it back. Every statement this store runs alone is a compare-and-set (on a
    /// revision or a fencing token), a delete, or an insert that does nothing when the row
    /// exists, so even a repeat of one that did commit never applies anything twice.
    async fn statement<T>(
        &self,
        operation: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        run: impl for<'c> Fn(
            &'c Object,
            &'c tokio_postgres::Statement,
            &'c [&'c (dyn ToSql + Sync)],
        )
            -> futures_util::future::BoxFuture<'c, Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        let mut tries_left = 2;
        loop {
            tries_left -= 1;
            let client = self.client(operation).await?;
            let (outcome, sent) = match client.prepare_cached(sql).await {
                Ok(statement) => (run(&client, &statement, params).await, true),
                Err(error) => (Err(error), false),
            };
            match outcome {
                Ok(value) => return Ok(value),
                Err(error) if tries_left > 0 && session_ended(&error, sent) => {
                    // Out of the pool for good: a recycled dead session fails the next call too.
                    drop(Object::take(client));
                }
                Err(error) => return Err(pg_error(operation, &error)),
            }
        }
    }
}

/// Whether a key or id used to select rows holds a NUL character. PostgreSQL's `text` cannot
/// hold one, so no row has such a key or id: a lookup by one finds nothing, as it does on the
/// other backends, instead of failing with SQLSTATE 22021, which reads as a retryable
/// [`StoreError::Unavailable`] that a caller would retry for ever. (The host refuses such ids
/// and keys in actions before anything is written; these are the lookups by a caller-chosen
/// selector: an approval id, a transaction or plan id.)
fn unstorable(selector: &str) -> bool {
    selector.contains('\0')
}

/// Whether `error` says the statement did not run because its session is gone: the server ended
/// the session (SQLSTATE class 57P: an administrator's `pg_terminate_backend`, a shutdown or a
/// crash; the statement's transaction was rolled back) or reported a connection failure (class
/// 08), or the connection was found closed before the statement was `sent`.
fn session_ended(error: &tokio_postgres::Error, sent: bool) -> bool {
    if error.is_closed() {
        return !sent;
    }
    error.as_db_error().is_some_and(|db| {
        let code = db.code().code();
        code.starts_with("57P") || code.starts_with("08")
    })
}

/// Only plain lower-case identifiers: they are spliced into DDL and a `search_path` option
/// without quoting, so anything else is refused rather than escaped.
fn check_schema_name(schema: &str) -> Result<(), StoreError> {
    let mut bytes = schema.bytes();
    let valid = schema.len() <= MAX_IDENTIFIER_BYTES
        && bytes
            .next()
            .is_some_and(|first| first.is_ascii_lowercase() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    if valid {
        Ok(())
    } else {
        Err(StoreError::InvalidConfig(
            "the store schema name must be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 \
             bytes)"
                .to_owned(),
        ))
    }
}

/// The connection pool for `url` and `options` (every connection's `search_path` set to their
/// schema if they name one, at most their `max_connections` connections, TLS as the URL's
/// `sslmode` says). Opens no connection yet.
fn build_pool(url: &str, options: &PostgresOptions) -> Result<Pool, StoreError> {
    let schema = options.schema.as_deref();
    let (url, libpq) = split_libpq_tls(url);
    // The parser's message may quote the URL, password included: only the kind is kept.
    let mut config: tokio_postgres::Config = url.parse().map_err(|error| {
        StoreError::InvalidConfig(pg_error_text("parse the store database URL", &error))
    })?;
    if libpq.verify {
        config.ssl_mode(SslMode::Require);
    }
    let roots = match (libpq.root_cert, &options.tls_root_certificates) {
        (Some(_), Some(_)) => {
            return Err(StoreError::InvalidConfig(
                "TLS root certificates were given twice, as the URL's `sslrootcert` and with \
                 PostgresOptions::tls_root_certificates: keep one"
                    .to_owned(),
            ));
        }
        (Some(path), None) if path == "system" => Some(TlsRoots::Mozilla),
        (Some(path), None) => Some(TlsRoots::Pem(Cow::Owned(std::fs::read(&path).map_err(
            |error| {
                StoreError::InvalidConfig(format!(
                    "read the TLS root certificates of `sslrootcert` ({path}): {}",
                    error.kind()
                ))
            },
        )?))),
        (None, Some(pem)) => Some(TlsRoots::Pem(Cow::Borrowed(pem))),
        (None, None) => None,
    };
    let tls = tls_connector(config.get_ssl_mode(), roots)?;
    // Settings the URL's own `options` name are left as it sets them.
    let existing = config.get_options().unwrap_or_default().to_owned();
    let mut server_options = vec![existing.clone()];
    if let Some(schema) = schema {
        server_options.push(format!("-c search_path={schema}"));
    }
    if !existing.contains("lock_timeout") {
        server_options.push(format!("-c lock_timeout={}", LOCK_TIMEOUT.as_millis()));
    }
    // The migrations' `CREATE … IF NOT EXISTS` would otherwise log a server NOTICE ("already
    // exists, skipping") through tokio-postgres at INFO on every replica's start.
    if !existing.contains("client_min_messages") {
        server_options.push("-c client_min_messages=warning".to_owned());
    }
    if !existing.contains("idle_in_transaction_session_timeout") {
        server_options.push(format!(
            "-c idle_in_transaction_session_timeout={}",
            IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
        ));
    }
    server_options.retain(|option| !option.is_empty());
    config.options(server_options.join(" "));
    if config.get_application_name().is_none() {
        config.application_name("aip-connector");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match tls {
        Some(tls) => Manager::from_config(config, tls, manager_config),
        None => Manager::from_config(config, NoTls, manager_config),
    };
    Pool::builder(manager)
        .max_size(options.max_connections.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(WAIT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(RECYCLE_TIMEOUT))
        .build()
        .map_err(|_| {
            StoreError::Unavailable("build the store connection pool: invalid settings".to_owned())
        })
}

/// The roots a TLS server certificate is verified against, when the caller named them.
enum TlsRoots<'a> {
    /// Mozilla's (`sslrootcert=system`, as libpq spells the system's store).
    Mozilla,
    /// The certificates of this PEM text.
    Pem(Cow<'a, [u8]>),
}

/// The libpq TLS settings of a connection string that tokio-postgres does not parse.
#[derive(Debug, Default, PartialEq, Eq)]
struct LibpqTls {
    /// `sslmode=verify-ca` or `verify-full`: TLS, verified, which is what `require` means here
    /// (host name included, so `verify-ca` gets the stricter check).
    verify: bool,
    /// `sslrootcert`: a PEM file of roots, or `system`.
    root_cert: Option<String>,
}

/// `url` without the libpq TLS settings tokio-postgres would refuse (`sslmode=verify-ca`,
/// `verify-full`, `sslrootcert=…`), and those settings. Both forms are read: a
/// `postgres://…?…` URL's query and `key=value` text. Anything else is left as written, so
/// tokio-postgres reports its own errors.
fn split_libpq_tls(url: &str) -> (Cow<'_, str>, LibpqTls) {
    let mut tls = LibpqTls::default();
    let mut take = |key: &str, value: &str| match key {
        "sslmode" if matches!(value, "verify-ca" | "verify-full") => {
            tls.verify = true;
            true
        }
        "sslrootcert" => {
            tls.root_cert = Some(value.to_owned());
            true
        }
        _ => false,
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (Cow::Borrowed(url), tls);
        };
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                !take(&decode(key), &decode(value))
            })
            .collect();
        if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let Some(pairs) = key_value_pairs(url) else {
            return (Cow::Borrowed(url), tls);
        };
        let kept: Vec<&str> = pairs
            .into_iter()
            .filter(|(_, key, value)| !take(key, value))
            .map(|(text, _, _)| text)
            .collect();
        kept.join(" ")
    };
    if tls == LibpqTls::default() {
        (Cow::Borrowed(url), tls)
    } else {
        (Cow::Owned(rest), tls)
    }
}

/// The `key=value` settings of libpq's keyword form (spaces around `=` allowed; a value in
/// single quotes may hold spaces, `\'` and `\\`), each with its text as written and its decoded
/// key and value; `None` when the text does not have that shape.
fn key_value_pairs(text: &str) -> Option<Vec<(&str, String, String)>> {
    let bytes = text.as_bytes();
    let mut pairs = Vec::new();
    let mut at = 0;
    let skip_spaces = |mut at: usize| {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    };
    loop {
        at = skip_spaces(at);
        if at == bytes.len() {
            return Some(pairs);
        }
        let start = at;
        while at < bytes.len() && bytes[at] != b'=' && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let key = &text[start..at];
        at = skip_spaces(at);
        if key.is_empty() || bytes.get(at) != Some(&b'=') {
            return None;
        }
        at = skip_spaces(at + 1);
        let mut value = String::new();
        let quoted = bytes.get(at) == Some(&b'\'');
        if quoted {
            at += 1;
        }
        loop {
            let Some(&byte) = bytes.get(at) else {
                if quoted {
                    return None;
                }
                break;
            };
            if quoted && byte == b'\'' {
                at += 1;
                break;
            }
            if !quoted && byte.is_ascii_whitespace() {
                break;
            }
            if byte == b'\\' {
                at += 1;
            }
            let ch = text.get(at..).and_then(|rest| rest.chars().next())?;
            value.push(ch);
            at += ch.len_utf8();
        }
        pairs.push((&text[start..at], key.to_owned(), value));
    }
}

/// The TLS connector for a URL's `sslmode`: rustls verifying against `roots` (by default
/// Mozilla's) for `require`, none for `disable` and `prefer`. Roots named with a mode that
/// makes no TLS connection are refused: the caller meant TLS and would not get it.
fn tls_connector(
    mode: SslMode,
    roots: Option<TlsRoots<'_>>,
) -> Result<Option<MakeRustlsConnect>, StoreError> {
    match mode {
        SslMode::Disable | SslMode::Prefer => match roots {
            None => Ok(None),
            Some(_) => Err(StoreError::InvalidConfig(
                "TLS root certificates were given, but the store database URL does not say \
                 `sslmode=require` (or `verify-full`), so its connections would not use TLS: \
                 add `sslmode=require` to the URL"
                    .to_owned(),
            )),
        },
        // `require`, and any stricter mode a later tokio-postgres adds.
        _ => {
            let roots = match roots {
                Some(TlsRoots::Pem(pem)) => roots_from_pem(&pem)?,
                Some(TlsRoots::Mozilla) | None => {
                    webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect()
                }
            };
            // The provider is named rather than taken from the process default, which panics
            // when an application links both of rustls' providers and installs neither.
            // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
            // alternative, aws-lc-rs, is a C and CMake build in every connector crate, and a
            // connector crate resolving 0.23.48 saw the warning in its own build (an author
            // trial), so the choice is kept and allowed here until rustls' ring gains one.
            #[allow(deprecated)]
            let provider = rustls::crypto::ring::default_provider();
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_safe_default_protocol_versions()
                .map_err(|error| {
                    StoreError::InvalidConfig(format!("set up TLS for the store database: {error}"))
                })?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Some(MakeRustlsConnect::new(config)))
        }
    }
}

/// The root store of every certificate in `pem`; none, or one that is not an X.509 certificate,
/// is [`StoreError::InvalidConfig`].
fn roots_from_pem(pem: &[u8]) -> Result<rustls::RootCertStore, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let invalid = |reason: String| {
        StoreError::InvalidConfig(format!("the store's TLS root certificates: {reason}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    for (index, certificate) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let certificate = certificate.map_err(|error| {
            invalid(format!(
                "certificate {} is not valid PEM: {error}",
                index + 1
            ))
        })?;
        roots.add(certificate).map_err(|error| {
            invalid(format!(
                "certificate {} is not a usable X.509 certificate: {error}",
                index + 1
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(invalid(
            "no `-----BEGIN CERTIFICATE-----` block in the PEM given".to_owned(),
        ));
    }
    Ok(roots)
}

/// Where the applied migrations are recorded. Named for the crate: `schema_migrations` is also
/// the table of golang-migrate, dbmate and Rails, which an application may keep in the same
/// schema.
pub(crate) const MIGRATIONS_TABLE: &str = "aip_connector_schema_migrations";

/// The table earlier builds recorded migrations in.
const LEGACY_MIGRATIONS_TABLE: &str = "schema_migrations";

/// Moves the migrations an earlier build recorded in `schema_migrations` to
/// [`MIGRATIONS_TABLE`], once (while the new table is empty), and drops the old table when
/// every row of it was ours. A `schema_migrations` of another tool (no `name` column, or rows
/// this crate never wrote) is left as it is. Built from [`MIGRATIONS`], which hold no input.
fn adopt_legacy_migrations_sql() -> String {
    let ours = MIGRATIONS
        .iter()
        .map(|migration| format!("({}, '{}')", migration.version, migration.name))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "DO $adopt$ BEGIN
            IF to_regclass('{LEGACY_MIGRATIONS_TABLE}') IS NOT NULL
               AND to_regclass('{LEGACY_MIGRATIONS_TABLE}')
                   = to_regclass(current_schema() || '.{LEGACY_MIGRATIONS_TABLE}')
               AND (SELECT count(*) FROM pg_attribute
                    WHERE attrelid = to_regclass('{LEGACY_MIGRATIONS_TABLE}') AND NOT attisdropped
                      AND ((attname = 'version' AND atttypid = 'bigint'::regtype)
                           OR (attname = 'name' AND atttypid = 'text'::regtype))) = 2
               AND NOT EXISTS (SELECT 1 FROM {MIGRATIONS_TABLE}) THEN
                INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at)
                    SELECT version, name, applied_at FROM {LEGACY_MIGRATIONS_TABLE}
                    WHERE (version, name) IN ({ours});
                IF NOT EXISTS (SELECT 1 FROM {LEGACY_MIGRATIONS_TABLE}
                               WHERE (version, name) NOT IN ({ours})) THEN
                    DROP TABLE {LEGACY_MIGRATIONS_TABLE};
                END IF;
            END IF;
        END $adopt$"
    )
}

/// What migrating the schema is called in errors.
const MIGRATE: &str = "migrate the store schema";

/// Applies the migrations the schema has not seen yet, in one transaction under an advisory
/// lock: a second process starting at once waits for the first to commit, then finds every
/// migration applied (`IF NOT EXISTS` alone would race on the system catalogs).
async fn migrate(client: &mut Object, schema: Option<&str>) -> Result<(), StoreError> {
    let transaction = client.transaction().await.during(MIGRATE)?;
    match apply_migrations(&transaction, schema).await {
        Ok(()) => transaction.commit().await.during(MIGRATE),
        Err(error) => Err(abandon(transaction, error).await),
    }
}

/// The steps of [`migrate`], inside its transaction.
async fn apply_migrations(
    transaction: &deadpool_postgres::Transaction<'_>,
    schema: Option<&str>,
) -> Result<(), StoreError> {
    // A migration may rewrite a large table, and a second process waits for it on the advisory
    // lock below: neither is bounded by the connection's lock timeout.
    transaction
        .batch_execute("SET LOCAL lock_timeout = 0")
        .await
        .during(MIGRATE)?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('aip-connector schema migrations'), \
             hashtext(coalesce($1::text, current_schema()::text, '')))",
            &[&schema],
        )
        .await
        .during(MIGRATE)?;
    if let Some(schema) = schema {
        // `check_schema_name` made it a plain identifier.
        transaction
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .await
            .during(MIGRATE)?;
        // The tables must land in the schema: a pooler that drops the connection's
        // `search_path` option would otherwise put them somewhere else, silently.
        let current: Option<String> = transaction
            .query_one("SELECT current_schema()::text", &[])
            .await
            .during(MIGRATE)?
            .try_get(0)
            .during(MIGRATE)?;
        if current.as_deref() != Some(schema) {
            return Err(StoreError::Unavailable(format!(
                "{MIGRATE}: the connection's search_path does not start with the store schema \
                 `{schema}` (does a connection pooler drop the `options` parameter?)"
            )));
        }
    }
    transaction
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (\
                 version    BIGINT PRIMARY KEY, \
                 name       TEXT NOT NULL, \
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()\
             )"
        ))
        .await
        .during(MIGRATE)?;
    transaction
        .batch_execute(&adopt_legacy_migrations_sql())
        .await
        .during(MIGRATE)?;
    let applied: Vec<i64> = transaction
        .query(
            &format!("SELECT version FROM {MIGRATIONS_TABLE} ORDER BY version"),
            &[],
        )
        .await
        .during(MIGRATE)?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .during(MIGRATE)?;
    let known = MIGRATIONS.last().map_or(0, |migration| migration.version);
    if let Some(&newest) = applied.last()
        && newest > known
    {
        return Err(StoreError::Unavailable(format!(
            "the store database has schema version {newest}, newer than the {known} this build \
             understands"
        )));
    }
    for migration in MIGRATIONS
        .iter()
        .filter(|migration| !applied.contains(&migration.version))
    {
        transaction
            .batch_execute(migration.sql)
            .await
            .during(MIGRATE)?;
        transaction
            .execute(
                &format!("INSERT INTO {MIGRATIONS_TABLE} (version, name) VALUES ($1, $2)"),
                &[&migration.version, &migration.name],
            )
            .await
            .during(MIGRATE)?;
    }
    Ok(())
}

/// Rolls a failed transaction back before the call returns, so its locks are released now
/// rather than whenever the connection task next runs, and answers with `error`. A failing
/// rollback means a broken connection, which the pool discards; `error` says more.
async fn abandon(transaction: deadpool_postgres::Transaction<'_>, error: StoreError) -> StoreError {
    let _ = transaction.rollback().await;
    error
}

/// Names a driver failure after the operation that hit it.
trait During<T> {
    /// The store error for `operation`.
    fn during(self, operation: &str) -> Result<T, StoreError>;
}

impl<T> During<T> for Result<T, tokio_postgres::Error> {
    fn during(self, operation: &str) -> Result<T, StoreError> {
        self.map_err(|error| pg_error(operation, &error))
    }
}

/// Describes a driver failure without anything that may quote a value: tokio-postgres displays
/// only the error's kind, and of a server error only the SQLSTATE and the constraint's name are
/// kept (the server's message and detail may quote row values or parameters).
fn pg_error(operation: &str, error: &tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(pg_error_text(operation, error))
}

/// [`pg_error`]'s words, for a failure that is not an outage (a URL that does not parse).
fn pg_error_text(operation: &str, error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let constraint = db
            .constraint()
            .map(|name| format!(", constraint `{name}`"))
            .unwrap_or_default();
        let code = db.code().code();
        let meaning = sqlstate_meaning(code)
            .map(|meaning| format!(" ({meaning})"))
            .unwrap_or_default();
        return format!("{operation}: server error, SQLSTATE {code}{meaning}{constraint}");
    }
    // The I/O error's kind, and what it wraps (a rejected TLS certificate, say): neither quotes
    // the URL, which the parse errors above are the ones to carry.
    let io_detail = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(|io| match io.get_ref() {
            Some(inner) => format!(" ({}: {inner}){}", io.kind(), tls_hint(inner)),
            None => format!(" ({})", io.kind()),
        })
        .unwrap_or_default();
    format!("{operation}: {error}{io_detail}")
}

/// What to do about a server certificate rustls refused, if `error` is one.
fn tls_hint(error: &(dyn std::error::Error + Send + Sync + 'static)) -> &'static str {
    match error.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
        | Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForNameContext { .. },
        )) => "; the URL's host must be a name or address the server's certificate lists",
        Some(rustls::Error::InvalidCertificate(_)) => {
            "; if the server's certificate comes from a private or cloud provider's CA, give \
             that CA with PostgresOptions::tls_root_certificates"
        }
        _ => "",
    }
}

/// What an operator should know about the SQLSTATEs a deployment mistake produces: our own
/// words, since the server's message may quote values.
fn sqlstate_meaning(code: &str) -> Option<&'static str> {
    Some(match code {
        "3D000" => "the database does not exist",
        "3F000" => "the schema does not exist",
        "28000" => {
            "the role is not allowed to connect (unknown role, or refused by pg_hba.conf; a \
             server that accepts only TLS refuses this way too: add `sslmode=require`)"
        }
        "28P01" => "the password was refused",
        "42501" => "the role lacks a privilege this store needs",
        "53300" => {
            "the server has no connection slot left (lower the pool or raise max_connections)"
        }
        "57P01" => {
            "the server ended the session (a shutdown, a restart or an administrator's \
             pg_terminate_backend)"
        }
        "57P02" | "57P03" => "the server is shutting down or starting up",
        "55P03" => "a row stayed locked by another connection past the lock timeout",
        "25P03" => "an idle transaction was ended by the server's timeout",
        _ => return None,
    })
}

/// Describes a pool failure; a failed connection attempt is described as a driver failure.
fn pool_error(operation: &str, error: PoolError) -> StoreError {
    let reason = match error {
        PoolError::Backend(error) => return pg_error(operation, &error),
        PoolError::Timeout(TimeoutType::Wait) => "timed out waiting for a free connection",
        PoolError::Timeout(TimeoutType::Create) => "timed out connecting to the database",
        PoolError::Timeout(TimeoutType::Recycle) => "timed out checking a pooled connection",
        PoolError::Closed => "the connection pool is closed",
        PoolError::NoRuntimeSpecified => "the connection pool has no async runtime",
        PoolError::PostCreateHook(_) => "a new connection could not be set up",
    };
    StoreError::Unavailable(format!("{operation}: {reason}"))
}

/// The value of column `name`; a value of another type is `Corrupt`, and is not quoted.
fn column<'row, T: FromSql<'row>>(row: &'row Row, name: &str, what: &str) -> Result<T, StoreError> {
    row.try_get(name).map_err(|_| {
        StoreError::Corrupt(format!("{what}: column `{name}` holds an unexpected value"))
    })
}

/// The JSON spelling of a status, which is also its `status` column value.
fn status_text<T: Serialize>(status: &T) -> Result<String, StoreError> {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(text)) => Ok(text),
        _ => Err(StoreError::Unavailable(
            "could not encode a status as text".to_owned(),
        )),
    }
}

/// Decodes an `idempotency_entries` row (`kind`, `expires_at_ms`, `body`).
fn entry_from_row(row: &Row) -> Result<KeyEntry, StoreError> {
    const WHAT: &str = "idempotency row";
    let kind: String = column(row, "kind", WHAT)?;
    let body: String = column(row, "body", WHAT)?;
    match kind.as_str() {
        "reservation" => {
            let mut reservation: Reservation = decode("idempotency reservation row", &body)?;
            // `renew` moves only the column, so the column is the authoritative expiry.
            let expires_at_ms: Option<i64> = column(row, "expires_at_ms", WHAT)?;
            let expires_at_ms = expires_at_ms.ok_or_else(|| {
                StoreError::Corrupt("idempotency reservation row has no expiry".to_owned())
            })?;
            reservation.expires_at_ms =
                unsigned_from_sql("idempotency reservation expiry", expires_at_ms)?;
            Ok(KeyEntry::Reserved(Box::new(reservation)))
        }
        "record" => Ok(KeyEntry::Settled(decode("idempotency record row", &body)?)),
        _ => Err(StoreError::Corrupt(
            "idempotency row has an unknown kind".to_owned(),
        )),
    }
}

/// Decodes an `approval_records` row (`resumed`, `resumed_at_ms`, `resume_token`, `version`,
/// `body`).
fn approval_from_row(row: &Row) -> Result<ApprovalRecord, StoreError> {
    const WHAT: &str = "approval record row";
    let body: String = column(row, "body", WHAT)?;
    let mut record: ApprovalRecord = decode(WHAT, &body)?;
    // `claim_resume` moves only the columns, so they are authoritative.
    record.resumed = column(row, "resumed", WHAT)?;
    record.resumed_at_ms = column::<Option<i64>>(row, "resumed_at_ms", WHAT)?
        .map(|ms| unsigned_from_sql("approval resume time", ms))
        .transpose()?;
    record.resume_token = column(row, "resume_token", WHAT)?;
    record.version = unsigned_from_sql("approval record version", column(row, "version", WHAT)?)?;
    Ok(record)
}

/// Decodes a `transactions` row (`revision`, `body`).
fn transaction_from_row(row: &Row) -> Result<TransactionRecord, StoreError> {
    const WHAT: &str = "transaction record row";
    let body: String = column(row, "body", WHAT)?;
    let mut record: TransactionRecord = decode(WHAT, &body)?;
    // The revision the compare-and-set tests is the column's.
    record.revision = unsigned_from_sql(
        "transaction record revision",
        column(row, "revision", WHAT)?,
    )?;
    Ok(record)
}

/// What reserving a key is called in errors.
const RESERVE: &str = "reserve an idempotency key";

/// Claims a key that has no entry: the primary key lets exactly one concurrent insert through.
const INSERT_RESERVATION: &str = "INSERT INTO idempotency_entries \
     (key, kind, reservation_id, expires_at_ms, body) \
     VALUES ($1, 'reservation', $2, $3, $4::text::json) \
     ON CONFLICT (key) DO NOTHING";

/// Reads and locks a key's entry until the end of the transaction.
const LOCK_ENTRY: &str = "SELECT kind, expires_at_ms, body::text AS body \
     FROM idempotency_entries WHERE key = $1 FOR UPDATE";

/// Replaces a locked entry with the caller's reservation.
const REPLACE_WITH_RESERVATION: &str = "UPDATE idempotency_entries \
     SET kind = 'reservation', reservation_id = $2, expires_at_ms = $3, body = $4::text::json \
     WHERE key = $1";

/// What forgetting a record is called in errors.
const FORGET: &str = "forget an idempotency record";

/// Deletes `expected.key`'s entry if, with its row locked, it is still the settled `expected`.
async fn forget_under_lock(
    transaction: &deadpool_postgres::Transaction<'_>,
    expected: &IdempotencyRecord,
) -> Result<bool, StoreError> {
    let key = expected.key.as_str();
    let lock = transaction
        .prepare_cached(LOCK_ENTRY)
        .await
        .during(FORGET)?;
    let Some(row) = transaction.query_opt(&lock, &[&key]).await.during(FORGET)? else {
        return Ok(false);
    };
    match entry_from_row(&row)? {
        KeyEntry::Settled(stored) if *stored == *expected => {
            let delete = transaction
                .prepare_cached("DELETE FROM idempotency_entries WHERE key = $1")
                .await
                .during(FORGET)?;
            transaction.execute(&delete, &[&key]).await.during(FORGET)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// What reserving a key that held an entry when it was inserted does, decided and written with
/// the entry's row locked; `None` when the entry is gone by the time it is locked.
async fn decide_under_lock(
    transaction: &deadpool_postgres::Transaction<'_>,
    reservation: &Reservation,
    params: &[&(dyn ToSql + Sync); 4],
    now: Millis,
) -> Result<Option<ReserveOutcome>, StoreError> {
    let lock = transaction
        .prepare_cached(LOCK_ENTRY)
        .await
        .during(RESERVE)?;
    let Some(row) = transaction
        .query_opt(&lock, &[&reservation.key])
        .await
        .during(RESERVE)?
    else {
        return Ok(None);
    };
    let existing = entry_from_row(&row)?;
    match claim(Some(&existing), reservation, now) {
        Claim::Take => {
            let replace = transaction
                .prepare_cached(REPLACE_WITH_RESERVATION)
                .await
                .during(RESERVE)?;
            transaction
                .execute(&replace, params)
                .await
                .during(RESERVE)?;
            Ok(Some(ReserveOutcome::Acquired))
        }
        Claim::Refuse(outcome) => Ok(Some(outcome)),
    }
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn reserve(
        &self,
        reservation: &Reservation,
        now: Millis,
    ) -> Result<ReserveOutcome, StoreError> {
        let body = encode("the reservation", reservation)?;
        let expires_at_ms = millis_to_sql(reservation.expires_at_ms);
        let params: [&(dyn ToSql + Sync); 4] = [
            &reservation.key,
            &reservation.reservation_id,
            &expires_at_ms,
            &body,
        ];
        let mut client = self.client(RESERVE).await?;
        for _ in 0..RESERVE_ATTEMPTS {
            let insert = client
                .prepare_cached(INSERT_RESERVATION)
                .await
                .during(RESERVE)?;
            if client.execute(&insert, &params).await.during(RESERVE)? == 1 {
                return Ok(ReserveOutcome::Acquired);
            }
            // The key holds an entry: decide under its row lock, so a concurrent reserve of the
            // same key waits for this decision and then sees its result.
            let transaction = client.transaction().await.during(RESERVE)?;
            match decide_under_lock(&transaction, reservation, &params, now).await {
                Ok(Some(outcome)) => {
                    transaction.commit().await.during(RESERVE)?;
                    return Ok(outcome);
                }
                // Released since the insert saw it: try the free-key path again.
                Ok(None) => transaction.rollback().await.during(RESERVE)?,
                Err(error) => return Err(abandon(transaction, error).await),
            }
        }
        Err(StoreError::Unavailable(format!(
            "{RESERVE}: the key was claimed and released {RESERVE_ATTEMPTS} times in a row \
             while this call tried to read it"
        )))
    }

    async fn settle(
        &self,
        reservation: &Reservation,
        record: IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let record = stored_under(record, reservation);
        let body = encode("the idempotency record", &record)?;
        let expires_at_ms = record.expires_at_ms.map(millis_to_sql);
        let changed = self
            .execute(
                "settle an idempotency key",
                "UPDATE idempotency_entries \
                 SET kind = 'record', reservation_id = NULL, expires_at_ms = $3, \
                     body = $4::text::json \
                 WHERE key = $1 AND kind = 'reservation' AND reservation_id = $2",
                &[
                    &reservation.key,
                    &reservation.reservation_id,
                    &expires_at_ms,
                    &body,
                ],
            )
            .await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::Fenced)
        }
    }

    async fn count_attempt(
        &self,
        key: &str,
        expires_at_ms: Option<Millis>,
        now: Millis,
    ) -> Result<u32, StoreError> {
        let expires = expires_at_ms.map(millis_to_sql);
        let row = self
            .query_opt(
                "count a retry attempt",
                "INSERT INTO retry_attempts (key, attempts, expires_at_ms) VALUES ($1, 1, $2) \
                 ON CONFLICT (key) DO UPDATE SET \
                   attempts = CASE WHEN retry_attempts.expires_at_ms IS NOT NULL \
                                    AND retry_attempts.expires_at_ms <= $3 \
                                   THEN 1 ELSE retry_attempts.attempts + 1 END, \
                   expires_at_ms = $2 \
                 RETURNING attempts",
                &[&key, &expires, &millis_to_sql(now)],
            )
            .await?;
        let attempts: i64 = row.map(|row| row.get(0)).unwrap_or(1);
        Ok(u32::try_from(attempts).unwrap_or(u32::MAX))
    }

    async fn release(&self, reservation: &Reservation) -> Result<(), StoreError> {
        self.execute(
            "release an idempotency key",
            "DELETE FROM idempotency_entries \
             WHERE key = $1 AND kind = 'reservation' AND reservation_id = $2",
            &[&reservation.key, &reservation.reservation_id],
        )
        .await
        .map(drop)
    }

    async fn forget_record(&self, record: &IdempotencyRecord) -> Result<bool, StoreError> {
        if unstorable(&record.key) || unstorable(record.action_id.as_str()) {
            return Ok(false);
        }
        // The entry is read under its row lock and compared here, then deleted in the same
        // transaction. Comparing in SQL (`body->>'action_id'`) made PostgreSQL de-escape every
        // string of the body, and a record holding `\u0000` anywhere (a failure quoting an
        // input) could never be forgotten: `storage.unavailable`, for good (found by a hostile
        // review; the memory and SQLite stores compare in Rust too).
        let mut client = self.client(FORGET).await?;
        let transaction = client.transaction().await.during(FORGET)?;
        match forget_under_lock(&transaction, record).await {
            Ok(forgotten) => {
                transaction.commit().await.during(FORGET)?;
                Ok(forgotten)
            }
            Err(error) => Err(abandon(transaction, error).await),
        }
    }

    async fn renew(
        &self,
        reservation: &Reservation,
        expires_at_ms: Millis,
    ) -> Result<bool, StoreError> {
        let changed = self
            .execute(
                "renew an idempotency reservation",
                "UPDATE idempotency_entries SET expires_at_ms = $3 \
                 WHERE key = $1 AND kind = 'reservation' AND reservation_id = $2",
                &[
                    &reservation.key,
                    &reservation.reservation_id,
                    &millis_to_sql(expires_at_ms),
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn purge_expired(&self, now: Millis, max_entries: usize) -> Result<Purged, StoreError> {
        let now = millis_to_sql(now);
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        // `expires_at_ms <= $1` is false for NULL: records kept forever are never chosen. A
        // record settled again meanwhile has a new expiry and no longer matches the outer test.
        let records = self
            .execute(
                "purge expired idempotency records",
                "DELETE FROM idempotency_entries WHERE key IN ( \
                   SELECT key FROM idempotency_entries \
                   WHERE kind = 'record' AND expires_at_ms <= $1 LIMIT $2) \
                 AND kind = 'record' AND expires_at_ms <= $1",
                &[&now, &limit],
            )
            .await?;
        let attempt_counts = self
            .execute(
                "purge expired retry-attempt counts",
                "DELETE FROM retry_attempts WHERE key IN ( \
                   SELECT key FROM retry_attempts WHERE expires_at_ms <= $1 LIMIT $2) \
                 AND expires_at_ms <= $1",
                &[&now, &limit],
            )
            .await?;
        Ok(Purged {
            records: usize::try_from(records).unwrap_or(usize::MAX),
            attempt_counts: usize::try_from(attempt_counts).unwrap_or(usize::MAX),
        })
    }

    async fn record(
        &self,
        key: &str,
        now: Millis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        const WHAT: &str = "idempotency record row";
        if unstorable(key) {
            return Ok(None);
        }
        let Some(row) = self
            .query_opt(
                "read an idempotency record",
                "SELECT body::text AS body FROM idempotency_entries \
                 WHERE key = $1 AND kind = 'record'",
                &[&key],
            )
            .await?
        else {
            return Ok(None);
        };
        let body: String = column(&row, "body", WHAT)?;
        let record: IdempotencyRecord = decode(WHAT, &body)?;
        Ok(record_is_live(&record, now).then_some(record))
    }

    async fn reservation(&self, key: &str, now: Millis) -> Result<Option<Reservation>, StoreError> {
        if unstorable(key) {
            return Ok(None);
        }
        let Some(row) = self
            .query_opt(
                "read an idempotency reservation",
                "SELECT kind, expires_at_ms, body::text AS body FROM idempotency_entries \
                 WHERE key = $1 AND kind = 'reservation'",
                &[&key],
            )
            .await?
        else {
            return Ok(None);
        };
        Ok(match entry_from_row(&row)? {
            KeyEntry::Reserved(reservation) if reservation_is_live(&reservation, now) => {
                Some(*reservation)
            }
            _ => None,
        })
    }
}

#[async_trait]
impl ApprovalStore for PostgresStore {
    async fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        let record = ApprovalRecord {
            version: 0,
            ..record.clone()
        };
        let body = encode("the approval record", &record)?;
        let inserted = self
            .execute(
                "insert an approval record",
                "INSERT INTO approval_records \
                 (approval_id, status, resumed, version, body, created_at_ms, expires_at_ms, \
                  resumed_at_ms, resume_token) \
                 VALUES ($1, $2, $3, 0, $4::text::json, $5, $6, $7, $8) \
                 ON CONFLICT (approval_id) DO NOTHING",
                &[
                    &record.approval_id.as_str(),
                    &status_text(&record.status)?,
                    &record.resumed,
                    &body,
                    &millis_to_sql(record.created_at_ms),
                    &record.expires_at_ms.map(millis_to_sql),
                    &record.resumed_at_ms.map(millis_to_sql),
                    &record.resume_token,
                ],
            )
            .await?;
        if inserted == 1 {
            Ok(())
        } else {
            Err(StoreError::Unavailable(
                "an approval record with this id already exists".to_owned(),
            ))
        }
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, StoreError> {
        if unstorable(id.as_str()) {
            return Ok(None);
        }
        self.query_opt(
            "read an approval record",
            "SELECT resumed, resumed_at_ms, resume_token, version, body::text AS body \
             FROM approval_records WHERE approval_id = $1",
            &[&id.as_str()],
        )
        .await?
        .map(|row| approval_from_row(&row))
        .transpose()
    }

    async fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected_version) else {
            return Ok(false);
        };
        if unstorable(record.approval_id.as_str()) {
            return Ok(false);
        }
        let Some(next) = expected.checked_add(1) else {
            return Ok(false);
        };
        let record = ApprovalRecord {
            version: expected_version + 1,
            ..record.clone()
        };
        let body = encode("the approval record", &record)?;
        // `resumed` only ever goes from false to true: an update cannot re-arm a resume (nor
        // forget when it was claimed). SET reads the row's old values.
        let changed = self
            .execute(
                "update an approval record",
                "UPDATE approval_records \
                 SET status = $2, resumed = resumed OR $3, version = $4, body = $5::text::json, \
                     created_at_ms = $7, expires_at_ms = $8, \
                     resumed_at_ms = CASE WHEN resumed OR $3 \
                                     THEN COALESCE(resumed_at_ms, $9) END, \
                     resume_token = CASE WHEN resumed OR $3 \
                                    THEN COALESCE(resume_token, $10) END \
                 WHERE approval_id = $1 AND version = $6",
                &[
                    &record.approval_id.as_str(),
                    &status_text(&record.status)?,
                    &record.resumed,
                    &next,
                    &body,
                    &expected,
                    &millis_to_sql(record.created_at_ms),
                    &record.expires_at_ms.map(millis_to_sql),
                    &record.resumed_at_ms.map(millis_to_sql),
                    &record.resume_token,
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn claim_resume(&self, id: &ApprovalId, claim: &ResumeClaim) -> Result<bool, StoreError> {
        if unstorable(id.as_str()) {
            return Ok(false);
        }
        // The claim bumps the version: a writer holding the pre-claim version must lose.
        let changed = self
            .execute(
                "claim an approval resume",
                "UPDATE approval_records \
                 SET resumed = TRUE, resumed_at_ms = $2, resume_token = $3, \
                     version = version + 1 \
                 WHERE approval_id = $1 AND status = 'approved' AND NOT resumed",
                &[&id.as_str(), &millis_to_sql(claim.at_ms), &claim.token],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn release_resume(
        &self,
        id: &ApprovalId,
        claim: &ResumeClaim,
    ) -> Result<bool, StoreError> {
        if unstorable(id.as_str()) || unstorable(&claim.token) {
            return Ok(false);
        }
        let changed = self
            .execute(
                "release an approval resume",
                "UPDATE approval_records \
                 SET resumed = FALSE, resumed_at_ms = NULL, resume_token = NULL, \
                     version = version + 1 \
                 WHERE approval_id = $1 AND status = 'approved' AND resumed \
                 AND resume_token = $2",
                &[&id.as_str(), &claim.token],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn purge_closed_approvals(
        &self,
        created_before: Millis,
        now: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let (created_before, now) = (millis_to_sql(created_before), millis_to_sql(now));
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        // `ApprovalRecord::is_purgeable` in SQL; the conformance suite holds the two together.
        // The test is repeated outside the subquery, for a row another writer changed
        // meanwhile.
        let purged = self
            .execute(
                "purge closed approval records",
                concat!(
                    "WITH closed AS ( \
                       SELECT approval_id FROM approval_records WHERE ",
                    purgeable_approval_sql!("$1", "$2"),
                    " LIMIT $3) \
                     DELETE FROM approval_records \
                     WHERE approval_id IN (SELECT approval_id FROM closed) AND ",
                    purgeable_approval_sql!("$1", "$2")
                ),
                &[&created_before, &now, &limit],
            )
            .await?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }
}

#[async_trait]
impl TransactionStore for PostgresStore {
    async fn insert_transaction(&self, record: &TransactionRecord) -> Result<bool, StoreError> {
        let record = TransactionRecord {
            revision: 0,
            ..record.clone()
        };
        const OPERATION: &str = "insert a transaction record";
        let body = encode("the transaction record", &record)?;
        let client = self.client(OPERATION).await?;
        // The conflict target is the transaction id only: an existing id is skipped, while a new
        // id with a taken plan id still fails on the plan-id constraint.
        let statement = client
            .prepare_cached(
                "INSERT INTO transactions \
                 (transaction_id, action_id, plan_id, status, revision, recoverable, body, \
                  finished_at_ms) \
                 VALUES ($1, $2, $3, $4, 0, $5, $6::text::json, $7) \
                 ON CONFLICT (transaction_id) DO NOTHING",
            )
            .await
            .during(OPERATION)?;
        let inserted = client
            .execute(
                &statement,
                &[
                    &record.transaction_id.as_str(),
                    &record.action_id.as_str(),
                    &record.plan_id(),
                    &status_text(&record.status)?,
                    &record.is_recoverable(),
                    &body,
                    &record.finished_at_ms().map(millis_to_sql),
                ],
            )
            .await;
        match inserted {
            Ok(changed) => Ok(changed == 1),
            Err(error) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(StoreError::PlanIdTaken)
            }
            Err(error) => Err(pg_error(OPERATION, &error)),
        }
    }

    async fn transaction(
        &self,
        id: &TransactionId,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        if unstorable(id.as_str()) {
            return Ok(None);
        }
        self.query_opt(
            "read a transaction record",
            "SELECT revision, body::text AS body FROM transactions WHERE transaction_id = $1",
            &[&id.as_str()],
        )
        .await?
        .map(|row| transaction_from_row(&row))
        .transpose()
    }

    async fn transaction_by_plan(
        &self,
        plan_id: &str,
    ) -> Result<Option<TransactionRecord>, StoreError> {
        if unstorable(plan_id) {
            return Ok(None);
        }
        self.query_opt(
            "read a transaction record by plan",
            "SELECT revision, body::text AS body FROM transactions WHERE plan_id = $1",
            &[&plan_id],
        )
        .await?
        .map(|row| transaction_from_row(&row))
        .transpose()
    }

    async fn transactions_by_action(
        &self,
        action_id: &ActionId,
    ) -> Result<Vec<TransactionRecord>, StoreError> {
        if unstorable(action_id.as_str()) {
            return Ok(Vec::new());
        }
        // Ids are `COLLATE "C"`: byte order, as the other backends sort.
        self.query(
            "read the transaction records of an action",
            "SELECT revision, body::text AS body FROM transactions \
             WHERE action_id = $1 ORDER BY transaction_id",
            &[&action_id.as_str()],
        )
        .await?
        .iter()
        .map(transaction_from_row)
        .collect()
    }

    async fn transition(
        &self,
        id: &TransactionId,
        expected_revision: u64,
        transition: &Transition,
        now: Millis,
    ) -> Result<TransitionOutcome, StoreError> {
        const OPERATION: &str = "transition a transaction record";
        let Some(current) = self.transaction(id).await? else {
            return Ok(TransitionOutcome::NotFound);
        };
        if current.revision != expected_revision {
            return Ok(TransitionOutcome::RevisionConflict(current));
        }
        let Some(next) = transition.apply(&current, now) else {
            return Ok(TransitionOutcome::StateConflict(current));
        };
        let body = encode("the transaction record", &next)?;
        // Every transition bumps the revision, so a row still at the revision that was read is
        // still the row `next` was computed from (status included): the write is a plain
        // compare-and-set, atomic across processes without holding a lock across round trips.
        let changed = self
            .execute(
                OPERATION,
                "UPDATE transactions \
                 SET action_id = $3, plan_id = $4, status = $5, revision = $6, recoverable = $7, \
                     body = $8::text::json, finished_at_ms = $9 \
                 WHERE transaction_id = $1 AND revision = $2",
                &[
                    &id.as_str(),
                    &counter_to_sql("transaction revision", expected_revision)?,
                    &next.action_id.as_str(),
                    &next.plan_id(),
                    &status_text(&next.status)?,
                    &counter_to_sql("transaction revision", next.revision)?,
                    &next.is_recoverable(),
                    &body,
                    &next.finished_at_ms().map(millis_to_sql),
                ],
            )
            .await?;
        if changed == 1 {
            return Ok(TransitionOutcome::Applied(next));
        }
        // Another writer moved the record after it was read; revisions only grow, so the stored
        // one is no longer the caller's.
        Ok(match self.transaction(id).await? {
            Some(latest) => TransitionOutcome::RevisionConflict(latest),
            None => TransitionOutcome::NotFound,
        })
    }

    async fn recoverable(&self) -> Result<Vec<TransactionRecord>, StoreError> {
        self.query(
            "list recoverable transaction records",
            "SELECT revision, body::text AS body FROM transactions \
             WHERE recoverable ORDER BY transaction_id",
            &[],
        )
        .await?
        .iter()
        .map(transaction_from_row)
        .collect()
    }

    async fn purge_finished_transactions(
        &self,
        updated_before: Millis,
        max_entries: usize,
    ) -> Result<usize, StoreError> {
        let updated_before = millis_to_sql(updated_before);
        let limit = i64::try_from(max_entries).unwrap_or(i64::MAX);
        // NULL (not finished) is never below anything. The test is repeated outside the
        // subquery: a record reopened meanwhile (a failed one retried) is no longer finished.
        let purged = self
            .execute(
                "purge finished transaction records",
                concat!(
                    "DELETE FROM transactions WHERE transaction_id IN ( \
                       SELECT transaction_id FROM transactions \
                       WHERE finished_at_ms < $1 AND status IN ",
                    purgeable_statuses_sql!(),
                    " LIMIT $2) AND finished_at_ms < $1 AND status IN ",
                    purgeable_statuses_sql!()
                ),
                &[&updated_before, &limit],
            )
            .await?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use aip_connector_core::ids::ActionId;

    use super::*;

    /// A self-signed certificate (the test server's CA shape), for root parsing.
    const TEST_CA: &[u8] = include_bytes!("../../tests/fixtures/test-ca.pem");

    /// libpq's TLS settings are taken out of both URL forms; everything else stays as written.
    #[test]
    fn libpq_tls_settings_are_split_off_both_url_forms() {
        let split = |url: &str| {
            let (rest, tls) = split_libpq_tls(url);
            (rest.into_owned(), tls.verify, tls.root_cert)
        };
        assert_eq!(
            split(
                "postgres://u:p%40ss@db/aip?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x"
            ),
            (
                "postgres://u:p%40ss@db/aip?application_name=x".to_owned(),
                true,
                Some("/etc/ca.pem".to_owned())
            )
        );
        assert_eq!(
            split("postgresql://db/aip?sslmode=verify-ca"),
            ("postgresql://db/aip".to_owned(), true, None)
        );
        // Modes tokio-postgres parses itself are left to it.
        for url in [
            "postgres://db/aip?sslmode=require",
            "postgres://db/aip",
            "host=db sslmode=disable",
            "host=db password='it''s' sslmode",
        ] {
            assert_eq!(split(url), (url.to_owned(), false, None));
        }
        assert_eq!(
            split(
                "host=db password='a b\\' c' sslmode = verify-full sslrootcert='/etc/my ca.pem' dbname=aip"
            ),
            (
                "host=db password='a b\\' c' dbname=aip".to_owned(),
                true,
                Some("/etc/my ca.pem".to_owned())
            )
        );
        assert_eq!(
            split("sslrootcert=system"),
            (String::new(), false, Some("system".to_owned()))
        );
    }

    /// Valid roots are accepted whatever else the PEM holds (a key, comments), and the options
    /// print their size, not their text.
    #[test]
    fn roots_parse_from_pem_and_print_their_size() {
        let mut pem = b"# the store's CA\n".to_vec();
        pem.extend_from_slice(TEST_CA);
        pem.extend_from_slice(TEST_CA);
        let roots = roots_from_pem(&pem).expect("two certificates");
        assert_eq!(roots.len(), 2);
        let options = PostgresOptions::new().tls_root_certificates(TEST_CA);
        let debug = format!("{options:?}");
        assert!(
            debug.contains(&format!("{} bytes of PEM", TEST_CA.len())) && !debug.contains("BEGIN"),
            "{debug}"
        );
        assert!(tls_connector(SslMode::Require, None).unwrap().is_some());
        assert!(
            tls_connector(SslMode::Require, Some(TlsRoots::Mozilla))
                .unwrap()
                .is_some()
        );
        assert!(tls_connector(SslMode::Prefer, None).unwrap().is_none());
        assert!(tls_connector(SslMode::Disable, None).unwrap().is_none());
    }

    /// Settings no server could satisfy are `InvalidConfig` (not `Unavailable`, which reads as
    /// "retry"), found before any connection, and never quote the URL's password.
    #[tokio::test]
    async fn settings_that_cannot_work_are_invalid_config_before_connecting() {
        let schema =
            PostgresStore::connect_with_schema("postgres://u@127.0.0.1:1/db", "aip-invoices")
                .await
                .unwrap_err();
        assert!(
            matches!(&schema, StoreError::InvalidConfig(m) if m.contains("[a-z_][a-z0-9_]*")),
            "{schema:?}"
        );
        // Roots given for a URL that makes no TLS connection: the caller meant TLS.
        for mode in ["", "?sslmode=prefer", "?sslmode=disable"] {
            let roots = PostgresStore::connect_with(
                &format!("postgres://u:hunter2@127.0.0.1:1/db{mode}"),
                PostgresOptions::new().tls_root_certificates(TEST_CA),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(&roots, StoreError::InvalidConfig(m) if m.contains("sslmode=require") && !m.contains("hunter2")),
                "{mode}: {roots:?}"
            );
        }
        // `sslrootcert` without a TLS mode, given twice, or unreadable.
        for (url, says) in [
            (
                "postgres://u:hunter2@127.0.0.1:1/db?sslrootcert=system",
                "sslmode=require",
            ),
            (
                "host=127.0.0.1 port=1 password=hunter2 sslrootcert=/nonexistent/ca.pem sslmode=require",
                "/nonexistent/ca.pem",
            ),
        ] {
            let error = PostgresStore::connect(url).await.unwrap_err();
            assert!(
                matches!(&error, StoreError::InvalidConfig(m) if m.contains(says) && !m.contains("hunter2")),
                "{error:?}"
            );
        }
        let twice = PostgresStore::connect_with(
            "postgres://u:hunter2@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=system",
            PostgresOptions::new().tls_root_certificates(TEST_CA),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&twice, StoreError::InvalidConfig(m) if m.contains("given twice")),
            "{twice:?}"
        );
        // Roots that are not certificates.
        for (pem, says) in [
            (
                &b"not pem at all"[..],
                "no `-----BEGIN CERTIFICATE-----` block",
            ),
            (
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "certificate 1 is not a usable X.509 certificate",
            ),
            (
                b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
                "certificate 1 is not valid PEM",
            ),
        ] {
            let roots = PostgresStore::connect_with(
                "postgres://u:hunter2@127.0.0.1:1/db?sslmode=require",
                PostgresOptions::new().tls_root_certificates(pem),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(&roots, StoreError::InvalidConfig(m) if m.contains(says) && !m.contains("hunter2")),
                "{roots:?}"
            );
        }
        let url = PostgresStore::connect("postgres://u:hunter2@127.0.0.1:notaport/db")
            .await
            .unwrap_err();
        assert!(
            matches!(&url, StoreError::InvalidConfig(m) if !m.contains("hunter2")),
            "{url:?}"
        );
    }

    /// A fresh schema on the server `AIP_TEST_POSTGRES_URL` names, dropped on drop.
    struct TestSchema {
        url: String,
        name: String,
    }

    impl TestSchema {
        /// `None` (after saying so) when no server is configured.
        fn new() -> Option<Self> {
            let Some(url) = std::env::var("AIP_TEST_POSTGRES_URL")
                .ok()
                .filter(|url| !url.is_empty())
            else {
                println!("skipped: AIP_TEST_POSTGRES_URL is not set (CI sets it; see .ci/run)");
                return None;
            };
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            // The time keeps a schema a killed run left behind (same pid, same counter) from
            // being reused with its rows.
            let millis = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let name = format!(
                "aip_unit_{}_{millis:x}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            Some(Self { url, name })
        }

        async fn connect(&self) -> Result<PostgresStore, StoreError> {
            PostgresStore::connect_with_schema(&self.url, &self.name).await
        }
    }

    impl Drop for TestSchema {
        fn drop(&mut self) {
            let (url, name) = (self.url.clone(), self.name.clone());
            let dropped = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| StoreError::Unavailable(error.to_string()))?
                    .block_on(PostgresStore::drop_schema(&url, &name))
            })
            .join();
            if !std::thread::panicking() {
                assert!(matches!(dropped, Ok(Ok(()))), "{dropped:?}");
            }
        }
    }

    /// Runs `sql` on one of the store's connections.
    async fn raw(store: &PostgresStore, sql: &str) {
        let client = store.pool.get().await.unwrap();
        client.batch_execute(sql).await.unwrap();
    }

    /// Stores starting together on a new schema apply each migration once, in that schema.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn migrations_apply_once_when_stores_start_together() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let starts: Vec<_> = (0..6)
            .map(|_| {
                let (url, name) = (schema.url.clone(), schema.name.clone());
                tokio::spawn(async move { PostgresStore::connect_with_schema(&url, &name).await })
            })
            .collect();
        let mut stores = Vec::new();
        for start in starts {
            stores.push(start.await.unwrap().unwrap());
        }
        drop(schema.connect().await.unwrap());
        let client = stores[0].pool.get().await.unwrap();
        let migrations: Vec<(i64, String)> = client
            .query(
                &format!("SELECT version, name FROM {MIGRATIONS_TABLE}"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(
            migrations,
            [
                (1, "initial".to_owned()),
                (2, "retry_attempts".to_owned()),
                (3, "expiry_indexes".to_owned()),
                (4, "retention".to_owned()),
                (5, "resumed_at".to_owned()),
                (6, "plan_expiry".to_owned()),
                (7, "resume_token".to_owned())
            ]
        );
        let tables: Vec<String> = client
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = $1 ORDER BY table_name",
                &[&schema.name],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(
            tables,
            [
                "aip_connector_schema_migrations",
                "approval_records",
                "idempotency_entries",
                "retry_attempts",
                "transactions"
            ]
        );
    }

    /// Migrations 4 and 6 fill the retention columns in from the bodies of the rows already
    /// there, so records written before them are purged like new ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_from_before_migration_4_gain_their_retention_columns() {
        use super::super::fixtures::RetentionRows;

        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        // Back to the schema migration 3 left.
        raw(
            &store,
            "DROP INDEX approval_records_created;
             DROP INDEX transactions_finished;
             ALTER TABLE approval_records DROP COLUMN created_at_ms, DROP COLUMN expires_at_ms;
             ALTER TABLE transactions DROP COLUMN finished_at_ms;
             DELETE FROM aip_connector_schema_migrations WHERE version IN (4, 6);",
        )
        .await;
        let rows = RetentionRows::new();
        // Written as a migration-3 build wrote them.
        let client = store.pool.get().await.unwrap();
        for record in rows.approvals() {
            client
                .execute(
                    "INSERT INTO approval_records (approval_id, status, resumed, version, body) \
                     VALUES ($1, $2, FALSE, 0, $3::text::json)",
                    &[
                        &record.approval_id.as_str(),
                        &status_text(&record.status).unwrap(),
                        &serde_json::to_string(record).unwrap(),
                    ],
                )
                .await
                .unwrap();
        }
        for record in rows.transactions() {
            client
                .execute(
                    "INSERT INTO transactions \
                     (transaction_id, action_id, plan_id, status, revision, recoverable, body) \
                     VALUES ($1, $2, $3, $4, 0, $5, $6::text::json)",
                    &[
                        &record.transaction_id.as_str(),
                        &record.action_id.as_str(),
                        &record.plan_id(),
                        &status_text(&record.status).unwrap(),
                        &record.is_recoverable(),
                        &serde_json::to_string(record).unwrap(),
                    ],
                )
                .await
                .unwrap();
        }
        drop(client);
        rows.assert_purged_like_new_rows(&schema.connect().await.unwrap())
            .await;
    }

    /// A reserve that finds its key's row locked by a connection that hangs inside its
    /// transaction fails after the lock timeout instead of waiting for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_locked_by_a_hung_transaction_times_out_as_unavailable() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        let claim = |token: &str| Reservation {
            key: "k".to_owned(),
            reservation_id: token.to_owned(),
            action_id: ActionId::trusted("act_1"),
            tenant_id: None,
            input_hash: "h".to_owned(),
            resume_pending: false,
            expires_at_ms: 1_000,
        };
        assert_eq!(
            store.reserve(&claim("r1"), 0).await,
            Ok(ReserveOutcome::Acquired)
        );
        // Another replica locks the row and then hangs, its transaction open.
        let mut hung = store.pool.get().await.unwrap();
        let transaction = hung.transaction().await.unwrap();
        transaction
            .batch_execute("SELECT 1 FROM idempotency_entries WHERE key = 'k' FOR UPDATE")
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let outcome =
            tokio::time::timeout(Duration::from_secs(30), store.reserve(&claim("r2"), 2_000))
                .await
                .expect("the reserve returns instead of waiting for the lock");
        assert!(
            matches!(&outcome, Err(StoreError::Unavailable(message)) if message.contains("55P03")),
            "{outcome:?}"
        );
        assert!(started.elapsed() >= LOCK_TIMEOUT, "{:?}", started.elapsed());
        drop(transaction);
        // Once the lock is gone, the expired reservation is taken over as usual.
        assert_eq!(
            store.reserve(&claim("r3"), 2_000).await,
            Ok(ReserveOutcome::Acquired)
        );
    }

    /// A server that ends the session under a statement (a restart, a failover, an operator's
    /// `pg_terminate_backend`) does not lose the write: it is sent once more on a fresh
    /// connection. Without that, a settlement in flight was lost with its connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_statement_whose_session_is_ended_is_sent_again_on_a_fresh_connection() {
        use super::super::fixtures::planned;
        use aip_connector_core::model::TransactionProtocolStatus as Status;

        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        let record = planned("txn_ended", "plan_ended");
        assert!(store.insert_transaction(&record).await.unwrap());
        // Another replica locks the row, so the transition's UPDATE waits on it.
        let other = schema.connect().await.unwrap();
        let mut locker = other.pool.get().await.unwrap();
        let lock = locker.transaction().await.unwrap();
        lock.batch_execute(
            "SELECT 1 FROM transactions WHERE transaction_id = 'txn_ended' FOR UPDATE",
        )
        .await
        .unwrap();
        let writing = tokio::spawn({
            let store = store.clone();
            let id = record.transaction_id.clone();
            async move {
                let claim = Transition::new(&[Status::Planned], Status::Committing);
                store.transition(&id, 0, &claim, 1).await
            }
        });
        // End exactly the sessions waiting on this lock: the transition's.
        let mut ended = 0;
        for _ in 0..200 {
            let row = lock
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
                    &[],
                )
                .await
                .unwrap();
            ended = row.get::<_, i64>(0);
            if ended > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(ended, 1, "the transition's session waited on the lock");
        lock.rollback().await.unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(30), writing)
            .await
            .expect("the transition returns")
            .unwrap();
        assert!(
            matches!(&outcome, Ok(TransitionOutcome::Applied(next)) if next.status == Status::Committing),
            "{outcome:?}"
        );
        let stored = store.transaction(&record.transaction_id).await.unwrap();
        assert_eq!(stored.map(|r| r.status), Some(Status::Committing));
    }

    /// Migrations an earlier build recorded in `schema_migrations` are adopted once, not
    /// applied again, and the old table (all ours) is dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migrations_recorded_by_an_earlier_build_are_adopted() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        // As an earlier build left the schema.
        raw(
            &store,
            "ALTER TABLE aip_connector_schema_migrations RENAME TO schema_migrations",
        )
        .await;
        drop(store);
        let store = schema.connect().await.unwrap();
        let client = store.pool.get().await.unwrap();
        let versions: Vec<i64> = client
            .query(
                &format!("SELECT version FROM {MIGRATIONS_TABLE} ORDER BY version"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let known: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, known);
        let legacy: Option<String> = client
            .query_one("SELECT to_regclass('schema_migrations')::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(legacy, None, "the old table, all ours, is dropped");
    }

    /// Another tool's `schema_migrations` in the store's schema (golang-migrate's shape) is
    /// neither used nor changed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_tools_schema_migrations_table_is_left_alone() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        drop(schema.connect().await.unwrap());
        let store = schema.connect().await.unwrap();
        raw(
            &store,
            "DROP TABLE approval_records, idempotency_entries, retry_attempts, transactions, \
                        aip_connector_schema_migrations;
             CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, dirty BOOLEAN NOT NULL);
             INSERT INTO schema_migrations VALUES (20240101120000, FALSE);",
        )
        .await;
        drop(store);
        let store = schema
            .connect()
            .await
            .expect("the store migrates its own table");
        let claim = Reservation {
            key: "k".to_owned(),
            reservation_id: "r".to_owned(),
            action_id: ActionId::trusted("act_1"),
            tenant_id: None,
            input_hash: "h".to_owned(),
            resume_pending: false,
            expires_at_ms: 1_000,
        };
        assert_eq!(store.reserve(&claim, 0).await, Ok(ReserveOutcome::Acquired));
        let client = store.pool.get().await.unwrap();
        let theirs: Vec<(i64, bool)> = client
            .query("SELECT version, dirty FROM schema_migrations", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(theirs, [(20240101120000, false)]);
    }

    /// A database migrated by a newer build is refused rather than misread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn newer_schema_version_is_refused() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        raw(
            &store,
            "INSERT INTO aip_connector_schema_migrations (version, name) VALUES (999, 'future')",
        )
        .await;
        let error = schema.connect().await.unwrap_err();
        assert!(
            matches!(&error, StoreError::Unavailable(message) if message.contains("schema version 999")),
            "{error:?}"
        );
    }

    /// Rows whose bodies are not the expected records read as `Corrupt`, quoting no value.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn corrupt_rows_read_as_corrupt_without_values() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        raw(
            &store,
            r#"
            INSERT INTO idempotency_entries (key, kind, expires_at_ms, body)
                VALUES ('rec', 'record', NULL, '{"key":"rec","key_scope":"s3cr3t-scope"}');
            INSERT INTO idempotency_entries (key, kind, reservation_id, expires_at_ms, body)
                VALUES ('res', 'reservation', 'r1', 5, '{"key":"res","reservation_id":["s3cr3t"]}');
            INSERT INTO idempotency_entries (key, kind, reservation_id, expires_at_ms, body)
                VALUES ('neg', 'reservation', 'r1', -5, '{"key":"neg","reservation_id":"r1",
                    "action_id":"act_1","input_hash":"h","resume_pending":false,"expires_at_ms":5}');
            INSERT INTO approval_records (approval_id, status, resumed, version, body)
                VALUES ('appr_1', 'pending', FALSE, 0, '{"approval_id":"appr_1","action":"s3cr3t"}');
            INSERT INTO transactions
                (transaction_id, action_id, plan_id, status, revision, recoverable, body)
                VALUES ('txn_1', 'act_1', NULL, 'planned', 0, TRUE, '["s3cr3t"]');
            "#,
        )
        .await;
        let claim = |key: &str| Reservation {
            key: key.to_owned(),
            reservation_id: "r2".to_owned(),
            action_id: ActionId::trusted("act_2"),
            tenant_id: None,
            input_hash: "h".to_owned(),
            resume_pending: false,
            expires_at_ms: 10,
        };
        let errors = [
            store.record("rec", 0).await.unwrap_err(),
            store.reserve(&claim("rec"), 0).await.unwrap_err(),
            store.reserve(&claim("res"), 0).await.unwrap_err(),
            store.reserve(&claim("neg"), 0).await.unwrap_err(),
            store
                .approval(&ApprovalId::trusted("appr_1"))
                .await
                .unwrap_err(),
            store
                .transaction(&TransactionId::trusted("txn_1"))
                .await
                .unwrap_err(),
            store.recoverable().await.unwrap_err(),
        ];
        for error in errors {
            assert!(matches!(error, StoreError::Corrupt(_)), "{error:?}");
            assert!(!error.to_string().contains("s3cr3t"), "{error}");
        }
    }

    /// A server error whose message quotes a parameter is reported by SQLSTATE only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_errors_are_reported_without_their_message() {
        let Some(schema) = TestSchema::new() else {
            return;
        };
        let store = schema.connect().await.unwrap();
        let client = store.pool.get().await.unwrap();
        let failure = client
            .query_one("SELECT $1::text::bigint", &[&"s3cr3t"])
            .await
            .unwrap_err();
        assert!(
            failure
                .as_db_error()
                .is_some_and(|db| db.message().contains("s3cr3t")),
            "fixture sanity: the server quotes the value"
        );
        let error = pg_error("read", &failure);
        assert_eq!(
            error,
            StoreError::Unavailable("read: server error, SQLSTATE 22P02".to_owned())
        );
    }

    /// A deployment mistake reads as what it is, not as a bare SQLSTATE.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_database_is_named_in_plain_words() {
        let Ok(url) = std::env::var("AIP_TEST_POSTGRES_URL") else {
            println!("skipped: AIP_TEST_POSTGRES_URL is not set (CI sets it; see .ci/run)");
            return;
        };
        let Some((server, _database)) = url.rsplit_once('/') else {
            panic!("AIP_TEST_POSTGRES_URL names no database: {url}");
        };
        let missing = format!("{server}/aip_no_such_database_{}", std::process::id());
        let error = PostgresStore::connect(&missing).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("SQLSTATE 3D000 (the database does not exist)"),
            "{error}"
        );
    }

    #[test]
    fn common_sqlstates_have_a_meaning_and_others_none() {
        assert_eq!(
            sqlstate_meaning("3D000"),
            Some("the database does not exist")
        );
        assert!(sqlstate_meaning("28P01").is_some());
        assert_eq!(sqlstate_meaning("22P02"), None);
    }

    /// Connection failures quote neither the URL nor its password (no server needed).
    #[tokio::test]
    async fn connection_failures_quote_no_credentials() {
        for (url, unreachable) in [
            // Nothing listens on port 1: an outage, worth retrying.
            ("postgres://user:s3cr3t@127.0.0.1:1/db", true),
            (
                "postgres://user:s3cr3t@127.0.0.1:1/db?sslmode=require",
                true,
            ),
            // URLs that do not parse: configuration, not worth retrying.
            ("postgres://user:s3cr3t@127.0.0.1:not-a-port/db", false),
            (
                "host=127.0.0.1 port=1 user=user password=s3cr3t connect_timeout=s3cr3t",
                false,
            ),
        ] {
            let error = PostgresStore::connect(url).await.unwrap_err();
            if unreachable {
                assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
            } else {
                assert!(matches!(error, StoreError::InvalidConfig(_)), "{error:?}");
            }
            assert!(!error.to_string().contains("s3cr3t"), "{error}");
        }
    }

    /// Transaction statuses are stored under their JSON spelling, as approval statuses are.
    #[test]
    fn status_text_is_the_json_spelling() {
        use aip_connector_core::model::TransactionProtocolStatus;
        assert_eq!(
            status_text(&TransactionProtocolStatus::OutcomeUnknown).as_deref(),
            Ok("outcome_unknown")
        );
        assert_eq!(
            status_text(&super::super::ApprovalStatus::Approved).as_deref(),
            Ok("approved")
        );
    }
}
