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
use aip_connector_core::model::{ConnectorFailure, Principal, PrincipalKind};
use serde_json::Value;

use crate::connector::{CapabilityDefinition, Connector, ConnectorDefinition, unknown_capability};
use crate::invocation::{BoxFuture, InvocationContext};

/// What `#[capability]` generates for a free `async fn`: its definition and its invoker.
pub trait FreeCapability: 'static {
    /// The capability's definition.
    fn definition() -> CapabilityDefinition;
    /// Runs the handler. The input is decoded before the future is returned, so the future
    /// does not borrow it.
    fn invoke(
        input: &Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'static, Result<Value, ConnectorFailure>>;
}

type Invoker =
    fn(&Value, Arc<dyn InvocationContext>) -> BoxFuture<'static, Result<Value, ConnectorFailure>>;

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
    capabilities: Vec<(CapabilityDefinition, Invoker)>,
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
        self.capabilities.push((C::definition(), C::invoke));
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
        let invokers = self
            .capabilities
            .iter()
            .map(|(d, invoke)| (d.capability.id.to_string(), *invoke))
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
            invokers,
        })
    }
}

/// A connector assembled by [`ConnectorBuilder`].
pub struct BuiltConnector {
    definition: ConnectorDefinition,
    invokers: BTreeMap<String, Invoker>,
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
        match self.invokers.get(capability_id) {
            Some(invoke) => invoke(input, context),
            None => Box::pin(std::future::ready(Err(unknown_capability(
                &self.definition.id,
                capability_id,
            )))),
        }
    }
}
