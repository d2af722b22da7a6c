//! A connector the scenarios' host refuses (here: an example that fails its input schema) fails
//! every required scenario with the host's reason, and does not take the report down: the
//! manifest checks still run and pass. Found by an author trial, where one misspelt example
//! made every `conformance_tests!` test panic with the same backtrace.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{CheckStatus, ConformanceSuite, Scenario};

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
