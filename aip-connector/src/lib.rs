//! # aip-connector
//!
//! Write connectors for AIP (the Agent Interoperability Protocol 1.0) as annotated async
//! functions.
//!
//! - [`macro@capability`] on a handler declares one capability: its contract is checked at compile
//!   time by the same rules runtime admission uses, its schemas are derived from the handler's
//!   types, and its implementation support is derived from the handler's signature.
//! - [`macro@connector`] on an `impl` block assembles the connector: manifest, support map and
//!   dispatch by capability id.
//! - Handler parameters are the input plus [extractors](crate::extract): [`IdempotencyKey`],
//!   [`Cancellation`], [`Deadline`], [`StreamSink`], [`Checkpoint`], [`Credential`], [`Tenant`],
//!   [`Caller`], [`Approval`], [`Compensation`], [`ClaimedPlan`].
//!
//! - [`webhook`] receives a provider's signed event deliveries: verified, refused when stale or
//!   replayed, handled once per delivery id.
//!
//! The wire model, the contract rules and manifest admission come from
//! [`aip_connector_core`], re-exported under its own name (not as `core`, which a glob import
//! of this crate would make shadow the language's `core::`); [`model`], [`ids`], [`admission`],
//! [`discovery`] and [`rules`] are re-exported at the top.
//!
//! Features: `sqlite` and `postgres` (on by default) add the durable stores, `http` the AIP
//! HTTP server and client, `mcp` the MCP projection (the crate README has the table).
// Every public type can be printed (secrets redacted by hand-written impls).
#![warn(missing_debug_implementations)]
// docs.rs (nightly) labels each item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
mod cache_line;
pub mod codes;
pub mod connector;
mod display;
pub mod extract;
pub mod handler;
pub mod host;
pub mod invocation;
pub mod provider;
pub mod schema;
#[cfg(feature = "http")]
pub mod serve;
pub mod store;
mod task;
pub mod webhook;

#[doc(hidden)]
pub mod __private;

/// The crate README's example, compiled and run as a doctest so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use aip_connector_core;
/// One problem found by a contract rule, admission or a discovery check: a stable code, a JSON
/// Pointer into the checked manifest, and what to fix.
pub use aip_connector_core::Issue;
pub use aip_connector_core::{admission, discovery, ids, model, rules};
pub use aip_connector_macros::{capability, connector};
/// The `time` crate of the wire model's timestamps (`time::OffsetDateTime` in
/// [`model`] fields), so a connector builds them without pinning a `time` of its own.
pub use time;
/// The token behind [`Cancellation`] and [`InvocationContext::cancellation`], so a connector
/// names it without a `tokio-util` dependency of its own.
pub use tokio_util::sync::CancellationToken;

pub use builder::{
    BuildError, BuiltConnector, ConnectorBuilder, ConnectorState, FreeCapability, FromRef, State,
};
pub use connector::{
    CancelReason, CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition,
    ReconcileOutcome, Reconciliation, StaticDefinition,
};
pub use extract::{
    Approval, Caller, Cancellation, Checkpoint, ClaimedPlan, Compensation, Credential, Deadline,
    ExtractorKind, IdempotencyKey, StreamItem, StreamSink, Tenant,
};
pub use handler::{CapabilityInput, CapabilityOutput, HandlerError, HandlerResult};
pub use invocation::{
    CallerIdentity, CancelHandle, CompensationTarget, CredentialHandle, InvocationContext, Secret,
    StaticInvocation, VerifiedApprovals, VerifiedTenant,
};
pub use provider::{ProviderClient, ProviderResponse};
pub use schema::SchemaDialect;

/// Everything a connector author usually needs, in one import.
///
/// # At a glance
///
/// What a handler can take and what it can call, one line each. Every name links to its full
/// documentation, and `RUSTDOCFLAGS=-Dwarnings cargo doc` fails when one of them stops existing,
/// so these tables follow the code. The guides go further: `docs/extractors.md`,
/// `docs/attribute-reference.md`, `docs/provider-client.md` and `docs/transactions.md`.
///
/// ## Handler parameters
///
/// After its input (at most one), a handler takes any of these, each at most once and by value.
/// "Contract" is what taking one derives or needs in `#[capability(...)]`; a contract that
/// disagrees with the signature is a compile error.
///
/// | Parameter | Gives | Most used | Contract |
/// |---|---|---|---|
/// | [`IdempotencyKey`] | the action's idempotency key | [`for_provider`][key-fp], [`scoped`][key-scoped], [`as_str`][key-as] | derives `idempotency(required)` and `execution(retry)` |
/// | [`Checkpoint`] | a durable record of the provider operation | [`operation_for`][cp-for], [`record`][cp-record], [`recorded`][cp-recorded] | a `transaction(...)` section (not beside `Compensation`) |
/// | [`ClaimedPlan`] | the plan a `commit` claims, as approved | [`validation_as`][plan-va], [`id`][plan-id], [`plan`][plan-plan] | modes `plan` and `commit`, without `execute` |
/// | [`Compensation`] | the settled action being undone | [`target`][comp-target], [`output_as`][ct-output], [`provider_operation`][ct-op] | the undone capability's `compensation(capability = "...")` names this one |
/// | [`Approval`] | the verified approvals that released the action | [`approvals`][appr-all] | `approval(...)`, approval required |
/// | [`Caller`] | the transport-authenticated caller | [`principal_id`][caller-id], [`issuer`][caller-iss] | nothing |
/// | [`Tenant`] | the verified tenant | [`id`][tenant-id], [`system`][tenant-sys] | nothing |
/// | [`Credential`] | the credential resolved for this call | [`secret`][cred-secret], [`scopes`][cred-scopes], [`expires_at_ms`][cred-exp] | `credentials(...)`, a credential required |
/// | [`Deadline`] | when the handler must be done | [`remaining`][dl-rem], [`at`][dl-at]; pass it to [`deadline`][rq-deadline] | nothing |
/// | [`Cancellation`] | fires on cancel or deadline, and when the call ends | [`is_cancelled`][cancel-is], [`cancelled`][cancel-await], [`token`][cancel-token], [`set_handle`][cancel-handle] | derives `execution(cancel)` |
/// | [`State<S>`][x-state] | the connector's state, in a free capability | `State(client): State<Client>` | built by [`ConnectorBuilder::with_state`][with-state]; refused in `#[connector]` |
/// | [`StreamSink<T>`][x-sink] | emits stream chunks, with back-pressure | [`send`][sink-send], [`progress`][sink-progress] | derives `execution(streaming)` only; `sync` and `async` are refused |
///
/// [key-fp]: crate::IdempotencyKey::for_provider
/// [key-scoped]: crate::IdempotencyKey::scoped
/// [key-as]: crate::IdempotencyKey::as_str
/// [cp-for]: crate::Checkpoint::operation_for
/// [cp-record]: crate::Checkpoint::record
/// [cp-recorded]: crate::Checkpoint::recorded
/// [plan-va]: crate::ClaimedPlan::validation_as
/// [plan-id]: crate::ClaimedPlan::id
/// [plan-plan]: crate::ClaimedPlan::plan
/// [comp-target]: crate::Compensation::target
/// [ct-output]: crate::CompensationTarget::output_as
/// [ct-op]: crate::CompensationTarget::provider_operation
/// [appr-all]: crate::Approval::approvals
/// [caller-id]: crate::Caller::principal_id
/// [caller-iss]: crate::Caller::issuer
/// [tenant-id]: crate::Tenant::id
/// [tenant-sys]: crate::Tenant::system
/// [cred-secret]: crate::Credential::secret
/// [cred-scopes]: crate::Credential::scopes
/// [cred-exp]: crate::Credential::expires_at_ms
/// [dl-rem]: crate::Deadline::remaining
/// [dl-at]: crate::Deadline::at
/// [cancel-is]: crate::Cancellation::is_cancelled
/// [cancel-await]: crate::Cancellation::cancelled
/// [cancel-token]: crate::Cancellation::token
/// [cancel-handle]: crate::Cancellation::set_handle
/// [x-state]: crate::State
/// [with-state]: crate::ConnectorBuilder::with_state
/// [x-sink]: crate::StreamSink
/// [sink-send]: crate::StreamSink::send
/// [sink-progress]: crate::StreamSink::progress
///
/// ## Companion handlers
///
/// Named on the capability, `reconcile = Self::find`, `cancel = Self::stop` or
/// `validate = Self::check`; `E` is any type that is `Into<ConnectorFailure>`.
///
/// | Item | What it is |
/// |---|---|
/// | `reconcile` | `async fn(&self, Reconciliation) -> Result<ReconcileOutcome, E>`; needs the `reconcile` mode |
/// | [`Reconciliation`] | its argument: the transaction whose outcome is unknown |
/// | [`Reconciliation::provider_operation`][rec-op] | the operation the handler's `Checkpoint` recorded |
/// | [`Reconciliation::cursor`][rec-cursor] | the cursor recorded last: where to resume |
/// | [`Reconciliation::checkpoint_cursor`][rec-cp-cursor] | the handler's own cursor, which no `Pending` answer replaces |
/// | [`Reconciliation::compensation_for`][rec-comp] | set when the lost answer was a compensation's |
/// | [`Reconciliation::transaction_id`][rec-txn] | the transaction being settled |
/// | [`Reconciliation::tenant`][rec-tenant], [`credential`][rec-cred] | the `reconcile` action's: look up as the write authenticated |
/// | [`Reconciliation::new`][rec-new] and `with_*` | build one in a unit test |
/// | [`ReconcileOutcome::Committed`] `{ evidence }` | the answer when the provider applied the effect |
/// | [`ReconcileOutcome::NotCommitted`] `{ evidence }` | the answer when it did not |
/// | [`ReconcileOutcome::Pending`] `{ cursor }` | no final answer yet; `cursor` comes back next time |
/// | `cancel` | `async fn(&self, CancelRequest) -> Result<(), E>`; called once the handler was stopped |
/// | [`CancelRequest`] | its argument: which action stopped, why, what it held |
/// | [`CancelRequest::action_id`][cr-action] | the stopped action |
/// | [`CancelRequest::input`][cr-input] | its input: what names the thing to stop |
/// | [`CancelRequest::idempotency_key`][cr-key] | its key as the provider knows it (`for_provider`) |
/// | [`CancelRequest::reason`][cr-reason] | a [`CancelReason`]: [`Requested`][reason-req] or [`DeadlineExceeded`][reason-dl] |
/// | [`CancelRequest::handle`][cr-handle] | what the handler named its provider work by ([`set_handle`][cancel-handle]) |
/// | [`CancelRequest::tenant`][cr-tenant], [`credential`][cr-cred] | what the stopped handler held |
/// | [`CancelRequest::new`][cr-new] and `with_*` | build one in a unit test |
/// | `validate` | `async fn(&self, Input, extractors...) -> Result<T, E>`, `T: Serialize + JsonSchema` |
/// | its extractors | [`Tenant`], [`Caller`], [`Deadline`], [`Cancellation`], [`Credential`] (with `credentials(...)`) |
/// | its answer | kept in the plan; the commit reads it with [`ClaimedPlan::validation_as`][plan-va] |
/// | its contract | `fidelity = downstream_validation` or `full_simulation`, with `dry_run` or `plan` |
///
/// [rec-op]: crate::Reconciliation::provider_operation
/// [rec-cursor]: crate::Reconciliation::cursor
/// [rec-cp-cursor]: crate::Reconciliation::checkpoint_cursor
/// [rec-comp]: crate::Reconciliation::compensation_for
/// [rec-txn]: crate::Reconciliation::transaction_id
/// [rec-tenant]: crate::Reconciliation::tenant
/// [rec-cred]: crate::Reconciliation::credential
/// [rec-new]: crate::Reconciliation::new
/// [x-outcome]: crate::ReconcileOutcome
/// [cr-action]: crate::CancelRequest::action_id
/// [cr-input]: crate::CancelRequest::input
/// [cr-key]: crate::CancelRequest::idempotency_key
/// [cr-reason]: crate::CancelRequest::reason
/// [cr-handle]: crate::CancelRequest::handle
/// [cr-tenant]: crate::CancelRequest::tenant
/// [cr-cred]: crate::CancelRequest::credential
/// [cr-new]: crate::CancelRequest::new
/// [reason-req]: crate::CancelReason::Requested
/// [reason-dl]: crate::CancelReason::DeadlineExceeded
///
/// ## Provider calls
///
/// Build one [`ProviderClient`] per provider, then one
/// [`ProviderRequest`][x-request] per call, finished by a `send` method.
///
/// | Item | Does |
/// |---|---|
/// | [`ProviderClient::builder`][cl-builder], then [`build`][b-build] | a client for one base URL |
/// | [`bearer_auth`][b-bearer], [`basic_auth`][b-basic], [`secret_header`][b-secret] | a credential sent on every request, redacted in `Debug` |
/// | [`header`][b-header], [`default_timeout`][b-timeout], [`source_component`][b-source] | other headers, the timeout (30 s), the failures' `source` |
/// | [`idempotency_header`][b-idem], [`error_message`][b-error], [`server_errors_uncertain`][b-5xx] | the key's header, the provider's error text, 5xx as uncertain |
/// | [`ProviderClient::new`][cl-new] | a client with every default |
/// | [`get`][cl-get], [`post`][cl-post], [`put`][cl-put], [`patch`][cl-patch], [`delete`][cl-delete], [`request`][cl-request] | start a `ProviderRequest` for a path |
/// | [`path_segment`][x-seg], [`path_segments`][x-segs] | put input into a path safely |
/// | [`idempotency`][rq-idem] | sends the action's key, as [`for_provider`][key-fp] |
/// | [`idempotency_key`][rq-key] | sends a key derived from `for_provider` (one per provider call) |
/// | [`provider_operation`][rq-op] | names the [`ProviderOperationRef`][x-op-ref] on every failure, for reconciliation |
/// | [`operation`][rq-operation] | the [`ConnectorOperation`][x-operation] failures name (default `Invocation`) |
/// | [`header`][rq-header] | one more header, not a credential |
/// | [`bearer_auth`][rq-bearer], [`secret_header`][rq-secret] | this call's credential, replacing the client's |
/// | [`json`][rq-json], [`query`][rq-query] | a JSON body; query parameters, never printed in failures |
/// | [`deadline`][rq-deadline], [`cancellation`][rq-cancel], [`timeout`][rq-timeout] | give up with the action, or after a timeout |
/// | [`mutating`][rq-mutating] | overrides whether the call may change provider state |
/// | [`send_json`][rq-send-json] | sends, decodes a 2xx body as `T` |
/// | [`send_json_optional`][rq-send-opt] | as `send_json`, with `Ok(None)` for a `404` |
/// | [`send_empty`][rq-send-empty] | sends, ignores a 2xx body |
/// | [`send`][rq-send] | sends, returns the [`ProviderResponse`]: [`json`][resp-json], [`status`][resp-status], [`header`][resp-header] |
///
/// `basic_auth` is the builder's only: a request has `bearer_auth` and `secret_header`. Every
/// failure of a call comes back as a classified `ConnectorFailure`.
///
/// [x-request]: crate::provider::ProviderRequest
/// [cl-builder]: crate::provider::ProviderClient::builder
/// [cl-new]: crate::provider::ProviderClient::new
/// [cl-get]: crate::provider::ProviderClient::get
/// [cl-post]: crate::provider::ProviderClient::post
/// [cl-put]: crate::provider::ProviderClient::put
/// [cl-patch]: crate::provider::ProviderClient::patch
/// [cl-delete]: crate::provider::ProviderClient::delete
/// [cl-request]: crate::provider::ProviderClient::request
/// [b-build]: crate::provider::ProviderClientBuilder::build
/// [b-bearer]: crate::provider::ProviderClientBuilder::bearer_auth
/// [b-basic]: crate::provider::ProviderClientBuilder::basic_auth
/// [b-secret]: crate::provider::ProviderClientBuilder::secret_header
/// [b-header]: crate::provider::ProviderClientBuilder::header
/// [b-timeout]: crate::provider::ProviderClientBuilder::default_timeout
/// [b-source]: crate::provider::ProviderClientBuilder::source_component
/// [b-idem]: crate::provider::ProviderClientBuilder::idempotency_header
/// [b-error]: crate::provider::ProviderClientBuilder::error_message
/// [b-5xx]: crate::provider::ProviderClientBuilder::server_errors_uncertain
/// [x-seg]: crate::provider::path_segment
/// [x-segs]: crate::provider::path_segments
/// [rq-idem]: crate::provider::ProviderRequest::idempotency
/// [rq-key]: crate::provider::ProviderRequest::idempotency_key
/// [rq-op]: crate::provider::ProviderRequest::provider_operation
/// [x-op-ref]: crate::model::ProviderOperationRef
/// [rq-operation]: crate::provider::ProviderRequest::operation
/// [rq-header]: crate::provider::ProviderRequest::header
/// [rq-bearer]: crate::provider::ProviderRequest::bearer_auth
/// [rq-secret]: crate::provider::ProviderRequest::secret_header
/// [rq-json]: crate::provider::ProviderRequest::json
/// [rq-query]: crate::provider::ProviderRequest::query
/// [rq-deadline]: crate::provider::ProviderRequest::deadline
/// [rq-cancel]: crate::provider::ProviderRequest::cancellation
/// [rq-timeout]: crate::provider::ProviderRequest::timeout
/// [rq-mutating]: crate::provider::ProviderRequest::mutating
/// [rq-send-json]: crate::provider::ProviderRequest::send_json
/// [rq-send-opt]: crate::provider::ProviderRequest::send_json_optional
/// [rq-send-empty]: crate::provider::ProviderRequest::send_empty
/// [rq-send]: crate::provider::ProviderRequest::send
/// [resp-json]: crate::provider::ProviderResponse::json
/// [resp-status]: crate::provider::ProviderResponse::status
/// [resp-header]: crate::provider::ProviderResponse::header
///
/// ## Failures
///
/// A handler returns `Result<T, ConnectorFailure>` (or any error that is
/// `Into<ConnectorFailure>`).
///
/// | Item | Use |
/// |---|---|
/// | [`ConnectorFailure::permanent`][f-permanent] | refuse the call: `permanent`, not retryable, operation `invocation` |
/// | [`ConnectorFailure::temporary`][f-temporary] | a passing failure: `temporary`, retryable |
/// | [`ConnectorFailure::new`][f-new] | any category and operation (a commit's, a reconciliation's) |
/// | [`with_retry_after_ms`][f-after] | when the provider said when to try again |
/// | [`with_uncertain_outcome`][f-uncertain] | the effect may have happened: reconcile, never retry blindly |
/// | [`with_provider_operation`][f-op] | names the provider operation that may have started |
/// | [`with_committed_side_effects`][f-committed] | failed after an effect that must be compensated |
/// | [`with_redacted_details`][f-details] | structured detail, never payloads or credentials |
/// | [`with_retryable`][f-retryable] | overrides whether it is safe to retry |
/// | [`ErrorCategory`][x-category] | [`Temporary`][ec-temp], [`Permanent`][ec-perm], [`Auth`][ec-auth], [`Policy`][ec-policy], [`Economic`][ec-econ], [`Connector`][ec-conn], [`Transport`][ec-transport] |
/// | [`ConnectorOperation`][x-operation] | the failed operation: [`Invocation`][op-inv], [`TransactionCommit`][op-commit], [`Reconciliation`][op-rec], [`Compensation`][op-comp], [`Cancellation`][op-cancel], ... |
///
/// [f-permanent]: crate::model::ConnectorFailure::permanent
/// [f-temporary]: crate::model::ConnectorFailure::temporary
/// [f-new]: crate::model::ConnectorFailure::new
/// [f-after]: crate::model::ConnectorFailure::with_retry_after_ms
/// [f-uncertain]: crate::model::ConnectorFailure::with_uncertain_outcome
/// [f-op]: crate::model::ConnectorFailure::with_provider_operation
/// [f-committed]: crate::model::ConnectorFailure::with_committed_side_effects
/// [f-details]: crate::model::ConnectorFailure::with_redacted_details
/// [f-retryable]: crate::model::ConnectorFailure::with_retryable
/// [x-category]: crate::model::ErrorCategory
/// [ec-temp]: crate::model::ErrorCategory::Temporary
/// [ec-perm]: crate::model::ErrorCategory::Permanent
/// [ec-auth]: crate::model::ErrorCategory::Auth
/// [ec-policy]: crate::model::ErrorCategory::Policy
/// [ec-econ]: crate::model::ErrorCategory::Economic
/// [ec-conn]: crate::model::ErrorCategory::Connector
/// [ec-transport]: crate::model::ErrorCategory::Transport
/// [x-operation]: crate::model::ConnectorOperation
/// [op-inv]: crate::model::ConnectorOperation::Invocation
/// [op-commit]: crate::model::ConnectorOperation::TransactionCommit
/// [op-rec]: crate::model::ConnectorOperation::Reconciliation
/// [op-comp]: crate::model::ConnectorOperation::Compensation
/// [op-cancel]: crate::model::ConnectorOperation::Cancellation
pub mod prelude {
    pub use crate::provider::{path_segment, path_segments};
    pub use crate::{
        Approval, BuildError, BuiltConnector, Caller, CancelReason, CancelRequest, Cancellation,
        Checkpoint, ClaimedPlan, Compensation, Connector, ConnectorBuilder, Credential, Deadline,
        FromRef, IdempotencyKey, ProviderClient, ReconcileOutcome, Reconciliation, Secret, State,
        StreamSink, Tenant, capability, connector,
    };
    pub use aip_connector_core::model::{
        ConnectorFailure, ConnectorOperation, ErrorCategory, ProviderOperationRef,
    };
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
}
