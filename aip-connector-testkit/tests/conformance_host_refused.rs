//! A connector the scenarios' host refuses (here: an example that fails its input schema) fails
//! every required scenario with the host's reason, and does not take the report down: the
//! manifest checks still run and pass. Found by an author trial, where one misspelt example
//! made every `conformance_tests!` test panic with the same backtrace.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckResult, CheckStatus, ConformanceReport, ConformanceStore, ConformanceSuite, Scenario,
};

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// What to look up.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    name: String,
}

struct Directory;

#[connector(id = "misexampled-directory")]
impl Directory {
    /// Looks a name up.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"nmae": "ada"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn a_refused_connector_fails_its_scenarios_with_the_reason_and_keeps_the_manifest_checks() {
    let report = ConformanceSuite::new(|_| Directory).run();
    for scenario in [Scenario::SchemaEnforcement, Scenario::IdentityCredentials] {
        let check = report.check(&scenario.check_name()).unwrap();
        assert_eq!(check.status, CheckStatus::Failed, "{report}");
        assert!(
            check.detail.contains("refused the connector")
                && check
                    .detail
                    .contains("example 0 of capability `cap:misexampled-directory:lookup`")
                && check
                    .detail
                    .contains("\"name\" is a required property (at the root)"),
            "{}",
            check.detail
        );
    }
    for passing in ["discovery.manifest", "connector.manifest"] {
        assert!(report.check(passing).unwrap().passed(), "{report}");
    }
    // Not required by this manifest, so not run and not failed.
    assert_eq!(
        report
            .check(&Scenario::ApprovalLifecycle.check_name())
            .unwrap()
            .status,
        CheckStatus::NotApplicable
    );
}

/// The summary says once what stopped the scenarios, with how many it stopped, instead of the
/// same line per check (an author trial's invalid example printed it ten times); each check
/// keeps the reason in its detail.
#[test]
fn the_summary_says_once_what_stopped_the_scenarios() {
    let report = ConformanceSuite::new(|_| Directory).run();
    let stopped: Vec<&CheckResult> = report
        .checks
        .iter()
        .filter(|c| c.detail.starts_with("not run: "))
        .collect();
    // Every scenario a manifest with a capability requires.
    assert_eq!(stopped.len(), 5, "{report}");
    let summary = report.summary();
    assert_eq!(summary.matches("not run: ").count(), 1, "{summary}");
    let line = summary
        .lines()
        .find(|line| line.contains("not run: "))
        .unwrap();
    assert_eq!(
        line,
        format!(
            "  FAIL 5 checks not run: {} (identity_credentials, schema_enforcement, errors_uncertain_outcomes, audit_redaction, restart_reconnect)",
            &stopped[0].detail["not run: ".len()..]
        ),
        "{summary}"
    );
    assert!(
        summary.starts_with(
            "conformance of `misexampled-directory`: 6 passed, 5 failed, 8 not applicable\n"
        ),
        "{summary}"
    );
}

/// Reasons of one kind share a line, naming the checks, and say when their texts differ (a
/// store names each scenario's file); a reason that stopped one check keeps its own, under the
/// check's name.
#[test]
fn the_summary_collapses_identical_reasons_only() {
    let failed = |name: &str, detail: &str| CheckResult {
        name: name.to_owned(),
        status: CheckStatus::Failed,
        detail: detail.to_owned(),
        assertions: Default::default(),
        artifacts: Vec::new(),
        notes: Vec::new(),
        waived: Vec::new(),
        exercised: Vec::new(),
    };
    let report = ConformanceReport {
        connector_id: "directory".to_owned(),
        store: ConformanceStore::sqlite().describe().to_owned(),
        checks: vec![
            failed(
                "connector.behavior.a",
                "not run: the store did not open: open /tmp/x-0.db: denied",
            ),
            failed("connector.behavior.b", "a assertion failed"),
            failed(
                "connector.behavior.c",
                "not run: the store did not open: open /tmp/x-1.db: denied",
            ),
            failed(
                "connector.behavior.d",
                "not run: the host refused it\nsecond line",
            ),
            failed(
                "connector.behavior.e",
                "not run: the store did not open: open /tmp/x-2.db: denied",
            ),
        ],
    };
    assert_eq!(
        report.summary(),
        "conformance of `directory`: 0 passed, 5 failed, 0 not applicable\n\
         \x20 FAIL 3 checks not run: the store did not open: open /tmp/x-0.db: denied (and 2 more like it: each check's detail has its own) (a, c, e)\n\
         \x20 FAIL connector.behavior.b: a assertion failed\n\
         \x20 FAIL connector.behavior.d: not run: the host refused it\n\
         \x20     second line\n"
    );
}
