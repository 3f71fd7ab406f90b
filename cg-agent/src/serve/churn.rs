//! The exporter's week-of-churn benchmark (`cargo xtask bench --serve`, through the hidden
//! `cg-trace serve --bench-churn DAYS`): simulated kernel data (lifecycle events, snapshots of
//! cumulative per-thread CPU time) go through the accounting a serve session runs, in the
//! order it runs it, with the production code only: the process table (forgetting retired
//! processes), the activity tracker, the accounting step
//! ([`crate::session::accounting::interval_of`]), the built-in power model read through the
//! session's energy books ([`crate::session::energy::read_sources`]), the interval store
//! (bounded budget), the exporter's books, and the cleanup of exited threads and processes
//! ([`crate::session::accounting::settle_exits`]). No eBPF: the simulation stands in for the
//! kernel. Prints the resident memory at checkpoints (it must stay flat), then the time a
//! scrape of 1,000 processes in 100 groups takes.

use std::{
    collections::{BTreeMap, HashMap},
    time::Instant,
};

use cg_common::ThreadKey;

use crate::{
    accounting::BaselineInputs,
    attribution::{Interval, ProcId, Slice},
    host::HostInfo,
    probes::{
        Lifecycle, Losses,
        activity::{ActivityTracker, CpuSnapshot, Snapshot},
    },
    session::{
        IdleWatts, Mode, RunHeader, SourceInfo, accounting,
        energy::{self, Books},
        live::{LiveSample, LiveStart},
        processes::{Cleanup, ProcessTable},
        recorder::Recorder,
    },
    sources::{EnergySource, Provenance, ReadContext, model::ModelSource},
};

use super::{
    metrics::{self, OwnCost},
    model::{Exporter, GroupBy, ServeOptions},
};

const CPUS: usize = 2;
const INTERVAL_NS: u64 = 1_000_000_000;
/// Processes started per interval; each lives 1 to 3 intervals.
const STARTS_PER_INTERVAL: u64 = 10;
/// Long-lived processes (daemons), of which a tenth run in each interval.
const DAEMONS: u32 = 300;
/// Command names of the short-lived processes.
const NAMES: u64 = 500;
/// The simulated machine's power: 5 W at rest, 10 W more per busy CPU (the model's idle and
/// maximum over [`CPUS`] CPUs).
const IDLE_W: f64 = 5.0;
const MAX_W: f64 = IDLE_W + 10.0 * CPUS as f64;
/// CLOCK_MONOTONIC ns when the simulated run starts.
const BASE_NS: u64 = 1_000_000_000;

/// Resident memory now, bytes (`/proc/self/statm`).
fn rss_bytes() -> u64 {
    OwnCost::now().rss_bytes
}

/// The simulated machine: [`CPUS`] CPUs in one package.
fn host() -> HostInfo {
    HostInfo {
        cpu_packages: vec![0; CPUS],
        ..HostInfo::read()
    }
}

/// The built-in power model of the simulated machine.
fn model_source() -> Result<Box<dyn EnergySource>, String> {
    ModelSource::new(&host(), Some((IDLE_W, MAX_W)))
        .map(|m| Box::new(m) as Box<dyn EnergySource>)
        .map_err(|e| e.to_string())
}

fn header() -> RunHeader {
    RunHeader {
        mode: Mode::System,
        host: host(),
        sources: vec![SourceInfo {
            name: "model",
            provenance: Provenance::Estimated,
            description: "benchmark".into(),
            domains: vec!["model".into()],
        }],
        selection_reason: "benchmark".into(),
        baseline: BaselineInputs {
            domains: vec![crate::sources::model::model_domain()],
            idle_watts: IdleWatts::Estimate,
            known_idle_w: vec![Some(IDLE_W)],
            rest_power: Vec::new(),
            busy_slope_w: vec![],
            interval: std::time::Duration::from_nanos(INTERVAL_NS),
            prior_slope_w_per_cpu: 10.0,
        },
    }
}

fn exporter(header: &RunHeader, top_groups: usize) -> Exporter {
    Exporter::new(
        &LiveStart {
            header,
            run_start_ns: 0,
            calibration: &[],
        },
        ServeOptions {
            top_groups,
            grace_ns: 300_000_000_000,
            group_by: GroupBy::Comm,
        },
    )
}

/// A simulated process: its thread's key, CPU and cumulative time, and when it ends.
struct Sim {
    key: ThreadKey,
    cpu: usize,
    total_ns: u64,
    ends_at: Option<u64>,
}

/// Runs `days` of simulated churn; prints checkpoints and the scrape figures.
pub fn run(days: f64) -> Result<(), String> {
    let proc_root = std::env::temp_dir().join(format!("cg-trace-churn-{}", std::process::id()));
    std::fs::create_dir_all(&proc_root).map_err(|e| format!("{}: {e}", proc_root.display()))?;
    let result = simulate(days, &proc_root);
    let _ = std::fs::remove_dir(&proc_root);
    result?;
    scrape_time();
    Ok(())
}

fn simulate(days: f64, proc_root: &std::path::Path) -> Result<(), String> {
    let intervals = (days * 86_400.0 * 1e9 / INTERVAL_NS as f64) as u64;
    let mut churn = Churn::new(proc_root)?;
    let wall = Instant::now();
    let checkpoint_every = (intervals / 14).max(1);
    println!(
        "serve churn: {days} simulated days, {} intervals of {} s, {STARTS_PER_INTERVAL} \
         processes started per interval ({NAMES} names, 1-3 intervals each), {DAEMONS} daemons",
        intervals,
        INTERVAL_NS / 1_000_000_000
    );
    for i in 0..=intervals {
        churn.interval(i);
        if i % checkpoint_every == 0 || i == intervals {
            churn.checkpoint(i, wall);
        }
    }
    let (series, host) = churn.books_j();
    println!(
        "  books: series {series:.1} J, host total {host:.1} J (differ by {:.2e})",
        (series - host).abs() / host.max(1e-9)
    );
    Ok(())
}

/// The simulated machine and the serve session's accounting of it.
struct Churn {
    exporter: Exporter,
    table: ProcessTable,
    tracker: ActivityTracker,
    recorder: Recorder,
    sources: Vec<Box<dyn EnergySource>>,
    books: Books,
    source_errors: BTreeMap<String, u64>,
    /// Cleanup owed after the next snapshot.
    pending: Cleanup,
    sims: HashMap<u32, Sim>,
    /// Per CPU: cumulative time of tasks that are not followed.
    other_ns: [u64; CPUS],
    next_pid: u32,
    started: u64,
}

impl Churn {
    fn new(proc_root: &std::path::Path) -> Result<Self, String> {
        let mut table = ProcessTable::new(true, proc_root);
        table.forget_retired();
        table.track_changes();
        let mut churn = Churn {
            exporter: exporter(&header(), 20),
            table,
            tracker: ActivityTracker::new(),
            // serve's record (a session with bounded memory).
            recorder: Recorder::for_run(true),
            sources: vec![model_source()?],
            books: Books::new(1),
            source_errors: BTreeMap::new(),
            pending: Cleanup::default(),
            sims: HashMap::new(),
            other_ns: [0; CPUS],
            next_pid: 1000,
            started: 0,
        };
        // The first read of the sources sets their starting point, as the session's does.
        churn.read_energy(0, &[], BASE_NS);
        Ok(churn)
    }

    /// Interval `i`: processes start and run, some exit at its end, then the session's
    /// sample.
    fn interval(&mut self, i: u64) {
        let now_ns = BASE_NS + i * INTERVAL_NS;
        let mut events = self.start_processes(i, now_ns);
        self.run_time(i);
        let ending = self.exits(i, now_ns, &mut events);
        self.sample(&events, now_ns);
        // Exited threads are gone from the kernel's map by the next snapshot.
        for pid in &ending {
            self.sims.remove(pid);
        }
    }

    /// The daemons (at the first interval) and this interval's short-lived processes.
    fn start_processes(&mut self, i: u64, now_ns: u64) -> Vec<Lifecycle> {
        let mut events = Vec::new();
        if i == 0 {
            for d in 0..DAEMONS {
                let pid = 100 + d;
                events.push(fork(pid, now_ns));
                events.push(exec(pid, &format!("daemon{}", d % 40), now_ns));
                self.sims
                    .insert(pid, sim(pid, now_ns, d as usize % CPUS, None));
            }
        }
        for k in 0..STARTS_PER_INTERVAL {
            let pid = self.fresh_pid();
            let name = format!("job{}", (self.started * 7919 + k) % NAMES);
            events.push(fork(pid, now_ns));
            events.push(exec(pid, &name, now_ns));
            let life = 1 + (self.started + k) % 3;
            let ends_at = Some(i + life);
            self.sims
                .insert(pid, sim(pid, now_ns, k as usize % CPUS, ends_at));
        }
        self.started += STARTS_PER_INTERVAL;
        events
    }

    /// A pid no simulated process holds, counting up and wrapping as the kernel's do.
    fn fresh_pid(&mut self) -> u32 {
        loop {
            self.next_pid = if self.next_pid >= 4_000_000 {
                1000
            } else {
                self.next_pid + 1
            };
            if !self.sims.contains_key(&self.next_pid) {
                return self.next_pid;
            }
        }
    }

    /// Time runs: every short-lived process 20 ms, a tenth of the daemons 5 ms, others 10 ms
    /// per CPU.
    fn run_time(&mut self, i: u64) {
        for s in self.sims.values_mut() {
            let daemon = s.ends_at.is_none();
            if !daemon || (s.key.tgid + i as u32).is_multiple_of(10) {
                s.total_ns += if daemon { 5_000_000 } else { 20_000_000 };
            }
        }
        for o in &mut self.other_ns {
            *o += 10_000_000;
        }
    }

    /// The processes that end with interval `i`: their exit events; returns their pids.
    fn exits(&self, i: u64, now_ns: u64, events: &mut Vec<Lifecycle>) -> Vec<u32> {
        let ending: Vec<u32> = self
            .sims
            .iter()
            .filter(|(_, s)| s.ends_at == Some(i))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in &ending {
            let start_ns = self.sims[pid].key.start_ns;
            events.push(Lifecycle::Exit {
                pid: *pid,
                tid: *pid,
                process_start_ns: start_ns,
                thread_start_ns: start_ns,
                comm: String::new(),
                exit_code: 0,
                process_exited: true,
                timestamp_ns: now_ns,
            });
        }
        ending
    }

    /// What the kernel's maps hold now.
    fn snapshot(&self, now_ns: u64) -> Snapshot {
        Snapshot {
            taken_ns: now_ns,
            cpus: self
                .other_ns
                .iter()
                .map(|&o| CpuSnapshot {
                    other_ns: o,
                    ..CpuSnapshot::default()
                })
                .collect(),
            threads: self
                .sims
                .values()
                .map(|s| {
                    let mut per_cpu = vec![0; CPUS];
                    per_cpu[s.cpu] = s.total_ns;
                    (s.key, per_cpu)
                })
                .collect(),
            unfinished: Vec::new(),
        }
    }

    /// The session's sample, in its order: events, snapshot, activity, the accounting step,
    /// cleanup, the energy, the exporter's books, the interval store.
    fn sample(&mut self, events: &[Lifecycle], now_ns: u64) {
        let cleanup = self.table.apply(events);
        let snapshot = self.snapshot(now_ns);
        let table = &self.table;
        let activity = self
            .tracker
            .advance(&snapshot, |t| table.is_target_thread(t));
        let interval = activity
            .as_ref()
            .map(|a| accounting::interval_of(&mut self.table, a, BASE_NS, a.start_ns, true));
        let done = std::mem::replace(&mut self.pending, cleanup);
        let (wait, _deleted) =
            accounting::settle_exits(done, &snapshot, &mut self.tracker, &mut self.table);
        self.pending.threads.extend(wait.threads);
        self.pending.processes.extend(wait.processes);
        let Some(mut interval) = interval else { return };
        let busy = interval.busy_ns_per_cpu();
        (interval.energy_j, interval.energy_state) =
            self.read_energy(interval.duration_ns, &busy, interval.wall_start_ns);
        let changed = self.table.take_changed();
        self.exporter.add(&LiveSample {
            interval: &interval,
            processes: self.table.records(),
            changed: &changed,
            losses: Losses::default(),
            read_errors_count: 0,
            functions: None,
        });
        self.recorder.push(interval);
    }

    /// The sources' energy over an interval of `duration_ns` from `wall_start_ns`.
    fn read_energy(
        &mut self,
        duration_ns: u64,
        busy_ns_per_cpu: &[u64],
        wall_start_ns: u64,
    ) -> (Vec<f64>, Vec<crate::attribution::EnergyState>) {
        energy::read_sources(
            &mut self.sources,
            &mut self.books,
            &mut self.recorder,
            &mut self.source_errors,
            &ReadContext {
                duration_ns,
                busy_ns_per_cpu,
                wall_start_ns,
                wall_end_ns: wall_start_ns + duration_ns,
            },
        )
    }

    /// Prints what memory holds after interval `i`.
    fn checkpoint(&self, i: u64, wall: Instant) {
        let (records, free) = self.table.capacity_held();
        let (groups, live) = self.exporter.remembered();
        println!(
            "  day {:>5.2}: {:>9} processes seen, RSS {:>6.1} MB (process table {records} \
             slots ({free} free), {live} live, {groups} groups, {} thread totals, {} \
             intervals stored) [{:.1} s]",
            i as f64 * INTERVAL_NS as f64 / 1e9 / 86_400.0,
            self.started + u64::from(DAEMONS),
            rss_bytes() as f64 / 1e6,
            self.tracker.tracked(),
            self.recorder.intervals().len(),
            wall.elapsed().as_secs_f64()
        );
    }

    /// The exporter's series added up, and its host total (J).
    fn books_j(&self) -> (f64, f64) {
        let scrape = self.exporter.scrape();
        let series: f64 = scrape.energy.iter().map(|(_, _, j)| j).sum();
        (series, scrape.domains[0].host_j)
    }
}

fn fork(pid: u32, now_ns: u64) -> Lifecycle {
    Lifecycle::Fork {
        pid,
        ppid: 1,
        start_ns: now_ns,
        timestamp_ns: now_ns,
    }
}

fn exec(pid: u32, comm: &str, now_ns: u64) -> Lifecycle {
    Lifecycle::Exec {
        pid,
        comm: comm.to_string(),
        filename: format!("/usr/bin/{comm}"),
        uid: 0,
        timestamp_ns: now_ns,
    }
}

fn sim(pid: u32, now_ns: u64, cpu: usize, ends_at: Option<u64>) -> Sim {
    Sim {
        key: ThreadKey {
            tgid: pid,
            tid: pid,
            start_ns: now_ns,
        },
        cpu,
        total_ns: 0,
        ends_at,
    }
}

/// The time to answer a scrape with 1,000 live processes in 100 groups, all exported.
fn scrape_time() {
    let mut exporter = exporter(&header(), 100);
    let records: Vec<crate::session::processes::ProcessRecord> = (0..1000u32)
        .map(|p| crate::session::processes::ProcessRecord {
            pid: 1000 + p,
            ppid: Some(1),
            comm: format!("group{}", p % 100),
            cmdline: Vec::new(),
            uid: Some(0),
            first_seen_ns: 0,
            start_ns: None,
            ended_ns: None,
            ending: None,
            root: false,
            cgroup: None,
            thread_names: Default::default(),
        })
        .collect();
    let all: Vec<ProcId> = (0..1000).collect();
    for i in 0..20u64 {
        let interval = Interval {
            start_ns: i * INTERVAL_NS,
            duration_ns: INTERVAL_NS,
            cpus: vec![crate::attribution::CpuTime::default(); CPUS],
            slices: (0..1000u32)
                .map(|p| Slice {
                    process: p,
                    tid: 1000 + p,
                    cpu: p % CPUS as u32,
                    on_cpu_ns: 1_000_000,
                })
                .collect(),
            energy_j: vec![25.0],
            ..Interval::default()
        };
        exporter.add(&LiveSample {
            interval: &interval,
            processes: &records,
            changed: if i == 0 { &all } else { &[] },
            losses: Losses::default(),
            read_errors_count: 0,
            functions: None,
        });
    }
    let mut times_ms = Vec::new();
    let mut bytes = 0;
    for _ in 0..200 {
        let started = Instant::now();
        let scrape = exporter.scrape();
        let text = metrics::prometheus_text(&metrics::openmetrics(&scrape, OwnCost::now()));
        times_ms.push(started.elapsed().as_secs_f64() * 1e3);
        bytes = text.len();
    }
    times_ms.sort_by(f64::total_cmp);
    println!(
        "scrape with 1,000 processes in 100 groups (100 exported): median {:.3} ms, p99 {:.3} \
         ms, {bytes} bytes (Prometheus text)",
        times_ms[times_ms.len() / 2],
        times_ms[times_ms.len() * 99 / 100]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn churn(proc_root: &tempfile::TempDir) -> Churn {
        Churn::new(proc_root.path()).expect("the model source opens")
    }

    /// Runs intervals `0..count`.
    fn run_for(churn: &mut Churn, count: u64) {
        for i in 0..count {
            churn.interval(i);
        }
    }

    #[test]
    fn the_series_add_up_to_the_models_energy_over_the_simulated_activity() {
        // Each 1 s interval, two CPUs:
        //   cpu0 |jjjj...ooo..| j: 20 ms per short-lived job, d: 5 ms per daemon whose turn
        //   cpu1 |jjjjdd.ooo..| it is, o: 10 ms other; the rest idle
        // The model draws 5 W + 10 W per busy CPU: the host total is 5 W x the time plus
        // 10 W x the busy CPU-seconds, and the series add up to it.
        let root = tempfile::tempdir().expect("temp dir");
        let mut churn = churn(&root);
        run_for(&mut churn, 40);
        let scrape = churn.exporter.scrape();
        let seconds = scrape.intervals as f64 * INTERVAL_NS as f64 / 1e9;
        let idle_s: f64 = scrape
            .cpu
            .iter()
            .filter(|(name, _)| name == super::super::model::IDLE)
            .map(|(_, s)| s)
            .sum();
        let busy_s = CPUS as f64 * seconds - idle_s;
        let (series_j, host_j) = churn.books_j();
        let expected_j = IDLE_W * seconds + 10.0 * busy_s;
        assert_eq!(
            scrape.intervals, 39,
            "the first snapshot only sets the start"
        );
        assert!(busy_s > 0.0 && busy_s < CPUS as f64 * seconds, "{busy_s}");
        assert!(
            (host_j - expected_j).abs() < 1e-6 * expected_j,
            "{host_j} != {expected_j}"
        );
        assert!(
            (series_j - host_j).abs() < 1e-9 * host_j,
            "{series_j} != {host_j}"
        );
    }

    #[test]
    fn exited_processes_leave_the_table_the_tracker_and_the_exporter() {
        // Ten jobs start every interval and live 1 to 3 intervals; 300 daemons stay:
        //   iv   0  1  2  3  4 ...
        //   job  ####                 (one of each length started at every interval)
        // What is remembered is what lives (and waits one interval for its last time), not
        // what was ever seen.
        let root = tempfile::tempdir().expect("temp dir");
        let mut churn = churn(&root);
        run_for(&mut churn, 30);
        let held = |c: &Churn| {
            (
                c.table.capacity_held().0,
                c.tracker.tracked(),
                c.exporter.remembered().1,
            )
        };
        let after_30 = held(&churn);
        for i in 30..90 {
            churn.interval(i);
        }
        let after_90 = held(&churn);
        assert_eq!(churn.started, 900);
        let live_at_most = DAEMONS as usize + 4 * STARTS_PER_INTERVAL as usize;
        assert!(after_90.0 <= live_at_most, "{after_90:?}");
        assert!(after_90.1 <= live_at_most, "{after_90:?}");
        assert!(after_90.2 <= live_at_most, "{after_90:?}");
        assert_eq!(after_30, after_90, "memory held must not grow with churn");
    }

    #[test]
    fn fresh_pids_skip_the_living_and_wrap_round() {
        let root = tempfile::tempdir().expect("temp dir");
        let mut churn = churn(&root);
        churn.next_pid = 3_999_999;
        churn.sims.insert(1001, sim(1001, 0, 0, None));
        let pids: Vec<u32> = (0..3).map(|_| churn.fresh_pid()).collect();
        assert_eq!(pids, vec![4_000_000, 1000, 1002]);
    }
}
