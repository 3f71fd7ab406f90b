//! `cargo xtask bench --signals`: how long cg-trace takes to stop at a SIGTERM that comes
//! anywhere in its start-up (reading the functions, loading the programs, attaching the
//! probes, starting the command) of a `--func` run on the 1,000 functions of `cg-many` (the
//! start-up tests' workload; release build of cg-trace). Each run gets one SIGTERM at a moment spread evenly from the spawn to 1.5 times a
//! plain start-up; the figure is the time from that signal to cg-trace's exit, with the exit
//! statuses seen. The start-up tests (`tests/tests/start_signals.rs`) check that every such
//! run ends with 128 + 15 and leaves nothing attached; here only the time is measured.
//! Nothing here asserts, it prints.

use std::{
    os::unix::process::ExitStatusExt,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{cargo, root, status};

const RUNS: u32 = 40;

/// `cg-trace --func MANY:cg_many_* -- sleep 60`, quiet, its report into `report`.
fn start(cg_trace: &Path, many: &Path, report: &Path) -> Result<Child> {
    Command::new(cg_trace)
        .args(["-q", "--source", "model", "--func"])
        .arg(format!("{}:cg_many_*", many.display()))
        .arg("-o")
        .arg(report)
        .args(["--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting cg-trace")
}

/// Waits for `child` to exit, polling; gives up (kills it) after a minute.
fn wait(child: &mut Child) -> Result<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("cg-trace did not stop within a minute of SIGTERM");
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn sigterm(child: &Child) {
    // SAFETY: a signal to the child this benchmark started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

/// A plain start-up: spawn until the command (`sleep 60`) is cg-trace's child.
fn plain_start_up(cg_trace: &Path, many: &Path, report: &Path) -> Result<Duration> {
    let started = Instant::now();
    let mut child = start(cg_trace, many, report)?;
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let took = loop {
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        if !text.trim().is_empty() {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(60) || child.try_wait()?.is_some() {
            let _ = child.kill();
            bail!("cg-trace never started its command");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    sigterm(&child);
    wait(&mut child)?;
    Ok(took)
}

pub fn run() -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent"]))?;
    // (The workload only has to exist: the debug build of the tests makes it.)
    status(cargo().args(["build", "-p", "cg-tests"]))?;
    let many = crate::bench_functions::newest_build_output("debug", "cg-many")?;
    let cg_trace = root().join("target/release/cg-trace");
    let dir = std::env::temp_dir().join(format!("cg-bench-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let report = dir.join("run.json");
    let plain = plain_start_up(&cg_trace, &many, &report)?;
    let span = plain.mul_f64(1.5);
    let mut stop_ms = Vec::new();
    let (mut exited_143, mut killed, mut other) = (0, 0, Vec::new());
    for run in 0..RUNS {
        let at = span.mul_f64(f64::from(run) / f64::from(RUNS - 1));
        let spawned = Instant::now();
        let mut child = start(&cg_trace, &many, &report)?;
        std::thread::sleep(at.saturating_sub(spawned.elapsed()));
        let signalled = Instant::now();
        sigterm(&child);
        let status = wait(&mut child)?;
        stop_ms.push(signalled.elapsed().as_secs_f64() * 1e3);
        match (status.code(), status.signal()) {
            (Some(143), _) => exited_143 += 1,
            (None, Some(libc::SIGTERM)) => killed += 1,
            _ => other.push(status.to_string()),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    stop_ms.sort_by(f64::total_cmp);
    let at = |q: f64| stop_ms[((stop_ms.len() - 1) as f64 * q).round() as usize];
    println!(
        "SIGTERM during start-up (release build, --func on cg-many's 1,000 functions, plain \
         start-up {:.0} ms, {RUNS} runs with the signal spread from spawn to 1.5x that):",
        plain.as_secs_f64() * 1e3
    );
    println!(
        "  time from SIGTERM to exit: median {:.0} ms, 90th percentile {:.0} ms, max {:.0} ms \
         (measured)",
        at(0.5),
        at(0.9),
        at(1.0)
    );
    println!(
        "  exit status: 143 in {exited_143} runs, killed by SIGTERM before handling signals in \
         {killed}, other: {other:?}"
    );
    Ok(())
}
