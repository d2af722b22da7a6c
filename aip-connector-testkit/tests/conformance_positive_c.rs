//! A well-behaved connector the streaming and cancellation scenarios once misjudged: an export
//! that streams only once approved, and whose cancel companion needs two provider calls to stop
//! the export (ask it to stop, then confirm). Every assertion of both scenarios holds.
//!
//! - The gated stream is approved and its re-submission streamed (host docs §5.5), so its
//!   chunks are checked instead of the suite blaming the example for streaming too few.
//! - Requests made while the cancel companion runs are the companion's, not work the cancelled
//!   handler left behind; the scenario says so in a note.

use aip_connector::model::ConnectorOperation;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckStatus, ConformanceReport, ConformanceSuite, Scenario,
};
use serde_json::Value;

/// How long the cancel companion lets the provider wind an export down before confirming:
/// longer than the grace the cancellation scenario allows after a cancel.
const WIND_DOWN: std::time::Duration = std::time::Duration::from_millis(600);

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
    /// The provider route the page came from.
    route: String,
}

#[derive(Serialize, JsonSchema)]
struct Exported {
    pages: u32,
}

/// An export service whose exports leave the tenant, so each needs an administrator's approval.
#[derive(Clone)]
struct Exports {
    client: ProviderClient,
}

#[connector(id = "exports")]
impl Exports {
    /// Export a table, one chunk per page, once an export administrator approved it.
    #[capability(
        id = "cap:exports:run",
        risk = medium,
        side_effects = [read],
        data(sensitivity = internal),
        approval(
            reason = "an export leaves the tenant",
            selector = role("exports-admin"),
            evidence = [reason],
        ),
        cancel = Self::stop,
        examples = [r#"{"table": "accounts", "pages": 3}"#],
    )]
    async fn run(
        &self,
        export: Export,
        sink: StreamSink<Page>,
        cancel: Cancellation,
        deadline: Deadline,
        _approval: Approval,
    ) -> Result<Exported, ConnectorFailure> {
        for index in 0..export.pages {
            let page: Value = self
                .client
                .get(&format!("/exports/{}/{index}", export.table))
                .cancellation(&cancel)
                .deadline(&deadline)
                .send_json()
                .await?;
            sink.send(Page {
                index,
                route: page["route"].as_str().unwrap_or_default().to_owned(),
            })
            .await?;
        }
        Ok(Exported {
            pages: export.pages,
        })
    }

    /// Stops an export at the provider: asks it to stop, gives it time to wind down, then reads
    /// its state back to confirm. The confirmation reaches the provider well after the cancel.
    async fn stop(&self, request: CancelRequest) -> Result<(), ConnectorFailure> {
        let path = format!("/exports/jobs/{}", request.action_id);
        let _: Value = self
            .client
            .delete(&path)
            .operation(ConnectorOperation::Cancellation)
            .send_json()
            .await?;
        tokio::time::sleep(WIND_DOWN).await;
        let _: Value = self
            .client
            .get(&path)
            .operation(ConnectorOperation::Cancellation)
            .send_json()
            .await?;
        Ok(())
    }
}

fn exports() -> ConformanceSuite {
    ConformanceSuite::new(|env| Exports {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
    })
}

fn assert_passed(report: &ConformanceReport, scenario: Scenario) {
    let check = report.check(&scenario.check_name()).unwrap();
    assert_eq!(check.status, CheckStatus::Passed, "{report}");
    for name in scenario.required_assertions() {
        assert_eq!(check.assertions.get(*name), Some(&true), "{name}: {report}");
    }
}

#[test]
fn an_approved_stream_and_a_two_call_cancel_companion_pass_streaming_and_cancellation() {
    let report = exports().run();
    eprintln!("{report}");
    assert_passed(&report, Scenario::StreamingBackpressure);
    assert_passed(&report, Scenario::CancellationRaces);
    let cancellation = report
        .check(&Scenario::CancellationRaces.check_name())
        .unwrap();
    assert!(
        cancellation
            .detail
            .contains("while the cancel companion of `cap:exports:run` ran"),
        "the companion's requests are named in a note: {report}"
    );
    assert!(report.passed(), "{report}");
}
