//! The accept loop under [`AipServer::serve`](super::AipServer::serve) and the MCP projection's
//! `serve_http`: HTTP/1.1 connections with a deadline on every request's headers and a cap on
//! open connections.
//!
//! Written out rather than `axum::serve` because axum gives hyper no timer, and without one hyper
//! never enforces `header_read_timeout`: a client that sends half a request line and stops held
//! its connection (and a file descriptor) until the process ran out of them, before any route,
//! authenticator or request limit saw it (found by a hostile review).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Limits on the connections a server accepts, enforced before a request reaches any route.
/// Every field has a production default.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's headers, from the moment the server waits
    /// for them (default 30 s). It bounds an idle keep-alive connection too: one that sends no
    /// next request within it is closed. A client that overruns it is disconnected without an
    /// answer.
    pub header_read_timeout: Duration,
    /// Connections open at once (default 1,024). At the cap the server stops accepting until one
    /// closes; further clients wait in the operating system's listen backlog.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 1_024,
        }
    }
}

impl ConnectionLimits {
    /// Sets [`header_read_timeout`](Self::header_read_timeout) (at least 1 ms).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }
}

/// How long accepting pauses after an error that is not one connection's (out of file
/// descriptors, say), so the loop does not spin on it.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes; then accepts nothing more, asks
/// every open connection to close once its request in flight is answered, and returns when
/// they have. Dropping the returned future drops every connection still open.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    // Owns the connections: dropped (by the caller's hard stop) it aborts them.
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&open).acquire_owned() => slot,
            () = &mut shutdown => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // Reap what has finished, so the set holds only open connections.
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; pausing before the next");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Answers are small and often written in several pieces (server-sent events): without
        // this, Nagle's algorithm can hold one back until the client's delayed ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    // Every watched connection has closed; what is left are tasks finishing their last step.
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Errors of one connection, which say nothing about the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
