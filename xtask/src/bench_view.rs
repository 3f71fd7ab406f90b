//! `cargo xtask bench --tui` (and the last part of `cargo xtask bench`): what the live view
//! costs. With 500 idle processes on the machine (each waking once a second), it runs
//! `cg-trace --all` headless and `cg-trace top --refresh 1000` in a 160x48 tmux pane for the
//! same time, alternating, and prints the CPU each used (from the report's own figures) and
//! the view's frame render times. Prints, never asserts.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::root;

const PROCESSES: usize = 500;

pub fn run(rounds: usize, duration_s: f64, out: &Path) -> Result<()> {
    let bin = |name: &str| root().join("target/release").join(name);
    if !Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        bail!("tmux is missing (`cargo xtask setup` installs it)");
    }
    let total_s = (rounds as f64 * 2.0 * (duration_s + 4.0) + 10.0).ceil();
    let idle = IdleProcesses::start(&bin("cg-idle"), PROCESSES, total_s)?;
    println!(
        "live view: {} idle processes (each wakes once a second), {rounds} rounds of {duration_s} s, \
         headless and `top --refresh 1000` in a 160x48 tmux pane alternating",
        idle.count
    );
    // Let every one of them wake at least once.
    sleep(Duration::from_millis(1500));

    let (mut headless, mut view, mut rows, mut frames) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let report = out.join(format!("headless-{round}.json"));
        let status = Command::new(bin("cg-trace"))
            .args(["--all", "-q", "--duration", &duration_s.to_string(), "-o"])
            .arg(&report)
            .stderr(Stdio::null())
            .status()
            .context("running cg-trace --all")?;
        if !status.success() {
            bail!("cg-trace --all failed ({status})");
        }
        headless.push(cpu_pct(&read_report(&report)?));

        let report = out.join(format!("view-{round}.json"));
        let stats = out.join(format!("frames-{round}.txt"));
        let tmux_socket = out.join("tmux.sock");
        let command = format!(
            "{} top -q --refresh 1000 --duration {duration_s} -o {} --bench-frame-stats {} 2>/dev/null",
            bin("cg-trace").display(),
            report.display(),
            stats.display()
        );
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&tmux_socket)
            .args(["-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "160", "-y", "48", &command])
            .status()
            .context("starting tmux")?;
        if !status.success() {
            bail!("tmux new-session failed ({status})");
        }
        let deadline = Instant::now() + Duration::from_secs_f64(duration_s + 30.0);
        while !stats.exists() && Instant::now() < deadline {
            sleep(Duration::from_millis(200));
        }
        // Usually gone already: the pane's command has ended.
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&tmux_socket)
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
        let report = read_report(&report)?;
        view.push(cpu_pct(&report));
        rows.push(report["processes"].as_array().map_or(0, Vec::len));
        frames.push(fs::read_to_string(&stats).context("frame stats")?);
    }
    drop(idle);

    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (h, v) = (median(headless.clone()), median(view.clone()));
    println!("  processes in the report: {rows:?}");
    println!("  cg-trace --all (headless): {h:.3} % of one core   (rounds: {headless:.3?})");
    println!("  cg-trace top (the view):   {v:.3} % of one core   (rounds: {view:.3?})");
    println!(
        "  the view's cost: {:.3} % of one core   (target <= 3 %)",
        v - h
    );
    let stat = |text: &str, key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(f64::NAN)
    };
    for (round, text) in frames.iter().enumerate() {
        println!(
            "  frames, round {round}: {} frames; render mean {:.2} ms, p95 {:.2}, worst {:.2} \
             (target <= 5 ms); whole draw to the terminal mean {:.2} ms, p95 {:.2}, worst {:.2}",
            stat(text, "frames"),
            stat(text, "render_mean_ms"),
            stat(text, "render_p95_ms"),
            stat(text, "render_max_ms"),
            stat(text, "draw_mean_ms"),
            stat(text, "draw_p95_ms"),
            stat(text, "draw_max_ms"),
        );
    }
    Ok(())
}

/// CPU cg-trace used, in percent of one core over the run (its own figures).
fn cpu_pct(report: &Value) -> f64 {
    let cpu = report
        .pointer("/meta/profiler/cpu_time_s")
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN);
    let duration = report
        .pointer("/meta/duration_s")
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN);
    100.0 * cpu / duration
}

fn read_report(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// `cg-idle`: idle processes (the ones the view lists), each waking once a second.
pub struct IdleProcesses {
    child: Child,
    /// How many it started.
    pub count: usize,
}

impl IdleProcesses {
    /// Starts `count` of them for `seconds` (the `cg-idle` program at `program`).
    pub fn start(program: &Path, count: usize, seconds: f64) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(program)
            .args([count.to_string(), seconds.to_string()])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .context("starting cg-idle")?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout).read_line(&mut line)?;
        }
        let count = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok(IdleProcesses { child, count })
    }

    fn stop(&mut self) {
        // SAFETY: signalling the process group cg-idle leads (it and its children).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for IdleProcesses {
    fn drop(&mut self) {
        self.stop();
    }
}
