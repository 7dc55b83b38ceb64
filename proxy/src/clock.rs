//! The proxy's clock: ledger time (ADR 0007), which no step of the wall clock moves, and waits
//! on the runtime's timer, so that boot recovery's waits hold no thread.

use interlock_engine::{Clock, Ledger, LedgerTime, SystemClock};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How far the wall clock may be from ledger time before the proxy says so at start.
pub const WALL_DRIFT_WARN_MS: u64 = 60_000;

/// Ledger time, sleeps on the tokio runtime the proxy runs on.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeClock {
    time: LedgerTime,
}

impl RuntimeClock {
    /// The clock of `ledger` on this boot of the host; warns when the wall clock disagrees.
    pub fn of(ledger: &Ledger) -> Result<RuntimeClock, String> {
        let wall = SystemClock.now_ms();
        let time = LedgerTime::open(ledger, wall)?;
        let anchor = time.anchor();
        let ledger_now = time.now_ms();
        if anchor.wall_said_ms < anchor.wall_at_boot_ms {
            tracing::warn!(
                wall_ms = wall,
                ledger_ms = ledger_now,
                "the wall clock is behind the ledger's newest record; ledger time goes on from that record, not back"
            );
        } else if wall.abs_diff(ledger_now) > WALL_DRIFT_WARN_MS {
            tracing::warn!(
                wall_ms = wall,
                ledger_ms = ledger_now,
                "the wall clock moved {} s since this boot's first Interlock started; windows, leases and records keep ledger time; a mandate's validity follows the wall clock",
                wall.abs_diff(ledger_now) / 1_000
            );
        }
        Ok(RuntimeClock { time })
    }
}

impl Clock for RuntimeClock {
    fn now_ms(&self) -> u64 {
        self.time.now_ms()
    }

    fn wall_ms(&self) -> u64 {
        SystemClock.now_ms()
    }

    fn sleep_ms(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}
