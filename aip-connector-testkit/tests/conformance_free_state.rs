//! A connector of free `#[capability]` functions that calls a provider: its client is the
//! connector's state (`ConnectorBuilder::with_state`), taken by the handlers and the
//! reconciliation companion as `State<Bookings>`. The suite builds one connector per scenario
//! against its own provider double, which a free function could not reach before state.
//!
//! It passes the same scenarios as the `#[connector]` bookings of `conformance_positive_a.rs`.

mod common;

use aip_connector::BuiltConnector;
use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{CheckStatus, ConformanceSuite, Scenario};
use aip_connector_testkit::provider_double::OPERATION_ID_HEADER;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Booking {
    /// The slot to book.
    slot: String,
    /// Who the booking is for.
    guest: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    /// The provider's operation for the booking.
    booking_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct Rename {
    /// The booking to rename.
    booking_id: String,
    /// Its new title.
    title: String,
}

/// What the capabilities share: the provider of this connector instance.
#[derive(Clone)]
struct Bookings {
    client: ProviderClient,
}

/// Book a slot for a guest.
#[capability(
    id = "cap:bookings:create",
    risk = medium,
    side_effects = [write],
    data(sensitivity = confidential, pii),
    credentials(scopes = ["bookings.write"]),
    transaction(modes = [execute, reconcile]),
    reconcile = look_up,
    examples = [r#"{"slot": "2026-03-14T09:30", "guest": "Ada Lovelace"}"#],
)]
async fn create(
    State(bookings): State<Bookings>,
    booking: Booking,
    key: IdempotencyKey,
    checkpoint: Checkpoint,
    credential: Credential,
) -> Result<Booked, ConnectorFailure> {
    let operation = ProviderOperationRef {
        provider: "double".into(),
        operation_id: format!("op-{key}"),
        request_id: None,
    };
    checkpoint.record(operation.clone(), None).await?;
    let answer: Value = bookings
        .client
        .post("/bookings")
        .idempotency(&key)
        .bearer_auth(credential.secret())
        .header(OPERATION_ID_HEADER, &operation.operation_id)
        .provider_operation(operation)
        .json(&json!({ "slot": booking.slot, "guest": booking.guest }))
        .send_json()
        .await?;
    Ok(Booked {
        booking_id: answer["operation_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    })
}

/// Settles a lost answer by asking this connector's provider.
async fn look_up(
    State(bookings): State<Bookings>,
    request: Reconciliation,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    common::look_up_operation(&bookings.client, request).await
}

/// Rename a booking. Resending the same rename replays it; another rename under the same key
/// is refused.
#[capability(
    id = "cap:bookings:rename",
    risk = low,
    side_effects = [write],
    idempotency(collision = reject_conflict, scope = principal),
    data(sensitivity = internal),
    examples = [r#"{"booking_id": "op-1", "title": "Team sync"}"#],
)]
async fn rename(
    rename: Rename,
    key: IdempotencyKey,
    State(bookings): State<Bookings>,
) -> Result<Booked, ConnectorFailure> {
    let path = format!("/bookings/{}", rename.booking_id);
    let answer: Value = bookings
        .client
        .patch(&path)
        .idempotency(&key)
        .json(&json!({ "title": rename.title }))
        .send_json()
        .await?;
    Ok(Booked {
        booking_id: answer["operation_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    })
}

fn bookings(provider_url: &str) -> BuiltConnector<Bookings> {
    let client = common::double_client(provider_url);
    ConnectorBuilder::with_state("bookings", Bookings { client })
        .capability::<create>()
        .capability::<rename>()
        .build()
        .expect("two capabilities with distinct ids")
}

#[test]
fn a_free_function_connector_with_a_provider_client_passes_conformance() {
    let report = ConformanceSuite::new(|env| bookings(env.provider_url())).run();
    eprintln!("{report}");
    for scenario in [
        Scenario::IdentityCredentials,
        Scenario::SchemaEnforcement,
        Scenario::IdempotencyDuplicates,
        Scenario::RetryExhaustion,
        Scenario::ErrorsUncertainOutcomes,
        Scenario::AuditRedaction,
    ] {
        let check = report.check(&scenario.check_name()).unwrap();
        assert_eq!(check.status, CheckStatus::Passed, "{scenario}: {report}");
        for name in scenario.required_assertions() {
            assert_eq!(check.assertions.get(*name), Some(&true), "{name}: {report}");
        }
    }
    // Not vacuous: the lost answer was settled through the free companion and its state.
    let errors = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert!(!errors.detail.contains("vacuously"), "{}", errors.detail);
    assert!(
        errors
            .artifacts
            .iter()
            .any(|a| a.starts_with("transaction:")),
        "{report}"
    );
    assert!(report.passed(), "{report}");
}
