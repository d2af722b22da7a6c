//! `errors_uncertain_outcomes`: the fields of a connector failure reach the action result
//! unchanged, an effect whose answer was lost is reported as an unknown outcome that is
//! reconciled (never executed again blindly), and no error carries a secret or a request or
//! response body.
//!
//! - `protocol_fields_preserved`: the provider answers `503` with `Retry-After`, then `409`;
//!   the result's error has the code, category, `retryable`, `retry_after_ms`, `remote_status`,
//!   `provider_operation` and `uncertain_outcome` of the failure the handler returned (the probe
//!   records it).
//! - `uncertain_outcome_reconciled`: on a mutating capability with a transaction contract and a
//!   reconcile handler, the provider commits the change and drops the connection. The
//!   transaction must be `outcome_unknown`; executing it again (or committing its plan again) is
//!   refused without running the handler; a `reconcile` settles it `reconciled`, reporting it
//!   committed (the provider holds its effect: of the checkpointed operation, when the call's
//!   writes name their operations, see `names_its_operations`); and the provider holds exactly the effects of
//!   one call. Then the same call under a new key loses its request *before* the provider
//!   takes it: the reconcile must not report it committed (the provider holds nothing), so a
//!   companion that answers "committed" without looking fails. When no capability can be
//!   reconciled, the
//!   assertion fails if some capability mutates (its lost answers could never be settled), and
//!   holds with a note when every capability only reads (a read has no outcome to reconcile; a
//!   network lookup whose author waived the mutating lint counts as a read).
//! - `error_secrets_redacted`: the provider answers `500` and `422` with bodies that quote the
//!   canary secret and a marker; no result, error or probe record of the scenario contains the
//!   secret, the marker, or the body of a request the connector sent.
//!
//! A capability whose example fails before it makes any provider request leaves
//! `protocol_fields_preserved` and `error_secrets_redacted` unexercised for it, and failed; one
//! that completes without the provider has no provider failure to pass on (a note). When no
//! capability makes a provider request at all, the assertions fail, unless the suite was told
//! the connector has no provider (`ConformanceSuite::without_provider`): then they hold with a
//! note quoting why, except `uncertain_outcome_reconciled` on a connector that declares a
//! reconcilable write, whose answers the probe loses instead (the transaction scenario's
//! `local_lost_answers`).

use aip_connector::CapabilityDefinition;
use aip_connector::codes;
use aip_connector::host::TransactionSelector;
use aip_connector::ids::TransactionId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, SideEffect, TransactionMode,
    TransactionProtocolStatus, TransactionResult,
};
use serde_json::{Value, json};

use super::{code, shown_code, strings};
use crate::conformance::harness::{CANARY_SECRET, declares_mutation};
use crate::conformance::{Evidence, Harness, Settled};
use crate::provider_double::Fault;

/// A marker the provider's error bodies carry; it must never be quoted by an error.
const RESPONSE_MARKER: &str = "provider-response-body-7d41b2";

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let examples = h.examples();
    if examples.is_empty() {
        evidence.no_example("no capability declares an example input: nothing can be invoked");
        return evidence;
    }
    let mut results = Vec::new();
    let mut reached = 0;
    let mut failed_first = 0;
    let mut local = Vec::new();
    for (capability, input) in &examples {
        let id = capability.id().as_str();
        let scouted = h
            .scout(h.action(
                capability,
                input.clone(),
                &format!("conformance-errors-scout-{id}"),
            ))
            .await;
        let Some(route) = scouted.route().map(str::to_owned) else {
            // One that completes without the provider has nothing a provider failure could
            // reach; one that failed before asking it was never tried.
            if super::reached_no_provider(
                &mut evidence,
                h,
                id,
                &scouted,
                &["protocol_fields_preserved", "error_secrets_redacted"],
            ) {
                failed_first += 1;
            } else {
                local.push(id.to_owned());
            }
            continue;
        };
        reached += 1;
        let target = Target {
            capability,
            input,
            route,
        };
        target.protocol_fields(h, &mut evidence, &mut results).await;
        target.secrets(h, &mut evidence, &mut results).await;
    }
    if reached == 0 {
        super::none_reached_the_provider(
            &mut evidence,
            h,
            &local,
            &["protocol_fields_preserved", "error_secrets_redacted"],
            "capability",
        );
    }
    // Told the connector has no provider, yet one of its capabilities asked one.
    if let (Some(reason), true) = (h.no_provider(), reached > 0) {
        evidence.assert("protocol_fields_preserved", false, || {
            format!(
                "the suite was told the connector has no provider ({reason}), yet {reached} capability example(s) made a provider request: remove `without_provider`"
            )
        });
    }
    // Or declares it reaches over the network: a capability the suite never calls (no example)
    // could do so unseen.
    if let Some(reason) = h.no_provider() {
        let networked: Vec<String> = h
            .definition()
            .capabilities
            .iter()
            .filter(|c| {
                c.capability
                    .contract
                    .as_ref()
                    .is_some_and(|k| k.side_effects.contains(&SideEffect::ExternalNetwork))
            })
            .map(|c| format!("`{}`", c.id()))
            .collect();
        if !networked.is_empty() {
            evidence.assert("protocol_fields_preserved", false, || {
                format!(
                    "the suite was told the connector has no provider ({reason}), yet {} {} `external_network`: remove `without_provider`, or the side effect if the capability does not reach over the network",
                    networked.join(", "),
                    if networked.len() == 1 { "declares" } else { "declare" }
                )
            });
        }
    }
    let no_provider = h
        .no_provider()
        .filter(|_| reached == 0 && failed_first == 0);
    uncertain_outcome(h, &mut evidence, &mut results, no_provider).await;

    // Whatever else happened in the scenario: no result or probe record shows the secret.
    let mut leaks = Vec::new();
    for result in &results {
        if serde_json::to_string(result)
            .unwrap_or_default()
            .contains(CANARY_SECRET)
        {
            leaks.push(format!("the result of action {}", result.action_id));
        }
    }
    for record in h.probe().records() {
        if let Some(Err(failure)) = &record.outcome
            && failure.to_string().contains(CANARY_SECRET)
        {
            leaks.push(format!(
                "the failure `{}` returned by `{}` for action {}",
                failure.get("code").and_then(Value::as_str).unwrap_or(""),
                record.capability_id,
                record.action_id
            ));
        }
    }
    leaks.dedup();
    evidence.assert("error_secrets_redacted", leaks.is_empty(), || {
        format!("the canary secret appeared in: {}", leaks.join(", "))
    });
    evidence
}

/// One capability that reaches the provider, and where its provider calls go.
struct Target<'a> {
    capability: &'a CapabilityDefinition,
    input: &'a Value,
    route: String,
}

impl Target<'_> {
    fn id(&self) -> &str {
        self.capability.id().as_str()
    }

    /// Settles a call of this capability under `key` while the provider answers with `fault`.
    async fn failing_call(&self, h: &Harness, key: &str, fault: Fault) -> (ActionResult, Vec<u64>) {
        let action = h.action(self.capability, self.input.clone(), key);
        h.provider().inject(&self.route, fault);
        let requests_before = h.provider().request_count();
        let settled = h.settle(h.host(), action).await;
        h.provider().clear_faults();
        let requests = h
            .provider()
            .requests()
            .iter()
            .skip(requests_before)
            .map(|r| r.sequence)
            .collect();
        (settled.result, requests)
    }

    /// `protocol_fields_preserved`: a retryable `503` with `Retry-After` and a permanent `409`.
    async fn protocol_fields(
        &self,
        h: &Harness,
        evidence: &mut Evidence,
        results: &mut Vec<ActionResult>,
    ) {
        let id = self.id();
        for (status, fault) in [
            (503, Fault::status(503).retry_after_secs(3)),
            (409, Fault::status(409)),
        ] {
            let key = format!("conformance-errors-fields-{status}-{id}");
            let (result, requests) = self.failing_call(h, &key, fault).await;
            evidence.artifact(format!("action:{}", result.action_id));
            for sequence in requests {
                evidence.artifact(format!("req_{sequence}"));
            }
            let failure = connector_failure(h, result.action_id.as_str());
            let Some(failure) = failure else {
                evidence.assert("protocol_fields_preserved", false, || {
                    format!(
                        "`{id}` with the provider answering {status} settled `{}` ({}), but its handler returned no failure",
                        result.status,
                        shown_code(&result)
                    )
                });
                results.push(result);
                continue;
            };
            let error = result
                .error
                .as_ref()
                .and_then(|e| serde_json::to_value(e).ok())
                .unwrap_or(Value::Null);
            let differing: Vec<String> = [
                "/code",
                "/category",
                "/retryable",
                "/retry_after_ms",
                "/details/remote_status",
                "/details/provider_operation",
                "/details/provider_request_id",
                "/details/uncertain_outcome",
            ]
            .into_iter()
            .filter(|pointer| error.pointer(pointer) != failure.pointer(pointer))
            .map(|pointer| {
                format!(
                    "{pointer}: the handler said {}, the result says {}",
                    show(failure.pointer(pointer)),
                    show(error.pointer(pointer))
                )
            })
            .collect();
            evidence.assert(
                "protocol_fields_preserved",
                result.status == ActionResultStatus::Failed && differing.is_empty(),
                || {
                    format!(
                        "`{id}` with the provider answering {status} settled `{}`; fields lost between the connector failure and the action result: {}",
                        result.status,
                        differing.join("; ")
                    )
                },
            );
            if failure.pointer("/details/remote_status") != Some(&json!(status)) {
                evidence.note(format!(
                    "`{id}`'s failure for a provider {status} does not carry remote_status {status}"
                ));
            }
            results.push(result);
        }
    }

    /// `error_secrets_redacted` for provider error bodies that quote the secret.
    async fn secrets(&self, h: &Harness, evidence: &mut Evidence, results: &mut Vec<ActionResult>) {
        let id = self.id();
        let body = json!({
            "error": RESPONSE_MARKER,
            "echoed_authorization": format!("Bearer {CANARY_SECRET}"),
        })
        .to_string();
        for status in [500, 422] {
            let key = format!("conformance-errors-secret-{status}-{id}");
            let (result, requests) = self
                .failing_call(h, &key, Fault::respond(status, body.clone()))
                .await;
            evidence.artifact(format!("action:{}", result.action_id));
            let sent: Vec<String> = h
                .provider()
                .requests()
                .iter()
                .filter(|r| requests.contains(&r.sequence))
                .filter_map(|r| String::from_utf8(r.body.clone()).ok())
                .filter(|body| body.len() >= 8)
                .collect();
            for sequence in &requests {
                evidence.artifact(format!("req_{sequence}"));
            }
            let mut texts = Vec::new();
            strings(
                &serde_json::to_value(&result).unwrap_or(Value::Null),
                &mut texts,
            );
            for record in h.probe().records() {
                if record.action_id == result.action_id.as_str()
                    && let Some(Err(failure)) = &record.outcome
                {
                    strings(failure, &mut texts);
                }
            }
            let mut found = Vec::new();
            for text in &texts {
                if text.contains(CANARY_SECRET) {
                    found.push("the canary secret".to_owned());
                }
                if text.contains(RESPONSE_MARKER) {
                    found.push("the provider's response body".to_owned());
                }
                if sent.iter().any(|body| text.contains(body.as_str())) {
                    found.push("the request body".to_owned());
                }
            }
            found.sort();
            found.dedup();
            evidence.assert("error_secrets_redacted", found.is_empty(), || {
                format!(
                    "`{id}` with the provider answering {status} and a body quoting the credential: its result or failure contains {}",
                    found.join(" and ")
                )
            });
            results.push(result);
        }
    }
}

/// A capability whose lost answers can be reconciled: it mutates, has a transaction contract
/// with `reconcile` and `execute` or `commit`, and a reconcile handler.
fn reconcilable(capability: &CapabilityDefinition) -> bool {
    capability.support().reconciliation
        && declares_mutation(capability)
        && capability
            .capability
            .contract
            .as_ref()
            .and_then(|c| c.transaction.as_ref())
            .is_some_and(|t| {
                t.supported_modes.contains(&TransactionMode::Reconcile)
                    && (t.supported_modes.contains(&TransactionMode::Execute)
                        || t.supported_modes.contains(&TransactionMode::Commit))
            })
}

/// `uncertain_outcome_reconciled` (see the module docs).
/// `no_provider`: why the connector has no provider, when the suite was told so and every
/// capability completed its example without a provider request: no answer can be lost, and
/// the assertion holds with a note.
async fn uncertain_outcome(
    h: &Harness,
    evidence: &mut Evidence,
    results: &mut Vec<ActionResult>,
    no_provider: Option<&str>,
) {
    if let Some(reason) = no_provider {
        // What a local connector declares reconcilable is reconciled: the suite loses the
        // answers itself.
        if let Some((capability, input)) = h.examples_where(reconcilable).into_iter().next() {
            super::transaction::local_lost_answers(
                h,
                evidence,
                "uncertain_outcome_reconciled",
                "uncertain_outcome_reconciled",
                capability,
                &input,
                reason,
            )
            .await;
            return;
        }
        evidence.note(format!(
            "uncertain_outcome_reconciled holds without a provider: the suite was told the connector has none ({reason}), and no capability of it declares `reconcile`, so no lost answer of it could be settled"
        ));
        evidence.assert("uncertain_outcome_reconciled", true, String::new);
        return;
    }
    let Some((capability, input)) = h.examples_where(reconcilable).into_iter().next() else {
        let mutating: Vec<String> = h
            .definition()
            .capabilities
            .iter()
            .filter(|c| declares_mutation(c))
            .map(|c| format!("`{}`", c.id()))
            .collect();
        // One that could be reconciled but has nothing to send is missing its example, not
        // its reconciliation: say so, or the message reads as a missing reconcile handler.
        let unexampled: Vec<String> = h
            .definition()
            .capabilities
            .iter()
            .filter(|c| reconcilable(c) && !c.facts.compensation_handler)
            .map(|c| format!("`{}`", c.id()))
            .collect();
        if !unexampled.is_empty() {
            evidence.assert("uncertain_outcome_reconciled", false, || {
                let declares = if unexampled.len() == 1 { "declares" } else { "declare" };
                format!(
                    "{} can be reconciled but {declares} no example input, so the suite has no write to lose the answer of: add one (`examples = [r#\"{{...}}\"#]` in `#[capability]`)",
                    unexampled.join(", ")
                )
            });
        } else if mutating.is_empty() {
            evidence.note(
                "uncertain_outcome_reconciled holds vacuously: every capability only reads (or is a network lookup whose mutating lint is waived), so no call can leave an unknown outcome",
            );
            evidence.assert("uncertain_outcome_reconciled", true, String::new);
        } else {
            evidence.assert("uncertain_outcome_reconciled", false, || {
                format!(
                    "no mutating capability with an example can be reconciled (a transaction contract with `reconcile` and `execute` or `commit`, and a reconcile handler), so a lost answer of {} could never be settled",
                    mutating.join(", ")
                )
            });
        }
        return;
    };
    let id = capability.id().as_str();
    let scouted = h
        .scout(h.action(
            capability,
            input.clone(),
            &format!("conformance-errors-uncertain-scout-{id}"),
        ))
        .await;
    let clean_effects = scouted.effects.len();
    let names_operations = super::names_its_operations(h, h.host(), &scouted).await;
    let Some(route) = scouted.route().map(str::to_owned) else {
        evidence.assert("uncertain_outcome_reconciled", false, || {
            format!("`{id}` made no provider request on its example, so no answer could be lost")
        });
        return;
    };
    let calls_before = h.probe().calls(id);
    let effects_before = h.provider().effect_total();
    let key = format!("conformance-errors-uncertain-{id}");
    let action = h.action(capability, input.clone(), &key);
    let lost = settle_losing(
        h,
        evidence,
        results,
        action.clone(),
        &route,
        Fault::drop_connection(),
    )
    .await;
    let Some(view) = transaction_of(h, &lost).await else {
        evidence.assert("uncertain_outcome_reconciled", false, || {
            format!(
                "`{id}` with its answer lost after the provider committed settled `{}` ({}) and left no transaction record",
                lost.result.status,
                shown_code(&lost.result)
            )
        });
        return;
    };
    let transaction_id = view.transaction_id.clone();
    evidence.artifact(format!("transaction:{transaction_id}"));
    let unknown = view.status == TransactionProtocolStatus::OutcomeUnknown;
    evidence.assert("uncertain_outcome_reconciled", unknown, || {
        format!(
            "`{id}` with its answer lost after the provider committed settled `{}` ({}, uncertain: {}), and its transaction `{transaction_id}` is `{}`, not `outcome_unknown`",
            lost.result.status,
            shown_code(&lost.result),
            show(
                lost.result
                    .error
                    .as_ref()
                    .and_then(|e| e.details.as_ref())
                    .and_then(|d| d.get("uncertain_outcome"))
            ),
            view.status
        )
    });
    if !unknown {
        return;
    }

    // Executing it again blindly (a new key, so idempotency does not answer first) is refused:
    // the same `execute`, or the planner's commit of the same plan, must be reconciled first.
    let expected = codes::TRANSACTION_RECONCILIATION_REQUIRED;
    let blind = match &lost.plan_id {
        None => {
            let mut again = action.clone();
            again.idempotency_key = Some(format!("{key}-again"));
            if let Some(transaction) = again.transaction.as_mut() {
                transaction.transaction_id = Some(transaction_id.clone());
            }
            again
        }
        Some(plan) => {
            let mut commit = ActionTransaction::new(TransactionMode::Commit);
            commit.plan_id = Some(plan.clone());
            Action::new(capability.id().as_str(), input.clone())
                .with_transaction(commit)
                .with_idempotency_key(format!("{key}-commit-again"))
        }
    };
    let refused = h.settle(h.host(), blind).await;
    results.push(refused.result.clone());
    evidence.artifact(format!("action:{}", refused.result.action_id));
    evidence.assert(
        "uncertain_outcome_reconciled",
        code(&refused.result) == expected,
        || {
            format!(
                "running `{id}`'s transaction `{transaction_id}` again after its unknown outcome answered `{}` ({}) instead of `{expected}`",
                refused.result.status,
                shown_code(&refused.result)
            )
        },
    );

    // Reconciliation settles it.
    let (reconciled, committed) = reconcile(
        h,
        evidence,
        results,
        capability,
        &input,
        &transaction_id,
        &key,
    )
    .await;
    let after = status_of(h, &transaction_id).await;
    let terminal = reconciled
        .result
        .output
        .as_ref()
        .and_then(|o| o.pointer("/reconciliation/terminal"))
        == Some(&Value::Bool(true));
    evidence.assert(
        "uncertain_outcome_reconciled",
        reconciled.result.status == ActionResultStatus::Completed
            && terminal
            && after == Some(TransactionProtocolStatus::Reconciled),
        || {
            format!(
                "reconciling `{id}`'s transaction `{transaction_id}` answered `{}` ({}; output {}), leaving it {} instead of `reconciled`",
                reconciled.result.status,
                shown_code(&reconciled.result),
                show(reconciled.result.output.as_ref()),
                super::maybe(after)
            )
        },
    );
    // And it settled it truthfully: the provider committed the change before the answer was
    // lost, so a reconciliation that says "not committed" never looked (an author trial's
    // companion answered so without asking, and passed this assertion).
    let landed = super::effects_answered_for(
        h,
        effects_before,
        view.provider_operation.as_ref(),
        names_operations,
    );
    if terminal {
        evidence.assert(
            "uncertain_outcome_reconciled",
            committed == Some(landed > 0),
            || {
                format!(
                    "reconciling `{id}`'s transaction `{transaction_id}` reported committed: {}, but the provider holds {landed} effect(s) of {}: the reconcile companion must look the operation up at the provider",
                    super::maybe(committed),
                    super::operation_answered_for(view.provider_operation.as_ref(), names_operations)
                )
            },
        );
    }

    // One call's effects at the provider, and one handler run, whatever was retried.
    let ran = h.probe().calls(id) - calls_before;
    let effects: Vec<String> = h
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
    evidence.assert(
        "uncertain_outcome_reconciled",
        // At most: the dropped connection may stop an example that writes more than once
        // after its first write.
        ran == 1
            && effects.len() <= clean_effects
            && (!effects.is_empty() || clean_effects == 0),
        || {
            format!(
                "through the lost answer, the refused retry and the reconciliation, `{id}`'s handler ran {ran} time(s) and the provider committed {} effect(s) where one call makes {clean_effects} (the lost answer may cut it short, but not to none): {}",
                effects.len(),
                effects.join(", ")
            )
        },
    );
    if terminal {
        lost_before_effect(h, evidence, results, capability, &input, &route).await;
    }
    // A reconciliation whose lookups fail learns nothing, and must leave the outcome unknown:
    // a companion that reads a failed lookup as "not committed" (`.ok().flatten()`) turns a
    // 503 into a second effect when the caller retries (found by an author trial: it passed).
    unanswered_reconciliation(h, evidence, results, capability, &input, &route).await;
}

/// The second half of `uncertain_outcome_reconciled`: the request is lost *before* the provider
/// takes it, so the outcome is as unknown to the connector as before, and a truthful
/// reconciliation finds nothing. Only a companion that asks the provider can tell the two
/// apart; one that answers "committed" without looking (an author trial's passed the first
/// half) tells a caller that a booking exists which the provider never made.
async fn lost_before_effect(
    h: &Harness,
    evidence: &mut Evidence,
    results: &mut Vec<ActionResult>,
    capability: &CapabilityDefinition,
    input: &Value,
    route: &str,
) {
    let id = capability.id().as_str();
    let key = format!("conformance-errors-unsent-{id}");
    let effects_before = h.provider().effect_total();
    let lost = settle_losing(
        h,
        evidence,
        results,
        h.action(capability, input.clone(), &key),
        route,
        Fault::drop_connection().without_effect(),
    )
    .await;
    let view = transaction_of(h, &lost).await;
    let Some(view) = view.filter(|v| v.status == TransactionProtocolStatus::OutcomeUnknown) else {
        // The connector knew the request never took effect (a certain failure): nothing is
        // left to reconcile, which is right.
        evidence.note(format!(
            "`{id}` with its request lost before the provider took it settled `{}` ({}) without an unknown outcome, so its reconciliation of nothing was not exercised",
            lost.result.status,
            shown_code(&lost.result)
        ));
        return;
    };
    let transaction_id = view.transaction_id.clone();
    evidence.artifact(format!("transaction:{transaction_id}"));
    let (reconciled, committed) = reconcile(
        h,
        evidence,
        results,
        capability,
        input,
        &transaction_id,
        &key,
    )
    .await;
    let landed = h.provider().effect_total() - effects_before;
    if landed == 0 {
        evidence.assert(
            "uncertain_outcome_reconciled",
            committed != Some(true),
            || {
                format!(
                    "`{id}`'s request was lost before the provider took it (the provider holds no effect of it), and reconciling its transaction `{transaction_id}` reported committed: true: the reconcile companion must look the operation up at the provider, not assume it landed; if it did look, the operation id it checkpointed is not unique per write, and it found an earlier call's effect filed under the same id (derive it from the idempotency key)",
                )
            },
        );
    }
    if reconciled.result.status != ActionResultStatus::Completed {
        evidence.note(format!(
            "reconciling `{id}`'s transaction `{transaction_id}`, whose request the provider never took, answered `{}` ({}): it stays unknown, where the provider's \"no such operation\" could settle it not committed",
            reconciled.result.status,
            shown_code(&reconciled.result)
        ));
    }
}

/// The transaction a settled call left: its plan's, else its action's.
async fn transaction_of(h: &Harness, settled: &Settled) -> Option<TransactionResult> {
    let selector = match &settled.plan_id {
        Some(plan) => TransactionSelector::Plan(plan.clone()),
        None => TransactionSelector::Action(settled.result.action_id.clone()),
    };
    h.host()
        .transaction(&selector, &h.caller())
        .await
        .ok()
        .flatten()
}

/// The status of transaction `transaction_id`, as the caller reads it.
async fn status_of(
    h: &Harness,
    transaction_id: &TransactionId,
) -> Option<TransactionProtocolStatus> {
    h.host()
        .transaction(
            &TransactionSelector::Transaction(transaction_id.clone()),
            &h.caller(),
        )
        .await
        .ok()
        .flatten()
        .map(|v| v.status)
}

/// Reconciles `transaction_id` of `capability` under the key `<key>-reconcile`, recording the
/// result; answers the settled call and what it said of the commit.
async fn reconcile(
    h: &Harness,
    evidence: &mut Evidence,
    results: &mut Vec<ActionResult>,
    capability: &CapabilityDefinition,
    input: &Value,
    transaction_id: &TransactionId,
    key: &str,
) -> (Settled, Option<bool>) {
    let mut block = ActionTransaction::new(TransactionMode::Reconcile);
    block.transaction_id = Some(transaction_id.clone());
    let action = Action::new(capability.id().as_str(), input.clone())
        .with_transaction(block)
        .with_idempotency_key(format!("{key}-reconcile"));
    let reconciled = h.settle(h.host(), action).await;
    results.push(reconciled.result.clone());
    evidence.artifact(format!("action:{}", reconciled.result.action_id));
    let committed = reconciled
        .result
        .output
        .as_ref()
        .and_then(|o| o.pointer("/reconciliation/committed"))
        .and_then(Value::as_bool);
    (reconciled, committed)
}

/// Settles `action` with `fault` queued on `route` (the answer lost, with the effect or
/// without), recording the result for the secret check and its action as an artifact.
async fn settle_losing(
    h: &Harness,
    evidence: &mut Evidence,
    results: &mut Vec<ActionResult>,
    action: Action,
    route: &str,
    fault: Fault,
) -> Settled {
    h.provider().inject(route, fault);
    let lost = h.settle(h.host(), action).await;
    h.provider().clear_faults();
    results.push(lost.result.clone());
    evidence.artifact(format!("action:{}", lost.result.action_id));
    lost
}

/// Requests the double fails during [`unanswered_reconciliation`]: more than any client retries.
const UNANSWERED_LOOKUPS: usize = 16;

/// The last part of `uncertain_outcome_reconciled`: a write's answer is lost again (on `route`,
/// after the provider committed it), and a reconciliation of that unknown outcome while every
/// provider request fails (`503`) must not settle it, neither way. (On a fresh outcome: the
/// reconciliations above keep their own diagnosis of a companion that never looks.)
async fn unanswered_reconciliation(
    h: &Harness,
    evidence: &mut Evidence,
    results: &mut Vec<ActionResult>,
    capability: &CapabilityDefinition,
    input: &Value,
    route: &str,
) {
    let id = capability.id().as_str();
    let key = format!("conformance-errors-unanswered-{id}");
    let lost = settle_losing(
        h,
        evidence,
        results,
        h.action(capability, input.clone(), &key),
        route,
        Fault::drop_connection(),
    )
    .await;
    // The first lost answer already checked that one is left `outcome_unknown`.
    let Some(view) = transaction_of(h, &lost)
        .await
        .filter(|v| v.status == TransactionProtocolStatus::OutcomeUnknown)
    else {
        return;
    };
    let transaction_id = &view.transaction_id;
    for _ in 0..UNANSWERED_LOOKUPS {
        h.provider().inject("*", Fault::status(503));
    }
    let (unanswered, committed) = reconcile(
        h,
        evidence,
        results,
        capability,
        input,
        transaction_id,
        &key,
    )
    .await;
    h.provider().clear_faults();
    let after = status_of(h, transaction_id).await;
    evidence.assert(
        "uncertain_outcome_reconciled",
        committed.is_none() && after == Some(TransactionProtocolStatus::OutcomeUnknown),
        || {
            format!(
                "while every provider request failed (HTTP 503), reconciling `{id}`'s transaction `{transaction_id}` answered `{}` ({}; output {}), leaving it {}: a failed lookup says nothing about the write, so the reconcile companion must return the error (`?`) or `ReconcileOutcome::Pending`, never `NotCommitted` (a caller would write again) or `Committed`",
                unanswered.result.status,
                shown_code(&unanswered.result),
                show(unanswered.result.output.as_ref()),
                super::maybe(after)
            )
        },
    );
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

fn show(value: Option<&Value>) -> String {
    value.map_or("nothing".to_owned(), Value::to_string)
}
