//! One module per scenario; each returns the [`Evidence`] of its required assertions.

mod approval;
mod audit;
mod cancellation;
mod errors;
mod idempotency;
mod identity;
mod restart;
mod retry;
mod schema;
mod streaming;
mod transaction;
mod webhook;

use aip_connector::host::{Host, TransactionSelector};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ProviderOperationRef, TransactionMode,
};

use super::harness::Scouted;
use super::{Evidence, Harness, Scenario};

/// Runs `scenario` on `harness`.
pub(super) async fn run(scenario: Scenario, harness: &Harness) -> Evidence {
    match scenario {
        Scenario::IdentityCredentials => identity::run(harness).await,
        Scenario::SchemaEnforcement => schema::run(harness).await,
        Scenario::IdempotencyDuplicates => idempotency::run(harness).await,
        Scenario::RetryExhaustion => retry::run(harness).await,
        Scenario::CancellationRaces => cancellation::run(harness).await,
        Scenario::StreamingBackpressure => streaming::run(harness).await,
        Scenario::ErrorsUncertainOutcomes => errors::run(harness).await,
        Scenario::ApprovalLifecycle => approval::run(harness).await,
        Scenario::TransactionLifecycle => transaction::run(harness).await,
        Scenario::AuditRedaction => audit::run(harness).await,
        Scenario::WebhookSecurity => webhook::run(harness).await,
        Scenario::RestartReconnect => restart::run(harness).await,
    }
}

/// The transaction modes the capability's contract declares (none without a transaction block).
fn transaction_modes(capability: &aip_connector::CapabilityDefinition) -> &[TransactionMode] {
    capability
        .capability
        .contract
        .as_ref()
        .and_then(|c| c.transaction.as_ref())
        .map_or(&[], |t| t.supported_modes.as_slice())
}

/// Whether the capability's handler runs in a transaction (`execute` or `commit`).
fn runs_handler(capability: &aip_connector::CapabilityDefinition) -> bool {
    let modes = transaction_modes(capability);
    modes.contains(&TransactionMode::Execute) || modes.contains(&TransactionMode::Commit)
}

/// Records why a scenario found nothing to invoke among the capabilities that `matches` (those
/// that `what`: "supports retry"). When the only ones are compensating capabilities, which the
/// suite never calls on their own (the host refuses an action naming one), it says so: "no
/// capability … declares an example input" misled an author trial whose compensating
/// capability had one.
fn nothing_to_invoke(
    evidence: &mut Evidence,
    h: &Harness,
    what: &str,
    matches: impl Fn(&aip_connector::CapabilityDefinition) -> bool,
) {
    let compensating: Vec<String> = h
        .definition()
        .capabilities
        .iter()
        .filter(|c| c.facts.compensation_handler && matches(c))
        .map(|c| format!("`{}`", c.id()))
        .collect();
    if compensating.is_empty() {
        evidence.no_example(format!(
            "no capability that {what} declares an example input: nothing can be invoked"
        ));
    } else {
        evidence.note(format!(
            "no capability that {what} can be called on its own: {} {} only as the compensation of another capability, which the suite does not send by itself; give a capability that can be called directly that contract (and an example input)",
            compensating.join(", "),
            if compensating.len() == 1 { "runs" } else { "run" }
        ));
    }
}

/// Why a plan call made no plan, for a failed assertion.
fn no_plan(id: &str, planned: &ActionResult) -> String {
    format!(
        "planning `{id}` answered `{}` ({}) without a plan",
        planned.status,
        code(planned)
    )
}

/// The action that runs `action`'s handler on `host` ([`Harness::handler_call`]), or `None`
/// after failing `assertion` with the plan's answer when planning made no plan.
async fn handler_call_or_fail(
    h: &Harness,
    host: &Host,
    action: Action,
    evidence: &mut Evidence,
    assertion: &str,
) -> Option<Action> {
    let id = action.capability_id.to_string();
    match h.handler_call(host, action).await {
        Ok(call) => Some(call),
        Err(planned) => {
            evidence.artifact(format!("action:{}", planned.action_id));
            evidence.assert(assertion, false, || no_plan(&id, &planned));
            None
        }
    }
}

/// The error code of a result, or `""`.
fn code(result: &ActionResult) -> &str {
    result.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

/// The error code of a result, for a message: `` `policy.denied` `` or "no error code" (an
/// empty `()` read as a formatting bug to an author trial).
fn shown_code(result: &ActionResult) -> String {
    maybe_or(
        Some(code(result)).filter(|code| !code.is_empty()),
        "no error code",
    )
}

/// How a call ended, for a message: `` `failed` (`provider.invalid_response`: the HTTP 201
/// response …) ``, or `` `completed` ``. The error's message says what went wrong where its
/// code alone does not (an author trial's report said `answered failed` and no more).
fn outcome(result: &ActionResult) -> String {
    match &result.error {
        Some(error) => format!("`{}` (`{}`: {})", result.status, error.code, error.message),
        None => format!("`{}`", result.status),
    }
}

/// Records that `assertion` was not exercised on capability `id` because the call that answered
/// `result` did not complete. A waiver covers it only when the call's handler ran (the provider
/// double, or the connector's reading of its answers, kept it from completing), not when the
/// host answered before the handler ran: no double had a part in that.
fn call_unexercised(
    evidence: &mut Evidence,
    h: &Harness,
    assertion: &str,
    id: &str,
    result: &ActionResult,
    why: String,
) {
    let ran = h
        .probe()
        .records()
        .iter()
        .any(|r| r.action_id == result.action_id.as_str());
    if ran {
        evidence.unexercised(assertion, id, why);
    } else {
        evidence.unexercised_unwaivable(
            assertion,
            id,
            format!("{why}; the host answered before the handler ran"),
        );
    }
}

/// What a provider-failure scenario (errors, retry) records for a capability whose example made
/// no provider request: one that completed has nothing a provider failure could reach (a note);
/// one that failed before asking leaves each of `assertions` unexercised for it. Returns whether
/// it failed before asking.
fn reached_no_provider(
    evidence: &mut Evidence,
    h: &Harness,
    id: &str,
    scouted: &Scouted,
    assertions: &[&str],
) -> bool {
    evidence.artifact(format!("action:{}", scouted.result.action_id));
    if scouted.result.status == ActionResultStatus::Completed {
        evidence.note(format!(
            "`{id}` made no provider request on its example, so no provider failure can reach it"
        ));
        return false;
    }
    for name in assertions {
        call_unexercised(
            evidence,
            h,
            name,
            id,
            &scouted.result,
            format!(
                "`{id}` answered {} on its example before making any provider request, so no provider failure could reach it",
                outcome(&scouted.result)
            ),
        );
    }
    true
}

/// The close of a provider-failure scenario (errors, retry) in which no candidate reached the
/// provider. Those that failed before asking are not exercised already (and fail, unless
/// waived). Those that completed without asking (`local`) show that the connector either has no
/// provider (the suite was told so, [`ConformanceSuite::without_provider`](crate::conformance::ConformanceSuite::without_provider)):
/// each of `assertions` holds with a note quoting why; or it was not pointed at the double, and
/// each fails saying what to do. The second holds whether or not another candidate failed first:
/// a waiver of that one must not leave the rest looking exercised (found by a review).
fn none_reached_the_provider(
    evidence: &mut Evidence,
    h: &Harness,
    local: &[String],
    assertions: &[&str],
    subject: &str,
) {
    if local.is_empty() {
        return;
    }
    let completed = local
        .iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match h.no_provider() {
        Some(reason) => {
            for name in assertions {
                evidence.note(format!(
                    "{name} holds without a provider: the suite was told the connector has none ({reason}), and {completed} completed without a provider request"
                ));
                evidence.assert(name, true, String::new);
            }
        }
        None => {
            for name in assertions {
                evidence.assert(name, false, || {
                    format!(
                        "no {subject} made a provider request ({completed} completed without one), so no provider failure could be provoked: point the connector at `env.provider_url()` (one built on an in-memory fake of its API passes no provider scenario), or, if its work really is local, say so with `ConformanceSuite::without_provider(reason)`"
                    )
                });
            }
        }
    }
}

/// What a scenario that loses a provider answer (`reconcile_before_retry`,
/// `reconnect_cursor_resumed`) records for its subject `id` when the scout call made no
/// provider request, so no answer could be lost. When the call completed and the suite was told
/// the connector has no provider, `assertion` holds with a note quoting why; when the call
/// completed otherwise, it fails saying what to do; when it failed before asking, it fails with
/// how it ended.
fn no_answer_to_lose(
    evidence: &mut Evidence,
    h: &Harness,
    id: &str,
    scouted: &Scouted,
    assertion: &str,
) {
    evidence.artifact(format!("action:{}", scouted.result.action_id));
    if scouted.result.status != ActionResultStatus::Completed {
        evidence.assert(assertion, false, || {
            format!(
                "`{id}` answered {} on its example before making any provider request, so no answer could be lost",
                outcome(&scouted.result)
            )
        });
        return;
    }
    match h.no_provider() {
        Some(reason) => {
            evidence.note(format!(
                "{assertion} holds without a provider: the suite was told the connector has none ({reason}), and `{id}` completed without a provider request, so no answer can be lost"
            ));
            evidence.assert(assertion, true, String::new);
        }
        None => evidence.assert(assertion, false, || {
            format!(
                "`{id}` made no provider request on its example, so no answer could be lost: point the connector at `env.provider_url()`, or, if its work really is local, say so with `ConformanceSuite::without_provider(reason)`"
            )
        }),
    }
}

/// The idempotency key a provider request carried, for a message: `` `k` `` or "no key"
/// (not `Some("k")`).
fn sent_key(key: Option<&str>) -> String {
    maybe_or(key, "no key")
}

/// The idempotency key of an effect's request (from the double's idempotency header), for a
/// parenthesis of a message: `` key `k` `` or "no idempotency key" (not "key no key").
fn key_header(key: Option<&str>) -> String {
    match key {
        Some(key) => format!("key `{key}`"),
        None => "no idempotency key".to_owned(),
    }
}

/// The keys of several requests, for a message: `` `a`, no key ``.
fn sent_keys<'a>(keys: impl IntoIterator<Item = Option<&'a str>>) -> String {
    keys.into_iter()
        .map(sent_key)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The transaction `selector` names, as the harness's caller reads it on `host`; `None` when
/// there is none or the read failed.
pub(super) async fn view(
    h: &Harness,
    host: &Host,
    selector: TransactionSelector,
) -> Option<aip_connector::model::TransactionResult> {
    host.transaction(&selector, &h.caller())
        .await
        .ok()
        .flatten()
}

/// Whether the call's writes name their operations: in its clean run (`scouted`), every
/// mutating request carried an `x-operation-id`, and one of the provider's effects was filed
/// under the operation its transaction checkpointed. A reconcile companion of such a call
/// answers for that operation alone, and a commit that writes more than once (a hold, then its
/// confirmation, docs/transactions.md §3) is committed only when the checkpointed write landed:
/// a booking trial's hold, whose answer the suite lost before the confirmation was sent, was
/// "not committed", and the suite held 1 effect against that answer. A call with a write that
/// names no operation (the provider files it under an id of its own), or whose checkpointed
/// operation no write carries, answers for every effect, as before: a review showed a charge
/// sent without an id, followed by a receipt under the checkpointed one, passing with a
/// companion that looked up the receipt alone. What the suite cannot tell is a provisional
/// write (a hold that expires) from a main write filed under another named id: the checkpoint
/// must name the write that commits.
pub(super) async fn names_its_operations(h: &Harness, host: &Host, scouted: &Scouted) -> bool {
    let selector = TransactionSelector::Action(scouted.result.action_id.clone());
    let Some(operation) = view(h, host, selector)
        .await
        .and_then(|view| view.provider_operation)
    else {
        return false;
    };
    let every_write_named = scouted
        .requests
        .iter()
        .filter(|request| super::harness::is_mutating(&request.method))
        .all(|request| {
            request
                .header(crate::provider_double::OPERATION_ID_HEADER)
                .is_some_and(|id| !id.is_empty())
        });
    every_write_named
        && scouted
            .effects
            .iter()
            .any(|effect| effect.operation_id == operation.operation_id)
}

/// What the effects a reconciliation answers for are, for a failure message: the checkpointed
/// operation's, or the whole call's.
pub(super) fn operation_answered_for(
    operation: Option<&ProviderOperationRef>,
    names_operations: bool,
) -> String {
    match operation.filter(|_| names_operations) {
        Some(operation) => format!(
            "the checkpointed operation `{}` (the call's other writes name other operations)",
            operation.operation_id
        ),
        None => "the call".to_owned(),
    }
}

/// The provider's effects since `since` that a reconciliation answers for: those filed under
/// `operation` (the transaction's checkpointed one) when the call names its operations
/// ([`names_its_operations`]), else all of them.
pub(super) fn effects_answered_for(
    h: &Harness,
    since: usize,
    operation: Option<&ProviderOperationRef>,
    names_operations: bool,
) -> usize {
    let effects = h.provider().effects();
    let new = effects.iter().skip(since);
    match operation.filter(|_| names_operations) {
        Some(operation) => new
            .filter(|effect| effect.operation_id == operation.operation_id)
            .count(),
        None => new.count(),
    }
}

/// A status (or anything) that may be missing, for a message: `` `outcome_unknown` `` or
/// "none" (not `Some(OutcomeUnknown)`).
pub(super) fn maybe<T: std::fmt::Display>(value: Option<T>) -> String {
    maybe_or(value, "none")
}

/// `` `value` ``, or `absent` when there is none.
fn maybe_or<T: std::fmt::Display>(value: Option<T>, absent: &str) -> String {
    value.map_or_else(|| absent.to_owned(), |value| format!("`{value}`"))
}

/// Every string in `value` (object keys included).
pub(super) fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    collect_strings(value, true, out);
}

/// Every string value in `value` (not the object keys).
pub(super) fn string_values(value: &serde_json::Value, out: &mut Vec<String>) {
    collect_strings(value, false, out);
}

fn collect_strings(value: &serde_json::Value, keys: bool, out: &mut Vec<String>) {
    use serde_json::Value;
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, keys, out)),
        Value::Object(map) => {
            for (key, value) in map {
                if keys {
                    out.push(key.clone());
                }
                collect_strings(value, keys, out);
            }
        }
        _ => {}
    }
}
