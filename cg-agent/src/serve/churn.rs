//! The exporter's week-of-churn benchmark (`cargo xtask bench --serve`, through the hidden
//! `cg-trace serve --bench-churn DAYS`): simulated kernel data (lifecycle events, snapshots of
//! cumulative per-thread CPU time, a linear power model) go through the accounting code a
//! serve session runs, in the order it runs it: the process table (forgetting retired
//! processes), the activity tracker, the interval store (bounded budget), the exporter's
//! books, and the cleanup of exited threads and processes. No eBPF: the Sampler's glue is
//! replayed here with the same calls. Prints the resident memory at checkpoints (it must stay
//! flat), then the time a scrape of 1,000 processes in 100 groups takes.

use std::{collections::HashMap, time::Instant};

use cg_common::ThreadKey;

use crate::{
    attribution::{Interval, ProcId, Slice},
    host::HostInfo,
    probes::{
        Lifecycle, Losses,
        activity::{ActivityTracker, CpuSnapshot, Snapshot},
    },
    session::{
        IdleWatts, Mode, RunHeader, SourceInfo,
        live::{LiveSample, LiveStart},
        processes::ProcessTable,
        recorder::{BOUNDED_SLICE_BUDGET, Recorder},
    },
    sources::Provenance,
};

use super::{
    metrics::{self, OwnCost},
    model::{Exporter, ServeOptions},
};

const CPUS: usize = 2;
const INTERVAL_NS: u64 = 1_000_000_000;
/// Processes started per interval; each lives 1 to 3 intervals.
const STARTS_PER_INTERVAL: u64 = 10;
/// Long-lived processes (daemons), of which a tenth run in each interval.
const DAEMONS: u32 = 300;
/// Command names of the short-lived processes.
const NAMES: u64 = 500;

/// Resident memory now, bytes (`/proc/self/statm`).
fn rss_bytes() -> u64 {
    OwnCost::now().rss_bytes
}

fn header() -> RunHeader {
    RunHeader {
        mode: Mode::System,
        host: HostInfo::read(),
        interval: std::time::Duration::from_nanos(INTERVAL_NS),
        domains: vec![crate::sources::model::model_domain()],
        sources: vec![SourceInfo {
            name: "model",
            provenance: Provenance::Estimated,
            description: "benchmark".into(),
            domains: vec!["model".into()],
        }],
        selection_reason: "benchmark".into(),
        known_idle_w: vec![Some(5.0)],
        busy_slope_w: vec![],
        rest_power: Vec::new(),
        idle_watts: IdleWatts::Estimate,
        prior_slope_w_per_cpu: 10.0,
    }
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
    let header = header();
    let mut exporter = Exporter::new(
        &LiveStart {
            header: &header,
            run_start_ns: 0,
            calibration: &[],
        },
        ServeOptions {
            top_groups: 20,
            grace_ns: 300_000_000_000,
            group_by: super::model::GroupBy::Comm,
        },
    );
    let mut table = ProcessTable::new(true, proc_root);
    table.forget_retired();
    table.track_changes();
    let mut tracker = ActivityTracker::new();
    let mut recorder = Recorder::new(BOUNDED_SLICE_BUDGET);
    let mut sims: HashMap<u32, Sim> = HashMap::new();
    let mut other_ns = [0u64; CPUS];
    let mut next_pid: u32 = 1000;
    let mut started: u64 = 0;
    let mut pending_threads: Vec<ThreadKey> = Vec::new();
    let mut pending_processes: Vec<ProcId> = Vec::new();
    let base_ns: u64 = 1_000_000_000;
    let wall = Instant::now();
    let checkpoint_every = (intervals / 14).max(1);
    println!(
        "serve churn: {days} simulated days, {} intervals of {} s, {STARTS_PER_INTERVAL} \
         processes started per interval ({NAMES} names, 1-3 intervals each), {DAEMONS} daemons",
        intervals,
        INTERVAL_NS / 1_000_000_000
    );
    let mut fresh_pid = |sims: &HashMap<u32, Sim>| loop {
        next_pid = if next_pid >= 4_000_000 {
            1000
        } else {
            next_pid + 1
        };
        if !sims.contains_key(&next_pid) {
            return next_pid;
        }
    };
    for i in 0..=intervals {
        let now_ns = base_ns + i * INTERVAL_NS;
        let mut events = Vec::new();
        if i == 0 {
            for d in 0..DAEMONS {
                let pid = 100 + d;
                events.push(fork(pid, now_ns));
                events.push(exec(pid, &format!("daemon{}", d % 40), now_ns));
                sims.insert(pid, sim(pid, now_ns, d as usize % CPUS, None));
            }
        }
        for k in 0..STARTS_PER_INTERVAL {
            let pid = fresh_pid(&sims);
            let name = format!("job{}", (started * 7919 + k) % NAMES);
            events.push(fork(pid, now_ns));
            events.push(exec(pid, &name, now_ns));
            let life = 1 + (started + k) % 3;
            sims.insert(pid, sim(pid, now_ns, k as usize % CPUS, Some(i + life)));
        }
        started += STARTS_PER_INTERVAL;
        // Time runs: every short-lived process 20 ms, a tenth of the daemons 5 ms, others
        // 10 ms per CPU.
        for s in sims.values_mut() {
            let daemon = s.ends_at.is_none();
            if !daemon || (s.key.tgid + i as u32).is_multiple_of(10) {
                s.total_ns += if daemon { 5_000_000 } else { 20_000_000 };
            }
        }
        for o in &mut other_ns {
            *o += 10_000_000;
        }
        // Exits at the end of the interval.
        let ending: Vec<u32> = sims
            .iter()
            .filter(|(_, s)| s.ends_at == Some(i))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in &ending {
            let s = &sims[pid];
            events.push(Lifecycle::Exit {
                pid: *pid,
                tid: *pid,
                process_start_ns: s.key.start_ns,
                thread_start_ns: s.key.start_ns,
                comm: String::new(),
                exit_code: 0,
                process_exited: true,
                timestamp_ns: now_ns,
            });
        }
        // The session's sample: events, snapshot, activity, interval, cleanup.
        let cleanup = table.apply(&events);
        let snapshot = Snapshot {
            taken_ns: now_ns,
            cpus: other_ns
                .iter()
                .map(|&o| CpuSnapshot {
                    other_ns: o,
                    ..CpuSnapshot::default()
                })
                .collect(),
            threads: sims
                .values()
                .map(|s| {
                    let mut per_cpu = vec![0; CPUS];
                    per_cpu[s.cpu] = s.total_ns;
                    (s.key, per_cpu)
                })
                .collect(),
            unfinished: Vec::new(),
        };
        let activity = tracker.advance(&snapshot, |t| table.is_target_thread(t));
        // Exited threads leave the kernel's map one interval after their exit was seen.
        for pid in &ending {
            sims.remove(pid);
        }
        let delete: Vec<ThreadKey> = std::mem::take(&mut pending_threads)
            .into_iter()
            .filter(|t| !tracker.owes(t.tgid, Some(t.tid)))
            .collect();
        tracker.forget_all(&delete);
        pending_threads = cleanup.threads;
        for id in std::mem::replace(&mut pending_processes, cleanup.processes) {
            table.retire(id);
        }
        let Some(activity) = activity else { continue };
        // As the session's interval_of: per (process, thread, CPU).
        let mut slices: HashMap<(ProcId, u32, u32), u64> = HashMap::new();
        for s in &activity.threads {
            let process = table.id_of_thread(s.thread, activity.start_ns);
            *slices.entry((process, s.thread.tid, s.cpu)).or_default() += s.on_cpu_ns;
        }
        let slices = crate::attribution::sorted_slices(slices);
        let mut interval = Interval {
            start_ns: activity.start_ns - base_ns,
            duration_ns: activity.duration_ns,
            cpus: activity.cpus.clone(),
            slices,
            ..Interval::default()
        };
        let busy_s: f64 = interval.busy_ns_per_cpu().iter().sum::<u64>() as f64 / 1e9;
        interval.energy_j = vec![5.0 * activity.duration_ns as f64 / 1e9 + 10.0 * busy_s];
        let changed = table.take_changed();
        exporter.add(&LiveSample {
            interval: &interval,
            processes: table.records(),
            changed: &changed,
            losses: Losses::default(),
            read_errors_count: 0,
            functions: None,
        });
        recorder.push(interval);
        if i % checkpoint_every == 0 || i == intervals {
            let (records, free) = table.capacity_held();
            let (groups, live) = exporter.remembered();
            println!(
                "  day {:>5.2}: {:>9} processes seen, RSS {:>6.1} MB (process table {records} \
                 slots ({free} free), {live} live, {groups} groups, {} thread totals, {} \
                 intervals stored) [{:.1} s]",
                i as f64 * INTERVAL_NS as f64 / 1e9 / 86_400.0,
                started + u64::from(DAEMONS),
                rss_bytes() as f64 / 1e6,
                tracker.tracked(),
                recorder.intervals().len(),
                wall.elapsed().as_secs_f64()
            );
        }
    }
    let scrape = exporter.scrape();
    let series: f64 = scrape.energy.iter().map(|(_, _, j)| j).sum();
    let host = scrape.domains[0].host_j;
    println!(
        "  books: series {series:.1} J, host total {host:.1} J (differ by {:.2e})",
        (series - host).abs() / host.max(1e-9)
    );
    Ok(())
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
    let header = header();
    let mut exporter = Exporter::new(
        &LiveStart {
            header: &header,
            run_start_ns: 0,
            calibration: &[],
        },
        ServeOptions {
            top_groups: 100,
            grace_ns: 300_000_000_000,
            group_by: super::model::GroupBy::Comm,
        },
    );
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
