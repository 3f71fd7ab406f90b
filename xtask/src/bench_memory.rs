//! `cargo xtask bench --memory`: the memory cg-trace needs where it promises bounds. The
//! commands that read a report (`report`, `diff`) on a generated report of 1.04 M processes
//! just under the 256 MiB cap, their peak RSS against the file's size; then a fork storm of
//! [`STORM_PROCESSES`] short processes under `cg-trace --all` (RSS per process seen while
//! running, and the peak while building the report) and under `cg-trace serve` (its RSS
//! before, at the highest and at the end, and the events it lost). Figures are measured
//! (`/usr/bin/time`, the kernel's VmRSS/VmHWM, serve's own metrics); nothing here asserts,
//! it prints.

use std::{
    fs::File,
    io::{BufWriter, Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::{cargo, root, status};

/// Processes of the generated report (the audit's 238 MB report had 1.04 M).
pub const HUGE_PROCESSES: usize = 1_040_000;
/// Processes the fork storm starts (one after another, each `/bin/true`).
pub const STORM_PROCESSES: usize = 20_000;

pub fn run() -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent"]))?;
    let cg_trace = root().join("target/release/cg-trace");
    let dir = std::env::temp_dir().join(format!("cg-trace-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = reading(&cg_trace, &dir)
        .and_then(|()| all_under_storm(&cg_trace, &dir))
        .and_then(|()| serve_under_storm(&cg_trace));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Runs the fork storm to its end: [`STORM_PROCESSES`] runs of `/bin/true`, one at a time.
fn fork_storm() -> Result<()> {
    let script = format!("i=0; while [ $i -lt {STORM_PROCESSES} ]; do /bin/true; i=$((i+1)); done");
    let ok = Command::new("sh").args(["-c", &script]).status()?.success();
    if !ok {
        bail!("the fork storm failed");
    }
    Ok(())
}

/// `cg-trace --all` through a fork storm: RSS per process seen while running (VmRSS before
/// and after the storm) and at the peak while building the report (VmHWM, reset once the
/// storm is over so that loading's peak does not count, read until the process ends).
fn all_under_storm(cg_trace: &Path, dir: &Path) -> Result<()> {
    let report = dir.join("storm.json");
    let mut child = Command::new(cg_trace)
        .args(["--all", "-q", "-o"])
        .arg(&report)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting cg-trace --all")?;
    let pid = child.id();
    let result = (|| -> Result<()> {
        sleep(Duration::from_secs(3));
        let before_kb = vm_kb(pid, "VmRSS").context("cg-trace --all ended early")?;
        let started = Instant::now();
        fork_storm()?;
        let storm_s = started.elapsed().as_secs_f64();
        // Two intervals more, so that the last processes are read.
        sleep(Duration::from_secs(2));
        let running_kb = vm_kb(pid, "VmRSS").context("cg-trace --all ended early")?;
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
            .context("resetting cg-trace's peak RSS (clear_refs)")?;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
        let mut peak_kb = running_kb;
        while child.try_wait()?.is_none() {
            if let Some(kb) = vm_kb(pid, "VmHWM") {
                peak_kb = peak_kb.max(kb);
            }
            sleep(Duration::from_millis(5));
        }
        let (seen, lost) = processes_and_losses(&report)?;
        println!(
            "cg-trace --all through a fork storm of {STORM_PROCESSES} processes ({storm_s:.0} s; \
             the report lists {seen}; measured: VmRSS, VmHWM):"
        );
        println!("  lost (the report's totals.lost_events): {lost}   (target: 0 events_dropped)");
        println!(
            "  while running: {:.1} MB -> {:.1} MB = {:.2} KB per process seen",
            before_kb as f64 / 1e3,
            running_kb as f64 / 1e3,
            per_process_kb(running_kb, before_kb, seen)
        );
        println!(
            "  building the report: peak {:.1} MB = {:.2} KB per process seen (above the RSS \
             before the storm)",
            peak_kb as f64 / 1e3,
            per_process_kb(peak_kb, before_kb, seen)
        );
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn per_process_kb(kb: u64, before_kb: u64, processes: usize) -> f64 {
    kb.saturating_sub(before_kb) as f64 / processes.max(1) as f64
}

/// How many processes a report lists, and its lost events (`kind count, ...`).
fn processes_and_losses(report: &Path) -> Result<(usize, String)> {
    let text = std::fs::read(report).with_context(|| format!("reading {}", report.display()))?;
    let value: serde_json::Value = serde_json::from_slice(&text)?;
    let processes = value["processes"]
        .as_array()
        .map(Vec::len)
        .context("a report without processes")?;
    let lost = value["totals"]["lost_events"]
        .as_object()
        .context("a report without totals.lost_events")?
        .iter()
        .map(|(kind, n)| format!("{} {n}", kind.trim_end_matches("_count")))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((processes, lost))
}

/// `cg-trace serve` through a fork storm: its RSS (its own metric, scraped every second)
/// before, at the highest and 30 s after, and the events it lost.
fn serve_under_storm(cg_trace: &Path) -> Result<()> {
    let (addr, mut child) = crate::bench_serve::start_serve(cg_trace)?;
    let result = serve_figures(addr, &mut child);
    crate::bench_serve::stop_serve(&mut child);
    result
}

fn serve_figures(addr: SocketAddr, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(addr, "process_resident_memory_bytes").is_err() {
        if Instant::now() > deadline || child.try_wait()?.is_some() {
            bail!("cg-trace serve never answered");
        }
        sleep(Duration::from_millis(200));
    }
    sleep(Duration::from_secs(5));
    let before = metric(addr, "process_resident_memory_bytes")?;
    let storm = std::thread::spawn(fork_storm);
    let mut highest = before;
    let mut after_storm = None;
    // Scrape through the storm and 30 s after it.
    loop {
        sleep(Duration::from_secs(1));
        highest = highest.max(metric(addr, "process_resident_memory_bytes")?);
        match after_storm {
            None if storm.is_finished() => after_storm = Some(Instant::now()),
            Some(t) if t.elapsed() > Duration::from_secs(30) => break,
            _ => {}
        }
    }
    storm
        .join()
        .map_err(|_| anyhow::anyhow!("the fork storm panicked"))??;
    let end = metric(addr, "process_resident_memory_bytes")?;
    let lost = metric(addr, "cg_trace_lost_events_total")?;
    println!(
        "cg-trace serve through the same storm (default 1 s interval; measured: its own \
         process_resident_memory_bytes and cg_trace_lost_events_total):"
    );
    println!(
        "  RSS {:.1} MB before, {:.1} MB at the highest, {:.1} MB 30 s after   (target <= 20 \
         MB); lost events: {lost}   (target 0)",
        before / 1e6,
        highest / 1e6,
        end / 1e6
    );
    Ok(())
}

/// One figure of serve's `/metrics`.
fn metric(addr: SocketAddr, name: &str) -> Result<f64> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .with_context(|| format!("no {name} in the scrape"))
}

fn vm_kb(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(str::to_string))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Peak RSS of `report` and `diff` on the generated report.
fn reading(cg_trace: &Path, dir: &Path) -> Result<()> {
    let input = dir.join("huge.json");
    write_huge_report(&input, HUGE_PROCESSES)?;
    let file_mb = std::fs::metadata(&input)?.len() as f64 / 1e6;
    let input_s = input.to_str().context("temp path")?;
    let page = dir.join("huge.html");
    println!(
        "reading a report of {HUGE_PROCESSES} processes ({file_mb:.1} MB; release build; \
         measured: peak RSS by /usr/bin/time):"
    );
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "report -o page.html",
            vec!["report", input_s, "-o", page.to_str().context("temp path")?],
        ),
        ("diff (text)", vec!["diff", input_s, input_s]),
    ];
    for (label, args) in runs {
        let (peak_mb, wall_s) = peak(cg_trace, &args)?;
        println!(
            "  {label:<20} peak RSS {peak_mb:>7.1} MB = {:.1} x the file, {wall_s:.1} s   \
             (target: a few times the file)",
            peak_mb / file_mb
        );
    }
    Ok(())
}

/// `(peak RSS in MB, wall time in s)` of `cg-trace ARGS`, by `/usr/bin/time`.
fn peak(cg_trace: &Path, args: &[&str]) -> Result<(f64, f64)> {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "cg-trace-peak %M %e"])
        .arg(cg_trace)
        .args(args)
        .output()
        .context("running /usr/bin/time (Debian's `time` package)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!(
            "cg-trace {} failed ({}): {stderr}",
            args.join(" "),
            out.status
        );
    }
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("cg-trace-peak "))
        .with_context(|| format!("/usr/bin/time printed no figures: {stderr}"))?;
    let mut fields = line.split_whitespace().map(str::parse::<f64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(kb)), Some(Ok(s))) => Ok((kb * 1024.0 / 1e6, s)),
        _ => bail!("/usr/bin/time printed {line:?}"),
    }
}

/// A schema-1 report of an `--all` run that saw `processes` processes (the shape `-o`
/// writes, alive at the end, the thread list left empty), written process by process so that the generator
/// itself stays small.
pub fn write_huge_report(path: &Path, processes: usize) -> Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    let meta = json!({
        "schema_version": "1.6", "tool": "cg-trace", "tool_version": "0.1.0",
        "run_id": "bench-huge", "started_at": "2026-11-24T01:00:00.000Z",
        "ended_at": "2026-11-24T01:10:00.000Z", "duration_s": 600.0, "hostname": "bench",
        "kernel": "6.18", "cpu_model": "bench CPU", "cpu_count": 2, "mode": "system",
        "stop_reason": "--duration reached", "interval_ms": 1000,
        "sources": [{"name": "model", "provenance": "estimated", "description": "model",
                     "domains": ["model"]}],
        "source_selection": "auto", "idle_baseline": [],
        "measurement_quality": {"grade": "estimated", "notes": []}
    });
    write!(out, "{{\"meta\":{meta},\"processes\":[")?;
    let (mut cpu_s, mut energy_j) = (0.0, 0.0);
    for i in 0..processes {
        // Exact binary fractions, so that sums do not depend on the order of addition.
        let cpu = (1 + i % 7) as f64 / 1024.0;
        let j = cpu * 4.0;
        cpu_s += cpu;
        energy_j += j;
        let pid = 1000 + i % 4_000_000;
        let p = json!({
            "pid": pid, "ppid": 1, "comm": "sleep", "cmdline": ["sleep", "1"], "root": false,
            "cpu_time_s": cpu, "energy_j": j, "avg_power_w": 4.0, "share_pct": 0.0001,
            "domains": {"model": {"energy_j": j}}, "started_s": 1.5, "alive_s": 0.5,
            "threads": []
        });
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut out, &p)?;
    }
    let totals = json!({
        "energy_j": energy_j * 2.0, "attributed_energy_j": energy_j,
        "other_energy_j": energy_j * 0.5, "idle_energy_j": energy_j * 0.5,
        "idle_power_w": 1.0, "avg_power_w": 2.0, "duration_s": 600.0, "cpu_time_s": cpu_s,
        "unplaced_cpu_time_s": 0.0, "unplaced_other_cpu_time_s": 0.0, "intervals_count": 600,
        "domains": {"model": {"energy_j": energy_j * 2.0, "attributed_energy_j": energy_j,
                              "other_energy_j": energy_j * 0.5, "idle_energy_j": energy_j * 0.5,
                              "idle_power_w": 1.0, "avg_power_w": 2.0,
                              "provenance": "estimated", "top_level": true}},
        "lost_events": {}
    });
    write!(out, "],\"functions\":[],\"totals\":{totals}}}")?;
    out.flush()?;
    Ok(())
}
