//! A provider double that requires the deployment's credential, set up once for the whole
//! suite with `with_provider_setup`: the requirement holds through every scenario (the
//! scenarios' `clear_faults` keeps it), a connector that authenticates every call passes, and a
//! cancel companion that forgets the credential (an author trial's F10) is refused by the
//! double, where the test sees it, and fails `in_flight_cancelled`.

use std::sync::{Arc, Mutex};

use aip_connector::model::ConnectorOperation;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{CANARY_SECRET, ConformanceReport, ConformanceSuite};
use aip_connector_testkit::provider_double::ProviderHandle;
use serde_json::Value;

#[derive(Deserialize, JsonSchema)]
struct Export {
    /// The table to export.
    table: String,
    /// How many pages to stream.
    pages: u32,
}

#[derive(Serialize, JsonSchema)]
struct Page {
    /// The page's position in the export.
    index: u32,
}

#[derive(Serialize, JsonSchema)]
struct Exported {
    pages: u32,
}

/// An export service that authenticates its calls with the deployment's credential; its cancel
/// companion does too unless `stop_authenticates` is false.
#[derive(Clone)]
struct Exports {
    client: ProviderClient,
    stop_authenticates: bool,
}

#[connector(id = "exports")]
impl Exports {
    /// Export a table, one chunk per page.
    #[capability(
        id = "cap:exports:run",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["exports.read"]),
        cancel = Self::stop,
        examples = [r#"{"table": "accounts", "pages": 3}"#],
    )]
    async fn run(
        &self,
        export: Export,
        sink: StreamSink<Page>,
        cancel: Cancellation,
        deadline: Deadline,
        credential: Credential,
    ) -> Result<Exported, ConnectorFailure> {
        for index in 0..export.pages {
            let _: Value = self
                .client
                .get(&format!("/exports/{}/{index}", export.table))
                .bearer_auth(credential.secret())
                .cancellation(&cancel)
                .deadline(&deadline)
                .send_json()
                .await?;
            sink.send(Page { index }).await?;
        }
        Ok(Exported {
            pages: export.pages,
        })
    }

    /// Stops an export at the provider, with the credential the stopped handler held.
    async fn stop(&self, request: CancelRequest) -> Result<(), ConnectorFailure> {
        let mut call = self
            .client
            .delete(&format!("/exports/jobs/{}", request.action_id))
            .operation(ConnectorOperation::Cancellation);
        if self.stop_authenticates
            && let Some(credential) = &request.credential
        {
            call = call.bearer_auth(credential.secret());
        }
        let _: Value = call.send_json().await?;
        Ok(())
    }
}

/// Runs the suite with every scenario's double requiring the conformance credential, and
/// returns the report and the scenarios' provider handles.
fn run(stop_authenticates: bool) -> (ConformanceReport, Vec<ProviderHandle>) {
    let handles = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&handles);
    let report = ConformanceSuite::new(move |env| Exports {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
        stop_authenticates,
    })
    .with_provider_setup(move |provider| {
        provider.require_bearer(CANARY_SECRET);
        seen.lock().unwrap().push(provider.clone());
    })
    .run();
    eprintln!("{report}");
    let handles = handles.lock().unwrap().clone();
    (report, handles)
}

#[test]
fn a_connector_that_authenticates_every_call_passes_a_double_that_requires_it() {
    let (report, handles) = run(true);
    assert!(report.passed(), "{report}");
    assert!(!handles.is_empty());
    let requests: usize = handles.iter().map(ProviderHandle::request_count).sum();
    assert!(requests > 0, "the scenarios reached the doubles");
    for handle in &handles {
        assert!(
            handle.unauthorized_requests().is_empty(),
            "{:?}",
            handle.unauthorized_requests()
        );
    }
    // The companion's stop reached a double, authenticated.
    assert!(
        handles
            .iter()
            .flat_map(ProviderHandle::requests)
            .any(|r| r.method == "DELETE"),
        "{report}"
    );
}

#[test]
fn a_cancel_companion_that_forgets_the_credential_is_refused() {
    let (report, handles) = run(false);
    // The suite says so: the host reports the companion's failure in the cancelled result.
    let check = report
        .check(&aip_connector_testkit::conformance::Scenario::CancellationRaces.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("in_flight_cancelled"),
        Some(&false),
        "{report}"
    );
    assert!(
        check
            .detail
            .contains("the cancel companion of `cap:exports:run`")
            && check.detail.contains("provider.unauthorized"),
        "{}",
        check.detail
    );
    let refused: Vec<_> = handles
        .iter()
        .flat_map(ProviderHandle::unauthorized_requests)
        .collect();
    assert!(!refused.is_empty(), "the forgetful stop was refused");
    for request in &refused {
        assert_eq!(request.method, "DELETE", "{request:?}");
        assert!(request.path.starts_with("/exports/jobs/"), "{request:?}");
        assert_eq!(request.header("authorization"), None);
    }
}
