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
    // Under `scope = tenant` the tenants' keys differ by construction; the detail says so.
    assert!(
        identity.detail.contains(
            "(tenant_isolated by the key scope: `cap:directory:export` declares `scope = tenant`"
        ),
        "{}",
        identity.detail
    );
}

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// The name looked up.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    /// The name found.
    name: String,
}

/// The reviewer's repro: a lookup whose credential is optional. The host resolves the
/// deployment's credential for it all the same, so the other tenant must be served by a
/// deployment of its own, or its call is refused at the credential check
/// (`credential.tenant_mismatch`) and `tenant_isolated` was reported as not exercised.
struct OptionalCred;

#[connector(id = "optcred")]
impl OptionalCred {
    /// Looks a name up; a credential is used when the deployment has one.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(optional, scopes = ["dir.read"]),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn an_optional_credential_does_not_stop_tenant_isolation() {
    let report = ConformanceSuite::new(|_env| OptionalCred).run();
    eprintln!("{}", report.summary());
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
        !identity.detail.contains("not exercised") && !identity.detail.contains("credential."),
        "{}",
        identity.detail
    );
}

/// A plain read first, then a lookup whose credential is optional and which declares no
/// example. The host hands the credential to optional-credential handlers too, so
/// `credential_handle_opaque` must call this one (and says it cannot, lacking an example)
/// rather than skip it: a handler that leaked an optional credential went unchecked.
struct OptionalLater;

#[connector(id = "optlater")]
impl OptionalLater {
    /// Looks a name up without a credential.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn plain(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }

    /// Looks a name up, with the deployment's credential when it has one.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(optional, scopes = ["dir.read"]),
    )]
    async fn signed(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn an_optional_credential_capability_is_called_for_credential_opacity() {
    let report = ConformanceSuite::new(|_env| OptionalLater).run();
    eprintln!("{}", report.summary());
    let identity = report
        .check(&Scenario::IdentityCredentials.check_name())
        .unwrap();
    assert_eq!(identity.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        identity.assertions.get("credential_handle_opaque"),
        Some(&false),
        "{report}"
    );
    assert!(
        identity.detail.contains(
            "credential_handle_opaque: not exercised: `cap:optlater:signed` takes a credential but declares no example input"
        ),
        "{}",
        identity.detail
    );
}

/// A keyed write whose keys are scoped to the action.
struct ActionScoped;

#[connector(id = "actionscoped")]
impl ActionScoped {
    /// Records a name.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = action),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn record(
        &self,
        lookup: Lookup,
        _key: IdempotencyKey,
    ) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

/// Under `scope = action` the key is partitioned by the action id: a fresh action for the other
/// tenant would be another key, and `tenant_isolated` true by construction. The other tenant
/// sends the same action, so its call meets the first tenant's record (the host's tenant guard
/// refuses it): the check rests on two actions, the forged call and the one both tenants sent.
#[test]
fn under_action_scope_the_other_tenant_sends_the_same_action() {
    let report = ConformanceSuite::new(|_env| ActionScoped).run();
    eprintln!("{}", report.summary());
    let identity = report
        .check(&Scenario::IdentityCredentials.check_name())
        .unwrap();
    assert_eq!(identity.status, CheckStatus::Passed, "{report}");
    assert_eq!(identity.assertions.get("tenant_isolated"), Some(&true));
    let actions = identity
        .artifacts
        .iter()
        .filter(|a| a.starts_with("action:"))
        .count();
    assert_eq!(actions, 2, "{:?}", identity.artifacts);
    assert!(
        !identity.detail.contains("by the key scope"),
        "{}",
        identity.detail
    );
}

/// Two lookups: `busy`, declared first, always answers a temporary failure (stored under no
/// key: the next call may succeed), and `ready` completes.
struct BusyFirst;

#[connector(id = "busyfirst")]
impl BusyFirst {
    /// Looks a name up, but the directory is always busy.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn busy(&self, _lookup: Lookup, _key: IdempotencyKey) -> Result<Found, ConnectorFailure> {
        Err(ConnectorFailure::temporary(
            "directory.busy",
            "the directory is busy",
            "directory",
        ))
    }

    /// Looks a name up.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn ready(&self, lookup: Lookup, _key: IdempotencyKey) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

/// `tenant_isolated` tries the capabilities in order until one leaves a result under the shared
/// key: the first one's temporary failure stores nothing, and the second one exercises it.
#[test]
fn tenant_isolation_uses_the_first_capability_that_leaves_a_result() {
    let report = ConformanceSuite::new(|_env| BusyFirst).run();
    eprintln!("{}", report.summary());
    let identity = report
        .check(&Scenario::IdentityCredentials.check_name())
        .unwrap();
    assert_eq!(identity.status, CheckStatus::Passed, "{report}");
    assert_eq!(identity.assertions.get("tenant_isolated"), Some(&true));
    assert!(
        identity
            .detail
            .contains("`cap:busyfirst:ready` declares `scope = tenant`"),
        "{}",
        identity.detail
    );
}
