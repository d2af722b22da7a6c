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
    }
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
}
