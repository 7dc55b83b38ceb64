//! For programs that run the mock as a process of its own (the demo, the chaos matrix, the
//! benchmark): its command line ([`MockCommand`]) and what `inspect` prints, read back into
//! types ([`inspect`], [`Inspection`]).
//!
//! One definition of both, so a new flag or a change in `inspect`'s output is made here once,
//! and this crate's tests check the reader against the journal's own [`Journal::dump`].
//!
//! [`Journal::dump`]: crate::journal::Journal::dump

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The mock's binary name.
pub const BIN_NAME: &str = "interlock-rail-mock";

/// The command line of a serving `interlock-rail-mock`: the program, then only the flags set.
///
/// ```
/// use interlock_rail_mock::harness::MockCommand;
/// let argv = MockCommand::new("/bin/interlock-rail-mock")
///     .journal("/tmp/rail.db")
///     .seed("demo")
///     .log_level("error")
///     .faults("timeout_after_apply@2")
///     .argv();
/// let argv: Vec<_> = argv.iter().map(|a| a.to_str().unwrap()).collect();
/// assert_eq!(
///     argv,
///     [
///         "/bin/interlock-rail-mock", "--journal", "/tmp/rail.db", "--seed", "demo",
///         "--log-level", "error", "--faults", "timeout_after_apply@2",
///     ]
/// );
/// ```
#[derive(Debug, Clone)]
pub struct MockCommand {
    program: PathBuf,
    journal: Option<PathBuf>,
    seed: Option<OsString>,
    log_level: Option<String>,
    faults: Option<String>,
}

impl MockCommand {
    /// The mock at `program`, with no flags (an in-memory journal, which needs a seed).
    pub fn new(program: impl Into<PathBuf>) -> MockCommand {
        MockCommand {
            program: program.into(),
            journal: None,
            seed: None,
            log_level: None,
            faults: None,
        }
    }

    /// `--journal FILE`: the SQLite journal.
    pub fn journal(mut self, file: impl Into<PathBuf>) -> MockCommand {
        self.journal = Some(file.into());
        self
    }

    /// `--seed FILE|demo`: what an empty journal starts with.
    pub fn seed(mut self, seed: impl Into<OsString>) -> MockCommand {
        self.seed = Some(seed.into());
        self
    }

    /// `--log-level LEVEL` on stderr.
    pub fn log_level(mut self, level: &str) -> MockCommand {
        self.log_level = Some(level.to_owned());
        self
    }

    /// `--faults P[,P...]`; an empty list sets no flag (the mock's default is `none`).
    pub fn faults(mut self, faults: &str) -> MockCommand {
        self.faults = (!faults.is_empty()).then(|| faults.to_owned());
        self
    }

    /// The program and its arguments, e.g. for `interlock serve … -- ARGV`.
    pub fn argv(&self) -> Vec<OsString> {
        let mut argv = vec![self.program.clone().into_os_string()];
        if let Some(journal) = &self.journal {
            argv.extend(["--journal".into(), journal.clone().into_os_string()]);
        }
        if let Some(seed) = &self.seed {
            argv.extend(["--seed".into(), seed.clone()]);
        }
        if let Some(level) = &self.log_level {
            argv.extend(["--log-level".into(), level.into()]);
        }
        if let Some(faults) = &self.faults {
            argv.extend(["--faults".into(), faults.into()]);
        }
        argv
    }

    /// A [`Command`] that runs it (convert with `tokio::process::Command::from` for async).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.argv()[1..]);
        command
    }

    /// Seeds the journal: runs the mock once with stdin closed, so it opens (and seeds) the
    /// journal and exits.
    pub fn run_to_end(&self) -> Result<(), String> {
        let out = self
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} exited with {}: {}",
                self.program.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// `PROGRAM inspect --journal JOURNAL`, run to its end and read: the rail's ground truth.
pub fn inspect(program: &Path, journal: &Path) -> Result<Inspection, String> {
    let out = Command::new(program)
        .arg("inspect")
        .arg("--journal")
        .arg(journal)
        .args(["--log-level", "error"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} inspect: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} inspect --journal {} failed: {}",
            program.display(),
            journal.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Inspection::parse(&out.stdout)
        .map_err(|e| format!("inspect --journal {}: {e}", journal.display()))
}

/// What `inspect` prints: every entity, the balance and the call counters of a journal.
/// Serializes back to the same JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inspection {
    /// The journal's label (its path).
    pub journal: String,
    /// The account's currency.
    pub currency: String,
    /// The settleable balance, in minor units.
    pub balance: u64,
    /// Calls the rail counted, per class.
    pub call_counters: CallCounters,
    /// Payments as the API returns them.
    pub payments: Vec<Value>,
    /// Orders as the API returns them.
    pub orders: Vec<Value>,
    /// Refunds, in commit order.
    pub refunds: Vec<RefundEntry>,
    /// Instant settlements, in commit order.
    pub settlements: Vec<SettlementEntry>,
}

/// The rail's call counters. Field order is `inspect`'s (by name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounters {
    /// List calls (`fetch_all_*`).
    #[serde(default)]
    pub list_calls: u64,
    /// Money calls (`create_refund`, `create_instant_settlement`), applied or not.
    #[serde(default)]
    pub money_calls: u64,
    /// Read calls (`fetch_*` of one entity, the balance).
    #[serde(default)]
    pub read_calls: u64,
}

/// A refund as the API returns it: the fields readers use, and the rest kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundEntry {
    /// `rfnd_…`
    pub id: String,
    /// The payment refunded.
    pub payment_id: String,
    /// The amount refunded, in minor units.
    pub amount: u64,
    /// The rail's fee.
    pub fee: u64,
    /// Tax on the fee.
    pub tax: u64,
    /// The caller's receipt.
    pub receipt: Option<String>,
    /// The caller's notes.
    pub notes: Map<String, Value>,
    /// Every other field (`entity`, `currency`, `status`, `speed_*`, `created_at`).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// An instant settlement as the API returns it: the fields readers use, and the rest kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettlementEntry {
    /// `setlod_…`
    pub id: String,
    /// What was drawn from the balance, in minor units.
    pub amount_requested: u64,
    /// The rail's fee.
    pub fees: u64,
    /// Tax on the fee.
    pub tax: u64,
    /// The caller's description.
    pub description: Option<String>,
    /// The caller's notes.
    pub notes: Map<String, Value>,
    /// Every other field (`entity`, `amount_settled`, `status`, `created_at`, …).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Whether an entity is a refund or an instant settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityKind {
    /// A refund of a payment.
    Refund,
    /// An instant settlement of the balance.
    Settlement,
}

/// A refund or a settlement, seen alike: what moved money, how much, about what.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entity<'a> {
    /// Which of the two.
    pub kind: EntityKind,
    /// The rail's id.
    pub id: &'a str,
    /// A refund's payment; `None` for a settlement (it is about the balance).
    pub payment_id: Option<&'a str>,
    /// The money it moved: a refund's amount, a settlement's amount requested.
    pub amount: u64,
    /// Fee and tax the rail charged for it.
    pub fees: u64,
    /// A refund's receipt; `None` for a settlement.
    pub receipt: Option<&'a str>,
    /// The caller's notes.
    pub notes: &'a Map<String, Value>,
}

impl Entity<'_> {
    /// `notes.KEY` when it is a string.
    pub fn note(&self, key: &str) -> Option<&str> {
        self.notes.get(key).and_then(Value::as_str)
    }
}

impl Inspection {
    /// Reads `inspect`'s JSON text.
    pub fn parse(json: &[u8]) -> Result<Inspection, String> {
        serde_json::from_slice(json).map_err(|e| format!("not inspect's JSON: {e}"))
    }

    /// Refunds, then settlements, each in commit order.
    pub fn entities(&self) -> impl Iterator<Item = Entity<'_>> {
        let refunds = self.refunds.iter().map(|r| Entity {
            kind: EntityKind::Refund,
            id: &r.id,
            payment_id: Some(&r.payment_id),
            amount: r.amount,
            fees: r.fee.saturating_add(r.tax),
            receipt: r.receipt.as_deref(),
            notes: &r.notes,
        });
        let settlements = self.settlements.iter().map(|s| Entity {
            kind: EntityKind::Settlement,
            id: &s.id,
            payment_id: None,
            amount: s.amount_requested,
            fees: s.fees.saturating_add(s.tax),
            receipt: None,
            notes: &s.notes,
        });
        refunds.chain(settlements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Journal, JournalLocation};
    use crate::model::{FeeRates, RefundRequest, SettlementRequest, Speed};
    use crate::seed::Seed;
    use serde_json::json;

    /// The reader and the writer agree: a journal's own dump, with a refund and a settlement
    /// made, reads into the types and serializes back to the same JSON.
    #[test]
    fn the_reader_reads_what_the_journal_dumps() {
        let seed = Seed::load("demo").unwrap();
        let mut journal = Journal::open(&JournalLocation::Memory, Some(&seed)).unwrap();
        let rates = FeeRates::default();
        let mut notes = Map::new();
        notes.insert("k".into(), json!("v"));
        let refund = journal
            .create_refund(
                &RefundRequest {
                    payment_id: "pay_1002".into(),
                    amount: 10_000,
                    speed: Speed::Normal,
                    notes: notes.clone(),
                    receipt: Some("r-1".into()),
                },
                &rates,
            )
            .unwrap();
        let settlement = journal
            .create_settlement(
                &SettlementRequest {
                    amount: 10_000,
                    settle_full_balance: false,
                    description: Some("payout".into()),
                    notes,
                },
                &rates,
            )
            .unwrap();
        let dump = journal.dump().unwrap();
        let read = Inspection::parse(dump.to_string().as_bytes()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), dump);

        let mine: Vec<Entity<'_>> = read.entities().filter(|e| e.id == refund.id).collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].kind, EntityKind::Refund);
        assert_eq!(mine[0].payment_id, Some("pay_1002"));
        assert_eq!(mine[0].amount, 10_000);
        assert_eq!(mine[0].receipt, Some("r-1"));
        assert_eq!(mine[0].note("k"), Some("v"));
        assert_eq!(
            mine[0].fees,
            u64::try_from(refund.fee + refund.tax).unwrap()
        );
        let mine: Vec<Entity<'_>> = read.entities().filter(|e| e.id == settlement.id).collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].kind, EntityKind::Settlement);
        assert_eq!(mine[0].payment_id, None);
        assert_eq!(mine[0].amount, 10_000);
        assert_eq!(
            mine[0].fees,
            u64::try_from(settlement.fees + settlement.tax).unwrap()
        );
    }

    #[test]
    fn unset_flags_are_left_out() {
        let argv = MockCommand::new("mock").faults("").argv();
        assert_eq!(argv, [OsString::from("mock")]);
    }
}
