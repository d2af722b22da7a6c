//! Who is calling, and what the deployment vouches for. Neither comes from the action payload.

use std::sync::Arc;

use aip_connector_core::ids::PrincipalId;
use aip_connector_core::model::{Capability, ConnectorFailure, ExternalAccountRef, Principal};

use crate::invocation::{BoxFuture, CredentialHandle, VerifiedTenant};

/// The caller as the transport authenticated it. Payload identity (`Action.identity`) is never
/// trusted: the host overwrites it from this context and the deployment.
///
/// Build one with [`TrustedContext::new`] and the `with_*` methods (new fields may come in
/// minor versions); the fields stay public to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustedContext {
    /// The authenticated principal.
    pub principal: Principal,
    /// Who vouched for it (token issuer, mTLS CA, ...).
    pub issuer: String,
    /// The tenant the transport verified, if any (else the deployment's tenant applies).
    pub tenant: Option<VerifiedTenant>,
    /// The operator acting for the principal, if the transport says so (separation of duties).
    pub operator: Option<PrincipalId>,
    /// Trace id from the transport; recorded on the host's `aip.invoke` span.
    pub trace_id: Option<String>,
}

impl TrustedContext {
    /// A context for `principal`, vouched for by `issuer`, with nothing else.
    pub fn new(principal: Principal, issuer: impl Into<String>) -> Self {
        Self {
            principal,
            issuer: issuer.into(),
            tenant: None,
            operator: None,
            trace_id: None,
        }
    }

    /// Sets the verified tenant.
    pub fn with_tenant(mut self, tenant: VerifiedTenant) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// Sets the operator.
    pub fn with_operator(mut self, operator: PrincipalId) -> Self {
        self.operator = Some(operator);
        self
    }

    /// Sets the trace id.
    pub fn with_trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }
}

/// Resolves the credential a capability needs, from the deployment's secret store.
pub trait CredentialProvider: Send + Sync {
    /// The credential for `capability` on behalf of `caller`, or `None` when there is none.
    fn resolve<'a>(
        &'a self,
        capability: &'a Capability,
        caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>>;
}

/// A provider that always returns the same credential (tests, single-account deployments).
#[derive(Clone, Debug)]
pub struct StaticCredentialProvider(pub CredentialHandle);

impl StaticCredentialProvider {
    /// A provider that answers every call with `handle`.
    ///
    /// ```
    /// use aip_connector::host::StaticCredentialProvider;
    /// use aip_connector::{CredentialHandle, Secret};
    ///
    /// let provider = StaticCredentialProvider::new(
    ///     CredentialHandle::new("cred-1", "vault", Secret::new("tok_test")).with_scopes(["invoices:read"]),
    /// );
    /// assert_eq!(provider.0.scopes, ["invoices:read"]);
    /// ```
    pub fn new(handle: CredentialHandle) -> Self {
        Self(handle)
    }
}

impl CredentialProvider for StaticCredentialProvider {
    fn resolve<'a>(
        &'a self,
        _capability: &'a Capability,
        _caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>> {
        Box::pin(std::future::ready(Ok(Some(self.0.clone()))))
    }
}

/// What the deployment itself vouches for: its tenant, its external account and where its
/// credentials come from. Tenant- and account-scoped idempotency keys are built from these.
///
/// Build one with [`Deployment::new`] (or `default()`) and the `with_*` methods (new fields may
/// come in minor versions); the fields stay public to read.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Deployment {
    /// The tenant this host serves, when it serves one.
    pub tenant: Option<VerifiedTenant>,
    /// The external account the connector acts as.
    pub external_account: Option<ExternalAccountRef>,
    /// The credential provider.
    pub credentials: Option<Arc<dyn CredentialProvider>>,
}

impl Deployment {
    /// Vouches for nothing yet: no tenant, no external account, no credentials.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `tenant`: callers whose transport verified no tenant act for it, and tenant-scoped
    /// keys and approvals are partitioned by it.
    pub fn with_tenant(mut self, tenant: VerifiedTenant) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// Acts as `account` at the provider (account-scoped idempotency keys use it).
    pub fn with_external_account(mut self, account: ExternalAccountRef) -> Self {
        self.external_account = Some(account);
        self
    }

    /// Resolves credentials with `provider`.
    pub fn with_credentials(mut self, provider: impl CredentialProvider + 'static) -> Self {
        self.credentials = Some(Arc::new(provider));
        self
    }

    /// Resolves credentials with a provider that is already shared.
    pub fn with_shared_credentials(mut self, provider: Arc<dyn CredentialProvider>) -> Self {
        self.credentials = Some(provider);
        self
    }

    /// Hands every call the same credential ([`StaticCredentialProvider`]).
    pub fn with_static_credential(self, credential: CredentialHandle) -> Self {
        self.with_credentials(StaticCredentialProvider(credential))
    }
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("tenant", &self.tenant)
            .field("external_account", &self.external_account)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "<provider>"),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invocation::Secret;

    #[test]
    fn a_deployment_is_built_from_its_parts_and_never_shows_its_secret() {
        let credential = CredentialHandle::new(
            "cred-1",
            "https://issuer.example",
            Secret::new("canary-7f3a"),
        )
        .with_scopes(["notes.read", "notes.write"])
        .with_expiry_ms(1_900_000_000_000)
        .with_tenant("t1");
        assert_eq!(credential.scopes, ["notes.read", "notes.write"]);
        assert_eq!(
            (credential.expires_at_ms, credential.tenant_id.as_deref()),
            (Some(1_900_000_000_000), Some("t1"))
        );
        let deployment = Deployment::default()
            .with_tenant(VerifiedTenant::new("t1").with_system("crm"))
            .with_external_account(ExternalAccountRef {
                id: "acct".into(),
                system: "crm".into(),
            })
            .with_static_credential(credential.clone());
        assert_eq!(
            deployment.tenant,
            Some(VerifiedTenant {
                id: "t1".into(),
                system: Some("crm".into())
            })
        );
        assert!(deployment.external_account.is_some() && deployment.credentials.is_some());
        for text in [format!("{deployment:?}"), format!("{credential:?}")] {
            assert!(!text.contains("canary-7f3a"), "{text}");
        }
    }
}
