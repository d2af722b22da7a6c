//! `identity_credentials.tenant_isolated` exercises the shared key even when the first
//! capability with an example waits for approval and needs a credential: the first tenant's
//! call is approved and resumed, so a result is stored under the key, and the other tenant is
//! served by a deployment of its own tenant, so its call gets past its credential check to the
//! key. Before, such a connector passed the assertion without the key ever being looked up.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{CheckStatus, ConformanceSuite, Scenario};

#[derive(Deserialize, JsonSchema)]
struct Export {
    /// The customer segment to export.
    segment: String,
}

#[derive(Serialize, JsonSchema)]
struct Exported {
    /// How many customers the segment holds.
    customers: u32,
}

/// A customer directory whose export is high risk: approved by a data steward, with the
/// tenant's credential.
struct Directory;

#[connector(id = "directory")]
impl Directory {
    /// Export a customer segment.
    #[capability(
        id = "cap:directory:export",
        risk = high,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential, pii),
        credentials(scopes = ["customers.read"]),
        approval(
            reason = "exports personal data",
            selector = role("data-steward"),
            evidence = [reason],
        ),
        examples = [r#"{"segment": "enterprise"}"#],
    )]
    async fn export(
        &self,
        export: Export,
        _key: IdempotencyKey,
        _credential: Credential,
        _approval: Approval,
    ) -> Result<Exported, ConnectorFailure> {
        Ok(Exported {
            customers: u32::try_from(export.segment.len()).unwrap_or(u32::MAX),
        })
    }
}

#[test]
fn tenant_isolation_is_exercised_behind_approval_and_credentials() {
    let report = ConformanceSuite::new(|_env| Directory).run();
    eprintln!("{report}");
    let identity = report
        .check(&Scenario::IdentityCredentials.check_name())
        .unwrap();
    assert_eq!(identity.status, CheckStatus::Passed, "{report}");
    assert_eq!(
        identity.assertions.get("tenant_isolated"),
        Some(&true),
        "{report}"
    );
    assert!(
        !identity.detail.contains("not exercised"),
        "{}",
        identity.detail
    );
}
