//! Repeated runs (`--repeat N`): the statistics over the measured runs of one command (the
//! targets' energy, the whole machine's, per domain, per process group and per function),
//! IQR outliers and a noise verdict on the targets' energy (what CI gates on), and the
//! report's `repeat` object that carries them beside every run's own report. Pure: built
//! from the runs' reports, with no clock and no I/O.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ProcessEntry, Report};

/// How quartiles are computed, as the report states it.
pub const QUARTILE_METHOD: &str =
    "linear interpolation between closest ranks (Hyndman-Fan type 7, numpy's default)";

/// Summary statistics of one figure over the runs; the figures are in the unit of the field
/// that holds this object (`energy_j`: joules).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub runs_count: usize,
    pub median: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single run.
    pub std_dev: f64,
    /// Coefficient of variation: `std_dev / mean`, in percent (0 when the mean is 0).
    pub cv_pct: f64,
    pub min: f64,
    pub max: f64,
    pub q1: f64,
    pub q3: f64,
    pub iqr: f64,
    /// Runs (1-based indexes) whose value lies beyond 1.5 x IQR from the quartiles.
    pub outlier_runs: Vec<usize>,
}

/// The value at quantile `q` (0..=1) of `sorted` (ascending, not empty): type 7, linear
/// interpolation between the closest ranks.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Statistics of `values`, one per run; `runs[i]` is the 1-based index of the run that gave
/// `values[i]`.
pub fn stats(values: &[f64], runs: &[usize]) -> Stats {
    let n = values.len();
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = if n > 0 {
        values.iter().sum::<f64>() / n as f64
    } else {
        0.0
    };
    let std_dev = if n > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let (q1, q3) = (quantile(&sorted, 0.25), quantile(&sorted, 0.75));
    let iqr = q3 - q1;
    let (low, high) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    Stats {
        runs_count: n,
        median: quantile(&sorted, 0.5),
        mean,
        std_dev,
        cv_pct: if mean.abs() > 0.0 {
            100.0 * std_dev / mean.abs()
        } else {
            0.0
        },
        min: sorted.first().copied().unwrap_or(0.0),
        max: sorted.last().copied().unwrap_or(0.0),
        q1,
        q3,
        iqr,
        outlier_runs: values
            .iter()
            .zip(runs)
            .filter(|(v, _)| **v < low || **v > high)
            .map(|(_, &r)| r)
            .collect(),
    }
}

/// The statistic the noise verdict and the outliers are judged on: the targets' energy (the
/// command and its descendants), which `diff` gates on by default, not the whole machine's.
pub const NOISE_OF: &str = "attributed_energy_j";

/// How noisy the run set is, from the CV of the targets' energy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoiseVerdict {
    /// CV < 2 %.
    Excellent,
    /// CV < 5 %.
    Good,
    /// CV < 10 %.
    Moderate,
    HighNoise,
}

impl NoiseVerdict {
    pub fn of_cv(cv_pct: f64) -> Self {
        match cv_pct {
            cv if cv < 2.0 => NoiseVerdict::Excellent,
            cv if cv < 5.0 => NoiseVerdict::Good,
            cv if cv < 10.0 => NoiseVerdict::Moderate,
            _ => NoiseVerdict::HighNoise,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NoiseVerdict::Excellent => "excellent",
            NoiseVerdict::Good => "good",
            NoiseVerdict::Moderate => "moderate",
            NoiseVerdict::HighNoise => "high-noise",
        }
    }

    /// Worse than good: the summary warns.
    pub fn worrying(self) -> bool {
        matches!(self, NoiseVerdict::Moderate | NoiseVerdict::HighNoise)
    }
}

/// The report's `repeat` object.
#[derive(Clone, Debug, Serialize)]
pub struct Repeat {
    /// Measured runs asked for (`--repeat`).
    pub runs_requested_count: u32,
    /// Unmeasured runs before them (`--warmup`).
    pub warmup_runs_count: u32,
    /// Pause between runs (`--cooldown`).
    pub cooldown_s: f64,
    /// Why fewer runs than asked were measured (a stop request, a command that failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// The run whose total energy is closest to the median: the report's top level is its
    /// report.
    pub representative_run: usize,
    pub noise_verdict: NoiseVerdict,
    /// The statistic that `noise_verdict` and the runs' `outlier` are judged on
    /// ([`NOISE_OF`]).
    pub noise_of: &'static str,
    pub runs: Vec<RepeatRun>,
    pub statistics: Statistics,
}

/// One measured run of the set.
#[derive(Clone, Debug, Serialize)]
pub struct RepeatRun {
    /// 1-based.
    pub index: usize,
    pub started_at: String,
    pub ended_at: String,
    pub duration_s: f64,
    /// Measured (or estimated) energy of the top-level domains.
    pub energy_j: f64,
    /// The targets' share of it (the command and its descendants).
    pub attributed_energy_j: f64,
    pub avg_power_w: f64,
    pub domains: BTreeMap<String, RunDomain>,
    pub process_groups: Vec<RunGroup>,
    pub functions: Vec<RunFunction>,
    /// Its targets' energy is an IQR outlier of the set.
    pub outlier: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_exit_code: Option<i32>,
    /// The run's own complete report (as a single run writes it).
    pub report: Box<Report>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunDomain {
    pub energy_j: f64,
}

/// A process matched across runs by its command line and place in the process tree.
#[derive(Clone, Debug, Serialize)]
pub struct RunGroup {
    /// The group's key: the command lines from the root down to it, each with its rank among
    /// siblings of the same command line (`sh -c work#1 > sleep 1#2`).
    pub group: String,
    pub command: String,
    pub energy_j: f64,
    pub cpu_time_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunFunction {
    /// `module:symbol`.
    pub function: String,
    pub energy_j: f64,
}

/// The statistics over the measured runs.
#[derive(Clone, Debug, Serialize)]
pub struct Statistics {
    pub quartile_method: &'static str,
    pub energy_j: Stats,
    /// The targets' energy.
    pub attributed_energy_j: Stats,
    pub duration_s: Stats,
    pub avg_power_w: Stats,
    pub domains: BTreeMap<String, DomainStats>,
    pub process_groups: Vec<GroupStats>,
    pub functions: Vec<FunctionStats>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DomainStats {
    pub energy_j: Stats,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupStats {
    pub group: String,
    pub command: String,
    /// The program's name (what `--max-energy NAME=J` matches).
    pub name: String,
    pub energy_j: Stats,
    pub cpu_time_s: Stats,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionStats {
    pub function: String,
    pub energy_j: Stats,
}

/// What the session says about the set beside the runs' reports.
#[derive(Clone, Debug, Default)]
pub struct SetInfo {
    pub runs_requested_count: u32,
    pub warmup_runs_count: u32,
    pub cooldown_s: f64,
    pub stopped_early: Option<String>,
}

/// The report of a run set: the representative run's report, with every run's in `repeat`.
/// `None` when no run was measured.
pub fn combine(mut reports: Vec<Report>, info: SetInfo) -> Option<Report> {
    if reports.is_empty() {
        return None;
    }
    let index: Vec<usize> = (1..=reports.len()).collect();
    let mut runs: Vec<RepeatRun> = reports
        .iter()
        .zip(&index)
        .map(|(r, &i)| repeat_run(r, i))
        .collect();
    fn column(runs: &[RepeatRun], f: impl Fn(&RepeatRun) -> f64) -> Vec<f64> {
        runs.iter().map(f).collect()
    }
    let energy = stats(&column(&runs, |r| r.energy_j), &index);
    let targets = stats(&column(&runs, |r| r.attributed_energy_j), &index);
    for run in &mut runs {
        run.outlier = targets.outlier_runs.contains(&run.index);
    }
    let representative = runs
        .iter()
        .min_by(|a, b| {
            (a.energy_j - energy.median)
                .abs()
                .total_cmp(&(b.energy_j - energy.median).abs())
                .then(a.index.cmp(&b.index))
        })
        .map_or(1, |r| r.index);
    let statistics = Statistics {
        quartile_method: QUARTILE_METHOD,
        attributed_energy_j: targets,
        duration_s: stats(&column(&runs, |r| r.duration_s), &index),
        avg_power_w: stats(&column(&runs, |r| r.avg_power_w), &index),
        domains: per_key(&runs, |r| {
            r.domains
                .iter()
                .map(|(k, d)| (k.clone(), (d.energy_j, ())))
                .collect()
        })
        .into_iter()
        .map(|(k, (values, runs, ()))| {
            (
                k,
                DomainStats {
                    energy_j: stats(&values, &runs),
                },
            )
        })
        .collect(),
        process_groups: group_stats(&runs),
        functions: {
            let mut f: Vec<FunctionStats> = per_key(&runs, |r| {
                r.functions
                    .iter()
                    .map(|f| (f.function.clone(), (f.energy_j, ())))
                    .collect()
            })
            .into_iter()
            .map(|(function, (values, runs, ()))| FunctionStats {
                function,
                energy_j: stats(&values, &runs),
            })
            .collect();
            f.sort_by(|a, b| b.energy_j.median.total_cmp(&a.energy_j.median));
            f
        },
        energy_j: energy,
    };
    let mut top = reports.swap_remove(representative - 1);
    top.repeat = Some(Repeat {
        runs_requested_count: info.runs_requested_count,
        warmup_runs_count: info.warmup_runs_count,
        cooldown_s: info.cooldown_s,
        stopped_early: info.stopped_early,
        representative_run: representative,
        noise_verdict: NoiseVerdict::of_cv(statistics.attributed_energy_j.cv_pct),
        noise_of: NOISE_OF,
        runs,
        statistics,
    });
    Some(top)
}

/// Per key, the values of the runs that have it (and those runs' indexes), plus what the
/// key carries beside its value.
fn per_key<X: Clone>(
    runs: &[RepeatRun],
    of: impl Fn(&RepeatRun) -> Vec<(String, (f64, X))>,
) -> BTreeMap<String, (Vec<f64>, Vec<usize>, X)> {
    let mut out: BTreeMap<String, (Vec<f64>, Vec<usize>, X)> = BTreeMap::new();
    for run in runs {
        for (key, (value, extra)) in of(run) {
            let entry = out
                .entry(key)
                .or_insert_with(|| (Vec::new(), Vec::new(), extra.clone()));
            entry.0.push(value);
            entry.1.push(run.index);
        }
    }
    out
}

fn group_stats(runs: &[RepeatRun]) -> Vec<GroupStats> {
    let energy = per_key(runs, |r| {
        r.process_groups
            .iter()
            .map(|g| (g.group.clone(), (g.energy_j, g.command.clone())))
            .collect()
    });
    let cpu = per_key(runs, |r| {
        r.process_groups
            .iter()
            .map(|g| (g.group.clone(), (g.cpu_time_s, ())))
            .collect()
    });
    let mut groups: Vec<GroupStats> = energy
        .into_iter()
        .map(|(group, (values, indexes, command))| {
            let (cpu_values, cpu_runs, ()) = cpu.get(&group).cloned().unwrap_or_default();
            GroupStats {
                name: program_name(&command),
                group,
                command,
                energy_j: stats(&values, &indexes),
                cpu_time_s: stats(&cpu_values, &cpu_runs),
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.energy_j
            .median
            .total_cmp(&a.energy_j.median)
            .then_with(|| a.group.cmp(&b.group))
    });
    groups
}

/// The program's name in a command line: its first word's file name.
fn program_name(command: &str) -> String {
    super::names::program_in_command(command).to_string()
}

fn repeat_run(report: &Report, index: usize) -> RepeatRun {
    let totals = &report.totals;
    RepeatRun {
        index,
        started_at: report.meta.started_at.clone(),
        ended_at: report.meta.ended_at.clone(),
        duration_s: totals.duration_s,
        energy_j: totals.energy_j,
        attributed_energy_j: totals.attributed_energy_j,
        avg_power_w: totals.avg_power_w,
        domains: totals
            .domains
            .iter()
            .map(|(name, d)| {
                (
                    name.clone(),
                    RunDomain {
                        energy_j: d.energy_j,
                    },
                )
            })
            .collect(),
        process_groups: process_groups(&report.processes),
        functions: report
            .function_totals
            .iter()
            .map(|f| RunFunction {
                function: format!("{}:{}", f.module, f.symbol),
                energy_j: f.energy_j,
            })
            .collect(),
        outlier: false,
        command_exit_code: report.meta.command_exit_code,
        report: Box::new(report.clone()),
    }
}

/// A process's command line as one string (its name when it has none).
fn command_of(p: &ProcessEntry) -> String {
    if p.cmdline.is_empty() {
        format!("[{}]", p.comm)
    } else {
        p.cmdline.join(" ")
    }
}

/// The run's processes keyed by their place in the tree: the command lines from the root
/// down, each with its rank (by start, then pid) among the siblings that share its command
/// line. Pids differ from run to run; this does not.
pub fn process_groups(processes: &[ProcessEntry]) -> Vec<RunGroup> {
    let parents = super::tree::parents(processes);
    let parent = |i: usize| parents[i];
    // Rank among siblings with the same command line.
    let mut order: Vec<usize> = (0..processes.len()).collect();
    order.sort_by(|&a, &b| {
        processes[a]
            .started_s
            .total_cmp(&processes[b].started_s)
            .then(processes[a].pid.cmp(&processes[b].pid))
    });
    let mut seen: BTreeMap<(Option<usize>, String), usize> = BTreeMap::new();
    let mut rank = vec![0usize; processes.len()];
    for &i in &order {
        let n = seen
            .entry((parent(i), command_of(&processes[i])))
            .or_default();
        *n += 1;
        rank[i] = *n;
    }
    let key = |mut i: usize| -> String {
        let mut parts = Vec::new();
        // Bounded: a pid cycle (a pid reused within the run) cannot loop.
        for _ in 0..processes.len() {
            parts.push(format!("{}#{}", command_of(&processes[i]), rank[i]));
            match parent(i) {
                Some(j) => i = j,
                None => break,
            }
        }
        parts.reverse();
        parts.join(" > ")
    };
    processes
        .iter()
        .enumerate()
        .map(|(i, p)| RunGroup {
            group: key(i),
            command: command_of(p),
            energy_j: p.energy_j,
            cpu_time_s: p.cpu_time_s,
        })
        .collect()
}

/// The summary's part for a run set: per run, then the statistics and the verdict.
pub fn render(repeat: &Repeat, estimated: bool) -> String {
    use std::fmt::Write as _;
    let kind = if estimated { "ESTIMATED" } else { "measured" };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nREPEAT: {} measured run(s) of {} asked, {} warm-up, energy {kind}",
        repeat.runs.len(),
        repeat.runs_requested_count,
        repeat.warmup_runs_count
    );
    if let Some(why) = &repeat.stopped_early {
        let _ = writeln!(out, "stopped early: {}", crate::printable::printable(why));
    }
    let _ = writeln!(
        out,
        "{:>5}  {:>10}  {:>11}  {:>11}  {:>8}",
        "RUN", "TIME [s]", "TARGETS [J]", "ENERGY [J]", "AVG [W]"
    );
    for run in &repeat.runs {
        let _ = writeln!(
            out,
            "{:>5}  {:>10.3}  {:>11.3}  {:>11.3}  {:>8.2}{}{}",
            run.index,
            run.duration_s,
            run.attributed_energy_j,
            run.energy_j,
            run.avg_power_w,
            if run.index == repeat.representative_run {
                "  (representative)"
            } else {
                ""
            },
            if run.outlier { "  OUTLIER" } else { "" }
        );
    }
    let _ = writeln!(
        out,
        "\n{:<32} {:<4} {:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>10}",
        "STATISTICS", "UNIT", "MEDIAN", "MEAN", "STD DEV", "CV", "MIN", "MAX", "IQR"
    );
    let st = &repeat.statistics;
    let mut line = |name: &str, unit: &str, s: &Stats| {
        let _ = writeln!(
            out,
            "{:<32} {:<4} {:>10.3} {:>10.3} {:>10.3} {:>6.1}% {:>10.3} {:>10.3} {:>10.3}",
            crate::printable::fit(name, 32),
            unit,
            s.median,
            s.mean,
            s.std_dev,
            s.cv_pct,
            s.min,
            s.max,
            s.iqr
        );
    };
    line("targets' energy", "J", &st.attributed_energy_j);
    line("energy (whole machine)", "J", &st.energy_j);
    line("duration", "s", &st.duration_s);
    line("average power", "W", &st.avg_power_w);
    for (name, d) in &st.domains {
        line(&format!("domain {name}"), "J", &d.energy_j);
    }
    for g in st.process_groups.iter().take(10) {
        line(&short_command(&g.command), "J", &g.energy_j);
    }
    for f in st.functions.iter().take(10) {
        line(&f.function, "J", &f.energy_j);
    }
    let outliers = &st.attributed_energy_j.outlier_runs;
    let _ = writeln!(
        out,
        "noise: {} (CV of the targets' energy {:.1}%, the whole machine's {:.1}%){}",
        repeat.noise_verdict.name(),
        st.attributed_energy_j.cv_pct,
        st.energy_j.cv_pct,
        if outliers.is_empty() {
            String::new()
        } else {
            format!(
                "; outlier run(s) beyond 1.5 x IQR: {}",
                outliers
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    out
}

/// A command line starting with its program's name rather than its path.
fn short_command(command: &str) -> String {
    match command.split_once(' ') {
        Some((program, rest)) => format!("{} {rest}", program_name(program)),
        None => program_name(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn idx(n: usize) -> Vec<usize> {
        (1..=n).collect()
    }

    #[test]
    fn quartiles_follow_type_7() {
        // numpy.percentile([1, 2, 3, 4], [25, 50, 75]) = 1.75, 2.5, 3.25
        let s = stats(&[4.0, 1.0, 3.0, 2.0], &idx(4));
        assert!(
            close(s.q1, 1.75) && close(s.median, 2.5) && close(s.q3, 3.25),
            "{s:?}"
        );
        assert!(close(s.iqr, 1.5));
        // numpy.percentile([7, 15, 36, 39, 40, 41], [25, 50, 75]) = 20.25, 37.5, 39.75
        let s = stats(&[7.0, 15.0, 36.0, 39.0, 40.0, 41.0], &idx(6));
        assert!(close(s.q1, 20.25) && close(s.median, 37.5) && close(s.q3, 39.75));
        // One value: every quantile is it.
        let s = stats(&[3.0], &[1]);
        assert!(close(s.q1, 3.0) && close(s.q3, 3.0) && s.std_dev == 0.0 && s.cv_pct == 0.0);
    }

    #[test]
    fn mean_deviation_and_cv_of_a_known_set() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let s = stats(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], &idx(8));
        assert!(close(s.mean, 5.0));
        assert!(close(s.std_dev, (32.0f64 / 7.0).sqrt()), "{}", s.std_dev);
        assert!(close(s.cv_pct, 100.0 * (32.0f64 / 7.0).sqrt() / 5.0));
        assert!(close(s.min, 2.0) && close(s.max, 9.0) && close(s.median, 4.5));
        assert_eq!(s.runs_count, 8);
    }

    #[test]
    fn iqr_outliers_are_flagged_by_run() {
        // Q1 10.25, Q3 11.75 (IQR 1.5): fences 8.0 and 14.0.
        let s = stats(&[10.0, 11.0, 30.0, 10.5, 11.5, 12.0, 10.0], &idx(7));
        assert_eq!(s.outlier_runs, [3]);
        let s = stats(&[10.0, 10.0, 10.0, 10.0], &[2, 4, 6, 8]);
        assert!(s.outlier_runs.is_empty());
        // The run indexes given are the ones reported.
        let s = stats(&[1.0, 1.1, 1.0, 9.0, 1.05], &[3, 4, 5, 6, 7]);
        assert_eq!(s.outlier_runs, [6]);
    }

    #[test]
    fn verdict_thresholds() {
        assert_eq!(NoiseVerdict::of_cv(0.0), NoiseVerdict::Excellent);
        assert_eq!(NoiseVerdict::of_cv(1.99), NoiseVerdict::Excellent);
        assert_eq!(NoiseVerdict::of_cv(2.0), NoiseVerdict::Good);
        assert_eq!(NoiseVerdict::of_cv(4.99), NoiseVerdict::Good);
        assert_eq!(NoiseVerdict::of_cv(5.0), NoiseVerdict::Moderate);
        assert_eq!(NoiseVerdict::of_cv(9.99), NoiseVerdict::Moderate);
        assert_eq!(NoiseVerdict::of_cv(10.0), NoiseVerdict::HighNoise);
        assert_eq!(NoiseVerdict::of_cv(f64::NAN), NoiseVerdict::HighNoise);
        assert!(!NoiseVerdict::Good.worrying() && NoiseVerdict::Moderate.worrying());
        assert_eq!(
            serde_json::to_value(NoiseVerdict::HighNoise).unwrap(),
            "high-noise"
        );
    }

    fn proc(pid: u32, ppid: u32, cmd: &str, started_s: f64, root: bool) -> ProcessEntry {
        ProcessEntry {
            pid,
            ppid: Some(ppid),
            comm: cmd.split(' ').next().unwrap().into(),
            cmdline: cmd.split(' ').map(String::from).collect(),
            root,
            cpu_time_s: 1.0,
            energy_j: pid as f64,
            avg_power_w: 0.0,
            share_pct: 0.0,
            domains: Default::default(),
            started_s,
            ended_s: None,
            alive_s: 1.0,
            exit_code: None,
            exit_signal: None,
            threads: Vec::new(),
            cgroup: None,
        }
    }

    #[test]
    fn processes_are_matched_by_command_and_place_in_the_tree_not_pid() {
        let run1 = [
            proc(100, 1, "sh -c work", 0.0, true),
            proc(101, 100, "sleep 1", 0.1, false),
            proc(102, 100, "sleep 1", 0.2, false),
            proc(103, 101, "cat", 0.3, false),
        ];
        // The same tree, other pids, listed in another order.
        let run2 = [
            proc(502, 500, "sleep 1", 0.2, false),
            proc(500, 1, "sh -c work", 0.0, true),
            proc(510, 501, "cat", 0.35, false),
            proc(501, 500, "sleep 1", 0.1, false),
        ];
        let keys = |ps: &[ProcessEntry]| -> BTreeMap<u32, String> {
            process_groups(ps)
                .into_iter()
                .zip(ps)
                .map(|(g, p)| (p.pid, g.group))
                .collect()
        };
        let (k1, k2) = (keys(&run1), keys(&run2));
        assert_eq!(k1[&100], "sh -c work#1");
        assert_eq!(k1[&101], "sh -c work#1 > sleep 1#1");
        assert_eq!(k1[&102], "sh -c work#1 > sleep 1#2");
        assert_eq!(k1[&103], "sh -c work#1 > sleep 1#1 > cat#1");
        assert_eq!(k1[&100], k2[&500]);
        assert_eq!(k1[&101], k2[&501]);
        assert_eq!(k1[&102], k2[&502]);
        assert_eq!(k1[&103], k2[&510]);
        assert_eq!(program_name("/usr/bin/python3 -c x"), "python3");
    }
}
