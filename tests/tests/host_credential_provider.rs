//! A deployment's credential provider that hangs or panics (stage 4): the call ends within its
//! deadline, or at once, as `credential.unavailable` (temporary, retryable: nothing was
//! attempted), streamed calls with exactly one terminal chunk, and the host's slot is freed.
//! Found by a hostile probe: a hanging provider held the call past every deadline (and its
//! slot, so calls that need no credential were refused `host.overloaded`), and a panicking one
//! unwound into the caller.

use std::time::{Duration, Instant};

use aip_connector::codes;
use aip_connector::host::{CredentialProvider, Deployment, Host, HostLimits, TrustedContext};
use aip_connector::invocation::{BoxFuture, CredentialHandle};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, Capability, Principal, PrincipalKind, StreamChunkKind,
};
use aip_connector::prelude::*;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Query {
    term: String,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    term: String,
}

struct Search;

#[connector(id = "search")]
impl Search {
    /// Searches with the deployment's key.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["search"]),
    )]
    async fn find(&self, query: Query, _credential: Credential) -> Result<Found, ConnectorFailure> {
        Ok(Found { term: query.term })
    }

    /// Searches in chunks with the deployment's key.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        execution(streaming),
        credentials(required, scopes = ["search"]),
    )]
    async fn scan(
        &self,
        query: Query,
        _credential: Credential,
        sink: StreamSink<Found>,
    ) -> Result<Found, ConnectorFailure> {
        sink.send(Found {
            term: query.term.clone(),
        })
        .await?;
        Ok(Found { term: query.term })
    }

    /// Answers without a credential.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn ping(&self, query: Query) -> Result<Found, ConnectorFailure> {
        Ok(Found { term: query.term })
    }
}

/// A secret store that never answers, or panics.
enum Broken {
    Hangs,
    Panics,
    PanicsBeforeItsFuture,
}

impl CredentialProvider for Broken {
    fn resolve<'a>(
        &'a self,
        _capability: &'a Capability,
        _caller: &'a TrustedContext,
    ) -> BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>> {
        match self {
            Broken::Hangs => Box::pin(std::future::pending()),
            Broken::Panics => Box::pin(async { panic!("the vault client is broken") }),
            Broken::PanicsBeforeItsFuture => panic!("the vault client is broken"),
        }
    }
}

fn host(provider: Broken) -> Host {
    Host::builder()
        .connector(Search)
        .deployment(Deployment::new().with_credentials(provider))
        .limits(HostLimits::default().max_concurrent_actions(1))
        .build()
        .unwrap()
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("agent:finder", PrincipalKind::Agent), "test")
}

fn query(capability: &str) -> Action {
    Action::new(capability, json!({ "term": "lamps" }))
}

#[track_caller]
fn assert_unavailable(result: &ActionResult, reason: &str) {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    let error = result.error.as_ref().unwrap();
    assert_eq!(error.code, codes::CREDENTIAL_UNAVAILABLE, "{error:?}");
    assert_eq!(error.retryable, Some(true));
    assert_eq!(
        error.details.as_ref().unwrap()["reason"],
        reason,
        "{error:?}"
    );
}

#[tokio::test]
async fn a_hanging_provider_ends_the_call_at_its_deadline_and_frees_its_slot() {
    let host = host(Broken::Hangs);
    let started = Instant::now();
    let mut action = query("cap:search:find");
    action.timeout_ms = Some(200);
    let result = tokio::time::timeout(Duration::from_secs(10), host.invoke(action, &caller()))
        .await
        .expect("the call ended at its deadline");
    assert_unavailable(&result, "timeout");
    assert!(started.elapsed() >= Duration::from_millis(200));
    // The one slot is free again: a call that needs no credential runs.
    let ping = host.invoke(query("cap:search:ping"), &caller()).await;
    assert_eq!(ping.status, ActionResultStatus::Completed, "{ping:?}");
}

#[tokio::test]
async fn a_panicking_provider_is_answered_not_propagated() {
    for provider in [Broken::Panics, Broken::PanicsBeforeItsFuture] {
        let host = host(provider);
        let result = host.invoke(query("cap:search:find"), &caller()).await;
        assert_unavailable(&result, "panicked");

        let mut stream = host.invoke_stream(query("cap:search:scan"), caller());
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.next().await {
            chunks.push(chunk);
        }
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        assert_eq!(chunks[0].kind, StreamChunkKind::Error, "{chunks:?}");
        let ping = host.invoke(query("cap:search:ping"), &caller()).await;
        assert_eq!(ping.status, ActionResultStatus::Completed, "{ping:?}");
    }
}
