//! The fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer, nightly): `cargo xtask fuzz [TARGET]
//! [SECONDS]` for long local runs, and the short fixed-time run of every target that `cargo
//! xtask test` does. A crash fails the run; libFuzzer names the input it wrote under
//! `fuzz/artifacts/TARGET/`.
//!
//! The fuzz crate builds cg-agent without its `ebpf` feature, so the sanitizer flags never
//! reach the nested eBPF build (there is none).

use std::{fs, path::PathBuf, process::Command};

use anyhow::{Context, Result, bail};

use crate::{root, status};

/// Seconds each target runs in `cargo xtask test` (after the build).
const SMOKE_SECONDS: u32 = 10;
/// Seconds each target runs in `cargo xtask fuzz` without SECONDS.
const DEFAULT_SECONDS: u32 = 60;

/// Limits for every run: an input that allocates more than this from a few kilobytes, or
/// takes longer than this, is a bug.
const LIMITS: [&str; 3] = ["-malloc_limit_mb=512", "-rss_limit_mb=2048", "-timeout=10"];

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// The targets: the files of `fuzz/fuzz_targets/`.
fn targets() -> Result<Vec<String>> {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".rs"))
                .map(str::to_string)
        })
        .collect();
    names.sort();
    Ok(names)
}

fn cargo_fuzz() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "fuzz"])
        .current_dir(root());
    cmd
}

/// Formats and lints the fuzz crate (a workspace of its own, so `cargo fmt --all` and the
/// workspace's clippy do not see it). Uses the main target directory: its dependencies are
/// the workspace's.
pub fn check() -> Result<()> {
    let manifest = fuzz_dir().join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    status(
        Command::new(&cargo)
            .current_dir(root())
            .arg("fmt")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["--", "--check"]),
    )?;
    status(
        Command::new(&cargo)
            .current_dir(root())
            .arg("clippy")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["--all-targets", "--", "-D", "warnings"])
            .env("CARGO_TARGET_DIR", root().join("target")),
    )
}

/// Builds every target, then runs each for [`SMOKE_SECONDS`] from its seeds and past
/// crashes, in a fresh corpus and with a fixed seed, so that runs differ only in how many
/// inputs fit in the time.
pub fn smoke() -> Result<()> {
    status(cargo_fuzz().arg("build"))?;
    let scratch = root().join("target/fuzz-smoke");
    for target in targets()? {
        let corpus = scratch.join(&target);
        if corpus.exists() {
            fs::remove_dir_all(&corpus)
                .with_context(|| format!("removing {}", corpus.display()))?;
        }
        fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
        run_target(&target, &corpus, SMOKE_SECONDS, Some(1))?;
    }
    Ok(())
}

/// `cargo xtask fuzz [TARGET] [SECONDS]`.
pub fn run(args: &[String]) -> Result<()> {
    let all = targets()?;
    let (chosen, seconds): (Vec<String>, u32) = match args {
        [] => (all, DEFAULT_SECONDS),
        [one] if one.parse::<u32>().is_ok() => (all, one.parse()?),
        [target] => (vec![target.clone()], DEFAULT_SECONDS),
        [target, seconds] => (
            vec![target.clone()],
            seconds
                .parse()
                .with_context(|| format!("SECONDS: {seconds:?} is not a whole number"))?,
        ),
        _ => bail!("usage: cargo xtask fuzz [TARGET] [SECONDS]"),
    };
    let known = targets()?;
    if let Some(unknown) = chosen.iter().find(|t| !known.contains(t)) {
        bail!(
            "no fuzz target {unknown:?}; the targets are {}",
            known.join(", ")
        );
    }
    for target in &chosen {
        let corpus = fuzz_dir().join("corpus").join(target);
        fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
        run_target(target, &corpus, seconds, None)?;
    }
    Ok(())
}

/// Runs one target for `seconds`, new inputs going to `corpus`, reading the committed seeds
/// and regressions too.
fn run_target(
    target: &str,
    corpus: &std::path::Path,
    seconds: u32,
    seed: Option<u32>,
) -> Result<()> {
    let mut cmd = cargo_fuzz();
    cmd.args(["run", target]).arg(corpus);
    for extra in ["seeds", "regressions"] {
        let dir = fuzz_dir().join(extra).join(target);
        if dir.is_dir() {
            cmd.arg(dir);
        }
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(LIMITS);
    if let Some(seed) = seed {
        cmd.arg(format!("-seed={seed}"));
    }
    status(&mut cmd).with_context(|| {
        format!(
            "fuzz target {target} failed: the input is under fuzz/artifacts/{target}/. Minimize \
             it (`cargo +nightly fuzz tmin {target} FILE`), fix the fault, and commit the input \
             under fuzz/regressions/{target}/ with a unit test that feeds it to the parser"
        )
    })
}
