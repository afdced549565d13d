//! Time sources. Records hold wall-clock times (lease in milliseconds, expiration in seconds),
//! and the store compares them with the `now` its caller passes, so tests can move time.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The system's wall clock: the default, and the one to use in production.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        system_now_ms()
    }
}

/// Wall-clock time that advances with tokio's clock: starts at the system time when created,
/// then moves by `tokio::time::Instant`, so `tokio::time::pause()` and `advance()` control it.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock anchored at the current system time. Call inside a tokio runtime.
    pub fn new() -> Self {
        TokioClock { epoch_ms: system_now_ms(), start: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.epoch_ms + self.start.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told: for tests against a real store over the network, where
/// pausing tokio's clock would also fire the SDK's own timeouts.
#[derive(Debug)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock standing at the current system time.
    pub fn new() -> Self {
        Self::at(system_now_ms())
    }

    /// A clock standing at `ms` milliseconds since the Unix epoch.
    pub fn at(ms: u64) -> Self {
        ManualClock { ms: AtomicU64::new(ms) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.ms.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}
