//! The error-text contract: what a failed tool call says, and which failures the rail did not apply.
//!
//! Every failure is a tool result with `isError: true` and one text block
//! `"<what> failed: <CODE>: <description>"`, e.g.
//! `creating refund failed: BAD_REQUEST_ERROR: The amount must be an integer.`
//! Only [`ErrorCode::BadRequest`] promises that nothing was applied; the 5xx-style codes may or may
//! not have been applied (see the fault profiles).

use std::fmt;

/// The Razorpay error code carried in a failure text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// A definite rejection (HTTP 4xx): the rail did NOT apply the call.
    BadRequest,
    /// An internal failure (HTTP 5xx): the call may or may not have been applied.
    Server,
    /// The rail could not be reached or did not answer in time (HTTP 502/504): unknown outcome.
    Gateway,
}

impl ErrorCode {
    /// The code as it appears in the text (`BAD_REQUEST_ERROR`, `SERVER_ERROR`, `GATEWAY_ERROR`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST_ERROR",
            ErrorCode::Server => "SERVER_ERROR",
            ErrorCode::Gateway => "GATEWAY_ERROR",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure the rail reports to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailError {
    /// The Razorpay error code.
    pub code: ErrorCode,
    /// The human-readable description (Razorpay's `error.description`).
    pub description: String,
}

/// Razorpay's own text for a 5xx.
pub const SERVER_ERROR_TEXT: &str =
    "We are facing some trouble completing your request at the moment. Please try again shortly.";
/// The text of a gateway failure (the `partition` fault).
pub const GATEWAY_ERROR_TEXT: &str = "The upstream gateway did not respond. Please try again.";
/// The text of an unknown entity id, as Razorpay words it.
pub const NO_SUCH_ID_TEXT: &str = "The id provided does not exist";

impl RailError {
    /// A definite rejection: nothing was applied.
    pub fn bad_request(description: impl Into<String>) -> Self {
        RailError {
            code: ErrorCode::BadRequest,
            description: description.into(),
        }
    }

    /// A 5xx with Razorpay's generic text.
    pub fn server() -> Self {
        RailError {
            code: ErrorCode::Server,
            description: SERVER_ERROR_TEXT.to_owned(),
        }
    }

    /// A gateway failure.
    pub fn gateway() -> Self {
        RailError {
            code: ErrorCode::Gateway,
            description: GATEWAY_ERROR_TEXT.to_owned(),
        }
    }

    /// An unknown payment, order, refund or settlement id.
    pub fn no_such_id() -> Self {
        RailError::bad_request(NO_SUCH_ID_TEXT)
    }

    /// The full text of the tool result: `"<what> failed: <CODE>: <description>"`.
    pub fn text(&self, what: &str) -> String {
        format!("{what} failed: {}: {}", self.code, self.description)
    }
}

impl fmt::Display for RailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

impl std::error::Error for RailError {}
