//! `cargo xtask bench --serve`: what the exporter (`cg-trace serve`) costs over weeks. First
//! a week of simulated process churn through its accounting code (`cg-trace serve
//! --bench-churn 7`: resident memory at checkpoints, which must stay flat, and the time of a
//! scrape with 1,000 processes in 100 groups); then the real exporter on this machine for a
//! while, scraped at the start and the end: its own CPU time per second and its resident
//! memory (from its own metrics). Prints, never asserts.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{cargo, root, status};

pub fn run(quick: bool) -> Result<()> {
    status(cargo().args(["build", "--release", "-p", "cg-agent"]))?;
    let bin = root().join("target/release/cg-trace");
    let days = if quick { "1" } else { "7" };
    status(Command::new(&bin).args(["serve", "--bench-churn", days]))?;
    println!();
    idle_cost(&bin, if quick { 20.0 } else { 60.0 })
}

/// The exporter's own cost on this machine: `duration_s` between two scrapes.
fn idle_cost(bin: &Path, duration_s: f64) -> Result<()> {
    let (addr, mut child) = start_serve(bin)?;
    let result = (|| -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while scrape(addr, "/healthz").is_err() {
            if Instant::now() > deadline {
                bail!("cg-trace serve never answered");
            }
            sleep(Duration::from_millis(200));
        }
        // Settle (the first intervals register every process of the machine).
        sleep(Duration::from_secs(5));
        let (cpu0, _) = own(&scrape(addr, "/metrics")?)?;
        let started = Instant::now();
        sleep(Duration::from_secs_f64(duration_s));
        let (cpu1, rss) = own(&scrape(addr, "/metrics")?)?;
        let elapsed = started.elapsed().as_secs_f64();
        let processes = std::fs::read_dir("/proc")?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            })
            .count();
        println!(
            "serve on this machine ({processes} processes, default 1 s interval), {elapsed:.0} s: \
             {:.3} % of a core, RSS {:.1} MB (measured: its own process_cpu_seconds_total and \
             process_resident_memory_bytes)",
            100.0 * (cpu1 - cpu0) / elapsed,
            rss / 1e6
        );
        Ok(())
    })();
    stop_serve(&mut child);
    result
}

/// Starts `cg-trace serve` on a free port of 127.0.0.1: its address and its process.
pub fn start_serve(bin: &Path) -> Result<(SocketAddr, Child)> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let child = Command::new(bin)
        .args(["serve", "--listen", &addr.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting cg-trace serve")?;
    Ok((addr, child))
}

/// Stops a serve started by [`start_serve`] as a user would (SIGTERM) and reaps it.
pub fn stop_serve(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn scrape(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if !answer.starts_with("HTTP/1.1 200") {
        bail!("{path}: {}", answer.lines().next().unwrap_or(""));
    }
    Ok(answer)
}

/// `(process_cpu_seconds_total, process_resident_memory_bytes)` of a scrape.
fn own(metrics: &str) -> Result<(f64, f64)> {
    let value = |name: &str| -> Result<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .with_context(|| format!("no {name} in the scrape"))
    };
    Ok((
        value("process_cpu_seconds_total ")?,
        value("process_resident_memory_bytes ")?,
    ))
}
