//! `cargo xtask bench --repeat`: what `--repeat N` costs per run beyond the run itself. One
//! setup (probes, sources, calibration) serves every run of a set, so each run after the
//! first should cost what the workload costs plus cg-trace's per-run work, and no more than
//! a lone cg-trace run costs beyond its own setup. Measured in one sitting, alternating:
//! the workload alone, one cg-trace run, and a set of N runs; the workload burns a fixed
//! amount of its own CPU time (cg-burn), so a loaded machine stretches every side alike.
//! Nothing here asserts, it prints.

use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root, rounds::median, status};

const RUNS_PER_SET: usize = 5;
const ROUNDS: usize = 3;
const WORK_MS: &str = "400";

/// Wall seconds of a command that must succeed.
fn wall_s(command: &mut Command) -> Result<f64> {
    let start = Instant::now();
    let out = command.output().context("running a benchmark command")?;
    let elapsed = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(elapsed)
}

/// cg-trace's own CPU seconds, from the report it wrote.
fn own_cpu_s(report: &Path) -> Result<f64> {
    let value: Value = serde_json::from_slice(&std::fs::read(report)?)?;
    value["meta"]["profiler"]["cpu_time_s"]
        .as_f64()
        .context("the report has no meta.profiler.cpu_time_s")
}

pub fn run() -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent", "-p", "cg-tests"]))?;
    let release = root().join("target/release");
    let cg_trace = release.join("cg-trace");
    let burn = release.join("cg-burn");
    let dir = std::env::temp_dir().join(format!("cg-bench-repeat-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let one = dir.join("one.json");
    let set = dir.join("set.json");
    let trace = |report: &Path, repeat: Option<usize>| {
        let mut command = Command::new(&cg_trace);
        command.args(["--source", "model", "-q", "-o"]).arg(report);
        if let Some(n) = repeat {
            command.args(["--repeat", &n.to_string()]);
        }
        command.args(["--"]).arg(&burn).args(["--self", WORK_MS]);
        command
    };

    let (mut alone, mut single, mut per_run, mut single_cpu, mut set_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        alone.push(wall_s(Command::new(&burn).args(["--self", WORK_MS]))?);
        let one_s = wall_s(&mut trace(&one, None))?;
        single_cpu.push(own_cpu_s(&one)?);
        let set_s = wall_s(&mut trace(&set, Some(RUNS_PER_SET)))?;
        set_cpu.push(own_cpu_s(&set)?);
        single.push(one_s);
        // A set is one setup plus N runs: what each run after the first adds.
        per_run.push((set_s - one_s) / (RUNS_PER_SET - 1) as f64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (alone, single, per_run) = (median(alone), median(single), median(per_run));
    let (single_cpu, set_cpu) = (median(single_cpu), median(set_cpu));
    println!(
        "--repeat cost (release build, workload cg-burn --self {WORK_MS} (ms of its own CPU), \
         sets of {RUNS_PER_SET} runs, median of {ROUNDS} rounds):"
    );
    println!(
        "  workload alone:                         {:.3} s wall",
        alone
    );
    println!(
        "  one cg-trace run (setup + run):         {:.3} s wall (+{:.3} s over the workload), \
         cg-trace CPU {:.3} s",
        single,
        single - alone,
        single_cpu
    );
    println!(
        "  each further run of a --repeat set:     {:.3} s wall (+{:.3} s over the workload, \
         {:+.1} %), cg-trace CPU per run {:.3} s",
        per_run,
        per_run - alone,
        100.0 * (per_run - alone) / alone,
        set_cpu / RUNS_PER_SET as f64
    );
    Ok(())
}
