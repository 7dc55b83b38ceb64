//! The PostgreSQL ledger keeps the promises `ledger.rs` checks on the SQLite file: the audit
//! log refuses changes, a record changed behind its back (triggers dropped by the tables'
//! owner) is found where it was changed, and a schema from a newer Interlock is refused. These
//! run on a real server whatever `INTERLOCK_TEST_BACKEND` says (`interlock-pgtest`).

mod common;

use common::*;
use interlock_engine::ledger::{Backend, LedgerError};
use interlock_engine::{Ledger, Outcome};

/// A world on PostgreSQL with two applied refunds in its ledger.
fn busy_postgres() -> World {
    let mut world = World::on_sqlite();
    world.postgres = Some(interlock_pgtest::fresh_database());
    let engine = world.engine(world.rail(), "p1");
    assert_eq!(engine.ledger().backend(), Backend::Postgres);
    let live = live();
    for payment in ["pay_1002", "pay_2000"] {
        let outcome = engine
            .propose(&refund(payment, 1_000), Some(&live))
            .unwrap();
        assert_eq!(outcome.outcome, Outcome::Applied, "{outcome:#?}");
    }
    world
}

#[test]
fn the_audit_log_refuses_updates_deletes_and_truncate() {
    let world = busy_postgres();
    let raw = world.raw();
    for sql in [
        "UPDATE audit_log SET ts = ts + 1 WHERE seq = 1",
        "DELETE FROM audit_log WHERE seq = 1",
        "TRUNCATE audit_log CASCADE",
    ] {
        let error = raw.execute(sql).unwrap_err();
        assert!(error.contains("append-only"), "{sql}: {error}");
    }
    world
        .open_ledger()
        .verify_chain()
        .expect("the chain is whole");
}

/// Drops the triggers (as the tables' owner can), runs `sql`, and returns the seq the opening
/// verifier says the chain broke at.
fn tamper(world: &World, sql: &str) -> u64 {
    let raw = world.raw();
    raw.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        .unwrap();
    raw.execute(sql).unwrap();
    match Ledger::open_target(&world.target()) {
        Err(LedgerError::ChainBroken { broken, .. }) => broken.seq,
        other => panic!("tampering with {sql:?} was not found: {other:?}"),
    }
}

#[test]
fn a_changed_record_is_found_at_its_seq() {
    let world = busy_postgres();
    let seq = tamper(&world, "UPDATE audit_log SET ts = ts + 1 WHERE seq = 3");
    assert_eq!(seq, 3);
}

#[test]
fn a_deleted_record_is_found_where_it_was() {
    let world = busy_postgres();
    assert_eq!(tamper(&world, "DELETE FROM audit_log WHERE seq = 4"), 4);
}

#[test]
fn a_state_written_behind_the_logs_back_is_found() {
    let world = busy_postgres();
    let raw = world.raw();
    raw.execute("UPDATE intents SET state = 'CONFIRMED_NOT_APPLIED', rail_entity_id = NULL, moved_minor = NULL WHERE sik = (SELECT min(sik) FROM intents)")
        .unwrap();
    match Ledger::open_target(&world.target()) {
        Err(LedgerError::ChainBroken { broken, .. }) => {
            assert!(
                broken.problem.contains("reads CONFIRMED_NOT_APPLIED"),
                "{broken:?}"
            );
        }
        other => panic!("a state edited by hand was not found: {other:?}"),
    }
}

#[test]
fn a_schema_from_a_newer_interlock_is_refused_untouched() {
    let world = busy_postgres();
    world
        .raw()
        .execute("UPDATE interlock_schema SET version = version + 1")
        .unwrap();
    let error = Ledger::open_target(&world.target())
        .unwrap_err()
        .to_string();
    assert!(error.contains("newer Interlock"), "{error}");
    let version: i64 = world
        .raw()
        .query_row("SELECT version FROM interlock_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, interlock_engine::ledger::PG_SCHEMA_VERSION + 1);
}

#[test]
fn a_connection_string_that_is_not_one_is_a_clear_error() {
    let error = Ledger::open_target("postgresql://localhost:notaport/db")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not a PostgreSQL connection string"),
        "{error}"
    );
}
