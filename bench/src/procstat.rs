//! CPU time of a process, read from `/proc/PID/stat` (user + system, every thread, dead threads
//! included), in milliseconds. Linux only, as the engine is.

use crate::Res;

/// Reads processes' CPU time; knows the kernel's clock tick.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    tick_ms: f64,
}

impl CpuClock {
    /// Asks `getconf CLK_TCK` for the unit `/proc/PID/stat` counts in.
    pub fn new() -> Res<CpuClock> {
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .map_err(|e| format!("getconf CLK_TCK: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let ticks: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|t: &f64| *t > 0.0)
            .ok_or_else(|| format!("getconf CLK_TCK printed {:?}", text.trim()))?;
        Ok(CpuClock {
            tick_ms: 1e3 / ticks,
        })
    }

    /// This process's CPU time, ms.
    pub fn self_ms(&self) -> Res<f64> {
        self.read("/proc/self/stat")
    }

    /// Process `pid`'s CPU time, ms (its children not included).
    pub fn pid_ms(&self, pid: u32) -> Res<f64> {
        self.read(&format!("/proc/{pid}/stat"))
    }

    fn read(&self, path: &str) -> Res<f64> {
        let stat = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let ticks = user_plus_system(&stat).ok_or_else(|| format!("{path}: unreadable"))?;
        Ok(ticks as f64 * self.tick_ms)
    }
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces, so fields are counted after its closing one.
fn user_plus_system(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11); // fields 3..=13
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_command_name() {
        // Fields 3..=13 (state, ppid, …, cmajflt), then utime 5 and stime 17.
        let line = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 5 17 0 0 20 0 1 0";
        assert_eq!(user_plus_system(line), Some(22));
        assert_eq!(user_plus_system("42 (x) S 1"), None);
    }

    #[test]
    fn this_process_has_spent_some_cpu() {
        let clock = CpuClock::new().unwrap();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(clock.self_ms().unwrap() > 0.0);
    }
}
