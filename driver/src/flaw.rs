//! Planted bugs, for the model checker only (feature `flaws`). Each is a plausible mistake in
//! the driver; the model must catch every one. Without the feature no flaw can be planted.

/// A plausible bug planted in the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// The rail call is sent before the `IN_FLIGHT` row is committed.
    CallBeforeWal,
    /// The sender does not re-read its row and lease just before the call leaves.
    SendWithoutRecheck,
    /// The agent is told APPLIED as soon as the rail answers, before the outcome is durable.
    AnswerBeforeCommit,
    /// A call that timed out is sent again at once (the same attempt, blind).
    ResendAfterTimeout,
    /// A fresh proposal of an `UNKNOWN` intent retries it (`RETRY_AUTHORIZED`) instead of
    /// waiting for reconciliation.
    RetryUnknown,
    /// A fresh proposal of a refused (`FAILED_TERMINAL`) intent reopens it at once.
    ReopenRejected,
    /// A reconcile pass concludes absence from its first page.
    AbsentFromPageOne,
    /// The sweep (boot recovery, the background reconciler) skips `UNKNOWN` intents.
    ForgetUnknown,
    /// The sweep takes a refusal as final and never verifies it against the rail.
    RejectionIsFinal,
    /// A stamped entity is taken as applied without checking its terms against the intent.
    IgnoreTerms,
}
