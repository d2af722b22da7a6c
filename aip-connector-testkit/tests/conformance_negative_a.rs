//! Connectors that lie, each caught by exactly the check that matches its lie: every other check
//! of the idempotency, retry, errors and audit scenarios (and admission, the contract lints,
//! identity and schema) passes or does not apply.
//!
//! Each liar is the well-behaved booking connector of `conformance_positive_a.rs` with one thing
//! changed. The provider double deduplicates by idempotency key throughout, as a well-kept
//! provider does: the duplicate effects below are the connectors' doing.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

// ---- Lie 1: declares idempotency, forwards no key --------------------------------------------

/// Declares `idempotency(required)` but never takes the key, so the provider cannot recognise a
/// second delivery of the same booking.
#[derive(Clone)]
struct UnkeyedBookings {
    client: ProviderClient,
    operations: Arc<AtomicU64>,
}

#[connector(id = "unkeyed-bookings")]
impl UnkeyedBookings {
    /// Book a slot for a guest.
    #[capability(
        id = "cap:unkeyed-bookings:create",
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = confidential, pii),
        credentials(scopes = ["bookings.write"]),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
        examples = [r#"{"slot": "2026-03-14T09:30", "guest": "Ada Lovelace"}"#],
    )]
    async fn create(
        &self,
        booking: Booking,
        checkpoint: Checkpoint,
        credential: Credential,
    ) -> Result<Booked, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "double".into(),
            operation_id: format!(
                "op-unkeyed-{}",
                self.operations.fetch_add(1, Ordering::Relaxed)
            ),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        // The lie: no `.idempotency(&key)`.
        let answer: Value = self
            .client
            .post("/bookings")
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

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

// ---- Lies 2 to 5: a keyed connector that leaks, rotates its key, or stores an input --------

/// What a [`KeyedBookings`] gets wrong.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lie {
    /// Puts the credential's secret into the message of every failure.
    SecretInError,
    /// Declares its retries safe with the key, but sends a new provider key after a failed
    /// attempt (as if a failed request "burnt" its key): a retry of a change the provider had
    /// already applied applies it again.
    RotatesKeyAfterFailure,
    /// Declares PII that must be redacted, then checkpoints a cursor that quotes the guest's
    /// name: the host stores it in the transaction record.
    InputInCheckpoint,
    /// Logs the credential's secret.
    LogsSecret,
    /// Logs the slot glued to a prefix (`slot_2026-03-14T09:30`), which the word rule for log
    /// lines let through (an HR author trial's `adj_987-65-4321`).
    LogsInputGlued,
    /// Logs the guest's name from a task it spawns with a plain `tokio::spawn`, outside the
    /// call's log capture (the same trial).
    LogsInputFromSpawnedTask,
    /// Forwards the caller's raw key (`key.as_str()`) instead of the scoped one, so two tenants'
    /// equal keys would be one operation at the provider.
    ForwardsRawKey,
    /// Puts a fresh request id into every request's body under the stable key: a provider that
    /// checks a reused key's body refuses the redelivery of an action that took effect.
    FreshIdInBody,
    /// Names each write by a fresh operation id (`x-operation-id`, and its checkpoint) instead
    /// of one derived from the key: the provider files a redelivery's replay under the first
    /// id, so the second one's checkpoint names an operation no lookup finds.
    FreshOperationId,
}

/// The "fresh" ids [`Lie::FreshIdInBody`] sends, one per request.
static REQUEST_IDS: AtomicU64 = AtomicU64::new(0);

#[derive(Clone)]
struct KeyedBookings {
    client: ProviderClient,
    lie: Lie,
    failures: Arc<Mutex<HashMap<String, u32>>>,
}

#[connector(id = "keyed-bookings")]
impl KeyedBookings {
    /// Book a slot for a guest.
    #[capability(
        id = "cap:keyed-bookings:create",
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
            operation_id: if self.lie == Lie::FreshOperationId {
                format!("op-{}", REQUEST_IDS.fetch_add(1, Ordering::Relaxed))
            } else {
                format!("op-{key}")
            },
            request_id: None,
        };
        let cursor =
            (self.lie == Lie::InputInCheckpoint).then(|| format!("guest={}", booking.guest));
        checkpoint.record(operation.clone(), cursor).await?;
        if self.lie == Lie::LogsInputGlued {
            tracing::info!("reserving slot_{}", booking.slot);
        }
        if self.lie == Lie::LogsInputFromSpawnedTask {
            let guest = booking.guest.clone();
            tokio::spawn(async move {
                tracing::info!(guest = %guest, "background audit of a booking");
            });
        }
        if self.lie == Lie::LogsSecret {
            tracing::info!(
                token = credential.secret().expose_str().unwrap_or_default(),
                "calling the provider"
            );
        }
        let failed_before = self.failures().get(key.as_str()).copied().unwrap_or(0);
        let provider_key = match (self.lie, failed_before) {
            (Lie::RotatesKeyAfterFailure, n) if n > 0 => {
                format!("{}-attempt-{n}", key.for_provider())
            }
            (Lie::ForwardsRawKey, _) => key.as_str().to_owned(),
            _ => key.for_provider().to_owned(),
        };
        let answer: Result<Value, ConnectorFailure> = self
            .client
            .post("/bookings")
            .idempotency_key(provider_key)
            .bearer_auth(credential.secret())
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .json(&if self.lie == Lie::FreshIdInBody {
                let request_id = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
                json!({ "slot": booking.slot, "guest": booking.guest, "request_id": request_id })
            } else {
                json!({ "slot": booking.slot, "guest": booking.guest })
            })
            .send_json()
            .await;
        let answer = answer.map_err(|mut failure| {
            *self.failures().entry(key.to_string()).or_default() += 1;
            if self.lie == Lie::SecretInError {
                // The lie: the credential in a message that ends up in results and records.
                failure.message = format!(
                    "{} (called with credential {})",
                    failure.message,
                    credential.secret().expose_str().unwrap_or_default()
                );
            }
            failure
        })?;
        Ok(Booked {
            booking_id: answer["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        common::look_up_operation(&self.client, request).await
    }
}

impl KeyedBookings {
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn keyed(lie: Lie) -> ConformanceSuite {
    ConformanceSuite::new(move |env| KeyedBookings {
        client: common::double_client(env.provider_url()),
        lie,
        failures: Arc::default(),
    })
}

// ---- What each lie must trip ------------------------------------------------------------------

/// The checks these fixtures are judged on: the framework's, and the four scenarios of this
/// file's suite. (The other scenarios have fixtures of their own.)
const JUDGED: [&str; 12] = [
    "discovery.manifest",
    "discovery.profile_set",
    "discovery.profile_bindings",
    "connector.manifest",
    "connector.atomic_manifest_admission",
    "enterprise.capability_contract",
    "connector.behavior.identity_credentials",
    "connector.behavior.schema_enforcement",
    "connector.behavior.idempotency_duplicates",
    "connector.behavior.retry_exhaustion",
    "connector.behavior.errors_uncertain_outcomes",
    "connector.behavior.audit_redaction",
];

fn failing(check: &CheckResult) -> Vec<&str> {
    check
        .assertions
        .iter()
        .filter(|(_, held)| !**held)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// Asserts that `scenario` failed on exactly the assertions `caught` and that every other
/// judged check passed or did not apply.
#[track_caller]
fn assert_caught_only_by(report: &ConformanceReport, scenario: Scenario, caught: &[&str]) {
    eprintln!("{report}");
    for name in JUDGED {
        let check = report
            .check(name)
            .unwrap_or_else(|| panic!("`{name}` is in the report"));
        if name == scenario.check_name() {
            assert_eq!(check.status, CheckStatus::Failed, "{report}");
            // One problem per line of the detail, continuation lines indented under the check.
            let detail = check.detail.replace('\n', "\n      ");
            assert!(
                report
                    .summary()
                    .contains(&format!("  FAIL {name}: {detail}\n")),
                "the summary names the failure: {}",
                report.summary()
            );
            assert_eq!(failing(check), caught, "{name}: {}", check.detail);
            assert!(!check.artifacts.is_empty(), "{name} points at nothing");
        } else {
            assert!(
                check.passed(),
                "`{name}` should not catch this lie: {}",
                check.detail
            );
        }
    }
}

#[test]
fn forwarding_no_key_is_caught_by_idempotency_duplicates_only() {
    let report = ConformanceSuite::new(|env| UnkeyedBookings {
        client: common::double_client(env.provider_url()),
        operations: Arc::default(),
    })
    .run();
    assert_caught_only_by(
        &report,
        Scenario::IdempotencyDuplicates,
        &["delivery_id_stable", "duplicate_suppressed"],
    );
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert!(
        check.detail.contains("committed 1 new provider effect"),
        "{}",
        check.detail
    );
    assert!(check.artifacts.iter().any(|a| a.starts_with("req_")));
    // Without the key the handler cannot retry safely, so it claims no retry support at all.
    assert_eq!(
        report
            .check(&Scenario::RetryExhaustion.check_name())
            .unwrap()
            .status,
        CheckStatus::NotApplicable
    );
}

#[test]
fn a_secret_in_a_failure_message_is_caught_by_error_secrets_redacted_only() {
    let report = keyed(Lie::SecretInError).run();
    assert_caught_only_by(
        &report,
        Scenario::ErrorsUncertainOutcomes,
        &["error_secrets_redacted"],
    );
    let check = report
        .check(&Scenario::ErrorsUncertainOutcomes.check_name())
        .unwrap();
    assert!(check.detail.contains("canary secret"), "{}", check.detail);
    // The report quotes where the secret was found, never the secret.
    assert!(
        !report
            .to_json_pretty()
            .contains(aip_connector_testkit::conformance::CANARY_SECRET)
    );
}

#[test]
fn retrying_with_a_new_key_is_caught_by_retry_exhaustion_only() {
    let report = keyed(Lie::RotatesKeyAfterFailure).run();
    assert_caught_only_by(
        &report,
        Scenario::RetryExhaustion,
        &["declared_retry_safety_held"],
    );
    let check = report
        .check(&Scenario::RetryExhaustion.check_name())
        .unwrap();
    assert!(
        check.detail.contains("left 2 effect(s)"),
        "{}",
        check.detail
    );
}

#[test]
fn forwarding_the_raw_key_is_caught_by_delivery_id_stable_only() {
    let report = keyed(Lie::ForwardsRawKey).run();
    assert_caught_only_by(
        &report,
        Scenario::IdempotencyDuplicates,
        &["delivery_id_stable"],
    );
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert!(check.detail.contains("aip1_"), "{}", check.detail);
    // The key each request carried is quoted as text, not as `Some("...")`.
    assert!(check.detail.contains(" carried `"), "{}", check.detail);
    assert!(!check.detail.contains("Some("), "{}", check.detail);
}

#[test]
fn a_fresh_id_in_each_request_body_is_caught_by_duplicate_suppressed() {
    let report = keyed(Lie::FreshIdInBody).run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert_eq!(failing(check), ["duplicate_suppressed"], "{}", check.detail);
    assert!(
        check.detail.contains("where the first delivery completed")
            && check.detail.contains("POST /bookings: `request_id`")
            && check.detail.contains("key.for_provider()"),
        "{}",
        check.detail
    );
}

#[test]
fn a_fresh_operation_id_per_delivery_is_caught_by_delivery_id_stable() {
    let report = keyed(Lie::FreshOperationId).run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .unwrap();
    assert_eq!(failing(check), ["delivery_id_stable"], "{}", check.detail);
    assert!(
        check
            .detail
            .contains("the redelivery named its writes by other operation ids in `x-operation-id`")
            && check.detail.contains("POST /bookings: `op-")
            && check.detail.contains("key.for_provider()"),
        "{}",
        check.detail
    );
}

/// Runs `lie`, which only `sensitive_fields_redacted` must catch, with a detail that names
/// `evidence`.
fn assert_redaction_caught(lie: Lie, evidence: &str) {
    let report = keyed(lie).run();
    assert_caught_only_by(
        &report,
        Scenario::AuditRedaction,
        &["sensitive_fields_redacted"],
    );
    let check = report
        .check(&Scenario::AuditRedaction.check_name())
        .unwrap();
    assert!(check.detail.contains(evidence), "{}", check.detail);
}

#[test]
fn an_input_value_in_a_stored_cursor_is_caught_by_sensitive_fields_redacted_only() {
    assert_redaction_caught(Lie::InputInCheckpoint, "transaction view");
}

#[test]
fn an_input_value_logged_glued_to_a_prefix_is_caught_by_sensitive_fields_redacted_only() {
    assert_redaction_caught(Lie::LogsInputGlued, "`2026-03-14T09:30`");
}

#[test]
fn an_input_value_logged_by_a_spawned_task_is_caught_by_sensitive_fields_redacted_only() {
    assert_redaction_caught(Lie::LogsInputFromSpawnedTask, "`Ada Lovelace`");
}

// ---- A plan preview that echoes personal data -------------------------------------------------

#[derive(Deserialize, JsonSchema)]
struct Hold {
    /// The slot to hold.
    slot_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Held {
    /// The provider's operation for the hold.
    hold_id: String,
}

#[derive(Serialize, JsonSchema)]
struct HoldPreview {
    /// The slot the hold would take: the input, echoed.
    slot_id: String,
    /// Whether the slot is free.
    free: bool,
}

/// Holds a slot of a patient's calendar: the input is personal data, and its `validate`
/// companion echoes it in the plan's preview, which the host stores as returned (an author
/// trial's calendar connector did this, and the failure named no place to look).
#[derive(Clone)]
struct EchoingPreview {
    client: ProviderClient,
}

#[connector(id = "slot-holds")]
impl EchoingPreview {
    /// Hold a calendar slot for a patient.
    #[capability(
        id = "cap:slot-holds:hold",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential, pii),
        transaction(modes = [plan, commit], fidelity = downstream_validation),
        validate = Self::preview,
        examples = [r#"{"slot_id": "slot-2024-05-01-0900"}"#],
    )]
    async fn hold(
        &self,
        hold: Hold,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Held, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "calendar".to_owned(),
            operation_id: format!("op-{}", key.for_provider()),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let _: Value = self
            .client
            .post("/holds")
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation.clone())
            .json(&json!({ "slot_id": hold.slot_id }))
            .send_json()
            .await?;
        Ok(Held {
            hold_id: operation.operation_id,
        })
    }

    /// The lie: the preview quotes the slot it was given.
    async fn preview(&self, hold: Hold) -> Result<HoldPreview, ConnectorFailure> {
        Ok(HoldPreview {
            slot_id: hold.slot_id,
            free: true,
        })
    }
}

#[test]
fn an_input_value_in_a_plan_preview_is_located_by_its_json_pointer() {
    let report = ConformanceSuite::new(|env| EchoingPreview {
        client: common::double_client(env.provider_url()),
    })
    .run();
    eprintln!("{report}");
    let check = report
        .check(&Scenario::AuditRedaction.check_name())
        .unwrap();
    assert_eq!(
        failing(check),
        ["sensitive_fields_redacted"],
        "{}",
        check.detail
    );
    assert!(
        check.detail.contains(
            r#"its transaction view quotes its input values: "slot-2024-05-01-0900" at /plan/metadata/connector_validation/slot_id"#
        ),
        "{}",
        check.detail
    );
    assert!(
        check
            .detail
            .contains("output of the capability's `validate` companion")
            && check.detail.contains("do not echo input values in it"),
        "{}",
        check.detail
    );
}

#[test]
fn a_secret_in_a_log_line_is_caught_by_raw_secret_absent_only() {
    let report = keyed(Lie::LogsSecret).run();
    assert_caught_only_by(&report, Scenario::AuditRedaction, &["raw_secret_absent"]);
    let check = report
        .check(&Scenario::AuditRedaction.check_name())
        .unwrap();
    assert!(check.detail.contains("log line"), "{}", check.detail);
}
