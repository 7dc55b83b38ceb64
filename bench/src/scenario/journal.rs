//! The rail's journal, the ground truth of a run: `interlock-rail-mock inspect --journal FILE`
//! read into the entities money moved by, with the stamps Interlock puts on its calls and the
//! notes the harness puts on its own.

use std::path::Path;

use interlock_rail_mock::harness::{self, EntityKind, Inspection};
use interlock_spec::action::STAMP_NOTE_KEY;

use crate::Res;

/// A refund or an instant settlement on the rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The rail's id (`rfnd_…`, `setlod_…`).
    pub id: String,
    /// A refund's payment; `None` for a settlement.
    pub payment_id: Option<String>,
    /// The money it moved: a refund's amount, a settlement's amount requested.
    pub amount: u64,
    /// Fees and tax the rail charged for it.
    pub fees: u64,
    /// `notes.agent_action`: the scenario action that made it, when a harness made it.
    pub agent_action: Option<String>,
    /// Whether it carries Interlock's stamp: `notes.interlock_sik`, and for a refund the
    /// receipt `ilk_` + that SIK.
    pub stamped: bool,
}

/// What the journal holds.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// Refunds and settlements, in commit order.
    pub entities: Vec<Entity>,
    /// Calls the rail counted per class: money, list, read.
    pub money_calls: u64,
    /// List calls.
    pub list_calls: u64,
    /// Read calls.
    pub read_calls: u64,
}

/// Reads `journal` with `mock inspect`.
pub fn inspect(mock: &Path, journal: &Path) -> Res<Journal> {
    Ok(read(&harness::inspect(mock, journal)?))
}

/// The judged view of `inspect`'s output: for each entity, its money, its fees, and whether
/// Interlock made it.
pub fn read(inspection: &Inspection) -> Journal {
    // The receipt Interlock writes, as the built-in profile declares it.
    let profile = interlock_profile::razorpay::profile();
    let prefix = profile
        .receipt()
        .next()
        .map(|r| r.prefix.clone())
        .unwrap_or_default();
    let entities = inspection
        .entities()
        .map(|e| {
            let stamp = e.note(STAMP_NOTE_KEY);
            let receipt_matches =
                stamp.is_some_and(|sik| e.receipt == Some(format!("{prefix}{sik}").as_str()));
            Entity {
                id: e.id.to_owned(),
                payment_id: e.payment_id.map(str::to_owned),
                amount: e.amount,
                fees: e.fees,
                agent_action: e.note("agent_action").map(str::to_owned),
                stamped: stamp.is_some() && (e.kind == EntityKind::Settlement || receipt_matches),
            }
        })
        .collect();
    let counters = inspection.call_counters;
    Journal {
        entities,
        money_calls: counters.money_calls,
        list_calls: counters.list_calls,
        read_calls: counters.read_calls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stamps_and_actions_are_read_from_notes_and_receipts() {
        let inspection: Inspection = serde_json::from_value(json!({
            "journal": "rail.db", "currency": "INR", "balance": 0, "payments": [], "orders": [],
            "call_counters": {"money_calls": 3, "list_calls": 1, "read_calls": 4},
            "refunds": [
                {"id": "rfnd_MOCK0000000001", "payment_id": "pay_1", "amount": 500, "fee": 0, "tax": 0,
                 "receipt": "ilk_ABC", "notes": {"interlock_sik": "ABC", "agent_action": "A-01/task/3"}},
                {"id": "rfnd_MOCK0000000002", "payment_id": "pay_1", "amount": 700, "fee": 10, "tax": 1,
                 "receipt": null, "notes": {"interlock_sik": "XYZ"}}
            ],
            "settlements": [
                {"id": "setlod_MOCK0000000001", "amount_requested": 20000, "fees": 60, "tax": 10,
                 "description": null, "notes": {"interlock_sik": "DEF"}}
            ]
        }))
        .unwrap();
        let journal = read(&inspection);
        let [first, second, settlement] = journal.entities.as_slice() else {
            panic!("three entities");
        };
        assert!(first.stamped && first.agent_action.as_deref() == Some("A-01/task/3"));
        assert!(
            !second.stamped,
            "a refund stamped without the receipt is not ours"
        );
        assert_eq!(second.fees, 11);
        assert!(settlement.stamped && settlement.payment_id.is_none());
        assert_eq!((settlement.amount, settlement.fees), (20000, 70));
        assert_eq!(journal.money_calls, 3);
    }
}
