//! The conformance suite against a well-behaved connector (every required check passes) and
//! against connectors that lie (exactly the matching check fails).

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{CheckStatus, ConformanceSuite, Scenario};
use serde_json::Value;

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// The record to read.
    id: String,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    id: String,
    name: String,
}

/// A read-only directory that behaves.
#[derive(Clone)]
struct Directory {
    client: ProviderClient,
}

#[connector(id = "directory")]
impl Directory {
    /// Look a record up.
    #[capability(
        id = "cap:directory:lookup",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"id": "rec-1"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        let answer: Value = self
            .client
            .get(&format!("/records/{}", lookup.id))
            .send_json()
            .await?;
        Ok(Found {
            id: lookup.id,
            name: answer["route"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

fn directory() -> ConformanceSuite {
    ConformanceSuite::new(|env| Directory {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
    })
}

#[test]
fn a_well_behaved_read_connector_passes_every_required_check() {
    let report = directory().run();
    assert!(report.passed(), "{report}");
    for scenario in [Scenario::IdentityCredentials, Scenario::SchemaEnforcement] {
        let check = report.check(&scenario.check_name()).unwrap();
        assert_eq!(check.status, CheckStatus::Passed, "{report}");
        assert!(!check.artifacts.is_empty());
        // What it ran on, in the data and in words (an author trial found only notes said).
        assert_eq!(check.exercised, ["cap:directory:lookup"], "{report}");
        assert!(
            check
                .detail
                .contains("held, handlers called: `cap:directory:lookup`"),
            "{}",
            check.detail
        );
    }
    // The manifest checks run no handler.
    assert!(
        report
            .check("connector.manifest")
            .unwrap()
            .exercised
            .is_empty(),
        "{report}"
    );
    // A read-only connector without approval, streaming or transactions needs none of those.
    for scenario in [
        Scenario::ApprovalLifecycle,
        Scenario::StreamingBackpressure,
        Scenario::TransactionLifecycle,
        Scenario::WebhookSecurity,
    ] {
        assert_eq!(
            report.check(&scenario.check_name()).unwrap().status,
            CheckStatus::NotApplicable,
            "{report}"
        );
    }
    // The summary `conformance_tests!` prints counts them and says why each did not apply.
    let summary = report.summary();
    let (counts, lines) = summary.split_once('\n').unwrap();
    let not_applicable = report
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::NotApplicable)
        .collect::<Vec<_>>();
    assert_eq!(
        counts,
        format!(
            "conformance of `directory`: {} passed, 0 failed, {} not applicable",
            report.checks.len() - not_applicable.len(),
            not_applicable.len()
        )
    );
    // Passing checks that could not exercise everything say so too, with their notes.
    let noted = report
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Passed && !c.notes.is_empty())
        .collect::<Vec<_>>();
    assert!(
        noted
            .iter()
            .any(|c| c.name == Scenario::AuditRedaction.check_name()),
        "{summary}"
    );
    assert_eq!(
        lines.lines().count(),
        not_applicable.len() + noted.len(),
        "{summary}"
    );
    for check in not_applicable {
        assert!(
            lines.contains(&format!("  n/a  {}: {}", check.name, check.detail)),
            "{summary}"
        );
    }
    for check in noted {
        assert!(
            lines.contains(&format!(
                "  pass {}: passed, noting: {}",
                check.name,
                check.notes.join("; ")
            )),
            "{summary}"
        );
        assert!(
            check.detail.ends_with(&check.notes.join("; ")),
            "{}",
            check.detail
        );
    }
}

/// The same directory, saying that its lookup leaves the host (`external_network`) and waiving
/// the mutating lint because the lookup changes nothing.
#[derive(Clone)]
struct NetworkDirectory {
    client: ProviderClient,
}

#[connector(id = "network-directory")]
impl NetworkDirectory {
    /// Look a record up at the provider.
    #[capability(
        id = "cap:network-directory:lookup",
        risk = low,
        side_effects = [read, external_network],
        execution(retry_safety = safe),
        data(sensitivity = internal),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "a lookup changes nothing at the provider"
        ),
        examples = [r#"{"id": "rec-1"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Directory {
            client: self.client.clone(),
        }
        .lookup(lookup)
        .await
    }
}

#[test]
fn a_network_lookup_whose_mutating_lint_is_waived_needs_no_reconcilable_write() {
    let report = ConformanceSuite::new(|env| NetworkDirectory {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
    })
    .run();
    assert!(report.passed(), "{report}");
    let errors = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_eq!(errors.status, CheckStatus::Passed, "{report}");
    assert!(
        errors
            .detail
            .contains("uncertain_outcome_reconciled holds vacuously"),
        "{}",
        errors.detail
    );
}

/// An output whose published schema says `count` is an integer, while its hand-written
/// `Serialize` sends a string: the schema the connector declares is not what it produces.
#[derive(JsonSchema)]
struct Counted {
    count: u32,
}

impl Serialize for Counted {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut state = serializer.serialize_struct("Counted", 1)?;
        state.serialize_field("count", &self.count.to_string())?;
        state.end()
    }
}

struct LyingCounter;

#[connector(id = "lying-counter")]
impl LyingCounter {
    /// Count records.
    #[capability(
        id = "cap:lying:count",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"id": "rec-1"}"#],
    )]
    async fn count(&self, _lookup: Lookup) -> Result<Counted, ConnectorFailure> {
        Ok(Counted { count: 3 })
    }
}

#[test]
fn a_connector_whose_output_does_not_match_its_schema_fails_schema_enforcement_only() {
    let report = ConformanceSuite::new(|_env| LyingCounter).run();
    let schema = report
        .check(&Scenario::SchemaEnforcement.check_name())
        .unwrap();
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        schema.assertions.get("declared_output_produced"),
        Some(&false)
    );
    assert!(
        schema.detail.contains("cap:lying:count"),
        "{}",
        schema.detail
    );
    assert!(!schema.artifacts.is_empty());
    // The lie is caught where it is, not everywhere.
    for name in [
        "connector.atomic_manifest_admission",
        "enterprise.capability_contract",
        "connector.behavior.identity_credentials",
    ] {
        assert!(report.check(name).unwrap().passed(), "{name}: {report}");
    }
}

/// A count whose output schema says `count` is an integer, and whose handler sends a string
/// for one kind of record only: the lie shows on the second declared example, not the first.
#[derive(Serialize, JsonSchema)]
struct Tallied {
    #[schemars(with = "u32")]
    count: Value,
}

struct SometimesLyingCounter;

#[connector(id = "sometimes-lying-counter")]
impl SometimesLyingCounter {
    /// Count records.
    #[capability(
        id = "cap:lying:tally",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"id": "rec-1"}"#, r#"{"id": "archived-1"}"#],
    )]
    async fn tally(&self, lookup: Lookup) -> Result<Tallied, ConnectorFailure> {
        let count = if lookup.id.starts_with("archived-") {
            Value::from("3")
        } else {
            Value::from(3)
        };
        Ok(Tallied { count })
    }
}

#[test]
fn an_output_that_breaks_its_schema_on_a_later_example_only_fails_schema_enforcement() {
    let report = ConformanceSuite::new(|_env| SometimesLyingCounter).run();
    let schema = report
        .check(&Scenario::SchemaEnforcement.check_name())
        .unwrap();
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        schema.assertions.get("declared_output_produced"),
        Some(&false)
    );
    assert!(
        schema
            .detail
            .contains("`cap:lying:tally` on its declared example #2 of 2 produced an output"),
        "{}",
        schema.detail
    );
}

/// A failed check panics with one problem per line, the failed assertions and the artifacts,
/// rather than one long line. A problem whose own sentence has a `;` stays on its line (an
/// author trial saw one cut in two).
#[test]
fn a_failed_check_panics_with_one_problem_per_line() {
    use aip_connector_testkit::conformance::{CheckResult, ConformanceReport, ConformanceStore};

    let report = ConformanceReport {
        connector_id: "directory".to_owned(),
        store: ConformanceStore::sqlite().describe().to_owned(),
        checks: vec![CheckResult {
            name: "connector.behavior.idempotency_duplicates".to_owned(),
            status: CheckStatus::Failed,
            detail: "duplicate_suppressed: two effects for one key; the key was sent twice\nthe evidence names no artifact"
                .to_owned(),
            assertions: [
                ("delivery_id_stable".to_owned(), true),
                ("duplicate_suppressed".to_owned(), false),
            ]
            .into(),
            artifacts: vec!["act_1".to_owned(), "req_2".to_owned()],
            notes: Vec::new(),
            waived: Vec::new(),
            exercised: Vec::new(),
        }],
    };
    let panicked = std::panic::catch_unwind(|| {
        report.assert_check("connector.behavior.idempotency_duplicates");
    })
    .expect_err("a failed check panics");
    let message = panicked
        .downcast_ref::<String>()
        .expect("a formatted message");
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "conformance check `connector.behavior.idempotency_duplicates` failed for connector `directory`:",
            "  - duplicate_suppressed: two effects for one key; the key was sent twice",
            "  - the evidence names no artifact",
            "failed assertions: duplicate_suppressed",
            "artifacts: act_1, req_2",
        ],
        "{message}"
    );
}

/// The manifest checks a deployment adds: a profile its gateway needs, and a boundary.
#[test]
fn a_deployment_s_required_profile_and_boundary_are_checked() {
    use aip_connector_testkit::conformance::ConnectorBoundary;
    let report = directory()
        .with_required_profile("aip.mcp.compat.v1")
        .with_connector_boundary(
            ConnectorBoundary::new("directory", "aip.native.http.v1", "cap:dir:")
                .require_binding_metadata("operation_id"),
        )
        .run();
    let profile_set = report.check("discovery.profile_set").unwrap();
    assert_eq!(profile_set.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        profile_set.detail,
        "missing required profile `aip.mcp.compat.v1` (at /profiles)"
    );
    let boundary = report.check("rfc0003.connector_boundary").unwrap();
    assert_eq!(boundary.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        boundary.detail,
        "capability `cap:directory:lookup` does not start with `cap:dir:` (at /capabilities/0/id)\n\
         capability `cap:directory:lookup` has no binding for `aip.native.http.v1` (at /capabilities/0/bindings)",
        "each problem says where in the manifest it is"
    );
    // The manifest's own checks still pass: only the deployment's requirements are unmet.
    for name in [
        "discovery.manifest",
        "discovery.profile_bindings",
        "connector.manifest",
    ] {
        assert_eq!(
            report.check(name).unwrap().status,
            CheckStatus::Passed,
            "{name}: {report}"
        );
    }
    // Without a boundary the check does not apply, and says how to set one.
    let plain = directory().run();
    let boundary = plain.check("rfc0003.connector_boundary").unwrap();
    assert_eq!(boundary.status, CheckStatus::NotApplicable);
    assert!(
        boundary.detail.contains("with_connector_boundary"),
        "{}",
        boundary.detail
    );
}

/// A capability without a doc comment.
struct Terse;

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[derive(Serialize, JsonSchema)]
struct Pong {
    ok: bool,
}

#[connector(id = "terse")]
impl Terse {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), examples = ["{}"])]
    async fn ping(&self, _input: Nothing) -> Result<Pong, ConnectorFailure> {
        Ok(Pong { ok: true })
    }
}

/// A capability without a description passes, with a note the summary shows: agents and MCP
/// clients see only its name.
#[test]
fn a_capability_without_a_description_is_noted() {
    let report = ConformanceSuite::new(|_env| Terse).run();
    let check = report.check("connector.manifest").unwrap();
    assert_eq!(check.status, CheckStatus::Passed, "{report}");
    assert!(
        check
            .notes
            .iter()
            .any(|n| n.contains("capability `cap:terse:ping` has no description")),
        "{:?}",
        check.notes
    );
    assert!(
        report
            .summary()
            .contains("pass connector.manifest: passed, noting: capability `cap:terse:ping`"),
        "{}",
        report.summary()
    );
}

/// Found by an author trial: a crate running the suite on SQLite and on PostgreSQL got one
/// report file, the last run's. The PostgreSQL run's file says so in its name, and a suite can
/// name its own.
#[test]
fn reports_of_one_connector_on_two_stores_or_names_keep_apart() {
    use aip_connector_testkit::conformance::{ConformanceReport, ConformanceStore};

    let dir = std::env::temp_dir().join(format!("aip-conformance-names-{}", std::process::id()));
    let report = ConformanceReport {
        connector_id: "directory.v2".to_owned(),
        store: ConformanceStore::sqlite().describe().to_owned(),
        checks: Vec::new(),
    };
    let on_sqlite = directory().write_report(&report, &dir).unwrap();
    assert_eq!(on_sqlite, dir.join("directory_v2.json"));
    // The report's own `write_to` keeps naming the file after the connector.
    assert_eq!(report.write_to(&dir).unwrap(), on_sqlite);
    let named = directory()
        .with_report_name("directory: account 2")
        .write_report(&report, &dir)
        .unwrap();
    assert_eq!(named, dir.join("directory__account_2.json"));
    let blank = directory()
        .with_report_name(" ")
        .write_report(&report, &dir);
    assert_eq!(blank.unwrap(), on_sqlite);
    #[cfg(feature = "postgres")]
    {
        let on_postgres =
            || directory().with_store(ConformanceStore::postgres("postgres://127.0.0.1:9/none"));
        let written = on_postgres().write_report(&report, &dir).unwrap();
        assert_eq!(written, dir.join("directory_v2.postgres.json"));
        // A named suite keeps its store's suffix.
        let named = on_postgres()
            .with_report_name("directory: account 2")
            .write_report(&report, &dir)
            .unwrap();
        assert_eq!(named, dir.join("directory__account_2.postgres.json"));
    }
    let written = std::fs::read_to_string(&named).unwrap();
    assert_eq!(written, report.to_json_pretty() + "\n");
    // The value is the same report, for a tool that reads fields instead of text.
    let parsed: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(report.to_json(), parsed);
    assert_eq!(report.to_json()["connector_id"], "directory.v2");
    std::fs::remove_dir_all(&dir).unwrap();
}
