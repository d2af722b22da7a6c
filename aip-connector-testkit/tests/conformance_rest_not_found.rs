//! A connector for a REST API that answers a missing resource `404` passes conformance once the
//! double answers like that API (`AnswerRequest::with_status`): its reconcile companion reads
//! "not found" as "never committed", and the suite's lost write is reconciled through it. An
//! author trial had to give its fictional provider an operation-lookup API instead, because a
//! shaped answer could not carry a status.

mod common;

use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceSuite, Scenario};
use aip_connector_testkit::provider_double::{OPERATION_ID_HEADER, ProviderHandle};
use serde_json::json;

#[derive(Deserialize, Serialize, JsonSchema)]
struct CreateTicket {
    /// The ticket's title.
    title: String,
}

#[derive(Serialize, JsonSchema)]
struct Created {
    /// The provider's ticket id.
    id: String,
}

/// The API's ticket, from `POST /tickets` and `GET /tickets/{id}`, decoded strictly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiTicket {
    id: String,
    title: String,
}

struct Tickets {
    api: ProviderClient,
}

#[connector(id = "tickets")]
impl Tickets {
    /// Create a ticket.
    #[capability(
        risk = medium,
        side_effects = [write],
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
        examples = [r#"{"title": "Printer on fire"}"#],
    )]
    async fn create_ticket(
        &self,
        input: CreateTicket,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Created, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "tickets".into(),
            operation_id: format!("tk-{key}"),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let ticket: ApiTicket = self
            .api
            .post("/tickets")
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .json(&input)
            .send_json()
            .await?;
        debug_assert_eq!(ticket.title, input.title);
        Ok(Created { id: ticket.id })
    }

    /// `GET /tickets/{id}`: the ticket is committed; `404`: it never was; anything else is
    /// not an answer, so the outcome stays unknown (an error, not a guess).
    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let path = format!("/tickets/{}", request.provider_operation.operation_id);
        match self.api.get(&path).send_json::<ApiTicket>().await {
            Ok(ticket) => Ok(ReconcileOutcome::Committed {
                evidence: Some(json!({ "ticket": ticket.id })),
            }),
            Err(failure) if failure.remote_status == Some(404) => {
                Ok(ReconcileOutcome::NotCommitted { evidence: None })
            }
            Err(failure) => Err(failure),
        }
    }
}

/// Shapes the double like the tickets API: `POST /tickets` answers the created ticket,
/// `GET /tickets/{id}` the ticket, or `404` when no write created it.
fn answer_like_the_api(provider: &ProviderHandle) {
    provider.answer(
        "/tickets",
        |request| json!({ "id": request.operation_id(), "title": request.body()["title"] }),
    );
    provider.answer("/tickets/*", |request| {
        let id = request.path().trim_start_matches("/tickets/");
        match request.effects().iter().find(|e| e.operation_id == id) {
            Some(created) => created.answer.clone(),
            None => request.with_status(404, json!({ "error": "ticket_not_found" })),
        }
    });
}

fn suite() -> ConformanceSuite {
    ConformanceSuite::new(|env| Tickets {
        api: common::double_client(env.provider_url()),
    })
}

#[test]
fn a_rest_api_that_answers_404_for_a_missing_ticket_passes() {
    let report = suite().with_provider_setup(answer_like_the_api).run();
    eprintln!("{report}");
    assert!(report.passed(), "{report}");
    let errors = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_eq!(
        errors.assertions.get("uncertain_outcome_reconciled"),
        Some(&true),
        "{report}"
    );
}

/// Without the `404` the same connector cannot tell a lost write from a committed one: the
/// double's generic read answer is not a ticket, so reconciliation errs and the suite fails.
#[test]
fn without_the_404_the_lost_write_is_not_reconciled() {
    let report = suite()
        .with_provider_setup(|provider| {
            provider.answer(
                "/tickets",
                |request| json!({ "id": request.operation_id(), "title": request.body()["title"] }),
            );
        })
        .run();
    assert!(!report.passed(), "{report}");
    let errors = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert_ne!(
        errors.assertions.get("uncertain_outcome_reconciled"),
        Some(&true),
        "{report}"
    );
}
