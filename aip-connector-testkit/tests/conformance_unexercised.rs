//! A check passes on what it exercised, never on what it could not reach. An author trial's
//! ledger connector decoded its provider's answers strictly, so against the double's generic
//! answers every call of its one write (a financial transfer: keyed, approved, credentialed)
//! failed `provider.invalid_response`; `idempotency_duplicates`, `retry_exhaustion` and
//! `approval_lifecycle` still passed, "with notes", and `identity_credentials` asserted
//! `credential_handle_opaque` on a read that takes no credential.
//!
//! The fixture here is a ledger of that shape: a read first (no credential), then the write.
//! Against the generic answers the checks whose subject never completed fail, naming the
//! capability, the error and the `with_provider_setup` hint; answered in the API's shape, the
//! whole report passes; and a write that leaks its credential is caught by
//! `identity_credentials`, which now calls it.

mod common;

use aip_connector::model::ProviderOperationRef;
use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{
    CheckResult, CheckStatus, ConformanceReport, ConformanceSuite, LOCAL_AS_DECLARED, Scenario,
    UNEXERCISED_WAIVERS,
};
use aip_connector_testkit::provider_double::{OPERATION_ID_HEADER, ProviderHandle};
use serde_json::json;

const WRITE: &str = "cap:ledger:post_transfer";

/// How the line telling the author what to do about an unexercised assertion begins.
const UNEXERCISED_HINT: &str = "hint: an assertion is exercised on calls that complete";

#[derive(Deserialize, JsonSchema)]
struct AccountRef {
    /// The ledger account.
    account_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Balance {
    /// The amount in cents.
    amount_minor: i64,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct TransferRequest {
    /// The account debited.
    from_account: String,
    /// The account credited.
    to_account: String,
    /// The amount in cents.
    amount_minor: u64,
}

#[derive(Serialize, JsonSchema)]
struct Transfer {
    /// The ledger's id of the transfer.
    transfer_id: String,
    /// A reference for the statement.
    reference: String,
}

/// The API's answer to `GET /accounts/{id}`, decoded strictly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiBalance {
    account_id: String,
    amount_minor: i64,
}

/// The API's answer to `POST /transfers`, decoded strictly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiTransfer {
    transfer_id: String,
    status: String,
}

/// The API's answer to `GET /transfers/{operation}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiLookup {
    posted: bool,
    /// `pending` while the API has not decided yet.
    #[serde(default)]
    state: Option<String>,
}

/// What a [`Ledger`]'s write does besides posting the transfer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Posts it, and answers what the API answered.
    Posts,
    /// Puts the credential's secret into the transfer's reference.
    LeaksCredential,
    /// Refuses every transfer before asking the API (as if its account were closed).
    RefusesFirst,
    /// Posts it without forwarding the idempotency key to the API.
    ForgetsKey,
    /// Posts it, and its reconciliation reads a failed lookup as "not posted".
    GuessesWhenUnanswered,
    /// Posts it, and its reconciliation reads a pending lookup as "not posted".
    PendingIsNotPosted,
}

struct Ledger {
    api: ProviderClient,
    write: Write,
}

#[connector(id = "ledger")]
impl Ledger {
    /// Read an account's balance.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = confidential),
        examples = [r#"{"account_id": "acc_1"}"#],
    )]
    async fn balance(&self, input: AccountRef) -> Result<Balance, ConnectorFailure> {
        let answer: ApiBalance = self
            .api
            .get(&format!("/accounts/{}", input.account_id))
            .send_json()
            .await?;
        debug_assert_eq!(answer.account_id, input.account_id);
        Ok(Balance {
            amount_minor: answer.amount_minor,
        })
    }

    /// Move money between two accounts.
    #[capability(
        risk = high,
        side_effects = [financial, write, external_network],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        credentials(scopes = ["ledger.write"]),
        approval(reason = "moves money", evidence = [reason]),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::find_transfer,
        examples = [r#"{"from_account": "acc_1", "to_account": "acc_2", "amount_minor": 1250}"#],
    )]
    async fn post_transfer(
        &self,
        input: TransferRequest,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        credential: Credential,
        _approval: Approval,
    ) -> Result<Transfer, ConnectorFailure> {
        if self.write == Write::RefusesFirst {
            return Err(ConnectorFailure::permanent(
                "ledger.account_closed",
                "the debited account is closed",
                "ledger",
            ));
        }
        let operation = ProviderOperationRef {
            provider: "ledger".into(),
            operation_id: key.for_provider().to_owned(),
            request_id: None,
        };
        checkpoint.record(operation.clone(), None).await?;
        let mut request = self.api.post("/transfers");
        if self.write != Write::ForgetsKey {
            request = request.idempotency(&key);
        }
        let posted: ApiTransfer = request
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .bearer_auth(credential.secret())
            .provider_operation(operation)
            .json(&input)
            .send_json()
            .await?;
        let reference = if self.write == Write::LeaksCredential {
            format!(
                "{} via {}",
                posted.status,
                credential.secret().expose_str().unwrap_or_default()
            )
        } else {
            posted.status
        };
        Ok(Transfer {
            transfer_id: posted.transfer_id,
            reference,
        })
    }

    async fn find_transfer(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        let path = format!("/transfers/{}", request.provider_operation.operation_id);
        let lookup: ApiLookup = match self.api.get(&path).send_json().await {
            Ok(lookup) => lookup,
            Err(_) if self.write == Write::GuessesWhenUnanswered => ApiLookup {
                posted: false,
                state: None,
            },
            Err(failure) => return Err(failure),
        };
        if lookup.state.as_deref() == Some("pending") && self.write != Write::PendingIsNotPosted {
            return Ok(ReconcileOutcome::Pending { cursor: None });
        }
        Ok(if lookup.posted {
            ReconcileOutcome::Committed { evidence: None }
        } else {
            ReconcileOutcome::NotCommitted { evidence: None }
        })
    }
}

fn ledger(write: Write) -> ConformanceSuite {
    ConformanceSuite::new(move |env| Ledger {
        api: common::double_client(env.provider_url()),
        write,
    })
}

/// Answers like the ledger's API: the balance, the posted transfer, and whether a transfer
/// was posted (by the operation id the write sends).
fn answer_like_the_ledger(provider: &ProviderHandle) {
    provider.answer("/accounts/*", |request| {
        let account = request.path().trim_start_matches("/accounts/");
        json!({ "account_id": account, "amount_minor": 125_000 })
    });
    provider.answer(
        "/transfers",
        |request| json!({ "transfer_id": request.operation_id(), "status": "posted" }),
    );
    provider.answer("/transfers/*", |request| {
        let operation = request.path().trim_start_matches("/transfers/");
        json!({ "posted": request.effects().iter().any(|e| e.operation_id == operation) })
    });
}

fn check(report: &ConformanceReport, scenario: Scenario) -> &CheckResult {
    report
        .check(&scenario.check_name())
        .unwrap_or_else(|| panic!("{scenario} is in the report"))
}

fn failing(check: &CheckResult) -> Vec<&str> {
    check
        .assertions
        .iter()
        .filter(|(_, held)| !**held)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// The line of `check`'s detail that says `assertion` was not exercised.
#[track_caller]
fn unexercised_line<'c>(check: &'c CheckResult, assertion: &str) -> &'c str {
    check
        .detail
        .lines()
        .find(|line| line.starts_with(&format!("{assertion}: not exercised")))
        .unwrap_or_else(|| {
            panic!(
                "{}: no unexercised {assertion}: {}",
                check.name, check.detail
            )
        })
}

#[test]
fn a_write_that_never_completes_fails_the_checks_it_could_not_exercise() {
    let report = ledger(Write::Posts).run();
    eprintln!("{}", report.summary());
    for (scenario, assertion) in [
        (Scenario::IdempotencyDuplicates, "duplicate_suppressed"),
        (Scenario::RetryExhaustion, "backoff_observed"),
        (Scenario::ApprovalLifecycle, "resume_once"),
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Failed, "{report}");
        assert!(
            failing(check).contains(&assertion),
            "{}: {:?}: {}",
            check.name,
            failing(check),
            check.detail
        );
        // Which capability, which error and message, and what to do about it.
        let line = unexercised_line(check, assertion);
        assert!(
            line.contains(&format!("`{WRITE}`"))
                && line.contains(
                    "`failed` (`provider.invalid_response`: POST /transfers: the HTTP 201 response"
                )
                && line.contains("with_provider_setup"),
            "{}: {line}",
            check.name
        );
        assert!(
            report.summary().contains(&format!(
                "  FAIL {}: {assertion}: not exercised",
                check.name
            )),
            "{}",
            report.summary()
        );
        // One line says what to do about anything not exercised.
        assert_eq!(
            check
                .detail
                .lines()
                .filter(|line| line.starts_with(UNEXERCISED_HINT))
                .count(),
            1,
            "{}",
            check.detail
        );
    }
    // What a failed call still exercises holds: the write's handler received the credential
    // (and kept it to itself) although its call failed.
    let identity = check(&report, Scenario::IdentityCredentials);
    assert_eq!(
        identity.assertions.get("credential_handle_opaque"),
        Some(&true),
        "{}",
        identity.detail
    );
    assert!(
        !identity.detail.contains("not exercised"),
        "{}",
        identity.detail
    );
}

/// A connector whose write cannot complete against a double at all waives its unexercised
/// assertions with a reason: they become notes quoting it, and what did not hold still fails.
#[test]
fn a_waiver_turns_what_could_not_be_exercised_into_notes_and_nothing_else() {
    let reason = "posts through the bank's SFTP drop; covered by tests/settlement.rs";
    let report = ledger(Write::Posts)
        .with_unexercised_waiver(WRITE, reason)
        .run();
    eprintln!("{}", report.summary());
    for (scenario, assertion) in [
        (Scenario::IdempotencyDuplicates, "duplicate_suppressed"),
        (Scenario::RetryExhaustion, "backoff_observed"),
        (Scenario::ApprovalLifecycle, "resume_once"),
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Passed, "{report}");
        // Held and waived are told apart, in words and in the report's data.
        assert_eq!(check.waived, [assertion], "{}", check.detail);
        assert!(
            check.detail.starts_with(&format!(
                "{} assertions held, 1 waived",
                check.assertions.len() - 1
            )),
            "{}",
            check.detail
        );
        let note =
            format!("{assertion} was not exercised on `{WRITE}`, waived by the suite ({reason}): ");
        assert!(
            check.notes.iter().any(|n| n.starts_with(&note)),
            "{}: {:?}",
            check.name,
            check.notes
        );
        assert!(
            report
                .summary()
                .contains(&format!("  pass {}: passed, noting: ", check.name)),
            "{}",
            report.summary()
        );
    }
    // The waiver named a capability of the manifest and was used.
    let waivers = report.check(UNEXERCISED_WAIVERS).expect("a waiver check");
    assert_eq!(
        (waivers.status, waivers.notes.len()),
        (CheckStatus::Passed, 0),
        "{}",
        waivers.detail
    );
    // A reconciliation that cannot read the provider's answer is still a failure.
    assert_eq!(
        check(&report, Scenario::ErrorsUncertainOutcomes).status,
        CheckStatus::Failed,
        "{report}"
    );
    // A waiver names a capability: the read's unexercised output is not covered by it.
    let schema = check(&report, Scenario::SchemaEnforcement);
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
    assert!(
        schema
            .detail
            .contains("declared_output_produced: not exercised: `cap:ledger:balance`"),
        "{}",
        schema.detail
    );
}

#[test]
fn answered_in_the_api_shape_the_ledger_passes_and_its_credential_is_checked_on_the_write() {
    let report = ledger(Write::Posts)
        .with_provider_setup(answer_like_the_ledger)
        .run();
    eprintln!("{}", report.summary());
    assert!(report.passed(), "{report}");
    let identity = check(&report, Scenario::IdentityCredentials);
    assert_eq!(
        identity.assertions.get("credential_handle_opaque"),
        Some(&true)
    );
    // The write, which takes the credential, was called by the credential loop: besides the
    // forged call and the two tenants' calls of the read (the first example), the check rests
    // on a fourth action, the write's. Without the loop there are three.
    let actions: Vec<&String> = identity
        .artifacts
        .iter()
        .filter(|a| a.starts_with("action:"))
        .collect();
    assert_eq!(
        actions.len(),
        4,
        "forged, first tenant's, other tenant's and the write's call: {:?}",
        identity.artifacts
    );
    // And its handler, not only the read's, is what the assertion looked at: a leak there is
    // caught (`a_credential_leaked_by_a_write_that_is_not_the_first_example_is_caught_by_identity`).
    assert!(
        !identity
            .notes
            .iter()
            .any(|n| n.contains("no handler call received one")),
        "{:?}",
        identity.notes
    );
}

#[test]
fn a_credential_leaked_by_a_write_that_is_not_the_first_example_is_caught_by_identity() {
    let report = ledger(Write::LeaksCredential)
        .with_provider_setup(answer_like_the_ledger)
        .run();
    eprintln!("{}", report.summary());
    let identity = check(&report, Scenario::IdentityCredentials);
    assert_eq!(identity.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        failing(identity),
        ["credential_handle_opaque"],
        "{}",
        identity.detail
    );
    assert!(
        identity
            .detail
            .contains(&format!("the outcome of `{WRITE}`")),
        "{}",
        identity.detail
    );
    // The report names where the secret was, never the secret.
    assert!(
        !report
            .to_json_pretty()
            .contains(aip_connector_testkit::conformance::CANARY_SECRET)
    );
}

/// A write that fails before it asks the provider gives the retry and errors scenarios no
/// provider failure to provoke: each says so for that capability, rather than noting it (a
/// connector with another capability that reaches the provider passed with the note).
#[test]
fn a_write_that_fails_before_asking_its_provider_is_not_exercised_by_retry_and_errors() {
    let report = ledger(Write::RefusesFirst)
        .with_provider_setup(answer_like_the_ledger)
        .run();
    eprintln!("{}", report.summary());
    let expected = [
        (
            Scenario::RetryExhaustion,
            "retryable_error_preserved, backoff_observed, exhaustion_dead_lettered: not exercised: ",
        ),
        (
            Scenario::ErrorsUncertainOutcomes,
            "protocol_fields_preserved, error_secrets_redacted: not exercised: ",
        ),
    ];
    for (scenario, line_start) in expected {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Failed, "{report}");
        assert!(
            check
                .detail
                .contains("with_unexercised_waiver(capability, reason)"),
            "{}",
            check.detail
        );
        let line = check
            .detail
            .lines()
            .find(|line| line.starts_with(line_start))
            .unwrap_or_else(|| panic!("{}: {}", check.name, check.detail));
        assert!(
            line.contains(&format!(
                "`{WRITE}` answered `failed` (`ledger.account_closed`: the debited account is closed) on its example before making any provider request"
            )),
            "{line}"
        );
        // The refused call is what the line rests on.
        assert!(
            !check.detail.contains("names no artifact"),
            "{}",
            check.detail
        );
    }
    // The read reached the provider, so the errors scenario still provoked its failures.
    let errors = check(&report, Scenario::ErrorsUncertainOutcomes);
    assert!(
        errors.artifacts.iter().any(|a| a.starts_with("req_")),
        "{:?}",
        errors.artifacts
    );
}

/// R6: a waiver never hides an assertion that ran and failed. The write does not forward its
/// key and cannot decode the double's answers: with the write waived, what could not be
/// exercised is a note, and the redelivery that committed a second effect still fails.
#[test]
fn a_waiver_never_hides_an_assertion_that_ran_and_failed() {
    let report = ledger(Write::ForgetsKey)
        .with_unexercised_waiver(WRITE, "SFTP")
        .run();
    eprintln!("{}", report.summary());
    let idempotency = check(&report, Scenario::IdempotencyDuplicates);
    assert_eq!(idempotency.status, CheckStatus::Failed, "{report}");
    let failing = failing(idempotency);
    assert!(
        failing.contains(&"duplicate_suppressed") && failing.contains(&"delivery_id_stable"),
        "{failing:?}: {}",
        idempotency.detail
    );
    // The decoding hint explains a failure, never a waived note.
    assert!(
        !idempotency
            .detail
            .lines()
            .any(|line| line.starts_with("note: ") && line.contains("(hint: ")),
        "{}",
        idempotency.detail
    );
    // The failure is what ran, not what could not: no "not exercised" failure line.
    assert!(
        !idempotency
            .detail
            .lines()
            .any(|line| line.starts_with("duplicate_suppressed: not exercised")),
        "{}",
        idempotency.detail
    );
}

#[derive(Deserialize, JsonSchema)]
struct Name {
    /// A name.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Greeting {
    /// The greeting.
    text: String,
}

/// A read with an example, and a credentialed capability without one that puts the secret into
/// its output (R3).
struct Pair;

#[connector(id = "pair")]
impl Pair {
    /// Greets.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn hello(&self, input: Name) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting {
            text: format!("hello {}", input.name),
        })
    }

    /// Greets with the deployment's secret.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(scopes = ["pair.read"]),
    )]
    async fn secret(
        &self,
        input: Name,
        credential: Credential,
    ) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting {
            text: format!(
                "{} {}",
                input.name,
                credential.secret().expose_str().unwrap_or_default()
            ),
        })
    }
}

/// R3 and R2: a waiver does not cover a capability that has no example (it was never called,
/// and the author can fix that), a waiver naming no capability of the manifest fails the run,
/// naming the closest ids, and a waiver that waived nothing is noted.
#[test]
fn waivers_cover_only_calls_the_double_kept_from_completing_and_must_name_capabilities() {
    let report = ConformanceSuite::new(|_env| Pair)
        .with_unexercised_waiver("cap:pair:secret", "SFTP")
        .with_unexercised_waiver("cap:pair:secrte", "typo")
        .run();
    let summary = report.summary();
    eprintln!("{summary}");
    let identity = check(&report, Scenario::IdentityCredentials);
    assert_eq!(identity.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        identity.assertions.get("credential_handle_opaque"),
        Some(&false)
    );
    let line = unexercised_line(identity, "credential_handle_opaque");
    assert!(
        line.contains("`cap:pair:secret` takes a credential but declares no example input")
            && line.contains("the waiver of `cap:pair:secret` does not cover this"),
        "{line}"
    );
    assert!(
        !identity.notes.iter().any(|n| n.contains("waived")),
        "{:?}",
        identity.notes
    );

    let waivers = report
        .check(UNEXERCISED_WAIVERS)
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(waivers.status, CheckStatus::Failed, "{report}");
    assert!(
        waivers.detail.contains(
            "the waiver of `cap:pair:secrte` (typo) names no capability of the manifest; the closest ids: `cap:pair:secret`, `cap:pair:hello`"
        ),
        "{}",
        waivers.detail
    );
    assert!(
        summary.contains(&format!(
            "  FAIL {UNEXERCISED_WAIVERS}: the waiver of `cap:pair:secrte`"
        )),
        "{summary}"
    );
    assert!(
        waivers
            .notes
            .iter()
            .any(|n| n
                .starts_with("the waiver of `cap:pair:secret` (SFTP) waived nothing in this run")),
        "{:?}",
        waivers.notes
    );
    assert!(!report.passed());
    assert!(report.to_json_pretty().contains("secrte"));
}

/// A suite without waivers has no waiver check; one whose waiver was used passes it.
#[test]
fn the_waiver_check_is_there_only_with_waivers() {
    let report = ConformanceSuite::new(|_env| Pair).run();
    assert!(report.check(UNEXERCISED_WAIVERS).is_none(), "{report}");
}

/// The API's answer to `POST /strict`, decoded strictly: the double's generic answer is not it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiStrict {
    #[allow(dead_code)]
    id: String,
}

/// R7: two keyed writes; `strict`, declared first, cannot decode the double's answers, and
/// `lenient` completes.
struct TwoWrites {
    api: ProviderClient,
}

#[connector(id = "twowrites")]
impl TwoWrites {
    /// Writes, decoding the API's answer strictly.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn strict(&self, input: Name, key: IdempotencyKey) -> Result<Greeting, ConnectorFailure> {
        let _: ApiStrict = self
            .api
            .post("/strict")
            .idempotency(&key)
            .json(&json!({ "name": input.name }))
            .send_json()
            .await?;
        Ok(Greeting { text: input.name })
    }

    /// Writes, reading whatever the API answers.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn lenient(
        &self,
        input: Name,
        key: IdempotencyKey,
    ) -> Result<Greeting, ConnectorFailure> {
        let _: serde_json::Value = self
            .api
            .post("/lenient")
            .idempotency(&key)
            .json(&json!({ "name": input.name }))
            .send_json()
            .await?;
        Ok(Greeting { text: input.name })
    }
}

/// A scenario that tests one candidate capability does not pass vacuously on a waived one
/// while another could exercise its assertions: restart tries the candidates until one
/// completes, and identity prefers a capability the suite does not waive.
#[test]
fn a_waiver_on_the_first_candidate_does_not_make_a_single_capability_scenario_vacuous() {
    let report = ConformanceSuite::new(|env| TwoWrites {
        api: common::double_client(env.provider_url()),
    })
    .with_unexercised_waiver("cap:twowrites:strict", "SFTP")
    .run();
    eprintln!("{}", report.summary());
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(restart.status, CheckStatus::Passed, "{report}");
    assert_eq!(
        restart.assertions.get("duplicate_effect_prevented"),
        Some(&true)
    );
    assert!(
        !restart.notes.iter().any(|n| n.contains("waived")),
        "{:?}",
        restart.notes
    );
    let identity = check(&report, Scenario::IdentityCredentials);
    assert!(
        !identity.notes.iter().any(|n| n.contains("waived")),
        "{:?}",
        identity.notes
    );
}

/// Without a waiver, restart still finds the write that completes, rather than failing on the
/// first one in the manifest.
#[test]
fn restart_uses_the_first_candidate_whose_call_completes() {
    let report = ConformanceSuite::new(|env| TwoWrites {
        api: common::double_client(env.provider_url()),
    })
    .run();
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(restart.status, CheckStatus::Passed, "{report}");
    // The strict write was tried (its handler ran) and given up on without a word against it.
    assert!(
        !restart
            .notes
            .iter()
            .any(|note| note.contains("cap:twowrites:strict")),
        "{:?}",
        restart.notes
    );
    assert_eq!(
        restart.exercised,
        ["cap:twowrites:strict", "cap:twowrites:lenient"],
        "{}",
        restart.detail
    );
}

/// R4: a connector that only reads, decoding strictly, so its calls fail against the double.
struct StrictReader {
    api: ProviderClient,
}

#[connector(id = "strictreader")]
impl StrictReader {
    /// Reads, decoding the API's answer strictly.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn read(&self, input: Name) -> Result<Greeting, ConnectorFailure> {
        let _: ApiStrict = self
            .api
            .get(&format!("/names/{}", input.name))
            .send_json()
            .await?;
        Ok(Greeting { text: input.name })
    }
}

/// A read re-sent to the restarted host has no effect to duplicate: that it did not complete is
/// a note of `restart_reconnect` (the schema check reports the failing call), not a failure next
/// to a note that says the assertion is vacuous.
#[test]
fn a_read_only_connector_whose_call_fails_has_no_duplicate_effect_to_prevent() {
    let report = ConformanceSuite::new(|env| StrictReader {
        api: common::double_client(env.provider_url()),
    })
    .run();
    eprintln!("{}", report.summary());
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(restart.status, CheckStatus::Passed, "{report}");
    assert!(
        restart.notes.iter().any(|n| n.starts_with(
            "duplicate_effect_prevented: `cap:strictreader:read` only reads, so its re-sent call had no effect to duplicate; it did not complete before the restart: it answered `failed` (`provider.invalid_response`"
        )),
        "{:?}",
        restart.notes
    );
    // The failing call is still reported where its output was to be checked.
    let schema = check(&report, Scenario::SchemaEnforcement);
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
}

/// Two reads; the example of `other` nests deeper than the host accepts (`max_input_depth`, 64
/// levels by default), so the host refuses every call of it before its handler runs.
struct TooDeep;

#[derive(Deserialize, JsonSchema)]
struct Tree {
    /// Any JSON.
    node: serde_json::Value,
}

#[connector(id = "toodeep")]
impl TooDeep {
    /// Greets.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn first(&self, input: Name) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting { text: input.name })
    }

    /// Reads a tree its example nests 70 levels deep.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"node": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#],
    )]
    async fn other(&self, input: Tree) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting {
            text: input.node.to_string(),
        })
    }
}

/// Two credentialed reads whose capabilities trust different identity providers: each call is
/// served a credential of an issuer its capability accepts, as a deployment holding one per
/// provider serves it. (The suite used to hold one credential, of the first capability's
/// issuer, so the host refused every call of `other` and conformance failed a correct connector.)
struct TwoIssuers;

#[connector(id = "twoissuers")]
impl TwoIssuers {
    /// Greets, with a credential of issuer A.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(scopes = ["greet"], issuers = ["idp-a"]),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn first(
        &self,
        input: Name,
        credential: Credential,
    ) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting {
            text: format!("{} via {}", input.name, credential.issuer()),
        })
    }

    /// Greets, with a credential of issuer B.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(scopes = ["greet"], issuers = ["idp-b", "idp-c"]),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn other(
        &self,
        input: Name,
        credential: Credential,
    ) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting {
            text: format!("{} via {}", input.name, credential.issuer()),
        })
    }
}

#[test]
fn capabilities_that_trust_different_issuers_each_get_a_credential_they_accept() {
    let report = ConformanceSuite::new(|_env| TwoIssuers).run();
    // (It reaches no provider, so the provider-failure scenarios have nothing to provoke.)
    for scenario in [
        Scenario::SchemaEnforcement,
        Scenario::IdentityCredentials,
        Scenario::RestartReconnect,
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Passed, "{report}");
        assert!(!check.detail.contains("not exercised"), "{}", check.detail);
    }
    assert!(
        !report.to_json_pretty().contains("issuer_denied"),
        "{report}"
    );
}

/// A waiver covers calls the provider double kept from completing, not a call the host refused
/// before its handler ran: what that left unexercised still fails, saying the waiver does not
/// cover it.
#[test]
fn a_waiver_does_not_cover_a_call_the_host_refused_before_its_handler() {
    let report = ConformanceSuite::new(|_env| TooDeep)
        .with_unexercised_waiver("cap:toodeep:other", "a deep tree")
        .run();
    eprintln!("{}", report.summary());
    let schema = check(&report, Scenario::SchemaEnforcement);
    assert_eq!(schema.status, CheckStatus::Failed, "{report}");
    let line = unexercised_line(schema, "declared_output_produced");
    assert!(
        line.contains("`cap:toodeep:other`")
            && line.contains("`action.input_too_large`")
            && line.contains("the host answered before the handler ran")
            && line.contains("the waiver of `cap:toodeep:other` does not cover this"),
        "{line}"
    );
    assert!(schema.waived.is_empty(), "{:?}", schema.waived);
}

/// Two writes that need approval; the first refuses every call in its handler (its account is
/// closed), the second completes.
struct Payouts;

#[connector(id = "payouts")]
impl Payouts {
    /// Refunds a customer; the account is closed, so it never completes.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(reason = "moves money", evidence = [reason]),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn refund(
        &self,
        _input: Name,
        _approval: Approval,
    ) -> Result<Greeting, ConnectorFailure> {
        Err(ConnectorFailure::permanent(
            "payouts.account_closed",
            "the account is closed",
            "payouts",
        ))
    }

    /// Pays a customer out.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(reason = "moves money", evidence = [reason]),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn payout(&self, input: Name, _approval: Approval) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting { text: input.name })
    }
}

/// `approval_lifecycle` walks its candidates: when the first gated capability's approved call
/// fails, `resume_once` is checked on the next one whose approved call completes, and says so.
#[test]
fn resume_once_is_checked_on_the_next_gated_capability_when_the_first_never_completes() {
    let report = ConformanceSuite::new(|_env| Payouts).run();
    let approval = check(&report, Scenario::ApprovalLifecycle);
    assert_eq!(approval.status, CheckStatus::Passed, "{report}");
    assert_eq!(approval.assertions.get("resume_once"), Some(&true));
    assert!(
        approval.notes.iter().any(|n| n.starts_with(
            "no approved call of `cap:payouts:refund` completed: resumed once approved, it answered `failed` (`payouts.account_closed`"
        ) && n.ends_with("`resume_once` was checked on `cap:payouts:payout` instead")),
        "{:?}",
        approval.notes
    );
}

/// A connector whose work is local: notes in memory, no provider behind it (an author trial
/// migrating an rmcp tool server).
#[derive(Clone, Default)]
struct LocalNotes {
    notes: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Note {
    /// The note's key.
    key: String,
    /// Its text.
    text: String,
}

#[connector(id = "localnotes")]
impl LocalNotes {
    /// Reads a note.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn get(&self, input: Name) -> Result<Greeting, ConnectorFailure> {
        let notes = self.notes.lock().unwrap();
        Ok(Greeting {
            text: notes.get(&input.name).cloned().unwrap_or_default(),
        })
    }

    /// Writes a note.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"key": "ada", "text": "hello"}"#],
    )]
    async fn put(&self, input: Note, _key: IdempotencyKey) -> Result<Greeting, ConnectorFailure> {
        self.notes
            .lock()
            .unwrap()
            .insert(input.key, input.text.clone());
        Ok(Greeting { text: input.text })
    }
}

/// With no provider behind any capability, the provider-failure assertions fail, saying what to
/// do; told the connector has none (`without_provider`), they hold with a note quoting why, and
/// the report passes. A per-capability waiver is not the way: it would also cover the local
/// handlers' own failures in every other scenario (found by a review).
#[test]
fn a_connector_without_a_provider_says_so_and_passes() {
    let suite = || {
        let notes = LocalNotes::default();
        ConformanceSuite::new(move |_env| notes.clone())
    };
    let report = suite().run();
    for (scenario, assertion) in [
        (
            Scenario::ErrorsUncertainOutcomes,
            "protocol_fields_preserved",
        ),
        (Scenario::RetryExhaustion, "backoff_observed"),
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Failed, "{report}");
        assert!(
            check.detail.lines().any(|line| line.starts_with(assertion)
                && line.contains("`cap:localnotes:put` completed without one")
                && line.contains("env.provider_url()")
                && line.contains("ConformanceSuite::without_provider(reason)")),
            "{}",
            check.detail
        );
    }
    // A waiver does not cover it: nothing was kept from completing by the double.
    let waived = suite()
        .with_unexercised_waiver("cap:localnotes:put", "local")
        .run();
    assert_eq!(
        check(&waived, Scenario::RetryExhaustion).status,
        CheckStatus::Failed,
        "{waived}"
    );

    let reason = "notes live in the connector's memory";
    let local = suite().without_provider(reason).run();
    assert!(local.passed(), "{local}");
    let errors = check(&local, Scenario::ErrorsUncertainOutcomes);
    assert!(errors.waived.is_empty(), "{:?}", errors.waived);
    for assertion in ["protocol_fields_preserved", "uncertain_outcome_reconciled"] {
        assert!(
            errors.notes.iter().any(|n| n.starts_with(&format!(
                "{assertion} holds without a provider: the suite was told the connector has none ({reason})"
            ))),
            "{:?}",
            errors.notes
        );
    }
}

/// A reconciliation that reads a failed lookup as "not posted" fails `uncertain_outcome_reconciled`:
/// with every provider request failing, it settled the outcome (an author trial's companion,
/// `.ok().flatten()`, passed).
#[test]
fn a_reconciliation_that_reads_a_failed_lookup_as_not_committed_fails() {
    let report = ledger(Write::GuessesWhenUnanswered)
        .with_provider_setup(answer_like_the_ledger)
        .run();
    let errors = check(&report, Scenario::ErrorsUncertainOutcomes);
    assert_eq!(
        failing(errors),
        ["uncertain_outcome_reconciled"],
        "{report}"
    );
    assert!(
        errors.detail.contains(
            "while every provider request failed (HTTP 503), reconciling `cap:ledger:post_transfer`'s transaction"
        ) && errors.detail.contains("never `NotCommitted`"),
        "{}",
        errors.detail
    );
}

/// Answers like the ledger's API, whose transfer lookups answer `pending` while the double is
/// scripted to.
fn answer_like_a_ledger_that_can_be_pending(provider: &ProviderHandle) {
    answer_like_the_ledger(provider);
    provider.answer("/transfers/*", |request| {
        if request.lookup_pending() {
            return json!({ "posted": false, "state": "pending" });
        }
        let operation = request.path().trim_start_matches("/transfers/");
        json!({ "posted": request.effects().iter().any(|e| e.operation_id == operation) })
    });
}

/// A reconciliation that reads a pending lookup as "not posted" fails `reconnect_cursor_resumed`:
/// the provider holds the transfer (an author trial's companion, `_ => NotCommitted`, passed
/// with a note). One that answers `Pending` passes.
#[test]
fn a_reconciliation_that_reads_a_pending_lookup_as_not_committed_fails() {
    let report = ledger(Write::PendingIsNotPosted)
        .with_provider_setup(answer_like_a_ledger_that_can_be_pending)
        .run();
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(failing(restart), ["reconnect_cursor_resumed"], "{report}");
    assert!(
        restart
            .detail
            .contains("yet the reconciliation settled transaction")
            && restart.detail.contains("`ReconcileOutcome::Pending`"),
        "{}",
        restart.detail
    );

    let report = ledger(Write::Posts)
        .with_provider_setup(answer_like_a_ledger_that_can_be_pending)
        .run();
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(restart.status, CheckStatus::Passed, "{report}");
}

/// Told the connector has no provider, a suite whose connector does make provider requests
/// fails `errors_uncertain_outcomes`, saying the declaration is wrong.
#[test]
fn without_provider_on_a_connector_that_has_one_fails() {
    let report = ledger(Write::Posts)
        .with_provider_setup(answer_like_the_ledger)
        .without_provider("wrongly")
        .run();
    let errors = check(&report, Scenario::ErrorsUncertainOutcomes);
    assert_eq!(errors.status, CheckStatus::Failed, "{report}");
    assert!(
        errors
            .detail
            .contains("the suite was told the connector has no provider (wrongly), yet"),
        "{}",
        errors.detail
    );
}

/// A local ledger: entries in memory, written in one step (`execute`), reconciled by looking
/// the entry up and compensated by removing it. Nothing is behind it, so no answer can be lost
/// and no provider request shows what a compensation undid.
#[derive(Clone, Default)]
struct LocalLedger {
    entries: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Entry>>>,
    /// `reverse` refuses every compensation.
    reverse_refuses: bool,
    /// `find_entry` answers this without looking, when set.
    reconcile_answers: Option<bool>,
}

#[derive(Clone, Deserialize, Serialize, JsonSchema)]
struct Entry {
    /// The account.
    account: String,
    /// The amount in cents.
    amount_minor: i64,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    /// The entry's id.
    entry_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct Reversal {
    /// Why the entry is removed.
    reason: String,
}

/// The name the local ledger records its operations under.
const LOCAL_LEDGER: &str = "local-ledger";

#[connector(id = "localledger")]
impl LocalLedger {
    /// Posts an entry.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile, compensate]),
        compensation(supported, capability = "cap:localledger:reverse", window_ms = 600_000),
        reconcile = Self::find_entry,
        examples = [r#"{"account": "acc_1", "amount_minor": 1250}"#],
    )]
    async fn post(
        &self,
        entry: Entry,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        let entry_id = format!("entry-{}", key.for_provider());
        checkpoint
            .record(
                ProviderOperationRef {
                    provider: LOCAL_LEDGER.into(),
                    operation_id: entry_id.clone(),
                    request_id: None,
                },
                None,
            )
            .await?;
        self.entries.lock().unwrap().insert(entry_id.clone(), entry);
        Ok(Posted { entry_id })
    }

    async fn find_entry(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        let found = self.reconcile_answers.unwrap_or_else(|| {
            self.entries
                .lock()
                .unwrap()
                .contains_key(&request.provider_operation.operation_id)
        });
        Ok(if found {
            ReconcileOutcome::Committed { evidence: None }
        } else {
            ReconcileOutcome::NotCommitted { evidence: None }
        })
    }

    /// Removes an entry `post` made: its compensation.
    #[capability(
        id = "cap:localledger:reverse",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        _key: IdempotencyKey,
        target: Compensation,
    ) -> Result<Posted, ConnectorFailure> {
        let operation = target
            .provider_operation
            .clone()
            .filter(|_| !self.reverse_refuses);
        let Some(operation) = operation else {
            return Err(ConnectorFailure::permanent(
                "localledger.nothing_to_reverse",
                "the compensated post recorded no entry",
                LOCAL_LEDGER,
            ));
        };
        let removed = self.entries.lock().unwrap().remove(&operation.operation_id);
        match removed {
            Some(_) => Ok(Posted {
                entry_id: operation.operation_id,
            }),
            None => Err(ConnectorFailure::permanent(
                "localledger.entry_missing",
                format!(
                    "no entry {} to reverse ({})",
                    operation.operation_id, reversal.reason
                ),
                LOCAL_LEDGER,
            )),
        }
    }
}

/// A local connector with a transactional write: told it has no provider, the suite checks
/// what it can (checkpoints, compensation routing and once-only) and holds the assertions that
/// need a lost answer or a provider request with a note; not told, they fail saying what to do.
#[test]
fn a_local_transactional_write_passes_when_declared_local() {
    let suite = || {
        let ledger = LocalLedger::default();
        ConformanceSuite::new(move |_env| ledger.clone())
    };
    let report = suite().run();
    let transaction = check(&report, Scenario::TransactionLifecycle);
    assert_eq!(transaction.status, CheckStatus::Failed, "{report}");
    assert_eq!(
        failing(transaction),
        ["compensation_governed", "reconcile_before_retry"],
        "{report}"
    );
    let restart = check(&report, Scenario::RestartReconnect);
    assert_eq!(failing(restart), ["reconnect_cursor_resumed"], "{report}");
    for (check, assertion) in [
        (transaction, "reconcile_before_retry"),
        (restart, "reconnect_cursor_resumed"),
    ] {
        assert!(
            check.detail.lines().any(|line| line.starts_with(assertion)
                && line.contains("`cap:localledger:post` made no provider request on its example")
                && line.contains("env.provider_url()")
                && line.contains("ConformanceSuite::without_provider(reason)")),
            "{}",
            check.detail
        );
    }
    assert!(
        transaction
            .detail
            .contains("nothing was undone (if the connector's work really is local, say so with `ConformanceSuite::without_provider(reason)`)"),
        "{}",
        transaction.detail
    );

    let reason = "entries live in the connector's memory";
    let local = suite().without_provider(reason).run();
    assert!(local.passed(), "{local}");
    let transaction = check(&local, Scenario::TransactionLifecycle);
    let restart = check(&local, Scenario::RestartReconnect);
    let errors = check(&local, Scenario::ErrorsUncertainOutcomes);
    for (check, note) in [
        (
            transaction,
            format!(
                "reconcile_before_retry: `cap:localledger:post` is local ({reason}), so the suite lost the answers itself"
            ),
        ),
        (
            errors,
            format!(
                "uncertain_outcome_reconciled: `cap:localledger:post` is local ({reason}), so the suite lost the answers itself"
            ),
        ),
        (
            transaction,
            format!(
                "compensation_governed: what `cap:localledger:reverse` undid holds without a provider: the suite was told the connector has none ({reason})"
            ),
        ),
        (
            restart,
            format!(
                "reconnect_cursor_resumed holds without a provider: the suite was told the connector has none ({reason})"
            ),
        ),
    ] {
        assert!(
            check.notes.iter().any(|n| n.starts_with(&note)),
            "{note}: {:?}",
            check.notes
        );
    }
    // What a local connector can show is still checked: the checkpoint, and a compensation
    // routed to `reverse` that settles `compensated` once.
    for assertion in ["provider_operation_checkpointed", "compensation_governed"] {
        assert_eq!(
            transaction.assertions.get(assertion),
            Some(&true),
            "{assertion}: {local}"
        );
    }
}

/// Told the connector is local, a compensation that runs but fails is still a failure: the
/// note covers only what a provider would have shown.
#[test]
fn a_local_compensation_that_fails_still_fails() {
    let ledger = LocalLedger {
        reverse_refuses: true,
        ..LocalLedger::default()
    };
    let report = ConformanceSuite::new(move |_env| ledger.clone())
        .without_provider("entries live in memory")
        .run();
    let transaction = check(&report, Scenario::TransactionLifecycle);
    assert!(
        failing(transaction).contains(&"compensation_governed"),
        "{report}"
    );
}

/// Notes kept in memory whose writes are copied to a remote service by a task the handler
/// spawns: no scouting call sees the request, which arrives after the call settled.
#[derive(Clone)]
struct SyncingNotes {
    notes: LocalNotes,
    sync: ProviderClient,
}

#[connector(id = "syncingnotes")]
impl SyncingNotes {
    /// Writes a note, and copies it to the sync service in the background.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"key": "ada", "text": "hello"}"#],
    )]
    async fn put(&self, input: Note, key: IdempotencyKey) -> Result<Greeting, ConnectorFailure> {
        let sync = self.sync.clone();
        let copy = json!({ "key": input.key, "text": input.text });
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let _ = sync
                .post("/sync")
                .json(&copy)
                .send_json::<serde_json::Value>()
                .await;
        });
        self.notes.put(input, key).await
    }
}

/// A connector declared local that reaches a provider where no scouting call looks (a task
/// spawned by its handler) fails every scenario whose double received a request, naming them.
#[test]
fn a_connector_declared_local_that_reaches_a_provider_later_fails() {
    let report = ConformanceSuite::new(|env| SyncingNotes {
        notes: LocalNotes::default(),
        sync: common::double_client(env.provider_url()),
    })
    .without_provider("notes live in memory")
    .run();
    assert!(!report.passed(), "{report}");
    for scenario in [
        Scenario::IdempotencyDuplicates,
        Scenario::RetryExhaustion,
        Scenario::ErrorsUncertainOutcomes,
    ] {
        let check = check(&report, scenario);
        assert!(failing(check).contains(&LOCAL_AS_DECLARED), "{report}");
        assert!(
            check.detail.contains(
                "the suite was told the connector has no provider (notes live in memory), yet the provider double received"
            ) && check.detail.contains("POST /sync"),
            "{}",
            check.detail
        );
    }
}

/// Local notes with a publishing capability that reaches over the network and declares no
/// example, so no scenario ever calls it.
#[derive(Clone, Default)]
struct PublishingNotes {
    notes: LocalNotes,
}

#[connector(id = "publishingnotes")]
impl PublishingNotes {
    /// Writes a note.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"key": "ada", "text": "hello"}"#],
    )]
    async fn put(&self, input: Note, key: IdempotencyKey) -> Result<Greeting, ConnectorFailure> {
        self.notes.put(input, key).await
    }

    /// Looks a note up on the public directory.
    #[capability(
        risk = low,
        side_effects = [read, external_network],
        execution(retry_safety = safe),
        data(sensitivity = internal),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "a lookup changes nothing"
        ),
    )]
    async fn find_published(&self, input: Name) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting { text: input.name })
    }
}

/// `external_network` contradicts `without_provider` on its face, even on a capability the
/// suite never calls.
#[test]
fn a_connector_declared_local_with_a_networked_capability_fails() {
    let report = ConformanceSuite::new(|_env| PublishingNotes::default())
        .without_provider("notes live in memory")
        .run();
    let errors = check(&report, Scenario::ErrorsUncertainOutcomes);
    assert_eq!(errors.status, CheckStatus::Failed, "{report}");
    assert!(
        errors.detail.contains(
            "the suite was told the connector has no provider (notes live in memory), yet `cap:publishingnotes:find_published` declares `external_network`"
        ),
        "{}",
        errors.detail
    );
}

/// A read-only directory whose search cannot complete against the double (waived) and whose
/// lookup was built on an in-memory fake instead of `env.provider_url()`.
#[derive(Clone, Default)]
struct FakedDirectory;

#[connector(id = "fakeddirectory")]
impl FakedDirectory {
    /// Searches the directory.
    #[capability(
        risk = low,
        side_effects = [read],
        execution(retry_safety = safe),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn search(
        &self,
        _input: Name,
        _key: IdempotencyKey,
    ) -> Result<Greeting, ConnectorFailure> {
        Err(ConnectorFailure::permanent(
            "directory.grpc_only",
            "search speaks gRPC, which the double does not",
            "directory",
        ))
    }

    /// Looks a name up (in a fake of the directory's API, in memory).
    #[capability(
        risk = low,
        side_effects = [read],
        execution(retry_safety = safe),
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn get(&self, input: Name, _key: IdempotencyKey) -> Result<Greeting, ConnectorFailure> {
        Ok(Greeting { text: input.name })
    }
}

/// A waiver of the capability that failed first does not make the one that completed without
/// a provider request look exercised: the provider-failure assertions still fail for it (found
/// by a review: they passed).
#[test]
fn a_waived_failure_does_not_hide_a_capability_that_never_reached_the_provider() {
    let report = ConformanceSuite::new(|_env| FakedDirectory)
        .with_unexercised_waiver("cap:fakeddirectory:search", "speaks gRPC")
        .run();
    for (scenario, assertion) in [
        (
            Scenario::ErrorsUncertainOutcomes,
            "protocol_fields_preserved",
        ),
        (Scenario::RetryExhaustion, "backoff_observed"),
    ] {
        let check = check(&report, scenario);
        assert_eq!(check.status, CheckStatus::Failed, "{report}");
        assert!(
            check.detail.lines().any(|line| line.starts_with(assertion)
                && line.contains("`cap:fakeddirectory:get` completed without one")
                && line.contains("env.provider_url()")),
            "{}",
            check.detail
        );
    }
}

/// Declared local, a reconciliation is still called: the suite loses the answers itself. One
/// that answers "committed" without looking, or "not committed" without looking, fails.
#[test]
fn a_local_reconciliation_that_does_not_look_fails() {
    for (answers, expected) in [
        (
            true,
            "answered `committed: true`: the reconciliation did not look",
        ),
        (false, "where the write took effect"),
    ] {
        let ledger = LocalLedger {
            reconcile_answers: Some(answers),
            ..LocalLedger::default()
        };
        let report = ConformanceSuite::new(move |_env| ledger.clone())
            .without_provider("entries live in memory")
            .run();
        for (scenario, assertion) in [
            (Scenario::TransactionLifecycle, "reconcile_before_retry"),
            (
                Scenario::ErrorsUncertainOutcomes,
                "uncertain_outcome_reconciled",
            ),
        ] {
            let check = check(&report, scenario);
            assert_eq!(failing(check), [assertion], "{report}");
            assert!(check.detail.contains(expected), "{}", check.detail);
        }
    }
}

/// A write that declares a key but does not take it (so it does not support retry), undone by
/// a compensating capability that does.
#[derive(Clone, Default)]
struct KeylessPost {
    ledger: LocalLedger,
}

#[connector(id = "keylesspost")]
impl KeylessPost {
    /// Posts an entry.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = "cap:keylesspost:undo", window_ms = 600_000),
        examples = [r#"{"account": "acc_1", "amount_minor": 1250}"#],
    )]
    async fn post(&self, entry: Entry, checkpoint: Checkpoint) -> Result<Posted, ConnectorFailure> {
        let entry_id = format!("entry-{}", entry.account);
        checkpoint
            .record(
                ProviderOperationRef {
                    provider: LOCAL_LEDGER.into(),
                    operation_id: entry_id.clone(),
                    request_id: None,
                },
                None,
            )
            .await?;
        self.ledger
            .entries
            .lock()
            .unwrap()
            .insert(entry_id.clone(), entry);
        Ok(Posted { entry_id })
    }

    /// Removes an entry `post` made.
    #[capability(
        id = "cap:keylesspost:undo",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn undo(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.reverse(reversal, key, target).await
    }
}

/// When the only capability that supports retry is a compensating one, which the suite never
/// calls on its own, `retry_exhaustion` says so instead of "no capability … declares an example
/// input" (an author trial's compensating capability had one).
#[test]
fn a_scenario_whose_only_candidate_is_a_compensation_says_so() {
    let report = ConformanceSuite::new(|_env| KeylessPost::default())
        .without_provider("entries live in memory")
        .run();
    let retry = check(&report, Scenario::RetryExhaustion);
    assert_eq!(retry.status, CheckStatus::Failed, "{report}");
    assert!(
        retry.detail.contains(
            "no capability that supports retry can be called on its own: `cap:keylesspost:undo` runs only as the compensation of another capability"
        ) && !retry.detail.contains("declares an example input"),
        "{}",
        retry.detail
    );
}

/// A local ledger whose post is approved by finance and whose reversal publishes its own
/// approval policy (ops), which no host applies: a compensation is approved under `post`'s.
#[derive(Clone, Default)]
struct GatedLedger {
    ledger: LocalLedger,
}

#[connector(id = "gatedledger")]
impl GatedLedger {
    /// Posts an entry, approved by finance.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(reason = "entries move money", selector = role("finance"), evidence = [reason]),
        transaction(modes = [execute, reconcile, compensate]),
        compensation(supported, capability = "cap:gatedledger:reverse", window_ms = 600_000),
        reconcile = Self::find_entry,
        examples = [r#"{"account": "acc_1", "amount_minor": 1250}"#],
    )]
    async fn post(
        &self,
        entry: Entry,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.post(entry, key, checkpoint).await
    }

    async fn find_entry(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.ledger.find_entry(request).await
    }

    /// Removes an entry `post` made, approved (it says) by ops.
    #[capability(
        id = "cap:gatedledger:reverse",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(reason = "reversals", selector = role("ops"), evidence = [reason]),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
        _approval: Approval,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.reverse(reversal, key, target).await
    }
}

/// The compensating capability's own approval policy, which no host applies, is pointed out.
#[test]
fn an_unapplied_approval_policy_of_a_compensating_capability_is_noted() {
    let report = ConformanceSuite::new(|_env| GatedLedger::default())
        .without_provider("entries live in memory")
        .run();
    let transaction = check(&report, Scenario::TransactionLifecycle);
    assert!(
        transaction.notes.iter().any(|note| note
            .starts_with("`cap:gatedledger:reverse` publishes an approval policy")
            && note.contains("\"ops\"")
            && note.contains("\"finance\"")),
        "{report}"
    );
}

/// The same ledger whose reversal publishes no approval at all, while `post`'s approval gates
/// every compensation (an author trial's `reopen_issue`): the manifest would say the undo needs
/// none.
#[derive(Clone, Default)]
struct SilentlyGatedLedger {
    ledger: LocalLedger,
}

#[connector(id = "silentledger")]
impl SilentlyGatedLedger {
    /// Posts an entry, approved by finance.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(reason = "entries move money", selector = role("finance"), evidence = [reason]),
        transaction(modes = [execute, reconcile, compensate]),
        compensation(supported, capability = "cap:silentledger:reverse", window_ms = 600_000),
        reconcile = Self::find_entry,
        examples = [r#"{"account": "acc_1", "amount_minor": 1250}"#],
    )]
    async fn post(
        &self,
        entry: Entry,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
        _approval: Approval,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.post(entry, key, checkpoint).await
    }

    async fn find_entry(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.ledger.find_entry(request).await
    }

    /// Removes an entry `post` made; publishes no approval.
    #[capability(
        id = "cap:silentledger:reverse",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.reverse(reversal, key, target).await
    }
}

/// A compensating capability that publishes no approval while its compensations are gated is
/// pointed out; one whose compensations nothing gates is not (`KeylessPost`'s undo).
#[test]
fn an_unpublished_approval_of_a_gated_compensating_capability_is_noted() {
    let report = ConformanceSuite::new(|_env| SilentlyGatedLedger::default())
        .without_provider("entries live in memory")
        .run();
    let transaction = check(&report, Scenario::TransactionLifecycle);
    assert!(
        transaction.notes.iter().any(|note| note.starts_with(
            "`cap:silentledger:reverse` publishes no required approval policy, but every compensation of `cap:silentledger:post` it runs waits for approval under `cap:silentledger:post`'s policy"
        )),
        "{report}"
    );
    let ungated = ConformanceSuite::new(|_env| KeylessPost::default())
        .without_provider("entries live in memory")
        .run();
    assert!(
        !check(&ungated, Scenario::TransactionLifecycle)
            .notes
            .iter()
            .any(|note| note.contains("publishes no required approval")),
        "{ungated}"
    );
}

/// A ledger whose post declares no approval policy but gates its compensations
/// (`compensation(requires_approval)`): the host applies its default compensation policy, which
/// only a policy on `post` can replace, so the note says to declare it there first.
#[derive(Clone, Default)]
struct DefaultGatedLedger {
    ledger: LocalLedger,
}

#[connector(id = "defaultledger")]
impl DefaultGatedLedger {
    /// Posts an entry; its reversals need approval.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile, compensate]),
        compensation(supported, capability = "cap:defaultledger:reverse", window_ms = 600_000, requires_approval),
        reconcile = Self::find_entry,
        examples = [r#"{"account": "acc_1", "amount_minor": 1250}"#],
    )]
    async fn post(
        &self,
        entry: Entry,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.post(entry, key, checkpoint).await
    }

    async fn find_entry(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        self.ledger.find_entry(request).await
    }

    /// Removes an entry `post` made; publishes no approval.
    #[capability(
        id = "cap:defaultledger:reverse",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        examples = [r#"{"reason": "posted twice"}"#],
    )]
    async fn reverse(
        &self,
        reversal: Reversal,
        key: IdempotencyKey,
        target: Compensation,
    ) -> Result<Posted, ConnectorFailure> {
        self.ledger.reverse(reversal, key, target).await
    }
}

#[test]
fn an_undo_gated_by_the_hosts_default_policy_is_told_to_declare_it_on_the_target_first() {
    let report = ConformanceSuite::new(|_env| DefaultGatedLedger::default())
        .without_provider("entries live in memory")
        .run();
    let transaction = check(&report, Scenario::TransactionLifecycle);
    assert!(
        transaction.notes.iter().any(|note| note.starts_with(
            "`cap:defaultledger:reverse` publishes no required approval policy, but every compensation of `cap:defaultledger:post` it runs waits for approval under the host's default compensation policy"
        ) && note.contains("declare the policy on `cap:defaultledger:post`, then the same on `cap:defaultledger:reverse`")),
        "{report}"
    );
}
