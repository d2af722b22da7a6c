//! `audit_redaction`: every call leaves durable evidence that names it, sensitive inputs are
//! kept as hashes, and the canary secret appears nowhere the suite can look.
//!
//! Each capability's example runs once, keyed, while the host's log lines are captured (a
//! [`LogCapture`] attached to the call's future; a streamed call's pipeline task carries it).
//! A streaming-only connector's lines were not captured before an author trial found the check
//! passing without having seen one.
//!
//! - `receipts_emitted`: a transactional call's durable view holds a non-empty receipt chain
//!   that [`TransactionReceipt::chain_is_intact`] accepts. This host keeps receipts only for
//!   transactions; a call without a transaction contract leaves its idempotency record (and
//!   its approval record, when it waited for one), which is the audit evidence such a call has.
//! - `audit_correlated`: every receipt is on the chain of the call's transaction and the last
//!   names the action that owns it; the idempotency record names the action, capability,
//!   caller and tenant; an approval record names the action; a log line names the action id.
//! - `sensitive_fields_redacted`: for a capability whose data contract requires redaction, the
//!   idempotency record, the transaction view and the approval record (outputs aside: they are
//!   the connector's declared data) hold none of the example's string values (those of four
//!   characters or more, looked for inside the records' string values, not their keys; an
//!   input date is not quoted by the date part of a provider's timestamp, `2027-03-01` by
//!   `2027-03-01T00:15:00Z`; a value inside the caller, tenant or account ids the harness writes
//!   itself is skipped, with a note), a plan keeps its
//!   input as `{redacted: true, hash}`, an approval record keeps no input, the error for an
//!   invalid input carries `details.input_hash` and not the input, and no log line quotes an
//!   input value (a log line of the calls' captures, or one the suite's runtime wrote meanwhile
//!   outside them: a task a handler spawned). Without such a capability it holds vacuously, with a note. A stored value
//!   that quotes an input value is named by its JSON pointer (a `validate` companion's echo sits
//!   at `/plan/metadata/connector_validation/...` of the transaction view), with the fix when it
//!   is the validation's output.
//! - `raw_secret_absent`: the canary secret is in no result, error, stored record, probe record
//!   or captured log line.
//!
//! [`TransactionReceipt::chain_is_intact`]: aip_connector::model::TransactionReceipt::chain_is_intact

use aip_connector::CapabilityDefinition;
use aip_connector::aip_connector_core::issue::pointer_join;
use aip_connector::host::TransactionSelector;
use aip_connector::model::{DataSensitivity, TransactionReceipt};
use serde_json::{Value, json};

use super::shown_code;
use crate::conformance::harness::{CALLER, CANARY_SECRET, OTHER_TENANT, TENANT};
use crate::conformance::{Evidence, Harness};
use crate::logs::LogCapture;

/// An invalid input's marker: with redaction it must not be quoted by the error or a log line.
const INPUT_MARKER: &str = "aip-conformance-sensitive-input-5e0c";

pub(super) async fn run(h: &Harness) -> Evidence {
    let mut evidence = Evidence::default();
    let examples = h.examples();
    if examples.is_empty() {
        evidence.no_example("no capability declares an example input: nothing can be invoked");
        return evidence;
    }
    let log = LogCapture::new();
    // Where the suite's runtime logs outside `log`: a task a handler spawned writes there.
    let ambient_from = h.ambient_logs().map_or(0, |ambient| ambient.text().len());
    // Everything the secret must not appear in: (what, serialized text).
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut redacted_values: Vec<(String, String)> = Vec::new();
    let mut redacted_capabilities = 0;
    // What the harness itself writes into records and log lines (the caller, the tenants, the
    // account): an input value inside one of these cannot be told apart from it.
    let account = h.external_account();
    let vocabulary = [CALLER, TENANT, OTHER_TENANT, &account.system, &account.id];
    let mut indistinct: Vec<String> = Vec::new();

    for (capability, input) in &examples {
        let id = capability.id().as_str();
        let action = h.action(
            capability,
            input.clone(),
            &format!("conformance-audit-{id}"),
        );
        let settled = log.capture(h.settle(h.host(), action.clone())).await;
        let owner = settled.result.action_id.clone();
        evidence.artifact(format!("action:{}", action.id));
        seen.push((format!("the result of `{id}`"), to_text(&settled.result)));

        // The records the host keeps for the call.
        let record = h.idempotency_record(&action).await;
        if let Some(record) = &record {
            evidence.artifact(format!("idempotency:{}", record.key));
        }
        let transactional = capability
            .capability
            .contract
            .as_ref()
            .is_some_and(|c| c.transaction.is_some());
        let view = if transactional {
            h.host()
                .transaction(&TransactionSelector::Action(owner.clone()), &h.caller())
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        if let Some(view) = &view {
            evidence.artifact(format!("transaction:{}", view.transaction_id));
        }
        let approval = match &settled.approval_id {
            Some(approval_id) => {
                evidence.artifact(format!("approval:{approval_id}"));
                h.host().approval(approval_id).await.ok().flatten()
            }
            None => None,
        };

        // receipts_emitted
        if transactional {
            let receipts = view.as_ref().map(|v| v.receipts.as_slice()).unwrap_or(&[]);
            evidence.assert(
                "receipts_emitted",
                !receipts.is_empty() && TransactionReceipt::chain_is_intact(receipts),
                || match &view {
                    None => format!(
                        "`{id}` settled `{}` ({}) and its transaction has no durable view",
                        settled.result.status,
                        shown_code(&settled.result)
                    ),
                    Some(view) => format!(
                        "the transaction `{}` of `{id}` (`{}`) has {} receipt(s); chain intact: {}",
                        view.transaction_id,
                        view.status,
                        receipts.len(),
                        TransactionReceipt::chain_is_intact(receipts)
                    ),
                },
            );
        } else {
            evidence.assert(
                "receipts_emitted",
                record.is_some() || approval.is_some(),
                || {
                    format!(
                        "`{id}` has no transaction contract, and its keyed call settled `{}` ({}) without leaving an idempotency or approval record",
                        settled.result.status,
                        shown_code(&settled.result)
                    )
                },
            );
        }

        // audit_correlated
        if let Some(view) = &view {
            let chain = format!("transaction:{}", view.transaction_id);
            let on_chain = view
                .receipts
                .iter()
                .all(|r| r.transaction_id == view.transaction_id && r.chain == chain);
            let last_owner = view.receipts.last().map(|r| r.action_id.clone());
            evidence.assert(
                "audit_correlated",
                on_chain && last_owner.as_ref() == Some(&owner),
                || {
                    format!(
                        "the receipts of `{id}`'s transaction `{}` are on its chain: {on_chain}; the last names action {last_owner:?}, the call was {owner}",
                        view.transaction_id
                    )
                },
            );
        }
        if let Some(record) = &record {
            evidence.assert(
                "audit_correlated",
                record.action_id == action.id
                    && record.capability_id == *capability.id()
                    && record.principal_id.as_str() == CALLER
                    && record.tenant_id.as_deref() == Some(TENANT),
                || {
                    format!(
                        "the idempotency record `{}` names action {}, capability `{}`, principal `{}`, tenant {:?}; the call was action {} of `{id}` by `{CALLER}` in `{TENANT}`",
                        record.key,
                        record.action_id,
                        record.capability_id,
                        record.principal_id,
                        record.tenant_id,
                        action.id
                    )
                },
            );
        }
        if let Some(approval) = &approval {
            evidence.assert(
                "audit_correlated",
                approval.action.id == owner && approval.capability_id == *capability.id(),
                || {
                    format!(
                        "the approval record `{}` names action {} of `{}`; the action that waited was {owner} of `{id}`",
                        approval.approval_id,
                        approval.action.id,
                        approval.capability_id,
                    )
                },
            );
        }
        let logged = log.lines().iter().any(|l| l.contains(owner.as_str()));
        evidence.assert("audit_correlated", logged, || {
            format!("no captured log line names action {owner} of `{id}`")
        });

        // Stored records, for the secret and the redaction checks (outputs are the
        // connector's declared data, not the input, and are left out of the latter).
        let mut stored = Vec::new();
        if let Some(record) = &record {
            seen.push((format!("the idempotency record of `{id}`"), to_text(record)));
            let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
            drop_output(&mut value, "/result");
            stored.push(("its idempotency record".to_owned(), value));
        }
        if let Some(view) = &view {
            seen.push((format!("the transaction view of `{id}`"), to_text(view)));
            let mut value = serde_json::to_value(view).unwrap_or(Value::Null);
            drop_output(&mut value, "/result");
            stored.push(("its transaction view".to_owned(), value));
        }
        if let Some(approval) = &approval {
            seen.push((format!("the approval record of `{id}`"), to_text(approval)));
            stored.push((
                "its approval record".to_owned(),
                serde_json::to_value(approval).unwrap_or(Value::Null),
            ));
        }

        // sensitive_fields_redacted
        if !requires_redaction(capability) {
            continue;
        }
        redacted_capabilities += 1;
        let (values, common): (Vec<String>, Vec<String>) = sensitive_values(input)
            .into_iter()
            .partition(|v| !vocabulary.iter().any(|word| word.contains(v.as_str())));
        indistinct.extend(common.into_iter().map(|v| format!("`{v}` of {id}")));
        redacted_values.extend(values.iter().map(|v| (id.to_owned(), v.clone())));
        // The output is the connector's declared data and is stored as returned (an id echoed
        // from the input is normal), so it is not held against redaction; but an output that
        // quotes a value the contract redacts from the input keeps that value in every stored
        // record, which an author may not expect (an author trial's signers' e-mails): a note.
        let output = view
            .as_ref()
            .and_then(|v| v.result.as_ref())
            .and_then(|r| r.output.as_ref())
            .or_else(|| record.as_ref().and_then(|r| r.result.output.as_ref()));
        if let Some(output) = output {
            let echoed = quoted_in(output, &values);
            if !echoed.is_empty() {
                evidence.note(format!(
                    "`{id}` requires redaction, and its output quotes input values ({}, in the output): outputs are stored as the handler returns them (docs/transactions.md §2), so return only what callers need",
                    quoted_at(&echoed)
                ));
            }
        }
        for (what, value) in &stored {
            let quoted = quoted_in(value, &values);
            let in_validation = quoted
                .iter()
                .flat_map(|(_, at)| at)
                .any(|pointer| pointer.starts_with(VALIDATION_OUTPUT));
            evidence.assert("sensitive_fields_redacted", quoted.is_empty(), || {
                let fix = if in_validation {
                    format!(
                        ". `{VALIDATION_OUTPUT}` is the output of the capability's `validate` companion, which the plan stores as returned: do not echo input values in it (return a verdict, a price, a count)"
                    )
                } else {
                    String::new()
                };
                format!(
                    "`{id}` requires redaction, but {what} quotes its input values: {}{fix}",
                    quoted_at(&quoted)
                )
            });
        }
        if let Some(snapshot) = view
            .as_ref()
            .and_then(|v| v.plan.as_ref())
            .map(|p| serde_json::to_value(&p.input_snapshot).unwrap_or(Value::Null))
        {
            evidence.assert(
                "sensitive_fields_redacted",
                snapshot.get("redacted") == Some(&Value::Bool(true))
                    && snapshot.get("hash").is_some_and(Value::is_string)
                    && snapshot.get("value").is_none_or(Value::is_null),
                || {
                    format!(
                        "`{id}` requires redaction, but its plan's input snapshot is {snapshot}"
                    )
                },
            );
        }
        if let Some(approval) = &approval {
            evidence.assert(
                "sensitive_fields_redacted",
                !approval.input_retained && approval.action.input.is_null(),
                || {
                    format!(
                        "`{id}` requires redaction, but its approval record keeps the input (input_retained: {})",
                        approval.input_retained
                    )
                },
            );
        }
        let invalid = h.action(
            capability,
            json!([INPUT_MARKER]),
            &format!("conformance-audit-invalid-{id}"),
        );
        let refused = log.capture(h.host().invoke(invalid, &h.caller())).await;
        evidence.artifact(format!("action:{}", refused.action_id));
        seen.push((
            format!("the refusal of an invalid `{id}`"),
            to_text(&refused),
        ));
        let error = refused
            .error
            .as_ref()
            .and_then(|e| serde_json::to_value(e).ok())
            .unwrap_or(Value::Null);
        evidence.assert(
            "sensitive_fields_redacted",
            error.pointer("/details/input_hash").is_some_and(Value::is_string)
                && !error.to_string().contains(INPUT_MARKER),
            || {
                format!(
                    "`{id}` requires redaction; the error for an invalid input is {error}, which should carry details.input_hash and not quote the input"
                )
            },
        );
    }

    // A task a handler spawned may still be writing; give it a moment, then read what the
    // runtime logged outside the calls' captures since this scenario began.
    let mut lines = log.lines();
    if let Some(ambient) = h.ambient_logs() {
        tokio::time::sleep(SPAWNED_TASK_GRACE).await;
        let text = ambient.text();
        lines.extend(
            text.get(ambient_from..)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned),
        );
    }
    if !indistinct.is_empty() {
        evidence.note(format!(
            "sensitive_fields_redacted: not looked for, as they are part of what the harness itself writes (caller, tenants, account): {}",
            indistinct.join(", ")
        ));
    }
    if redacted_capabilities == 0 {
        evidence.note(
            "sensitive_fields_redacted holds vacuously: no capability's data contract requires redaction",
        );
        evidence.assert("sensitive_fields_redacted", true, String::new);
    } else {
        let quoted: Vec<String> = lines
            .iter()
            .filter_map(|line| {
                redacted_values
                    .iter()
                    .map(|(id, v)| (id.as_str(), v.as_str()))
                    .chain(std::iter::once(("an invalid input", INPUT_MARKER)))
                    .find(|(_, v)| quotes_in_log(line, v))
                    .map(|(id, v)| format!("`{v}` of {id}"))
            })
            .collect();
        evidence.assert("sensitive_fields_redacted", quoted.is_empty(), || {
            format!(
                "captured log lines quote redacted input values: {}",
                quoted.join(", ")
            )
        });
    }
    if lines.is_empty() {
        evidence.note("no log line was captured");
    }

    // raw_secret_absent
    for record in h.probe().records() {
        if let Some(debug) = &record.credential_debug {
            seen.push((
                format!("the credential a handler of `{}` saw", record.capability_id),
                debug.clone(),
            ));
        }
        if let Some(outcome) = &record.outcome {
            let (Ok(value) | Err(value)) = outcome;
            seen.push((
                format!(
                    "the outcome of `{}` for action {}",
                    record.capability_id, record.action_id
                ),
                value.to_string(),
            ));
        }
    }
    seen.extend(
        lines
            .iter()
            .map(|line| ("a captured log line".to_owned(), line.clone())),
    );
    let mut leaks: Vec<String> = seen
        .iter()
        .filter(|(_, text)| text.contains(CANARY_SECRET))
        .map(|(what, _)| what.clone())
        .collect();
    leaks.dedup();
    evidence.assert("raw_secret_absent", leaks.is_empty(), || {
        format!("the canary secret appeared in: {}", leaks.join(", "))
    });
    evidence
}

/// Whether the host redacts the capability's inputs (host docs §7.3).
fn requires_redaction(capability: &CapabilityDefinition) -> bool {
    capability.capability.contract.as_ref().is_some_and(|c| {
        c.data.redaction_required
            || matches!(
                c.data.sensitivity,
                DataSensitivity::Restricted | DataSensitivity::Regulated
            )
    })
}

/// The string values of an input long enough to recognise (four characters or more).
fn sensitive_values(input: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![input];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(text) if text.chars().count() >= 4 => out.push(text.clone()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    out
}

/// Every string value inside `value` (not its object keys), with its JSON pointer from `value`.
fn string_values<'v>(value: &'v Value, pointer: String, out: &mut Vec<(String, &'v str)>) {
    match value {
        Value::String(text) => out.push((pointer, text)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(n, item)| string_values(item, pointer_join(&pointer, n), out)),
        Value::Object(map) => map
            .iter()
            .for_each(|(key, item)| string_values(item, pointer_join(&pointer, key), out)),
        _ => {}
    }
}

/// Which of `values` a string value inside `value` quotes ([`quotes_in_stored`]), each with the
/// JSON pointers (from `value`) of the string values that quote it, so a failure says where to
/// look. String values only: an input value that reads like one of a record's own keys
/// (`status`, `output`) is not quoted by the key.
fn quoted_in<'v>(value: &Value, values: &'v [String]) -> Vec<(&'v String, Vec<String>)> {
    let mut texts = Vec::new();
    string_values(value, String::new(), &mut texts);
    values
        .iter()
        .filter_map(|v| {
            let at: Vec<String> = texts
                .iter()
                .filter(|(_, text)| quotes_in_stored(text, v))
                .map(|(pointer, _)| pointer.clone())
                .collect();
            (!at.is_empty()).then_some((v, at))
        })
        .collect()
}

/// `quoted` as a failure quotes it: each value and where it was found,
/// `"slot-1" at /plan/metadata/connector_validation/slot_id`.
fn quoted_at(quoted: &[(&String, Vec<String>)]) -> String {
    quoted
        .iter()
        .map(|(value, at)| format!("{value:?} at {}", at.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where a plan keeps the output of the capability's validation handler (the `validate`
/// companion's preview), which the transaction view shows as stored.
const VALIDATION_OUTPUT: &str = "/plan/metadata/connector_validation";

/// Removes the `output` of the result at `pointer` (the connector's data, not the input).
fn drop_output(value: &mut Value, pointer: &str) {
    if let Some(result) = value.pointer_mut(pointer).and_then(Value::as_object_mut) {
        result.remove("output");
    }
}

fn to_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Whether a stored string quotes `value`: anywhere in it (an operation id built as
/// `ssn_<value>` keeps the value), except as the date part of a timestamp. A booking trial's
/// check-in date `2027-03-01` was "quoted" by the provider's own expiry `2027-03-01T00:15:00Z`,
/// which is the provider's data; matching whole words instead hid values glued to a prefix
/// (a review's `ssn_123456789`, `+15551234567`).
fn quotes_in_stored(text: &str, value: &str) -> bool {
    let is_date = value.len() == 10
        && value.bytes().enumerate().all(|(at, byte)| match at {
            4 | 7 => byte == b'-',
            _ => byte.is_ascii_digit(),
        });
    text.match_indices(value).any(|(at, _)| {
        let mut after = text[at + value.len()..].bytes();
        let timestamp =
            after.next() == Some(b'T') && after.next().is_some_and(|b| b.is_ascii_digit());
        !(is_date && timestamp)
    })
}

/// How long the check waits for tasks a handler spawned to write their log lines.
const SPAWNED_TASK_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether a log line quotes an input `value`. A value with a digit and at least eight
/// characters (an SSN, an IBAN, a phone number, an account number) counts anywhere, as in a
/// stored string: glued to a prefix (`adj_987-65-4321`, `ibanDE89…`) it is still the whole
/// value (an HR author trial's leak passed the word rule). Any other value counts only as a
/// word of its own ([`quotes_as_a_word`]), since other crates' lines are full of common words.
fn quotes_in_log(line: &str, value: &str) -> bool {
    let line = without_timestamp(line);
    let distinctive = value.chars().count() >= 8 && value.bytes().any(|b| b.is_ascii_digit());
    if distinctive {
        quotes_in_stored(line, value)
    } else {
        quotes_as_a_word(line, value)
    }
}

/// `line` without the time the subscriber wrote at its start (`2026-03-14T09:30:00.123456Z`):
/// an input time of day (`09:30`) would otherwise be found in every line of that minute (a
/// review).
fn without_timestamp(line: &str) -> &str {
    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
    let stamp = first.len() >= 10
        && first.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && first.as_bytes()[4] == b'-'
        && first.contains('T');
    if stamp { rest } else { line }
}

/// Whether `line` (a log line) quotes `value` as a word of its own: an occurrence whose neighbours, where the
/// value's own edge is a letter or digit, are not letters, digits or `_`. Log lines come from
/// every crate at every level (hyper's TRACE "spawning background dispatcher task"), so a
/// plain substring match failed a connector whose input held `ground`. A value leaked into a
/// log is written as a field or quoted, so it keeps its boundaries.
fn quotes_as_a_word(line: &str, value: &str) -> bool {
    if value.is_empty() {
        return false;
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let starts_word = value.chars().next().is_some_and(is_word);
    let ends_word = value.chars().next_back().is_some_and(is_word);
    line.match_indices(value).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + value.len()..].chars().next();
        let joined_before = starts_word && before.is_some_and(is_word);
        let joined_after = ends_word && after.is_some_and(is_word);
        !(joined_before || joined_after)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{quoted_in, quotes_as_a_word, quotes_in_log};

    #[test]
    fn a_distinctive_value_is_found_in_a_log_line_even_glued_to_a_prefix() {
        assert!(quotes_in_log(
            "preparing adj_987-65-4321 now",
            "987-65-4321"
        ));
        assert!(quotes_in_log(
            "for ibanDE89370400440532013000",
            "DE89370400440532013000"
        ));
        // A date in a provider's timestamp is the provider's, as in stored strings.
        assert!(!quotes_in_log("expires 2027-03-01T00:15:00Z", "2027-03-01"));
        // Short or letter-only values keep the word rule: other crates log common words.
        assert!(!quotes_in_log("background dispatcher", "ground"));
        assert!(!quotes_in_log("retry_1234567", "1234567"));
        assert!(quotes_in_log("id 1234567 sent", "1234567"));
        // The line's own time is the subscriber's, not a quote of an input time.
        assert!(!quotes_in_log(
            "2026-03-14T09:30:00.123456Z  INFO aip.invoke: action settled",
            "2026-03-14T09:30"
        ));
        assert!(quotes_in_log(
            "2026-03-14T09:31:00.000001Z  INFO booking slot=2026-03-14T09:30",
            "2026-03-14T09:30"
        ));
    }

    #[test]
    fn a_stored_value_quotes_an_input_value_anywhere_but_in_a_timestamps_date() {
        let values = [
            "2027-03-01".to_owned(),
            "Ada Lovelace".to_owned(),
            "123456789".to_owned(),
        ];
        let provider_data = json!({"expires_at": "2027-03-01T00:15:00Z", "room": "A-12"});
        assert!(quoted_in(&provider_data, &values).is_empty());
        // Glued to a prefix, a value is still there (an operation id built from it).
        let glued = json!({"provider_operation": {"operation_id": "ssn_123456789"}});
        assert_eq!(quoted_in(&glued, &values).len(), 1);
        let echo = json!({"plan": {"note": "booked for Ada Lovelace, 2027-03-01"}});
        let quoted = quoted_in(&echo, &values);
        assert_eq!(quoted.len(), 2, "{quoted:?}");
        assert!(
            quoted
                .iter()
                .all(|(_, at)| at == &["/plan/note".to_owned()])
        );
    }

    #[test]
    fn a_quote_is_located_by_an_escaped_json_pointer() {
        let values = ["Ada Lovelace".to_owned()];
        let stored = json!({"notes/a~b": [{"by": "Ada Lovelace"}]});
        let quoted = quoted_in(&stored, &values);
        assert_eq!(quoted.len(), 1, "{quoted:?}");
        assert_eq!(quoted[0].1, ["/notes~1a~0b/0/by".to_owned()]);
    }

    #[test]
    fn a_value_is_quoted_only_as_a_word_of_its_own() {
        assert!(!quotes_as_a_word(
            "http1 handshake complete, spawning background dispatcher task",
            "ground"
        ));
        assert!(quotes_as_a_word("service=ground", "ground"));
        assert!(quotes_as_a_word(r#"input: {"service":"ground"}"#, "ground"));
        assert!(quotes_as_a_word("ground", "ground"));
        assert!(!quotes_as_a_word("grounded", "ground"));
        assert!(!quotes_as_a_word("ground_floor", "ground"));
        // Found at its second occurrence.
        assert!(quotes_as_a_word("background, then ground.", "ground"));
        // A value with its own punctuation at an edge matches next to anything there.
        assert!(quotes_as_a_word("id=x-4111-", "-4111-"));
        assert!(quotes_as_a_word("Zoë Ünal signed", "Zoë Ünal"));
        assert!(!quotes_as_a_word("anything", ""));
    }
}
