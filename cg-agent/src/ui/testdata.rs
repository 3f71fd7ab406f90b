//! Figures of a made-up run for the view's tests: a machine where `make` builds with two
//! compiler workers under an ssh session.

use std::time::Duration;

use super::users::Users;
use crate::{
    attribution::{CpuTime, Interval, ProcId, Slice},
    host::HostInfo,
    report::{
        FunctionEntry, LostEvents, SourceEntry,
        functions::InProcess,
        live::{LiveDomain, LiveProcess, LiveReport, LiveThread, LiveTotals, Series},
    },
    session::{
        IdleWatts, Mode, RunHeader, SourceInfo,
        live::{LiveEvent, LiveSample, LiveStart},
        processes::ProcessRecord,
    },
    sources::{DomainKind, Provenance},
};

pub fn users() -> Users {
    Users::from_names([(0, "root".to_string()), (1000, "alice".to_string())])
}

struct P {
    pid: u32,
    ppid: u32,
    uid: u32,
    comm: &'static str,
    command: &'static str,
    cpu_pct: f64,
    power_w: f64,
    energy_j: f64,
    alive: bool,
    /// Its cgroup's short name.
    cgroup: &'static str,
}

const PROCESSES: [P; 6] = [
    P {
        pid: 1,
        ppid: 0,
        uid: 0,
        comm: "systemd",
        command: "/sbin/init",
        cpu_pct: 0.4,
        power_w: 0.8,
        energy_j: 15.0,
        alive: true,
        cgroup: "init.scope",
    },
    P {
        pid: 880,
        ppid: 1,
        uid: 0,
        comm: "sshd",
        command: "sshd: alice [priv]",
        cpu_pct: 1.5,
        power_w: 1.0,
        energy_j: 20.0,
        alive: true,
        cgroup: "ssh.service",
    },
    P {
        pid: 1200,
        ppid: 880,
        uid: 1000,
        comm: "make",
        command: "make -j2 all",
        cpu_pct: 95.0,
        power_w: 6.0,
        energy_j: 120.0,
        alive: true,
        cgroup: "session-3.scope",
    },
    P {
        pid: 1201,
        ppid: 1200,
        uid: 1000,
        comm: "cc1",
        command: "cc1 -O2 worker_a.c",
        cpu_pct: 50.0,
        power_w: 3.0,
        energy_j: 60.0,
        alive: true,
        cgroup: "session-3.scope",
    },
    P {
        pid: 1202,
        ppid: 1200,
        uid: 1000,
        comm: "cc1",
        command: "cc1 -O2 worker_b.c",
        cpu_pct: 33.3,
        power_w: 2.0,
        energy_j: 40.0,
        alive: true,
        cgroup: "docker:3f4e1b2c5d6a",
    },
    P {
        pid: 1203,
        ppid: 1200,
        uid: 1000,
        comm: "sh",
        command: "/bin/sh -c ./configure --prefix=/usr/local/very/long/path/that/does/not/fit",
        cpu_pct: 0.0,
        power_w: 0.5,
        energy_j: 5.0,
        alive: false,
        cgroup: "session-3.scope",
    },
];

fn domain(
    name: &str,
    kind: DomainKind,
    provenance: Provenance,
    top: bool,
    power_w: f64,
    energy_j: f64,
    idle_w: f64,
) -> LiveDomain {
    LiveDomain {
        name: name.into(),
        kind,
        provenance,
        top_level: top,
        power_w,
        energy_j,
        idle_baseline_w: idle_w,
        idle_method: if provenance == Provenance::Estimated {
            "model"
        } else {
            "regression"
        },
        targets_power_w: (power_w - idle_w) * 0.9,
        other_power_w: (power_w - idle_w) * 0.1,
        idle_power_w: idle_w,
    }
}

/// The whole machine, the model source, one domain.
pub fn report() -> LiveReport {
    let total_j: f64 = PROCESSES.iter().map(|p| p.energy_j).sum::<f64>() + 60.0;
    let processes = PROCESSES
        .iter()
        .enumerate()
        .map(|(id, p)| LiveProcess {
            id: id as ProcId,
            pid: p.pid,
            ppid: Some(p.ppid),
            uid: Some(p.uid),
            comm: p.comm.into(),
            command: p.command.into(),
            root: false,
            alive: p.alive,
            cpu_pct: p.cpu_pct,
            power_w: p.power_w,
            energy_j: p.energy_j,
            share_pct: 100.0 * p.energy_j / total_j,
            cpu_time_s: p.cpu_pct / 100.0 * 20.0,
            kernel_thread: false,
            domain_power_w: vec![p.power_w],
            threads: Vec::new(),
            cgroup: Some(p.cgroup.into()),
        })
        .collect();
    let history = vec![Series {
        name: "model".into(),
        points: (0..=150)
            .map(|i| {
                let t = i as f64;
                (t, 8.0 + 6.0 * ((t / 20.0).sin() + 1.0))
            })
            .collect(),
    }];
    LiveReport {
        mode: "system",
        target: "the whole machine".into(),
        elapsed_s: 150.0,
        interval_ms: 100,
        window_s: 1.0,
        cpu_count: 2,
        cpu_busy_pct: vec![92.5, 41.0],
        sources: vec![SourceEntry {
            name: "model",
            provenance: Provenance::Estimated,
            description: "built-in power model".into(),
            domains: vec!["model".into()],
        }],
        source_selection: "auto: no measured source found".into(),
        domains: vec![domain(
            "model",
            DomainKind::Model,
            Provenance::Estimated,
            true,
            19.3,
            320.0,
            5.0,
        )],
        totals: LiveTotals {
            power_w: 19.3,
            energy_j: total_j,
            targets_power_w: 13.3,
            other_power_w: 1.0,
            idle_power_w: 5.0,
            targets_energy_j: total_j - 60.0,
            other_energy_j: 10.0,
            idle_energy_j: 50.0,
            idle_baseline_w: 5.0,
            estimated: true,
        },
        processes,
        functions: Vec::new(),
        function_totals: Vec::new(),
        lost_events: LostEvents::new(&Default::default(), 0),
        history,
    }
}

/// The same, with two kernel threads that ran (pid 2's children, no user known).
pub fn report_with_kernel_threads() -> LiveReport {
    let mut r = report();
    for (pid, name, power_w) in [(15, "ksoftirqd/1", 0.3), (98, "kworker/0:1-events", 0.2)] {
        let id = r.processes.len() as ProcId;
        r.processes.push(LiveProcess {
            id,
            pid,
            ppid: Some(2),
            uid: None,
            comm: name.into(),
            command: format!("[{name}]"),
            root: false,
            alive: true,
            cpu_pct: 1.0,
            power_w,
            energy_j: power_w * 20.0,
            share_pct: 100.0 * power_w * 20.0 / r.totals.energy_j,
            cpu_time_s: 0.2,
            kernel_thread: true,
            domain_power_w: vec![power_w],
            threads: Vec::new(),
            cgroup: Some("/".into()),
        });
    }
    r
}

/// The same, with the threads of pid 1200 (`make -j2 all`): a busy worker, the main thread,
/// and 12 more folded into one entry.
pub fn report_with_threads() -> LiveReport {
    let mut r = report();
    let total_j = r.totals.energy_j;
    let p = r
        .processes
        .iter_mut()
        .find(|p| p.pid == 1200)
        .expect("pid 1200");
    let thread = |tid: Option<u32>, name: &str, folded_count, share: f64| LiveThread {
        tid,
        name: name.into(),
        folded_count,
        cpu_pct: p.cpu_pct * share,
        power_w: p.power_w * share,
        energy_j: p.energy_j * share,
        share_pct: 100.0 * p.energy_j * share / total_j,
        cpu_time_s: p.cpu_time_s * share,
    };
    p.threads = vec![
        thread(Some(1203), "worker-0", None, 0.9),
        thread(Some(1200), "make", None, 0.06),
        thread(None, "", Some(12), 0.04),
    ];
    r
}

/// The same, with function figures (uprobes) for make and one of its workers.
pub fn report_with_functions() -> LiveReport {
    let mut r = report();
    r.functions = vec![
        function(1201, "checksum", 10.0, 1_200),
        function(1201, "compress_block", 30.0, 48),
        function(1200, "main", 1.0, 1),
        // A process that exited and is no longer listed: only the totals show it.
        function(1299, "checksum", 2.0, 300),
    ];
    r.function_totals = crate::report::functions::function_totals(
        r.functions.iter().map(|f| (f.symbol.clone(), f)),
    );
    r
}

fn function(pid: u32, symbol: &str, energy_j: f64, calls: u64) -> FunctionEntry {
    FunctionEntry {
        symbol: symbol.into(),
        module: "cc1".into(),
        who: InProcess { pid },
        calls: Some(calls),
        samples: None,
        cpu_time_s: energy_j / 5.0,
        energy_j,
        self_cpu_time_s: energy_j / 6.0,
        self_energy_j: energy_j * 0.8,
        source: "uprobe",
        line: None,
        partial: Some(false),
        entry_only: None,
        provenance: Provenance::Estimated,
    }
}

/// The same machine measured by RAPL (package, with its cores inside, and DRAM) and with an
/// NVIDIA GPU that one compiler worker uses, so each process has a figure per top-level
/// domain; some events were lost.
pub fn measured_report() -> LiveReport {
    let mut r = report();
    r.sources = vec![
        SourceEntry {
            name: "powercap",
            provenance: Provenance::Measured,
            description: "RAPL through powercap".into(),
            domains: vec!["package-0".into(), "core-0".into(), "dram-0".into()],
        },
        SourceEntry {
            name: "nvml",
            provenance: Provenance::Measured,
            description: "NVIDIA GPUs through NVML".into(),
            domains: vec!["gpu0".into()],
        },
    ];
    r.domains = vec![
        domain(
            "package-0",
            DomainKind::Package,
            Provenance::Measured,
            true,
            16.0,
            260.0,
            4.0,
        ),
        domain(
            "core-0",
            DomainKind::Core,
            Provenance::Measured,
            false,
            11.0,
            180.0,
            1.0,
        ),
        domain(
            "dram-0",
            DomainKind::Dram,
            Provenance::Measured,
            true,
            3.3,
            60.0,
            1.0,
        ),
        domain(
            "gpu0",
            DomainKind::Gpu,
            Provenance::Measured,
            true,
            25.0,
            400.0,
            15.0,
        ),
    ];
    r.totals.estimated = false;
    r.totals.power_w += 25.0;
    r.totals.energy_j += 400.0;
    r.totals.idle_power_w += 15.0;
    for p in &mut r.processes {
        let gpu_w = if p.pid == 1201 { 8.0 } else { 0.0 };
        p.domain_power_w = vec![p.power_w * 0.85, p.power_w * 0.6, p.power_w * 0.15, gpu_w];
        p.power_w += gpu_w;
        p.energy_j += gpu_w * 20.0;
        p.share_pct = 100.0 * p.energy_j / r.totals.energy_j;
    }
    r.history = ["package-0", "dram-0", "gpu0"]
        .iter()
        .enumerate()
        .map(|(k, name)| Series {
            name: (*name).into(),
            points: (0..=150)
                .map(|i| {
                    (
                        i as f64,
                        match k {
                            0 => 10.0 + (i % 30) as f64 / 3.0,
                            1 => 3.0,
                            _ => 15.0 + 10.0 * f64::from(u8::from(i > 60 && i < 120)),
                        },
                    )
                })
                .collect(),
        })
        .collect();
    r.lost_events = LostEvents::new(
        &crate::probes::Losses {
            events_dropped: 3,
            ..Default::default()
        },
        1,
    );
    r
}

/// A wrapped `make -j2` whose figures come from the real live model, fed 3 s of made-up
/// intervals (see [`wrapped_run`]).
pub fn wrapped_run_through_the_live_model() -> LiveReport {
    use crate::report::live::LiveModel;

    let mut model = None;
    let mut report = None;
    wrapped_run(30, |event| match event {
        LiveEvent::Started(start) => model = Some(LiveModel::new(&start)),
        LiveEvent::Sample(sample) => {
            if let Some(model) = model.as_mut() {
                model.add(&sample);
                if model.window_ns() >= 1_000_000_000 {
                    report = Some(model.snapshot());
                }
            }
        }
    });
    report.expect("three snapshots")
}

/// The live feed of a session wrapping `make -j2` for `intervals` intervals of 100 ms: make
/// itself and two compiler workers on two CPUs, under a 5 W + 6.5 W per CPU power model.
pub fn wrapped_run(intervals: u64, mut observer: impl FnMut(LiveEvent<'_>)) {
    observer(LiveEvent::Started(LiveStart {
        header: &make_header(),
        run_start_ns: 0,
        calibration: &[],
    }));
    let processes = make_processes();
    for i in 0..intervals {
        observer(LiveEvent::Sample(LiveSample {
            interval: &make_interval(i),
            processes: &processes,
            changed: if i == 0 { &[0, 1, 2] } else { &[] },
            losses: Default::default(),
            read_errors_count: 0,
            functions: None,
        }));
    }
}

const MS: u64 = 1_000_000;

/// The run's header: `make -j2` wrapped on a two-CPU host, measured by the power model.
fn make_header() -> RunHeader {
    RunHeader {
        mode: Mode::Wrap {
            command: vec!["make".into(), "-j2".into()],
        },
        host: HostInfo::two_cpu_test_host(),
        sources: vec![SourceInfo {
            name: "model",
            provenance: Provenance::Estimated,
            description: "built-in power model".into(),
            domains: vec!["model".into()],
        }],
        selection_reason: "requested with --source model".into(),
        baseline: crate::accounting::BaselineInputs {
            domains: vec![crate::sources::model::model_domain()],
            idle_watts: IdleWatts::Estimate,
            known_idle_w: vec![Some(5.0)],
            rest_power: Vec::new(),
            busy_slope_w: vec![],
            interval: Duration::from_millis(100),
            prior_slope_w_per_cpu: 6.5,
        },
    }
}

/// make (the root) and its two compiler workers.
fn make_processes() -> [ProcessRecord; 3] {
    let record = |pid: u32, ppid: u32, argv: &[&str]| ProcessRecord {
        pid,
        ppid: Some(ppid),
        comm: argv[0].into(),
        cmdline: argv.iter().map(|a| a.to_string()).collect(),
        uid: Some(1000),
        first_seen_ns: 0,
        start_ns: None,
        ended_ns: None,
        ending: None,
        root: pid == 500,
        thread_names: Default::default(),
        cgroup: None,
    };
    [
        record(500, 400, &["make", "-j2"]),
        record(501, 500, &["cc1", "-O2", "a.c"]),
        record(502, 500, &["cc1", "-O2", "b.c"]),
    ]
}

/// Interval `i` (100 ms each), the same every time:
/// ```text
/// CPU 0 |cc1 a.c 100 ms                          |
/// CPU 1 |make 10|cc1 b.c 60 ms|other 5|idle 25   |
/// ```
fn make_interval(i: u64) -> Interval {
    let busy_s = (100 + 60 + 10 + 5) as f64 / 1000.0;
    let slice = |process, cpu, on_cpu_ns| Slice {
        process,
        tid: process,
        cpu,
        on_cpu_ns,
    };
    Interval {
        start_ns: i * 100 * MS,
        duration_ns: 100 * MS,
        cpus: vec![
            CpuTime::default(),
            CpuTime {
                idle_ns: 25 * MS,
                other_ns: 5 * MS,
            },
        ],
        slices: vec![
            slice(0, 1, 10 * MS),
            slice(1, 0, 100 * MS),
            slice(2, 1, 60 * MS),
        ],
        energy_j: vec![0.5 + 6.5 * busy_s],
        ..Interval::default()
    }
}
