//! The proxy's clock: the system's wall time, and waits on the runtime's timer, so that boot
//! recovery's waits hold no thread.

use interlock_engine::{Clock, SystemClock};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Wall time from the system, sleeps on the tokio runtime the proxy runs on.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuntimeClock;

impl Clock for RuntimeClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms()
    }

    fn sleep_ms(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}
