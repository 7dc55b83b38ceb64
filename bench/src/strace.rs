//! What a proxy did to its ledger and its upstream, read from `strace -f -y -s STRING_BYTES`
//! output: syncs of the ledger's files, bytes written to its WAL, and JSON-RPC requests sent
//! upstream. Only what the figures need is parsed; a line that does not parse counts as nothing.

/// The syscalls traced, as `strace -e trace=` takes them.
pub const TRACED: &str = "trace=fsync,fdatasync,write,pwrite64,writev,pwritev";
/// `strace -s`: how much of each written buffer is printed; a request's `"method"` comes
/// within its first hundred bytes.
pub const STRING_BYTES: &str = "256";

/// Counts over a set of trace lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traced {
    /// `fsync` and `fdatasync` of a file named `ledger.db*`.
    pub ledger_syncs: u64,
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
        for line in text.lines() {
            t.add(line);
        }
        t
    }

    fn add(&mut self, line: &str) {
        let Some((call, fd, rest)) = call_of(line) else {
            return;
        };
        match call {
            "fsync" | "fdatasync" if fd.path.contains("/ledger.db") => self.ledger_syncs += 1,
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
            wal_bytes: self.wal_bytes + other.wal_bytes,
            upstream_requests: self.upstream_requests + other.upstream_requests,
        }
    }
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
