//! The reconciler's runner: carries out a [`Pass`]'s commands (commit its start, list pages,
//! commit what they prove) and the sweep's lease expiries. The rules (what a page proves, when a
//! pass is due, when a lease may be taken back) are the driver's and the machine's.

use crate::executor::{Engine, EngineError};
use crate::kill_point;
use crate::ledger::IntentKey;
use interlock_driver::{Pass, PassCommand, Rail, Sweep, SweepStep};

pub use interlock_driver::PassResult;

/// Intents one [`Engine::reconcile_due`] call takes on; the rest wait for the next call.
pub const RECONCILE_BATCH_MAX: usize = 64;
/// Commands one pass may take: its start, every page, its conclusion and a fallback.
const PASS_COMMANDS_MAX: u32 = interlock_machine::RECONCILE_PAGES_MAX + 4;

impl<R: Rail> Engine<R> {
    /// Runs what is due: takes back lapsed leases and runs a pass for every intent whose
    /// reconcile is due, at most [`RECONCILE_BATCH_MAX`] intents.
    pub async fn reconcile_due_async(&self) -> Result<Vec<(IntentKey, PassResult)>, EngineError> {
        let now = self.clock.now_ms();
        let keys = self
            .ledger
            .sweep_candidates(now, true, RECONCILE_BATCH_MAX)?;
        let mut results = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(view) = self.ledger.read_intent(&key)? else {
                continue;
            };
            match Sweep::new().next_step(now, &view) {
                SweepStep::ExpireLease(commit) => {
                    // Refused: the holder renewed it or moved on; nothing to take back.
                    let _ = self.ledger.commit(&commit, now)?;
                }
                SweepStep::Reconcile => {
                    let result = self.reconcile_async(&key).await?;
                    results.push((key, result));
                }
                SweepStep::WaitUntil(_) | SweepStep::Nothing => {}
            }
        }
        Ok(results)
    }

    /// [`Engine::reconcile_due_async`] on the calling thread.
    pub fn reconcile_due(&self) -> Result<Vec<(IntentKey, PassResult)>, EngineError> {
        pollster::block_on(self.reconcile_due_async())
    }

    /// One reconcile pass over `key`, if it is due.
    pub async fn reconcile_async(&self, key: &IntentKey) -> Result<PassResult, EngineError> {
        let Some(view) = self.ledger.read_intent(key)? else {
            return Ok(PassResult::NotDue);
        };
        let pass = Pass::start(&self.config, self.clock.now_ms(), &view);
        self.run_pass(pass).await
    }

    /// [`Engine::reconcile_async`] on the calling thread.
    pub fn reconcile(&self, key: &IntentKey) -> Result<PassResult, EngineError> {
        pollster::block_on(self.reconcile_async(key))
    }

    async fn run_pass(&self, mut pass: Pass) -> Result<PassResult, EngineError> {
        for _ in 0..PASS_COMMANDS_MAX {
            let Some(command) = pass.poll_command() else {
                break;
            };
            match command {
                PassCommand::Commit(commit) => {
                    if pass.is_concluding() {
                        // The most dangerous moment of a pass: it has read what it will read
                        // (its proof, or the failure that ends it) and committed nothing.
                        kill_point!("during_reconcile");
                    }
                    let now = self.clock.now_ms();
                    let committed = self.ledger.commit(&commit, now)?;
                    pass.handle_committed(&self.config, now, committed);
                }
                PassCommand::ListPage { query, at } => {
                    let page = self.rail.list_page(&query, at).await;
                    pass.handle_page(page);
                }
                PassCommand::Done(result) => return Ok(result),
            }
        }
        unreachable!("a pass ends within its page bound")
    }
}
