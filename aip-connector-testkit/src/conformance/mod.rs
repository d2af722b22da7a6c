//! The conformance suite: proves, by behaviour, that a connector does what its manifest
//! declares.
//!
//! [`ConformanceSuite`] drives a connector through the real [`Host`](aip_connector::host::Host)
//! and a [`ProviderDouble`](crate::ProviderDouble) and reports upstream's checks
//! (`aip-model.md` §8.1):
//!
//! - `discovery.manifest`, `discovery.profile_set`, `discovery.profile_bindings`,
//!   `connector.manifest` and `rfc0003.connector_boundary`: what a gateway reads before it
//!   routes to the connector (every advertised profile says where it is served; the manifest
//!   names the connector; with [`ConformanceSuite::with_required_profile`] and
//!   [`ConformanceSuite::with_connector_boundary`], the deployment's own requirements);
//! - `connector.atomic_manifest_admission`: the manifest passes full admission with the
//!   implementation support the handlers prove (`require_implementation_claims = true`);
//! - `enterprise.capability_contract`: every contract passes the enterprise lints;
//! - `connector.behavior.<scenario>` for the twelve [`Scenario`]s. A scenario the manifest
//!   requires is executed, never skipped; one it does not require is "not applicable". An
//!   executed scenario passes when every required assertion held and the evidence names at least
//!   one artifact (a provider request, a transaction, an approval, an action). An assertion
//!   whose calls never got there on a capability that needs it (no keyed call completed, so no
//!   duplicate of one was seen) is not exercised, and fails, unless
//!   [`ConformanceSuite::with_unexercised_waiver`] waives the capability and it was the provider
//!   double that kept the call from completing.
//!
//! Claims are verified by behaviour: a capability that declares cancellation but ignores its
//! token, or declares idempotency but produces two effects for one key, fails the matching
//! check. Valid inputs come from the capabilities' declared `examples`.
//!
//! In a connector crate, one line expands to one `#[test]` per check and writes a JSON report
//! under `target/aip-conformance/`:
//!
//! ```no_run
//! # use aip_connector::prelude::*;
//! # use aip_connector_testkit::conformance::ConformanceSuite;
//! # #[derive(Deserialize, JsonSchema)]
//! # struct Lookup {
//! #     id: String,
//! # }
//! # #[derive(Serialize, Deserialize, JsonSchema)]
//! # struct Record {
//! #     id: String,
//! # }
//! # struct MyConnector {
//! #     api: ProviderClient,
//! # }
//! # impl MyConnector {
//! #     fn new(provider_url: &str) -> Self {
//! #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
//! #     }
//! # }
//! # #[connector(id = "my-connector")]
//! # impl MyConnector {
//! #     /// Looks a record up.
//! #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
//! #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
//! #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
//! #     }
//! # }
//! # fn main() {}
//! aip_connector_testkit::conformance_tests!(|env| MyConnector::new(env.provider_url()));
//! ```
//!
//! The host the scenarios run acts as the external account [`default_external_account`]
//! (`conformance`/`acct-conformance`), so a capability whose idempotency keys are scoped to the
//! external account (`idempotency(required, scope = external_account)`) runs as it would in a
//! deployment; [`ConformanceSuite::with_external_account`] picks another account, and
//! `conformance_tests!(suite = …)` takes the configured suite.

mod harness;
mod probe;
mod scenarios;
mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aip_connector::admission::{AdmissionPolicy, admit_manifest};
use aip_connector::discovery;
use aip_connector::host::ExternalAccountRef;
use aip_connector::ids::ProfileId;
use aip_connector::model::{Manifest, TransactionMode};
use aip_connector::store::IdempotencyStore;
use aip_connector::webhook::WebhookReceiver;
use aip_connector::{Connector, Issue};
use serde::Serialize;

use crate::logs::LogCapture;
use crate::provider_double::ProviderHandle;

pub use aip_connector::discovery::ConnectorBoundary;
pub use harness::{
    CALLER, CANARY_SECRET, EXTERNAL_ACCOUNT_ID, EXTERNAL_ACCOUNT_SYSTEM, Environment, Harness,
    OTHER_TENANT, Settled, TENANT, approval_id_of, default_external_account,
};
pub use probe::{ProbeRecord, ProbedConnector};
pub use store::ConformanceStore;

/// The name of the admission check.
pub const ATOMIC_MANIFEST_ADMISSION: &str = "connector.atomic_manifest_admission";
/// The name of the enterprise contract check.
pub const ENTERPRISE_CAPABILITY_CONTRACT: &str = "enterprise.capability_contract";
/// The check of the suite's own [waivers](ConformanceSuite::with_unexercised_waiver), in the
/// report only when it has any: it fails for a waiver naming a capability the manifest does not
/// have (a typo, or a capability renamed since), and notes a waiver that waived nothing.
pub const UNEXERCISED_WAIVERS: &str = "testkit.unexercised_waivers";

/// One of upstream's connector conformance scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scenario {
    /// The transport's actor is bound, tenants are isolated, credentials stay opaque.
    IdentityCredentials,
    /// Invalid inputs and outputs are rejected.
    SchemaEnforcement,
    /// Duplicates are suppressed and key collisions rejected.
    IdempotencyDuplicates,
    /// Retryable errors keep their fields, back-off is observed, exhaustion is recorded.
    RetryExhaustion,
    /// Cancellation before dispatch, in flight, and after settlement.
    CancellationRaces,
    /// Chunks in order, bounded buffering, one terminal chunk.
    StreamingBackpressure,
    /// Error fields preserved, uncertain outcomes reconciled, secrets redacted from errors.
    ErrorsUncertainOutcomes,
    /// Authority, quorum, evidence and resume-once of approvals.
    ApprovalLifecycle,
    /// Plan before commit, checkpoints, reconcile before retry, governed compensation.
    TransactionLifecycle,
    /// Receipts, correlation, redaction, no raw secret anywhere.
    AuditRedaction,
    /// Webhook signatures, clock skew and replays, checked on the receivers given to
    /// [`ConformanceSuite::with_webhook`].
    WebhookSecurity,
    /// State survives a restart without duplicate effects.
    RestartReconnect,
}

impl Scenario {
    /// Every scenario, in upstream's order.
    pub const ALL: [Scenario; 12] = [
        Scenario::IdentityCredentials,
        Scenario::SchemaEnforcement,
        Scenario::IdempotencyDuplicates,
        Scenario::RetryExhaustion,
        Scenario::CancellationRaces,
        Scenario::StreamingBackpressure,
        Scenario::ErrorsUncertainOutcomes,
        Scenario::ApprovalLifecycle,
        Scenario::TransactionLifecycle,
        Scenario::AuditRedaction,
        Scenario::WebhookSecurity,
        Scenario::RestartReconnect,
    ];

    /// Upstream's scenario id.
    pub fn id(self) -> &'static str {
        match self {
            Scenario::IdentityCredentials => "identity_credentials",
            Scenario::SchemaEnforcement => "schema_enforcement",
            Scenario::IdempotencyDuplicates => "idempotency_duplicates",
            Scenario::RetryExhaustion => "retry_exhaustion",
            Scenario::CancellationRaces => "cancellation_races",
            Scenario::StreamingBackpressure => "streaming_backpressure",
            Scenario::ErrorsUncertainOutcomes => "errors_uncertain_outcomes",
            Scenario::ApprovalLifecycle => "approval_lifecycle",
            Scenario::TransactionLifecycle => "transaction_lifecycle",
            Scenario::AuditRedaction => "audit_redaction",
            Scenario::WebhookSecurity => "webhook_security",
            Scenario::RestartReconnect => "restart_reconnect",
        }
    }

    /// The check name: `connector.behavior.<id>`.
    pub fn check_name(self) -> String {
        format!("connector.behavior.{}", self.id())
    }

    /// The assertions an executed scenario must report, all true (upstream's names).
    pub fn required_assertions(self) -> &'static [&'static str] {
        match self {
            Scenario::IdentityCredentials => &[
                "transport_actor_bound",
                "tenant_isolated",
                "credential_handle_opaque",
            ],
            Scenario::SchemaEnforcement => &["invalid_input_rejected", "invalid_output_rejected"],
            Scenario::IdempotencyDuplicates => &[
                "duplicate_suppressed",
                "collision_rejected",
                "delivery_id_stable",
            ],
            Scenario::RetryExhaustion => &[
                "retryable_error_preserved",
                "backoff_observed",
                "exhaustion_dead_lettered",
            ],
            Scenario::CancellationRaces => &[
                "before_dispatch_cancelled",
                "in_flight_cancelled",
                "late_cancel_preserved_terminal",
            ],
            Scenario::StreamingBackpressure => &[
                "ordered_chunks",
                "bounded_backpressure",
                "terminal_chunk_unique",
            ],
            Scenario::ErrorsUncertainOutcomes => &[
                "protocol_fields_preserved",
                "uncertain_outcome_reconciled",
                "error_secrets_redacted",
            ],
            Scenario::ApprovalLifecycle => &[
                "authority_verified",
                "quorum_enforced",
                "evidence_persisted",
                "resume_once",
            ],
            Scenario::TransactionLifecycle => &[
                "plan_before_commit",
                "provider_operation_checkpointed",
                "reconcile_before_retry",
                "compensation_governed",
            ],
            Scenario::AuditRedaction => &[
                "receipts_emitted",
                "audit_correlated",
                "sensitive_fields_redacted",
                "raw_secret_absent",
            ],
            Scenario::WebhookSecurity => {
                &["signature_verified", "skew_rejected", "replay_rejected"]
            }
            Scenario::RestartReconnect => &[
                "state_recovered",
                "duplicate_effect_prevented",
                "reconnect_cursor_resumed",
            ],
        }
    }

    /// What in a manifest requires this scenario ([`required_by`](Self::required_by)), in
    /// words: the detail of a check that did not apply.
    pub fn required_when(self) -> &'static str {
        match self {
            Scenario::IdentityCredentials
            | Scenario::SchemaEnforcement
            | Scenario::ErrorsUncertainOutcomes
            | Scenario::AuditRedaction
            | Scenario::RestartReconnect => "the manifest declares at least one capability",
            Scenario::IdempotencyDuplicates => {
                "a capability requires an idempotency key (`idempotency.requirement = required`)"
            }
            Scenario::RetryExhaustion => {
                "a capability supports retries (`execution.supports_retry`)"
            }
            Scenario::CancellationRaces => {
                "a capability supports cancellation (`execution.supports_cancel`)"
            }
            Scenario::StreamingBackpressure => {
                "a capability supports streaming (`execution.supports_streaming`)"
            }
            Scenario::ApprovalLifecycle => "a capability requires approval (`approval.required`)",
            Scenario::TransactionLifecycle => "a capability declares a `transaction` contract",
            Scenario::WebhookSecurity => "the manifest lists the `aip.http.webhook.v1` profile",
        }
    }

    /// Whether `manifest` requires this scenario (upstream's table).
    pub fn required_by(self, manifest: &Manifest) -> bool {
        let contracts = || {
            manifest
                .capabilities
                .iter()
                .filter_map(|c| c.contract.as_ref())
        };
        let has_capabilities = !manifest.capabilities.is_empty();
        match self {
            Scenario::IdentityCredentials
            | Scenario::SchemaEnforcement
            | Scenario::ErrorsUncertainOutcomes
            | Scenario::AuditRedaction
            | Scenario::RestartReconnect => has_capabilities,
            Scenario::IdempotencyDuplicates => contracts().any(|c| {
                c.idempotency.requirement == aip_connector::model::IdempotencyRequirement::Required
            }),
            Scenario::RetryExhaustion => contracts().any(|c| c.execution.supports_retry),
            Scenario::CancellationRaces => contracts().any(|c| c.execution.supports_cancel),
            Scenario::StreamingBackpressure => contracts().any(|c| c.execution.supports_streaming),
            Scenario::ApprovalLifecycle => {
                contracts().any(|c| c.approval.as_ref().is_some_and(|a| a.required))
            }
            Scenario::TransactionLifecycle => contracts().any(|c| c.transaction.is_some()),
            Scenario::WebhookSecurity => manifest
                .profiles
                .iter()
                .any(|p| p.as_str() == aip_connector::ids::profiles::HTTP_WEBHOOK),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// What became of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckStatus {
    /// Executed; every required assertion held.
    Passed,
    /// Executed; something did not hold, or a required assertion could not be exercised on a
    /// capability that needs it (see `detail`); or not executed although required.
    Failed,
    /// Not required by this manifest (or, for `rfc0003.connector_boundary`, by the suite: no
    /// boundary was set), so not executed.
    NotApplicable,
}

/// One check of a [`ConformanceReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    /// `discovery.manifest`, `discovery.profile_set`, `discovery.profile_bindings`,
    /// `connector.manifest`, `rfc0003.connector_boundary`,
    /// `connector.atomic_manifest_admission`, `enterprise.capability_contract` or
    /// `connector.behavior.<scenario>`.
    pub name: String,
    /// Pass, fail or not applicable.
    pub status: CheckStatus,
    /// What was found, in words: on failure, which assertion failed and why, one problem per
    /// line (a problem's own sentence may contain `;`).
    pub detail: String,
    /// Each assertion the check made and whether it held.
    pub assertions: BTreeMap<String, bool>,
    /// Artifacts a failure points to: provider request ids (`req_…`), action, transaction and
    /// approval ids.
    pub artifacts: Vec<String>,
    /// What the check did in a way worth knowing, or could not exercise where that is
    /// optional (a feature the manifest does not declare, a reconciliation cursor the provider
    /// never produced, an assertion waived with
    /// [`ConformanceSuite::with_unexercised_waiver`]); also in `detail`. A required assertion
    /// that could not be exercised on a capability that needs it fails the check instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Assertions a [waiver](ConformanceSuite::with_unexercised_waiver) turned from "not
    /// exercised" into a note: true in [`assertions`](Self::assertions) only as far as the calls
    /// that ran showed, not held on what they are about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waived: Vec<String>,
    /// The capabilities whose handlers the scenario's calls reached, in the order of their first
    /// call (a `compensate` counts for the compensating capability, whose handler ran). Calls
    /// the host refused before the handler are not counted, nor those of a restarted connector
    /// (`restart_reconnect`'s second process). A handler tried and given up on (its call did not
    /// complete, so the scenario used another capability) is counted too. Empty for the
    /// manifest checks, which run no handler; a passed scenario's [`detail`](Self::detail)
    /// names them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exercised: Vec<String>,
}

impl CheckResult {
    /// Whether the check passed or did not apply.
    pub fn passed(&self) -> bool {
        self.status != CheckStatus::Failed
    }
}

/// The outcome of a conformance run.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[must_use = "a report proves nothing until a test asserts it (`assert_passed`, `assert_check`)"]
pub struct ConformanceReport {
    /// The connector checked.
    pub connector_id: String,
    /// The store the scenarios' hosts kept their state in ([`ConformanceStore::describe`]).
    pub store: String,
    /// Every check: the manifest checks, admission, the contract lints, then the scenarios in
    /// order.
    pub checks: Vec<CheckResult>,
}

impl ConformanceReport {
    /// Whether every check passed or did not apply.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(CheckResult::passed)
    }

    /// The check called `name`.
    pub fn check(&self, name: &str) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// A few lines for a test run's output: how many checks passed, failed and did not apply,
    /// then one line per check that failed or did not apply, with its detail (why it did not
    /// apply: the manifest declares nothing the scenario exercises), and one per check that
    /// passed with [notes](CheckResult::notes), with those notes. Checks that could not run for
    /// one kind of reason (a host that refused the connector, a store that did not open) share
    /// one line, `FAIL <n> checks not run: <the first one's reason> (<their names>)`, which says
    /// when the others' texts differ (each store names its scenario's file or schema); each
    /// check keeps its reason in its detail.
    ///
    /// [`conformance_tests!`](crate::conformance_tests) prints it once per run, outside the
    /// test harness's output capture, so a check that did not apply is visible in `cargo test`
    /// even though its `#[test]` reports `ok`.
    pub fn summary(&self) -> String {
        let count = |status| self.checks.iter().filter(|c| c.status == status).count();
        // The default store goes unnamed; another one is named, so that a run on the
        // deployment's store can be told from test output alone.
        let store = if self.store == ConformanceStore::sqlite().describe() {
            String::new()
        } else {
            format!(" on {}", self.store)
        };
        let mut summary = format!(
            "conformance of `{}`{store}: {} passed, {} failed, {} not applicable\n",
            self.connector_id,
            count(CheckStatus::Passed),
            count(CheckStatus::Failed),
            count(CheckStatus::NotApplicable),
        );
        // One reason that kept several checks from running (a host that refused the connector,
        // a store that did not open) is one line, not one per check (an author trial saw ten).
        fn not_run(check: &CheckResult) -> Option<&str> {
            (check.status == CheckStatus::Failed)
                .then(|| check.detail.strip_prefix(NOT_RUN))
                .flatten()
        }
        // Reasons of one kind share the line (a store that did not open names each scenario's
        // own file or schema, so no two texts are equal); the line quotes the first.
        let mut stopped: BTreeMap<&str, Vec<&CheckResult>> = BTreeMap::new();
        for check in &self.checks {
            if let Some(reason) = not_run(check) {
                stopped.entry(not_run_kind(reason)).or_default().push(check);
            }
        }
        let mut printed = std::collections::BTreeSet::new();
        for check in &self.checks {
            if let Some(reason) = not_run(check)
                && let Some(group) = stopped
                    .get(not_run_kind(reason))
                    .filter(|group| group.len() > 1)
            {
                // Printed where the first of them is; the others are that line.
                if printed.insert(not_run_kind(reason)) {
                    let differ = group
                        .iter()
                        .filter(|other| not_run(other) != Some(reason))
                        .count();
                    let names: Vec<&str> = group
                        .iter()
                        .map(|c| {
                            c.name
                                .strip_prefix("connector.behavior.")
                                .unwrap_or(&c.name)
                        })
                        .collect();
                    let others = if differ > 0 {
                        format!(" (and {differ} more like it: each check's detail has its own)")
                    } else {
                        String::new()
                    };
                    summary.push_str(&format!(
                        "  FAIL {} checks {NOT_RUN}{}{others} ({})\n",
                        group.len(),
                        indented(reason),
                        names.join(", ")
                    ));
                }
                continue;
            }
            let (mark, detail) = match check.status {
                CheckStatus::Passed if check.notes.is_empty() => continue,
                CheckStatus::Passed => (
                    "pass",
                    format!("passed, noting: {}", check.notes.join("; ")),
                ),
                CheckStatus::Failed => ("FAIL", check.detail.clone()),
                CheckStatus::NotApplicable => ("n/a ", check.detail.clone()),
            };
            summary.push_str(&format!("  {mark} {}: {}\n", check.name, indented(&detail)));
        }
        summary
    }

    /// The report as a JSON value (the shape [`write_to`](Self::write_to) writes), as
    /// [`SnapshotDiff::to_json`](crate::SnapshotDiff::to_json) gives a diff.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The report as pretty JSON text, what [`write_to`](Self::write_to) writes.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes the report as `<dir>/<connector id>.json`, creating `dir`; returns the path. In
    /// the file name, characters other than ASCII letters, digits, `-` and `_` become `_`.
    /// [`ConformanceSuite::write_report`], which `conformance_tests!` calls, names the file
    /// after the suite's store too, so that two runs of one connector keep their reports apart.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<PathBuf> {
        self.write_named(dir, &file_name_part(&self.connector_id))
    }

    /// Writes the report as `<dir>/<file>.json`, creating `dir`.
    fn write_named(&self, dir: &Path, file: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{file}.json"));
        std::fs::write(&path, self.to_json_pretty() + "\n")?;
        Ok(path)
    }

    /// Panics with the check's detail unless `name` passed or did not apply.
    ///
    /// # Panics
    ///
    /// When the check failed or does not exist.
    #[track_caller]
    pub fn assert_check(&self, name: &str) {
        let Some(check) = self.check(name) else {
            panic!("conformance check `{name}` is not in the report");
        };
        if check.passed() {
            return;
        }
        // One problem per line: a failed check often has several, and one long line of them
        // is hard to read in a test's output.
        let mut message = format!(
            "conformance check `{name}` failed for connector `{}`:\n",
            self.connector_id
        );
        for problem in check.detail.lines() {
            message.push_str(&format!("  - {problem}\n"));
        }
        let failed: Vec<&str> = check
            .assertions
            .iter()
            .filter(|(_, held)| !**held)
            .map(|(assertion, _)| assertion.as_str())
            .collect();
        if !failed.is_empty() {
            message.push_str(&format!("failed assertions: {}\n", failed.join(", ")));
        }
        if !check.artifacts.is_empty() {
            message.push_str(&format!("artifacts: {}\n", check.artifacts.join(", ")));
        }
        message.push_str(
            "the whole report: `ConformanceReport::to_json`, or the file under `report_dir()`",
        );
        panic!("{message}");
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance of `{}` (store: {}):",
            self.connector_id, self.store
        )?;
        for check in &self.checks {
            let status = match check.status {
                CheckStatus::Passed => "pass",
                CheckStatus::Failed => "FAIL",
                CheckStatus::NotApplicable => "n/a ",
            };
            writeln!(f, "  {status} {}: {}", check.name, indented(&check.detail))?;
        }
        Ok(())
    }
}

/// What a scenario found: its assertions, the artifacts they rest on, and notes for the detail.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    assertions: BTreeMap<String, bool>,
    artifacts: Vec<String>,
    /// Why each false assertion failed, in the order they were made.
    failures: Vec<String>,
    /// What the scenario could not exercise, or did in a way worth saying.
    notes: Vec<String>,
    /// A scenario found no example input to run: a failed check then says how to add one.
    missing_examples: bool,
    /// Required assertions the scenario could not exercise on a capability that needs them.
    unexercised: Vec<Unexercised>,
    /// How an assertion held that the detail should say, but that needs no one's attention (so
    /// not a note, which the summary prints on every run).
    qualifiers: Vec<String>,
    /// The capabilities whose handlers the scenario's calls reached ([`CheckResult::exercised`]).
    exercised: Vec<String>,
}

/// A required assertion a scenario could not exercise on one capability, and why.
#[derive(Clone, Debug)]
struct Unexercised {
    assertion: String,
    capability: String,
    why: String,
    /// Whether a waiver of the capability may turn it into a note: only when its call did not
    /// complete against the provider double, never for a missing example, a handler the host
    /// never ran, or a refusal of the suite's own making.
    waivable: bool,
}

impl Evidence {
    /// Records assertion `name`; a false one keeps `why` for the report.
    pub fn assert(&mut self, name: &str, holds: bool, why: impl FnOnce() -> String) {
        let entry = self.assertions.entry(name.to_owned()).or_insert(true);
        *entry &= holds;
        if !holds {
            self.failures.push(format!("{name}: {}", why()));
        }
    }

    /// How many assertions failed so far.
    pub(crate) fn failure_count(&self) -> usize {
        self.failures.len()
    }

    /// Records an artifact id the assertions rest on.
    pub fn artifact(&mut self, id: impl fmt::Display) {
        let id = id.to_string();
        if !id.trim().is_empty() && !self.artifacts.contains(&id) {
            self.artifacts.push(id);
        }
    }

    /// Adds a note to the report's detail: after the failures of a failed check, each line
    /// starting `note: `, so that it never reads as one of them.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Adds `how` to the detail of a passed check, after the count of assertions held: how an
    /// assertion held, where that is by construction rather than by what a call showed.
    pub(crate) fn qualify(&mut self, how: impl Into<String>) {
        self.qualifiers.push(how.into());
    }

    /// Records the capabilities whose handlers ran (the probe's records, in call order), once
    /// each.
    pub(crate) fn exercised(&mut self, capabilities: impl IntoIterator<Item = String>) {
        for capability in capabilities {
            if !self.exercised.contains(&capability) {
                self.exercised.push(capability);
            }
        }
    }

    /// Notes that no capability the scenario needs declares an example input (`what` says
    /// which and why that stops it); a failed check then ends with how to declare one.
    pub fn no_example(&mut self, what: impl Into<String>) {
        self.missing_examples = true;
        self.notes.push(what.into());
    }

    /// Records that `assertion` could not be exercised on `capability`, which needs it (its
    /// keyed call never completed, say): `why` says what happened instead. The assertion then
    /// fails, whatever it held on the calls that did run, unless the suite waives it for that
    /// capability ([`ConformanceSuite::with_unexercised_waiver`]), which makes it a note. Only
    /// the first reason per assertion and capability is kept; assertions one reason kept from
    /// being exercised on one capability share a line of the detail.
    ///
    /// Crate-private, like the conversion of evidence into a check: only the suite's own
    /// scenarios record evidence that takes effect.
    pub(crate) fn unexercised(
        &mut self,
        assertion: &str,
        capability: &str,
        why: impl Into<String>,
    ) {
        self.push_unexercised(assertion, capability, why.into(), true);
    }

    /// [`unexercised`](Self::unexercised), for a reason no waiver covers: the capability
    /// declares no example, or the host refused its call before the handler ran. Neither is the
    /// provider double's doing, and both are the author's to fix.
    pub(crate) fn unexercised_unwaivable(
        &mut self,
        assertion: &str,
        capability: &str,
        why: impl Into<String>,
    ) {
        self.push_unexercised(assertion, capability, why.into(), false);
    }

    fn push_unexercised(&mut self, assertion: &str, capability: &str, why: String, waivable: bool) {
        let known = self
            .unexercised
            .iter()
            .any(|u| u.assertion == assertion && u.capability == capability);
        if !known {
            self.unexercised.push(Unexercised {
                assertion: assertion.to_owned(),
                capability: capability.to_owned(),
                why,
                waivable,
            });
        }
    }

    /// The check, and the capabilities whose waivers turned something unexercised into a note.
    fn into_check(
        mut self,
        scenario: Scenario,
        waivers: &BTreeMap<String, String>,
    ) -> (CheckResult, BTreeSet<String>) {
        // An unexercised assertion is one the scenario requires or makes: a misspelt name would
        // add an assertion of its own (false, or true when waived) and leave the real one alone.
        for unexercised in &self.unexercised {
            debug_assert!(
                scenario
                    .required_assertions()
                    .contains(&unexercised.assertion.as_str())
                    || self.assertions.contains_key(&unexercised.assertion),
                "{scenario}: unexercised assertion `{}` is not one the scenario makes",
                unexercised.assertion
            );
        }
        // Assertions that one reason kept from being exercised on one capability share a line.
        let mut grouped: Vec<(Vec<String>, String, String, bool)> = Vec::new();
        for Unexercised {
            assertion,
            capability,
            why,
            waivable,
        } in std::mem::take(&mut self.unexercised)
        {
            match grouped
                .iter_mut()
                .find(|(_, c, w, v)| *c == capability && *w == why && *v == waivable)
            {
                Some((names, _, _, _)) => names.push(assertion),
                None => grouped.push((vec![assertion], capability, why, waivable)),
            }
        }
        // What could not be exercised comes first: it is usually why the rest looks as it does.
        let mut unexercised = Vec::new();
        let mut used = BTreeSet::new();
        let mut waived = BTreeSet::new();
        for (names, capability, why, waivable) in grouped {
            let listed = names.join(", ");
            match waivers.get(&capability).filter(|_| waivable) {
                Some(reason) => {
                    used.insert(capability.clone());
                    // Waived: it holds as far as the calls that ran showed (a scenario may have
                    // nothing else to say about it).
                    for name in names {
                        self.assertions.entry(name.clone()).or_insert(true);
                        waived.insert(name);
                    }
                    self.notes.push(format!(
                        "{listed} {} not exercised on `{capability}`, waived by the suite ({reason}): {why}",
                        if listed.contains(", ") { "were" } else { "was" }
                    ));
                }
                None => {
                    for name in names {
                        self.assertions.insert(name, false);
                    }
                    // A waiver covers only calls the provider double kept from completing.
                    let unwaived = if waivers.contains_key(&capability) {
                        format!(
                            " (the waiver of `{capability}` does not cover this: it covers only calls that did not complete against the provider double)"
                        )
                    } else {
                        String::new()
                    };
                    unexercised.push(format!("{listed}: not exercised: {why}{unwaived}"));
                }
            }
        }
        let mut problems: Vec<String> = scenario
            .required_assertions()
            .iter()
            .filter(|name| !self.assertions.contains_key(**name))
            .map(|name| format!("{name}: not asserted"))
            .collect();
        let unexercised_lines = unexercised.len();
        problems.extend(unexercised);
        problems.extend(self.failures.iter().cloned());
        // Every required assertion must be present and true; so must any extra one a scenario
        // makes (e.g. that example inputs produce the declared output).
        let all_held = scenario
            .required_assertions()
            .iter()
            .all(|name| self.assertions.get(*name) == Some(&true))
            && self.assertions.values().all(|held| *held);
        let has_artifact = !self.artifacts.is_empty();
        if !has_artifact {
            problems.push("the evidence names no artifact".to_owned());
        }
        // Failures first, then what the scenario could not exercise.
        problems.extend(self.notes.iter().map(|note| note_line(note)));
        let status = if all_held && has_artifact {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        };
        let detail = if status == CheckStatus::Passed {
            // Every assertion name asserted, the scenario's extra ones (`receivers_declared`,
            // `declared_output_produced`) included: all of them held.
            let held = if waived.is_empty() {
                format!("{} assertions held", self.assertions.len())
            } else {
                format!(
                    "{} assertions held, {} waived",
                    self.assertions.len() - waived.len(),
                    waived.len()
                )
            };
            // What ran: a check whose calls reached one handler of five says so (found by an
            // author trial: only notes named the capability a passing check exercised).
            let held = if self.exercised.is_empty() {
                held
            } else {
                let called: Vec<String> = self.exercised.iter().map(|c| format!("`{c}`")).collect();
                format!("{held}, handlers called: {}", called.join(", "))
            };
            let held = if self.qualifiers.is_empty() {
                held
            } else {
                format!("{held} ({})", self.qualifiers.join("; "))
            };
            passed_detail(held, &self.notes)
        } else {
            // The decoding hint goes on the first line that names the code, so it reads as
            // the explanation of that failure rather than of whichever line came last.
            // Not on a note: a waived note's code explains no failure.
            if let Some(line) = problems.iter_mut().find(|line| {
                !line.starts_with("note: ")
                    && line.contains(aip_connector::codes::PROVIDER_INVALID_RESPONSE)
            }) {
                line.push_str(INVALID_RESPONSE_HINT);
            }
            if unexercised_lines > 0 {
                problems.push(UNEXERCISED_HINT.to_owned());
            }
            if self.missing_examples {
                problems.push(MISSING_EXAMPLES_HINT.to_owned());
            }
            problems.join("\n")
        };
        let check = CheckResult {
            name: scenario.check_name(),
            status,
            detail,
            assertions: self.assertions,
            artifacts: self.artifacts,
            notes: self.notes,
            waived: waived.into_iter().collect(),
            exercised: self.exercised,
        };
        (check, used)
    }
}

/// The kind of reason a scenario could not start (its first clause, such as "the scenario's
/// store did not open"): the summary collapses reasons of one kind, whose texts differ in the
/// per-scenario store they name.
fn not_run_kind(reason: &str) -> &str {
    reason.split(": ").next().unwrap_or(reason)
}

/// How the detail of a scenario that could not start begins, before the reason.
const NOT_RUN: &str = "not run: ";

/// The assertion every scenario adds when the suite was told the connector has no provider
/// ([`ConformanceSuite::without_provider`]): the scenario's provider double received no request.
pub const LOCAL_AS_DECLARED: &str = "local_as_declared";

/// How long a scenario of a connector declared local waits, once it is done, for requests its
/// connector sends later (a sync task spawned by a handler, say) before its double is read.
const LOCAL_GRACE: Duration = Duration::from_millis(100);

/// The requests the scenario's provider double received, read after [`LOCAL_GRACE`].
async fn provider_requests_after_grace(harness: &Harness) -> Vec<String> {
    tokio::time::sleep(LOCAL_GRACE).await;
    harness
        .provider()
        .requests()
        .iter()
        .map(|request| format!("{} {}", request.method, request.path))
        .collect()
}

/// [`LOCAL_AS_DECLARED`]: every lenient "holds without a provider" of the scenario rests on the
/// connector having none, which each scenario checks on its own double, over all its calls,
/// whichever capability or task made the request. Only a contradiction is recorded, so a
/// scenario's count of assertions held is the same with and without the declaration.
fn local_as_declared(evidence: &mut Evidence, reason: &str, contacted: &[String]) {
    if contacted.is_empty() {
        return;
    }
    evidence.assert(LOCAL_AS_DECLARED, false, || {
        const SHOWN: usize = 5;
        let mut shown = contacted[..contacted.len().min(SHOWN)].join(", ");
        if contacted.len() > SHOWN {
            shown.push_str(", …");
        }
        format!(
            "the suite was told the connector has no provider ({reason}), yet the provider double received {} request(s) during this scenario ({shown}): its assertions that hold without a provider cannot, so remove `without_provider` and let the scenarios reach the provider",
            contacted.len()
        )
    });
}

/// A multi-line detail, its continuation lines indented under the check's line.
fn indented(detail: &str) -> String {
    detail.replace('\n', "\n      ")
}

/// The last line of a failed check that found no example input to run.
const MISSING_EXAMPLES_HINT: &str = "hint: the suite invokes each capability with the inputs \
     its `#[capability(examples = [r#\"{…}\"#])]` declares; declare at least one valid input \
     per capability";

/// A line near the end of a failed check with an assertion that was not exercised (and not
/// waived): what the author can do about it.
const UNEXERCISED_HINT: &str = "hint: an assertion is exercised on calls that complete: each \
     capability's first example must complete against the provider double; make the example \
     valid for a successful call, shape the double's answers \
     (`ConformanceSuite::with_provider_setup`), or, for a capability whose calls cannot reach a \
     double, `ConformanceSuite::with_unexercised_waiver(capability, reason)`";

/// Appended to the first line of a failed check that names `provider.invalid_response`: most
/// often the connector decodes the real API's responses and cannot read the double's generic
/// answers.
const INVALID_RESPONSE_HINT: &str = " (hint: `provider.invalid_response` here usually means the \
     connector could not decode the provider double's generic answer `{operation_id, route, …}`; \
     answer in the real API's shape with `ConformanceSuite::with_provider_setup(|provider| \
     provider.answer(route, …))`)";

/// Stack of the thread and the workers a conformance run uses (see [`ConformanceSuite::run`]).
const RUN_STACK_BYTES: usize = 32 * 1024 * 1024;

type Factory = dyn Fn(&Environment) -> Arc<dyn Connector> + Send + Sync;

/// What [`ConformanceSuite::with_webhook`] builds a scenario's webhook receiver with.
pub(crate) type WebhookFactory =
    dyn Fn(&Environment, Arc<dyn IdempotencyStore>) -> WebhookReceiver + Send + Sync;

/// What [`ConformanceSuite::with_provider_setup`] runs on each scenario's provider double.
type ProviderSetup = dyn Fn(&ProviderHandle) + Send + Sync;

/// A conformance run over one connector type. The factory builds a fresh connector for each
/// scenario, pointed at that scenario's provider double (`env.provider_url()`).
///
/// Every scenario's host serves the tenant [`TENANT`] and acts as an external account:
/// [`default_external_account`] unless [`with_external_account`](Self::with_external_account)
/// names another.
#[derive(Clone)]
pub struct ConformanceSuite {
    factory: Arc<Factory>,
    external_account: ExternalAccountRef,
    provider_setup: Option<Arc<ProviderSetup>>,
    webhooks: Vec<Arc<WebhookFactory>>,
    scenario_time_limit: Duration,
    required_profiles: Vec<ProfileId>,
    boundary: Option<ConnectorBoundary>,
    stores: ConformanceStore,
    /// Capability id → why its unexercised assertions are notes, not failures.
    unexercised_waivers: BTreeMap<String, String>,
    /// Why the connector has no provider, when the suite was told so
    /// ([`ConformanceSuite::without_provider`]).
    without_provider: Option<String>,
    /// The report file's name, when not the connector's ([`ConformanceSuite::with_report_name`]).
    report_name: Option<String>,
    /// Set by [`run`](Self::run): what its runtime's threads log outside any capture, such as a
    /// task a handler spawned with a plain `tokio::spawn` (an HR author trial's handler logged
    /// the input from one, and `sensitive_fields_redacted` never saw it).
    ambient_logs: Option<LogCapture>,
}

/// How long one scenario may run before its check fails as stuck, unless
/// [`ConformanceSuite::with_scenario_time_limit`] sets another limit: five minutes, far more than
/// a scenario of a connector whose calls answer within their deadlines needs.
pub const DEFAULT_SCENARIO_TIME_LIMIT: Duration = Duration::from_secs(300);

impl fmt::Debug for ConformanceSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConformanceSuite")
            .field("external_account", &self.external_account)
            .field("scenario_time_limit", &self.scenario_time_limit)
            .field("stores", &self.stores)
            .field("unexercised_waivers", &self.unexercised_waivers)
            .field("without_provider", &self.without_provider)
            .field("report_name", &self.report_name)
            .finish_non_exhaustive()
    }
}

impl ConformanceSuite {
    /// A suite over the connectors `factory` builds.
    ///
    /// The factory is also called once with an environment that has no provider behind it
    /// (`provider_url` `http://127.0.0.1:9`), to read the connector's definition: it must not
    /// contact the provider while building.
    pub fn new<C, F>(factory: F) -> Self
    where
        C: Connector,
        F: Fn(&Environment) -> C + Send + Sync + 'static,
    {
        Self {
            factory: Arc::new(move |env| Arc::new(factory(env)) as Arc<dyn Connector>),
            external_account: default_external_account(),
            provider_setup: None,
            webhooks: Vec::new(),
            scenario_time_limit: DEFAULT_SCENARIO_TIME_LIMIT,
            required_profiles: Vec::new(),
            boundary: None,
            stores: ConformanceStore::sqlite(),
            unexercised_waivers: BTreeMap::new(),
            without_provider: None,
            report_name: None,
            ambient_logs: None,
        }
    }

    /// Requires the manifest to advertise `profile` (check `discovery.profile_set`), as a
    /// gateway that reaches connectors through one profile does.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Calendar {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Calendar {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "calendar")]
    /// # impl Calendar {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Calendar::new(env.provider_url()))
    ///     .with_required_profile("aip.mcp.compat.v1");
    /// ```
    #[must_use]
    pub fn with_required_profile(mut self, profile: impl Into<ProfileId>) -> Self {
        self.required_profiles.push(profile.into());
        self
    }

    /// Checks the connector against the boundary a deployment sets for it (upstream RFC 0003,
    /// check `rfc0003.connector_boundary`): the profile it is reached through, the prefix of
    /// its capability ids and the metadata each capability's binding for that profile carries.
    /// Without a boundary the check does not apply.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # use aip_connector_testkit::conformance::ConnectorBoundary;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Calendar {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Calendar {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "calendar")]
    /// # impl Calendar {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Calendar::new(env.provider_url()))
    ///     .with_connector_boundary(
    ///         ConnectorBoundary::new("calendar", "aip.mcp.compat.v1", "cap:calendar:")
    ///             .require_binding_metadata("tool_name"),
    ///     );
    /// ```
    #[must_use]
    pub fn with_connector_boundary(mut self, boundary: ConnectorBoundary) -> Self {
        self.boundary = Some(boundary);
        self
    }

    /// Fails a scenario that runs longer than `limit` (default [`DEFAULT_SCENARIO_TIME_LIMIT`])
    /// instead of waiting for it: each call the scenarios make waits as long as the host lets
    /// it (the action's deadline, at most the contract's SLA, 60 s by default), so a handler that
    /// hangs until its deadline on every call makes a scenario slow, and the run takes minutes
    /// before it says why. A scenario over the limit is dropped where it stands; its check fails
    /// saying so, with none of its assertions.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # use std::time::Duration;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Tickets {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Tickets {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "tickets")]
    /// # impl Tickets {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let report = ConformanceSuite::new(|env| Tickets::new(env.provider_url()))
    ///     .with_scenario_time_limit(Duration::from_secs(60))
    ///     .run();
    /// ```
    #[must_use]
    pub fn with_scenario_time_limit(mut self, limit: Duration) -> Self {
        self.scenario_time_limit = limit;
        self
    }

    /// Runs `setup` on each scenario's provider double when it starts, before the connector is
    /// built: typically [`ProviderHandle::answer`], so that a connector that decodes the real
    /// API's responses strictly reads answers in that shape instead of the double's generic
    /// `{operation_id, route, …}`. The scenarios still script their faults on top.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # use serde_json::json;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Tickets {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Tickets {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "tickets")]
    /// # impl Tickets {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Tickets::new(env.provider_url()))
    ///     .with_provider_setup(|provider| {
    ///         provider.answer("/tickets", |request| json!({ "id": request.operation_id() }));
    ///     });
    /// ```
    #[must_use]
    pub fn with_provider_setup(
        mut self,
        setup: impl Fn(&ProviderHandle) + Send + Sync + 'static,
    ) -> Self {
        self.provider_setup = Some(Arc::new(setup));
        self
    }

    /// Runs the scenarios on hosts that act as `account` (their `Deployment.external_account`)
    /// instead of [`default_external_account`]: the partition of `external_account`-scoped
    /// idempotency keys (`ExternalAccount:<system>:<id>:<key>`, hence the keys the provider
    /// receives) and the account the handlers see in the action's trusted identity. The factory
    /// reads it as [`Environment::external_account`].
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # use aip_connector::host::ExternalAccountRef;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Payments {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Payments {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "payments")]
    /// # impl Payments {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Payments::new(env.provider_url()))
    ///     .with_external_account(ExternalAccountRef {
    ///         id: "acct_test_9".to_owned(),
    ///         system: "stripe".to_owned(),
    ///     });
    /// ```
    #[must_use]
    pub fn with_external_account(mut self, account: ExternalAccountRef) -> Self {
        self.external_account = account;
        self
    }

    /// Adds a webhook receiver of the connector, for the `webhook_security` scenario, which a
    /// manifest listing `aip.http.webhook.v1` requires. `receiver` builds it as the deployment
    /// does, on the store it is given (the scenario host's store, opened anew to play a
    /// restart) and, for a handler that calls the provider, pointed at `env.provider_url()`.
    /// Declare an example body with `WebhookReceiverBuilder::example`: the scenario signs and
    /// delivers it, then checks that a tampered copy, a stale or future-dated one and a replay
    /// (also after the restart) are refused and claim nothing.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Calendar {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Calendar {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "calendar")]
    /// # impl Calendar {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// # mod calendar {
    /// #     use std::sync::Arc;
    /// #     use aip_connector::model::ConnectorFailure;
    /// #     use aip_connector::store::IdempotencyStore;
    /// #     use aip_connector::webhook::{StandardWebhooks, WebhookDelivery, WebhookReceiver, WebhookSecret};
    /// #     async fn on_booking(_delivery: WebhookDelivery) -> Result<(), ConnectorFailure> {
    /// #         Ok(())
    /// #     }
    /// #     pub fn bookings_receiver(_provider_url: &str, store: Arc<dyn IdempotencyStore>) -> WebhookReceiver {
    /// #         WebhookReceiver::builder("bookings", StandardWebhooks)
    /// #             .secret(WebhookSecret::standard("whsec_c2VjcmV0").expect("a whsec_ secret"))
    /// #             .store(store)
    /// #             .handler(on_booking)
    /// #             .build()
    /// #             .expect("a complete receiver")
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Calendar::new(env.provider_url()))
    ///     .with_webhook(|env, store| calendar::bookings_receiver(env.provider_url(), store));
    /// ```
    #[must_use]
    pub fn with_webhook(
        mut self,
        receiver: impl Fn(&Environment, Arc<dyn IdempotencyStore>) -> WebhookReceiver
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.webhooks.push(Arc::new(receiver));
        self
    }

    /// Runs each scenario's host on `stores` instead of a temporary SQLite file: with
    /// `ConformanceStore::postgres` (feature `postgres`), on a schema of its own in the
    /// PostgreSQL database the deployment's replicas share, dropped when the scenario ends. The
    /// scenarios are the same; what changes is the store that keeps their idempotency records,
    /// approvals and transactions, and that a restart opens anew.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # use aip_connector_testkit::conformance::ConformanceStore;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Billing {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Billing {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "billing")]
    /// # impl Billing {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// # // `ConformanceStore::postgres` needs the feature `postgres`.
    /// # #[cfg(feature = "postgres")]
    /// # fn demo() -> Result<(), std::env::VarError> {
    /// let suite = ConformanceSuite::new(|env| Billing::new(env.provider_url()))
    ///     .with_store(ConformanceStore::postgres(std::env::var("DATABASE_URL")?));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_store(mut self, stores: ConformanceStore) -> Self {
        self.stores = stores;
        self
    }

    /// Names the report file [`write_report`](Self::write_report) writes after `name` instead
    /// of the connector id (the store's suffix still follows it). For two suites of one
    /// connector on one store (two external accounts, say), whose reports would otherwise
    /// overwrite each other. A blank name keeps the connector id.
    #[must_use]
    pub fn with_report_name(mut self, name: impl Into<String>) -> Self {
        self.report_name = Some(name.into());
        self
    }

    /// The name (without `.json`) of the file [`write_report`](Self::write_report) writes
    /// `report` to: the name given to [`with_report_name`](Self::with_report_name), else the
    /// connector id, with characters other than ASCII letters, digits, `-` and `_` replaced by
    /// `_`; then, on PostgreSQL, `.postgres`. The runs of one connector on the default SQLite
    /// store and on PostgreSQL so keep two reports (found by an author trial: the last run's
    /// overwrote the other's), and no name on one store can be another's on the other.
    pub fn report_name(&self, report: &ConformanceReport) -> String {
        let name = self
            .report_name
            .as_deref()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or(&report.connector_id);
        file_name_part(name) + self.stores.report_suffix()
    }

    /// Writes `report` (this suite's) as `<dir>/<report name>.json`
    /// ([`report_name`](Self::report_name)), creating `dir`; returns the path.
    pub fn write_report(&self, report: &ConformanceReport, dir: &Path) -> std::io::Result<PathBuf> {
        report.write_named(dir, &self.report_name(report))
    }

    /// Accepts that the scenarios cannot exercise some required assertions on `capability`
    /// (for `reason`, which the report quotes): each one that could not be exercised becomes a
    /// note of its check instead of failing it.
    ///
    /// A required assertion is exercised on the calls it is about: `duplicate_suppressed` on a
    /// keyed call that completed, `resume_once` on an approved call that completed,
    /// `credential_handle_opaque` on a handler call that received a credential, and so on
    /// (docs/testkit.md, "A check passes on what it exercised"). When a capability's calls
    /// never get there, its check fails, saying what was not exercised and with which error its
    /// calls answered. Most often they fail because the connector cannot read the provider
    /// double's generic answers: answer in the API's shape with
    /// [`with_provider_setup`](Self::with_provider_setup) instead. Waive only a capability
    /// whose calls cannot complete against a double at all (a provider reached by another
    /// protocol than HTTP, say), and test it elsewhere.
    ///
    /// A waiver covers only calls that did not complete against the provider double: not a
    /// capability without an example, nor a call the host refused before its handler ran
    /// (those still fail, saying the waiver does not cover them), and never an assertion that
    /// was exercised and did not hold. The capability id must be the manifest's exactly: the
    /// report then has a check [`UNEXERCISED_WAIVERS`] that fails for a waiver naming no
    /// capability of the manifest (with the closest ids) and notes a waiver that waived nothing
    /// in the run.
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # struct Ledger {
    /// #     api: ProviderClient,
    /// # }
    /// # impl Ledger {
    /// #     fn new(provider_url: &str) -> Self {
    /// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
    /// #     }
    /// # }
    /// # #[connector(id = "ledger")]
    /// # impl Ledger {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|env| Ledger::new(env.provider_url()))
    ///     .with_unexercised_waiver(
    ///         "cap:ledger:settle_batch",
    ///         "settles over the bank's SFTP drop; covered by tests/settlement.rs",
    ///     );
    /// ```
    #[must_use]
    pub fn with_unexercised_waiver(
        mut self,
        capability: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        self.unexercised_waivers
            .insert(capability.into(), reason.into());
        self
    }

    /// Declares that the connector has no provider: its work is local (an in-memory or
    /// embedded store, a computation), so no provider failure can be provoked and no answer
    /// lost. When no capability makes a provider request, the assertions that need one
    /// (`retry_exhaustion`'s, `protocol_fields_preserved`, `error_secrets_redacted`,
    /// `reconnect_cursor_resumed`, and `uncertain_outcome_reconciled` when no capability
    /// declares `reconcile`) then hold with a note quoting `reason`, instead of failing, and so
    /// does the part of `compensation_governed` that looks for the provider request undoing the
    /// effect. A reconcilable write's answers are lost by the suite itself, once after its
    /// handler ran and once before, and its reconciliation must tell the two apart
    /// (`reconcile_before_retry`, `uncertain_outcome_reconciled`). Every other assertion is
    /// checked as usual. The declaration is checked: every scenario whose
    /// provider double received a request, from any capability or from a task a handler
    /// spawned, fails its extra assertion [`LOCAL_AS_DECLARED`], and `errors_uncertain_outcomes`
    /// fails when a capability declares `external_network`. (A connector built on an in-memory fake of a remote API is not one: point it
    /// at [`Environment::provider_url`].)
    ///
    /// ```no_run
    /// # use aip_connector::prelude::*;
    /// # use aip_connector_testkit::conformance::ConformanceSuite;
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct Lookup {
    /// #     id: String,
    /// # }
    /// # #[derive(Serialize, Deserialize, JsonSchema)]
    /// # struct Record {
    /// #     id: String,
    /// # }
    /// # #[derive(Default)]
    /// # struct Notes;
    /// # #[connector(id = "notes")]
    /// # impl Notes {
    /// #     /// Looks a record up.
    /// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    /// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
    /// #         Ok(Record { id: input.id })
    /// #     }
    /// # }
    /// let suite = ConformanceSuite::new(|_env| Notes::default())
    ///     .without_provider("notes live in the process's memory");
    /// ```
    #[must_use]
    pub fn without_provider(mut self, reason: impl Into<String>) -> Self {
        self.without_provider = Some(reason.into());
        self
    }

    /// The external account the scenarios' hosts act as.
    pub fn external_account(&self) -> &ExternalAccountRef {
        &self.external_account
    }

    /// Runs every check on a runtime of its own (call it from a plain `#[test]`).
    ///
    /// # Panics
    ///
    /// When no Tokio runtime can be started, or when a scenario's store opened and then no
    /// longer opens for its restart. A connector the host refuses (an example that fails its
    /// input schema, say) or a store that does not open at all (a PostgreSQL server that is
    /// down) is not a panic: every required scenario fails saying so, and the manifest checks
    /// run as usual.
    pub fn run(&self) -> ConformanceReport {
        // The scenarios drive the whole host pipeline; in debug builds their futures are large
        // enough to overflow a test thread's default 2 MiB stack, so the run gets a thread (and
        // worker threads) of its own with room to spare.
        //
        // Every thread of the runtime (workers, blocking pool, this one) logs into the ambient
        // capture unless a call's own capture is attached, so a task a handler spawns is seen.
        let ambient = LogCapture::new();
        let suite = Self {
            ambient_logs: Some(ambient.clone()),
            ..self.clone()
        };
        std::thread::Builder::new()
            .name("aip-conformance".to_owned())
            .stack_size(RUN_STACK_BYTES)
            .spawn(move || {
                let _ambient = ambient.set_default();
                let on_thread = ambient.clone();
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_stack_size(RUN_STACK_BYTES)
                    .on_thread_start(move || {
                        // The thread's default for its whole life: the guard is never dropped.
                        std::mem::forget(on_thread.set_default());
                    })
                    .enable_all()
                    .build()
                    .expect("the conformance runtime starts")
                    .block_on(suite.run_async())
            })
            .expect("the conformance thread starts")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Runs every check.
    pub async fn run_async(&self) -> ConformanceReport {
        let probe_env = Environment::detached(self.external_account.clone());
        let connector = (self.factory)(&probe_env);
        let definition = connector.definition().clone();
        let manifest = definition.manifest();
        let mut checks = self.discovery_checks(&definition, &manifest);
        checks.push(admission_check(&definition, &manifest));
        checks.push(contract_check(&manifest));
        let mut waived = BTreeSet::new();
        for scenario in Scenario::ALL {
            let (check, used) = self.run_scenario(scenario, &manifest).await;
            checks.push(check);
            waived.extend(used);
        }
        if !self.unexercised_waivers.is_empty() {
            checks.push(waivers_check(
                &self.unexercised_waivers,
                &definition,
                &waived,
            ));
        }
        ConformanceReport {
            connector_id: definition.id.clone(),
            store: self.stores.describe().to_owned(),
            checks,
        }
    }

    /// Runs one scenario (executed when required, else not applicable).
    pub async fn scenario_check(&self, scenario: Scenario, manifest: &Manifest) -> CheckResult {
        self.run_scenario(scenario, manifest).await.0
    }

    /// [`scenario_check`](Self::scenario_check), with the capabilities whose waivers it used.
    async fn run_scenario(
        &self,
        scenario: Scenario,
        manifest: &Manifest,
    ) -> (CheckResult, BTreeSet<String>) {
        // Receivers given to the suite are checked even when the manifest forgot to publish
        // them: `receivers_declared` then says so, rather than the check not applying.
        let given_receivers = scenario == Scenario::WebhookSecurity && !self.webhooks.is_empty();
        if !scenario.required_by(manifest) && !given_receivers {
            let check = CheckResult {
                name: scenario.check_name(),
                status: CheckStatus::NotApplicable,
                detail: format!(
                    "not required by this manifest: it runs when {}",
                    scenario.required_when()
                ),
                assertions: BTreeMap::new(),
                artifacts: Vec::new(),
                notes: Vec::new(),
                waived: Vec::new(),
                exercised: Vec::new(),
            };
            return (check, BTreeSet::new());
        }
        // Only the scenario that runs next reads the runtime's lines (from where it starts).
        if let Some(ambient) = &self.ambient_logs {
            ambient.clear();
        }
        let harness = match Harness::start(
            Arc::clone(&self.factory),
            self.external_account.clone(),
            self.provider_setup.as_deref(),
            self.webhooks.clone(),
            &self.stores,
        )
        .await
        {
            Ok(harness) => harness
                .with_waived(self.unexercised_waivers.keys().cloned().collect())
                .with_no_provider(self.without_provider.clone())
                .with_ambient_logs(self.ambient_logs.clone()),
            // Every scenario needs a host; the manifest checks do not, and still run.
            Err(error) => {
                return (
                    CheckResult {
                        name: scenario.check_name(),
                        status: CheckStatus::Failed,
                        detail: format!("{NOT_RUN}{error}"),
                        assertions: BTreeMap::new(),
                        artifacts: Vec::new(),
                        notes: Vec::new(),
                        waived: Vec::new(),
                        exercised: Vec::new(),
                    },
                    BTreeSet::new(),
                );
            }
        };
        // A panic (the suite's own bug, or a store that stopped answering) fails this check,
        // not the whole run, and the scenario's store is removed all the same.
        let running = std::panic::AssertUnwindSafe(scenarios::run(scenario, &harness));
        let outcome = tokio::time::timeout(
            self.scenario_time_limit,
            futures_util::FutureExt::catch_unwind(running),
        )
        .await;
        let contacted = match &self.without_provider {
            Some(_) => provider_requests_after_grace(&harness).await,
            None => Vec::new(),
        };
        let exercised = harness
            .probe()
            .records()
            .into_iter()
            .map(|r| r.capability_id);
        let exercised: Vec<String> = exercised.collect();
        harness.finish().await;
        let check = match outcome {
            Ok(Ok(mut evidence)) => {
                evidence.exercised(exercised);
                if let Some(reason) = &self.without_provider {
                    local_as_declared(&mut evidence, reason, &contacted);
                }
                return evidence.into_check(scenario, &self.unexercised_waivers);
            }
            Ok(Err(panic)) => CheckResult {
                name: scenario.check_name(),
                status: CheckStatus::Failed,
                detail: format!(
                    "the scenario panicked: {}",
                    panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)")
                ),
                assertions: BTreeMap::new(),
                artifacts: Vec::new(),
                notes: Vec::new(),
                waived: Vec::new(),
                exercised: Vec::new(),
            },
            Err(_) => CheckResult {
                name: scenario.check_name(),
                status: CheckStatus::Failed,
                detail: format!(
                    "the scenario did not finish within {:?} and was stopped (`ConformanceSuite::with_scenario_time_limit`): some call waited for a handler until its deadline, or kept being retried; run it alone with a longer limit to see its assertions",
                    self.scenario_time_limit
                ),
                assertions: BTreeMap::new(),
                artifacts: Vec::new(),
                notes: Vec::new(),
                waived: Vec::new(),
                exercised: Vec::new(),
            },
        };
        (check, BTreeSet::new())
    }
}

impl ConformanceSuite {
    /// Upstream's discovery and connector checks on the published manifest, in upstream's
    /// relative order: `discovery.manifest`, `discovery.profile_set`, `discovery.profile_bindings`,
    /// `connector.manifest`, `rfc0003.connector_boundary`.
    fn discovery_checks(
        &self,
        definition: &aip_connector::ConnectorDefinition,
        manifest: &Manifest,
    ) -> Vec<CheckResult> {
        let artifacts = || vec![format!("manifest:{}", definition.id)];
        let mut checks = vec![
            problems_check(
                discovery::DISCOVERY_MANIFEST,
                discovery::manifest_problems(manifest),
                "the manifest has a version, profiles, and a name and object input schema per capability",
                artifacts(),
            ),
            problems_check(
                discovery::DISCOVERY_PROFILE_SET,
                discovery::profile_set_problems(manifest, &self.required_profiles),
                &format!(
                    "the manifest advertises {} profile(s){}",
                    manifest.profiles.len(),
                    if self.required_profiles.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", including every required one ({})",
                            join(&self.required_profiles)
                        )
                    }
                ),
                artifacts(),
            ),
            problems_check(
                discovery::DISCOVERY_PROFILE_BINDINGS,
                discovery::profile_binding_problems(manifest),
                &format!(
                    "each advertised profile says where it is served ({})",
                    join(&manifest.profiles)
                ),
                artifacts(),
            ),
            with_notes(
                problems_check(
                    discovery::CONNECTOR_MANIFEST,
                    discovery::connector_manifest_problems(manifest, &definition.id),
                    "`compatibility` names the connector and the manifest offers a surface",
                    artifacts(),
                ),
                undescribed_capabilities(manifest),
            ),
        ];
        checks.push(match &self.boundary {
            Some(boundary) => problems_check(
                discovery::CONNECTOR_BOUNDARY,
                discovery::connector_boundary_problems(manifest, boundary),
                &format!(
                    "the connector stays inside its boundary: `{}`, ids under `{}`",
                    boundary.connector_profile, boundary.capability_id_prefix
                ),
                artifacts(),
            ),
            None => CheckResult {
                name: discovery::CONNECTOR_BOUNDARY.to_owned(),
                status: CheckStatus::NotApplicable,
                detail:
                    "no boundary was set: it runs with `ConformanceSuite::with_connector_boundary`"
                        .to_owned(),
                assertions: BTreeMap::new(),
                artifacts: Vec::new(),
                notes: Vec::new(),
                waived: Vec::new(),
                exercised: Vec::new(),
            },
        });
        checks
    }
}

/// Notes of callable capabilities without a description: agents and MCP clients choose among
/// capabilities by description, and without one they see only the name (an author trial found
/// the fallback silent).
fn undescribed_capabilities(manifest: &Manifest) -> Vec<String> {
    manifest
        .capabilities
        .iter()
        .filter(|c| c.is_callable())
        .filter(|c| c.description.as_deref().is_none_or(|d| d.trim().is_empty()))
        .map(|c| {
            format!(
                "capability `{}` has no description (the doc comment of its handler): agents and MCP tool lists show only its name `{}`",
                c.id, c.name
            )
        })
        .collect()
}

/// `check` with `notes` added: after its detail when it passed, as its `notes` either way.
fn with_notes(mut check: CheckResult, notes: Vec<String>) -> CheckResult {
    if notes.is_empty() {
        return check;
    }
    check.detail = if check.status == CheckStatus::Failed {
        let lines: Vec<String> = notes.iter().map(|note| note_line(note)).collect();
        format!("{}\n{}", check.detail, lines.join("\n"))
    } else {
        passed_detail(check.detail, &notes)
    };
    check.notes = notes;
    check
}

/// A passed check's detail: what held, then its notes after `; `.
fn passed_detail(held: String, notes: &[String]) -> String {
    if notes.is_empty() {
        held
    } else {
        format!("{held}; {}", notes.join("; "))
    }
}

/// A note as a line of a failed check's detail, after its failures: marked, so that it never
/// reads as one of them.
fn note_line(note: &str) -> String {
    format!("note: {note}")
}

fn join(profiles: &[ProfileId]) -> String {
    profiles
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The [`UNEXERCISED_WAIVERS`] check: every waiver names a capability of the manifest (else it
/// fails, naming the closest ids); one that waived nothing in this run is noted.
fn waivers_check(
    waivers: &BTreeMap<String, String>,
    definition: &aip_connector::ConnectorDefinition,
    used: &BTreeSet<String>,
) -> CheckResult {
    let ids: Vec<&str> = definition
        .capabilities
        .iter()
        .map(|c| c.id().as_str())
        .collect();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for (capability, reason) in waivers {
        if !ids.contains(&capability.as_str()) {
            let mut closest: Vec<(usize, &str)> = ids
                .iter()
                .map(|id| (edit_distance(capability, id), *id))
                .collect();
            closest.sort();
            let named: Vec<String> = closest
                .iter()
                .take(3)
                .map(|(_, id)| format!("`{id}`"))
                .collect();
            problems.push(format!(
                "the waiver of `{capability}` ({reason}) names no capability of the manifest; the closest ids: {}",
                if named.is_empty() {
                    "none (the manifest has no capabilities)".to_owned()
                } else {
                    named.join(", ")
                }
            ));
        } else if !used.contains(capability) {
            notes.push(format!(
                "the waiver of `{capability}` ({reason}) waived nothing in this run: no call of it was kept from completing by the provider double; remove the waiver if it is no longer needed"
            ));
        }
    }
    let status = if problems.is_empty() {
        CheckStatus::Passed
    } else {
        CheckStatus::Failed
    };
    let detail = if problems.is_empty() {
        passed_detail(
            format!(
                "{} waiver(s) name capabilities of the manifest",
                waivers.len()
            ),
            &notes,
        )
    } else {
        problems
            .iter()
            .cloned()
            .chain(notes.iter().map(|n| note_line(n)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    CheckResult {
        name: UNEXERCISED_WAIVERS.to_owned(),
        status,
        detail,
        assertions: BTreeMap::new(),
        artifacts: vec![format!("manifest:{}", definition.id)],
        notes,
        waived: Vec::new(),
        exercised: Vec::new(),
    }
}

/// The Levenshtein distance between `a` and `b`, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substituted.min(previous + 1).min(row[j] + 1);
        }
    }
    row[b.len()]
}

/// A check of the discovery family: passed when `problems` is empty, else failed with one line
/// per issue, each saying where in the manifest it is (`message (at /pointer)`).
fn problems_check(
    name: &str,
    problems: Vec<Issue>,
    passed: &str,
    artifacts: Vec<String>,
) -> CheckResult {
    CheckResult {
        name: name.to_owned(),
        status: if problems.is_empty() {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        },
        detail: if problems.is_empty() {
            passed.to_owned()
        } else {
            problems
                .iter()
                .map(|issue| match issue.path.as_str() {
                    "" => issue.message.clone(),
                    path => format!("{} (at {path})", issue.message),
                })
                .collect::<Vec<_>>()
                .join("\n")
        },
        assertions: BTreeMap::new(),
        artifacts,
        notes: Vec::new(),
        waived: Vec::new(),
        exercised: Vec::new(),
    }
}

fn admission_check(
    definition: &aip_connector::ConnectorDefinition,
    manifest: &Manifest,
) -> CheckResult {
    let policy = AdmissionPolicy {
        require_implementation_claims: true,
        ..AdmissionPolicy::upstream()
    };
    let support = definition.implementation_support();
    let (status, detail) = match admit_manifest(manifest, &policy, &support) {
        Ok(_) => (
            CheckStatus::Passed,
            "the manifest passes full admission with the derived implementation support".to_owned(),
        ),
        Err(report) => (CheckStatus::Failed, report.to_string()),
    };
    CheckResult {
        name: ATOMIC_MANIFEST_ADMISSION.to_owned(),
        status,
        detail,
        assertions: BTreeMap::new(),
        artifacts: vec![format!("manifest:{}", definition.id)],
        notes: Vec::new(),
        waived: Vec::new(),
        exercised: Vec::new(),
    }
}

/// Upstream's enterprise contract rules: this SDK's contract invariants and governance lints
/// (which cover them), honouring the waivers the manifest publishes with their reasons.
fn contract_check(manifest: &Manifest) -> CheckResult {
    let mut problems = Vec::new();
    let mut issues = Vec::new();
    let waivers = aip_connector::rules::waivers_from_manifest(manifest, &mut issues);
    for capability in &manifest.capabilities {
        aip_connector::rules::contract_invariants(capability, "", &mut issues);
        aip_connector::rules::lints(capability, &waivers, "", &mut issues);
        problems.extend(
            issues
                .drain(..)
                .map(|issue| format!("{} ({}): {}", capability.id, issue.code, issue.message)),
        );
        if let Some(transaction) = capability
            .contract
            .as_ref()
            .and_then(|c| c.transaction.as_ref())
            && transaction
                .supported_modes
                .contains(&TransactionMode::Commit)
            && !transaction.supported_modes.contains(&TransactionMode::Plan)
        {
            problems.push(format!(
                "{}: commit support must also publish plan support",
                capability.id
            ));
        }
    }
    problems.dedup();
    CheckResult {
        name: ENTERPRISE_CAPABILITY_CONTRACT.to_owned(),
        status: if problems.is_empty() {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        },
        detail: if problems.is_empty() {
            format!("{} capability contracts pass", manifest.capabilities.len())
        } else {
            problems.join("\n")
        },
        assertions: BTreeMap::new(),
        artifacts: manifest
            .capabilities
            .iter()
            .map(|c| format!("capability:{}", c.id))
            .collect(),
        notes: Vec::new(),
        waived: Vec::new(),
        exercised: Vec::new(),
    }
}

/// `name` as a part of a file name: characters other than ASCII letters, digits, `-` and `_`
/// (dots and path separators included) become `_`.
fn file_name_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The directory reports are written to: `<target dir>/aip-conformance`, where the target dir
/// is `CARGO_TARGET_DIR` when set, else the target directory the running test binary sits in
/// (`<target dir>/<profile>/deps/<test>`, whatever the directory is called: a shared
/// `CARGO_TARGET_DIR` set in `.cargo/config.toml` is not in the test's environment), else
/// `./target`; made absolute against the current directory, so the summary's `report:` line
/// can be opened from anywhere.
pub fn report_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            let deps = exe.parent()?;
            (deps.file_name()? == "deps").then(|| deps.parent()?.parent().map(Path::to_path_buf))?
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    let target = if target.is_relative() {
        std::env::current_dir().map_or(target.clone(), |dir| dir.join(&target))
    } else {
        target
    };
    target.join("aip-conformance")
}

/// One line in a connector crate's tests: one `#[test]` per conformance check, sharing one run,
/// plus the JSON report under [`report_dir`]. The argument is the connector factory given to
/// [`ConformanceSuite::new`]:
///
/// ```no_run
/// # use aip_connector::prelude::*;
/// # use aip_connector_testkit::conformance::ConformanceSuite;
/// # #[derive(Deserialize, JsonSchema)]
/// # struct Lookup {
/// #     id: String,
/// # }
/// # #[derive(Serialize, Deserialize, JsonSchema)]
/// # struct Record {
/// #     id: String,
/// # }
/// # struct Calendar {
/// #     api: ProviderClient,
/// # }
/// # impl Calendar {
/// #     fn new(provider_url: &str) -> Self {
/// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
/// #     }
/// # }
/// # #[connector(id = "calendar")]
/// # impl Calendar {
/// #     /// Looks a record up.
/// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
/// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
/// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
/// #     }
/// # }
/// # fn main() {}
/// aip_connector_testkit::conformance_tests!(|env| Calendar::new(env.provider_url()));
/// ```
///
/// or, after `suite =`, a configured [`ConformanceSuite`] (evaluated inside the generated
/// module, which imports the enclosing one and `ConformanceSuite` itself):
///
/// ```no_run
/// # use aip_connector::prelude::*;
/// # use aip_connector_testkit::conformance::ConformanceSuite;
/// # use aip_connector::host::ExternalAccountRef;
/// # #[derive(Deserialize, JsonSchema)]
/// # struct Lookup {
/// #     id: String,
/// # }
/// # #[derive(Serialize, Deserialize, JsonSchema)]
/// # struct Record {
/// #     id: String,
/// # }
/// # struct Payments {
/// #     api: ProviderClient,
/// # }
/// # impl Payments {
/// #     fn new(provider_url: &str) -> Self {
/// #         Self { api: ProviderClient::new(provider_url).expect("a valid URL") }
/// #     }
/// # }
/// # #[connector(id = "payments")]
/// # impl Payments {
/// #     /// Looks a record up.
/// #     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
/// #     async fn lookup(&self, input: Lookup) -> Result<Record, ConnectorFailure> {
/// #         self.api.get(&format!("/records/{}", path_segment(&input.id))).send_json().await
/// #     }
/// # }
/// # fn main() {}
/// aip_connector_testkit::conformance_tests!(
///     suite = ConformanceSuite::new(|env| Payments::new(env.provider_url()))
///         .with_external_account(ExternalAccountRef {
///             id: "acct_test_9".to_owned(),
///             system: "stripe".to_owned(),
///         })
/// );
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (suite = $suite:expr $(,)?) => {
        mod aip_conformance {
            #[allow(unused_imports)]
            use super::*;
            // The suite's type, for `suite = ConformanceSuite::new(..)` in a module that does
            // not import it (an explicit import shadows the glob's, so one that does is fine).
            #[allow(unused_imports)]
            use $crate::conformance::ConformanceSuite;

            fn report() -> &'static $crate::conformance::ConformanceReport {
                static REPORT: ::std::sync::OnceLock<$crate::conformance::ConformanceReport> =
                    ::std::sync::OnceLock::new();
                REPORT.get_or_init(|| {
                    let suite: $crate::conformance::ConformanceSuite = $suite;
                    let report = suite.run();
                    let written =
                        match suite.write_report(&report, &$crate::conformance::report_dir()) {
                            Ok(path) => ::std::format!("  report: {}\n", path.display()),
                            Err(error) => ::std::format!("  report not written: {error}\n"),
                        };
                    // Written to the process's stderr, not through `eprintln!`, which the test
                    // harness captures: a check that did not apply passes as `ok`, and this is
                    // where an author sees that it did not run.
                    let _ = ::std::io::Write::write_all(
                        &mut ::std::io::stderr(),
                        (report.summary() + &written).as_bytes(),
                    );
                    report
                })
            }

            $crate::__conformance_test!(discovery_manifest, "discovery.manifest");
            $crate::__conformance_test!(discovery_profile_set, "discovery.profile_set");
            $crate::__conformance_test!(discovery_profile_bindings, "discovery.profile_bindings");
            $crate::__conformance_test!(connector_manifest, "connector.manifest");
            $crate::__conformance_test!(connector_boundary, "rfc0003.connector_boundary");
            $crate::__conformance_test!(
                connector_atomic_manifest_admission,
                "connector.atomic_manifest_admission"
            );
            $crate::__conformance_test!(
                enterprise_capability_contract,
                "enterprise.capability_contract"
            );
            $crate::__conformance_test!(
                behavior_identity_credentials,
                "connector.behavior.identity_credentials"
            );
            $crate::__conformance_test!(
                behavior_schema_enforcement,
                "connector.behavior.schema_enforcement"
            );
            $crate::__conformance_test!(
                behavior_idempotency_duplicates,
                "connector.behavior.idempotency_duplicates"
            );
            $crate::__conformance_test!(
                behavior_retry_exhaustion,
                "connector.behavior.retry_exhaustion"
            );
            $crate::__conformance_test!(
                behavior_cancellation_races,
                "connector.behavior.cancellation_races"
            );
            $crate::__conformance_test!(
                behavior_streaming_backpressure,
                "connector.behavior.streaming_backpressure"
            );
            $crate::__conformance_test!(
                behavior_errors_uncertain_outcomes,
                "connector.behavior.errors_uncertain_outcomes"
            );
            $crate::__conformance_test!(
                behavior_approval_lifecycle,
                "connector.behavior.approval_lifecycle"
            );
            $crate::__conformance_test!(
                behavior_transaction_lifecycle,
                "connector.behavior.transaction_lifecycle"
            );
            $crate::__conformance_test!(
                behavior_audit_redaction,
                "connector.behavior.audit_redaction"
            );
            $crate::__conformance_test!(
                behavior_webhook_security,
                "connector.behavior.webhook_security"
            );
            $crate::__conformance_test!(
                behavior_restart_reconnect,
                "connector.behavior.restart_reconnect"
            );

            /// The suite's waivers name capabilities of the manifest (a check in the report
            /// only when the suite has waivers).
            #[test]
            fn unexercised_waivers() {
                if report()
                    .check($crate::conformance::UNEXERCISED_WAIVERS)
                    .is_some()
                {
                    report().assert_check($crate::conformance::UNEXERCISED_WAIVERS);
                }
            }
        }
    };
    ($factory:expr $(,)?) => {
        $crate::conformance_tests!(suite = $crate::conformance::ConformanceSuite::new($factory));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test {
    ($test:ident, $check:literal) => {
        #[test]
        fn $test() {
            report().assert_check($check);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A misspelt unexercised assertion would add an assertion of its own and leave the real
    /// one alone: debug builds catch it.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "unexercised assertion `duplicate_supressed` is not one")]
    fn an_unexercised_assertion_the_scenario_does_not_make_is_a_bug() {
        let mut evidence = Evidence::default();
        evidence.artifact("action:a");
        evidence.unexercised("duplicate_supressed", "cap:x:y", "typo");
        let _ = evidence.into_check(Scenario::IdempotencyDuplicates, &BTreeMap::new());
    }

    /// A required assertion recorded as unexercised fails its check.
    #[test]
    fn an_unexercised_required_assertion_fails_its_check() {
        let mut evidence = Evidence::default();
        evidence.artifact("action:a");
        for name in Scenario::IdempotencyDuplicates.required_assertions() {
            evidence.assert(name, true, String::new);
        }
        evidence.unexercised("duplicate_suppressed", "cap:x:y", "it failed");
        let (check, used) = evidence.into_check(Scenario::IdempotencyDuplicates, &BTreeMap::new());
        assert_eq!(check.status, CheckStatus::Failed, "{}", check.detail);
        assert_eq!(check.assertions.get("duplicate_suppressed"), Some(&false));
        assert!(used.is_empty());
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("cap:pair:secrte", "cap:pair:secret"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
