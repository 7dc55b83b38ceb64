//! The rail's journal, the ground truth of a run: `interlock-rail-mock inspect --journal FILE`
//! read into the entities money moved by, with the stamps Interlock puts on its calls and the
//! notes the harness puts on its own.

use std::path::Path;
use std::process::Command;

use interlock_spec::action::{RECEIPT_PREFIX, STAMP_NOTE_KEY};
use serde_json::Value;

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
    let out = Command::new(mock)
        .arg("inspect")
        .arg("--journal")
        .arg(journal)
        .output()
        .map_err(|e| format!("run {} inspect: {e}", mock.display()))?;
    if !out.status.success() {
        return Err(format!(
            "inspect {}: {}",
            journal.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let value: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("inspect {}: not JSON: {e}", journal.display()))?;
    parse(&value)
}

fn number(value: &Value, field: &str, id: &str) -> Res<u64> {
    value[field]
        .as_u64()
        .ok_or_else(|| format!("journal: {id}.{field} is not a non-negative integer"))
}

fn entity(item: &Value, refund: bool) -> Res<Entity> {
    let id = item["id"]
        .as_str()
        .ok_or("journal: an entity without an id")?
        .to_owned();
    let notes = &item["notes"];
    let stamp = notes[STAMP_NOTE_KEY].as_str();
    let receipt_matches = stamp.is_some_and(|sik| {
        item["receipt"].as_str() == Some(format!("{RECEIPT_PREFIX}{sik}").as_str())
    });
    let (amount, fee) = if refund {
        (number(item, "amount", &id)?, number(item, "fee", &id)?)
    } else {
        (
            number(item, "amount_requested", &id)?,
            number(item, "fees", &id)?,
        )
    };
    Ok(Entity {
        payment_id: item["payment_id"].as_str().map(str::to_owned),
        amount,
        fees: fee + number(item, "tax", &id)?,
        agent_action: notes["agent_action"].as_str().map(str::to_owned),
        stamped: stamp.is_some() && (!refund || receipt_matches),
        id,
    })
}

/// Reads `inspect`'s JSON.
pub fn parse(value: &Value) -> Res<Journal> {
    let mut entities = Vec::new();
    for (list, refund) in [("refunds", true), ("settlements", false)] {
        let items = value[list]
            .as_array()
            .ok_or_else(|| format!("journal: no {list} list"))?;
        for item in items {
            entities.push(entity(item, refund)?);
        }
    }
    let counters = &value["call_counters"];
    Ok(Journal {
        entities,
        money_calls: number(counters, "money_calls", "call_counters")?,
        list_calls: number(counters, "list_calls", "call_counters")?,
        read_calls: number(counters, "read_calls", "call_counters")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stamps_and_actions_are_read_from_notes_and_receipts() {
        let journal = parse(&json!({
            "call_counters": {"money_calls": 3, "list_calls": 1, "read_calls": 4},
            "refunds": [
                {"id": "rfnd_MOCK0000000001", "payment_id": "pay_1", "amount": 500, "fee": 0, "tax": 0,
                 "receipt": "ilk_ABC", "notes": {"interlock_sik": "ABC", "agent_action": "A-01/task/3"}},
                {"id": "rfnd_MOCK0000000002", "payment_id": "pay_1", "amount": 700, "fee": 10, "tax": 1,
                 "receipt": null, "notes": {"interlock_sik": "XYZ"}}
            ],
            "settlements": [
                {"id": "setlod_MOCK0000000001", "amount_requested": 20000, "fees": 60, "tax": 10,
                 "notes": {"interlock_sik": "DEF"}}
            ]
        }))
        .unwrap();
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
