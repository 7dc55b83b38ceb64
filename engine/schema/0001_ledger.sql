-- Interlock ledger, schema version 1.
--
-- Every table is STRICT (a float or a text never lands in an INTEGER column) and every promise
-- the machine makes that a row can show is a CHECK here too, so a bug in the engine, or a hand
-- edit, is refused by SQLite itself. `state` is written only by the engine's `apply`, which
-- computes it with `interlock_machine::step`.

CREATE TABLE intents (
    merchant_id TEXT NOT NULL CHECK (length(merchant_id) BETWEEN 1 AND 64),
    sik TEXT NOT NULL CHECK (length(sik) = 32 AND sik NOT GLOB '*[^A-Z2-7]*'),
    tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
    kind TEXT NOT NULL CHECK (kind IN ('REFUND', 'SETTLEMENT')),
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
    PRIMARY KEY (merchant_id, sik),
    -- An entity id exactly when applied: APPLIED names what the rail created.
    CHECK ((state = 'APPLIED') = (rail_entity_id IS NOT NULL)),
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

CREATE INDEX intents_by_state ON intents (state, reconcile_not_before);
-- G2's in-progress sum and G3's per-payment count read only this index. (Without every column
-- in it, SQLite's planner preferred walking the merchant's whole primary key.)
CREATE INDEX intents_by_subject ON intents (merchant_id, subject_id, kind, state, tool, amount_minor);
-- G3's window counts read only this index (it covers every column they use).
CREATE INDEX intents_by_window ON intents (merchant_id, currency, counted_at, state, amount_minor);

-- The states whose intents count against G3's windows and budgets and G2's in-progress sums:
-- everything that moved money or still might (held ones too: an approval would move it).
-- Written once, here; the engine's queries and the triggers below read it.
CREATE TABLE counted_states (state TEXT PRIMARY KEY) STRICT, WITHOUT ROWID;
INSERT INTO counted_states (state) VALUES ('HELD'), ('AUTHORIZED'), ('IN_FLIGHT'), ('APPLIED'),
    ('FAILED_TERMINAL'), ('UNKNOWN'), ('RECONCILING'), ('QUARANTINED');

-- G3's sliding windows, pre-summed per minute of `counted_at` so that a window costs one row
-- per minute plus the intents of its first, partial minute, not one row per intent. Kept by the
-- triggers below in the transaction that changes the state.
CREATE TABLE window_buckets (
    merchant_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    minute INTEGER NOT NULL,
    calls INTEGER NOT NULL CHECK (calls >= 0),
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    PRIMARY KEY (merchant_id, currency, minute)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER window_counts_out AFTER UPDATE OF state, counted_at ON intents
WHEN OLD.state IN (SELECT state FROM counted_states)
    AND (NEW.state NOT IN (SELECT state FROM counted_states) OR NEW.counted_at IS NOT OLD.counted_at)
BEGIN
    UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
    WHERE merchant_id = OLD.merchant_id AND currency = OLD.currency
        AND minute = OLD.counted_at / 60000;
END;

CREATE TRIGGER window_counts_in AFTER UPDATE OF state, counted_at ON intents
WHEN NEW.state IN (SELECT state FROM counted_states)
    AND (OLD.state NOT IN (SELECT state FROM counted_states) OR NEW.counted_at IS NOT OLD.counted_at)
BEGIN
    INSERT INTO window_buckets (merchant_id, currency, minute, calls, amount_minor)
    VALUES (NEW.merchant_id, NEW.currency, NEW.counted_at / 60000, 1, NEW.amount_minor)
    ON CONFLICT (merchant_id, currency, minute) DO UPDATE
        SET calls = calls + 1, amount_minor = amount_minor + excluded.amount_minor;
END;

-- A counted intent always knows when it was counted.
CREATE TRIGGER counted_has_time BEFORE UPDATE OF state ON intents
WHEN NEW.state IN (SELECT state FROM counted_states) AND NEW.counted_at IS NULL
BEGIN SELECT RAISE(ABORT, 'a counted intent needs counted_at'); END;

CREATE TABLE intent_attempts (
    merchant_id TEXT NOT NULL,
    sik TEXT NOT NULL,
    attempt_seq INTEGER NOT NULL CHECK (attempt_seq >= 1 AND attempt_seq <= 8),
    started_at INTEGER NOT NULL,
    finished_at INTEGER CHECK (finished_at IS NULL OR finished_at >= started_at),
    outcome TEXT CHECK (outcome IS NULL OR outcome IN ('APPLIED', 'REJECTED', 'AMBIGUOUS')),
    rail_entity_id TEXT CHECK (rail_entity_id IS NULL OR length(rail_entity_id) BETWEEN 1 AND 64),
    fee_minor INTEGER NOT NULL DEFAULT 0 CHECK (fee_minor >= 0),
    tax_minor INTEGER NOT NULL DEFAULT 0 CHECK (tax_minor >= 0),
    detail TEXT,
    CHECK ((outcome IS NULL) = (finished_at IS NULL)),
    CHECK (outcome IS NOT 'APPLIED' OR rail_entity_id IS NOT NULL),
    PRIMARY KEY (merchant_id, sik, attempt_seq),
    FOREIGN KEY (merchant_id, sik) REFERENCES intents (merchant_id, sik)
) STRICT, WITHOUT ROWID;

-- G3's fee budget reads only attempts that were charged.
CREATE INDEX attempts_charged ON intent_attempts (merchant_id, finished_at)
    WHERE fee_minor + tax_minor > 0;

-- Fees charged, pre-summed per minute of the attempt's end, as for the windows.
CREATE TABLE fee_buckets (
    merchant_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    minute INTEGER NOT NULL,
    fee_minor INTEGER NOT NULL CHECK (fee_minor >= 0),
    PRIMARY KEY (merchant_id, currency, minute)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER fee_counts AFTER UPDATE OF outcome ON intent_attempts
WHEN OLD.outcome IS NULL AND NEW.outcome IS NOT NULL AND NEW.fee_minor + NEW.tax_minor > 0
BEGIN
    INSERT INTO fee_buckets (merchant_id, currency, minute, fee_minor)
    SELECT NEW.merchant_id, i.currency, NEW.finished_at / 60000, NEW.fee_minor + NEW.tax_minor
    FROM intents i WHERE i.merchant_id = NEW.merchant_id AND i.sik = NEW.sik
    ON CONFLICT (merchant_id, currency, minute) DO UPDATE
        SET fee_minor = fee_minor + excluded.fee_minor;
END;

CREATE TABLE decisions (
    id INTEGER PRIMARY KEY,
    -- The engine instance (process start) that decided.
    instance_id TEXT NOT NULL CHECK (length(instance_id) BETWEEN 1 AND 64),
    merchant_id TEXT NOT NULL,
    -- The key the action would have; a refusal has no intent row behind it.
    sik TEXT CHECK (sik IS NULL OR length(sik) = 32),
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    mandate_hash TEXT NOT NULL CHECK (length(mandate_hash) = 64),
    verdict TEXT NOT NULL CHECK (verdict IN ('ALLOW', 'HOLD', 'BLOCK')),
    outcome TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    gates_json TEXT NOT NULL CHECK (json_valid(gates_json)),
    decided_at INTEGER NOT NULL,
    -- The last audit record when the decision was made: where it sits in the history.
    audit_seq INTEGER NOT NULL CHECK (audit_seq >= 0)
) STRICT;

CREATE INDEX decisions_by_sik ON decisions (merchant_id, sik);

CREATE TABLE recon_findings (
    id INTEGER PRIMARY KEY,
    merchant_id TEXT NOT NULL,
    sik TEXT NOT NULL,
    attempt_seq INTEGER NOT NULL CHECK (attempt_seq >= 1),
    outcome TEXT NOT NULL CHECK (outcome IN ('APPLIED', 'CONFIRMED_NOT_APPLIED', 'INCONCLUSIVE',
        'QUARANTINED')),
    pages_scanned INTEGER NOT NULL CHECK (pages_scanned >= 0),
    pagination_exhausted INTEGER NOT NULL CHECK (pagination_exhausted IN (0, 1)),
    lag_elapsed INTEGER NOT NULL CHECK (lag_elapsed IN (0, 1)),
    matched_entity_id TEXT,
    queried_at INTEGER NOT NULL,
    detail_json TEXT NOT NULL CHECK (json_valid(detail_json)),
    -- Trap 1 and trap 2, in the schema: absence is proven only by every page, read late enough.
    CHECK (outcome <> 'CONFIRMED_NOT_APPLIED' OR pagination_exhausted = 1),
    CHECK (outcome <> 'CONFIRMED_NOT_APPLIED' OR lag_elapsed = 1),
    CHECK ((outcome = 'APPLIED') = (matched_entity_id IS NOT NULL)),
    FOREIGN KEY (merchant_id, sik) REFERENCES intents (merchant_id, sik)
) STRICT;

CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY CHECK (seq >= 1),
    ts INTEGER NOT NULL CHECK (ts >= 0),
    kind TEXT NOT NULL,
    payload_json TEXT NOT NULL CHECK (json_valid(payload_json)),
    prev_hash TEXT NOT NULL CHECK (length(prev_hash) = 64),
    hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64)
) STRICT;

-- The chain's head, written in the same transaction as each record, so that losing the tail of
-- the log (a truncation) is told apart from a log that simply ends there.
CREATE TABLE audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL CHECK (seq >= 0),
    hash TEXT NOT NULL CHECK (length(hash) = 64)
) STRICT;

-- Append-only by construction. Someone with the file can drop these triggers; the hash chain is
-- what catches that, these only stop an honest mistake.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
