//! Tasks the SDK spawns for a caller.

use std::future::Future;

use tracing::instrument::{Instrument as _, WithSubscriber as _};

/// Spawns `future` as part of the spawner's trace: it runs in the span current where it is
/// spawned and writes to the `tracing` subscriber current there. A plain `tokio::spawn` loses
/// both, so the log lines of a streamed action, a served action or a webhook handler would
/// leave the request's span, and a subscriber scoped to a test or a request (the testkit's
/// `LogCapture`) would never see them.
pub(crate) fn spawn_traced<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.in_current_span().with_current_subscriber())
}
