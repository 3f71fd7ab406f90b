//! The report model (a JSON contract: every numeric field name carries its unit, `_j`, `_w`,
//! `_s`, `_ms`, `_pct`, `_bytes`, `_count`) and [`build`], which attributes a run's
//! recording once the idle baselines are known. Every output (summary, JSON) reads this
//! model; none of them recomputes attribution. [`live`] is its counterpart while a run goes
//! on, which the terminal view reads.
//!
//! The schema is documented in `docs/report.md`. Function figures are built in
//! [`functions`].

pub mod functions;

pub mod live;

use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

use serde::Serialize;

use crate::{
    attribution::{
        Coverage, DomainSplit, Interval, Ledger, ProcId,
        functions::{IntervalSpend, ProcessSpend},
        idle::{self, IdleBaseline, IdleMethod, PowerPoint},
        split_interval,
    },
    probes::Losses,
    session::{IdleWatts, Mode, Recording, processes::Ending},
    sources::{
        DomainKind, DomainSpec, Provenance, SourceProbe, gpu::GpuSummary, meter::MeterSummary,
    },
};

/// Version of the report schema; bumped when a field changes meaning or disappears.
pub const SCHEMA_VERSION: &str = "1.1";

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub meta: Meta,
    pub processes: Vec<ProcessEntry>,
    pub functions: Vec<FunctionEntry>,
    pub totals: Totals,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeseries: Option<Vec<TimePoint>>,
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
    pub interval_ms: u64,
    pub calibration_s: f64,
    pub sources: Vec<SourceEntry>,
    pub source_selection: String,
    pub domain_topology: Vec<DomainEntry>,
    pub idle_baseline: Vec<IdleEntry>,
    pub measurement_quality: Quality,
    pub profiler: ProfilerEntry,
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

#[derive(Clone, Debug, Serialize)]
pub struct SourceEntry {
    pub name: &'static str,
    /// `measured` or `estimated`.
    pub provenance: Provenance,
    pub description: String,
    pub domains: Vec<String>,
}

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
    /// `given`, `model`, `regression`, `prior` or `none`.
    pub method: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit_points_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slope_w_per_cpu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r_squared: Option<f64>,
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
    pub cpu_time_s: f64,
    pub max_rss_bytes: u64,
    pub attach_ms: f64,
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
    pub domains: BTreeMap<String, ProcessDomain>,
    /// When the run first saw it, seconds after the run started.
    pub started_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
    pub alive_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessDomain {
    pub energy_j: f64,
}

/// Energy of one function (filled by function-level attribution).
#[derive(Clone, Debug, Serialize)]
pub struct FunctionEntry {
    pub symbol: String,
    pub module: String,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    pub cpu_time_s: f64,
    pub energy_j: f64,
    pub self_cpu_time_s: f64,
    pub self_energy_j: f64,
    /// `uprobe` or `sampling`.
    pub source: &'static str,
    /// A Python function's first line (`module` is then its source file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Probed functions: whether a call was still running at the end (its time counts up
    /// to the last read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    /// Probed functions with an entry probe only (a return probe would harm them): `calls`
    /// counts entries, and there is no time or energy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_only: Option<bool>,
    /// The energy source's: function energy is a share of it.
    pub provenance: Provenance,
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
    /// Context switches the kernel did not report through sched_switch (their slice went
    /// uncharged, so it counts as idle).
    pub unmatched_switches_count: u64,
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
    pub domains: BTreeMap<String, TimeDomain>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TimeDomain {
    pub energy_j: f64,
    pub power_w: f64,
}

/// Attributes a recording and assembles the report.
pub fn build(rec: &Recording) -> Report {
    let coverage: Vec<Coverage> = rec.domains.iter().map(|d| d.coverage.clone()).collect();
    let top: Vec<usize> = (0..rec.domains.len())
        .filter(|&d| rec.domains[d].parent.is_none())
        .collect();
    let baselines = idle_baselines(rec);
    let idle_w: Vec<f64> = baselines.iter().map(|b| b.power_w).collect();

    let mut ledger = Ledger::new(rec.domains.len());
    let mut timeseries = Vec::new();
    let mut spend: Vec<IntervalSpend> = Vec::new();
    for interval in rec.recorder.intervals() {
        let splits = split_interval(interval, &coverage, &idle_w);
        ledger.add(interval, &splits);
        if rec.functions.is_some() {
            spend.push(interval_spend(interval, &splits, &top));
        }
        if rec.timeseries {
            timeseries.push(time_point(
                rec,
                interval.start_ns,
                interval.duration_ns,
                &splits,
                &top,
            ));
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
        domains: rec
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
                        avg_power_w: per_second(l.measured_j, duration_s),
                        provenance: spec.provenance,
                        top_level: spec.parent.is_none(),
                        unexplained_energy_j: matches!(spec.coverage, Coverage::Gpu(_))
                            .then_some(l.unexplained_j),
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
    Report {
        meta: Meta {
            function_profiling: built.profiling,
            ..meta(rec, &baselines)
        },
        processes,
        functions: built.functions,
        totals,
        timeseries: rec.timeseries.then_some(timeseries),
        stacks: built.stacks,
    }
}

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

/// One baseline per domain (see [`crate::attribution::idle`] for the order of preference).
fn idle_baselines(rec: &Recording) -> Vec<IdleBaseline> {
    let inputs = BaselineInputs {
        domains: &rec.domains,
        idle_watts: &rec.idle_watts,
        known_idle_w: &rec.known_idle_w,
        busy_slope_w: &rec.busy_slope_w,
        interval: rec.interval,
        prior_slope_w_per_cpu: rec.prior_slope_w_per_cpu,
    };
    (0..rec.domains.len())
        .map(|d| {
            inputs.fixed(d).unwrap_or_else(|| {
                let points: Vec<PowerPoint> = rec
                    .recorder
                    .calibration()
                    .iter()
                    .chain(rec.recorder.intervals())
                    .filter_map(|i| inputs.power_point(i, d))
                    .collect();
                inputs.estimate(d, &points)
            })
        })
        .collect()
}

/// What decides a run's idle baselines; the report (over the whole run) and the live view
/// (over the run so far, see [`live`]) decide them the same way.
pub(crate) struct BaselineInputs<'a> {
    pub domains: &'a [DomainSpec],
    pub idle_watts: &'a IdleWatts,
    pub known_idle_w: &'a [Option<f64>],
    /// Per domain: the watts a fully busy unit is assumed to add when no idle fit is possible
    /// (GPUs); `None` uses the CPU prior.
    pub busy_slope_w: &'a [Option<f64>],
    pub interval: Duration,
    pub prior_slope_w_per_cpu: f64,
}

impl BaselineInputs<'_> {
    /// Domain `d`'s baseline when it does not depend on measurements: given with
    /// `--idle-watts`, or known to its source (the model's idle term).
    pub fn fixed(&self, d: usize) -> Option<IdleBaseline> {
        let spec = self.domains.get(d)?;
        let top_count = self.domains.iter().filter(|d| d.parent.is_none()).count();
        let given = match self.idle_watts {
            IdleWatts::Total(w) if spec.parent.is_none() && top_count == 1 => Some(*w),
            IdleWatts::PerDomain(map) => map.get(&spec.name).copied(),
            _ => None,
        };
        if let Some(power_w) = given {
            return Some(IdleBaseline {
                power_w,
                method: IdleMethod::Given,
            });
        }
        self.known_idle_w
            .get(d)
            .copied()
            .flatten()
            .map(|power_w| IdleBaseline {
                power_w,
                method: IdleMethod::Model,
            })
    }

    /// What interval `interval` says about domain `d`'s power, or `None` for intervals much
    /// shorter than nominal (the last one of a window), which say more about when the counter
    /// last ticked than about power.
    pub fn power_point(&self, interval: &Interval, d: usize) -> Option<PowerPoint> {
        let min_ns = self.interval.as_nanos() as u64 / 2;
        let spec = self.domains.get(d)?;
        (interval.duration_ns >= min_ns).then(|| PowerPoint {
            duration_s: interval.duration_ns as f64 / 1e9,
            energy_j: interval.energy_j.get(d).copied().unwrap_or(0.0),
            busy_cpus: interval.busy_cpus(&spec.coverage),
        })
    }

    /// Domain `d`'s baseline estimated from `points` (see [`idle::estimate`]).
    pub fn estimate(&self, d: usize, points: &[PowerPoint]) -> IdleBaseline {
        let slope = self.busy_slope_w.get(d).copied().flatten();
        let prior = match (slope, self.domains.get(d).map(|s| s.kind)) {
            (Some(slope), _) => slope,
            (None, Some(DomainKind::Dram | DomainKind::Uncore)) => self.prior_slope_w_per_cpu * 0.1,
            (None, _) => self.prior_slope_w_per_cpu,
        };
        idle::estimate(points, prior)
    }
}

fn time_point(
    rec: &Recording,
    start_ns: u64,
    duration_ns: u64,
    splits: &[DomainSplit],
    top: &[usize],
) -> TimePoint {
    let dt = duration_ns as f64 / 1e9;
    let sum = |f: &dyn Fn(&DomainSplit) -> f64| top.iter().map(|&d| f(&splits[d])).sum::<f64>();
    let energy_j = sum(&|s| s.measured_j);
    TimePoint {
        t_s: start_ns as f64 / 1e9,
        duration_s: dt,
        energy_j,
        power_w: per_second(energy_j, dt),
        attributed_energy_j: sum(&|s| s.attributed_j()),
        other_energy_j: sum(&|s| s.other_j),
        idle_energy_j: sum(&|s| s.idle_j),
        domains: rec
            .domains
            .iter()
            .zip(splits)
            .map(|(spec, s)| {
                (
                    spec.name.clone(),
                    TimeDomain {
                        energy_j: s.measured_j,
                        power_w: per_second(s.measured_j, dt),
                    },
                )
            })
            .collect(),
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
                .domains
                .iter()
                .enumerate()
                .any(|(d, _)| ledger.domains[d].by_process_j.contains_key(&id));
            if rec.mode == Mode::System && cpu_ns == 0 && !charged {
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
            })
        })
        .collect();
    entries.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then(a.pid.cmp(&b.pid)));
    entries
}

fn meta(rec: &Recording, baselines: &[IdleBaseline]) -> Meta {
    let (command, pids) = match &rec.mode {
        Mode::Wrap { command } => (Some(command.clone()), None),
        Mode::Attach { pids } => (None, Some(pids.clone())),
        Mode::System => (None, None),
    };
    let (command_exit_code, command_exit_signal) = Ending::code_and_signal(rec.command_ending);
    let domain_topology = rec
        .domains
        .iter()
        .map(|d| DomainEntry {
            name: d.name.clone(),
            kind: d.kind,
            parent: d.parent.clone(),
            contains: rec
                .domains
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
        .collect();
    let idle_baseline = rec
        .domains
        .iter()
        .zip(baselines)
        .map(|(d, b)| {
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
            IdleEntry {
                domain: d.name.clone(),
                power_w: b.power_w,
                method: b.method.name(),
                fit_points_count,
                slope_w_per_cpu,
                r_squared,
            }
        })
        .collect();
    Meta {
        schema_version: SCHEMA_VERSION,
        tool: "cg-trace",
        tool_version: env!("CARGO_PKG_VERSION"),
        run_id: run_id(rec.started_at),
        started_at: rfc3339(rec.started_at),
        ended_at: rfc3339(rec.ended_at),
        duration_s: rec.duration_ns as f64 / 1e9,
        hostname: rec.host.hostname.clone(),
        kernel: rec.host.kernel.clone(),
        cpu_model: rec.host.cpu_model.clone(),
        cpu_count: rec.host.cpu_count(),
        mode: rec.mode.name(),
        command,
        command_exit_code,
        command_exit_signal,
        pids,
        stop_reason: rec.stop_reason.clone(),
        interval_ms: rec.interval.as_millis() as u64,
        calibration_s: rec.calibration_s,
        sources: rec
            .sources
            .iter()
            .map(|s| SourceEntry {
                name: s.name,
                provenance: s.provenance,
                description: s.description.clone(),
                domains: s.domains.clone(),
            })
            .collect(),
        source_selection: rec.selection_reason.clone(),
        domain_topology,
        idle_baseline,
        measurement_quality: quality(rec, baselines),
        profiler: ProfilerEntry {
            cpu_time_s: rec.profiler.cpu_time_s,
            max_rss_bytes: rec.profiler.max_rss_bytes,
            attach_ms: rec.profiler.attach_ms,
        },
        sources_probed: rec.probes.clone(),
        gpus: rec.gpus.clone(),
        power_meter: rec.meter.clone(),
        function_profiling: None,
    }
}

fn quality(rec: &Recording, baselines: &[IdleBaseline]) -> Quality {
    let mut notes = Vec::new();
    let estimated = rec
        .sources
        .iter()
        .any(|s| s.provenance == Provenance::Estimated);
    if estimated {
        notes.push(format!(
            "energy is ESTIMATED by the built-in power model, not measured ({})",
            rec.selection_reason
        ));
    }
    let mut degraded = false;
    for (d, b) in rec.domains.iter().zip(baselines) {
        match b.method {
            IdleMethod::Prior { .. } => {
                degraded = true;
                notes.push(format!(
                    "idle baseline of {} ({:.2} W) assumes {:.1} W per busy {}: the load was too \
                     steady to fit one; pass --idle-watts for an exact split",
                    d.name,
                    b.power_w,
                    match b.method {
                        IdleMethod::Prior {
                            slope_w_per_cpu, ..
                        } => slope_w_per_cpu,
                        _ => 0.0,
                    },
                    if d.kind == DomainKind::Gpu {
                        "GPU"
                    } else {
                        "CPU"
                    }
                ));
            }
            IdleMethod::Regression { r_squared, .. } if r_squared < 0.5 => {
                degraded = true;
                notes.push(format!(
                    "idle baseline of {} comes from a weak fit (r² = {r_squared:.2})",
                    d.name
                ));
            }
            _ => {}
        }
    }
    let lost = &rec.losses;
    if lost.on_cpu_map_full + lost.events_dropped + lost.targets_map_full > 0 {
        degraded = true;
        notes.push(format!(
            "the kernel side lost records: {} thread-map-full, {} events dropped, {} \
             target-map-full",
            lost.on_cpu_map_full, lost.events_dropped, lost.targets_map_full
        ));
    }
    if lost.unmatched_switches > 0 {
        notes.push(format!(
            "{} context switch(es) were never reported by the kernel's sched_switch tracepoint \
             (ftrace misses them too); the slices around them went uncharged and count as idle",
            lost.unmatched_switches
        ));
    }
    for (error, count) in &rec.source_errors {
        degraded = true;
        notes.push(format!("{count} read(s) failed: {error}"));
    }
    for note in &rec.source_notes {
        degraded |= note.degraded;
        notes.push(note.text.clone());
    }
    if rec.recorder.merges > 0 {
        notes.push(format!(
            "long run: stored intervals were merged {} time(s) to bound memory (each stored \
             interval now spans about {} ms)",
            rec.recorder.merges,
            rec.interval.as_millis() << rec.recorder.merges
        ));
    }
    if rec.recorder.intervals().is_empty() {
        degraded = true;
        notes.push("the run ended before a single interval was measured".into());
    }
    Quality {
        grade: if estimated {
            "estimated"
        } else if degraded {
            "degraded"
        } else {
            "measured"
        },
        notes,
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-21T05:35:00.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn run_id(started: SystemTime) -> String {
    let nanos = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64;
    let mut random = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut random)
    });
    format!(
        "{:016x}-{:016x}",
        nanos,
        u64::from_ne_bytes(random) ^ u64::from(std::process::id())
    )
}
