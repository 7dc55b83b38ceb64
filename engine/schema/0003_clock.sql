-- Interlock ledger, schema version 3: the ledger's clock (ADR 0007).
--
-- Ledger time is the wall time at the host's boot, as the first process of that boot read it,
-- plus the host's boot clock (CLOCK_BOOTTIME), which no step of the wall clock moves. Every
-- process of one boot reads the same anchor here, so windows, leases and the reconcile lag
-- measure real time even when the wall clock jumps a day, and agree between processes. One row
-- per boot of the host; a new boot's anchor is never earlier than the ledger's newest record.

CREATE TABLE clock_anchors (
    boot_id TEXT PRIMARY KEY CHECK (length(boot_id) BETWEEN 1 AND 64),
    wall_at_boot_ms INTEGER NOT NULL CHECK (wall_at_boot_ms >= 0),
    -- The wall clock's own reading of the boot when the anchor was recorded (differs from
    -- wall_at_boot_ms only when the anchor was raised to keep ledger time from going back).
    wall_said_ms INTEGER NOT NULL CHECK (wall_said_ms >= 0)
) STRICT, WITHOUT ROWID;
