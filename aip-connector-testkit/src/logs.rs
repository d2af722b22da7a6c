//! Capturing the `tracing` log lines of one test, reliably, while other tests run in parallel.
//!
//! [`LogCapture`] formats every event, down to `trace`, into a buffer the test reads back. Attach
//! it to a future ([`LogCapture::capture`]) or make it the current thread's default
//! ([`LogCapture::set_default`]).
//!
//! ```
//! use aip_connector_testkit::logs::LogCapture;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let logs = LogCapture::new();
//! logs.capture(async { tracing::info!(action_id = "act_1", "action settled") }).await;
//! assert!(logs.contains("act_1"), "{}", logs.text());
//! # });
//! ```
//!
//! It sees what the test's own thread emits: run the test on the current-thread runtime with
//! the host in process. Lines written on other threads (a multi-thread runtime's workers, a
//! served host's request tasks) are not captured, so pair every absence check with a presence
//! check of the same call.
//!
//! # Why not a plain scoped subscriber
//!
//! `tracing` caches, per callsite and for the whole process, whether any subscriber is
//! interested in it. While exactly one dispatcher is registered, that answer is computed from
//! the default subscriber of whichever thread reaches the callsite first (tracing-core 0.1.36,
//! tokio-rs/tracing#3611): a parallel test whose thread has no subscriber can cache "never" for a
//! callsite between the moment this test installs its subscriber and the moment its own call
//! reaches that callsite, and the line is then dropped before any subscriber sees it. The test
//! fails, or, worse, an assertion that a value is *absent* from the logs passes without looking.
//!
//! A capture therefore keeps a second, process-wide dispatcher registered (the *anchor*). With
//! two dispatchers registered, tracing computes interest from all of them; the anchor answers
//! "sometimes" for every callsite, so no callsite is ever cached as "never" (or "always"), and
//! each event asks the subscriber of the thread that emits it. The anchor enables nothing and
//! records nothing (being nobody's default, it is never asked). Its cost, for the rest of the
//! test process: every event calls its thread's default subscriber's `enabled` instead of
//! using a cached answer, and the process-wide maximum level stays at `trace`.

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::dispatcher::DefaultGuard;
use tracing::instrument::WithSubscriber;
use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata};

/// The log lines written while a capture was attached; see the [module docs](self).
#[derive(Clone)]
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
    dispatch: Dispatch,
}

impl LogCapture {
    /// A capture whose subscriber formats every event and its spans' fields, down to `trace`,
    /// without ANSI colours.
    pub fn new() -> Self {
        anchor();
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(Arc::clone(&buffer));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        Self {
            buffer,
            dispatch: Dispatch::new(subscriber),
        }
    }

    /// Runs `future` with this capture as the default subscriber whenever it is polled, on
    /// whichever thread polls it. A task the future spawns with a plain `tokio::spawn` is not
    /// captured; the SDK's own tasks (a streamed action's pipeline, a served action, a webhook
    /// handler) carry the subscriber current where they were spawned, so they are.
    pub fn capture<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        future.with_subscriber(self.dispatch.clone())
    }

    /// Makes this capture the current thread's default subscriber until the guard drops (for
    /// a current-thread runtime, every task it runs).
    #[must_use = "the capture stops when the guard drops"]
    pub fn set_default(&self) -> DefaultGuard {
        tracing::dispatcher::set_default(&self.dispatch)
    }

    /// Forgets what was captured so far (the conformance suite's capture of its runtime,
    /// which would otherwise hold every line of every scenario until the run ends).
    pub(crate) fn clear(&self) {
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// The captured lines, in the order they were written.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// Whether any captured line contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }
}

impl Default for LogCapture {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LogCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The lines may quote anything a test logged; their size is enough here.
        let bytes = self.buffer.lock().unwrap_or_else(|p| p.into_inner()).len();
        f.debug_struct("LogCapture")
            .field("captured_bytes", &bytes)
            .finish_non_exhaustive()
    }
}

/// Registers the process-wide anchor dispatcher once; it lives until the process exits.
fn anchor() {
    static ANCHOR: OnceLock<Dispatch> = OnceLock::new();
    ANCHOR.get_or_init(|| Dispatch::new(Anchor));
}

/// A subscriber that is interested in every callsite "sometimes" and enables nothing.
struct Anchor;

impl tracing::Subscriber for Anchor {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        // Never called: `enabled` is false. Ids must be non-zero.
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Where a capture's subscriber writes.
#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race this module exists for, made deterministic: a callsite first reached on a
    /// thread without a subscriber, after the capture was installed, still reaches the capture.
    #[test]
    fn a_callsite_first_reached_on_another_thread_is_still_captured() {
        let logs = LogCapture::new();
        fn emit() {
            tracing::warn!(marker = "first-reached-elsewhere", "late callsite");
        }
        // Registers the callsite from a thread whose default is no subscriber.
        std::thread::spawn(emit).join().unwrap();
        let _guard = logs.set_default();
        emit();
        assert_eq!(
            logs.lines()
                .iter()
                .filter(|l| l.contains("first-reached-elsewhere"))
                .count(),
            1,
            "{}",
            logs.text()
        );
    }

    #[test]
    fn lines_of_other_threads_are_not_captured() {
        let logs = LogCapture::new();
        let _guard = logs.set_default();
        std::thread::spawn(|| tracing::error!("elsewhere-7a1"))
            .join()
            .unwrap();
        tracing::error!("here-7a1");
        assert!(logs.contains("here-7a1"));
        assert!(!logs.contains("elsewhere-7a1"), "{}", logs.text());
    }

    #[test]
    fn debug_shows_the_size_not_the_lines() {
        let logs = LogCapture::new();
        let _guard = logs.set_default();
        tracing::info!("secret-looking-line");
        let debug = format!("{logs:?}");
        assert!(debug.contains("captured_bytes"));
        assert!(!debug.contains("secret-looking-line"));
    }
}
