//! Where each scenario's host keeps its state: a temporary SQLite file by default, or a schema
//! of its own in the deployment's PostgreSQL database ([`ConformanceStore`]).
//!
//! Either way a scenario starts on an empty store, a restart (`restart_reconnect`, the webhook
//! replay after a restart) opens the store anew as another process would, and the store is
//! removed when the scenario ends.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::store::{SharedStore, SqliteStore, StoreError};

/// Where the conformance scenarios' hosts keep their state
/// ([`ConformanceSuite::with_store`](super::ConformanceSuite::with_store)).
///
/// The default is [`sqlite`](Self::sqlite): a temporary file per scenario, nothing to set up. A
/// deployment that runs its replicas on PostgreSQL proves the connector on that store with
/// `postgres` (feature `postgres`): each scenario gets a schema of its own in the database,
/// dropped when the scenario ends.
#[derive(Clone)]
pub struct ConformanceStore(Backend);

#[derive(Clone)]
enum Backend {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        options: aip_connector::store::PostgresOptions,
    },
}

impl ConformanceStore {
    /// A temporary SQLite file per scenario (with its WAL), removed when the scenario ends: the
    /// suite's default.
    pub fn sqlite() -> Self {
        Self(Backend::Sqlite)
    }

    /// A schema of its own per scenario in the PostgreSQL database at `url`
    /// (`postgres://user@host:5432/db`, with `?sslmode=require` for TLS), created empty and
    /// dropped when the scenario ends. The user needs `CREATE` on the database.
    #[cfg(feature = "postgres")]
    pub fn postgres(url: impl Into<String>) -> Self {
        Self::postgres_with(url, aip_connector::store::PostgresOptions::new())
    }

    /// [`postgres`](Self::postgres) connecting as `options` say (TLS roots, pool size). A schema
    /// the options name is replaced by each scenario's own.
    #[cfg(feature = "postgres")]
    pub fn postgres_with(
        url: impl Into<String>,
        options: aip_connector::store::PostgresOptions,
    ) -> Self {
        Self(Backend::Postgres {
            url: url.into(),
            options,
        })
    }

    /// What the scenarios' stores are, for the report: `SQLite (a temporary file per scenario)`
    /// or `PostgreSQL (a schema per scenario)`. The URL is not included: it may carry a password.
    pub fn describe(&self) -> &'static str {
        match self.0 {
            Backend::Sqlite => "SQLite (a temporary file per scenario)",
            #[cfg(feature = "postgres")]
            Backend::Postgres { .. } => "PostgreSQL (a schema per scenario)",
        }
    }

    /// What the report file's name ends with on this store: nothing on the default SQLite
    /// store, `.postgres` on PostgreSQL ([`ConformanceSuite::report_name`](super::ConformanceSuite::report_name)).
    pub fn report_suffix(&self) -> &'static str {
        match self.0 {
            Backend::Sqlite => "",
            #[cfg(feature = "postgres")]
            Backend::Postgres { .. } => ".postgres",
        }
    }

    /// A new, empty store place for one scenario.
    pub(super) async fn create(&self) -> Result<ScenarioStore, StoreError> {
        match &self.0 {
            Backend::Sqlite => Ok(ScenarioStore::Sqlite(StoreFile::new())),
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, options } => {
                // Processes of other machines may share the database, so the process id is not
                // enough: a token drawn once per process tells them apart.
                let name = format!("{}_{}", unique_name('_'), process_token());
                Ok(ScenarioStore::Postgres(PostgresSchema {
                    url: url.clone(),
                    options: options.clone().schema(name.clone()),
                    name,
                }))
            }
        }
    }
}

impl Default for ConformanceStore {
    fn default() -> Self {
        Self::sqlite()
    }
}

impl fmt::Debug for ConformanceStore {
    // The URL may carry a password: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ConformanceStore")
            .field(&self.describe())
            .finish()
    }
}

/// `aip_conformance<sep><process id><sep><n>`: unique within the process, and across the
/// processes of one machine.
fn unique_name(separator: char) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "aip_conformance{separator}{}{separator}{n}",
        std::process::id()
    )
}

/// Six hex digits drawn once per process (std's randomly seeded hasher, so no dependency).
#[cfg(feature = "postgres")]
fn process_token() -> &'static str {
    use std::hash::BuildHasher;
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let drawn = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        format!("{:06x}", drawn & 0xff_ffff)
    })
}

/// One scenario's store place. [`open`](Self::open) may be called many times: each call is a
/// new handle on the same state, as a restarted process would open it.
pub(super) enum ScenarioStore {
    Sqlite(StoreFile),
    #[cfg(feature = "postgres")]
    Postgres(PostgresSchema),
}

impl ScenarioStore {
    /// A store over this scenario's state, opened anew.
    pub(super) async fn open(&self) -> Result<SharedStore, StoreError> {
        match self {
            Self::Sqlite(file) => Ok(Arc::new(SqliteStore::open(&file.0)?)),
            #[cfg(feature = "postgres")]
            Self::Postgres(schema) => Ok(Arc::new(
                aip_connector::store::PostgresStore::connect_with(
                    &schema.url,
                    schema.options.clone(),
                )
                .await?,
            )),
        }
    }

    /// [`open`](Self::open), for the scenarios: a store that opened when the scenario started
    /// and no longer opens is the environment failing, not the connector.
    pub(super) async fn reopen(&self) -> SharedStore {
        self.open()
            .await
            .unwrap_or_else(|error| panic!("the conformance store cannot be opened again: {error}"))
    }

    /// Removes the scenario's state, once every store opened on it is gone. A schema that cannot
    /// be dropped is reported on stderr with its name, so that it can be dropped by hand.
    pub(super) async fn remove(self) {
        match self {
            Self::Sqlite(file) => drop(file),
            #[cfg(feature = "postgres")]
            Self::Postgres(schema) => {
                if let Err(error) = schema.drop_schema().await {
                    eprintln!(
                        "aip-connector-testkit: the conformance schema `{}` could not be dropped ({error}); drop it by hand",
                        schema.name
                    );
                }
            }
        }
    }
}

/// The SQLite file a scenario's host keeps its state in, removed (with its WAL) on drop.
pub(super) struct StoreFile(std::path::PathBuf);

impl StoreFile {
    fn new() -> Self {
        let file = Self(std::env::temp_dir().join(format!("{}.db", unique_name('-'))));
        // A run killed under the same process id (usual in containers) left its file behind;
        // its records would replay against this run's fresh provider double.
        file.remove();
        file
    }

    /// Removes the file and its WAL, if there are any.
    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for StoreFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A scenario's PostgreSQL schema: where it is and how to connect to it.
#[cfg(feature = "postgres")]
pub(super) struct PostgresSchema {
    url: String,
    /// `aip_conformance_<process id>_<n>_<process token>`.
    name: String,
    /// The suite's options, naming [`name`](Self::name) as their schema.
    options: aip_connector::store::PostgresOptions,
}

#[cfg(feature = "postgres")]
impl PostgresSchema {
    async fn drop_schema(&self) -> Result<(), StoreError> {
        aip_connector::store::PostgresStore::drop_schema_with(&self.url, self.options.clone()).await
    }
}
