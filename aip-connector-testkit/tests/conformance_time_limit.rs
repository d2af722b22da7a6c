//! A scenario that runs past `ConformanceSuite::with_scenario_time_limit` fails as stuck instead
//! of holding the test run for as long as the host lets each of its calls wait.

use std::time::{Duration, Instant};

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

/// A directory whose lookups take far longer than the limit the test sets.
struct SlowDirectory;

#[connector(id = "slow-directory")]
impl SlowDirectory {
    /// Looks a name up, slowly.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn a_scenario_past_its_time_limit_fails_as_stuck() {
    let limit = Duration::from_millis(400);
    let started = Instant::now();
    let report = ConformanceSuite::new(|_| SlowDirectory)
        .with_scenario_time_limit(limit)
        .run();
    // Every scenario stopped at the limit instead of waiting out the 30 s handlers.
    assert!(started.elapsed() < Duration::from_secs(25), "{report}");
    let schema = report
        .check(&Scenario::SchemaEnforcement.check_name())
        .unwrap();
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
    assert!(
        schema.detail.contains("did not finish within 400ms"),
        "{report}"
    );
    assert!(schema.assertions.is_empty(), "{report}");
    // The static checks do not depend on time.
    assert!(
        report
            .check("connector.atomic_manifest_admission")
            .unwrap()
            .passed(),
        "{report}"
    );
}
