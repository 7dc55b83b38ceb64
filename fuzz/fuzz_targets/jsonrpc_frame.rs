//! Arbitrary lines into the proxy's frame guard (`interlock::frames`), the first layer of its
//! request handling, in process. Never a panic; every frame is either passed to rmcp unchanged
//! (and rmcp can decode it), answered with exactly one JSON-RPC error frame, or blank; and what
//! the guard writes to stdout is nothing but JSON-RPC, one message per line.
//!
//! Scope: rmcp and the ProxyServer behind the guard are not driven here (that needs an
//! in-process upstream and ledger per run); the end-to-end test `nothing_but_json_rpc_is_written_to_stdout`
//! covers the whole stack with hostile frames.
#![no_main]

use std::sync::OnceLock;

use interlock::frames::{self, Verdict};
use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::io::AsyncReadExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let mut passed = Vec::new();
    let mut answers = 0usize;
    for frame in data.split(|b| *b == b'\n') {
        match frames::judge(frame) {
            Verdict::Pass => {
                assert!(serde_json::from_slice::<ClientJsonRpcMessage>(frame).is_ok());
                passed.extend_from_slice(frame);
                passed.push(b'\n');
            }
            Verdict::Answer(answer) => {
                let code = answer["error"]["code"].as_i64();
                assert!(code == Some(frames::PARSE_ERROR) || code == Some(frames::INVALID_REQUEST));
                answers += 1;
            }
            Verdict::Skip => assert!(frame.iter().all(u8::is_ascii_whitespace)),
        }
    }
    let input = std::io::Cursor::new(data.to_vec());
    let (stdout, mut read_stdout) = tokio::io::duplex(64 * 1024);
    let (to_rmcp_seen, written) = runtime().block_on(async move {
        let ((mut rmcp_in, rmcp_out), writer) = frames::guard(input, stdout);
        // Stands in for rmcp: reads what the guard passes, writes nothing, closes at EOF.
        let rmcp = tokio::spawn(async move {
            let mut seen = Vec::new();
            rmcp_in
                .read_to_end(&mut seen)
                .await
                .expect("read the passed frames");
            drop(rmcp_out);
            seen
        });
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            read_stdout
                .read_to_end(&mut out)
                .await
                .expect("read stdout");
            out
        });
        let seen = rmcp.await.expect("rmcp stand-in");
        writer.await.expect("writer");
        (seen, reader.await.expect("stdout reader"))
    });
    assert_eq!(
        to_rmcp_seen, passed,
        "frames reach rmcp unchanged and in order"
    );
    let written = String::from_utf8(written).expect("stdout is UTF-8");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), answers, "one answer per unreadable frame");
    for line in lines {
        let value: Value = serde_json::from_str(line).expect("stdout is JSON");
        assert_eq!(value["jsonrpc"], "2.0");
        assert!(
            serde_json::from_str::<ServerJsonRpcMessage>(line).is_ok(),
            "{line}"
        );
    }
});
