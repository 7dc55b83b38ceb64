-- The ledger's schema on PostgreSQL (issue 20, ADR 0010): the SQLite schema as its four
-- migrations leave it (engine/schema/0001..0004), in PostgreSQL's words. Every CHECK is the
-- SQLite one; engine/tests/ledger.rs holds both files' state lists to the machine's. Integers
-- are BIGINT (SQLite's INTEGER is 64-bit), JSON is kept as the text that was hashed, checked by
-- a cast, and the triggers that keep the window and fee buckets are the SQLite ones as PL/pgSQL.

CREATE TABLE intents (
    merchant_id TEXT NOT NULL CHECK (length(merchant_id) BETWEEN 1 AND 64),
    sik TEXT NOT NULL CHECK (sik ~ '^[A-Z2-7]{32}$'),
    tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
    kind TEXT NOT NULL CHECK (kind IN ('REFUND', 'SETTLEMENT', 'TRANSFER', 'SCHEDULED_TRANSFER',
        'SCHEDULED_UPDATE')),
    subject_id TEXT NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 64),
    amount_minor BIGINT NOT NULL CHECK (amount_minor > 0 AND amount_minor <= 9007199254740992),
    currency TEXT NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    reversibility TEXT NOT NULL CHECK (reversibility IN ('reversible', 'irreversible')),
    distinct_reason TEXT CHECK (distinct_reason IS NULL OR length(distinct_reason) BETWEEN 1 AND 500),
    call_json TEXT NOT NULL CHECK (CAST(call_json AS jsonb) IS NOT NULL),
    state TEXT NOT NULL CHECK (state IN ('PROPOSED', 'HELD', 'BLOCKED', 'AUTHORIZED', 'IN_FLIGHT',
        'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN', 'RECONCILING', 'CONFIRMED_NOT_APPLIED',
        'QUARANTINED')),
    attempt_seq BIGINT NOT NULL CHECK (attempt_seq BETWEEN 0 AND 8),
    reconcile_inconclusive BIGINT NOT NULL CHECK (reconcile_inconclusive BETWEEN 0 AND 6),
    rail_entity_id TEXT CHECK (rail_entity_id IS NULL OR length(rail_entity_id) BETWEEN 1 AND 64),
    lease_owner TEXT,
    lease_expires_at BIGINT,
    reconcile_not_before BIGINT,
    reason_code TEXT NOT NULL,
    reason TEXT NOT NULL,
    mandate_hash TEXT NOT NULL CHECK (length(mandate_hash) = 64),
    audit_seq BIGINT NOT NULL CHECK (audit_seq >= 1),
    counted_at BIGINT,
    first_seen_at BIGINT NOT NULL CHECK (first_seen_at >= 0),
    updated_at BIGINT NOT NULL CHECK (updated_at >= first_seen_at),
    moved_minor BIGINT CHECK (moved_minor IS NULL OR (moved_minor > 0 AND moved_minor <= 9007199254740992)),
    PRIMARY KEY (merchant_id, sik),
    CHECK (state <> 'APPLIED' OR rail_entity_id IS NOT NULL),
    CHECK (rail_entity_id IS NULL OR state IN ('APPLIED', 'QUARANTINED')),
    CHECK (moved_minor IS NULL OR rail_entity_id IS NOT NULL),
    CHECK (state NOT IN ('IN_FLIGHT', 'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN', 'RECONCILING')
        OR attempt_seq >= 1),
    CHECK (state NOT IN ('PROPOSED', 'HELD') OR attempt_seq = 0),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CHECK (lease_owner IS NULL OR state IN ('IN_FLIGHT', 'RECONCILING')),
    CHECK (state NOT IN ('IN_FLIGHT', 'RECONCILING') OR lease_owner IS NOT NULL)
);
CREATE INDEX intents_by_state ON intents (state, reconcile_not_before);
CREATE INDEX intents_by_subject ON intents (merchant_id, subject_id, kind, state, tool, amount_minor,
    moved_minor);
CREATE INDEX intents_by_window ON intents (merchant_id, currency, counted_at, state, amount_minor,
    moved_minor);
CREATE INDEX intents_by_sik ON intents (sik);

-- The states an intent is counted in by G2's windows and G3's per-subject sums.
CREATE TABLE counted_states (state TEXT PRIMARY KEY);
INSERT INTO counted_states (state) VALUES ('HELD'), ('AUTHORIZED'), ('IN_FLIGHT'), ('APPLIED'),
    ('FAILED_TERMINAL'), ('UNKNOWN'), ('RECONCILING'), ('QUARANTINED');

CREATE TABLE window_buckets (
    merchant_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    minute BIGINT NOT NULL,
    calls BIGINT NOT NULL CHECK (calls >= 0),
    amount_minor BIGINT NOT NULL CHECK (amount_minor >= 0),
    PRIMARY KEY (merchant_id, currency, minute)
);

CREATE FUNCTION interlock_counted(state TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE AS
    'SELECT EXISTS (SELECT 1 FROM counted_states c WHERE c.state = $1)';

-- window_counts_out, window_counts_in, window_counts_moved and counted_has_time of SQLite.
CREATE FUNCTION intents_keep_windows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was BOOLEAN := interlock_counted(OLD.state);
    now_counted BOOLEAN := interlock_counted(NEW.state);
    old_amount BIGINT := GREATEST(OLD.amount_minor, coalesce(OLD.moved_minor, 0));
    new_amount BIGINT := GREATEST(NEW.amount_minor, coalesce(NEW.moved_minor, 0));
BEGIN
    IF now_counted AND NEW.counted_at IS NULL THEN
        RAISE EXCEPTION 'a counted intent needs counted_at';
    END IF;
    IF was AND (NOT now_counted OR NEW.counted_at IS DISTINCT FROM OLD.counted_at) THEN
        UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - old_amount
        WHERE merchant_id = OLD.merchant_id AND currency = OLD.currency
            AND minute = OLD.counted_at / 60000;
    END IF;
    IF now_counted AND (NOT was OR NEW.counted_at IS DISTINCT FROM OLD.counted_at) THEN
        INSERT INTO window_buckets (merchant_id, currency, minute, calls, amount_minor)
        VALUES (NEW.merchant_id, NEW.currency, NEW.counted_at / 60000, 1, new_amount)
        ON CONFLICT (merchant_id, currency, minute) DO UPDATE
            SET calls = window_buckets.calls + 1,
                amount_minor = window_buckets.amount_minor + excluded.amount_minor;
    ELSIF was AND now_counted AND NEW.moved_minor IS DISTINCT FROM OLD.moved_minor THEN
        UPDATE window_buckets SET amount_minor = amount_minor - old_amount + new_amount
        WHERE merchant_id = NEW.merchant_id AND currency = NEW.currency
            AND minute = NEW.counted_at / 60000;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER intents_keep_windows AFTER UPDATE ON intents
    FOR EACH ROW EXECUTE FUNCTION intents_keep_windows();

CREATE TABLE intent_attempts (
    merchant_id TEXT NOT NULL,
    sik TEXT NOT NULL,
    attempt_seq BIGINT NOT NULL CHECK (attempt_seq >= 1 AND attempt_seq <= 8),
    started_at BIGINT NOT NULL,
    finished_at BIGINT CHECK (finished_at IS NULL OR finished_at >= started_at),
    outcome TEXT CHECK (outcome IS NULL OR outcome IN ('APPLIED', 'REJECTED', 'AMBIGUOUS')),
    rail_entity_id TEXT CHECK (rail_entity_id IS NULL OR length(rail_entity_id) BETWEEN 1 AND 64),
    fee_minor BIGINT NOT NULL DEFAULT 0 CHECK (fee_minor >= 0),
    tax_minor BIGINT NOT NULL DEFAULT 0 CHECK (tax_minor >= 0),
    detail TEXT,
    CHECK ((outcome IS NULL) = (finished_at IS NULL)),
    CHECK (outcome IS DISTINCT FROM 'APPLIED' OR rail_entity_id IS NOT NULL),
    PRIMARY KEY (merchant_id, sik, attempt_seq),
    FOREIGN KEY (merchant_id, sik) REFERENCES intents (merchant_id, sik)
);
CREATE INDEX attempts_charged ON intent_attempts (merchant_id, finished_at)
    WHERE fee_minor + tax_minor > 0;

CREATE TABLE fee_buckets (
    merchant_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    minute BIGINT NOT NULL,
    fee_minor BIGINT NOT NULL CHECK (fee_minor >= 0),
    PRIMARY KEY (merchant_id, currency, minute)
);

CREATE FUNCTION attempts_keep_fees() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.outcome IS NULL AND NEW.outcome IS NOT NULL AND NEW.fee_minor + NEW.tax_minor > 0 THEN
        INSERT INTO fee_buckets (merchant_id, currency, minute, fee_minor)
        SELECT NEW.merchant_id, i.currency, NEW.finished_at / 60000, NEW.fee_minor + NEW.tax_minor
        FROM intents i WHERE i.merchant_id = NEW.merchant_id AND i.sik = NEW.sik
        ON CONFLICT (merchant_id, currency, minute) DO UPDATE
            SET fee_minor = fee_buckets.fee_minor + excluded.fee_minor;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER attempts_keep_fees AFTER UPDATE ON intent_attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_keep_fees();

CREATE TABLE decisions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id TEXT NOT NULL CHECK (length(instance_id) BETWEEN 1 AND 64),
    merchant_id TEXT NOT NULL,
    sik TEXT CHECK (sik IS NULL OR length(sik) = 32),
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    mandate_hash TEXT NOT NULL CHECK (length(mandate_hash) = 64),
    verdict TEXT NOT NULL CHECK (verdict IN ('ALLOW', 'HOLD', 'BLOCK')),
    outcome TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    gates_json TEXT NOT NULL CHECK (CAST(gates_json AS jsonb) IS NOT NULL),
    decided_at BIGINT NOT NULL,
    audit_seq BIGINT NOT NULL CHECK (audit_seq >= 0)
);
CREATE INDEX decisions_by_sik ON decisions (merchant_id, sik);

CREATE TABLE recon_findings (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merchant_id TEXT NOT NULL,
    sik TEXT NOT NULL,
    attempt_seq BIGINT NOT NULL CHECK (attempt_seq >= 1),
    outcome TEXT NOT NULL CHECK (outcome IN ('APPLIED', 'CONFIRMED_NOT_APPLIED', 'INCONCLUSIVE',
        'QUARANTINED')),
    pages_scanned BIGINT NOT NULL CHECK (pages_scanned >= 0),
    pagination_exhausted BIGINT NOT NULL CHECK (pagination_exhausted IN (0, 1)),
    lag_elapsed BIGINT NOT NULL CHECK (lag_elapsed IN (0, 1)),
    matched_entity_id TEXT,
    queried_at BIGINT NOT NULL,
    detail_json TEXT NOT NULL CHECK (CAST(detail_json AS jsonb) IS NOT NULL),
    -- The pagination/lag rule: absence is proven only by a scan that reached the end after
    -- the rail's lag had passed.
    CHECK (outcome <> 'CONFIRMED_NOT_APPLIED' OR pagination_exhausted = 1),
    CHECK (outcome <> 'CONFIRMED_NOT_APPLIED' OR lag_elapsed = 1),
    CHECK ((outcome = 'APPLIED') = (matched_entity_id IS NOT NULL)),
    FOREIGN KEY (merchant_id, sik) REFERENCES intents (merchant_id, sik)
);

CREATE TABLE audit_log (
    seq BIGINT PRIMARY KEY CHECK (seq >= 1),
    ts BIGINT NOT NULL CHECK (ts >= 0),
    kind TEXT NOT NULL,
    payload_json TEXT NOT NULL CHECK (CAST(payload_json AS jsonb) IS NOT NULL),
    prev_hash TEXT NOT NULL CHECK (length(prev_hash) = 64),
    hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64)
);

CREATE TABLE audit_head (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL CHECK (seq >= 0),
    hash TEXT NOT NULL CHECK (length(hash) = 64)
);

-- Append-only: no row of the log is changed or removed, by any role, through any statement
-- (TRUNCATE included). Privileges are the second wall: see ADR 0010 for running Interlock as a
-- role that does not own these tables.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;

CREATE TABLE clock_anchors (
    boot_id TEXT PRIMARY KEY CHECK (length(boot_id) BETWEEN 1 AND 64),
    wall_at_boot_ms BIGINT NOT NULL CHECK (wall_at_boot_ms >= 0),
    wall_said_ms BIGINT NOT NULL CHECK (wall_said_ms >= 0)
);
