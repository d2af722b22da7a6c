//! Serving the search connector: one host behind the native AIP HTTP binding and the MCP
//! projection, sharing one authenticator (`examples/serve.rs` runs it).

use std::sync::Arc;

use aip_connector::VerifiedTenant;
use aip_connector::host::{Host, TrustedContext};
use aip_connector::model::{Principal, PrincipalKind};
use aip_connector::serve::CancellationToken;
use aip_connector::serve::mcp::McpProjection;
use aip_connector::serve::mcp::StreamableHttpServerConfig;
use aip_connector::serve::{AipServer, Authenticator, BearerTokens, ServerConfig};
use aip_connector::store::MemoryStore;

use crate::search::Search;

/// Why serving stopped.
pub type ServeError = Box<dyn std::error::Error + Send + Sync>;

/// The host: the sample search index on an in-memory store (search only reads).
pub fn host() -> Result<Host, ServeError> {
    Ok(Host::builder()
        .connector(Search::sample())
        .store(Arc::new(MemoryStore::new()))
        .build()?)
}

/// The agent a bearer token stands for, in the tenant it acts for (a keyed write's
/// tenant-scoped idempotency key needs one; without it every such call fails
/// `idempotency.scope_missing`).
pub fn agent() -> TrustedContext {
    TrustedContext::new(
        Principal::new("agent:example", PrincipalKind::Agent),
        "static-bearer",
    )
    .with_tenant(VerifiedTenant::new("example"))
}

/// The served application: the AIP server, the MCP routes, and the token that ends the MCP
/// sessions (their event streams stay open until it fires, so shutdown must fire it).
pub struct App {
    /// The native AIP HTTP binding.
    pub server: AipServer,
    /// The MCP projection's routes (`/mcp`).
    pub mcp: aip_connector::serve::axum::Router,
    /// Cancelling it closes every MCP session.
    pub mcp_sessions: CancellationToken,
}

/// The AIP server and the MCP routes for `host`, both accepting `token`.
pub fn app(host: Host, token: &str) -> Result<App, ServeError> {
    let authenticator: Arc<dyn Authenticator> = Arc::new(BearerTokens::new().with(token, agent()));
    let mcp_sessions = CancellationToken::new();
    let mcp = McpProjection::new(host.clone())?.router_with_config(
        Arc::clone(&authenticator),
        StreamableHttpServerConfig::default().with_cancellation_token(mcp_sessions.clone()),
    );
    let server = AipServer::with_shared_authenticator(host, authenticator, ServerConfig::default());
    Ok(App {
        server,
        mcp,
        mcp_sessions,
    })
}

/// Serves `app` on `listener` until `shutdown`, then drains both protocols.
pub async fn serve(
    app: App,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let App {
        server,
        mcp,
        mcp_sessions,
    } = app;
    server
        .serve_with_routes(listener, mcp, async move {
            shutdown.await;
            mcp_sessions.cancel();
        })
        .await
}

/// Serves on `AIP_SERVE_ADDR` (default `127.0.0.1:8080`) with the bearer token
/// `AIP_SERVE_TOKEN`, until Ctrl-C.
pub async fn serve_http_from_env() -> Result<(), ServeError> {
    let address = std::env::var("AIP_SERVE_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let token = std::env::var("AIP_SERVE_TOKEN")
        .map_err(|_| "set AIP_SERVE_TOKEN to the bearer token callers must send")?;
    let app = app(host()?, &token)?;
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("serving AIP on http://{address}/aip/v1/messages and MCP on http://{address}/mcp");
    serve(app, listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// Serves MCP on stdin/stdout as the local user.
pub async fn serve_stdio() -> Result<(), ServeError> {
    let local = TrustedContext::new(Principal::new("user:local", PrincipalKind::Human), "stdio");
    McpProjection::new(host()?)?.serve_stdio(local).await?;
    Ok(())
}
