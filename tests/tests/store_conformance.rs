//! The store conformance suite ([`aip_connector_tests::store_conformance`]) against the memory
//! and SQLite backends: one test per check and backend (`memory::*`, `sqlite::*`). The
//! PostgreSQL backend runs the same checks in `store_postgres.rs`.
//!
//! A few checks race many tasks on a multi-thread runtime; the plan-claim race also runs across
//! two SQLite stores opened on one file.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::store::{MemoryStore, SharedStore, SqliteStore};
use aip_connector_tests::store_conformance::race_plan_claims;

/// A fresh in-memory store.
fn memory_store() -> SharedStore {
    Arc::new(MemoryStore::new())
}

/// A store file in the temp dir, removed (with its WAL and shared-memory files) on drop.
struct TempStoreFile(PathBuf);

impl TempStoreFile {
    fn new(check: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!(
            "aip-store-conformance-{}-{unique}-{check}.db",
            std::process::id()
        )))
    }

    fn open(&self) -> SharedStore {
        Arc::new(SqliteStore::open(&self.0).expect("open the SQLite store"))
    }
}

impl Drop for TempStoreFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs every check against a fresh memory store and a fresh SQLite file, one test per pair.
macro_rules! memory_and_sqlite {
    ($($check:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    aip_connector_tests::store_conformance::$check(super::memory_store()).await;
                }
            )+
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let file = super::TempStoreFile::new(stringify!($check));
                    aip_connector_tests::store_conformance::$check(file.open()).await;
                }
            )+
        }
    };
}

aip_connector_tests::for_each_store_check!(memory_and_sqlite);

/// The plan-claim race across two stores (two connections) on one SQLite file: the file, not
/// a connection's lock, must decide the winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_plan_claims_race_across_two_stores_on_one_file() {
    let file = TempStoreFile::new("plan_claims_two_stores");
    let stores = [file.open(), file.open()];
    race_plan_claims(&stores, "race", 200).await;
}
