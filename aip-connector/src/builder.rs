//! Connectors assembled from free `#[capability]` functions, for authors who split capabilities
//! across modules.
//!
//! ```
//! # use aip_connector::prelude::*;
//! # #[derive(Deserialize, JsonSchema)]
//! # struct NewBooking {
//! #     starts_at: String,
//! # }
//! # #[derive(Serialize, Deserialize, JsonSchema)]
//! # struct Booking {
//! #     booking_id: String,
//! # }
//! # /// Creates a booking.
//! # #[capability(
//! #     id = "cap:calendar:booking:create",
//! #     risk = medium,
//! #     side_effects = [write],
//! #     idempotency(required, scope = tenant),
//! #     data(sensitivity = internal),
//! # )]
//! # async fn create_booking(input: NewBooking, _key: IdempotencyKey) -> Result<Booking, ConnectorFailure> {
//! #     Ok(Booking { booking_id: input.starts_at })
//! # }
//! # fn main() -> Result<(), BuildError> {
//! let connector = ConnectorBuilder::new("calendar")
//!     .profile("aip.native.http.v1")
//!     .capability::<create_booking>()
//!     .build()?;
//! # assert_eq!(connector.definition().capabilities.len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! A connector whose capabilities share something (a provider client, configuration) is built
//! with that state, and each handler that needs it takes a [`State<S>`] parameter:
//!
//! ```
//! use aip_connector::prelude::*;
//!
//! #[derive(Clone)]
//! struct Calendar {
//!     client: ProviderClient,
//! }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Day {
//!     date: String,
//! }
//!
//! #[derive(Serialize, Deserialize, JsonSchema)]
//! struct Slots {
//!     free: Vec<String>,
//! }
//!
//! #[capability(id = "cap:calendar:slots", risk = low, side_effects = [read], data(sensitivity = internal))]
//! async fn slots(State(calendar): State<Calendar>, day: Day) -> Result<Slots, ConnectorFailure> {
//!     calendar.client.get(&format!("/slots/{}", path_segment(&day.date))).send_json().await
//! }
//!
//! let client = ProviderClient::new("https://calendar.example/api").unwrap();
//! let connector = ConnectorBuilder::with_state("calendar", Calendar { client })
//!     .capability::<slots>()
//!     .build()
//!     .unwrap();
//! assert_eq!(connector.definition().capabilities.len(), 1);
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use aip_connector_core::ids::ProfileId;
use aip_connector_core::model::{ConnectorFailure, ConnectorOperation, Principal, PrincipalKind};
use serde_json::Value;

use crate::connector::{
    CancelRequest, CapabilityDefinition, Connector, ConnectorDefinition, ReconcileOutcome,
    Reconciliation, unknown_capability,
};
use crate::invocation::{BoxFuture, InvocationContext};

/// The state of a connector built with [`ConnectorBuilder::with_state`], as a free capability's
/// handler takes it: `State(client): State<Client>`. Each call gets its own clone, so a state
/// that is costly to clone (or must be shared) goes in an `Arc`; mutating the handler's `State`
/// (through `DerefMut`) changes that call's copy only, so shared counters and caches belong in
/// an `Arc<Mutex<_>>` or an atomic inside `S`.
///
/// The handler's `State<S>` names the state its capability needs: the builder's state, or a part
/// of it the builder's state gives through [`FromRef`]; otherwise [`ConnectorBuilder::capability`]
/// does not compile. Its companions (`reconcile = ...`, `validate = ...`, `cancel = ...`) then
/// take the same `State<S>`, before the host's argument. In a `#[connector]` impl block the state
/// is `&self`, and `State` is refused.
#[derive(Clone, Copy, Default)]
pub struct State<S>(pub S);

impl<S> Deref for State<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S> DerefMut for State<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.0
    }
}

// Only the type's name: a connector's state holds clients and configuration, sometimes keys, and
// a handler's `{:?}` of its parameters must not print them.
impl<S> fmt::Debug for State<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "State<{}>(..)", std::any::type_name::<S>())
    }
}

/// What a connector's state (and each part of it a handler takes) must be: cloned or taken into
/// every call, from any worker thread.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a connector's state",
    label = "each call gets a clone of the connector's state, on any worker thread",
    note = "a state is `Clone + Send + Sync + 'static`: derive `Clone` for `{Self}`, and put what cannot be cloned or shared behind an `Arc` (an `Arc<Mutex<_>>` for what changes)"
)]
pub trait ConnectorState: Clone + Send + Sync + 'static {}

// `do_not_recommend`: an unmet bound is reported as `ConnectorState` with the fix above, not as
// the `Clone` (or `Send`) it lacks.
#[diagnostic::do_not_recommend]
impl<S: Clone + Send + Sync + 'static> ConnectorState for S {}

/// How a handler's [`State<T>`] is taken from the state `S` of the connector it joins, as axum's
/// `FromRef` does for its router state. Every state gives itself (a clone); implement it for a
/// part of the state, and a handler that needs only that part takes `State<Part>` and joins any
/// connector whose state gives one:
///
/// ```
/// use aip_connector::prelude::*;
///
/// #[derive(Clone)]
/// struct Calendar {
///     client: ProviderClient,
///     region: Region,
/// }
///
/// #[derive(Clone)]
/// struct Region(String);
///
/// impl FromRef<Calendar> for Region {
///     fn from_ref(calendar: &Calendar) -> Self {
///         calendar.region.clone()
///     }
/// }
///
/// #[capability(id = "cap:calendar:region", risk = low, side_effects = [read], data(sensitivity = public))]
/// async fn region(State(region): State<Region>) -> Result<String, ConnectorFailure> {
///     Ok(region.0)
/// }
///
/// let client = ProviderClient::new("https://calendar.example/api").unwrap();
/// let calendar = Calendar { client, region: Region("eu-west".into()) };
/// let connector = ConnectorBuilder::with_state("calendar", calendar)
///     .capability::<region>()
///     .build()
///     .unwrap();
/// # let _ = connector;
/// ```
///
/// The part is taken once per call (and once per companion call), before the handler's future
/// is built: keep `from_ref` to a clone of a field.
#[diagnostic::on_unimplemented(
    message = "a handler's `State<{Self}>` cannot be taken from a connector whose state is `{S}`",
    label = "the handler takes `State<{Self}>`",
    note = "build the connector with a `{Self}` as its state (`ConnectorBuilder::with_state(id, state)`), or say how a `{S}` gives a `{Self}`: implement `aip_connector::FromRef<{S}>` for `{Self}`"
)]
pub trait FromRef<S> {
    /// The part of `state` a handler's `State<Self>` holds.
    fn from_ref(state: &S) -> Self;
}

impl<T: Clone> FromRef<T> for T {
    fn from_ref(state: &T) -> Self {
        state.clone()
    }
}

/// A call's `State<T>`, taken from the connector's state (used by generated code). The part must
/// be a [`ConnectorState`] too: the call's future owns it, on any worker thread.
#[doc(hidden)]
pub fn take_state<S, T: FromRef<S> + ConnectorState>(state: &S) -> State<T> {
    State(T::from_ref(state))
}

/// What `#[capability]` generates for a free `async fn`: its definition, its invoker and its
/// companions (`validate = f`, `reconcile = f`, `cancel = f`, each a free `async fn`).
///
/// `S` is the connector's state (see [`State`]): a handler that takes `State<T>` implements
/// `FreeCapability<S>` for every `S` that gives a `T` ([`FromRef`]: `T` itself, or a state that
/// holds one); one that takes no state implements it for every `S`, so it joins any connector.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a capability of a connector whose state is `{S}`",
    label = "added to a `ConnectorBuilder<{S}>` here",
    note = "a free `#[capability]` handler that takes `State<T>` joins connectors whose state is a `T` or gives one (`FromRef`); one without `State` joins any connector",
    note = "`ConnectorBuilder::capability::<f>()` takes the type `#[capability]` generates next to `async fn f`"
)]
// `S` carries no bound here: the builder requires `ConnectorState`, and the generated code
// takes the handler's part through `take_state`, which reports a part that cannot be a state
// once, on the handler's parameter.
pub trait FreeCapability<S = ()>: 'static {
    /// The capability's definition.
    fn definition() -> CapabilityDefinition;
    /// Runs the handler. The input is decoded (and the state cloned) before the future is
    /// returned, so the future borrows neither.
    fn invoke(
        state: &S,
        input: &Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'static, Result<Value, ConnectorFailure>>;
    // `Connector::validate` is not an intra-doc link: rustdoc shows this doc on the generated
    // impls in connector crates, where the link would not resolve.
    /// Runs the `validate = ...` companion; `None` when the capability has none (the connector
    /// then answers `connector.operation_unsupported`, as `Connector::validate` does by default).
    fn validate(
        state: &S,
        input: &Value,
        context: Arc<dyn InvocationContext>,
    ) -> Option<BoxFuture<'static, Result<Value, ConnectorFailure>>> {
        let _ = (state, input, context);
        None
    }
    /// Runs the `reconcile = ...` companion; `None` when the capability has none.
    fn reconcile(
        state: &S,
        request: Reconciliation,
    ) -> Option<BoxFuture<'static, Result<ReconcileOutcome, ConnectorFailure>>> {
        let _ = (state, request);
        None
    }
    /// Runs the `cancel = ...` companion; `None` when the capability has none.
    fn cancel(
        state: &S,
        request: CancelRequest,
    ) -> Option<BoxFuture<'static, Result<(), ConnectorFailure>>> {
        let _ = (state, request);
        None
    }
}

/// What a free capability's handlers answer: a future of `T` or of the failure.
type Answer<T> = BoxFuture<'static, Result<T, ConnectorFailure>>;

/// A free capability's handler or validation companion: state, input, invocation.
type OnInput<S, T> = fn(&S, &Value, Arc<dyn InvocationContext>) -> T;

/// The handler and companions of one free capability, as [`FreeCapability`] gives them.
struct FreeHandlers<S> {
    invoke: OnInput<S, Answer<Value>>,
    validate: OnInput<S, Option<Answer<Value>>>,
    reconcile: fn(&S, Reconciliation) -> Option<Answer<ReconcileOutcome>>,
    cancel: fn(&S, CancelRequest) -> Option<Answer<()>>,
}

// By hand: derived, they would require `S: Clone`/`S: Copy`, and the pointers need neither.
impl<S> Clone for FreeHandlers<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for FreeHandlers<S> {}

impl<S: ConnectorState> FreeHandlers<S> {
    fn of<C: FreeCapability<S>>() -> Self {
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
#[non_exhaustive]
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
    /// A profile is advertised without saying where it is served (upstream's
    /// `discovery.profile_bindings`): the NATS or A2A binding metadata is missing from the
    /// compatibility metadata, a `native_http` or `mcp` entry there is not an object of
    /// non-empty strings, or the webhook profile has no receiver.
    #[error("{message} (rule `discovery.profile_bindings`)")]
    ProfileUnbound {
        /// The profile.
        profile: ProfileId,
        /// What is missing.
        message: String,
    },
    /// A capability binds a profile the connector does not declare (admission's
    /// `manifest.binding.profile_undeclared`, which `#[connector]` refuses at compile time and
    /// the host's build refused later): `#[capability(bindings(mcp(tool_name = "...")))]` on a
    /// free function joined to a connector without `.profile("mcp")`.
    #[error(
        "capability `{capability}` binds profile `{profile}`, which the connector does not \
         declare: add it with `.profile(\"{profile}\")`, and `.profile(\"native_http\")` too if \
         the connector named no profile yet (the first `.profile` replaces that default) (rule \
         `manifest.binding.profile_undeclared`)"
    )]
    BindingProfileUndeclared {
        /// The capability.
        capability: String,
        /// The profile its binding names.
        profile: ProfileId,
    },
    /// The compatibility metadata is not a JSON object.
    #[error("the compatibility metadata must be a JSON object")]
    CompatibilityNotObject,
    /// A profile added with [`ConnectorBuilder::profile`] is blank, or added twice (upstream's
    /// `discovery.profile_set` refuses the first, admission's `manifest.profile.duplicate` the
    /// second; `#[connector(profiles = [...])]` refuses both at compile time).
    #[error("profile `{0}` is blank or added twice")]
    InvalidProfile(String),
    /// A webhook receiver id is blank or declared twice.
    #[error("webhook receiver id `{0}` is blank or declared twice")]
    WebhookReceiver(String),
    /// A channel has no identity or repeats one (admission checks 9 and 10). Channels are
    /// numbered as the manifest publishes them: the webhook receivers' first, then those added
    /// with [`ConnectorBuilder::channel`].
    #[error("{message} at {path} (rule `{code}`)")]
    InvalidChannel {
        /// `manifest.channel.identifier_missing` or `manifest.channel.duplicate`.
        code: String,
        /// The channel's place in the manifest, e.g. `/channels/1`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Builds a [`BuiltConnector`] from free capabilities, with the connector's state `S` (none by
/// default; see [`ConnectorBuilder::with_state`]).
#[must_use = "a builder does nothing until `build()` is called"]
pub struct ConnectorBuilder<S = ()> {
    id: String,
    agent: Option<Principal>,
    profiles: Vec<ProfileId>,
    compatibility: Option<Value>,
    webhooks: Vec<String>,
    channels: Vec<Value>,
    state: S,
    capabilities: Vec<(CapabilityDefinition, FreeHandlers<S>)>,
}

/// Shows the connector's id and its capabilities' ids; the state `S` need not be `Debug`.
impl<S> std::fmt::Debug for ConnectorBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let capabilities: Vec<&str> = self
            .capabilities
            .iter()
            .map(|(definition, _)| definition.id().as_str())
            .collect();
        f.debug_struct("ConnectorBuilder")
            .field("id", &self.id)
            .field("capabilities", &capabilities)
            .finish_non_exhaustive()
    }
}

impl ConnectorBuilder {
    /// A connector with id `id` (its agent defaults to `agent:<id>`) and no state: its
    /// handlers take no [`State`] (or only a part a `()` gives, through [`FromRef`]).
    pub fn new(id: impl Into<String>) -> Self {
        Self::with_state(id, ())
    }
}

impl<S: ConnectorState> ConnectorBuilder<S> {
    /// A connector with id `id` whose handlers may take [`State<S>`], or a part of it
    /// ([`FromRef`]): each call gets a clone of `state` (or the part taken from it). The
    /// state's type is fixed here, before capabilities are added, so a capability whose handler
    /// takes a `State<T>` this state neither is nor gives is a compile error at
    /// [`capability`](Self::capability).
    pub fn with_state(id: impl Into<String>, state: S) -> Self {
        Self {
            id: id.into(),
            agent: None,
            profiles: Vec::new(),
            compatibility: None,
            webhooks: Vec::new(),
            channels: Vec::new(),
            state,
            capabilities: Vec::new(),
        }
    }

    /// Adds a profile (the default, when none is added, is `aip.native.http.v1`): an id, or
    /// the short name of a well-known one as `#[connector(profiles = [...])]` takes it
    /// (`"mcp"` is `aip.mcp.compat.v1`, `"native_http"` is `aip.native.http.v1`; see
    /// [`profiles::SHORT_NAMES`](crate::ids::profiles::SHORT_NAMES)). Before, a short name
    /// was published as a custom profile of that name.
    pub fn profile(mut self, profile: impl Into<ProfileId>) -> Self {
        let profile = profile.into();
        let resolved = crate::ids::profiles::resolve(profile.as_str());
        self.profiles.push(if resolved == profile.as_str() {
            profile
        } else {
            ProfileId::from(resolved)
        });
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

    /// Declares the webhook receiver `receiver_id` (the id given to
    /// [`WebhookReceiver::builder`](crate::webhook::WebhookReceiver::builder)): the manifest
    /// publishes it as a channel and advertises `aip.http.webhook.v1`, which a gateway reaches
    /// only through such a channel.
    pub fn webhook(mut self, receiver_id: impl Into<String>) -> Self {
        self.webhooks.push(receiver_id.into());
        self
    }

    /// Publishes `channel` in the manifest: a conversation surface, an outbound callback, any
    /// channel a peer reaches the connector through. It is a JSON object whose `id` (or `name`)
    /// is a non-empty string unique among the connector's channels, webhook receivers included;
    /// [`build`](Self::build) refuses it otherwise ([`BuildError::InvalidChannel`]). A channel
    /// also binds `aip.http.webhook.v1`, which upstream requires to have one.
    ///
    /// ```
    /// use aip_connector::prelude::*;
    ///
    /// #[capability(id = "cap:support:open_tickets", risk = low, side_effects = [read], data(sensitivity = internal))]
    /// async fn open_tickets() -> Result<u32, ConnectorFailure> {
    ///     Ok(3)
    /// }
    ///
    /// let connector = ConnectorBuilder::new("support")
    ///     .channel(serde_json::json!({"id": "support-inbox", "kind": "email"}))
    ///     .capability::<open_tickets>()
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(connector.definition().manifest().channels[0]["id"], "support-inbox");
    /// ```
    pub fn channel(mut self, channel: Value) -> Self {
        self.channels.push(channel);
        self
    }

    /// Adds the free capability `C` (the type `#[capability]` generated next to the function).
    pub fn capability<C: FreeCapability<S>>(mut self) -> Self {
        self.capabilities
            .push((C::definition(), FreeHandlers::of::<C>()));
        self
    }

    /// Checks and builds the connector. Contract rules and admission run when a host admits it.
    pub fn build(self) -> Result<BuiltConnector<S>, BuildError> {
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
        let mut unique_profiles = HashSet::new();
        for profile in &self.profiles {
            if profile.as_str().trim().is_empty() || !unique_profiles.insert(profile.as_str()) {
                return Err(BuildError::InvalidProfile(profile.to_string()));
            }
        }
        let mut profiles = if self.profiles.is_empty() {
            vec![ProfileId::from(crate::__private::DEFAULT_PROFILE)]
        } else {
            self.profiles
        };
        if self.compatibility.as_ref().is_some_and(|c| !c.is_object()) {
            return Err(BuildError::CompatibilityNotObject);
        }
        let mut receivers = HashSet::new();
        for receiver in &self.webhooks {
            if receiver.trim().is_empty() || !receivers.insert(receiver.as_str()) {
                return Err(BuildError::WebhookReceiver(receiver.clone()));
            }
        }
        let webhook_profile = ProfileId::from(crate::ids::profiles::HTTP_WEBHOOK);
        if !self.webhooks.is_empty() && !profiles.contains(&webhook_profile) {
            profiles.push(webhook_profile);
        }
        let channels: Vec<Value> = self
            .webhooks
            .iter()
            .map(|id| crate::discovery::webhook_channel(id))
            .chain(self.channels)
            .collect();
        if let Some(issue) = crate::discovery::channel_issues(&channels)
            .into_iter()
            .next()
        {
            return Err(BuildError::InvalidChannel {
                code: issue.code,
                path: issue.path,
                message: issue.message,
            });
        }
        let agent = self.agent.unwrap_or_else(|| {
            Principal::new(format!("agent:{}", self.id), PrincipalKind::Service)
        });
        let handlers = self
            .capabilities
            .iter()
            .map(|(d, handlers)| (d.capability.id.to_string(), *handlers))
            .collect();
        for (definition, _) in &self.capabilities {
            let capability = &definition.capability;
            if let Some(binding) = capability
                .bindings
                .iter()
                .find(|binding| !profiles.contains(&binding.profile))
            {
                return Err(BuildError::BindingProfileUndeclared {
                    capability: capability.id.to_string(),
                    profile: binding.profile.clone(),
                });
            }
        }
        let definition = ConnectorDefinition {
            id: self.id,
            agent,
            profiles,
            compatibility: self.compatibility,
            channels,
            capabilities: self.capabilities.into_iter().map(|(d, _)| d).collect(),
        };
        // Every issue of this check carries its profile.
        if let Some((profile, message)) =
            crate::discovery::profile_binding_problems(&definition.manifest())
                .into_iter()
                .find_map(|issue| Some((issue.profile?, issue.message)))
        {
            return Err(BuildError::ProfileUnbound { profile, message });
        }
        Ok(BuiltConnector {
            definition,
            handlers,
            state: self.state,
        })
    }
}

/// A connector assembled by [`ConnectorBuilder`], holding its state `S`.
pub struct BuiltConnector<S = ()> {
    definition: ConnectorDefinition,
    handlers: BTreeMap<String, FreeHandlers<S>>,
    state: S,
}

/// Shows the connector's id and its capabilities' ids; the state `S` need not be `Debug`.
impl<S> std::fmt::Debug for BuiltConnector<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltConnector")
            .field("id", &self.definition.id)
            .field("capabilities", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: ConnectorState> BuiltConnector<S> {
    /// The state every call receives a clone of.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The companion `pick` gives for `capability_id`, or, without one (an unknown capability
    /// included, as a `#[connector]` answers), `connector.operation_unsupported` for
    /// `operation`.
    fn companion<'a, T: Send + 'a>(
        &self,
        capability_id: &str,
        operation: ConnectorOperation,
        pick: impl FnOnce(
            &FreeHandlers<S>,
            &S,
        ) -> Option<BoxFuture<'static, Result<T, ConnectorFailure>>>,
    ) -> BoxFuture<'a, Result<T, ConnectorFailure>> {
        match self
            .handlers
            .get(capability_id)
            .and_then(|handlers| pick(handlers, &self.state))
        {
            Some(running) => running,
            None => Box::pin(std::future::ready(Err(ConnectorFailure::unsupported(
                operation,
                self.definition.id.as_str(),
            )))),
        }
    }
}

impl<S: ConnectorState> Connector for BuiltConnector<S> {
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
            Some(handlers) => (handlers.invoke)(&self.state, input, context),
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
            |handlers, state| (handlers.validate)(state, input, context),
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
            |handlers, state| (handlers.reconcile)(state, request),
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
            |handlers, state| (handlers.cancel)(state, request),
        )
    }
}
