//! How the driver runs: its lease owner name and the durations it sizes leases and reconcile
//! passes with. Every duration is in milliseconds of the clock the runner passes in.

/// Margin between the end of the longest rail call and the lease's expiry: a lease is never
/// taken back from a holder whose call could still be running.
pub const LEASE_MARGIN_MS: u64 = 5_000;
/// Longest lease the driver accepts (one hour).
pub const LEASE_TTL_MS_MAX: u64 = 3_600_000;
/// Longest rail call timeout the driver accepts (ten minutes).
pub const CALL_TIMEOUT_MS_MAX: u64 = 600_000;
/// Longest rail lag bound the driver accepts (ten minutes).
pub const RAIL_LAG_MS_MAX: u64 = 600_000;
/// Longest lease-owner name (it is stored in every leased row).
pub const INSTANCE_ID_LENGTH_MAX: usize = 64;

const _: () = assert!(LEASE_TTL_MS_MAX > CALL_TIMEOUT_MS_MAX + LEASE_MARGIN_MS);

/// How the driver runs. No `Default`: the caller names the instance and knows its rail.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DriverConfig {
    /// This process's lease-owner name; unique per process start (the proxy derives it from
    /// its pid and a random nonce, tests name it).
    pub instance_id: String,
    /// How long a lease on an intent lasts.
    pub lease_ttl_ms: u64,
    /// The longest a rail call can take before the rail reports it ambiguous.
    pub call_timeout_ms: u64,
    /// How long the rail may take to show a new entity in its lists (at least the machine's
    /// `RECONCILE_MIN_DELAY_MS`).
    pub rail_lag_ms: u64,
}

impl DriverConfig {
    /// Defaults for a real rail: 10 s calls, 30 s leases.
    pub fn new(instance_id: impl Into<String>) -> DriverConfig {
        DriverConfig {
            instance_id: instance_id.into(),
            lease_ttl_ms: 30_000,
            call_timeout_ms: 10_000,
            rail_lag_ms: interlock_machine::RECONCILE_MIN_DELAY_MS,
        }
    }

    /// Refuses a configuration under which the lease could lapse while a call is still out,
    /// or a bound is past its named maximum.
    pub fn check(&self) -> Result<(), String> {
        if self.instance_id.is_empty() || self.instance_id.len() > INSTANCE_ID_LENGTH_MAX {
            return Err(format!(
                "instance_id must be 1..={INSTANCE_ID_LENGTH_MAX} characters"
            ));
        }
        if self.lease_ttl_ms < self.call_timeout_ms.saturating_add(LEASE_MARGIN_MS) {
            return Err(format!(
                "lease_ttl_ms {} must be at least call_timeout_ms {} + {LEASE_MARGIN_MS}",
                self.lease_ttl_ms, self.call_timeout_ms
            ));
        }
        for (name, value, max) in [
            ("lease_ttl_ms", self.lease_ttl_ms, LEASE_TTL_MS_MAX),
            ("call_timeout_ms", self.call_timeout_ms, CALL_TIMEOUT_MS_MAX),
            ("rail_lag_ms", self.rail_lag_ms, RAIL_LAG_MS_MAX),
        ] {
            if value > max {
                return Err(format!("{name} {value} is above its bound {max}"));
            }
        }
        if self.rail_lag_ms < interlock_machine::RECONCILE_MIN_DELAY_MS {
            return Err(format!(
                "rail_lag_ms {} is below the minimum {}",
                self.rail_lag_ms,
                interlock_machine::RECONCILE_MIN_DELAY_MS
            ));
        }
        Ok(())
    }

    /// Whether a lease running until `expires_at` still covers a call sent at `now` (ADR 0003,
    /// A2): the call's whole timeout plus half the margin must fit before it lapses.
    pub fn lease_covers_call(&self, now: u64, expires_at: u64) -> bool {
        expires_at >= now.saturating_add(self.call_needs_ms())
    }

    /// The last clock reading at which a call may still leave under a lease running until
    /// `expires_at`: the same rule as [`DriverConfig::lease_covers_call`], handed to the runner
    /// so that it checks again at the moment the request is written, after whatever it waited
    /// on since the driver's re-check (a session lock, an upstream restart, a stalled process).
    pub fn send_by(&self, expires_at: u64) -> u64 {
        expires_at.saturating_sub(self.call_needs_ms())
    }

    /// What a call needs of its lease: its whole timeout plus half the margin.
    fn call_needs_ms(&self) -> u64 {
        self.call_timeout_ms + LEASE_MARGIN_MS / 2
    }
}
