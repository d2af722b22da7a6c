//! A commit that writes twice, a hold and then its confirmation (docs/transactions.md §3),
//! passes conformance: the suite loses the answer of the first write, the hold, before the
//! confirmation leaves, and the reconcile companion that looks up the checkpointed operation
//! (the confirmation's) truthfully answers "not committed". A booking trial's connector built so
//! failed two checks, because the suite held the hold's effect against that answer.
//!
//! The suite still catches a companion that does not look, and a connector whose checkpoint
//! names an operation its writes do not carry (then every effect of the call counts).

mod common;

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceReport, ConformanceSuite, Scenario};
use aip_connector_testkit::provider_double::OPERATION_ID_HEADER;
use serde_json::Value;

#[derive(Deserialize, Serialize, JsonSchema)]
struct Booking {
    /// The room to book.
    room: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    /// The provider's operation id of the confirmation.
    confirmation: String,
}

/// How the connector under test is built.
#[derive(Clone, Copy)]
enum Variant {
    /// Hold, then confirm; each write under its own operation id, the confirmation's
    /// checkpointed; the companion looks the confirmation up.
    HoldThenConfirm,
    /// The same writes, and a companion that answers "committed" without looking.
    ClaimsCommittedBlindly,
    /// One write sent under an operation id the checkpoint does not name, and a companion that
    /// answers "not committed" without looking.
    MisnamedWrite,
    /// The main write sent without an operation id, then a second write under the checkpointed
    /// one, which the companion looks up (a review's adversary: the main write landed, and the
    /// companion truthfully says the second did not).
    UnnamedMainWrite,
}

struct Hotel {
    api: ProviderClient,
    variant: Variant,
}

#[connector(id = "hotel")]
impl Hotel {
    /// Book a room: hold it, then confirm the hold.
    #[capability(
        risk = medium,
        side_effects = [write],
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find,
        examples = [r#"{"room": "A-12"}"#],
    )]
    async fn book(
        &self,
        input: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        let confirmation = checkpoint.operation_for(&key, "hotel", "bk");
        checkpoint.record(confirmation.clone(), None).await?;
        if let Variant::UnnamedMainWrite = self.variant {
            self.api
                .post("/charges")
                .idempotency(&key)
                .json(&input)
                .send_json::<Value>()
                .await?;
            self.api
                .post("/receipts")
                .idempotency_key(format!("receipt:{}", key.for_provider()))
                .header(OPERATION_ID_HEADER, &confirmation.operation_id)
                .send_json::<Value>()
                .await?;
            return Ok(Booked {
                confirmation: confirmation.operation_id,
            });
        }
        if let Variant::MisnamedWrite = self.variant {
            self.api
                .post("/bookings")
                .idempotency(&key)
                .header(OPERATION_ID_HEADER, format!("other-{}", key.for_provider()))
                .json(&input)
                .send_json::<Value>()
                .await?;
            return Ok(Booked {
                confirmation: confirmation.operation_id,
            });
        }
        let hold: Value = self
            .api
            .post("/holds")
            .idempotency_key(format!("hold:{}", key.for_provider()))
            .header(OPERATION_ID_HEADER, format!("hd-{}", key.for_provider()))
            .json(&input)
            .send_json()
            .await?;
        let hold_id = hold["operation_id"].as_str().unwrap_or_default().to_owned();
        checkpoint
            .record(confirmation.clone(), Some(hold_id.clone()))
            .await?;
        self.api
            .post(&format!("/holds/{hold_id}/confirm"))
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &confirmation.operation_id)
            .provider_operation(confirmation.clone())
            .send_json::<Value>()
            .await?;
        Ok(Booked {
            confirmation: confirmation.operation_id,
        })
    }

    async fn find(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        match self.variant {
            Variant::HoldThenConfirm | Variant::UnnamedMainWrite => {
                common::look_up_operation(&self.api, request).await
            }
            Variant::ClaimsCommittedBlindly => Ok(ReconcileOutcome::Committed { evidence: None }),
            Variant::MisnamedWrite => Ok(ReconcileOutcome::NotCommitted { evidence: None }),
        }
    }
}

fn run(variant: Variant) -> ConformanceReport {
    ConformanceSuite::new(move |env| Hotel {
        api: common::double_client(env.provider_url()),
        variant,
    })
    .run()
}

/// The two checks that lose a write's answer and reconcile it.
fn reconciled(report: &ConformanceReport) -> [Option<bool>; 2] {
    let uncertain = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .and_then(|check| {
            check
                .assertions
                .get("uncertain_outcome_reconciled")
                .copied()
        });
    let before_retry = report
        .check(&Scenario::TransactionLifecycle.check_name())
        .and_then(|check| check.assertions.get("reconcile_before_retry").copied());
    [uncertain, before_retry]
}

#[test]
fn a_hold_lost_before_its_confirmation_is_not_committed() {
    let report = run(Variant::HoldThenConfirm);
    assert_eq!(reconciled(&report), [Some(true), Some(true)], "{report}");
    assert!(report.passed(), "{report}");
}

#[test]
fn a_companion_that_answers_committed_without_looking_still_fails() {
    let report = run(Variant::ClaimsCommittedBlindly);
    assert_eq!(reconciled(&report), [Some(false), Some(false)], "{report}");
}

#[test]
fn a_write_filed_under_another_operation_than_the_checkpoint_counts_as_the_call_s() {
    let report = run(Variant::MisnamedWrite);
    assert_eq!(reconciled(&report), [Some(false), Some(false)], "{report}");
}

#[test]
fn a_main_write_that_names_no_operation_counts_with_every_effect() {
    let report = run(Variant::UnnamedMainWrite);
    assert_eq!(reconciled(&report), [Some(false), Some(false)], "{report}");
}
