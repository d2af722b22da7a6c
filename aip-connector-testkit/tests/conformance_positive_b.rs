//! A well-behaved connector with everything the cancellation, streaming, approval, transaction
//! and restart scenarios exercise: a streaming, cancellable search, and an approval-governed
//! write that is planned, committed, reconciled and compensated. Every assertion of those
//! scenarios holds.

use aip_connector::model::{ConnectorOperation, ProviderOperationRef};
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckStatus, ConformanceReport, ConformanceSuite, Scenario,
};
use aip_connector_testkit::provider_double::OPERATION_ID_HEADER;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Search {
    /// What to look for.
    query: String,
    /// How many result pages to stream.
    pages: u32,
}

#[derive(Serialize, JsonSchema)]
struct Page {
    /// The page's position in the stream.
    index: u32,
    /// The provider route the page came from.
    route: String,
    /// Hits on the page.
    hits: usize,
}

#[derive(Serialize, JsonSchema)]
struct Searched {
    pages: u32,
}

#[derive(Deserialize, JsonSchema)]
struct NewRecord {
    /// The record's name.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Created {
    operation_id: String,
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct Removal {
    /// Why the record goes.
    reason: String,
}

#[derive(Serialize, JsonSchema)]
struct Removed {
    operation_id: String,
    reason: String,
}

/// A records service: streaming search, governed creation, removal as its compensation.
#[derive(Clone)]
struct Records {
    client: ProviderClient,
}

#[connector(id = "records")]
impl Records {
    /// Search the records, one chunk per result page. Every provider call stops when the action
    /// is cancelled or its deadline passes.
    #[capability(
        id = "cap:records:search",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"query": "alpha", "pages": 3}"#],
    )]
    async fn search(
        &self,
        search: Search,
        sink: StreamSink<Page>,
        cancel: Cancellation,
        deadline: Deadline,
    ) -> Result<Searched, ConnectorFailure> {
        for index in 0..search.pages {
            let page: Value = self
                .client
                .get(&format!("/search/{}/{index}", search.query))
                .cancellation(&cancel)
                .deadline(&deadline)
                .send_json()
                .await?;
            sink.send(Page {
                index,
                route: page["route"].as_str().unwrap_or_default().to_owned(),
                hits: page["operation_ids"].as_array().map_or(0, Vec::len),
            })
            .await?;
        }
        Ok(Searched {
            pages: search.pages,
        })
    }

    /// Create a record: planned, approved by two record administrators other than the
    /// requester, then committed. The provider operation is checkpointed before the provider is
    /// called, so a lost answer can be reconciled.
    #[capability(
        id = "cap:records:create",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(
            reason = "records are visible to the whole tenant",
            selector = role("records-admin"),
            distinct_principals = 2,
            evidence = [reason, input_snapshot],
            separation(requester_must_differ),
        ),
        transaction(modes = [plan, commit, reconcile, compensate]),
        compensation(supported, capability = "cap:records:remove", window_ms = 600_000),
        reconcile = Self::find_operation,
        examples = [r#"{"name": "alpha"}"#],
    )]
    async fn create(
        &self,
        record: NewRecord,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        _approval: Approval,
        deadline: Deadline,
    ) -> Result<Created, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "records".to_owned(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let created: Value = self
            .client
            .post("/records")
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation.clone())
            .operation(ConnectorOperation::TransactionCommit)
            .deadline(&deadline)
            .json(&json!({ "name": record.name }))
            .send_json()
            .await?;
        Ok(Created {
            operation_id: created["operation_id"]
                .as_str()
                .unwrap_or(&operation.operation_id)
                .to_owned(),
            name: record.name,
        })
    }

    /// Asks the provider about a create whose answer was lost; a pending answer carries a cursor
    /// counting the rounds.
    async fn find_operation(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        let answer: Value = self
            .client
            .get(&format!(
                "/operations/{}",
                request.provider_operation.operation_id
            ))
            .operation(ConnectorOperation::Reconciliation)
            .send_json()
            .await?;
        Ok(match answer["state"].as_str() {
            Some("committed") => ReconcileOutcome::Committed {
                evidence: Some(answer),
            },
            Some("pending") => {
                let round = request
                    .cursor
                    .as_deref()
                    .and_then(|c| c.strip_prefix("round-"))
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or(0);
                ReconcileOutcome::Pending {
                    cursor: Some(format!("round-{}", round + 1)),
                }
            }
            _ => ReconcileOutcome::NotCommitted {
                evidence: Some(answer),
            },
        })
    }

    /// Remove a record `create` made: its compensation, reachable only as one.
    #[capability(
        id = "cap:records:remove",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "created by mistake"}"#],
    )]
    async fn remove(
        &self,
        removal: Removal,
        key: IdempotencyKey,
        target: Compensation,
        deadline: Deadline,
    ) -> Result<Removed, ConnectorFailure> {
        let Some(operation) = target.provider_operation.clone() else {
            return Err(ConnectorFailure::new(
                "records.nothing_to_remove",
                "the compensated create recorded no provider operation",
                ErrorCategory::Permanent,
                ConnectorOperation::Compensation,
                "records",
            ));
        };
        let _: Value = self
            .client
            .delete(&format!("/records/{}", operation.operation_id))
            .idempotency(&key)
            .operation(ConnectorOperation::Compensation)
            .deadline(&deadline)
            .send_json()
            .await?;
        Ok(Removed {
            operation_id: operation.operation_id,
            reason: removal.reason,
        })
    }
}

fn records() -> ConformanceSuite {
    ConformanceSuite::new(|env| Records {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
    })
}

fn assert_passed(report: &ConformanceReport, scenario: Scenario) {
    let check = report.check(&scenario.check_name()).unwrap();
    assert_eq!(check.status, CheckStatus::Passed, "{report}");
    for name in scenario.required_assertions() {
        assert_eq!(check.assertions.get(*name), Some(&true), "{name}: {report}");
    }
    assert!(!check.artifacts.is_empty(), "{report}");
}

#[test]
fn a_well_behaved_streaming_and_transactional_connector_passes_every_check() {
    let report = records().run();
    eprintln!("{report}");
    assert!(report.passed(), "{report}");
    for name in [
        "connector.atomic_manifest_admission",
        "enterprise.capability_contract",
    ] {
        assert!(report.check(name).unwrap().passed(), "{name}: {report}");
    }
    for scenario in [
        Scenario::IdentityCredentials,
        Scenario::SchemaEnforcement,
        Scenario::CancellationRaces,
        Scenario::StreamingBackpressure,
        Scenario::ApprovalLifecycle,
        Scenario::TransactionLifecycle,
        Scenario::RestartReconnect,
    ] {
        assert_passed(&report, scenario);
    }
    assert_eq!(
        report
            .check(&Scenario::WebhookSecurity.check_name())
            .unwrap()
            .status,
        CheckStatus::NotApplicable
    );
}
