//! The README's demo, run twice against one SQLite file: the second run must find the first
//! run's booking in the file (its plan and commit replay from the store, the provider receives
//! nothing for them) and still show every step.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::codes;
use aip_connector::model::TransactionProtocolStatus;
use aip_connector_examples::demo::{self, DemoConfig, DemoReport};

/// A fresh file under the system's temporary directory, removed (with its WAL files) on drop.
struct TempStore(PathBuf);

impl TempStore {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "aip-demo-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        Self(dir.join("demo.db"))
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn run(store: &TempStore) -> (DemoReport, String) {
    let mut out = Vec::new();
    let report = demo::run(
        &DemoConfig {
            store_path: store.0.clone(),
        },
        &mut out,
    )
    .await
    .unwrap_or_else(|error| panic!("the demo failed: {error}"));
    (
        report,
        String::from_utf8(out).expect("the narrative is UTF-8"),
    )
}

fn rows(report: &[(String, u64)], table: &str) -> u64 {
    report
        .iter()
        .find(|(name, _)| name == table)
        .map(|(_, n)| *n)
        .unwrap()
}

/// What every run shows, first or not.
fn assert_every_step(report: &DemoReport, narrative: &str) {
    assert_eq!(
        report.capabilities,
        ["cap:calendar:booking:create", "cap:calendar:booking:get"]
    );
    assert!(
        narrative
            .contains("cap:calendar:booking:create: risk medium · effects write, external_network")
    );
    assert!(
        narrative.contains("transactions execute, plan, commit, reconcile (commit needs a plan)")
    );

    assert_eq!(report.booking.status, TransactionProtocolStatus::Committed);
    assert!(report.booking.committed_at_ms.is_some());

    assert!(report.replay.idempotent_replay, "{narrative}");
    assert_eq!(report.replay.booking_id, report.booking.booking_id);
    assert_eq!(report.replay.provider_requests, 0);

    let uncertain = &report.uncertain;
    assert_eq!(uncertain.error_code, "provider.outcome_unknown");
    assert_eq!(
        uncertain.status_after_failure,
        TransactionProtocolStatus::OutcomeUnknown
    );
    assert_eq!(
        uncertain.retry_refusal_code,
        codes::TRANSACTION_RECONCILIATION_REQUIRED
    );
    assert!(uncertain.committed_at_provider);
    assert_eq!(
        uncertain.final_status,
        TransactionProtocolStatus::Reconciled
    );
    assert_eq!(uncertain.provider_effects, 1, "booked once, never twice");

    assert!(
        narrative.contains(
            &report
                .store_path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string()
        )
    );
    assert!(narrative.contains("5. Where the state lives"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_finds_the_first_runs_state_in_the_file() {
    let store = TempStore::new();

    let (first, narrative) = run(&store).await;
    assert_every_step(&first, &narrative);
    assert!(
        narrative.contains("a new file: nothing from earlier runs"),
        "{narrative}"
    );
    assert!(first.rows_before.iter().all(|(_, n)| *n == 0));
    assert!(!first.booking.from_earlier_run);
    assert_eq!(first.booking.provider_requests, 1, "one booking request");
    assert!(
        narrative.contains("says the provider has it: confirmed"),
        "{narrative}"
    );
    // The plan/commit transaction and the reconciled one.
    assert_eq!(rows(&first.rows_after, "transactions"), 2);

    let (second, narrative) = run(&store).await;
    assert_every_step(&second, &narrative);
    assert_eq!(
        second.rows_before, first.rows_after,
        "the file is where the state lives"
    );
    assert!(
        narrative.contains("holds 2 transactions"),
        "the second run reports the first run's state: {narrative}"
    );
    assert!(second.booking.from_earlier_run, "{narrative}");
    assert_eq!(second.booking.transaction_id, first.booking.transaction_id);
    assert_eq!(second.booking.plan_id, first.booking.plan_id);
    assert_eq!(second.booking.booking_id, first.booking.booking_id);
    assert_eq!(
        second.booking.committed_at_ms,
        first.booking.committed_at_ms
    );
    assert_eq!(
        second.booking.provider_requests, 0,
        "the first run's booking is replayed, not made again"
    );
    assert!(narrative.contains("replayed from the store"), "{narrative}");
    // Only the second run's uncertain booking was added.
    assert_eq!(rows(&second.rows_after, "transactions"), 3);
    assert_ne!(
        second.uncertain.transaction_id,
        first.uncertain.transaction_id
    );
}

#[test]
fn the_store_path_comes_from_the_argument_then_the_environment_then_the_target_dir() {
    let from_arg = DemoConfig::from_args(["my.db".to_owned()].into_iter());
    assert_eq!(from_arg.store_path, PathBuf::from("my.db"));
    let default = demo::default_store_path();
    assert!(
        default.ends_with("aip-demo/demo.db"),
        "{}",
        default.display()
    );
    // Without an argument and without the variable, the default applies. (The variable is not
    // set here: setting it would race with other tests of this binary.)
    if std::env::var_os(demo::STORE_ENV).is_none() {
        assert_eq!(
            DemoConfig::from_args(std::iter::empty()).store_path,
            default
        );
    }
}
