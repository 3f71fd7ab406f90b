//! `cargo xtask bench --diff`: how long `cg-trace diff` takes on two 20-run `--repeat`
//! reports (generated: 50 process groups and 50 functions per run, each run with its own
//! complete report of 200 processes and 50 functions, as `--repeat` writes them), the whole
//! command as a CI job runs it (start, reading, the tests, the output), median of 11; also
//! with a one-hour time series (36,000 intervals) at the top level of each report, the
//! largest a single run writes. Nothing here asserts, it prints.

use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{cargo, root, status};

const RUNS: usize = 20;
const GROUPS: usize = 50;
const FUNCTIONS: usize = 50;
const PROCESSES: usize = 200;
const REPEATS: usize = 11;

/// A deterministic pseudo-random stream (xorshift), so both sides differ reproducibly.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A schema-1 report with `RUNS` runs whose energies are `level` x (1 +- 3 % noise).
pub(crate) fn report(level: f64, seed: u64, timeseries_points: usize) -> Value {
    let mut noise = Noise(seed);
    let runs: Vec<Value> = (0..RUNS)
        .map(|i| {
            let scale = level * (1.0 + 0.06 * (noise.next() - 0.5));
            json!({
                "index": i + 1,
                "started_at": "2026-11-24T01:00:00.000Z",
                "ended_at": "2026-11-24T01:00:10.000Z",
                "duration_s": 10.0,
                "energy_j": 100.0 * scale,
                "domains": {"package-0": {"energy_j": 80.0 * scale},
                            "dram-0": {"energy_j": 20.0 * scale}},
                "process_groups": (0..GROUPS).map(|g| json!({
                    "group": format!("worker-{g}"), "command": format!("worker-{g} --job {g}"),
                    "energy_j": scale * (g + 1) as f64 / 20.0, "cpu_time_s": 0.1 * (g + 1) as f64
                })).collect::<Vec<_>>(),
                "functions": (0..FUNCTIONS).map(|f| json!({
                    "function": format!("module::function_{f}"),
                    "energy_j": scale * (f + 1) as f64 / 50.0
                })).collect::<Vec<_>>(),
                "outlier": false
            })
        })
        .collect();
    let function = |f: usize, pid: Option<usize>| {
        let mut v = json!({
            "symbol": format!("module::function_{f}"), "module": "app", "samples": 100 + f,
            "cpu_time_s": 0.01 * f as f64, "energy_j": 0.02 * f as f64,
            "self_cpu_time_s": 0.005 * f as f64, "self_energy_j": 0.01 * f as f64,
            "source": "sampling", "provenance": "measured"
        });
        match pid {
            Some(pid) => v["pid"] = json!(pid),
            None => v["processes_count"] = json!(1),
        }
        v
    };
    let mut report = json!({
        "meta": {
            "schema_version": "1.3", "tool": "cg-trace", "tool_version": "0.1.0",
            "run_id": format!("bench-{seed}"), "started_at": "2026-11-24T01:00:00.000Z",
            "ended_at": "2026-11-24T01:03:20.000Z", "duration_s": 200.0, "hostname": "bench",
            "kernel": "6.18", "cpu_model": "bench CPU", "cpu_count": 2, "mode": "wrap",
            "command": ["./bench"], "command_exit_code": 0, "stop_reason": "command exited",
            "interval_ms": 100, "calibration_s": 0.5,
            "sources": [{"name": "perf", "provenance": "measured", "description": "RAPL",
                         "domains": ["package-0", "dram-0"]}]
        },
        "processes": (0..PROCESSES).map(|p| json!({
            "pid": 1000 + p, "ppid": 999, "comm": format!("worker-{}", p % GROUPS),
            "cmdline": [format!("/usr/bin/worker-{}", p % GROUPS), "--job"], "root": p == 0,
            "cpu_time_s": 0.1, "energy_j": level / 400.0, "avg_power_w": 1.0, "share_pct": 0.25,
            "domains": {"package-0": {"energy_j": level / 400.0}}, "started_s": 0.0,
            "alive_s": 10.0
        })).collect::<Vec<_>>(),
        "functions": (0..FUNCTIONS).map(|f| function(f, Some(1000))).collect::<Vec<_>>(),
        "function_totals": (0..FUNCTIONS).map(|f| function(f, None)).collect::<Vec<_>>(),
        "totals": {
            "energy_j": 100.0 * level, "attributed_energy_j": 60.0 * level, "cpu_time_s": 20.0,
            "domains": {
                "package-0": {"energy_j": 80.0 * level, "attributed_energy_j": 50.0 * level,
                              "top_level": true, "provenance": "measured"},
                "dram-0": {"energy_j": 20.0 * level, "attributed_energy_j": 10.0 * level,
                           "top_level": true, "provenance": "measured"}
            }
        },
        "repeat": {"runs": runs, "statistics": {}, "noise_verdict": "good"}
    });
    // As --repeat writes them, each run carries its complete report.
    let single = report.clone();
    for run in report["repeat"]["runs"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let mut own = single.clone();
        own.as_object_mut().map(|o| o.remove("repeat"));
        run["report"] = own;
    }
    if timeseries_points > 0 {
        report["timeseries"] = (0..timeseries_points)
            .map(|i| {
                json!({
                    "t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": 2.0, "power_w": 20.0,
                    "attributed_energy_j": 1.0, "other_energy_j": 0.5, "idle_energy_j": 0.5,
                    "energy_known": true,
                    "domains": {"package-0": {"energy_j": 1.6, "power_w": 16.0,
                                              "energy_known": true},
                                "dram-0": {"energy_j": 0.4, "power_w": 4.0,
                                           "energy_known": true}}
                })
            })
            .collect();
    }
    report
}

/// Median wall time of `cg-trace diff BASE NEW --format json`, in milliseconds.
fn time_diff(cg_trace: &Path, base: &Path, new: &Path) -> Result<f64> {
    let mut times_ms = Vec::new();
    for _ in 0..REPEATS {
        let start = Instant::now();
        let out = Command::new(cg_trace)
            .arg("diff")
            .args([base, new])
            .args(["--format", "json"])
            .output()
            .context("running cg-trace diff")?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
        if out.status.code() != Some(0) {
            bail!(
                "cg-trace diff failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let v: Value = serde_json::from_slice(&out.stdout).context("diff's JSON")?;
        if v["tested"] != true {
            bail!("the generated reports were not tested for significance: {v}");
        }
    }
    times_ms.sort_by(f64::total_cmp);
    Ok(times_ms[times_ms.len() / 2])
}

pub fn run() -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent"]))?;
    let cg_trace = root().join("target/release/cg-trace");
    let dir = std::env::temp_dir().join(format!("cg-trace-diff-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!();
    println!("cg-trace diff of two {RUNS}-run reports (release build, median of {REPEATS}):");
    for (what, points) in [
        ("without a time series", 0),
        ("with 36,000-interval time series", 36_000),
    ] {
        let base = dir.join(format!("base-{points}.json"));
        let new = dir.join(format!("new-{points}.json"));
        std::fs::write(&base, serde_json::to_vec(&report(1.0, 1, points))?)?;
        std::fs::write(&new, serde_json::to_vec(&report(1.05, 2, points))?)?;
        let size_mb = std::fs::metadata(&base)?.len() as f64 / 1e6;
        let ms = time_diff(&cg_trace, &base, &new)?;
        println!("  {what}: {ms:.1} ms per diff (each report {size_mb:.1} MB; target <= 200 ms)");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
