//! `idempotency_duplicates`: for every capability whose contract requires an idempotency key,
//! a duplicate is suppressed by the host (replayed, the handler runs once) **and** by the
//! provider (the same action delivered again after its record was lost commits nothing new),
//! a reused key with another input gets exactly what the declared collision behaviour
//! documents, and every mutating provider request carries the action's key, the same on every
//! delivery.
//!
//! The redelivery is what a host sees when a settlement was lost (host docs §2: "a later
//! duplicate may execute again"): the same action reaches the handler a second time, and only
//! the key the connector forwards lets the provider (the double deduplicates, as a well-kept
//! provider does) recognise it. A connector that declares idempotency but forwards no key, or a
//! fresh one, leaves two effects behind and fails `duplicate_suppressed` and
//! `delivery_id_stable`. A capability whose keyed call on its example does not complete leaves
//! `duplicate_suppressed` unexercised, and failed: a replayed failure says nothing about the
//! duplicate of a call that took effect.
//!
//! `delivery_id_stable` looks at mutating requests only (reads and operation lookups need no
//! key). A request's `Idempotency-Key` must contain the action's key as the host scopes it:
//! `IdempotencyKey::for_provider` (what `ProviderRequest::idempotency` sends, a digest of the
//! scoped key) or the scoped key itself (`Tenant:<tenant>:<key>`), alone or in a key derived
//! per provider call. The caller's key alone would let the provider merge two tenants'
//! `invoice-42`. The redelivery must send the same keys in the
//! same order as the first delivery, and (on a capability with a reconciliation) name each write
//! by the same operation id (`x-operation-id`, when it sends one): the provider files the replay
//! under the first id, where a lookup of the second finds nothing. Elsewhere a changed id is a
//! note.
//!
//! `collision_rejected` reuses the key with another valid input (a second declared example, or
//! the example with one value changed): `reject_conflict` must answer `idempotency.conflict`,
//! `revalidate_input_hash` `idempotency.input_hash_mismatch`, and `return_original_result` —
//! as documented (host docs §4.3) — the stored original result, replayed; in every case the
//! handler does not run and the provider sees nothing. The resend of the same action id always
//! collides; a new action with the key collides too unless keys are scoped to the action.

use aip_connector::aip_connector_core::schema::{SchemaLimits, compile_draft202012};
use aip_connector::codes;
use aip_connector::model::{
    ActionResultStatus, IdempotencyCollisionBehavior, IdempotencyKeyScope, IdempotencyRequirement,
};
use aip_connector::{CapabilityDefinition, IdempotencyKey};
use serde_json::Value;

use super::{code, shown_code};
use crate::conformance::harness::is_mutating;
use crate::conformance::{Evidence, Harness};
use crate::provider_double::{OPERATION_ID_HEADER, RecordedRequest};

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let requires_key = |c: &CapabilityDefinition| {
        c.capability
            .contract
            .as_ref()
            .is_some_and(|c| c.idempotency.requirement == IdempotencyRequirement::Required)
    };
    let targets = h.examples_where(requires_key);
    if targets.is_empty() {
        super::nothing_to_invoke(
            &mut evidence,
            h,
            "requires an idempotency key",
            requires_key,
        );
        return evidence;
    }
    let mut keyed_requests = 0;
    for (capability, input) in &targets {
        keyed_requests += duplicates(h, capability, input, &mut evidence).await;
        collision(h, capability, input, &mut evidence).await;
    }
    if keyed_requests == 0 {
        evidence.note(
            "no capability made a mutating provider request, so no provider-side key could be checked",
        );
    }
    evidence
}

/// `duplicate_suppressed` and `delivery_id_stable` for one capability; returns how many mutating
/// provider requests were checked for their key.
async fn duplicates(
    h: &Harness,
    capability: &CapabilityDefinition,
    input: &Value,
    evidence: &mut Evidence,
) -> usize {
    let id = capability.id().as_str();
    let key = format!("conformance-idempotency-duplicate-{id}");
    let action = h.action(capability, input.clone(), &key);
    evidence.artifact(format!("action:{}", action.id));

    // The same action twice on one host: the second is a replay, the handler ran once.
    let calls_before = h.probe().calls(id);
    let records_before = h.probe().records().len();
    let requests_before = h.provider().request_count();
    let effects_before = h.provider().effect_total();
    let first = h.settle(h.host(), action.clone()).await;
    let first_requests = requests_since(h, requests_before);
    let first_effects = h.provider().effect_total() - effects_before;
    let second = h.settle(h.host(), action.clone()).await;
    let calls = h.probe().calls(id) - calls_before;
    let pair_effects = h.provider().effect_total() - effects_before;
    for request in &first_requests {
        evidence.artifact(format!("req_{}", request.sequence));
    }
    evidence.assert(
        "duplicate_suppressed",
        second.result.is_idempotent_replay() && calls == 1 && pair_effects == first_effects,
        || {
            format!(
                "`{id}` sent twice with key `{key}`: the second answer was `{}` ({}; idempotent replay: {}), the handler ran {calls} time(s), the provider committed {pair_effects} effect(s) where the first call alone committed {first_effects}",
                second.result.status,
                shown_code(&second.result),
                second.result.is_idempotent_replay()
            )
        },
    );
    // What the checks above held on a call that failed says nothing about the duplicate of a
    // completed one, which is what the key is for (an author trial's write failed every call
    // and passed, with a note).
    if first.result.status != ActionResultStatus::Completed {
        super::call_unexercised(
            evidence,
            h,
            "duplicate_suppressed",
            id,
            &first.result,
            format!(
                "no keyed call of `{id}` completed, so no duplicate of a completed call was seen: on its example it answered {}",
                super::outcome(&first.result)
            ),
        );
    }

    // The same action delivered again after its record was lost: the handler runs again, and
    // the key it forwards must keep the provider from committing anything new.
    let fresh = h.host_without_records();
    let requests_before = h.provider().request_count();
    let effects_before = h.provider().effect_total();
    let redelivered = h.settle(&fresh, action.clone()).await;
    let redelivery_requests = requests_since(h, requests_before);
    let new_effects = h.provider().effect_total() - effects_before;
    for request in &redelivery_requests {
        evidence.artifact(format!("req_{}", request.sequence));
    }
    evidence.assert("duplicate_suppressed", new_effects == 0, || {
        let keys: Vec<String> = h
            .provider()
            .effects()
            .iter()
            .skip(effects_before)
            .map(|e| {
                format!(
                    "{} {} ({})",
                    e.method,
                    e.route,
                    super::key_header(e.idempotency_key.as_deref())
                )
            })
            .collect();
        format!(
            "`{id}` delivered again with key `{key}` after its record was lost committed {new_effects} new provider effect(s): {}",
            keys.join(", ")
        )
    });
    // (A call that failed is accounted for above.)
    if first_effects == 0 && first.result.status == ActionResultStatus::Completed {
        evidence.note(format!(
            "`{id}` committed no provider effect on its example, so the provider side of its duplicates is vacuous"
        ));
    }
    // Suppressed, not refused: the redelivery of a completed action must complete too (the
    // provider replays its first answer). One that fails left the caller a failure for an
    // action that took effect; an author trial's connector put a fresh id in every request's
    // body, so the provider refused the second as a reused key.
    if first.result.status == ActionResultStatus::Completed {
        let changed = changed_bodies(&first_requests, &redelivery_requests);
        evidence.assert(
            "duplicate_suppressed",
            redelivered.result.status == ActionResultStatus::Completed,
            || {
                let why = if changed.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; under the same key the redelivery sent other request bodies ({}), which a provider that checks them refuses as a reused key: derive every value a request carries from the input and the key (`key.for_provider()`), not from fresh random ids or the clock",
                        changed.join("; ")
                    )
                };
                format!(
                    "`{id}` delivered again after its record was lost answered `{}` ({}) where the first delivery completed{why}",
                    redelivered.result.status,
                    shown_code(&redelivered.result)
                )
            },
        );
    }

    // delivery_id_stable: every mutating request of both deliveries carried the action's key as
    // the host scoped it (or a key derived from that), and the redelivery sent the same keys in
    // the same order.
    // The keys the handler calls of both deliveries were given, as the host scoped them (a
    // `plan` delivers through its commit, under the commit's own key), in both accepted forms.
    let accepted: Vec<String> = h
        .probe()
        .records()
        .iter()
        .skip(records_before)
        .filter_map(|r| r.scoped_idempotency_key.clone())
        .flat_map(|scoped| [IdempotencyKey::provider_key_of(&scoped), scoped])
        .collect();
    let first_keys = mutating_keys(&first_requests);
    let redelivery_keys = mutating_keys(&redelivery_requests);
    let unkeyed: Vec<String> = first_keys
        .iter()
        .chain(&redelivery_keys)
        .filter(|(_, k)| {
            !k.as_deref()
                .is_some_and(|k| accepted.iter().any(|a| k.contains(a.as_str())))
        })
        .map(|(request, k)| format!("{request} carried {}", super::sent_key(k.as_deref())))
        .collect();
    evidence.assert("delivery_id_stable", unkeyed.is_empty(), || {
        let scoped = h.scoped_key(&action).unwrap_or_else(|| key.clone());
        format!(
            "`{id}`: mutating provider requests without the action's key as the host scopes it in the double's idempotency header `{}` (`IdempotencyKey::for_provider`, `{}` for this action, which `ProviderRequest::idempotency` sends; or the scoped key `{scoped}` itself; a connector whose provider names the header otherwise sets it in its provider setup: `provider.set_idempotency_header(..)`); the caller's key alone is shared by every tenant or principal of the scope: {}",
            h.provider().idempotency_header(),
            IdempotencyKey::provider_key_of(&scoped),
            unkeyed.join(", ")
        )
    });
    let sent_first: Vec<Option<&str>> = first_keys.iter().map(|(_, k)| k.as_deref()).collect();
    let sent_again: Vec<Option<&str>> = redelivery_keys.iter().map(|(_, k)| k.as_deref()).collect();
    evidence.assert("delivery_id_stable", sent_first == sent_again, || {
        format!(
            "`{id}`: the first delivery sent the keys [{}], the second [{}]",
            super::sent_keys(sent_first.iter().copied()),
            super::sent_keys(sent_again.iter().copied())
        )
    });
    // The operation id a write names itself by must be stable too: the provider files the
    // replayed write under the first delivery's id, so a checkpoint of the second one's names
    // an operation no lookup finds, and a reconciliation reads it as never made (an author
    // trial's connector put a time-based id there and passed).
    // Judged where the id matters, on a capability reconciled by the operation it checkpoints;
    // elsewhere the header may be a per-request trace id of the API, and a note says it moved.
    let changed = changed_operation_ids(&first_requests, &redelivery_requests);
    let reconciled = capability.support().reconciliation;
    if !reconciled && !changed.is_empty() {
        evidence.note(format!(
            "`{id}`: the redelivery sent other `{OPERATION_ID_HEADER}` values than the first delivery ({}); it declares no reconciliation, so nothing looks the operation up, but a provider that files writes under that header files the replay under the first one",
            changed.join("; ")
        ));
    }
    evidence.assert("delivery_id_stable", !reconciled || changed.is_empty(), || {
        format!(
            "`{id}`: the redelivery named its writes by other operation ids in `{OPERATION_ID_HEADER}` than the first delivery ({}): the provider files the replay under the first id, so a reconciliation that looks the second one up finds nothing; derive the id from the key (`key.for_provider()`), not from the clock or a random source",
            changed.join("; ")
        )
    });
    first_keys.len() + redelivery_keys.len()
}

/// `collision_rejected` for one capability: the key reused with another valid input gets what
/// the declared collision behaviour documents (host docs §4.3), and nothing runs.
async fn collision(
    h: &Harness,
    capability: &CapabilityDefinition,
    input: &Value,
    evidence: &mut Evidence,
) {
    let id = capability.id().as_str();
    let Some(contract) = capability.capability.contract.as_ref() else {
        return;
    };
    let behavior = contract.idempotency.collision_behavior;
    let Some(changed) = changed_input(capability, input) else {
        evidence.assert("collision_rejected", false, || {
            format!(
                "no second valid input could be derived for `{id}` from its examples and input schema; declare a second example"
            )
        });
        return;
    };
    let key = format!("conformance-idempotency-collision-{id}");
    let original_action = h.action(capability, input.clone(), &key);
    let original = h.settle(h.host(), original_action.clone()).await;
    evidence.artifact(format!("action:{}", original_action.id));
    let Some(stored) = h.idempotency_record(&original_action).await else {
        evidence.assert("collision_rejected", false, || {
            format!(
                "`{id}` on its example answered `{}` ({}) and left no idempotency record under key `{key}`, so a reuse of the key has nothing to collide with",
                original.result.status,
                shown_code(&original.result)
            )
        });
        return;
    };
    evidence.artifact(format!("idempotency:{}", stored.key));

    // The same action id with another input, and (when the scope is wider than the action) a
    // new action with another input: both reuse the scoped key. The key is checked at the
    // reservation (stage 7), before approvals and transactions, so one call shows it (streamed
    // for a capability that only streams, or the mode check at stage 3 refuses it first).
    let mut attempts = Vec::new();
    if contract.idempotency.key_scope == IdempotencyKeyScope::Action {
        evidence.note(format!(
            "`{id}` scopes keys to the action, so only a resend of the same action id collides"
        ));
    } else {
        attempts.push((
            "another action",
            h.action(capability, changed.clone(), &key),
        ));
    }
    let mut resent = original_action.clone();
    resent.input = changed;
    attempts.push(("the same action id", resent));

    for (who, action) in attempts {
        let calls_before = h.probe().calls(id);
        let requests_before = h.provider().request_count();
        let (result, _) = h.invoke_once(h.host(), action).await;
        let ran = h.probe().calls(id) - calls_before;
        let sent = h.provider().request_count() - requests_before;
        evidence.artifact(format!("action:{}", result.action_id));
        let (held, expected) = match behavior {
            IdempotencyCollisionBehavior::RejectConflict => (
                code(&result) == codes::IDEMPOTENCY_CONFLICT,
                format!("`{}`", codes::IDEMPOTENCY_CONFLICT),
            ),
            IdempotencyCollisionBehavior::RevalidateInputHash => (
                code(&result) == codes::IDEMPOTENCY_INPUT_HASH_MISMATCH,
                format!("`{}`", codes::IDEMPOTENCY_INPUT_HASH_MISMATCH),
            ),
            // Documented (host docs §4.3): any reuse of the key, changed input included, gets
            // the stored result replayed, and nothing runs.
            IdempotencyCollisionBehavior::ReturnOriginalResult => (
                result.is_idempotent_replay()
                    && result.status == stored.result.status
                    && result.original_output() == stored.result.original_output(),
                "the original result, replayed".to_owned(),
            ),
        };
        evidence.assert("collision_rejected", held && ran == 0 && sent == 0, || {
            format!(
                "`{id}` ({behavior:?}): {who} reusing key `{key}` with another input answered `{}` ({}; replay: {}) instead of {expected}; the handler ran {ran} time(s), {sent} provider request(s)",
                result.status,
                shown_code(&result),
                result.is_idempotent_replay()
            )
        });
    }
}

/// Another input the input schema accepts: a different declared example, else the example with
/// one string changed, one number incremented or one boolean flipped.
fn changed_input(capability: &CapabilityDefinition, input: &Value) -> Option<Value> {
    let schema = compile_draft202012(
        &capability.capability.input_schema,
        &SchemaLimits::default(),
    )
    .ok()?;
    let declared = capability.examples.iter().filter(|e| *e != input).cloned();
    let object = input.as_object().cloned().unwrap_or_default();
    let derived: Vec<Value> = object
        .iter()
        .filter_map(|(name, value)| {
            let changed = match value {
                Value::String(text) => Value::String(format!("{text}-aip-collision")),
                // Wrapping: an example may hold the type's maximum; any other value will do.
                Value::Number(n) if n.is_u64() => Value::from(n.as_u64()?.wrapping_add(1)),
                Value::Number(n) if n.is_i64() => Value::from(n.as_i64()?.wrapping_add(1)),
                Value::Number(n) => Value::from(n.as_f64()? + 1.0),
                Value::Bool(b) => Value::Bool(!b),
                _ => return None,
            };
            let mut candidate = object.clone();
            candidate.insert(name.clone(), changed);
            Some(Value::Object(candidate))
        })
        .collect();
    declared
        .chain(derived)
        .find(|candidate| candidate != input && schema.is_valid(candidate))
}

fn requests_since(h: &Harness, before: usize) -> Vec<RecordedRequest> {
    h.provider().requests().into_iter().skip(before).collect()
}

/// The mutating requests of `again` whose JSON body differs from the first-delivery request
/// with the same method, path and `Idempotency-Key`, naming the top-level fields that differ.
fn changed_bodies(first: &[RecordedRequest], again: &[RecordedRequest]) -> Vec<String> {
    again
        .iter()
        .filter(|r| is_mutating(&r.method))
        .filter_map(|request| {
            let original = first_delivery_of(first, request)?;
            let (Some(before), Some(after)) = (original.json(), request.json()) else {
                return (original.body != request.body)
                    .then(|| format!("{} {}: the body's bytes", request.method, request.path));
            };
            if before == after {
                return None;
            }
            let fields: Vec<String> = match (before.as_object(), after.as_object()) {
                (Some(before), Some(after)) => before
                    .keys()
                    .chain(after.keys().filter(|k| !before.contains_key(*k)))
                    .filter(|k| before.get(*k) != after.get(*k))
                    .map(|k| format!("`{k}`"))
                    .collect(),
                _ => vec!["the body".to_owned()],
            };
            Some(format!(
                "{} {}: {}",
                request.method,
                request.path,
                fields.join(", ")
            ))
        })
        .collect()
}

/// The mutating requests of the redelivery whose operation id (`x-operation-id`, the header
/// the double files an effect under) differs from the first delivery's request it repeats,
/// described.
fn changed_operation_ids(first: &[RecordedRequest], again: &[RecordedRequest]) -> Vec<String> {
    again
        .iter()
        .filter(|r| is_mutating(&r.method))
        .filter_map(|request| {
            let original = first_delivery_of(first, request)?;
            let (before, after) = (
                original.header(OPERATION_ID_HEADER),
                request.header(OPERATION_ID_HEADER),
            );
            (before != after).then(|| {
                format!(
                    "{} {}: `{}` then `{}`",
                    request.method,
                    request.path,
                    before.unwrap_or("none"),
                    after.unwrap_or("none")
                )
            })
        })
        .collect()
}

/// The request of the first delivery that `request` of the redelivery repeats: same method,
/// path and `Idempotency-Key`.
fn first_delivery_of<'r>(
    first: &'r [RecordedRequest],
    request: &RecordedRequest,
) -> Option<&'r RecordedRequest> {
    first.iter().find(|f| {
        f.method == request.method
            && f.path == request.path
            && f.idempotency_key() == request.idempotency_key()
    })
}

/// `(method path, Idempotency-Key)` of every mutating request.
fn mutating_keys(requests: &[RecordedRequest]) -> Vec<(String, Option<String>)> {
    requests
        .iter()
        .filter(|r| is_mutating(&r.method))
        .map(|r| {
            (
                format!("{} {} (req_{})", r.method, r.path, r.sequence),
                r.idempotency_key().map(str::to_owned),
            )
        })
        .collect()
}
