//! `cargo xtask bench --sources`: what polling the energy sources costs, at 1 kHz and at the
//! default 100 ms interval. Builds the benchmark (`cg-agent/examples/sources_bench.rs`, the
//! production reading code on generated trees and files) and the NVML stand-in, runs it and
//! prints its figures; nothing here asserts.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{cargo, root, status};

pub fn run(quick: bool) -> Result<()> {
    status(cargo().args([
        "build",
        "--release",
        "-p",
        "cg-agent",
        "--example",
        "sources_bench",
    ]))?;
    let dir = std::env::temp_dir().join(format!("cg-trace-sources-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let lib = dir.join("libnvidia-ml.so.1");
    status(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&lib)
            .arg(root().join("tests/fake-nvml/fake_nvml.c")),
    )
    .context("building the NVML stand-in (needs a C compiler: cargo xtask setup)")?;
    let seconds = if quick { "1" } else { "3" };
    println!();
    let ran = Command::new(root().join("target/release/examples/sources_bench"))
        .args(["--seconds", seconds, "--nvml-lib"])
        .arg(&lib)
        .status()
        .context("running the sources benchmark")?;
    let _ = std::fs::remove_dir_all(&dir);
    if !ran.success() {
        bail!("the sources benchmark failed ({ran})");
    }
    println!(
        "(CPU time inside the sources' reads only; the kernel's or driver's cost of producing a \
         real RAPL or NVML value is not included: file reads stand in for it)"
    );
    Ok(())
}
