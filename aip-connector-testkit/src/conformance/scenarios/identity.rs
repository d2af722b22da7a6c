//! `identity_credentials`: the host binds the transport's actor (a forged payload identity
//! changes nothing the handler sees), tenants never share idempotency records, and the
//! credential handle never shows its secret.
//!
//! `transport_actor_bound` and `tenant_isolated` each test one capability: the candidates (those
//! with an example, the ones the suite waives last) are tried in order until a handler runs, and
//! until a call leaves a result under its key, respectively.
//!
//! `tenant_isolated` sends one key from two tenants. Under `key_scope = external_account` the
//! key belongs to the external account the deployment acts as, which every tenant served by that
//! deployment shares by declaration; a second tenant is then served by a deployment of its own,
//! acting as its own account ([`Harness::other_tenant_account`]) over the same store, and must
//! not get the first tenant's record either. It is exercised once the first tenant's call left a
//! result under the key (a permanent failure counts: it is replayed like any result). Under
//! `scope = action` the other tenant sends the same action (a new action id would be a new key),
//! so its call meets the record and the host's tenant guard; under a scope whose partition
//! differs between the tenants (`tenant`, `external_account`), the keys differ by construction,
//! and the passed detail says that the tenants were isolated by the key scope.
//!
//! `credential_handle_opaque` is asserted on handler calls that received the credential: every
//! capability with a credential policy (required or optional) is called (its first example), not only the one the other
//! assertions use, which may be a read that takes none. One whose handler never received it
//! fails the assertion as not exercised.

use aip_connector::CapabilityDefinition;
use aip_connector::model::{ActionResultStatus, IdempotencyKeyScope, IdentityContext, TenantRef};

use super::{code, outcome};
use crate::conformance::harness::{CALLER, CANARY_SECRET, OTHER_TENANT, TENANT};
use crate::conformance::{Evidence, Harness};

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    // The first capability with an example, preferring one the suite does not waive: a waiver
    // on it would make the assertions below notes while another capability could exercise them.
    let mut examples = h.examples();
    h.waived_last(&mut examples);
    if examples.is_empty() {
        evidence.no_example("no capability declares an example input: nothing can be invoked");
        return evidence;
    }
    // Every call's result, for the canary check at the end.
    let mut results = Vec::new();

    // transport_actor_bound: the payload claims another tenant and user. The candidates are
    // tried in order until one's handler runs (the host may refuse a call before it).
    let mut forged_subject = None;
    for (capability, input) in &examples {
        let mut forged = h.action(capability, input.clone(), "conformance-identity-forged");
        forged.identity = Some(Box::new(IdentityContext {
            tenant: Some(TenantRef {
                id: "forged-tenant".into(),
                system: None,
            }),
            human_actor: Some(Box::new(aip_connector::model::Principal::new(
                "user:forged",
                aip_connector::model::PrincipalKind::Human,
            ))),
            ..IdentityContext::default()
        }));
        let forged_id = forged.id.to_string();
        let settled = h.settle(h.host(), forged).await;
        let ran = h
            .probe()
            .records()
            .iter()
            .any(|r| r.capability_id == capability.id().as_str());
        if ran || forged_subject.is_none() {
            evidence.artifact(format!("action:{forged_id}"));
            forged_subject = Some((*capability, settled.result.clone()));
        }
        results.push(settled.result);
        if ran {
            break;
        }
    }
    let (capability, forged_result) = forged_subject.expect("a candidate was called");
    let records = h.probe().records();
    let seen: Vec<_> = records
        .iter()
        .filter(|r| r.capability_id == capability.id().as_str())
        .collect();
    if seen.is_empty() {
        // The host refused every call before its handler: no provider double was involved.
        evidence.unexercised_unwaivable(
            "transport_actor_bound",
            capability.id().as_str(),
            format!(
                "the handler of `{}` never ran, so no handler saw the forged identity: the call answered {}",
                capability.id(),
                outcome(&forged_result)
            ),
        );
    } else {
        evidence.assert(
            "transport_actor_bound",
            seen.iter()
                .all(|r| r.principal_id == CALLER && r.tenant_id.as_deref() == Some(TENANT)),
            || {
                format!(
                    "the handler of `{}` ran {} time(s) and saw {:?}; expected caller `{CALLER}` in tenant `{TENANT}` (result: `{}`)",
                    capability.id(),
                    seen.len(),
                    seen.iter()
                        .map(|r| (r.principal_id.clone(), r.tenant_id.clone()))
                        .collect::<Vec<_>>(),
                    forged_result.status
                )
            },
        );
    }

    // tenant_isolated: one key, two tenants; the second is never the first's replay. Sent as a
    // client would send it: streamed when the capability only streams; approved and resumed
    // when it waits for approval, so that a result is stored under the key for the other
    // tenant's call to find if keys leaked across tenants. The candidates are tried in order
    // until one leaves a result under its key; when none does, the first is the subject.
    let mut subject = None;
    for (index, (candidate, candidate_input)) in examples.iter().enumerate() {
        let key = match index {
            0 => "conformance-identity-shared-key".to_owned(),
            n => format!("conformance-identity-shared-key-{n}"),
        };
        let first_action = h.action(candidate, candidate_input.clone(), &key);
        let (mut first, _) = h.run_once(h.host(), first_action.clone()).await;
        if first.status == ActionResultStatus::PendingApproval
            && let Some(id) = first.approval_id()
        {
            h.approve(h.host(), &id).await;
            first = h.resume(h.host(), &id, &first_action).await;
        }
        // What the other tenant's call could be given if keys leaked across tenants.
        let stored = h.idempotency_record(&first_action).await.is_some();
        if stored || subject.is_none() {
            if let Some((_, _, _, _, replaced, _)) = subject.replace((
                *candidate,
                candidate_input.clone(),
                key,
                first_action,
                first,
                stored,
            )) {
                results.push(replaced);
            }
        } else {
            results.push(first);
        }
        if stored {
            break;
        }
    }
    let (capability, input, key, first_action, first, stored) =
        subject.expect("a candidate was called");
    let key = key.as_str();
    let contract = capability.capability.contract.as_ref();
    let scope = contract.map_or(IdempotencyKeyScope::Action, |c| c.idempotency.key_scope);
    let account_scoped = scope == IdempotencyKeyScope::ExternalAccount;
    // The harness's deployment holds a credential for its own tenant only: a capability with a
    // credential policy (required or optional: the host resolves the credential for either)
    // serves the other tenant from a deployment of that tenant (its credential bound to it)
    // over the same store, as a multi-tenant installation does, so that the call gets past its
    // credential check to the shared key.
    let other_deployment = if account_scoped {
        Some(h.host_deployed_for(OTHER_TENANT, &h.other_tenant_account()))
    } else if has_credential_policy(capability) {
        Some(h.host_deployed_for(OTHER_TENANT, h.external_account()))
    } else {
        None
    };
    // Under `scope = action` the key is partitioned by the action id: the other tenant sends the
    // same action, so that its call meets the stored record and the host's tenant guard is what
    // stands between them (a fresh action id would be another key, and the assertion true by
    // construction).
    let other_action = if scope == IdempotencyKeyScope::Action {
        first_action.clone()
    } else {
        h.action(capability, input.clone(), key)
    };
    let other_account = if account_scoped {
        h.other_tenant_account()
    } else {
        h.external_account().clone()
    };
    let other_key = aip_connector::host::scoped_idempotency_key(
        scope,
        key,
        &other_action,
        CALLER,
        Some(OTHER_TENANT),
        Some(&other_account),
    )
    .ok();
    let first_key = h.scoped_key(&first_action);
    let records_before = h.probe().records().len();
    let (other, _) = h
        .run_once_as(
            other_deployment.as_ref().unwrap_or(h.host()),
            other_action,
            h.caller_in(OTHER_TENANT),
        )
        .await;
    if stored && other_key != first_key {
        evidence.qualify(format!(
            "tenant_isolated by the key scope: `{}` declares {}, so tenant `{OTHER_TENANT}`'s key differs from tenant `{TENANT}`'s and the host's guard against another tenant's record under one key was not reached",
            capability.id(),
            scope_name(scope)
        ));
    }
    if account_scoped {
        let account = h.other_tenant_account();
        evidence.note(format!(
            "`{}` scopes keys to the external account, so tenant `{OTHER_TENANT}` was served by a deployment of its own acting as `{}:{}`",
            capability.id(),
            account.system,
            account.id
        ));
    }
    evidence.artifact(format!("action:{}", first.action_id));
    evidence.artifact(format!("action:{}", other.action_id));
    // The check could not look at the shared key without a stored first result (there is
    // nothing to leak), nor when the other tenant's call is refused before the key is looked up.
    if !stored {
        evidence.unexercised(
            "tenant_isolated",
            capability.id().as_str(),
            format!(
                "`{}` answered {} for tenant `{TENANT}` and left no result under the shared key, so tenant `{OTHER_TENANT}`'s call had nothing it could be given",
                capability.id(),
                outcome(&first)
            ),
        );
    }
    // The other tenant's deployment holds a credential bound to that tenant, with every scope:
    // a host refusal at its credential check (the handler never ran) is the suite's own setup
    // failing, not something the connector can change, so it is not charged to the connector.
    // The handler calls of the other tenant's call (under `scope = action` its action id is
    // the first tenant's, whose calls came before).
    let other_records: Vec<_> = h
        .probe()
        .records()
        .into_iter()
        .skip(records_before)
        .filter(|r| r.action_id == other.action_id.as_str())
        .collect();
    let other_ran = !other_records.is_empty();
    if code(&other).starts_with("credential.") && !code(&first).starts_with("credential.") {
        assert!(
            other_ran,
            "the conformance suite could not serve tenant `{OTHER_TENANT}` with a credential of its own (a bug in the suite; please report it): its call of `{}` answered {}",
            capability.id(),
            outcome(&other)
        );
    }
    let leaked = other.is_idempotent_replay();
    let foreign_record = other_records
        .iter()
        .any(|r| r.tenant_id.as_deref() != Some(OTHER_TENANT));
    evidence.assert("tenant_isolated", !leaked && !foreign_record, || {
        format!(
            "the same idempotency key from tenant `{OTHER_TENANT}` got tenant `{TENANT}`'s result (replay: {}, handler tenant mismatch: {foreign_record})",
            other.is_idempotent_replay()
        )
    });

    // credential_handle_opaque: every capability with a credential policy (required or
    // optional: the host hands the handle to both) is called, so that its handler gets the
    // handle (an author trial's first example was a read that takes none, and the assertion
    // held on nothing).
    results.extend([first, other]);
    let credentialed: Vec<&CapabilityDefinition> = h
        .definition()
        .capabilities
        .iter()
        .filter(|c| !c.facts.compensation_handler && has_credential_policy(c))
        .collect();
    for capability in &credentialed {
        let id = capability.id().as_str();
        let Some(input) = capability.examples.first() else {
            evidence.unexercised_unwaivable(
                "credential_handle_opaque",
                id,
                format!(
                    "`{id}` takes a credential but declares no example input, so the suite cannot call it: declare one (`#[capability(examples = [r#\"{{…}}\"#])]`)"
                ),
            );
            continue;
        };
        let action = h.action(
            capability,
            input.clone(),
            &format!("conformance-identity-credential-{id}"),
        );
        evidence.artifact(format!("action:{}", action.id));
        // Every capability with a credential policy is called here, even one whose handler
        // received the credential above: its own call's provider requests show whether it sends
        // the credential at all (an author trial's handler took `Credential`, sent nothing, and
        // passed the whole suite).
        // Only under a required policy: a handler under an optional one cannot take
        // `Credential` (`implementation.credentials_undeclared`), so it has nothing to send.
        let before = h.provider().request_count();
        let called = h.settle(h.host(), action).await;
        if requires_credential(capability) {
            let sent = h.provider().requests().split_off(before);
            credential_sent(&mut evidence, id, &sent);
        }
        if !received_credential(h, id) {
            // The deployment holds the credential: a handler that ran received it, so this one
            // never ran (the host refused its call), which is no provider double's doing.
            evidence.unexercised_unwaivable(
                "credential_handle_opaque",
                id,
                format!(
                    "`{id}` takes a credential, but its handler never received one: its call answered {}",
                    outcome(&called.result)
                ),
            );
        }
        results.push(called.result);
    }

    // No handle's Debug, result or error shows the secret.
    let mut exposed = Vec::new();
    for record in h.probe().records() {
        if record
            .credential_debug
            .as_deref()
            .is_some_and(|d| d.contains(CANARY_SECRET))
        {
            exposed.push(format!(
                "Debug of the credential seen by `{}`",
                record.capability_id
            ));
        }
        if let Some(outcome) = &record.outcome {
            let text = match outcome {
                Ok(value) | Err(value) => value.to_string(),
            };
            if text.contains(CANARY_SECRET) {
                exposed.push(format!("the outcome of `{}`", record.capability_id));
            }
        }
    }
    for result in &results {
        if serde_json::to_string(result)
            .unwrap_or_default()
            .contains(CANARY_SECRET)
        {
            exposed.push(format!("the result of action {}", result.action_id));
        }
    }
    let handles_seen = h
        .probe()
        .records()
        .iter()
        .filter(|r| r.credential_debug.is_some())
        .count();
    if handles_seen == 0 && credentialed.is_empty() {
        evidence.note(
            "no capability takes a credential and no handler call received one; results and errors were checked for the canary",
        );
    }
    evidence.assert("credential_handle_opaque", exposed.is_empty(), || {
        format!("the canary secret appeared in: {}", exposed.join(", "))
    });
    evidence
}

/// `credential_sent`: the provider requests of one call of capability `id`, whose contract
/// requires a credential and whose handler was handed the canary, carry it (in a header, as it
/// is or in HTTP Basic's base64, in the query or in the body). Requests with no credential
/// header and no credential-like query parameter fail the assertion; requests with one that
/// does not carry the canary (a signature computed with it, a presigned URL, a credential of the
/// connector's own) are noted, not failed. A call that made no request asserts nothing.
/// Requests are this call's by arrival: the scenario's calls run one after another.
fn credential_sent(
    evidence: &mut Evidence,
    id: &str,
    requests: &[crate::provider_double::RecordedRequest],
) {
    if requests.is_empty() {
        return;
    }
    if requests.iter().any(carries_canary) {
        evidence.assert("credential_sent", true, String::new);
        return;
    }
    let headers: std::collections::BTreeSet<String> =
        requests
            .iter()
            .flat_map(|request| {
                let query = request.query.as_deref().unwrap_or_default();
                request.headers.iter().map(|(name, _)| name.clone()).chain(
                    query.split('&').filter_map(|pair| {
                        let name = pair.split('=').next().unwrap_or_default();
                        (!name.is_empty()).then(|| format!("?{name}"))
                    }),
                )
            })
            .filter(|name| credential_like(name.trim_start_matches('?')))
            .collect();
    if headers.is_empty() {
        evidence.assert("credential_sent", false, || {
            format!(
                "`{id}` takes a credential, but none of the {} provider request(s) of its call carried it (no credential header, and not in the query or the body): send the handle's secret, e.g. `.bearer_auth(credential.secret())`",
                requests.len()
            )
        });
    } else {
        evidence.note(format!(
            "`{id}`'s provider requests carried {} but not the credential the host resolved for the call; fine if the connector signs with it, wrong if it sends a credential of its own",
            headers
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// Whether a header or query parameter name is one a credential or a signature travels in
/// (the double's credential headers, and Azure's `sig`), but not an idempotency key's header,
/// which every keyed write sends whatever its authentication.
fn credential_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "sig"
        || (crate::provider_double::is_credential_header(&lower) && !lower.contains("idempotency"))
}

/// Whether `request` carries [`CANARY_SECRET`]: in a header value (as it is, or inside the
/// base64 of HTTP Basic authentication), in the query or in the body.
fn carries_canary(request: &crate::provider_double::RecordedRequest) -> bool {
    use base64::Engine as _;
    let in_header = request.headers.iter().any(|(_, value)| {
        value.contains(CANARY_SECRET)
            || value
                .strip_prefix("Basic ")
                .and_then(|encoded| {
                    base64::engine::general_purpose::STANDARD
                        .decode(encoded.trim())
                        .ok()
                })
                .is_some_and(|decoded| String::from_utf8_lossy(&decoded).contains(CANARY_SECRET))
    });
    in_header
        || request
            .query
            .as_deref()
            .is_some_and(|query| query.contains(CANARY_SECRET))
        || String::from_utf8_lossy(&request.body).contains(CANARY_SECRET)
}

/// How a key scope is declared: `idempotency(scope = …)`.
fn scope_name(scope: IdempotencyKeyScope) -> String {
    let name = serde_json::to_value(scope)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{scope:?}"));
    format!("`scope = {name}`")
}

/// `capability`'s credential policy, required or optional: with one the host resolves the
/// deployment's credential for its calls (and refuses one bound to another tenant) and hands it
/// to the handler.
fn credential_policy(
    capability: &CapabilityDefinition,
) -> Option<&aip_connector::model::CredentialPolicy> {
    capability
        .capability
        .contract
        .as_ref()?
        .credentials
        .as_ref()
}

/// Whether `capability`'s contract has a credential policy, required or optional.
fn has_credential_policy(capability: &CapabilityDefinition) -> bool {
    credential_policy(capability).is_some()
}

/// Whether `capability`'s contract requires a credential: only then may its handler take
/// `Credential`.
fn requires_credential(capability: &CapabilityDefinition) -> bool {
    credential_policy(capability).is_some_and(|c| c.required)
}

/// Whether a handler call of capability `id` has received a credential in this scenario.
fn received_credential(h: &Harness, id: &str) -> bool {
    h.probe()
        .records()
        .iter()
        .any(|r| r.capability_id == id && r.credential_debug.is_some())
}
