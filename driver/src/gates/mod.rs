//! The gate ladder. Each gate is a pure predicate over an already resolved action
//! ([`GateInput`]): no I/O, no clock, no randomness; the executor gathers everything first (the
//! referent from the rail, the usage from the ledger inside the write transaction, the live
//! tool definition from the proxy) and the gates only judge it.
//!
//! The ladder takes the meet of the verdicts and can never upgrade one. It stops at the first
//! `BLOCK`: nothing after it could change the answer, and the agent hears the first reason.
//! Each gate file stays within 120 lines of code (CI checks the budget).

pub mod limits;
pub mod model;
pub mod payee;
pub mod provenance;
pub mod scope;
pub mod unresolvable;
pub mod value;

use crate::rail::Referent;
use interlock_machine::Verdict;
use interlock_spec::action::ProposedAction;
use interlock_spec::mandate::Mandate;
use interlock_spec::money::{Currency, Minor};
use interlock_spec::reason::ReasonCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use model::{Advice, ModelGate};
pub use provenance::LiveTool;

/// Which gate spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Gate {
    /// G1: scope.
    G1,
    /// G2: value authorisation.
    G2,
    /// G3: limits and velocity.
    G3,
    /// G5: the advisory model gate.
    G5,
    /// G6: provenance of the tool definition.
    G6,
}

/// One gate's judgement: a verdict, a code, and a sentence an agent can act on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GateResult {
    /// The gate.
    pub gate: Gate,
    /// Its verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason_code: ReasonCode,
    /// The same, for a reader, with the numbers involved.
    pub message: String,
}

impl GateResult {
    /// An `ALLOW`.
    pub fn allow(gate: Gate, reason_code: ReasonCode, message: impl Into<String>) -> GateResult {
        GateResult::new(gate, Verdict::Allow, reason_code, message)
    }

    /// A `BLOCK`.
    pub fn block(gate: Gate, reason_code: ReasonCode, message: impl Into<String>) -> GateResult {
        GateResult::new(gate, Verdict::Block, reason_code, message)
    }

    /// Any verdict.
    pub fn new(
        gate: Gate,
        verdict: Verdict,
        reason_code: ReasonCode,
        message: impl Into<String>,
    ) -> GateResult {
        GateResult {
            gate,
            verdict,
            reason_code,
            message: message.into(),
        }
    }
}

/// What the ledger already holds that G2 and G3 count. Read inside the same write transaction
/// that inserts the new intent, so two concurrent proposals cannot both fit into one window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Per mandate window (same order as `limits.windows`): calls and amount already counted.
    pub windows: Vec<WindowUsage>,
    /// Per currency: fees and tax charged within that currency's fee-budget window.
    pub fees: BTreeMap<Currency, Minor>,
    /// On the same subject: the amount of intents authorised or in progress but not yet
    /// applied, which the rail's `amount_refunded` (or balance) does not show yet.
    pub subject_in_progress: Minor,
    /// On the same subject and tool: intents that count as a refund of it (applied or live).
    pub subject_count: u32,
}

/// Calls and amount counted in one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowUsage {
    /// Intents counted.
    pub calls: u32,
    /// Their total amount.
    pub amount: Minor,
}

impl Default for Usage {
    fn default() -> Usage {
        Usage {
            windows: Vec::new(),
            fees: BTreeMap::new(),
            subject_in_progress: Minor::ZERO,
            subject_count: 0,
        }
    }
}

impl Default for WindowUsage {
    fn default() -> WindowUsage {
        WindowUsage {
            calls: 0,
            amount: Minor::ZERO,
        }
    }
}

/// Everything a gate may look at.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The action.
    pub action: &'a ProposedAction,
    /// The mandate in force.
    pub mandate: &'a Mandate,
    /// The time of the decision, passed in.
    pub now_ms: u64,
    /// The wall clock's reading, passed in: G1 judges the mandate's validity by it.
    pub wall_ms: u64,
    /// The referent as the rail reported it, or why it could not be read.
    pub referent: &'a Result<Referent, String>,
    /// What the ledger already counts.
    pub usage: &'a Usage,
    /// The upstream's live definition of the tool, if the caller has it.
    pub live_tool: Option<&'a LiveTool>,
}

/// The ladder's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Ladder {
    /// The meet of every verdict.
    pub verdict: Verdict,
    /// Each gate that ran, in order.
    pub results: Vec<GateResult>,
}

impl Ladder {
    /// The result that decided the verdict: the first one at the verdict's level.
    pub fn deciding(&self) -> &GateResult {
        self.results
            .iter()
            .find(|result| result.verdict == self.verdict)
            .expect("the meet is one of the verdicts")
    }
}

/// The gates that need nothing from the rail (G1, G6): run before the referent is resolved, so
/// a call outside the mandate never reaches the rail at all.
pub fn before_resolve(input: &GateInput<'_>) -> Ladder {
    run(
        [scope::check, payee::check, provenance::check_input],
        input,
        None,
    )
}

/// The whole ladder: G1, G2, G3, G5 (when the model gate's result is given), G6.
///
/// G5's result is computed by the caller with [`model::check`] *before* the write transaction
/// the ladder runs in: a model may be slow, and the ledger's write lock must not wait on it.
/// Being advisory, it can only lower the verdict wherever it was computed.
pub fn ladder(input: &GateInput<'_>, advice: Option<GateResult>) -> Ladder {
    run(
        [
            scope::check,
            payee::check,
            value::check,
            limits::check,
            provenance::check_input,
        ],
        input,
        advice,
    )
}

fn run<const N: usize>(
    gates: [fn(&GateInput<'_>) -> GateResult; N],
    input: &GateInput<'_>,
    mut advice: Option<GateResult>,
) -> Ladder {
    let mut results: Vec<GateResult> = Vec::with_capacity(N + 1);
    for (index, gate) in gates.iter().enumerate() {
        // G5 sits before G6 in the ladder, so it is placed before the last deterministic gate.
        if index + 1 == N
            && let Some(advice) = advice.take()
        {
            assert_eq!(
                advice.gate,
                Gate::G5,
                "only G5 is computed outside the ladder"
            );
            let blocked = advice.verdict == Verdict::Block;
            results.push(advice);
            if blocked {
                break;
            }
        }
        let result = gate(input);
        let blocked = result.verdict == Verdict::Block;
        results.push(result);
        if blocked {
            break;
        }
    }
    let verdict = Verdict::meet_all(results.iter().map(|result| result.verdict));
    Ladder { verdict, results }
}
