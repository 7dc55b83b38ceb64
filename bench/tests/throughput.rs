//! Small, real slices of `interlock-bench throughput`. On SQLite: two shapes, two K, the
//! ledger's syncs counted. The command itself fails unless the rail's journal holds exactly the
//! refunds made; this test also holds the ledger to its durability: every gated refund is two
//! fsynced commits (the write-ahead record before the call, the outcome after it), shared by at
//! most K concurrent calls in one proxy (group commit), and no more on the money path than those
//! and the WAL's restarts. On PostgreSQL: K proxies on one database of a real, throwaway server
//! (never a mock), the journal check holding, and the server's fsyncs reported as not measured.

use std::path::Path;
use std::process::Command;

use interlock_bench::bins::Bins;
use interlock_bench::throughput::{Backend, Shape, ThroughputArgs, throughput};

/// `strace`, installed from Debian's package when missing (the syncs are counted with it).
fn strace() {
    let present = || {
        Command::new("strace")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if present() {
        return;
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "strace"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        // A fresh machine may not have read the package lists yet.
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        install();
    }
    assert!(
        present(),
        "this test counts the ledger's fsyncs with strace and could not install Debian's \
         `strace` package: run `apt-get install strace` as root"
    );
}

/// The directory of `interlock` and `interlock-rail-mock`, built beside this test's bench.
fn bin_dir() -> std::path::PathBuf {
    let bench = Path::new(env!("CARGO_BIN_EXE_interlock-bench"));
    let bins = Bins::build_beside(bench).expect("the binaries build");
    bins.interlock.parent().unwrap().to_path_buf()
}

#[test]
fn both_shapes_make_every_refund_in_at_most_two_durable_commits_each_shared_in_one_proxy() {
    strace();
    let rows = throughput(&ThroughputArgs {
        ks: vec![1, 3],
        refunds: 6,
        shapes: vec![Shape::One, Shape::Many],
        backends: vec![Backend::Sqlite],
        no_fsyncs: false,
        bin_dir: Some(bin_dir()),
        json: true,
    })
    .expect("the benchmark runs and the rail holds every refund");
    let shape_k: Vec<(Shape, usize, usize)> =
        rows.iter().map(|r| (r.shape, r.k, r.refunds)).collect();
    assert_eq!(
        shape_k,
        vec![
            (Shape::One, 1, 6),
            (Shape::One, 3, 6),
            (Shape::Many, 1, 6),
            (Shape::Many, 3, 6)
        ]
    );
    for row in &rows {
        assert_eq!(
            row.gated.keys().copied().collect::<Vec<_>>(),
            [Backend::Sqlite]
        );
        let gated = row.on(Backend::Sqlite).expect("measured on SQLite");
        let fsyncs = gated.fsyncs_per_refund.expect("counted");
        let checkpoint = gated.checkpoint_fsyncs_per_refund.expect("counted");
        // The money path's own syncs: two commits per refund (the deciding one, with the
        // attempt, and the outcome), plus at most one WAL-header sync per restart of the WAL,
        // which follows a checkpoint that copied all of it (two syncs of the checkpoint
        // thread), one more if that checkpoint fell just before the counting began. Three
        // commits per refund would exceed it unless a checkpoint completed per refund. K
        // agents in one proxy share commits (group commit, ADR 0009): at most K transitions
        // are waiting at once, so a commit carries at most K of them.
        let refunds = row.refunds as f64;
        let money = (fsyncs - checkpoint) * refunds;
        let restarts_max = checkpoint * refunds / 2.0 + 1.0;
        // The calls in flight on one proxy's session: K in `one`, one in `many`.
        let sharing = row.k.div_ceil(row.shape.servers(row.k)) as f64;
        assert!(
            money >= 2.0 * refunds / sharing - 1e-6 && money <= 2.0 * refunds + restarts_max + 1e-6,
            "K={} {:?}: {money} syncs on the money path for {refunds} refunds \
             ({checkpoint} per refund by the checkpoint thread)",
            row.k,
            row.shape
        );
        // Each gated refund is at least its own call upstream, and writes the WAL.
        let upstream = gated.upstream_requests_per_refund.expect("counted");
        assert!(
            upstream >= 1.0,
            "K={} {:?}: {upstream} requests upstream per refund",
            row.k,
            row.shape
        );
        assert!(gated.wal_bytes_per_refund.expect("counted") > 0.0);
        assert!(gated.path.refunds_per_s > 0.0 && row.direct.refunds_per_s > 0.0);
        assert!(gated.path.p99_ms >= gated.path.p50_ms);
    }
}

#[test]
fn k_proxies_on_one_postgresql_database_make_every_refund_and_their_syncs_are_not_guessed() {
    // No strace: on PostgreSQL the straced run is not made (the server syncs, not the proxy),
    // so the command must not need it even without --no-fsyncs.
    let rows = throughput(&ThroughputArgs {
        ks: vec![2],
        refunds: 8,
        shapes: vec![Shape::Many],
        backends: vec![Backend::Postgres],
        no_fsyncs: false,
        bin_dir: Some(bin_dir()),
        json: true,
    })
    .expect("a throwaway PostgreSQL server starts, and the rail holds every refund");
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!((row.k, row.shape, row.refunds), (2, Shape::Many, 8));
    assert_eq!(
        row.gated.keys().copied().collect::<Vec<_>>(),
        [Backend::Postgres]
    );
    let gated = row.on(Backend::Postgres).expect("measured on PostgreSQL");
    assert!(gated.path.refunds_per_s > 0.0 && row.direct.refunds_per_s > 0.0);
    assert!(gated.path.p99_ms >= gated.path.p50_ms);
    assert!(gated.ratio > 0.0);
    let traced = [
        gated.fsyncs_per_refund,
        gated.checkpoint_fsyncs_per_refund,
        gated.wal_bytes_per_refund,
        gated.upstream_requests_per_refund,
    ];
    assert_eq!(
        traced, [None; 4],
        "not measured on PostgreSQL, never invented"
    );
    let json = interlock_bench::throughput::rows_json(&rows);
    let postgres = &json["rows"][0]["gated"]["postgres"];
    assert!(postgres["refunds_per_s"].as_f64().is_some(), "{json}");
    assert!(postgres["fsyncs_per_refund"].is_null(), "{json}");
}
