//! Idempotency: scoped keys, fingerprints and what a duplicate gets (`aip-runtime.md` §2).

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use aip_connector_core::model::{
    Action, ActionResult, ActionResultStatus, IdempotencyCollisionBehavior, IdempotencyKeyScope,
    ProtocolError, SIDE_EFFECTS_COMMITTED, TransactionMode,
};
use serde_json::{Value, json};

use super::HostInner;
use super::canonical::{CanonicalHash, canonical_sha256, push_hex};
use super::context::TrustedContext;
use super::failure;
use crate::codes;
use crate::invocation::VerifiedTenant;
use crate::store::{ApprovalStatus, IdempotencyRecord, Millis, Reservation, StoreError};

/// A reservation lives for the deadline plus this grace, and never less, so a slow owner is not
/// taken over while it still runs.
pub(crate) const RESERVATION_GRACE_MS: Millis = 60_000;

/// A fresh fencing token for a reservation: a UUIDv7 drawn once per process, in simple form,
/// followed by 16 hex digits of a per-process counter.
///
/// The UUID (its millisecond time and 74 random bits) keeps the tokens of processes sharing a
/// durable store apart; the counter keeps this process's tokens apart. Drawing a UUID for every
/// reservation took `uuid`'s process-wide lock and a `getrandom` call on every keyed call. Each
/// thread takes counter values in blocks, so concurrent calls do not contend for the counter
/// either. (A process that forks would share its prefix and counter with the child; the host
/// never forks.)
pub(crate) fn reservation_id() -> String {
    /// Counter values a thread takes at once.
    const BLOCK: u64 = 1024;
    static PREFIX: OnceLock<String> = OnceLock::new();
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        /// This thread's next counter value and the end of its block.
        static RANGE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    let prefix = PREFIX.get_or_init(|| uuid::Uuid::now_v7().simple().to_string());
    let count = RANGE.with(|range| {
        let (mut next, mut end) = range.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            end = next + BLOCK;
        }
        range.set((next + 1, end));
        next
    });
    let mut id = String::with_capacity(prefix.len() + 16);
    id.push_str(prefix);
    push_hex(&mut id, &count.to_be_bytes());
    id
}

/// The scoped key `<Scope>:<partition>:<raw key>`, or the `idempotency.scope_missing` error.
pub(crate) fn scoped_key(
    scope: IdempotencyKeyScope,
    raw: &str,
    action: &Action,
    caller: &TrustedContext,
    tenant: Option<&VerifiedTenant>,
    external_account: Option<&aip_connector_core::model::ExternalAccountRef>,
) -> Result<String, aip_connector_core::model::ProtocolError> {
    scoped_key_of(
        scope,
        raw,
        action,
        caller.principal.id.as_str(),
        tenant.map(|t| t.id.as_str()),
        external_account,
    )
}

/// [`scoped_key`] from the parts it reads: the handler's context rebuilds the key from the
/// action (whose trusted identity carries the tenant and the external account the pipeline
/// scoped with) and the caller's principal id, so it need not keep a copy.
pub(crate) fn scoped_key_of(
    scope: IdempotencyKeyScope,
    raw: &str,
    action: &Action,
    principal_id: &str,
    tenant_id: Option<&str>,
    external_account: Option<&aip_connector_core::model::ExternalAccountRef>,
) -> Result<String, aip_connector_core::model::ProtocolError> {
    // The account partition is `<system>:<id>`, hence up to two parts.
    let (name, partition, account_id) = match scope {
        IdempotencyKeyScope::Action => ("Action", action.id.as_str(), None),
        IdempotencyKeyScope::Capability => ("Capability", action.capability_id.as_str(), None),
        IdempotencyKeyScope::Principal => ("Principal", principal_id, None),
        IdempotencyKeyScope::Tenant => match tenant_id {
            Some(tenant) => ("Tenant", tenant, None),
            None => {
                return Err(failure::policy(
                    codes::IDEMPOTENCY_SCOPE_MISSING,
                    "tenant-scoped idempotency requires a verified tenant: neither the caller's trusted context (`TrustedContext::with_tenant`, set by the transport's authenticator) nor the deployment (`Deployment::with_tenant`) names one",
                ));
            }
        },
        IdempotencyKeyScope::ExternalAccount => match external_account {
            Some(account) => (
                "ExternalAccount",
                account.system.as_str(),
                Some(account.id.as_str()),
            ),
            None => {
                return Err(failure::policy(
                    codes::IDEMPOTENCY_SCOPE_MISSING,
                    "account-scoped idempotency requires the deployment's external account",
                ));
            }
        },
    };
    // Upstream joins the parts with bare ':', which ids containing ':' make ambiguous
    // (principal `user` + key `1:k` and principal `user:1` + key `k` would share a record, a
    // cross-principal replay). The partition parts are percent-encoded (`%` → `%25`, `:` → `%3A`)
    // so the key reads back left to right in one way; the raw key, last, is kept as sent.
    let partitions = [Some(partition), account_id];
    let mut key = String::with_capacity(
        name.len()
            + raw.len()
            + partitions
                .iter()
                .flatten()
                .map(|p| p.len() + 1)
                .sum::<usize>()
            + 1,
    );
    key.push_str(name);
    for part in partitions.into_iter().flatten() {
        key.push(':');
        push_partition(&mut key, part);
    }
    key.push(':');
    key.push_str(raw);
    Ok(key)
}

/// Appends one partition part of a scoped key with `%` and `:` percent-encoded.
pub(crate) fn push_partition(key: &mut String, part: &str) {
    for (index, piece) in part.split(':').enumerate() {
        if index > 0 {
            key.push_str("%3A");
        }
        for (index, piece) in piece.split('%').enumerate() {
            if index > 0 {
                key.push_str("%25");
            }
            key.push_str(piece);
        }
    }
}

/// SHA-256 of the canonical `{capability_id, input, transaction}` with the transaction id
/// removed (the host may assign it before reserving); `transaction` is `null` without one.
///
/// The canonical text is hashed as it is written, never built: the framing below is that text
/// (keys in byte order, compact), so the digest equals [`sha256_hex`](super::canonical::sha256_hex)
/// of `canonical_json` of the subject object, and fingerprints stored by earlier versions still
/// match. Only calls that need a fingerprint compute one: keyed calls, approvals.
pub(crate) fn fingerprint(action: &Action) -> String {
    let mut hash = CanonicalHash::new();
    hash.raw("{\"capability_id\":");
    hash.string(action.capability_id.as_str());
    hash.raw(",\"input\":");
    hash.value(&action.input);
    hash.raw(",\"transaction\":");
    match &action.transaction {
        None => hash.raw("null"),
        Some(transaction) => {
            let mut value = serde_json::to_value(transaction).unwrap_or(Value::Null);
            if let Some(object) = value.as_object_mut() {
                object.remove("transaction_id");
            }
            hash.value(&value);
        }
    }
    hash.raw("}");
    hash.finish()
}

/// SHA-256 of the canonical input alone (for redacted logs and records).
pub(crate) fn input_hash(input: &Value) -> String {
    canonical_sha256(input)
}

/// What a duplicate of a settled key gets.
///
/// `reject_conflict`: upstream rejects even an exact resend of the same action. We replay an
/// exact resend of the *same action id* (a transport retry the caller cannot tell from a lost
/// response) and reject every other reuse of the key; `revalidate_input_hash` replays any
/// action with the same input. Whatever the behaviour, a key settled by another capability is
/// `idempotency.conflict`, and so is a key that answered a `plan` and is sent with another step
/// of a transaction (`idempotency.input_hash_mismatch` under `revalidate_input_hash`).
/// Documented in `docs/host-runtime.md`.
pub(crate) fn collision(
    behavior: IdempotencyCollisionBehavior,
    record: &IdempotencyRecord,
    action: &Action,
    fingerprint: &str,
) -> ActionResult {
    // A key scope wider than the capability (`tenant`, `principal`, `external_account`) lets
    // two capabilities reach one scoped key. Upstream replays the other capability's stored
    // result, an answer that is not even of this capability's output schema; a careful caller
    // expects the key refused.
    if record.capability_id != action.capability_id {
        return failure::failed(
            &action.id,
            failure::with_details(
                failure::permanent(
                    codes::IDEMPOTENCY_CONFLICT,
                    "the idempotency key was already used for another capability; use another key",
                ),
                json!({
                    "original_action_id": record.action_id,
                    "original_capability_id": record.capability_id,
                    "action_id": action.id,
                }),
            ),
        );
    }
    // The key answered a `plan` and this is another step of a transaction (its `commit`, most
    // often): never a duplicate, whatever the behaviour (its fingerprint differs: it covers the
    // transaction). Under `return_original_result` upstream replays the plan as a completed
    // answer, and a caller reads it as a commit that ran when nothing was committed.
    if let Some((plan_id, mode)) = answered_another_step(record, action) {
        let (code, refusal, why, details) = match behavior {
            IdempotencyCollisionBehavior::RevalidateInputHash => (
                codes::IDEMPOTENCY_INPUT_HASH_MISMATCH,
                "idempotency key was reused with different input",
                " (the key's fingerprint covers the transaction)",
                json!({ "original_action_id": record.action_id, "original_plan_id": plan_id }),
            ),
            _ => (
                codes::IDEMPOTENCY_CONFLICT,
                "idempotency key has already been used",
                "",
                json!({
                    "original_action_id": record.action_id,
                    "original_plan_id": plan_id,
                    "action_id": action.id,
                }),
            ),
        };
        let message = format!(
            "{refusal}: it answered the `plan` of plan `{plan_id}`, and a `{mode}` is a request of \
             its own{why}; send each step of a transaction under a key of its own"
        );
        return failure::failed(
            &action.id,
            failure::with_details(failure::permanent(code, message), details),
        );
    }
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

/// The plan id and the action's transaction mode when the key's stored result is a completed
/// `plan` and `action` is another step (most often its `commit`): an author trial sent the
/// commit under the plan's key, and "reused with different input" sent it looking for a
/// difference in an input that was the same.
///
/// An action without a transaction block never gets here: a capability that plans takes a
/// `Checkpoint`, and a plain call of one that does not `execute` is refused at stage 3
/// (`transaction.context_missing`).
fn answered_another_step<'r>(
    record: &'r IdempotencyRecord,
    action: &Action,
) -> Option<(&'r str, &'static str)> {
    let plan_id = record.result.plan_id()?;
    let mode = action.transaction.as_ref().map(|t| t.mode)?;
    (mode != TransactionMode::Plan).then_some((plan_id, mode.as_str()))
}

/// The stored result, marked as a replay (`idempotent_replay: true`; an output that is not an
/// object is kept beside the marker, see [`ActionResult::mark_idempotent_replay`]).
pub(crate) fn replay(record: &IdempotencyRecord, action: &Action) -> ActionResult {
    let mut result = record.result.clone();
    result.action_id = action.id.clone();
    result.mark_idempotent_replay();
    result
}

/// Whether a stored failure says, beyond doubt, that its action changed nothing: a failure the
/// connector reported with its outcome stated (`details.uncertain_outcome: false`, which every
/// connector failure carries) and no side effects committed (`side_effects_committed`, in the
/// details or the connector's own details under them).
///
/// Everything else may have changed something, or is the host's own answer, and stays as it is:
/// an uncertain outcome, a timeout (`sla.timeout_exceeded`), an abandoned or panicked handler,
/// an output the host refused after the handler completed, a dead letter, and every host
/// refusal (none of which carries the flag).
pub(crate) fn changed_nothing(error: &ProtocolError) -> bool {
    let says = |details: Option<&Value>, key: &str, value: bool| {
        details.and_then(|d| d.get(key)) == Some(&Value::Bool(value))
    };
    let details = error.details.as_ref();
    says(details, "uncertain_outcome", false)
        && !says(details, SIDE_EFFECTS_COMMITTED, true)
        && !says(
            details.and_then(|d| d.get("details")),
            SIDE_EFFECTS_COMMITTED,
            true,
        )
}

/// [`Host::forget_unchanged`](super::Host::forget_unchanged): forgets the result stored under
/// `action`'s key when it changed nothing, judged from what the store holds (not from what the
/// caller was answered): a failure that [`changed_nothing`], or a `pending_approval` whose
/// approval closed without its action running (denied, revoked, or expired). Only the caller's
/// own result is forgotten: same capability, principal and tenant.
pub(super) async fn forget_unchanged(
    host: &HostInner,
    action: &Action,
    caller: &TrustedContext,
) -> Result<bool, StoreError> {
    let Some(raw) = action
        .idempotency_key
        .as_deref()
        .filter(|key| !key.trim().is_empty())
    else {
        return Ok(false);
    };
    let Some(hosted) = host.capabilities.get(&action.capability_id) else {
        return Ok(false);
    };
    let scope = hosted
        .capability()
        .contract
        .as_ref()
        .map_or(IdempotencyKeyScope::Action, |c| c.idempotency.key_scope);
    let tenant = host.tenant_of(caller);
    let Ok(key) = scoped_key(
        scope,
        raw,
        action,
        caller,
        tenant,
        host.deployment.external_account.as_ref(),
    ) else {
        return Ok(false);
    };
    let now = host.clock.now_ms();
    let Some(record) = host.store.record(&key, now).await? else {
        return Ok(false);
    };
    if record.capability_id != action.capability_id
        || record.principal_id != caller.principal.id
        || !of_tenant(record.tenant_id.as_deref(), tenant)
    {
        return Ok(false);
    }
    let unchanged = match record.result.status {
        ActionResultStatus::Failed => record.result.error.as_deref().is_some_and(changed_nothing),
        ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman => {
            closed_without_running(host, &record, now).await?
        }
        _ => false,
    };
    if !unchanged {
        return Ok(false);
    }
    // A record read as this action's is deleted only if it still is: the store checks again.
    host.store.forget_record(&record).await
}

/// Whether the approval a stored `pending_approval` waits for closed without its action
/// running: denied, revoked, or expired (a pending record past its TTL reads as expired). Such
/// a record can never change again, so nothing can resume the action once it is read so.
async fn closed_without_running(
    host: &HostInner,
    record: &IdempotencyRecord,
    now: Millis,
) -> Result<bool, StoreError> {
    let Some(id) = record.result.approval_id() else {
        return Ok(false);
    };
    let Some(approval) = host.store.approval(&id).await? else {
        return Ok(false);
    };
    Ok(approval.action.id == record.action_id
        && approval.status != ApprovalStatus::Approved
        && approval.is_closed(now))
}

/// Whether something stored for `owner` (a record's or a reservation's tenant) is of the
/// caller's `tenant`: "no tenant" matches only "no tenant". Under a key scope not partitioned by
/// tenant, two tenants can reach one scoped key; what is stored under it is only ever answered
/// to its own tenant.
pub(crate) fn of_tenant(owner: Option<&str>, tenant: Option<&VerifiedTenant>) -> bool {
    owner == tenant.map(|t| t.id.as_str())
}

/// The longest `retry_after_ms` an `idempotency.in_progress` asks for. Upstream sends the time
/// left on the holder's reservation, its deadline plus a minute: two minutes for a call that
/// takes a second, so a client that obeys it waits long after the answer is there (two trials
/// did). The reservation's expiry stays in `details.reservation_expires_at_ms`.
pub(crate) const IN_PROGRESS_RETRY_AFTER_MS: Millis = 1_000;

/// The failure for a key another execution holds.
///
/// The holder's action id is named only to a caller of the holder's tenant: under a scope that
/// is not partitioned by tenant, a duplicate from another tenant learns that the key is in use
/// (it could not use it either way), not which action of another tenant holds it.
pub(crate) fn in_progress(
    action: &Action,
    holder: &Reservation,
    tenant: Option<&VerifiedTenant>,
    now: Millis,
) -> ActionResult {
    let mut error = failure::error(
        codes::IDEMPOTENCY_IN_PROGRESS,
        "another execution holds this idempotency key",
        aip_connector_core::model::ErrorCategory::Temporary,
        true,
    );
    error.retry_after_ms = Some(
        holder
            .expires_at_ms
            .saturating_sub(now)
            .clamp(1, IN_PROGRESS_RETRY_AFTER_MS),
    );
    error.details = Some(if of_tenant(holder.tenant_id.as_deref(), tenant) {
        json!({ "owner_action_id": holder.action_id, "reservation_expires_at_ms": holder.expires_at_ms })
    } else {
        json!({ "reservation_expires_at_ms": holder.expires_at_ms })
    });
    failure::failed(&action.id, error)
}

#[cfg(test)]
mod tests {
    use aip_connector_core::ids::TransactionId;
    use aip_connector_core::model::{ActionTransaction, TransactionMode};
    use serde_json::json;

    use super::super::canonical::{canonical_json, sha256_hex};
    use super::*;

    /// Only a connector's failure that states its outcome and committed nothing changed
    /// nothing; the host's failures (timeouts, abandons, dead letters, refusals) never say so.
    #[test]
    fn only_a_definite_connector_failure_changed_nothing() {
        use aip_connector_core::model::{ConnectorFailure, ConnectorOperation, ErrorCategory};

        let rejected = ConnectorFailure::permanent("provider.rejected", "422", "tracker");
        assert!(changed_nothing(&rejected.to_protocol_error()));
        let uncertain = rejected.clone().with_uncertain_outcome();
        assert!(!changed_nothing(&uncertain.to_protocol_error()));
        let partial = rejected.clone().with_committed_side_effects();
        assert!(!changed_nothing(&partial.to_protocol_error()));
        let plain = ConnectorFailure::new(
            "x.y",
            "m",
            ErrorCategory::Connector,
            ConnectorOperation::Invocation,
            "c",
        );
        assert!(changed_nothing(&plain.to_protocol_error()));

        // A refused output marks the host's error as committed at the top level.
        let mut refused = rejected.to_protocol_error();
        if let Some(Value::Object(details)) = refused.details.as_mut() {
            aip_connector_core::model::mark_committed_side_effects(details);
        }
        assert!(!changed_nothing(&refused));

        // Host errors carry no outcome flag, or a true one.
        let timeout = failure::with_details(
            failure::error(
                codes::SLA_TIMEOUT_EXCEEDED,
                "late",
                ErrorCategory::Temporary,
                false,
            ),
            json!({ "timeout_ms": 10 }),
        );
        assert!(!changed_nothing(&timeout));
        assert!(!changed_nothing(&failure::permanent(
            codes::ACTION_DEAD_LETTER,
            "dead"
        )));
        assert!(!changed_nothing(&failure::with_details(
            failure::permanent(codes::CONNECTOR_RUNTIME_FAILURE, "panicked"),
            json!({ "uncertain_outcome": true }),
        )));
        assert!(!changed_nothing(&failure::policy(
            codes::POLICY_APPROVAL_DENIED,
            "denied"
        )));
    }

    /// The fingerprint as it was first defined: the canonical text of a `json!` subject. The
    /// streamed fingerprint must keep every digest stored under that definition valid.
    fn built_fingerprint(action: &Action) -> String {
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

    #[test]
    fn fingerprint_equals_the_hash_of_the_canonical_subject() {
        let plain = Action::new(
            "cap:a:b",
            json!({ "z": [1, { "y": "\u{0}é", "b": null }], "a": 2.5 }),
        );
        let mut transactional = Action::new("cap:a:\"quoted\"", json!({}));
        transactional.transaction = Some(Box::new(ActionTransaction {
            transaction_id: Some(TransactionId::new()),
            plan_id: Some("plan_1".to_owned()),
            ..ActionTransaction::new(TransactionMode::Plan)
        }));
        for action in [plain, transactional] {
            assert_eq!(fingerprint(&action), built_fingerprint(&action));
        }
    }

    #[test]
    fn scoped_keys_join_scope_partition_and_raw_key() {
        let action = Action::new("cap:a:b", json!({}));
        let caller = TrustedContext::new(
            aip_connector_core::model::Principal::new(
                "usr_1",
                aip_connector_core::model::PrincipalKind::Human,
            ),
            "issuer",
        );
        let tenant = VerifiedTenant::new("t1");
        let account = aip_connector_core::model::ExternalAccountRef {
            id: "acct".to_owned(),
            system: "crm".to_owned(),
        };
        let key = |scope| {
            scoped_key(scope, "k", &action, &caller, Some(&tenant), Some(&account))
                .expect("every partition is present")
        };
        assert_eq!(
            key(IdempotencyKeyScope::Action),
            format!("Action:{}:k", action.id)
        );
        assert_eq!(
            key(IdempotencyKeyScope::Capability),
            "Capability:cap%3Aa%3Ab:k"
        );
        assert_eq!(key(IdempotencyKeyScope::Principal), "Principal:usr_1:k");
        assert_eq!(key(IdempotencyKeyScope::Tenant), "Tenant:t1:k");
        assert_eq!(
            key(IdempotencyKeyScope::ExternalAccount),
            "ExternalAccount:crm:acct:k"
        );
        assert!(
            scoped_key(
                IdempotencyKeyScope::Tenant,
                "k",
                &action,
                &caller,
                None,
                None
            )
            .is_err()
        );
    }

    #[test]
    fn scoped_keys_of_ids_with_separators_never_collide() {
        let action = Action::new("cap:a:b", json!({}));
        let key =
            |scope, principal: &str, tenant: Option<&str>, account: Option<(&str, &str)>, raw| {
                let account =
                    account.map(
                        |(system, id)| aip_connector_core::model::ExternalAccountRef {
                            id: id.to_owned(),
                            system: system.to_owned(),
                        },
                    );
                scoped_key_of(scope, raw, &action, principal, tenant, account.as_ref())
                    .expect("every partition is present")
            };
        // Each pair split one text differently between the partition and the raw key; upstream's
        // bare ':' join gave both halves of every pair one record.
        let pairs = [
            (
                key(IdempotencyKeyScope::Principal, "user", None, None, "1:k"),
                key(IdempotencyKeyScope::Principal, "user:1", None, None, "k"),
            ),
            (
                key(IdempotencyKeyScope::Tenant, "p", Some("acme"), None, "eu:k"),
                key(IdempotencyKeyScope::Tenant, "p", Some("acme:eu"), None, "k"),
            ),
            (
                key(
                    IdempotencyKeyScope::ExternalAccount,
                    "p",
                    None,
                    Some(("crm", "a:b")),
                    "k",
                ),
                key(
                    IdempotencyKeyScope::ExternalAccount,
                    "p",
                    None,
                    Some(("crm:a", "b")),
                    "k",
                ),
            ),
            (
                key(IdempotencyKeyScope::Principal, "a%3Ab", None, None, "k"),
                key(IdempotencyKeyScope::Principal, "a:b", None, None, "k"),
            ),
        ];
        for (first, second) in pairs {
            assert_ne!(first, second);
        }
        assert_eq!(
            key(
                IdempotencyKeyScope::Principal,
                "user:ana%",
                None,
                None,
                "k:1"
            ),
            "Principal:user%3Aana%25:k:1"
        );
    }

    #[test]
    fn reservation_ids_are_distinct_and_share_the_process_prefix() {
        let first = reservation_id();
        let second = reservation_id();
        assert_ne!(first, second);
        // Threads take disjoint blocks of the counter.
        let others: Vec<String> = (0..4)
            .map(|_| std::thread::spawn(|| (0..2000).map(|_| reservation_id()).collect::<Vec<_>>()))
            .flat_map(|thread| thread.join().expect("the thread does not panic"))
            .collect();
        let mut all: std::collections::HashSet<&String> = others.iter().collect();
        all.insert(&first);
        all.insert(&second);
        assert_eq!(all.len(), others.len() + 2);
        assert_eq!(first.len(), 48);
        assert_eq!(first[..32], second[..32]);
        assert!(
            first
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn fingerprint_ignores_the_transaction_id_and_key_order() {
        let mut first = Action::new("cap:a:b", json!({ "x": 1, "y": 2 }));
        first.transaction = Some(Box::new(ActionTransaction {
            transaction_id: Some(TransactionId::new()),
            ..ActionTransaction::new(TransactionMode::Execute)
        }));
        let mut second = Action::new("cap:a:b", json!({ "y": 2, "x": 1 }));
        second.transaction = Some(Box::new(ActionTransaction {
            transaction_id: Some(TransactionId::new()),
            ..ActionTransaction::new(TransactionMode::Execute)
        }));
        assert_eq!(fingerprint(&first), fingerprint(&second));
        second.input = json!({ "y": 2, "x": 2 });
        assert_ne!(fingerprint(&first), fingerprint(&second));
    }

    /// Every collision behaviour refuses a key another capability settled, even an identical
    /// resend of its action id (the capability id is part of the fingerprint, so only the id
    /// could match).
    #[test]
    fn a_record_of_another_capability_is_never_replayed() {
        use aip_connector_core::ids::PrincipalId;
        use aip_connector_core::model::{ActionResult, IdempotencyKeyScope};

        let first = Action::new("cap:bank:transfer", json!({ "amount": 5 }));
        let record = IdempotencyRecord {
            key: "Tenant:acme:k1".to_owned(),
            key_scope: IdempotencyKeyScope::Tenant,
            action_id: first.id.clone(),
            capability_id: first.capability_id.clone(),
            principal_id: PrincipalId::from("user:ada"),
            tenant_id: Some("acme".to_owned()),
            input_hash: fingerprint(&first),
            result: ActionResult::completed(first.id.clone(), json!({ "transfer_id": "t1" })),
            created_at_ms: 0,
            expires_at_ms: None,
        };
        let mut read = Action::new("cap:bank:balance", json!({ "amount": 5 }));
        read.id = first.id.clone();
        for behavior in [
            IdempotencyCollisionBehavior::ReturnOriginalResult,
            IdempotencyCollisionBehavior::RejectConflict,
            IdempotencyCollisionBehavior::RevalidateInputHash,
        ] {
            let answer = collision(behavior, &record, &read, &fingerprint(&read));
            let error = answer.error.expect("refused");
            assert_eq!(error.code, codes::IDEMPOTENCY_CONFLICT, "{behavior:?}");
            assert_eq!(
                error.details.expect("details")["original_capability_id"],
                "cap:bank:transfer"
            );
            assert!(answer.output.is_none(), "{behavior:?}");
        }
        // The capability that settled it still gets its replay.
        let replayed = collision(
            IdempotencyCollisionBehavior::ReturnOriginalResult,
            &record,
            &first,
            &fingerprint(&first),
        );
        assert!(replayed.is_idempotent_replay());
    }
}
