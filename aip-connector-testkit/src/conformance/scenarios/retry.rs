//! `retry_exhaustion`: for every capability that declares retry support, a provider that answers
//! `503` or `429` with `Retry-After` yields a retryable, `temporary` error whose code is the
//! connector's own and whose `retry_after_ms` comes from the header; the key is released so a
//! retry executes; a retry after the provider had already applied the change (it answered `503`
//! after committing) leaves no second effect when the contract declares retry safety; and once
//! the attempts are exhausted the key is dead-lettered.
//!
//! The retry after the `503` or `429`, with the provider answering again, must complete: one that
//! fails leaves `backoff_observed` unexercised (no retry was seen to recover), and failed. A
//! capability whose example fails before it makes any provider request leaves all three
//! unexercised; one that completes without the provider has nothing to provoke (a note). When
//! none makes a provider request, the three fail, unless the suite was told the connector has
//! no provider (`ConformanceSuite::without_provider`): then they hold with a note quoting why.
//!
//! Exhaustion is the host's `max_attempts_per_key` (the conformance host runs with the default
//! [`HostLimits`]): after that many retryable failures under one key, the last one must come back
//! as `action.dead_letter` (permanent, not retryable, `details {attempts, last_error}` naming the
//! connector's error), the store must hold it under the key, and a further attempt must not run
//! the handler (host docs §4.4).
//!
//! A retry sends the same action again. A capability that only commits plans cannot do that (a
//! failed commit ends its plan, host docs §6.3), so each of its attempts plans again under a key
//! of its own and commits under the call's key.

use aip_connector::CapabilityDefinition;
use aip_connector::codes;
use aip_connector::host::HostLimits;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ErrorCategory, RetrySafety,
    TransactionMode,
};
use serde_json::Value;

use super::code;
use crate::conformance::{Evidence, Harness, Settled};
use crate::provider_double::Fault;

/// The scenario's required assertions, all of them about a provider failure it provokes.
const REQUIRED: [&str; 3] = [
    "retryable_error_preserved",
    "backoff_observed",
    "exhaustion_dead_lettered",
];

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let supports_retry = |c: &CapabilityDefinition| {
        c.capability
            .contract
            .as_ref()
            .is_some_and(|c| c.execution.supports_retry)
    };
    let targets = h.examples_where(supports_retry);
    if targets.is_empty() {
        super::nothing_to_invoke(&mut evidence, h, "supports retry", supports_retry);
        return evidence;
    }
    let mut observed = 0;
    let mut local = Vec::new();
    for (capability, input) in &targets {
        let id = capability.id().as_str();
        let scouted = h
            .scout(h.action(
                capability,
                input.clone(),
                &format!("conformance-retry-scout-{id}"),
            ))
            .await;
        let Some(route) = scouted.route().map(str::to_owned) else {
            // One that completes without the provider has nothing a provider failure could
            // reach; one that failed before asking it was never tried.
            if !super::reached_no_provider(&mut evidence, h, id, &scouted, &REQUIRED) {
                local.push(id.to_owned());
            }
            continue;
        };
        observed += 1;
        let target = Target {
            capability,
            input,
            route,
            same_key: retries_under_the_same_key(capability),
        };
        if !target.same_key {
            evidence.note(format!(
                "`{id}` only commits plans, and a failed commit ends its plan (host docs §6.3): each retry plans again and commits under the call's key"
            ));
        }
        target.provider_failure(h, 503, 2, &mut evidence).await;
        target.provider_failure(h, 429, 3, &mut evidence).await;
        target
            .retry_after_commit(h, scouted.effects.len(), &mut evidence)
            .await;
        target.exhaustion(h, &mut evidence).await;
    }
    if observed == 0 {
        super::none_reached_the_provider(
            &mut evidence,
            h,
            &local,
            &REQUIRED,
            "capability that supports retry",
        );
    }
    evidence
}

/// Whether a failed call of `capability` is retried by sending the same action again: it has
/// no transaction contract, or it can `execute` (a failed commit ends its plan instead).
fn retries_under_the_same_key(capability: &CapabilityDefinition) -> bool {
    capability
        .capability
        .contract
        .as_ref()
        .and_then(|c| c.transaction.as_ref())
        .is_none_or(|t| t.supported_modes.contains(&TransactionMode::Execute))
}

/// One attempt of a call: how it settled, and the action whose key the host settled.
struct Attempt {
    settled: Settled,
    keyed: Action,
}

/// One capability under test and where its provider calls go.
struct Target<'a> {
    capability: &'a CapabilityDefinition,
    input: &'a Value,
    route: String,
    same_key: bool,
}

impl Target<'_> {
    fn id(&self) -> &str {
        self.capability.id().as_str()
    }

    /// Attempt `n` (from 1) of the call `first`: `first` again; for a capability that only
    /// commits plans, a new plan (under a key of its own) committed under `first`'s key.
    async fn attempt(&self, h: &Harness, first: &Action, n: usize) -> Attempt {
        if self.same_key {
            return Attempt {
                settled: h.settle(h.host(), first.clone()).await,
                keyed: first.clone(),
            };
        }
        let key = first.idempotency_key.clone().unwrap_or_default();
        let plan = h
            .host()
            .invoke(
                h.action(
                    self.capability,
                    self.input.clone(),
                    &format!("{key}-plan-{n}"),
                ),
                &h.caller(),
            )
            .await;
        let Some(plan_id) = plan
            .output
            .as_ref()
            .and_then(|o| o.pointer("/plan/plan_id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Attempt {
                settled: settled_as(plan),
                keyed: first.clone(),
            };
        };
        let mut commit = ActionTransaction::new(TransactionMode::Commit);
        commit.plan_id = Some(plan_id.clone());
        let commit = Action::new(self.capability.id().as_str(), self.input.clone())
            .with_transaction(commit)
            .with_idempotency_key(key);
        let mut settled = h.settle(h.host(), commit.clone()).await;
        settled.plan_id = Some(plan_id);
        Attempt {
            settled,
            keyed: commit,
        }
    }

    /// `retryable_error_preserved` and `backoff_observed` for a provider answering `status`
    /// with `Retry-After: <seconds>`.
    async fn provider_failure(
        &self,
        h: &Harness,
        status: u16,
        seconds: u64,
        evidence: &mut Evidence,
    ) {
        let id = self.id();
        let key = format!("conformance-retry-{status}-{id}");
        let call = h.action(self.capability, self.input.clone(), &key);
        h.provider()
            .inject(&self.route, Fault::status(status).retry_after_secs(seconds));
        let requests_before = h.provider().request_count();
        let first = self.attempt(h, &call, 1).await;
        h.provider().clear_faults();
        let result = &first.settled.result;
        evidence.artifact(format!("action:{}", result.action_id));
        for request in h.provider().requests().iter().skip(requests_before) {
            evidence.artifact(format!("req_{}", request.sequence));
        }
        let failure = connector_failure(h, result.action_id.as_str());
        let connector_code = failure
            .as_ref()
            .and_then(|f| f.get("code"))
            .and_then(Value::as_str);
        let error = result.error.as_ref();
        evidence.assert(
            "retryable_error_preserved",
            result.status == ActionResultStatus::Failed
                && error.is_some_and(|e| {
                    e.retryable == Some(true)
                        && e.category == ErrorCategory::Temporary
                        && Some(e.code.as_str()) == connector_code
                }),
            || {
                format!(
                    "`{id}` with the provider answering {status} (Retry-After: {seconds}) settled `{}` with error {}; the handler failed with {}",
                    result.status,
                    error.map_or("none".to_owned(), |e| format!(
                        "`{}` (category {:?}, retryable {})",
                        e.code,
                        e.category,
                        super::maybe(e.retryable)
                    )),
                    failure.as_ref().map_or("no failure".to_owned(), Value::to_string)
                )
            },
        );
        let retry_after = error.and_then(|e| e.retry_after_ms);
        let asked = seconds * 1000;
        evidence.assert(
            "backoff_observed",
            retry_after.is_some_and(|ms| (asked..=2 * asked).contains(&ms)),
            || {
                format!(
                    "`{id}` with the provider answering {status} (Retry-After: {seconds}) reported retry_after_ms {retry_after:?}; expected at least {asked} and at most {}",
                    2 * asked
                )
            },
        );

        // The key is released, so the next attempt executes (without the fault, it succeeds).
        let record = h.idempotency_record(&first.keyed).await;
        let calls_before = h.probe().calls(id);
        let retried = self.attempt(h, &call, 2).await;
        let ran = h.probe().calls(id) - calls_before;
        evidence.artifact(format!("action:{}", retried.settled.result.action_id));
        evidence.assert(
            "backoff_observed",
            record.is_none() && ran > 0 && !retried.settled.result.is_idempotent_replay(),
            || {
                format!(
                    "after the retryable {status} of `{id}`, the key `{key}` was {} and a retry ran the handler {ran} time(s) (replay: {})",
                    if record.is_none() { "released" } else { "still settled" },
                    retried.settled.result.is_idempotent_replay()
                )
            },
        );
        // The retry runs against a provider that answers again: it recovers, or nothing showed
        // that retrying this capability ever gets anywhere (an author trial's write failed
        // every retry and passed, with a note).
        if retried.settled.result.status != ActionResultStatus::Completed {
            evidence.unexercised(
                "backoff_observed",
                id,
                format!(
                    "no retry of `{id}` recovered once the provider answered again: retried after its {status}, it answered {}",
                    super::outcome(&retried.settled.result)
                ),
            );
        }
    }

    /// `declared_retry_safety_held`: the provider applies the change and still answers `503`;
    /// retrying what the connector called retryable must not apply it twice.
    async fn retry_after_commit(&self, h: &Harness, clean_effects: usize, evidence: &mut Evidence) {
        let id = self.id();
        let safety = self
            .capability
            .capability
            .contract
            .as_ref()
            .map(|c| c.execution.retry_safety);
        if !matches!(
            safety,
            Some(RetrySafety::Safe | RetrySafety::SafeWithIdempotencyKey)
        ) {
            evidence.note(format!(
                "`{id}` declares retry safety {safety:?}, so a retry after a committed change is not required to be safe"
            ));
            return;
        }
        let key = format!("conformance-retry-committed-{id}");
        let call = h.action(self.capability, self.input.clone(), &key);
        h.provider().inject(
            &self.route,
            Fault::status(503).retry_after_secs(1).with_effect(),
        );
        let effects_before = h.provider().effect_total();
        let first = self.attempt(h, &call, 1).await;
        h.provider().clear_faults();
        evidence.artifact(format!("action:{}", first.settled.result.action_id));
        let retryable = first
            .settled
            .result
            .error
            .as_ref()
            .and_then(|e| e.retryable)
            == Some(true);
        if !retryable {
            evidence.note(format!(
                "`{id}` reported the 503 after a committed change as `{}`, not retryable: the host stored it and nothing was retried",
                code(&first.settled.result)
            ));
            return;
        }
        let second = self.attempt(h, &call, 2).await;
        evidence.artifact(format!("action:{}", second.settled.result.action_id));
        let effects: Vec<String> = h
            .provider()
            .effects()
            .iter()
            .skip(effects_before)
            .map(|e| {
                format!(
                    "{} {} (key {}, {})",
                    e.method,
                    e.route,
                    super::sent_key(e.idempotency_key.as_deref()),
                    e.operation_id
                )
            })
            .collect();
        let committed = effects.len();
        evidence.assert(
            "declared_retry_safety_held",
            committed <= clean_effects.max(1),
            || {
                format!(
                    "`{id}` declares retry safety {safety:?}; the provider committed its change and answered 503, the connector called that retryable, and the retry left {committed} effect(s) where one call makes {clean_effects}: {}",
                    effects.join(", ")
                )
            },
        );
    }

    /// `exhaustion_dead_lettered`: after `max_attempts_per_key` retryable failures under one
    /// key, the last is the stored dead letter and a further attempt does not run.
    async fn exhaustion(&self, h: &Harness, evidence: &mut Evidence) {
        let id = self.id();
        let limit = HostLimits::default().max_attempts_per_key;
        let key = format!("conformance-retry-exhausted-{id}");
        let call = h.action(self.capability, self.input.clone(), &key);
        h.provider()
            .inject(&self.route, Fault::status(503).retry_after_secs(1).always());
        let mut attempts = Vec::new();
        for n in 1..=limit as usize {
            let attempt = self.attempt(h, &call, n).await;
            evidence.artifact(format!("action:{}", attempt.settled.result.action_id));
            attempts.push(attempt);
        }
        let Some(last) = attempts.pop() else {
            h.provider().clear_faults();
            return;
        };
        let record = h.idempotency_record(&last.keyed).await;
        let calls_before = h.probe().calls(id);
        let further = self.attempt(h, &call, limit as usize + 1).await;
        let ran = h.probe().calls(id) - calls_before;
        h.provider().clear_faults();
        evidence.artifact(format!("action:{}", further.settled.result.action_id));
        if let Some(record) = &record {
            evidence.artifact(format!("idempotency:{}", record.key));
        }

        let result = &last.settled.result;
        let connector_code = connector_failure(h, result.action_id.as_str())
            .and_then(|f| f.get("code").and_then(Value::as_str).map(str::to_owned));
        let details = result.error.as_ref().and_then(|e| e.details.as_ref());
        let dead_letter = code(result) == codes::ACTION_DEAD_LETTER
            && result.error.as_ref().and_then(|e| e.retryable) == Some(false)
            && details
                .and_then(|d| d.get("attempts"))
                .and_then(Value::as_u64)
                == Some(u64::from(limit))
            && details
                .and_then(|d| d.pointer("/last_error/code"))
                .and_then(Value::as_str)
                == connector_code.as_deref();
        let stored = record
            .as_ref()
            .is_some_and(|r| code(&r.result) == codes::ACTION_DEAD_LETTER);
        let earlier: Vec<String> = attempts
            .iter()
            .map(|a| {
                format!(
                    "`{}` (retryable {})",
                    code(&a.settled.result),
                    super::maybe(a.settled.result.error.as_ref().and_then(|e| e.retryable))
                )
            })
            .collect();
        evidence.assert("exhaustion_dead_lettered", dead_letter && stored && ran == 0, || {
            format!(
                "`{id}` under key `{key}` with the provider answering 503 every time: attempts 1 to {} settled {}; attempt {limit} settled `{}` (`{}`) with details {} (expected `{}`, not retryable, {limit} attempts, last error `{}`); the store holds {} under the key; attempt {} ran the handler {ran} time(s) and answered `{}`",
                limit - 1,
                earlier.join(", "),
                result.status,
                code(result),
                details.map_or("none".to_owned(), Value::to_string),
                codes::ACTION_DEAD_LETTER,
                connector_code.as_deref().unwrap_or("?"),
                record
                    .as_ref()
                    .map_or("nothing".to_owned(), |r| format!("a record with `{}`", code(&r.result))),
                limit + 1,
                code(&further.settled.result)
            )
        });
    }
}

/// A call that ended before it could be committed, as `settle` would report it.
fn settled_as(result: ActionResult) -> Settled {
    Settled {
        result,
        chunks: Vec::new(),
        approval_id: None,
        plan_id: None,
    }
}

/// The failure the handler returned for `action_id`, as the wire error the probe recorded.
fn connector_failure(h: &Harness, action_id: &str) -> Option<Value> {
    h.probe()
        .records()
        .into_iter()
        .rev()
        .find(|r| r.action_id == action_id)
        .and_then(|r| r.outcome)
        .and_then(Result::err)
}
