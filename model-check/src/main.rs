//! `interlock-model-check`: `check --config bounded|large` runs the exhaustive check and prints
//! its figures; `explore` serves stateright's web Explorer on 127.0.0.1.

use interlock_model_check::protocol::{Config, Protocol};
use stateright::{Checker, Model};
use std::time::Instant;

const USAGE: &str = "usage: interlock-model-check check [--config bounded|partition|stall|large] [--threads N] [--max-states N]\n           [--procs N] [--proposals N] [--crashes N] [--ambiguous N] [--replays N] [--rejections N] [--list-failures N]\n       interlock-model-check explore [--config bounded|partition|stall|large] [--port PORT]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => {}
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            std::process::exit(2);
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (command, rest) = args.split_first().ok_or("missing command")?;
    let mut config = Config::bounded();
    let mut threads = 2;
    let mut max_states = None;
    let mut port = 3917u16;
    let mut iter = rest.iter();
    while let Some(flag) = iter.next() {
        let value = iter.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--config" => config = named_config(value)?,
            "--threads" => {
                threads = value
                    .parse()
                    .map_err(|_| format!("--threads: not a number: {value}"))?
            }
            "--max-states" => {
                max_states = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--max-states: not a number: {value}"))?,
                )
            }
            "--procs" => config.procs = number(flag, value)?,
            "--proposals" => config.proposals = number(flag, value)?,
            "--crashes" => config.crashes = number(flag, value)?,
            "--ambiguous" => config.ambiguous = number(flag, value)?,
            "--replays" => config.replays = number(flag, value)?,
            "--rejections" => config.rejections = number(flag, value)?,
            "--list-failures" => config.list_failures = number(flag, value)?,
            "--port" => {
                port = value
                    .parse()
                    .map_err(|_| format!("--port: not a port: {value}"))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    match command.as_str() {
        "check" => check(config, threads, max_states),
        "explore" => {
            eprintln!("serving the Explorer on http://127.0.0.1:{port}");
            Protocol { config }
                .checker()
                .threads(threads)
                .serve(("127.0.0.1", port));
            Ok(())
        }
        other => Err(format!("unknown command {other}")),
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: not a number: {value}"))
}

fn named_config(name: &str) -> Result<Config, String> {
    match name {
        "bounded" => Ok(Config::bounded()),
        "partition" => Ok(Config::partition()),
        "stall" => Ok(Config::stall()),
        "large" => Ok(Config::large()),
        other => Err(format!(
            "--config: unknown configuration {other} (bounded, partition, stall, large)"
        )),
    }
}

fn check(config: Config, threads: usize, max_states: Option<usize>) -> Result<(), String> {
    println!("config: {config:?}");
    let started = Instant::now();
    let mut builder = Protocol { config }.checker().threads(threads);
    if let Some(max) = max_states {
        builder = builder.target_state_count(max);
    }
    let checker = builder.spawn_bfs().join();
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "unique states: {}  generated: {}  max depth: {}  seconds: {seconds:.1}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth()
    );
    let mut discoveries: Vec<_> = checker.discoveries().into_iter().collect();
    discoveries.sort_by_key(|(name, _)| *name);
    for (name, path) in discoveries {
        // An example (or counterexample) path, not necessarily the shortest: stateright keeps the
        // last one its threads found.
        println!(
            "discovery {name:?}: a path of {} actions",
            path.into_actions().len()
        );
    }
    checker.assert_properties();
    println!("every property holds");
    Ok(())
}
