//! G6 provenance: the upstream's live definition of the tool, hashed as
//! [`interlock_spec::hash::tool_definition_sha256`] hashes it, against the mandate's pin. A tool
//! that is unpinned, from another server, or drifted is refused with both hashes named. The
//! proxy calls [`check`] on every call, not only at listing: a pin checked once is a bypass.

use super::{Gate, GateInput, GateResult};
use interlock_spec::ids::ToolName;
use interlock_spec::mandate::{Mandate, TrustTier};
use interlock_spec::reason::ReasonCode;

/// The upstream's live definition of one tool, as the proxy saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LiveTool {
    /// The server's name and version as it reports them (`razorpay-mcp@0.1.0`).
    pub server_id: String,
    /// The definition's hash, or why it has none (a float in its schema).
    pub sha256: Result<String, String>,
}

/// G6 as a ladder step.
pub fn check_input(input: &GateInput<'_>) -> GateResult {
    check(input.mandate, &input.action.tool, input.live_tool)
}

/// Judges one tool's live definition against its pin.
pub fn check(mandate: &Mandate, tool: &ToolName, live: Option<&LiveTool>) -> GateResult {
    let block = |code, message: String| GateResult::block(Gate::G6, code, message);
    let Some(provenance) = &mandate.provenance else {
        return block(
            ReasonCode::ProvenanceMissing,
            format!(
                "mandate {} pins no tool definitions; run `interlock pin`",
                mandate.mandate_id
            ),
        );
    };
    let Some(live) = live else {
        return block(
            ReasonCode::ManifestUnavailable,
            format!(
                "the upstream's definition of {tool} is not available to check against its pin"
            ),
        );
    };
    if live.server_id != provenance.server_id {
        return block(
            ReasonCode::ServerUntrusted,
            format!(
                "the upstream is {:?} but the pins were taken from {:?}",
                live.server_id, provenance.server_id
            ),
        );
    }
    let Some(pin) = provenance.pinned_manifests.get(tool) else {
        let live_hash = live.sha256.as_deref().unwrap_or("(none)");
        return block(
            ReasonCode::ToolUnpinned,
            format!(
                "{tool} has no pin (its live definition hashes to {live_hash}); run `interlock pin`"
            ),
        );
    };
    match pin.trust_tier {
        TrustTier::Pinned => {}
    }
    match &live.sha256 {
        Ok(hash) if *hash == pin.sha256 => GateResult::allow(
            Gate::G6,
            ReasonCode::ProvenanceOk,
            format!("{tool} matches its pin {}", pin.sha256),
        ),
        Ok(hash) => block(
            ReasonCode::ToolDrifted,
            format!(
                "{tool}'s definition drifted: it hashes to {hash}, pinned {}",
                pin.sha256
            ),
        ),
        Err(why) => block(
            ReasonCode::ToolDrifted,
            format!(
                "{tool}'s definition has no hash ({why}); pinned {}",
                pin.sha256
            ),
        ),
    }
}
