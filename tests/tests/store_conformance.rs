//! The store conformance suite ([`aip_connector_tests::store_conformance`]) against the memory
//! and SQLite backends: one test per check and backend (`memory::*`, `sqlite::*`). The
//! PostgreSQL backend runs the same checks in `store_postgres.rs`.
//!
//! A few checks race many tasks on a multi-thread runtime; the plan-claim race also runs across
//! two SQLite stores opened on one file.

use std::sync::Arc;

use aip_connector::store::{MemoryStore, SharedStore};
use aip_connector_tests::TempStoreFile;
use aip_connector_tests::store_conformance::race_plan_claims;

/// A fresh in-memory store.
fn memory_store() -> SharedStore {
    Arc::new(MemoryStore::new())
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
                    let file = aip_connector_tests::TempStoreFile::new(stringify!($check));
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
