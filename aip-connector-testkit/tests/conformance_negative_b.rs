//! Connectors that lie in ways the cancellation, streaming, approval and transaction scenarios
//! catch — each by the assertion that states the broken promise, while the checks around it
//! behave as they do for a well-behaved connector (`conformance_positive_b.rs`).
//!
//! | Fixture | The lie | Caught by |
//! |---|---|---|
//! | `DetachedSearch` | declares cancellation (it takes `Cancellation`) but hands its page fetches to a task of its own that never looks at the token | `cancellation_races` / `in_flight_cancelled` |
//! | `DetachedPoller` | starts an export with its first provider request, then hands the polling of its status to a task of its own that never looks at the token | `cancellation_races` / `in_flight_cancelled`, at the second request (a cancel during the first, the only one tried before an author trial, never saw the task) |
//! | `ReversedSearch` | streams pages that carry their `index` newest first | `streaming_backpressure` / `ordered_chunks` |
//! | `EagerWriter` | "validates" a planned, approval-governed write by performing it | `approval_lifecycle` / `quorum_enforced` and `transaction_lifecycle` / `plan_before_commit` |
//! | `LateCheckpoint` | checkpoints its provider operation once the provider answered, not before the request (also with the request naming the operation, so failures carry it) | `transaction_lifecycle` / `provider_operation_checkpointed` (and `reconcile_before_retry` when failures do not name it) |
//! | `Hooks` | declares the webhook profile but gives the suite no webhook receiver | `webhook_security` (every assertion) |
//! | `AssumingReconciler { assumes_committed: false }` | answers every reconciliation "not committed" without asking the provider | `errors_uncertain_outcomes` / `uncertain_outcome_reconciled` (and `transaction_lifecycle` / `reconcile_before_retry`) |
//! | `LeakyExport` | a streaming-only capability that logs its credential's secret | `audit_redaction` / `raw_secret_absent` (its lines were not captured before an author trial) |
//! | `Undoer` (`Undo::Nothing`, `Undo::SomethingElse`) | a compensation that answers "done" without asking the provider, or that reverses something other than the compensated action's effect | `transaction_lifecycle` / `compensation_governed` |
//! | `VmHost { knows_undo: false }` | its reconcile companion asks whether the VM exists, also when asked about a lost delete (`Reconciliation::compensation_for` set), where a missing VM means the undo happened | `transaction_lifecycle` / `compensation_governed`, once a compensation's answer is lost (before an author trial, no compensation's answer was) |
//! | `AssumingReconciler { assumes_committed: true }` | answers every reconciliation "committed" without asking the provider | `errors_uncertain_outcomes` / `uncertain_outcome_reconciled`, once a request is lost before it took effect |
//!
//! Two lies the issue lists cannot be told through this host, so they have no fixture:
//!
//! - **Ignoring the token inside the handler.** On cancel the host drops the handler's future
//!   (host docs §7.2), so a handler that simply never looks at its token stops anyway. What
//!   survives a cancel is work the handler handed to a task of its own — `DetachedSearch`.
//! - **Resuming an approval twice.** The resume is claimed in the store before the handler is
//!   dispatched, so no connector can run twice for one approval; `resume_once` checks the host's
//!   promise end to end. The nearest connector lie — acting before anyone approved — is
//!   `EagerWriter`. It breaks two promises at once ("nothing happens at the provider before the
//!   quorum" and "a plan leaves no effect until its commit"), and both checks say so.

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
    /// The page's position in the result.
    index: u32,
    /// The provider route the page came from.
    route: String,
}

#[derive(Serialize, JsonSchema)]
struct Searched {
    pages: u32,
}

fn page(index: u32, answer: &Value) -> Page {
    Page {
        index,
        route: answer["route"].as_str().unwrap_or_default().to_owned(),
    }
}

fn client(env: &aip_connector_testkit::conformance::Environment) -> ProviderClient {
    ProviderClient::new(env.provider_url()).expect("the double's URL is valid")
}

/// Asserts that `scenario` failed, that exactly the assertions in `broken` did not hold (the
/// others did), and that every check in `fine` passed or did not apply.
fn assert_caught(
    report: &ConformanceReport,
    scenario: Scenario,
    broken: &[&str],
    fine: &[Scenario],
) {
    let check = report.check(&scenario.check_name()).unwrap();
    assert_eq!(check.status, CheckStatus::Failed, "{report}");
    assert!(!check.artifacts.is_empty(), "{report}");
    for name in scenario.required_assertions() {
        let expected = !broken.contains(name);
        assert_eq!(
            check.assertions.get(*name),
            Some(&expected),
            "{}: {name}: {report}",
            scenario.id()
        );
    }
    for name in [
        "connector.atomic_manifest_admission",
        "enterprise.capability_contract",
    ] {
        assert!(report.check(name).unwrap().passed(), "{name}: {report}");
    }
    for other in fine {
        assert!(
            report.check(&other.check_name()).unwrap().passed(),
            "{}: {report}",
            other.id()
        );
    }
}

// ---- Ignored cancellation ----------------------------------------------------------------------

/// A search whose page fetches run on a background task ("to keep the handler responsive"). The
/// task never looks at the action's cancellation token and shrugs off a closed channel, so after
/// a cancel it keeps fetching pages for an action that is over.
#[derive(Clone)]
struct DetachedSearch {
    client: ProviderClient,
}

#[connector(id = "detached-search")]
impl DetachedSearch {
    /// How many pages a search would stream (no provider call).
    #[capability(
        id = "cap:detached:pages",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"query": "alpha", "pages": 2}"#],
    )]
    async fn pages(&self, search: Search) -> Result<Searched, ConnectorFailure> {
        Ok(Searched {
            pages: search.pages,
        })
    }

    /// Search the records, one chunk per page.
    #[capability(
        id = "cap:detached:search",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        // Two pages: both are fetched before the handler parks in its second `send`, so no
        // request can land in `streaming_backpressure`'s pause however slowly the machine
        // runs (with a third, the prefetch of page 2 raced the start of the pause).
        examples = [r#"{"query": "alpha", "pages": 2}"#],
    )]
    async fn search(
        &self,
        search: Search,
        sink: StreamSink<Page>,
        _cancel: Cancellation,
    ) -> Result<Searched, ConnectorFailure> {
        let (pages, mut arrived) = tokio::sync::mpsc::channel(1);
        let client = self.client.clone();
        let query = search.query.clone();
        let count = search.pages;
        tokio::spawn(async move {
            for index in 0..count {
                let answer: Result<Value, ConnectorFailure> = client
                    .get(&format!("/search/{query}/{index}"))
                    .send_json()
                    .await;
                // The lie: nobody listening any more is no reason to stop.
                let _ = pages.send((index, answer)).await;
            }
        });
        while let Some((index, answer)) = arrived.recv().await {
            sink.send(page(index, &answer?)).await?;
        }
        Ok(Searched { pages: count })
    }
}

#[test]
fn a_search_that_ignores_cancellation_in_a_task_of_its_own_fails_in_flight_cancellation() {
    let report = ConformanceSuite::new(|env| DetachedSearch {
        client: client(env),
    })
    .run();
    eprintln!("{report}");
    assert_caught(
        &report,
        Scenario::CancellationRaces,
        &["in_flight_cancelled"],
        &[
            Scenario::IdentityCredentials,
            Scenario::SchemaEnforcement,
            Scenario::StreamingBackpressure,
            Scenario::RestartReconnect,
        ],
    );
    let detail = &report
        .check(&Scenario::CancellationRaces.check_name())
        .unwrap()
        .detail;
    assert!(
        detail.contains("the provider still received GET /search/alpha/1"),
        "{detail}"
    );
}

/// An export that starts a job with its first provider request, then polls the job's status on
/// a background task ("so the handler only waits on a channel"). The task never looks at the
/// action's cancellation token and ignores a closed channel.
#[derive(Clone)]
struct DetachedPoller {
    client: ProviderClient,
}

#[derive(Deserialize, JsonSchema)]
struct Export {
    /// The table to export.
    table: String,
}

#[derive(Serialize, JsonSchema)]
struct Exported {
    /// Status polls it took.
    polls: u32,
}

#[connector(id = "detached-poller")]
impl DetachedPoller {
    /// Export a table and wait for the export to finish.
    #[capability(
        id = "cap:poller:export",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"table": "orders"}"#],
    )]
    async fn export(
        &self,
        export: Export,
        _cancel: Cancellation,
    ) -> Result<Exported, ConnectorFailure> {
        let started: Value = self
            .client
            .get(&format!("/exports/{}/start", export.table))
            .send_json()
            .await?;
        let job = started["route"].as_str().unwrap_or_default().to_owned();
        let (done, mut finished) = tokio::sync::mpsc::channel(1);
        let client = self.client.clone();
        tokio::spawn(async move {
            for poll in 1..=3u32 {
                let status: Result<Value, ConnectorFailure> = client
                    .get(&format!("/exports/status/{poll}"))
                    .query(&[("job", job.as_str())])
                    .send_json()
                    .await;
                if status.is_err() {
                    break;
                }
            }
            // The lie: nobody listening any more is no reason to stop.
            let _ = done.send(3u32).await;
        });
        let polls = finished.recv().await.unwrap_or_default();
        Ok(Exported { polls })
    }
}

#[test]
fn an_export_that_polls_in_a_task_of_its_own_fails_in_flight_cancellation_at_its_second_request() {
    let report = ConformanceSuite::new(|env| DetachedPoller {
        client: client(env),
    })
    .run();
    eprintln!("{report}");
    assert_caught(
        &report,
        Scenario::CancellationRaces,
        &["in_flight_cancelled"],
        &[Scenario::IdentityCredentials, Scenario::SchemaEnforcement],
    );
    let detail = &report
        .check(&Scenario::CancellationRaces.check_name())
        .unwrap()
        .detail;
    assert!(
        detail.contains(
            "was cancelled during its second provider request (the first answered at once), the provider still received GET /exports/status/2"
        ),
        "{detail}"
    );
}

// ---- Out-of-order chunks -------------------------------------------------------------------------

/// A search that lists the newest page first. Each page keeps its `index`, so the stream says
/// page 2 comes before page 0: the data order contradicts the positions the chunks declare.
#[derive(Clone)]
struct ReversedSearch {
    client: ProviderClient,
}

#[connector(id = "reversed-search")]
impl ReversedSearch {
    /// How many pages a search would stream (no provider call).
    #[capability(
        id = "cap:reversed:pages",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"query": "alpha", "pages": 2}"#],
    )]
    async fn pages(&self, search: Search) -> Result<Searched, ConnectorFailure> {
        Ok(Searched {
            pages: search.pages,
        })
    }

    /// Search the records, one chunk per page, newest page first.
    #[capability(
        id = "cap:reversed:search",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"query": "alpha", "pages": 3}"#],
    )]
    async fn search(
        &self,
        search: Search,
        sink: StreamSink<Page>,
    ) -> Result<Searched, ConnectorFailure> {
        let mut pages = Vec::new();
        for index in 0..search.pages {
            let answer: Value = self
                .client
                .get(&format!("/search/{}/{index}", search.query))
                .send_json()
                .await?;
            pages.push(page(index, &answer));
        }
        for page in pages.into_iter().rev() {
            sink.send(page).await?;
        }
        Ok(Searched {
            pages: search.pages,
        })
    }
}

#[test]
fn a_search_that_streams_its_pages_out_of_order_fails_ordered_chunks() {
    let report = ConformanceSuite::new(|env| ReversedSearch {
        client: client(env),
    })
    .run();
    eprintln!("{report}");
    assert_caught(
        &report,
        Scenario::StreamingBackpressure,
        &["ordered_chunks"],
        &[
            Scenario::IdentityCredentials,
            Scenario::SchemaEnforcement,
            Scenario::RestartReconnect,
        ],
    );
    let detail = &report
        .check(&Scenario::StreamingBackpressure.check_name())
        .unwrap()
        .detail;
    assert!(
        detail.contains("chunk 1 carries `index: 1` after chunk 0 carried `index: 2`"),
        "{detail}"
    );
    // It cannot be cancelled, so the cancellation scenario does not apply.
    assert_eq!(
        report
            .check(&Scenario::CancellationRaces.check_name())
            .unwrap()
            .status,
        CheckStatus::NotApplicable
    );
}

// ---- Acting before approval ----------------------------------------------------------------------

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    /// Cents to move.
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Moved {
    operation_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Checked {
    accepted: bool,
}

/// A planned, approval-governed write whose "downstream validation" performs the write: the
/// provider holds the effect as soon as the plan is made, before any approver decided and
/// before the plan was committed.
#[derive(Clone)]
struct EagerWriter {
    client: ProviderClient,
}

#[connector(id = "eager-writer")]
impl EagerWriter {
    /// Move money between two accounts of the tenant, once approved.
    #[capability(
        id = "cap:eager:transfer",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(
            reason = "moves money",
            selector = role("treasury"),
            distinct_principals = 2,
            evidence = [reason],
            separation(requester_must_differ),
        ),
        transaction(modes = [plan, commit], fidelity = downstream_validation),
        validate = Self::check,
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn transfer(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Moved, ConnectorFailure> {
        let operation = aip_connector::model::ProviderOperationRef {
            provider: "bank".to_owned(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let moved: Value = self
            .client
            .post("/transfers")
            .idempotency(&key)
            .header(
                aip_connector_testkit::provider_double::OPERATION_ID_HEADER,
                &operation.operation_id,
            )
            .provider_operation(operation)
            .json(&json!({ "amount_cents": transfer.amount_cents }))
            .send_json()
            .await?;
        Ok(Moved {
            operation_id: moved["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// The lie: "checks" the transfer by making it.
    async fn check(&self, transfer: Transfer) -> Result<Checked, ConnectorFailure> {
        let _: Value = self
            .client
            .post("/transfers")
            .operation(ConnectorOperation::TransactionPlan)
            .json(&json!({ "amount_cents": transfer.amount_cents }))
            .send_json()
            .await?;
        Ok(Checked { accepted: true })
    }
}

#[test]
fn a_write_that_acts_while_it_plans_fails_quorum_and_plan_before_commit() {
    let report = ConformanceSuite::new(|env| EagerWriter {
        client: client(env),
    })
    .run();
    eprintln!("{report}");
    let fine = [Scenario::IdentityCredentials, Scenario::SchemaEnforcement];
    assert_caught(
        &report,
        Scenario::ApprovalLifecycle,
        &["quorum_enforced"],
        &fine,
    );
    assert_caught(
        &report,
        Scenario::TransactionLifecycle,
        &["plan_before_commit"],
        &fine,
    );
    let approval = &report
        .check(&Scenario::ApprovalLifecycle.check_name())
        .unwrap()
        .detail;
    assert!(
        approval.contains("the provider held 1 effect(s)"),
        "{approval}"
    );
}

// ---- Checkpointing after the provider answered ----------------------------------------------------

/// A ledger write that records its provider operation only once the provider answered ("so the
/// checkpoint holds the provider's own id"). After a successful call the transaction names the
/// operation; when the answer is lost, nothing does, and the unknown outcome cannot be reconciled.
#[derive(Clone)]
struct LateCheckpoint {
    client: ProviderClient,
    /// Whether the request names the operation (`ProviderRequest::provider_operation`, as
    /// transactions.md recommends), so that failures carry it to the host: the lie then no
    /// longer shows in any transaction view, only in when the checkpoint was recorded.
    names_operation_in_failures: bool,
}

#[connector(id = "late-checkpoint")]
impl LateCheckpoint {
    /// Post a ledger entry.
    #[capability(
        id = "cap:late:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        let operation_id = format!("op-{}", key.as_str());
        let operation = aip_connector::model::ProviderOperationRef {
            provider: "ledger".to_owned(),
            operation_id: operation_id.clone(),
            request_id: None,
        };
        let request = self.client.post("/entries").idempotency(&key).header(
            aip_connector_testkit::provider_double::OPERATION_ID_HEADER,
            &operation_id,
        );
        let request = if self.names_operation_in_failures {
            request.provider_operation(operation.clone())
        } else {
            request
        };
        let moved: Value = request
            .json(&json!({ "amount_cents": transfer.amount_cents }))
            .send_json()
            .await?;
        // The lie: recorded once the answer is in hand.
        checkpoint.record(operation.clone(), None).await?;
        Ok(Moved {
            operation_id: moved["operation_id"]
                .as_str()
                .unwrap_or(&operation.operation_id)
                .to_owned(),
        })
    }

    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
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
            _ => ReconcileOutcome::NotCommitted {
                evidence: Some(answer),
            },
        })
    }
}

#[test]
fn a_checkpoint_recorded_after_the_provider_answered_fails_provider_operation_checkpointed() {
    let report = ConformanceSuite::new(|env| LateCheckpoint {
        client: client(env),
        names_operation_in_failures: false,
    })
    .run();
    eprintln!("{report}");
    assert_caught(
        &report,
        Scenario::TransactionLifecycle,
        &["provider_operation_checkpointed", "reconcile_before_retry"],
        &[Scenario::IdentityCredentials, Scenario::SchemaEnforcement],
    );
    let detail = &report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap()
        .detail;
    assert!(
        detail.contains(
            "record the `Checkpoint` (`checkpoint.record(...)`) before sending the provider request"
        ),
        "{detail}"
    );
    assert!(
        detail.contains("record it before sending the request"),
        "{detail}"
    );
}

/// The same lie, by a handler whose request names the operation, so that the lost answer's
/// failure carries it and the host's transaction views all name it (found by an author trial,
/// which passed every check): only the order of the checkpoint and the provider's commit
/// tells, and `provider_operation_checkpointed` compares them.
#[test]
fn a_late_checkpoint_fails_even_when_failures_name_the_operation() {
    let report = ConformanceSuite::new(|env| LateCheckpoint {
        client: client(env),
        names_operation_in_failures: true,
    })
    .run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap();
    assert_eq!(check.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        check.assertions.get("provider_operation_checkpointed"),
        Some(&false),
        "{report}"
    );
    assert!(
        check
            .detail
            .contains("after the provider committed the call's effect"),
        "{}",
        check.detail
    );
    assert!(
        check
            .detail
            .contains("record the `Checkpoint` before the request that changes the provider"),
        "{}",
        check.detail
    );
}

// ---- A reconcilable write without an example -----------------------------------------------------

/// The ledger write both reconcilable fixtures below make: checkpoint the operation, then post.
async fn post_entry(
    client: &ProviderClient,
    transfer: Transfer,
    key: IdempotencyKey,
    checkpoint: Checkpoint,
) -> Result<Moved, ConnectorFailure> {
    let operation_id = format!("op-{}", key.as_str());
    checkpoint
        .record(
            aip_connector::model::ProviderOperationRef {
                provider: "ledger".to_owned(),
                operation_id: operation_id.clone(),
                request_id: None,
            },
            None,
        )
        .await?;
    client
        .post("/entries")
        .idempotency(&key)
        .json(&json!({ "amount_cents": transfer.amount_cents }))
        .send_json::<Value>()
        .await?;
    Ok(Moved { operation_id })
}

/// `LateCheckpoint`'s write done right, but declared without an example: found by an author
/// trial, whose failure read as a missing reconcile handler.
#[derive(Clone)]
struct Unexampled {
    client: ProviderClient,
}

#[connector(id = "unexampled")]
impl Unexampled {
    /// Post a ledger entry.
    #[capability(
        id = "cap:unexampled:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        post_entry(&self.client, transfer, key, checkpoint).await
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::NotCommitted { evidence: None })
    }

    /// Read an entry back (with an example, so the scenario has calls to make).
    #[capability(
        id = "cap:unexampled:read",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn read(&self, transfer: Transfer) -> Result<Moved, ConnectorFailure> {
        let answer: Value = self.client.get("/entries").send_json().await?;
        Ok(Moved {
            operation_id: format!("{}-{}", answer["route"], transfer.amount_cents),
        })
    }
}

#[test]
fn a_reconcilable_write_without_an_example_is_told_to_declare_one() {
    let report = ConformanceSuite::new(|env| Unexampled {
        client: client(env),
    })
    .run();
    let check = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("uncertain_outcome_reconciled"),
        Some(&false),
        "{report}"
    );
    assert!(
        check
            .detail
            .contains("`cap:unexampled:post` can be reconciled but declares no example input"),
        "{}",
        check.detail
    );
    assert!(
        !check.detail.contains("no mutating capability"),
        "{}",
        check.detail
    );
}

/// Reconciles without asking the provider, always giving the same answer: "not committed"
/// though the provider applied the write, or "committed", which is right whenever the answer
/// was lost after the provider applied the write, all the suite tried before an author trial's
/// connector passed with it.
struct AssumingReconciler {
    client: ProviderClient,
    /// The answer to every reconciliation.
    assumes_committed: bool,
}

#[connector(id = "assuming")]
impl AssumingReconciler {
    /// Post a ledger entry.
    #[capability(
        id = "cap:assuming:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        post_entry(&self.client, transfer, key, checkpoint).await
    }

    async fn find(&self, _request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(if self.assumes_committed {
            ReconcileOutcome::Committed { evidence: None }
        } else {
            ReconcileOutcome::NotCommitted { evidence: None }
        })
    }
}

#[test]
fn a_reconcile_that_never_asks_the_provider_fails_uncertain_outcome_reconciled() {
    let report = ConformanceSuite::new(|env| AssumingReconciler {
        client: client(env),
        assumes_committed: false,
    })
    .run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("uncertain_outcome_reconciled"),
        Some(&false),
        "{report}"
    );
    assert!(
        check
            .detail
            .contains("reported committed: `false`, but the provider holds 1 effect(s)"),
        "{}",
        check.detail
    );
    // The transaction check quotes the reconcile's output as a caller receives it, under
    // `reconciliation` (an author trial copied the inner object it quoted before, and read
    // `committed` at the wrong level).
    let transaction = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap();
    let line = transaction
        .detail
        .lines()
        .find(|line| line.starts_with("reconcile_before_retry: reconciling the unknown outcome"))
        .unwrap_or_else(|| panic!("{}", transaction.detail));
    assert!(
        line.contains(r#"with output {"reconciliation":{"#)
            && line.contains(r#""committed":false"#),
        "{line}"
    );
}

#[test]
fn a_reconcile_that_assumes_the_write_landed_fails_uncertain_outcome_reconciled() {
    let report = ConformanceSuite::new(|env| AssumingReconciler {
        client: client(env),
        assumes_committed: true,
    })
    .run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("uncertain_outcome_reconciled"),
        Some(&false),
        "{report}"
    );
    assert!(
        check.detail.contains(
            "request was lost before the provider took it (the provider holds no effect of it), and reconciling its transaction"
        ) && check.detail.contains("reported committed: true"),
        "{}",
        check.detail
    );
}

/// Streams pages and logs the token it was given: the lines of a streamed action come from the
/// pipeline's own task, which the audit's capture must still see.
struct LeakyExport {
    client: ProviderClient,
}

#[connector(id = "leaky-export")]
impl LeakyExport {
    /// Export the records, one chunk per page.
    #[capability(
        id = "cap:leaky:export",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(scopes = ["records.read"]),
        examples = [r#"{"query": "alpha", "pages": 2}"#],
    )]
    async fn export(
        &self,
        search: Search,
        sink: StreamSink<Page>,
        credential: Credential,
    ) -> Result<Searched, ConnectorFailure> {
        tracing::info!(
            token = credential.secret().expose_str().unwrap_or_default(),
            "exporting"
        );
        for index in 0..search.pages {
            let answer: Value = self
                .client
                .get(&format!("/records/{index}"))
                .send_json()
                .await?;
            sink.send(page(index, &answer)).await?;
        }
        Ok(Searched {
            pages: search.pages,
        })
    }
}

#[test]
fn a_streamed_action_that_logs_its_secret_fails_raw_secret_absent() {
    let report = ConformanceSuite::new(|env| LeakyExport {
        client: client(env),
    })
    .run();
    let check = report
        .check(&Scenario::AuditRedaction.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("raw_secret_absent"),
        Some(&false),
        "{report}"
    );
    assert_eq!(
        check.assertions.get("audit_correlated"),
        Some(&true),
        "{report}"
    );
    assert!(check.detail.contains("log line"), "{}", check.detail);
}

#[derive(Deserialize, JsonSchema)]
struct Reversal {
    /// Why the entry is reversed.
    reason: String,
}

#[derive(Serialize, JsonSchema)]
struct Reversed {
    reversed: bool,
}

/// How `Undoer`'s compensation lies.
#[derive(Clone, Copy, PartialEq)]
enum Undo {
    /// It asks the provider for nothing and answers "reversed".
    Nothing,
    /// It reverses an entry, but not the one the compensated action posted.
    SomethingElse,
    /// It looks the right entry up, then writes something unrelated.
    LooksThenElse,
}

/// A reversible ledger entry whose reversal does not reverse it (an author trial's cancellation
/// passed the suite either way).
struct Undoer {
    client: ProviderClient,
    undo: Undo,
}

#[connector(id = "undoer")]
impl Undoer {
    /// Post a ledger entry, reversible for a day.
    #[capability(
        id = "cap:undoer:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:undoer:reverse", window_ms = 86_400_000),
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        post_entry(&self.client, transfer, key, checkpoint).await
    }

    /// Reverse an entry: the compensation of `post`.
    #[capability(
        id = "cap:undoer:reverse",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
    ) -> Result<Reversed, ConnectorFailure> {
        if self.undo == Undo::LooksThenElse {
            let entry = target
                .output
                .as_ref()
                .and_then(|o| o.get("operation_id"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            self.client
                .get(&format!("/entries/{}", path_segment(&entry)))
                .send_json::<Value>()
                .await?;
            self.client
                .post("/audit")
                .idempotency(&key)
                .json(&json!({ "reason": reversal.reason }))
                .send_json::<Value>()
                .await?;
        }
        if self.undo == Undo::SomethingElse {
            self.client
                .post("/reversals")
                .idempotency(&key)
                .json(&json!({ "entry": "the-latest-entry", "reason": reversal.reason }))
                .send_json::<Value>()
                .await?;
        }
        Ok(Reversed { reversed: true })
    }
}

/// A reversible ledger entry whose reversal alone requires approval, found by an author trial
/// (a calendar whose cancellation of a booking required a calendar admin): the reversal is
/// compensation-only, so no action names it and its own policy is never applied; the entry it
/// reverses gates its compensations (`compensation(requires_approval)`, which
/// `manifest.compensation.approval_ungated` demands), and no call of its own needs approval.
struct ApprovedUndo {
    client: ProviderClient,
}

#[connector(id = "approved-undo")]
impl ApprovedUndo {
    /// Post a ledger entry, reversible for a day.
    #[capability(
        id = "cap:approved-undo:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:approved-undo:reverse", window_ms = 86_400_000, requires_approval),
        examples = [r#"{"amount_cents": 1200}"#],
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        post_entry(&self.client, transfer, key, checkpoint).await
    }

    /// Reverse an entry once a ledger admin approves: the compensation of `post`.
    #[capability(
        id = "cap:approved-undo:reverse",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(selector = role("ledger-admin"), evidence = [reason]),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
        _approval: Approval,
    ) -> Result<Reversed, ConnectorFailure> {
        let entry = target
            .output
            .as_ref()
            .and_then(|o| o.get("operation_id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.client
            .delete(&format!("/entries/{}", path_segment(&entry)))
            .idempotency(&key)
            .json(&json!({ "reason": reversal.reason }))
            .send_json::<Value>()
            .await?;
        Ok(Reversed { reversed: true })
    }
}

/// The lifecycle runs on what a host approves of such a connector: compensations of the entry,
/// gated under its contract and routed to the reversal. It used to fail, saying nothing could
/// be approved.
#[test]
fn approval_on_a_compensation_only_capability_runs_on_its_compensations() {
    let report = ConformanceSuite::new(|env| ApprovedUndo {
        client: client(env),
    })
    .run();
    let approval = report
        .check(&Scenario::ApprovalLifecycle.check_name())
        .unwrap();
    assert_eq!(approval.status, CheckStatus::Passed, "{report}");
    assert!(
        approval.detail.contains(
            "the lifecycle ran on compensations of `cap:approved-undo:post` routed to `cap:approved-undo:reverse`"
        ),
        "{}",
        approval.detail
    );
}

/// [`ApprovedUndo`] with no example of the entry: no compensation can be sent, and the failure
/// says why (not only that the reversal, which declares one, lacks an example).
struct ApprovedUndoWithoutTarget {
    client: ProviderClient,
}

#[connector(id = "approved-undo-bare")]
impl ApprovedUndoWithoutTarget {
    /// Post a ledger entry, reversible for a day.
    #[capability(
        id = "cap:approved-undo-bare:post",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:approved-undo-bare:reverse", window_ms = 86_400_000, requires_approval),
    )]
    async fn post(
        &self,
        transfer: Transfer,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Moved, ConnectorFailure> {
        post_entry(&self.client, transfer, key, checkpoint).await
    }

    /// Reverse an entry once a ledger admin approves.
    #[capability(
        id = "cap:approved-undo-bare:reverse",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(selector = role("ledger-admin"), evidence = [reason]),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        _reversal: Reversal,
        _key: IdempotencyKey,
        _target: Compensation,
        _approval: Approval,
    ) -> Result<Reversed, ConnectorFailure> {
        Ok(Reversed { reversed: true })
    }
}

#[test]
fn approval_on_compensations_without_an_example_of_the_target_says_why() {
    let report = ConformanceSuite::new(|env| ApprovedUndoWithoutTarget {
        client: client(env),
    })
    .run();
    let approval = report
        .check(&Scenario::ApprovalLifecycle.check_name())
        .unwrap();
    assert_eq!(approval.status, CheckStatus::Failed, "{report}");
    assert!(
        approval.detail.contains(
            "the only capabilities that require approval (`cap:approved-undo-bare:reverse`) are compensation-only"
        ) && approval
            .detail
            .contains("needs an example of the compensated capability and one of the compensating capability"),
        "{}",
        approval.detail
    );
}

fn compensation_check(undo: Undo) -> String {
    let report = ConformanceSuite::new(move |env| Undoer {
        client: client(env),
        undo,
    })
    .run();
    let check = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("compensation_governed"),
        Some(&false),
        "{report}"
    );
    check.detail.clone()
}

#[test]
fn a_compensation_that_undoes_nothing_fails_compensation_governed() {
    let detail = compensation_check(Undo::Nothing);
    assert!(
        detail.contains("settled `compensated`, but made no mutating request of the provider"),
        "{detail}"
    );
}

#[test]
fn a_compensation_that_only_looks_its_target_up_fails_compensation_governed() {
    let detail = compensation_check(Undo::LooksThenElse);
    assert!(
        detail.contains("no mutating request it sent (GET /entries/op-conformance-txn-comp-target, POST /audit) names what"),
        "{detail}"
    );
}

#[test]
fn a_compensation_that_undoes_something_else_fails_compensation_governed() {
    let detail = compensation_check(Undo::SomethingElse);
    assert!(
        detail.contains(
            "no mutating request it sent (POST /reversals) names what `cap:undoer:post` left there"
        ) && detail.contains("`op-conformance-txn-comp-target`"),
        "{detail}"
    );
}

// ---- A lost undo read as not done ------------------------------------------------------------------

#[derive(Deserialize, JsonSchema)]
struct VmSpec {
    /// The VM's name.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Vm {
    vm_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct Teardown {
    /// Why the VM goes.
    reason: String,
}

#[derive(Serialize, JsonSchema)]
struct TornDown {
    deleted: String,
}

/// A VM host: `create` makes a VM, `delete` is its compensation. The reconcile companion asks
/// the provider whether the VM exists (`GET /vms/{id}`, 404 when it does not). That answers a
/// lost create; for a lost delete (`compensation_for` set) a missing VM means the undo
/// happened, which only `knows_undo` gets right.
#[derive(Clone)]
struct VmHost {
    client: ProviderClient,
    knows_undo: bool,
}

/// The provider operation of a delete of `vm_id`: the VM's id behind a prefix.
const DELETE_PREFIX: &str = "del-";

#[connector(id = "vm-host")]
impl VmHost {
    /// Create a VM.
    #[capability(
        id = "cap:vms:create",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate, reconcile]),
        compensation(supported, capability = "cap:vms:delete", window_ms = 86_400_000),
        reconcile = Self::find_vm,
        examples = [r#"{"name": "web-1"}"#],
    )]
    async fn create(
        &self,
        spec: VmSpec,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Vm, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "vms".to_owned(),
            operation_id: format!("vm-{}", key.as_str()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        self.client
            .post("/vms")
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation.clone())
            .json(&json!({ "name": spec.name }))
            .send_json::<Value>()
            .await?;
        Ok(Vm {
            vm_id: operation.operation_id,
        })
    }

    /// Delete a VM: the compensation of `create`.
    #[capability(
        id = "cap:vms:delete",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "the rollout failed"}"#],
    )]
    async fn delete(
        &self,
        teardown: Teardown,
        _key: IdempotencyKey,
        target: Compensation,
    ) -> Result<TornDown, ConnectorFailure> {
        let vm_id = target
            .output
            .as_ref()
            .and_then(|o| o.get("vm_id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let operation = ProviderOperationRef {
            provider: "vms".to_owned(),
            operation_id: format!("{DELETE_PREFIX}{vm_id}"),
            request_id: None,
        };
        self.client
            .delete(&format!("/vms/{}", path_segment(&vm_id)))
            .idempotency_key(operation.operation_id.clone())
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .json(&json!({ "reason": teardown.reason }))
            .send_json::<Value>()
            .await?;
        Ok(TornDown { deleted: vm_id })
    }

    async fn find_vm(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let operation = request.provider_operation.operation_id.as_str();
        let vm_id = operation.strip_prefix(DELETE_PREFIX).unwrap_or(operation);
        let exists = match self
            .client
            .get(&format!("/vms/{}", path_segment(vm_id)))
            .operation(ConnectorOperation::Reconciliation)
            .send_json::<Value>()
            .await
        {
            Ok(_) => true,
            Err(failure) if failure.remote_status == Some(404) => false,
            Err(failure) => return Err(failure),
        };
        // The lie, without `knows_undo`: a lost delete is asked about like a lost create.
        let committed = if self.knows_undo && request.compensation_for.is_some() {
            !exists
        } else {
            exists
        };
        let evidence = Some(json!({ "vm_exists": exists }));
        Ok(if committed {
            ReconcileOutcome::Committed { evidence }
        } else {
            ReconcileOutcome::NotCommitted { evidence }
        })
    }
}

/// `GET /vms/{id}` as the real API answers it: the VM while it exists, else 404.
fn vm_provider(provider: &aip_connector_testkit::ProviderHandle) {
    provider.answer("GET /vms/*", |request| {
        let route = request.path();
        let created = request.effects().iter().find(|e| {
            e.method == "POST"
                && e.route == "/vms"
                && format!("/vms/{}", path_segment(&e.operation_id)) == route
        });
        let deleted = request
            .effects()
            .iter()
            .any(|e| e.method == "DELETE" && e.route == route);
        if let Some(created) = created.filter(|_| !deleted) {
            json!({ "vm_id": created.operation_id })
        } else {
            request.with_status(404, json!({ "error": "vm_not_found" }))
        }
    });
}

fn vm_report(knows_undo: bool) -> ConformanceReport {
    ConformanceSuite::new(move |env| VmHost {
        client: client(env),
        knows_undo,
    })
    .with_provider_setup(vm_provider)
    .run()
}

#[test]
fn a_reconcile_that_reads_a_lost_deletes_404_as_not_done_fails_compensation_governed() {
    let report = vm_report(false);
    eprintln!("{report}");
    let check = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap();
    assert_eq!(
        check.assertions.get("compensation_governed"),
        Some(&false),
        "{report}"
    );
    assert!(
        check.detail.contains(
            "the provider took the compensation of `cap:vms:create` through `cap:vms:delete` (operation `del-vm-conformance-txn-comp-lost-target`) and its answer was lost; reconciling the compensation's transaction answered `completed`"
        ) && check.detail.contains("\"committed\":false"),
        "{}",
        check.detail
    );
    // Everything else about its transactions holds.
    for name in [
        "plan_before_commit",
        "provider_operation_checkpointed",
        "reconcile_before_retry",
    ] {
        assert_eq!(check.assertions.get(name), Some(&true), "{name}: {report}");
    }
}

#[test]
fn a_reconcile_that_knows_a_lost_delete_is_an_undo_passes_compensation_governed() {
    let report = vm_report(true);
    let check = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .unwrap();
    assert!(check.passed(), "{report}");
}

// ---- A profile the SDK cannot check ---------------------------------------------------------------

#[derive(Deserialize, JsonSchema)]
struct Ping {
    /// Anything.
    note: String,
}

#[derive(Serialize, JsonSchema)]
struct Pong {
    note: String,
}

/// Declares the webhook profile, but the suite is given no receiver to check: the report must
/// say so rather than pass (`conformance_webhook.rs` gives it one).
struct Hooks;

#[connector(id = "hooks", webhooks = ["hooks"])]
impl Hooks {
    /// Echo a note.
    #[capability(
        id = "cap:hooks:ping",
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"note": "hello"}"#],
    )]
    async fn ping(&self, ping: Ping) -> Result<Pong, ConnectorFailure> {
        Ok(Pong { note: ping.note })
    }
}

#[test]
fn a_webhook_profile_without_a_receiver_fails_webhook_security_with_a_clear_note() {
    let report = ConformanceSuite::new(|_env| Hooks).run();
    eprintln!("{report}");
    assert_caught(
        &report,
        Scenario::WebhookSecurity,
        &["signature_verified", "skew_rejected", "replay_rejected"],
        &[Scenario::IdentityCredentials, Scenario::SchemaEnforcement],
    );
    let detail = &report
        .check(&Scenario::WebhookSecurity.check_name())
        .unwrap()
        .detail;
    assert!(
        detail.contains("the suite has no webhook receiver: give the connector's receivers to `ConformanceSuite::with_webhook`"),
        "{detail}"
    );
}
