//! The stdio frame guard between the agent and rmcp. rmcp drops a line it cannot decode
//! without answering, so a frame that is not JSON, nests deeper than serde_json's recursion
//! limit, is not a JSON-RPC message, or is longer than [`FRAME_BYTES_MAX`] would leave the
//! agent waiting forever. The guard answers each such frame with a JSON-RPC error (`-32700`
//! parse error, `-32600` invalid request) and passes every decodable frame through unchanged.
//! Both directions go through one writer task, so an error frame never interleaves with
//! rmcp's output: stdout stays one JSON-RPC message per line.

use rmcp::model::{ClientJsonRpcMessage, RequestId};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest frame accepted (4 MiB); a longer one is answered `-32600` and skipped.
pub const FRAME_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Buffer of each in-process pipe between the guard and rmcp.
const PIPE_BYTES: usize = 64 * 1024;
/// Error frames waiting for the writer.
const ERRORS_QUEUED_MAX: usize = 64;

/// JSON-RPC: the frame is not JSON (or nests too deep to read).
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the frame is JSON but not a request, notification or response we can read.
pub const INVALID_REQUEST: i64 = -32600;

/// What to do with one frame: pass it to rmcp, answer it with an error, or ignore it.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// A JSON-RPC message rmcp can decode.
    Pass,
    /// Not readable: this error frame answers it.
    Answer(Value),
    /// A blank line.
    Skip,
}

/// Judges one frame (without its newline).
pub fn judge(frame: &[u8]) -> Verdict {
    if frame.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    if frame.len() > FRAME_BYTES_MAX {
        return Verdict::Answer(error(
            Value::Null,
            INVALID_REQUEST,
            format!(
                "frame of {} bytes is over the {FRAME_BYTES_MAX}-byte limit",
                frame.len()
            ),
        ));
    }
    // Decoded from the bytes, as rmcp decodes them: a frame that only reads as a `Value`
    // (a duplicated key, where `Value` keeps the last) would still be dropped by rmcp.
    let message = serde_json::from_slice::<ClientJsonRpcMessage>(frame);
    let value: Value = match serde_json::from_slice(frame) {
        Ok(value) => value,
        Err(e) => {
            return Verdict::Answer(error(Value::Null, PARSE_ERROR, format!("parse error: {e}")));
        }
    };
    match message {
        Ok(_) => Verdict::Pass,
        Err(e) => {
            // Answer with the frame's id when it has a usable one, as JSON-RPC asks. Usable is
            // what a client can read back as a request id (a string or an i64): echoing a float
            // or an integer past i64 would make the answer itself unreadable to it.
            let id = match value.get("id") {
                Some(id) if serde_json::from_value::<RequestId>(id.clone()).is_ok() => id.clone(),
                _ => Value::Null,
            };
            Verdict::Answer(error(id, INVALID_REQUEST, format!("invalid request: {e}")))
        }
    }
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Puts the guard between `input`/`output` (the process's stdin/stdout) and rmcp. Returns the
/// pair rmcp serves on and the writer task, to be awaited after the session ends so the last
/// frames are flushed.
pub fn guard<R, W>(
    input: R,
    output: W,
) -> ((DuplexStream, DuplexStream), tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (errors_tx, errors_rx) = mpsc::channel::<Value>(ERRORS_QUEUED_MAX);
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            let frame = match read_frame(&mut input).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("cannot read stdin: {e}");
                    break;
                }
            };
            match judge(&frame) {
                Verdict::Skip => {}
                Verdict::Pass => {
                    let mut line = frame;
                    line.push(b'\n');
                    if to_rmcp.write_all(&line).await.is_err() {
                        break;
                    }
                }
                Verdict::Answer(answer) => {
                    tracing::warn!(error = %answer["error"]["message"], "unreadable frame answered");
                    if errors_tx.send(answer).await.is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `to_rmcp` tells rmcp the agent has gone.
    });
    let writer = tokio::spawn(write_out(from_rmcp, errors_rx, output));
    ((rmcp_in, rmcp_out), writer)
}

/// One frame up to its newline, bounded: bytes past [`FRAME_BYTES_MAX`] are read and dropped,
/// and the frame comes back one byte over the limit so [`judge`] refuses it. `None` at EOF.
async fn read_frame<R: AsyncBufReadExt + Unpin>(input: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut frame = Vec::new();
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!frame.is_empty()).then_some(frame));
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (&buf[..at], at + 1),
            None => (buf, buf.len()),
        };
        let room = (FRAME_BYTES_MAX + 1).saturating_sub(frame.len());
        frame.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let ended = done > chunk.len();
        input.consume(done);
        if ended {
            return Ok(Some(frame));
        }
    }
}

async fn write_out<W: AsyncWrite + Unpin>(
    from_rmcp: DuplexStream,
    mut errors: mpsc::Receiver<Value>,
    mut output: W,
) {
    let mut lines = BufReader::new(from_rmcp).lines();
    let mut errors_open = true;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => line,
                _ => break,
            },
            answer = errors.recv(), if errors_open => match answer {
                Some(answer) => answer.to_string(),
                None => { errors_open = false; continue; }
            },
        };
        let mut frame = line.into_bytes();
        frame.push(b'\n');
        let written = match output.write_all(&frame).await {
            Ok(()) => output.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            // The agent closed its end: a normal end of a session, not an error. What rmcp
            // still has to say (answers to calls in flight) is read and dropped, so rmcp's
            // own writes succeed and it ends as it does when the agent hangs up cleanly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                tracing::debug!("the agent closed its end; answers still in flight are dropped");
            } else {
                tracing::warn!("cannot write to stdout ({e}); answers still in flight are dropped");
            }
            drop(errors);
            let _ = tokio::io::copy(lines.get_mut(), &mut tokio::io::sink()).await;
            return;
        }
    }
    // Answers to frames read before rmcp stopped still go out.
    while let Ok(answer) = errors.try_recv() {
        let _ = output.write_all(format!("{answer}\n").as_bytes()).await;
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(verdict: Verdict) -> (i64, Value) {
        match verdict {
            Verdict::Answer(v) => (v["error"]["code"].as_i64().unwrap(), v["id"].clone()),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn readable_frames_pass_and_unreadable_ones_are_answered() {
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Pass
        );
        assert_eq!(judge(b"  \r"), Verdict::Skip);
        assert_eq!(code(judge(b"not json")), (PARSE_ERROR, Value::Null));
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"x","arguments":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(code(judge(deep.as_bytes())), (PARSE_ERROR, Value::Null));
        assert_eq!(code(judge(b"123")).0, INVALID_REQUEST);
        // Found by the jsonrpc_frame fuzzer: a duplicated key reads as a Value, not as a message.
        let twice = br#"{"jsonrpc":"2.0","method":"a","id":1,"method":"ping"}"#;
        assert_eq!(code(judge(twice)), (INVALID_REQUEST, json!(1)));
        assert_eq!(
            code(judge(br#"{"jsonrpc":"2.0","id":"a","nethod":"x"}"#)),
            (INVALID_REQUEST, json!("a"))
        );
        // Found by the jsonrpc_frame fuzzer: an id no client can read back as a request id is
        // answered with a null id, so the answer itself stays readable.
        for id in [
            "2.5",
            "2.2222222222222226e+114",
            "18446744073709551615",
            "true",
            "{}",
        ] {
            let frame = format!(r#"{{"jsonrpc":"2.0","id":{id},"nethod":"x"}}"#);
            assert_eq!(
                code(judge(frame.as_bytes())),
                (INVALID_REQUEST, Value::Null),
                "{id}"
            );
        }
        assert_eq!(
            code(judge(br#"{"jsonrpc":"2.0","id":-7,"nethod":"x"}"#)),
            (INVALID_REQUEST, json!(-7))
        );
        let long = vec![b' '; FRAME_BYTES_MAX + 1];
        let mut long = long;
        long[0] = b'{';
        assert_eq!(code(judge(&long)).0, INVALID_REQUEST);
    }

    /// An agent that closes its end while answers are in flight is a normal end: rmcp's own
    /// writes still succeed (they are read and dropped), so it logs no send failure.
    #[tokio::test]
    async fn a_closed_agent_end_does_not_break_rmcps_writes() {
        let (agent_in, _agent_keeps_stdin_open) = tokio::io::duplex(64);
        let (stdout, agent_reads) = tokio::io::duplex(64);
        drop(agent_reads);
        let ((_rmcp_in, mut rmcp_out), writer) = guard(agent_in, stdout);
        let answer = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        // Past the pipe's buffer: only a reader on the other side lets these through.
        for _ in 0..(4 * PIPE_BYTES / answer.len()) {
            rmcp_out
                .write_all(answer)
                .await
                .expect("rmcp's write succeeds after the agent has gone");
        }
        drop(rmcp_out);
        tokio::time::timeout(std::time::Duration::from_secs(5), writer)
            .await
            .expect("the writer ends once rmcp has")
            .expect("the writer does not panic");
    }

    #[tokio::test]
    async fn an_overlong_frame_is_bounded_and_the_next_one_still_read() {
        let mut input = Vec::new();
        input.extend(std::iter::repeat_n(b'x', FRAME_BYTES_MAX + 10_000));
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut reader = BufReader::new(&input[..]);
        let first = read_frame(&mut reader).await.unwrap().unwrap();
        assert_eq!(first.len(), FRAME_BYTES_MAX + 1);
        assert_eq!(
            read_frame(&mut reader).await.unwrap().unwrap(),
            b"{\"a\":1}"
        );
        assert_eq!(read_frame(&mut reader).await.unwrap(), None);
    }
}
