//! The report's live counterpart: a run's figures so far, for the terminal view. Each
//! interval is attributed as it arrives by the accounting core ([`Attributor`]: the same split
//! as [`super::build`], idle baselines decided the same way), but estimated from the run so
//! far; at the end the report re-attributes the whole run with the final baselines, so its
//! figures can differ a little from the last live ones (in the measured energy only where the
//! session revised earlier intervals: energy spread back over reads that failed, intervals
//! found frozen later).
//!
//! Pure: no I/O, no clocks. [`LiveModel`] takes the session's live feed
//! ([`crate::session::live`]); [`LiveModel::snapshot`] gives a [`LiveReport`], which is what
//! the view reads: "now" figures over the window since the previous snapshot, totals since the
//! start, and a short power history per domain.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::{
    accounting::Attributor,
    attribution::{
        Ledger, ProcId,
        functions::{FrameId, FunctionTotals, IntervalSpend, attribute_calls, attribute_samples},
    },
    functions::symbolize::{file_name, function_stacks},
    probes::Losses,
    session::{
        Mode,
        functions::LiveFunctions,
        live::{LiveSample, LiveStart},
        processes::ProcessRecord,
    },
    sources::{DomainKind, DomainSpec, Provenance},
};

use super::{
    FunctionEntry, LostEvents, SourceEntry,
    functions::{FunctionTotal, function_totals},
    interval_spend,
};

/// How much power history the chart can show.
pub const HISTORY_S: f64 = 300.0;
/// How long an exited process stays listed.
pub const EXITED_LINGER_NS: u64 = 10_000_000_000;

/// A function in the live figures: probed (by function id) or sampled (by frame id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum LiveFunctionKey {
    Probed(u32),
    Sampled(FrameId),
}

/// A run's figures so far.
#[derive(Clone, Debug)]
pub struct LiveReport {
    /// `wrap`, `attach` or `system`.
    pub mode: &'static str,
    /// What is traced: "the whole machine", the command, the pids.
    pub target: String,
    /// Time the intervals so far cover.
    pub elapsed_s: f64,
    pub interval_ms: u64,
    /// The span the "now" figures (power, CPU %) cover: the intervals since the previous
    /// snapshot.
    pub window_s: f64,
    pub cpu_count: usize,
    /// Per CPU: how busy it was over the window (0-100 %, any task but the idle one).
    pub cpu_busy_pct: Vec<f64>,
    pub sources: Vec<SourceEntry>,
    pub source_selection: String,
    pub domains: Vec<LiveDomain>,
    pub totals: LiveTotals,
    /// Processes alive, or exited less than [`EXITED_LINGER_NS`] ago (with `--all`, those that
    /// ran), in no particular order.
    pub processes: Vec<LiveProcess>,
    /// Energy per function and process so far, when function-level attribution runs.
    pub functions: Vec<FunctionEntry>,
    /// The same per function over all processes, most energy first.
    pub function_totals: Vec<FunctionTotal>,
    pub lost_events: LostEvents,
    /// Power over time, one series per top-level domain (and the targets' share, unless
    /// the whole machine is traced).
    pub history: Vec<Series>,
}

/// One energy domain, now and so far.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveDomain {
    pub name: String,
    pub kind: DomainKind,
    pub provenance: Provenance,
    /// Counts towards the totals (nested domains do not).
    pub top_level: bool,
    pub power_w: f64,
    pub energy_j: f64,
    pub idle_baseline_w: f64,
    /// How the baseline was decided: `given`, `model`, `regression`, `prior`, `none`.
    pub idle_method: &'static str,
    pub targets_power_w: f64,
    pub other_power_w: f64,
    pub idle_power_w: f64,
}

/// The top-level domains together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveTotals {
    pub power_w: f64,
    pub energy_j: f64,
    pub targets_power_w: f64,
    pub other_power_w: f64,
    pub idle_power_w: f64,
    pub targets_energy_j: f64,
    pub other_energy_j: f64,
    pub idle_energy_j: f64,
    /// Sum of the top-level domains' idle baselines.
    pub idle_baseline_w: f64,
    /// Whether any top-level figure is estimated (by the model) rather than measured.
    pub estimated: bool,
}

/// One process, now and so far.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveProcess {
    pub id: ProcId,
    pub pid: u32,
    pub ppid: Option<u32>,
    pub uid: Option<u32>,
    pub comm: String,
    /// The command line, or the command name when it is unknown.
    pub command: String,
    /// The wrapped command or an attached pid.
    pub root: bool,
    pub alive: bool,
    /// On-CPU time over the window, in percent of one CPU (above 100 with several threads).
    pub cpu_pct: f64,
    /// Energy over the window, per second (top-level domains).
    pub power_w: f64,
    /// Energy so far (top-level domains).
    pub energy_j: f64,
    /// Share of the total energy so far.
    pub share_pct: f64,
    pub cpu_time_s: f64,
    /// A kernel thread (kthreadd, or a child of it with no command line): its command is its
    /// name in brackets, as htop and ps show it (`[kworker/0:1]`).
    pub kernel_thread: bool,
    /// Power over the window per domain, indexed like [`LiveReport::domains`].
    pub domain_power_w: Vec<f64>,
    /// Its cgroup's short name ([`crate::cgroup::CgroupInfo::group_name`]: the container,
    /// pod, systemd unit or path), when it could be read.
    pub cgroup: Option<String>,
    /// Its threads, busiest now first: at most [`LIVE_THREADS`], then one entry folding the
    /// rest (they add up to the process in every column).
    pub threads: Vec<LiveThread>,
}

/// How many threads of a process the live view lists one by one.
pub const LIVE_THREADS: usize = 10;

/// One thread of a process, now and so far, or the entry that folds the threads not listed.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveThread {
    /// `None` on the folded entry.
    pub tid: Option<u32>,
    /// Its name (`comm`), empty when it could not be read.
    pub name: String,
    /// On the folded entry: how many threads it holds.
    pub folded_count: Option<usize>,
    pub cpu_pct: f64,
    pub power_w: f64,
    pub energy_j: f64,
    pub share_pct: f64,
    pub cpu_time_s: f64,
}

/// A power series for the chart: `(seconds since the start, watts)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Accumulates the live feed; see the module docs.
#[derive(Debug)]
pub struct LiveModel {
    mode: Mode,
    interval_ns: u64,
    cpu_count: usize,
    run_start_ns: u64,
    domains: Vec<DomainSpec>,
    top: Vec<usize>,
    sources: Vec<SourceEntry>,
    source_selection: String,
    /// Attributes each interval with the idle baselines fitted so far.
    attributor: Attributor,
    total: Ledger,
    window: Ledger,
    /// Per CPU: idle nanoseconds over the window.
    window_idle_ns: Vec<u64>,
    elapsed_ns: u64,
    processes: Vec<ProcessRecord>,
    losses: Losses,
    read_errors_count: u64,
    /// Function figures so far, per process and function.
    functions: BTreeMap<(ProcId, LiveFunctionKey), FunctionTotals>,
    /// Symbol, module and line of each function met.
    function_names: HashMap<LiveFunctionKey, (String, String, Option<u32>)>,
    history_names: Vec<String>,
    history: Vec<VecDeque<(f64, f64)>>,
}

impl LiveModel {
    pub fn new(start: &LiveStart<'_>) -> Self {
        let header = start.header;
        let domains = header.baseline.domains.to_vec();
        let top: Vec<usize> = (0..domains.len())
            .filter(|&d| domains[d].parent.is_none())
            .collect();
        let mut history_names: Vec<String> = top.iter().map(|&d| domains[d].name.clone()).collect();
        if header.mode != Mode::System {
            history_names.push("targets".into());
        }
        LiveModel {
            mode: header.mode.clone(),
            interval_ns: header.baseline.interval.as_nanos() as u64,
            cpu_count: header.host.cpu_count(),
            run_start_ns: start.run_start_ns,
            top,
            sources: header.sources.clone(),
            source_selection: header.selection_reason.clone(),
            attributor: Attributor::new(header.baseline.clone(), start.calibration),
            total: Ledger::new(domains.len()),
            window: Ledger::new(domains.len()),
            window_idle_ns: Vec::new(),
            elapsed_ns: 0,
            processes: Vec::new(),
            losses: Losses::default(),
            read_errors_count: 0,
            functions: BTreeMap::new(),
            function_names: HashMap::new(),
            history: vec![VecDeque::new(); history_names.len()],
            history_names,
            domains,
        }
    }

    /// Takes one interval of the feed.
    pub fn add(&mut self, sample: &LiveSample<'_>) {
        let known = self.processes.len();
        if sample.processes.len() > known {
            self.processes.extend_from_slice(&sample.processes[known..]);
        }
        for &id in sample.changed {
            if let (Some(mine), Some(theirs)) = (
                self.processes.get_mut(id as usize),
                sample.processes.get(id as usize),
            ) && (id as usize) < known
            {
                mine.clone_from(theirs);
            }
        }
        self.losses = sample.losses;
        self.read_errors_count = sample.read_errors_count;

        let interval = sample.interval;
        let splits = self.attributor.attribute(interval);
        self.total.add(interval, &splits);
        self.window.add(interval, &splits);
        if self.window_idle_ns.len() < interval.cpus.len() {
            self.window_idle_ns.resize(interval.cpus.len(), 0);
        }
        for (idle_ns, cpu) in self.window_idle_ns.iter_mut().zip(&interval.cpus) {
            *idle_ns += cpu.idle_ns.min(interval.duration_ns);
        }
        if let Some(functions) = &sample.functions {
            self.add_functions(functions, interval_spend(interval, &splits, &self.top));
        }
        self.elapsed_ns = self
            .elapsed_ns
            .max(interval.start_ns + interval.duration_ns);
    }

    /// Function-level attribution of one interval, with its processes' spend (the same
    /// attribution as the report's, interval by interval).
    fn add_functions(&mut self, f: &LiveFunctions<'_>, mut spend: IntervalSpend) {
        spend.start_ns = f.interval.start_ns;
        let (spend, data) = (
            std::slice::from_ref(&spend),
            std::slice::from_ref(f.interval),
        );
        let calls = attribute_calls(spend, data)
            .into_iter()
            .map(|((p, func), t)| ((p, LiveFunctionKey::Probed(func)), t));
        let by_function = function_stacks(f.frames, f.stacks);
        let samples = attribute_samples(spend, data, &by_function)
            .frames
            .into_iter()
            .map(|((p, frame), t)| ((p, LiveFunctionKey::Sampled(frame)), t));
        for (key, t) in calls.chain(samples) {
            if let std::collections::hash_map::Entry::Vacant(slot) =
                self.function_names.entry(key.1)
            {
                let name = match key.1 {
                    LiveFunctionKey::Probed(func) => f
                        .probed
                        .get(func as usize)
                        .map(|p| (shown(&p.name), shown(&file_name(&p.module)), None)),
                    LiveFunctionKey::Sampled(frame) => f
                        .frames
                        .get(frame as usize)
                        .map(|fr| (shown(&fr.symbol), shown(&fr.module), fr.line)),
                };
                let Some(name) = name else { continue };
                slot.insert(name);
            }
            let sum = self.functions.entry(key).or_default();
            sum.calls += t.calls;
            sum.samples += t.samples;
            sum.self_samples += t.self_samples;
            sum.cpu_ns += t.cpu_ns;
            sum.self_cpu_ns += t.self_cpu_ns;
            sum.energy_j += t.energy_j;
            sum.self_energy_j += t.self_energy_j;
        }
    }

    /// Entries per process and function, each with the function it is.
    fn function_entries(&self) -> Vec<(LiveFunctionKey, FunctionEntry)> {
        let provenance = Provenance::of_all(self.sources.iter().map(|s| s.provenance));
        self.functions
            .iter()
            .filter_map(|(&(process, key), t)| {
                let name = self.function_names.get(&key)?.clone();
                let pid = self.processes.get(process as usize)?.pid;
                let probed = matches!(key, LiveFunctionKey::Probed(_));
                let entry = FunctionEntry::attributed(name, pid, t, probed, provenance);
                Some((key, entry))
            })
            .collect()
    }

    /// Nanoseconds the next snapshot's window covers so far.
    pub fn window_ns(&self) -> u64 {
        self.window.duration_ns
    }

    /// The figures so far; starts a new window for the "now" figures and adds a point to
    /// the power history.
    pub fn snapshot(&mut self) -> LiveReport {
        let functions = self.function_entries();
        let rate = Rate::over_ns(self.window.duration_ns);
        let elapsed_s = self.elapsed_ns as f64 / 1e9;
        let domains = self.domain_rows(rate);
        let totals = self.totals(&domains);
        let processes = self.process_rows(rate, totals.energy_j);
        self.push_history(&domains, &totals, elapsed_s, rate.window_s);
        let cpu_busy_pct = self.take_cpu_busy_pct();
        self.window = Ledger::new(self.domains.len());
        LiveReport {
            mode: self.mode.name(),
            target: self.target(),
            elapsed_s,
            interval_ms: self.interval_ns / 1_000_000,
            window_s: rate.window_s,
            cpu_count: self.cpu_count,
            cpu_busy_pct,
            sources: self.sources.clone(),
            source_selection: shown(&self.source_selection),
            domains,
            totals,
            processes,
            function_totals: function_totals(functions.iter().map(|(k, e)| (*k, e))),
            functions: functions.into_iter().map(|(_, e)| e).collect(),
            lost_events: LostEvents::new(&self.losses, self.read_errors_count),
            history: self
                .history_names
                .iter()
                .zip(&self.history)
                .map(|(name, points)| Series {
                    name: name.clone(),
                    points: points.iter().copied().collect(),
                })
                .collect(),
        }
    }

    /// Each domain's figures: "now" over the window, energy since the start.
    fn domain_rows(&self, rate: Rate) -> Vec<LiveDomain> {
        self.domains
            .iter()
            .enumerate()
            .map(|(d, spec)| {
                let (now, all) = (&self.window.domains[d], &self.total.domains[d]);
                let baseline = self.attributor.baselines().get(d);
                LiveDomain {
                    name: shown(&spec.name),
                    kind: spec.kind,
                    provenance: spec.provenance,
                    top_level: spec.parent.is_none(),
                    power_w: rate.per_s(now.measured_j),
                    energy_j: all.measured_j,
                    idle_baseline_w: baseline.map_or(0.0, |b| b.power_w),
                    idle_method: baseline.map_or("none", |b| b.method.name()),
                    targets_power_w: rate.per_s(now.attributed_j()),
                    other_power_w: rate.per_s(now.other_j),
                    idle_power_w: rate.per_s(now.idle_j),
                }
            })
            .collect()
    }

    /// The top-level domains added up.
    fn totals(&self, domains: &[LiveDomain]) -> LiveTotals {
        let top_sum =
            |f: &dyn Fn(&LiveDomain) -> f64| self.top.iter().map(|&d| f(&domains[d])).sum::<f64>();
        let total_sum = |f: &dyn Fn(&crate::attribution::DomainLedger) -> f64| {
            self.top
                .iter()
                .map(|&d| f(&self.total.domains[d]))
                .sum::<f64>()
        };
        LiveTotals {
            power_w: top_sum(&|d| d.power_w),
            energy_j: top_sum(&|d| d.energy_j),
            targets_power_w: top_sum(&|d| d.targets_power_w),
            other_power_w: top_sum(&|d| d.other_power_w),
            idle_power_w: top_sum(&|d| d.idle_power_w),
            targets_energy_j: total_sum(&|l| l.attributed_j()),
            other_energy_j: total_sum(&|l| l.other_j),
            idle_energy_j: total_sum(&|l| l.idle_j),
            idle_baseline_w: top_sum(&|d| d.idle_baseline_w),
            estimated: self
                .top
                .iter()
                .any(|&d| domains[d].provenance == Provenance::Estimated),
        }
    }

    /// The processes shown: those that ran (in system mode), live, or exited lately or with
    /// time in the window.
    fn process_rows(&self, rate: Rate, totals_energy_j: f64) -> Vec<LiveProcess> {
        let now_ns = self.run_start_ns + self.elapsed_ns;
        self.processes
            .iter()
            .enumerate()
            .filter_map(|(id, p)| {
                let id = id as ProcId;
                let cpu_ns = self.total.cpu_ns.get(&id).copied().unwrap_or(0);
                let window_cpu_ns = self.window.cpu_ns.get(&id).copied().unwrap_or(0);
                if self.mode == Mode::System && cpu_ns == 0 {
                    return None;
                }
                let recent = p
                    .ended_ns
                    .is_some_and(|end| now_ns.saturating_sub(end) < EXITED_LINGER_NS);
                if p.ended_ns.is_some() && !recent && window_cpu_ns == 0 {
                    return None;
                }
                Some(self.process_row(id, p, rate, totals_energy_j))
            })
            .collect()
    }

    /// Process `id`'s figures.
    fn process_row(
        &self,
        id: ProcId,
        p: &ProcessRecord,
        rate: Rate,
        totals_energy_j: f64,
    ) -> LiveProcess {
        let cpu_ns = self.total.cpu_ns.get(&id).copied().unwrap_or(0);
        let window_cpu_ns = self.window.cpu_ns.get(&id).copied().unwrap_or(0);
        let energy_j = self.total.energy_of(id, &self.top) + 0.0;
        let kernel_thread = is_kernel_thread(p);
        LiveProcess {
            id,
            pid: p.pid,
            ppid: p.ppid,
            uid: p.uid,
            comm: shown(&p.comm),
            command: shown(&if kernel_thread {
                format!("[{}]", p.comm)
            } else if p.cmdline.is_empty() {
                p.comm.clone()
            } else {
                p.cmdline.join(" ")
            }),
            kernel_thread,
            cgroup: p.cgroup.as_ref().map(|c| shown(&c.group_name())),
            root: p.root,
            alive: p.ended_ns.is_none(),
            cpu_pct: 100.0 * rate.per_s(window_cpu_ns as f64 / 1e9),
            power_w: rate.per_s(self.window.energy_of(id, &self.top)),
            energy_j,
            share_pct: share_pct(energy_j, totals_energy_j),
            cpu_time_s: cpu_ns as f64 / 1e9,
            domain_power_w: self
                .window
                .domains
                .iter()
                .map(|l| rate.per_s(l.by_process_j.get(&id).copied().unwrap_or(0.0)))
                .collect(),
            threads: self.threads_of(id, p, rate, totals_energy_j),
        }
    }

    /// Adds the window's power to the history (top-level domains, then the targets), which
    /// keeps the last [`HISTORY_S`].
    fn push_history(
        &mut self,
        domains: &[LiveDomain],
        totals: &LiveTotals,
        elapsed_s: f64,
        window_s: f64,
    ) {
        if window_s <= 0.0 {
            return;
        }
        let mut values: Vec<f64> = self.top.iter().map(|&d| domains[d].power_w).collect();
        if self.mode != Mode::System {
            values.push(totals.targets_power_w);
        }
        for (series, power_w) in self.history.iter_mut().zip(values) {
            series.push_back((elapsed_s, power_w));
            while series
                .front()
                .is_some_and(|(t, _)| elapsed_s - t > HISTORY_S)
            {
                series.pop_front();
            }
        }
    }

    /// Per CPU, how busy it was over the window (%); starts the next window's count.
    fn take_cpu_busy_pct(&mut self) -> Vec<f64> {
        let window_ns = self.window.duration_ns;
        let busy = self
            .window_idle_ns
            .iter()
            .map(|&idle_ns| {
                if window_ns == 0 {
                    0.0
                } else {
                    100.0 * (1.0 - idle_ns as f64 / window_ns as f64).clamp(0.0, 1.0)
                }
            })
            .collect();
        self.window_idle_ns.iter_mut().for_each(|ns| *ns = 0);
        busy
    }

    /// What the run follows, in words.
    fn target(&self) -> String {
        match &self.mode {
            Mode::Wrap { command } => shown(&command.join(" ")),
            Mode::Attach { pids } => format!(
                "pid {}",
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Mode::System => "the whole machine".into(),
        }
    }
}

/// `energy_j` as a share of `total_j` (%), 0 of nothing.
fn share_pct(energy_j: f64, total_j: f64) -> f64 {
    if total_j > 0.0 {
        100.0 * energy_j / total_j
    } else {
        0.0
    }
}

/// Figures per second over a snapshot's window (0 for an empty window).
#[derive(Clone, Copy, Debug)]
struct Rate {
    window_s: f64,
}

impl Rate {
    fn over_ns(window_ns: u64) -> Self {
        Rate {
            window_s: window_ns as f64 / 1e9,
        }
    }

    /// `x` per second of the window; `+ 0.0` turns the -0.0 of an empty float sum into 0.0,
    /// so zeros sort as equals.
    fn per_s(self, x: f64) -> f64 {
        if self.window_s > 0.0 {
            x / self.window_s + 0.0
        } else {
            0.0
        }
    }
}

impl LiveModel {
    /// Process `id`'s threads so far, busiest now first (see [`LiveProcess::threads`]).
    fn threads_of(
        &self,
        id: ProcId,
        p: &ProcessRecord,
        rate: Rate,
        total_j: f64,
    ) -> Vec<LiveThread> {
        let energy = |ledger: &Ledger, tid: u32| -> f64 {
            self.top
                .iter()
                .filter_map(|&d| ledger.domains.get(d)?.by_thread_j.get(&(id, tid)))
                .sum::<f64>()
                + 0.0
        };
        let mut threads: Vec<LiveThread> = self
            .total
            .thread_cpu_ns
            .range((id, 0)..=(id, u32::MAX))
            .map(|(&(_, tid), &cpu_ns)| {
                let window_ns = self
                    .window
                    .thread_cpu_ns
                    .get(&(id, tid))
                    .copied()
                    .unwrap_or(0);
                let energy_j = energy(&self.total, tid);
                LiveThread {
                    tid: Some(tid),
                    name: p
                        .thread_names
                        .get(&tid)
                        .map(|n| shown(n))
                        .unwrap_or_default(),
                    folded_count: None,
                    cpu_pct: 100.0 * rate.per_s(window_ns as f64 / 1e9),
                    power_w: rate.per_s(energy(&self.window, tid)),
                    energy_j,
                    share_pct: share_pct(energy_j, total_j),
                    cpu_time_s: cpu_ns as f64 / 1e9,
                }
            })
            .collect();
        threads.sort_by(|a, b| {
            b.power_w
                .total_cmp(&a.power_w)
                .then(b.energy_j.total_cmp(&a.energy_j))
                .then(a.tid.cmp(&b.tid))
        });
        if threads.len() > LIVE_THREADS {
            let rest = threads.split_off(LIVE_THREADS);
            let sum = |f: &dyn Fn(&LiveThread) -> f64| rest.iter().map(f).sum::<f64>();
            threads.push(LiveThread {
                tid: None,
                name: String::new(),
                folded_count: Some(rest.len()),
                cpu_pct: sum(&|t| t.cpu_pct),
                power_w: sum(&|t| t.power_w),
                energy_j: sum(&|t| t.energy_j),
                share_pct: sum(&|t| t.share_pct),
                cpu_time_s: sum(&|t| t.cpu_time_s),
            });
        }
        threads
    }
}

/// Whether a process is a kernel thread: kthreadd (pid 2) or a thread it started, with no
/// command line of its own (htop's test where the kernel's flag is not at hand).
fn is_kernel_thread(p: &ProcessRecord) -> bool {
    p.cmdline.is_empty() && !p.comm.is_empty() && (p.pid == 2 || p.ppid == Some(2))
}

/// Outside text (names, command lines, paths) as the live view shows it: control characters
/// escaped ([`crate::printable`]), never dropped or raw.
fn shown(text: &str) -> String {
    crate::printable::printable(text).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        attribution::{Coverage, CpuTime, Interval, Slice},
        host::HostInfo,
        session::{IdleWatts, RunHeader, SourceInfo},
    };

    const MS: u64 = 1_000_000;

    fn host() -> HostInfo {
        HostInfo::two_cpu_test_host()
    }

    fn model_domain() -> DomainSpec {
        DomainSpec {
            name: "model".into(),
            kind: DomainKind::Model,
            parent: None,
            coverage: Coverage::AllCpus,
            provenance: Provenance::Estimated,
            source: "model",
        }
    }

    fn record(pid: u32, ppid: u32, name: &str, ended_ns: Option<u64>) -> ProcessRecord {
        ProcessRecord {
            pid,
            ppid: Some(ppid),
            comm: name.into(),
            cmdline: vec![format!("/usr/bin/{name}"), "--flag".into()],
            uid: Some(1000),
            first_seen_ns: 0,
            start_ns: None,
            ended_ns,
            ending: None,
            root: pid == 10,
            thread_names: Default::default(),
            cgroup: None,
        }
    }

    /// 100 ms; process 0 busy `a_ms` on CPU 0, process 1 busy `b_ms` on CPU 1, other 10 ms.
    fn interval(i: u64, a_ms: u64, b_ms: u64, energy_j: f64) -> Interval {
        Interval {
            start_ns: i * 100 * MS,
            duration_ns: 100 * MS,
            cpus: vec![
                CpuTime {
                    idle_ns: (100 - a_ms) * MS,
                    other_ns: 0,
                },
                CpuTime {
                    idle_ns: (90 - b_ms) * MS,
                    other_ns: 10 * MS,
                },
            ],
            slices: vec![
                Slice {
                    process: 0,
                    tid: 0,
                    cpu: 0,
                    on_cpu_ns: a_ms * MS,
                },
                Slice {
                    process: 1,
                    tid: 1,
                    cpu: 1,
                    on_cpu_ns: b_ms * MS,
                },
            ],
            energy_j: vec![energy_j],
            ..Interval::default()
        }
    }

    fn model(mode: Mode, known_idle_w: Option<f64>) -> LiveModel {
        let domains = [model_domain()];
        let sources = [SourceInfo {
            name: "model",
            provenance: Provenance::Estimated,
            description: "test model".into(),
            domains: vec!["model".into()],
        }];
        LiveModel::new(&LiveStart {
            header: &RunHeader {
                mode,
                host: host(),
                sources: sources.to_vec(),
                selection_reason: "test".into(),
                baseline: crate::accounting::BaselineInputs {
                    domains: domains.to_vec(),
                    idle_watts: IdleWatts::Estimate,
                    known_idle_w: vec![known_idle_w],
                    rest_power: Vec::new(),
                    busy_slope_w: vec![],
                    interval: Duration::from_millis(100),
                    prior_slope_w_per_cpu: 5.0,
                },
            },
            run_start_ns: 1_000 * MS,
            calibration: &[],
        })
    }

    fn feed(model: &mut LiveModel, processes: &[ProcessRecord], changed: &[ProcId], iv: &Interval) {
        model.add(&LiveSample {
            interval: iv,
            processes,
            changed,
            losses: Losses::default(),
            read_errors_count: 0,
            functions: None,
        });
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn a_processs_threads_busiest_first_then_the_rest_folded_adding_up() {
        // Process 0 has 13 threads on CPU 0 in each 100 ms interval: thread 100 runs 40 ms,
        // 101..=112 run 5 ms each. 10 listed (100 first), 3 folded.
        let mut m = model(
            Mode::Wrap {
                command: vec!["pool".into()],
            },
            Some(2.0),
        );
        let mut pool = record(10, 1, "pool", None);
        pool.thread_names.insert(100, "busy".into());
        let procs = [pool];
        for i in 0..3 {
            let mut slices = vec![Slice {
                process: 0,
                tid: 100,
                cpu: 0,
                on_cpu_ns: 40 * MS,
            }];
            slices.extend((101..=112).map(|tid| Slice {
                process: 0,
                tid,
                cpu: 0,
                on_cpu_ns: 5 * MS,
            }));
            let iv = Interval {
                start_ns: i * 100 * MS,
                duration_ns: 100 * MS,
                cpus: vec![CpuTime::default(), CpuTime::default()],
                slices,
                energy_j: vec![1.0],
                ..Interval::default()
            };
            feed(&mut m, &procs, if i == 0 { &[0] } else { &[] }, &iv);
        }
        let r = m.snapshot();
        let p = &r.processes[0];
        assert_eq!(p.threads.len(), 11, "{:#?}", p.threads);
        assert_eq!(
            (p.threads[0].tid, p.threads[0].name.as_str()),
            (Some(100), "busy")
        );
        assert_eq!(p.threads[1].name, "");
        let rest = &p.threads[10];
        assert_eq!((rest.tid, rest.folded_count), (None, Some(3)));
        // All active: 0.8 J per interval over 100 ms busy; thread 100 has 40 % of it.
        assert!(
            close(p.threads[0].energy_j, 3.0 * 0.8 * 0.4),
            "{:#?}",
            p.threads
        );
        assert!(close(p.threads[0].cpu_pct, 40.0 * 3.0 / 3.0));
        let sum = |f: &dyn Fn(&LiveThread) -> f64| p.threads.iter().map(f).sum::<f64>();
        assert!(close(sum(&|t| t.energy_j), p.energy_j));
        assert!(close(sum(&|t| t.power_w), p.power_w));
        assert!(close(sum(&|t| t.cpu_pct), p.cpu_pct));
        assert!(close(sum(&|t| t.cpu_time_s), p.cpu_time_s));
        assert!(close(sum(&|t| t.share_pct), p.share_pct));
    }

    #[test]
    fn the_view_gets_outside_text_escaped_not_raw_nor_dropped() {
        let mut m = model(
            Mode::Wrap {
                command: vec!["python3".into(), "-c".into(), "a = 1\nb = 2".into()],
            },
            Some(2.0),
        );
        let mut app = record(10, 1, "\x1b]52;c;QUJD\x07", None);
        app.cmdline = vec!["\x1b[8mpy\u{202e}".into(), "a\r\nb".into()];
        app.thread_names.insert(0, "w\u{9b}2J".into());
        app.cgroup = Some(crate::cgroup::classify("/system.slice/x\u{202e}y.service"));
        feed(
            &mut m,
            &[app, record(11, 10, "b", None)],
            &[0, 1],
            &interval(0, 50, 50, 1.0),
        );
        let r = m.snapshot();
        assert_eq!(r.target, "python3 -c a = 1\\nb = 2");
        let p = r.processes.iter().find(|p| p.pid == 10).unwrap();
        assert_eq!(p.comm, "\\x1b]52;c;QUJD\\x07");
        assert_eq!(p.command, "\\x1b[8mpy\\u202e a\\r\\nb");
        assert_eq!(p.threads[0].name, "w\\u009b2J");
        assert_eq!(p.cgroup.as_deref(), Some("x\\u202ey.service"));
    }

    #[test]
    fn live_figures_add_up_and_use_the_known_idle_power() {
        let mut m = model(
            Mode::Wrap {
                command: vec!["app".into()],
            },
            Some(4.0),
        );
        let procs = [record(10, 1, "app", None), record(11, 10, "worker", None)];
        // 10 intervals of 100 ms: A 100 ms, B 50 ms, other 10 ms; 1.2 J each.
        for i in 0..10 {
            feed(
                &mut m,
                &procs,
                if i == 0 { &[0, 1] } else { &[] },
                &interval(i, 100, 50, 1.2),
            );
        }
        let r = m.snapshot();
        assert!(close(r.elapsed_s, 1.0));
        assert!(close(r.window_s, 1.0));
        assert!(close(r.totals.energy_j, 12.0));
        assert!(close(r.totals.power_w, 12.0));
        // idle = 4 W; the 8 W left split 100:50:10 by on-CPU time.
        assert!(close(r.totals.idle_power_w, 4.0));
        assert!(close(r.totals.idle_baseline_w, 4.0));
        assert!(close(
            r.totals.targets_power_w + r.totals.other_power_w + r.totals.idle_power_w,
            r.totals.power_w
        ));
        let a = r.processes.iter().find(|p| p.pid == 10).unwrap();
        let b = r.processes.iter().find(|p| p.pid == 11).unwrap();
        assert!(close(a.power_w, 5.0));
        assert!(close(b.power_w, 2.5));
        assert!(close(a.cpu_pct, 100.0));
        assert!(close(b.cpu_pct, 50.0));
        assert!(close(a.energy_j, 5.0));
        assert!(close(a.share_pct, 100.0 * 5.0 / 12.0));
        assert_eq!(a.command, "/usr/bin/app --flag");
        assert_eq!(a.domain_power_w.len(), 1);
        assert!(r.totals.estimated);
        assert_eq!(r.target, "app");
        assert_eq!(r.history.len(), 2, "model + targets");
        assert_eq!(r.history[0].points.len(), 1);
        assert!(close(r.history[0].points[0].0, 1.0) && close(r.history[0].points[0].1, 12.0));

        // The next window starts empty: power is about that window only.
        for i in 10..15 {
            feed(&mut m, &procs, &[], &interval(i, 0, 90, 1.0));
        }
        let r = m.snapshot();
        assert!(close(r.window_s, 0.5));
        let a = r.processes.iter().find(|p| p.pid == 10).unwrap();
        assert_eq!(a.power_w, 0.0);
        assert!(close(a.energy_j, 5.0), "energy so far is kept");
        assert_eq!(r.history[0].points.len(), 2);
    }

    #[test]
    fn changed_records_replace_the_copy_and_exited_processes_linger_then_go() {
        let mut m = model(Mode::System, Some(1.0));
        let mut procs = vec![record(10, 1, "a", None), record(11, 1, "b", None)];
        feed(&mut m, &procs, &[0, 1], &interval(0, 10, 10, 0.5));
        // b exits at 0.1 s (monotonic: run start + 100 ms).
        procs[1].ended_ns = Some(1_100 * MS);
        procs[1].comm = "b-renamed".into();
        feed(&mut m, &procs, &[1], &interval(1, 10, 10, 0.5));
        let r = m.snapshot();
        let b = r.processes.iter().find(|p| p.pid == 11).unwrap();
        assert!(!b.alive);
        assert_eq!(b.comm, "b-renamed");
        // 10 s later without b running, it is gone; a stays (alive).
        for i in 2..105 {
            feed(&mut m, &procs, &[], &interval(i, 10, 0, 0.5));
        }
        let r = m.snapshot();
        assert!(r.processes.iter().all(|p| p.pid != 11));
        assert!(r.processes.iter().any(|p| p.pid == 10));
        assert_eq!(r.target, "the whole machine");
        assert_eq!(
            r.history.len(),
            1,
            "no targets series for the whole machine"
        );
    }

    #[test]
    fn per_cpu_busy_over_the_window() {
        let mut m = model(Mode::System, Some(1.0));
        let procs = vec![record(10, 1, "a", None), record(11, 1, "b", None)];
        // CPU 0: a 30 ms, then 50 ms busy of 100; CPU 1: b 20 ms + other 10 ms, then 0 + 10.
        feed(&mut m, &procs, &[0, 1], &interval(0, 30, 20, 0.5));
        feed(&mut m, &procs, &[], &interval(1, 50, 0, 0.5));
        let r = m.snapshot();
        assert_eq!(r.cpu_busy_pct.len(), 2);
        assert!(close(r.cpu_busy_pct[0], 40.0), "{:?}", r.cpu_busy_pct);
        assert!(close(r.cpu_busy_pct[1], 20.0), "{:?}", r.cpu_busy_pct);
        // A new window starts from nothing.
        feed(&mut m, &procs, &[], &interval(2, 100, 90, 0.5));
        let r = m.snapshot();
        assert!(close(r.cpu_busy_pct[0], 100.0), "{:?}", r.cpu_busy_pct);
        assert!(close(r.cpu_busy_pct[1], 100.0), "{:?}", r.cpu_busy_pct);
    }

    #[test]
    fn kernel_threads_are_marked_and_named_in_brackets() {
        let mut m = model(Mode::System, Some(1.0));
        let mut kworker = record(11, 2, "kworker/0:1", None);
        kworker.cmdline.clear();
        kworker.uid = None;
        let procs = vec![record(10, 1, "a", None), kworker];
        feed(&mut m, &procs, &[0, 1], &interval(0, 10, 10, 0.5));
        let r = m.snapshot();
        let kworker = r.processes.iter().find(|p| p.pid == 11).unwrap();
        assert!(kworker.kernel_thread);
        assert_eq!(kworker.command, "[kworker/0:1]");
        let a = r.processes.iter().find(|p| p.pid == 10).unwrap();
        assert!(!a.kernel_thread);
        assert_eq!(a.command, "/usr/bin/a --flag");
        // A child of kthreadd with a command line (a user process it cannot have) and an
        // unknown process are not kernel threads.
        let mut odd = record(12, 2, "odd", None);
        assert!(!is_kernel_thread(&odd));
        odd.cmdline.clear();
        odd.comm.clear();
        assert!(!is_kernel_thread(&odd));
        let mut kthreadd = record(2, 0, "kthreadd", None);
        kthreadd.cmdline.clear();
        assert!(is_kernel_thread(&kthreadd));
    }

    #[test]
    fn estimates_the_baseline_from_the_run_so_far_when_no_source_knows_it() {
        let mut m = model(Mode::System, None);
        let procs = [record(10, 1, "a", None), record(11, 1, "b", None)];
        // Power = 3 W + 6 W per busy CPU, with a varying load: the fit finds 3 W.
        for i in 0..40 {
            let (a, b) = ((i % 5) * 20, (i % 3) * 30);
            let busy_s = (a + b + 10) as f64 / 1000.0;
            feed(
                &mut m,
                &procs,
                if i == 0 { &[0, 1] } else { &[] },
                &interval(i, a, b, 0.3 + 6.0 * busy_s),
            );
        }
        let r = m.snapshot();
        let d = &r.domains[0];
        assert_eq!(d.idle_method, "regression");
        assert!(
            (d.idle_baseline_w - 3.0).abs() < 1e-6,
            "{}",
            d.idle_baseline_w
        );
        assert!(close(
            r.totals.targets_energy_j + r.totals.other_energy_j + r.totals.idle_energy_j,
            r.totals.energy_j
        ));
    }

    #[test]
    fn gpu_domains_split_by_the_processes_gpu_shares() {
        use crate::attribution::gpu::{GpuShare, GpuUsage, GpuUser};
        let domains = [
            model_domain(),
            DomainSpec {
                name: "gpu0".into(),
                kind: DomainKind::Gpu,
                parent: None,
                coverage: Coverage::Gpu(0),
                provenance: Provenance::Measured,
                source: "nvml",
            },
        ];
        let mode = Mode::Wrap {
            command: vec!["train".into()],
        };
        let mut m = LiveModel::new(&LiveStart {
            header: &RunHeader {
                mode,
                host: host(),
                sources: Vec::new(),
                selection_reason: "test".into(),
                baseline: crate::accounting::BaselineInputs {
                    domains: domains.to_vec(),
                    idle_watts: IdleWatts::PerDomain([("gpu0".to_string(), 30.0)].into()),
                    known_idle_w: vec![Some(4.0), None],
                    rest_power: Vec::new(),
                    busy_slope_w: vec![None, Some(200.0)],
                    interval: Duration::from_millis(100),
                    prior_slope_w_per_cpu: 5.0,
                },
            },
            run_start_ns: 0,
            calibration: &[],
        });
        let procs = [record(10, 1, "train", None), record(11, 10, "loader", None)];
        for i in 0..10 {
            let mut iv = interval(i, 20, 50, 1.0);
            // 13 J in 100 ms on the GPU: 3 J idle (30 W), 10 J busy, 80 % of it for train.
            iv.energy_j.push(13.0);
            iv.gpus = vec![GpuUsage {
                busy_fraction: 0.5,
                shares: vec![
                    GpuShare {
                        user: GpuUser::Target(0),
                        busy_fraction: 0.4,
                    },
                    GpuShare {
                        user: GpuUser::Other,
                        busy_fraction: 0.1,
                    },
                ],
                ..Default::default()
            }];
            feed(&mut m, &procs, if i == 0 { &[0, 1] } else { &[] }, &iv);
        }
        let r = m.snapshot();
        let gpu = &r.domains[1];
        assert_eq!(gpu.idle_method, "given");
        assert!(close(gpu.power_w, 130.0));
        assert!(close(gpu.idle_power_w, 30.0));
        assert!(close(gpu.targets_power_w, 80.0));
        let train = r.processes.iter().find(|p| p.pid == 10).unwrap();
        assert!(close(train.domain_power_w[1], 80.0));
        assert!(close(
            r.totals.targets_power_w + r.totals.other_power_w + r.totals.idle_power_w,
            r.totals.power_w
        ));
    }

    #[test]
    fn functions_are_attributed_interval_by_interval_with_their_process() {
        use crate::{
            attribution::functions::{CallDelta, FunctionInterval, SampleCount, ThreadTime},
            functions::{
                elf::FirstInstruction,
                resolve::ResolvedFunction,
                symbolize::{Frame, FrameKind},
            },
            session::functions::LiveFunctions,
        };
        // Process 0 (pid 10) runs 50 ms per interval on CPU 0; in each interval:
        //   probed `compress`: 1 call, 40 ms inclusive, 30 ms self
        //   samples of thread 10: 4 x [main compress], 1 x [main]
        let mut m = model(Mode::Attach { pids: vec![10] }, Some(1.0));
        let procs = [record(10, 1, "a", None), record(11, 10, "b", None)];
        let probed = [ResolvedFunction {
            id: 0,
            name: "compress".into(),
            raw: "compress".into(),
            module: "/usr/bin/app".into(),
            address: 0x1000,
            offset: 0x1000,
            first_instruction: FirstInstruction::Emulated,
            entry_only: None,
            spec: "compress".into(),
        }];
        let frames = ["main", "compress"]
            .map(|symbol| Frame::named(symbol.into(), "app".into(), FrameKind::Native));
        let stacks = [vec![0, 1], vec![0]];
        for i in 0..2 {
            let data = FunctionInterval {
                start_ns: i * 100 * MS,
                duration_ns: 100 * MS,
                threads: vec![ThreadTime {
                    process: 0,
                    tid: 10,
                    on_cpu_ns: 50 * MS,
                }],
                samples: [(0, 4), (1, 1)]
                    .map(|(stack, count)| SampleCount {
                        process: 0,
                        tid: 10,
                        stack,
                        count,
                    })
                    .to_vec(),
                calls: vec![CallDelta {
                    process: 0,
                    func: 0,
                    calls: 1,
                    incl_ns: 40 * MS,
                    self_ns: 30 * MS,
                }],
            };
            m.add(&LiveSample {
                interval: &interval(i, 50, 20, 1.0),
                processes: &procs,
                changed: if i == 0 { &[0, 1] } else { &[] },
                losses: Losses {
                    events_dropped: 2,
                    ..Losses::default()
                },
                read_errors_count: 1,
                functions: Some(LiveFunctions {
                    interval: &data,
                    stacks: &stacks,
                    frames: &frames,
                    probed: &probed,
                }),
            });
        }
        let r = m.snapshot();
        assert_eq!(r.lost_events.total_count, 3);
        assert_eq!(r.target, "pid 10");
        // An interval without function data adds to the process, not to its functions.
        feed(&mut m, &procs, &[], &interval(2, 0, 20, 1.0));
        let r = m.snapshot();
        let process_j = r.processes.iter().find(|p| p.pid == 10).unwrap().energy_j;
        assert!(process_j > 0.0);
        let entry = |source: &str, symbol: &str| {
            r.functions
                .iter()
                .find(|f| f.source == source && f.symbol == symbol)
                .unwrap_or_else(|| panic!("{source} {symbol}: {:?}", r.functions))
        };
        let probed = entry("uprobe", "compress");
        assert_eq!(
            (probed.who.pid, probed.calls, probed.samples),
            (10, Some(2), None)
        );
        assert_eq!(probed.module, "app");
        assert!(close(probed.cpu_time_s, 0.08));
        assert!(close(probed.energy_j, 0.8 * process_j));
        assert!(close(probed.self_energy_j, 0.6 * process_j));
        let main = entry("sampling", "main");
        assert_eq!(main.samples, Some(10));
        assert!(close(main.energy_j, process_j));
        assert!(close(main.self_energy_j, 0.2 * process_j));
        let sampled = entry("sampling", "compress");
        assert!(close(sampled.energy_j, 0.8 * process_j));
        assert!(close(sampled.self_energy_j, 0.8 * process_j));
        assert!(r.functions.iter().all(|f| f.who.pid == 10));
        assert_eq!(r.functions.len(), 3);
        // One process: each function's total over processes is its entry; the probed and the
        // sampled `compress` stay apart.
        assert_eq!(r.function_totals.len(), 3);
        let total = r
            .function_totals
            .iter()
            .find(|t| t.source == "uprobe")
            .unwrap();
        assert_eq!((total.calls, total.who.processes_count), (Some(2), 1));
        assert!(close(total.energy_j, probed.energy_j));
    }
}
