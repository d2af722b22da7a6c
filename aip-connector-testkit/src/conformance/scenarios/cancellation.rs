//! `cancellation_races`: cancelling an action before its handler is dispatched, while the handler
//! waits for the provider, and after the action settled.
//!
//! - `before_dispatch_cancelled`: a cancel sent before the action starts is remembered
//!   (`CancelOutcome::Pending`, docs/host-runtime.md §7.2), and the action, when it then
//!   arrives, settles `cancelled` without its handler running (for a planned capability the
//!   cancelled action is the commit, which is where the handler runs).
//! - `in_flight_cancelled`: with every provider call slowed down, the action is cancelled once
//!   the provider has its request; then again, in a second run, at its *second* provider
//!   request, the first answered at once (a handler that hands its polling to a task of its own
//!   after creating an operation does so after its first request, so a cancel during that
//!   request never saw the lie; found by an author trial). The result must be `cancelled`, the handler's token must have
//!   fired, the handler must not run on to completion, nothing the handler started may keep
//!   talking to the provider (or its sink) once the action is over, and the cancellation is the
//!   stored result a duplicate replays. The host drops a cancelled handler's future, so a handler
//!   that merely never looks at its token still stops; what it cannot stop is work the handler
//!   handed to a task of its own — that is the lie this catches. Requests that arrive while the
//!   capability's cancel companion runs are the companion's (stopping the provider operation is
//!   its job), named in a note rather than counted. A companion that fails is noted, and fails
//!   the assertion when the provider refused its credentials (a stop sent without the
//!   `CancelRequest::credential` it is handed).
//! - `late_cancel_preserved_terminal`: a cancel after the result cancels nothing (`NotActive`,
//!   or `Pending` for a cancel the host remembers in case the id is sent again) and changes
//!   nothing: the stored result, its replay and the transaction record stay as they were.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aip_connector::host::{CancelOutcome, Host, HostLimits, TransactionSelector};
use aip_connector::model::{Action, ActionResult, ActionResultStatus};
use aip_connector::{CapabilityDefinition, ids::ActionId};
use serde_json::Value;

use super::streaming::Tap;
use super::{code, handler_call_or_fail, shown_code};
use crate::Fault;
use crate::conformance::harness::declares_mutation;
use crate::conformance::{Evidence, Harness, approval_id_of};

/// The code of a provider's refusal of a request's credentials (`401`, `403`).
const UNAUTHORIZED_CODE: &str = aip_connector::codes::PROVIDER_UNAUTHORIZED;
/// How long every provider call takes while the in-flight cancel is tried.
const DELAY: Duration = Duration::from_millis(1500);
/// Requests that reach the provider this long after the cancel were sent after it.
const GRACE: Duration = Duration::from_millis(200);
/// How long a handler that never calls the provider must have run before it is cancelled anyway.
const NO_PROVIDER_AFTER: Duration = Duration::from_secs(2);
/// How long anything in this scenario may take before it counts as stuck.
const PATIENCE: Duration = Duration::from_secs(10);

fn supports_cancel(capability: &CapabilityDefinition) -> bool {
    capability
        .capability
        .contract
        .as_ref()
        .is_some_and(|c| c.execution.supports_cancel)
}

pub(super) async fn run(h: &Harness) -> Evidence {
    // On the heap: the suite polls every scenario from one future, and the host's pipeline
    // futures awaited here are large in debug builds.
    Box::pin(scenario(h)).await
}

async fn scenario(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let mut candidates = h.examples_where(supports_cancel);
    // A read is the safest thing to cancel half-way; a mutation cancelled in flight may still
    // land at the provider.
    candidates.sort_by_key(|(c, _)| declares_mutation(c));
    let Some((capability, input)) = candidates.first().cloned() else {
        super::nothing_to_invoke(&mut evidence, h, "supports cancellation", supports_cancel);
        return evidence;
    };
    let tap = Tap::new(Arc::new(h.probe().clone()));
    let host = h.host_for(Arc::new(tap.clone()), HostLimits::default());
    before_dispatch(h, &host, capability, input.clone(), &mut evidence).await;
    for trial in [InFlight::FIRST_REQUEST, InFlight::SECOND_REQUEST] {
        let failed_before = evidence.failure_count();
        in_flight(
            h,
            &host,
            &tap,
            capability,
            input.clone(),
            trial,
            &mut evidence,
        )
        .await;
        // A call that failed at its first request has said what is wrong; a later one would
        // repeat it.
        if evidence.failure_count() > failed_before {
            break;
        }
    }
    late_cancel(h, &host, capability, input, &mut evidence).await;
    evidence
}

async fn before_dispatch(
    h: &Harness,
    host: &Host,
    capability: &CapabilityDefinition,
    input: Value,
    evidence: &mut Evidence,
) {
    let id = capability.id().to_string();
    let Some(action) = handler_call_or_fail(
        h,
        host,
        h.action(capability, input, "conformance-cancel-before"),
        evidence,
        "before_dispatch_cancelled",
    )
    .await
    else {
        return;
    };
    evidence.artifact(format!("action:{}", action.id));
    let calls_before = h.probe().calls(&id);
    let early = host.cancel(&action.id);
    let driven = h.drive(host, action).await;
    let ran = h.probe().calls(&id) - calls_before;
    let status = driven.result.status;
    evidence.assert(
        "before_dispatch_cancelled",
        early == CancelOutcome::Pending && ran == 0 && status == ActionResultStatus::Cancelled,
        || {
            format!(
                "a cancel sent for an action of `{id}` before it started answered {early:?}; the action then ran its handler {ran} time(s) and settled `{status}` ({}) instead of `cancelled` without running",
                shown_code(&driven.result)
            )
        },
    );
}

/// What became of a call the scenario tried to cancel while its handler waited.
enum Raced {
    /// The call settled before anything showed it in flight.
    Finished(ActionResult),
    /// The cancel was sent.
    Cancelled(Box<CancelledInFlight>),
}

/// What [`race`] waited for before it sent the cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cue {
    /// The provider had a request of the call.
    ProviderRequest,
    /// The handler had run for [`NO_PROVIDER_AFTER`] without a provider request.
    HandlerRanAlone,
    /// Neither happened within [`PATIENCE`]: the handler never started (or never ran that long).
    NothingInFlight,
}

/// What [`race`] saw of a cancel sent while the call was in flight.
struct CancelledInFlight {
    action_id: ActionId,
    outcome: CancelOutcome,
    result: ActionResult,
    at: Instant,
    at_wall: SystemTime,
    cue: Cue,
    /// Whether the handler's token had fired when `Host::cancel` returned, before the
    /// call was polled again: the host fires it on every settlement too, so only this
    /// moment shows that the cancel itself fired it.
    fired_at_cancel: bool,
}

/// One attempt at cancelling a call in flight: at which of its provider requests.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Provider requests of the call answered at once, before the slowed-down one the cancel
    /// is sent during.
    answered_first: usize,
    /// The idempotency key of the call.
    key: &'static str,
}

impl InFlight {
    const FIRST_REQUEST: InFlight = InFlight {
        answered_first: 0,
        key: "conformance-cancel-in-flight",
    };
    const SECOND_REQUEST: InFlight = InFlight {
        answered_first: 1,
        key: "conformance-cancel-in-flight-later",
    };

    /// Where the cancel was sent, for the failure messages.
    fn during(self) -> &'static str {
        if self.answered_first == 0 {
            "during its first provider request"
        } else {
            "during its second provider request (the first answered at once)"
        }
    }
}

async fn in_flight(
    h: &Harness,
    host: &Host,
    tap: &Tap,
    capability: &CapabilityDefinition,
    input: Value,
    trial: InFlight,
    evidence: &mut Evidence,
) {
    let id = capability.id().to_string();
    let Some(action) = handler_call_or_fail(
        h,
        host,
        h.action(capability, input, trial.key),
        evidence,
        "in_flight_cancelled",
    )
    .await
    else {
        return;
    };
    let requests_before = h.provider().request_count();
    if trial.answered_first > 0 {
        h.provider().inject(
            "*",
            Fault::delay(Duration::ZERO).times(trial.answered_first),
        );
    }
    h.provider().inject("*", Fault::delay(DELAY).always());
    let during = trial.during();
    let CancelledInFlight {
        action_id,
        outcome,
        result,
        at,
        at_wall,
        cue,
        fired_at_cancel,
    } = match race(h, host, tap, action.clone(), trial.answered_first).await {
        Raced::Cancelled(cancelled)
            if cancelled.cue == Cue::ProviderRequest || trial.answered_first == 0 =>
        {
            *cancelled
        }
        // A call with one provider request: the first trial cancelled it during that one.
        Raced::Cancelled(cancelled) => {
            h.provider().clear_faults();
            evidence.artifact(format!("action:{}", cancelled.action_id));
            evidence.qualify(format!(
                "`{id}` made no second provider request, so it was cancelled during its first only"
            ));
            return;
        }
        Raced::Finished(result) if trial.answered_first > 0 => {
            h.provider().clear_faults();
            evidence.artifact(format!("action:{}", result.action_id));
            evidence.qualify(format!(
                "`{id}` settled `{}` without a second provider request, so it was cancelled during its first only",
                result.status
            ));
            return;
        }
        Raced::Finished(result) => {
            h.provider().clear_faults();
            evidence.artifact(format!("action:{}", result.action_id));
            evidence.assert("in_flight_cancelled", false, || {
                    format!(
                        "`{id}` settled `{}` ({}) before it could be cancelled in flight: with every provider call slowed by {DELAY:?} it never waited for the provider",
                        result.status,
                        shown_code(&result)
                    )
                });
            return;
        }
    };
    // Watch what happens once the slowed-down call would have answered: a connector that
    // ignores the cancel sends its next request right after that answer, so the watch runs a
    // second past it (a loaded machine can take hundreds of milliseconds to get there).
    tokio::time::sleep((at + DELAY + GRACE * 5).saturating_duration_since(Instant::now())).await;
    h.provider().clear_faults();
    evidence.artifact(format!("action:{action_id}"));
    let requests = h.provider().requests();
    for request in requests.iter().skip(requests_before) {
        evidence.artifact(format!("req_{}", request.sequence));
    }
    // Requests that arrive while the connector's own cancel companion runs are the companion's:
    // stopping the provider operation is what it is for.
    let companions = tap.cancels_of(action_id.as_str());
    let mut by_companion = Vec::new();
    let mut late_requests = Vec::new();
    for request in requests.iter().skip(requests_before).filter(|r| {
        r.received_at
            .duration_since(at_wall)
            .is_ok_and(|after| after > GRACE)
    }) {
        let named = format!(
            "{} {} (req_{})",
            request.method, request.path, request.sequence
        );
        if companions.iter().any(|c| c.covers(request.received_at)) {
            by_companion.push(named);
        } else {
            late_requests.push(named);
        }
    }
    if !by_companion.is_empty() {
        evidence.note(format!(
            "the provider received {} while the cancel companion of `{id}` ran; they are counted as the companion's, not as work the cancelled handler left behind",
            by_companion.join(", ")
        ));
    }
    let calls = tap.calls_of(action_id.as_str());
    let call = calls.last();

    evidence.assert(
        "in_flight_cancelled",
        outcome == CancelOutcome::Cancelled,
        || format!("cancelling `{id}` {during} answered {outcome:?}"),
    );
    evidence.assert(
        "in_flight_cancelled",
        result.status == ActionResultStatus::Cancelled,
        || {
            format!(
                "`{id}` cancelled {during} settled `{}` ({}) instead of `cancelled`",
                result.status,
                shown_code(&result)
            )
        },
    );
    // The cancel companion could not stop what the handler started (the host reports its
    // failure in the `cancelled` output, docs/host-runtime.md §7.2). Only a refusal for its
    // credentials is surely the companion's own doing (a stop sent without the credential it is
    // handed); a companion may truthfully fail to find what it stops, or wait for a state the
    // double never reports, which the report notes.
    if let Some(refused_stop) = result
        .output
        .as_ref()
        .and_then(|output| output.get("remote_cancel_error"))
    {
        let unauthenticated =
            refused_stop.get("code").and_then(Value::as_str) == Some(UNAUTHORIZED_CODE);
        let why = format!(
            "the cancel companion of `{id}`, called after the cancel {during}, failed ({refused_stop}): what the handler started at the provider may go on"
        );
        if unauthenticated {
            evidence.assert("in_flight_cancelled", false, || {
                format!("{why}. The provider refused its credentials: it is handed the tenant and credential the handler held (`CancelRequest::credential`)")
            });
        } else {
            evidence.note(why);
        }
    }
    evidence.assert(
        "in_flight_cancelled",
        fired_at_cancel,
        || format!("the cancellation token the handler of `{id}` got had not fired when the cancel {during} returned"),
    );
    evidence.assert(
        "in_flight_cancelled",
        call.is_some_and(|c| c.ended.is_none()),
        || format!("the handler of `{id}` ran on to completion after it was cancelled {during}"),
    );
    evidence.assert("in_flight_cancelled", late_requests.is_empty(), || {
        format!(
            "after `{id}` was cancelled {during}, the provider still received {}: the connector keeps working for an action that is over (work handed to a task of its own does not watch the cancellation token)",
            late_requests.join(", ")
        )
    });
    let late_sends = call.map_or(0, |c| {
        c.sends
            .iter()
            .filter(|s| s.started.saturating_duration_since(at) > GRACE)
            .count()
    });
    evidence.assert("in_flight_cancelled", late_sends == 0, || {
        format!("after `{id}` was cancelled {during}, its handler still sent {late_sends} chunk(s)")
    });
    match cue {
        Cue::ProviderRequest => {}
        Cue::HandlerRanAlone => evidence.note(format!(
            "`{id}` made no provider request the suite could slow down; it was cancelled after its handler had run for {NO_PROVIDER_AFTER:?}"
        )),
        Cue::NothingInFlight => evidence.note(format!(
            "neither a provider request of `{id}` nor a handler running for {NO_PROVIDER_AFTER:?} showed within {PATIENCE:?} (the handler never started, or returned sooner); it was cancelled then"
        )),
    }

    // The cancellation is the stored result: a duplicate replays it and runs nothing.
    let calls_before = h.probe().calls(&id);
    let mut duplicate = action;
    duplicate.id = action_id;
    let (replay, _) = h.run_once(host, duplicate).await;
    evidence.assert(
        "in_flight_cancelled",
        replay.status == ActionResultStatus::Cancelled
            && replay.is_idempotent_replay()
            && h.probe().calls(&id) == calls_before,
        || {
            format!(
                "a duplicate of the cancelled call of `{id}` answered `{}` (replay: {}) instead of replaying the cancellation",
                replay.status,
                replay.is_idempotent_replay()
            )
        },
    );
}

/// Runs `action` (approving and resuming it if it waits for approval) and cancels it as soon as
/// the provider has its request after the `answered_first` ones, or its handler has run for a
/// while without one.
async fn race(h: &Harness, host: &Host, tap: &Tap, action: Action, answered_first: usize) -> Raced {
    let action_id = action.id.clone();
    let gated = action.clone();
    let mut call = Box::pin(async { h.run_once(host, action).await.0 })
        as std::pin::Pin<Box<dyn Future<Output = ActionResult> + Send + '_>>;
    let mut resumed = false;
    loop {
        let requests_before = h.provider().request_count();
        let started = async {
            let waiting = Instant::now();
            loop {
                if h.provider().request_count() > requests_before + answered_first {
                    return Cue::ProviderRequest;
                }
                let running = tap
                    .calls_of(action_id.as_str())
                    .last()
                    .is_some_and(|c| c.ended.is_none() && c.started.elapsed() > NO_PROVIDER_AFTER);
                if running {
                    return Cue::HandlerRanAlone;
                }
                if waiting.elapsed() > PATIENCE {
                    return Cue::NothingInFlight;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::select! {
            result = &mut call => {
                if !resumed
                    && result.status == ActionResultStatus::PendingApproval
                    && let Some(approval) = approval_id_of(&result)
                {
                    h.approve_all(host, &approval).await;
                    let gated = gated.clone();
                    call = Box::pin(async move { h.resume(host, &approval, &gated).await });
                    resumed = true;
                    continue;
                }
                return Raced::Finished(result);
            }
            cue = started => {
                let at = Instant::now();
                let at_wall = SystemTime::now();
                let outcome = host.cancel(&action_id);
                let fired_at_cancel = tap
                    .calls_of(action_id.as_str())
                    .last()
                    .is_some_and(|c| c.token_fired());
                // Only the request in flight stays slowed down: the cancel companion's requests
                // (which the host sends next) answer at once, so its window is short, and work
                // the handler left behind shows as soon as that request is answered.
                h.provider().clear_faults();
                let result = tokio::time::timeout(PATIENCE, &mut call)
                    .await
                    .unwrap_or_else(|_| ActionResult::new(action_id.clone(), ActionResultStatus::Failed));
                return Raced::Cancelled(Box::new(CancelledInFlight { action_id, outcome, result, at, at_wall, cue, fired_at_cancel }));
            }
        }
    }
}

async fn late_cancel(
    h: &Harness,
    host: &Host,
    capability: &CapabilityDefinition,
    input: Value,
    evidence: &mut Evidence,
) {
    let id = capability.id().to_string();
    let driven = h
        .drive(host, h.action(capability, input, "conformance-cancel-late"))
        .await;
    let final_id = driven.action.id.clone();
    evidence.artifact(format!("action:{final_id}"));
    let settled = driven.result.error.as_ref().and_then(|e| e.retryable) != Some(true)
        && driven.result.status != ActionResultStatus::PendingApproval;
    if !settled {
        evidence.assert("late_cancel_preserved_terminal", false, || {
            format!(
                "the example of `{id}` did not settle (`{}`, {}), so nothing stored could be checked",
                driven.result.status,
                code(&driven.result)
            )
        });
        return;
    }
    let selector = TransactionSelector::Action(final_id.clone());
    let view_before = host
        .transaction(&selector, &h.caller())
        .await
        .ok()
        .flatten();
    let calls_before = h.probe().calls(&id);

    let late = host.cancel(&final_id);

    let (replay, _) = h.run_once(host, driven.action.clone()).await;
    let view_after = host
        .transaction(&selector, &h.caller())
        .await
        .ok()
        .flatten();
    evidence.assert(
        "late_cancel_preserved_terminal",
        late != CancelOutcome::Cancelled,
        || {
            format!(
                "a cancel after `{id}` settled answered {late:?}: it reached a handler of an action that had finished"
            )
        },
    );
    let same = replay.status == driven.result.status
        && code(&replay) == code(&driven.result)
        && replay.original_output() == driven.result.original_output();
    evidence.assert(
        "late_cancel_preserved_terminal",
        same && replay.is_idempotent_replay() && h.probe().calls(&id) == calls_before,
        || {
            format!(
                "after a late cancel, a duplicate of `{id}` answered `{}` ({}; replay: {}) where the settled result was `{}` ({})",
                replay.status,
                shown_code(&replay),
                replay.is_idempotent_replay(),
                driven.result.status,
                shown_code(&driven.result)
            )
        },
    );
    if let Some(before) = &view_before {
        evidence.artifact(format!("transaction:{}", before.transaction_id));
    }
    let unchanged = match (&view_before, &view_after) {
        (Some(before), Some(after)) => {
            before.status == after.status
                && before.result == after.result
                && before.receipts == after.receipts
        }
        (None, None) => true,
        _ => false,
    };
    evidence.assert("late_cancel_preserved_terminal", unchanged, || {
        format!(
            "a late cancel changed the transaction of `{id}`: {} → {}",
            super::maybe(view_before.as_ref().map(|v| v.status)),
            super::maybe(view_after.as_ref().map(|v| v.status))
        )
    });
}
