//! The connector seam: what `#[connector]` (or [`ConnectorBuilder`](crate::ConnectorBuilder))
//! produces and what a host drives.

use std::collections::HashMap;
use std::sync::Arc;

use aip_connector_core::ids::{ActionId, CapabilityId, ProfileId, TransactionId};
use aip_connector_core::model::{
    Capability, CapabilityImplementationSupport, ConnectorFailure, ConnectorOperation, Manifest,
    Principal, ProviderOperationRef, ReconciliationResult,
};
use aip_connector_core::rules::{ImplementationFacts, Waiver};
use serde_json::{Value, json};

use crate::codes;
use crate::invocation::{BoxFuture, CredentialHandle, InvocationContext, VerifiedTenant};

/// Everything declared about one capability: the wire capability (with derived schemas and the
/// compile-time contract), the implementation facts derived from the handler's signature, and
/// the SDK metadata (examples, tags, waivers).
#[derive(Clone, Debug, PartialEq)]
pub struct CapabilityDefinition {
    /// The wire capability.
    pub capability: Capability,
    /// Support record and companion handlers, derived from the signature.
    pub facts: ImplementationFacts,
    /// Valid sample inputs, used by the testkit.
    pub examples: Vec<Value>,
    /// Free-form discovery tags.
    pub tags: Vec<String>,
    /// Reasoned exemptions from waivable lint rules.
    pub waivers: Vec<Waiver>,
}

impl CapabilityDefinition {
    /// The capability id.
    pub fn id(&self) -> &CapabilityId {
        &self.capability.id
    }

    /// The implementation support record.
    pub fn support(&self) -> CapabilityImplementationSupport {
        self.facts.support
    }

    /// Whether the host's approval gate stops every call of this capability (answering
    /// `pending_approval`) until an approval is granted: its contract requires approval, it sets
    /// the legacy `requires_human_approval`, or its risk is above `medium`.
    pub fn waits_for_approval(&self) -> bool {
        approval_required(&self.capability)
    }
}

/// Approval is needed when the contract says so, the legacy flag says so, or risk is above
/// `medium` (the host's automatic-approval ceiling): core's predicate, shared with the rule that
/// checks a compensation's approval can reach its handler.
pub(crate) use aip_connector_core::rules::approval_gated as approval_required;

/// A connector's static description: identity, profiles and capabilities.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectorDefinition {
    /// Stable connector id.
    pub id: String,
    /// The provider identity published as the manifest's `agent`.
    pub agent: Principal,
    /// Profiles the connector speaks.
    pub profiles: Vec<ProfileId>,
    /// Per-profile compatibility metadata published in the manifest. The binding metadata of
    /// the profiles this SDK serves (`native_http`, `mcp`) is filled in by
    /// [`manifest`](Self::manifest) where it is left out.
    pub compatibility: Option<Value>,
    /// The channels published in the manifest: one per webhook receiver the connector
    /// declares ([`discovery::webhook_channel`](crate::discovery::webhook_channel)), then the
    /// channels it declares itself (`#[connector(channels = [...])]`,
    /// [`ConnectorBuilder::channel`](crate::ConnectorBuilder::channel)).
    pub channels: Vec<Value>,
    /// The capabilities, in declaration order.
    pub capabilities: Vec<CapabilityDefinition>,
}

impl ConnectorDefinition {
    /// The manifest: agent, profiles, capabilities, channels, compatibility (naming the
    /// connector, with the routes of the profiles this SDK serves filled in where the
    /// connector declares none: `native_http` `{"messages": "/aip/v1/messages", "manifest":
    /// "/aip/v1/manifest"}`, `mcp` `{"jsonrpc": "/mcp"}`), and the SDK metadata — waivers under `/governance/contract_waivers`, tags and examples under
    /// `/extensions/aip_connector/capabilities/<id>`.
    pub fn manifest(&self) -> Manifest {
        let mut manifest = Manifest::new(self.agent.clone(), self.profiles.iter().cloned());
        manifest.capabilities = self
            .capabilities
            .iter()
            .map(|c| c.capability.clone())
            .collect();
        let mut compatibility = self.compatibility.clone().unwrap_or_else(|| json!({}));
        if let Some(object) = compatibility.as_object_mut() {
            object
                .entry("connector")
                .or_insert_with(|| Value::String(self.id.clone()));
        }
        crate::discovery::fill_served_bindings(&self.profiles, &mut compatibility);
        manifest.compatibility = Some(compatibility);
        manifest.channels = self.channels.clone();
        let waivers: Vec<&Waiver> = self.capabilities.iter().flat_map(|c| &c.waivers).collect();
        if !waivers.is_empty() {
            manifest.governance = Some(json!({ "contract_waivers": waivers }));
        }
        let metadata: serde_json::Map<String, Value> = self
            .capabilities
            .iter()
            .filter(|c| !c.tags.is_empty() || !c.examples.is_empty())
            .map(|c| {
                // Only what was declared: an empty list says nothing (a porting trial read
                // `"tags": []` as a declaration).
                let mut entry = serde_json::Map::new();
                if !c.tags.is_empty() {
                    entry.insert("tags".to_owned(), json!(c.tags));
                }
                if !c.examples.is_empty() {
                    entry.insert("examples".to_owned(), json!(c.examples));
                }
                (c.capability.id.to_string(), Value::Object(entry))
            })
            .collect();
        if !metadata.is_empty() {
            manifest.extensions = Some(json!({ METADATA_EXTENSION: { "capabilities": metadata } }));
        }
        manifest
    }

    /// The implementation support map admission checks claims against.
    pub fn implementation_support(&self) -> HashMap<CapabilityId, CapabilityImplementationSupport> {
        self.capabilities
            .iter()
            .map(|c| (c.capability.id.clone(), c.facts.support))
            .collect()
    }

    /// The definition of capability `id`.
    pub fn capability(&self, id: &str) -> Option<&CapabilityDefinition> {
        self.capabilities.iter().find(|c| c.capability.id == id)
    }
}

/// What a reconcile handler is asked: the transaction whose outcome is unknown and the
/// provider operation its handler checkpointed.
///
/// Built by the host; a unit test of a reconcile handler builds one with
/// [`Reconciliation::new`] and the `with_*` setters (new fields may come in minor versions).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reconciliation {
    /// The transaction.
    pub transaction_id: TransactionId,
    /// The provider operation recorded by the handler's `Checkpoint`.
    pub provider_operation: ProviderOperationRef,
    /// The last cursor recorded: the one the handler's `Checkpoint` recorded, replaced by the
    /// cursor of each later pending (non-terminal) answer that carries one. Where to resume.
    pub cursor: Option<String>,
    /// The cursor the handler's `Checkpoint` recorded, which no pending answer replaces: what
    /// the handler wrote down about the call (a resource its input named).
    pub checkpoint_cursor: Option<String>,
    /// The verified tenant of the `reconcile` action, to pick the tenant's provider account.
    pub tenant: Option<VerifiedTenant>,
    /// The credential resolved for the `reconcile` action, when the contract declares a
    /// credential policy: the lookup authenticates like the call it settles. (Its `Debug` never
    /// shows the secret.)
    pub credential: Option<CredentialHandle>,
    /// Set when the transaction is the compensation of this action, whose answer was lost:
    /// the operation is then the one the compensating handler checkpointed (a refund, a
    /// cancellation), not one of the capability's own, and `committed` says whether the undo
    /// took effect.
    pub compensation_for: Option<ActionId>,
}

impl Reconciliation {
    /// A reconciliation of `transaction_id`'s `provider_operation`, with no cursor, tenant or
    /// credential (for unit tests of a reconcile handler; the host fills in all of them).
    pub fn new(transaction_id: TransactionId, provider_operation: ProviderOperationRef) -> Self {
        Self {
            transaction_id,
            provider_operation,
            cursor: None,
            checkpoint_cursor: None,
            tenant: None,
            credential: None,
            compensation_for: None,
        }
    }

    /// With the cursor of an earlier, non-terminal answer.
    pub fn with_cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// With the cursor the handler's `Checkpoint` recorded (and, as no pending answer has
    /// replaced it yet, the same [`cursor`](Self::cursor) unless one is set).
    pub fn with_checkpoint_cursor(mut self, cursor: impl Into<String>) -> Self {
        let cursor = cursor.into();
        self.cursor.get_or_insert_with(|| cursor.clone());
        self.checkpoint_cursor = Some(cursor);
        self
    }

    /// As the reconciliation of the compensation of `action`, whose answer was lost.
    pub fn with_compensation_for(mut self, action: ActionId) -> Self {
        self.compensation_for = Some(action);
        self
    }

    /// With the tenant of the `reconcile` action.
    pub fn with_tenant(mut self, tenant: VerifiedTenant) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// With the credential resolved for the `reconcile` action.
    pub fn with_credential(mut self, credential: CredentialHandle) -> Self {
        self.credential = Some(credential);
        self
    }
}

/// A reconcile handler's answer. The host never turns `Committed` into a `committed`
/// transaction; it records `reconciled`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReconcileOutcome {
    /// The provider applied the effect.
    Committed {
        /// What was seen at the provider.
        evidence: Option<Value>,
    },
    /// The provider did not apply the effect.
    NotCommitted {
        /// What was seen at the provider.
        evidence: Option<Value>,
    },
    /// The provider has no final answer yet; ask again later.
    Pending {
        /// Where to resume.
        cursor: Option<String>,
    },
}

impl From<ReconcileOutcome> for ReconciliationResult {
    fn from(outcome: ReconcileOutcome) -> Self {
        match outcome {
            ReconcileOutcome::Committed { evidence } => ReconciliationResult {
                terminal: true,
                committed: Some(true),
                cursor: None,
                evidence,
            },
            ReconcileOutcome::NotCommitted { evidence } => ReconciliationResult {
                terminal: true,
                committed: Some(false),
                cursor: None,
                evidence,
            },
            ReconcileOutcome::Pending { cursor } => ReconciliationResult {
                terminal: false,
                committed: None,
                cursor,
                evidence: None,
            },
        }
    }
}

/// What a cancel handler is told: which action the host stopped, why, and what the handler
/// held, so it can stop what that action started at the provider, as that action's caller.
///
/// Built by the host; for a unit test of a cancel handler, start from [`CancelRequest::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CancelRequest {
    /// The action to cancel.
    pub action_id: ActionId,
    /// The stopped action's input, as its handler received it: what names the thing to stop
    /// at the provider (a run id, a job) when the handler recorded nothing else (found by an
    /// author trial whose `wait_for_run` companion could not tell which run to cancel).
    pub input: Value,
    /// Its idempotency key, to find the provider operation: the key a handler sent with
    /// `ProviderRequest::idempotency` (its [`IdempotencyKey::for_provider`](crate::IdempotencyKey::for_provider)),
    /// since the caller's raw key is not unique at the provider.
    pub idempotency_key: Option<String>,
    /// What stopped the handler.
    pub reason: CancelReason,
    /// The verified tenant of the stopped action, to pick the tenant's provider account.
    pub tenant: Option<VerifiedTenant>,
    /// The credential the stopped handler held (the contract declares a credential policy):
    /// the stop authenticates like the call it stops. (Its `Debug` never shows the secret.)
    pub credential: Option<CredentialHandle>,
    /// What the handler named its provider work by with
    /// [`Cancellation::set_handle`](crate::Cancellation::set_handle) (a query id the provider
    /// assigned), as set last before it was stopped; `None` when it set none, or was stopped
    /// before the provider answered with one: then the input and the key are all there is.
    pub handle: Option<String>,
}

impl CancelRequest {
    /// A request to stop `action_id` after [`CancelReason::Requested`], with a `null` input and
    /// no key, tenant or credential (for unit tests of a cancel handler; the host fills in all
    /// of them).
    pub fn new(action_id: ActionId) -> Self {
        Self {
            action_id,
            input: Value::Null,
            idempotency_key: None,
            reason: CancelReason::Requested,
            tenant: None,
            credential: None,
            handle: None,
        }
    }

    /// With what the handler named its provider work by.
    pub fn with_handle(mut self, handle: impl Into<String>) -> Self {
        self.handle = Some(handle.into());
        self
    }

    /// With the stopped action's input.
    pub fn with_input(mut self, input: Value) -> Self {
        self.input = input;
        self
    }

    /// With the key the provider knows the action's operation by.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// With what stopped the handler.
    pub fn with_reason(mut self, reason: CancelReason) -> Self {
        self.reason = reason;
        self
    }

    /// With the stopped action's verified tenant.
    pub fn with_tenant(mut self, tenant: VerifiedTenant) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// With the credential the stopped handler held.
    pub fn with_credential(mut self, credential: CredentialHandle) -> Self {
        self.credential = Some(credential);
        self
    }
}

/// What stopped a handler whose cancel companion the host calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// A cancel of the action ([`Host::cancel`](crate::host::Host::cancel), a binding's
    /// cancel request).
    Requested,
    /// The action's deadline passed (the action is answered `sla.timeout_exceeded`).
    DeadlineExceeded,
}

/// A connector type whose definition is known without a value of it: every `#[connector]`
/// type. A test reads the definition through it (the manifest snapshot's
/// `assert_manifest_snapshot!(type = Calendar)`) without building the connector and the provider
/// client, credentials or state its constructor takes. A [`BuiltConnector`](crate::BuiltConnector)
/// is assembled at run time and has no such definition.
///
/// ```
/// use aip_connector::prelude::*;
/// use aip_connector::StaticDefinition;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Query {
///     text: String,
/// }
///
/// struct Search {
///     #[allow(dead_code)]
///     api: ProviderClient,
/// }
///
/// #[connector(id = "search")]
/// impl Search {
///     /// Finds documents.
///     #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
///     async fn find(&self, query: Query) -> Result<Vec<String>, ConnectorFailure> {
///         Ok(vec![query.text])
///     }
/// }
///
/// // No `Search` (and no `ProviderClient`) is built.
/// assert_eq!(Search::static_definition().id, "search");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no definition without a value: it is not a `#[connector]` type",
    note = "a connector assembled at run time (`ConnectorBuilder`) or written by hand has its definition on a value: pass the connector itself (`assert_manifest_snapshot!(connector)`)"
)]
pub trait StaticDefinition: Connector {
    /// The definition [`Connector::definition`] returns for every value of the type. A type
    /// that implements it by hand must keep the two equal: a snapshot taken through it is
    /// compared with what hosts publish from `definition`.
    fn static_definition() -> &'static ConnectorDefinition;
}

/// A connector as a host drives it. Implemented by `#[connector]` and by
/// [`BuiltConnector`](crate::BuiltConnector); object safe.
pub trait Connector: Send + Sync + 'static {
    /// The static description.
    fn definition(&self) -> &ConnectorDefinition;

    /// Runs capability `capability_id` on `input`.
    ///
    /// The input is borrowed: the host keeps the action (its context's
    /// [`action`](crate::InvocationContext::action) shares it), so dispatch copies nothing.
    /// Generated connectors decode it before they return the future, which therefore does not
    /// borrow it.
    ///
    /// Nothing may reach the provider before the returned future is first polled (decoding, as
    /// generated connectors do, is fine): an action abandoned before that poll (a stream whose
    /// consumer left while the key was reserved) is answered as one whose handler never
    /// started, retryable whatever the contract says.
    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>>;

    /// Runs the downstream validation handler (`validate = ...`) of `capability_id`.
    ///
    /// Under a host, `context` is a preview's: the caller, the verified tenant, the deadline, a
    /// cancellation, and the resolved credential when the contract declares a credential policy
    /// (the validation authenticates like the commit it previews); never an idempotency key,
    /// checkpoint, stream or approval. A validation asks; it must not change anything.
    fn validate<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        let _ = (capability_id, input, context);
        unsupported(ConnectorOperation::TransactionPlan, &self.definition().id)
    }

    /// Runs the reconcile handler (`reconcile = ...`) of `capability_id`.
    fn reconcile<'a>(
        &'a self,
        capability_id: &'a str,
        request: Reconciliation,
    ) -> BoxFuture<'a, Result<ReconcileOutcome, ConnectorFailure>> {
        let _ = (capability_id, request);
        unsupported(ConnectorOperation::Reconciliation, &self.definition().id)
    }

    /// Runs the cancel handler (`cancel = ...`) of `capability_id`.
    ///
    /// The host calls it once a cancel ([`Host::cancel`](crate::host::Host::cancel)) or the
    /// deadline stopped the capability's handler, after dropping the handler's future, and
    /// waits for it at most 5 s. The default answers `connector.operation_unsupported`, which
    /// the host reads as "nothing to stop"; any other failure is logged and reported in the
    /// action's result: in the `cancelled` output's `remote_cancel_error`, or after a deadline
    /// in the timeout's `details.remote_cancel_error`.
    fn cancel<'a>(
        &'a self,
        capability_id: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), ConnectorFailure>> {
        let _ = (capability_id, request);
        unsupported(ConnectorOperation::Cancellation, &self.definition().id)
    }
}

fn unsupported<'a, T: Send + 'a>(
    operation: ConnectorOperation,
    connector: &str,
) -> BoxFuture<'a, Result<T, ConnectorFailure>> {
    let failure = ConnectorFailure::unsupported(operation, connector);
    Box::pin(std::future::ready(Err(failure)))
}

/// The failure for a capability id the connector does not have.
pub fn unknown_capability(connector: &str, capability_id: &str) -> ConnectorFailure {
    ConnectorFailure::new(
        codes::CAPABILITY_UNKNOWN,
        format!("connector `{connector}` has no capability `{capability_id}`"),
        aip_connector_core::model::ErrorCategory::Permanent,
        ConnectorOperation::Invocation,
        connector,
    )
}

/// The manifest extension holding the SDK's metadata of each capability (tags, examples):
/// `extensions.aip_connector.capabilities.<id>`.
const METADATA_EXTENSION: &str = "aip_connector";

/// The example inputs `manifest` publishes for `capability_id` (`#[capability(examples =
/// [...])]`, written by [`ConnectorDefinition::manifest`]), when it publishes any. Read by the
/// MCP projection, which serves what the manifest publishes.
#[cfg(feature = "mcp")]
pub(crate) fn declared_examples<'m>(
    manifest: &'m Manifest,
    capability_id: &str,
) -> Option<&'m Value> {
    manifest
        .extensions
        .as_ref()?
        .get(METADATA_EXTENSION)?
        .get("capabilities")?
        .get(capability_id)?
        .get("examples")
        .filter(|examples| examples.as_array().is_some_and(|list| !list.is_empty()))
}
