//! Error codes the facade raises itself, as named constants.
//!
//! Codes shared with the wire model (`action.invalid_input`, `connector.*`, ...) live in
//! [`aip_connector_core::model::codes`] and are re-exported here, so every code the SDK can
//! produce is reachable from this one module.

pub use aip_connector_core::model::codes::*;

/// The `source` component written on failures raised by the SDK itself.
pub const SOURCE_COMPONENT: &str = "aip-connector";

/// The action needs an idempotency key and carries none (upstream code).
pub const IDEMPOTENCY_REQUIRED: &str = "idempotency.required";
/// The action asks for a completion mode the capability does not support (upstream code).
pub const EXECUTION_MODE_UNSUPPORTED: &str = "execution.mode_unsupported";
/// A handler asked for a credential and none was resolved, or (at stage 4, before any handler)
/// the contract requires a credential and the deployment resolved none (upstream code).
pub const CREDENTIAL_MISSING: &str = "credential.required";
/// A handler asked for the verified tenant and none was resolved.
pub const TENANT_MISSING: &str = "identity.tenant_missing";
/// The identity the host vouches for (the authenticated principal, operator or verified tenant,
/// or the deployment's external account) holds a NUL character, which stores refuse to write
/// (auth, not retryable: the authenticator's answer, not the caller's request, must change).
pub const IDENTITY_INVALID: &str = "identity.invalid";
/// A handler asked for verified approvals and the action was not approved.
pub const APPROVAL_MISSING: &str = "approval.required";
/// A handler asked for a checkpoint outside a transactional action, or for the `Compensation`
/// target outside a `compensate`; also a compensation-only capability named directly.
pub const TRANSACTION_CONTEXT_MISSING: &str = "transaction.context_missing";
/// A checkpoint named an empty provider or operation id.
pub const TRANSACTION_CHECKPOINT_INVALID: &str = "transaction.checkpoint_invalid";
/// A checkpoint tried to replace the recorded provider operation with a different one.
pub const TRANSACTION_CHECKPOINT_CONFLICT: &str = "transaction.checkpoint_conflict";
/// A streamed chunk could not be serialized.
pub const STREAM_CHUNK_UNSERIALIZABLE: &str = "stream.chunk_unserializable";
/// A streamed chunk is larger than the host's `max_output_bytes`, or nests deeper than it
/// stores.
pub const STREAM_CHUNK_TOO_LARGE: &str = "stream.chunk_too_large";
/// A handler's output could not be serialized.
pub const OUTPUT_UNSERIALIZABLE: &str = "connector.output_unserializable";
/// The connector has no capability with the requested id.
pub const CAPABILITY_UNKNOWN: &str = "capability.not_found";

// ---- Host pipeline (upstream codes; `docs/host-runtime.md` has the full table) ----------------

/// The action names a capability no admitted connector exposes (permanent, not retryable).
pub const RESOURCE_NOT_FOUND: &str = "resource.not_found";
/// The action input violates the capability's input schema (permanent, not retryable).
pub const ACTION_INPUT_SCHEMA_INVALID: &str = "action.input_schema_invalid";
/// The action envelope itself is invalid (null input, empty key, zero timeout, ...).
pub const ACTION_INVALID: &str = "action.invalid";
/// The input is larger or deeper than the host's limits (permanent, not retryable).
pub const ACTION_INPUT_TOO_LARGE: &str = "action.input_too_large";
/// The idempotency key is longer than `HostLimits::max_idempotency_key_bytes` (permanent, not
/// retryable); `details {key_bytes, max_key_bytes}`, never the key itself.
pub const ACTION_IDEMPOTENCY_KEY_TOO_LONG: &str = "action.idempotency_key_too_long";
/// A caller-chosen id the host would store (`Action.id`, or the transaction block's
/// `transaction_id`, `plan_id` or `compensation_for`) is longer than `HostLimits::max_id_bytes`
/// (permanent, not retryable); `details {field, id_bytes, max_id_bytes}`, never the id itself.
pub const ACTION_ID_TOO_LONG: &str = "action.id_too_long";
/// The action's context blocks (every field but `input`, `identity`, its ids, key, mode and
/// timeout) exceed `HostLimits::max_context_bytes` of compact JSON together (permanent, not
/// retryable); `details {field, max_context_bytes}` names the block that crossed the limit. Also
/// a context block nesting deeper than 64 levels; `details {field, max_context_depth}`.
pub const ACTION_CONTEXT_TOO_LARGE: &str = "action.context_too_large";
/// A completed result's output violates the output schema (permanent, not retryable).
pub const ACTION_OUTPUT_SCHEMA_INVALID: &str = "action.output_schema_invalid";
/// A completed handler's output is larger than `HostLimits::max_output_bytes` (permanent, not
/// retryable); `details {max_output_bytes}`. Like a schema violation, it replaces the result.
pub const ACTION_OUTPUT_TOO_LARGE: &str = "action.output_too_large";
/// A keyed action failed retryably `HostLimits::max_attempts_per_key` times: its key is
/// dead-lettered (permanent; upstream's default dead-letter code). Replayed to every later
/// attempt with the key; `details {attempts, last_error}`.
pub const ACTION_DEAD_LETTER: &str = "action.dead_letter";
/// The transport gave up on an executing action (its request timed out, its caller went away,
/// the server drained) and its handler was cancelled (`Host::abandon_as`). Temporary;
/// retryable when the contract's `retry_safety` allows a retry (then the key is released, and a
/// retry with it runs the action again), else stored like a permanent failure. Not upstream's: upstream has
/// only the `cancelled` status, whose result a duplicate replays.
pub const ACTION_ABANDONED: &str = "action.abandoned";
/// The action asks for a transaction mode the contract does not declare.
pub const TRANSACTION_MODE_UNSUPPORTED: &str = "transaction.mode_unsupported";
/// A commit needs a plan and the action carries no `plan_id`.
pub const TRANSACTION_PLAN_REQUIRED: &str = "transaction.plan_required";
/// The capability has no transaction contract and the action asks for a mode other than `execute`.
pub const TRANSACTION_UNSUPPORTED: &str = "transaction.unsupported";
/// `compensate` on a capability whose compensation is not `supported`/`best_effort`.
pub const TRANSACTION_COMPENSATION_UNSUPPORTED: &str = "transaction.compensation_unsupported";
/// The resolved credential lacks a required scope, or is expired.
pub const CREDENTIAL_SCOPE_MISSING: &str = "credential.scope_missing";
/// The resolved credential's issuer is not accepted.
pub const CREDENTIAL_ISSUER_DENIED: &str = "credential.issuer_denied";
/// The resolved credential belongs to another tenant.
pub const CREDENTIAL_TENANT_MISMATCH: &str = "credential.tenant_mismatch";
/// The deployment's credential provider did not answer within the call's deadline, or panicked:
/// nothing was attempted (temporary, retryable; ours).
pub const CREDENTIAL_UNAVAILABLE: &str = "credential.unavailable";
/// The caller is not authorized (principal kind refused, delegation too deep, ...).
pub const AUTH_NOT_AUTHORIZED: &str = "auth.not_authorized";
/// A tenant- or account-scoped key without the identity part to scope it.
pub const IDEMPOTENCY_SCOPE_MISSING: &str = "idempotency.scope_missing";
/// Another execution holds the key right now (temporary, retryable after `retry_after_ms`).
pub const IDEMPOTENCY_IN_PROGRESS: &str = "idempotency.in_progress";
/// The key was used before and the contract rejects reuse.
pub const IDEMPOTENCY_CONFLICT: &str = "idempotency.conflict";
/// The key was reused with a different input.
pub const IDEMPOTENCY_INPUT_HASH_MISMATCH: &str = "idempotency.input_hash_mismatch";
/// A stored pending-approval record could not be resumed atomically.
pub const IDEMPOTENCY_PENDING_RESUME_DENIED: &str = "idempotency.pending_resume_denied";
/// The action needs human approval; the result names the pending approval.
pub const POLICY_HUMAN_APPROVAL_REQUIRED: &str = "policy.human_approval_required";
/// The action carries an approval that is not granted.
pub const POLICY_APPROVAL_NOT_GRANTED: &str = "policy.approval_not_granted";
/// `resume_approved` of an approved action whose input was redacted: the record keeps no input
/// to run, so the requester re-submits the action with the approval decision attached
/// (docs/host-runtime.md §5.5).
pub const POLICY_APPROVAL_RESUBMISSION_REQUIRED: &str = "policy.approval_resubmission_required";
/// The action carries an approval the host has no matching record of.
pub const POLICY_APPROVAL_UNVERIFIED: &str = "policy.approval_unverified";
/// The approval was denied.
pub const POLICY_APPROVAL_DENIED: &str = "policy.approval_denied";
/// The approval expired before enough approvals arrived.
pub const POLICY_APPROVAL_EXPIRED: &str = "policy.approval_expired";
/// The approval was revoked.
pub const POLICY_APPROVAL_REVOKED: &str = "policy.approval_revoked";
/// A decision on an approval that is no longer pending.
pub const POLICY_APPROVAL_NOT_PENDING: &str = "policy.approval_not_pending";
/// A decision names another approval, action or capability than the record.
pub const POLICY_APPROVAL_MISMATCH: &str = "policy.approval_mismatch";
/// The decision's approver is not the authenticated principal.
pub const POLICY_APPROVER_IDENTITY_MISMATCH: &str = "policy.approver_identity_mismatch";
/// The approver belongs to another tenant.
pub const POLICY_APPROVER_TENANT_MISMATCH: &str = "policy.approver_tenant_mismatch";
/// The approver is the requester and separation of duties forbids it.
pub const POLICY_SEPARATION_OF_DUTIES_REQUESTER: &str = "policy.separation_of_duties.requester";
/// The approver is the operator and separation of duties forbids it.
pub const POLICY_SEPARATION_OF_DUTIES_OPERATOR: &str = "policy.separation_of_duties.operator";
/// The trusted authority does not vouch for the approver under the policy.
pub const POLICY_APPROVER_UNAUTHORIZED: &str = "policy.approver_unauthorized";
/// The decision lacks evidence the policy requires.
pub const POLICY_APPROVAL_EVIDENCE_MISSING: &str = "policy.approval_evidence_missing";
/// The approved action was already resumed (resume runs exactly once).
pub const POLICY_APPROVAL_ALREADY_RESUMED: &str = "policy.approval_already_resumed";
/// No approval with that id.
pub const POLICY_APPROVAL_NOT_FOUND: &str = "policy.approval_not_found";
/// The handler did not finish before the deadline.
pub const SLA_TIMEOUT_EXCEEDED: &str = "sla.timeout_exceeded";
/// The store failed (temporary, retryable).
pub const STORAGE_UNAVAILABLE: &str = "storage.unavailable";
/// Reserved: not raised by this version (upstream: the host has no handler for an admitted
/// capability, or the handler failed outside the contract).
pub const RUNTIME_HANDLER_FAILED: &str = "runtime.handler_failed";
/// Reserved: not raised by this version (a refused manifest is `HostBuildError::Admission` at
/// host build time).
pub const MANIFEST_ADMISSION_FAILED: &str = "manifest.admission_failed";
/// The host is at its concurrency limit (temporary, retryable).
pub const HOST_OVERLOADED: &str = "host.overloaded";
/// A chunk was sent after the stream closed (terminal chunk sent, consumer gone).
pub const STREAM_CLOSED: &str = "stream.closed";
/// A handler tried to send a terminal chunk; only the host ends a stream.
pub const STREAM_TERMINAL_RESERVED: &str = "stream.terminal_reserved";
/// A decision is malformed: a blank reason, constraint or evidence field, a blank decision id, or
/// an `expired` decision sent by an approver (expiry is decided by the host's clock).
pub const POLICY_APPROVAL_DECISION_INVALID: &str = "policy.approval_decision_invalid";
/// The approval decision's compact JSON is larger than `HostLimits::max_decision_bytes`;
/// `details {approval_id, decision_bytes, max_decision_bytes}`. Checked before the record is read.
pub const POLICY_APPROVAL_DECISION_TOO_LARGE: &str = "policy.approval_decision_too_large";
/// The decision names a policy hash other than the record's snapshot (upstream code).
pub const POLICY_APPROVAL_HASH_MISMATCH: &str = "policy.approval_hash_mismatch";
/// A revocation names no `target_decision_id` (upstream code).
pub const POLICY_APPROVAL_REVOCATION_TARGET_REQUIRED: &str =
    "policy.approval_revocation_target_required";
/// A revocation's target is not an approving decision of the record (upstream code).
pub const POLICY_APPROVAL_REVOCATION_TARGET_MISSING: &str =
    "policy.approval_revocation_target_missing";
/// An approval constraint names a field the action input does not have (upstream code).
pub const POLICY_APPROVAL_CONSTRAINT_MISSING_FIELD: &str =
    "policy.approval_constraint_missing_field";
/// The action input does not satisfy an approval constraint (upstream code).
pub const POLICY_APPROVAL_CONSTRAINT_FAILED: &str = "policy.approval_constraint_failed";

// ---- Transactions (upstream codes, `aip-runtime.md` §3) -------------------------------------

/// `rollback_not_supported` mode: the capability cannot roll back; nothing runs.
pub const TRANSACTION_ROLLBACK_NOT_SUPPORTED: &str = "transaction.rollback_not_supported";
/// The plan's dry-run fidelity needs a validation handler the connector does not have.
pub const TRANSACTION_PLAN_HANDLER_UNSUPPORTED: &str = "transaction.plan_handler_unsupported";
/// No plan with the commit's `plan_id`.
pub const TRANSACTION_PLAN_NOT_FOUND: &str = "transaction.plan_not_found";
/// The plan is for another capability.
pub const TRANSACTION_PLAN_CAPABILITY_MISMATCH: &str = "transaction.plan_capability_mismatch";
/// The plan is not in the `planned` state.
pub const TRANSACTION_PLAN_NOT_COMMITTABLE: &str = "transaction.plan_not_committable";
/// The plan record carries no plan.
pub const TRANSACTION_PLAN_MISSING_PAYLOAD: &str = "transaction.plan_missing_payload";
/// Only the principal that planned may commit.
pub const TRANSACTION_PLAN_PRINCIPAL_MISMATCH: &str = "transaction.plan_principal_mismatch";
/// The plan's 15 minutes are over.
pub const TRANSACTION_PLAN_EXPIRED: &str = "transaction.plan_expired";
/// The commit names another transaction than its plan.
pub const TRANSACTION_PLAN_TRANSACTION_MISMATCH: &str = "transaction.plan_transaction_mismatch";
/// The commit input differs from the planned input.
pub const TRANSACTION_PLAN_INPUT_HASH_MISMATCH: &str = "transaction.plan_input_hash_mismatch";
/// The plan and the commit differ in whether they carry an identity.
pub const TRANSACTION_PLAN_IDENTITY_MISSING: &str = "transaction.plan_identity_missing";
/// The commit comes from another tenant than the plan.
pub const TRANSACTION_PLAN_TENANT_MISMATCH: &str = "transaction.plan_tenant_mismatch";
/// The commit acts for another external account than the plan.
pub const TRANSACTION_PLAN_EXTERNAL_ACCOUNT_MISMATCH: &str =
    "transaction.plan_external_account_mismatch";
/// Another commit claimed the plan first (exactly one of racing commits wins).
pub const TRANSACTION_PLAN_ALREADY_CLAIMED: &str = "transaction.plan_already_claimed";
/// A direct commit of a transaction that was already committed.
pub const TRANSACTION_COMMIT_ALREADY_CLAIMED: &str = "transaction.commit_already_claimed";
/// The outcome is unknown: executing again is refused until reconciliation settles it.
pub const TRANSACTION_RECONCILIATION_REQUIRED: &str = "transaction.reconciliation_required";
/// A failed transaction that is not safe to execute again.
pub const TRANSACTION_RETRY_DENIED: &str = "transaction.retry_denied";
/// The transaction is in a state `execute` cannot run from.
pub const TRANSACTION_EXECUTE_STATE_INVALID: &str = "transaction.execute_state_invalid";
/// An earlier attempt of the same execution may still be running (temporary, retryable after
/// `retry_after_ms`, when its deadline has passed).
pub const TRANSACTION_ATTEMPT_IN_PROGRESS: &str = "transaction.attempt_in_progress";
/// `reconcile` without a transaction id.
pub const TRANSACTION_RECONCILIATION_ID_REQUIRED: &str = "transaction.reconciliation_id_required";
/// No transaction with that id.
pub const TRANSACTION_NOT_FOUND: &str = "transaction.not_found";
/// `reconcile` of a transaction without a checkpointed provider operation.
pub const TRANSACTION_PROVIDER_OPERATION_REQUIRED: &str = "transaction.provider_operation_required";
/// `reconcile` of a transaction whose outcome is not unknown.
pub const TRANSACTION_NOT_RECONCILABLE: &str = "transaction.not_reconcilable";
/// `compensate` of an action that has no completed (or partially committed) durable
/// transaction for this capability (upstream code).
pub const TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED: &str =
    "transaction.compensation_target_not_completed";
/// `compensate` of an action whose transaction did not commit (upstream code).
pub const TRANSACTION_COMPENSATION_TARGET_NOT_COMMITTED: &str =
    "transaction.compensation_target_not_committed";
/// `compensate` after the contract's compensation window closed (upstream code).
pub const TRANSACTION_COMPENSATION_WINDOW_EXPIRED: &str = "transaction.compensation_window_expired";
/// The target action was already compensated, or its compensation is running or ended in a
/// way that is not safe to repeat: each action is compensated at most once.
pub const TRANSACTION_COMPENSATION_ALREADY_CLAIMED: &str =
    "transaction.compensation_already_claimed";
/// A `compensate` action names a transaction id other than the one derived from its target.
pub const TRANSACTION_COMPENSATION_TRANSACTION_MISMATCH: &str =
    "transaction.compensation_transaction_mismatch";

// ---- Provider client (`provider::ProviderClient`; `docs/provider-client.md`) ----------------

/// The provider request could not be built (body or query not serializable, invalid header or
/// idempotency key); nothing was sent.
pub const PROVIDER_REQUEST_INVALID: &str = "provider.request_invalid";
/// The provider could not be reached (connect, DNS or TLS failure; nothing was sent), answered
/// 503, or lost the connection of a non-mutating request.
pub const PROVIDER_UNAVAILABLE: &str = "provider.unavailable";
/// The deadline passed before the request was sent, or before a non-mutating request was
/// answered.
pub const PROVIDER_TIMEOUT: &str = "provider.timeout";
/// The action was cancelled before or during the provider call.
pub const PROVIDER_CANCELLED: &str = "provider.cancelled";
/// A mutating request was sent and no complete response arrived: it may have taken effect. Also
/// a complete 5xx other than 503 to a mutating request under
/// `ProviderClientBuilder::server_errors_uncertain(true)`. A mutating request cancelled after it
/// was sent is `provider.cancelled` with `uncertain_outcome: true` instead.
pub const PROVIDER_OUTCOME_UNKNOWN: &str = "provider.outcome_unknown";
/// The provider answered 429.
pub const PROVIDER_RATE_LIMITED: &str = "provider.rate_limited";
/// The provider answered a 5xx other than 503.
pub const PROVIDER_SERVER_ERROR: &str = "provider.server_error";
/// The provider answered 401 or 403.
pub const PROVIDER_UNAUTHORIZED: &str = "provider.unauthorized";
/// The provider answered a 4xx other than 401, 403 and 429.
pub const PROVIDER_REJECTED: &str = "provider.rejected";
/// A 2xx body that is not the expected JSON (or is too large), or a 1xx/3xx status.
pub const PROVIDER_INVALID_RESPONSE: &str = "provider.invalid_response";

// ---- Serving (`serve`: the native HTTP binding and the MCP projection) -------------------------

/// The request carries no credentials, or credentials no authenticator accepts (auth, not
/// retryable; HTTP 401).
pub const AUTH_UNAUTHENTICATED: &str = "auth.unauthenticated";
/// The request body is not a JSON envelope, or the envelope breaks a core rule (version,
/// message type against body, ...) (permanent, not retryable; HTTP 400).
pub const TRANSPORT_INVALID_ENVELOPE: &str = "transport.invalid_envelope";
/// The envelope is valid but this endpoint does not accept its message type (permanent, not
/// retryable; HTTP 400).
pub const TRANSPORT_UNSUPPORTED_MESSAGE: &str = "transport.unsupported_message";
/// The request body exceeds the server's body limit (permanent, not retryable; HTTP 413).
pub const TRANSPORT_PAYLOAD_TOO_LARGE: &str = "transport.payload_too_large";
/// The request body is not declared as JSON: its `Content-Type` is missing or is not
/// `application/json` (or `application/<type>+json`) given once, with no `charset` but UTF-8
/// (or US-ASCII), or it declares a `Content-Encoding` other than `identity` or a transfer coding
/// other than `chunked` (the server decodes none) (permanent, not retryable; HTTP 415).
pub const TRANSPORT_UNSUPPORTED_MEDIA_TYPE: &str = "transport.unsupported_media_type";
/// Every concurrency slot is taken (temporary, retryable after `retry_after_ms`; HTTP 503).
pub const TRANSPORT_OVERLOADED: &str = "transport.overloaded";
/// The request did not finish within the server's per-request timeout (temporary, retryable;
/// HTTP 504). The action itself was cancelled.
pub const TRANSPORT_TIMEOUT: &str = "transport.timeout";
/// The server is draining for shutdown and takes no new work (temporary, retryable; HTTP 503).
pub const TRANSPORT_SHUTTING_DOWN: &str = "transport.shutting_down";
/// The peer answered with something that is not a valid AIP envelope of the expected type
/// (client side; temporary, retryable).
pub const TRANSPORT_UNEXPECTED_RESPONSE: &str = "transport.unexpected_response";
/// The peer could not be reached, or the connection broke (client side; transport, retryable).
pub const TRANSPORT_UNREACHABLE: &str = "transport.unreachable";

// ---- Webhooks (`webhook::WebhookReceiver`; `docs/webhooks.md`) ---------------------------------

/// A header the signature scheme needs is absent or blank (permanent; HTTP 400). Upstream code.
pub const WEBHOOK_MISSING_HEADER: &str = "webhook.missing_header";
/// The delivery does not have the scheme's shape (a timestamp that is not a number, a header
/// that is not ASCII, a delivery id that is not 1 to 256 visible ASCII characters, an unreadable
/// body) (permanent; HTTP 400). Upstream code.
pub const WEBHOOK_INVALID_DELIVERY: &str = "webhook.invalid_delivery";
/// No signature of the delivery matches any of the receiver's secrets (auth; HTTP 401).
/// Upstream code.
pub const WEBHOOK_AUTHENTICATION_FAILED: &str = "webhook.authentication_failed";
/// The signed timestamp is further from the receiver's clock than its tolerance, in either
/// direction (auth; HTTP 401).
pub const WEBHOOK_TIMESTAMP_SKEW: &str = "webhook.timestamp_skew";
/// The body is larger than the receiver's limit (permanent; HTTP 413).
pub const WEBHOOK_PAYLOAD_TOO_LARGE: &str = "webhook.payload_too_large";
/// The body did not arrive within the receiver's body timeout; nothing ran (temporary,
/// retryable; HTTP 408).
pub const WEBHOOK_BODY_TIMEOUT: &str = "webhook.body_timeout";
/// The delivery id was handled already, within the replay window (policy, not retryable). The
/// handler does not run again; over HTTP it is answered `200 {"delivery_id", "replayed": true}`
/// so the provider stops sending it.
pub const WEBHOOK_REPLAYED: &str = "webhook.replayed";
/// The same delivery id is being handled right now (temporary, retryable; HTTP 409).
pub const WEBHOOK_IN_PROGRESS: &str = "webhook.in_progress";
/// A delivery id that was handled already arrived with another body (policy, not retryable;
/// HTTP 409): the provider reused an id, or someone holding the secret forged a delivery.
pub const WEBHOOK_DELIVERY_CONFLICT: &str = "webhook.delivery_conflict";
/// The receiver's handler failed; `details.failure` carries its code and retry flag, and the
/// delivery id is released so the provider's retry runs the handler again (HTTP 503 when the
/// failure is retryable, 500 otherwise).
pub const WEBHOOK_HANDLER_FAILED: &str = "webhook.handler_failed";
/// The receiver's handler did not finish within the receiver's handler timeout; the delivery id
/// is released (temporary, retryable; HTTP 503).
pub const WEBHOOK_HANDLER_TIMEOUT: &str = "webhook.handler_timeout";
/// The delivery store failed; nothing ran (temporary, retryable; HTTP 503). Upstream code.
pub const WEBHOOK_STORAGE_UNAVAILABLE: &str = "webhook.storage_unavailable";
