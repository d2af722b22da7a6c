//! Serving a [`Host`](crate::host::Host) to the agents and gateways that call it.
//!
//! - [`server`]: the native AIP HTTP binding (`GET /aip/v1/manifest`, `POST /aip/v1/messages`,
//!   `GET /health`, `GET /ready`) on axum, with body, time and concurrency limits and graceful
//!   shutdown.
//! - [`client`]: a typed reqwest client for that binding.
//! - [`auth`]: how a request becomes a trusted caller. Payload identity is never trusted.
//! - [`WebhookReceiver::router`](crate::webhook::WebhookReceiver::router): a provider's
//!   webhook deliveries, verified and deduplicated, at a path of your choice.
//! - `mcp` (feature `mcp`): the admitted manifest projected as MCP tools, served over
//!   streamable HTTP and stdio with rmcp.
//!
//! Enable with the `http` feature (and `mcp` for the projection). `docs/serving.md` is the guide.

pub mod auth;
pub mod client;
mod listen;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod server;
mod unique_keys;
mod webhook;

pub use auth::{Authenticator, BearerTokens};

// What an `Authenticator` and a shutdown hook are written against, so a deployment does not
// have to pin versions of its own that match ours.
pub use crate::invocation::BoxFuture;
/// The axum the routes are built on: [`AipServer::router`], `WebhookReceiver::router` and the
/// MCP projection's routers are `axum::Router`s, so a deployment that merges or stores them
/// names `aip_connector::serve::axum::Router` instead of pinning an axum of its own.
pub use axum;
/// The `http` crate the serving layer speaks (`http::request::Parts` for an [`Authenticator`]).
pub use http;
/// The token that stops the MCP routes' sessions on shutdown
/// (`StreamableHttpServerConfig::with_cancellation_token`).
pub use tokio_util::sync::CancellationToken;

/// An error raised by the serving layer itself: code, message, category and retryability.
pub(crate) use crate::host::failure::classified as error;
pub use client::{AipClient, CancelReply, ChunkReceiver, ClientError};
pub use listen::ConnectionLimits;
pub use server::{AipServer, ServerConfig};

/// How often [`abandon_once_running`] tries again while the action is not executing yet.
const ABANDON_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// Abandons `action_id` ([`Host::abandon_as`](crate::host::Host::abandon_as)) once it executes,
/// then waits for `running`, the future that runs it, and returns its output.
///
/// `abandon_as` reaches only an action whose handler is registered for cancellation, which
/// happens when its first poll leaves it waiting: an action still in the pipeline's earlier
/// stages, or in that first poll, is not found. Rather than remember the abandonment (a
/// remembered one would outlive an action that never reaches its handler and hit the client's
/// retry of the same action id), this tries again every few milliseconds until it lands or
/// `running` ends on its own.
pub(crate) async fn abandon_once_running<F: std::future::Future + Unpin>(
    host: &crate::host::Host,
    action_id: &aip_connector_core::ids::ActionId,
    caller: &crate::host::TrustedContext,
    running: &mut F,
) -> F::Output {
    loop {
        if host.abandon_as(action_id, caller) == crate::host::CancelOutcome::Cancelled {
            return running.await;
        }
        tokio::select! {
            output = &mut *running => return output,
            () = tokio::time::sleep(ABANDON_RETRY) => {}
        }
    }
}
