//! The accept loop under [`AipServer::serve`](super::AipServer::serve) and the MCP projection's
//! `serve_http`: HTTP/1.1 connections (upgrades allowed) with a deadline on every request's
//! headers, a deadline on every write the client does not read, and a cap on open connections.
//!
//! Written out rather than `axum::serve` because axum gives hyper no timer, and without one hyper
//! never enforces `header_read_timeout`: a client that sends half a request line and stops held
//! its connection (and a file descriptor) until the process ran out of them, before any route,
//! authenticator or request limit saw it (found by a hostile review).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
    /// How long a write to the client may wait for it to read (default 30 s): a client whose
    /// receive window stays full that long (one that sends requests and reads no answer, or
    /// stops reading a stream) is disconnected. Without it such a client held its connection,
    /// and at the cap every other client's, for good (found by a hostile review).
    pub write_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 1_024,
            write_timeout: Duration::from_secs(30),
        }
    }
}

impl ConnectionLimits {
    /// Sets [`header_read_timeout`](Self::header_read_timeout) (at least 1 ms).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`write_timeout`](Self::write_timeout) (at least 1 ms).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout.max(Duration::from_millis(1));
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
    // Fired once the shutdown signal comes: each connection finishes the request it serves,
    // then closes.
    let closing = CancellationToken::new();
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
        // With upgrades, so that an application route merged in can switch protocols (a
        // WebSocket), as under `axum::serve`.
        let connection = builder
            .serve_connection(
                TokioIo::new(WriteDeadline::new(stream, limits.write_timeout)),
                TowerToHyperService::new(router.clone()),
            )
            .with_upgrades();
        let closing = closing.clone();
        connections.spawn(async move {
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    closing.cancel();
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// A connection's socket whose writes give up after `timeout` without progress: a pending
/// write (the client's receive window full) that stays pending that long fails with
/// `TimedOut`, which ends the connection.
struct WriteDeadline<T> {
    io: T,
    timeout: Duration,
    /// Running while a write is pending; reset by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn new(io: T, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            stalled: None,
        }
    }

    /// Turns a pending write into `TimedOut` once it has been pending for `timeout`.
    fn pending<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                ready!(stalled.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing within the write timeout",
                )))
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.pending(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.pending(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.pending(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
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
