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
//! The check runs twice: when rmcp hands the request over, and again when the spawned write is
//! first polled. A request whose caller has gone (its deadline passed while the process was
//! stopped and the request sat queued) is refused as well: the gate fails closed. What remains
//! unchecked is the transport's own write: waiting for its lock on the pipe (behind another
//! frame, or a full pipe), the encoding and the `write(2)`. No check on this side of the pipe
//! can close that; a rail-side fence (a receipt, an idempotency key) is what does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use interlock_engine::rail::CallBudget;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The `_meta` key that names a money call (its stamp and a number unique in this process), so
/// the transport can find its budget.
pub const SIK_META_KEY: &str = "io.interlock/call";

/// The most money calls armed at once in one process: one per intent in flight.
pub const ARMED_MAX: usize = 4_096;

/// Money calls waiting to be written, by call key, and those refused at the write.
#[derive(Clone, Default)]
pub struct SendGate {
    state: Arc<Mutex<GateState>>,
}

#[derive(Default)]
struct GateState {
    /// Numbers call keys: unique per call in this process, so that two calls of one intent
    /// (a stale attempt still queued, a fresh one armed) never share an entry.
    calls: u64,
    armed: HashMap<String, CallBudget>,
    refused: HashMap<String, String>,
}

impl SendGate {
    /// Arms the check for one call of the intent stamped `sik` until the returned guard is
    /// dropped (also when the call's future is dropped at its deadline). The guard's
    /// [`Armed::key`] goes in the request's `_meta`. `Err` when too many are armed (nothing
    /// was sent).
    pub fn arm(&self, sik: &str, budget: CallBudget) -> Result<Armed, String> {
        let mut state = self.lock();
        if state.armed.len() >= ARMED_MAX {
            return Err(format!(
                "{ARMED_MAX} money calls are already on their way out; nothing was sent"
            ));
        }
        state.calls += 1;
        let key = format!("{sik}#{}", state.calls);
        state.armed.insert(key.clone(), budget);
        Ok(Armed {
            gate: self.clone(),
            key,
        })
    }

    /// The write-time check of a money call by its key. A key that is not armed belongs to a
    /// call whose caller has gone (its deadline passed while the request sat in a queue): it
    /// is refused too, since no one is left to tell what happened to it.
    fn check_key(&self, key: &str) -> Result<(), String> {
        let mut state = self.lock();
        let refused = match state.armed.get(key) {
            Some(budget) => budget.may_send(),
            None => Err(format!(
                "Interlock did not send the call {key}: its caller stopped waiting before it \
                 could be written (the process was held up), nothing was sent"
            )),
        };
        if let Err(why) = &refused
            && state.armed.contains_key(key)
        {
            state.refused.insert(key.to_owned(), why.clone());
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
    key: String,
}

impl Armed {
    /// The call's key, for the request's `_meta` under [`SIK_META_KEY`].
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Why the transport refused to write the call, if it did.
    pub fn refusal(&self) -> Option<String> {
        self.gate.lock().refused.get(&self.key).cloned()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.armed.remove(&self.key);
        state.refused.remove(&self.key);
    }
}

/// The call key of a money call: a `tools/call` request carrying [`SIK_META_KEY`].
fn money_key(message: &ClientJsonRpcMessage) -> Option<String> {
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
        let key = money_key(&item);
        let checked = key
            .as_deref()
            .map_or(Ok(()), |key| self.gate.check_key(key));
        // Made, not yet polled: rmcp's transports write only when their send is polled.
        let sent = checked.map(|()| self.inner.send(item));
        let gate = self.gate.clone();
        async move {
            let sent = sent.map_err(GatedError::Refused)?;
            // rmcp spawns this future: a stall may come between the check above and its
            // first poll. Ask again here, just before the writer is asked for the pipe.
            if let Some(key) = &key {
                gate.check_key(key).map_err(GatedError::Refused)?;
            }
            sent.await.map_err(GatedError::Inner)
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

    fn money_call(key: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("create_instant_settlement");
        if let Some(key) = key {
            let mut meta = RequestMetaObject::new();
            meta.0.insert(SIK_META_KEY.to_owned(), key.into());
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

    fn check(gate: &SendGate, message: &ClientJsonRpcMessage) -> Result<(), String> {
        money_key(message).map_or(Ok(()), |key| gate.check_key(&key))
    }

    #[test]
    fn a_call_past_its_moment_is_refused_at_the_write_and_the_refusal_is_kept() {
        let clock = Arc::new(AtomicU64::new(1_000));
        let gate = SendGate::default();
        let armed = gate.arm("SIK1", budget(&clock, 2_000)).unwrap();
        assert_eq!(check(&gate, &money_call(Some(armed.key()))), Ok(()));
        assert_eq!(armed.refusal(), None);
        clock.store(2_001, Ordering::SeqCst);
        let refused = check(&gate, &money_call(Some(armed.key()))).unwrap_err();
        assert!(refused.contains("1 ms late"), "{refused}");
        assert_eq!(armed.refusal(), Some(refused));
        // Messages that are not money calls pass.
        assert_eq!(check(&gate, &money_call(None)), Ok(()));
    }

    #[test]
    fn a_call_whose_caller_has_gone_is_refused_and_two_calls_of_one_intent_stay_apart() {
        let clock = Arc::new(AtomicU64::new(5_000));
        let gate = SendGate::default();
        let stale = gate.arm("SIK1", budget(&clock, 1_000)).unwrap();
        let fresh = gate.arm("SIK1", budget(&clock, 9_000)).unwrap();
        assert_ne!(stale.key(), fresh.key());
        let stale_call = money_call(Some(stale.key()));
        // The stale attempt is judged by its own budget, not the fresh one's.
        assert!(check(&gate, &stale_call).is_err());
        assert_eq!(fresh.refusal(), None);
        drop(stale);
        // Its caller gone, the stale request still sitting in a queue is refused: fail closed.
        let refused = check(&gate, &stale_call).unwrap_err();
        assert!(refused.contains("caller stopped waiting"), "{refused}");
        assert_eq!(check(&gate, &money_call(Some(fresh.key()))), Ok(()));
        drop(fresh);
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
