//! The conformance suite on the deployment's store: the calendar (plan/commit, compensation,
//! cancellation) and payments (required scoped keys, approval, redaction) examples with every
//! scenario's host on a PostgreSQL schema of its own (`ConformanceStore::postgres`), as replicas
//! sharing one database would run them. Each schema is dropped when its scenario ends.
//!
//! Needs a PostgreSQL server: `AIP_TEST_POSTGRES_URL` names it (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Without it each test says it was skipped and
//! passes.

use aip_connector_examples::calendar::Calendar;
use aip_connector_examples::loopback_client;
use aip_connector_examples::payments::Payments;
use aip_connector_testkit::conformance::{ConformanceReport, ConformanceStore, ConformanceSuite};

/// The variable that names the test server.
const URL_VARIABLE: &str = "AIP_TEST_POSTGRES_URL";

fn server() -> Option<String> {
    let url = std::env::var(URL_VARIABLE)
        .ok()
        .filter(|url| !url.is_empty());
    if url.is_none() {
        println!("skipped: {URL_VARIABLE} is not set (CI sets it; see .ci/run)");
    }
    url
}

/// The conformance schemas this process left in the database: none once every scenario ended.
async fn schemas_left(url: &str) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the test server accepts a connection");
    tokio::spawn(connection);
    let prefix = format!("aip_conformance_{}_%", std::process::id());
    client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE $1",
            &[&prefix],
        )
        .await
        .expect("the catalogue is readable")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn assert_passed_on_postgres(report: &ConformanceReport) {
    assert!(report.passed(), "{}", report.summary());
    // The summary says where the scenarios ran.
    assert!(
        report.summary().starts_with(&format!(
            "conformance of `{}` on PostgreSQL (a schema per scenario): ",
            report.connector_id
        )),
        "{}",
        report.summary()
    );
    assert_eq!(
        report.store,
        ConformanceStore::postgres("unused").describe()
    );
    // Every scenario of these manifests ran: on PostgreSQL, not skipped.
    let executed = report
        .checks
        .iter()
        .filter(|c| c.name.starts_with("connector.behavior.") && !c.assertions.is_empty())
        .count();
    assert!(executed >= 8, "only {executed} scenarios ran: {report}");
}

/// One test, so that no other suite of this process is still creating schemas when the
/// leftovers are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_and_payments_pass_conformance_on_postgres_and_leave_no_schema() {
    let Some(url) = server() else { return };
    let calendar = ConformanceSuite::new(|env| {
        Calendar::new(loopback_client(env.provider_url(), "calendar").expect("a valid URL"))
    })
    .with_store(ConformanceStore::postgres(url.clone()))
    .run();
    assert_passed_on_postgres(&calendar);
    assert!(
        calendar
            .check("connector.behavior.transaction_lifecycle")
            .is_some_and(|c| c.passed() && !c.assertions.is_empty()),
        "{calendar}"
    );
    let payments = ConformanceSuite::new(|env| {
        Payments::new(loopback_client(env.provider_url(), "payments").expect("a valid URL"))
    })
    .with_store(ConformanceStore::postgres(url.clone()))
    .run();
    assert_passed_on_postgres(&payments);
    assert!(
        payments
            .check("connector.behavior.idempotency_duplicates")
            .is_some_and(|c| c.passed() && !c.assertions.is_empty()),
        "{payments}"
    );
    // A scenario that panics (here the restart's second connector) fails its check, and its
    // schema is dropped all the same.
    let built = std::sync::Mutex::new(std::collections::HashSet::new());
    let panicking = ConformanceSuite::new(move |env| {
        let first = built.lock().unwrap().insert(env.provider_url().to_owned());
        assert!(first, "built twice for one provider");
        Payments::new(loopback_client(env.provider_url(), "payments").expect("a valid URL"))
    })
    .with_store(ConformanceStore::postgres(url.clone()))
    .run();
    let restart = panicking
        .check("connector.behavior.restart_reconnect")
        .expect("reported");
    assert!(
        restart.detail.starts_with("the scenario panicked"),
        "{panicking}"
    );
    assert_eq!(schemas_left(&url).await, Vec::<String>::new());
}

/// A server that is not there fails every scenario with the store's error, names no password,
/// and still runs the manifest checks.
#[test]
fn an_unreachable_database_fails_the_scenarios_saying_so() {
    let report = ConformanceSuite::new(|env| {
        Payments::new(loopback_client(env.provider_url(), "payments").expect("a valid URL"))
    })
    .with_store(ConformanceStore::postgres(
        "postgres://aip:hunter2-not-a-real-password@127.0.0.1:9/none?connect_timeout=2",
    ))
    .run();
    assert!(!report.passed());
    let scenario = report
        .check("connector.behavior.schema_enforcement")
        .expect("the scenario is reported");
    assert!(
        scenario
            .detail
            .starts_with("not run: the scenario's store did not open:"),
        "{}",
        scenario.detail
    );
    assert!(
        !report.to_json_pretty().contains("hunter2"),
        "{}",
        report.to_json_pretty()
    );
    assert!(
        report
            .check("connector.atomic_manifest_admission")
            .is_some_and(|c| c.passed()),
        "{report}"
    );
}
