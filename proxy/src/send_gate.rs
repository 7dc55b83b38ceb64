//! The last check before a money call is written to the upstream (ADR 0003, A2).
//!
//! The driver re-reads its lease before it asks for the call, and the upstream checks the
//! call's [`CallBudget`] again once it holds the session. Between that check and the bytes on
//! the pipe there is still a hop: rmcp's service task takes the request from a queue and hands
//! it to the transport. A process stopped inside that hop (the chaos matrix's `mid_call` stall:
//! SIGSTOP after the request is queued, continued past the lease) would otherwise write a call
//! whose lease another process has already taken back and paid from: a second settlement, which
//! no receipt on the rail stops. So the transport itself asks the budget once more, as the
//! request is handed to the writer, and writes nothing when it is refused.
//!
//! What remains unchecked is the transport's own write: its lock on the pipe, the encoding and
//! the `write(2)`. No check on this side of the pipe can close that; a rail-side fence (a
//! receipt, an idempotency key) is what does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use interlock_engine::rail::CallBudget;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The `_meta` key that names a money call's stamp, so the transport can find its budget.
pub const SIK_META_KEY: &str = "io.interlock/sik";

/// The most money calls armed at once in one process: one per intent in flight.
pub const ARMED_MAX: usize = 4_096;

/// Money calls waiting to be written, by stamp, and those refused at the write.
#[derive(Clone, Default)]
pub struct SendGate {
    state: Arc<Mutex<GateState>>,
}

#[derive(Default)]
struct GateState {
    armed: HashMap<String, CallBudget>,
    refused: HashMap<String, String>,
}

impl SendGate {
    /// Arms the check for the call stamped `sik` until the returned guard is dropped (also
    /// when the call's future is dropped at its deadline). `Err` when too many are armed
    /// (nothing was sent).
    pub fn arm(&self, sik: &str, budget: CallBudget) -> Result<Armed, String> {
        let mut state = self.lock();
        if state.armed.len() >= ARMED_MAX && !state.armed.contains_key(sik) {
            return Err(format!(
                "{ARMED_MAX} money calls are already on their way out; nothing was sent"
            ));
        }
        state.armed.insert(sik.to_owned(), budget);
        state.refused.remove(sik);
        Ok(Armed {
            gate: self.clone(),
            sik: sik.to_owned(),
        })
    }

    /// The write-time check for one outgoing message: `Err(why)` refuses it.
    fn check(&self, message: &ClientJsonRpcMessage) -> Result<(), String> {
        let Some(sik) = money_sik(message) else {
            return Ok(());
        };
        let mut state = self.lock();
        let Some(budget) = state.armed.get(&sik) else {
            return Ok(());
        };
        let refused = budget.may_send();
        if let Err(why) = &refused {
            state.refused.insert(sik, why.clone());
        }
        refused
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // A panic elsewhere while holding it left two plain maps behind: still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One armed money call; disarmed when dropped.
pub struct Armed {
    gate: SendGate,
    sik: String,
}

impl Armed {
    /// Why the transport refused to write the call, if it did.
    pub fn refusal(&self) -> Option<String> {
        self.gate.lock().refused.get(&self.sik).cloned()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.armed.remove(&self.sik);
        state.refused.remove(&self.sik);
    }
}

/// The stamp of a money call: a `tools/call` request carrying [`SIK_META_KEY`].
fn money_sik(message: &ClientJsonRpcMessage) -> Option<String> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return None;
    };
    let meta = call.params.meta.as_ref()?;
    meta.0.get(SIK_META_KEY)?.as_str().map(str::to_owned)
}

/// A transport that asks the [`SendGate`] before it hands a message to `inner`.
pub struct Gated<T> {
    inner: T,
    gate: SendGate,
}

impl<T> Gated<T> {
    /// `inner`, checked by `gate`.
    pub fn new(inner: T, gate: SendGate) -> Gated<T> {
        Gated { inner, gate }
    }
}

/// A message the gate refused, or the inner transport's own failure.
#[derive(Debug)]
pub enum GatedError<E> {
    /// The money call's moment to leave had passed; it was not written.
    Refused(String),
    /// The inner transport failed.
    Inner(E),
}

impl<E: std::fmt::Display> std::fmt::Display for GatedError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatedError::Refused(why) => f.write_str(why),
            GatedError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GatedError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GatedError::Refused(_) => None,
            GatedError::Inner(e) => Some(e),
        }
    }
}

impl<T> Transport<RoleClient> for Gated<T>
where
    T: Transport<RoleClient>,
{
    type Error = GatedError<T::Error>;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = match self.gate.check(&item) {
            Ok(()) => Ok(self.inner.send(item)),
            Err(why) => Err(why),
        };
        async move {
            match sent {
                Ok(sent) => sent.await.map_err(GatedError::Inner),
                Err(why) => Err(GatedError::Refused(why)),
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let closed = self.inner.close();
        async move { closed.await.map_err(GatedError::Inner) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, NumberOrString, RequestMetaObject};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn money_call(sik: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("create_instant_settlement");
        if let Some(sik) = sik {
            let mut meta = RequestMetaObject::new();
            meta.0.insert(SIK_META_KEY.to_owned(), sik.into());
            params.meta = Some(meta);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        JsonRpcMessage::request(request, NumberOrString::Number(1))
    }

    fn budget(clock: &Arc<AtomicU64>, send_by_ms: u64) -> CallBudget {
        let clock = Arc::clone(clock);
        CallBudget::new(
            1_000,
            send_by_ms,
            Arc::new(move || clock.load(Ordering::SeqCst)),
        )
    }

    #[test]
    fn a_call_past_its_moment_is_refused_at_the_write_and_the_refusal_is_kept() {
        let clock = Arc::new(AtomicU64::new(1_000));
        let gate = SendGate::default();
        let armed = gate.arm("SIK1", budget(&clock, 2_000)).unwrap();
        assert_eq!(gate.check(&money_call(Some("SIK1"))), Ok(()));
        assert_eq!(armed.refusal(), None);
        clock.store(2_001, Ordering::SeqCst);
        let refused = gate.check(&money_call(Some("SIK1"))).unwrap_err();
        assert!(refused.contains("1 ms late"), "{refused}");
        assert_eq!(armed.refusal(), Some(refused));
        // Other messages, and calls not armed, pass: the gate only holds back armed calls.
        assert_eq!(gate.check(&money_call(None)), Ok(()));
        assert_eq!(gate.check(&money_call(Some("SIK2"))), Ok(()));
    }

    #[test]
    fn a_dropped_call_is_disarmed() {
        let clock = Arc::new(AtomicU64::new(5_000));
        let gate = SendGate::default();
        let armed = gate.arm("SIK1", budget(&clock, 1_000)).unwrap();
        drop(armed);
        assert_eq!(gate.check(&money_call(Some("SIK1"))), Ok(()));
        assert!(gate.lock().armed.is_empty() && gate.lock().refused.is_empty());
    }

    #[test]
    fn arming_is_bounded() {
        let clock = Arc::new(AtomicU64::new(0));
        let gate = SendGate::default();
        let held: Vec<Armed> = (0..ARMED_MAX)
            .map(|n| gate.arm(&format!("SIK{n}"), budget(&clock, 1)).unwrap())
            .collect();
        let refused = gate.arm("one more", budget(&clock, 1)).err().unwrap();
        assert!(refused.contains("nothing was sent"), "{refused}");
        drop(held);
        assert!(gate.arm("one more", budget(&clock, 1)).is_ok());
    }
}
