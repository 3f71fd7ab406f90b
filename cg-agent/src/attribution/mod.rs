//! Attribution: splits the energy each domain measured in an interval into **idle** (the
//! baseline the machine draws with nothing running), **targets** (per process, by on-CPU
//! time) and **other** (every non-target task), so that, per domain and per interval,
//! `sum(targets) + other + idle == measured`.
//!
//! GPU domains are split the same way, by the processes' shares of the GPU's time instead of
//! CPU time (see [`gpu`]).
//!
//! Energy that is not known (a counter that glitched: see [`unknown`]) is not invented: it is
//! left out of `measured`, and the ledger counts the intervals and time it covers, so the
//! invariant holds over what was measured and the gap stays visible.
//!
//! Pure: no I/O, no clocks, no aya types. The session feeds it [`Interval`]s built from the
//! probes and the energy sources; the report reads the resulting [`Ledger`].

pub mod functions;
pub mod gpu;
pub mod idle;
pub mod unknown;

use std::collections::BTreeMap;

pub use unknown::{EnergyState, Glitch};

/// A process, as numbered by the session: each process it sees gets its own id, so a pid that
/// the kernel reuses after an exit is a different `ProcId` and figures never mix.
pub type ProcId = u32;

/// Which CPUs' activity a domain's energy is split over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Every CPU of the machine (psys, a wall meter, the model).
    AllCpus,
    /// These CPU ids (a package and what it contains, its DRAM).
    Cpus(Vec<u32>),
    /// GPU number N (`Interval::gpus[N]`): no CPU; its energy is split by the processes' shares
    /// of the GPU's time.
    Gpu(u32),
}

impl Coverage {
    /// Whether CPU `cpu` is covered.
    pub fn covers(&self, cpu: u32) -> bool {
        match self {
            Coverage::AllCpus => true,
            Coverage::Cpus(cpus) => cpus.contains(&cpu),
            Coverage::Gpu(_) => false,
        }
    }
}

/// Time one CPU spent, in one interval, on tasks that are not individually accounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// The idle task.
    pub idle_ns: u64,
    /// Tasks that are not targets (and target time the kernel could not store: see losses).
    pub other_ns: u64,
}

/// On-CPU time of one thread of a target process on one CPU in one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub process: ProcId,
    /// The thread's id (the kernel's tid; the process's pid for its main thread).
    pub tid: u32,
    pub cpu: u32,
    pub on_cpu_ns: u64,
}

/// Slices from on-CPU time summed per (process, tid, CPU), in the order intervals keep them.
pub fn sorted_slices(sums: impl IntoIterator<Item = ((ProcId, u32, u32), u64)>) -> Vec<Slice> {
    let mut slices: Vec<Slice> = sums
        .into_iter()
        .map(|((process, tid, cpu), on_cpu_ns)| Slice {
            process,
            tid,
            cpu,
            on_cpu_ns,
        })
        .collect();
    slices.sort_by_key(|s| (s.process, s.tid, s.cpu));
    slices
}

/// A thread of a process: the process's [`ProcId`] and the thread's tid (a tid names one
/// thread within one process's life).
pub type ThreadId = (ProcId, u32);

/// Everything attribution needs to know about one interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interval {
    /// Start, in nanoseconds since the run started.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Per CPU id.
    pub cpus: Vec<CpuTime>,
    /// Targets' on-CPU time, at most one slice per (process, tid, cpu).
    pub slices: Vec<Slice>,
    /// Energy per domain (index = domain index), joules: only what is known.
    pub energy_j: Vec<f64>,
    /// How much of each domain's energy is known (indexed like `energy_j`; a missing entry is
    /// fully measured).
    pub energy_state: Vec<EnergyState>,
    /// Wall-clock start, nanoseconds since the Unix epoch (sources that are aligned by wall
    /// clock, such as a power meter's log, are read over `[wall_start_ns, + duration_ns]`).
    pub wall_start_ns: u64,
    /// Per GPU number (see [`Coverage::Gpu`]): how busy it was and who used it.
    pub gpus: Vec<gpu::GpuUsage>,
}

impl Interval {
    /// How much of domain `domain`'s energy is known in this interval.
    pub fn energy_state(&self, domain: usize) -> EnergyState {
        self.energy_state.get(domain).copied().unwrap_or_default()
    }

    /// Domain `domain`'s energy and its state, to revise them (`None` past the domains).
    pub fn energy_mut(&mut self, domain: usize) -> Option<(&mut f64, &mut EnergyState)> {
        let joules = self.energy_j.get_mut(domain)?;
        if self.energy_state.len() <= domain {
            self.energy_state.resize(domain + 1, EnergyState::default());
        }
        Some((joules, &mut self.energy_state[domain]))
    }

    /// CPUs busy on average (any task but idle) among the CPUs `coverage` names; for a GPU
    /// domain, the fraction of the interval the GPU was busy (0 to 1).
    pub fn busy_cpus(&self, coverage: &Coverage) -> f64 {
        if let Coverage::Gpu(n) = coverage {
            return self.gpus.get(*n as usize).map_or(0.0, |g| g.busy_fraction);
        }
        if self.duration_ns == 0 {
            return 0.0;
        }
        self.busy_ns(coverage) as f64 / self.duration_ns as f64
    }

    /// Non-idle time summed over the CPUs `coverage` names.
    pub fn busy_ns(&self, coverage: &Coverage) -> u64 {
        let targets: u64 = self
            .slices
            .iter()
            .filter(|s| coverage.covers(s.cpu))
            .map(|s| s.on_cpu_ns)
            .sum();
        let other: u64 = self
            .cpus
            .iter()
            .enumerate()
            .filter(|(cpu, _)| coverage.covers(*cpu as u32))
            .map(|(_, t)| t.other_ns)
            .sum();
        targets + other
    }

    /// Non-idle time per CPU id (targets and other).
    pub fn busy_ns_per_cpu(&self) -> Vec<u64> {
        let mut busy: Vec<u64> = self.cpus.iter().map(|c| c.other_ns).collect();
        for slice in &self.slices {
            if let Some(b) = busy.get_mut(slice.cpu as usize) {
                *b += slice.on_cpu_ns;
            }
        }
        busy
    }
}

/// How one domain's energy in one interval was split.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DomainSplit {
    pub measured_j: f64,
    pub idle_j: f64,
    pub other_j: f64,
    /// Energy per target process (only processes that ran on the domain's CPUs).
    pub targets_j: Vec<(ProcId, f64)>,
    /// The same per thread of those processes, by each thread's on-CPU time (empty for GPU
    /// domains: the GPU's per-process figures name no thread).
    pub threads_j: Vec<(ThreadId, f64)>,
    /// The part of `other_j` that no process accounts for (GPU domains: busy time that the
    /// GPU's per-process figures do not explain); 0 for CPU domains.
    pub unexplained_j: f64,
}

impl DomainSplit {
    pub fn attributed_j(&self) -> f64 {
        // `+ 0.0`: an empty sum is -0.0, which prints as "-0.000".
        self.targets_j.iter().map(|(_, j)| j).sum::<f64>() + 0.0
    }
}

/// Splits one interval's energy, domain by domain.
///
/// Per domain with energy `E`, baseline `P_idle` and interval length `dt`:
/// - nothing ran on the domain's CPUs: all of `E` is idle;
/// - otherwise idle = `min(P_idle * dt, E)`, and the rest is split over every task that ran on
///   those CPUs (targets per process, non-targets as other) in proportion to on-CPU time.
///
/// GPU domains ([`Coverage::Gpu`]) are split by [`gpu::split`] instead.
/// `coverage` and `idle_power_w` are indexed like `interval.energy_j`. Where part of the
/// interval's energy is unknown ([`Interval::energy_state`]), `E` is the known part and `dt`
/// the time it covers: an interval whose energy is all unknown splits into nothing.
pub fn split_interval(
    interval: &Interval,
    coverage: &[Coverage],
    idle_power_w: &[f64],
) -> Vec<DomainSplit> {
    interval
        .energy_j
        .iter()
        .enumerate()
        .map(|(domain, &measured_j)| {
            let covers = coverage.get(domain).unwrap_or(&Coverage::AllCpus);
            let baseline_w = idle_power_w.get(domain).copied().unwrap_or(0.0).max(0.0);
            let known_ns = interval.energy_state(domain).known_ns(interval.duration_ns);
            let dt_s = known_ns as f64 / 1e9;
            match covers {
                Coverage::Gpu(n) => gpu::split(
                    interval.gpus.get(*n as usize),
                    measured_j,
                    baseline_w * dt_s,
                ),
                _ => split_domain(interval, covers, measured_j, baseline_w * dt_s),
            }
        })
        .collect()
}

fn split_domain(
    interval: &Interval,
    coverage: &Coverage,
    measured_j: f64,
    baseline_j: f64,
) -> DomainSplit {
    let mut per_process: BTreeMap<ProcId, u64> = BTreeMap::new();
    let mut per_thread: BTreeMap<ThreadId, u64> = BTreeMap::new();
    for slice in interval.slices.iter().filter(|s| coverage.covers(s.cpu)) {
        *per_process.entry(slice.process).or_default() += slice.on_cpu_ns;
        *per_thread.entry((slice.process, slice.tid)).or_default() += slice.on_cpu_ns;
    }
    let other_ns: u64 = interval
        .cpus
        .iter()
        .enumerate()
        .filter(|(cpu, _)| coverage.covers(*cpu as u32))
        .map(|(_, t)| t.other_ns)
        .sum();
    let busy_ns = other_ns + per_process.values().sum::<u64>();
    if busy_ns == 0 || measured_j <= 0.0 {
        return DomainSplit {
            measured_j,
            idle_j: measured_j,
            ..DomainSplit::default()
        };
    }
    let idle_j = baseline_j.min(measured_j);
    let active_j = measured_j - idle_j;
    let per_ns = active_j / busy_ns as f64;
    let targets_j: Vec<(ProcId, f64)> = per_process
        .into_iter()
        .map(|(pid, ns)| (pid, ns as f64 * per_ns))
        .collect();
    let threads_j: Vec<(ThreadId, f64)> = per_thread
        .into_iter()
        .map(|(thread, ns)| (thread, ns as f64 * per_ns))
        .collect();
    // Other takes the remainder, so the parts add up to the measurement exactly up to one
    // rounding step rather than accumulating per-process rounding errors.
    let attributed: f64 = targets_j.iter().map(|(_, j)| j).sum();
    let other_j = (active_j - attributed).max(0.0);
    DomainSplit {
        measured_j,
        idle_j,
        other_j,
        targets_j,
        threads_j,
        unexplained_j: 0.0,
    }
}

/// Running totals of energy per domain and per process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ledger {
    pub domains: Vec<DomainLedger>,
    /// Targets' on-CPU time per process, nanoseconds.
    pub cpu_ns: BTreeMap<ProcId, u64>,
    /// The same per thread (adds up to `cpu_ns` per process).
    pub thread_cpu_ns: BTreeMap<ThreadId, u64>,
    /// Intervals added.
    pub intervals: u64,
    pub duration_ns: u64,
}

/// Totals of one domain.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DomainLedger {
    pub measured_j: f64,
    pub idle_j: f64,
    pub other_j: f64,
    /// The part of `other_j` no process accounts for (see [`DomainSplit::unexplained_j`]).
    pub unexplained_j: f64,
    pub by_process_j: BTreeMap<ProcId, f64>,
    /// Per thread of those processes (CPU domains only: see [`DomainSplit::threads_j`]).
    pub by_thread_j: BTreeMap<ThreadId, f64>,
    /// Reads whose energy is unknown (not in `measured_j`), and the time they cover.
    pub unknown_count: u64,
    pub unknown_ns: u64,
    /// Time whose energy was spread over it from a later reading (reads failed).
    pub spread_ns: u64,
}

impl DomainLedger {
    pub fn attributed_j(&self) -> f64 {
        // `+ 0.0`: an empty sum is -0.0, which prints as "-0.000".
        self.by_process_j.values().sum::<f64>() + 0.0
    }
}

impl Ledger {
    pub fn new(domain_count: usize) -> Self {
        Ledger {
            domains: vec![DomainLedger::default(); domain_count],
            ..Ledger::default()
        }
    }

    /// Adds an interval and the split [`split_interval`] made of it.
    pub fn add(&mut self, interval: &Interval, splits: &[DomainSplit]) {
        self.intervals += 1;
        self.duration_ns += interval.duration_ns;
        for slice in &interval.slices {
            *self.cpu_ns.entry(slice.process).or_default() += slice.on_cpu_ns;
            *self
                .thread_cpu_ns
                .entry((slice.process, slice.tid))
                .or_default() += slice.on_cpu_ns;
        }
        for (d, (ledger, split)) in self.domains.iter_mut().zip(splits).enumerate() {
            let state = interval.energy_state(d);
            ledger.unknown_count += u64::from(state.unknown_count);
            ledger.unknown_ns += state.unknown_ns;
            ledger.spread_ns += state.spread_ns;
            ledger.measured_j += split.measured_j;
            ledger.idle_j += split.idle_j;
            ledger.other_j += split.other_j;
            ledger.unexplained_j += split.unexplained_j;
            for &(pid, j) in &split.targets_j {
                *ledger.by_process_j.entry(pid).or_default() += j;
            }
            for &(thread, j) in &split.threads_j {
                *ledger.by_thread_j.entry(thread).or_default() += j;
            }
        }
    }

    /// Energy of process `process` summed over the given domains.
    pub fn energy_of(&self, process: ProcId, domains: &[usize]) -> f64 {
        domains
            .iter()
            .filter_map(|&d| self.domains.get(d))
            .filter_map(|l| l.by_process_j.get(&process))
            .sum()
    }
}

/// Splits every interval with fixed baselines and sums the result.
pub fn attribute(intervals: &[Interval], coverage: &[Coverage], idle_power_w: &[f64]) -> Ledger {
    let mut ledger = Ledger::new(coverage.len());
    for interval in intervals {
        let splits = split_interval(interval, coverage, idle_power_w);
        ledger.add(interval, &splits);
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn assert_adds_up(split: &DomainSplit) {
        let sum = split.attributed_j() + split.other_j + split.idle_j;
        assert!(
            close(sum, split.measured_j),
            "targets {} + other {} + idle {} = {sum} != measured {}",
            split.attributed_j(),
            split.other_j,
            split.idle_j,
            split.measured_j
        );
    }

    fn slice(pid: ProcId, cpu: u32, ms: u64) -> Slice {
        thread_slice(pid, pid, cpu, ms)
    }

    fn thread_slice(pid: ProcId, tid: u32, cpu: u32, ms: u64) -> Slice {
        Slice {
            process: pid,
            tid,
            cpu,
            on_cpu_ns: ms * MS,
        }
    }

    fn cpu(idle_ms: u64, other_ms: u64) -> CpuTime {
        CpuTime {
            idle_ns: idle_ms * MS,
            other_ns: other_ms * MS,
        }
    }

    fn target(split: &DomainSplit, pid: ProcId) -> f64 {
        split
            .targets_j
            .iter()
            .find(|(p, _)| *p == pid)
            .map_or(0.0, |(_, j)| *j)
    }

    #[test]
    fn splits_active_energy_by_on_cpu_time() {
        // 100 ms, two CPUs, 3 W idle baseline, 10 J measured:
        //   cpu0 |AAAAAAAAAA|   A: 100 ms
        //   cpu1 |BBBBBooooo|   B: 50 ms, o (other): 50 ms
        // idle = 0.3 J; active 9.7 J over 200 ms busy.
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(0, 0), cpu(0, 50)],
            slices: vec![slice(1, 0, 100), slice(2, 1, 50)],
            energy_j: vec![10.0],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[3.0])[0];
        assert_adds_up(split);
        assert!(close(split.idle_j, 0.3));
        assert!(close(target(split, 1), 9.7 * 0.5));
        assert!(close(target(split, 2), 9.7 * 0.25));
        assert!(close(split.other_j, 9.7 * 0.25));
    }

    #[test]
    fn interval_with_no_target_activity_goes_to_other_and_idle() {
        //   cpu0 |oooo......|   other 40 ms, idle 60 ms
        //   cpu1 |..........|
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(60, 40), cpu(100, 0)],
            energy_j: vec![2.0],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[10.0])[0];
        assert_adds_up(split);
        assert!(split.targets_j.is_empty());
        assert!(close(split.idle_j, 1.0));
        assert!(close(split.other_j, 1.0));
    }

    #[test]
    fn fully_idle_interval_is_all_idle_even_above_baseline() {
        //   cpu0 |..........|  nothing ran: whatever was measured is the machine at rest.
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(100, 0)],
            energy_j: vec![0.7],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[1.0])[0];
        assert_adds_up(split);
        assert!(close(split.idle_j, 0.7));
        assert_eq!(split.other_j, 0.0);
    }

    #[test]
    fn measured_below_baseline_is_all_idle_and_nothing_negative() {
        // Baseline says 0.5 J but the counter only moved 0.2 J: idle takes all of it.
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(50, 0)],
            slices: vec![slice(7, 0, 50)],
            energy_j: vec![0.2],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[5.0])[0];
        assert_adds_up(split);
        assert!(close(split.idle_j, 0.2));
        assert!(target(split, 7) >= 0.0 && target(split, 7) < 1e-12);
    }

    #[test]
    fn uneven_multi_cpu_load_only_charges_the_domains_cpus() {
        // Two packages, one CPU each; each package only pays for what ran on its CPU.
        //   cpu0 (pkg0) |AAAAAAAAAA|
        //   cpu1 (pkg1) |BBoooooo..|  B 20 ms, other 60 ms, idle 20 ms
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(0, 0), cpu(20, 60)],
            slices: vec![slice(1, 0, 100), slice(2, 1, 20)],
            energy_j: vec![4.0, 3.0],
            ..Interval::default()
        };
        let coverage = [Coverage::Cpus(vec![0]), Coverage::Cpus(vec![1])];
        let splits = split_interval(&iv, &coverage, &[10.0, 10.0]);
        for s in &splits {
            assert_adds_up(s);
        }
        assert!(close(target(&splits[0], 1), 3.0));
        assert_eq!(target(&splits[0], 2), 0.0);
        assert!(close(target(&splits[1], 2), 2.0 * 0.25));
        assert!(close(splits[1].other_j, 2.0 * 0.75));
        assert_eq!(target(&splits[1], 1), 0.0);
    }

    #[test]
    fn process_that_exits_mid_interval_keeps_what_it_ran() {
        // A exits after 30 ms; the rest of the CPU is idle. It still gets all active energy.
        //   cpu0 |AAA.......|
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(70, 0)],
            slices: vec![slice(42, 0, 30)],
            energy_j: vec![1.5],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[10.0])[0];
        assert_adds_up(split);
        assert!(close(target(split, 42), 0.5));
    }

    #[test]
    fn ledger_adds_up_per_domain_across_intervals() {
        // Three intervals, the second with a counter that wrapped (the source hands us the
        // unwrapped delta), the third with only other activity.
        //   t      0        100       200      300 ms
        //   cpu0   |AAAAAAAA|AAAA....|oooo....|
        //   cpu1   |BBBB....|BBBBBBBB|........|
        let intervals = vec![
            Interval {
                start_ns: 0,
                duration_ns: 100 * MS,
                cpus: vec![cpu(0, 0), cpu(50, 0)],
                slices: vec![slice(1, 0, 100), slice(2, 1, 50)],
                energy_j: vec![5.0, 1.0],
                ..Interval::default()
            },
            Interval {
                start_ns: 100 * MS,
                duration_ns: 100 * MS,
                cpus: vec![cpu(50, 0), cpu(0, 0)],
                slices: vec![slice(1, 0, 50), slice(2, 1, 100)],
                energy_j: vec![4.5, 1.2],
                ..Interval::default()
            },
            Interval {
                start_ns: 200 * MS,
                duration_ns: 100 * MS,
                cpus: vec![cpu(50, 50), cpu(100, 0)],
                slices: vec![],
                energy_j: vec![2.0, 0.4],
                ..Interval::default()
            },
        ];
        let coverage = [Coverage::AllCpus, Coverage::Cpus(vec![1])];
        let ledger = attribute(&intervals, &coverage, &[8.0, 2.0]);
        for d in &ledger.domains {
            let sum = d.attributed_j() + d.other_j + d.idle_j;
            assert!(close(sum, d.measured_j), "{d:?}");
        }
        assert!(close(ledger.domains[0].measured_j, 11.5));
        assert_eq!(ledger.cpu_ns[&1], 150 * MS);
        assert_eq!(ledger.cpu_ns[&2], 150 * MS);
        assert_eq!(ledger.intervals, 3);
        // Process 1 never ran on cpu1, so it has nothing of domain 1.
        assert!(!ledger.domains[1].by_process_j.contains_key(&1));
    }

    #[test]
    fn linear_power_converges_to_slope_times_cpu_time() {
        // Power = 4 W + 6 W per busy CPU, known baseline: each process gets 6 W x its CPU time.
        let (idle_w, k_w) = (4.0, 6.0);
        let mut intervals = Vec::new();
        for i in 0..50u64 {
            let a_ms = 100;
            let b_ms = (i % 4) * 25;
            let other_ms = (i % 3) * 10;
            let busy_s = (a_ms + b_ms + other_ms) as f64 / 1000.0;
            intervals.push(Interval {
                start_ns: i * 100 * MS,
                duration_ns: 100 * MS,
                cpus: vec![cpu(0, 0), cpu(100 - b_ms - other_ms, other_ms)],
                slices: vec![slice(1, 0, a_ms), slice(2, 1, b_ms)],
                energy_j: vec![idle_w * 0.1 + k_w * busy_s],
                ..Interval::default()
            });
        }
        let ledger = attribute(&intervals, &[Coverage::AllCpus], &[idle_w]);
        for pid in [1, 2] {
            let expected = k_w * ledger.cpu_ns[&pid] as f64 / 1e9;
            let got = ledger.domains[0].by_process_j[&pid];
            assert!(
                (got - expected).abs() < 1e-9,
                "pid {pid}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn unknown_energy_is_counted_not_invented() {
        // Three intervals of one CPU fully run by A; the second one's energy is unknown (the
        // counter stepped back): it splits into nothing, and the ledger counts it.
        //   t      0        100       200      300 ms
        //   cpu0   |AAAAAAAA|AAAAAAAA|AAAAAAAA|
        //   energy   2 J      ?        3 J
        let mut intervals: Vec<Interval> = (0..3u64)
            .map(|i| Interval {
                start_ns: i * 100 * MS,
                duration_ns: 100 * MS,
                cpus: vec![cpu(0, 0)],
                slices: vec![slice(1, 0, 100)],
                energy_j: vec![[2.0, 0.0, 3.0][i as usize]],
                ..Interval::default()
            })
            .collect();
        intervals[1].energy_state = vec![EnergyState::unknown(100 * MS, Glitch::StepBack)];
        let splits = split_interval(&intervals[1], &[Coverage::AllCpus], &[5.0]);
        assert_eq!(splits[0], DomainSplit::default());
        let ledger = attribute(&intervals, &[Coverage::AllCpus], &[5.0]);
        let d = &ledger.domains[0];
        assert!(close(d.measured_j, 5.0));
        assert!(close(d.attributed_j() + d.other_j + d.idle_j, d.measured_j));
        // Idle is 5 W over the 200 ms whose energy is known, not over 300 ms.
        assert!(close(d.idle_j, 1.0), "{d:?}");
        assert_eq!((d.unknown_count, d.unknown_ns), (1, 100 * MS));
        // The process's CPU time still counts in full.
        assert_eq!(ledger.cpu_ns[&1], 300 * MS);
    }

    #[test]
    fn a_partly_unknown_interval_takes_idle_over_its_known_time_only() {
        // A merged 200 ms interval whose second half is unknown: 4 J known, 10 W baseline,
        // so idle is 1 J (100 ms), not 2 J.
        let iv = Interval {
            duration_ns: 200 * MS,
            cpus: vec![cpu(100, 0)],
            slices: vec![slice(1, 0, 100)],
            energy_j: vec![4.0],
            energy_state: vec![EnergyState::unknown(100 * MS, Glitch::Frozen)],
            ..Interval::default()
        };
        let split = &split_interval(&iv, &[Coverage::AllCpus], &[10.0])[0];
        assert_adds_up(split);
        assert!(
            close(split.idle_j, 1.0) && close(target(split, 1), 3.0),
            "{split:?}"
        );
    }

    #[test]
    fn a_worker_pools_busy_thread_gets_the_joules_and_threads_add_up_to_the_process() {
        // Process 1 is a pool of four threads: thread 11 works, 12..14 wake briefly.
        // 100 ms, two CPUs, 2 W baseline, 8 J measured:
        //   t      0        100       200 ms
        //   cpu0   |11111111|11111111|
        //   cpu1   |2.3.4...|2.......|   12, 13, 14: 10 ms each in the first interval
        let intervals = vec![
            Interval {
                start_ns: 0,
                duration_ns: 100 * MS,
                cpus: vec![cpu(0, 0), cpu(70, 0)],
                slices: vec![
                    thread_slice(1, 11, 0, 100),
                    thread_slice(1, 12, 1, 10),
                    thread_slice(1, 13, 1, 10),
                    thread_slice(1, 14, 1, 10),
                ],
                energy_j: vec![8.0],
                ..Interval::default()
            },
            Interval {
                start_ns: 100 * MS,
                duration_ns: 100 * MS,
                cpus: vec![cpu(0, 0), cpu(90, 0)],
                slices: vec![thread_slice(1, 11, 0, 100), thread_slice(1, 12, 1, 10)],
                energy_j: vec![6.0],
                ..Interval::default()
            },
        ];
        let ledger = attribute(&intervals, &[Coverage::AllCpus], &[2.0]);
        let d = &ledger.domains[0];
        // Active: 8 - 0.2 = 7.8 J over 130 ms, then 6 - 0.2 = 5.8 J over 110 ms.
        let busy_j = 7.8 * 100.0 / 130.0 + 5.8 * 100.0 / 110.0;
        assert!(close(d.by_thread_j[&(1, 11)], busy_j), "{d:?}");
        assert!(close(
            d.by_thread_j[&(1, 12)],
            7.8 * 10.0 / 130.0 + 5.8 * 10.0 / 110.0
        ));
        assert!(close(d.by_thread_j[&(1, 14)], 7.8 * 10.0 / 130.0));
        let threads_j: f64 = d.by_thread_j.values().sum();
        assert!(close(threads_j, d.by_process_j[&1]));
        assert_eq!(ledger.thread_cpu_ns[&(1, 11)], 200 * MS);
        assert_eq!(ledger.thread_cpu_ns[&(1, 13)], 10 * MS);
        let threads_ns: u64 = ledger.thread_cpu_ns.values().sum();
        assert_eq!(threads_ns, ledger.cpu_ns[&1]);
    }

    #[test]
    fn busy_helpers_count_targets_and_other() {
        let iv = Interval {
            duration_ns: 100 * MS,
            cpus: vec![cpu(0, 20), cpu(70, 0)],
            slices: vec![slice(1, 0, 80), slice(2, 1, 30)],
            energy_j: vec![],
            ..Interval::default()
        };
        assert_eq!(iv.busy_ns_per_cpu(), vec![100 * MS, 30 * MS]);
        assert!(close(iv.busy_cpus(&Coverage::AllCpus), 1.3));
        assert!(close(iv.busy_cpus(&Coverage::Cpus(vec![1])), 0.3));
    }
}
