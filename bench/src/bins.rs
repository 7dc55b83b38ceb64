//! The binaries a run drives: `interlock`, `interlock-rail-mock`, this bench itself (as the
//! poisoned upstream of [`crate::shim`]) and, for the scenarios that kill the proxy, an
//! `interlock` built with the `failpoints` feature.
//!
//! By default they are built with the cargo that built the bench, in its profile, from the
//! workspace it was built in. The failpoints build is copied to
//! `<profile>/interlock-failpoints/interlock`, and the plain `interlock` put back in its place.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Res;

/// The suffix `interlock --version` prints when kill points are compiled in.
pub const FAILPOINTS_VERSION_SUFFIX: &str = "+failpoints";

/// Where each binary is.
#[derive(Debug, Clone)]
pub struct Bins {
    /// `interlock`, as users run it.
    pub interlock: PathBuf,
    /// `interlock-rail-mock`.
    pub mock: PathBuf,
    /// This benchmark's own binary (it serves the shim).
    pub bench: PathBuf,
    /// `interlock` with kill points, when a run needs one.
    pub interlock_failpoints: Option<PathBuf>,
    /// Whether the binaries are release builds.
    pub release: bool,
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

fn workspace() -> Res<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| "the bench crate has no workspace directory".to_owned())
}

fn run_build(mut build: Command, what: &str) -> Res<()> {
    eprintln!("building {what}…");
    let status = build
        .current_dir(workspace()?)
        .status()
        .map_err(|e| format!("run cargo build for {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build of {what} failed ({status})"))
    }
}

fn exists(path: PathBuf) -> Res<PathBuf> {
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("no binary at {}", path.display()))
    }
}

impl Bins {
    /// Builds `interlock` and `interlock-rail-mock` in the profile `bench` (this binary) was
    /// built in, and finds them next to it.
    pub fn build_beside(bench: &Path) -> Res<Bins> {
        let dir = bench
            .parent()
            .ok_or("the bench binary has no directory")?
            .to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut build = cargo();
        build.args([
            "build",
            "-q",
            "-p",
            "interlock",
            "-p",
            "interlock-rail-mock",
            "--bins",
        ]);
        if release {
            build.arg("--release");
        }
        let profile = if release { "release" } else { "debug" };
        run_build(
            build,
            &format!("interlock and interlock-rail-mock ({profile})"),
        )?;
        Bins::in_dir(&dir, bench)
    }

    /// The binaries a command that prints timings runs: those in `bin_dir`, or built beside
    /// this binary; warns when they are a debug build, whose figures mean little.
    pub fn for_figures(bin_dir: Option<&Path>) -> Res<Bins> {
        let bench = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let bins = match bin_dir {
            Some(dir) => Bins::in_dir(dir, &bench)?,
            None => Bins::build_beside(&bench)?,
        };
        if !bins.release {
            eprintln!("warning: a debug build; run with --release for meaningful figures");
        }
        Ok(bins)
    }

    /// The binaries already in `dir`; nothing is built.
    pub fn in_dir(dir: &Path, bench: &Path) -> Res<Bins> {
        Ok(Bins {
            interlock: exists(dir.join("interlock"))?,
            mock: exists(dir.join(interlock_rail_mock::harness::BIN_NAME))?,
            bench: exists(bench.to_path_buf())?,
            interlock_failpoints: None,
            release: dir.file_name().is_some_and(|n| n == "release"),
        })
    }

    /// Adds the `failpoints` build of `interlock`: `explicit` if given, else built and copied to
    /// `<profile>/interlock-failpoints/interlock` beside the bench's own binary.
    /// Refuses a binary whose `--version` does not say it has kill points, so a kill scenario
    /// can never silently run against a binary that ignores `FAILPOINTS`.
    pub fn with_failpoints(mut self, explicit: Option<PathBuf>) -> Res<Bins> {
        let path = match explicit {
            Some(path) => exists(path)?,
            None => {
                // Built in the bench's own target directory: cargo keeps the build with kill
                // points apart from the plain one and only swaps which sits at
                // `<profile>/interlock`, so this costs one crate's compile, not a second tree of
                // dependencies. The failpoints binary is copied aside, then the plain one is put
                // back where `self.interlock` points.
                let profile_dir = self
                    .bench
                    .parent()
                    .ok_or("the bench binary has no directory")?;
                let target = profile_dir
                    .parent()
                    .ok_or("the bench binary is not in a cargo target directory")?;
                let build = |features: bool| {
                    let mut build = cargo();
                    build.args(["build", "-q", "-p", "interlock", "--bin", "interlock"]);
                    if features {
                        build.args(["--features", "failpoints"]);
                    }
                    build.arg("--target-dir").arg(target);
                    if self.release {
                        build.arg("--release");
                    }
                    build
                };
                run_build(
                    build(true),
                    "interlock with kill points (--features failpoints)",
                )?;
                let aside = profile_dir.join("interlock-failpoints");
                std::fs::create_dir_all(&aside)
                    .map_err(|e| format!("create {}: {e}", aside.display()))?;
                let copy = aside.join("interlock");
                std::fs::copy(profile_dir.join("interlock"), &copy)
                    .map_err(|e| format!("copy the failpoints build to {}: {e}", copy.display()))?;
                run_build(build(false), "interlock without kill points")?;
                copy
            }
        };
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|e| format!("run {} --version: {e}", path.display()))?;
        let version = String::from_utf8_lossy(&out.stdout);
        if !version.trim_end().ends_with(FAILPOINTS_VERSION_SUFFIX) {
            return Err(format!(
                "{} has no kill points (--version says {:?}); build it with --features failpoints",
                path.display(),
                version.trim_end()
            ));
        }
        self.interlock_failpoints = Some(path);
        Ok(self)
    }
}
