//! A scenario that panics fails its own check, and the rest of the run goes on: a connector
//! factory that cannot build a second connector for one provider makes `restart_reconnect`
//! (which builds a restarted process's connector) panic.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

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

#[connector(id = "once-directory")]
impl Directory {
    /// Looks a name up.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn a_panicking_scenario_fails_its_check_and_the_run_goes_on() {
    let built = Arc::new(Mutex::new(HashSet::new()));
    let report = ConformanceSuite::new(move |env| {
        let first = built.lock().unwrap().insert(env.provider_url().to_owned());
        assert!(
            first,
            "the connector cannot be built twice for one provider"
        );
        Directory
    })
    .run();
    let restart = report
        .check(&Scenario::RestartReconnect.check_name())
        .unwrap();
    assert_eq!(restart.status, CheckStatus::Failed, "{report}");
    assert!(
        restart
            .detail
            .starts_with("the scenario panicked: the connector cannot be built twice"),
        "{report}"
    );
    // The other scenarios ran.
    let schema = report
        .check(&Scenario::SchemaEnforcement.check_name())
        .unwrap();
    assert_eq!(schema.status, CheckStatus::Passed, "{report}");
}
