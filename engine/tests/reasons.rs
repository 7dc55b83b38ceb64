//! Every reason code is produced by a real proposal here, and its sentence names the numbers an
//! agent needs to act on it. The last assertion fails if a code exists that nothing produces
//! (the proxy's own codes, `ReasonCode::PROXY`, are the proxy tests' to produce).

mod common;

use common::*;
use interlock_engine::gates::{Advice, GateInput, LiveTool, ModelGate};
use interlock_engine::memory_rail::{ExecFault, MemoryRail};
use interlock_engine::{Answer, Engine, IntentKey, ManualClock, Outcome};
use interlock_machine::AdvisoryVerdict;
use interlock_spec::action::ActionKind;
use interlock_spec::ids::MerchantId;
use interlock_spec::mandate::Mandate;
use interlock_spec::reason::ReasonCode;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

struct Seen(BTreeSet<ReasonCode>);

impl Seen {
    fn note(&mut self, answer: &Answer) {
        self.0.insert(answer.reason_code);
        self.0.extend(answer.gates.iter().map(|g| g.reason_code));
    }

    /// Proposes, records every code the answer carries, and checks the deciding one.
    fn expect(
        &mut self,
        engine: &Engine<MemoryRail>,
        action: &interlock_spec::action::ProposedAction,
        live_tool: Option<&LiveTool>,
        code: ReasonCode,
        words: &[&str],
    ) -> Answer {
        let answer = engine.propose(action, live_tool).unwrap();
        self.note(&answer);
        assert_eq!(answer.reason_code, code, "{answer:#?}");
        for word in words {
            assert!(
                answer.message.contains(word),
                "{:?} lacks {word:?}",
                answer.message
            );
        }
        answer
    }
}

fn with(yaml_edit: impl Fn(String) -> String) -> Mandate {
    Mandate::parse_yaml(&yaml_edit(mandate_yaml())).expect("the edited mandate validates")
}

struct Objector(Option<AdvisoryVerdict>);

impl ModelGate for Objector {
    fn name(&self) -> &str {
        "test-model"
    }
    fn evaluate(&self, _: &GateInput<'_>) -> Option<Advice> {
        self.0.map(|verdict| Advice {
            verdict,
            reason: "the purpose says duplicates only".to_owned(),
        })
    }
}

#[test]
fn every_reason_code_is_produced_with_its_numbers() {
    let mut seen = Seen(BTreeSet::new());
    let live = live();
    let l = Some(&live);

    // G1, G2 (bounds and referents), G6 pass; the engine applies; a duplicate replays.
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    seen.expect(
        &engine,
        &refund("pay_1002", 50_000),
        l,
        ReasonCode::Applied,
        &["rfnd_"],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 50_000),
        l,
        ReasonCode::IdempotentReplay,
        &["rfnd_"],
    );
    let mut other = refund("pay_1002", 100);
    other.merchant_id = MerchantId::parse("acc_OTHER").unwrap();
    seen.expect(
        &engine,
        &other,
        l,
        ReasonCode::MerchantMismatch,
        &["acc_OTHER", "acc_TEST"],
    );
    let mut agent = refund("pay_1002", 100);
    agent.agent_id = interlock_spec::ids::AgentId::parse("agent_rogue").unwrap();
    seen.expect(
        &engine,
        &agent,
        l,
        ReasonCode::AgentMismatch,
        &["agent_rogue", "agent_test"],
    );
    let payout = parse(
        ActionKind::Refund,
        "create_payout",
        json!({"payment_id": "pay_1002", "amount": 100}),
    );
    seen.expect(
        &engine,
        &payout,
        l,
        ReasonCode::ToolNotGranted,
        &["create_payout", "create_refund"],
    );
    seen.expect(
        &engine,
        &refund("pay_2000", 600_000),
        l,
        ReasonCode::AmountAboveCeiling,
        &["600000", "500000"],
    );
    seen.expect(
        &engine,
        &refund("pay_2000", 50),
        l,
        ReasonCode::AmountBelowMinimum,
        &["50 ", "100"],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 250_000),
        l,
        ReasonCode::RefundExceedsRefundable,
        &[
            "250000 exceeds the 139900 still refundable on pay_1002",
            "189900 captured, 50000 refunded",
        ],
    );
    engine
        .rail()
        .add_payment("pay_3000", 100_000, 0, Some(50_000));
    seen.expect(
        &engine,
        &refund("pay_3000", 60_000),
        l,
        ReasonCode::RefundExceedsOrderPaid,
        &["60000", "50000", "order_3000"],
    );
    engine.rail().add_payment("pay_4000", 100_000, 0, None);
    engine.rail().uncapture("pay_4000");
    seen.expect(
        &engine,
        &refund("pay_4000", 1_000),
        l,
        ReasonCode::PaymentNotCaptured,
        &["pay_4000"],
    );
    seen.expect(
        &engine,
        &settlement(1_200_000),
        l,
        ReasonCode::AmountAboveCeiling,
        &["1200000", "1000000"],
    );
    seen.expect(
        &engine,
        &settlement(600_000),
        l,
        ReasonCode::SettlementExceedsBalance,
        &["600000 exceeds the 500000 INR settleable balance"],
    );
    // G6: unavailable, foreign server, drifted.
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        None,
        ReasonCode::ManifestUnavailable,
        &["create_refund"],
    );
    let foreign = LiveTool {
        server_id: "evil-mcp@6.6.6".to_owned(),
        sha256: Ok(PIN.to_owned()),
    };
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        Some(&foreign),
        ReasonCode::ServerUntrusted,
        &["evil-mcp@6.6.6", SERVER],
    );
    let drifted_hash = "ff".repeat(32);
    let drifted = LiveTool {
        server_id: SERVER.to_owned(),
        sha256: Ok(drifted_hash.clone()),
    };
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        Some(&drifted),
        ReasonCode::ToolDrifted,
        &[&drifted_hash, PIN],
    );
    // G3: at most three refunds of one payment, however split.
    for reason in ["a", "b"] {
        let action = refund_args(
            json!({"payment_id": "pay_2000", "amount": 1_000, "interlock_distinct_reason": reason}),
        );
        seen.expect(&engine, &action, l, ReasonCode::Applied, &[]);
    }
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        l,
        ReasonCode::Applied,
        &[],
    );
    seen.expect(
        &engine,
        &refund("pay_2000", 2_000),
        l,
        ReasonCode::RefundsPerPaymentExceeded,
        &["pay_2000", "3 refunds", "allows 3"],
    );
    // A refused action was never an intent, so asking again is judged again, not replayed.
    seen.expect(
        &engine,
        &refund("pay_2000", 2_000),
        l,
        ReasonCode::RefundsPerPaymentExceeded,
        &[],
    );

    // Validity windows.
    let early = World {
        clock: Arc::new(ManualClock::new(1_600_000_000_000)),
        ..World::new()
    };
    let engine = early.engine(early.rail(), "p1");
    seen.expect(
        &engine,
        &refund("pay_1002", 100),
        l,
        ReasonCode::MandateNotYetValid,
        &["1700000000000", "1600000000000"],
    );
    early.clock.advance(300_000_000_000);
    seen.expect(
        &engine,
        &refund("pay_1002", 100),
        l,
        ReasonCode::MandateExpired,
        &["1800000000000", "1900000000000"],
    );

    // Currencies, windows, fees, provenance and unresolvable referents under edited mandates.
    let world = World::new();
    let usd = with(|y| y.replacen("currencies: [INR]}", "currencies: [USD]}", 1));
    let engine = world.engine_with(world.rail(), "p1", usd);
    seen.expect(
        &engine,
        &refund("pay_1002", 100),
        l,
        ReasonCode::CurrencyNotAllowed,
        &["INR", "USD"],
    );

    let world = World::new();
    let calls = with(|y| y.replace("max_calls: 40", "max_calls: 2"));
    let engine = world.engine_with(world.rail(), "p1", calls);
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        l,
        ReasonCode::Applied,
        &[],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::Applied,
        &[],
    );
    seen.expect(
        &engine,
        &refund("pay_2000", 3_000),
        l,
        ReasonCode::WindowCallsExceeded,
        &["call 3", "allows 2", "2 already counted"],
    );
    world.clock.advance(86_400_000);
    seen.expect(
        &engine,
        &refund("pay_2000", 3_000),
        l,
        ReasonCode::Applied,
        &[],
    );

    let world = World::new();
    let amount = with(|y| y.replace("max_amount_minor: 2000000", "max_amount_minor: 100000"));
    let engine = world.engine_with(world.rail(), "p1", amount);
    seen.expect(
        &engine,
        &refund("pay_2000", 60_000),
        l,
        ReasonCode::Applied,
        &[],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 60_000),
        l,
        ReasonCode::WindowAmountExceeded,
        &["120000", "100000", "60000 already counted"],
    );

    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    engine.rail().set_fee_bps(500); // 5%: 25000 fee + 4500 tax on a 500000 refund
    seen.expect(
        &engine,
        &refund("pay_2000", 500_000),
        l,
        ReasonCode::Applied,
        &[],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::FeeBudgetExhausted,
        &["29500", "20000"],
    );

    let world = World::new();
    let unpinned = with(|y| {
        let start = y.find("    create_instant_settlement: {sha256").unwrap();
        let mut y = y.clone();
        y.replace_range(start.., "");
        y
    });
    let engine = world.engine_with(world.rail(), "p1", unpinned);
    seen.expect(
        &engine,
        &settlement(1_000),
        l,
        ReasonCode::ToolUnpinned,
        &["create_instant_settlement", PIN],
    );

    let world = World::new();
    let bare = with(|y| y[..y.find("provenance:").unwrap()].to_owned());
    let engine = world.engine_with(world.rail(), "p1", bare);
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::ProvenanceMissing,
        &["mnd_test", "interlock pin"],
    );

    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    engine.rail().fail_resolves(1);
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::ReferentUnresolvableBlocked,
        &["GATEWAY_ERROR"],
    );

    // A hold, its replay, a rejection, and the replay of the rejection.
    let world = World::new();
    let hold = with(|y| {
        y.replacen(
            "max_refunds_per_payment: 3",
            "max_refunds_per_payment: 3\n      on_unresolvable: hold",
            1,
        )
    });
    let engine = world.engine_with(world.rail(), "p1", hold);
    engine.rail().fail_resolves(1);
    let held = seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::ReferentUnresolvableHeld,
        &["held for a human"],
    );
    assert_eq!(held.outcome, Outcome::Held);
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::AwaitingApproval,
        &[],
    );
    let key = IntentKey {
        merchant_id: MerchantId::parse("acc_TEST").unwrap(),
        sik: held.sik.unwrap(),
    };
    engine
        .reject(&key, "ops@example", "customer was already paid")
        .unwrap();
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::PreviouslyBlocked,
        &["customer was already paid"],
    );

    // The advisory gate: silent, hold, block.
    for (verdict, code) in [
        (None, ReasonCode::Applied),
        (Some(AdvisoryVerdict::Hold), ReasonCode::ModelHeld),
        (Some(AdvisoryVerdict::Block), ReasonCode::ModelBlocked),
    ] {
        let world = World::new();
        let engine = world
            .engine(world.rail(), "p1")
            .with_model_gate(Box::new(Objector(verdict)));
        let answer = seen.expect(&engine, &refund("pay_1002", 1_000), l, code, &[]);
        if verdict.is_some() {
            assert!(
                answer
                    .message
                    .contains("test-model objected: the purpose says duplicates only")
            );
        }
    }
    assert!(seen.0.contains(&ReasonCode::ModelSilent));

    // The engine's own answers: unknown, in progress, rejected, quarantined, attempt limit.
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    engine.rail().script([ExecFault::TimeoutAfterApply]);
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::OutcomeUnknown,
        &["timed out", "reconciling"],
    );
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::InProgress,
        &["UNKNOWN"],
    );
    engine.rail().script([ExecFault::Reject]);
    seen.expect(
        &engine,
        &refund("pay_2000", 1_000),
        l,
        ReasonCode::RailRejected,
        &["BAD_REQUEST_ERROR"],
    );
    engine.rail().fail_lists(u32::MAX);
    engine.recover().unwrap();
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::Quarantined,
        &["operator"],
    );
    engine.rail().script([ExecFault::MovesOneMore]);
    seen.expect(
        &engine,
        &refund("pay_2000", 2_000),
        l,
        ReasonCode::RailTermsDiffer,
        &["amount 2001", "2000 INR was authorised", "operator"],
    );

    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    engine
        .rail()
        .script(std::iter::repeat_n(ExecFault::ServerErrorNotApplied, 8));
    for _ in 0..8 {
        seen.expect(
            &engine,
            &refund("pay_1002", 1_000),
            l,
            ReasonCode::OutcomeUnknown,
            &[],
        );
        world.clock.advance(2_000);
        engine.reconcile_due().unwrap();
    }
    seen.expect(
        &engine,
        &refund("pay_1002", 1_000),
        l,
        ReasonCode::AttemptLimitReached,
        &["8 attempts"],
    );
    assert_eq!(engine.rail().executed().len(), 8);
    assert!(engine.rail().entities().is_empty());
    assert_all_invariants(&world, engine.ledger(), engine.rail());

    payees(&mut seen, l);

    // The proxy's own codes are produced by the proxy's tests (`proxy/tests/e2e.rs`, the Python
    // client's `proxy/tests/python/e2e.py`), never by the engine.
    let from_engine: Vec<&str> = ReasonCode::PROXY
        .iter()
        .filter(|code| seen.0.contains(code))
        .map(|code| code.as_str())
        .collect();
    assert!(
        from_engine.is_empty(),
        "the engine produced {from_engine:?}"
    );
    let missing: Vec<&str> = ReasonCode::ALL
        .iter()
        .filter(|code| !seen.0.contains(code) && !ReasonCode::PROXY.contains(code))
        .map(|code| code.as_str())
        .collect();
    assert!(missing.is_empty(), "no test produces {missing:?}");
}

/// A merchant's two budgets: refunds have their own window and instant settlements theirs (one a
/// day). The second settlement is refused by the settlements' window while refunds, which it
/// does not count, go on; and the refunds' window does not count the settlement.
#[test]
fn a_window_scoped_to_a_tool_counts_only_that_tool() {
    let scoped = with(|y| {
        y.replace(
            "    - {window_ms: 86400000, max_calls: 40, max_amount_minor: 2000000, currency: INR}",
            "    - {window_ms: 86400000, max_calls: 2, max_amount_minor: 2000000, currency: INR, tools: [create_refund]}\n    \
             - {window_ms: 86400000, max_calls: 1, max_amount_minor: 1000000, currency: INR, tools: [create_instant_settlement]}",
        )
    });
    assert_eq!(scoped.limits.windows.len(), 2, "the edit applied");
    let world = World::new();
    let engine = world.engine_with(world.rail(), "p1", scoped);
    let live = live();
    let propose = |action| engine.propose(&action, Some(&live)).unwrap();

    let first = propose(settlement(100_000));
    assert_eq!(first.reason_code, ReasonCode::Applied, "{first:#?}");
    let refund_one = propose(refund("pay_2000", 1_000));
    assert_eq!(
        refund_one.reason_code,
        ReasonCode::Applied,
        "{refund_one:#?}"
    );
    let second = propose(settlement(50_000));
    assert_eq!(second.reason_code, ReasonCode::WindowCallsExceeded);
    assert!(
        second
            .message
            .contains("call 2 of create_instant_settlement")
            && second.message.contains("allows 1"),
        "{}",
        second.message
    );
    // The refunds' window has counted one call, not two: a second refund still fits.
    let refund_two = propose(refund("pay_1002", 1_000));
    assert_eq!(
        refund_two.reason_code,
        ReasonCode::Applied,
        "{refund_two:#?}"
    );
    let refund_three = propose(refund("pay_1002", 2_000));
    assert_eq!(refund_three.reason_code, ReasonCode::WindowCallsExceeded);
    assert!(
        refund_three.message.contains("call 3 of create_refund"),
        "{}",
        refund_three.message
    );
    // A day later both windows have emptied.
    world.clock.advance(86_400_000);
    let next_day = propose(settlement(50_000));
    assert_eq!(next_day.reason_code, ReasonCode::Applied, "{next_day:#?}");
    assert_eq!(engine.rail().rail_entities().len(), 4);
}

/// G1's payee rules on a bank's tools: a transfer to a payee on the list is applied, one to
/// anyone else is refused before the rail is read, and an update may neither redirect a
/// scheduled transfer (this grant forbids it) nor keep an amount it cannot read.
fn payees(seen: &mut Seen, l: Option<&LiveTool>) {
    let world = World::new();
    let mandate = Mandate::parse_yaml(&bank_mandate_yaml()).expect("the bank mandate validates");
    bank_profile()
        .check_mandate(&mandate)
        .expect("and suits the bank profile");
    let engine = world.engine_with(world.rail(), "p-bank", mandate);
    engine
        .rail()
        .add_scheduled("7", 50_000, "DE89370400440532013000");
    let pay =
        |to: &str, amount: u64| bank_call("send_money", json!({"recipient": to, "amount": amount}));
    let answer = seen.expect(
        &engine,
        &pay("de89 3704 0044 0532 0130 00", 1_000),
        l,
        ReasonCode::Applied,
        &["trf_"],
    );
    assert!(
        answer
            .gates
            .iter()
            .any(|g| g.reason_code == ReasonCode::PayeeOk)
    );
    seen.expect(
        &engine,
        &pay("US133000000121212121212", 1),
        l,
        ReasonCode::PayeeNotAllowed,
        &["US133000000121212121212", "DE89 3704 0044 0532 0130 00"],
    );
    let redirect = bank_call(
        "update_scheduled_transaction",
        json!({"id": 7, "recipient": "Landlord"}),
    );
    seen.expect(
        &engine,
        &redirect,
        l,
        ReasonCode::RecipientChangeForbidden,
        &["scheduled transfer 7", "DE89370400440532013000", "Landlord"],
    );
    // An update that keeps its amount is judged, keyed and ledgered at the 50000 the rail says
    // the scheduled transfer has, never at zero.
    let keep = bank_call(
        "update_scheduled_transaction",
        json!({"id": 7, "recipient": "DE89370400440532013000"}),
    );
    let answer = seen.expect(&engine, &keep, l, ReasonCode::Applied, &["sched_"]);
    assert!(
        answer
            .gates
            .iter()
            .any(|g| g.reason_code == ReasonCode::ValueOk && g.message.contains("50000"))
    );
    assert!(engine.rail().entities().iter().all(|e| e.amount.get() != 0));
}

/// A clock whose ledger time lags its wall clock (a boot anchored before NTP set the clock).
struct Lagging(u64, u64);

impl interlock_engine::Clock for Lagging {
    fn now_ms(&self) -> u64 {
        self.0
    }
    fn wall_ms(&self) -> u64 {
        self.1
    }
    fn sleep_ms(
        &self,
        _ms: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

#[test]
fn a_mandates_validity_is_judged_by_the_wall_clock_not_ledger_time() {
    let world = World::new();
    let issued_at = interlock_spec::mandate::template::ISSUED_AT;
    let judge = |ledger_ms: u64, wall_ms: u64| {
        let dir = tempfile::tempdir().unwrap();
        let ledger = interlock_engine::Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let engine = Engine::new(
            ledger,
            world.rail(),
            Arc::new(Lagging(ledger_ms, wall_ms)),
            mandate(),
            interlock_engine::EngineConfig::new("p1"),
        )
        .unwrap();
        engine
            .propose(&refund("pay_1002", 1_000), Some(&live()))
            .unwrap()
            .reason_code
    };
    // Ledger time a minute before the mandate was issued, the wall clock after: in force.
    assert_eq!(judge(issued_at - 60_000, T0), ReasonCode::Applied);
    // The wall clock before it was issued, whatever ledger time says: not yet valid.
    assert_eq!(
        judge(T0, issued_at - 60_000),
        ReasonCode::MandateNotYetValid
    );
}
