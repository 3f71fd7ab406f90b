//! `cargo xtask bench --functions`: what function-level profiling costs, as ratios measured in
//! one run with A/B rounds (medians), printed, never asserted.
//!
//! 1. Probe cost per call of a function that does almost nothing (`cg-funcs --tiny`), for a
//!    first instruction the kernel emulates (`push %rbp`) and one it single-steps
//!    (`endbr64`): without cg-trace, with an empty uprobe + uretprobe pair (cg-trace's
//!    programs returning at once: the kernel's trap is the floor), and with cg-trace's probes.
//!    Target: our BPF work adds <= 50 % over the empty pair.
//! 2. Sampling at 99 Hz on a CPU-bound loop: without cg-trace, profiled (`cg-trace --profile
//!    --sample-hz 99 -- LOOP`), and under `cg-trace --all --profile`. Target: <= 1 % slowdown.
//! 3. Symbolizing 100k samples (distinct stacks, the worst case). Target: <= 1 s.
//! 4. Attaching and detaching the probes of 1,000 functions (`cg-many`, built by
//!    tests/build.rs): uprobe_multi links (the default where the kernel has them), and the
//!    old path of one perf event per probe (`CG_TRACE_BENCH_PERF_UPROBES=1`) on 100 of them,
//!    whose detach costs ~0.1 s per probe here (minutes for 1,000). Figures from cg-trace's
//!    own log (`CG_TRACE_LOG=cg_agent=info`). Target: seconds, not minutes.
//! 5. The sampler at 999 Hz on programs with a new stack at nearly every sample (CPython
//!    json/re, xz -9, gzip -9, make -j2 of C files): stacks lost per 100 samples (target
//!    < 0.1) and the sampling program's kernel time, from the kernel's BPF statistics
//!    (`CG_TRACE_BENCH_BPF_STATS=1`): per run, and per sample of a target (runs on other
//!    tasks cost what a run of `sleep` measures, taken off). Only this part:
//!    `cargo xtask bench --functions --sampler`.
//! 6. Matching `--func` globs (globset) against every function symbol of the release
//!    cg-trace binary and of libc, in ns per symbol (`cg-agent/examples/glob_bench.rs`). Only
//!    this part: `cargo xtask bench --functions --globs`.
//! 7. Unwinding without frame pointers against frame pointers alone, at 99 and 999 Hz:
//!    kernel and agent time per sample (`bench_unwind.rs`). Only this part:
//!    `cargo xtask bench --functions --unwind`.
//! 8. Naming addresses down to inlined functions and source lines (issue 22): cg-agent's
//!    path (addr2line) against blazesym, on the debug cg-trace, an optimised Rust binary, libc
//!    and an -O2 C program: load, ns per address, memory, agreement (`xtask/naming-compare`,
//!    a workspace of its own so that CI never builds blazesym). Only this part, and never
//!    part of the others: `cargo xtask bench --functions --naming`.

use std::{
    path::Path,
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{
    cargo, root,
    rounds::{median, read_json},
    status,
};

pub fn run(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let rounds = if quick { 2 } else { 5 };
    if args.iter().any(|a| a == "--naming") {
        return naming(if quick { 1 } else { 3 });
    }
    status(cargo().args(["build", "--release"]))?;
    let release = root().join("target/release");
    let cg_trace = release.join("cg-trace");
    if args.iter().any(|a| a == "--sampler") {
        return sampler(&cg_trace, if quick { 1 } else { 3 });
    }
    if args.iter().any(|a| a == "--globs") {
        return globs(&cg_trace);
    }
    if args.iter().any(|a| a == "--unwind") {
        return crate::bench_unwind::run(&cg_trace, if quick { 1 } else { 3 });
    }
    if args.iter().any(|a| a == "--against-perf") {
        return crate::bench_perf::run(&cg_trace);
    }
    let funcs = release.join("cg-funcs");
    let spin = release.join("cg-spin");
    let out = std::env::temp_dir().join(format!("cg-trace-bench-functions-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;

    println!("function-level profiling: overhead benchmark ({rounds} rounds A/B, medians)");
    println!();
    // 1. Probe cost per call.
    for (symbol, extra, calls) in [
        ("cg_tiny", None, if quick { 600_000 } else { 2_000_000 }),
        (
            "cg_tiny_endbr",
            Some("--endbr"),
            if quick { 80_000 } else { 250_000 },
        ),
    ] {
        let workload = |tracer: Option<&[&str]>| -> Result<(f64, Option<Value>)> {
            let calls = calls.to_string();
            let mut args: Vec<&str> = vec!["--tiny", &calls];
            args.extend(extra);
            match tracer {
                None => Ok((calls_per_s(Command::new(&funcs).args(&args))?, None)),
                Some(flags) => {
                    let report = out.join(format!("{symbol}.json"));
                    let mut cmd = Command::new(&cg_trace);
                    cmd.args(["-q", "--source", "model", "--func", symbol])
                        .args(flags)
                        .arg("-o")
                        .arg(&report)
                        .arg("--")
                        .arg(&funcs)
                        .args(&args);
                    let rate = calls_per_s(&mut cmd)?;
                    Ok((rate, Some(read_json(&report)?)))
                }
            }
        };
        let (mut base, mut empty, mut ours, mut hits) = (Vec::new(), Vec::new(), Vec::new(), 0.0);
        for _ in 0..rounds {
            base.push(workload(None)?.0);
            empty.push(workload(Some(&["--bench-empty-func"]))?.0);
            let (rate, report) = workload(Some(&[]))?;
            ours.push(rate);
            hits = report
                .and_then(|r| {
                    r.pointer("/meta/function_profiling/uprobes/probe_hits_count")
                        .and_then(Value::as_f64)
                })
                .unwrap_or(f64::NAN);
        }
        let (base, empty, ours) = (median(base), median(empty), median(ours));
        let per_call_us = |rate: f64| 1e6 / rate - 1e6 / base;
        let (empty_us, ours_us) = (per_call_us(empty), per_call_us(ours));
        println!(
            "uprobe + uretprobe on {symbol} (first instruction {}), {calls} calls",
            if extra.is_some() {
                "endbr64: single-stepped"
            } else {
                "push %rbp: emulated"
            }
        );
        println!("  without cg-trace:       {base:>12.0} calls/s");
        println!(
            "  empty probe pair:       {empty:>12.0} calls/s   {empty_us:>6.2} µs per call (the kernel's trap: the floor)"
        );
        println!("  cg-trace --func:        {ours:>12.0} calls/s   {ours_us:>6.2} µs per call");
        println!(
            "  our BPF work:           {:>+6.2} µs per call = {:+.1} % over the empty pair   (target <= 50 %)",
            ours_us - empty_us,
            100.0 * (ours_us - empty_us) / empty_us
        );
        println!("  probe hits in the last traced run (measured): {hits:.0} (calls made: {calls})");
        println!();
    }

    // 2. Sampling overhead on a CPU-bound loop: the profiled command itself (wrap mode), and
    // the whole machine (--all: every process is sampled and its stacks read).
    let seconds = if quick { "2" } else { "3" };
    let (mut base, mut wrapped, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let mut samples = 0.0;
    for round in 0..rounds {
        base.push(units_per_s(Command::new(&spin).arg(seconds))?);
        let report = out.join(format!("spin-{round}.json"));
        let mut traced = Command::new(&cg_trace);
        traced
            .args([
                "-q",
                "--source",
                "model",
                "--profile",
                "--sample-hz",
                "99",
                "-o",
            ])
            .arg(&report)
            .arg("--")
            .arg(&spin)
            .arg(seconds);
        wrapped.push(units_per_s(&mut traced)?);
        samples = read_json(&report)?
            .pointer("/meta/function_profiling/sampling/samples_count")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN);
        let report = out.join(format!("spin-all-{round}.json"));
        let mut child = Command::new(&cg_trace)
            .args([
                "--all",
                "-q",
                "--source",
                "model",
                "--profile",
                "--sample-hz",
                "99",
                "-o",
            ])
            .arg(&report)
            .stderr(Stdio::null())
            .spawn()
            .context("starting cg-trace")?;
        sleep(Duration::from_millis(1500));
        all.push(units_per_s(Command::new(&spin).arg(seconds))?);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait()?;
    }
    let (base, wrapped, all) = (median(base), median(wrapped), median(all));
    let slowdown = |v: f64| 100.0 * (1.0 - v / base);
    println!("CPU-bound loop, sampling at 99 Hz per CPU");
    println!("  without cg-trace:                        {base:>12.1} units/s");
    println!(
        "  cg-trace --profile -- LOOP:              {wrapped:>12.1} units/s   slowdown {:>5.2} %   (target <= 1 %)",
        slowdown(wrapped)
    );
    println!(
        "  cg-trace --all --profile (whole machine): {all:>11.1} units/s   slowdown {:>5.2} %   (every process sampled; the agent names the stacks of all of them)",
        slowdown(all)
    );
    println!("  samples of the loop in the last wrapped run (measured): {samples:.0}");
    println!();

    // 3. Symbolization.
    let output = Command::new(&cg_trace)
        .args(["--bench-symbolize", "100000"])
        .output()
        .context("cg-trace --bench-symbolize")?;
    if !output.status.success() {
        bail!(
            "cg-trace --bench-symbolize failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    println!("symbolization (worst case: every sample a distinct stack)");
    println!(
        "  {}   (target <= 1 s)",
        String::from_utf8_lossy(&output.stdout).trim()
    );
    println!();

    // 4. Attach and detach.
    let many = newest_build_output("release", "cg-many")?;
    let (mut attach_ms, mut detach_ms) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (a, d) = attach_detach_ms(&cg_trace, &many, "cg_many_*", false)?;
        attach_ms.push(a);
        detach_ms.push(d);
    }
    // cg_many_100 to cg_many_199.
    let (perf_attach_ms, perf_detach_ms) =
        attach_detach_ms(&cg_trace, &many, "cg_many_1[0-9][0-9]", true)?;
    println!("attaching and detaching function probes (entry + return), from cg-trace's log");
    println!(
        "  1,000 functions, uprobe_multi links:    attach {:>8.1} ms   detach {:>8.1} ms   (medians of {rounds})",
        median(attach_ms),
        median(detach_ms)
    );
    println!(
        "  100 functions, one perf event a probe:  attach {perf_attach_ms:>8.1} ms   detach {perf_detach_ms:>8.1} ms   (the old path; x10 for 1,000: ~{:.0} s, estimated)",
        (perf_attach_ms + perf_detach_ms) * 10.0 / 1e3
    );
    let _ = std::fs::remove_dir_all(&out);
    println!();
    sampler(&cg_trace, if quick { 1 } else { 3 })?;
    println!();
    crate::bench_unwind::run(&cg_trace, if quick { 1 } else { 3 })?;
    globs(&cg_trace)
}

/// Part 5: stack loss and the sampler's kernel cost at 999 Hz, `rounds` runs a workload.
/// 6. The cost of matching `--func` globs, per symbol.
fn globs(cg_trace: &Path) -> Result<()> {
    status(cargo().args([
        "build",
        "--release",
        "-p",
        "cg-agent",
        "--example",
        "glob_bench",
    ]))?;
    let bench = root().join("target/release/examples/glob_bench");
    println!();
    for elf in [cg_trace, Path::new("/lib/x86_64-linux-gnu/libc.so.6")] {
        if elf.exists() {
            status(Command::new(&bench).arg(elf))?;
        }
    }
    Ok(())
}

/// Runs `xtask/naming-compare` (release) on the debug cg-trace, which it builds first.
fn naming(rounds: usize) -> Result<()> {
    status(cargo().args(["build", "-p", "cg-agent", "--bin", "cg-trace"]))?;
    let manifest = root().join("xtask/naming-compare/Cargo.toml");
    status(
        cargo()
            .args(["run", "--release", "--manifest-path"])
            .arg(manifest)
            .args(["--", "--rounds", &rounds.to_string(), "--cg-trace"])
            .arg(root().join("target/debug/cg-trace")),
    )
}

fn sampler(cg_trace: &Path, rounds: usize) -> Result<()> {
    let out = std::env::temp_dir().join(format!("cg-trace-bench-sampler-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    let input = out.join("input.txt");
    std::fs::write(&input, text_input(12 << 20))?;
    let sources = out.join("c");
    write_c_project(&sources, 16)?;
    let input = input.display().to_string();
    let script = root().join("tests/py/stacks.py").display().to_string();
    let make_dir = sources.display().to_string();
    let gzip_loop = format!("for i in 1 2 3; do gzip -9 -c {input} >/dev/null; done");
    let workloads: Vec<(&str, Vec<&str>)> = vec![
        (
            "CPython json/re",
            vec!["/usr/bin/python3.11", &script, "60"],
        ),
        ("xz -9 (12 MB)", vec!["xz", "-9", "-T1", "-c", &input]),
        ("gzip -9 (12 MB, x3)", vec!["sh", "-c", &gzip_loop]),
        (
            "make -j2 (16 C files)",
            vec!["make", "-s", "-B", "-j2", "-C", &make_dir],
        ),
    ];
    // A run on another task's sample (or an idle CPU's) only checks whether it is a target.
    let idle = profile(cg_trace, &out, &["sleep", "2"])?;
    let other_ns = idle.ns_per_run;
    println!(
        "sampler at 999 Hz: stacks lost and kernel time per sample (BPF statistics, {rounds} run(s) each, medians)"
    );
    println!(
        "  a run on another task (sleep 2): {other_ns:>6.0} ns (measured, {} runs)",
        idle.runs
    );
    println!(
        "  {:<24} {:>8} {:>14} {:>12} {:>16}",
        "workload", "samples", "lost/100 smp", "ns per run", "ns per sample"
    );
    for (name, command) in &workloads {
        let mut figures = Vec::new();
        for _ in 0..rounds {
            figures.push(profile(cg_trace, &out, command)?);
        }
        let samples = median(figures.iter().map(|f| f.samples).collect());
        let lost = median(figures.iter().map(|f| f.lost_pct).collect());
        let per_run = median(figures.iter().map(|f| f.ns_per_run).collect());
        let per_sample = median(
            figures
                .iter()
                .map(|f| {
                    (f.ns_per_run * f.runs - (f.runs - f.samples).max(0.0) * other_ns)
                        / f.samples.max(1.0)
                })
                .collect(),
        );
        println!(
            "  {name:<24} {samples:>8.0} {lost:>14.3} {per_run:>12.0} {per_sample:>16.0}   (target < 0.1 lost per 100 samples)"
        );
    }
    println!(
        "  (ns per sample: a target's sample, estimated from the measured run time less the other runs)"
    );
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// What one profiled run gave.
struct SamplerFigures {
    samples: f64,
    lost_pct: f64,
    ns_per_run: f64,
    runs: f64,
}

/// Runs `command` under `cg-trace --profile --sample-hz 999` with the kernel's BPF
/// statistics on, and reads the sampler's figures from the report.
fn profile(cg_trace: &Path, out: &Path, command: &[&str]) -> Result<SamplerFigures> {
    let report = out.join("sampler.json");
    let status = Command::new(cg_trace)
        .args([
            "-q",
            "--source",
            "model",
            "--profile",
            "--sample-hz",
            "999",
            "-o",
        ])
        .arg(&report)
        .arg("--")
        .args(command)
        .env("CG_TRACE_BENCH_BPF_STATS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running cg-trace on {command:?}"))?;
    if !status.success() {
        bail!("cg-trace --profile -- {command:?} failed ({status})");
    }
    let json = read_json(&report)?;
    let sampling = json
        .pointer("/meta/function_profiling/sampling")
        .with_context(|| format!("no sampling figures for {command:?}"))?;
    let number = |key: &str| -> Result<f64> {
        sampling
            .get(key)
            .and_then(Value::as_f64)
            .with_context(|| format!("{command:?}: no {key} (are BPF statistics available?)"))
    };
    Ok(SamplerFigures {
        samples: number("samples_count")?,
        lost_pct: number("lost_stacks_pct")?,
        ns_per_run: number("bpf_ns_per_run")?,
        runs: number("bpf_runs_count")?,
    })
}

/// `bytes` of text that compresses like prose: words from a fixed list in a
/// pseudo-random order.
fn text_input(bytes: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "energy", "profile", "kernel", "sample", "stack", "frame", "joule", "watt", "process",
        "thread", "interval", "counter", "domain", "idle", "report", "function",
    ];
    let mut out = Vec::with_capacity(bytes + 16);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 16) as usize].as_bytes());
        out.push(if x.is_multiple_of(11) { b'\n' } else { b' ' });
        if x.is_multiple_of(5) {
            out.extend_from_slice((x % 100_000).to_string().as_bytes());
            out.push(b' ');
        }
    }
    out.truncate(bytes);
    out
}

/// A directory of `files` C files (120 small functions each) and a Makefile that compiles
/// them with gcc -O2.
fn write_c_project(dir: &Path, files: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for n in 0..files {
        let mut text = String::from("#include <string.h>\n");
        for f in 0..120 {
            text.push_str(&format!(
                "static int g{f}(int *a, int n) {{ int s = 0; for (int i = 0; i < n; i++) {{ \
                 s += a[i] * {} ^ (s >> 3); if (s % {} == 0) s += strlen(\"x{f}\"); }} return s; }}\n",
                f + n,
                f + 7
            ));
        }
        text.push_str(&format!("int file{n}(int *a, int n) {{ int s = 0;\n"));
        for f in 0..120 {
            text.push_str(&format!("  s += g{f}(a, n);\n"));
        }
        text.push_str("  return s;\n}\n");
        std::fs::write(dir.join(format!("f{n}.c")), text)?;
    }
    std::fs::write(
        dir.join("Makefile"),
        "OBJS = $(patsubst %.c,%.o,$(wildcard *.c))\nall: $(OBJS)\n%.o: %.c\n\tgcc -O2 -c $< -o $@\n",
    )?;
    Ok(())
}

/// Runs `cg-trace --func PATTERN -- PROGRAM` and reads how long attaching and detaching its
/// function probes took from its log.
fn attach_detach_ms(
    cg_trace: &Path,
    program: &Path,
    pattern: &str,
    perf_events: bool,
) -> Result<(f64, f64)> {
    let mut cmd = Command::new(cg_trace);
    cmd.args(["-q", "--source", "model", "--func", pattern, "--"])
        .arg(program)
        .env("CG_TRACE_LOG", "cg_agent=info")
        .stdout(Stdio::null());
    if perf_events {
        cmd.env("CG_TRACE_BENCH_PERF_UPROBES", "1");
    }
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let log = String::from_utf8_lossy(&output.stderr);
    let after = |marker: &str| -> Option<f64> {
        let line = log.lines().find(|l| l.contains(marker))?;
        let rest = &line[line.find(marker)? + marker.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    let attach = log
        .lines()
        .find(|l| l.contains("attached probes to"))
        .and_then(|l| {
            let rest = &l[l.find(" in ")? + 4..];
            rest.split_whitespace().next()?.parse().ok()
        });
    let detach = after("function probe links in ");
    match (attach, detach) {
        (Some(a), Some(d)) => Ok((a, d)),
        _ => bail!("{cmd:?} logged no attach or detach time:\n{log}"),
    }
}

/// The newest file named `name` among the build scripts' outputs of the `profile` build
/// (tests/build.rs builds the C workloads there).
pub(crate) fn newest_build_output(profile: &str, name: &str) -> Result<std::path::PathBuf> {
    let build = root().join("target").join(profile).join("build");
    let mut best: Option<(std::time::SystemTime, std::path::PathBuf)> = None;
    for entry in
        std::fs::read_dir(&build).with_context(|| format!("reading {}", build.display()))?
    {
        let path = entry?.path().join("out").join(name);
        if let Ok(modified) = path.metadata().and_then(|m| m.modified())
            && best.as_ref().is_none_or(|(t, _)| modified > *t)
        {
            best = Some((modified, path));
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no {name} under {}: build the workspace", build.display()))
}

fn calls_per_s(cmd: &mut Command) -> Result<f64> {
    keyed(cmd, "calls_per_s")
}

fn units_per_s(cmd: &mut Command) -> Result<f64> {
    keyed(cmd, "units_per_s")
}

fn keyed(cmd: &mut Command, key: &str) -> Result<f64> {
    let output = cmd
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .with_context(|| format!("{cmd:?} printed no {key}: {text}"))
}
