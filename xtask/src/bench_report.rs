//! `cargo xtask bench --report`: how long `cg-trace report` takes to turn a one-hour run
//! recorded with `--timeseries` at 100 ms (36,000 intervals, 50 processes, each interval
//! with the power of its top 10 processes) into the HTML page, and how large the page is;
//! and how long `cg-trace diff --format html` takes on two 20-run `--repeat` reports. The
//! whole command as a user runs it (start, reading, rendering, writing), median of 5.
//! Nothing here asserts, it prints.

use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{cargo, root, status};

const INTERVALS: usize = 36_000;
const PROCESSES: usize = 50;
const PROCESSES_PER_INTERVAL: usize = 10;
const REPEATS: usize = 5;

/// A one-hour single-run report with a 100 ms time series, as `--timeseries` writes it.
fn hour_report() -> Value {
    let domain = |j: f64| {
        json!({"energy_j": j, "attributed_energy_j": j * 0.6, "other_energy_j": j * 0.1,
               "idle_energy_j": j * 0.3, "idle_power_w": 5.0, "avg_power_w": j / 3600.0,
               "provenance": "measured", "top_level": true,
               "unknown_energy_intervals_count": 0, "unknown_energy_duration_s": 0.0})
    };
    let timeseries: Vec<Value> = (0..INTERVALS)
        .map(|i| {
            let wave = 1.0 + 0.5 * ((i as f64) / 300.0).sin();
            let processes: Vec<Value> = (0..PROCESSES_PER_INTERVAL)
                .map(|k| {
                    let p = (i / 600 + k) % PROCESSES;
                    json!({"pid": 1000 + p, "comm": format!("worker-{p}"),
                           "energy_j": 0.1 * wave / (k + 1) as f64})
                })
                .collect();
            json!({
                "t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": 2.0 * wave,
                "power_w": 20.0 * wave, "attributed_energy_j": 1.2 * wave,
                "other_energy_j": 0.2 * wave, "idle_energy_j": 0.6 * wave, "energy_known": true,
                "domains": {
                    "package-0": {"energy_j": 1.6 * wave, "power_w": 16.0 * wave,
                                  "energy_known": true},
                    "dram-0": {"energy_j": 0.4 * wave, "power_w": 4.0 * wave,
                               "energy_known": true}
                },
                "processes": processes
            })
        })
        .collect();
    let function = |f: usize| {
        json!({"symbol": format!("module::function_{f}"), "module": "app", "samples": 100 + f,
               "cpu_time_s": 0.01 * f as f64, "energy_j": 0.02 * f as f64,
               "self_cpu_time_s": 0.005 * f as f64, "self_energy_j": 0.01 * f as f64,
               "source": "sampling", "provenance": "measured", "pid": 1000})
    };
    json!({
        "meta": {
            "schema_version": "1.4", "tool": "cg-trace", "tool_version": "0.1.0",
            "run_id": "bench-hour", "started_at": "2026-11-24T01:00:00.000Z",
            "ended_at": "2026-11-24T02:00:00.000Z", "duration_s": 3600.0, "hostname": "bench",
            "kernel": "6.18", "cpu_model": "bench CPU", "cpu_count": 16, "mode": "wrap",
            "command": ["./serve", "--hour"], "command_exit_code": 0,
            "stop_reason": "command exited", "interval_ms": 100, "calibration_s": 0.5,
            "sources": [{"name": "perf", "provenance": "measured", "description": "RAPL",
                         "domains": ["package-0", "dram-0"]}],
            "source_selection": "auto", "idle_baseline": [],
            "measurement_quality": {"grade": "measured", "notes": []}
        },
        "processes": (0..PROCESSES).map(|p| json!({
            "pid": 1000 + p, "ppid": 999, "comm": format!("worker-{p}"),
            "cmdline": [format!("/usr/bin/worker-{p}"), "--job", p.to_string()], "root": p == 0,
            "cpu_time_s": 60.0, "energy_j": 100.0, "avg_power_w": 0.03, "share_pct": 1.0,
            "domains": {"package-0": {"energy_j": 80.0}, "dram-0": {"energy_j": 20.0}},
            "started_s": 0.0, "alive_s": 3600.0
        })).collect::<Vec<_>>(),
        "functions": (0..50).map(function).collect::<Vec<_>>(),
        "function_totals": (0..50).map(function).collect::<Vec<_>>(),
        "totals": {
            "energy_j": 72000.0, "attributed_energy_j": 43200.0, "other_energy_j": 7200.0,
            "idle_energy_j": 21600.0, "idle_power_w": 6.0, "avg_power_w": 20.0,
            "duration_s": 3600.0, "cpu_time_s": 3000.0, "intervals_count": INTERVALS,
            "domains": {"package-0": domain(57600.0), "dram-0": domain(14400.0)}
        },
        "timeseries": timeseries
    })
}

/// Median wall time of `cg-trace ARGS`, in milliseconds; stdout is returned from the last.
fn time(cg_trace: &Path, args: &[&str]) -> Result<(f64, Vec<u8>)> {
    let mut times_ms = Vec::new();
    let mut stdout = Vec::new();
    for _ in 0..REPEATS {
        let start = Instant::now();
        let out = Command::new(cg_trace)
            .args(args)
            .output()
            .context("running cg-trace")?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
        if !out.status.success() {
            bail!(
                "cg-trace {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        stdout = out.stdout;
    }
    times_ms.sort_by(f64::total_cmp);
    Ok((times_ms[times_ms.len() / 2], stdout))
}

pub fn run() -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent"]))?;
    let cg_trace = root().join("target/release/cg-trace");
    let dir = std::env::temp_dir().join(format!("cg-trace-report-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let input = dir.join("hour.json");
    std::fs::write(&input, serde_json::to_vec(&hour_report())?)?;
    let page = dir.join("hour.html");
    let (ms, _) = time(
        &cg_trace,
        &[
            "report",
            input.to_str().context("temp path")?,
            "-o",
            page.to_str().context("temp path")?,
        ],
    )?;
    let input_mb = std::fs::metadata(&input)?.len() as f64 / 1e6;
    let page_mb = std::fs::metadata(&page)?.len() as f64 / 1e6;
    println!();
    println!("cg-trace report (release build, median of {REPEATS}):");
    println!(
        "  one hour at 100 ms ({INTERVALS} intervals, {PROCESSES} processes, top \
         {PROCESSES_PER_INTERVAL} per interval; report {input_mb:.1} MB): {:.2} s (target <= 2 s), \
         page {page_mb:.2} MB (target <= 5 MB)",
        ms / 1e3
    );

    let base = dir.join("base.json");
    let new = dir.join("new.json");
    std::fs::write(
        &base,
        serde_json::to_vec(&crate::bench_diff::report(1.0, 1, 0))?,
    )?;
    std::fs::write(
        &new,
        serde_json::to_vec(&crate::bench_diff::report(1.05, 2, 0))?,
    )?;
    let (ms, html) = time(
        &cg_trace,
        &[
            "diff",
            base.to_str().context("temp path")?,
            new.to_str().context("temp path")?,
            "--format",
            "html",
        ],
    )?;
    println!(
        "  diff --format html of two 20-run reports (each {:.1} MB): {ms:.1} ms (target <= 200 \
         ms), page {:.2} MB",
        std::fs::metadata(&base)?.len() as f64 / 1e6,
        html.len() as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
