//! The report model (a JSON contract: every numeric field name carries its unit, `_j`, `_w`,
//! `_s`, `_ms`, `_pct`, `_bytes`, `_count`) and [`build`], which attributes a run's
//! recording once the idle baselines are known. Every output (summary, JSON) reads this
//! model; none of them recomputes attribution. [`live`] is its counterpart while a run goes
//! on, which the terminal view reads.
//!
//! The schema is documented in `docs/report.md`. Function figures are built in
//! [`functions`].

pub mod budget;
pub mod finite;
pub mod functions;
pub mod names;
pub mod read;
pub mod repeat;
pub mod series;
pub mod threads;
pub mod tree;
pub mod view;

pub mod live;
mod quality;

pub use functions::FunctionEntry;

use std::{collections::BTreeMap, time::SystemTime};

use serde::Serialize;

use crate::{
    attribution::{
        Coverage, DomainSplit, Interval, Ledger, ProcId,
        functions::{IntervalSpend, ProcessSpend},
        idle::{IdleBaseline, IdleMethod, RestOrigin},
        split_interval,
    },
    probes::Losses,
    session::{Mode, ProfilerCost, Recording, RunningProcess, processes::Ending},
    small_map::SmallMap,
    sources::{
        DomainKind, DomainSpec, Provenance, SourceProbe, gpu::GpuSummary, meter::MeterSummary,
    },
};

/// Version of the report schema; the minor part is bumped when fields are added, the major
/// part when a field changes meaning or disappears.
pub const SCHEMA_VERSION: &str = "1.8";

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub meta: Meta,
    pub processes: Vec<ProcessEntry>,
    pub functions: Vec<FunctionEntry>,
    /// Per function over all processes (`functions` is per process).
    pub function_totals: Vec<functions::FunctionTotal>,
    pub totals: Totals,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeseries: Option<Vec<TimePoint>>,
    /// `--repeat N`: every measured run, the statistics over them and the noise verdict (the
    /// rest of the report is the representative run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<repeat::Repeat>,
    /// `--max-energy`/`--max-power`: each limit, the figure it was checked against, and
    /// whether it was exceeded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<budget::Budget>,
    /// Energy per sampled stack, for folded stacks and flamegraphs (not in the JSON).
    #[serde(skip)]
    pub stacks: Vec<functions::StackEnergy>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub schema_version: &'static str,
    pub tool: &'static str,
    pub tool_version: &'static str,
    pub run_id: String,
    pub started_at: String,
    pub ended_at: String,
    pub duration_s: f64,
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpu_count: usize,
    /// `wrap`, `attach` or `system`.
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_exit_signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<Vec<u32>>,
    pub stop_reason: String,
    /// Wrap mode: processes the command started that were still running when cg-trace
    /// stopped (the command ignored the stop signal, or a daemon it started).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub still_running: Vec<RunningProcess>,
    pub interval_ms: u64,
    pub calibration_s: f64,
    pub sources: Vec<SourceEntry>,
    pub source_selection: String,
    pub domain_topology: Vec<DomainEntry>,
    pub idle_baseline: Vec<IdleEntry>,
    pub measurement_quality: Quality,
    pub profiler: ProfilerEntry,
    /// How CPU time was read (`iterator` or `switch`) and why (since 1.7).
    pub accounting: crate::session::accounting::AccountingChoice,
    /// Every source probed when choosing, usable or not, and why (what `cg-trace sources`
    /// shows).
    pub sources_probed: Vec<SourceProbe>,
    /// Per GPU measured: name, UUID, telemetry, which figures were measured and which derived.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSummary>,
    /// The power meter's log, with `--power-log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_meter: Option<MeterSummary>,
    /// Function-level profiling (`--func`, `--profile`): what was probed or sampled, its
    /// cost and where it is approximate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_profiling: Option<functions::FunctionProfiling>,
}

/// One energy source: the run header's own description (one struct for both).
pub type SourceEntry = crate::session::SourceInfo;

#[derive(Clone, Debug, Serialize)]
pub struct DomainEntry {
    pub name: String,
    pub kind: DomainKind,
    /// The domain that already includes this one's energy.
    pub parent: Option<String>,
    /// Domains whose energy this one includes.
    pub contains: Vec<String>,
    /// Whether it counts towards the totals (it has no parent).
    pub top_level: bool,
    /// CPU ids its energy is split over; `null` means every CPU (`[]` for a GPU).
    pub cpus: Option<Vec<u32>>,
    /// GPU domains: the index into `meta.gpus`, whose energy is split by GPU utilisation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub provenance: Provenance,
    pub source: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdleEntry {
    pub domain: String,
    pub power_w: f64,
    /// `given`, `model`, `rest`, `regression`, `prior` or `none`.
    pub method: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit_points_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slope_w_per_cpu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r_squared: Option<f64>,
    /// `rest`: `rest_seen_this_run`, `rest_from_state_file` or `model_table` (estimated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_source: Option<&'static str>,
    /// `rest_from_state_file`: how long before this run the rest power was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_age_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Quality {
    /// `measured` (hardware counters, nothing lost), `degraded` (measured, but something was
    /// lost or approximated: see notes) or `estimated` (a model produced the energy).
    pub grade: &'static str,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfilerEntry {
    /// CPU time, peak memory and probe attach time, as the session measured them.
    #[serde(flatten)]
    pub cost: ProfilerCost,
    /// Intervals that lasted more than twice as long as asked (cg-trace itself did not get
    /// the CPU in time: their figures are exact in sum but coarser in time).
    pub starved_intervals_count: u64,
    /// The longest interval of the run.
    pub longest_interval_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessEntry {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub comm: String,
    pub cmdline: Vec<String>,
    /// The wrapped command or an attached pid (not a descendant).
    pub root: bool,
    pub cpu_time_s: f64,
    /// Sum over top-level domains.
    pub energy_j: f64,
    /// Energy over the time the process was alive during the run.
    pub avg_power_w: f64,
    /// Share of `totals.energy_j`.
    pub share_pct: f64,
    pub domains: SmallMap<String, ProcessDomain>,
    /// When the run first saw it, seconds after the run started.
    pub started_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
    pub alive_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Its busiest threads, then one entry folding the rest: they add up to the process.
    pub threads: Vec<threads::ThreadEntry>,
    /// Its cgroup and what the path says (container, pod, systemd unit), when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<crate::cgroup::CgroupInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessDomain {
    pub energy_j: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    /// Measured (or estimated) energy of the top-level domains.
    pub energy_j: f64,
    pub attributed_energy_j: f64,
    pub other_energy_j: f64,
    pub idle_energy_j: f64,
    pub idle_power_w: f64,
    pub avg_power_w: f64,
    pub duration_s: f64,
    /// On-CPU time of the targets.
    pub cpu_time_s: f64,
    /// Targets' CPU time that was read but fitted in no interval before the run ended: each
    /// interval holds at most its length per CPU, and time read beyond that is carried into
    /// the next one. Normally 0; not in `cpu_time_s`.
    pub unplaced_cpu_time_s: f64,
    /// The same for other tasks (on a busy machine, the read jitter of the last interval).
    pub unplaced_other_cpu_time_s: f64,
    pub domains: BTreeMap<String, DomainTotals>,
    pub lost_events: LostEvents,
    pub intervals_count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DomainTotals {
    pub energy_j: f64,
    pub attributed_energy_j: f64,
    pub other_energy_j: f64,
    pub idle_energy_j: f64,
    pub idle_power_w: f64,
    pub avg_power_w: f64,
    pub provenance: Provenance,
    pub top_level: bool,
    /// GPU domains: the part of `other_energy_j` that no process's utilisation explains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unexplained_energy_j: Option<f64>,
    /// Intervals whose energy is not known (the counter glitched: see the quality notes);
    /// it is in none of the figures above.
    pub unknown_energy_intervals_count: u64,
    /// The time they cover.
    pub unknown_energy_duration_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LostEvents {
    pub total_count: u64,
    /// Target threads whose time the kernel could not store per thread (it went to other).
    pub on_cpu_map_full_count: u64,
    /// Lifecycle events (fork/exec/exit) dropped by a full ring buffer.
    pub events_dropped_count: u64,
    /// Child processes that could not be followed (target map full).
    pub targets_map_full_count: u64,
    /// Context switches the kernel did not report through sched_switch (a target's slice is
    /// charged in full anyway; another task's counts as idle).
    pub unmatched_switches_count: u64,
    /// Times the kernel could not keep a target thread's runtime mark (out of memory).
    pub marks_failed_count: u64,
    /// Iterator accounting: threads closed without their final runtime (no FREE came), each
    /// short by the slice it was running at its exit.
    pub final_runtimes_missing_count: u64,
    /// Intervals for which a source or the probes could not be read.
    pub read_errors_count: u64,
}

impl LostEvents {
    /// The kernel side's losses and the failed reads of sources or probes.
    pub fn new(losses: &Losses, read_errors_count: u64) -> Self {
        LostEvents {
            total_count: losses.total() + read_errors_count,
            on_cpu_map_full_count: losses.on_cpu_map_full,
            events_dropped_count: losses.events_dropped,
            targets_map_full_count: losses.targets_map_full,
            unmatched_switches_count: losses.unmatched_switches,
            marks_failed_count: losses.marks_failed,
            final_runtimes_missing_count: losses.finals_missing,
            read_errors_count,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TimePoint {
    pub t_s: f64,
    pub duration_s: f64,
    pub energy_j: f64,
    pub power_w: f64,
    pub attributed_energy_j: f64,
    pub other_energy_j: f64,
    pub idle_energy_j: f64,
    /// Whether every top-level domain's energy is known over the whole interval.
    pub energy_known: bool,
    pub domains: BTreeMap<String, TimeDomain>,
    /// The interval's busiest processes, then one entry folding the rest: they add up to
    /// `attributed_energy_j`.
    pub processes: Vec<series::TimeProcess>,
    /// Per GPU measured, its own figures (absent when the run measured no GPU).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<series::TimeGpu>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TimeDomain {
    /// What is known of the interval's energy (0 when none is).
    pub energy_j: f64,
    /// `energy_j` over the time whose energy is known.
    pub power_w: f64,
    /// `false` when (part of) the interval's energy is not known: `glitches` says why.
    pub energy_known: bool,
    /// Why not: `step_back`, `jump`, `frozen`, `replaced`, `deleted`, `ambiguous`, `read_failed`,
    /// `unavailable`, `invalid`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub glitches: Vec<&'static str>,
    /// The energy is this interval's share, by duration, of what a counter gained over reads
    /// that failed (known in total, not in time).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub energy_spread: bool,
}

/// Attributes a recording and assembles the report. Pure: the same recording always gives
/// the same report (the run id comes with the recording).
pub fn build(rec: &Recording) -> Report {
    let coverage: Vec<Coverage> = rec
        .header
        .baseline
        .domains
        .iter()
        .map(|d| d.coverage.clone())
        .collect();
    let top: Vec<usize> = (0..rec.header.baseline.domains.len())
        .filter(|&d| rec.header.baseline.domains[d].parent.is_none())
        .collect();
    let baselines = idle_baselines(rec);
    let idle_w: Vec<f64> = baselines.iter().map(|b| b.power_w).collect();

    let mut ledger = Ledger::new(rec.header.baseline.domains.len());
    let mut timeseries = Vec::new();
    let mut spend: Vec<IntervalSpend> = Vec::new();
    for interval in rec.recorder.intervals() {
        let splits = split_interval(interval, &coverage, &idle_w);
        ledger.add(interval, &splits);
        if rec.functions.is_some() {
            spend.push(interval_spend(interval, &splits, &top));
        }
        if rec.timeseries {
            timeseries.push(time_point(rec, interval, &splits, &top));
        }
    }

    let duration_s = rec.duration_ns as f64 / 1e9;
    let sum_top = |f: &dyn Fn(usize) -> f64| top.iter().map(|&d| f(d)).sum::<f64>();
    let energy_j = sum_top(&|d| ledger.domains[d].measured_j);
    let lost_read_errors: u64 = rec.source_errors.values().sum();
    let totals = Totals {
        energy_j,
        attributed_energy_j: sum_top(&|d| ledger.domains[d].attributed_j()),
        other_energy_j: sum_top(&|d| ledger.domains[d].other_j),
        idle_energy_j: sum_top(&|d| ledger.domains[d].idle_j),
        idle_power_w: sum_top(&|d| idle_w[d]),
        avg_power_w: per_second(energy_j, duration_s),
        duration_s,
        cpu_time_s: ledger.cpu_ns.values().sum::<u64>() as f64 / 1e9,
        unplaced_cpu_time_s: rec.carried_past_end_ns as f64 / 1e9,
        unplaced_other_cpu_time_s: rec.other_carried_past_end_ns as f64 / 1e9,
        domains: rec
            .header
            .baseline
            .domains
            .iter()
            .enumerate()
            .map(|(d, spec)| {
                let l = &ledger.domains[d];
                (
                    spec.name.clone(),
                    DomainTotals {
                        energy_j: l.measured_j,
                        attributed_energy_j: l.attributed_j(),
                        other_energy_j: l.other_j,
                        idle_energy_j: l.idle_j,
                        idle_power_w: idle_w[d],
                        // Over the time whose energy is known.
                        avg_power_w: per_second(
                            l.measured_j,
                            duration_s - l.unknown_ns as f64 / 1e9,
                        ),
                        provenance: spec.provenance,
                        top_level: spec.parent.is_none(),
                        unexplained_energy_j: matches!(spec.coverage, Coverage::Gpu(_))
                            .then_some(l.unexplained_j),
                        unknown_energy_intervals_count: l.unknown_count,
                        unknown_energy_duration_s: l.unknown_ns as f64 / 1e9,
                    },
                )
            })
            .collect(),
        lost_events: LostEvents::new(&rec.losses, lost_read_errors),
        intervals_count: ledger.intervals,
    };

    let processes = process_entries(rec, &ledger, &top, energy_j);
    let process_energy = ledger
        .cpu_ns
        .keys()
        .map(|&id| (id, ledger.energy_of(id, &top)))
        .collect();
    let built = functions::build(rec, &spend, &process_energy, &ledger.cpu_ns);
    let mut report = Report {
        meta: Meta {
            function_profiling: built.profiling,
            ..meta(rec, &baselines, &ledger)
        },
        processes,
        functions: built.functions,
        function_totals: built.totals,
        totals,
        timeseries: rec.timeseries.then_some(timeseries),
        repeat: None,
        budgets: Vec::new(),
        stacks: built.stacks,
    };
    accounting_notes(&mut report);
    check_finite(&mut report);
    report
}

/// Where NVIDIA's accounting stats were read (accounting mode on), a note per GPU comparing
/// cg-trace's split of its energy with theirs ([`crate::attribution::gpu::against_accounting`]).
fn accounting_notes(report: &mut Report) {
    let mut notes = Vec::new();
    for gpu in &report.meta.gpus {
        let Some(accounting) = &gpu.accounting else {
            continue;
        };
        let ours: Vec<(u32, f64)> = report
            .processes
            .iter()
            .filter_map(|p| p.domains.get(&gpu.domain).map(|d| (p.pid, d.energy_j)))
            .collect();
        let theirs: Vec<(u32, f64)> = accounting.iter().map(|a| (a.pid, a.busy_s())).collect();
        let running = |pid: u32| accounting.iter().any(|a| a.pid == pid && a.running);
        let checks = crate::attribution::gpu::against_accounting(&ours, &theirs);
        let note = if checks.is_empty() {
            format!(
                "{}: NVIDIA's accounting stats name none of the processes cg-trace charged its \
                 energy to; the split could not be checked",
                gpu.domain
            )
        } else {
            let worst = checks
                .iter()
                .map(|c| (c.ours_pct - c.theirs_pct).abs())
                .fold(0.0, f64::max);
            let each: Vec<String> = checks
                .iter()
                .map(|c| {
                    format!(
                        "pid {} {:.1} % (accounting {:.1} %{})",
                        c.pid,
                        c.ours_pct,
                        c.theirs_pct,
                        if running(c.pid) {
                            ", still running: over its life so far"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            format!(
                "{}: split of its energy among the processes NVIDIA's accounting stats also \
                 name, against theirs (GPU utilisation x time): {}; largest difference {worst:.1} \
                 points",
                gpu.domain,
                each.join(", ")
            )
        };
        notes.push(note);
    }
    report.meta.measurement_quality.notes.extend(notes);
}

/// The last check of a report: every figure is finite. One that is not is a bug upstream; the
/// report says which, and is no longer `measured` (the JSON writer would put `null` there,
/// the summary `-`).
pub fn check_finite(report: &mut Report) {
    let mut found = finite::non_finite(report);
    // Folded stacks and flamegraphs are not in the JSON, but are figures all the same.
    found.extend(report.stacks.iter().enumerate().flat_map(|(i, s)| {
        [("energy_j", s.energy_j), ("cpu_ns", s.cpu_ns)]
            .into_iter()
            .filter(|(_, value)| !value.is_finite())
            .map(move |(name, value)| finite::NonFinite {
                path: format!("stacks[{i}].{name}"),
                value,
            })
    }));
    if found.is_empty() {
        return;
    }
    let quality = &mut report.meta.measurement_quality;
    if quality.grade == "measured" {
        quality.grade = "degraded";
    }
    for f in found.iter().take(10) {
        quality.notes.push(format!(
            "{NOT_FINITE_NOTE}: {} is {} (shown as null; this is a bug in cg-trace, please \
             report it)",
            f.path,
            if f.value.is_nan() {
                "not a number"
            } else {
                "infinite"
            }
        ));
    }
    if found.len() > 10 {
        quality
            .notes
            .push(format!("{NOT_FINITE_NOTE}: and {} more", found.len() - 10));
    }
}

/// How the quality notes start for a figure that is not a number ([`check_finite`]).
pub const NOT_FINITE_NOTE: &str = "not a finite figure";

/// What each target process spent in one interval, over the top-level domains.
fn interval_spend(interval: &Interval, splits: &[DomainSplit], top: &[usize]) -> IntervalSpend {
    let mut processes: BTreeMap<ProcId, ProcessSpend> = BTreeMap::new();
    for slice in &interval.slices {
        processes.entry(slice.process).or_default().cpu_ns += slice.on_cpu_ns;
    }
    for &d in top {
        if let Some(split) = splits.get(d) {
            for &(process, energy_j) in &split.targets_j {
                processes.entry(process).or_default().energy_j += energy_j;
            }
        }
    }
    IntervalSpend {
        start_ns: interval.start_ns,
        duration_ns: interval.duration_ns,
        processes,
    }
}

fn per_second(energy_j: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        energy_j / seconds
    } else {
        0.0
    }
}

/// One baseline per domain (see [`crate::attribution::idle`] for the order of preference),
/// fitted over the whole run and its calibration.
fn idle_baselines(rec: &Recording) -> Vec<IdleBaseline> {
    let inputs = rec.header.baseline.clone();
    (0..rec.header.baseline.domains.len())
        .map(|d| {
            inputs.baseline(d, || {
                rec.recorder
                    .calibration()
                    .iter()
                    .chain(rec.recorder.intervals())
                    .filter_map(|i| inputs.power_point(i, d))
                    .collect()
            })
        })
        .collect()
}

fn time_point(
    rec: &Recording,
    interval: &Interval,
    splits: &[DomainSplit],
    top: &[usize],
) -> TimePoint {
    let dt = interval.duration_ns as f64 / 1e9;
    let sum = |f: &dyn Fn(&DomainSplit) -> f64| top.iter().map(|&d| f(&splits[d])).sum::<f64>();
    let energy_j = sum(&|s| s.measured_j);
    TimePoint {
        t_s: interval.start_ns as f64 / 1e9,
        duration_s: dt,
        energy_j,
        power_w: per_second(energy_j, dt),
        attributed_energy_j: sum(&|s| s.attributed_j()),
        other_energy_j: sum(&|s| s.other_j),
        idle_energy_j: sum(&|s| s.idle_j),
        energy_known: top
            .iter()
            .all(|&d| interval.energy_state(d).unknown_ns == 0),
        domains: rec
            .header
            .baseline
            .domains
            .iter()
            .zip(splits)
            .enumerate()
            .map(|(d, (spec, s))| {
                let state = interval.energy_state(d);
                let known_s = state.known_ns(interval.duration_ns) as f64 / 1e9;
                (
                    spec.name.clone(),
                    TimeDomain {
                        energy_j: s.measured_j,
                        power_w: per_second(s.measured_j, known_s),
                        energy_known: state.unknown_ns == 0,
                        glitches: state.glitches().map(|g| g.name()).collect(),
                        energy_spread: state.spread_ns > 0,
                    },
                )
            })
            .collect(),
        processes: series::processes_of(
            interval,
            splits,
            top,
            &rec.processes,
            series::TOP_PROCESSES,
        ),
        gpus: series::gpus_of(interval, &rec.gpus),
    }
}

fn process_entries(
    rec: &Recording,
    ledger: &Ledger,
    top: &[usize],
    total_j: f64,
) -> Vec<ProcessEntry> {
    let run_start = rec.run_start_ns;
    let run_end = run_start + rec.duration_ns;
    let thread_context = threads::ThreadContext {
        ledger,
        domains: &rec.header.baseline.domains,
        top,
        provenance: rec.header.provenance(),
        shown: threads::TOP_THREADS,
    };
    let mut entries: Vec<ProcessEntry> = rec
        .processes
        .iter()
        .enumerate()
        .filter_map(|(id, p)| {
            let id = id as ProcId;
            let cpu_ns = ledger.cpu_ns.get(&id).copied().unwrap_or(0);
            let energy_j = ledger.energy_of(id, top);
            // With --all, list only processes that ran (or used a GPU: they have energy);
            // targets are always listed.
            let charged = rec
                .header
                .baseline
                .domains
                .iter()
                .enumerate()
                .any(|(d, _)| ledger.domains[d].by_process_j.contains_key(&id));
            if rec.header.mode == Mode::System && cpu_ns == 0 && !charged {
                return None;
            }
            let started = p.first_seen_ns.max(run_start);
            let ended = p.ended_ns.map(|e| e.clamp(started, run_end));
            let alive_s = (ended.unwrap_or(run_end).saturating_sub(started)) as f64 / 1e9;
            let (exit_code, exit_signal) = Ending::code_and_signal(p.ending);
            Some(ProcessEntry {
                pid: p.pid,
                ppid: p.ppid,
                comm: p.comm.clone(),
                cmdline: p.cmdline.clone(),
                root: p.root,
                cpu_time_s: cpu_ns as f64 / 1e9,
                energy_j,
                avg_power_w: per_second(energy_j, alive_s),
                share_pct: if total_j > 0.0 {
                    100.0 * energy_j / total_j
                } else {
                    0.0
                },
                domains: rec
                    .header
                    .baseline
                    .domains
                    .iter()
                    .enumerate()
                    .filter_map(|(d, spec)| {
                        ledger.domains[d]
                            .by_process_j
                            .get(&id)
                            .map(|&energy_j| (spec.name.clone(), ProcessDomain { energy_j }))
                    })
                    .collect(),
                started_s: (started - run_start) as f64 / 1e9,
                ended_s: ended.map(|e| (e - run_start) as f64 / 1e9),
                alive_s,
                exit_code,
                exit_signal,
                threads: threads::entries(&thread_context, id, &p.thread_names),
                cgroup: p.cgroup.clone(),
            })
        })
        .collect();
    entries.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then(a.pid.cmp(&b.pid)));
    entries
}

fn meta(rec: &Recording, baselines: &[IdleBaseline], ledger: &Ledger) -> Meta {
    let starved = quality::starved_intervals(rec);
    let (command, pids) = match &rec.header.mode {
        Mode::Wrap { command } => (Some(command.clone()), None),
        Mode::Attach { pids } => (None, Some(pids.clone())),
        Mode::System => (None, None),
    };
    let (command_exit_code, command_exit_signal) = Ending::code_and_signal(rec.command_ending);
    Meta {
        schema_version: SCHEMA_VERSION,
        tool: "cg-trace",
        tool_version: env!("CARGO_PKG_VERSION"),
        run_id: rec.run_id.clone(),
        started_at: rfc3339(rec.started_at),
        ended_at: rfc3339(rec.ended_at),
        duration_s: rec.duration_ns as f64 / 1e9,
        hostname: rec.header.host.hostname.clone(),
        kernel: rec.header.host.kernel.clone(),
        cpu_model: rec.header.host.cpu_model.clone(),
        cpu_count: rec.header.host.cpu_count(),
        mode: rec.header.mode.name(),
        command,
        command_exit_code,
        command_exit_signal,
        pids,
        stop_reason: rec.stop_reason.clone(),
        still_running: rec.still_running.clone(),
        interval_ms: rec.header.baseline.interval.as_millis() as u64,
        calibration_s: rec.calibration_s,
        sources: rec.header.sources.clone(),
        source_selection: rec.header.selection_reason.clone(),
        domain_topology: domain_topology(&rec.header.baseline.domains),
        idle_baseline: rec
            .header
            .baseline
            .domains
            .iter()
            .zip(baselines)
            .map(|(d, b)| idle_entry(d, b))
            .collect(),
        measurement_quality: quality::quality(rec, baselines, ledger),
        profiler: ProfilerEntry {
            cost: rec.profiler,
            starved_intervals_count: starved.count,
            longest_interval_s: starved.longest_s,
        },
        accounting: rec.accounting.clone(),
        sources_probed: rec.probes.clone(),
        gpus: rec.gpus.clone(),
        power_meter: rec.meter.clone(),
        function_profiling: None,
    }
}

/// `meta.domain_topology`: each domain, where it lies, and which domains it contains.
fn domain_topology(domains: &[DomainSpec]) -> Vec<DomainEntry> {
    domains
        .iter()
        .map(|d| DomainEntry {
            name: d.name.clone(),
            kind: d.kind,
            parent: d.parent.clone(),
            contains: domains
                .iter()
                .filter(|c| c.parent.as_deref() == Some(d.name.as_str()))
                .map(|c| c.name.clone())
                .collect(),
            top_level: d.parent.is_none(),
            cpus: match &d.coverage {
                Coverage::AllCpus => None,
                Coverage::Cpus(cpus) => Some(cpus.clone()),
                Coverage::Gpu(_) => Some(Vec::new()),
            },
            gpu: match d.coverage {
                Coverage::Gpu(n) => Some(n),
                _ => None,
            },
            provenance: d.provenance,
            source: d.source,
        })
        .collect()
}

/// `meta.idle_baseline[]`: a domain's idle baseline, and what it was fitted from or where
/// its rest power was seen.
fn idle_entry(d: &DomainSpec, b: &IdleBaseline) -> IdleEntry {
    let (fit_points_count, slope_w_per_cpu, r_squared) = match b.method {
        IdleMethod::Regression {
            points,
            slope_w_per_cpu,
            r_squared,
        } => (Some(points), Some(slope_w_per_cpu), Some(r_squared)),
        IdleMethod::Prior {
            points,
            slope_w_per_cpu,
        } => (Some(points), Some(slope_w_per_cpu), None),
        _ => (None, None, None),
    };
    let (rest_source, rest_age_s) = match b.method {
        IdleMethod::Rest(origin) => (
            Some(origin.name()),
            match origin {
                RestOrigin::StateFile { age_s } => Some(age_s),
                _ => None,
            },
        ),
        _ => (None, None),
    };
    IdleEntry {
        domain: d.name.clone(),
        power_w: b.power_w,
        method: b.method.name(),
        fit_points_count,
        slope_w_per_cpu,
        r_squared,
        rest_source,
        rest_age_s,
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-21T05:35:00.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::{collections::BTreeMap, time::Duration};

    use super::*;
    use crate::{
        attribution::{CpuTime, EnergyState, Glitch, Slice},
        host::HostInfo,
        session::{IdleWatts, RunHeader, SourceInfo, processes::ProcessRecord, recorder::Recorder},
        sources::DomainSpec,
    };

    const MS: u64 = 1_000_000;

    fn package() -> DomainSpec {
        DomainSpec {
            name: "package-0".into(),
            kind: DomainKind::Package,
            parent: None,
            coverage: Coverage::AllCpus,
            provenance: Provenance::Measured,
            source: "powercap",
        }
    }

    /// A measured run of 100 ms intervals over two CPUs on which process 0 runs `busy_ms[i]`
    /// of CPU 0 and, past 100 ms, the rest on CPU 1.
    pub(crate) fn recording(intervals: Vec<Interval>, idle_watts: IdleWatts) -> Recording {
        let mut recorder = Recorder::new(1_000_000);
        let duration_ns = intervals.iter().map(|i| i.duration_ns).sum();
        for interval in intervals {
            recorder.push(interval);
        }
        Recording {
            header: RunHeader {
                mode: Mode::Wrap {
                    command: vec!["work".into()],
                },
                host: HostInfo::two_cpu_test_host(),
                sources: vec![SourceInfo {
                    name: "powercap",
                    provenance: Provenance::Measured,
                    description: "test".into(),
                    domains: vec!["package-0".into()],
                }],
                selection_reason: "test".into(),
                baseline: crate::accounting::BaselineInputs {
                    domains: vec![package()],
                    idle_watts,
                    known_idle_w: vec![None],
                    rest_power: Vec::new(),
                    busy_slope_w: vec![None],
                    interval: Duration::from_millis(100),
                    prior_slope_w_per_cpu: 5.0,
                },
            },
            run_id: "run-1".into(),
            started_at: SystemTime::UNIX_EPOCH,
            ended_at: SystemTime::UNIX_EPOCH,
            run_start_ns: 0,
            duration_ns,
            recorder,
            processes: vec![ProcessRecord {
                pid: 10,
                ppid: Some(1),
                comm: "work".into(),
                cmdline: vec!["work".into()],
                uid: Some(0),
                first_seen_ns: 0,
                start_ns: None,
                ended_ns: None,
                ending: None,
                root: true,
                thread_names: SmallMap::from([(10, "work".into()), (11, "worker".into())]),
                cgroup: None,
            }],
            losses: Losses::default(),
            source_errors: BTreeMap::new(),
            stop_reason: "command exited".into(),
            command_ending: None,
            calibration_s: 0.0,
            late_placed_ns: 0,
            carried_past_end_ns: 0,
            other_carried_past_end_ns: 0,
            still_running: Vec::new(),
            profiler: ProfilerCost::default(),
            accounting: crate::session::accounting::AccountingChoice {
                method: "iterator",
                reason: "test".into(),
                walker: Some("task_walk"),
                reads: Some(crate::probes::task_walk::WalkReads {
                    walked_count: 2,
                    reread_count: 5,
                    amended_count: 3,
                }),
            },
            timeseries: true,
            probes: Vec::new(),
            source_notes: Vec::new(),
            gpus: Vec::new(),
            meter: None,
            functions: None,
        }
    }

    /// Interval `i`: process 0 busy `busy_ms` over two CPUs (its thread 10 on CPU 0, 11 on 1), at 10 W + 5 W per busy CPU.
    pub(crate) fn interval(i: u64, busy_ms: u64) -> Interval {
        let on_cpu0 = busy_ms.min(100);
        let on_cpu1 = busy_ms - on_cpu0;
        let mut slices = vec![Slice {
            process: 0,
            tid: 10,
            cpu: 0,
            on_cpu_ns: on_cpu0 * MS,
        }];
        if on_cpu1 > 0 {
            slices.push(Slice {
                process: 0,
                tid: 11,
                cpu: 1,
                on_cpu_ns: on_cpu1 * MS,
            });
        }
        Interval {
            start_ns: i * 100 * MS,
            duration_ns: 100 * MS,
            cpus: vec![
                CpuTime {
                    idle_ns: (100 - on_cpu0) * MS,
                    other_ns: 0,
                },
                CpuTime {
                    idle_ns: (100 - on_cpu1) * MS,
                    other_ns: 0,
                },
            ],
            slices,
            energy_j: vec![(10.0 + 5.0 * busy_ms as f64 / 100.0) * 0.1],
            ..Interval::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn unknown_energy_is_counted_shown_and_degrades_the_measurement() {
        let mut intervals: Vec<Interval> = (0..10).map(|i| interval(i, 150)).collect();
        intervals[4].energy_j[0] = 0.0;
        intervals[4].energy_state = vec![EnergyState::unknown(100 * MS, Glitch::StepBack)];
        let report = build(&recording(intervals, IdleWatts::Total(10.0)));
        let d = &report.totals.domains["package-0"];
        assert_eq!(d.unknown_energy_intervals_count, 1);
        assert!(close(d.unknown_energy_duration_s, 0.1));
        // Nine known intervals of 1.75 J; idle 10 W over their 0.9 s.
        assert!(close(d.energy_j, 9.0 * 1.75), "{}", d.energy_j);
        assert!(close(d.idle_energy_j, 9.0), "{}", d.idle_energy_j);
        assert!(close(
            d.attributed_energy_j + d.other_energy_j + d.idle_energy_j,
            d.energy_j
        ));
        // Average power over the time whose energy is known.
        assert!(close(d.avg_power_w, 17.5), "{}", d.avg_power_w);
        assert_eq!(report.meta.measurement_quality.grade, "degraded");
        let series = report.timeseries.as_ref().unwrap();
        let point = &series[4].domains["package-0"];
        assert!(!point.energy_known && point.energy_j == 0.0);
        assert_eq!(point.glitches, ["step_back"]);
        assert!(!series[4].energy_known && series[3].energy_known);
        assert!(series[3].domains["package-0"].glitches.is_empty());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["timeseries"][4]["domains"]["package-0"]["glitches"],
            serde_json::json!(["step_back"])
        );
        assert!(
            json["timeseries"][3]["domains"]["package-0"]
                .get("glitches")
                .is_none()
        );
        assert_eq!(report.meta.schema_version, "1.8");
    }

    #[test]
    fn energy_spread_after_failed_reads_stays_out_of_the_idle_fit() {
        // 10 W + 5 W per busy CPU, the load varying; four reads in a row failed while two CPUs
        // were busy, and the one after them (one CPU busy) brought their energy, spread by
        // duration: 5 x 100 ms at the average power, which is not what those CPUs drew.
        let busy = [
            0, 50, 100, 150, 200, 200, 200, 200, 200, 100, 0, 50, 100, 150, 200, 20,
        ];
        let mut intervals: Vec<Interval> = busy
            .iter()
            .enumerate()
            .map(|(i, &ms)| interval(i as u64, ms))
            .collect();
        let lump: f64 = intervals[5..10].iter().map(|i| i.energy_j[0]).sum();
        for interval in &mut intervals[5..10] {
            interval.energy_j[0] = lump / 5.0;
            interval.energy_state = vec![EnergyState::spread(100 * MS)];
        }
        let report = build(&recording(intervals.clone(), IdleWatts::Estimate));
        let baseline = &report.meta.idle_baseline[0];
        assert_eq!(baseline.method, "regression");
        assert_eq!(baseline.fit_points_count, Some(busy.len() - 5));
        assert!((baseline.power_w - 10.0).abs() < 1e-6, "{baseline:?}");
        assert_eq!(report.meta.measurement_quality.grade, "degraded");
        let series = report.timeseries.as_ref().unwrap();
        assert!(series[6].domains["package-0"].energy_spread);
        assert!(series[6].domains["package-0"].energy_known);
        // As it was before: 0 J in the failed reads and the whole lump in the next one, which
        // wrecks the fit.
        for interval in &mut intervals {
            interval.energy_state.clear();
        }
        for interval in &mut intervals[5..9] {
            interval.energy_j[0] = 0.0;
        }
        intervals[9].energy_j[0] = lump;
        let unmarked = build(&recording(intervals, IdleWatts::Estimate));
        assert!(
            (unmarked.meta.idle_baseline[0].power_w - 10.0).abs() > 0.5,
            "{:?}",
            unmarked.meta.idle_baseline[0]
        );
    }

    #[test]
    fn a_figure_that_is_not_finite_is_named() {
        let mut intervals: Vec<Interval> = (0..3).map(|i| interval(i, 100)).collect();
        intervals[1].energy_j[0] = f64::INFINITY;
        let report = build(&recording(intervals, IdleWatts::Total(10.0)));
        let quality = &report.meta.measurement_quality;
        assert_eq!(quality.grade, "degraded");
        let named: Vec<&String> = quality
            .notes
            .iter()
            .filter(|n| n.starts_with(NOT_FINITE_NOTE))
            .collect();
        assert!(
            named
                .iter()
                .any(|n| n.contains("totals.energy_j is infinite")),
            "{:#?}",
            quality.notes
        );
        // That the summary prints no such figure is export::summary's test.
        // A report of finite figures has no such note.
        let fine = build(&recording(
            (0..3).map(|i| interval(i, 100)).collect(),
            IdleWatts::Total(10.0),
        ));
        assert!(finite::non_finite(&fine).is_empty());
        assert_eq!(fine.meta.measurement_quality.grade, "measured");
    }

    /// The report as JSON, with the one figure that changes by itself (the tool's version)
    /// masked.
    fn snapshot_json(report: &Report) -> String {
        let mut json = serde_json::to_value(report).unwrap();
        json["meta"]["tool_version"] = serde_json::json!("VERSION");
        serde_json::to_string_pretty(&json).unwrap() + "\n"
    }

    /// Compares `report` with `src/report/snapshots/NAME.json`; `CG_UPDATE_SNAPSHOTS=1`
    /// rewrites it (review the diff).
    fn assert_snapshot(name: &str, report: &Report) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/report/snapshots")
            .join(format!("{name}.json"));
        let actual = snapshot_json(report);
        if std::env::var_os("CG_UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, &actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            actual == expected,
            "report differs from {} (CG_UPDATE_SNAPSHOTS=1 rewrites it):\n{actual}",
            path.display()
        );
    }

    #[test]
    fn snapshot_of_a_measured_wrapped_run() {
        // 10 W idle given; 0.5, 1, 1.5 and 2 busy CPUs over four 100 ms intervals.
        let intervals = (0..4).map(|i| interval(i, 50 * (i + 1))).collect();
        let mut rec = recording(intervals, IdleWatts::Total(10.0));
        rec.command_ending = Some(Ending::Exited(0));
        rec.processes[0].ending = Some(Ending::Exited(0));
        rec.processes[0].ended_ns = Some(400 * MS);
        let report = build(&rec);
        assert_snapshot("measured_wrapped_run", &report);
    }

    #[test]
    fn snapshot_of_a_run_with_a_glitch_and_an_estimated_baseline() {
        let mut intervals: Vec<Interval> = [0, 50, 100, 150, 200, 100]
            .iter()
            .enumerate()
            .map(|(i, &ms)| interval(i as u64, ms))
            .collect();
        intervals[2].energy_j[0] = 0.0;
        intervals[2].energy_state = vec![EnergyState::unknown(100 * MS, Glitch::Jump)];
        let mut rec = recording(intervals, IdleWatts::Estimate);
        rec.stop_reason = "interrupted by SIGINT".into();
        let report = build(&rec);
        assert_snapshot("run_with_a_glitch", &report);
    }

    #[test]
    fn the_same_recording_gives_the_same_report() {
        let rec = recording(
            (0..5).map(|i| interval(i, 30 * i)).collect(),
            IdleWatts::Estimate,
        );
        assert_eq!(snapshot_json(&build(&rec)), snapshot_json(&build(&rec)));
        assert_eq!(build(&rec).meta.run_id, "run-1");
    }

    /// A run of `n` intervals of 100 ms with 100 ms of CPU each: 1.5 J per interval.
    fn run_of(n: u64) -> Report {
        build(&recording(
            (0..n).map(|i| interval(i, 100)).collect(),
            IdleWatts::Total(10.0),
        ))
    }

    #[test]
    fn a_run_set_keeps_every_run_and_its_statistics() {
        // 1.5 J per interval: runs of 1.5, 3, 3, 3 and 15 J.
        let reports: Vec<Report> = [1, 2, 2, 2, 10].into_iter().map(run_of).collect();
        let set = repeat::combine(
            reports,
            repeat::SetInfo {
                runs_requested_count: 5,
                ..Default::default()
            },
        )
        .unwrap();
        let r = set.repeat.as_ref().unwrap();
        assert_eq!(r.runs.len(), 5);
        let energies: Vec<f64> = r.runs.iter().map(|run| run.energy_j).collect();
        for (e, want) in energies.iter().zip([1.5, 3.0, 3.0, 3.0, 15.0]) {
            assert!(close(*e, want), "{energies:?}");
        }
        let s = &r.statistics.energy_j;
        assert!(close(s.median, 3.0) && close(s.q1, 3.0) && close(s.q3, 3.0));
        // IQR 0: both the short and the long run are beyond the fences.
        assert_eq!(s.outlier_runs, [1, 5]);
        assert!(r.runs[0].outlier && r.runs[4].outlier && !r.runs[1].outlier);
        assert_eq!(r.noise_verdict, repeat::NoiseVerdict::HighNoise);
        // Judged on the targets' energy (a third of each run's here).
        assert_eq!(r.noise_of, "attributed_energy_j");
        let t = &r.statistics.attributed_energy_j;
        assert!(close(t.median, 1.0) && t.outlier_runs == [1, 5], "{t:?}");
        assert!(close(r.runs[4].attributed_energy_j, 5.0));
        // The representative run is the first with the median energy; the top level is its.
        assert_eq!(r.representative_run, 2);
        assert!(close(set.totals.energy_j, 3.0));
        // The process, matched by command and place, in every run: 0.5 J per interval.
        let group = &r.statistics.process_groups[0];
        assert_eq!(group.group, "work#1");
        assert_eq!(group.energy_j.runs_count, 5);
        assert!(close(group.energy_j.median, 1.0), "{group:?}");
        assert!(close(group.cpu_time_s.max, 1.0), "{group:?}");
        assert!(close(
            r.statistics.domains["package-0"].energy_j.mean,
            25.5 / 5.0
        ));
        assert!(finite::non_finite(&set).is_empty());
        let json = serde_json::to_value(&set).unwrap();
        assert_eq!(json["repeat"]["noise_verdict"], "high-noise");
        assert_eq!(json["repeat"]["runs"][4]["outlier"], true);
        assert_eq!(
            json["repeat"]["runs"][2]["report"]["totals"]["energy_j"],
            3.0
        );
        assert!(repeat::combine(Vec::new(), repeat::SetInfo::default()).is_none());
    }

    #[test]
    fn budgets_compare_the_run_or_the_median_with_the_limit() {
        use budget::{Kind, Limit, evaluate};
        let limit = |kind, program: Option<&str>, limit| Limit {
            kind,
            program: program.map(String::from),
            limit,
        };
        // One run of 3 J over 0.2 s (15 W); `work`, the target, got 1 J of it (5 W). A
        // limit without a name is on the targets, not the whole run.
        let single = run_of(2);
        let checked = evaluate(
            &single,
            &[
                limit(Kind::Energy, None, 0.5),
                limit(Kind::Power, None, 20.0),
                limit(Kind::Energy, Some("work"), 1.5),
                limit(Kind::Power, Some("work"), 4.0),
                limit(Kind::Energy, Some("nothing"), 1.0),
            ],
        );
        let values: Vec<(f64, bool)> = checked.iter().map(|b| (b.value, b.exceeded)).collect();
        for ((value, exceeded), want) in values.iter().zip([
            (1.0, true),
            (5.0, false),
            (1.0, false),
            (5.0, true),
            (0.0, false),
        ]) {
            assert!(close(*value, want.0) && *exceeded == want.1, "{values:?}");
        }
        assert!(close(checked[0].excess_pct, 100.0));
        assert_eq!(checked[0].statistic, "single run");
        assert_eq!(checked[2].processes_count, Some(1));
        let over = budget::message(&checked[0]).unwrap();
        assert!(
            over.contains("energy of the targets 1.000 J") && over.contains("by 0.500 J (100.0%)"),
            "{over}"
        );
        assert!(budget::message(&checked[1]).is_none());
        assert!(budget::message(&checked[4]).unwrap().contains("no process"));
        // A set: the median of the runs' figures (the targets' 0.5, 1, 5 J: 1 J).
        let set = repeat::combine(
            [1, 2, 10].into_iter().map(run_of).collect(),
            repeat::SetInfo::default(),
        )
        .unwrap();
        let checked = evaluate(&set, &[limit(Kind::Energy, None, 0.9)]);
        assert!(close(checked[0].value, 1.0) && checked[0].exceeded);
        assert_eq!(checked[0].statistic, "median of 3 runs");
    }

    /// The live view's figures after the last interval, fed what the report is built from.
    fn live_at_the_end(rec: &Recording) -> live::LiveReport {
        let mut model = live::LiveModel::new(&crate::session::live::LiveStart {
            header: &rec.header,
            run_start_ns: rec.run_start_ns,
            calibration: rec.recorder.calibration(),
        });
        for (i, interval) in rec.recorder.intervals().iter().enumerate() {
            let changed: Vec<ProcId> = if i == 0 { vec![0] } else { Vec::new() };
            model.add(&crate::session::live::LiveSample {
                interval,
                processes: &rec.processes,
                changed: &changed,
                losses: Losses::default(),
                read_errors_count: 0,
                functions: None,
            });
        }
        model.snapshot()
    }

    #[test]
    fn the_live_views_last_figures_and_the_report_agree_where_they_must() {
        let busy = [0, 50, 100, 150, 200, 100, 30];
        let intervals = || -> Vec<Interval> {
            busy.iter()
                .enumerate()
                .map(|(i, &ms)| interval(i as u64, ms))
                .collect()
        };
        // With the baseline given, the split is the same: every figure agrees.
        let rec = recording(intervals(), IdleWatts::Total(10.0));
        let (live, report) = (live_at_the_end(&rec), build(&rec));
        let t = &report.totals;
        assert!(close(live.totals.energy_j, t.energy_j));
        assert!(close(live.totals.targets_energy_j, t.attributed_energy_j));
        assert!(close(live.totals.other_energy_j, t.other_energy_j));
        assert!(close(live.totals.idle_energy_j, t.idle_energy_j));
        assert!(close(live.elapsed_s, t.duration_s));
        assert_eq!(live.processes.len(), report.processes.len());
        let (lp, rp) = (&live.processes[0], &report.processes[0]);
        assert_eq!(lp.pid, rp.pid);
        assert!(close(lp.energy_j, rp.energy_j) && close(lp.cpu_time_s, rp.cpu_time_s));
        assert!(close(
            live.domains[0].energy_j,
            t.domains["package-0"].energy_j
        ));
        assert_eq!(live.sources, report.meta.sources);
        // Estimated as the run goes, the baseline (and so the split) may differ at the end;
        // what was measured may not.
        let rec = recording(intervals(), IdleWatts::Estimate);
        let (live, report) = (live_at_the_end(&rec), build(&rec));
        assert!(close(live.totals.energy_j, report.totals.energy_j));
        assert!(close(
            live.domains[0].energy_j,
            report.totals.domains["package-0"].energy_j
        ));
        assert!(close(
            live.processes[0].cpu_time_s,
            report.processes[0].cpu_time_s
        ));
        assert!(close(
            live.totals.targets_energy_j + live.totals.other_energy_j + live.totals.idle_energy_j,
            report.totals.energy_j
        ));
    }
}
