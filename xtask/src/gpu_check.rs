//! `cargo xtask gpu-check [-- CMD ARGS...]`: on a machine with an NVIDIA GPU, runs cg-trace on
//! a GPU workload and prints the GPU energy it measured next to what `nvidia-smi` reports
//! (its power samples, averaged over the same run). The default workload is a PyTorch matrix
//! multiplication loop when PyTorch with CUDA is installed; otherwise give one after `--`.
//! Fails at once, saying so, where there is no GPU.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{build, is_root, root};

const TORCH_WORKLOAD: &str = "\
import time, torch
a = torch.randn(4096, 4096, device='cuda')
end = time.time() + 15
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()
";

pub fn run(args: &[String]) -> Result<()> {
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

    let workload: Vec<String> = match args.iter().position(|a| a == "--") {
        Some(i) if i + 1 < args.len() => args[i + 1..].to_vec(),
        _ => {
            let torch = Command::new("python3")
                .args(["-c", "import torch; assert torch.cuda.is_available()"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !torch {
                bail!(
                    "no default GPU workload here (PyTorch with CUDA is not installed): give one, \
                     e.g. `cargo xtask gpu-check -- ./my-cuda-program`"
                );
            }
            vec!["python3".into(), "-c".into(), TORCH_WORKLOAD.into()]
        }
    };
    build(true)?;

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

    let report_path =
        std::env::temp_dir().join(format!("cg-gpu-check-{}.json", std::process::id()));
    let binary = root().join("target/release/cg-trace");
    let mut cmd = if is_root() {
        Command::new(&binary)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(&binary);
        sudo
    };
    cmd.arg("-o").arg(&report_path).arg("--").args(&workload);
    let spawned = Instant::now();
    let status = cmd.status().context("running cg-trace")?;
    let ended = Instant::now();
    let _ = smi.kill();
    let _ = smi.wait();
    let _ = reader.join();
    if !status.success() {
        bail!("cg-trace or the workload failed ({status})");
    }
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&report_path).context("reading cg-trace's report")?,
    )?;
    let _ = std::fs::remove_file(&report_path);
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
