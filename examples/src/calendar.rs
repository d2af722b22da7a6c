//! Calendar booking: the seed's `cap:calendar:booking:create`, booked at a provider through
//! [`ProviderClient`], with plan/commit, a provider operation checkpointed before the provider
//! is called, reconciliation of unknown outcomes, and a booking lookup.
//!
//! The contract is the seed's (`seed-capabilities-and-contracts.md`: tenant-scoped required
//! idempotency, retry only with the key, internal data with PII, redacted) plus the transaction
//! section of the design's author's view: `execute`, `plan`, `commit` (a commit needs a plan)
//! and `reconcile`.
//!
//! What happens on the wire, per booking attempt:
//!
//! 1. the handler picks the provider operation id (`bk_<provider key>`, derived from the
//!    action's idempotency key, or the one an earlier attempt of the transaction recorded) and records it with [`Checkpoint`] — durably, before
//!    anything is sent;
//! 2. `POST /bookings` with that id in `x-operation-id`, the tenant-scoped idempotency key, and
//!    the action's deadline;
//! 3. the booking id is the provider's operation id.
//!
//! If the request was sent and no answer came back, the provider client reports
//! `provider.outcome_unknown` with `uncertain_outcome`, the host settles the transaction as
//! `outcome_unknown`, refuses to execute it again (`transaction.reconciliation_required`), and a
//! `reconcile` asks the provider about the checkpointed operation (`GET /operations/{id}`).

use aip_connector::model::{ConnectorOperation, ProviderOperationRef};
use aip_connector::prelude::*;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::provider_api::{self, OPERATION_ID_HEADER, OperationState};

/// The connector id.
pub const CONNECTOR_ID: &str = "calendar";
/// The booking capability (the seed's).
pub const CREATE_BOOKING: &str = Calendar::CREATE_BOOKING_ID;
/// The lookup capability.
pub const GET_BOOKING: &str = Calendar::GET_BOOKING_ID;
/// The provider route bookings are created on.
pub const BOOKINGS_ROUTE: &str = "/bookings";
/// The `provider` named in the checkpointed operation.
pub const PROVIDER: &str = "calendar-provider";

/// What to book (the seed's input: one start time, nothing else).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBooking {
    /// When the booking starts: an RFC 3339 date-time such as `2026-12-01T09:00:00Z`.
    #[schemars(extend("format" = "date-time"))]
    pub starts_at: String,
}

/// The booking made (the seed's output).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Booking {
    /// The provider's id of the booking (its operation id).
    pub booking_id: String,
}

/// Which booking to look up.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BookingRef {
    /// A booking id returned by `cap:calendar:booking:create`.
    #[schemars(length(min = 1, max = 128), pattern(r"^[A-Za-z0-9_.~-]+$"))]
    pub booking_id: String,
}

/// What the provider knows about a booking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BookingState {
    /// The provider holds the booking.
    Confirmed,
    /// The provider has not decided yet; ask again later.
    Pending,
    /// The provider holds no such booking for this tenant.
    Unknown,
}

/// A booking as the provider sees it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
pub struct BookingStatus {
    /// The booking id asked about.
    pub booking_id: String,
    /// What the provider knows about it.
    pub state: BookingState,
    /// When it starts, for a confirmed booking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<String>,
}

/// The body of `POST /bookings`. The tenant's calendar is named in the body, so a lookup can
/// refuse to show one tenant another tenant's booking.
#[derive(Serialize)]
struct ProviderBookingRequest<'a> {
    calendar: &'a str,
    starts_at: &'a str,
}

/// The provider's answer to `POST /bookings`.
#[derive(Deserialize)]
struct ProviderEffect {
    operation_id: String,
}

/// The calendar connector: books at the provider behind `api`.
#[derive(Clone, Debug)]
pub struct Calendar {
    api: ProviderClient,
}

impl Calendar {
    /// A calendar that books through `api` (its base URL is the provider's API root).
    pub fn new(api: ProviderClient) -> Self {
        Self { api }
    }
}

#[connector(id = "calendar", name = "Calendar")]
impl Calendar {
    /// Create a booking.
    ///
    /// Books the slot at the provider under the tenant-scoped idempotency key. Commit requires
    /// a plan; an outcome lost on the wire is reconciled against the provider, never retried
    /// blindly.
    #[capability(
        id = "cap:calendar:booking:create",
        name = "Create booking",
        risk = medium,
        stability = stable,
        side_effects = [write, external_network],
        idempotency(required, collision = revalidate_input_hash, scope = tenant, ttl_ms = 86_400_000),
        execution(sync, retry_safety = safe_with_idempotency_key),
        data(sensitivity = internal, pii, redaction),
        transaction(modes = [execute, plan, commit, reconcile], requires_plan, fidelity = policy_and_schema),
        reconcile = Self::find_booking,
        tags = ["calendar", "booking"],
        examples = [r#"{"starts_at": "2026-12-01T09:00:00Z"}"#],
    )]
    async fn create_booking(
        &self,
        input: CreateBooking,
        key: IdempotencyKey,
        tenant: Tenant,
        deadline: Deadline,
        checkpoint: Checkpoint,
    ) -> Result<Booking, ConnectorFailure> {
        if OffsetDateTime::parse(&input.starts_at, &Rfc3339).is_err() {
            // The schema's `format` is an annotation, not an assertion; the provider must never
            // see a start time it would have to guess at. The value is not quoted: it is PII.
            return Err(ConnectorFailure::permanent(
                "calendar.starts_at_invalid",
                "starts_at is not an RFC 3339 date-time",
                CONNECTOR_ID,
            ));
        }
        let operation = checkpoint.operation_for(&key, PROVIDER, "bk");
        // Durable before the request leaves: whatever happens to it, reconciliation knows
        // which operation to ask the provider about.
        checkpoint.record(operation.clone(), None).await?;
        let effect: ProviderEffect = self
            .api
            .post(BOOKINGS_ROUTE)
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .deadline(&deadline)
            .json(&ProviderBookingRequest {
                calendar: tenant.id(),
                starts_at: &input.starts_at,
            })
            .send_json()
            .await?;
        Ok(Booking {
            booking_id: effect.operation_id,
        })
    }

    /// Asks the provider whether a booking whose outcome is unknown was made.
    async fn find_booking(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        provider_api::reconcile(&self.api, &request).await
    }

    /// Look a booking up at the provider.
    ///
    /// Answers `confirmed` with the start time, `pending`, or `unknown` (no such booking for
    /// this tenant). A lookup changes nothing, so it needs no idempotency key and is safe to
    /// repeat.
    #[capability(
        id = "cap:calendar:booking:get",
        name = "Get booking",
        risk = low,
        side_effects = [read, external_network],
        idempotency(optional),
        execution(retry_safety = safe),
        data(sensitivity = internal),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "a lookup changes nothing at the provider: external_network only says the read leaves the host"
        ),
        tags = ["calendar", "booking"],
        examples = [r#"{"booking_id": "bk_0190f2a6c8d47b21a5e3d9c0f1b2a3c4"}"#],
    )]
    async fn get_booking(
        &self,
        input: BookingRef,
        tenant: Tenant,
        deadline: Deadline,
    ) -> Result<BookingStatus, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: PROVIDER.to_owned(),
            operation_id: input.booking_id.clone(),
            request_id: None,
        };
        let (state, _evidence) = provider_api::look_up(
            &self.api,
            &operation,
            ConnectorOperation::Invocation,
            Some(&deadline),
        )
        .await?;
        let (state, starts_at) = match state {
            OperationState::Committed { result } => {
                let request = result.get("request").unwrap_or(&Value::Null);
                let route = result.get("route").and_then(Value::as_str);
                let calendar = request.get("calendar").and_then(Value::as_str);
                if route == Some(BOOKINGS_ROUTE) && calendar == Some(tenant.id()) {
                    let starts_at = request
                        .get("starts_at")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    (BookingState::Confirmed, starts_at)
                } else {
                    // Another tenant's booking, or not a booking at all: not this tenant's to
                    // see, and indistinguishable from one that does not exist.
                    (BookingState::Unknown, None)
                }
            }
            OperationState::Pending => (BookingState::Pending, None),
            OperationState::Unknown => (BookingState::Unknown, None),
        };
        Ok(BookingStatus {
            booking_id: input.booking_id,
            state,
            starts_at,
        })
    }
}
