//! The MCP projection of a [`Host`]: every admitted capability a `tools/call` can run becomes
//! one MCP tool (see [`McpProjection::new`] for those left out), and every `tools/call` runs
//! through [`Host::invoke`], the same governed pipeline as any other caller (schemas, contract
//! checks, idempotency, approvals, deadline, output schema). A streaming-only capability's call
//! runs through [`Host::invoke_stream`] instead: its chunks reach the client as
//! `notifications/progress` while it runs (when the request carries a `progressToken`), and the
//! tool result carries its streamed data before the result itself (`docs/mcp.md`, "Streaming").
//!
//! [`McpProjection`] implements [`rmcp::ServerHandler`] by hand and is served either
//!
//! - over streamable HTTP with [`McpProjection::router`]: rmcp's `StreamableHttpService` at
//!   [`MCP_PATH`], behind a middleware that asks an [`Authenticator`] who the caller is and
//!   answers a refusal as the authenticator describes it (`401` with its challenge, or `503`
//!   for a temporary refusal); or
//! - over stdio (or any byte pipe) with [`McpProjection::serve_stdio`] /
//!   [`McpProjection::serve_io`], for one fixed local caller given at startup.
//!
//! The caller is never read from the MCP payload. `docs/mcp.md` is the guide: the tool
//! projection (names, schemas, annotations), the result mapping and what MCP cannot express.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// rmcp's configuration of the streamable HTTP server, re-exported so that a host configures
/// [`McpProjection::serve_http`] and [`McpProjection::router_with_config`] without depending on
/// rmcp itself at exactly the version this crate is built on. (Re-exporting all of rmcp would
/// make rustc spell serde's traits by longer paths in the diagnostics of every crate using this
/// feature.)
pub use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;

/// rmcp's name and version of a server, which [`McpProjection::with_server_info`] announces in
/// `initialize`: `Implementation::new("tracker", env!("CARGO_PKG_VERSION"))`. Re-exported so a
/// connector names its server without an rmcp dependency of its own.
pub use rmcp::model::Implementation;

/// The token `StreamableHttpServerConfig::with_cancellation_token` takes (tokio-util's), so a
/// deployment that ends its MCP sessions on shutdown needs no `tokio-util` of its own.
pub use super::CancellationToken;

use aip_connector_core::admission::AdmittedManifest;
use aip_connector_core::ids::{ActionId, ApprovalId, CapabilityId};
use aip_connector_core::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, Binding, Capability, Envelope,
    ErrorCategory, IdempotencyRequirement, ORIGINAL_OUTPUT, ProtocolError, RetrySafety, SideEffect,
    StreamChunk, StreamChunkKind, TransactionMode, unmark_idempotent_replay,
};
use aip_connector_core::naming::stable_profile_name;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, MetaObject, NotificationMetaObject, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RunningService, ServerInitializeError};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use self::sessions::{BoundedSessions, SessionGuard, SessionLimit};
pub use self::sessions::{SessionKey, SessionKeyTooShort};
use super::auth::Authenticator;
use crate::codes;
use crate::host::{ChunkStream, Host, TrustedContext};
use crate::schema::{self, SchemaDialect};
use crate::store::ApprovalStatus;

mod screen;
mod sessions;

/// The MCP compatibility profile: a capability's binding for it names the tool.
pub const MCP_PROFILE: &str = "aip.mcp.compat.v1";

/// The request `_meta` key that carries an idempotency key for `tools/call`
/// (`{"_meta": {"aip/idempotency_key": "order-42"}}`).
pub const IDEMPOTENCY_KEY_META: &str = "aip/idempotency_key";

/// Where [`McpProjection::router`] mounts the streamable HTTP endpoint (the path a manifest's
/// `compatibility.mcp.jsonrpc` names unless the connector declares another).
pub const MCP_PATH: &str = crate::discovery::MCP_JSONRPC_PATH;

/// How many MCP sessions one router keeps open at once unless
/// [`McpProjection::with_max_sessions`] says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// How many of those one caller (a principal of a tenant) may hold unless
/// [`McpProjection::with_max_sessions_per_caller`] says otherwise.
pub const DEFAULT_MAX_SESSIONS_PER_CALLER: usize = 64;

/// How many bytes of streamed data (the compact JSON of a streamed call's `data` chunks) one
/// tool result carries unless [`McpProjection::with_max_streamed_data_bytes`] says otherwise:
/// 64 KiB, some 16,000 tokens of a model's context.
pub const DEFAULT_MAX_STREAMED_DATA_BYTES: usize = 64 * 1024;

/// Result and tool `_meta` keys this projection writes.
pub mod meta {
    /// Result: the id of the AIP action the call ran as (also what `Host::cancel` and `Host::cancel_as` take).
    pub const ACTION_ID: &str = "aip/action_id";
    /// Result: the AIP result status (`completed`, `failed`, `cancelled`, `pending_approval`,
    /// `requires_human`).
    pub const STATUS: &str = "aip/status";
    /// Result: the AIP error of a result that is not `completed`, as the wire `ProtocolError`.
    pub const ERROR: &str = "aip/error";
    /// Result: the pending approval of a gated call (`approval_id`, `expires_at_ms`,
    /// `policy_hash`, and `policy`: the capability's published approval policy, which says
    /// who may approve, or the host's default policy for a call gated without one).
    pub const APPROVAL: &str = "aip/approval";
    /// Result: `true` when the host replayed the stored result of an earlier call with the same
    /// idempotency key (the handler did not run again). On a completed replay of a tool whose
    /// output schema declares `idempotent_replay`, the marker stays in the output instead,
    /// unless the host wrapped the output under `original_output` (`docs/mcp.md`).
    pub const IDEMPOTENT_REPLAY: &str = "aip/idempotent_replay";
    /// Tool: the capability id the tool runs.
    pub const CAPABILITY_ID: &str = "aip/capability_id";
    /// Tool: the capability's risk level, when declared.
    pub const RISK: &str = "aip/risk";
    /// Tool: the contract's side effects.
    pub const SIDE_EFFECTS: &str = "aip/side_effects";
    /// Tool: the contract's idempotency requirement (`required`, `optional`, `unsupported`).
    pub const IDEMPOTENCY: &str = "aip/idempotency";
    /// Tool: whether the host gates every call behind a human approval.
    pub const APPROVAL_REQUIRED: &str = "aip/approval_required";
    /// Tool: `true` on a tool whose calls run streamed (the capability only streams): its
    /// chunks arrive as `notifications/progress` when the request carries a `progressToken`,
    /// and its result carries the streamed data. Absent on the other tools.
    pub const STREAMING: &str = "aip/streaming";
    /// Result of a streamed call: what it streamed, as counts (`data_chunks`: the `data`
    /// chunks this call streamed; `collected_chunks`: how many of them, the first ones, the
    /// result's content carries; `omitted_chunks` and `omitted_bytes`: the rest, left out past
    /// the projection's bound). A replay streams nothing: its counts are 0.
    pub const STREAM: &str = "aip/stream";
    /// Progress notification: the kind of the chunk it forwards (`data`, `progress`, ...).
    pub const CHUNK_KIND: &str = "aip/chunk_kind";
}

/// Why a host cannot be projected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpProjectionError {
    /// Two capabilities of different connectors project to the same tool name (admission only
    /// checks names inside one manifest).
    #[error("capabilities `{first}` and `{second}` both project to the MCP tool name `{name}`")]
    NameCollision {
        /// The tool name.
        name: String,
        /// The capability that took the name first.
        first: CapabilityId,
        /// The capability that collides with it.
        second: CapabilityId,
    },
}

/// Why [`McpProjection::serve_stdio`] stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The MCP handshake failed.
    #[error("the MCP handshake failed: {0}")]
    Initialize(Box<ServerInitializeError>),
    /// The service task panicked or was aborted.
    #[error("the MCP service task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl From<ServerInitializeError> for McpServeError {
    fn from(error: ServerInitializeError) -> Self {
        Self::Initialize(Box::new(error))
    }
}

/// One projected capability.
struct ProjectedTool {
    tool: Tool,
    capability: CapabilityId,
    /// The tool declares an `outputSchema`: completed results carry `structuredContent`.
    structured: bool,
    /// The contract requires an idempotency key.
    key_required: bool,
    /// The contract's transaction section supports `execute`: calls run as durable `execute`
    /// transactions (the handler gets its `Checkpoint`).
    execute_transaction: bool,
    /// The output schema does not declare `idempotent_replay` (or there is no output schema):
    /// the host's replay marker is moved from the output to the result's `_meta`, and an
    /// output the host kept beside it (`original_output`) is unwrapped.
    strip_replay_marker: bool,
    /// The host gates every call behind an approval: a keyed call again after the approval
    /// was granted resumes the gated action (§7 of docs/mcp.md).
    gated: bool,
    /// The contract's approval policy as published (reason, who approves, how many), added to
    /// a gated call's `_meta["aip/approval"]` so that an agent can tell its user whom to ask.
    approval_policy: Option<Value>,
    /// The capability only streams: calls run through [`Host::invoke_stream`].
    streamed: bool,
}

struct Projection {
    host: Host,
    tools: Vec<ProjectedTool>,
    by_name: HashMap<String, usize>,
    /// Why each capability left out of `tools/list` is, by the name it would have had: a call
    /// of that name is told so, not just "unknown tool".
    unlisted: HashMap<String, (CapabilityId, &'static str)>,
}

/// Where a call's caller comes from.
#[derive(Clone)]
enum CallerSource {
    /// The `TrustedContext` an authenticating layer put into the HTTP request's extensions.
    Transport,
    /// One fixed caller (stdio: the local user).
    Fixed(Arc<TrustedContext>),
}

/// A host's admitted manifests projected as MCP tools; an [`rmcp::ServerHandler`].
///
/// Cheap to clone (clones share the host and the tool list). Built by [`McpProjection::new`],
/// it takes each call's caller from the HTTP request (see [`McpProjection::router`]); a call
/// that carries no authenticated caller is refused. [`McpProjection::with_local_caller`] gives
/// it one fixed caller instead, for stdio.
#[derive(Clone)]
pub struct McpProjection {
    inner: Arc<Projection>,
    info: Arc<ServerConfig>,
    caller: CallerSource,
    max_sessions: usize,
    max_sessions_per_caller: usize,
    purge_interval: Option<std::time::Duration>,
    /// How long a request body may take to arrive (see [`Self::with_body_timeout`]).
    body_timeout: std::time::Duration,
    /// What [`Self::serve_http`] accepts (see [`Self::with_connection_limits`]).
    connections: super::ConnectionLimits,
    /// Signs the session ids the router hands out; a random one per router when `None`.
    session_key: Option<SessionKey>,
    /// How much streamed data a streamed call's result carries (see
    /// [`Self::with_max_streamed_data_bytes`]).
    max_streamed_data_bytes: usize,
    /// The router's sessions, whose end abandons the calls still running in them; `None`
    /// outside [`Self::router`] (a pipe has one session, which ends with the pipe).
    sessions: Option<Arc<SessionLimit>>,
}

impl fmt::Debug for McpProjection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caller = match &self.caller {
            CallerSource::Transport => "transport",
            CallerSource::Fixed(_) => "fixed",
        };
        f.debug_struct("McpProjection")
            .field(
                "tools",
                &self
                    .inner
                    .tools
                    .iter()
                    .map(|t| t.tool.name.as_ref())
                    .collect::<Vec<_>>(),
            )
            .field("caller", &caller)
            .field("max_sessions", &self.max_sessions)
            .field("max_sessions_per_caller", &self.max_sessions_per_caller)
            .field("purge_interval", &self.purge_interval)
            .field("body_timeout", &self.body_timeout)
            .field("connections", &self.connections)
            .field("max_streamed_data_bytes", &self.max_streamed_data_bytes)
            .finish_non_exhaustive()
    }
}

/// Sessions whose keep-alive is [`McpProjection::session_keep_alive`].
fn session_manager(keep_alive: std::time::Duration) -> LocalSessionManager {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(keep_alive);
    manager
}

impl McpProjection {
    /// Projects every callable capability of every manifest `host` admitted (every kind but
    /// `resource`), in manifest order, except ones that neither run synchronously nor stream
    /// (asynchronous only: a `tools/call` waits for its result), transactional ones that do
    /// not `execute` in one step (they change state only by committing a plan, which a tool
    /// call has no step for) and compensating ones (they run only as the compensation of
    /// another capability, never by their own name). A capability that runs synchronously is
    /// called with [`Host::invoke`]; one that only streams, with [`Host::invoke_stream`].
    ///
    /// Fails when two connectors' capabilities project to the same tool name.
    pub fn new(host: Host) -> Result<Self, McpProjectionError> {
        let mut tools = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut unlisted = HashMap::new();
        for admitted in host.manifests() {
            let manifest = admitted.manifest();
            if !manifest.profiles.iter().any(|p| p.as_str() == MCP_PROFILE) {
                // Served anyway (the names are projected as admission would), but the manifest
                // does not advertise what this server serves.
                tracing::warn!(
                    connector = %manifest.agent.id,
                    "the MCP projection serves connector `{}`, whose manifest does not list the \
                     `{MCP_PROFILE}` profile: add it to `#[connector(profiles = [...])]` so that \
                     discovery advertises the MCP tools",
                    manifest.agent.id
                );
            }
            for capability in manifest.capabilities.iter().filter(|c| c.is_callable()) {
                if let Some(reason) = left_out_because(&host, capability) {
                    // Said at start-up too: an author trial found its tools missing from
                    // tools/list with nothing in the log to say why.
                    tracing::info!(
                        connector = %manifest.agent.id,
                        capability = %capability.id,
                        "the MCP projection leaves capability `{}` out of tools/list: {reason}",
                        capability.id
                    );
                    let name = tool_name_of(admitted, capability);
                    unlisted.insert(name, (capability.id.clone(), reason));
                    continue;
                }
                let examples =
                    crate::connector::declared_examples(manifest, capability.id.as_str());
                let projected = project_capability(admitted, capability, examples);
                let name = projected.tool.name.to_string();
                if let Some(&first) = by_name.get(&name) {
                    let first: &ProjectedTool = &tools[first];
                    return Err(McpProjectionError::NameCollision {
                        name,
                        first: first.capability.clone(),
                        second: capability.id.clone(),
                    });
                }
                by_name.insert(name, tools.len());
                tools.push(projected);
            }
        }
        let info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "aip-connector",
                env!("CARGO_PKG_VERSION"),
            ))
            // Nothing here relies on `_meta`, which most desktop and IDE clients do not let a
            // model set (found by an author trial).
            .with_instructions(
                "Each tool is an AIP capability run by a governed host. Retrying a tool marked \
                 idempotent with the same arguments is safe: its effect is not applied twice \
                 (the result may be the first call's, replayed). Other tools run on every call. \
                 A call that needs a person's approval does not run: it answers with the \
                 pending approval id, who may approve, and how to run it once they have.",
            );
        Ok(Self {
            inner: Arc::new(Projection {
                host,
                tools,
                by_name,
                unlisted,
            }),
            info: Arc::new(info),
            caller: CallerSource::Transport,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_caller: DEFAULT_MAX_SESSIONS_PER_CALLER,
            purge_interval: Some(super::server::DEFAULT_PURGE_INTERVAL),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            connections: super::ConnectionLimits::default(),
            session_key: None,
            max_streamed_data_bytes: DEFAULT_MAX_STREAMED_DATA_BYTES,
            sessions: None,
        })
    }

    /// The same projection announcing `server_info` (name, version) in `initialize`, instead of
    /// the SDK's own name and version:
    /// `projection.with_server_info(Implementation::new("tracker", env!("CARGO_PKG_VERSION")))`
    /// ([`Implementation`] is re-exported from rmcp).
    pub fn with_server_info(self, server_info: Implementation) -> Self {
        self.map_info(|info| info.with_server_info(server_info))
    }

    /// The same projection sending `instructions` in `initialize`.
    pub fn with_instructions(self, instructions: impl Into<String>) -> Self {
        let instructions = instructions.into();
        self.map_info(|info| info.with_instructions(instructions))
    }

    fn map_info(self, change: impl FnOnce(ServerConfig) -> ServerConfig) -> Self {
        Self {
            info: Arc::new(change(ServerConfig::clone(&self.info))),
            ..self
        }
    }

    /// How long an MCP session served over HTTP may go without traffic before it is closed:
    /// the longer of rmcp's default (5 minutes) and the longest deadline a call of this
    /// projection's tools gets (each tool's SLA timeout, or the host's default timeout), plus a
    /// minute. Capabilities the projection leaves out (async-only ones, for instance) do not
    /// count.
    ///
    /// rmcp abandons the calls still running in a session it closes, and a running call whose
    /// handler sends nothing (no progress, no chunk) is no traffic: with the 5-minute default,
    /// a migration trial's 10-minute build watch was cut at 5 minutes (`action.abandoned`). A
    /// session whose client went away without deleting it is held as long (its slot of
    /// [`with_max_sessions`](Self::with_max_sessions) too).
    pub fn session_keep_alive(&self) -> std::time::Duration {
        let longest_ms = self
            .inner
            .tools
            .iter()
            .filter_map(|tool| self.host().default_deadline_ms(&tool.capability))
            .max()
            .unwrap_or(0);
        let longest = std::time::Duration::from_millis(longest_ms)
            .saturating_add(std::time::Duration::from_secs(60));
        SessionConfig::DEFAULT_KEEP_ALIVE.max(longest)
    }

    /// The same projection served over HTTP with at most `max_sessions` MCP sessions open at
    /// once (default [`DEFAULT_MAX_SESSIONS`]). A session lasts until its client deletes it or
    /// it has been idle for [`session_keep_alive`](Self::session_keep_alive);
    /// while the limit is reached, a request that would open another is answered
    /// `503 transport.overloaded` with `Retry-After`, and requests of open sessions still pass.
    /// Stateless mode opens no sessions, so the limit does not apply to it. At least 1.
    pub fn with_max_sessions(self, max_sessions: usize) -> Self {
        Self {
            max_sessions: max_sessions.max(1),
            ..self
        }
    }

    /// The same projection served over HTTP with at most `max_sessions` MCP sessions held by one
    /// caller (a principal of a tenant) at once (default [`DEFAULT_MAX_SESSIONS_PER_CALLER`]), so
    /// one client cannot take every session of [`with_max_sessions`](Self::with_max_sessions).
    /// A caller at its limit is answered `503 transport.overloaded` with `Retry-After` when it
    /// tries to open another; closing one (HTTP DELETE) or letting it idle out frees a slot.
    /// At least 1.
    pub fn with_max_sessions_per_caller(self, max_sessions: usize) -> Self {
        Self {
            max_sessions_per_caller: max_sessions.max(1),
            ..self
        }
    }

    /// The same projection whose [`serve_http`](Self::serve_http) purges the host store's
    /// expired idempotency entries ([`Host::purge_expired`]) and the records the host's
    /// retention no longer keeps ([`Host::purge_closed`]) when it starts and then every
    /// `interval` (default [`DEFAULT_PURGE_INTERVAL`](super::server::DEFAULT_PURGE_INTERVAL),
    /// as the native server does); `None` leaves purging to the application.
    pub fn with_purge_interval(self, interval: Option<std::time::Duration>) -> Self {
        Self {
            purge_interval: interval,
            ..self
        }
    }

    /// The same projection whose HTTP routes give a request body `timeout` to arrive (default
    /// 30 s); a body still arriving then is answered `408` and nothing runs. It bounds what an
    /// authenticated client that stalls its upload holds.
    pub fn with_body_timeout(self, timeout: std::time::Duration) -> Self {
        Self {
            body_timeout: timeout.max(std::time::Duration::from_millis(1)),
            ..self
        }
    }

    /// The same projection whose [`serve_http`](Self::serve_http) accepts connections within
    /// `limits`: a deadline on each request's headers and a cap on open connections
    /// ([`ConnectionLimits`](super::ConnectionLimits), as [`AipServer`](super::AipServer)
    /// applies them). A router you serve yourself gets whatever your server enforces.
    pub fn with_connection_limits(self, limits: super::ConnectionLimits) -> Self {
        Self {
            connections: limits,
            ..self
        }
    }

    /// The same projection whose streamed calls carry at most `bytes` of streamed data in their
    /// result (default [`DEFAULT_MAX_STREAMED_DATA_BYTES`]), counted as the compact JSON of
    /// each `data` chunk. The first chunks that fit are carried; from the first that does not,
    /// the rest are counted and left out (the result says how many chunks and bytes), while
    /// the action runs to its end. Progress notifications are not bounded by it. `0` carries
    /// none, only the counts.
    pub fn with_max_streamed_data_bytes(self, bytes: usize) -> Self {
        Self {
            max_streamed_data_bytes: bytes,
            ..self
        }
    }

    /// The same projection served over HTTP with session ids signed by `key` (see
    /// [`SessionKey`]): each id a client receives is bound to the caller (principal and tenant)
    /// that opened the session, and a request of anyone else naming it is answered `404`. Give
    /// every replica the same key when they share an rmcp `session_store` (a session opened on
    /// one resumed on another); by default each router makes a random key, and its sessions
    /// are good on it alone.
    ///
    /// ```
    /// # fn key(projection: aip_connector::serve::mcp::McpProjection, from_vault: Vec<u8>) -> Result<(), aip_connector::serve::mcp::SessionKeyTooShort> {
    /// use aip_connector::serve::mcp::SessionKey;
    /// let projection = projection.with_session_key(SessionKey::new(from_vault)?);
    /// # Ok(()) }
    /// ```
    pub fn with_session_key(self, key: SessionKey) -> Self {
        Self {
            session_key: Some(key),
            ..self
        }
    }

    /// The same projection running every call as `caller` (stdio: the local user the process
    /// runs for). Never serve such a projection to more than that one user.
    pub fn with_local_caller(self, caller: TrustedContext) -> Self {
        Self {
            caller: CallerSource::Fixed(Arc::new(caller)),
            ..self
        }
    }

    /// The host the calls run on.
    pub fn host(&self) -> &Host {
        &self.inner.host
    }

    /// The projected tools, in manifest order.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.inner.tools.iter().map(|t| &t.tool)
    }

    /// The tool named `name`, if projected.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        let index = *self.inner.by_name.get(name)?;
        Some(&self.inner.tools[index].tool)
    }

    /// The name of the tool that runs capability `id`, if projected.
    pub fn tool_name(&self, id: &str) -> Option<&str> {
        self.inner
            .tools
            .iter()
            .find(|t| t.capability == id)
            .map(|t| t.tool.name.as_ref())
    }

    /// An axum router serving the projection over streamable HTTP at [`MCP_PATH`], with rmcp's
    /// default server configuration (sessions; only loopback `Host` headers are accepted, so a
    /// public deployment must use [`router_with_config`](Self::router_with_config) and list
    /// its host names).
    ///
    /// Every request to [`MCP_PATH`] (POST, GET and DELETE) is first authenticated by
    /// `authenticator`; a refusal is answered `401` with the authenticator's
    /// [`challenge`](Authenticator::challenge) in `WWW-Authenticate`, or `503` for a temporary
    /// refusal (with `Retry-After` when the error sets `retry_after_ms`), the error as an
    /// `aip.core.v1.error` envelope, and reaches no MCP code. An accepted request
    /// carries its [`TrustedContext`] in its extensions, and each `tools/call` runs as that
    /// caller. A projection made by [`with_local_caller`](Self::with_local_caller) serves HTTP
    /// with per-request callers all the same.
    pub fn router(self, authenticator: Arc<dyn Authenticator>) -> Router {
        self.router_with_config(authenticator, StreamableHttpServerConfig::default())
    }

    /// [`router`](Self::router) with an explicit rmcp server configuration (allowed hosts and
    /// origins, stateless or session mode, JSON responses, keep-alive, body limit, shutdown
    /// token).
    pub fn router_with_config(
        self,
        authenticator: Arc<dyn Authenticator>,
        config: StreamableHttpServerConfig,
    ) -> Router {
        let limit = Arc::new(SessionLimit::new(
            self.max_sessions,
            self.max_sessions_per_caller,
        ));
        let guard = SessionGuard {
            limit: Arc::clone(&limit),
            key: self.session_key.clone().unwrap_or_else(SessionKey::random),
        };
        let manager = session_manager(self.session_keep_alive());
        let projection = Self {
            caller: CallerSource::Transport,
            sessions: Some(Arc::clone(&limit)),
            ..self
        };
        let body = BodyLimits {
            max_bytes: config.max_request_body_bytes,
            timeout: self.body_timeout,
        };
        let service = StreamableHttpService::new(
            move || Ok(projection.clone()),
            Arc::new(BoundedSessions::new(manager, Arc::clone(&limit))),
            config,
        );
        // The last layer runs first: authentication, then the session limit, so an unknown
        // caller learns nothing about the server's load; then the repeated-key check.
        Router::new()
            .route_service(MCP_PATH, service)
            .route_layer(middleware::from_fn_with_state(body, screen_request_body))
            .route_layer(middleware::from_fn_with_state(
                guard,
                sessions::guard_sessions,
            ))
            .route_layer(middleware::from_fn_with_state(authenticator, authenticate))
    }

    /// Serves [`router_with_config`](Self::router_with_config) on `listener` until `shutdown`
    /// completes, purging the host's expired idempotency entries meanwhile (see
    /// [`with_purge_interval`](Self::with_purge_interval)). Shutdown cancels
    /// `config.cancellation_token`, which ends every MCP session: open SSE streams close, and a
    /// tool call still running is abandoned (its action through [`Host::abandon_as`]). Then no
    /// connection is accepted, and the call returns once the open ones have closed.
    pub async fn serve_http(
        self,
        listener: tokio::net::TcpListener,
        authenticator: Arc<dyn Authenticator>,
        config: StreamableHttpServerConfig,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let sessions = config.cancellation_token.clone();
        let _purger = super::server::PeriodicPurge::start(self.host(), self.purge_interval);
        let connections = self.connections.clone();
        let router = self.router_with_config(authenticator, config);
        super::listen::serve_connections(listener, router, &connections, async move {
            shutdown.await;
            sessions.cancel();
        })
        .await
    }

    /// Serves the projection over a byte pipe, one JSON-RPC message per line read from
    /// `reader` and written to `writer` (a child process's pipes, the halves of a
    /// `tokio::io::split` duplex), with every call run as `caller`. Returns once the client has
    /// initialized the session; [`RunningService::waiting`] waits for it to end.
    ///
    /// Each line is screened before rmcp reads it, as the HTTP endpoint screens a body: a
    /// repeated key is refused (`-32700`), a `tools/call` whose params do not read as
    /// `{name, arguments}` is `-32602`, and a request rmcp cannot read is `-32600`, each with
    /// the request's id when it is certain; a refused notification or response is dropped
    /// unanswered. A line that is not JSON gets no answer (rmcp's rule, and every official MCP
    /// SDK's), and a line longer than rmcp's `DEFAULT_MAX_LINE_LENGTH` (16 MiB) is dropped
    /// unread. When either side ends (the client's pipe, or rmcp's session), so does the other.
    pub async fn serve_io<R, W>(
        self,
        reader: R,
        writer: W,
        caller: TrustedContext,
    ) -> Result<RunningService<RoleServer, Self>, ServerInitializeError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let pipe = screen::screened_pipe(
            reader,
            writer,
            rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH,
        );
        self.with_local_caller(caller).serve(pipe).await
    }

    /// Serves the projection on this process's stdin and stdout, every call run as `caller`
    /// (the local user), until the client closes stdin. Nothing else may write to stdout.
    pub async fn serve_stdio(self, caller: TrustedContext) -> Result<(), McpServeError> {
        let running = self
            .serve_io(tokio::io::stdin(), tokio::io::stdout(), caller)
            .await?;
        running.waiting().await?;
        Ok(())
    }

    /// The caller of one request, or the JSON-RPC error refusing it.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<TrustedContext, ErrorData> {
        match &self.caller {
            CallerSource::Fixed(caller) => Ok(TrustedContext::clone(caller)),
            CallerSource::Transport => context
                .extensions
                .get::<Parts>()
                .and_then(|parts| parts.extensions.get::<TrustedContext>())
                .cloned()
                .ok_or_else(|| {
                    let error = super::auth::unauthenticated(
                        "the MCP request carries no authenticated caller; serve the projection \
                         with McpProjection::router or McpProjection::serve_io",
                    );
                    ErrorData::invalid_request(error.message.clone(), Some(json!(error)))
                }),
        }
    }

    /// What stops the call of `context`: its request's cancellation, and the end of the HTTP
    /// session it runs in (the router's sessions, found by the session header rmcp read).
    fn stop_for(&self, context: &RequestContext<RoleServer>) -> Stop {
        let session = self.sessions.as_ref().and_then(|sessions| {
            let id = context
                .extensions
                .get::<Parts>()?
                .headers
                .get(sessions::SESSION_HEADER)?
                .to_str()
                .ok()?;
            sessions.end_signal(&id.into())
        });
        Stop {
            request: context.ct.clone(),
            session,
        }
    }

    /// One `tools/call`: the action, its run on the host (cancelled when the request is), and
    /// the projected result. A streamed tool's action runs as a stream, relayed as it runs.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(&index) = self.inner.by_name.get(request.name.as_ref()) else {
            // The caller's text: rmcp logs the error at `warn`, so it is clipped and its
            // control characters escaped, as the host's log lines treat ids.
            let shown = crate::host::Clipped::new(&request.name, SHOWN_TOOL_NAME_BYTES);
            let message = match self.inner.unlisted.get(request.name.as_ref()) {
                Some((capability, reason)) => format!(
                    "tool `{shown}` is not offered over MCP: capability `{capability}` is left \
                     out of tools/list because {reason}"
                ),
                None => format!("unknown tool `{shown}`"),
            };
            return Err(ErrorData::invalid_params(message, None));
        };
        let tool = &self.inner.tools[index];
        let caller = self.caller(&context)?;
        let sent_key = idempotency_key(&request, &context)?;
        let progress = tool
            .streamed
            .then(|| progress_token(&request, &context))
            .flatten()
            .map(|token| ProgressSink {
                token,
                peer: context.peer.clone(),
            });
        let input = Value::Object(request.arguments.unwrap_or_default());
        let key = match sent_key {
            Some(key) => KeyUse::Sent(key),
            None if tool.key_required => {
                KeyUse::Derived(derived_key(&tool.capability, &caller, &input))
            }
            None => KeyUse::None,
        };
        // A gated keyed call may come back once its approval is granted; a redacted
        // capability's approval record keeps no input, so its resumption needs this one.
        let resubmitted_input = (tool.gated && key.raw().is_some()).then(|| input.clone());
        let mut action = Action::new(tool.capability.clone(), Value::Null);
        action.idempotency_key = key.raw().map(str::to_owned);
        if tool.execute_transaction {
            action.transaction = Some(Box::new(ActionTransaction::new(TransactionMode::Execute)));
        }
        // The call as sent, without its input: what names the key of a result to forget.
        let sent = matches!(key, KeyUse::Derived(_)).then(|| action.clone());
        action.input = input;
        let host = &self.inner.host;
        let action_id = action.id.clone();
        let stop = self.stop_for(&context);
        let (result, relayed) = if tool.streamed {
            let mut relay = StreamRelay::new(progress, self.max_streamed_data_bytes);
            let chunks = host.invoke_stream(action, caller.clone());
            let result = relay.run(chunks, &action_id, &stop).await;
            let result = match resubmitted_input {
                Some(input) => {
                    self.resume_stream_if_approved(result, input, &caller, &stop, &mut relay)
                        .await
                }
                None => result,
            };
            (result, Some(relay.collected))
        } else {
            let result = run_abandonable(
                host,
                &action_id,
                &caller,
                &stop,
                host.invoke(action, &caller),
            )
            .await;
            let result = match resubmitted_input {
                Some(input) => self.resume_if_approved(result, input, &caller, &stop).await,
                None => result,
            };
            (result, None)
        };
        let forgotten = match sent {
            Some(sent) => self.forget_if_unchanged(&sent, &caller, &result).await,
            None => false,
        };
        let origin = key.origin(forgotten);
        Ok(match relayed {
            Some(collected) => project_streamed(tool, result, origin, collected),
            None => project_result(tool, result, origin),
        })
    }

    /// Under a key the projection derived, a failure that changed nothing is not kept: a
    /// generic MCP client cannot send a key of its own, so a stored definite failure (the
    /// provider refused, and the cause is fixed since) or a denied approval would answer every
    /// call with the same arguments for the key's TTL, and the model could never try again.
    /// The host decides from what it stored ([`Host::forget_unchanged`]); successes and
    /// uncertain outcomes stay, which is what makes a blind retry of a timed-out call safe.
    /// True when the result was forgotten. A store failure is logged: the result then stays
    /// replayed, as before.
    async fn forget_if_unchanged(
        &self,
        sent: &Action,
        caller: &TrustedContext,
        result: &ActionResult,
    ) -> bool {
        // A retryable failure released its key already; a success or a pending approval stays.
        let definite_failure = result.status == ActionResultStatus::Failed
            && !result.error.as_ref().is_some_and(|e| e.is_retryable());
        if !definite_failure {
            return false;
        }
        match self.inner.host.forget_unchanged(sent, caller).await {
            Ok(forgotten) => forgotten,
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    "the result of an MCP call that changed nothing could not be forgotten; the same call keeps replaying it"
                );
                false
            }
        }
    }

    /// A gated call made again (its key replays the stored `pending_approval`) once its approval
    /// was granted: the gated action runs, exactly once, as its requester. An approval record
    /// that kept the input is resumed from the store; a redacted one (no input kept) is
    /// re-submitted with this call's input and the approving decision, which the host checks
    /// against the record's fingerprint (docs/host-runtime.md §5.5). Anything else (still
    /// pending, denied, another caller's request) keeps the replayed answer; the requester
    /// under another operator than the gated call's, under `operator_must_differ`, gets the
    /// host's `policy.separation_of_duties.operator`.
    async fn resume_if_approved(
        &self,
        result: ActionResult,
        input: Value,
        caller: &TrustedContext,
        stop: &Stop,
    ) -> ActionResult {
        let Some(resumption) = self.resumption(&result, input, caller).await else {
            return result;
        };
        let host = &self.inner.host;
        match resumption {
            Resumption::FromStore {
                approval_id,
                gated_id,
            } => {
                let resumed = host.resume_approved(&approval_id, caller);
                run_abandonable(host, &gated_id, caller, stop, resumed).await
            }
            Resumption::Resubmitted(resubmission) => {
                let gated_id = resubmission.id.clone();
                let resubmitted = host.invoke(*resubmission, caller);
                run_abandonable(host, &gated_id, caller, stop, resubmitted).await
            }
        }
    }

    /// [`resume_if_approved`](Self::resume_if_approved) for a streamed tool: the gated action
    /// (sent streamed, so its handler takes a `StreamSink`) runs streamed, relayed by `relay`.
    /// `Host::resume_approved` refuses a streamed action, so a record that kept its input is
    /// resumed with `Host::resume_approved_stream`; a redacted one is re-submitted to
    /// `Host::invoke_stream` (the recorded action keeps its `streaming` mode).
    async fn resume_stream_if_approved(
        &self,
        result: ActionResult,
        input: Value,
        caller: &TrustedContext,
        stop: &Stop,
        relay: &mut StreamRelay,
    ) -> ActionResult {
        let Some(resumption) = self.resumption(&result, input, caller).await else {
            return result;
        };
        let host = &self.inner.host;
        let (gated_id, chunks) = match resumption {
            Resumption::FromStore {
                approval_id,
                gated_id,
            } => (
                gated_id,
                host.resume_approved_stream(&approval_id, caller.clone()),
            ),
            Resumption::Resubmitted(resubmission) => (
                resubmission.id.clone(),
                host.invoke_stream(*resubmission, caller.clone()),
            ),
        };
        relay.run(chunks, &gated_id, stop).await
    }

    /// How the gated action behind `result` is to run now, if it is to: `result` replays a
    /// pending approval that has since been granted, and `caller` requested it.
    async fn resumption(
        &self,
        result: &ActionResult,
        input: Value,
        caller: &TrustedContext,
    ) -> Option<Resumption> {
        if result.status != ActionResultStatus::PendingApproval || !result.is_idempotent_replay() {
            return None;
        }
        let approval_id = result.approval_id()?;
        let Ok(Some(record)) = self.inner.host.approval(&approval_id).await else {
            return None;
        };
        if record.status != ApprovalStatus::Approved || record.requested_by != caller.principal.id {
            return None;
        }
        if record.input_retained {
            return Some(Resumption::FromStore {
                approval_id,
                gated_id: record.action.id.clone(),
            });
        }
        let decision = record.approving_decision().cloned()?;
        let mut resubmission = record.action;
        resubmission.input = input;
        resubmission.approval = Some(Box::new(decision));
        Some(Resumption::Resubmitted(Box::new(resubmission)))
    }
}

/// How an approved gated action runs (docs/host-runtime.md §5.5).
enum Resumption {
    /// From its approval record, which kept the input.
    FromStore {
        approval_id: ApprovalId,
        /// The gated action's id (the record's), which an abandonment names.
        gated_id: ActionId,
    },
    /// Re-submitted: the record's action (its id, its mode) with this call's input and the
    /// approving decision, which the host checks against the record's fingerprint.
    Resubmitted(Box<Action>),
}

/// What tells an MCP call that its client is no longer waiting: its request was cancelled
/// (`notifications/cancelled`, a dropped HTTP request, rmcp's end of the session), or its
/// session ended (a DELETE, the idle timeout), which [`SessionLimit::end_signal`] reports at
/// once where rmcp would first let the call run on while it drains the session.
struct Stop {
    request: tokio_util::sync::CancellationToken,
    session: Option<tokio_util::sync::CancellationToken>,
}

impl Stop {
    /// Completes once the call should stop.
    async fn stopped(&self) {
        match &self.session {
            Some(session) => tokio::select! {
                () = self.request.cancelled() => {}
                () = session.cancelled() => {}
            },
            None => self.request.cancelled().await,
        }
    }
}

/// Runs `call` (the host running `action_id` for `caller`) until it ends or `stop` says the
/// client is no longer waiting. The host then abandons the handler once it runs
/// (`action.abandoned`, its key released when the contract says a retry is safe) rather than
/// storing a `cancelled` that the same call (same arguments, so the same derived key) would
/// replay for the key's TTL.
async fn run_abandonable(
    host: &Host,
    action_id: &ActionId,
    caller: &TrustedContext,
    stop: &Stop,
    call: impl Future<Output = ActionResult>,
) -> ActionResult {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        biased;
        result = &mut call => result,
        () = stop.stopped() => {
            super::abandon_once_running(host, action_id, caller, &mut call).await
        }
    }
}

// ---- Streamed calls -----------------------------------------------------------------------------

/// How long one progress notification may take to be handed to the transport before the call
/// stops notifying: a client that does not read its stream must not hold the action, whose
/// chunks wait for this relay to take them (the stream's back-pressure).
const PROGRESS_NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most bytes of a progress notification's `message`, the cut marker included.
const PROGRESS_MESSAGE_MAX_BYTES: usize = 256;

/// Ends a progress message that was cut.
const CUT_MARKER: &str = "…";

/// Where a streamed call's progress notifications go: the request's `progressToken`, on the
/// peer (the MCP session) that sent it.
struct ProgressSink {
    token: ProgressToken,
    peer: Peer<RoleServer>,
}

/// Reads a streamed call's chunks as they come: forwards each non-terminal one as a
/// `notifications/progress` (when the request carried a `progressToken`), collects the `data`
/// chunks for the result within a bound, and answers the result the terminal chunk carries.
struct StreamRelay {
    progress: Option<ProgressSink>,
    /// Notifications sent so far, the `progress` of the last: it keeps increasing across the
    /// streams of one call (a granted approval's call streams twice: the replayed gate, then
    /// the resumed action).
    notified: u64,
    collected: Collected,
}

impl StreamRelay {
    fn new(progress: Option<ProgressSink>, max_bytes: usize) -> Self {
        Self {
            progress,
            notified: 0,
            collected: Collected {
                max_bytes,
                ..Collected::default()
            },
        }
    }

    /// Relays `chunks` (the stream of `action_id`) to its terminal chunk and answers its result.
    /// When the MCP request is cancelled, the action is abandoned as [`run_abandonable`]
    /// abandons a synchronous one ([`ChunkStream::abandon`]: at once if its handler waits,
    /// else when it reaches its handler), and the rest of the stream is read without relaying,
    /// so that the call returns once the action has settled. Dropping the stream would abandon
    /// it too, but would not wait for that.
    async fn run(
        &mut self,
        mut chunks: ChunkStream,
        action_id: &ActionId,
        stop: &Stop,
    ) -> ActionResult {
        let mut abandoned = false;
        loop {
            let next = if abandoned {
                chunks.next().await
            } else {
                // The cancellation first: a stream that always has a chunk ready must not
                // keep the relay from noticing it.
                tokio::select! {
                    biased;
                    () = stop.stopped() => {
                        chunks.abandon();
                        abandoned = true;
                        continue;
                    }
                    next = chunks.next() => next,
                }
            };
            let Some(chunk) = next else {
                return ended_without_result(action_id);
            };
            if matches!(chunk.kind, StreamChunkKind::Done | StreamChunkKind::Error) {
                return chunk
                    .data
                    .and_then(|data| serde_json::from_value(data).ok())
                    .unwrap_or_else(|| ended_without_result(action_id));
            }
            if abandoned {
                continue;
            }
            let StreamChunk { kind, data, .. } = chunk;
            let message = self
                .progress
                .is_some()
                .then(|| progress_message(kind, data.as_ref()));
            if kind == StreamChunkKind::Data {
                self.collected.add(data.unwrap_or(Value::Null));
            }
            if let Some(message) = message {
                tokio::select! {
                    biased;
                    () = stop.stopped() => {
                        chunks.abandon();
                        abandoned = true;
                    }
                    () = self.notify(kind, message) => {}
                }
            }
        }
    }

    /// Sends one progress notification. A failure (the client is gone) or a transport that
    /// takes longer than [`PROGRESS_NOTIFY_TIMEOUT`] to take it ends the notifications of this
    /// call, never the call: progress is advisory, and the action must finish.
    async fn notify(&mut self, kind: StreamChunkKind, message: String) {
        let Some(progress) = &self.progress else {
            return;
        };
        self.notified += 1;
        let mut meta = NotificationMetaObject::new();
        meta.insert(meta::CHUNK_KIND.to_owned(), json!(kind));
        let mut notification =
            ProgressNotificationParam::new(progress.token.clone(), self.notified as f64)
                .with_message(message);
        notification.meta = Some(meta);
        let sent = tokio::time::timeout(
            PROGRESS_NOTIFY_TIMEOUT,
            progress.peer.notify_progress(notification),
        )
        .await;
        let failure = match sent {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!(
                "the transport took more than {} s to take it",
                PROGRESS_NOTIFY_TIMEOUT.as_secs()
            ),
        };
        tracing::debug!(
            %failure,
            "a progress notification of a streamed MCP call could not be sent; the call goes on without them"
        );
        self.progress = None;
    }
}

/// The failure of a stream that ended without a result (its task ended abnormally), as the
/// HTTP binding answers an action whose task did.
fn ended_without_result(action_id: &ActionId) -> ActionResult {
    ActionResult::failed(
        action_id.clone(),
        super::error(
            codes::CONNECTOR_RUNTIME_FAILURE,
            "the streamed action ended without its result (its task ended abnormally); its \
             outcome is unknown",
            ErrorCategory::Connector,
            false,
        ),
    )
}

/// The `data` chunks a streamed call collects for its result: the first ones whose compact
/// JSON fits in `max_bytes` together, then, from the first that does not, only counts. A
/// prefix, so that what a model reads is the start of the stream, without gaps.
#[derive(Debug, Default)]
struct Collected {
    max_bytes: usize,
    values: Vec<Value>,
    /// The compact JSON bytes of `values`.
    bytes: usize,
    /// Every `data` chunk streamed, collected or not.
    data_chunks: u64,
    omitted_chunks: u64,
    omitted_bytes: u64,
}

impl Collected {
    fn add(&mut self, value: Value) {
        self.data_chunks += 1;
        let size = json_len(&value);
        if self.omitted_chunks == 0 && self.bytes.saturating_add(size) <= self.max_bytes {
            self.bytes += size;
            self.values.push(value);
        } else {
            self.omitted_chunks += 1;
            self.omitted_bytes = self.omitted_bytes.saturating_add(size as u64);
        }
    }
}

/// The length of `value`'s compact JSON, without writing it anywhere.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The `message` of the progress notification forwarding a chunk: a string chunk's text, any
/// other data as compact JSON (the chunk's kind when it has none), as one line of at most
/// [`PROGRESS_MESSAGE_MAX_BYTES`], cut at a character boundary and marked with
/// [`CUT_MARKER`] when longer.
///
/// Nothing is withheld: a chunk is the handler's output, which the caller reads in full on
/// every binding (and this call's result carries the data chunks anyway), and the notification
/// goes only to the session that made the call.
fn progress_message(kind: StreamChunkKind, data: Option<&Value>) -> String {
    match data {
        Some(Value::String(text)) => display_line(text),
        // Only what a message can show is written: a chunk of a megabyte is not serialized
        // whole to show its first 256 bytes.
        Some(value) => display_line(&json_prefix(value, PROGRESS_MESSAGE_MAX_BYTES + 4)),
        None => json!(kind).as_str().unwrap_or_default().to_owned(),
    }
}

/// The first `limit` bytes of `value`'s compact JSON, less an incomplete character at the end.
fn json_prefix(value: &Value, limit: usize) -> String {
    struct Prefix {
        bytes: Vec<u8>,
        limit: usize,
    }
    impl std::io::Write for Prefix {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let room = self.limit - self.bytes.len();
            if bytes.len() > room {
                self.bytes.extend_from_slice(&bytes[..room]);
                // Stops serde_json: the rest is not needed.
                return Err(std::io::Error::other("enough"));
            }
            self.bytes.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut prefix = Prefix {
        bytes: Vec::new(),
        limit,
    };
    let _ = serde_json::to_writer(&mut prefix, value);
    let mut bytes = prefix.bytes;
    if let Err(error) = std::str::from_utf8(&bytes) {
        bytes.truncate(error.valid_up_to());
    }
    String::from_utf8(bytes).unwrap_or_default()
}

/// `text` as one line of at most [`PROGRESS_MESSAGE_MAX_BYTES`]: control characters (line
/// breaks, escape sequences), other line and paragraph breaks (U+2028, U+2029, ...) and
/// bidirectional controls become spaces, since a client may print the message to a terminal
/// (a bidi override there reorders what follows it); a longer text is cut at a character
/// boundary and ends with [`CUT_MARKER`].
fn display_line(text: &str) -> String {
    let mut shown = String::with_capacity(text.len().min(PROGRESS_MESSAGE_MAX_BYTES));
    // Where a text that does not fit is cut: room is kept for the marker.
    let mut cut = 0;
    for ch in text.chars() {
        let ch = if shows_as_space(ch) { ' ' } else { ch };
        let after = shown.len() + ch.len_utf8();
        if after > PROGRESS_MESSAGE_MAX_BYTES {
            shown.truncate(cut);
            shown.push_str(CUT_MARKER);
            return shown;
        }
        shown.push(ch);
        if after <= PROGRESS_MESSAGE_MAX_BYTES - CUT_MARKER.len() {
            cut = after;
        }
    }
    shown
}

/// Whether [`display_line`] shows `ch` as a space: a control character, any whitespace other
/// than a space (a line or paragraph separator breaks the line as `\n` does), or a
/// bidirectional formatting character (Unicode's `Bidi_Control` set).
fn shows_as_space(ch: char) -> bool {
    // Also any other whitespace (U+0085, U+00A0, ...) and the Arabic letter mark.
    crate::display::changes_line_layout(ch) || (ch.is_whitespace() && ch != ' ') || ch == '\u{061C}'
}

/// Whether a `tools/call` can run `capability` without a plan: the projection sends a plain
/// action, which the host runs as an `execute` when the contract's transaction supports it. A
/// transaction that commits only through a plan (`dry_run`/`plan`/`commit`) has no step a tool
/// call could take, and its handler's `Checkpoint` would refuse every call
/// (`transaction.context_missing`), so such a tool is not listed.
fn runs_without_a_plan(capability: &Capability) -> bool {
    capability
        .contract
        .as_ref()
        .and_then(|contract| contract.transaction.as_ref())
        .is_none_or(|transaction| transaction.supports(TransactionMode::Execute))
}

/// Why a callable `capability` is not a tool, if it is not: a `tools/call` could never run it.
fn left_out_because(host: &Host, capability: &Capability) -> Option<&'static str> {
    if call_mode(capability).is_none() {
        Some(
            "it neither runs synchronously nor streams (its contract offers only asynchronous \
             completion), and a tools/call waits for its result: call it over the native AIP \
             binding",
        )
    } else if !runs_without_a_plan(capability) {
        Some(
            "it changes state only by committing a plan, which a tools/call has no step for: \
             plan and commit it over the native AIP binding",
        )
    } else if host.compensates_only(capability.id.as_str()) {
        Some(
            "it runs only as the compensation of another capability (a `compensate` action of \
             the capability it undoes)",
        )
    } else {
        None
    }
}

/// How a `tools/call` runs a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallMode {
    /// [`Host::invoke`]: the contract supports synchronous execution (or there is no contract).
    Sync,
    /// [`Host::invoke_stream`]: the contract only streams, and refuses a synchronous action
    /// (`execution.mode_unsupported`) every time.
    Streamed,
}

/// How a `tools/call` runs `capability`, or `None` when it can run it in no mode a call waits
/// for (only asynchronous completion). A capability that supports both keeps running
/// synchronously: one answer, as every MCP tool gives it.
fn call_mode(capability: &Capability) -> Option<CallMode> {
    let Some(contract) = &capability.contract else {
        return Some(CallMode::Sync);
    };
    if contract.execution.supports_sync {
        Some(CallMode::Sync)
    } else if contract.execution.supports_streaming {
        Some(CallMode::Streamed)
    } else {
        None
    }
}

/// The idempotency key of a `tools/call`.
enum KeyUse {
    /// None: the capability does not require one and the client sent none.
    None,
    /// `_meta["aip/idempotency_key"]`, as the client sent it.
    Sent(String),
    /// Derived from the arguments ([`derived_key`]).
    Derived(String),
}

impl KeyUse {
    /// The raw key, if any.
    fn raw(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::Sent(key) | Self::Derived(key) => Some(key),
        }
    }

    /// Where the key came from, and whether the result was forgotten: for the replay note.
    fn origin(&self, forgotten: bool) -> KeyOrigin {
        match self {
            Self::None | Self::Sent(_) => KeyOrigin::Sent,
            Self::Derived(_) => KeyOrigin::Derived { forgotten },
        }
    }
}

/// Whose key a replayed result was stored under, which decides what its replay note can
/// honestly tell a model to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyOrigin {
    /// The client sent the key (or there was none, and nothing replays): a new key is a new
    /// request.
    Sent,
    /// The projection derived the key from the arguments; `forgotten` when the host forgot
    /// the result (it changed nothing), so the same call runs again.
    Derived {
        /// The stored result was forgotten ([`Host::forget_unchanged`]).
        forgotten: bool,
    },
}

/// The key of a call to a capability that requires one when the client sent none: derived from
/// the capability, the caller and the canonical JSON of the arguments, so the same caller
/// calling the tool again with the same arguments replays the first result (within the key's
/// TTL) instead of running again. That is what `idempotentHint` promises, and what makes an MCP
/// client's blind retry of a timed-out call safe. A client that means "do it again" sends its
/// own key. Most clients cannot, so a result that changed nothing (a definite failure, a denied
/// approval) is not kept under a derived key ([`McpProjection::forget_if_unchanged`]).
///
/// The caller is part of the key because a derived key is not a statement that two calls are
/// one operation: under `key_scope = tenant` (or `global`), two people who happen to send the
/// same arguments would otherwise share one key, and the second would get the first one's
/// result while their own call never ran.
fn derived_key(capability: &CapabilityId, caller: &TrustedContext, input: &Value) -> String {
    // Each part as JSON text, so no separator inside an id can make two callers' parts agree.
    let quoted = |text: &str| Value::String(text.to_owned()).to_string();
    let tenant = caller.tenant.as_ref().map(|tenant| tenant.id.as_str());
    let canonical = format!(
        "{}\n{}\n{}\n{}",
        quoted(capability.as_str()),
        quoted(caller.principal.id.as_str()),
        tenant.map_or_else(|| "null".to_owned(), quoted),
        crate::host::canonical::canonical_json(input)
    );
    format!(
        "mcp-args-{}",
        crate::host::canonical::sha256_hex(canonical.as_bytes())
    )
}

/// The `progressToken` of a `tools/call`'s `_meta`: with it, a streamed call's chunks are sent
/// as `notifications/progress` while it runs.
fn progress_token(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<ProgressToken> {
    context
        .meta
        .get_progress_token()
        .or_else(|| request.meta.as_ref()?.get_progress_token())
}

/// The idempotency key of a `tools/call`: `_meta["aip/idempotency_key"]`, a string.
fn idempotency_key(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Option<String>, ErrorData> {
    let value = context
        .meta
        .get(IDEMPOTENCY_KEY_META)
        .or_else(|| request.meta.as_ref()?.get(IDEMPOTENCY_KEY_META));
    match value {
        None => Ok(None),
        Some(Value::String(key)) => Ok(Some(key.clone())),
        Some(_) => Err(ErrorData::invalid_params(
            format!("`_meta[\"{IDEMPOTENCY_KEY_META}\"]` must be a string"),
            None,
        )),
    }
}

/// The axum middleware in front of the MCP endpoint.
async fn authenticate(
    State(authenticator): State<Arc<dyn Authenticator>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    match authenticator.authenticate(&parts).await {
        Ok(caller) => {
            parts.extensions.insert(caller);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(error) => {
            // `401` with the authenticator's challenge, or `503` for a temporary refusal.
            let (status, headers) = super::auth::refusal_head(authenticator.as_ref(), &error);
            let mut response = error_response(status, error);
            response.headers_mut().extend(headers);
            response
        }
    }
}

/// Refuses a POST whose JSON repeats a key in one of its objects (a tool's `arguments`
/// included) with a JSON-RPC parse error, as the native binding does: rmcp would keep the last
/// value, where a gateway that read the first may have checked another call (found by a
/// hostile review). The body is read within rmcp's own limit, which answers `413` as rmcp does.
/// How much of a request body the MCP routes read, and for how long.
#[derive(Clone, Copy)]
struct BodyLimits {
    max_bytes: usize,
    timeout: std::time::Duration,
}

/// How much of an unknown tool's name its error shows: MCP tool names are at most 128
/// characters, and the rest is the caller's text in a line rmcp logs.
const SHOWN_TOOL_NAME_BYTES: usize = 128;

/// How long a request body may take to arrive unless [`McpProjection::with_body_timeout`] says
/// otherwise.
const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn screen_request_body(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // A coded body would be read as other bytes than a gateway that decodes it checked.
    if !super::server::is_unencoded(&parts.headers) {
        let mut response = Response::new(Body::from(
            "send the request without a Content-Encoding or a transfer coding other than chunked",
        ));
        *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return response;
    }
    let reading =
        super::server::read_limited(&parts.headers, body, limits.max_bytes, limits.timeout);
    let bytes = match reading.await {
        Ok(bytes) => bytes,
        Err(super::server::BodyError::TimedOut) => {
            let mut response = Response::new(Body::from("the request body did not arrive in time"));
            *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
            return response;
        }
        Err(super::server::BodyError::TooLarge) => {
            let mut response = Response::new(Body::from("request body too large"));
            *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return response;
        }
        Err(super::server::BodyError::Unreadable(why)) => {
            return json_rpc_parse_error(&format!("the request body could not be read: {why}"));
        }
    };
    // A repeated key, text that is not JSON, and messages rmcp would answer with a plain-text
    // `415` or "method not found" are answered here, with the request's id.
    match screen::screen(&bytes, screen::Arrival::Http) {
        screen::Screened::Pass => {}
        // Over HTTP every refused body is answered: `Drop` is for pipes only.
        screen::Screened::Refuse(refusal) | screen::Screened::Drop(refusal) => {
            return json_rpc_error(&refusal.response());
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `400` with a JSON-RPC 2.0 parse error (`-32700`), the answer to a body the server will not
/// read.
fn json_rpc_parse_error(message: &str) -> Response {
    json_rpc_error(&screen::Refusal::new(screen::PARSE_ERROR, message, None).response())
}

/// `400` with a JSON-RPC 2.0 error response the projection answers itself, before rmcp.
fn json_rpc_error(body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A refusal the MCP endpoint answers itself, before rmcp: `status` with the error as an
/// `aip.core.v1.error` envelope.
fn error_response(status: StatusCode, error: ProtocolError) -> Response {
    let body = serde_json::to_vec(&Envelope::error(error)).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl ServerHandler for McpProjection {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::clone(&self.info)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools().cloned().collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }
}

// ---- The tool projection ----------------------------------------------------------------------

/// The tool name of `capability`: its MCP projection's, or, when the manifest does not speak
/// the MCP profile, the name admission would project.
fn tool_name_of(admitted: &AdmittedManifest, capability: &Capability) -> String {
    admitted
        .projected_name(MCP_PROFILE, capability.id.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            stable_profile_name(
                capability
                    .binding(MCP_PROFILE)
                    .and_then(Binding::projected_name)
                    .unwrap_or(capability.id.as_str()),
            )
        })
}

fn project_capability(
    admitted: &AdmittedManifest,
    capability: &Capability,
    examples: Option<&Value>,
) -> ProjectedTool {
    let name = tool_name_of(admitted, capability);
    let description = capability
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map_or_else(|| capability.name.clone(), unwrapped);
    let mut input = schema_object(input_schema(&capability.input_schema));
    // Models pick arguments better from an example: the declared ones (valid inputs, which the
    // host checked at build) go where JSON Schema keeps them.
    if let Some(examples) = examples {
        input.entry("examples").or_insert_with(|| examples.clone());
    }
    let mut tool = Tool::new(name, description, input)
        .with_title(capability.name.clone())
        .with_annotations(tool_annotations(capability))
        .with_meta(tool_meta(capability));
    let output = capability.output_schema.as_ref().and_then(output_schema);
    let structured = output.is_some();
    let strip_replay_marker = output
        .as_ref()
        .is_none_or(|schema| schema.pointer(REPLAY_MARKER_PROPERTY).is_none());
    if let Some(output) = output {
        tool = tool.with_raw_output_schema(Arc::new(schema_object(output)));
    }
    let contract = capability.contract.as_ref();
    let key_required =
        contract.is_some_and(|c| c.idempotency.requirement == IdempotencyRequirement::Required);
    let execute_transaction = contract
        .and_then(|c| c.transaction.as_ref())
        .is_some_and(|t| t.supports(TransactionMode::Execute));
    ProjectedTool {
        tool,
        capability: capability.id.clone(),
        structured,
        key_required,
        execute_transaction,
        strip_replay_marker,
        gated: crate::connector::approval_required(capability),
        approval_policy: contract
            .and_then(|contract| contract.approval.as_ref())
            .and_then(|policy| serde_json::to_value(policy).ok()),
        streamed: call_mode(capability) == Some(CallMode::Streamed),
    }
}

/// A doc comment's text as a model reads it best: the lines of a paragraph joined by spaces
/// (rustdoc wraps them at 100 columns, and a model sees each break), paragraphs, list items,
/// headings, tables and fenced code kept on lines of their own.
fn unwrapped(doc: &str) -> String {
    let mut text = String::with_capacity(doc.len());
    let mut fenced = false;
    let mut joinable = false;
    for line in doc.trim().lines() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```") || trimmed.starts_with("~~~");
        let block = fenced
            || fence
            || trimmed.is_empty()
            || line.starts_with("    ")
            || trimmed.starts_with(['-', '*', '+', '#', '|', '>'])
            || trimmed
                .split_once(". ")
                .is_some_and(|(number, _)| number.chars().all(|c| c.is_ascii_digit()));
        if joinable && !block {
            text.push(' ');
            text.push_str(trimmed);
        } else {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(line);
        }
        if fence {
            fenced = !fenced;
        }
        // A paragraph's or a list item's wrapped lines join it; nothing joins a blank line, a
        // fence, code, a heading or a table row.
        joinable = !fenced
            && !fence
            && !trimmed.is_empty()
            && !line.starts_with("    ")
            && !trimmed.starts_with(['#', '|']);
    }
    text
}

/// Where an output schema would declare the marker `Host` adds to a replayed output
/// (`idempotent_replay`, `docs/host-runtime.md` §4).
const REPLAY_MARKER_PROPERTY: &str = "/properties/idempotent_replay";

/// The `inputSchema` of a capability: client-compatible (local `$ref`s inlined, nullable
/// unions collapsed; an optional field is then left out rather than sent as `null`, which
/// deserializes alike), without `$schema` (MCP's default dialect is 2020-12, and some
/// validators refuse a schema that names it).
pub fn input_schema(schema: &Value) -> Value {
    with_object_type(without_dialect(schema::render(
        schema,
        SchemaDialect::ClientCompatible,
    )))
}

/// The `outputSchema` of a capability, or `None` when its root is not an object (MCP's
/// `structuredContent` of current clients is an object).
///
/// Client-compatible when that changes nothing the output can be: a schema with a nullable
/// union (`["T", "null"]`, `anyOf [T, {"type": "null"}]`) keeps its Draft 2020-12 form,
/// because a serialized `Option` field is `null` and collapsing the union would make every
/// strict client reject a conforming result. Never carries `$schema`.
pub fn output_schema(schema: &Value) -> Option<Value> {
    if !schema::has_object_root(schema) {
        return None;
    }
    let dialect = if has_nullable_union(schema) {
        SchemaDialect::Draft202012
    } else {
        SchemaDialect::ClientCompatible
    };
    Some(with_object_type(without_dialect(schema::render(
        schema, dialect,
    ))))
}

/// MCP requires `"type": "object"` at the root of a tool's schemas. An object root the host
/// accepts may lack it (an internally tagged enum is a `oneOf` of objects); saying it changes
/// nothing such a schema accepts.
fn with_object_type(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
    }
    schema
}

fn without_dialect(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// Whether any node of `schema` accepts `null` next to another type.
fn has_nullable_union(schema: &Value) -> bool {
    match schema {
        Value::Object(object) => {
            let union = object
                .get("type")
                .and_then(Value::as_array)
                .is_some_and(|types| types.iter().any(|t| t == "null"));
            let branch = ["anyOf", "oneOf"].iter().any(|keyword| {
                object
                    .get(*keyword)
                    .and_then(Value::as_array)
                    .is_some_and(|branches| {
                        branches
                            .iter()
                            .any(|b| b.get("type").and_then(Value::as_str) == Some("null"))
                    })
            });
            union
                || branch
                || object.get("nullable") == Some(&Value::Bool(true))
                || object.values().any(has_nullable_union)
        }
        Value::Array(items) => items.iter().any(has_nullable_union),
        _ => false,
    }
}

fn schema_object(schema: Value) -> JsonObject {
    match schema {
        Value::Object(object) => object,
        // Admission only admits object schemas; a boolean `true` schema accepts anything.
        _ => JsonObject::new(),
    }
}

/// The MCP annotations of a capability, from its contract (`docs/mcp.md` has the table).
///
/// The title is the capability's name. Without a contract only the title is set, so MCP's
/// conservative defaults apply (not read-only, destructive, not idempotent, open world).
///
/// - `readOnlyHint`: every side effect is `read` (or there is none);
/// - `destructiveHint`: not read-only, and some effect may overwrite or destroy existing
///   state: `write`, `delete`, `financial`, `identity`, `medical`, `legal`, `code_execution`.
///   `send_message` only adds (a new message) and `external_network` says where, not what.
///   An `mcp(destructive = false)` binding declares the capability's `write` additive (a
///   comment, a new record); it cannot lift the hint of the other effects, which destroy;
/// - `idempotentHint`: idempotency is required, or retry safety is `safe`. A required key
///   that the client does not send is derived from the arguments, so repeating a call with the
///   same arguments replays its result;
/// - `openWorldHint`: an `external_network` side effect.
pub fn tool_annotations(capability: &Capability) -> ToolAnnotations {
    let annotations = ToolAnnotations::with_title(capability.name.clone());
    let Some(contract) = &capability.contract else {
        return annotations;
    };
    let effects = &contract.side_effects;
    let read_only = effects.iter().all(|e| *e == SideEffect::Read);
    // `mcp(destructive = false)`: the author says its writes only add (a comment, a message in
    // a thread). Honoured only where no effect destroys; the macro refuses it there.
    let additive = capability
        .binding(MCP_PROFILE)
        .and_then(|binding| binding.metadata.get(MCP_DESTRUCTIVE_KEY))
        == Some(&Value::Bool(false));
    let destructive = !read_only
        && effects
            .iter()
            .any(|e| e.destroys() || (e.may_overwrite() && !additive));
    annotations
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(
            contract.idempotency.requirement == IdempotencyRequirement::Required
                || contract.execution.retry_safety == RetrySafety::Safe,
        )
        .open_world(effects.contains(&SideEffect::ExternalNetwork))
}

/// The MCP binding's key that declares a tool's writes additive: `mcp(destructive = false)`.
pub use aip_connector_core::ids::profiles::MCP_DESTRUCTIVE_KEY;

/// Whether the host gates every call of the capability behind an approval (stage 10).
fn tool_meta(capability: &Capability) -> MetaObject {
    let contract = capability.contract.as_ref();
    let mut meta = MetaObject::new();
    meta.insert(meta::CAPABILITY_ID.to_owned(), json!(capability.id));
    if let Some(risk) = capability.risk {
        meta.insert(meta::RISK.to_owned(), json!(risk));
    }
    if let Some(contract) = contract {
        meta.insert(meta::SIDE_EFFECTS.to_owned(), json!(contract.side_effects));
        meta.insert(
            meta::IDEMPOTENCY.to_owned(),
            json!(contract.idempotency.requirement),
        );
    }
    meta.insert(
        meta::APPROVAL_REQUIRED.to_owned(),
        json!(crate::connector::approval_required(capability)),
    );
    if call_mode(capability) == Some(CallMode::Streamed) {
        meta.insert(meta::STREAMING.to_owned(), Value::Bool(true));
    }
    meta
}

// ---- The result projection --------------------------------------------------------------------

/// Maps an AIP result to an MCP tool result. Only `completed` is a success; everything else is
/// `isError: true` without `structuredContent`, so no client validates a refusal against the
/// tool's `outputSchema`.
///
/// `origin` says whose key the call ran under and whether its result was forgotten, for the
/// note a replay carries.
fn project_result(tool: &ProjectedTool, result: ActionResult, origin: KeyOrigin) -> CallToolResult {
    let status = result.status;
    let replayed = result.is_idempotent_replay();
    let mut meta = MetaObject::new();
    meta.insert(meta::ACTION_ID.to_owned(), json!(result.action_id));
    meta.insert(meta::STATUS.to_owned(), json!(result.status));
    if let Some(error) = &result.error {
        meta.insert(meta::ERROR.to_owned(), json!(error));
    }
    // A replayed failure, cancellation or pending approval is an error to MCP, whose content
    // does not carry the output: the marker goes to `_meta`, as a replayed success's does.
    if result.status != ActionResultStatus::Completed && result.is_idempotent_replay() {
        meta.insert(meta::IDEMPOTENT_REPLAY.to_owned(), Value::Bool(true));
    }
    let mut projected = match result.status {
        ActionResultStatus::Completed => {
            let mut output = result.output.unwrap_or(Value::Null);
            // A replay of a stored result: the schema does not allow the marker (it may forbid
            // additional properties, or the output is not an object), so it travels in `_meta`
            // and the content is the output as first answered.
            // A schema that declares the property keeps a bare marker; an output the host kept
            // beside it (`original_output`: one with its own `idempotent_replay`) is unwrapped
            // either way.
            let wrapped = output.get(ORIGINAL_OUTPUT).is_some();
            if (tool.strip_replay_marker || wrapped) && unmark_idempotent_replay(&mut output).0 {
                meta.insert(meta::IDEMPOTENT_REPLAY.to_owned(), Value::Bool(true));
            }
            // A text output is the text itself, as a hand-written MCP tool answers it; JSON
            // text (quoted, newlines escaped) is only for what `structuredContent` repeats or
            // what is not text.
            let text = match &output {
                Value::String(text) if !tool.structured => text.clone(),
                other => other.to_string(),
            };
            let mut success = CallToolResult::success(vec![ContentBlock::text(text)]);
            if tool.structured {
                success.structured_content = Some(output);
            }
            success
        }
        ActionResultStatus::Failed => {
            CallToolResult::error(error_blocks("the action failed", result.error.as_deref()))
        }
        ActionResultStatus::Cancelled => {
            let reason = result
                .output
                .as_ref()
                .and_then(|o| o.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("cancellation requested");
            let fallback =
                format!("cancelled: the action was cancelled before it finished ({reason})");
            CallToolResult::error(error_blocks(&fallback, result.error.as_deref()))
        }
        ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman => {
            let approval = result.output.clone().unwrap_or(Value::Null);
            let approval_id = approval
                .get("approval_id")
                .and_then(Value::as_str)
                .or_else(|| {
                    result
                        .error
                        .as_ref()?
                        .details
                        .as_ref()?
                        .get("approval_id")?
                        .as_str()
                })
                .unwrap_or("(none)")
                .to_owned();
            // The policy the host gates an approval with: the declared one, else the host's
            // default (a risk above `medium` without a declared policy). `requires_human` is a
            // hand-over, not necessarily an approval: only a declared policy is named for it.
            let default_policy = (tool.approval_policy.is_none()
                && result.status == ActionResultStatus::PendingApproval)
                .then(crate::host::default_approval_policy);
            if !approval.is_null() {
                let mut approval = approval.clone();
                let policy = tool.approval_policy.clone().or_else(|| {
                    default_policy
                        .as_ref()
                        .and_then(|policy| serde_json::to_value(policy).ok())
                });
                if let (Some(object), Some(policy)) = (approval.as_object_mut(), policy) {
                    object.entry("policy").or_insert(policy);
                }
                meta.insert(meta::APPROVAL.to_owned(), approval);
            }
            let what = if result.status == ActionResultStatus::PendingApproval {
                "needs human approval"
            } else {
                "needs a human"
            };
            // A keyed call again finds this request (the key replays it) and, once approved,
            // runs the action; without a key it would be a new request.
            let how_to_resume = if tool.key_required {
                "call this tool again with the same arguments to run it (once)".to_owned()
            } else {
                format!(
                    "call this tool again with the same arguments and the same \
                     `_meta[\"{IDEMPOTENCY_KEY_META}\"]` to run it (once); a call without a key \
                     is a new request"
                )
            };
            // Who may approve, in the text a model reads: desktop hosts do not show it `_meta`,
            // where the policy is (found by an author trial). Only for an approval.
            let approvers = (result.status == ActionResultStatus::PendingApproval)
                .then(|| match &tool.approval_policy {
                    Some(policy) => serde_json::from_value(policy.clone()).ok(),
                    None => default_policy,
                })
                .flatten()
                .map(|policy| format!(" {}", approvers_sentence(&policy)))
                .unwrap_or_default();
            let mut blocks = vec![ContentBlock::text(format!(
                "Not executed: `{}` {what} before it runs; nothing ran. Pending approval id: \
                 {approval_id}.{approvers} Once the approval is granted, {how_to_resume}.",
                tool.capability
            ))];
            if !approval.is_null() {
                blocks.push(ContentBlock::text(approval.to_string()));
            }
            CallToolResult::error(blocks)
        }
    };
    // A model reads the content, not `_meta`: told only "done", it believes a second identical
    // request (a new comment, say) did something. A replayed approval request already says
    // what happened.
    if replayed
        && !matches!(
            status,
            ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman
        )
    {
        projected
            .content
            .push(ContentBlock::text(replay_note(origin)));
    }
    projected.with_meta(Some(meta))
}

/// Who may approve under `policy` (the published `ApprovalPolicy`), as one sentence a model can
/// pass on to its user: the approvers, how many different people, whether the requester and the
/// operator are excluded (the requester is, unless `allow_self_approval` without
/// `requester_must_differ`: the host's own test), and the policy's reason. The policy's texts
/// are the author's: each is put on one line, without backticks, and the reason is clipped.
fn approvers_sentence(policy: &aip_connector_core::model::ApprovalPolicy) -> String {
    let who = match &policy.rule {
        Some(rule) => describe_rule(rule),
        None => crate::host::approval::selector_in_words(&policy.approver_selector, &plain),
    };
    let mut sentence = format!("Who may approve: {who}");
    if policy.minimum_distinct_principals > 1 {
        sentence.push_str(&format!(
            ", {} different people",
            policy.minimum_distinct_principals
        ));
    }
    let separation = policy.separation_of_duties;
    if separation.requester_must_differ || !separation.allow_self_approval {
        sentence.push_str(", not the one who asked");
    }
    if separation.operator_must_differ {
        sentence.push_str(", nor the operator of the service that called");
    }
    if let Some(reason) = policy
        .reason
        .as_deref()
        .map(plain)
        .filter(|r| !r.is_empty())
    {
        sentence.push_str(&format!(" (why approval is needed: {reason})"));
    }
    sentence.push('.');
    // A rule of many leaves stays readable: the whole sentence is bounded too.
    const MAX_SENTENCE_CHARS: usize = 600;
    if let Some((cut, _)) = sentence.char_indices().nth(MAX_SENTENCE_CHARS) {
        sentence.truncate(cut);
        sentence.push_str("… (the full policy is in the result's `_meta`).");
    }
    sentence
}

/// An author's text as a part of the sentence: on one line, without backticks (which would
/// break its code spans) or control and formatting characters (escapes, bidirectional
/// overrides, zero-width characters), at most 200 characters.
fn plain(text: &str) -> String {
    const MAX_CHARS: usize = 200;
    let line = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('`', "'")
        .chars()
        .filter(|c| {
            !c.is_control()
                && !matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        })
        .collect::<String>();
    match line.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn describe_rule(rule: &aip_connector_core::model::ApprovalRule) -> String {
    use aip_connector_core::model::ApprovalRule;
    let list = |rules: &[ApprovalRule]| {
        rules
            .iter()
            .map(describe_rule)
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Whether one person may satisfy several children is part of what a user must know, where
    // more than one child must be satisfied.
    let people = |several: bool, distinct: bool| match (several, distinct) {
        (false, _) => "",
        (true, true) => ", by different people",
        (true, false) => ", one person may count for several",
    };
    match rule {
        ApprovalRule::All {
            rules,
            allow_decision_reuse,
        } => format!(
            "each of ({}){}",
            list(rules),
            people(rules.len() > 1, !allow_decision_reuse)
        ),
        ApprovalRule::Any { rules } => format!("any of ({})", list(rules)),
        ApprovalRule::Quorum {
            required,
            rules,
            distinct_principals,
        } => format!(
            "{required} of ({}){}",
            list(rules),
            people(*required > 1, *distinct_principals)
        ),
        leaf => crate::host::approval::rule_leaf_in_words(leaf, &plain).unwrap_or_default(),
    }
}

/// Maps the result of a streamed call as [`project_result`] maps any, with what the call
/// streamed before the result's own blocks, so that a model reads the stream and then its end:
///
/// - the collected `data` chunks' values, in order, as one text block holding a JSON array;
/// - when the bound left chunks out, a block saying how many chunks and bytes;
/// - on a replay (nothing ran, so nothing streamed), a block saying that streamed data is not
///   stored, so its absence is not read as an empty stream.
///
/// `structuredContent` stays the final output alone, which is what the tool's `outputSchema`
/// describes. `_meta["aip/stream"]` has the counts.
fn project_streamed(
    tool: &ProjectedTool,
    result: ActionResult,
    origin: KeyOrigin,
    collected: Collected,
) -> CallToolResult {
    // A replayed approval request says what happened already: nothing ran, nothing streamed.
    let replayed_run = result.is_idempotent_replay()
        && !matches!(
            result.status,
            ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman
        );
    let mut projected = project_result(tool, result, origin);
    let counts = json!({
        "data_chunks": collected.data_chunks,
        "collected_chunks": collected.values.len(),
        "omitted_chunks": collected.omitted_chunks,
        "omitted_bytes": collected.omitted_bytes,
    });
    let mut blocks = Vec::new();
    if collected.omitted_chunks > 0 {
        blocks.push(ContentBlock::text(format!(
            "Streamed data cut: this result carries the first {} of the {} data chunks the action \
             streamed; the other {} ({} bytes as JSON) are left out, past this server's bound of \
             {} bytes of streamed data per result. The stream was read to its end; the action's \
             result follows.",
            collected.values.len(),
            collected.data_chunks,
            collected.omitted_chunks,
            collected.omitted_bytes,
            collected.max_bytes,
        )));
    }
    if !collected.values.is_empty() {
        let values = Value::Array(collected.values);
        blocks.insert(0, ContentBlock::text(values.to_string()));
    }
    if replayed_run {
        blocks.push(ContentBlock::text(STREAM_REPLAY_NOTE));
    }
    projected.content.splice(0..0, blocks);
    projected
        .meta
        .get_or_insert_with(MetaObject::new)
        .insert(meta::STREAM.to_owned(), counts);
    projected
}

/// Before the replayed result of a streamed call: its chunks were never stored.
const STREAM_REPLAY_NOTE: &str = "Streamed data is not stored: this replayed answer carries none \
of the data the earlier call streamed, only its stored result.";

/// The content block added to a replayed result. None says the earlier call ran (a denied call
/// never did), and only a client that sent a key is told to send another: most MCP clients do
/// not let a model set `_meta`.
fn replay_note(origin: KeyOrigin) -> &'static str {
    match origin {
        KeyOrigin::Sent => REPLAY_NOTE_SENT_KEY,
        KeyOrigin::Derived { forgotten: false } => REPLAY_NOTE_KEPT,
        KeyOrigin::Derived { forgotten: true } => REPLAY_NOTE_FORGOTTEN,
    }
}

/// The replay note under a key the client sent.
const REPLAY_NOTE_SENT_KEY: &str = "Replayed: this is the stored result of an earlier call with \
the same `_meta[\"aip/idempotency_key\"]`; nothing ran again. To make a new request, call the \
tool with a new `_meta[\"aip/idempotency_key\"]`.";

/// The replay note under a key derived from the arguments, whose result stays stored: a success,
/// or a failure that may have taken effect.
const REPLAY_NOTE_KEPT: &str = "Replayed: this is the stored result of an earlier call with the \
same arguments; nothing ran again. Calls with the same arguments return this result while it is \
kept, so that a retry cannot do twice what that call did or may have done. If a separate, second \
request is really wanted, ask the user.";

/// The replay note under a key derived from the arguments, whose result the host forgot
/// because it changed nothing (a definite failure, a denied or expired approval).
const REPLAY_NOTE_FORGOTTEN: &str = "Replayed: this is the result of an earlier call with the \
same arguments; nothing ran again. That call changed nothing, and its result is no longer kept: \
calling the tool again with the same arguments runs it again (asking for a new approval if the \
tool needs one).";

/// `code: message` and the error as JSON text, without its null members: a model pays for every
/// token of `"provider_request_id": null` and learns nothing (`_meta` keeps the whole error).
fn error_blocks(fallback: &str, error: Option<&ProtocolError>) -> Vec<ContentBlock> {
    match error {
        Some(error) => vec![
            ContentBlock::text(format!("{}: {}", error.code, error.message)),
            ContentBlock::text(without_nulls(json!(error)).to_string()),
        ],
        None => vec![ContentBlock::text(fallback.to_owned())],
    }
}

/// `value` without object members whose value is `null`, at every depth (array items stay).
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .into_iter()
                .filter(|(_, member)| !member.is_null())
                .map(|(key, member)| (key, without_nulls(member)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use aip_connector_core::model::{
        CapabilityContract, CapabilityKind, DataContract, DataSensitivity, ExecutionContract,
        ExpectedCompletionMode, IdempotencyCollisionBehavior, IdempotencyContract,
        IdempotencyKeyScope,
    };

    use super::*;

    fn capability(effects: &[SideEffect], retry_safety: RetrySafety) -> Capability {
        let mut capability = Capability::new(
            "cap:t:x",
            "X",
            CapabilityKind::Tool,
            json!({"type": "object"}),
        );
        capability.contract = Some(CapabilityContract {
            side_effects: effects.to_vec(),
            idempotency: IdempotencyContract {
                // A key is required exactly when retry safety depends on one.
                requirement: if retry_safety == RetrySafety::SafeWithIdempotencyKey {
                    IdempotencyRequirement::Required
                } else {
                    IdempotencyRequirement::Optional
                },
                collision_behavior: IdempotencyCollisionBehavior::RevalidateInputHash,
                key_scope: IdempotencyKeyScope::Tenant,
                ttl_ms: Some(1000),
            },
            execution: ExecutionContract {
                supports_sync: true,
                supports_async: false,
                supports_streaming: false,
                supports_cancel: false,
                supports_retry: true,
                expected_completion: ExpectedCompletionMode::Sync,
                retry_safety,
            },
            data: DataContract {
                sensitivity: DataSensitivity::Public,
                contains_pii: false,
                redaction_required: false,
                residency: None,
                retention: None,
            },
            credentials: None,
            approval: None,
            sla: None,
            transaction: None,
            compensation: None,
        });
        capability
    }

    fn hints(annotations: &ToolAnnotations) -> [Option<bool>; 4] {
        [
            annotations.read_only_hint,
            annotations.destructive_hint,
            annotations.idempotent_hint,
            annotations.open_world_hint,
        ]
    }

    /// Side effects, retry safety, and `[readOnly, destructive, idempotent, openWorld]`.
    type Row = (&'static [SideEffect], RetrySafety, [Option<bool>; 4]);

    #[test]
    fn annotation_table() {
        use SideEffect::*;
        let t = Some(true);
        let f = Some(false);
        let key = RetrySafety::SafeWithIdempotencyKey;
        let cases: &[Row] = &[
            (&[], RetrySafety::Safe, [t, f, t, f]),
            (&[Read], RetrySafety::Safe, [t, f, t, f]),
            (&[Read, ExternalNetwork], RetrySafety::Safe, [f, f, t, t]),
            // A required key (derived from the arguments when the client sends none) makes a
            // repeated call with the same arguments a replay: idempotent.
            (&[Write], key, [f, t, t, f]),
            (&[Write, ExternalNetwork], RetrySafety::Safe, [f, t, t, t]),
            (&[Delete], RetrySafety::Unsafe, [f, t, f, f]),
            (&[SendMessage], key, [f, f, t, f]),
            (&[SendMessage, ExternalNetwork], key, [f, f, t, t]),
            (&[Financial], key, [f, t, t, f]),
            (&[Identity], key, [f, t, t, f]),
            (&[Medical], key, [f, t, t, f]),
            (&[Legal], key, [f, t, t, f]),
            (&[CodeExecution], RetrySafety::Unknown, [f, t, f, f]),
        ];
        for (effects, safety, expected) in cases {
            let annotations = tool_annotations(&capability(effects, *safety));
            assert_eq!(hints(&annotations), *expected, "{effects:?} {safety:?}");
            assert_eq!(annotations.title.as_deref(), Some("X"));
        }
    }

    /// `mcp(destructive = false)` declares a `write` additive, and only a `write`.
    #[test]
    fn an_additive_write_is_not_destructive_and_nothing_else_is_lifted() {
        use SideEffect::*;
        let additive = |effects: &[SideEffect], value: Value| {
            let mut capability = capability(effects, RetrySafety::SafeWithIdempotencyKey);
            let mut binding = Binding::new(MCP_PROFILE);
            binding
                .metadata
                .insert(MCP_DESTRUCTIVE_KEY.to_owned(), value);
            capability.bindings.push(binding);
            tool_annotations(&capability).destructive_hint
        };
        assert_eq!(additive(&[Write], json!(false)), Some(false));
        assert_eq!(
            additive(&[Write, ExternalNetwork], json!(false)),
            Some(false)
        );
        assert_eq!(additive(&[Write, SendMessage], json!(false)), Some(false));
        // Only `false` means anything; a destroying effect keeps the hint (a manifest written
        // by hand; the macro refuses these).
        assert_eq!(additive(&[Write], json!(true)), Some(true));
        assert_eq!(additive(&[Write], json!("no")), Some(true));
        assert_eq!(additive(&[Write, Delete], json!(false)), Some(true));
        assert_eq!(additive(&[Financial], json!(false)), Some(true));
    }

    #[test]
    fn a_derived_key_names_the_capability_the_caller_and_the_canonical_arguments() {
        use aip_connector_core::model::{Principal, PrincipalKind};

        let person = |id: &str| TrustedContext::new(Principal::new(id, PrincipalKind::Human), "t");
        let ana = person("user:ana").with_tenant(crate::VerifiedTenant::new("t1"));
        let cap = CapabilityId::from("cap:x:y");
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [true, null]}"#).unwrap();
        let reordered: Value = serde_json::from_str(r#"{"a": [true, null], "b": 1}"#).unwrap();
        let key = derived_key(&cap, &ana, &a);
        assert_eq!(key, derived_key(&cap, &ana, &reordered));
        assert_ne!(key, derived_key(&cap, &ana, &json!({"b": 2})));
        assert_ne!(key, derived_key(&CapabilityId::from("cap:x:z"), &ana, &a));
        // Another person, the same person in another tenant or without one: another key.
        let ben = person("user:ben").with_tenant(crate::VerifiedTenant::new("t1"));
        assert_ne!(key, derived_key(&cap, &ben, &a));
        let elsewhere = person("user:ana").with_tenant(crate::VerifiedTenant::new("t2"));
        assert_ne!(key, derived_key(&cap, &elsewhere, &a));
        assert_ne!(key, derived_key(&cap, &person("user:ana"), &a));
        // A tenant literally named `null` is not the absence of one.
        let named_null = person("user:ana").with_tenant(crate::VerifiedTenant::new("null"));
        assert_ne!(
            derived_key(&cap, &named_null, &a),
            derived_key(&cap, &person("user:ana"), &a)
        );
        assert!(key.starts_with("mcp-args-"));
        assert_eq!(key.len(), "mcp-args-".len() + 64);
    }

    #[test]
    fn without_a_contract_only_the_title_is_set() {
        let mut bare = capability(&[SideEffect::Read], RetrySafety::Safe);
        bare.contract = None;
        let annotations = tool_annotations(&bare);
        assert_eq!(hints(&annotations), [None; 4]);
        assert_eq!(annotations.title.as_deref(), Some("X"));
    }

    #[test]
    fn output_schemas_keep_nullable_unions_and_drop_the_dialect() {
        let plain = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"inner": {"$ref": "#/$defs/Inner"}},
            "$defs": {"Inner": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        });
        let rendered = output_schema(&plain).unwrap();
        assert!(!rendered.to_string().contains("$ref"), "{rendered}");
        assert!(rendered.get("$schema").is_none());
        assert_eq!(
            rendered["properties"]["inner"]["properties"]["n"]["type"],
            "integer"
        );

        let nullable = json!({
            "type": "object",
            "properties": {"note": {"type": ["string", "null"]}},
            "required": ["note"],
        });
        let rendered = output_schema(&nullable).unwrap();
        assert_eq!(
            rendered["properties"]["note"]["type"],
            json!(["string", "null"])
        );

        assert_eq!(output_schema(&json!({"type": "array"})), None);
    }

    fn projected() -> ProjectedTool {
        ProjectedTool {
            tool: Tool::new("x", "X", JsonObject::new()),
            capability: "cap:t:x".into(),
            structured: true,
            key_required: false,
            execute_transaction: false,
            strip_replay_marker: true,
            gated: false,
            approval_policy: None,
            streamed: false,
        }
    }

    fn text(result: &CallToolResult, block: usize) -> &str {
        &result.content[block].as_text().unwrap().text
    }

    #[test]
    fn only_completed_results_are_successes_with_structured_content() {
        use aip_connector_core::ids::ActionId;
        use aip_connector_core::model::ErrorCategory;

        let tool = projected();
        let id = ActionId::new();
        let done = project_result(
            &tool,
            ActionResult::completed(id.clone(), json!({"n": 1})),
            KeyOrigin::Sent,
        );
        assert_eq!(done.is_error, Some(false));
        assert_eq!(done.structured_content, Some(json!({"n": 1})));
        assert_eq!(text(&done, 0), r#"{"n":1}"#);

        assert_eq!(done.content.len(), 1, "a first answer has no replay note");

        let replay = json!({"n": 1, "idempotent_replay": true});
        let replayed = project_result(
            &tool,
            ActionResult::completed(id.clone(), replay),
            KeyOrigin::Sent,
        );
        assert_eq!(replayed.structured_content, Some(json!({"n": 1})));
        // The model reads the content: it says that nothing ran again, and how to ask anew.
        assert_eq!(text(&replayed, 0), r#"{"n":1}"#);
        assert!(
            text(&replayed, 1).starts_with("Replayed:"),
            "{}",
            text(&replayed, 1)
        );
        assert!(text(&replayed, 1).contains("nothing ran again"));
        assert_eq!(
            replayed.meta.unwrap().get(meta::IDEMPOTENT_REPLAY),
            Some(&json!(true))
        );

        // A tool without `outputSchema` (its output is not an object): the replay's content is
        // the list first answered, not the host's wrapper around it.
        let unstructured = ProjectedTool {
            structured: false,
            ..projected()
        };
        let mut replay = ActionResult::completed(id.clone(), json!([1, 2]));
        replay.mark_idempotent_replay();
        let replayed = project_result(&unstructured, replay, KeyOrigin::Sent);
        assert_eq!(replayed.structured_content, None);
        assert_eq!(text(&replayed, 0), "[1,2]");

        // A text output is the text itself, not JSON text (quoted, its newlines escaped), as a
        // hand-written MCP tool answers it (found by an author trial); a replay's too.
        let line = "two\n\"lines\"";
        let answered = project_result(
            &unstructured,
            ActionResult::completed(id.clone(), json!(line)),
            KeyOrigin::Sent,
        );
        assert_eq!(text(&answered, 0), line);
        let mut replay = ActionResult::completed(id.clone(), json!(line));
        replay.mark_idempotent_replay();
        assert_eq!(
            text(&project_result(&unstructured, replay, KeyOrigin::Sent), 0),
            line
        );
        assert_eq!(
            replayed.meta.unwrap().get(meta::IDEMPOTENT_REPLAY),
            Some(&json!(true))
        );

        // A schema that declares `idempotent_replay`: the handler's own value is what the
        // structured content shows on a replay, and `_meta` says it was one.
        let declaring = ProjectedTool {
            strip_replay_marker: false,
            ..projected()
        };
        let own = json!({"charge_id": "ch_1", "idempotent_replay": false});
        let mut replay = ActionResult::completed(id.clone(), own.clone());
        replay.mark_idempotent_replay();
        let replayed = project_result(&declaring, replay, KeyOrigin::Sent);
        assert_eq!(replayed.structured_content, Some(own.clone()));
        assert_eq!(
            replayed.meta.unwrap().get(meta::IDEMPOTENT_REPLAY),
            Some(&json!(true))
        );
        let live = project_result(
            &declaring,
            ActionResult::completed(id.clone(), own.clone()),
            KeyOrigin::Sent,
        );
        assert_eq!(live.structured_content, Some(own));
        assert_eq!(live.meta.unwrap().get(meta::IDEMPOTENT_REPLAY), None);

        let mut error = ProtocolError::new("x.failed", "it broke", ErrorCategory::Connector);
        error.details = Some(
            json!({ "operation": "invocation", "remote_status": null, "details": null, "list": [null] }),
        );
        let failed = project_result(
            &tool,
            ActionResult::failed(id.clone(), error),
            KeyOrigin::Sent,
        );
        // The JSON block leaves out null members; `_meta` keeps the error whole.
        let shown: Value = serde_json::from_str(text(&failed, 1)).unwrap();
        assert_eq!(
            shown["details"],
            json!({ "operation": "invocation", "list": [null] })
        );
        assert!(!text(&failed, 1).contains(":null"), "{}", text(&failed, 1));
        assert_eq!(
            failed.meta.as_ref().unwrap()[meta::ERROR]["details"]["remote_status"],
            Value::Null
        );
        assert!(
            failed.meta.as_ref().unwrap()[meta::ERROR]["details"]
                .get("remote_status")
                .is_some()
        );
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(failed.structured_content, None);
        assert_eq!(text(&failed, 0), "x.failed: it broke");
        let meta = failed.meta.as_ref().unwrap();
        assert_eq!(meta.get(meta::STATUS), Some(&json!("failed")));
        assert_eq!(meta[meta::ERROR]["code"], "x.failed");

        let mut cancelled = ActionResult::new(id.clone(), ActionResultStatus::Cancelled);
        cancelled.output = Some(json!({"cancelled": true, "reason": "operator said so"}));
        let cancelled = project_result(&tool, cancelled, KeyOrigin::Sent);
        assert_eq!(cancelled.is_error, Some(true));
        assert_eq!(cancelled.structured_content, None);
        assert!(text(&cancelled, 0).contains("operator said so"));
        assert_eq!(cancelled.meta.unwrap().get(meta::IDEMPOTENT_REPLAY), None);

        // Replayed results that are not successes say so in `_meta` too.
        let mut replayed_cancel = ActionResult::new(id.clone(), ActionResultStatus::Cancelled);
        replayed_cancel.output = Some(json!({"cancelled": true, "idempotent_replay": true}));
        let mut replayed_failure = ActionResult::failed(
            id.clone(),
            ProtocolError::new("x.failed", "it broke", ErrorCategory::Connector),
        );
        replayed_failure.output = Some(json!({"idempotent_replay": true}));
        for replayed in [replayed_cancel, replayed_failure] {
            let projected = project_result(&tool, replayed, KeyOrigin::Sent);
            assert_eq!(projected.is_error, Some(true));
            let last = projected.content.len() - 1;
            assert!(text(&projected, last).starts_with("Replayed:"));
            assert_eq!(
                projected.meta.unwrap().get(meta::IDEMPOTENT_REPLAY),
                Some(&json!(true))
            );
        }

        let mut human = ActionResult::new(id, ActionResultStatus::RequiresHuman);
        human.output = Some(json!({"approval_id": "appr_1"}));
        let human = project_result(&tool, human, KeyOrigin::Sent);
        assert_eq!(human.is_error, Some(true));
        assert_eq!(human.structured_content, None);
        assert!(text(&human, 0).contains("appr_1"));
        assert!(text(&human, 0).contains("nothing ran"));
    }

    /// A replay note never says the earlier call ran (a denied one never did), and only a
    /// client that sent a key is told to send another: under a derived key the model may have
    /// no way to set `_meta`.
    #[test]
    fn replay_notes_say_what_happened_and_what_the_model_can_do() {
        use aip_connector_core::ids::ActionId;
        use aip_connector_core::model::ErrorCategory;

        let mut replayed = ActionResult::failed(
            ActionId::new(),
            ProtocolError::new("policy.approval_denied", "denied", ErrorCategory::Policy),
        );
        replayed.output = Some(json!({"idempotent_replay": true}));
        let note = |origin| {
            let projected = project_result(&projected(), replayed.clone(), origin);
            text(&projected, projected.content.len() - 1).to_owned()
        };
        let sent = note(KeyOrigin::Sent);
        let kept = note(KeyOrigin::Derived { forgotten: false });
        let forgotten = note(KeyOrigin::Derived { forgotten: true });
        for note in [&sent, &kept, &forgotten] {
            assert!(note.starts_with("Replayed:"), "{note}");
            assert!(note.contains("nothing ran again"), "{note}");
            assert!(!note.contains("already ran"), "{note}");
        }
        assert!(
            sent.contains("new `_meta[\"aip/idempotency_key\"]`"),
            "{sent}"
        );
        for note in [&kept, &forgotten] {
            assert!(!note.contains("_meta"), "{note}");
        }
        assert!(kept.contains("ask the user"), "{kept}");
        assert!(forgotten.contains("runs it again"), "{forgotten}");
        assert!(forgotten.contains("new approval"), "{forgotten}");
    }

    /// A progress message is one line of at most 256 bytes: the text itself or compact JSON,
    /// cut at a character boundary with a marker, never split inside a character.
    #[test]
    fn progress_messages_are_bounded_lines() {
        let max = PROGRESS_MESSAGE_MAX_BYTES;
        let message = |data: Value| progress_message(StreamChunkKind::Data, Some(&data));
        assert_eq!(message(json!("row 1")), "row 1");
        // JSON escapes its own control characters: the line break stays `\n`, two characters.
        assert_eq!(
            message(json!({"n": 1, "line": "a\nb"})),
            r#"{"n":1,"line":"a\nb"}"#
        );
        // A text's line breaks and escape sequences become spaces.
        assert_eq!(message(json!("a\nb\r\n\u{1b}[31mred")), "a b   [31mred");
        // So do Unicode's other line breaks and the bidirectional controls (a right-to-left
        // override reorders what a terminal shows after it), in text and in JSON alike: JSON
        // does not escape them. Other non-ASCII text and plain spaces are kept.
        assert_eq!(
            message(json!("a\u{2028}b\u{2029}c\u{85}d\u{0B}e\u{A0}f")),
            "a b c d e f"
        );
        assert_eq!(
            message(json!(
                "pay \u{202E}txt.exe\u{202C} \u{2066}x\u{2069}\u{200F}\u{61C}"
            )),
            "pay  txt.exe   x   "
        );
        assert_eq!(
            message(json!({"name": "\u{202E}gpj"})),
            "{\"name\":\" gpj\"}"
        );
        assert_eq!(message(json!("café 🦀 naïve")), "café 🦀 naïve");
        assert_eq!(
            progress_message(StreamChunkKind::Progress, None),
            "progress"
        );

        let fits = "a".repeat(max);
        assert_eq!(message(json!(fits)), fits);
        for long in ["a".repeat(max + 1), "a".repeat(10 * max)] {
            let shown = message(json!(long));
            assert_eq!(shown.len(), max, "{shown}");
            assert_eq!(
                shown,
                format!("{}{CUT_MARKER}", "a".repeat(max - CUT_MARKER.len()))
            );
        }
        // Two- and four-byte characters are kept whole: the cut falls before the one that does
        // not fit with the marker.
        for (ch, width) in [('é', 2), ('🦀', 4)] {
            let shown = message(json!(ch.to_string().repeat(max)));
            let kept = (max - CUT_MARKER.len()) / width;
            assert_eq!(
                shown,
                format!("{}{CUT_MARKER}", ch.to_string().repeat(kept))
            );
            assert!(shown.len() <= max);
        }
        // A large value is cut the same way, its JSON written no further than needed.
        let numbers: Vec<u32> = (0..100_000).collect();
        let shown = message(json!({ "numbers": numbers }));
        assert!(shown.starts_with(r#"{"numbers":[0,1,2,"#), "{shown}");
        assert!(shown.ends_with(CUT_MARKER), "{shown}");
        assert_eq!(shown.len(), max);
        // A cut inside a multibyte character of JSON text drops the partial character.
        let wide = json!({ "t": "é".repeat(max) });
        let shown = message(wide);
        assert!(shown.ends_with(CUT_MARKER) && shown.len() <= max, "{shown}");
        assert!(shown.starts_with(r#"{"t":"éé"#), "{shown}");
    }

    /// What a result carries of a stream is its start: the chunks that fit together, then
    /// only counts from the first that does not, even if a later one would fit.
    #[test]
    fn collected_stream_data_is_a_prefix_within_the_bound() {
        let mut collected = Collected {
            max_bytes: 10,
            ..Collected::default()
        };
        collected.add(json!("abc")); // 5 bytes: "abc" quoted
        collected.add(json!(1)); // 1
        collected.add(json!("abcdef")); // 8: 14 would pass the bound
        collected.add(json!(2)); // 1: it would fit, but the prefix has ended
        assert_eq!(collected.values, [json!("abc"), json!(1)]);
        assert_eq!(collected.bytes, 6);
        assert_eq!(collected.data_chunks, 4);
        assert_eq!(collected.omitted_chunks, 2);
        assert_eq!(collected.omitted_bytes, 9);

        let mut none = Collected::default();
        none.add(json!({"a": 1}));
        assert!(none.values.is_empty());
        assert_eq!((none.omitted_chunks, none.omitted_bytes), (1, 7));
        assert_eq!(json_len(&json!({"a": [1, "é"]})), r#"{"a":[1,"é"]}"#.len());
    }

    /// A streamed call's result: the data array first, then what was left out, then the
    /// result as a synchronous call's; the structured content is the output alone. A replay
    /// says that streamed data is not stored.
    #[test]
    fn a_streamed_result_carries_its_data_before_the_result() {
        use aip_connector_core::ids::ActionId;

        let tool = ProjectedTool {
            streamed: true,
            ..projected()
        };
        let id = ActionId::new();
        let mut collected = Collected {
            max_bytes: 8,
            ..Collected::default()
        };
        for n in [1, 2, 300, 4] {
            collected.add(json!({ "n": n }));
        }
        let done = project_streamed(
            &tool,
            ActionResult::completed(id.clone(), json!({"rows": 4})),
            KeyOrigin::Sent,
            collected,
        );
        assert_eq!(done.is_error, Some(false));
        assert_eq!(done.structured_content, Some(json!({"rows": 4})));
        assert_eq!(text(&done, 0), r#"[{"n":1}]"#);
        let cut = text(&done, 1);
        assert!(cut.starts_with("Streamed data cut:"), "{cut}");
        assert!(cut.contains("the first 1 of the 4 data chunks"), "{cut}");
        assert!(cut.contains("the other 3 (23 bytes as JSON)"), "{cut}");
        assert!(cut.contains("bound of 8 bytes"), "{cut}");
        assert_eq!(text(&done, 2), r#"{"rows":4}"#);
        assert_eq!(done.content.len(), 3);
        assert_eq!(
            done.meta.as_ref().unwrap()[meta::STREAM],
            json!({"data_chunks": 4, "collected_chunks": 1, "omitted_chunks": 3, "omitted_bytes": 23})
        );

        // Nothing streamed, nothing left out: the result alone.
        let quiet = project_streamed(
            &tool,
            ActionResult::completed(id.clone(), json!({"rows": 0})),
            KeyOrigin::Sent,
            Collected::default(),
        );
        assert_eq!(quiet.content.len(), 1);

        let mut replay = ActionResult::completed(id.clone(), json!({"rows": 4}));
        replay.mark_idempotent_replay();
        let replayed = project_streamed(&tool, replay, KeyOrigin::Sent, Collected::default());
        assert_eq!(text(&replayed, 0), STREAM_REPLAY_NOTE);
        assert_eq!(replayed.structured_content, Some(json!({"rows": 4})));
        assert!(text(&replayed, 2).starts_with("Replayed:"));
        assert_eq!(
            replayed.meta.as_ref().unwrap()[meta::STREAM]["data_chunks"],
            0
        );

        // A replayed approval request never ran: no note about streamed data.
        let mut pending = ActionResult::new(id, ActionResultStatus::PendingApproval);
        pending.output = Some(json!({"approval_id": "appr_1", "idempotent_replay": true}));
        let pending = project_streamed(&tool, pending, KeyOrigin::Sent, Collected::default());
        assert!(text(&pending, 0).starts_with("Not executed"), "{pending:?}");
    }

    /// Found by an author trial: who may approve was only in `_meta`, which desktop hosts do not
    /// show a model, so it could not tell its user whom to ask.
    #[test]
    fn a_pending_approval_says_who_may_approve_in_its_text() {
        let said = |policy: Option<Value>, status: ActionResultStatus| {
            let mut tool = projected();
            tool.approval_policy = policy;
            let mut pending = ActionResult::new(ActionId::new(), status);
            pending.output = Some(json!({"approval_id": "appr_1"}));
            text(&project_result(&tool, pending, KeyOrigin::Sent), 0).to_owned()
        };
        let pending = ActionResultStatus::PendingApproval;
        let role = said(
            Some(json!({
                "required": true,
                "reason": "deletes\na `branch`\u{202e}\u{1b}",
                "approver_selector": {"type": "role", "name": "maintainer"},
                "minimum_distinct_principals": 2,
                "separation_of_duties": {"operator_must_differ": true}
            })),
            pending,
        );
        assert!(
            role.contains(
                "Who may approve: a person with the role `maintainer`, 2 different people, not \
                 the one who asked, nor the operator of the service that called (why approval is \
                 needed: deletes a 'branch')."
            ),
            "{role}"
        );
        // Self-approval allowed, and the stricter flag winning over it, as the host decides.
        let own = |separation: Value| {
            said(
                Some(
                    json!({"required": true, "approver_selector": {"type": "tenant_policy"}, "separation_of_duties": separation}),
                ),
                pending,
            )
        };
        let allowed = own(json!({"allow_self_approval": true}));
        assert!(!allowed.contains("not the one who asked"), "{allowed}");
        let strict = own(json!({"allow_self_approval": true, "requester_must_differ": true}));
        assert!(strict.contains("not the one who asked"), "{strict}");
        // A rule names its leaves, and whether one person may count for several.
        let rule = |distinct: bool| {
            said(
                Some(json!({
                    "required": true,
                    "approver_selector": {"type": "tenant_policy"},
                    "rule": {"operator": "quorum", "required": 2, "distinct_principals": distinct, "rules": [
                        {"operator": "role", "name": "finance"},
                        {"operator": "group", "name": "treasury"},
                        {"operator": "principal", "id": "user:cfo"}
                    ]}
                })),
                pending,
            )
        };
        let distinct = rule(true);
        assert!(
            distinct.contains(
                "Who may approve: 2 of (a person with the role `finance`; a member of the group \
                 `treasury`; `user:cfo`), by different people"
            ),
            "{distinct}"
        );
        let shared = rule(false);
        assert!(
            shared.contains("one person may count for several"),
            "{shared}"
        );
        // Gated without a declared policy (a high risk): the policy the host gates with, in
        // the text and in `_meta` (found by a review: it was in the text only).
        let mut gated = ActionResult::new(ActionId::new(), pending);
        gated.output = Some(json!({"approval_id": "appr_1"}));
        let gated = project_result(&projected(), gated, KeyOrigin::Sent);
        let sent = gated.meta.as_ref().expect("meta");
        assert_eq!(
            sent.get(meta::APPROVAL)
                .and_then(|approval| approval.get("policy")),
            Some(&serde_json::to_value(crate::host::default_approval_policy()).unwrap()),
            "{sent:?}"
        );
        let default = said(None, pending);
        assert!(
            default.contains(
                "Who may approve: whoever the tenant's approval policy names, not the one who asked"
            ),
            "{default}"
        );
        // A hand-over to a human is not an approval: no approvers named.
        let human = said(None, ActionResultStatus::RequiresHuman);
        assert!(!human.contains("Who may approve"), "{human}");
        let mut handed_over = ActionResult::new(ActionId::new(), ActionResultStatus::RequiresHuman);
        handed_over.output = Some(json!({"approval_id": "appr_1"}));
        let handed_over = project_result(&projected(), handed_over, KeyOrigin::Sent);
        let sent = handed_over.meta.as_ref().expect("meta");
        assert_eq!(sent[meta::APPROVAL].get("policy"), None, "{sent:?}");
    }

    /// A call runs synchronously whenever the contract allows it, streamed when the contract
    /// only streams, and not at all when it only completes asynchronously.
    #[test]
    fn calls_run_synchronously_when_they_can_and_streamed_when_they_only_stream() {
        let with_modes = |sync: bool, asynchronous: bool, streaming: bool| {
            let mut capability = capability(&[SideEffect::Read], RetrySafety::Safe);
            let execution = &mut capability.contract.as_mut().unwrap().execution;
            execution.supports_sync = sync;
            execution.supports_async = asynchronous;
            execution.supports_streaming = streaming;
            capability
        };
        assert_eq!(
            call_mode(&with_modes(true, false, false)),
            Some(CallMode::Sync)
        );
        assert_eq!(
            call_mode(&with_modes(true, false, true)),
            Some(CallMode::Sync)
        );
        assert_eq!(
            call_mode(&with_modes(true, true, true)),
            Some(CallMode::Sync)
        );
        assert_eq!(
            call_mode(&with_modes(false, false, true)),
            Some(CallMode::Streamed)
        );
        assert_eq!(
            call_mode(&with_modes(false, true, true)),
            Some(CallMode::Streamed)
        );
        assert_eq!(call_mode(&with_modes(false, true, false)), None);
        let mut bare = with_modes(false, false, false);
        bare.contract = None;
        assert_eq!(call_mode(&bare), Some(CallMode::Sync));

        // The tool says it streams; a synchronous one says nothing of it.
        let streamed = tool_meta(&with_modes(false, false, true));
        assert_eq!(streamed.get(meta::STREAMING), Some(&json!(true)));
        assert_eq!(
            tool_meta(&with_modes(true, false, true)).get(meta::STREAMING),
            None
        );
    }

    #[test]
    fn input_schemas_are_client_compatible() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"note": {"type": ["string", "null"]}},
        });
        let rendered = input_schema(&schema);
        assert_eq!(rendered["properties"]["note"]["type"], "string");
        assert!(rendered.get("$schema").is_none());
    }

    #[test]
    fn a_doc_comment_reads_as_paragraphs_without_its_wraps() {
        let doc = "Lists the places near a point, nearest first; pass `next_cursor` back as\n\
                   `cursor` for the next page.\n\
                   \n\
                   # Limits\n\
                   At most 50 places\n\
                   per page.\n\
                   - `radius_m` up to\n  \
                   5 km;\n\
                   - `kinds` any of:\n\
                   \n\
                   ```json\n\
                   {\"kinds\": [\"cafe\",\n\"park\"]}\n\
                   ```\n\
                   1. first\n\
                   2. second\n\
                   | a | b |\n\
                   | 1 | 2 |";
        assert_eq!(
            unwrapped(doc),
            "Lists the places near a point, nearest first; pass `next_cursor` back as `cursor` \
             for the next page.\n\n# Limits\nAt most 50 places per page.\n- `radius_m` up to \
             5 km;\n- `kinds` any of:\n\n```json\n{\"kinds\": [\"cafe\",\n\"park\"]}\n```\n\
             1. first\n2. second\n| a | b |\n| 1 | 2 |"
        );
        assert_eq!(unwrapped("One line."), "One line.");
    }
}
