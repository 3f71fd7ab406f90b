//! `cargo xtask bench --functions --unwind`: what unwinding without frame pointers costs
//! (`--stacks auto`, the default: a copy of the user stack in every sample, unwound by the
//! agent) against frame pointers alone (`--stacks fp`), at 99 and 999 Hz, on the unwinding
//! tests' C program built without frame pointers (main -> a -> b -> leaf; built here from
//! tests/c/cgunwind.c). Per sample of the target, medians of A/B rounds, printed, never
//! asserted:
//! - the sampling program's kernel time, from the kernel's BPF statistics
//!   (`CG_TRACE_BENCH_BPF_STATS=1`), runs on other tasks taken off as in part 5 of
//!   `bench --functions` (what a run on `sleep` costs);
//! - the agent's CPU: cg-trace's own CPU time (`meta.profiler.cpu_time_s`) less that of the
//!   same run without `--profile`, split into a part per sample (the slope between the
//!   99 Hz and the 999 Hz runs: reading, unwinding and counting samples) and a part per run
//!   (the rest: loading the program, reading the files' unwind information, naming the
//!   stacks at the end);
//! - the share of samples whose stack reached the program's entry point.
//!
//! From these, what profiling a CPU-bound program at 99 Hz costs in the long run, as a share
//! of one CPU (estimated: the per-sample costs times 99 samples per second; the per-run part
//! spreads over the run).

use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{
    root,
    rounds::{median, read_json},
    status,
};

/// Rounds of the program: about 6 s of CPU here.
const PROGRAM_ROUNDS: &str = "18000";

pub fn run(cg_trace: &Path, rounds: usize) -> Result<()> {
    let out = std::env::temp_dir().join(format!("cg-trace-bench-unwind-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    let program = out.join("cg-unwind-nofp");
    status(
        Command::new("cc")
            .args(["-O2", "-fomit-frame-pointer", "-o"])
            .arg(&program)
            .arg(root().join("tests/c/cgunwind.c")),
    )?;
    let program = program.display().to_string();
    let command = [program.as_str(), PROGRAM_ROUNDS];
    let other_ns = run_once(cg_trace, &out, Some((999, "auto")), &["sleep", "2"])?.ns_per_run;
    let mut baseline = Vec::new();
    for _ in 0..rounds {
        baseline.push(run_once(cg_trace, &out, None, &command)?.agent_cpu_s);
    }
    let baseline_cpu_s = median(baseline);
    println!(
        "unwinding: a C program without frame pointers (~6 s of CPU), {rounds} round(s) each, medians"
    );
    println!(
        "  a run on another task (sleep 2): {other_ns:.0} ns; cg-trace without --profile: {:.3} s CPU (measured)",
        baseline_cpu_s
    );
    println!(
        "  {:>6} {:>4} {:>7} {:>14} {:>18} {:>11} {:>11} {:>17}",
        "stacks",
        "Hz",
        "samples",
        "kernel ns/smp",
        "agent CPU s/run",
        "reach main",
        "agent ns/smp",
        "at 99 Hz, % CPU"
    );
    for stacks in ["fp", "auto"] {
        let mut rows = Vec::new();
        for hz in [99u64, 999] {
            let mut figures = Vec::new();
            for _ in 0..rounds {
                figures.push(run_once(cg_trace, &out, Some((hz, stacks)), &command)?);
            }
            rows.push(Row {
                hz,
                samples: median(figures.iter().map(|f| f.samples).collect()),
                kernel_ns: median(
                    figures
                        .iter()
                        .map(|f| {
                            (f.ns_per_run * f.runs - (f.runs - f.samples).max(0.0) * other_ns)
                                / f.samples.max(1.0)
                        })
                        .collect(),
                ),
                agent_s: median(
                    figures
                        .iter()
                        .map(|f| f.agent_cpu_s - baseline_cpu_s)
                        .collect(),
                ),
                reached_pct: median(figures.iter().map(|f| 100.0 - f.truncated_pct).collect()),
            });
        }
        // The agent's CPU per sample: the slope between the two rates.
        let (low, high) = (&rows[0], &rows[1]);
        let agent_ns = (high.agent_s - low.agent_s) * 1e9 / (high.samples - low.samples).max(1.0);
        for row in &rows {
            println!(
                "  {stacks:>6} {:>4} {:>7.0} {:>14.0} {:>18.3} {:>10.1}%",
                row.hz, row.samples, row.kernel_ns, row.agent_s, row.reached_pct
            );
        }
        let cpu_pct = (low.kernel_ns + agent_ns) * 99.0 / 1e9 * 100.0;
        println!("  {stacks:>6} {:>76.0} {cpu_pct:>17.3}", agent_ns);
    }
    println!(
        "  (measured: kernel ns per sample, agent CPU per run over a run without --profile; \
         agent ns per sample: the slope between 99 and 999 Hz; % CPU at 99 Hz: (kernel + \
         agent per sample) x 99, estimated, the per-run part left out)"
    );
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// The medians at one rate.
struct Row {
    hz: u64,
    samples: f64,
    kernel_ns: f64,
    agent_s: f64,
    reached_pct: f64,
}

/// What one run gave.
struct Figures {
    samples: f64,
    ns_per_run: f64,
    runs: f64,
    agent_cpu_s: f64,
    truncated_pct: f64,
}

/// Runs `command` under cg-trace, with `--profile` at (Hz, `--stacks`) when given and the
/// kernel's BPF statistics on, and reads the figures from the report.
fn run_once(
    cg_trace: &Path,
    out: &Path,
    profile: Option<(u64, &str)>,
    command: &[&str],
) -> Result<Figures> {
    let report = out.join("unwind.json");
    let mut cmd = Command::new(cg_trace);
    cmd.args(["-q", "--source", "model", "-o"]).arg(&report);
    if let Some((hz, stacks)) = profile {
        cmd.args(["--profile", "--stacks", stacks, "--sample-hz"])
            .arg(hz.to_string());
    }
    let status = cmd
        .arg("--")
        .args(command)
        .env("CG_TRACE_BENCH_BPF_STATS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running cg-trace on {command:?}"))?;
    if !status.success() {
        bail!("cg-trace {profile:?} -- {command:?} failed ({status})");
    }
    let json = read_json(&report)?;
    let number = |pointer: &str| -> Result<f64> {
        json.pointer(pointer)
            .and_then(Value::as_f64)
            .with_context(|| format!("{command:?}: no {pointer} in the report"))
    };
    let agent_cpu_s = number("/meta/profiler/cpu_time_s")?;
    if profile.is_none() {
        return Ok(Figures {
            samples: 0.0,
            ns_per_run: 0.0,
            runs: 0.0,
            agent_cpu_s,
            truncated_pct: 0.0,
        });
    }
    let sampling = "/meta/function_profiling/sampling";
    Ok(Figures {
        samples: number(&format!("{sampling}/samples_count"))?,
        ns_per_run: number(&format!("{sampling}/bpf_ns_per_run"))?,
        runs: number(&format!("{sampling}/bpf_runs_count"))?,
        agent_cpu_s,
        truncated_pct: number(&format!("{sampling}/incomplete_stacks_pct")).unwrap_or(100.0),
    })
}
