//! `cargo xtask bench`: what cg-trace costs the machine it watches. Every figure is a ratio
//! measured in one run, with and without `cg-trace --all`, alternating A/B so that drift of
//! a shared machine hits both sides; nothing here asserts, it prints.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root, rounds::median, status};

struct Config {
    rounds: usize,
    workload_s: f64,
    idle_s: f64,
}

pub fn run(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let (view_rounds, view_s) = if quick { (2, 10.0) } else { (3, 20.0) };
    if args.iter().any(|a| a == "--diff") {
        return crate::bench_diff::run();
    }
    if args.iter().any(|a| a == "--report") {
        return crate::bench_report::run();
    }
    if args.iter().any(|a| a == "--repeat") {
        return crate::bench_repeat::run();
    }
    if args.iter().any(|a| a == "--sources") {
        return crate::bench_sources::run(quick);
    }
    if args.iter().any(|a| a == "--proc") {
        return proc_readers(quick);
    }
    if args.iter().any(|a| a == "--tui") {
        status(cargo().args(["build", "--release"]))?;
        return crate::bench_view::run(view_rounds, view_s, &tempdir()?);
    }
    if args.iter().any(|a| a == "--functions") {
        return crate::bench_functions::run(args);
    }
    if args.iter().any(|a| a == "--serve") {
        return crate::bench_serve::run(quick);
    }
    if args.iter().any(|a| a == "--memory") {
        return crate::bench_memory::run();
    }
    if args.iter().any(|a| a == "--signals") {
        return crate::bench_signals::run();
    }
    if args.iter().any(|a| a == "--overhead") {
        return overhead(quick);
    }
    if args.iter().any(|a| a == "--iterator") {
        status(cargo().args(["build", "--release"]))?;
        return iterator_costs(&Config::of(quick), &tempdir()?);
    }
    overhead(quick)?;
    println!();
    crate::bench_sources::run(quick)?;
    println!();
    crate::bench_view::run(view_rounds, view_s, &tempdir()?)?;
    println!();
    crate::bench_functions::run(args)
}

/// The cost of cg-trace to the workloads it watches, and its own cost.
/// `--proc`: cg-trace's hand-written `/proc` readers against the procfs crate
/// (`cg-agent/examples/proc_bench.rs`, on this machine's processes).
fn proc_readers(quick: bool) -> Result<()> {
    status(cargo().args([
        "build",
        "--release",
        "-p",
        "cg-agent",
        "--example",
        "proc_bench",
    ]))?;
    let rounds = if quick { "11" } else { "31" };
    status(
        Command::new(root().join("target/release/examples/proc_bench")).args(["--rounds", rounds]),
    )
}

impl Config {
    fn of(quick: bool) -> Config {
        if quick {
            Config {
                rounds: 2,
                workload_s: 2.0,
                idle_s: 10.0,
            }
        } else {
            Config {
                rounds: 5,
                workload_s: 3.0,
                idle_s: 30.0,
            }
        }
    }
}

fn overhead(quick: bool) -> Result<()> {
    let config = Config::of(quick);
    status(cargo().args(["build", "--release"]))?;
    let bin = |name: &str| root().join("target/release").join(name);
    let out = tempdir()?;

    println!(
        "cg-trace overhead benchmark ({} rounds A/B, {} s workloads)",
        config.rounds, config.workload_s
    );
    println!("machine: {} CPUs, kernel {}", num_cpus(), kernel());
    println!();

    // 1. Context-switch-heavy: pipe ping-pong pinned to one CPU.
    let pingpong = bin("cg-pingpong");
    let figures = ab(&config, &out, "pingpong", || {
        measure(
            Command::new(&pingpong).arg(config.workload_s.to_string()),
            "round_trips_per_s",
        )
    })?;
    let lost = |counter: &str| -> f64 {
        figures
            .reports
            .iter()
            .map(|r| {
                r.pointer(&format!("/totals/lost_events/{counter}"))
                    .and_then(Value::as_f64)
                    .unwrap_or(f64::NAN)
            })
            .sum()
    };
    println!(
        "ping-pong pinned to CPU 0 ({:.0} context switches/s without cg-trace)",
        2.0 * figures.base
    );
    figures.print("round trips/s", 5.0);
    println!(
        "  lost while tracing (both accountings): {} events dropped, {} thread-map full, {} \
         targets-map full   (target 0)",
        lost("events_dropped_count"),
        lost("on_cpu_map_full_count"),
        lost("targets_map_full_count")
    );
    println!(
        "  switches the kernel never reported (sched_switch not emitted; see docs/attribution.md): {}",
        lost("unmatched_switches_count")
    );
    println!();

    // 1a. What the kernel itself counts for cg-trace's programs at this rate.
    match program_cost(&pingpong, config.workload_s) {
        Ok(Some((runs, ns))) => println!(
            "  sched_switch program, --accounting switch (kernel BPF statistics): {ns:.0} ns \
             per switch over {runs} switches (iterator accounting runs nothing per switch)"
        ),
        Ok(None) => println!("  sched_switch program: the kernel gave no BPF statistics"),
        Err(err) => println!("  sched_switch program: not measured ({err:#})"),
    }
    println!();

    // 1b. The same with the kernel's reference tool, when installed.
    let perf_ok = Command::new("perf")
        .args(["bench", "sched", "pipe", "-l", "1000"])
        .output()
        .is_ok_and(|o| o.status.success());
    if perf_ok {
        let loops = (150_000.0 * config.workload_s).to_string();
        let figures = ab(&config, &out, "perf-pipe", || perf_pipe_ops(&loops))?;
        println!("perf bench sched pipe, taskset -c 0");
        figures.print("ops/s", 5.0);
    } else {
        println!("perf bench sched pipe: skipped (perf is not installed)");
    }
    println!();

    // 2. CPU-bound.
    let spin = bin("cg-spin");
    let figures = ab(&config, &out, "spin", || {
        measure(
            Command::new(&spin).arg(config.workload_s.to_string()),
            "units_per_s",
        )
    })?;
    println!("CPU-bound loop");
    figures.print("units/s", 1.0);
    println!();

    iterator_costs(&config, &out)
}

/// The costs of iterator accounting that grow with what is alive (`cargo xtask bench
/// --iterator`: only these): the agent on an idle machine, and one read with 10,000 threads,
/// with each way of walking the threads (the open-coded walk, and the `iter/task` program of
/// kernels before 6.7), and the agent on the same idle machine in switch accounting, taking
/// turns for two rounds so that all see the same machine.
fn iterator_costs(config: &Config, out: &Path) -> Result<()> {
    let cg_idle = root().join("target/release/cg-idle");
    for round in 1..=2 {
        for walker in [Walker::TaskWalk, Walker::IterTask] {
            println!(
                "== round {round}, {} (load average {})",
                walker.name(),
                load_average()
            );
            // 3. The agent's own cost on an idle machine at the default interval.
            idle_cost(config, &out.join("idle.json"), &cg_idle, Some(walker))?;
            println!();
            // 4. One read of the task walk with 10,000 threads alive; for the open-coded walk
            // also with threads coming and going between reads (its amends).
            let churns: &[bool] = match walker {
                Walker::TaskWalk => &[false, true],
                Walker::IterTask => &[false],
            };
            for &churn in churns {
                match iterator_read_cost(10_000, config.idle_s / 3.0, walker, churn) {
                    Ok(cost) => cost.print(),
                    Err(err) => {
                        println!("iterator read with 10,000 threads: not measured ({err:#})")
                    }
                }
                println!();
            }
        }
        println!(
            "== round {round}, switch accounting (load average {})",
            load_average()
        );
        idle_cost(config, &out.join("idle.json"), &cg_idle, None)?;
        println!();
    }
    Ok(())
}

/// How iterator accounting walks the threads in a benchmark run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walker {
    /// The open-coded task walk (kernel 6.7+), cg-trace's choice where the kernel has it.
    TaskWalk,
    /// The `iter/task` program (`CG_TRACE_ITER_TASK=1`).
    IterTask,
}

impl Walker {
    fn name(self) -> &'static str {
        match self {
            Walker::TaskWalk => "task_walk",
            Walker::IterTask => "iter_task",
        }
    }

    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Walker::TaskWalk => &[],
            Walker::IterTask => &[("CG_TRACE_ITER_TASK", "1")],
        }
    }
}

/// The first three fields of /proc/loadavg.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Idle processes alive while the idle figure is taken (each wakes once a second): about
/// what a desktop or a small server keeps.
const IDLE_PROCESSES: usize = 1_000;

/// `cg-trace --all` for `config.idle_s` at the default interval, in iterator accounting with
/// `walker` (switch accounting: `None`), with [`IDLE_PROCESSES`] idle processes (`cg-idle`)
/// alive: its own CPU, steady (from /proc, after loading) and over the whole run (its
/// report), and its memory.
fn idle_cost(
    config: &Config,
    report_path: &Path,
    cg_idle: &Path,
    walker: Option<Walker>,
) -> Result<()> {
    let idle =
        crate::bench_view::IdleProcesses::start(cg_idle, IDLE_PROCESSES, config.idle_s + 10.0)?;
    // Let every one of them wake at least once.
    sleep(Duration::from_millis(1500));
    let alive = process_count();
    let mut tracer = start_tracer_in(
        report_path,
        Some(config.idle_s),
        if walker.is_some() {
            Variant::Iterator
        } else {
            Variant::Switch
        },
        walker.map_or(&[], Walker::env),
    )?;
    let watch = CpuWatch::start(tracer.id())?;
    sleep(Duration::from_secs_f64(config.idle_s / 2.0));
    let rss_mid_kb = vm_kb(tracer.id(), "VmRSS").unwrap_or(0);
    sleep(Duration::from_secs_f64(
        (config.idle_s / 2.0 - 2.5).max(0.5),
    ));
    let steady = watch.finish()?;
    let status = tracer.wait()?;
    let idle_count = idle.count;
    drop(idle);
    if !status.success() {
        bail!("cg-trace --all failed on the idle machine ({status})");
    }
    let report = read_report(report_path)?;
    let cpu_s = figure(&report, "/meta/profiler/cpu_time_s");
    let duration_s = figure(&report, "/meta/duration_s");
    let peak = figure(&report, "/meta/profiler/max_rss_bytes");
    let seen = report["processes"].as_array().map_or(0, Vec::len);
    let accounting = match report["meta"]["accounting"]["walker"].as_str() {
        Some(walker) => format!("iterator accounting, {walker}"),
        None => format!(
            "{} accounting",
            report["meta"]["accounting"]["method"]
                .as_str()
                .unwrap_or("?")
        ),
    };
    println!(
        "cg-trace --all ({accounting}), default 100 ms interval, {duration_s:.1} s, {alive} \
         processes alive ({idle_count} of them cg-idle, each waking once a second)"
    );
    println!(
        "  own CPU, steady ({:.1} s after loading, from /proc): {:.3} % of one core (user \
         {:.3} %, system {:.3} %)   (target <= 0.5 %)",
        steady.wall_s,
        steady.core_pct(),
        steady.user_pct(),
        steady.system_pct()
    );
    println!(
        "  own CPU, whole run (report): {:.3} s = {:.3} % of one core   (includes loading the \
         probes)",
        cpu_s,
        100.0 * cpu_s / duration_s
    );
    println!(
        "  RSS: {:.1} MB steady (VmRSS mid-run), {:.1} MB peak (while loading)   (target <= 30 MB)",
        rss_mid_kb as f64 / 1024.0,
        peak / 1048576.0
    );
    println!("  processes seen: {seen}");
    Ok(())
}

/// Processes alive now (the numeric entries of /proc).
fn process_count() -> usize {
    fs::read_dir("/proc").map_or(0, |dir| {
        dir.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .count()
    })
}

/// A process's own CPU from a starting moment (measured, from /proc): the sum of its
/// threads' `schedstat` run times (ns), and its user and system split (`stat`, clock ticks).
struct CpuWatch {
    pid: u32,
    started: Instant,
    first: ProcCpu,
}

/// What /proc says of a process's CPU at one moment.
#[derive(Clone, Copy)]
struct ProcCpu {
    run_ns: u64,
    user_ticks: u64,
    system_ticks: u64,
}

/// [`CpuWatch::finish`]: CPU over `wall_s` seconds of wall time.
struct CpuSpent {
    wall_s: f64,
    run_s: f64,
    user_s: f64,
    system_s: f64,
}

impl CpuWatch {
    fn start(pid: u32) -> Result<Self> {
        Ok(CpuWatch {
            pid,
            started: Instant::now(),
            first: proc_cpu(pid)?,
        })
    }

    fn finish(self) -> Result<CpuSpent> {
        let last = proc_cpu(self.pid)?;
        // SAFETY: sysconf has no preconditions.
        let hz = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64;
        Ok(CpuSpent {
            wall_s: self.started.elapsed().as_secs_f64(),
            run_s: last.run_ns.saturating_sub(self.first.run_ns) as f64 / 1e9,
            user_s: last.user_ticks.saturating_sub(self.first.user_ticks) as f64 / hz,
            system_s: last.system_ticks.saturating_sub(self.first.system_ticks) as f64 / hz,
        })
    }
}

impl CpuSpent {
    fn core_pct(&self) -> f64 {
        100.0 * self.run_s / self.wall_s
    }

    fn user_pct(&self) -> f64 {
        100.0 * self.user_s / self.wall_s
    }

    fn system_pct(&self) -> f64 {
        100.0 * self.system_s / self.wall_s
    }

    /// Microseconds of CPU per 100 ms of wall time (one interval at the default).
    fn us_per_interval(&self, seconds: f64) -> f64 {
        seconds / (self.wall_s / 0.1) * 1e6
    }
}

fn proc_cpu(pid: u32) -> Result<ProcCpu> {
    let mut run_ns = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let text = fs::read_to_string(task?.path().join("schedstat")).unwrap_or_default();
        run_ns += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // proc(5): utime and stime are fields 14 and 15, the 12th and 13th after the name.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("/proc/{pid}/stat has no field {}", i + 3))
    };
    Ok(ProcCpu {
        run_ns,
        user_ticks: ticks(11)?,
        system_ticks: ticks(12)?,
    })
}

/// What one iterator read cost with many threads alive (`cg-trace --all`, iterator accounting).
struct IteratorCost {
    threads: usize,
    /// Whether a thread was created and one reaped every [`CHURN_EVERY`] meanwhile.
    churn: bool,
    /// How the open-coded walk's reads were served ("" for iter/task).
    served_as: String,
    reads: u64,
    /// Kernel BPF statistics: the walking programs' time per read (all tasks).
    bpf_us_per_read: f64,
    /// The open-coded walk's programs, each on its own ("" for iter/task).
    per_program: String,
    /// The walker the report names.
    walker: String,
    /// cg-trace's own CPU time (user + system: the read syscall, parsing, accounting, the
    /// energy source) per interval, over the whole run (loading included).
    agent_us_per_interval: f64,
    /// The same, steady (after loading), with its user and system split.
    steady: CpuSpent,
}

impl IteratorCost {
    fn print(&self) {
        let churn = if self.churn {
            format!(
                ", a thread created and one reaped every {} ms",
                CHURN_EVERY.as_millis()
            )
        } else {
            String::new()
        };
        println!(
            "iterator accounting ({}), {} threads alive{churn}, cg-trace --all, 100 ms interval, \
             {} reads{}",
            self.walker, self.threads, self.reads, self.served_as
        );
        println!(
            "  walking program (kernel BPF statistics): {:.0} µs per read",
            self.bpf_us_per_read
        );
        if !self.per_program.is_empty() {
            println!("    {}", self.per_program);
        }
        let steady = &self.steady;
        println!(
            "  cg-trace's CPU per 100 ms, steady ({:.1} s after loading, from /proc): {:.0} µs; \
             system {:.0} µs (the read syscall with the program in it, and every other \
             syscall), user {:.0} µs (parsing, books, accounting)   (target: one read <= 1 ms)",
            steady.wall_s,
            steady.us_per_interval(steady.run_s),
            steady.us_per_interval(steady.system_s),
            steady.us_per_interval(steady.user_s)
        );
        println!(
            "  cg-trace's whole CPU time per interval, loading included (report): {:.0} µs",
            self.agent_us_per_interval
        );
    }
}

/// How often the churning variant of the read's benchmark creates a thread and reaps one:
/// five times between two reads.
const CHURN_EVERY: Duration = Duration::from_millis(20);

/// Starts `count` sleeping threads in this process, runs `cg-trace --all --accounting
/// iterator` for `seconds` with the kernel's BPF statistics on (with `churn`, a thread
/// created and one reaped every [`CHURN_EVERY`] meanwhile), and reads the walking programs'
/// statistics (the open-coded walk's programs, or the `iter/task` program, which runs once
/// per task per read) from the tracer's descriptors and the tracer's own CPU time from its
/// report.
fn iterator_read_cost(
    count: usize,
    seconds: f64,
    walker: Walker,
    churn: bool,
) -> Result<IteratorCost> {
    const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let mut sleepers = Vec::with_capacity(count);
    for _ in 0..count {
        let stop = std::sync::Arc::clone(&stop_rx);
        sleepers.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    // Blocks until the channel closes (the sender dropped).
                    let _ = stop.lock().map(|rx| rx.recv());
                })
                .context("starting a sleeping thread")?,
        );
    }
    let tasks = fs::read_dir("/proc")?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| fs::read_dir(e.path().join("task")).ok())
        .map(|t| t.count())
        .sum::<usize>();
    let churning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(churn));
    let churner = {
        let churning = std::sync::Arc::clone(&churning);
        std::thread::spawn(move || {
            while churning.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::thread::spawn(|| ()).join();
                sleep(CHURN_EVERY);
            }
        })
    };
    let before = fs::read_to_string(SYSCTL).context("reading kernel.bpf_stats_enabled")?;
    fs::write(SYSCTL, "1").context("enabling kernel.bpf_stats_enabled")?;
    let out = tempdir()?;
    let report_path = out.join("iterator.json");
    let result = (|| -> Result<(WalkPrograms, CpuSpent)> {
        let tracer = start_tracer_in(&report_path, Some(seconds), Variant::Iterator, walker.env())?;
        let watch = CpuWatch::start(tracer.id())?;
        sleep(Duration::from_secs_f64((seconds - 2.0).max(0.5)));
        let steady = watch.finish()?;
        let stats = walk_programs(&program_stats(tracer.id())?);
        let mut tracer = tracer;
        tracer.wait()?;
        anyhow::ensure!(
            !stats.programs.is_empty(),
            "the kernel gave no BPF statistics"
        );
        Ok((stats, steady))
    })();
    let _ = fs::write(SYSCTL, before.trim());
    churning.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = churner.join();
    drop(stop_tx);
    for sleeper in sleepers {
        let _ = sleeper.join();
    }
    let (
        WalkPrograms {
            programs,
            once_per_read,
        },
        steady,
    ) = result?;
    let report = read_report(&report_path)?;
    let cpu_s = figure(&report, "/meta/profiler/cpu_time_s");
    let duration_s = figure(&report, "/meta/duration_s");
    let (runs, ns) = programs
        .iter()
        .fold((0, 0), |(r, n), &(runs, ns)| (r + runs, n + ns));
    let served = &report["meta"]["accounting"]["reads"];
    let served_as = if once_per_read {
        format!(
            " ({} walked the list, {} re-read, {} amended)",
            served["walked_count"], served["reread_count"], served["amended_count"]
        )
    } else {
        String::new()
    };
    // Every read of the open-coded walk ends with a walk of the list or a re-read (an amend
    // is followed by one), so the reads the statistics cover are those runs; a re-read made
    // void and made again counts twice (the report's counts, of the whole run, say how
    // many reads there were). The iter/task program runs once per task.
    let reads = if once_per_read {
        programs.iter().take(2).map(|&(runs, _)| runs).sum()
    } else {
        runs / tasks.max(1) as u64
    };
    let per_program = if once_per_read {
        programs
            .iter()
            .zip(["walk of the list", "re-read", "amend"])
            .map(|(&(runs, ns), name)| {
                format!(
                    "{name}: {runs} runs, {:.0} µs each",
                    ns as f64 / runs.max(1) as f64 / 1e3
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        String::new()
    };
    Ok(IteratorCost {
        churn,
        served_as,
        walker: report["meta"]["accounting"]["walker"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        threads: tasks,
        reads,
        bpf_us_per_read: ns as f64 / reads.max(1) as f64 / 1e3,
        per_program,
        agent_us_per_interval: cpu_s / (duration_s / 0.1) * 1e6,
        steady,
    })
}

/// Kernel BPF statistics of the programs among `pid`'s descriptors: each program's
/// (`prog_id`, `prog_type`, runs, ns), in `prog_id` order.
fn program_stats(pid: u32) -> Result<Vec<(u64, u64, u64, u64)>> {
    let mut programs = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let Ok(text) = fs::read_to_string(entry?.path()) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(kind), Some(runs), Some(ns)) = (
            field("prog_id:"),
            field("prog_type:"),
            field("run_cnt:"),
            field("run_time_ns:"),
        ) {
            programs.push((id, kind, runs, ns));
        }
    }
    programs.sort_unstable();
    programs.dedup();
    Ok(programs)
}

/// (runs, ns) of the most-run program.
fn most_run(programs: &[(u64, u64, u64, u64)]) -> Option<(u64, u64)> {
    programs
        .iter()
        .map(|&(_, _, runs, ns)| (runs, ns))
        .filter(|&(runs, _)| runs > 0)
        .max()
}

/// The programs that read the threads: (runs, ns) of each.
struct WalkPrograms {
    programs: Vec<(u64, u64)>,
    /// Whether they run once per read (the open-coded walk's), not once per task.
    once_per_read: bool,
}

/// The threads' readers among `programs`: the open-coded walk's syscall programs
/// (`prog_type` 31; the walk of the list loaded first, then the re-read, then the amend), or
/// else the
/// most-run program (the iter/task program, which runs once per task) alone.
fn walk_programs(programs: &[(u64, u64, u64, u64)]) -> WalkPrograms {
    let syscall: Vec<(u64, u64)> = programs
        .iter()
        .filter(|p| p.1 == 31)
        .map(|&(_, _, runs, ns)| (runs, ns))
        .collect();
    if syscall.iter().any(|&(runs, _)| runs > 0) {
        WalkPrograms {
            programs: syscall,
            once_per_read: true,
        }
    } else {
        WalkPrograms {
            programs: most_run(programs).into_iter().collect(),
            once_per_read: false,
        }
    }
}

/// How `cg-trace --all` runs in a benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// An empty program on sched_switch (`--bench-noop-probes`): the floor of the switch mode.
    Floor,
    /// `--accounting switch`.
    Switch,
    /// `--accounting iterator`: nothing on context switches.
    Iterator,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Floor, Variant::Switch, Variant::Iterator];

    fn args(self) -> &'static [&'static str] {
        match self {
            Variant::Floor => &["--bench-noop-probes"],
            Variant::Switch => &["--accounting", "switch"],
            Variant::Iterator => &["--accounting", "iterator"],
        }
    }
}

/// One workload's figures (medians): without cg-trace, with an empty program on
/// sched_switch (the cost of merely having a program on that hook), and with `cg-trace
/// --all` in each accounting.
struct Ab {
    base: f64,
    floor: f64,
    switch: f64,
    iterator: f64,
    /// Reports of the traced runs (both accountings).
    reports: Vec<Value>,
}

impl Ab {
    fn print(&self, unit: &str, target_pct: f64) {
        let slowdown = |v: f64| 100.0 * (1.0 - v / self.base);
        println!("  without cg-trace:       {:>12.1} {unit}", self.base);
        println!(
            "  empty sched_switch program (floor): {:>12.1} {unit}   slowdown {:>5.2} %",
            self.floor,
            slowdown(self.floor)
        );
        println!(
            "  cg-trace --all --accounting switch: {:>12.1} {unit}   slowdown {:>5.2} %",
            self.switch,
            slowdown(self.switch)
        );
        println!(
            "  cg-trace --all --accounting iterator: {:>10.1} {unit}   slowdown {:>5.2} %   \
             (target <= {target_pct} %)",
            self.iterator,
            slowdown(self.iterator)
        );
    }
}

/// Runs `workload` alternately without cg-trace, with the empty program, and with `cg-trace
/// --all` in each accounting; returns the median of each and the reports of the traced runs.
fn ab(config: &Config, out: &Path, name: &str, workload: impl Fn() -> Result<f64>) -> Result<Ab> {
    let mut base = Vec::new();
    let mut results: [Vec<f64>; 3] = Default::default();
    let mut reports = Vec::new();
    for round in 0..config.rounds {
        base.push(workload()?);
        for (variant, results) in Variant::ALL.into_iter().zip(results.iter_mut()) {
            let report_path = out.join(format!("{name}-{round}-{variant:?}.json"));
            let mut tracer = start_tracer(&report_path, None, variant)?;
            results.push(workload()?);
            // SAFETY: signalling our own child.
            unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
            tracer.wait()?;
            if variant != Variant::Floor {
                reports.push(read_report(&report_path)?);
            }
        }
    }
    let [floor, switch, iterator] = results.map(median);
    Ok(Ab {
        base: median(base),
        floor,
        switch,
        iterator,
        reports,
    })
}

/// With the kernel's BPF statistics on (`kernel.bpf_stats_enabled`, restored after), runs
/// the ping-pong under `cg-trace --all` and reads cg-trace's programs' run counts and times
/// from its descriptors' fdinfo: (runs, ns per run) of the most-run program, sched_switch.
fn program_cost(pingpong: &Path, seconds: f64) -> Result<Option<(u64, f64)>> {
    const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let before = fs::read_to_string(SYSCTL).context("reading kernel.bpf_stats_enabled")?;
    fs::write(SYSCTL, "1").context("enabling kernel.bpf_stats_enabled")?;
    let out = tempdir()?;
    let result = (|| -> Result<Option<(u64, f64)>> {
        let mut tracer = start_tracer(&out.join("stats.json"), None, Variant::Switch)?;
        measure(
            Command::new(pingpong).arg(seconds.to_string()),
            "round_trips_per_s",
        )?;
        let best = most_run(&program_stats(tracer.id())?);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
        tracer.wait()?;
        Ok(best.map(|(runs, ns)| (runs, ns as f64 / runs as f64)))
    })();
    let _ = fs::write(SYSCTL, before.trim());
    result
}

fn start_tracer(report: &Path, duration_s: Option<f64>, variant: Variant) -> Result<Child> {
    start_tracer_in(report, duration_s, variant, &[])
}

/// [`start_tracer`] with these environment variables set.
fn start_tracer_in(
    report: &Path,
    duration_s: Option<f64>,
    variant: Variant,
    env: &[(&str, &str)],
) -> Result<Child> {
    let mut cmd = Command::new(root().join("target/release/cg-trace"));
    cmd.envs(env.iter().copied());
    cmd.args(["--all", "-q", "-o"]).arg(report);
    cmd.args(variant.args());
    if let Some(d) = duration_s {
        cmd.args(["--duration", &d.to_string()]);
    }
    let child = cmd
        .stderr(Stdio::null())
        .spawn()
        .context("starting cg-trace")?;
    // Loading and attaching takes well under a second.
    sleep(Duration::from_millis(1500));
    Ok(child)
}

fn measure(cmd: &mut Command, key: &str) -> Result<f64> {
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .with_context(|| format!("{cmd:?} printed no {key}: {text}"))
}

fn perf_pipe_ops(loops: &str) -> Result<f64> {
    let output = Command::new("taskset")
        .args(["-c", "0", "perf", "bench", "sched", "pipe", "-l", loops])
        .output()
        .context("running perf bench sched pipe")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_suffix("ops/sec")
                .and_then(|v| v.trim().parse().ok())
        })
        .with_context(|| format!("perf bench printed no ops/sec: {text}"))
}

fn read_report(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn vm_kb(pid: u32, field: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "cg-trace-bench-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A report's figure at `pointer`, NaN (printed as such) when the report lacks it.
fn figure(report: &Value, pointer: &str) -> f64 {
    report
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}
