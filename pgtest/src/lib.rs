//! A real PostgreSQL server for the tests, the chaos matrix and the benchmarks, never a mock.
//!
//! [`Cluster::start`] runs `initdb` into a fresh temporary directory and `pg_ctl start` on a
//! Unix socket in it (no TCP port), as the `postgres` user when the caller is root (as Debian
//! sets it up). A detached watchdog stops the server and removes the directory once the
//! calling process has exited, so a test binary that ends (or dies) leaves nothing running.
//! PostgreSQL is installed from Debian's packages when it is missing and the process may (root
//! with apt-get); when none of that works the error says what is missing.
//!
//! [`fresh_database`] is what the engine's tests call: a database of its own per test, on the
//! server named by `INTERLOCK_TEST_POSTGRES` or on one shared throwaway cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the server may take to start (crash recovery included, after [`Cluster::kill`]).
pub const START_TIMEOUT_SECS: u32 = 60;
/// Connections the server accepts: 64 proxies of a throughput run, each with its writer and
/// reader, and the tests' own.
pub const MAX_CONNECTIONS: u32 = 300;
/// How long [`Cluster::kill`] waits for the killed processes to be gone.
pub const KILL_WAIT_MAX: Duration = Duration::from_secs(10);
/// The most processes [`Cluster::kill`] looks through in `/proc`.
pub const PROCESSES_SCANNED_MAX: usize = 100_000;

/// The environment variable naming a server for the tests instead of a throwaway cluster.
pub const TEST_SERVER_ENV: &str = "INTERLOCK_TEST_POSTGRES";

/// One throwaway PostgreSQL cluster, stopped and removed on drop (and by its watchdog if the
/// process dies first).
#[derive(Debug)]
pub struct Cluster {
    /// The cluster's directory: the socket, `data/` and `log`.
    dir: PathBuf,
    data: PathBuf,
    bin: PathBuf,
    databases: AtomicU32,
}

impl Cluster {
    /// Installs PostgreSQL if it must and may, makes a cluster under a fresh directory named
    /// `prefix…` in the temporary directory, and starts it.
    pub fn start(prefix: &str) -> Result<Cluster, String> {
        let bin = match find_bin() {
            Ok(bin) => bin,
            Err(_) => {
                install()?;
                find_bin()?
            }
        };
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(|e| format!("no temporary directory: {e}"))?
            .keep();
        if is_root() {
            run(
                {
                    let mut chown = Command::new("chown");
                    chown.args(["postgres:postgres"]).arg(&dir);
                    chown
                },
                "chown of the cluster's directory to the postgres user",
            )?;
        }
        let cluster = Cluster {
            data: dir.join("data"),
            dir,
            bin,
            databases: AtomicU32::new(0),
        };
        let data = cluster.data.display().to_string();
        let initdb = ["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"];
        run(cluster.as_owner("initdb", &initdb), "initdb")?;
        watch(&cluster);
        cluster.restart()?;
        Ok(cluster)
    }

    /// The socket directory (the `host` of a connection string).
    pub fn host(&self) -> &Path {
        &self.dir
    }

    /// A connection string to database `name` as the `postgres` user.
    pub fn url(&self, name: &str) -> String {
        format!("postgresql://postgres@/{name}?host={}", self.dir.display())
    }

    /// A fresh, empty database named `prefix` and a counter; its connection string.
    pub fn create_database(&self, prefix: &str) -> Result<String, String> {
        let name = format!(
            "{prefix}{}_{}",
            std::process::id(),
            self.databases.fetch_add(1, Ordering::Relaxed)
        );
        let host = self.dir.display().to_string();
        let mut createdb = Command::new(self.bin.join("createdb"));
        createdb.args(["-h", &host, "-U", "postgres", &name]);
        run(createdb, &format!("createdb {name}"))?;
        Ok(self.url(&name))
    }

    /// Drops the database `url` names (made by [`Cluster::create_database`]), ending any
    /// session still on it: a long run makes thousands and keeps only the ones it must.
    pub fn drop_database(&self, url: &str) -> Result<(), String> {
        let name = database_of(url).ok_or_else(|| format!("{url} names no database"))?;
        let host = self.dir.display().to_string();
        let mut dropdb = Command::new(self.bin.join("dropdb"));
        dropdb.args(["-h", &host, "-U", "postgres", "--force", name]);
        run(dropdb, &format!("dropdb {name}"))
    }

    /// Starts the server (again): `pg_ctl start`, waiting until it accepts connections, which
    /// after [`Cluster::kill`] includes its crash recovery from the WAL.
    pub fn restart(&self) -> Result<(), String> {
        let data = self.data.display().to_string();
        let options = format!(
            "-k {} -c listen_addresses='' -c max_connections={MAX_CONNECTIONS}",
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        let timeout = START_TIMEOUT_SECS.to_string();
        let args = [
            "-D", &data, "-o", &options, "-l", &log, "-w", "-t", &timeout, "start",
        ];
        run(self.as_owner("pg_ctl", &args), "pg_ctl start").map_err(|why| {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            format!("{why}\nserver log:\n{log}")
        })
    }

    /// SIGKILL of the server: the postmaster and every process it started (backends, the WAL
    /// writer, the checkpointer), as a machine that loses power or an OOM kill of the whole
    /// service would leave it. Nothing is flushed or answered; what was committed is in the WAL
    /// and comes back at [`Cluster::restart`]. Waits until the processes are gone.
    pub fn kill(&self) -> Result<u32, String> {
        let pid = self.postmaster_pid()?;
        // The postmaster first, so that it cannot react to its children's deaths (it would
        // start an orderly crash restart of its own); then everything it had started.
        let mut victims = vec![pid];
        victims.extend(children_of(pid));
        for &victim in &victims {
            signal_kill(victim);
        }
        let deadline = Instant::now() + KILL_WAIT_MAX;
        while victims.iter().any(|&v| is_alive(v)) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server's processes {victims:?} outlived SIGKILL by {KILL_WAIT_MAX:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        u32::try_from(victims.len()).map_err(|_| "too many processes".to_owned())
    }

    /// The postmaster's pid, from the first line of `data/postmaster.pid`.
    pub fn postmaster_pid(&self) -> Result<u32, String> {
        let file = self.data.join("postmaster.pid");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("{} names no pid", file.display()))
    }

    /// A server binary (`initdb`, `pg_ctl`) run as the `postgres` user when this process is
    /// root (PostgreSQL refuses to run as root), else as this user.
    fn as_owner(&self, name: &str, args: &[&str]) -> Command {
        let bin = self.bin.join(name);
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(bin).args(args);
            command
        } else {
            let mut command = Command::new(bin);
            command.args(args);
            command
        }
    }

    fn stop_command(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = format!(
            "{} -D {} -m immediate stop",
            pg_ctl.display(),
            self.data.display()
        );
        if is_root() {
            format!("runuser -u postgres -- {stop}")
        } else {
            stop
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .args(["-c", &format!("{} >/dev/null 2>&1", self.stop_command())])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// A connection string to a fresh, empty database for one test: on the server named by
/// [`TEST_SERVER_ENV`] (a connection string to a database whose user may create databases),
/// or else on a throwaway cluster shared by this process. Panics, saying what is missing,
/// when there is no server to be had: a test that needs PostgreSQL fails, never skips.
pub fn fresh_database() -> String {
    if let Ok(url) = std::env::var(TEST_SERVER_ENV) {
        return fresh_on_server(&url).unwrap_or_else(|why| panic!("{why}"));
    }
    let cluster = SHARED
        .get_or_init(|| Cluster::start("interlock-pg-"))
        .as_ref()
        .unwrap_or_else(|why| panic!("PostgreSQL is needed by this test and {why}"));
    cluster
        .create_database("t")
        .unwrap_or_else(|why| panic!("{why}"))
}

/// With a server given by URL: a database of its own, made through `psql`.
fn fresh_on_server(url: &str) -> Result<String, String> {
    static DATABASES: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    );
    let psql = find_bin().map_or_else(|_| PathBuf::from("psql"), |bin| bin.join("psql"));
    let mut create = Command::new(psql);
    create.args([
        url,
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        &format!("CREATE DATABASE {name}"),
    ]);
    run(
        create,
        &format!("CREATE DATABASE {name} on {TEST_SERVER_ENV}"),
    )?;
    Ok(with_database(url, &name))
}

/// `url` with its database replaced by `name` (`…/db?…` or `…/db`).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base.rfind('/') {
        Some(slash) if slash >= authority_end => &base[..slash],
        _ => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

/// The database part of a connection string: `…/NAME?…` or `…/NAME`.
pub fn database_of(url: &str) -> Option<&str> {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    let authority_end = base.find("://")? + 3;
    let slash = base.rfind('/').filter(|&i| i >= authority_end)?;
    Some(&base[slash + 1..]).filter(|name| !name.is_empty())
}

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

fn run(mut command: Command, what: &str) -> Result<(), String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what} did not run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The newest installed server's `bin` directory.
fn find_bin() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.filter_map(Result::ok)
                .map(|dir| dir.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().ok_or_else(|| {
        "no PostgreSQL server is installed (/usr/lib/postgresql/*/bin/initdb)".into()
    })
}

fn install() -> Result<(), String> {
    if !is_root() || Command::new("apt-get").arg("--version").output().is_err() {
        return Err(format!(
            "no PostgreSQL server is installed, and this process cannot install it (it needs root and apt-get): install postgresql, or set {TEST_SERVER_ENV} to a server's connection string"
        ));
    }
    eprintln!("installing PostgreSQL from Debian's packages (apt-get install postgresql)");
    let apt = |args: &[&str]| {
        let mut command = Command::new("apt-get");
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(command, &format!("apt-get {}", args.join(" ")))
    };
    apt(&["update"])?;
    apt(&["install", "-y", "--no-install-recommends", "postgresql"])
}

/// Stops the cluster and removes its directory once this process has exited: a detached shell
/// polls for the process (nothing runs at a test binary's exit), and ends early when the
/// directory is gone (the cluster was dropped).
fn watch(cluster: &Cluster) {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null && [ -d {dir} ]; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = cluster.dir.display(),
        stop = cluster.stop_command(),
    );
    // `setsid --fork` puts the shell in a session of its own and returns at once: waited for
    // here, the watchdog outlives this process.
    let started = Command::new("setsid")
        .args(["--fork", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !started.is_ok_and(|s| s.success()) {
        eprintln!(
            "warning: the watchdog of {} did not start; the server stops only on drop",
            cluster.dir.display()
        );
    }
}

/// The pids whose parent is `parent`, from `/proc/*/stat`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .take(PROCESSES_SCANNED_MAX)
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_of(pid) == Some(parent))
        .collect()
}

/// Field 4 of `/proc/PID/stat`, read after the command name's closing parenthesis (the name
/// may hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

fn signal_kill(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Whether `pid` is still in the process table. A zombie counts: a new postmaster refuses
/// to start while the pid its lock file names answers `kill(pid, 0)`, which a zombie does
/// until it is reaped.
fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gets_its_database_replaced() {
        assert_eq!(
            with_database("postgresql://u@h/db?sslmode=disable", "t1"),
            "postgresql://u@h/t1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql://u@h/db", "t1"),
            "postgresql://u@h/t1"
        );
        assert_eq!(
            with_database("postgresql://u@h", "t1"),
            "postgresql://u@h/t1"
        );
        assert_eq!(
            with_database("postgresql://postgres@/x?host=/tmp/a", "t2"),
            "postgresql://postgres@/t2?host=/tmp/a"
        );
    }

    #[test]
    fn a_url_names_its_database() {
        assert_eq!(
            database_of("postgresql://p@/t1_2?host=/tmp/x"),
            Some("t1_2")
        );
        assert_eq!(database_of("postgresql://p@h/db"), Some("db"));
        assert_eq!(database_of("postgresql://p@h"), None);
        assert_eq!(database_of("postgresql://p@h/?host=/x"), None);
    }

    #[test]
    fn a_killed_server_comes_back_with_what_it_committed() {
        let cluster = Cluster::start("interlock-pgtest-").unwrap_or_else(|why| panic!("{why}"));
        let url = cluster
            .create_database("k")
            .unwrap_or_else(|why| panic!("{why}"));
        let psql = |sql: &str| {
            let out = Command::new(cluster.bin.join("psql"))
                .args([url.as_str(), "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
                .output()
                .expect("psql runs");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            )
        };
        assert!(psql("CREATE TABLE t (x int); INSERT INTO t VALUES (7)").0);
        let postmaster = cluster.postmaster_pid().expect("running");
        let killed = cluster.kill().expect("killed");
        assert!(killed >= 2, "the postmaster and its children: {killed}");
        assert!(!is_alive(postmaster));
        assert!(!psql("SELECT 1").0, "nothing answers after the kill");
        cluster.restart().expect("restarts");
        assert_eq!(psql("SELECT x FROM t"), (true, "7".to_owned()));
        assert_ne!(cluster.postmaster_pid().expect("running"), postmaster);
        cluster.drop_database(&url).expect("dropped");
        assert!(!psql("SELECT 1").0, "the database is gone");
    }
}
