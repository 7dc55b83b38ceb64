//! `interlock-model-check`: `check` runs an exhaustive check and prints its figures; `explore`
//! serves stateright's web Explorer on 127.0.0.1.

use interlock_model_check::protocol::{Config, Protocol};
use stateright::{Checker, Model};
use std::time::Instant;

const USAGE: &str = "\
usage: interlock-model-check check [--config NAME] [BUDGETS] [--search bfs|dfs] [--threads N] [--max-states N]
       interlock-model-check explore [--config NAME] [BUDGETS] [--port PORT]
NAME: bounded (default), partition, stall, large
BUDGETS (after --config, they override it): --procs N --proposals N --crashes N --ambiguous N
        --replays N --rejections N --list-failures N --quarantines N --stalls N";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(message) = run(&args) {
        eprintln!("{message}\n{USAGE}");
        std::process::exit(2);
    }
}

/// Breadth first finds shortest counterexamples but holds a whole frontier of states in memory;
/// depth first holds one path, so the large configuration fits on a 24 GB machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Search {
    Bfs,
    Dfs,
}

struct Options {
    config: Config,
    search: Search,
    threads: usize,
    max_states: Option<usize>,
    port: u16,
}

fn run(args: &[String]) -> Result<(), String> {
    let (command, rest) = args.split_first().ok_or("missing command")?;
    let options = parse(rest)?;
    match command.as_str() {
        "check" => check(&options),
        "explore" => {
            eprintln!("serving the Explorer on http://127.0.0.1:{}", options.port);
            Protocol {
                config: options.config,
            }
            .checker()
            .threads(options.threads)
            .serve(("127.0.0.1", options.port));
            Ok(())
        }
        other => Err(format!("unknown command {other}")),
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        config: Config::bounded(),
        search: Search::Bfs,
        threads: 2,
        max_states: None,
        port: 3917,
    };
    let mut iter = args.iter();
    while let Some(flag) = iter.next() {
        let value = iter.next().ok_or(format!("{flag} needs a value"))?;
        let config = &mut options.config;
        match flag.as_str() {
            "--config" => {
                *config = named_config(value)?;
                if value == "large" {
                    options.search = Search::Dfs;
                }
            }
            "--search" => options.search = search(value)?,
            "--threads" => options.threads = number(flag, value)?,
            "--max-states" => options.max_states = Some(number(flag, value)?),
            "--port" => options.port = number(flag, value)?,
            "--procs" => config.procs = number(flag, value)?,
            "--proposals" => config.proposals = number(flag, value)?,
            "--crashes" => config.crashes = number(flag, value)?,
            "--ambiguous" => config.ambiguous = number(flag, value)?,
            "--replays" => config.replays = number(flag, value)?,
            "--rejections" => config.rejections = number(flag, value)?,
            "--list-failures" => config.list_failures = number(flag, value)?,
            "--quarantines" => config.quarantines = number(flag, value)?,
            "--stalls" => config.stalls = number(flag, value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.config.procs == 0 || options.threads == 0 {
        return Err("--procs and --threads must be at least 1".to_owned());
    }
    Ok(options)
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: not a number in range: {value}"))
}

fn search(value: &str) -> Result<Search, String> {
    match value {
        "bfs" => Ok(Search::Bfs),
        "dfs" => Ok(Search::Dfs),
        other => Err(format!("--search: bfs or dfs, not {other}")),
    }
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

fn check(options: &Options) -> Result<(), String> {
    println!("config: {:?}, search: {:?}", options.config, options.search);
    let started = Instant::now();
    let mut builder = Protocol {
        config: options.config.clone(),
    }
    .checker()
    .threads(options.threads);
    if let Some(max) = options.max_states {
        builder = builder.target_state_count(max);
    }
    match options.search {
        Search::Bfs => report(builder.spawn_bfs().join(), started),
        Search::Dfs => report(builder.spawn_dfs().join(), started),
    }
}

fn report(checker: impl Checker<Protocol>, started: Instant) -> Result<(), String> {
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
