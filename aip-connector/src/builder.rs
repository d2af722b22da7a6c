//! Connectors assembled from free `#[capability]` functions, for authors who split capabilities
//! across modules.
//!
//! ```ignore
//! let connector = ConnectorBuilder::new("calendar")
//!     .profile("aip.native.http.v1")
//!     .capability::<create_booking>()
//!     .build()?;
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aip_connector_core::ids::ProfileId;
use aip_connector_core::model::{ConnectorFailure, ConnectorOperation, Principal, PrincipalKind};
use serde_json::Value;

use crate::connector::{
    CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition, ReconcileOutcome,
    Reconciliation, unknown_capability,
};
use crate::invocation::{BoxFuture, InvocationContext};

/// What `#[capability]` generates for a free `async fn`: its definition, its invoker and its
/// companions (`validate = f`, `reconcile = f`, `cancel = f`, each a free `async fn`).
pub trait FreeCapability: 'static {
    /// The capability's definition.
    fn definition() -> CapabilityDefinition;
    /// Runs the handler. The input is decoded before the future is returned, so the future
    /// does not borrow it.
    fn invoke(
        input: &Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'static, Result<Value, ConnectorFailure>>;
    /// Runs the `validate = ...` companion; `None` when the capability has none (the connector
    /// then answers `connector.operation_unsupported`, as [`Connector::validate`] does).
    fn validate(
        input: &Value,
        context: Arc<dyn InvocationContext>,
    ) -> Option<BoxFuture<'static, Result<Value, ConnectorFailure>>> {
        let _ = (input, context);
        None
    }
    /// Runs the `reconcile = ...` companion; `None` when the capability has none.
    fn reconcile(
        request: Reconciliation,
    ) -> Option<BoxFuture<'static, Result<ReconcileOutcome, ConnectorFailure>>> {
        let _ = request;
        None
    }
    /// Runs the `cancel = ...` companion; `None` when the capability has none.
    fn cancel(request: CancelRequest) -> Option<BoxFuture<'static, Result<(), ConnectorFailure>>> {
        let _ = request;
        None
    }
}

/// What a free capability's handlers answer: a future of `T` or of the failure.
type Answer<T> = BoxFuture<'static, Result<T, ConnectorFailure>>;

/// The handler and companions of one free capability, as [`FreeCapability`] gives them.
#[derive(Clone, Copy)]
struct FreeHandlers {
    invoke: fn(&Value, Arc<dyn InvocationContext>) -> Answer<Value>,
    validate: fn(&Value, Arc<dyn InvocationContext>) -> Option<Answer<Value>>,
    reconcile: fn(Reconciliation) -> Option<Answer<ReconcileOutcome>>,
    cancel: fn(CancelRequest) -> Option<Answer<()>>,
}

impl FreeHandlers {
    fn of<C: FreeCapability>() -> Self {
        Self {
            invoke: C::invoke,
            validate: C::validate,
            reconcile: C::reconcile,
            cancel: C::cancel,
        }
    }
}

/// Why a builder could not produce a connector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Two capabilities share an id.
    #[error("capability id `{0}` is added twice")]
    DuplicateCapability(String),
    /// The connector has no capability.
    #[error("a connector needs at least one capability")]
    Empty,
    /// The connector id is blank.
    #[error("the connector id must not be empty")]
    EmptyId,
}

/// Builds a [`BuiltConnector`] from free capabilities.
pub struct ConnectorBuilder {
    id: String,
    agent: Option<Principal>,
    profiles: Vec<ProfileId>,
    compatibility: Option<Value>,
    capabilities: Vec<(CapabilityDefinition, FreeHandlers)>,
}

impl ConnectorBuilder {
    /// A connector with id `id` (its agent defaults to `agent:<id>`).
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            agent: None,
            profiles: Vec::new(),
            compatibility: None,
            capabilities: Vec::new(),
        }
    }

    /// Adds a profile (the default, when none is added, is `aip.native.http.v1`).
    pub fn profile(mut self, profile: impl Into<ProfileId>) -> Self {
        self.profiles.push(profile.into());
        self
    }

    /// Sets the provider identity published as the manifest's agent.
    pub fn agent(mut self, agent: Principal) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Sets the compatibility metadata.
    pub fn compatibility(mut self, compatibility: Value) -> Self {
        self.compatibility = Some(compatibility);
        self
    }

    /// Adds the free capability `C` (the type `#[capability]` generated next to the function).
    pub fn capability<C: FreeCapability>(mut self) -> Self {
        self.capabilities
            .push((C::definition(), FreeHandlers::of::<C>()));
        self
    }

    /// Checks and builds the connector. Contract rules and admission run when a host admits it.
    pub fn build(self) -> Result<BuiltConnector, BuildError> {
        if self.id.trim().is_empty() {
            return Err(BuildError::EmptyId);
        }
        if self.capabilities.is_empty() {
            return Err(BuildError::Empty);
        }
        let mut seen = HashSet::new();
        for (definition, _) in &self.capabilities {
            if !seen.insert(definition.capability.id.clone()) {
                return Err(BuildError::DuplicateCapability(
                    definition.capability.id.to_string(),
                ));
            }
        }
        let profiles = if self.profiles.is_empty() {
            vec![ProfileId::from(crate::__private::DEFAULT_PROFILE)]
        } else {
            self.profiles
        };
        let agent = self.agent.unwrap_or_else(|| {
            Principal::new(format!("agent:{}", self.id), PrincipalKind::Service)
        });
        let handlers = self
            .capabilities
            .iter()
            .map(|(d, handlers)| (d.capability.id.to_string(), *handlers))
            .collect();
        let definition = ConnectorDefinition {
            id: self.id,
            agent,
            profiles,
            compatibility: self.compatibility,
            capabilities: self.capabilities.into_iter().map(|(d, _)| d).collect(),
        };
        Ok(BuiltConnector {
            definition,
            handlers,
        })
    }
}

/// A connector assembled by [`ConnectorBuilder`].
pub struct BuiltConnector {
    definition: ConnectorDefinition,
    handlers: BTreeMap<String, FreeHandlers>,
}

impl BuiltConnector {
    /// The companion `pick` gives for `capability_id`, or, without one (an unknown capability
    /// included, as a `#[connector]` answers), `connector.operation_unsupported` for
    /// `operation`.
    fn companion<'a, T: Send + 'a>(
        &self,
        capability_id: &str,
        operation: ConnectorOperation,
        pick: impl FnOnce(&FreeHandlers) -> Option<BoxFuture<'static, Result<T, ConnectorFailure>>>,
    ) -> BoxFuture<'a, Result<T, ConnectorFailure>> {
        match self.handlers.get(capability_id).and_then(pick) {
            Some(running) => running,
            None => Box::pin(std::future::ready(Err(ConnectorFailure::unsupported(
                operation,
                self.definition.id.as_str(),
            )))),
        }
    }
}

impl Connector for BuiltConnector {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        match self.handlers.get(capability_id) {
            Some(handlers) => (handlers.invoke)(input, context),
            None => Box::pin(std::future::ready(Err(unknown_capability(
                &self.definition.id,
                capability_id,
            )))),
        }
    }

    fn validate<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        self.companion(
            capability_id,
            ConnectorOperation::TransactionPlan,
            |handlers| (handlers.validate)(input, context),
        )
    }

    fn reconcile<'a>(
        &'a self,
        capability_id: &'a str,
        request: Reconciliation,
    ) -> BoxFuture<'a, Result<ReconcileOutcome, ConnectorFailure>> {
        self.companion(
            capability_id,
            ConnectorOperation::Reconciliation,
            |handlers| (handlers.reconcile)(request),
        )
    }

    fn cancel<'a>(
        &'a self,
        capability_id: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), ConnectorFailure>> {
        self.companion(
            capability_id,
            ConnectorOperation::Cancellation,
            |handlers| (handlers.cancel)(request),
        )
    }
}
