//! The ledger file keeps its promises: durable settings, forward-only migrations, a schema that
//! refuses what the machine never produces, and an audit chain that names where it was broken.

mod common;

use common::*;
use interlock_engine::ledger::{LedgerError, SCHEMA_VERSION, VerifyError};
use interlock_engine::{Ledger, Outcome};

#[test]
fn the_ledger_opens_only_in_a_durable_configuration() {
    let world = World::on_sqlite();
    let ledger = Ledger::open(&world.db()).unwrap();
    let pragmas = ledger.pragmas().unwrap();
    assert_eq!(pragmas.journal_mode, "wal");
    assert_eq!(pragmas.synchronous, 2, "synchronous=FULL");
    assert_eq!(pragmas.foreign_keys, 1);
    assert_eq!(pragmas.busy_timeout_ms, 5_000);
    assert_eq!(pragmas.user_version, SCHEMA_VERSION);
    for memory in [":memory:", ""] {
        let error = Ledger::open(std::path::Path::new(memory)).unwrap_err();
        assert!(
            matches!(&error, LedgerError::Unsafe { problem, .. } if problem.contains("in-memory")),
            "{error}"
        );
    }
}

/// Two proxies started at once on a fresh ledger file (two workers, one ledger) both open it:
/// the second to take the write lock finds the schema already there and does not run it again.
#[test]
fn processes_opening_a_fresh_ledger_at_once_all_succeed() {
    const OPENERS: usize = 4;
    for round in 0..8 {
        let world = World::on_sqlite();
        let db = world.db();
        let start = std::sync::Arc::new(std::sync::Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (db, start) = (db.clone(), std::sync::Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    Ledger::open(&db).map(|ledger| ledger.pragmas().unwrap().user_version)
                })
            })
            .collect();
        for opener in openers {
            let opened = opener.join().unwrap();
            assert!(
                matches!(opened, Ok(SCHEMA_VERSION)),
                "round {round}: a concurrent open failed: {opened:?}"
            );
        }
    }
}

#[test]
fn a_ledger_from_a_newer_interlock_is_refused_untouched() {
    let world = World::on_sqlite();
    drop(Ledger::open(&world.db()).unwrap());
    raw(&world.db())
        .pragma_update(None, "user_version", 7)
        .unwrap();
    let error = Ledger::open(&world.db()).unwrap_err().to_string();
    assert!(
        error.contains("schema version 7 was written by a newer Interlock"),
        "{error}"
    );
    let version: i64 = raw(&world.db())
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 7);
    // Reopening a current ledger runs no migration twice.
    let other = World::on_sqlite();
    drop(Ledger::open(&other.db()).unwrap());
    assert_eq!(
        Ledger::open(&other.db())
            .unwrap()
            .pragmas()
            .unwrap()
            .user_version,
        SCHEMA_VERSION
    );
}

#[test]
fn a_version_1_ledger_migrates_keeping_its_rows_indexes_and_triggers() {
    // A ledger with a real refund in it (intent, attempt, audit chain), taken back to version 1
    // by running migration 2's rebuild with version 1's kind CHECK.
    let world = World::on_sqlite();
    let engine = world.engine(world.rail(), "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Applied);
    drop(engine);
    let widened = "kind IN ('REFUND', 'SETTLEMENT', 'TRANSFER', 'SCHEDULED_TRANSFER',\n        'SCHEDULED_UPDATE')";
    let migration = include_str!("../schema/0002_kinds.sql");
    assert_eq!(migration.matches(widened).count(), 1);
    // Version 4's `moved_minor` is left behind with the rest of the current table.
    let v1_columns = "merchant_id, sik, tool, kind, subject_id, amount_minor, currency, \
        reversibility, distinct_reason, call_json, state, attempt_seq, reconcile_inconclusive, \
        rail_entity_id, lease_owner, lease_expires_at, reconcile_not_before, reason_code, reason, \
        mandate_hash, audit_seq, counted_at, first_seen_at, updated_at";
    let copy = "INSERT INTO intents_v2 SELECT * FROM intents;";
    assert_eq!(migration.matches(copy).count(), 1);
    let back_to_v1 = migration
        .replace(widened, "kind IN ('REFUND', 'SETTLEMENT')")
        .replace(
            copy,
            &format!("INSERT INTO intents_v2 SELECT {v1_columns} FROM intents;"),
        );
    let v1 = raw(&world.db());
    v1.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    // Migration 3's table goes too: a version 1 ledger has no clock anchors.
    v1.execute_batch(&format!(
        "BEGIN; {back_to_v1}\nDROP TABLE clock_anchors;\nPRAGMA user_version = 1; COMMIT;"
    ))
    .unwrap();
    drop(v1);
    const SIK_B: &str = "'BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'";
    // Version 1 knows refunds and settlements only.
    assert!(insert(&world.db(), &[("sik", SIK_B), ("kind", "'TRANSFER'")]).is_err());

    let ledger = Ledger::open(&world.db()).unwrap();
    assert_eq!(ledger.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert_eq!(ledger.pragmas().unwrap().foreign_keys, 1);
    ledger.verify_chain().unwrap();
    drop(ledger);
    let db = raw(&world.db());
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |row| row.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM intents"), 1);
    assert_eq!(count("SELECT count(*) FROM intent_attempts"), 1);
    assert_eq!(
        count("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'"),
        7,
        "the window, fee and audit triggers are all back, and version 4's moved-amount one"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name LIKE 'intents_by_%'"
        ),
        3
    );
    assert_eq!(count("SELECT count(*) FROM pragma_foreign_key_check"), 0);
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(db);
    insert(&world.db(), &[("sik", SIK_B), ("kind", "'TRANSFER'")]).unwrap();
    let sik_c = "'CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC'";
    assert!(insert(&world.db(), &[("sik", sik_c), ("kind", "'PAYOUT'")]).is_err());
}

fn insert(db: &std::path::Path, overrides: &[(&str, &str)]) -> rusqlite::Result<usize> {
    let mut columns = insert_defaults();
    for (name, value) in overrides {
        match columns.iter_mut().find(|(n, _)| n == name) {
            Some(column) => column.1 = value,
            None => columns.push((name, value)),
        }
    }
    raw(db).execute(&insert_sql(&columns), [])
}

/// A valid `PROPOSED` row's columns, as SQL literals.
fn insert_defaults() -> Vec<(&'static str, &'static str)> {
    vec![
        ("merchant_id", "'acc_TEST'"),
        ("sik", "'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'"),
        ("tool", "'create_refund'"),
        ("kind", "'REFUND'"),
        ("subject_id", "'pay_1'"),
        ("amount_minor", "100"),
        ("currency", "'INR'"),
        ("reversibility", "'irreversible'"),
        ("call_json", "'{}'"),
        ("state", "'PROPOSED'"),
        ("attempt_seq", "0"),
        ("reconcile_inconclusive", "0"),
        ("reason_code", "''"),
        ("reason", "''"),
        (
            "mandate_hash",
            "'0000000000000000000000000000000000000000000000000000000000000000'",
        ),
        ("audit_seq", "1"),
        ("first_seen_at", "1"),
        ("updated_at", "1"),
    ]
}

/// The `INSERT` of one intent row with these columns.
fn insert_sql(columns: &[(&str, &str)]) -> String {
    let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
    let values: Vec<&str> = columns.iter().map(|(_, v)| *v).collect();
    format!(
        "INSERT INTO intents ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    )
}

/// [`insert`] on whichever backend `raw` reaches.
fn insert_on(raw: &Raw, overrides: &[(&str, &str)]) -> Result<(), String> {
    let mut columns = insert_defaults();
    for (name, value) in overrides {
        match columns.iter_mut().find(|(n, _)| n == name) {
            Some(column) => column.1 = value,
            None => columns.push((name, value)),
        }
    }
    raw.execute(&insert_sql(&columns))
}

#[test]
fn the_schema_refuses_what_the_machine_never_writes() {
    let world = World::on_sqlite();
    drop(Ledger::open(&world.db()).unwrap());
    let db = world.db();
    let refused = [
        (
            vec![("amount_minor", "1.5")],
            "cannot store REAL value in INTEGER column",
        ),
        (
            vec![("amount_minor", "'one hundred'")],
            "cannot store TEXT value in INTEGER column",
        ),
        (vec![("amount_minor", "0")], "CHECK constraint failed"),
        (vec![("currency", "'inr'")], "CHECK constraint failed"),
        (vec![("sik", "'AAAA'")], "CHECK constraint failed"),
        (vec![("state", "'DONE'")], "CHECK constraint failed"),
        (
            vec![("state", "'APPLIED'"), ("attempt_seq", "1")],
            "CHECK constraint failed",
        ),
        (vec![("state", "'IN_FLIGHT'")], "CHECK constraint failed"),
        (
            vec![("state", "'HELD'"), ("attempt_seq", "2")],
            "CHECK constraint failed",
        ),
    ];
    for (overrides, expected) in refused {
        let Err(error) = insert(&db, &overrides) else {
            panic!("{overrides:?} was accepted");
        };
        let error = error.to_string();
        assert!(error.contains(expected), "{overrides:?}: {error}");
    }
    assert_eq!(insert(&db, &[]).unwrap(), 1);
    let finding = raw(&db)
        .execute(
            "INSERT INTO recon_findings (merchant_id, sik, attempt_seq, outcome, pages_scanned,
                pagination_exhausted, lag_elapsed, queried_at, detail_json)
             VALUES ('acc_TEST', 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 1, 'CONFIRMED_NOT_APPLIED', 1, 0, 1, 1, '{}')",
            [],
        )
        .unwrap_err()
        .to_string();
    assert!(finding.contains("CHECK constraint failed"), "{finding}");
    let append_only = raw(&db).execute("DELETE FROM audit_log", []);
    assert!(append_only.is_ok(), "an empty log deletes nothing");
}

/// A ledger with eight audit records: two refunds, each PROPOSED, AUTHORIZED, IN_FLIGHT, APPLIED.
fn busy_ledger() -> World {
    let world = World::on_sqlite();
    let engine = world.engine(world.rail(), "p1");
    for (payment, amount) in [("pay_1002", 50_000), ("pay_2000", 70_000)] {
        let answer = engine
            .propose(&refund(payment, amount), Some(&live()))
            .unwrap();
        assert_eq!(answer.outcome, Outcome::Applied);
    }
    assert_eq!(engine.ledger().verify_chain().unwrap().records, 8);
    world
}

fn tamper(world: &World, sql: &str) -> u64 {
    let conn = raw(&world.db());
    conn.execute_batch("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;")
        .unwrap();
    conn.execute_batch(sql).unwrap();
    drop(conn);
    match Ledger::open(&world.db()) {
        Err(LedgerError::ChainBroken { broken, .. }) => broken.seq,
        Err(other) => panic!("{other}"),
        Ok(ledger) => match ledger.verify_chain() {
            Err(VerifyError::Broken(broken)) => broken.seq,
            other => panic!("tampering went unnoticed: {other:?}"),
        },
    }
}

#[test]
fn a_flipped_byte_is_found_at_its_record() {
    let world = busy_ledger();
    let seq = tamper(
        &world,
        "UPDATE audit_log SET payload_json = replace(payload_json, '50000', '50001') WHERE seq = 1",
    );
    assert_eq!(seq, 1);
    let world = busy_ledger();
    assert_eq!(
        tamper(&world, "UPDATE audit_log SET ts = ts + 1 WHERE seq = 6"),
        6
    );
}

#[test]
fn a_deleted_record_is_found_where_it_was() {
    let world = busy_ledger();
    assert_eq!(tamper(&world, "DELETE FROM audit_log WHERE seq = 4"), 4);
}

#[test]
fn two_swapped_records_are_found_at_the_first() {
    let world = busy_ledger();
    let seq = tamper(
        &world,
        "UPDATE audit_log SET seq = 1000 WHERE seq = 3;
         UPDATE audit_log SET seq = 3 WHERE seq = 2;
         UPDATE audit_log SET seq = 2 WHERE seq = 1000;",
    );
    assert_eq!(seq, 2);
}

#[test]
fn a_truncated_tail_is_found_where_the_log_now_ends() {
    let world = busy_ledger();
    assert_eq!(tamper(&world, "DELETE FROM audit_log WHERE seq >= 6"), 6);
    // A truncation that also rewinds the head is still caught: the intents name their records.
    let world = busy_ledger();
    let seq = tamper(
        &world,
        "DELETE FROM audit_log WHERE seq >= 7;
         UPDATE audit_head SET seq = 6, hash = (SELECT hash FROM audit_log WHERE seq = 6);",
    );
    assert_eq!(seq, 7);
}

#[test]
fn the_audit_log_refuses_updates_and_deletes() {
    let world = busy_ledger();
    let conn = raw(&world.db());
    for sql in [
        "UPDATE audit_log SET ts = 0",
        "DELETE FROM audit_log WHERE seq = 1",
    ] {
        let error = conn.execute(sql, []).unwrap_err().to_string();
        assert!(error.contains("audit_log is append-only"), "{error}");
    }
}

#[test]
fn a_state_written_behind_the_logs_back_is_found() {
    // Someone with the file turns an applied refund back into "proven absent", so that the
    // next proposal would send it again. The chain is intact; the row does not match it.
    let world = busy_ledger();
    let conn = raw(&world.db());
    conn.execute(
        "UPDATE intents SET state = 'CONFIRMED_NOT_APPLIED', rail_entity_id = NULL
         WHERE audit_seq = 4",
        [],
    )
    .unwrap();
    drop(conn);
    match Ledger::open(&world.db()) {
        Err(LedgerError::ChainBroken { broken, .. }) => {
            assert_eq!(broken.seq, 4);
            assert!(
                broken.problem.contains("reads CONFIRMED_NOT_APPLIED"),
                "{}",
                broken.problem
            );
        }
        other => panic!("the edit went unnoticed: {other:?}"),
    }
}

/// The schema's `counted_states` is the machine's `is_counted`, state for state: a state group
/// in SQL that drifted from the machine would count (or stop counting) money behind its back.
#[test]
fn the_counted_states_table_is_the_machines_predicate() {
    // On the backend INTERLOCK_TEST_BACKEND names: the PostgreSQL schema has its own copy.
    let world = World::new();
    drop(world.open_ledger());
    let table: Vec<String> = world
        .raw()
        .query("SELECT state FROM counted_states ORDER BY state", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0).unwrap())
        .collect();
    let mut machine: Vec<String> = interlock_machine::State::ALL
        .into_iter()
        .filter(|state| state.is_counted())
        .map(|state| state.as_str().to_owned())
        .collect();
    machine.sort();
    assert_eq!(table, machine);
    assert!(!machine.is_empty() && machine.len() < interlock_machine::State::ALL.len());
}

/// The schema's lease CHECKs are the machine's `holds_lease`, state for state: a row may carry a
/// lease exactly in the states the machine says hold one.
#[test]
fn the_schemas_lease_rule_is_the_machines_predicate() {
    use interlock_machine::State;
    // On the backend INTERLOCK_TEST_BACKEND names: the PostgreSQL schema has its own CHECKs.
    let world = World::new();
    drop(world.open_ledger());
    let db = world.raw();
    for state in State::ALL {
        let quoted = format!("'{}'", state.as_str());
        // Only the lease is under test: the attempt and entity columns are set as each state
        // needs them, so any refusal is the lease rule's.
        let attempt = if state.is_counted() && state != State::Held {
            "1"
        } else {
            "0"
        };
        let entity = if state == State::Applied {
            "'rfnd_1'"
        } else {
            "NULL"
        };
        let mut row = vec![
            ("state", quoted.as_str()),
            ("attempt_seq", attempt),
            ("rail_entity_id", entity),
        ];
        let without = insert_on(&db, &row);
        db.execute("DELETE FROM intents").unwrap();
        row.extend([("lease_owner", "'p1'"), ("lease_expires_at", "5")]);
        let with = insert_on(&db, &row);
        db.execute("DELETE FROM intents").unwrap();
        assert_eq!(
            with.is_ok(),
            state.holds_lease(),
            "{state} with a lease: {with:?}"
        );
        assert_eq!(
            without.is_ok(),
            !state.holds_lease(),
            "{state} without a lease: {without:?}"
        );
    }
}

/// `ledger show` reads types: the intent, its decision with every gate, its attempt and its
/// audit records come back as the engine wrote them.
#[test]
fn an_intent_reads_back_in_full_as_typed_rows() {
    use interlock_driver::gates::Gate;
    use interlock_machine::{Record, State, Verdict};
    let world = busy_ledger();
    let ledger = Ledger::open(&world.db()).unwrap();
    let cores = ledger.cores().unwrap();
    assert_eq!(cores.len(), 2);
    let details = ledger.intent_detail(&cores[0].sik).unwrap();
    assert_eq!(details.len(), 1);
    let detail = &details[0];
    let intent = &detail.intent;
    assert_eq!(intent.sik, cores[0].sik);
    assert_eq!(intent.state, State::Applied);
    assert_eq!(intent.attempt_seq, 1);
    assert!(
        [50_000, 70_000].contains(&intent.amount_minor),
        "{intent:?}"
    );
    assert_eq!(intent.rail_entity_id, cores[0].entity_id);
    assert_eq!(detail.decisions.len(), 1);
    let decision = &detail.decisions[0];
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(
        decision.gates_json.iter().any(|g| g.gate == Gate::G2),
        "{decision:?}"
    );
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.attempts[0].outcome.as_deref(), Some("APPLIED"));
    assert!(detail.findings.is_empty());
    let states: Vec<State> = detail
        .audit
        .iter()
        .map(|a| match &a.record {
            Record::Inserted { core, .. } => core.state,
            Record::Transition { to, .. } => to.state,
            Record::RailCall { .. } => panic!("no rail call is an audit record"),
        })
        .collect();
    assert_eq!(
        states,
        [
            State::Proposed,
            State::Authorized,
            State::InFlight,
            State::Applied
        ]
    );
    // The JSON an operator's script reads keeps the schema's column names.
    let json = serde_json::to_value(intent).unwrap();
    assert_eq!(json["state"], "APPLIED");
    assert_eq!(json["kind"], "REFUND");
}

/// A value the types cannot hold is an error that names its column, not a blank in the output.
#[test]
fn a_value_the_types_cannot_hold_is_an_error_naming_its_column() {
    let world = busy_ledger();
    let sik = Ledger::open(&world.db()).unwrap().cores().unwrap()[0]
        .sik
        .clone();
    raw(&world.db())
        .execute("UPDATE decisions SET gates_json = '{\"gate\": \"G9\"}'", [])
        .unwrap();
    let error = Ledger::open(&world.db())
        .unwrap()
        .intent_detail(&sik)
        .unwrap_err()
        .to_string();
    assert!(error.contains("decisions.gates_json"), "{error}");
}

#[test]
fn one_boot_has_one_clock_anchor_and_a_new_boot_never_goes_back() {
    let world = World::on_sqlite();
    let engine = world.engine(world.rail(), "p1");
    engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    let ledger = engine.ledger();
    let newest = T0;
    // The first process of a boot records what the wall clock says of the boot…
    let first = ledger
        .clock_anchor("boot-a", newest - 5_000, 10_000)
        .unwrap();
    assert!(first.recorded);
    assert_eq!(first.wall_at_boot_ms, newest - 5_000);
    // …and every later one reads it, whatever its wall clock says (a day later, or earlier).
    for wall in [newest + 86_400_000, newest - 86_400_000] {
        let later = ledger.clock_anchor("boot-a", wall, 20_000).unwrap();
        assert!(!later.recorded);
        assert_eq!(later.wall_at_boot_ms, first.wall_at_boot_ms);
    }
    // A new boot whose wall clock was set back a day: ledger time starts at the newest record.
    let back = ledger
        .clock_anchor("boot-b", newest - 86_400_000, 1_000)
        .unwrap();
    assert!(back.recorded);
    assert_eq!(back.wall_said_ms, newest - 86_400_000);
    assert_eq!(
        back.wall_at_boot_ms + 1_000,
        newest,
        "not before the newest record"
    );
    // The real host's time, through the same anchor, moves forward with the boot clock.
    let time = interlock_engine::LedgerTime::open(ledger, newest).unwrap();
    let (a, b) = (time.now_ms(), time.now_ms());
    assert!(a <= b && a >= newest - 1_000, "{a} {b}");
}

/// A ledger the previous release wrote (schema version 3: `interlock demo --keep` at `830998c`,
/// three applied intents, one of them found by a reconcile pass) opens with this build: the
/// migration runs, the chain verifies, and every record still replays. Its audit records carry
/// `RAIL_APPLIED` and `RECONCILE_FOUND_APPLIED` without `as_authorised`, which they read as the
/// release took them: authorised.
#[test]
fn a_ledger_written_by_the_previous_release_opens_and_verifies() {
    let world = World::on_sqlite();
    let db = world.db();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/ledger-v3-demo.db"
        ),
        &db,
    )
    .unwrap();
    assert_eq!(
        raw(&db)
            .pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
            .unwrap(),
        3
    );
    let ledger = Ledger::open(&db).unwrap();
    assert_eq!(ledger.pragmas().unwrap().user_version, SCHEMA_VERSION);
    ledger.verify_chain().unwrap();
    let cores = ledger.cores().unwrap();
    assert_eq!(cores.len(), 3);
    for core in &cores {
        assert_eq!(core.state, interlock_machine::State::Applied, "{core:?}");
        assert!(core.entity_id.is_some(), "{core:?}");
        assert!(!ledger.intent_detail(&core.sik).unwrap().is_empty());
    }
    let history = ledger.history().unwrap();
    interlock_machine::invariants::check_history(&history).unwrap();
    let found = history.iter().any(|r| {
        matches!(
            r,
            interlock_machine::Record::Transition {
                event: interlock_machine::Event::ReconcileFoundApplied {
                    as_authorised: true,
                    ..
                },
                ..
            }
        )
    });
    assert!(found, "the reconciled intent's record reads as authorised");
    let moved: i64 = raw(&db)
        .query_row(
            "SELECT count(*) FROM intents WHERE moved_minor IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(moved, 0);
}

/// A commit only appends to the WAL; the ledger's checkpoint thread copies it into the database
/// (issue 21: the automatic checkpoint ran inside one refund's commit in 25–30). The money
/// connection's own automatic checkpoint is a backstop far above what a test writes, so the
/// database file grows past its first page only if the thread ran.
#[test]
fn the_checkpoint_thread_copies_the_wal_into_the_database() {
    use interlock_engine::ledger::checkpoint::{
        CHECKPOINT_EVERY, WAL_AUTOCHECKPOINT_BACKSTOP_PAGES,
    };
    let world = World::on_sqlite();
    let ledger = Ledger::open(&world.db()).unwrap();
    assert_eq!(
        ledger.pragmas().unwrap().wal_autocheckpoint_pages,
        WAL_AUTOCHECKPOINT_BACKSTOP_PAGES
    );
    // A fresh WAL-mode file is one page (its header) until something copies the WAL into it.
    let page: u64 = raw(&world.db())
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap();
    let deadline = std::time::Instant::now() + 300 * CHECKPOINT_EVERY;
    let size = || std::fs::metadata(world.db()).unwrap().len();
    while size() <= page {
        assert!(
            std::time::Instant::now() < deadline,
            "the database is still {} bytes after {:?}: nothing copied the WAL into it",
            size(),
            300 * CHECKPOINT_EVERY
        );
        std::thread::sleep(CHECKPOINT_EVERY / 4);
    }
    drop(ledger);
}
