//! The host runtime: admits connectors and enforces every capability's contract on every call.
//!
//! [`Host::builder`] takes connectors, a store, the deployment identity, an approval authority
//! and limits; [`HostBuilder::build`] runs full admission (`require_implementation_claims`) and
//! refuses duplicate capability ids. [`Host::invoke`] runs the pipeline of `docs/host-runtime.md`
//! in upstream order; [`Host::invoke_stream`] does the same with a bounded chunk stream.

// `ProtocolError` is the wire error (216 bytes); the host returns it on cold paths only, and
// boxing it would change the public wire type every connector shares.
#![allow(clippy::result_large_err)]

pub(crate) mod approval;
pub(crate) mod canonical;
mod context;
pub(crate) mod failure;
pub(crate) mod idempotency;
mod invocation;
mod late_cancel;
use invocation::HostInvocation;
mod pipeline;

#[cfg(feature = "http")]
pub(crate) use pipeline::Clipped;
/// The policy the gate applies to a capability gated without a declared one (the MCP projection
/// describes it to a model).
#[cfg(feature = "mcp")]
pub(crate) use pipeline::default_approval_policy;
mod stream;
mod transaction;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aip_connector_core::admission::{
    AdmissionPolicy, AdmissionReport, AdmittedManifest, admit_manifest,
};
use aip_connector_core::ids::{ActionId, ApprovalId, CapabilityId, PrincipalId};
use aip_connector_core::model::{
    Action, ActionResult, ApprovalDecision, ApprovalRecordView, Capability, IdempotencyKeyScope,
    IdempotencyRequirement, ProtocolError,
};
use aip_connector_core::schema::CompiledSchema;

pub use approval::{
    ApprovalAuthority, ApproverMemberships, DelegatedScope, DenyAllApprovalAuthority,
    StaticApprovalAuthority,
};
pub use context::{CredentialProvider, Deployment, StaticCredentialProvider, TrustedContext};
pub use stream::{ChunkStream, StreamDataError};
pub use transaction::{TransactionSelector, compensation_transaction_of};

/// The key under which a host stores the idempotency record of `action` with the raw key `raw`
/// (docs/host-runtime.md §4.1): `<Scope>:<partition>:<raw key>`, each partition part with `%`
/// and `:` percent-encoded. For tools and tests that inspect a store; a handler reads it from
/// its `IdempotencyKey` (`scoped()`). The partition is the action id, the capability id, the
/// principal id, the tenant id or the external account, as `scope` says; a tenant or account
/// scope without one is the `idempotency.scope_missing` error the host would answer.
pub fn scoped_idempotency_key(
    scope: aip_connector_core::model::IdempotencyKeyScope,
    raw: &str,
    action: &aip_connector_core::model::Action,
    principal_id: &str,
    tenant_id: Option<&str>,
    external_account: Option<&ExternalAccountRef>,
) -> Result<String, aip_connector_core::model::ProtocolError> {
    idempotency::scoped_key_of(
        scope,
        raw,
        action,
        principal_id,
        tenant_id,
        external_account,
    )
}

// What a deployment writes next to the builder, so that hosting needs this one module: the
// identity and credential types (defined with the invocation context the handler sees) and the
// status of the approval records the host returns.
pub use crate::invocation::{CredentialHandle, Secret, VerifiedTenant};
pub use crate::store::{ApprovalRecord, ApprovalStatus};
pub use aip_connector_core::model::ExternalAccountRef;

use crate::cache_line::CacheAligned;
use crate::connector::Connector;
use crate::connector::approval_required;
use crate::store::{
    Clock, MemoryStore, Millis, Purged, SharedStore, StoreError, SystemClock, millis,
};

/// Deepest nesting of a handler's output, a connector failure's `details`, and (as the upper
/// bound of [`HostLimits::max_input_depth`]) an action's input.
///
/// Stores write records as JSON and read them back with `serde_json`, whose parser refuses
/// more than 128 levels; a record holds its output a few levels down (record, result, replay
/// wrapper, JSON-RPC envelope), so a value nested deeper than this would be written and then
/// never read again: its idempotency key would answer `storage.unavailable` forever. A deeper
/// output fails the call with `action.output_schema_invalid` before anything is stored.
pub const MAX_STORED_DEPTH: usize = 100;

/// The pauses before a settlement the store failed is written again (an idempotency key's, a
/// transaction's, a resume's give-back): a store that failed one statement (a connection lost,
/// a lock timeout) often answers the next, and a settlement left unwritten lets a duplicate run
/// the handler again (or, for a give-back, strands the approved action).
pub(crate) const SETTLE_RETRY_PAUSES: [std::time::Duration; 2] = [
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(200),
];

/// Waits out `pause` before a settlement the store failed is written again; false when it cannot
/// (outside a Tokio runtime), and the write is not made again. The wait runs on the blocking
/// pool, which every Tokio runtime has: `tokio::time` needs a runtime built with `enable_time`,
/// and the host creates no timer on a call's path unless its handler waits (a review: a store
/// failure would have panicked in a runtime without timers).
pub(crate) async fn pause_before_retry(pause: std::time::Duration) -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    tokio::task::spawn_blocking(move || std::thread::sleep(pause))
        .await
        .is_ok()
}

/// `outcome`, the answer to a settlement write, or the answer to `write` made again after each
/// of [`SETTLE_RETRY_PAUSES`] while the store fails as unavailable. `write` must be safe to make
/// twice: every settlement write is conditional on what it settles (a reservation's token, a
/// claim's token), so one that landed with its answer lost is fenced or changes nothing.
pub(crate) async fn written_again<T, W>(
    mut outcome: Result<T, crate::store::StoreError>,
    mut write: impl FnMut() -> W,
) -> Result<T, crate::store::StoreError>
where
    W: std::future::Future<Output = Result<T, crate::store::StoreError>>,
{
    for pause in SETTLE_RETRY_PAUSES {
        match &outcome {
            Err(error) if worth_retrying(error) && pause_before_retry(pause).await => {
                tracing::warn!(error = %error, "a settlement write failed; writing it again");
                outcome = write().await;
            }
            _ => break,
        }
    }
    outcome
}

/// `write` made, and made again as [`written_again`] says while the store fails as unavailable.
pub(crate) async fn written_with_retries<T, W>(
    mut write: impl FnMut() -> W,
) -> Result<T, crate::store::StoreError>
where
    W: std::future::Future<Output = Result<T, crate::store::StoreError>>,
{
    let first = write().await;
    written_again(first, write).await
}

/// Whether a store failure may go away when the write is made again: only an unavailable
/// store's; a corrupt row or a refused configuration fails the same way every time.
pub(crate) fn worth_retrying(error: &crate::store::StoreError) -> bool {
    matches!(error, crate::store::StoreError::Unavailable(_))
}

/// Largest accepted [`HostLimits::stream_buffer`]: chunks are buffered in a bounded channel,
/// whose capacity has a ceiling of its own (a larger one made every `invoke_stream` panic);
/// beyond a million chunks the buffer bounds nothing a deployment could hold anyway.
pub const MAX_STREAM_BUFFER: usize = 1 << 20;

/// Limits of one host. Start from the defaults and set what differs; each field has a setter of
/// its name (limits may be added in minor versions, so the struct is not built literally):
///
/// ```
/// use aip_connector::host::HostLimits;
///
/// let limits = HostLimits::default()
///     .max_input_bytes(256 * 1024)
///     .max_output_bytes(1024 * 1024)
///     .max_concurrent_actions(64);
/// assert_eq!(limits.max_output_bytes, 1024 * 1024);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostLimits {
    /// Deadline when neither the action nor the SLA sets one (upstream: 60 s).
    pub default_timeout_ms: u64,
    /// Longest `Action.timeout_ms` honoured; a longer one is clamped to it (the deadline is
    /// still the smaller of that and the SLA's). The caller chooses the timeout, and it also
    /// sets how long a keyed call's reservation binds its key should the host die mid-call, so
    /// without a bound a caller could lock a key for good. Default 1 hour.
    pub max_action_timeout_ms: u64,
    /// Largest accepted `Action.input`, in bytes of compact JSON.
    pub max_input_bytes: usize,
    /// Largest output a completed handler may return, in bytes of compact JSON; a larger one
    /// fails `action.output_too_large`. The output is stored whole under the action's key and
    /// in its transaction record, and sent back (twice over MCP), so it is bounded like the
    /// input. A connector failure's own `details` are bounded by it too (withheld beyond it),
    /// and so is each chunk a streaming handler sends (`stream.chunk_too_large` beyond it).
    pub max_output_bytes: usize,
    /// Deepest accepted `Action.input` nesting; at most [`MAX_STORED_DEPTH`] (a pending
    /// approval stores the input, and a record that could not be read back would bind its key
    /// for good), else [`HostBuildError::LimitOutOfRange`].
    pub max_input_depth: usize,
    /// Longest accepted `Action.idempotency_key`, in bytes of UTF-8. A key is stored with every
    /// reservation and record it claims, so its length is bounded like the input's.
    pub max_idempotency_key_bytes: usize,
    /// Longest accepted caller-chosen id the host stores (`Action.id` and the transaction
    /// block's `transaction_id`, `plan_id` and `compensation_for`), in bytes of UTF-8. Each is
    /// written into reservations, records and transactions, so it is bounded like the key.
    pub max_id_bytes: usize,
    /// Largest accepted set of the action's context blocks (`conversation`, `memory_context`,
    /// `delegation_chain`, `federation`, `callback`, `observability`, `compliance`, `approval`,
    /// `transaction`), in bytes of compact JSON together. The input has its own limits, the
    /// ids and key theirs, and `identity` is replaced by the host. A pending approval stores
    /// the whole action, so every part of it is bounded.
    pub max_context_bytes: usize,
    /// Largest accepted approval decision (`Host::record_approval_decision`), in bytes of
    /// compact JSON. A decision is stored in its approval record, and the record is rewritten
    /// whole by every later decision.
    pub max_decision_bytes: usize,
    /// Schema violations reported per invalid input (upstream: 16).
    pub max_violations: usize,
    /// Chunks buffered between a streaming handler and its consumer (back-pressure beyond);
    /// at most [`MAX_STREAM_BUFFER`], else [`HostBuildError::LimitOutOfRange`] (0 buffers one).
    pub stream_buffer: usize,
    /// Actions executing at once; further calls get `host.overloaded` (temporary, retryable).
    pub max_concurrent_actions: usize,
    /// Retryable failures counted under one idempotency key before the key is dead-lettered:
    /// its last failure is stored as `action.dead_letter` (permanent) and replayed, so no
    /// further attempt runs the handler.
    pub max_attempts_per_key: u32,
    /// How long a settled result is kept under its idempotency key, and a key's retry attempts
    /// counted, when the capability publishes no `idempotency.ttl_ms`: requirement
    /// `unsupported`, no contract, or a hand-written contract that leaves it out. A caller may
    /// send a key to any capability, and upstream then keeps the record for good; bounded
    /// here, so that no caller can keep an output (personal data included) or grow the store
    /// without end. A published `ttl_ms` is honoured as declared, and a stored pending approval
    /// (no output; its requester resumes it with the key) keeps the contract's rule. Not 0
    /// ([`HostBuildError::LimitZero`]). Default 24 hours, the macro's default `ttl_ms`.
    pub default_record_ttl_ms: u64,
}

impl Default for HostLimits {
    fn default() -> Self {
        Self {
            default_timeout_ms: 60_000,
            max_action_timeout_ms: 60 * 60 * 1000,
            max_input_bytes: 1024 * 1024,
            max_output_bytes: 4 * 1024 * 1024,
            max_input_depth: 64,
            max_idempotency_key_bytes: 255,
            max_id_bytes: 255,
            max_context_bytes: 256 * 1024,
            max_decision_bytes: 64 * 1024,
            max_violations: 16,
            stream_buffer: 16,
            max_concurrent_actions: 1024,
            max_attempts_per_key: 5,
            default_record_ttl_ms: 24 * 60 * 60 * 1000,
        }
    }
}

/// Setters, one per limit, for building limits from [`HostLimits::default`].
impl HostLimits {
    /// Sets [`default_timeout_ms`](Self::default_timeout_ms).
    #[must_use]
    pub const fn default_timeout_ms(mut self, value: u64) -> Self {
        self.default_timeout_ms = value;
        self
    }

    /// Sets [`max_action_timeout_ms`](Self::max_action_timeout_ms).
    #[must_use]
    pub const fn max_action_timeout_ms(mut self, value: u64) -> Self {
        self.max_action_timeout_ms = value;
        self
    }

    /// Sets [`max_input_bytes`](Self::max_input_bytes).
    #[must_use]
    pub const fn max_input_bytes(mut self, value: usize) -> Self {
        self.max_input_bytes = value;
        self
    }

    /// Sets [`max_output_bytes`](Self::max_output_bytes).
    #[must_use]
    pub const fn max_output_bytes(mut self, value: usize) -> Self {
        self.max_output_bytes = value;
        self
    }

    /// Sets [`max_input_depth`](Self::max_input_depth).
    #[must_use]
    pub const fn max_input_depth(mut self, value: usize) -> Self {
        self.max_input_depth = value;
        self
    }

    /// Sets [`max_idempotency_key_bytes`](Self::max_idempotency_key_bytes).
    #[must_use]
    pub const fn max_idempotency_key_bytes(mut self, value: usize) -> Self {
        self.max_idempotency_key_bytes = value;
        self
    }

    /// Sets [`max_id_bytes`](Self::max_id_bytes).
    #[must_use]
    pub const fn max_id_bytes(mut self, value: usize) -> Self {
        self.max_id_bytes = value;
        self
    }

    /// Sets [`max_context_bytes`](Self::max_context_bytes).
    #[must_use]
    pub const fn max_context_bytes(mut self, value: usize) -> Self {
        self.max_context_bytes = value;
        self
    }

    /// Sets [`max_decision_bytes`](Self::max_decision_bytes).
    #[must_use]
    pub const fn max_decision_bytes(mut self, value: usize) -> Self {
        self.max_decision_bytes = value;
        self
    }

    /// Sets [`default_record_ttl_ms`](Self::default_record_ttl_ms).
    #[must_use]
    pub const fn default_record_ttl_ms(mut self, value: u64) -> Self {
        self.default_record_ttl_ms = value;
        self
    }

    /// Sets [`max_violations`](Self::max_violations).
    #[must_use]
    pub const fn max_violations(mut self, value: usize) -> Self {
        self.max_violations = value;
        self
    }

    /// Sets [`stream_buffer`](Self::stream_buffer).
    #[must_use]
    pub const fn stream_buffer(mut self, value: usize) -> Self {
        self.stream_buffer = value;
        self
    }

    /// Sets [`max_concurrent_actions`](Self::max_concurrent_actions).
    #[must_use]
    pub const fn max_concurrent_actions(mut self, value: usize) -> Self {
        self.max_concurrent_actions = value;
        self
    }

    /// Sets [`max_attempts_per_key`](Self::max_attempts_per_key).
    #[must_use]
    pub const fn max_attempts_per_key(mut self, value: u32) -> Self {
        self.max_attempts_per_key = value;
        self
    }
}

/// How long the host keeps approval and transaction records once nothing can change them.
/// The default keeps every record forever. [`Host::purge_closed`] applies it, and so do the
/// servers' periodic purges.
///
/// ```
/// use std::time::Duration;
/// use aip_connector::host::Retention;
///
/// const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// // Decided approvals kept 90 days for audit; finished transactions 30 days, which is also how
/// // long a committed transaction can be compensated through the host.
/// let retention = Retention::KEEP_FOREVER
///     .approvals_for(90 * DAY)
///     .transactions_for(30 * DAY);
/// assert_eq!(retention.transactions, Some(30 * DAY));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// A closed approval record ([`ApprovalRecord::is_closed`]: denied, revoked, expired, or
    /// approved and resumed) is deleted once it was created this long ago and, if resumed,
    /// resumed this long ago ([`ApprovalRecord::is_purgeable`]);
    /// `None` keeps it. Open records are always kept. Otherwise counted from creation, so set
    /// it longer than your approvals' TTLs: a request decided late in a long TTL is otherwise
    /// kept for less. Set it longer than [`HostLimits::max_action_timeout_ms`] too: a resumed
    /// action that runs longer than the period may find its approval gone when it ends, and one
    /// that ended retryably can then not give its resume back, so it cannot be resumed again.
    pub approvals: Option<std::time::Duration>,
    /// A finished transaction record
    /// ([`TransactionRecord::is_finished`](crate::store::TransactionRecord::is_finished)) is
    /// deleted once it was last updated this long ago, and a plan nobody committed once it
    /// expired this long ago
    /// ([`TransactionRecord::finished_at_ms`](crate::store::TransactionRecord::finished_at_ms));
    /// `None` keeps it. Other recoverable records and `requires_human` ones are always kept. A
    /// commit released by an approval does not count the approval's wait against its plan, so
    /// set this longer than the approval TTLs of gated commits: a plan deleted while its
    /// commit waits for an approver answers that commit `transaction.plan_not_found`. A deleted committed transaction can no longer be
    /// compensated through the host, so this is also the compensation window. After deletion
    /// the transaction id is unknown: an `execute` re-sent under it runs again instead of
    /// replaying (unless its idempotency key still replays the result), so keep transactions as
    /// long as callers may retry.
    pub transactions: Option<std::time::Duration>,
}

impl Retention {
    /// Every record kept forever (the default).
    pub const KEEP_FOREVER: Self = Self {
        approvals: None,
        transactions: None,
    };

    /// Keeps closed approval records for `period` after their creation (and after their
    /// resume, for resumed ones).
    pub const fn approvals_for(mut self, period: std::time::Duration) -> Self {
        self.approvals = Some(period);
        self
    }

    /// Keeps finished transaction records for `period` after their last update.
    pub const fn transactions_for(mut self, period: std::time::Duration) -> Self {
        self.transactions = Some(period);
        self
    }
}

/// An approval decision's wire name, for log lines.
fn decision_name(kind: aip_connector_core::model::ApprovalDecisionKind) -> &'static str {
    use aip_connector_core::model::ApprovalDecisionKind;
    match kind {
        ApprovalDecisionKind::Approved => "approved",
        ApprovalDecisionKind::Denied => "denied",
        ApprovalDecisionKind::Expired => "expired",
        ApprovalDecisionKind::Revoked => "revoked",
    }
}

/// Runs `pass` (one bounded purge of at most `batch` records) until a pass deletes fewer, and
/// returns the total. Between passes other writers get the store.
async fn in_passes<F, Pass>(batch: usize, mut pass: F) -> Result<usize, StoreError>
where
    F: FnMut() -> Pass,
    Pass: std::future::Future<Output = Result<usize, StoreError>>,
{
    let mut total = 0;
    loop {
        let deleted = pass().await?;
        total += deleted;
        if deleted < batch {
            return Ok(total);
        }
    }
}

/// What [`Host::purge_closed`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgedRecords {
    /// Closed approval records past their retention.
    pub approvals: usize,
    /// Finished transaction records past their retention.
    pub transactions: usize,
}

/// The issues of `report` as upstream prints them (`code at path: message`), with the
/// capability and profile each names, which the pointer's indexes leave to the reader (an author
/// trial read `manifest.binding.profile_undeclared at /capabilities/3/bindings/0/profile`
/// without knowing which).
fn described_issues(report: &AdmissionReport) -> String {
    report
        .issues
        .iter()
        .map(|issue| {
            let named: Vec<String> = [
                issue
                    .capability_id
                    .as_ref()
                    .map(|id| format!("capability `{id}`")),
                issue
                    .profile
                    .as_ref()
                    .map(|profile| format!("profile `{profile}`")),
            ]
            .into_iter()
            .flatten()
            .collect();
            if named.is_empty() {
                issue.to_string()
            } else {
                format!(
                    "{} at {} ({}): {}",
                    issue.code,
                    issue.path,
                    named.join(", "),
                    issue.message
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a host could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostBuildError {
    /// A connector's manifest failed admission; every issue is listed.
    #[error(
        "connector `{connector}` failed admission: {}",
        described_issues(report)
    )]
    Admission {
        /// The connector id.
        connector: String,
        /// Every issue.
        report: AdmissionReport,
    },
    /// Two connectors have the same id (the same connector added twice, or two
    /// `#[connector(id = ...)]` with one id): manifest requests, logs and stored records name a
    /// connector by its id, so the host could not tell them apart.
    #[error("two connectors have the id `{connector}`; give each connector of a host its own id")]
    DuplicateConnector {
        /// The connector id.
        connector: String,
    },
    /// A capability's declared example input (`#[capability(examples = [...])]`) does not
    /// match its input schema: it is published in the manifest as a valid call, and the
    /// conformance scenarios invoke it, so it would teach callers a call that fails
    /// `action.input_schema_invalid`.
    #[error(
        "example {index} of capability `{capability}` does not match its input schema: {}",
        .violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ExampleInvalid {
        /// The capability id.
        capability: CapabilityId,
        /// The example's position in the declared list, from 0.
        index: usize,
        /// What the schema refused.
        violations: Vec<aip_connector_core::schema::SchemaViolation>,
    },
    /// Two connectors expose the same capability id.
    #[error("capability `{capability}` is exposed by both `{first}` and `{second}`")]
    DuplicateCapability {
        /// The capability id.
        capability: CapabilityId,
        /// The connector that exposed it first.
        first: String,
        /// The connector that exposed it again.
        second: String,
    },
    /// The host has no connector.
    #[error("a host needs at least one connector")]
    NoConnector,
    /// A connector has no capability: every `#[capability]` of its `#[connector]` block is
    /// configured out by `#[cfg(...)]` (which the macro cannot see, since `cfg` is evaluated
    /// after it; a block without any `#[capability]` does not compile, and
    /// [`ConnectorBuilder::build`](crate::ConnectorBuilder::build) refuses one without a
    /// capability), or a hand-written [`Connector`] defines none. Upstream would admit its
    /// manifest, but a peer could call nothing on it.
    #[error(
        "connector `{connector}` has no capability, so a peer could call nothing on it: if its `#[capability]` handlers are all under `#[cfg(...)]`, none is compiled into this build; enable one, or leave the connector out of the host"
    )]
    NoCapability {
        /// The connector id.
        connector: String,
    },
    /// A capability's input schema does not describe only JSON objects (e.g. a `String` input;
    /// see [`crate::schema::has_object_root`]): `Action.input` is an object on the wire, so
    /// such a capability could never be called.
    #[error(
        "capability `{capability}` has an input schema whose root is neither `{{\"type\": \"object\"}}` nor a `oneOf`/`anyOf` of objects; use a struct (or an internally tagged enum) as the handler input"
    )]
    InputNotObject {
        /// The capability id.
        capability: CapabilityId,
    },
    /// A capability requires an idempotency key scoped to the external account, and the
    /// deployment acts as no external account: every call of it would fail with
    /// `idempotency.scope_missing`. The account is the deployment's
    /// ([`Deployment::with_external_account`]); nothing a caller sends can supply it.
    #[error(
        "capability `{capability}` requires an idempotency key scoped to the external account, but the deployment acts as no external account; set one with `Deployment::with_external_account`"
    )]
    ExternalAccountMissing {
        /// The capability id.
        capability: CapabilityId,
    },
    /// A [`HostLimits`] field is beyond what the host can honour.
    #[error("host limit `{limit}` is {value}, above its maximum {max}")]
    LimitOutOfRange {
        /// The field of [`HostLimits`].
        limit: &'static str,
        /// The configured value.
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// A [`HostLimits`] field is 0 where 0 would refuse every call, or every call of a kind: a
    /// timeout of 0 times every handler out at once, no concurrent action answers every call
    /// `host.overloaded`, an input or id of at most 0 bytes (or 0 levels deep) admits no
    /// action, a key of at most 0 bytes no keyed action, an output of at most 0 bytes no
    /// completed call, and a decision of at most 0 bytes records no decision.
    /// (`max_context_bytes` may be 0: an action without context blocks
    /// still passes.)
    #[error(
        "host limit `{limit}` is 0, which would refuse every call it applies to; it must be at least 1"
    )]
    LimitZero {
        /// The field of [`HostLimits`].
        limit: &'static str,
    },
}

/// Warns, once per capability, that a host built without an approval authority can run no
/// capability that needs approval: every call of it waits for a decision the default
/// [`DenyAllApprovalAuthority`] refuses (an author trial found every close of an issue pending
/// for good, and every decision answered `policy.approver_unauthorized`, with nothing saying
/// why). A warning, not an error: a host that only ever asks for approvals (a test of the gate,
/// a deployment whose decisions are recorded by another replica) is legitimate.
fn warn_nobody_can_approve(manifests: &[Arc<AdmittedManifest>]) {
    for capability in manifests
        .iter()
        .flat_map(|admitted| admitted.manifest().capabilities.iter())
        .filter(|capability| capability.is_callable())
        .filter(|capability| approval_required(capability))
    {
        tracing::warn!(
            capability = %capability.id,
            "capability `{}` needs approval, but the host has no approval authority: the default \
             `DenyAllApprovalAuthority` vouches for nobody, so every call waits for a decision no \
             approver can record; set one with `HostBuilder::approval_authority`",
            capability.id
        );
    }
}

impl HostLimits {
    /// The limits a host can honour ([`HostBuilder::build`] refuses the others).
    fn check(&self) -> Result<(), HostBuildError> {
        let at_most = |limit: &'static str, value: usize, max: usize| {
            if value > max {
                return Err(HostBuildError::LimitOutOfRange {
                    limit,
                    value: value as u64,
                    max: max as u64,
                });
            }
            Ok(())
        };
        at_most("max_input_depth", self.max_input_depth, MAX_STORED_DEPTH)?;
        at_most("stream_buffer", self.stream_buffer, MAX_STREAM_BUFFER)?;
        let nonzero = [
            ("default_timeout_ms", self.default_timeout_ms == 0),
            ("max_action_timeout_ms", self.max_action_timeout_ms == 0),
            ("max_concurrent_actions", self.max_concurrent_actions == 0),
            ("max_input_bytes", self.max_input_bytes == 0),
            ("max_output_bytes", self.max_output_bytes == 0),
            ("max_input_depth", self.max_input_depth == 0),
            ("max_id_bytes", self.max_id_bytes == 0),
            (
                "max_idempotency_key_bytes",
                self.max_idempotency_key_bytes == 0,
            ),
            ("max_decision_bytes", self.max_decision_bytes == 0),
            // A contract's `ttl_ms` of 0 is refused too (`contract.idempotency.invalid_ttl`):
            // a record that expires at once makes every resend run again.
            ("default_record_ttl_ms", self.default_record_ttl_ms == 0),
        ];
        match nonzero.into_iter().find(|(_, zero)| *zero) {
            Some((limit, _)) => Err(HostBuildError::LimitZero { limit }),
            None => Ok(()),
        }
    }
}

/// Builds a [`Host`].
#[must_use = "a builder does nothing until `build()` is called"]
pub struct HostBuilder {
    connectors: Vec<Arc<dyn Connector>>,
    store: Option<SharedStore>,
    deployment: Deployment,
    /// `None`: [`DenyAllApprovalAuthority`], and a warning at build time if a capability needs
    /// approval.
    authority: Option<Arc<dyn ApprovalAuthority>>,
    limits: HostLimits,
    clock: Arc<dyn Clock>,
    policy: AdmissionPolicy,
    retention: Retention,
}

/// Names the connectors and shows the settings; the store, authority and clock only by whether
/// one was set.
impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let connectors: Vec<&str> = self
            .connectors
            .iter()
            .map(|connector| connector.definition().id.as_str())
            .collect();
        f.debug_struct("HostBuilder")
            .field("connectors", &connectors)
            .field("store_set", &self.store.is_some())
            .field("deployment", &self.deployment)
            .field("authority_set", &self.authority.is_some())
            .field("limits", &self.limits)
            .field("policy", &self.policy)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// Adds a connector.
    pub fn connector(mut self, connector: impl Connector) -> Self {
        self.connectors.push(Arc::new(connector));
        self
    }

    /// Adds a shared connector.
    pub fn shared_connector(mut self, connector: Arc<dyn Connector>) -> Self {
        self.connectors.push(connector);
        self
    }

    /// Sets the store (default: a fresh [`MemoryStore`]).
    pub fn store(mut self, store: SharedStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets the deployment identity: tenant, external account, credential provider.
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.deployment = deployment;
        self
    }

    /// Sets the approval authority (default: [`DenyAllApprovalAuthority`]).
    pub fn approval_authority(mut self, authority: impl ApprovalAuthority + 'static) -> Self {
        self.authority = Some(Arc::new(authority));
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: HostLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets how long closed approval and finished transaction records are kept (default:
    /// [`Retention::KEEP_FOREVER`]); see [`Host::purge_closed`].
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Sets the clock (tests use a manual one to exercise expiry).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Admits every connector (strict: every callable capability needs an implementation
    /// claim) and builds the host.
    pub fn build(self) -> Result<Host, HostBuildError> {
        if self.connectors.is_empty() {
            return Err(HostBuildError::NoConnector);
        }
        self.limits.check()?;
        let mut capabilities = CapabilityMap::default();
        let mut manifests = Vec::new();
        let mut connector_ids = std::collections::HashSet::new();
        for (index, connector) in self.connectors.iter().enumerate() {
            let definition = connector.definition();
            if !connector_ids.insert(definition.id.as_str()) {
                return Err(HostBuildError::DuplicateConnector {
                    connector: definition.id.clone(),
                });
            }
            if definition.capabilities.is_empty() {
                return Err(HostBuildError::NoCapability {
                    connector: definition.id.clone(),
                });
            }
            let admitted = admit_manifest(
                &definition.manifest(),
                &self.policy,
                &definition.implementation_support(),
            )
            .map_err(|report| HostBuildError::Admission {
                connector: definition.id.clone(),
                report,
            })?;
            // Manifest admission sees support records, not handlers; the host has the handlers'
            // facts, so it holds every connector (not only a `#[connector]` block, whose macro
            // checks this at compile time) to the rule that a compensating capability reads its
            // target.
            let mut issues = Vec::new();
            aip_connector_core::rules::compensating_handlers(
                admitted.manifest(),
                |id| {
                    definition
                        .capability(id.as_str())
                        .map(|d| d.facts.compensation_handler)
                },
                &mut issues,
            );
            if !issues.is_empty() {
                return Err(HostBuildError::Admission {
                    connector: definition.id.clone(),
                    report: AdmissionReport { issues },
                });
            }
            let admitted = Arc::new(admitted);
            for (position, capability) in admitted.manifest().capabilities.iter().enumerate() {
                if capability.is_callable()
                    && !crate::schema::has_object_root(&capability.input_schema)
                {
                    return Err(HostBuildError::InputNotObject {
                        capability: capability.id.clone(),
                    });
                }
                if capability.is_callable()
                    && self.deployment.external_account.is_none()
                    && capability.contract.as_ref().is_some_and(|c| {
                        c.idempotency.requirement == IdempotencyRequirement::Required
                            && c.idempotency.key_scope == IdempotencyKeyScope::ExternalAccount
                    })
                {
                    return Err(HostBuildError::ExternalAccountMissing {
                        capability: capability.id.clone(),
                    });
                }
                if let (Some(schema), Some(declared)) = (
                    admitted.input_schema(capability.id.as_str()),
                    definition.capability(capability.id.as_str()),
                ) {
                    for (index, example) in declared.examples.iter().enumerate() {
                        if let Err(violations) =
                            schema.validate(example, self.limits.max_violations)
                        {
                            return Err(HostBuildError::ExampleInvalid {
                                capability: capability.id.clone(),
                                index,
                                violations,
                            });
                        }
                    }
                }
                if let Some(existing) = capabilities.get(&capability.id) {
                    return Err(HostBuildError::DuplicateCapability {
                        capability: capability.id.clone(),
                        first: self.connectors[existing.connector].definition().id.clone(),
                        second: definition.id.clone(),
                    });
                }
                let facts = definition
                    .capability(capability.id.as_str())
                    .map(|d| &d.facts);
                capabilities.insert(
                    capability.id.clone(),
                    HostedCapability {
                        connector: index,
                        position,
                        input_schema: admitted.input_schema(capability.id.as_str()).cloned(),
                        output_schema: admitted.output_schema(capability.id.as_str()).cloned(),
                        compensation_only: facts.is_some_and(|f| f.compensation_handler),
                        checkpoints: facts.is_some_and(|f| f.support.transaction),
                        manifest: admitted.clone(),
                    },
                );
            }
            manifests.push(admitted);
        }
        if self.authority.is_none() {
            warn_nobody_can_approve(&manifests);
        }
        Ok(Host {
            inner: Arc::new(HostInner {
                connectors: self.connectors,
                capabilities,
                manifests,
                store: self
                    .store
                    .unwrap_or_else(|| Arc::new(MemoryStore::default())),
                deployment: self.deployment,
                authority: self
                    .authority
                    .unwrap_or_else(|| Arc::new(DenyAllApprovalAuthority)),
                permits: ConcurrencyLimit::new(self.limits.max_concurrent_actions),
                limits: self.limits,
                clock: self.clock,
                retention: self.retention,
                active: ActiveActions::default(),
            }),
        })
    }
}

/// Where a capability lives.
/// A hosted capability, resolved once when the host is built so that a call finds everything
/// it needs with one map lookup.
struct HostedCapability {
    /// Index into [`HostInner::connectors`].
    connector: usize,
    /// The admitted manifest that declares it.
    manifest: Arc<AdmittedManifest>,
    /// Its position in that manifest's capabilities.
    position: usize,
    /// Its compiled input schema (absent only for a capability admission did not compile).
    input_schema: Option<CompiledSchema>,
    /// Its compiled output schema, when it declares one.
    output_schema: Option<CompiledSchema>,
    /// Its handler takes `Compensation`: it runs only routed from a `compensate` action of the
    /// capability it undoes (`ImplementationFacts::compensation_handler`).
    compensation_only: bool,
    /// Its handler takes `Checkpoint` (`ImplementationFacts::support.transaction`): it runs
    /// only inside an admitted transaction.
    checkpoints: bool,
}

impl HostedCapability {
    /// The admitted declaration.
    fn capability(&self) -> &Capability {
        &self.manifest.manifest().capabilities[self.position]
    }
}

/// Hosted capabilities by id. The keys come from admitted manifests, never from callers (a
/// caller only looks up), so a fast non-keyed hash is safe here and spares SipHash on every call.
type CapabilityMap = HashMap<CapabilityId, HostedCapability, rustc_hash::FxBuildHasher>;

struct HostInner {
    connectors: Vec<Arc<dyn Connector>>,
    capabilities: CapabilityMap,
    manifests: Vec<Arc<AdmittedManifest>>,
    store: SharedStore,
    deployment: Deployment,
    authority: Arc<dyn ApprovalAuthority>,
    limits: HostLimits,
    clock: Arc<dyn Clock>,
    retention: Retention,
    permits: ConcurrencyLimit,
    /// Cancellation tokens of executing actions, by action id.
    active: ActiveActions,
}

/// The actions executing at once, against [`HostLimits::max_concurrent_actions`]. A call that
/// finds the limit reached is refused at once (`host.overloaded`), never queued, so a counter is
/// enough. A semaphore would do the same, but tokio's takes a lock whenever a permit is
/// returned: one lock shared by every call of every worker.
struct ConcurrencyLimit {
    /// Written by every call of every worker: on a line of its own.
    in_flight: CacheAligned<AtomicUsize>,
    max: usize,
}

impl ConcurrencyLimit {
    fn new(max: usize) -> Self {
        Self {
            in_flight: CacheAligned(AtomicUsize::new(0)),
            max,
        }
    }

    /// A slot until the guard drops, or `None` at the limit.
    ///
    /// One unconditional increment, undone at the limit: a compare-and-swap loop would read
    /// the counter first, and the counter's line, written by every call of every worker, is
    /// rarely in this core's cache. (A call refused at the limit holds its increment for a
    /// moment, so a racing call may be refused too: both are told to retry, and both were
    /// racing for the last slot.)
    fn try_acquire(&self) -> Option<ConcurrencySlot<'_>> {
        let slot = ConcurrencySlot(self);
        if self.in_flight.fetch_add(1, Ordering::Acquire) < self.max {
            Some(slot)
        } else {
            // Dropping the slot takes the increment back.
            drop(slot);
            None
        }
    }
}

/// One executing action's place under the [`ConcurrencyLimit`].
struct ConcurrencySlot<'a>(&'a ConcurrencyLimit);

impl Drop for ConcurrencySlot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Release);
    }
}

impl HostInner {
    /// The tenant `caller` acts for here: the one its transport verified, else the deployment's.
    fn tenant_of<'a>(
        &'a self,
        caller: &'a TrustedContext,
    ) -> Option<&'a crate::invocation::VerifiedTenant> {
        caller.tenant.as_ref().or(self.deployment.tenant.as_ref())
    }

    /// The owner `caller` is of the actions it runs: its principal in its tenant.
    fn owner_of(&self, caller: &TrustedContext) -> ActionOwner {
        ActionOwner {
            principal: caller.principal.id.clone(),
            tenant: self.tenant_of(caller).map(|t| t.id.clone()),
        }
    }
}

/// How many registries the executing actions are spread over.
const ACTIVE_SHARDS: usize = 16;

/// The executing actions and their cancellation tokens, for [`Host::cancel`].
///
/// Every call whose handler waits registers and unregisters itself (one that finishes on its
/// first poll never does; the pipeline's race explains why no cancellation is lost), while
/// cancelling is rare. So registering costs no hashing: a call takes a free slot in one of several registries (picked by the address of
/// its action, which spreads concurrent calls over them), each behind its own lock, and holds a
/// reference to its action rather than a copy of the id. Cancelling scans every registry.
#[derive(Default)]
struct ActiveActions {
    shards: [CacheAligned<Mutex<ActiveSlots>>; ACTIVE_SHARDS],
    /// Cancellations that arrived before their action ran. Each caller's cancellation of an id
    /// is an entry of its own, so no caller can replace another's.
    pending: Mutex<PendingCancels>,
    /// Entries of `pending` plus cancellations being decided. Zero (the usual case) lets a call
    /// skip the `pending` lock; see [`ActiveActions::cancel_or_remember`] for why it is safe.
    pending_count: AtomicUsize,
    /// Live notes of `pending.retried`, written under the `pending` lock. Zero (the usual
    /// case) lets a starting handler skip that lock.
    retried_count: AtomicUsize,
    /// Who waits for the result of an execution a cancellation reached
    /// ([`Host::cancel_as_watched`]).
    watchers: Mutex<Vec<SettlementWatcher>>,
    /// Entries of `watchers`. Zero (the usual case) lets a settling call skip the lock; see
    /// [`ActiveActions::settled`] for why it is safe.
    watcher_count: AtomicUsize,
    /// Numbers the watchers, so that one that gives up removes only its own entries.
    next_watcher: std::sync::atomic::AtomicU64,
}

/// Waits for the result of one execution a cancellation reached: the execution is the one whose
/// action this holds (the pipeline's own `Arc`, so its address identifies the execution for as
/// long as this holds it).
struct SettlementWatcher {
    action: Arc<Action>,
    ticket: u64,
    result: tokio::sync::oneshot::Sender<ActionResult>,
}

/// How long a cancellation of an action that is not executing is remembered.
pub const PENDING_CANCEL_TTL_MS: Millis = 60_000;

/// The most cancellations remembered at once; beyond it, a cancel of an action that is not
/// executing is not remembered (`CancelOutcome::NotActive`).
pub const MAX_PENDING_CANCELS: usize = 10_000;

/// The most cancellations one caller (principal and tenant, through [`Host::cancel_as`]) may
/// have remembered at once, so that one caller cannot fill [`MAX_PENDING_CANCELS`] and leave
/// every other caller's cancels unremembered.
pub const MAX_PENDING_CANCELS_PER_CALLER: usize = 100;

/// The remembered cancellations → when each lapses, and how many each caller holds (kept with
/// them, so the per-caller limit costs a lookup, not a scan of the table).
#[derive(Default)]
struct PendingCancels {
    lapse_at: HashMap<PendingCancel, Millis>,
    per_caller: HashMap<ActionOwner, usize>,
    /// The executions that ended with a retryable failure, for a cancel to tell it is late
    /// (see [`ActiveActions::note_retryable`]).
    retried: late_cancel::RetriedNotes,
}

impl PendingCancels {
    fn len(&self) -> usize {
        self.lapse_at.len()
    }

    fn contains(&self, key: &PendingCancel) -> bool {
        self.lapse_at.contains_key(key)
    }

    /// How many cancellations `owner` has remembered.
    fn held_by(&self, owner: &ActionOwner) -> usize {
        self.per_caller.get(owner).copied().unwrap_or(0)
    }

    /// Remembers `key` until `lapses_at`; true when it was already remembered (renewed).
    fn insert(&mut self, key: PendingCancel, lapses_at: Millis) -> bool {
        let owner = key.owner.clone();
        let renewed = self.lapse_at.insert(key, lapses_at).is_some();
        if !renewed && let Some(owner) = owner {
            *self.per_caller.entry(owner).or_default() += 1;
        }
        renewed
    }

    /// Forgets `key`; its lapse time if it was remembered.
    fn remove(&mut self, key: &PendingCancel) -> Option<Millis> {
        let lapses_at = self.lapse_at.remove(key)?;
        if let Some(owner) = &key.owner {
            self.release(owner);
        }
        Some(lapses_at)
    }

    /// Forgets every cancellation that lapsed by `now`; how many went.
    fn drop_lapsed(&mut self, now: Millis) -> usize {
        let before = self.len();
        let mut lapsed_owners = Vec::new();
        self.lapse_at.retain(|key, lapses_at| {
            let live = *lapses_at > now;
            if !live && let Some(owner) = &key.owner {
                lapsed_owners.push(owner.clone());
            }
            live
        });
        for owner in &lapsed_owners {
            self.release(owner);
        }
        before - self.len()
    }

    fn release(&mut self, owner: &ActionOwner) {
        if let Some(held) = self.per_caller.get_mut(owner) {
            *held -= 1;
            if *held == 0 {
                self.per_caller.remove(owner);
            }
        }
    }
}

/// A remembered cancellation: of which action id, and for a caller's cancellation
/// ([`Host::cancel_as`]), whose action it may cancel (`None`: an operator's, any action).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PendingCancel {
    id: ActionId,
    owner: Option<ActionOwner>,
}

/// Who runs an executing action: the authenticated principal and the tenant the host resolved.
/// A caller may cancel only its own actions ([`Host::cancel_as`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ActionOwner {
    principal: PrincipalId,
    tenant: Option<String>,
}

impl ActionOwner {
    /// Whether `action`, run by `principal`, is this owner's. The action's tenant is the one the
    /// host wrote into its identity.
    fn owns(&self, action: &Action, principal: &PrincipalId) -> bool {
        self.principal == *principal && self.tenant.as_deref() == tenant_of_action(action)
    }

    /// The owner of `action`, run by `principal`.
    fn of(action: &Action, principal: &PrincipalId) -> Self {
        ActionOwner {
            principal: principal.clone(),
            tenant: tenant_of_action(action).map(str::to_owned),
        }
    }
}

/// The tenant the host wrote into `action`'s identity.
fn tenant_of_action(action: &Action) -> Option<&str> {
    transaction::tenant_id_of(action.identity.as_deref())
}

/// One executing action: its handler's context, which holds the action, its cancellation and
/// the principal running it (one reference instead of a copy of each).
type ActiveEntry = Arc<HostInvocation>;

/// One registry: slots of executing actions, and the indices of the free ones.
#[derive(Default)]
struct ActiveSlots {
    slots: Vec<Option<ActiveEntry>>,
    free: Vec<usize>,
}

/// Where a registration lives, to remove it.
struct ActiveSlot {
    shard: usize,
    index: usize,
}

impl ActiveActions {
    /// A registry, locked. A poisoned lock is recovered: every operation on a registry writes one
    /// slot and one free-list entry, and cannot leave a slot half-written.
    fn lock(&self, shard: usize) -> MutexGuard<'_, ActiveSlots> {
        self.shards[shard % ACTIVE_SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `token` as the cancellation of the executing `action` (fired at once when a
    /// cancellation of it is pending).
    fn register(&self, context: &Arc<HostInvocation>, clock: &dyn Clock) -> ActiveSlot {
        // Allocations are at least 16-byte aligned; the bits above spread concurrent calls.
        let shard = (Arc::as_ptr(&context.action).addr() >> 6) % ACTIVE_SHARDS;
        let entry = Some(Arc::clone(context));
        let mut registry = self.lock(shard);
        let index = match registry.free.pop() {
            Some(index) => {
                registry.slots[index] = entry;
                index
            }
            None => {
                registry.slots.push(entry);
                registry.slots.len() - 1
            }
        };
        drop(registry);
        // The `pending` lock is never taken under a registry lock: cancelling takes them the
        // other way round. The count is read after registering; see `cancel_or_remember`.
        self.fire_pending(context, clock);
        ActiveSlot { shard, index }
    }

    /// Fires `context`'s signal if a cancellation of its action is pending (consuming it); true
    /// when it did.
    fn fire_pending(&self, context: &HostInvocation, clock: &dyn Clock) -> bool {
        let fired = self.take_pending(&context.action, &context.caller.principal_id, clock);
        if fired {
            context.cancellation.fire_requested();
        }
        fired
    }

    /// Consumes the pending cancellations of `action` (run by `principal`) that apply to it:
    /// an operator's and its owner's; true when one of them had not lapsed. Another caller's
    /// pending cancellation of the same id is left alone.
    fn take_pending(&self, action: &Action, principal: &PrincipalId, clock: &dyn Clock) -> bool {
        if self.pending_count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        // Read only here: with no cancellation pending (the usual case) no clock is read.
        let now = clock.now_ms();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut fired = false;
        for owner in [None, Some(ActionOwner::of(action, principal))] {
            let key = PendingCancel {
                id: action.id.clone(),
                owner,
            };
            if let Some(lapses_at) = pending.remove(&key) {
                self.pending_count.fetch_sub(1, Ordering::SeqCst);
                fired |= lapses_at > now;
            }
        }
        fired
    }

    /// Notes that the execution of `action` (run by `principal`) ended at `now` with a
    /// retryable failure, which its caller may retry under the same id (and key, which the
    /// failure released). A cancel of it in the next [`PENDING_CANCEL_TTL_MS`] is late for that
    /// execution: it is answered [`CancelOutcome::AlreadyFinished`] and not remembered, so it
    /// does not cancel the retry before it runs. A retry that reaches its handler forgets the
    /// note ([`forget_retried`](Self::forget_retried)), so a cancel from then on is for it.
    /// See [`late_cancel`] for the bounds.
    ///
    /// A cancel of `action` remembered now was, as a rule, remembered during this execution:
    /// one from before it was consumed when its handler was first polled ([`fire_pending`]).
    /// It came while the handler's first poll was finishing it (a handler that ends in its
    /// first poll never registers, so the cancel found nothing to stop), so it is late for this
    /// execution too, and is dropped: remembered, it would cancel the retry before its handler
    /// (found by a hostile review). The exceptions, left so: an execution abandoned before its
    /// first poll did not consume an earlier cancel, and a second execution of the same id
    /// running at once (sent again without its key) loses a cancel remembered for it.
    ///
    /// [`fire_pending`]: Self::fire_pending
    fn note_retryable(&self, action: &Action, principal: &PrincipalId, now: Millis) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let owner = ActionOwner::of(action, principal);
        for owner in [None, Some(owner.clone())] {
            let key = PendingCancel {
                id: action.id.clone(),
                owner,
            };
            if pending.remove(&key).is_some() {
                self.pending_count.fetch_sub(1, Ordering::SeqCst);
            }
        }
        pending.retried.note(&action.id, owner, now);
        self.count_retried(&pending);
    }

    /// Publishes how many late-cancel notes are live, after a change under the `pending` lock.
    fn count_retried(&self, pending: &PendingCancels) {
        self.retried_count
            .store(pending.retried.len(), Ordering::SeqCst);
    }

    /// Forgets the note of [`note_retryable`](Self::note_retryable) for `action` (run by
    /// `principal`), whose handler starts again: a cancel of it from now on is for this
    /// execution. Drops the notes that lapsed by now too, so the count falls back to zero.
    fn forget_retried(&self, action: &Action, principal: &PrincipalId, clock: &dyn Clock) {
        if self.retried_count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let now = clock.now_ms();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retried.drop_lapsed(now);
        pending
            .retried
            .forget(&action.id, &ActionOwner::of(action, principal));
        self.count_retried(&pending);
    }

    /// Cancels the executing action `id`, or remembers the cancellation for
    /// [`PENDING_CANCEL_TTL_MS`] so the action is cancelled before dispatch if it starts.
    ///
    /// No cancellation is lost to a racing start: the count is raised *before* the scan, under
    /// the `pending` lock. A handler that waits registers first and reads the count after; if
    /// it reads zero, this scan had not begun, so it will find the registration. (A call reads
    /// the count once more before its handler's first poll; a cancellation that lands during a
    /// first poll that finishes the handler is remembered and lapses unused, or is dropped when
    /// that execution ends retryably, see [`note_retryable`](Self::note_retryable).)
    fn cancel_or_remember(
        &self,
        id: &ActionId,
        owner: Option<&ActionOwner>,
        now: Millis,
        watch: Option<&mut Settling>,
    ) -> CancelOutcome {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        self.pending_count.fetch_add(1, Ordering::SeqCst);
        let lapsed = pending.drop_lapsed(now);
        if lapsed > 0 {
            self.pending_count.fetch_sub(lapsed, Ordering::SeqCst);
        }
        if self.cancel_watched(id, owner, true, watch) {
            self.pending_count.fetch_sub(1, Ordering::SeqCst);
            return CancelOutcome::Cancelled;
        }
        // Late for an execution that failed retryably (another caller's action with the same id
        // is none of this caller's business: its cancel is remembered as for any other id).
        pending.retried.drop_lapsed(now);
        self.count_retried(&pending);
        if pending.retried.is_late(id, owner, now) {
            self.pending_count.fetch_sub(1, Ordering::SeqCst);
            return CancelOutcome::AlreadyFinished;
        }
        let key = PendingCancel {
            id: id.clone(),
            owner: owner.cloned(),
        };
        // A renewal takes no room; a new entry must fit the host's and the caller's share.
        let full = !pending.contains(&key)
            && (pending.len() >= MAX_PENDING_CANCELS
                || owner
                    .is_some_and(|owner| pending.held_by(owner) >= MAX_PENDING_CANCELS_PER_CALLER));
        if full {
            self.pending_count.fetch_sub(1, Ordering::SeqCst);
            return CancelOutcome::NotActive;
        }
        if pending.insert(key, now.saturating_add(PENDING_CANCEL_TTL_MS)) {
            // Renewed, not added: the entry was already counted.
            self.pending_count.fetch_sub(1, Ordering::SeqCst);
        }
        CancelOutcome::Pending
    }

    /// Registers a watcher of the result of the execution of `action` into `settling`.
    fn watch(&self, action: &Arc<Action>, settling: &mut Settling) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let ticket = self
            .next_watcher
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        watchers.push(SettlementWatcher {
            action: Arc::clone(action),
            ticket,
            result: sender,
        });
        self.watcher_count.fetch_add(1, Ordering::SeqCst);
        drop(watchers);
        settling.tickets.push(ticket);
        settling.results.push(receiver);
    }

    /// Hands `result`, what the execution of `action` ended with, to whoever waits for it (a
    /// cancellation that reached it). Called once the execution has unregistered: a
    /// cancellation that found the registration put its watcher in place under the registry's
    /// lock before the unregistration took that lock, so the count read here sees it.
    fn settled(&self, action: &Arc<Action>, result: &ActionResult) {
        if self.watcher_count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        let before = watchers.len();
        for watcher in watchers.extract_if(.., |w| Arc::ptr_eq(&w.action, action)) {
            let _ = watcher.result.send(result.clone());
        }
        self.watcher_count
            .fetch_sub(before - watchers.len(), Ordering::SeqCst);
    }

    /// Forgets the watchers numbered `tickets` (their waiter gave up, or had its answer).
    fn unwatch(&self, tickets: &[u64]) {
        if tickets.is_empty() {
            return;
        }
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        let before = watchers.len();
        watchers.retain(|w| !tickets.contains(&w.ticket));
        self.watcher_count
            .fetch_sub(before - watchers.len(), Ordering::SeqCst);
    }

    /// Unregisters the action registered at `slot`.
    fn unregister(&self, slot: &ActiveSlot) {
        let mut registry = self.lock(slot.shard);
        let taken = registry.slots.get_mut(slot.index).and_then(Option::take);
        if taken.is_some() {
            registry.free.push(slot.index);
        }
        drop(registry);
        // The context (action, token, credential) is released outside the lock.
        drop(taken);
    }

    /// Fires the cancellation of every executing action with this id (of `owner`, when given),
    /// as asked for (`requested`) or as abandoned by its transport; false when none is.
    fn cancel(&self, id: &ActionId, owner: Option<&ActionOwner>, requested: bool) -> bool {
        self.cancel_watched(id, owner, requested, None)
    }

    /// [`cancel`](Self::cancel), and with `watch`, a watcher of the result of each execution
    /// it reaches, registered before its signal fires.
    fn cancel_watched(
        &self,
        id: &ActionId,
        owner: Option<&ActionOwner>,
        requested: bool,
        watch: Option<&mut Settling>,
    ) -> bool {
        let owned = |context: &HostInvocation| {
            owner.is_none_or(|owner| owner.owns(&context.action, &context.caller.principal_id))
        };
        self.fire_matching(id, owned, requested, watch)
    }

    /// Abandons the executing action `id` whose stream is `sink` (its consumer went away): that
    /// execution only, not another execution of the same id by the same caller (found by a
    /// hostile review).
    fn abandon_streaming_to(&self, id: &ActionId, sink: *const ()) -> bool {
        let streams_to_sink = |context: &HostInvocation| {
            context
                .stream
                .as_ref()
                .is_some_and(|stream| std::ptr::addr_eq(Arc::as_ptr(stream), sink))
        };
        self.fire_matching(id, streams_to_sink, false, None)
    }

    /// Fires the signal of every executing action `id` that `matches` (a cancel asked for it:
    /// `requested`), with `watch`, after registering a watcher of its result.
    fn fire_matching(
        &self,
        id: &ActionId,
        matches: impl Fn(&HostInvocation) -> bool,
        requested: bool,
        mut watch: Option<&mut Settling>,
    ) -> bool {
        let mut found = false;
        for shard in 0..ACTIVE_SHARDS {
            let registry = self.lock(shard);
            for context in registry.slots.iter().flatten() {
                if context.action.id == *id && matches(context) {
                    // Under the registry's lock, so the execution cannot unregister (and then
                    // look for watchers) before its watcher is in place.
                    if let Some(watch) = watch.as_deref_mut() {
                        self.watch(&context.action, watch);
                    }
                    if requested {
                        context.cancellation.fire_requested();
                    } else {
                        context.cancellation.fire();
                    }
                    found = true;
                }
            }
        }
        found
    }
}

/// A host: admitted connectors plus the store and policy that govern every call. Cheap to
/// clone; clones share everything.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

/// Shows what the host serves and under which deployment and limits (the deployment's Debug
/// shows no credential); the store, the authority and the clock are trait objects and are
/// not shown.
impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Host")
            .field(
                "connectors",
                &inner
                    .connectors
                    .iter()
                    .map(|c| c.definition().id.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("capabilities", &inner.capabilities.len())
            .field("deployment", &inner.deployment)
            .field("limits", &inner.limits)
            .field("retention", &inner.retention)
            .finish_non_exhaustive()
    }
}

/// The results of the executions a cancellation reached ([`Host::cancel_as_watched`]).
pub(crate) struct Settling {
    host: Arc<HostInner>,
    tickets: Vec<u64>,
    results: Vec<tokio::sync::oneshot::Receiver<ActionResult>>,
}

impl Settling {
    /// The result the cancelled action settled with, once it has. With several executions of
    /// the id (an action sent twice at once, without a key), once each has, when they agree
    /// on the status; `None` when they do not, or when an execution ended without a result
    /// (its task was aborted).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) async fn result(mut self) -> Option<ActionResult> {
        let mut settled: Option<ActionResult> = None;
        for receiver in std::mem::take(&mut self.results) {
            let result = receiver.await.ok()?;
            match &settled {
                Some(first) if first.status != result.status => return None,
                Some(_) => {}
                None => settled = Some(result),
            }
        }
        settled
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        self.host.active.unwatch(&self.tickets);
    }
}

/// What [`Host::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The action was executing; its handler's cancellation signal fired. The host stops
    /// waiting for the handler at once, so its result is normally `cancelled`, but not always:
    /// a handler that finished in the poll that saw the signal keeps its success (its work is
    /// done), as does a failure that reports what reached the provider. The result its caller
    /// receives (and a keyed resend replays) is the one to trust; a server answers a cancel
    /// with that result once the action has settled (docs/serving.md).
    Cancelled,
    /// The action is not executing and the cancellation could not be remembered: the host
    /// holds [`MAX_PENDING_CANCELS`] already, or this caller [`MAX_PENDING_CANCELS_PER_CALLER`]
    /// ([`Host::cancel_as`]). Nothing changed; a later cancel may be remembered.
    NotActive,
    /// The id is longer than [`HostLimits::max_id_bytes`]: no action with it passes stage 0,
    /// so there is nothing to cancel, now or later. Nothing was remembered.
    IdTooLong {
        /// The host's [`HostLimits::max_id_bytes`].
        max_id_bytes: usize,
    },
    /// The id is empty or holds a NUL character: stage 0 refuses such an action
    /// (`action.invalid`), so there is nothing to cancel, now or later. Nothing was remembered
    /// (a hostile-input review found each such cancel holding a remembered slot for a minute).
    IdInvalid,
    /// The action is not executing (not started yet, finished, or unknown). The cancellation is
    /// remembered for 60 s: if the action starts in that time it is answered `cancelled` before
    /// its handler runs. An action that already finished keeps its result, and a re-sent action
    /// that replays a stored result replays it; a re-sent action without a key that runs again
    /// after a success or a permanent failure is answered `cancelled` (docs/host-runtime.md
    /// §7.2).
    Pending,
    /// The action is not executing: an execution of it ended, less than 60 s ago, with a
    /// retryable failure, and no later execution has reached its handler since. The caller may
    /// retry it (its key, if it had one, was released); the cancellation came too late for the
    /// execution that failed and is not remembered, so it does not cancel the retry: cancel the
    /// retry once its handler runs. Only the action's own caller (or an operator,
    /// [`Host::cancel`]) gets this answer; another caller's cancel of the same id is
    /// [`Pending`](Self::Pending). The host keeps at most [`MAX_PENDING_CANCELS`] such notes,
    /// [`MAX_PENDING_CANCELS_PER_CALLER`] of one caller; beyond them the answer is `Pending`
    /// (docs/host-runtime.md §7.2).
    AlreadyFinished,
}

impl Host {
    /// Starts building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder {
            connectors: Vec::new(),
            store: None,
            deployment: Deployment::default(),
            authority: None,
            limits: HostLimits::default(),
            clock: Arc::new(SystemClock),
            policy: AdmissionPolicy::strict(),
            retention: Retention::KEEP_FOREVER,
        }
    }

    /// The admitted manifests, one per connector.
    pub fn manifests(&self) -> impl Iterator<Item = &AdmittedManifest> {
        self.inner.manifests.iter().map(|m| m.as_ref())
    }

    /// The deadline a call of `capability` that sets no timeout of its own gets here: its SLA
    /// timeout, else the host's default (`None` for a capability the host does not serve). An
    /// MCP call sets none: the MCP projection keeps its sessions open at least this long.
    #[cfg(feature = "mcp")]
    pub(crate) fn default_deadline_ms(&self, capability: &CapabilityId) -> Option<u64> {
        let hosted = self.inner.capabilities.get(capability)?;
        Some(
            hosted
                .capability()
                .contract
                .as_ref()
                .and_then(|contract| contract.sla.as_ref()?.timeout_ms)
                .unwrap_or(self.inner.limits.default_timeout_ms),
        )
    }

    /// Whether `capability` runs only as the compensation of another capability (its handler
    /// takes `Compensation`): an action naming it is refused (`transaction.context_missing`).
    pub fn compensates_only(&self, capability: &str) -> bool {
        self.inner
            .capabilities
            .get(capability)
            .is_some_and(|hosted| hosted.compensation_only)
    }

    /// Runs `action` for the transport-authenticated `caller` through the whole pipeline.
    /// Never panics on bad input: every refusal is a failed result with a typed error.
    ///
    /// The action moves to the heap here, once: the returned future then carries a pointer to it
    /// rather than the action itself, so moving or spawning the future copies little.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (a `tokio::time::timeout` around the call, a web framework that drops
    /// a request's future when its client disconnects) abandons the action, as its transport
    /// would with [`abandon_as`](Self::abandon_as): the handler's cancellation token fires and
    /// its future is dropped, and what the call holds is settled on a task spawned on the
    /// current Tokio runtime, with what the call would have answered: `sla.timeout_exceeded`
    /// if its deadline had passed, `cancelled` if a cancel had stopped its handler (or its
    /// validation or reconcile handler), else
    /// `action.abandoned`, retryable (the key released, so a resend runs the action again)
    /// when the handler had not started or the contract's `retry_safety` allows a retry, else
    /// stored under the key and replayed. A transaction it admitted settles as an interrupted
    /// one does (`outcome_unknown` after a time-out or a checkpoint), or with the handler's
    /// answer if the handler had answered; a claimed resume is given back when the result is
    /// retryable. The cancel companion is not called (or is dropped, if it was running). A
    /// store write in flight at the drop may or may not land, unseen (on SQLite and
    /// PostgreSQL; the memory store finishes its writes before they first return), and a
    /// future dropped outside a runtime, or in one that never runs again, settles nothing
    /// (docs/host-runtime.md §7.2, "Dropping a call"). For a deadline, give the action one
    /// (`Action::with_timeout_ms`, or the capability's `sla(timeout_ms)`): it ends as
    /// `sla.timeout_exceeded` in the call and its cancel companion is asked to stop the
    /// provider's work. To stop an action, call [`cancel`](Self::cancel).
    pub fn invoke<'a>(
        &'a self,
        action: Action,
        caller: &'a TrustedContext,
    ) -> impl Future<Output = ActionResult> + Send + 'a {
        pipeline::run(
            &self.inner,
            Arc::new(action),
            caller,
            pipeline::Options::default(),
        )
    }

    /// Like [`invoke`](Self::invoke), streaming: chunks in strictly increasing sequence, then
    /// exactly one terminal chunk carrying the result.
    ///
    /// Unlike `invoke`, it takes the caller by value: the call runs on a task of its own, which
    /// outlives this borrow of the host, so it must own what it reads (clone a caller you keep).
    pub fn invoke_stream(&self, action: Action, caller: TrustedContext) -> ChunkStream {
        stream::start(self.inner.clone(), action, caller)
    }

    /// Cancels an action whoever runs it, as an operator would: an executing one at once
    /// (every execution of it, should the same action id run twice at once), one that has not
    /// started yet when it starts (see [`CancelOutcome::Pending`]). A cancel after the terminal
    /// result leaves that result alone. After a retryable failure it is late for that execution
    /// and not remembered ([`CancelOutcome::AlreadyFinished`], within the bounds said there), so
    /// the retry runs; after any other result it is remembered for 60 s (`Pending`) and cancels a re-run of the same
    /// action id that does not replay a stored result. Servers use
    /// [`cancel_as`](Self::cancel_as) instead.
    pub fn cancel(&self, action_id: &ActionId) -> CancelOutcome {
        self.cancel_owned_by(action_id, None, None)
    }

    /// Cancels an action on behalf of `caller`: like [`cancel`](Self::cancel), but only an
    /// action the same principal runs in the same tenant is affected. Another caller's action
    /// with that id is left running and the answer is as if it were not executing, so a caller
    /// cannot probe or disturb other callers' actions.
    pub fn cancel_as(&self, action_id: &ActionId, caller: &TrustedContext) -> CancelOutcome {
        self.cancel_owned_by(action_id, Some(&self.owner_of(caller)), None)
    }

    /// [`cancel_as`](Self::cancel_as), and what to await for the result the action then
    /// settles with: when the answer is [`CancelOutcome::Cancelled`], the result of each
    /// execution it reached (otherwise nothing, and [`Settling::result`] is `None`). The
    /// servers answer a cancel with it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn cancel_as_watched(
        &self,
        action_id: &ActionId,
        caller: &TrustedContext,
    ) -> (CancelOutcome, Settling) {
        let mut settling = Settling {
            host: Arc::clone(&self.inner),
            tickets: Vec::new(),
            results: Vec::new(),
        };
        let outcome =
            self.cancel_owned_by(action_id, Some(&self.owner_of(caller)), Some(&mut settling));
        (outcome, settling)
    }

    /// Gives up on an action on behalf of its transport: the request carrying it timed out, its
    /// caller went away (a dropped connection, a closed MCP session, an MCP
    /// `notifications/cancelled`), or the server is draining. Like
    /// [`cancel_as`](Self::cancel_as) for the executing action of `caller` (its handler's
    /// cancellation fires), but nobody asked for the cancellation, so its result is not the
    /// `cancelled` that a duplicate replays: it is the failure `action.abandoned`, retryable
    /// when the contract's `retry_safety` allows a retry (a read, or a handler that takes the
    /// key and can forward it to its provider, which answers the retry with the first attempt's
    /// outcome), so the action's idempotency key is released and the caller's retry with the
    /// same key runs the action again. Otherwise it is stored, as a permanent failure is. A commit or execute
    /// abandoned after its checkpoint is an unknown outcome, as a timed-out one is.
    ///
    /// An action that is not executing (its handler not started, or not yet waiting, or
    /// finished) is left alone and [`CancelOutcome::NotActive`] is answered; nothing is
    /// remembered. Call again until it answers [`CancelOutcome::Cancelled`] or the action
    /// ends, as the servers built on the host do (every 5 ms);
    /// [`cancel_as`](Self::cancel_as) is for a caller's explicit cancellation.
    pub fn abandon_as(&self, action_id: &ActionId, caller: &TrustedContext) -> CancelOutcome {
        if self
            .inner
            .active
            .cancel(action_id, Some(&self.owner_of(caller)), false)
        {
            CancelOutcome::Cancelled
        } else {
            CancelOutcome::NotActive
        }
    }

    /// The owner `caller` is of the actions it runs: its principal in its tenant.
    fn owner_of(&self, caller: &TrustedContext) -> ActionOwner {
        self.inner.owner_of(caller)
    }

    /// Cancels or remembers the cancellation of `action_id` when `owner` (if any) runs it.
    fn cancel_owned_by(
        &self,
        action_id: &ActionId,
        owner: Option<&ActionOwner>,
        watch: Option<&mut Settling>,
    ) -> CancelOutcome {
        // No action with a longer id passes stage 0, so there is nothing to cancel; remembering
        // the id would only hold the caller's bytes for a minute.
        if action_id.as_str().len() > self.inner.limits.max_id_bytes {
            return CancelOutcome::IdTooLong {
                max_id_bytes: self.inner.limits.max_id_bytes,
            };
        }
        if action_id.as_str().is_empty() || action_id.as_str().contains('\0') {
            return CancelOutcome::IdInvalid;
        }
        self.inner
            .active
            .cancel_or_remember(action_id, owner, self.inner.clock.now_ms(), watch)
    }

    /// Deletes the idempotency records and retry-attempt counts of the host's store whose expiry
    /// has passed on the host clock, in passes of at most `batch` entries of each kind (at
    /// least one), until a pass deletes fewer; returns the totals.
    ///
    /// Expired entries already read as absent, so no call answers differently after a purge;
    /// without one, a store keeps an expired entry until its key is used again
    /// ([`IdempotencyStore::purge_expired`](crate::store::IdempotencyStore::purge_expired)).
    /// Between passes other writers get the store (SQLite's write lock is released), so a
    /// long-running host calls this periodically:
    ///
    /// ```no_run
    /// # async fn run(host: aip_connector::host::Host) {
    /// let mut every = tokio::time::interval(std::time::Duration::from_secs(600));
    /// loop {
    ///     every.tick().await;
    ///     if let Err(error) = host.purge_expired(1_000).await {
    ///         tracing::warn!(%error, "purging expired idempotency entries failed");
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn purge_expired(&self, batch: usize) -> Result<Purged, StoreError> {
        let batch = batch.max(1);
        let mut total = Purged::default();
        loop {
            let now = self.inner.clock.now_ms();
            let pass = self.inner.store.purge_expired(now, batch).await?;
            total.records += pass.records;
            total.attempt_counts += pass.attempt_counts;
            if !pass.reached(batch) {
                return Ok(total);
            }
        }
    }

    /// Deletes the approval and transaction records the host's [`Retention`] no longer keeps,
    /// in passes of at most `batch` records of each family (at least one), until a pass
    /// deletes fewer; returns the totals. With [`Retention::KEEP_FOREVER`] (the default) it
    /// deletes nothing and does not touch the store.
    ///
    /// Only records nothing can change any more are deleted: approvals that are closed
    /// ([`ApprovalRecord::is_closed`]), transactions that are finished
    /// ([`TransactionRecord::is_finished`](crate::store::TransactionRecord::is_finished)), and
    /// plans nobody committed, once expired.
    /// Afterwards their ids are unknown: a decision on a deleted approval, or the re-submission
    /// of its action, is refused as for an id never issued. Keep approvals at least as long as
    /// the idempotency TTL of the capabilities they gate: a resend under the key of an action
    /// whose approval was deleted answers `policy.approval_not_found`, no longer how the
    /// approval ended. `AipServer::serve` and the MCP `serve_http` run
    /// this with [`purge_expired`](Self::purge_expired) at every purge interval.
    pub async fn purge_closed(&self, batch: usize) -> Result<PurgedRecords, StoreError> {
        let batch = batch.max(1);
        let retention = self.inner.retention;
        let store = &self.inner.store;
        let clock = &self.inner.clock;
        let mut total = PurgedRecords::default();
        if let Some(period) = retention.approvals {
            total.approvals = in_passes(batch, || {
                let now = clock.now_ms();
                store.purge_closed_approvals(now.saturating_sub(millis(period)), now, batch)
            })
            .await?;
        }
        if let Some(period) = retention.transactions {
            total.transactions = in_passes(batch, || {
                let updated_before = clock.now_ms().saturating_sub(millis(period));
                store.purge_finished_transactions(updated_before, batch)
            })
            .await?;
        }
        Ok(total)
    }

    /// Forgets the result stored under `action`'s idempotency key when it changed nothing, so
    /// that the same call, made again with the same key, runs again instead of replaying it;
    /// true when a stored result was forgotten. `action` is the action as sent (its capability,
    /// id and key name the scoped key; its input is not read), `caller` the caller it ran as.
    ///
    /// What the store holds decides, not what the caller was answered: a failure the
    /// connector reported as definite (`details.uncertain_outcome: false`, no
    /// `side_effects_committed`), or a `pending_approval` whose approval was denied, revoked
    /// or expired. Anything else stays stored and replayed: a success, an uncertain outcome,
    /// a timeout, an abandoned or panicked handler, a dead letter, a refusal of the host's.
    /// Only the caller's own result goes (same capability, principal and tenant), and only
    /// while the key still holds it ([`IdempotencyStore::forget_record`]).
    ///
    /// A projection calls this for a key it derived itself, one its client never chose (the
    /// MCP projection's `mcp-args-…` keys): such a client has no other way to ask for a
    /// new attempt. A key a caller sent keeps its results for the key's TTL; this is not for
    /// those.
    ///
    /// [`IdempotencyStore::forget_record`]: crate::store::IdempotencyStore::forget_record
    pub async fn forget_unchanged(
        &self,
        action: &Action,
        caller: &TrustedContext,
    ) -> Result<bool, StoreError> {
        idempotency::forget_unchanged(&self.inner, action, caller).await
    }

    /// Records an approval decision by the authenticated `approver` and returns the record.
    ///
    /// The approver belongs to the tenant its transport verified, else to the deployment's
    /// tenant, as every caller does: an approver of another tenant than the request's is told
    /// the approval does not exist, whatever the authority says. Within that, an authority
    /// that names the approver's tenant (`ApproverMemberships::tenant_id`) must name the
    /// request's (docs/host-runtime.md §5.3).
    ///
    /// Every decision is logged (`tracing`, target `aip_connector::host`): `approval decision
    /// recorded` at info with the approval, action and capability ids, the approver, the
    /// decision and the approval's status; `approval decision refused` at warn with the
    /// approval id the decision named, the approver, the decision and the refusal's code. The
    /// decision's reason and evidence are not logged.
    pub async fn record_approval_decision(
        &self,
        decision: ApprovalDecision,
        approver: &TrustedContext,
    ) -> Result<ApprovalRecord, ProtocolError> {
        let max_id_bytes = self.inner.limits.max_id_bytes;
        let kind = decision_name(decision.decision);
        let named = decision.approval_id.clone();
        let outcome = self.decide(decision, approver).await;
        let approver_id = pipeline::Clipped::new(approver.principal.id.as_str(), max_id_bytes);
        match &outcome {
            Ok(record) => tracing::info!(
                approval_id = %record.approval_id,
                action_id = %pipeline::Clipped::new(record.action.id.as_str(), max_id_bytes),
                capability_id = %record.capability_id,
                approver = %approver_id,
                decision = kind,
                status = %record.status,
                "approval decision recorded"
            ),
            Err(error) => tracing::warn!(
                approval_id = %pipeline::Clipped::new(named.as_str(), max_id_bytes),
                approver = %approver_id,
                decision = kind,
                code = %error.code,
                "approval decision refused"
            ),
        }
        outcome
    }

    /// [`record_approval_decision`](Self::record_approval_decision) without its log line.
    async fn decide(
        &self,
        decision: ApprovalDecision,
        approver: &TrustedContext,
    ) -> Result<ApprovalRecord, ProtocolError> {
        approval::check_decision_size(&decision, self.inner.limits.max_decision_bytes)?;
        let approver = match (&approver.tenant, self.inner.tenant_of(approver)) {
            (None, Some(deployment)) => {
                std::borrow::Cow::Owned(approver.clone().with_tenant(deployment.clone()))
            }
            _ => std::borrow::Cow::Borrowed(approver),
        };
        approval::record_decision(
            self.inner.store.as_ref(),
            self.inner.authority.as_ref(),
            self.inner.clock.as_ref(),
            decision,
            &approver,
            &|capability_id| {
                self.inner
                    .capabilities
                    .get(capability_id.as_str())
                    .and_then(|hosted| hosted.capability().risk)
            },
        )
        .await
    }

    /// The approval record, with expiry applied: a pending record past its TTL is stored as
    /// expired before it is returned.
    ///
    /// Operator access: it returns any tenant's record, its input included. For a caller, use
    /// [`approval_view`](Self::approval_view).
    pub async fn approval(&self, id: &ApprovalId) -> Result<Option<ApprovalRecord>, ProtocolError> {
        approval::expire_if_due(self.inner.store.as_ref(), id, self.inner.clock.now_ms()).await
    }

    /// The approval as `caller` may see it: `None` when there is none *in the caller's tenant*
    /// (another tenant's approval is not revealed). Expiry is applied first.
    pub async fn approval_view(
        &self,
        id: &ApprovalId,
        caller: &TrustedContext,
    ) -> Result<Option<ApprovalRecordView>, ProtocolError> {
        let tenant = self.inner.tenant_of(caller).map(|t| t.id.as_str());
        Ok(self
            .approval(id)
            .await?
            .filter(|record| record.tenant_id.as_deref() == tenant)
            .map(|record| record.view()))
    }

    /// Runs an approved action, exactly once, under its original idempotency key. Denied,
    /// expired and revoked approvals give the matching `policy.*` failure.
    ///
    /// Only the requester, in the approval's tenant, may resume it: another tenant's approval is
    /// `policy.approval_not_found`, as an unknown one, and another principal of the tenant gets
    /// `auth.not_authorized`. When the policy keeps the operator from approving
    /// (`operator_must_differ`), the resume must run under the operator of the request, the one
    /// its approvers were checked against (`policy.separation_of_duties.operator` otherwise).
    /// A pending approval gives `policy.approval_not_granted`; an approved action
    /// whose input was redacted, `policy.approval_resubmission_required` (re-submit the action
    /// instead); one that already ran, `policy.approval_already_resumed`; an unknown id,
    /// `policy.approval_not_found` under a fresh action id. A retryable result gives the claim
    /// back, so a later resume runs the action again.
    ///
    /// An action sent for streaming (mode `streaming`, as [`invoke_stream`](Self::invoke_stream)
    /// sends it) runs only with a stream: it is refused here with `execution.mode_unsupported`
    /// before anything is claimed; resume it with
    /// [`resume_approved_stream`](Self::resume_approved_stream).
    pub async fn resume_approved(&self, id: &ApprovalId, caller: &TrustedContext) -> ActionResult {
        pipeline::resume(&self.inner, id, caller).await
    }

    /// [`resume_approved`](Self::resume_approved), streamed: runs the approved action exactly
    /// once, as [`invoke_stream`](Self::invoke_stream) runs an action, and answers its chunks
    /// and the one terminal chunk carrying the result. Every refusal of `resume_approved`
    /// (unknown id, another caller, not approved, already resumed, redacted input) is the
    /// stream's terminal chunk alone. An action the gate saw without a mode streams as
    /// `streaming`; one sent with another mode runs in that mode, its terminal chunk its result.
    ///
    /// ```no_run
    /// # async fn resume(host: &aip_connector::host::Host, approval: aip_connector::ids::ApprovalId, caller: aip_connector::host::TrustedContext) {
    /// let mut chunks = host.resume_approved_stream(&approval, caller);
    /// while let Some(chunk) = chunks.next().await {
    ///     println!("{} {:?}", chunk.sequence, chunk.kind);
    /// }
    /// # }
    /// ```
    pub fn resume_approved_stream(&self, id: &ApprovalId, caller: TrustedContext) -> ChunkStream {
        stream::resume(self.inner.clone(), id.clone(), caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, owner: Option<&str>) -> PendingCancel {
        PendingCancel {
            id: ActionId::trusted(id),
            owner: owner.map(|principal| ActionOwner {
                principal: PrincipalId::from(principal),
                tenant: Some("t1".to_owned()),
            }),
        }
    }

    fn owner(principal: &str) -> ActionOwner {
        key("act_x", Some(principal)).owner.unwrap()
    }

    /// Every way an entry comes and goes keeps the per-caller counts equal to the entries.
    #[test]
    fn pending_cancels_count_each_callers_entries() {
        let mut pending = PendingCancels::default();
        assert!(!pending.insert(key("act_1", Some("ada")), 100));
        assert!(!pending.insert(key("act_2", Some("ada")), 200));
        assert!(!pending.insert(key("act_1", Some("eve")), 100));
        assert!(!pending.insert(key("act_1", None), 100));
        // A renewal is not a new entry.
        assert!(pending.insert(key("act_2", Some("ada")), 300));
        assert_eq!(pending.len(), 4);
        assert_eq!(pending.held_by(&owner("ada")), 2);
        assert_eq!(pending.held_by(&owner("eve")), 1);

        assert_eq!(pending.remove(&key("act_1", Some("ada"))), Some(100));
        assert_eq!(pending.remove(&key("act_1", Some("ada"))), None);
        assert_eq!(pending.held_by(&owner("ada")), 1);

        // At 100 the entries lapsing then go, with their callers' counts.
        assert_eq!(pending.drop_lapsed(100), 2);
        assert_eq!(pending.held_by(&owner("eve")), 0);
        assert!(!pending.per_caller.contains_key(&owner("eve")));
        assert_eq!(pending.held_by(&owner("ada")), 1);
        assert_eq!(pending.drop_lapsed(300), 1);
        assert_eq!(pending.len(), 0);
        assert!(pending.per_caller.is_empty());
    }
}
