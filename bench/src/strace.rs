//! What a proxy did to its ledger and its upstream, read from `strace -f -y -s STRING_BYTES`
//! output: syncs of the ledger's files (and which of them its checkpoint thread made), bytes
//! written to its WAL, and JSON-RPC requests sent upstream. Only what the figures need is
//! parsed; a line that does not parse counts as nothing.

use std::collections::HashMap;

/// The syscalls traced, as `strace -e trace=` takes them. `prctl` names the threads (Rust's
/// `std::thread::Builder::name` sets `PR_SET_NAME` from the new thread itself).
pub const TRACED: &str = "trace=fsync,fdatasync,write,pwrite64,writev,pwritev,prctl";
/// The name of the ledger's checkpoint thread as the kernel keeps it: its first 15 bytes of
/// `ledger-checkpoint` (`engine/src/ledger/checkpoint.rs`).
pub const CHECKPOINT_THREAD: &str = "ledger-checkpoi";
/// `strace -s`: how much of each written buffer is printed; a request's `"method"` comes
/// within its first hundred bytes.
pub const STRING_BYTES: &str = "256";

/// Counts over a set of trace lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traced {
    /// `fsync` and `fdatasync` of a file named `ledger.db*`.
    pub ledger_syncs: u64,
    /// Of `ledger_syncs`, those made by the ledger's checkpoint thread, off the money path.
    /// The rest are the money path's commits (and, after a checkpoint emptied the WAL, the
    /// sync of the new WAL's header by the commit that restarts it).
    pub checkpoint_syncs: u64,
    /// Bytes asked to be written to `ledger.db-wal`.
    pub wal_bytes: u64,
    /// JSON-RPC requests (a `method` and an `id`) written to a pipe other than stdout and
    /// stderr: the proxy's requests to its upstream.
    pub upstream_requests: u64,
}

impl Traced {
    /// Counts of every line of `text`.
    pub fn of(text: &str) -> Traced {
        let mut t = Traced::default();
        // Thread id → whether it is the checkpoint thread, as its latest name says.
        let mut checkpointers: HashMap<u32, bool> = HashMap::new();
        for line in text.lines() {
            if let Some((tid, name)) = thread_named(line) {
                checkpointers.insert(tid, name == CHECKPOINT_THREAD);
                continue;
            }
            let by_checkpointer = thread_of(line)
                .and_then(|tid| checkpointers.get(&tid).copied())
                .unwrap_or(false);
            t.add(line, by_checkpointer);
        }
        t
    }

    fn add(&mut self, line: &str, by_checkpointer: bool) {
        let Some((call, fd, rest)) = call_of(line) else {
            return;
        };
        match call {
            "fsync" | "fdatasync" if fd.path.contains("/ledger.db") => {
                self.ledger_syncs += 1;
                self.checkpoint_syncs += u64::from(by_checkpointer);
            }
            "write" | "pwrite64" | "writev" | "pwritev" => {
                if fd.path.ends_with("/ledger.db-wal") {
                    self.wal_bytes += written_bytes(call, rest).unwrap_or(0);
                } else if fd.number > 2
                    && fd.path.starts_with("pipe:")
                    && rest.contains(r#"\"method\":\""#)
                    && rest.contains(r#"\"id\":"#)
                {
                    self.upstream_requests += 1;
                }
            }
            _ => {}
        }
    }

    /// What `self` counted beyond `earlier` (counts only grow between two reads of a trace).
    pub fn since(self, earlier: Traced) -> Traced {
        Traced {
            ledger_syncs: self.ledger_syncs.saturating_sub(earlier.ledger_syncs),
            checkpoint_syncs: self
                .checkpoint_syncs
                .saturating_sub(earlier.checkpoint_syncs),
            wal_bytes: self.wal_bytes.saturating_sub(earlier.wal_bytes),
            upstream_requests: self
                .upstream_requests
                .saturating_sub(earlier.upstream_requests),
        }
    }

    /// The sum of two counts.
    pub fn plus(self, other: Traced) -> Traced {
        Traced {
            ledger_syncs: self.ledger_syncs + other.ledger_syncs,
            checkpoint_syncs: self.checkpoint_syncs + other.checkpoint_syncs,
            wal_bytes: self.wal_bytes + other.wal_bytes,
            upstream_requests: self.upstream_requests + other.upstream_requests,
        }
    }
}

/// The thread a line is about: `strace -f -o` starts each line with its id (`812 fsync(…`),
/// strace on a terminal with `[pid 812] `.
fn thread_of(line: &str) -> Option<u32> {
    let line = line.strip_prefix("[pid").unwrap_or(line).trim_start();
    let digits: &str = line.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// `812 prctl(PR_SET_NAME, "name"...) = 0`: thread 812 is named `name` from now on. strace
/// prints the name with `...` (the kernel's 16 bytes), and a call another thread interrupted
/// as `<unfinished ...>`, its result on a later line: only a printed failure is refused.
fn thread_named(line: &str) -> Option<(u32, &str)> {
    let (_, after) = line.split_once("prctl(PR_SET_NAME, \"")?;
    let (name, result) = after.split_once('"')?;
    (!result.contains("= -1")).then_some(())?;
    Some((thread_of(line)?, name))
}

/// A file descriptor as `strace -y` prints it: `5</tmp/x/ledger.db-wal>`.
struct Fd<'a> {
    number: u32,
    path: &'a str,
}

/// `PID call(FD<path>, rest…`: the call's name, its first argument, and what follows it.
fn call_of(line: &str) -> Option<(&str, Fd<'_>, &str)> {
    let open = line.find('(')?;
    let call = line[..open].rsplit(' ').next()?;
    let args = &line[open + 1..];
    let lt = args.find('<')?;
    let number = args[..lt].parse().ok()?;
    let gt = args.find('>')?;
    let path = args.get(lt + 1..gt)?;
    Some((call, Fd { number, path }, &args[gt + 1..]))
}

/// The byte count asked of a write: the argument after the buffer (`write`, `pwrite64`); for
/// the vectored calls, the sum of the `iov_len`s printed.
fn written_bytes(call: &str, rest: &str) -> Option<u64> {
    if call.ends_with('v') {
        let mut sum = 0;
        let mut from = rest;
        while let Some(at) = from.find("iov_len=") {
            let digits: String = from[at + 8..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            sum += digits.parse::<u64>().ok()?;
            from = &from[at + 8..];
        }
        return Some(sum);
    }
    let after = after_string(rest)?;
    let after = after.strip_prefix("...").unwrap_or(after);
    let digits: String = after
        .strip_prefix(", ")?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// What follows the first quoted string of `rest` (strace escapes `"` and `\` inside it).
fn after_string(rest: &str) -> Option<&str> {
    let start = rest.find('"')? + 1;
    let mut escaped = false;
    for (i, c) in rest[start..].char_indices() {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return Some(&rest[start + i + 1..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_syncs_of_the_ledger_count() {
        let t = Traced::of(
            "812 fdatasync(5</tmp/x/ledger.db-wal>) = 0\n\
             812 fsync(6</tmp/x/ledger.db> <unfinished ...>\n\
             812 <... fdatasync resumed>) = 0\n\
             813 fdatasync(7</tmp/x/rail.db-wal>) = 0\n\
             813 fsync(3</tmp/x/>) = 0",
        );
        assert_eq!(t.ledger_syncs, 2);
    }

    #[test]
    fn syncs_by_the_checkpoint_thread_are_told_apart_by_its_name() {
        let t = Traced::of(
            "812 fdatasync(5</tmp/x/ledger.db-wal>) = 0\n\
             815 prctl(PR_SET_NAME, \"ledger-checkpoi\"... <unfinished ...>\n\
             815 <... prctl resumed>) = 0\n\
             815 fdatasync(6</tmp/x/ledger.db-wal>) = 0\n\
             815 fsync(7</tmp/x/ledger.db>) = 0\n\
             816 prctl(PR_SET_NAME, \"tokio-rt-worker\"...) = 0\n\
             [pid 816] fdatasync(5</tmp/x/ledger.db-wal>) = 0\n\
             817 prctl(PR_SET_NAME, \"ledger-checkpoi\") = -1 EINVAL (Invalid argument)\n\
             817 fsync(7</tmp/x/ledger.db>) = 0",
        );
        assert_eq!(t.ledger_syncs, 5);
        assert_eq!(t.checkpoint_syncs, 2);
        assert_eq!(thread_of("[pid 816] fsync(3</x>) = 0"), Some(816));
        assert_eq!(t.since(t).checkpoint_syncs, 0);
    }

    #[test]
    fn wal_bytes_are_the_counts_asked_of_the_wal() {
        let t = Traced::of(
            "9 pwrite64(5</tmp/x/ledger.db-wal>, \"\\0\\\"a\"..., 4096, 32) = 4096\n\
             9 pwrite64(5</tmp/x/ledger.db-wal>, \"\\330\\x\", 24, 4128 <unfinished ...>\n\
             9 pwrite64(6</tmp/x/ledger.db>, \"abc\"..., 4096, 0) = 4096\n\
             9 writev(5</tmp/x/ledger.db-wal>, [{iov_base=\"a\", iov_len=10}, {iov_base=\"b\", iov_len=6}], 2) = 16",
        );
        assert_eq!(t.wal_bytes, 4096 + 24 + 16);
    }

    #[test]
    fn requests_upstream_are_writes_of_a_method_with_an_id_to_a_pipe() {
        let t = Traced::of(
            "9 write(11<pipe:[77]>, \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":4,\\\"method\\\":\\\"tools/list\\\"}\\n\", 50) = 50\n\
             9 write(11<pipe:[77]>, \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"method\\\":\\\"notifications/x\\\"}\\n\", 50) = 50\n\
             9 write(1<pipe:[78]>, \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":4,\\\"method\\\":\\\"x\\\"}\\n\", 40) = 40",
        );
        assert_eq!(t.upstream_requests, 1);
        let later = t.plus(Traced {
            upstream_requests: 2,
            ..Traced::default()
        });
        assert_eq!(later.since(t).upstream_requests, 2);
    }
}
