//! The store conformance suite ([`aip_connector_testkit::store_conformance`]) against the
//! memory and SQLite backends: one test per check and backend. Memory runs through the published
//! `store_conformance_tests!`, as a store of one's own would (`memory::store_conformance::*`);
//! SQLite through a runner of its own (`sqlite::*`, `sqlite_replicas::*`), which keeps each
//! test's file until the test ends and races two stores opened on one file as replicas. The
//! PostgreSQL backend runs the same checks in `store_postgres.rs`.

use std::sync::Arc;

use aip_connector::store::MemoryStore;
use aip_connector_testkit::store_conformance::race_plan_claims;
use aip_connector_tests::TempStoreFile;

mod memory {
    use super::*;

    aip_connector_testkit::store_conformance_tests! {
        fresh_store = Arc::new(MemoryStore::new()),
    }
}

/// Runs every check against a fresh SQLite file, one test per check.
macro_rules! sqlite {
    ($($check:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let file = aip_connector_tests::TempStoreFile::new(stringify!($check));
                    aip_connector_testkit::store_conformance::$check(file.open()).await;
                }
            )+
        }
    };
}

aip_connector_testkit::for_each_store_check!(sqlite);

/// Runs every cross-replica check against two stores (two connections) on one fresh SQLite
/// file: the file, not a connection's lock, must decide each race.
macro_rules! sqlite_replicas {
    ($($check:ident),+ $(,)?) => {
        mod sqlite_replicas {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let file = aip_connector_tests::TempStoreFile::new(stringify!($check));
                    aip_connector_testkit::store_conformance::$check(vec![file.open(), file.open()])
                        .await;
                }
            )+
        }
    };
}

aip_connector_testkit::for_each_replica_check!(sqlite_replicas);

/// The plan-claim race across two stores (two connections) on one SQLite file: the file, not
/// a connection's lock, must decide the winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_plan_claims_race_across_two_stores_on_one_file() {
    let file = TempStoreFile::new("plan_claims_two_stores");
    let stores = [file.open(), file.open()];
    race_plan_claims(&stores, "race", 200).await;
}

/// The cross-replica checks can fail: two memory stores share no state, so both "replicas"
/// grant the key, and the check says so.
#[test]
#[should_panic(expected = "exactly one reserve must acquire")]
fn replica_checks_fail_for_stores_that_share_no_state() {
    let unshared: Vec<aip_connector::store::SharedStore> =
        vec![Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new())];
    aip_connector_testkit::store_conformance::run_check(
        aip_connector_testkit::store_conformance::check_replicas_race_reserve_of_a_fresh_key(
            unshared,
        ),
    );
}

/// A race across replicas given one store is a mistake in the test, not a pass.
#[test]
#[should_panic(expected = "needs at least two stores")]
fn replica_checks_refuse_a_single_store() {
    aip_connector_testkit::store_conformance::run_check(
        aip_connector_testkit::store_conformance::check_replicas_race_plan_claims(vec![Arc::new(
            MemoryStore::new(),
        )]),
    );
}

/// One store passed twice is not two replicas.
#[test]
#[should_panic(expected = "are the same store")]
fn replica_checks_refuse_one_store_passed_twice() {
    let store: aip_connector::store::SharedStore = Arc::new(MemoryStore::new());
    aip_connector_testkit::store_conformance::run_check(
        aip_connector_testkit::store_conformance::check_replicas_race_take_over(vec![
            Arc::clone(&store),
            store,
        ]),
    );
}
