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
    /// The wall clock, for a mandate's validity only (ADR 0007); the same as [`Clock::now_ms`]
    /// unless the clock keeps another time.
    fn wall_ms(&self) -> u64 {
        self.now_ms()
    }
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

/// The most characters of a boot id read from the host (a UUID has 36).
pub const BOOT_ID_CHARS_MAX: usize = 64;

/// The ledger's time (ADR 0007): the wall time of the host's boot, recorded once per boot in
/// the ledger, plus the host's boot clock. A step of the wall clock (NTP, an operator, a VM
/// restored from a snapshot) does not move it; every process of one boot reads the same
/// anchor, so they agree; across a reboot it never goes back past the ledger's newest record.
/// Windows, leases, the reconcile lag and every recorded time use it. A mandate's validity is
/// also checked against the wall clock, by the proxy, before the engine sees the call.
#[derive(Debug, Clone, Copy)]
pub struct LedgerTime {
    anchor: crate::ledger::clock::ClockAnchor,
}

impl LedgerTime {
    /// Reads (or, first on this boot, records) the anchor in `ledger`; `wall_now_ms` is the
    /// wall clock now.
    pub fn open(ledger: &crate::Ledger, wall_now_ms: u64) -> Result<LedgerTime, String> {
        let boot_id = boot_id()?;
        let elapsed = boot_elapsed_ms();
        let anchor = ledger
            .clock_anchor(&boot_id, wall_now_ms.saturating_sub(elapsed), elapsed)
            .map_err(|e| format!("cannot read the ledger's clock anchor: {e}"))?;
        Ok(LedgerTime { anchor })
    }

    /// Milliseconds since the Unix epoch, in ledger time.
    pub fn now_ms(&self) -> u64 {
        self.anchor
            .wall_at_boot_ms
            .saturating_add(boot_elapsed_ms())
    }

    /// The anchor this time runs from.
    pub fn anchor(&self) -> crate::ledger::clock::ClockAnchor {
        self.anchor
    }
}

/// This boot of the host, as the kernel names it.
pub fn boot_id() -> Result<String, String> {
    const PATH: &str = "/proc/sys/kernel/random/boot_id";
    let text = std::fs::read_to_string(PATH)
        .map_err(|e| format!("cannot read the host's boot id ({PATH}): {e}"))?;
    let id = text.trim();
    if id.is_empty() || id.len() > BOOT_ID_CHARS_MAX {
        return Err(format!("{PATH} holds no boot id: {id:?}"));
    }
    Ok(id.to_owned())
}

/// Milliseconds since the host booted, suspend included (`CLOCK_BOOTTIME`): a clock no one
/// sets, shared by every process of the boot.
pub fn boot_elapsed_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    seconds
        .saturating_mul(1_000)
        .saturating_add(nanos / 1_000_000)
}
