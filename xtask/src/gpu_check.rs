//! `cargo xtask gpu-check [--binary PATH] [-- CMD ARGS...]`: on a machine with an NVIDIA GPU, runs cg-trace on
//! a GPU workload and prints the GPU energy it measured next to what `nvidia-smi` reports
//! (its power samples, averaged over the same run). The default workload is a PyTorch matrix
//! multiplication loop when PyTorch with CUDA is installed; otherwise give one after `--`.
//! Fails at once, saying so, where there is no GPU.
//!
//! With PyTorch, it then checks the split and the idle baseline (issue 18): it samples the
//! GPU's rest power with nvidia-smi, runs two processes busy 8:1 (each for a fixed part of
//! every 100 ms), and prints cg-trace's split of the GPU's energy
//! between them, NVIDIA's accounting stats' split (the reference, when accounting mode is
//! on: `nvidia-smi -am 1`), the CPU-side duty, and the idle baseline against the rest power.
//! Not part of CI: it needs the GPU.
//!
//! `--binary PATH` checks that cg-trace binary instead of building one (a GPU machine without
//! cargo: build here, copy the binary there, run the xtask binary there).

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{build, release_cg_trace, root};

/// Busy for `argv[1]` ms of every 100 ms for 12 s (after CUDA starts). The duty is the
/// CPU side's: two processes time-slice the GPU, so their GPU time does not follow it (on a
/// real H100 on 2026-11-27, 80:10 ms of 4096 x 4096 products gave NVIDIA's accounting
/// 54 : 46 %; of 2048 x 2048 products, launch-bound, 100 : 0 %). NVIDIA's accounting
/// stats are the reference the split is judged against.
const DUTY_WORKLOAD: &str = "\
import sys, time, torch
busy = float(sys.argv[1]) / 1000
a = torch.randn(4096, 4096, device='cuda')
torch.cuda.synchronize()
end = time.time() + 12
while time.time() < end:
    t0 = time.time()
    while time.time() - t0 < busy:
        b = a @ a
        torch.cuda.synchronize()
    time.sleep(max(0.0, 0.1 - (time.time() - t0)))
";

/// Busy ms per 100 ms of the two processes of the split check (CPU-side duty, 8:1).
const DUTY_MS: [u32; 2] = [80, 10];

const TORCH_WORKLOAD: &str = "\
import time, torch
a = torch.randn(4096, 4096, device='cuda')
end = time.time() + 15
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()
";

/// `--binary PATH` from the arguments before `--`, if given.
pub fn given_binary(args: &[String]) -> Result<Option<PathBuf>> {
    let before: &[String] = match args.iter().position(|a| a == "--") {
        Some(i) => &args[..i],
        None => args,
    };
    match before {
        [] => Ok(None),
        [flag, path] if flag == "--binary" => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                bail!("--binary {}: no such file", path.display());
            }
            Ok(Some(path))
        }
        _ => bail!("usage: cargo xtask gpu-check [--binary PATH] [-- CMD ARGS...]"),
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let given = given_binary(args)?;
    let listed = Command::new("nvidia-smi").arg("-L").output();
    let gpus = match listed {
        Err(err) => bail!(
            "gpu-check needs a machine with an NVIDIA GPU: nvidia-smi cannot be run here ({err}); \
             this machine has no NVIDIA driver"
        ),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let count = text.lines().filter(|l| l.starts_with("GPU ")).count();
            if !out.status.success() || count == 0 {
                bail!(
                    "gpu-check needs a machine with an NVIDIA GPU: nvidia-smi lists none ({})",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            text
        }
    };
    print!("GPUs:\n{gpus}");

    let torch = Command::new("python3")
        .args(["-c", "import torch; assert torch.cuda.is_available()"])
        .output()
        .is_ok_and(|o| o.status.success());
    let workload: Vec<String> = match args.iter().position(|a| a == "--") {
        Some(i) if i + 1 < args.len() => args[i + 1..].to_vec(),
        _ => {
            if !torch {
                bail!(
                    "no default GPU workload here (PyTorch with CUDA is not installed): give one, \
                     e.g. `cargo xtask gpu-check -- ./my-cuda-program`"
                );
            }
            vec!["python3".into(), "-c".into(), TORCH_WORKLOAD.into()]
        }
    };
    let binary = match given {
        Some(path) => path,
        None => {
            build(true)?;
            root().join("target/release/cg-trace")
        }
    };
    energy_check(&binary, &workload)?;
    if torch {
        split_check(&binary)?;
    } else {
        println!("\n(no PyTorch with CUDA here: the 8:1 split check is skipped)");
    }
    Ok(())
}

/// cg-trace wrapping `workload` (as root, through sudo when needed) with `extra` arguments
/// first; returns its report.
fn cg_trace(binary: &Path, workload: &[String], extra: &[&str]) -> Result<Value> {
    let report_path =
        std::env::temp_dir().join(format!("cg-gpu-check-{}.json", std::process::id()));
    let mut cmd = release_cg_trace(binary);
    cmd.args(extra)
        .arg("-o")
        .arg(&report_path)
        .arg("--")
        .args(workload);
    let status = cmd.status().context("running cg-trace")?;
    if !status.success() {
        bail!("cg-trace or the workload failed ({status})");
    }
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&report_path).context("reading cg-trace's report")?,
    )?;
    let _ = std::fs::remove_file(&report_path);
    Ok(report)
}

/// GPU 0's mean power.draw over `seconds` by nvidia-smi, watts.
fn smi_power_w(seconds: u64) -> Result<f64> {
    let out = Command::new("timeout")
        .arg(seconds.to_string())
        .args([
            "nvidia-smi",
            "--id=0",
            "--query-gpu=power.draw",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ])
        .output()
        .context("running nvidia-smi")?;
    let watts: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|w: &f64| w.is_finite())
        .collect();
    if watts.is_empty() {
        bail!("nvidia-smi gave no power reading");
    }
    Ok(watts.iter().sum::<f64>() / watts.len() as f64)
}

/// Two processes busy 8:1 on GPU 0: cg-trace's split, the accounting stats' split, and the
/// idle baseline against the rest power nvidia-smi sees with nothing on the GPU.
fn split_check(binary: &Path) -> Result<()> {
    println!("\n8:1 split check: the GPU at rest first (10 s, nothing on it)...");
    std::thread::sleep(std::time::Duration::from_secs(5));
    let rest_w = smi_power_w(5)?;
    let duty = |ms: u32| format!("python3 -c \"$CG_DUTY\" {ms} & ");
    let script = format!("{}{}wait", duty(DUTY_MS[0]), duty(DUTY_MS[1]));
    // SAFETY: the xtask is single-threaded here; the variable is read by the shell.
    unsafe { std::env::set_var("CG_DUTY", DUTY_WORKLOAD) };
    let workload = vec!["sh".to_string(), "-c".to_string(), script];
    let report = cg_trace(binary, &workload, &["-q"])?;
    let num = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let busy_of = |p: &Value| {
        p["cmdline"].as_array().and_then(|args| {
            args.last()
                .and_then(Value::as_str)
                .and_then(|a| a.parse::<u32>().ok())
                .filter(|ms| DUTY_MS.contains(ms))
        })
    };
    let processes = report["processes"].as_array().cloned().unwrap_or_default();
    let workers: Vec<(u32, u64, f64)> = processes
        .iter()
        .filter_map(|p| {
            Some((
                busy_of(p)?,
                p["pid"].as_u64()?,
                num(p, "/domains/gpu0/energy_j"),
            ))
        })
        .collect();
    if workers.len() != 2 {
        bail!("expected the two workers in the report, found {workers:?}");
    }
    let ours: f64 = workers.iter().map(|w| w.2).sum();
    let expected: f64 = DUTY_MS.iter().map(|&m| f64::from(m)).sum();
    let accounting = report["meta"]["gpus"][0]["accounting"].as_array().cloned();
    let theirs_of = |pid: u64| {
        accounting.as_ref().and_then(|a| {
            a.iter()
                .find(|e| e["pid"].as_u64() == Some(pid))
                .map(|e| num(e, "/gpu_utilization_pct") / 100.0 * num(e, "/time_s"))
        })
    };
    let theirs: f64 = workers.iter().filter_map(|w| theirs_of(w.1)).sum();
    println!(
        "{:>8} {:>9} {:>14} {:>16} {:>12}",
        "busy/100ms", "pid", "cg-trace [%]", "accounting [%]", "duty [%]"
    );
    for (ms, pid, j) in &workers {
        let theirs_pct = theirs_of(*pid).map_or("accounting off".to_string(), |b| {
            format!("{:.1}", 100.0 * b / theirs)
        });
        println!(
            "{:>7}ms {pid:>9} {:>14.1} {theirs_pct:>16} {:>12.1}",
            ms,
            100.0 * j / ours,
            100.0 * f64::from(*ms) / expected
        );
    }
    if accounting.is_none() {
        println!("(accounting mode is off: `sudo nvidia-smi -am 1` turns it on)");
    }
    println!(
        "(the reference is NVIDIA's accounting: the two time-slice the GPU, so their GPU time \
         need not follow the CPU-side duty)"
    );
    let baseline = report["meta"]["idle_baseline"]
        .as_array()
        .and_then(|b| b.iter().find(|e| e["domain"] == "gpu0").cloned())
        .unwrap_or_default();
    let base_w = num(&baseline, "/power_w");
    println!(
        "idle baseline of gpu0: {base_w:.1} W ({}{}) against its rest power {rest_w:.1} W \
         (nvidia-smi, nothing on it): {:+.1} %",
        baseline["method"].as_str().unwrap_or("?"),
        baseline["rest_source"]
            .as_str()
            .map_or(String::new(), |s| format!(", {s}")),
        100.0 * (base_w - rest_w) / rest_w
    );
    for note in report["meta"]["measurement_quality"]["notes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if let Some(n) = note.as_str().filter(|n| n.contains("gpu0")) {
            println!("  note: {n}");
        }
    }
    Ok(())
}

/// The workload under cg-trace, its GPU energy against nvidia-smi's power samples.
fn energy_check(binary: &Path, workload: &[String]) -> Result<()> {
    // nvidia-smi's power samples, stamped when they arrive.
    let mut smi = Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,power.draw",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting nvidia-smi")?;
    let samples: Arc<Mutex<Vec<(Instant, u32, f64)>>> = Arc::default();
    let stdout = smi.stdout.take().context("nvidia-smi's output")?;
    let sink = samples.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut fields = line.split(',').map(str::trim);
            if let (Some(Ok(index)), Some(Ok(watts))) = (
                fields.next().map(str::parse::<u32>),
                fields.next().map(str::parse::<f64>),
            ) && let Ok(mut s) = sink.lock()
            {
                s.push((Instant::now(), index, watts));
            }
        }
    });

    let spawned = Instant::now();
    let result = cg_trace(binary, workload, &[]);
    let ended = Instant::now();
    let _ = smi.kill();
    let _ = smi.wait();
    let _ = reader.join();
    let report = result?;
    let num = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let duration_s = num(&report, "/meta/duration_s");
    // The command started after loading the probes and the idle calibration.
    let lead_s =
        num(&report, "/meta/calibration_s") + num(&report, "/meta/profiler/attach_ms") / 1e3;
    let window_start = spawned + std::time::Duration::from_secs_f64(lead_s.max(0.0));
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();

    println!(
        "\nworkload: {}",
        workload.join(" ").lines().next().unwrap_or("")
    );
    println!(
        "{:<6} {:<28} {:>14} {:>16} {:>8}  cg-trace's energy from",
        "GPU", "name", "cg-trace [J]", "nvidia-smi [J]", "diff"
    );
    let gpus = report["meta"]["gpus"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if gpus.is_empty() {
        bail!(
            "cg-trace measured no GPU: {:#}",
            report["meta"]["sources_probed"]
        );
    }
    for gpu in &gpus {
        let index = gpu["index"].as_u64().unwrap_or(0) as u32;
        let domain = gpu["domain"].as_str().unwrap_or("gpu0");
        let ours = num(&report, &format!("/totals/domains/{domain}/energy_j"));
        let watts: Vec<f64> = samples
            .iter()
            .filter(|(t, i, _)| *i == index && *t >= window_start && *t <= ended)
            .map(|(_, _, w)| *w)
            .collect();
        let theirs = if watts.is_empty() {
            f64::NAN
        } else {
            watts.iter().sum::<f64>() / watts.len() as f64 * duration_s
        };
        println!(
            "{:<6} {:<28} {:>14.1} {:>16.1} {:>7.1}%  {}",
            domain,
            gpu["name"].as_str().unwrap_or("?"),
            ours,
            theirs,
            100.0 * (ours - theirs) / theirs,
            gpu["energy_method"].as_str().unwrap_or("?")
        );
    }
    println!(
        "(nvidia-smi: mean of its power.draw samples over the run x {duration_s:.2} s; it samples \
         power and may average it over up to 1 s, so a few percent apart is expected)"
    );
    println!("\nper process (GPU domains):");
    for p in report["processes"].as_array().cloned().unwrap_or_default() {
        for gpu in &gpus {
            let domain = gpu["domain"].as_str().unwrap_or("gpu0");
            if let Some(j) = p["domains"][domain]["energy_j"].as_f64() {
                println!(
                    "  pid {:>7} {:<24} {domain}: {j:.1} J",
                    p["pid"],
                    p["comm"].as_str().unwrap_or("?")
                );
            }
        }
    }
    Ok(())
}
