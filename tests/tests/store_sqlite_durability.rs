//! `SqliteStore` across processes: a settled record survives its writer aborting, and every
//! transition stays atomic when several connections or processes share one file.
//!
//! The child processes are this test binary itself, re-run with `--exact <child test>` and an
//! environment variable that tells the child test to act; without the variable a child test
//! returns at once, so a normal run of the suite only runs the parents.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aip_connector::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId};
use aip_connector::model::{Action, ActionResult, ApprovalPolicy, IdempotencyKeyScope};
use aip_connector::store::{
    ApprovalRecord, ApprovalStatus, IdempotencyRecord, IdempotencyStore, Millis, Reservation,
    ReserveOutcome, ResumeClaim, SharedStore, SqliteStore, StoreError,
};
use aip_connector_tests::TempStoreFile;
use serde_json::json;

/// Set (to the store file) for `child_settles_then_aborts` to act.
const ABORT_CHILD_DB: &str = "AIP_STORE_TEST_ABORT_CHILD_DB";
/// Set (to the store file) for `child_races_reserves` to act.
const RACE_CHILD_DB: &str = "AIP_STORE_TEST_RACE_CHILD_DB";
/// Wall-clock millisecond at which racing children start, so their reserves overlap.
const RACE_START_MS: &str = "AIP_STORE_TEST_RACE_START_MS";
/// Printed by the aborting child once `settle` has returned.
const SETTLED_MARKER: &str = "store-durability-child: settled";
/// Prefix of the racing child's report line.
const RACE_REPORT: &str = "store-durability-race:";

/// A fixed "now"; these tests never rely on expiry.
const NOW: Millis = 1_000_000;
/// The key the aborting child settles.
const ABORT_KEY: &str = "Capability:cap:store:test:abort";
/// The key the racing children fight over.
const RACE_KEY: &str = "Capability:cap:store:test:race";
/// Reserves each racing child runs.
const RACE_RESERVES_PER_CHILD: usize = 100;

fn reservation(key: &str, token: &str) -> Reservation {
    Reservation {
        key: key.to_owned(),
        reservation_id: token.to_owned(),
        action_id: ActionId::trusted(format!("act_{token}")),
        tenant_id: None,
        input_hash: "hash-1".to_owned(),
        resume_pending: false,
        expires_at_ms: NOW + 60_000,
    }
}

fn completed(owner: &Reservation) -> IdempotencyRecord {
    IdempotencyRecord {
        key: owner.key.clone(),
        key_scope: IdempotencyKeyScope::Capability,
        action_id: owner.action_id.clone(),
        capability_id: CapabilityId::from("cap:store:test"),
        principal_id: PrincipalId::from("user:alice"),
        tenant_id: None,
        input_hash: owner.input_hash.clone(),
        result: ActionResult::completed(owner.action_id.clone(), json!({"booking": "b-42"})),
        created_at_ms: NOW,
        expires_at_ms: None,
    }
}

fn approved(id: &str) -> ApprovalRecord {
    ApprovalRecord {
        approval_id: ApprovalId::trusted(id),
        action: Action::new("cap:store:test", json!({"amount": 12})),
        input_retained: true,
        input_hash: "hash-1".to_owned(),
        capability_id: CapabilityId::from("cap:store:test"),
        requested_by: PrincipalId::from("user:alice"),
        tenant_id: None,
        policy: ApprovalPolicy::default(),
        policy_hash: "policy-hash".to_owned(),
        idempotency_key: None,
        status: ApprovalStatus::Approved,
        decisions: Vec::new(),
        created_at_ms: NOW,
        expires_at_ms: None,
        resumed: false,
        resumed_at_ms: None,
        resume_token: None,
        version: 0,
    }
}

/// Re-runs this test binary for the single test `child`, with `env` set, and waits for it.
async fn run_child(child: &'static str, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let binary = std::env::current_exe().expect("path of the test binary");
        Command::new(binary)
            .args(["--exact", child, "--nocapture", "--test-threads=1"])
            .envs(env)
            .output()
            .expect("run the child test process")
    })
    .await
    .expect("child runner task")
}

fn path_string(path: &Path) -> String {
    path.to_str().expect("temp paths are UTF-8 here").to_owned()
}

fn wall_clock_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Child: reserves and settles a record, then aborts before anything is closed or checkpointed.
#[tokio::test]
async fn child_settles_then_aborts() {
    let Some(path) = std::env::var_os(ABORT_CHILD_DB) else {
        return;
    };
    let store = SqliteStore::open(&path).expect("child opens the store");
    let owner = reservation(ABORT_KEY, "child");
    assert_eq!(
        store.reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    store
        .settle(&owner, completed(&owner))
        .await
        .expect("child settles");
    println!("{SETTLED_MARKER}");
    std::io::Write::flush(&mut std::io::stdout()).expect("flush the marker");
    std::process::abort();
}

/// A record settled by a process that then aborts is there when the file is reopened.
#[tokio::test]
async fn record_settled_by_an_aborting_child_survives() {
    let file = TempStoreFile::new("abort");
    let output = run_child(
        "child_settles_then_aborts",
        vec![(ABORT_CHILD_DB, path_string(file.path()))],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(SETTLED_MARKER),
        "the child did not reach its settle: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "the child must abort, not exit: {:?}",
        output.status
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(6), "SIGABRT");
    }
    // The child never closed its connection, so nothing was checkpointed: the record can
    // only come back from the write-ahead log it fsynced on commit.
    let wal_len = std::fs::metadata(file.sibling("-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(wal_len > 0, "the aborted child left no write-ahead log");

    let reopened = SqliteStore::open(file.path()).expect("parent reopens the store");
    let owner = reservation(ABORT_KEY, "child");
    assert_eq!(
        reopened.record(ABORT_KEY, NOW).await,
        Ok(Some(completed(&owner)))
    );
    let duplicate = reservation(ABORT_KEY, "parent");
    assert_eq!(
        reopened.reserve(&duplicate, NOW).await,
        Ok(ReserveOutcome::Settled(completed(&owner)))
    );
}

/// Child: waits for the agreed start, races reserves on one key and reports its tally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_races_reserves() {
    let Some(path) = std::env::var_os(RACE_CHILD_DB) else {
        return;
    };
    let start_ms: u128 = std::env::var(RACE_START_MS)
        .ok()
        .and_then(|value| value.parse().ok())
        .expect("the parent sets the start time");
    let wait = start_ms.saturating_sub(wall_clock_ms());
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;

    let store: SharedStore = Arc::new(SqliteStore::open(&path).expect("child opens the store"));
    let pid = std::process::id();
    let tasks: Vec<_> = (0..RACE_RESERVES_PER_CHILD)
        .map(|index| {
            let store = Arc::clone(&store);
            let claim = reservation(RACE_KEY, &format!("p{pid}-{index}"));
            tokio::spawn(async move { store.reserve(&claim, NOW).await })
        })
        .collect();
    let (mut acquired, mut in_progress) = (0, 0);
    for task in tasks {
        match task.await.expect("reserve task").expect("reserve") {
            ReserveOutcome::Acquired => acquired += 1,
            ReserveOutcome::InProgress(_) => in_progress += 1,
            ReserveOutcome::Settled(_) => panic!("nobody settles the race key"),
        }
    }
    println!("{RACE_REPORT} acquired={acquired} in_progress={in_progress}");
}

/// The tally a racing child printed: (acquired, in progress).
fn race_tally(output: &Output) -> (usize, usize) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "racing child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The harness prints `test child_races_reserves ... ` on the same line before the tally.
    let line = stdout
        .lines()
        .find_map(|line| line.split_once(RACE_REPORT).map(|(_, tally)| tally))
        .unwrap_or_else(|| panic!("racing child printed no tally: {stdout}"));
    let count = |name: &str| -> usize {
        line.split_whitespace()
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (count("acquired"), count("in_progress"))
}

/// Two processes racing reserves on one key through one file: exactly one owner in total.
#[tokio::test]
async fn two_processes_racing_on_one_key_admit_one_owner() {
    let file = TempStoreFile::new("race");
    // Create the schema up front so the children only race on the key.
    drop(SqliteStore::open(file.path()).expect("create the store"));
    let start = (wall_clock_ms() + 500).to_string();
    let env = || {
        vec![
            (RACE_CHILD_DB, path_string(file.path())),
            (RACE_START_MS, start.clone()),
        ]
    };
    let (first, second) = tokio::join!(
        run_child("child_races_reserves", env()),
        run_child("child_races_reserves", env())
    );
    let (first, second) = (race_tally(&first), race_tally(&second));
    assert_eq!(
        first.0 + second.0,
        1,
        "owners across both processes: {first:?} {second:?}"
    );
    assert_eq!(first.0 + first.1, RACE_RESERVES_PER_CHILD);
    assert_eq!(second.0 + second.1, RACE_RESERVES_PER_CHILD);
}

/// Two stores on one file (as two processes would have): 200 racing reserves split across
/// them give exactly one owner, and fencing and resume claims hold across connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_behave_as_one() {
    let file = TempStoreFile::new("two-stores");
    let stores: [SharedStore; 2] = [
        Arc::new(SqliteStore::open(file.path()).expect("open the first store")),
        Arc::new(SqliteStore::open(file.path()).expect("open the second store")),
    ];

    let tasks: Vec<_> = (0..200)
        .map(|index| {
            let store = Arc::clone(&stores[index % 2]);
            let claim = reservation(RACE_KEY, &format!("t{index}"));
            tokio::spawn(async move { (claim.clone(), store.reserve(&claim, NOW).await) })
        })
        .collect();
    let mut winners = Vec::new();
    let mut seen_owners = Vec::new();
    for task in tasks {
        match task.await.expect("reserve task") {
            (claim, Ok(ReserveOutcome::Acquired)) => winners.push(claim),
            (_, Ok(ReserveOutcome::InProgress(owner))) => seen_owners.push(owner),
            (claim, other) => panic!("{}: unexpected {other:?}", claim.reservation_id),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one owner across both stores");
    let winner = winners.remove(0);
    assert!(
        seen_owners.iter().all(|owner| *owner == winner),
        "everyone saw the one owner"
    );

    // Settled through one connection, replayed through the other.
    assert_eq!(stores[1].settle(&winner, completed(&winner)).await, Ok(()));
    assert_eq!(
        stores[0].record(RACE_KEY, NOW).await,
        Ok(Some(completed(&winner)))
    );

    // Taken over through one connection, the old owner is fenced through the other.
    let old = Reservation {
        expires_at_ms: NOW + 10,
        ..reservation("take-over", "old")
    };
    assert_eq!(
        stores[0].reserve(&old, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    let new = reservation("take-over", "new");
    assert_eq!(
        stores[1].reserve(&new, NOW + 10).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        stores[0].settle(&old, completed(&old)).await,
        Err(StoreError::Fenced)
    );
    assert_eq!(stores[0].renew(&old, NOW + 100_000).await, Ok(false));

    // 100 resume claims split across both: one winner.
    let request = approved("appr_two_stores");
    stores[0].insert_approval(&request).await.expect("insert");
    let claims: Vec<_> = (0..100)
        .map(|index| {
            let store = Arc::clone(&stores[index % 2]);
            let id = request.approval_id.clone();
            tokio::spawn(async move { store.claim_resume(&id, &ResumeClaim::new(1)).await })
        })
        .collect();
    let mut claimed = 0;
    for claim in claims {
        if claim.await.expect("claim task").expect("claim_resume") {
            claimed += 1;
        }
    }
    assert_eq!(claimed, 1);
    let stored = stores[1]
        .approval(&request.approval_id)
        .await
        .expect("read")
        .expect("exists");
    assert!(stored.resumed);
    assert_eq!(stored.version, 1);
}

/// Stores opened at once on a new file (replicas or workers starting together) all open: the
/// switch to WAL needs the file to itself, and SQLite answers a contended switch with
/// `SQLITE_BUSY` at once, without waiting out the busy timeout.
#[test]
fn stores_opened_at_once_on_a_new_file_all_open() {
    for round in 0..5 {
        let file = TempStoreFile::new(&format!("open-at-once-{round}"));
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            let openers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        SqliteStore::open(file.path()).map(drop)
                    })
                })
                .collect();
            for opener in openers {
                let opened = opener.join().expect("the opener does not panic");
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
        });
    }
}
