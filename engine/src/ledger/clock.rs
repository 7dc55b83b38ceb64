//! The ledger's side of its clock (ADR 0007): one wall-time anchor per boot of the host.

use super::sql::{Optional, params};
use super::{ApplyError, Ledger};

/// The anchor of ledger time on one boot of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockAnchor {
    /// Ledger time = this + the boot clock.
    pub wall_at_boot_ms: u64,
    /// What the wall clock said of the boot when the anchor was recorded. Above
    /// `wall_at_boot_ms` never; below it when the anchor was raised so that ledger time does
    /// not go back past the ledger's newest record (a clock set back across a reboot).
    pub wall_said_ms: u64,
    /// This call recorded it (the first process of the boot).
    pub recorded: bool,
}

impl Ledger {
    /// The anchor of `boot_id`: the one already recorded, whatever `wall_at_boot_ms` says now;
    /// else `wall_at_boot_ms` (what the wall clock says of the boot), raised if needed so that
    /// ledger time at `boot_elapsed_ms` is not before the ledger's newest record. One
    /// transaction: processes starting at once agree on one anchor.
    pub fn clock_anchor(
        &self,
        boot_id: &str,
        wall_at_boot_ms: u64,
        boot_elapsed_ms: u64,
    ) -> Result<ClockAnchor, ApplyError> {
        let wall_said = i64::try_from(wall_at_boot_ms).unwrap_or(i64::MAX);
        self.write(|tx| {
            let known: Option<(i64, i64)> = tx
                .row(
                    "SELECT wall_at_boot_ms, wall_said_ms FROM clock_anchors WHERE boot_id = ?1",
                    params![boot_id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            if let Some((anchor, said)) = known {
                return Ok(ClockAnchor {
                    wall_at_boot_ms: anchor.max(0) as u64,
                    wall_said_ms: said.max(0) as u64,
                    recorded: false,
                });
            }
            let newest: i64 = tx
                .row(
                    "SELECT coalesce(max(updated_at), 0) FROM intents",
                    params![],
                    |row| row.get(0),
                )
                .map_err(|e| self.err(e))?;
            let elapsed = i64::try_from(boot_elapsed_ms).unwrap_or(i64::MAX);
            let anchor = wall_said.max(newest.saturating_sub(elapsed));
            tx.exec(
                "INSERT INTO clock_anchors (boot_id, wall_at_boot_ms, wall_said_ms) VALUES (?1, ?2, ?3)",
                params![boot_id, anchor, wall_said],
            )
            .map_err(|e| self.err(e))?;
            Ok(ClockAnchor {
                wall_at_boot_ms: anchor.max(0) as u64,
                wall_said_ms: wall_said.max(0) as u64,
                recorded: true,
            })
        })
    }
}
