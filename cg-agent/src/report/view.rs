//! A written report as its readers see it: one typed model of the report schema (major
//! version 1, as [`super::Report`] writes it) for every reader: `diff` and `compare`, the
//! comparison of `--repeat` sets, and the HTML page (`cg-trace report`, `--html`).
//! [`super::read`] checks a file and deserializes it into a [`ReportView`].
//!
//! What every schema-1 report holds is required: a report without it, or with a field of
//! another type, is refused, naming the field. What a later minor version added, or what only
//! some runs have, is an `Option` or empty by default, so that an earlier 1.x report still
//! reads and the page shows `—` where it lacks a figure. Fields no reader uses are skipped,
//! not built, and so are fields this version does not know; the time series is read only
//! where asked for ([`ReportView`]'s `Series`). Serde refuses numbers JSON cannot hold finite
//! (`1e999`), so every figure read is finite.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, BinaryHeap, HashMap},
    fmt,
};

use serde::{
    Deserialize, Deserializer,
    de::{self, IgnoredAny},
};
use serde_json::Value;

/// Characters of a command line a reader keeps (the whole is in the report).
pub const MAX_COMMAND_CHARS: usize = 400;
/// Processes kept one by one, those with the most energy ([`ProcessesView::top`]).
pub const TOP_PROCESSES: usize = 50;

/// A report. `Series`: how its time series is read ([`IgnoredAny`]: skipped; a
/// [`PageReport`] reads it as points).
#[derive(Debug, Deserialize)]
#[serde(bound = "Series: Deserialize<'de>")]
pub struct ReportView<Series = IgnoredAny> {
    pub meta: MetaView,
    pub processes: ProcessesView,
    /// Per process (the page shows them when the report has no totals over processes).
    #[serde(default)]
    pub functions: Vec<FunctionView>,
    #[serde(default)]
    pub function_totals: Vec<FunctionView>,
    pub totals: TotalsView,
    #[serde(default)]
    pub timeseries: Option<Series>,
    #[serde(default)]
    pub repeat: Option<RepeatView>,
    #[serde(default)]
    pub budgets: Vec<BudgetView>,
}

/// A report with its time series, as the page reads it.
pub type PageReport = ReportView<Vec<PointView>>;

/// Fields shown one by one whatever they are (`meta.profiler`, `totals.lost_events`): a
/// later version's fields show too.
pub type Fields = BTreeMap<String, Value>;

#[derive(Debug, Deserialize)]
pub struct MetaView {
    pub schema_version: String,
    pub run_id: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub cpu_model: String,
    pub sources: Vec<SourceView>,
    #[serde(default)]
    pub tool_version: String,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub ended_at: String,
    #[serde(default)]
    pub duration_s: Option<f64>,
    #[serde(default)]
    pub kernel: String,
    #[serde(default)]
    pub cpu_count: Option<u64>,
    /// `wrap`, `attach` or `system`.
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub command_exit_code: Option<i64>,
    #[serde(default)]
    pub command_exit_signal: Option<i64>,
    #[serde(default)]
    pub pids: Vec<u64>,
    #[serde(default)]
    pub stop_reason: String,
    #[serde(default)]
    pub interval_ms: Option<f64>,
    #[serde(default)]
    pub source_selection: String,
    #[serde(default)]
    pub idle_baseline: Vec<IdleView>,
    #[serde(default)]
    pub measurement_quality: QualityView,
    #[serde(default)]
    pub gpus: Vec<GpuView>,
    #[serde(default)]
    pub profiler: Option<Fields>,
    #[serde(default)]
    pub power_meter: Option<Fields>,
    #[serde(default)]
    pub function_profiling: Option<Fields>,
}

#[derive(Debug, Deserialize)]
pub struct SourceView {
    pub name: String,
    pub provenance: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub domains: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct IdleView {
    pub domain: String,
    pub power_w: Option<f64>,
    pub method: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct QualityView {
    /// `measured`, `degraded` or `estimated`.
    pub grade: String,
    pub notes: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GpuView {
    pub domain: String,
    pub name: String,
    pub memory_total_bytes: Option<f64>,
}

/// The processes a report lists, as its readers use them: summed per program, the
/// [`TOP_PROCESSES`] with the most energy one by one, the rest summed. Read entry by entry,
/// each entry dropped once counted: a report may list a million processes, and this holds
/// a few figures per program and 8 bytes per process (its pid's program).
#[derive(Debug, Default)]
pub struct ProcessesView {
    /// Per program ([`ProcessView::program`]), in the order first met.
    pub groups: Vec<(String, Sums)>,
    /// The processes with the most energy, the most first (in the report's order on a tie).
    pub top: Vec<ProcessView>,
    /// The processes not in `top`.
    pub rest: Sums,
    /// Each process's pid and its program's index in `groups`, by pid.
    programs: Vec<(u32, u32)>,
}

/// Processes counted, and their CPU time and energy summed (in the report's order).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sums {
    pub count: usize,
    pub cpu_time_s: f64,
    pub energy_j: f64,
}

impl Sums {
    fn add(&mut self, p: &ProcessView) {
        self.count += 1;
        self.cpu_time_s += p.cpu_time_s;
        self.energy_j += p.energy_j;
    }
}

impl ProcessesView {
    /// All processes listed.
    pub fn count(&self) -> usize {
        self.groups.iter().map(|(_, sums)| sums.count).sum()
    }

    /// The program of the process `pid` (of one of them, when the pid was reused).
    pub fn program_of(&self, pid: u64) -> Option<&str> {
        let pid = u32::try_from(pid).ok()?;
        let i = self.programs.binary_search_by_key(&pid, |&(p, _)| p).ok()?;
        Some(self.groups[self.programs[i].1 as usize].0.as_str())
    }
}

/// A process in [`ProcessesView`]'s running top: ordered worst first (least energy, then
/// latest in the report), so that the heap's greatest is the one to drop.
struct Ranked(usize, ProcessView);

impl Ranked {
    fn key(&self) -> (f64, std::cmp::Reverse<usize>) {
        (self.1.energy_j, std::cmp::Reverse(self.0))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        b.0.total_cmp(&a.0).then(b.1.cmp(&a.1))
    }
}

impl<'de> Deserialize<'de> for ProcessesView {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> de::Visitor<'de> for Entries {
            type Value = ProcessesView;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of processes")
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = ProcessesView::default();
                let mut index: HashMap<String, u32> = HashMap::new();
                let mut top = BinaryHeap::with_capacity(TOP_PROCESSES + 1);
                let mut seen = 0;
                while let Some(p) = seq.next_element::<ProcessView>()? {
                    let group = match index.get(p.program()) {
                        Some(&group) => group,
                        None => {
                            let group = out.groups.len() as u32;
                            out.groups.push((p.program().to_string(), Sums::default()));
                            index.insert(p.program().to_string(), group);
                            group
                        }
                    };
                    out.groups[group as usize].1.add(&p);
                    if let Some(pid) = p.pid.and_then(|pid| u32::try_from(pid).ok()) {
                        out.programs.push((pid, group));
                    }
                    let ranked = Ranked(seen, p);
                    seen += 1;
                    // One the full top outranks goes straight to the rest.
                    if top.len() == TOP_PROCESSES
                        && top.peek().is_some_and(|worst| ranked >= *worst)
                    {
                        out.rest.add(&ranked.1);
                        continue;
                    }
                    top.push(ranked);
                    if top.len() > TOP_PROCESSES
                        && let Some(Ranked(_, dropped)) = top.pop()
                    {
                        out.rest.add(&dropped);
                    }
                }
                out.top = top.into_sorted_vec().into_iter().map(|r| r.1).collect();
                // The last entry of a reused pid wins, as it would in a map.
                out.programs.reverse();
                out.programs.sort_by_key(|&(pid, _)| pid);
                out.programs.dedup_by_key(|&mut (pid, _)| pid);
                out.programs.shrink_to_fit();
                Ok(out)
            }
        }
        deserializer.deserialize_seq(Entries)
    }
}

#[derive(Debug, Deserialize)]
pub struct ProcessView {
    #[serde(default)]
    pub pid: Option<u64>,
    pub comm: String,
    #[serde(default, deserialize_with = "command_line")]
    pub cmdline: CommandLine,
    pub cpu_time_s: f64,
    pub energy_j: f64,
    #[serde(default)]
    pub avg_power_w: Option<f64>,
    #[serde(default)]
    pub share_pct: Option<f64>,
    #[serde(default)]
    pub alive_s: Option<f64>,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub exit_signal: Option<i64>,
}

/// A process's command line as its readers keep it (a report may list a million processes):
/// its first argument, and the words joined by spaces up to [`MAX_COMMAND_CHARS`] characters
/// (one more when there are more, so that a reader can tell it was cut).
#[derive(Debug, Default)]
pub struct CommandLine {
    pub first: Option<String>,
    pub line: String,
}

/// Reads `cmdline` (a list of strings) into a [`CommandLine`], what lies past the limit read
/// and dropped unbuilt.
fn command_line<'de, D: Deserializer<'de>>(deserializer: D) -> Result<CommandLine, D::Error> {
    struct Words;
    impl<'de> de::Visitor<'de> for Words {
        type Value = CommandLine;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings")
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<CommandLine, A::Error> {
            let mut out = CommandLine::default();
            let mut chars = 0;
            while chars <= MAX_COMMAND_CHARS
                && let Some(word) = seq.next_element::<String>()?
            {
                if out.first.is_none() {
                    out.first = Some(word.clone());
                } else {
                    out.line.push(' ');
                    chars += 1;
                }
                for c in word
                    .chars()
                    .take((MAX_COMMAND_CHARS + 1).saturating_sub(chars))
                {
                    out.line.push(c);
                    chars += 1;
                }
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(out)
        }
    }
    deserializer.deserialize_seq(Words)
}

impl ProcessView {
    /// The program it ran ([`super::names::program_of`]).
    pub fn program(&self) -> &str {
        super::names::program_of(self.cmdline.first.as_deref(), &self.comm)
    }

    /// Its command line (cut after [`MAX_COMMAND_CHARS`]), `[comm]` when it has none.
    pub fn command(&self) -> String {
        if self.cmdline.first.is_none() {
            format!("[{}]", self.comm)
        } else {
            self.cmdline.line.clone()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct FunctionView {
    pub symbol: String,
    #[serde(default)]
    pub module: String,
    pub cpu_time_s: f64,
    pub energy_j: f64,
    #[serde(default)]
    pub self_energy_j: Option<f64>,
    /// Function probes count calls; sampling counts samples.
    #[serde(default)]
    pub calls: Option<u64>,
    #[serde(default)]
    pub samples: Option<u64>,
}

impl FunctionView {
    /// `module:symbol`, as `repeat.runs[].functions[].function` names it.
    pub fn function(&self) -> String {
        format!("{}:{}", self.module, self.symbol)
    }
}

#[derive(Debug, Deserialize)]
pub struct TotalsView {
    /// Over the top-level domains.
    #[serde(flatten)]
    pub split: SplitView,
    pub cpu_time_s: f64,
    pub domains: BTreeMap<String, DomainView>,
    #[serde(default)]
    pub intervals_count: Option<u64>,
    #[serde(default)]
    pub lost_events: Option<Fields>,
}

#[derive(Debug, Deserialize)]
pub struct DomainView {
    #[serde(flatten)]
    pub split: SplitView,
    pub top_level: bool,
    pub provenance: String,
}

/// Energy as the report splits every total of it: targets + other + idle = measured.
#[derive(Debug, Deserialize)]
pub struct SplitView {
    pub energy_j: f64,
    /// The targets' share of `energy_j`.
    pub attributed_energy_j: f64,
    #[serde(default)]
    pub other_energy_j: Option<f64>,
    #[serde(default)]
    pub idle_energy_j: Option<f64>,
    #[serde(default)]
    pub avg_power_w: Option<f64>,
    #[serde(default)]
    pub idle_power_w: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct BudgetView {
    /// `energy` or `power`.
    pub kind: String,
    /// `J` or `W`.
    pub unit: String,
    /// A named budget's program (`None`: the whole run).
    pub program: Option<String>,
    pub limit: Option<f64>,
    pub value: Option<f64>,
    pub exceeded: bool,
    pub excess_pct: Option<f64>,
    pub statistic: String,
}

// ---------------------------------------------------------------------------------------
// A `--repeat` set

#[derive(Debug, Deserialize)]
pub struct RepeatView {
    pub runs: Vec<RunView>,
    #[serde(default)]
    pub runs_requested_count: Option<u64>,
    #[serde(default)]
    pub warmup_runs_count: Option<u64>,
    #[serde(default)]
    pub cooldown_s: Option<f64>,
    #[serde(default)]
    pub stopped_early: Option<String>,
    #[serde(default)]
    pub representative_run: Option<u64>,
    /// `excellent`, `good`, `moderate` or `high-noise`.
    #[serde(default)]
    pub noise_verdict: String,
    /// The figure whose noise the verdict judges (since schema 1.6; before, `energy_j`).
    #[serde(default)]
    pub noise_of: Option<String>,
    #[serde(default)]
    pub statistics: StatisticsView,
}

#[derive(Debug, Deserialize)]
pub struct RunView {
    pub energy_j: f64,
    #[serde(default)]
    pub domains: BTreeMap<String, RunDomainView>,
    #[serde(default)]
    pub process_groups: Vec<RunGroupView>,
    #[serde(default)]
    pub functions: Vec<RunFunctionView>,
    /// The run's own complete report: its targets' energy.
    pub report: RunReportView,
    #[serde(default)]
    pub index: Option<u64>,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub duration_s: Option<f64>,
    #[serde(default)]
    pub avg_power_w: Option<f64>,
    #[serde(default)]
    pub command_exit_code: Option<i64>,
    #[serde(default)]
    pub outlier: bool,
}

#[derive(Debug, Deserialize)]
pub struct RunReportView {
    pub totals: TotalsView,
}

#[derive(Debug, Deserialize)]
pub struct RunDomainView {
    pub energy_j: f64,
}

#[derive(Debug, Deserialize)]
pub struct RunGroupView {
    pub group: String,
    #[serde(default)]
    pub command: Value,
    pub energy_j: f64,
    #[serde(default)]
    pub cpu_time_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct RunFunctionView {
    pub function: String,
    pub energy_j: f64,
}

impl RunGroupView {
    /// The program of a `--repeat` process group: its command's first word without the
    /// directory (the group's key when the command says nothing).
    pub fn program(&self) -> String {
        command_label(&self.command)
            .and_then(|c| {
                // A process without a command line is named `[comm]`: its program is its
                // comm, as for a single run's processes.
                let c = c
                    .strip_prefix('[')
                    .and_then(|c| c.strip_suffix(']'))
                    .unwrap_or(&c);
                let first = c.split_whitespace().next()?;
                Some(super::names::file_name(first).to_string())
            })
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| self.group.clone())
    }
}

/// A group's `command`, a string or (from other versions) a list of words, as one line.
fn command_label(command: &Value) -> Option<String> {
    match command {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Array(a) if !a.is_empty() => Some(
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The statistics over a set's measured runs.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StatisticsView {
    pub energy_j: Option<StatsView>,
    pub attributed_energy_j: Option<StatsView>,
    pub duration_s: Option<StatsView>,
    pub avg_power_w: Option<StatsView>,
    pub domains: BTreeMap<String, DomainStatsView>,
    pub process_groups: Vec<NamedStatsView>,
    pub functions: Vec<NamedStatsView>,
}

impl StatisticsView {
    /// The statistics of the set-wide figure `key` (`energy_j`, `attributed_energy_j`, ...).
    pub fn of(&self, key: &str) -> Option<&StatsView> {
        match key {
            "energy_j" => self.energy_j.as_ref(),
            "attributed_energy_j" => self.attributed_energy_j.as_ref(),
            "duration_s" => self.duration_s.as_ref(),
            "avg_power_w" => self.avg_power_w.as_ref(),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StatsView {
    pub median: Option<f64>,
    pub mean: Option<f64>,
    pub std_dev: Option<f64>,
    pub cv_pct: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub q1: Option<f64>,
    pub q3: Option<f64>,
    pub outlier_runs: Vec<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DomainStatsView {
    pub energy_j: StatsView,
}

/// A process group's statistics (named by `command`) or a function's (by `function`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NamedStatsView {
    pub command: String,
    pub function: String,
    pub energy_j: StatsView,
}

// ---------------------------------------------------------------------------------------
// The time series

/// One interval of the time series (every figure optional: a report of an earlier version
/// still draws what it has).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PointView {
    pub t_s: Option<f64>,
    pub duration_s: Option<f64>,
    pub energy_j: Option<f64>,
    pub attributed_energy_j: Option<f64>,
    pub other_energy_j: Option<f64>,
    pub idle_energy_j: Option<f64>,
    pub energy_known: Option<bool>,
    pub domains: BTreeMap<String, PointDomainView>,
    /// Per-process figures of the interval, when the report has them.
    #[serde(deserialize_with = "point_processes")]
    pub processes: Vec<PointProcessView>,
    /// Each GPU's own figures, when the run measured GPUs.
    pub gpus: Vec<PointGpuView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PointDomainView {
    pub energy_j: Option<f64>,
    pub energy_known: Option<bool>,
}

/// A process's figures in one interval: by pid (its name is in the process list), or, in
/// early reports, by name.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PointProcessView {
    pub pid: Option<u64>,
    /// Early reports named processes (by one of these); the name of a map's entry.
    pub command: Option<String>,
    pub comm: Option<String>,
    pub group: Option<String>,
    pub name: Option<String>,
    pub energy_j: Option<f64>,
    /// Only on the entry of the processes not listed one by one.
    pub folded_processes_count: Option<u64>,
}

/// A point's `processes`: a list of entries, or (early reports) a map from a process's name
/// to its figures or its energy.
fn point_processes<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<PointProcessView>, D::Error> {
    struct Processes;
    impl<'de> de::Visitor<'de> for Processes {
        type Value = Vec<PointProcessView>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of processes or a map from name to figures")
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut list = Vec::new();
            while let Some(p) = seq.next_element()? {
                list.push(p);
            }
            Ok(list)
        }

        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Figures {
                Energy(f64),
                Entry(PointProcessView),
            }
            let mut list = Vec::new();
            while let Some((name, figures)) = map.next_entry::<String, Figures>()? {
                let mut p = match figures {
                    Figures::Energy(energy_j) => PointProcessView {
                        energy_j: Some(energy_j),
                        ..PointProcessView::default()
                    },
                    Figures::Entry(p) => p,
                };
                p.name = Some(name);
                list.push(p);
            }
            Ok(list)
        }
    }
    deserializer.deserialize_any(Processes)
}

/// One GPU's figures in one interval.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PointGpuView {
    pub domain: Option<String>,
    pub utilization_pct: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// `(pid, program, energy)` as a report lists them, each with 1 s of CPU per joule.
    fn processes(list: &[(u64, &str, f64)]) -> ProcessesView {
        let entries: Vec<Value> = list
            .iter()
            .map(|&(pid, program, energy_j)| {
                json!({"pid": pid, "comm": program, "cmdline": [format!("/bin/{program}")],
                       "cpu_time_s": energy_j, "energy_j": energy_j})
            })
            .collect();
        serde_json::from_value(Value::Array(entries)).unwrap()
    }

    #[test]
    fn processes_keep_the_top_one_by_one_and_sum_the_rest_and_each_program() {
        // pid:     1    2    3 ... (TOP_PROCESSES + 10 of them, energy 1 J each but the
        // energy: 1    1    1       last, 5 J): the top is the last, then the first ones in
        // the report's order; the ten latest of the 1 J ones are the rest.
        let mut list: Vec<(u64, &str, f64)> = (1..=TOP_PROCESSES as u64 + 9)
            .map(|pid| (pid, if pid % 2 == 0 { "even" } else { "odd" }, 1.0))
            .collect();
        list.push((999, "big", 5.0));
        let view = processes(&list);
        assert_eq!(view.top.len(), TOP_PROCESSES);
        assert_eq!(view.top[0].pid, Some(999));
        let kept: Vec<u64> = view.top[1..].iter().filter_map(|p| p.pid).collect();
        assert_eq!(kept, (1..TOP_PROCESSES as u64).collect::<Vec<_>>());
        assert_eq!(
            view.rest,
            Sums {
                count: 10,
                cpu_time_s: 10.0,
                energy_j: 10.0
            }
        );
        assert_eq!(view.count(), TOP_PROCESSES + 10);
        let groups: Vec<(&str, usize, f64)> = view
            .groups
            .iter()
            .map(|(name, s)| (name.as_str(), s.count, s.energy_j))
            .collect();
        assert_eq!(
            groups,
            [("odd", 30, 30.0), ("even", 29, 29.0), ("big", 1, 5.0)]
        );
    }

    #[test]
    fn a_pid_names_its_program_the_last_entry_winning_when_it_was_reused() {
        let view = processes(&[(7, "make", 1.0), (8, "cc", 1.0), (7, "ld", 1.0)]);
        assert_eq!(view.program_of(7), Some("ld"));
        assert_eq!(view.program_of(8), Some("cc"));
        assert_eq!(view.program_of(9), None);
        assert_eq!(view.program_of(u64::MAX), None);
        assert!(processes(&[]).top.is_empty());
    }

    #[test]
    fn a_series_point_reads_processes_as_a_list_or_by_name() {
        let point = |processes: Value| -> PointView {
            serde_json::from_value(json!({"t_s": 1.0, "processes": processes})).unwrap()
        };
        let listed = point(json!([{"pid": 7, "energy_j": 0.5}]));
        assert_eq!(listed.processes[0].pid, Some(7));
        for by_name in [json!({"app": {"energy_j": 0.5}}), json!({"app": 0.5})] {
            let p = &point(by_name).processes[0];
            assert_eq!((p.name.as_deref(), p.energy_j), (Some("app"), Some(0.5)));
        }
        assert!(serde_json::from_value::<PointView>(json!({"processes": 3})).is_err());
    }

    #[test]
    fn a_repeat_groups_program_is_its_commands_first_words_file_name() {
        let group = |command: Value| RunGroupView {
            group: "key#1".into(),
            command,
            energy_j: 1.0,
            cpu_time_s: None,
        };
        assert_eq!(group(json!("/usr/bin/make -j2")).program(), "make");
        // A process gone before its command line was read: its comm, in brackets.
        assert_eq!(group(json!("[gzip]")).program(), "gzip");
        assert_eq!(group(json!(["/opt/app", "--fast"])).program(), "app");
        // A command that says nothing: the group's key.
        for nothing in [json!(""), json!([]), Value::Null, json!(5)] {
            assert_eq!(group(nothing).program(), "key#1");
        }
    }
}
