//! A real PostgreSQL server for the tests, never a mock: the one named by
//! `INTERLOCK_TEST_POSTGRES` (a connection string to a database that may create databases), or
//! else a throwaway cluster this test process starts itself: `initdb` into a temporary
//! directory, `pg_ctl start` on a Unix socket only, stopped by a watchdog when the process
//! exits. PostgreSQL is installed from Debian's packages when it is missing and the process
//! may (root with apt-get). When none of that works the test fails saying what is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// How long the server may take to start.
const START_TIMEOUT_SECS: u32 = 60;

struct Cluster {
    /// The socket directory.
    host: PathBuf,
    bin: PathBuf,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A connection string to a fresh, empty database on the test server.
pub fn fresh_database() -> String {
    if let Ok(url) = std::env::var("INTERLOCK_TEST_POSTGRES") {
        return fresh_on_server(&url);
    }
    let cluster = CLUSTER
        .get_or_init(start_cluster)
        .as_ref()
        .unwrap_or_else(|why| panic!("PostgreSQL is needed by this test and {why}"));
    let name = format!(
        "t{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    );
    let created = Command::new(cluster.bin.join("createdb"))
        .args([
            "-h",
            &cluster.host.display().to_string(),
            "-U",
            "postgres",
            &name,
        ])
        .output()
        .expect("createdb runs");
    assert!(
        created.status.success(),
        "createdb {name} failed: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    format!(
        "postgresql://postgres@/{name}?host={}",
        cluster.host.display()
    )
}

/// With a server given by URL: a database of its own per test, made through `psql`.
fn fresh_on_server(url: &str) -> String {
    let name = format!(
        "t{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    );
    let psql = find_bin()
        .map(|bin| bin.join("psql"))
        .unwrap_or_else(|_| "psql".into());
    let created = Command::new(psql)
        .args([
            url,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            &format!("CREATE DATABASE {name}"),
        ])
        .output()
        .expect("psql runs");
    assert!(
        created.status.success(),
        "CREATE DATABASE {name} on INTERLOCK_TEST_POSTGRES failed: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    // Replace the database part of the URL (…/db?… or …/db).
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rfind('/') {
        Some(slash) if slash > "postgresql://".len() - 1 => &base[..slash],
        _ => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

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
    let root = rustix::process::getuid().is_root();
    if !root || Command::new("apt-get").arg("--version").output().is_err() {
        return Err(
            "no PostgreSQL server is installed, and this process cannot install it (it needs root and apt-get): install postgresql, or set INTERLOCK_TEST_POSTGRES to a server's connection string"
                .into(),
        );
    }
    eprintln!("installing PostgreSQL from Debian's packages (apt-get install postgresql)");
    let quiet = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| e.to_string())
            .and_then(|s| {
                s.success()
                    .then_some(())
                    .ok_or(format!("apt-get {args:?} failed"))
            })
    };
    quiet(&["update"])?;
    quiet(&["install", "-y", "--no-install-recommends", "postgresql"])
}

/// Runs a server binary as the `postgres` user when this process is root (PostgreSQL refuses
/// to run as root), else as this user.
fn as_owner(bin: &Path, args: &[&str]) -> Command {
    if rustix::process::getuid().is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(bin).args(args);
        command
    } else {
        let mut command = Command::new(bin);
        command.args(args);
        command
    }
}

fn start_cluster() -> Result<Cluster, String> {
    let bin = match find_bin() {
        Ok(bin) => bin,
        Err(_) => {
            install()?;
            find_bin()?
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("interlock-pg-")
        .tempdir()
        .map_err(|e| format!("no temporary directory: {e}"))?
        .keep();
    if rustix::process::getuid().is_root() {
        let chowned = Command::new("chown")
            .args(["postgres:postgres", &dir.display().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        if !chowned.success() {
            return Err(format!(
                "cannot give {} to the postgres user",
                dir.display()
            ));
        }
    }
    let data = dir.join("data");
    let run = |mut command: Command, what: &str| -> Result<(), String> {
        let out = command
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
    };
    let data_arg = data.display().to_string();
    run(
        as_owner(
            &bin.join("initdb"),
            &[
                "-D",
                &data_arg,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        ),
        "initdb",
    )?;
    let options = format!(
        "-k {} -c listen_addresses='' -c max_connections=200",
        dir.display()
    );
    let log = dir.join("log").display().to_string();
    let timeout = START_TIMEOUT_SECS.to_string();
    run(
        as_owner(
            &bin.join("pg_ctl"),
            &[
                "-D", &data_arg, "-o", &options, "-l", &log, "-w", "-t", &timeout, "start",
            ],
        ),
        "pg_ctl start",
    )
    .map_err(|why| {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        format!("{why}\nserver log:\n{log}")
    })?;
    watch(&bin, &data, &dir);
    Ok(Cluster { host: dir, bin })
}

/// Stops the cluster and removes its directory once this process has exited: a detached shell
/// polls for the process, as nothing runs at a test binary's exit.
fn watch(bin: &Path, data: &Path, dir: &Path) {
    let pg_ctl = bin.join("pg_ctl");
    let stop = if rustix::process::getuid().is_root() {
        format!(
            "runuser -u postgres -- {} -D {} -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    } else {
        format!(
            "{} -D {} -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = dir.display()
    );
    // `setsid` forks the shell into a session of its own and exits at once: waited for here,
    // the watchdog outlives this process.
    let status = Command::new("setsid")
        .args(["--fork", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the cluster's watchdog starts");
    assert!(status.success(), "setsid failed: {status}");
}
