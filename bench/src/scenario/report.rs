//! What a suite prints and writes: the per-scenario table and the summary on stdout,
//! `docs/RESULTS.md` (machine-written, with the date, the commit and the command) and
//! `docs/results.svg` (direct vs gated per family).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::model::Family;
use super::run::PathKind;
use super::summary::{PairedLatency, PathSummary, ScenarioResult, percent};
use crate::Res;

/// Money in minor units as rupees, grouped the Indian way (thousands, then lakhs and crores):
/// `14810600` → `₹1,48,106.00`.
pub fn rupees(minor: u64) -> String {
    let (whole, paise) = (minor / 100, minor % 100);
    let digits = whole.to_string();
    let (head, last3) = digits.split_at(digits.len().saturating_sub(3));
    let mut grouped = String::new();
    for (index, digit) in head.chars().enumerate() {
        if index > 0 && (head.len() - index) % 2 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if !head.is_empty() {
        grouped.push(',');
    }
    grouped.push_str(last3);
    format!("₹{grouped}.{paise:02}")
}

fn done(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

/// The codes the scenario requires of the gated money calls, each marked found or missing:
/// `AMOUNT_ABOVE_CEILING ✓`.
fn required_codes(result: &ScenarioResult) -> String {
    let measure = &result.gated.1;
    let marked: Vec<String> = result
        .scenario
        .expect
        .gated_reasons
        .iter()
        .map(|required| {
            let mark = if measure.codes_missing.contains(required) {
                "✗ missing"
            } else {
                "✓"
            };
            format!("{required} {mark}")
        })
        .collect();
    marked.join(", ")
}

/// The per-scenario table, for a terminal.
pub fn table(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<5} {:<44} | {:>12} {:>3} {:>4} {:<6} | {:>12} {:>3} {:>4} {:<6} | gated answers",
        "id", "title", "direct moved", "ent", "task", "", "gated moved", "ent", "task", ""
    );
    for result in results {
        let title: String = result.scenario.title.chars().take(44).collect();
        let _ = write!(out, "{:<5} {title:<44} |", result.scenario.id);
        for path in [PathKind::Direct, PathKind::Gated] {
            match result.path(path) {
                Some((_, m)) => {
                    let verdict = match (m.unsafe_, m.passed()) {
                        (true, _) => "UNSAFE",
                        (false, true) => "ok",
                        (false, false) => "FAIL",
                    };
                    let _ = write!(
                        out,
                        " {:>12} {:>3} {:>4} {verdict:<6} |",
                        rupees(m.money_moved),
                        m.entities,
                        done(m.task_completed)
                    );
                }
                None => {
                    let _ = write!(out, " {:>12} {:>3} {:>4} {:<6} |", "-", "-", "-", "");
                }
            }
        }
        let _ = write!(out, " {}", result.gated.1.stopped_by.join(", "));
        let required = required_codes(result);
        if required.is_empty() {
            let _ = writeln!(out);
        } else {
            let _ = writeln!(out, " [required: {required}]");
        }
    }
    out
}

fn pair(summary: Option<&PathSummary>, f: impl Fn(&PathSummary) -> String) -> String {
    summary.map_or_else(|| "—".to_owned(), f)
}

/// The summary rows: (metric, direct, gated).
pub fn summary_rows(
    direct: Option<&PathSummary>,
    gated: Option<&PathSummary>,
    paired: Option<&PairedLatency>,
) -> Vec<(String, String, String)> {
    let rate = |part: usize, whole: usize| format!("{:.1}% ({part}/{whole})", percent(part, whole));
    let mut rows = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&PathSummary) -> String| {
        rows.push((name.to_owned(), pair(direct, f), pair(gated, f)));
    };
    row("attack success rate (A–D)", &|s| {
        rate(s.attack_successes, s.attacks)
    });
    row(
        "money at risk (moved beyond what each scenario allows)",
        &|s| rupees(s.money_at_risk),
    );
    row("utility under attack (A–D tasks completed)", &|s| {
        rate(s.completed_under_attack, s.attacks)
    });
    row("false block rate (E tasks not completed)", &|s| {
        rate(s.false_blocks, s.benign)
    });
    row("exactly-once violations (actions with 2+ entities)", &|s| {
        s.exactly_once_violations.to_string()
    });
    row("duplicates per 1,000 entities", &|s| {
        format!(
            "{:.1} ({} of {})",
            s.duplicates_per_1000(),
            s.duplicates,
            s.entities
        )
    });
    row(
        "orphan rate (entities without Interlock's stamp)",
        &|s| match s.path {
            PathKind::Direct => "— (no proxy to stamp)".to_owned(),
            PathKind::Gated => rate(s.unstamped as usize, s.entities as usize),
        },
    );
    row("assertions held", &|s| rate(s.passed, s.scenarios));
    let ms = |f: &crate::figures::Figures| format!("{:.2} / {:.2} (n={})", f.p50, f.p99, f.count);
    row("all reads answered: p50 / p99 ms", &|s| ms(&s.reads));
    row("all money calls answered: p50 / p99 ms", &|s| {
        ms(&s.money_calls)
    });
    if let Some(p) = paired {
        // The same calls on both paths, so the difference is the path's and not the sets'.
        let scenarios = p.scenarios;
        rows.push((
            format!("paired reads ({scenarios} fault-free scenarios): p50 / p99 ms"),
            ms(&p.reads.0),
            ms(&p.reads.1),
        ));
        rows.push((
            format!("paired money calls ({scenarios} fault-free scenarios): p50 / p99 ms"),
            ms(&p.money_calls.0),
            ms(&p.money_calls.1),
        ));
        let [(r50, r99), (m50, m99)] = p.added();
        rows.push((
            "added latency of the paired calls, gated − direct per quantile, p50 / p99 ms: \
             reads; money calls"
                .to_owned(),
            String::new(),
            format!("{r50:+.2} / {r99:+.2}; {m50:+.2} / {m99:+.2}"),
        ));
    }
    rows
}

/// The summary, for a terminal.
pub fn summary_text(
    direct: Option<&PathSummary>,
    gated: Option<&PathSummary>,
    paired: Option<&PairedLatency>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<62} {:>26} {:>26}", "metric", "direct", "gated");
    for (name, d, g) in summary_rows(direct, gated, paired) {
        let _ = writeln!(out, "{name:<62} {d:>26} {g:>26}");
    }
    out
}

/// Per family: the gated answers that refused or deferred money calls, with counts.
pub fn answers_by_family(results: &[ScenarioResult]) -> BTreeMap<Family, Vec<(String, usize)>> {
    let mut by: BTreeMap<Family, Vec<(String, usize)>> = BTreeMap::new();
    for result in results {
        let answers = by.entry(result.scenario.family).or_default();
        for label in &result.gated.1.stopped_by {
            match answers.iter_mut().find(|(l, _)| l == label) {
                Some((_, n)) => *n += 1,
                None => answers.push((label.clone(), 1)),
            }
        }
    }
    by
}

/// How the run was made, for the header of `RESULTS.md`.
pub struct Provenance {
    /// UTC date and time.
    pub date: String,
    /// `git describe`-like commit, with `+dirty` if the tree had changes.
    pub commit: String,
    /// The command line.
    pub command: String,
    /// The harness's label.
    pub harness: String,
    /// `release` or `debug`.
    pub profile: &'static str,
    /// Scenarios run at once.
    pub jobs: usize,
    /// Wall time of the whole suite, seconds.
    pub wall_s: f64,
}

/// `docs/RESULTS.md`.
pub fn results_markdown(
    results: &[ScenarioResult],
    direct: Option<&PathSummary>,
    gated: Option<&PathSummary>,
    paired: Option<&PairedLatency>,
    provenance: &Provenance,
) -> String {
    let mut md = String::new();
    let p = provenance;
    let _ = writeln!(md, "# Results: the scenario benchmark\n");
    let _ = writeln!(
        md,
        "Machine-written by `interlock-bench scenarios`; do not edit by hand, run it again.\n"
    );
    let _ = writeln!(md, "- date: {}", p.date);
    let _ = writeln!(md, "- commit: `{}`", p.commit);
    let _ = writeln!(md, "- command: `{}`", p.command);
    let _ = writeln!(md, "- harness: **{}**", p.harness);
    let _ = writeln!(
        md,
        "- binaries: {} build; {} scenarios, {} at a time; {:.0} s wall",
        p.profile,
        results.len(),
        p.jobs,
        p.wall_s
    );
    let _ = writeln!(
        md,
        "- paths: **direct** = the harness talks to `interlock-rail-mock`; **gated** = the same \
         harness, seed and faults through `interlock serve` in front of it. Money and entities \
         are counted from the rail's journal (`interlock-rail-mock inspect`).\n"
    );
    let _ = writeln!(md, "## Summary: {}\n", p.harness);
    let _ = writeln!(md, "| metric | direct | gated |\n| --- | --- | --- |");
    for (name, d, g) in summary_rows(direct, gated, paired) {
        let _ = writeln!(md, "| {name} | {d} | {g} |");
    }
    let _ = writeln!(md, "\n![direct vs gated per family](results.svg)\n");
    family_section(&mut md, results, direct, gated, &p.harness);
    scenario_section(&mut md, results, &p.harness);
    races_section(&mut md, results);
    failures_section(&mut md, results);
    notes_section(&mut md, p);
    md
}

/// Each racing scenario's first money calls per path: sent and answered when, and whether
/// they were in flight together (the race happened) or not.
pub fn races_text(results: &[ScenarioResult]) -> Vec<String> {
    let mut lines = Vec::new();
    for result in results {
        for path in [PathKind::Direct, PathKind::Gated] {
            if let Some((run, _)) = result.path(path)
                && let Some(race) = &run.race
            {
                lines.push(format!(
                    "{} {}: {}",
                    result.scenario.id,
                    path.name(),
                    race.detail()
                ));
            }
        }
    }
    lines
}

fn races_section(md: &mut String, results: &[ScenarioResult]) {
    let lines = races_text(results);
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Races
"
    );
    let _ = writeln!(
        md,
        "Workers' first money calls leave one start line together; times are on the run's \
         clock, from the transcripts. A race whose calls were not in flight together fails its \
         assertion.\n"
    );
    for line in lines {
        let _ = writeln!(md, "- {line}");
    }
    let _ = writeln!(md);
}

fn notes_section(md: &mut String, p: &Provenance) {
    let _ = writeln!(md, "\n## Notes\n");
    let _ = writeln!(
        md,
        "- The harness is a script, not a model: its figures describe the script's behaviour, \
         not an agent's. No model figures are reported because no model was run."
    );
    let _ = writeln!(
        md,
        "- *allowed* is each scenario's assertion (`bench/scenarios/<id>.yaml`): an attack or \
         failure succeeds when the run moves more money, creates more rail entities or incurs \
         more fees than that. Interlock's gates enforce the mandate \
         (`bench/scenarios/mandate.yaml`), not the user's intent; `bench/README.md` says what \
         the scenarios therefore do not claim."
    );
    let _ = writeln!(
        md,
        "- *all reads / money calls answered* are every call that succeeded on that path, faulted \
         scenarios included, so the two paths' sets differ and their difference means little. \
         *paired* calls are the same calls on both paths: those of the scenarios with no rail \
         fault, no kill and one worker, matched by worker, step and attempt, kept when they \
         succeeded on both. *added latency* is gated minus direct of each quantile over those \
         pairs. Nearest-rank quantiles: with a few dozen pairs p99 is about the slowest. With \
         {} scenarios running at once on the machine, contention shapes the tails more than the \
         proxy does; the per-call figure is `interlock-bench latency`'s (`bench/README.md`).",
        p.jobs
    );
}

fn family_section(
    md: &mut String,
    results: &[ScenarioResult],
    direct: Option<&PathSummary>,
    gated: Option<&PathSummary>,
    harness: &str,
) {
    let _ = writeln!(md, "## Per family: {harness}\n");
    let _ = writeln!(
        md,
        "| family | scenarios | unsafe direct | unsafe gated | task done direct | task done gated | what answered the gated money calls |"
    );
    let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- |");
    let answers = answers_by_family(results);
    for family in Family::ALL {
        let get = |s: Option<&PathSummary>| s.and_then(|s| s.families.get(&family).copied());
        let (d, g) = (get(direct), get(gated));
        let Some(g) = g else { continue };
        let cell = |f: Option<super::summary::FamilyFigures>,
                    pick: fn(&super::summary::FamilyFigures) -> usize| {
            f.map_or("—".to_owned(), |f| {
                format!("{}/{}", pick(&f), f.scenarios)
            })
        };
        let said: Vec<String> = answers
            .get(&family)
            .map(|a| a.iter().map(|(l, n)| format!("{l} ×{n}")).collect())
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| {family} {} | {} | {} | {} | {} | {} | {} |",
            family.name(),
            g.scenarios,
            cell(d, |f| f.unsafe_),
            cell(Some(g), |f| f.unsafe_),
            cell(d, |f| f.completed),
            cell(Some(g), |f| f.completed),
            said.join(", ")
        );
    }
    let _ = writeln!(md);
}

fn scenario_section(md: &mut String, results: &[ScenarioResult], harness: &str) {
    let _ = writeln!(md, "## Per scenario: {harness}\n");
    let _ = writeln!(
        md,
        "Moved / entities / task done, per path. *unsafe*: more money, entities or fees than the \
         scenario allows. *gated answers* is every answer the gated money calls got other than \
         a plain success; *codes required* are the reason codes the scenario's assertion \
         requires among the gated money calls' answers (`expect.gated_reasons`), each found (✓) \
         or missing (✗): they tell a gate's refusal from the rail's own.\n"
    );
    let _ = writeln!(
        md,
        "| id | title | pattern | allowed | direct | gated | gated assertion | gated answers | codes required |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for result in results {
        let s = &result.scenario;
        let cell = |path| match result.path(path) {
            Some((_, m)) => format!(
                "{} / {} / {}{}",
                rupees(m.money_moved),
                m.entities,
                done(m.task_completed),
                if m.unsafe_ { " **unsafe**" } else { "" }
            ),
            None => "—".to_owned(),
        };
        let gated = &result.gated.1;
        let source = serde_json::to_value(s.pattern.source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| {} | {} | {source} | {} / ≤{} | {} | {} | {} | {} | {} |",
            s.id,
            s.title,
            rupees(s.expect.max_money_moved_minor.get()),
            s.expect.max_entities,
            cell(PathKind::Direct),
            cell(PathKind::Gated),
            if gated.passed() { "held" } else { "**failed**" },
            gated.stopped_by.join(", "),
            required_codes(result)
        );
    }
    let _ = writeln!(md);
}

fn failures_section(md: &mut String, results: &[ScenarioResult]) {
    let mut lines = Vec::new();
    for result in results {
        for path in [PathKind::Direct, PathKind::Gated] {
            if let Some((_, m)) = result.path(path)
                && !m.passed()
            {
                lines.push(format!(
                    "- {} {}: {}",
                    result.scenario.id,
                    path.name(),
                    m.failures.join("; ")
                ));
            }
        }
    }
    let _ = writeln!(md, "## Assertions that did not hold\n");
    if lines.is_empty() {
        let _ = writeln!(md, "None.");
    } else {
        let _ = writeln!(
            md,
            "Direct failures are the attacks and faults doing what they do without a gate.\n"
        );
        for line in lines {
            let _ = writeln!(md, "{line}");
        }
    }
}

/// `docs/results.svg`: unsafe scenarios per attack family and completed tasks per family,
/// direct vs gated.
pub fn chart_svg(direct: &PathSummary, gated: &PathSummary, harness: &str) -> Res<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| format!("chart: {e}"))?;
        let root = root
            .titled(
                &format!("Interlock scenario benchmark, direct vs gated; harness: {harness}"),
                ("sans-serif", 18),
            )
            .map_err(|e| format!("chart: {e}"))?;
        let (left, right) = root.split_horizontally(450);
        let attack: Vec<Family> = Family::ALL.into_iter().filter(|f| f.is_attack()).collect();
        panel(
            &left,
            "attack or failure succeeded (%)",
            &attack,
            |s, f| {
                s.families
                    .get(&f)
                    .map_or(0.0, |x| percent(x.unsafe_, x.scenarios))
            },
            direct,
            gated,
        )?;
        panel(
            &right,
            "user task completed (%)",
            &Family::ALL,
            |s, f| {
                s.families
                    .get(&f)
                    .map_or(0.0, |x| percent(x.completed, x.scenarios))
            },
            direct,
            gated,
        )?;
        root.present().map_err(|e| format!("chart: {e}"))?;
    }
    Ok(svg)
}

const DIRECT_COLOUR: RGBColor = RGBColor(214, 96, 77);
/// The top of the percentage axis, above 100 to leave room for labels and the legend.
const PERCENT_AXIS_TOP: f64 = 140.0;
const GATED_COLOUR: RGBColor = RGBColor(67, 147, 195);

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    families: &[Family],
    value: impl Fn(&PathSummary, Family) -> f64,
    direct: &PathSummary,
    gated: &PathSummary,
) -> Res<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("chart: {e}");
    let count = families.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(36)
        // Headroom above 100 % for the value labels and the legend; no tick is drawn there.
        .build_cartesian_2d(0.0..count, 0.0..PERCENT_AXIS_TOP)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(0)
        .y_labels(8)
        .y_label_formatter(&|v| {
            if *v <= 100.0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    for (series, summary, colour, offset) in [
        ("direct", direct, DIRECT_COLOUR, 0.12),
        ("gated", gated, GATED_COLOUR, 0.5),
    ] {
        let bars = families.iter().enumerate().map(|(i, f)| {
            let x = i as f64 + offset;
            let v = value(summary, *f);
            Rectangle::new([(x, 0.0), (x + 0.38, v)], colour.filled())
        });
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(series)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        let labels = families.iter().enumerate().map(|(i, f)| {
            let v = value(summary, *f);
            Text::new(
                format!("{v:.0}"),
                (i as f64 + offset + 0.1, v + 6.0),
                ("sans-serif", 11),
            )
        });
        chart.draw_series(labels).map_err(err)?;
    }
    let names = families
        .iter()
        .enumerate()
        .map(|(i, f)| Text::new(format!("{f}"), (i as f64 + 0.45, -4.0), ("sans-serif", 13)));
    chart.draw_series(names).map_err(err)?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Writes `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) -> Res<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// `YYYY-MM-DD HH:MM UTC` for `unix_s` seconds since the epoch.
pub fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3_600,
        secs % 3_600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rupees_group_thousands_and_keep_paise() {
        assert_eq!(rupees(0), "₹0.00");
        assert_eq!(rupees(50_000), "₹500.00");
        assert_eq!(rupees(1_899_005), "₹18,990.05");
        assert_eq!(rupees(14_810_600), "₹1,48,106.00");
        assert_eq!(rupees(12_345_678_900), "₹12,34,56,789.00");
        assert_eq!(rupees(99_999), "₹999.99");
    }

    fn summary(path: PathKind, unsafe_: usize, completed: usize) -> PathSummary {
        let families = Family::ALL
            .into_iter()
            .map(|f| {
                let figures = super::super::summary::FamilyFigures {
                    scenarios: 4,
                    unsafe_: if f.is_attack() { unsafe_ } else { 0 },
                    completed,
                    passed: 4,
                };
                (f, figures)
            })
            .collect();
        PathSummary {
            path,
            attacks: 16,
            attack_successes: unsafe_ * 4,
            money_at_risk: 0,
            completed_under_attack: completed * 4,
            benign: 4,
            false_blocks: 0,
            exactly_once_violations: 0,
            duplicates: 0,
            entities: 1,
            unstamped: 0,
            passed: 20,
            scenarios: 20,
            families,
            reads: crate::figures::figures(Vec::new()),
            money_calls: crate::figures::figures(Vec::new()),
        }
    }

    #[test]
    fn the_chart_draws_both_paths_for_every_family() {
        let svg = chart_svg(
            &summary(PathKind::Direct, 3, 2),
            &summary(PathKind::Gated, 0, 4),
            "naive (scripted strawman)",
        )
        .unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("naive (scripted strawman)"));
        // Text elements hold their text on a line of its own.
        for label in [
            "direct",
            "gated",
            ">\nA\n<",
            ">\nE\n<",
            ">\n75\n<",
            ">\n100\n<",
        ] {
            assert!(svg.contains(label), "{label:?} missing");
        }
    }

    #[test]
    fn every_table_heading_names_the_harness() {
        let provenance = Provenance {
            date: utc(0),
            commit: "c0ffee".to_owned(),
            command: "scenarios".to_owned(),
            harness: "naive (scripted strawman, not a model)".to_owned(),
            profile: "release",
            jobs: 1,
            wall_s: 0.0,
        };
        let md = results_markdown(&[], None, None, None, &provenance);
        for heading in ["## Summary", "## Per family", "## Per scenario"] {
            let line = md.lines().find(|l| l.starts_with(heading)).unwrap();
            assert!(
                line.ends_with(": naive (scripted strawman, not a model)"),
                "{line}"
            );
        }
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_764_633_600), "2025-12-02 00:00 UTC");
        assert_eq!(utc(951_782_400 + 3_661), "2000-02-29 01:01 UTC");
    }
}
