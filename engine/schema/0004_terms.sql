-- Interlock ledger, schema version 4: the rail's result checked against the intent.
--
-- A stamped entity whose amount, currency or subject is not what was authorised quarantines the
-- intent with the entity recorded (`machine::step`, RAIL_APPLIED / RECONCILE_FOUND_APPLIED with
-- `as_authorised: false`), so `rail_entity_id` may now be set in QUARANTINED too. `moved_minor`
-- keeps what such an entity moved; the windows count the larger of it and the authorised amount
-- (a rail's answer that it moved less frees no room before a human looks). SQLite cannot change a
-- CHECK in place: the table is rebuilt as in version 2 (create, copy, drop, rename, the indexes
-- and triggers again), in the migration's one transaction, and the runner checks every foreign
-- key again before it commits.

CREATE TABLE intents_v4 (
    merchant_id TEXT NOT NULL CHECK (length(merchant_id) BETWEEN 1 AND 64),
    sik TEXT NOT NULL CHECK (length(sik) = 32 AND sik NOT GLOB '*[^A-Z2-7]*'),
    tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
    kind TEXT NOT NULL CHECK (kind IN ('REFUND', 'SETTLEMENT', 'TRANSFER', 'SCHEDULED_TRANSFER',
        'SCHEDULED_UPDATE')),
    subject_id TEXT NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 64),
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0 AND amount_minor <= 9007199254740992),
    currency TEXT NOT NULL CHECK (length(currency) = 3 AND currency NOT GLOB '*[^A-Z]*'),
    reversibility TEXT NOT NULL CHECK (reversibility IN ('reversible', 'irreversible')),
    distinct_reason TEXT CHECK (distinct_reason IS NULL OR length(distinct_reason) BETWEEN 1 AND 500),
    -- The outbound call, stamped, exactly as every attempt sends it.
    call_json TEXT NOT NULL CHECK (json_valid(call_json)),
    state TEXT NOT NULL CHECK (state IN ('PROPOSED', 'HELD', 'BLOCKED', 'AUTHORIZED', 'IN_FLIGHT',
        'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN', 'RECONCILING', 'CONFIRMED_NOT_APPLIED',
        'QUARANTINED')),
    attempt_seq INTEGER NOT NULL CHECK (attempt_seq BETWEEN 0 AND 8),
    reconcile_inconclusive INTEGER NOT NULL CHECK (reconcile_inconclusive BETWEEN 0 AND 6),
    rail_entity_id TEXT CHECK (rail_entity_id IS NULL OR length(rail_entity_id) BETWEEN 1 AND 64),
    lease_owner TEXT,
    lease_expires_at INTEGER,
    reconcile_not_before INTEGER,
    reason_code TEXT NOT NULL,
    reason TEXT NOT NULL,
    mandate_hash TEXT NOT NULL CHECK (length(mandate_hash) = 64),
    -- The audit record of the row's latest change: a truncated audit log shows up here.
    audit_seq INTEGER NOT NULL CHECK (audit_seq >= 1),
    -- When the intent last entered the counted states or was (re)authorised: the instant G3's
    -- windows place it at. An intent reopened or approved a day later counts in that day.
    counted_at INTEGER,
    first_seen_at INTEGER NOT NULL CHECK (first_seen_at >= 0),
    updated_at INTEGER NOT NULL CHECK (updated_at >= first_seen_at),
    moved_minor INTEGER CHECK (moved_minor IS NULL OR (moved_minor > 0 AND moved_minor <= 9007199254740992)),
    PRIMARY KEY (merchant_id, sik),
    -- APPLIED names what the rail created; an entity is recorded only there and in QUARANTINED,
    -- where the rail moved money other than as authorised (version 4).
    CHECK (state <> 'APPLIED' OR rail_entity_id IS NOT NULL),
    CHECK (rail_entity_id IS NULL OR state IN ('APPLIED', 'QUARANTINED')),
    -- What such an entity moved, when its amount differs in the intent's currency: the windows
    -- count the larger of it and `amount_minor` (version 4).
    CHECK (moved_minor IS NULL OR rail_entity_id IS NOT NULL),
    -- Every state after the first call carries the attempt it is about.
    CHECK (state NOT IN ('IN_FLIGHT', 'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN', 'RECONCILING')
        OR attempt_seq >= 1),
    -- Before any call there is nothing to reconcile.
    CHECK (state NOT IN ('PROPOSED', 'HELD') OR attempt_seq = 0),
    -- A lease is an owner and an expiry, and only the two states that do work hold one.
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CHECK (lease_owner IS NULL OR state IN ('IN_FLIGHT', 'RECONCILING')),
    CHECK (state NOT IN ('IN_FLIGHT', 'RECONCILING') OR lease_owner IS NOT NULL)
) STRICT, WITHOUT ROWID;

INSERT INTO intents_v4 SELECT *, NULL FROM intents;

-- `fee_counts` (on intent_attempts) reads `intents`: dropped first so the rename below never
-- sees a trigger naming a missing table, and created again after it.
DROP TRIGGER fee_counts;
DROP TABLE intents;
ALTER TABLE intents_v4 RENAME TO intents;

CREATE INDEX intents_by_state ON intents (state, reconcile_not_before);
-- G2's in-progress sum and G3's per-payment count read only this index. (Without every column
-- in it, SQLite's planner preferred walking the merchant's whole primary key.)
CREATE INDEX intents_by_subject ON intents (merchant_id, subject_id, kind, state, tool, amount_minor,
    moved_minor);
-- G3's window counts read only this index (it covers every column they use).
CREATE INDEX intents_by_window ON intents (merchant_id, currency, counted_at, state, amount_minor,
    moved_minor);

CREATE TRIGGER window_counts_out AFTER UPDATE OF state, counted_at ON intents
WHEN OLD.state IN (SELECT state FROM counted_states)
    AND (NEW.state NOT IN (SELECT state FROM counted_states) OR NEW.counted_at IS NOT OLD.counted_at)
BEGIN
    UPDATE window_buckets SET calls = calls - 1,
        amount_minor = amount_minor - max(OLD.amount_minor, coalesce(OLD.moved_minor, 0))
    WHERE merchant_id = OLD.merchant_id AND currency = OLD.currency
        AND minute = OLD.counted_at / 60000;
END;

CREATE TRIGGER window_counts_in AFTER UPDATE OF state, counted_at ON intents
WHEN NEW.state IN (SELECT state FROM counted_states)
    AND (OLD.state NOT IN (SELECT state FROM counted_states) OR NEW.counted_at IS NOT OLD.counted_at)
BEGIN
    INSERT INTO window_buckets (merchant_id, currency, minute, calls, amount_minor)
    VALUES (NEW.merchant_id, NEW.currency, NEW.counted_at / 60000, 1,
        max(NEW.amount_minor, coalesce(NEW.moved_minor, 0)))
    ON CONFLICT (merchant_id, currency, minute) DO UPDATE
        SET calls = calls + 1, amount_minor = amount_minor + excluded.amount_minor;
END;

-- A counted intent whose moved amount is recorded in place (IN_FLIGHT or RECONCILING to
-- QUARANTINED keeps `counted_at`): its bucket trades the old figure for the new.
CREATE TRIGGER window_counts_moved AFTER UPDATE OF moved_minor ON intents
WHEN NEW.moved_minor IS NOT OLD.moved_minor
    AND OLD.state IN (SELECT state FROM counted_states)
    AND NEW.state IN (SELECT state FROM counted_states)
    AND NEW.counted_at IS OLD.counted_at
BEGIN
    UPDATE window_buckets SET amount_minor = amount_minor
        - max(OLD.amount_minor, coalesce(OLD.moved_minor, 0))
        + max(NEW.amount_minor, coalesce(NEW.moved_minor, 0))
    WHERE merchant_id = NEW.merchant_id AND currency = NEW.currency
        AND minute = NEW.counted_at / 60000;
END;

CREATE TRIGGER counted_has_time BEFORE UPDATE OF state ON intents
WHEN NEW.state IN (SELECT state FROM counted_states) AND NEW.counted_at IS NULL
BEGIN SELECT RAISE(ABORT, 'a counted intent needs counted_at'); END;

CREATE TRIGGER fee_counts AFTER UPDATE OF outcome ON intent_attempts
WHEN OLD.outcome IS NULL AND NEW.outcome IS NOT NULL AND NEW.fee_minor + NEW.tax_minor > 0
BEGIN
    INSERT INTO fee_buckets (merchant_id, currency, minute, fee_minor)
    SELECT NEW.merchant_id, i.currency, NEW.finished_at / 60000, NEW.fee_minor + NEW.tax_minor
    FROM intents i WHERE i.merchant_id = NEW.merchant_id AND i.sik = NEW.sik
    ON CONFLICT (merchant_id, currency, minute) DO UPDATE
        SET fee_minor = fee_minor + excluded.fee_minor;
END;
