//! Idempotency: scoped keys, fingerprints and what a duplicate gets (`aip-runtime.md` §2).

use aip_connector_core::model::{
    Action, ActionResult, IdempotencyCollisionBehavior, IdempotencyKeyScope,
};
use serde_json::{Value, json};

use super::canonical::{canonical_json, sha256_hex};
use super::context::TrustedContext;
use super::failure;
use crate::codes;
use crate::invocation::VerifiedTenant;
use crate::store::{IdempotencyRecord, Millis, Reservation};

/// A reservation lives for the deadline plus this grace, and never less, so a slow owner is not
/// taken over while it still runs.
pub(crate) const RESERVATION_GRACE_MS: Millis = 60_000;

/// The scoped key `<Scope>:<partition>:<raw key>`, or the `idempotency.scope_missing` error.
pub(crate) fn scoped_key(
    scope: IdempotencyKeyScope,
    raw: &str,
    action: &Action,
    caller: &TrustedContext,
    tenant: Option<&VerifiedTenant>,
    external_account: Option<&aip_connector_core::model::ExternalAccountRef>,
) -> Result<String, aip_connector_core::model::ProtocolError> {
    let (name, partition) = match scope {
        IdempotencyKeyScope::Action => ("Action", action.id.to_string()),
        IdempotencyKeyScope::Capability => ("Capability", action.capability_id.to_string()),
        IdempotencyKeyScope::Principal => ("Principal", caller.principal.id.to_string()),
        IdempotencyKeyScope::Tenant => match tenant {
            Some(tenant) => ("Tenant", tenant.id.clone()),
            None => {
                return Err(failure::policy(
                    codes::IDEMPOTENCY_SCOPE_MISSING,
                    "tenant-scoped idempotency requires a verified tenant",
                ));
            }
        },
        IdempotencyKeyScope::ExternalAccount => match external_account {
            Some(account) => (
                "ExternalAccount",
                format!("{}:{}", account.system, account.id),
            ),
            None => {
                return Err(failure::policy(
                    codes::IDEMPOTENCY_SCOPE_MISSING,
                    "account-scoped idempotency requires the deployment's external account",
                ));
            }
        },
    };
    Ok(format!("{name}:{partition}:{raw}"))
}

/// SHA-256 of the canonical `{capability_id, input, transaction}` with the transaction id
/// removed (the host may assign it before reserving).
pub(crate) fn fingerprint(action: &Action) -> String {
    let transaction = action.transaction.as_ref().map(|t| {
        let mut value = serde_json::to_value(t).unwrap_or(Value::Null);
        if let Some(object) = value.as_object_mut() {
            object.remove("transaction_id");
        }
        value
    });
    let subject = json!({ "capability_id": action.capability_id, "input": action.input, "transaction": transaction });
    sha256_hex(canonical_json(&subject).as_bytes())
}

/// SHA-256 of the canonical input alone (for redacted logs and records).
pub(crate) fn input_hash(input: &Value) -> String {
    sha256_hex(canonical_json(input).as_bytes())
}

/// What a duplicate of a settled key gets.
///
/// `reject_conflict`: upstream rejects even an exact resend of the same action. We replay an
/// exact resend of the *same action id* (a transport retry the caller cannot tell from a lost
/// response) and reject every other reuse of the key; `revalidate_input_hash` replays any
/// action with the same input. Documented in `docs/host-runtime.md`.
pub(crate) fn collision(
    behavior: IdempotencyCollisionBehavior,
    record: &IdempotencyRecord,
    action: &Action,
    fingerprint: &str,
) -> ActionResult {
    let same_action = record.action_id == action.id && record.input_hash == fingerprint;
    match behavior {
        IdempotencyCollisionBehavior::ReturnOriginalResult => replay(record, action),
        IdempotencyCollisionBehavior::RejectConflict if same_action => replay(record, action),
        IdempotencyCollisionBehavior::RejectConflict => failure::failed(
            &action.id,
            failure::with_details(
                failure::permanent(
                    codes::IDEMPOTENCY_CONFLICT,
                    "idempotency key has already been used",
                ),
                json!({ "original_action_id": record.action_id, "action_id": action.id }),
            ),
        ),
        IdempotencyCollisionBehavior::RevalidateInputHash if record.input_hash == fingerprint => {
            replay(record, action)
        }
        IdempotencyCollisionBehavior::RevalidateInputHash => failure::failed(
            &action.id,
            failure::with_details(
                failure::permanent(
                    codes::IDEMPOTENCY_INPUT_HASH_MISMATCH,
                    "idempotency key was reused with different input",
                ),
                json!({ "original_action_id": record.action_id }),
            ),
        ),
    }
}

/// The stored result, marked `idempotent_replay: true` (a non-object output is replaced).
pub(crate) fn replay(record: &IdempotencyRecord, action: &Action) -> ActionResult {
    let mut result = record.result.clone();
    result.action_id = action.id.clone();
    match result.output.as_mut().and_then(Value::as_object_mut) {
        Some(object) => {
            object.insert("idempotent_replay".to_owned(), Value::Bool(true));
        }
        None => result.output = Some(json!({ "idempotent_replay": true })),
    }
    result
}

/// The failure for a key another execution holds.
pub(crate) fn in_progress(action: &Action, holder: &Reservation, now: Millis) -> ActionResult {
    let mut error = failure::error(
        codes::IDEMPOTENCY_IN_PROGRESS,
        "another execution holds this idempotency key",
        aip_connector_core::model::ErrorCategory::Temporary,
        true,
    );
    error.retry_after_ms = Some(holder.expires_at_ms.saturating_sub(now).max(1));
    error.details = Some(
        json!({ "owner_action_id": holder.action_id, "reservation_expires_at_ms": holder.expires_at_ms }),
    );
    failure::failed(&action.id, error)
}
