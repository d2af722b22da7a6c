//! The idempotency, retry, errors and audit scenarios against a well-behaved keyed write
//! connector: it forwards the action's key, sends the credential only to the provider,
//! checkpoints its provider operation before calling, and reconciles a lost answer by looking
//! the operation up.
//!
//! It passes every one of those checks, none of them vacuously.

mod common;

use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckResult, CheckStatus, ConformanceReport, ConformanceSuite, Scenario,
};
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

#[derive(Deserialize, JsonSchema)]
struct Note {
    /// The booking to annotate.
    booking_id: String,
    /// The note.
    note: String,
}

#[derive(Serialize, JsonSchema)]
struct Changed {
    /// The provider's operation for the change.
    operation_id: String,
}

/// Bookings at a provider, done right.
#[derive(Clone)]
struct Bookings {
    client: ProviderClient,
}

#[connector(id = "bookings")]
impl Bookings {
    /// Book a slot for a guest.
    #[capability(
        id = "cap:bookings:create",
        risk = medium,
        side_effects = [write],
        data(sensitivity = confidential, pii),
        credentials(scopes = ["bookings.write"]),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"slot": "2026-03-14T09:30", "guest": "Ada Lovelace"}"#],
    )]
    async fn create(
        &self,
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
        // Durable before the provider is called: a lost answer can always be looked up.
        checkpoint.record(operation.clone(), None).await?;
        let answer: Value = self
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

    /// Rename a booking. Resending the same rename replays it; another rename under the same
    /// key is refused.
    #[capability(
        id = "cap:bookings:rename",
        risk = low,
        side_effects = [write],
        idempotency(collision = reject_conflict, scope = principal),
        data(sensitivity = internal),
        examples = [r#"{"booking_id": "op-1", "title": "Team sync"}"#],
    )]
    async fn rename(
        &self,
        rename: Rename,
        key: IdempotencyKey,
    ) -> Result<Changed, ConnectorFailure> {
        let path = format!("/bookings/{}", rename.booking_id);
        let answer: Value = self
            .client
            .patch(&path)
            .idempotency(&key)
            .json(&json!({ "title": rename.title }))
            .send_json()
            .await?;
        Ok(Changed {
            operation_id: answer["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// Add a note to a booking. A key is the action's own; reusing it returns the first note.
    #[capability(
        id = "cap:bookings:annotate",
        risk = low,
        side_effects = [write],
        idempotency(collision = return_original_result, scope = action),
        data(sensitivity = internal),
        examples = [r#"{"booking_id": "op-1", "note": "Bring the slides"}"#],
    )]
    async fn annotate(&self, note: Note, key: IdempotencyKey) -> Result<Changed, ConnectorFailure> {
        let path = format!("/bookings/{}/notes", note.booking_id);
        let answer: Value = self
            .client
            .post(&path)
            .idempotency(&key)
            .json(&json!({ "note": note.note }))
            .send_json()
            .await?;
        Ok(Changed {
            operation_id: answer["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

fn check(report: &ConformanceReport, scenario: Scenario) -> &CheckResult {
    report
        .check(&scenario.check_name())
        .unwrap_or_else(|| panic!("{scenario} is in the report"))
}

#[test]
fn a_keyed_transactional_write_connector_passes_idempotency_retry_errors_and_audit() {
    let report = ConformanceSuite::new(|env| Bookings {
        client: common::double_client(env.provider_url()),
    })
    .run();
    eprintln!("{report}");
    for name in [
        "connector.atomic_manifest_admission",
        "enterprise.capability_contract",
    ] {
        assert_eq!(
            report.check(name).unwrap().status,
            CheckStatus::Passed,
            "{report}"
        );
    }
    for scenario in [
        Scenario::IdentityCredentials,
        Scenario::SchemaEnforcement,
        Scenario::IdempotencyDuplicates,
        Scenario::RetryExhaustion,
        Scenario::ErrorsUncertainOutcomes,
        Scenario::AuditRedaction,
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Passed, "{report}");
        for name in scenario.required_assertions() {
            assert_eq!(check.assertions.get(*name), Some(&true), "{name}: {report}");
        }
        assert!(!check.artifacts.is_empty());
    }
    // Not vacuous: this connector mutates, redacts and reconciles.
    let errors = check(&report, Scenario::ErrorsUncertainOutcomes);
    assert!(!errors.detail.contains("vacuously"), "{}", errors.detail);
    assert!(
        errors
            .artifacts
            .iter()
            .any(|a| a.starts_with("transaction:"))
    );
    let audit = check(&report, Scenario::AuditRedaction);
    assert!(!audit.detail.contains("vacuously"), "{}", audit.detail);
    // Nor is tenant isolation: the capability needs a credential, and the other tenant's call
    // still reaches the shared key (served by a deployment of its own tenant).
    let identity = check(&report, Scenario::IdentityCredentials);
    assert!(
        !identity.detail.contains("not exercised"),
        "{}",
        identity.detail
    );

    // Beyond the required assertions: retrying a change the provider already applied is safe.
    let retry = check(&report, Scenario::RetryExhaustion);
    assert_eq!(
        retry.assertions.get("declared_retry_safety_held"),
        Some(&true),
        "{}",
        retry.detail
    );
}
