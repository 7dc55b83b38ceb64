//! Time, passed in. No gate, executor or reconciler reads the system clock: they ask the
//! [`Clock`] they were given, so tests, the property runs and the chaos runner decide what
//! time it is, and a waiting loop in a test costs no real time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time and a way to wait.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Waits `ms` milliseconds (a manual clock advances itself instead). A future, so that a
    /// runtime's clock (the proxy's) waits without holding a thread.
    fn sleep_ms(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The machine's clock, for blocking callers: its sleep holds the calling thread. Used only by
/// binaries (an async binary supplies a clock whose sleep is its runtime's); libraries take a
/// `&dyn Clock`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 is a broken machine; 0 then makes every mandate "not yet valid".
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            })
    }

    fn sleep_ms(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        std::thread::sleep(Duration::from_millis(ms));
        Box::pin(std::future::ready(()))
    }
}

/// A clock that moves only when told to, or when someone sleeps on it.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock {
            now_ms: AtomicU64::new(now_ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn sleep_ms(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.advance(ms);
        Box::pin(std::future::ready(()))
    }
}
